// mx_kernels.cuh — device building blocks and the MX quantization kernel templates shared by the MX
// quantizer (formats/cuda/mx_quantize.cu), NVFP4 (nvfp4_quantize.cu) and the fused quantize kernels of the
// layers above (the block-32 Hadamard + MXFP4 of hadamard/cuda/ and statistics beside its codes), which
// plug in through the prologue and epilogue policies below. Internal to lowbit_cuda: only .cu files
// include it.
//
// Every value the kernels produce goes through the LOWBIT_HD scalar functions of the CPU references
// (mx_scale_code, mx_encode, counter_random24; the prologue's own) or through an equivalent whose
// equality is argued here and tested bit for bit (e2m1_fast.h; the scale folding of a scaled prologue below).
//
// Layouts (formats/blocked_view.h): codes [outer][inner] (E2M1 packed two per byte, low nibble first),
// scales [outer][inner/32]; axis 1: outer = rows, axis 0: outer = cols (the transpose).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/bits.h"
#include "core/counter_rng.h"
#include "core/cuda/device_loads.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda/tma.cuh"
#include "core/cuda_device.h"
#include "formats/cuda/e2m1_fast.h"
#include "formats/mx_block.h"

namespace lowbit::cuda_detail {

// ------------------------------------------------------------------------------------------------
// Block maxima (max_nan: core/cuda/device_math.cuh).

// max over |v[j]| of a 32-element block. max.NaN is associative and commutative, so a chain and a tree
// give the same result; the chain is faster in the row kernel (H200: 0.66 against 0.46 of copy bandwidth
// for the fused axis-1 kernel).
__device__ __forceinline__ float block_amax32(const float (&v)[32]) {
    float am = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) am = max_nan_abs(am, v[j]);
    return am;
}

// ------------------------------------------------------------------------------------------------
// Policies of the quantize kernels. A kernel loads a 32-element block into registers, runs a prologue on it,
// encodes it, and writes an epilogue's statistics beside the codes. formats/ supplies the identity prologue
// and no epilogue; the layers above supply theirs (the block-32 Hadamard: hadamard/cuda/hadamard_device.cuh;
// statistics of the input beside the codes). A policy is a struct of static members:
//
// Prologue, a transform of the block in registers:
//   kScaled     its outputs t carry a factor hs (the launch's `hs`) applied while encoding, y = t·hs
//               (folded into the encoder's multiplier: MxBlockScale)
//   kBlockSum   its output 0 is Σx of the block's inputs (given to the epilogue)
//   apply(v)    transforms v in place and returns max |t| (NaN if any t is NaN)
//
// Epilogue, statistics of the block's inputs per group of blocks (along rows a group is one block, down
// columns the kColsWarps row blocks of a column kernel's CTA, summed in FP32 in row-block order):
//   kEnabled    false: nothing is computed, staged or stored
//   kNeedsSum   reads the prologue's Σx (needs kBlockSum); along rows a policy without it stores before the
//               prologue, when its partial is ready
//   Out         where the statistics go (a kernel parameter; a template flag, not a run-time pointer test,
//               which cost the column kernel 16 registers)
//   active(o)   whether this launch writes statistics (kEnabled, or a test of o for a run-time choice)
//   partial(x)  the block's partial from its 32 input values, before the prologue
//   store(o, i, sum, partial)  group i's sums

struct IdentityPrologue {
    static constexpr bool kScaled = false;
    static constexpr bool kBlockSum = false;
    __device__ __forceinline__ static float apply(float (&v)[32]) { return block_amax32(v); }
};

struct NoBlockStats {
    static constexpr bool kEnabled = false;
    static constexpr bool kNeedsSum = false;
    struct Out {};
    __device__ __forceinline__ static bool active(const Out&) { return false; }
    __device__ __forceinline__ static float partial(const float (&)[32]) { return 0.0f; }
    template <typename Index>
    __device__ __forceinline__ static void store(const Out&, Index, float, float) {}
};

// ------------------------------------------------------------------------------------------------
// Stochastic rounding draws: counter_random24(seed, i) with the seed mix hoisted and i·K stepped by
// addition (i·K mod 2^64 is linear in i, so the draws are bit-identical).

struct RandomStream {
    uint64_t mixed;
    __device__ explicit RandomStream(uint64_t seed) : mixed(mix64(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull)) {}
    // draw for the index whose product with the golden-ratio constant is ik
    __device__ __forceinline__ uint32_t at_scaled(uint64_t ik) const { return uint32_t(mix64(mixed ^ ik) >> 40); }
    static constexpr uint64_t kStep = 0x9E3779B97F4A7C15ull;
};

// ------------------------------------------------------------------------------------------------
// Per-block scale and the fast E2M1 path.
//
// The reference encodes element y (= t·hs for a scaled prologue, kScaled, else x) as
//     encode_element(e2m1, scale_pow2(y, n), ...),   n = 127 − scale.
// Fast path: xs = t·mult with mult = hs·2^n (scaled) or 2^n, one multiply. Equality:
//   * plain: scale_pow2(x, n) is the single multiply x·2^n whenever n ≥ −126 (scale ≤ 253).
//   * scaled (the block-32 Hadamard, hs = 2^-2.5): round(round(t·hs)·2^n) = round(t·(hs·2^n)) when t·hs and the product are normal numbers
//     (rounding commutes with power-of-two scaling there; hs·2^n is exact for −123 ≤ n ≤ 127). With
//     n ≤ 100 any element whose y is subnormal has |xs| < 2^-26 on both sides, so both encode to the
//     sign alone (E2M1's smallest step is 0.25). Hence the fast path is taken for scale ∈ [27, 250];
//     blocks with a smaller scale (amax < ~2^-98) take the reference path (a larger one cannot occur for
//     a 32-point transform: |y| ≤ FLT_MAX·2^-2.5 gives scale ≤ 250).
//   * all-zero block: every t is ±0, xs = ±0 either way.
//   * NaN scale (a NaN/Inf in the block) and the rare scales outside that range take the reference path,
//     which gives code 0 for a NaN scale.
// The amax of y is round(amax(|t|)·hs) because rounding is monotonic, so it is computed once per block.
// The scale byte itself comes from mx_scale_code_normal (integer form, one compare for the rule) for a normal
// amax and from mx_scale_code otherwise (zero, subnormal, NaN/Inf); for E2M1 (kE2m1) from
// mx_scale_code_float_elem, the same bytes without the branch to the reference.
struct MxBlockScale {
    uint32_t scale;  // E8M0 byte, 0xFF = NaN
    float mult;      // E2M1 fast path multiplier (meaningful when fast_ok)
    bool fast_ok;
};

static __device__ __noinline__ uint32_t mx_scale_code_reference(uint32_t bits, MxElement e, ScaleRule rule) {
    return mx_scale_code(bits, mx_spec(e), rule);
}

template <bool kScaled, bool kE2m1>
__device__ __forceinline__ MxBlockScale mx_block_scale(float amax_t, const MxScaleRuleBits& rb, MxElement e, ScaleRule rule,
                                                       float hs) {
    const float amax = kScaled ? amax_t * hs : amax_t;
    const uint32_t bits = abs_bits(amax);
    MxBlockScale b;
    if constexpr (kE2m1) b.scale = mx_scale_code_float_elem(bits, rb);  // no branch (mx_block.h)
    else b.scale = bits - 0x00800000u < 0x7F000000u ? mx_scale_code_normal(bits, rb) : mx_scale_code_reference(bits, e, rule);
    // 2^n, n = 127 − scale, as float bits (254 − scale) << 23: exact for the scales of the fast path
    const float pow2n = __uint_as_float((254u - b.scale) << 23);
    if constexpr (kScaled) {
        b.fast_ok = bits == 0 || b.scale - 27u <= 223u;
        b.mult = hs * pow2n;
    } else {
        b.fast_ok = b.scale <= 253u;
        b.mult = pow2n;
    }
    return b;
}

// The reference encoder, not inlined: used for MXFP6/MXFP8/MXINT8 (element type known at run time, one
// copy of the code instead of one per unrolled element) and for E2M1 blocks off the fast path.
static __device__ __noinline__ uint32_t mx_encode_reference(float y, uint32_t scale, MxElement e, Rounding r, uint32_t rnd) {
    return mx_encode(y, uint8_t(scale), mx_spec(e), r, rnd);
}

template <Rounding R>
__device__ __forceinline__ uint32_t e2m1_magnitude_fast(float xs, uint32_t rnd) {
    if constexpr (R == Rounding::nearest_even) return e2m1_magnitude_rne(xs);
    else if constexpr (R == Rounding::half_away) return e2m1_magnitude_away(xs);
    else return e2m1_magnitude_stochastic(xs, rnd);
}

// Packing of eight E2M1 codes, element j in bits 4j..4j+3, two instructions per element: shift the word
// right by a nibble pulling the magnitude (≤ 7) in at the top (one funnel shift), then OR the element's
// float sign bit (of the scaled value xs that was encoded) into bit 31, which is bit 3 of its nibble.
// After the eighth element, element j has moved down 4·(7 − j) bits.
__device__ __forceinline__ uint32_t push_e2m1(uint32_t word, uint32_t magnitude, float xs) {
#if defined(__CUDA_ARCH__)
    word = __funnelshift_r(word, magnitude, 4);
#else
    word = (word >> 4) | (magnitude << 28);
#endif
    return word | (__float_as_uint(xs) & 0x80000000u);
}

// Codes of 8 elements t[0..8) of one block; element j has SR index idx0 + j·idx_step.
// kFp4 (E2M1, rounding kRoundT): w[0] = 8 nibbles (element j in bits 4j..4j+3), the fast path when kFast.
// Otherwise element e with the run-time rounding (kRoundT only says whether to draw random bits):
// w[0], w[1] = 8 bytes.
template <bool kFp4, bool kScaled, Rounding kRoundT, bool kFast>
__device__ __forceinline__ void mx_encode8(const float (&t)[8], const MxBlockScale& b, float hs, MxElement e,
                                           Rounding rounding, const RandomStream& rs, uint64_t idx0, uint64_t idx_step,
                                           uint32_t (&w)[2]) {
    constexpr bool kDraw = kRoundT == Rounding::stochastic;
    uint64_t ik = 0, dk = 0;
    if constexpr (kDraw) {
        ik = idx0 * RandomStream::kStep;
        dk = idx_step * RandomStream::kStep;
    }
    if constexpr (kFp4 && kFast) {
        uint32_t p = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            uint32_t rnd = 0;
            if constexpr (kDraw) rnd = rs.at_scaled(ik + uint64_t(j) * dk);
            const float xs = t[j] * b.mult;
            p = push_e2m1(p, e2m1_magnitude_fast<kRoundT>(xs, rnd), xs);
        }
        w[0] = p;
        w[1] = 0;
        return;
    }
    uint32_t c[8];
    const MxElement el = kFp4 ? MxElement::e2m1 : e;
    const Rounding r = kFp4 ? kRoundT : rounding;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        uint32_t rnd = 0;
        if constexpr (kDraw) rnd = rs.at_scaled(ik + uint64_t(j) * dk);
        c[j] = mx_encode_reference(kScaled ? t[j] * hs : t[j], b.scale, el, r, rnd);
    }
    if constexpr (kFp4) {
        uint32_t p = c[7];
#pragma unroll
        for (int j = 6; j >= 0; --j) p = (p << 4) | c[j];
        w[0] = p;
        w[1] = 0;
    } else {
        w[0] = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
        w[1] = c[4] | (c[5] << 8) | (c[6] << 16) | (c[7] << 24);
    }
}

// Codes of one 32-element block (4 × 8): 16 (E2M1) or 32 bytes, as one or two 16-byte chunks at dst.
template <bool kFp4>
__device__ __forceinline__ void store_code_chunks(uint4* dst, const uint32_t (&w)[4][2]) {
    if constexpr (kFp4) {
        dst[0] = make_uint4(w[0][0], w[1][0], w[2][0], w[3][0]);
    } else {
        dst[0] = make_uint4(w[0][0], w[0][1], w[1][0], w[1][1]);
        dst[1] = make_uint4(w[2][0], w[2][1], w[3][0], w[3][1]);
    }
}
// The same at blocked index bi (a multiple of 32) of the code array.
template <bool kFp4>
__device__ __forceinline__ void store_codes32(uint8_t* codes, int64_t bi, const uint32_t (&w)[4][2]) {
    store_code_chunks<kFp4>(reinterpret_cast<uint4*>(codes) + (bi >> (kFp4 ? 5 : 4)), w);
}

// Stores kb (1, 2, 4 or 8) scale bytes packed in s at scales + idx (idx a multiple of kb).
__device__ __forceinline__ void store_scale_run(uint8_t* scales, int64_t idx, int kb, uint64_t s) {
    switch (kb) {
        case 8: *reinterpret_cast<unsigned long long*>(scales + idx) = s; break;
        case 4: *reinterpret_cast<uint32_t*>(scales + idx) = uint32_t(s); break;
        case 2: *reinterpret_cast<uint16_t*>(scales + idx) = uint16_t(s); break;
        default: scales[idx] = uint8_t(s); break;
    }
}

// ------------------------------------------------------------------------------------------------
// Encoding of one 32-element block held by one thread: t[32] → the words store_code_chunks writes;
// element j has SR index idx0 + j·idx_step.
template <bool kFp4, bool kScaled, Rounding kRoundT>
__device__ __forceinline__ void mx_block32_codes(const float (&t)[32], const MxBlockScale& b, float hs, MxElement e,
                                                 Rounding rounding, const RandomStream& rs, uint64_t idx0, uint64_t idx_step,
                                                 uint32_t (&w)[4][2]) {
    // One branch per block, not per 8 elements: the 32 fast encodes are one straight-line sequence
    // (H200, fused axis 1: 68.3 against 70.4 µs per 8192² BF16 matrix).
    if (kFp4 && b.fast_ok) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const float(&t8)[8] = *reinterpret_cast<const float(*)[8]>(&t[8 * m]);
            mx_encode8<kFp4, kScaled, kRoundT, true>(t8, b, hs, e, rounding, rs, idx0 + uint64_t(8 * m) * idx_step, idx_step, w[m]);
        }
    } else {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const float(&t8)[8] = *reinterpret_cast<const float(*)[8]>(&t[8 * m]);
            mx_encode8<kFp4, kScaled, kRoundT, false>(t8, b, hs, e, rounding, rs, idx0 + uint64_t(8 * m) * idx_step, idx_step, w[m]);
        }
    }
}

// ... and stored at blocked index bi (a multiple of 32) of the code array.
template <bool kFp4, bool kScaled, Rounding kRoundT>
__device__ __forceinline__ void mx_encode_block32(const float (&t)[32], const MxBlockScale& b, float hs, MxElement e,
                                                  Rounding rounding, const RandomStream& rs, uint64_t idx0, uint64_t idx_step,
                                                  int64_t bi, uint8_t* codes) {
    uint32_t w[4][2];
    mx_block32_codes<kFp4, kScaled, kRoundT>(t, b, hs, e, rounding, rs, idx0, idx_step, w);
    store_codes32<kFp4>(codes, bi, w);
}

// ------------------------------------------------------------------------------------------------
// Axis 1 (blocks along rows). The matrix is a flat array of n = rows·cols elements (cols a multiple of
// 32, so blocks never straddle rows, and the flat index is the SR index r·cols + c). One lane owns one
// 32-element block: four (BF16) or eight (FP32) 16-byte loads, every Hadamard stage in registers, the
// block maximum without shuffles, one 16-byte (E2M1) code store, and the warp's 32 scale bytes form one
// 32-byte store. The 16-byte loads of a warp are 64 bytes apart; the two halves of each 32-byte sector
// are read by consecutive load instructions, the second from L1. The grid strides over the blocks (a
// lane's next block is one grid of threads later), so the per-thread set-up is paid once for several
// blocks. One block at a time per lane: two in flight gave 108 registers, 25 % occupancy and 0.55 of copy
// bandwidth against 0.67 for the fused Hadamard+MXFP4 kernel on the H200.
constexpr int kRowsThreads = 256;
// CTAs per SM of the row kernel's grid before it strides: 8 measured 0.82–0.85 of copy bandwidth for the
// fused axis-1 kernel, 5 / 10 / 32 / 128 0.81–0.83 (run-to-run spread ~2 %; bench/results/README.md).
constexpr int kRowsCtasPerSm = 8;

// Resident CTAs per SM that the row and column kernels (256 threads) ask ptxas for. The E2M1 kernels with a
// scaled prologue (the fused Hadamard+E2M1) and RNE / half-away rounding: 5, which caps them at 48 registers
// (40 warps per SM) without spills; left unbounded, small changes elsewhere let ptxas pick 50–53 registers and
// drop to 4 CTAs. Every other instantiation (stochastic draws, the generic element encoders): 4 (≤ 64
// registers).
constexpr int mx_min_ctas_per_sm(bool fp4, bool scaled, Rounding r) { return fp4 && scaled && r != Rounding::stochastic ? 5 : 4; }

// CTAs of the row kernel for nblocks 32-element blocks: one thread per block up to kRowsCtasPerSm CTAs per
// SM (about 1.6 rounds of the 5 resident ones), then the grid strides.
inline unsigned mx_rows_grid(int64_t nblocks) {
    if (nblocks >= (int64_t(1) << 31)) cuda_input_error("MX quantization along rows: matrix too large for one launch (2^31 blocks or more)");
    const int64_t needed = (nblocks + kRowsThreads - 1) / kRowsThreads;
    const int64_t cap = int64_t(cuda_multiprocessor_count()) * kRowsCtasPerSm;
    return unsigned(needed < cap ? needed : cap);
}

// The row kernel's block index: 32 bits (mx_rows_grid checks rows·cols/32 < 2^31; a BF16 matrix that large is
// 128 GiB) — fewer instructions per block for the loop and the addresses than 64 bits.
using RowsIndex = uint32_t;

template <typename T, bool kFp4, class Prologue, Rounding kRoundT, class Epilogue = NoBlockStats>
__global__ void __launch_bounds__(kRowsThreads, mx_min_ctas_per_sm(kFp4, Prologue::kScaled, kRoundT))
    mx_rows_kernel(const T* __restrict__ x, int64_t n, MxElement e, ScaleRule rule, MxScaleRuleBits rb, Rounding rounding, float hs,
                   uint64_t seed, uint8_t* __restrict__ codes, uint8_t* __restrict__ scales, typename Epilogue::Out stats) {
    static_assert(!Epilogue::kNeedsSum || Prologue::kBlockSum, "the epilogue needs the block sums of a transform");
    constexpr bool kScaled = Prologue::kScaled;
    const RowsIndex nblocks = RowsIndex(n >> 5);
    const RowsIndex stride = RowsIndex(gridDim.x) * blockDim.x;
    const MxElement el = kFp4 ? MxElement::e2m1 : e;
    const RandomStream rs(seed);
    for (RowsIndex blk = RowsIndex(blockIdx.x) * blockDim.x + threadIdx.x; blk < nblocks; blk += stride) {
        float v[32];
        load32(x + uint64_t(blk) * 32, v);
        float partial = 0.0f;
        if constexpr (Epilogue::kEnabled) partial = Epilogue::partial(v);
        if constexpr (Epilogue::kEnabled && !Epilogue::kNeedsSum) Epilogue::store(stats, blk, 0.0f, partial);
        const float amax = Prologue::apply(v);
        if constexpr (Epilogue::kEnabled && Epilogue::kNeedsSum) Epilogue::store(stats, blk, v[0], partial);
        const MxBlockScale b = mx_block_scale<kScaled, kFp4>(amax, rb, el, rule, hs);
        scales[blk] = uint8_t(b.scale);
        mx_encode_block32<kFp4, kScaled, kRoundT>(v, b, hs, el, rounding, rs, uint64_t(blk) * 32, 1, int64_t(blk) * 32, codes);
    }
}

// ------------------------------------------------------------------------------------------------
// Axis 0 (blocks down columns). A CTA of kColsWarps warps owns a tile of kColsTileCols = 32 columns ×
// kColsWarps 32-row blocks: warp w takes row block stripe·kColsWarps + w, lane l column 32·tile + l, whose
// 32 values it reads from its warp's 32 rows staged in shared memory (the warp loads them with 16-byte
// loads, 4 lanes per 64-byte BF16 row: one load per 8 elements instead of a 2-byte load and a 64-bit
// address add per element; no CTA barrier before the arithmetic, so warps overlap loads and work). H200,
// fused Hadamard+MXFP4: per-lane 2-byte loads 0.56 of copy bandwidth, a CTA-wide load phase 0.46, this
// 0.64. One column per lane keeps the kernel at the register count of the row kernel; two per lane needed
// 110 registers, 25 % occupancy and reached 0.20 of copy bandwidth (ncu: 16 cycles per issued instruction,
// DRAM 12 % busy). In the transposed output a column's codes are contiguous, so the CTA stages
// its codes and scales in shared memory and writes each column's kColsWarps blocks as one contiguous run
// (8 × 16 bytes = a full 128-byte line for E2M1) instead of one 16-byte store per thread and block.
// Tiles are numbered stripe · col_tiles + tile, column tiles fastest, so the CTAs in flight read whole rows
// of the matrix. The CTAs stay resident and stride over the tiles; for BF16 each warp's next tile arrives
// by cp.async into a second shared buffer while it works on the current one (H200, fused axis 0: 0.61 →
// 0.63–0.64 of copy bandwidth, plain MXFP4 0.67–0.69 → 0.72–0.74). With stochastic rounding or statistics
// the kernel runs one CTA per tile (ColsGrid::cols_kernel_blocks). On sm_90, E2M1 codes of BF16 input with
// cols % 8 == 0 take mx_cols_e2m1_tma_kernel below instead (the same work, fed and drained by TMA); this kernel
// serves FP32 input, the other elements, other column counts and devices without the sm_90a code.
// 8 warps: a column's 8 E2M1 blocks of a tile are one full 128-byte line of the transposed output.
constexpr int kColsWarps = 8;
constexpr int kColsThreads = 32 * kColsWarps;
constexpr int kColsTileCols = 32;

// Shared-memory staging of the axis-0 output of a tile of kCols columns. Column col's 16-byte code chunk
// k (block k / kPerBlock) lives at chunk k ^ swizzle(col): the 8 lanes of a quarter-warp (8 consecutive
// columns) write 8 distinct chunk positions = 32 distinct banks; the swizzle is even for 8-bit codes, so a
// block's two chunks stay adjacent and in order.
template <bool kFp4, int kCols>
struct ColsTileStage {
    static constexpr int kPerBlock = kFp4 ? 1 : 2;            // 16-byte chunks per 32-element block
    static constexpr int kPerCol = kColsWarps * kPerBlock;    // chunks per column
    static constexpr int kSwizzleMask = (kPerCol - 1) & ~(kPerBlock - 1);
    uint4 codes[kCols][kPerCol];
    uint8_t scales[kCols][kColsWarps];

    __device__ static int swizzle(int col) { return (col * kPerBlock) & kSwizzleMask; }
    __device__ uint4* block_chunks(int col, int rb) { return &codes[col][(rb * kPerBlock) ^ swizzle(col)]; }
};

// Grid of the column kernels: tiles of tile_cols columns × kColsWarps row blocks, column tiles fastest.
struct ColsGrid {
    int64_t col_tiles, stripes;
    ColsGrid(int64_t rows, int64_t cols, int64_t tile_cols)
        : col_tiles((cols + tile_cols - 1) / tile_cols), stripes((rows / 32 + kColsWarps - 1) / kColsWarps) {}
    unsigned blocks() const { return unsigned(col_tiles * stripes); }
    // CTAs of the column kernels, which stride over the tiles: at most ctas_per_sm resident ones per SM, or one
    // per tile with stochastic rounding (issue-bound by the counter-based draws: 4–5 % slower resident in
    // mx_cols_kernel, 3 % in the TMA kernel) and, in mx_cols_kernel (tma false), with statistics (~1.5 %
    // slower resident: 48 registers and a 20-byte spill). Resident, RNE is 3 % and plain MXFP4 6 % faster in
    // mx_cols_kernel, the TMA kernel with statistics 9 % (H200).
    unsigned cols_kernel_blocks(int ctas_per_sm, Rounding r, bool with_stats, bool tma = false) const {
        const bool resident = r != Rounding::stochastic && (tma || !with_stats);
        const int64_t cap = resident ? int64_t(cuda_multiprocessor_count()) * ctas_per_sm : int64_t(blocks());
        return unsigned(int64_t(blocks()) < cap ? int64_t(blocks()) : cap);
    }
};

// The 32-row block r0.. of column c held in registers: the prologue with the block maximum, scale, and the
// code chunks into the stage (col = the column within the tile, rb = the row block within the tile); returns
// the prologue's output 0 (Σ of the block's inputs for a prologue with kBlockSum). Shared by the column kernel
// below and the TMA column kernel.
template <bool kFp4, class Prologue, Rounding kRoundT, int kCols>
__device__ __forceinline__ float mx_encode_column(float (&a)[32], const MxScaleRuleBits& rule_bits, MxElement el,
                                                  ScaleRule rule, Rounding rounding, float hs, const RandomStream& rs, int64_t r0, int64_t c, int64_t cols,
                                                  ColsTileStage<kFp4, kCols>& stage, int col, int rb) {
    const float amax = Prologue::apply(a);
    const float dc = a[0];
    const MxBlockScale q = mx_block_scale<Prologue::kScaled, kFp4>(amax, rule_bits, el, rule, hs);
    uint32_t w[4][2];  // SR indices (r0 + j)·cols + c
    mx_block32_codes<kFp4, Prologue::kScaled, kRoundT>(a, q, hs, el, rounding, rs, uint64_t(r0 * cols + c), uint64_t(cols), w);
    store_code_chunks<kFp4>(stage.block_chunks(col, rb), w);
    stage.scales[col][rb] = uint8_t(q.scale);
    return dc;
}

// The epilogue's group statistics of a stripe's column `col` (after __syncthreads): the staged (Σx, partial)
// of its nrb row blocks added in row-block order, stored at index i ([stripe][column]).
template <class Epilogue, int kCols>
__device__ __forceinline__ void store_stripe_stats(const float2 (&staged)[kColsWarps][kCols], int col, int nrb,
                                                   const typename Epilogue::Out& out, int64_t i) {
    float2 t = staged[0][col];
    for (int w = 1; w < nrb; ++w) {
        t.x += staged[w][col].x;
        t.y += staged[w][col].y;
    }
    Epilogue::store(out, i, t.x, t.y);
}

// Writes the staged scales of a tile (after __syncthreads): columns c_first.. (< cols), row blocks
// rb_first..rb_first+nrb, thread t of n taking columns t, t + n, ... (one 8-byte store per column when the
// run is whole and aligned).
template <bool kFp4, int kCols>
__device__ __forceinline__ void write_cols_scales(const ColsTileStage<kFp4, kCols>& stage, int64_t c_first, int64_t rb_first, int nrb,
                                                  int64_t rows, int64_t cols, uint8_t* __restrict__ scales, int t, int n) {
    const int64_t rbs = rows >> 5;
    for (int col = t; col < kCols; col += n) {
        const int64_t c = c_first + col;
        if (c >= cols) break;
        const int64_t idx = c * rbs + rb_first;
        if (nrb == kColsWarps && idx % kColsWarps == 0) {
            uint64_t s = 0;
#pragma unroll
            for (int i = 0; i < kColsWarps; ++i) s |= uint64_t(stage.scales[col][i]) << (8 * i);
            store_scale_run(scales, idx, kColsWarps, s);
        } else {
            for (int i = 0; i < nrb; ++i) scales[idx + i] = stage.scales[col][i];
        }
    }
}

// Writes a staged tile (after __syncthreads): columns c_first.. (< cols), row blocks rb_first..rb_first+nrb.
// Consecutive threads take consecutive chunks of one column, so a warp store covers whole column runs.
template <bool kFp4, int kCols>
__device__ __forceinline__ void write_cols_tile(const ColsTileStage<kFp4, kCols>& stage, int64_t c_first, int64_t rb_first,
                                                int nrb, int64_t rows, int64_t cols, uint8_t* __restrict__ codes,
                                                uint8_t* __restrict__ scales) {
    using Stage = ColsTileStage<kFp4, kCols>;
    const int64_t col_bytes = kFp4 ? rows / 2 : rows;  // code bytes of one column
    for (int q = threadIdx.x; q < kCols * Stage::kPerCol; q += blockDim.x) {
        const int col = q / Stage::kPerCol, p = q % Stage::kPerCol;
        const int k = p ^ Stage::swizzle(col);  // logical chunk
        const int64_t c = c_first + col;
        if (c < cols && k / Stage::kPerBlock < nrb)
            reinterpret_cast<uint4*>(codes + c * col_bytes + rb_first * (kFp4 ? 16 : 32))[k] = stage.codes[col][p];
    }
    write_cols_scales(stage, c_first, rb_first, nrb, rows, cols, scales, int(threadIdx.x), int(blockDim.x));
}

// Row blocks of the tile of CTA `stripe`: rb_first and how many exist (the last stripe may be partial).
__device__ __forceinline__ int cols_tile_row_blocks(int64_t rows, int64_t stripe, int64_t& rb_first) {
    const int64_t rbs = rows >> 5;
    rb_first = stripe * kColsWarps;
    return int(rbs - rb_first < kColsWarps ? rbs - rb_first : kColsWarps);
}

// A warp's input tile in the column kernel: 32 rows × kColsTileCols columns of T, row-major.
template <typename T>
struct ColsWarpTile {
    static constexpr int kChunksPerRow = kColsTileCols * int(sizeof(T)) / 16;
    __align__(16) T v[32][kColsTileCols];
};

// The warp loads rows r0..r0+31 × columns c0.. of x into its tile: 16-byte chunks when every chunk is inside
// the matrix and aligned (cols a multiple of 8 BF16 / 4 FP32 elements and the tile's columns all present) —
// with kAsync as cp.async copies that the caller commits and waits for — else one element at a time with
// zeros outside. The caller makes the tile visible to the warp (cp_async_wait, __syncwarp).
template <bool kAsync, typename T>
__device__ __forceinline__ void load_cols_warp_tile(const T* __restrict__ x, int64_t r0, int64_t c0, int64_t cols, int lane,
                                                    ColsWarpTile<T>& tile) {
    using Tile = ColsWarpTile<T>;
    constexpr int kPerChunk = 16 / int(sizeof(T));
    if (cols % kPerChunk == 0 && c0 + kColsTileCols <= cols) {
        const uint4* src = reinterpret_cast<const uint4*>(x + r0 * cols + c0);
        const int64_t row_chunks = cols / kPerChunk;
#pragma unroll
        for (int i = 0; i < Tile::kChunksPerRow; ++i) {
            const int q = 32 * i + lane, r = q / Tile::kChunksPerRow, k = q % Tile::kChunksPerRow;
            uint4* dst = reinterpret_cast<uint4*>(&tile.v[r][0]) + k;
            if constexpr (kAsync) cp_async16(dst, src + r * row_chunks + k);
            else *dst = __ldg(src + r * row_chunks + k);
        }
    } else {
        for (int q = lane; q < 32 * kColsTileCols; q += 32) {
            const int r = q / kColsTileCols, c = q % kColsTileCols;
            tile.v[r][c] = c0 + c < cols ? x[(r0 + r) * cols + c0 + c] : T(0.0f);
        }
    }
}

template <typename T, bool kFp4, class Prologue, Rounding kRoundT, class Epilogue = NoBlockStats>
__global__ void __launch_bounds__(kColsThreads, mx_min_ctas_per_sm(kFp4, Prologue::kScaled, kRoundT))
    mx_cols_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t col_tiles, MxElement e, ScaleRule rule, MxScaleRuleBits rb,
                   Rounding rounding, float hs, uint64_t seed, uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                   typename Epilogue::Out stats) {
    static_assert(!Epilogue::kNeedsSum || Prologue::kBlockSum, "the epilogue needs the block sums of a transform");
    // BF16 input is double-buffered: while a warp works on its 32 rows of the current tile, its rows of the
    // CTA's next tile arrive by cp.async (2 × 16 KB per CTA); FP32 input (32 KB per buffer) is loaded when
    // needed.
    constexpr int kBuffers = sizeof(T) == 2 ? 2 : 1;
    __shared__ ColsTileStage<kFp4, kColsTileCols> stage;
    __shared__ ColsWarpTile<T> in[kBuffers][kColsWarps];
    __shared__ float2 stage_stats[Epilogue::kEnabled ? kColsWarps : 1][kColsTileCols];  // (Σx, partial) per warp and column
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const RandomStream rs(seed);
    const unsigned tiles = unsigned(col_tiles) * unsigned((rows / 32 + kColsWarps - 1) / kColsWarps);
    // the CTA strides over the tiles (column tiles fastest); (tile, stripe) advance without a division
    const unsigned step_stripes = gridDim.x / unsigned(col_tiles), step_tiles = gridDim.x % unsigned(col_tiles);
    unsigned tile = blockIdx.x % unsigned(col_tiles), stripe = blockIdx.x / unsigned(col_tiles);
    auto load = [&](unsigned t_tile, unsigned t_stripe, int buf) {
        int64_t first;
        if (warp < cols_tile_row_blocks(rows, t_stripe, first))
            load_cols_warp_tile<kBuffers == 2>(x, (first + warp) * 32, int64_t(t_tile) * kColsTileCols, cols, lane, in[buf][warp]);
    };
    if constexpr (kBuffers == 2) {
        load(tile, stripe, 0);
        cp_async_commit();
    }
    int cur = 0;
    for (unsigned t = blockIdx.x; t < tiles; t += gridDim.x) {
        unsigned next_tile = tile + step_tiles, next_stripe = stripe + step_stripes;
        if (next_tile >= unsigned(col_tiles)) {
            next_tile -= unsigned(col_tiles);
            ++next_stripe;
        }
        if constexpr (kBuffers == 2) {
            if (t + gridDim.x < tiles) load(next_tile, next_stripe, cur ^ 1);
            cp_async_commit();
            cp_async_wait<1>();  // this tile's copies have landed (the next tile's may still be in flight)
        } else {
            load(tile, stripe, 0);
        }
        __syncwarp();
        int64_t rb_first;
        const int nrb = cols_tile_row_blocks(rows, stripe, rb_first);
        const int64_t c = int64_t(tile) * kColsTileCols + lane;
        if (warp < nrb && c < cols) {
            const int64_t r0 = (rb_first + warp) * 32;
            float a[32];
#pragma unroll
            for (int r = 0; r < 32; ++r) a[r] = to_float(in[cur][warp].v[r][lane]);
            float partial = 0.0f;
            if constexpr (Epilogue::kEnabled) partial = Epilogue::partial(a);
            const float dc = mx_encode_column<kFp4, Prologue, kRoundT>(a, rb, kFp4 ? MxElement::e2m1 : e, rule, rounding, hs, rs, r0, c,
                                                                       cols, stage, lane, warp);
            if constexpr (Epilogue::kEnabled) stage_stats[warp][lane] = make_float2(dc, partial);
        }
        __syncthreads();
        if constexpr (Epilogue::kEnabled)
            if (warp == 0 && c < cols) store_stripe_stats<Epilogue>(stage_stats, lane, nrb, stats, int64_t(stripe) * cols + c);
        write_cols_tile(stage, int64_t(tile) * kColsTileCols, rb_first, nrb, rows, cols, codes, scales);
        __syncthreads();  // the stage and this warp's buffer are reused
        tile = next_tile;
        stripe = next_stripe;
        cur ^= kBuffers - 1;
    }
}

// ------------------------------------------------------------------------------------------------
// Axis 0, E2M1 codes of BF16 input on sm_90: the column kernel's work with TMA tensor copies in and out.
// mx_cols_kernel spends ~245 instructions per warp and tile on the index and address arithmetic of its
// per-lane cp.async copies and ~150 on the staged write-out, against ~580 for the arithmetic of the block
// (SASS and ncu: issue-bound at 24.7 warp instructions per element, 17 along rows). Here one
// thread per CTA copies the whole tile (kColsWarps·32 rows × 32 columns of BF16, 16 KB) into shared memory
// with one tensor copy that completes on an mbarrier, and writes the staged codes (32 columns × 128 bytes)
// back with one tensor store: ColsTileStage's swizzle (chunk k of column col at chunk k ^ (col % 8)) is the
// TMA's 128-byte swizzle of a box whose rows are 128 bytes, so the stage is the store's source as it is.
// Out-of-range rows read as zeros and out-of-range codes are not written, so partial tiles need no second
// path. Two input buffers and two stages: the copy of the CTA's next tile is in flight while it works on
// this one, and the tensor store of a stage overlaps the next tile's arithmetic. The scales (8 bytes per
// column and tile, too narrow a box for TMA) and the statistics go out as in mx_cols_kernel.
// Needs cols % 8 == 0 (TMA row strides are multiples of 16 bytes); the launcher falls back to
// mx_cols_kernel otherwise. H200, 8192² (bench/results/history.jsonl): fused axis 0 0.72–0.73 of copy
// bandwidth (mx_cols_kernel 0.61–0.62), plain MXFP4 axis 0 0.83 (0.72); ncu 45.1 M warp instructions
// (51.8 M), issue 81 % busy and "not selected" the leading stall: issue-bound on the block's arithmetic.
constexpr int kColsTmaRows = 32 * kColsWarps;  // rows of a CTA tile

// A stage aligned as the TMA's 128-byte swizzle needs (1024 bytes).
struct alignas(1024) ColsTmaStage {
    ColsTileStage<true, kColsTileCols> s;
};

// The along-rows outputs of the both-orientations variant (kRows) of the TMA column kernel, with the
// statistics of its epilogue (RowsEpilogue::active tells at run time whether it writes them).
template <class RowsEpilogue>
struct RowsTmaOut {
    uint8_t* codes = nullptr;
    uint8_t* scales = nullptr;
    typename RowsEpilogue::Out stats{};
};

// kRows (a prologue with kBlockSum — the fused Hadamard — and cols % 32 == 0): both orientations from one
// read of the input. A tile's 32
// columns are one block along each of its rows, so warp w also takes the rows 32w.. of the tile, lane l row
// 32w + l: four 16-byte shared-memory reads, the row kernel's work, one 16-byte code store. The tile then
// arrives with the TMA's 64-byte swizzle (16-byte chunk k of tile row R at chunk k ^ ((R / 2) % 4)), so the
// 8 lanes of a quarter-warp read 8 distinct bank groups; the column reads apply the same XOR to their lane's
// chunk.
template <class Prologue, Rounding kRoundT, class Epilogue, bool kRows, class RowsEpilogue = NoBlockStats>
__global__ void __launch_bounds__(kColsThreads, mx_min_ctas_per_sm(true, Prologue::kScaled, kRoundT))
    mx_cols_e2m1_tma_kernel(const __grid_constant__ CUtensorMap in_map, const __grid_constant__ CUtensorMap codes_map, int64_t rows,
                            int64_t cols, int64_t col_tiles, ScaleRule rule, MxScaleRuleBits rb, float hs, uint64_t seed,
                            uint8_t* __restrict__ scales, typename Epilogue::Out stats, RowsTmaOut<RowsEpilogue> along_rows) {
    static_assert(!Epilogue::kNeedsSum || Prologue::kBlockSum, "the epilogue needs the block sums of a transform");
    static_assert(!kRows || Prologue::kBlockSum, "the both-orientations variant is the fused Hadamard kernel");
    constexpr bool kScaled = Prologue::kScaled;
    static_assert(sizeof(ColsTileStage<true, kColsTileCols>::codes) == kColsTileCols * 128, "a staged column is one 128-byte box row");
    __shared__ ColsTmaStage stage[2];
    __shared__ __align__(1024) __nv_bfloat16 in[2][kColsTmaRows][kColsTileCols];
    __shared__ float2 stage_stats[Epilogue::kEnabled ? 2 : 1][Epilogue::kEnabled ? kColsWarps : 1][kColsTileCols];
    __shared__ uint64_t loaded[2];  // mbarriers of the input buffers
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool producer = threadIdx.x == 0;
    const RandomStream rs(seed);
    const unsigned ctiles = unsigned(col_tiles);
    const unsigned tiles = ctiles * unsigned((rows / 32 + kColsWarps - 1) / kColsWarps);
    const unsigned step_stripes = gridDim.x / ctiles, step_tiles = gridDim.x % ctiles;
    unsigned tile = blockIdx.x % ctiles, stripe = blockIdx.x / ctiles;
    const unsigned row_blocks = unsigned(rows >> 5), cols32 = unsigned(cols);
    auto load = [&](unsigned t_tile, unsigned t_stripe, int buf) {
        mbarrier_arrive_expect_tx(&loaded[buf], uint32_t(sizeof(in[0])));
        tma_load_2d(&in[buf][0][0], &in_map, int(t_tile) * kColsTileCols, int(t_stripe) * kColsTmaRows, &loaded[buf]);
    };
    if (producer) {
        mbarrier_init(&loaded[0], 1);
        mbarrier_init(&loaded[1], 1);
    }
    __syncthreads();
    if (producer && blockIdx.x < tiles) load(tile, stripe, 0);
    unsigned use = 0;  // tiles done by this CTA: buffer use & 1, its mbarrier phase (use >> 1) & 1
    for (unsigned t = blockIdx.x; t < tiles; t += gridDim.x, ++use) {
        const int buf = int(use & 1);
        unsigned next_tile = tile + step_tiles, next_stripe = stripe + step_stripes;
        if (next_tile >= ctiles) {
            next_tile -= ctiles;
            ++next_stripe;
        }
        // the other buffer was last read before the previous iteration's barrier
        if (producer && t + gridDim.x < tiles) load(next_tile, next_stripe, buf ^ 1);
        mbarrier_wait(&loaded[buf], (use >> 1) & 1);
        // 32-bit tile indices (the launcher keeps rows and cols below 2^31)
        const unsigned rb_first = stripe * kColsWarps, c = tile * kColsTileCols + lane;
        const int nrb = int(row_blocks - rb_first < unsigned(kColsWarps) ? row_blocks - rb_first : unsigned(kColsWarps));
        if (warp < nrb && c < cols32) {
            const int64_t r0 = int64_t(rb_first + warp) * 32;
            float a[32];
#pragma unroll
            for (int r = 0; r < 32; ++r) a[r] = to_float(in[buf][32 * warp + r][kRows ? lane ^ (8 * ((r >> 1) & 3)) : lane]);
            float partial = 0.0f;
            if constexpr (Epilogue::kEnabled) partial = Epilogue::partial(a);
            const float dc = mx_encode_column<true, Prologue, kRoundT>(a, rb, MxElement::e2m1, rule, kRoundT, hs, rs, r0, c, cols,
                                                                       stage[buf].s, lane, warp);
            if constexpr (Epilogue::kEnabled) stage_stats[buf][warp][lane] = make_float2(dc, partial);
        }
        if constexpr (kRows) {
            if (warp < nrb) {
                const int64_t row = int64_t(rb_first + warp) * 32 + lane, cbs = cols >> 5;
                const char* src = reinterpret_cast<const char*>(&in[buf][32 * warp + lane][0]);
                float v[32];
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    const uint4 u = *reinterpret_cast<const uint4*>(src + 16 * (m ^ ((lane >> 1) & 3)));
                    bf16x2_to_float(u.x, v[8 * m + 0], v[8 * m + 1]);
                    bf16x2_to_float(u.y, v[8 * m + 2], v[8 * m + 3]);
                    bf16x2_to_float(u.z, v[8 * m + 4], v[8 * m + 5]);
                    bf16x2_to_float(u.w, v[8 * m + 6], v[8 * m + 7]);
                }
                const bool row_stats = RowsEpilogue::active(along_rows.stats);
                const float partial = row_stats ? RowsEpilogue::partial(v) : 0.0f;
                const float amax = Prologue::apply(v);
                const int64_t blk = row * cbs + tile;
                if (row_stats) RowsEpilogue::store(along_rows.stats, blk, v[0], partial);
                const MxBlockScale q = mx_block_scale<kScaled, true>(amax, rb, MxElement::e2m1, rule, hs);
                along_rows.scales[blk] = uint8_t(q.scale);
                const int64_t off = blk * 32;  // = row · cols + tile · 32
                mx_encode_block32<true, kScaled, kRoundT>(v, q, hs, MxElement::e2m1, kRoundT, rs, uint64_t(off), 1, off, along_rows.codes);
            }
        }
        fence_proxy_async_shared();            // this thread's staged codes → visible to the tensor store
        if (producer) bulk_wait_all<true>();    // the store of two tiles ago (the same stage) has read it
        __syncthreads();
        if (producer) {
            tma_store_2d(&codes_map, int(rb_first) * 16, int(tile) * kColsTileCols, &stage[buf].s.codes[0][0]);
            bulk_commit_group();
        }
        if (warp == kColsWarps - 1)
            write_cols_scales(stage[buf].s, int64_t(tile) * kColsTileCols, rb_first, nrb, rows, cols, scales, lane, 32);
        if constexpr (Epilogue::kEnabled)
            if (warp == kColsWarps - 2 && c < cols32)
                store_stripe_stats<Epilogue>(stage_stats[buf], lane, nrb, stats, int64_t(stripe) * cols + c);
        tile = next_tile;
        stripe = next_stripe;
    }
    if (producer) bulk_wait_all<false>();  // shared memory stays until the last stores are complete
}

// Launches mx_cols_e2m1_tma_kernel when it applies (cuda_tma_usable(), cols % 8 == 0, and for kRows
// cols % 32 == 0); returns false otherwise, for the caller to launch its fallback kernel.
template <class Prologue, Rounding kRoundT, class Epilogue, bool kRows = false, class RowsEpilogue = NoBlockStats>
bool launch_mx_cols_e2m1_tma(const __nv_bfloat16* x, int64_t rows, int64_t cols, ScaleRule rule, const MxScaleRuleBits& rb, float hs,
                             uint64_t seed, uint8_t* codes, uint8_t* scales, const typename Epilogue::Out& stats, const ColsGrid& grid,
                             cudaStream_t stream, const RowsTmaOut<RowsEpilogue>& along_rows = {}) {
    if (cols % (kRows ? 32 : 8) != 0 || rows >= (int64_t(1) << 31) || cols >= (int64_t(1) << 31) || !cuda_tma_usable()) return false;
    const unsigned ctas = grid.cols_kernel_blocks(mx_min_ctas_per_sm(true, Prologue::kScaled, kRoundT), kRoundT, Epilogue::kEnabled, true);
    const CUtensorMap in_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, x, uint64_t(cols), uint64_t(rows), uint64_t(cols) * 2,
                                                  kColsTileCols, kColsTmaRows, kRows ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE);
    const CUtensorMap codes_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, codes, uint64_t(rows / 2), uint64_t(cols),
                                                     uint64_t(rows / 2), 16 * kColsWarps, kColsTileCols, CU_TENSOR_MAP_SWIZZLE_128B);
    mx_cols_e2m1_tma_kernel<Prologue, kRoundT, Epilogue, kRows, RowsEpilogue><<<ctas, kColsThreads, 0, stream>>>(
        in_map, codes_map, rows, cols, grid.col_tiles, rule, rb, hs, seed, scales, stats, along_rows);
    return true;
}

// Row blocks per thread in the NVFP4 column kernel: 2 when it divides the number of row blocks, else 1 (a
// run of kb scale bytes per column is one aligned store; longer runs leave too few threads in flight).
inline int cols_blocks_per_thread(int64_t row_blocks) {
    if (row_blocks % 2 == 0) return 2;
    return 1;
}

}  // namespace lowbit::cuda_detail
