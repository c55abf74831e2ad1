// mx_kernels.cuh — device building blocks and the MX quantization kernel templates shared by the MX
// quantizer (formats/cuda/mx_quantize.cu), NVFP4 (nvfp4_quantize.cu) and the fused Hadamard+MXFP4 kernel
// (hadamard/cuda/hadamard_mxfp4.cu). Internal to lowbit_cuda: only .cu files include it.
//
// Every value the kernels produce goes through the LOWBIT_HD scalar functions of the CPU references
// (mx_scale_code, mx_encode, fwht_unnormalized, counter_random24) or through an equivalent whose
// equality is argued here and tested bit for bit (e2m1_fast.h; the Hadamard scale folding below).
//
// Layouts (formats/blocked_view.h): codes [outer][inner] (E2M1 packed two per byte, low nibble first),
// scales [outer][inner/32]; axis 1: outer = rows, axis 0: outer = cols (the transpose).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/bits.h"
#include "core/counter_rng.h"
#include "core/cuda_device.h"
#include "core/cuda_tma.cuh"
#include "formats/cuda/e2m1_fast.h"
#include "formats/mx_block.h"
#include "hadamard/hadamard.h"

namespace lowbit::cuda_detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

// ------------------------------------------------------------------------------------------------
// Loads. BF16 → FP32 is exact (the 16 bits become the top half of the float).

__device__ __forceinline__ void bf16x2_to_float(uint32_t w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
}

// 8 consecutive elements; p must be 16-byte aligned (BF16) or 32-byte aligned (FP32: two 16-byte loads).
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    bf16x2_to_float(u.x, v[0], v[1]);
    bf16x2_to_float(u.y, v[2], v[3]);
    bf16x2_to_float(u.z, v[4], v[5]);
    bf16x2_to_float(u.w, v[6], v[7]);
}

__device__ __forceinline__ float load1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) {
    return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}

// Elements (r, c) and (r, c+1) at p. vec: one 4-byte (BF16) / 8-byte (FP32) load, needs c even and cols
// even; else two scalar loads, the second only when has1.
__device__ __forceinline__ void load_pair(const float* p, bool vec, bool has1, float& a, float& b) {
    if (vec) {
        const float2 f = __ldg(reinterpret_cast<const float2*>(p));
        a = f.x;
        b = f.y;
    } else {
        a = __ldg(p);
        b = has1 ? __ldg(p + 1) : 0.0f;
    }
}
__device__ __forceinline__ void load_pair(const __nv_bfloat16* p, bool vec, bool has1, float& a, float& b) {
    if (vec) {
        bf16x2_to_float(__ldg(reinterpret_cast<const unsigned int*>(p)), a, b);
    } else {
        a = load1(p);
        b = has1 ? load1(p + 1) : 0.0f;
    }
}

// ------------------------------------------------------------------------------------------------
// Block maxima. max.NaN (sm_80+) returns NaN when either input is NaN, so the float maximum of |x| over a
// block has the same E8M0 consequence as the CPU's integer max of abs_bits: NaN/Inf → scale 0xFF, and for
// finite values the float order of |x| is the integer order of abs_bits.

__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else  // host compilation of this device code (CPU emulation of the kernels in development)
    return (a != a || b != b) ? __uint_as_float(0x7FFFFFFFu) : (a > b ? a : b);
#endif
}
__device__ __forceinline__ float max_nan_abs(float acc, float x) { return max_nan(acc, fabsf(x)); }

// max over |v[j]| of a 32-element block. max.NaN is associative and commutative, so a chain and a tree
// give the same result; the chain measured faster in the row kernel (H200: 0.66 against 0.46 of copy
// bandwidth for the fused axis-1 kernel), the tree is kept as a kernel-lab variant.
#ifndef LOWBIT_MX_AMAX_TREE
#define LOWBIT_MX_AMAX_TREE 0
#endif
__device__ __forceinline__ float block_amax32(const float (&v)[32]) {
#if LOWBIT_MX_AMAX_TREE
    float m[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) m[j] = max_nan(fabsf(v[j]), fabsf(v[j + 16]));
#pragma unroll
    for (int h = 8; h >= 1; h >>= 1)
#pragma unroll
        for (int j = 0; j < h; ++j) m[j] = max_nan(m[j], m[j + h]);
    return m[0];
#else
    float am = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) am = max_nan_abs(am, v[j]);
    return am;
#endif
}

// The 32-point transform of a block along a row, returning its maximum |y| from the last butterfly stage.
// With u, v that stage's inputs, its outputs are fl(u + v) and fl(u − v); RNE is symmetric and monotonic,
// so max(|fl(u + v)|, |fl(u − v)|) = fl(|u| + |v|) (a NaN input gives NaN both ways; u = v = ±Inf gives Inf
// here and NaN from the outputs, the same E8M0 byte 0xFF). Those 16 non-negative floats order as their bits,
// so the maximum is 8 three-input integer maxima (VIMNMX3, sm_90) and 16 adds instead of 32 float maxima,
// which share the integer pipe with the E2M1 encoding. H200, fused axis 1 at 8192²: 0.852–0.868 of copy
// bandwidth against 0.820–0.837 with block_amax32, in alternating runs (session 14); down columns (the TMA
// column kernel) 0.718–0.720 against 0.689–0.703 (session 15; bench/results/gpu_mx_lab_h200.txt).
__device__ __forceinline__ uint32_t max3_u32(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
    return __vimax3_u32(a, b, c);
#else
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
#endif
}
__device__ __forceinline__ float fwht32_and_amax(float (&v)[32]) {
    fwht_unnormalized<16>(&v[0]);  // stages h = 1..8 stay inside each half: the same operations as fwht_unnormalized<32>
    fwht_unnormalized<16>(&v[16]);
    uint32_t m[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const float u = v[i], w = v[i + 16];
        m[i] = __float_as_uint(fabsf(u) + fabsf(w));
        v[i] = u + w;
        v[i + 16] = u - w;
    }
#pragma unroll
    for (int i = 0; i < 5; ++i) m[3 * i] = max3_u32(m[3 * i], m[3 * i + 1], m[3 * i + 2]);
    return __uint_as_float(max3_u32(max3_u32(m[0], m[3], m[6]), max3_u32(m[9], m[12], m[15]), 0u));
}

// Σx² of a block's input values in FP32, fused multiply-adds in element order: the per-block score partial
// of outlier extraction (adahop/cuda/outlier_extraction.cuh), taken before the Hadamard transform.
__device__ __forceinline__ float block_sum_squares32(const float (&v)[32]) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) s = __fmaf_rn(v[j], v[j], s);
    return s;
}

// What a quantization pass writes beside the codes, of its input, per group of 32-blocks (the layout:
// hadamard_mxfp4.cuh): nothing, Σx² (outlier-extraction scores), or the pair (Σx, Σx²) for the detector (one
// 8-byte store). Σx² is taken before the transform (FP32 FMAs in element order); Σx (Hadamard kernels only)
// is the transform's first coefficient — row 0 of the unnormalised H₃₂ is all ones, so the butterfly adds
// the block as a tree on the way, at no cost. A template flag: a run-time pointer test cost the column
// kernel 16 registers.
enum class BlockStats { none, sumsq, detector };

// Where the statistics go (the unused one null). Along rows a group is one block, down columns the CTA's
// kColsWarps row blocks.
struct BlockStatsOut {
    float* block_sumsq = nullptr;  // Σx² (BlockStats::sumsq)
    float2* detector = nullptr;    // (Σx, Σx²) (BlockStats::detector)
};

// Stores a group's statistics at index i (the sum s of Σx, q of Σx²; nothing for BlockStats::none).
template <BlockStats kStats>
__device__ __forceinline__ void store_block_stats(const BlockStatsOut& out, int64_t i, float s, float q) {
    if constexpr (kStats == BlockStats::sumsq) out.block_sumsq[i] = q;
    if constexpr (kStats == BlockStats::detector) out.detector[i] = make_float2(s, q);
}

// ------------------------------------------------------------------------------------------------
// Hadamard pieces. In-register stages use fwht_unnormalized<N> (hadamard.h). A stage whose partner
// element lives in another lane (h = 8·lane_mask for 8 elements per lane) is one shuffle and one fma.
// With u = the lower lane's value and v = the upper lane's (the CPU's x[i] = u + v; x[i+h] = u − v):
// the lower lane computes fma(u, +1, v) = u + v, the upper lane fma(v, −1, u) = u − v, each rounded once.
template <int N>
__device__ __forceinline__ void fwht_shuffle_stage(float (&v)[N], int lane_mask, int lane) {
    const float sigma = (lane & lane_mask) ? -1.0f : 1.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const float other = __shfl_xor_sync(kFullMask, v[j], lane_mask);
        v[j] = __fmaf_rn(v[j], sigma, other);
    }
}

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
// The reference encodes element y (= t·hs for the Hadamard path, else x) as
//     encode_element(e2m1, scale_pow2(y, n), ...),   n = 127 − scale.
// Fast path: xs = t·mult with mult = hs·2^n (Hadamard) or 2^n, one multiply. Equality:
//   * plain: scale_pow2(x, n) is the single multiply x·2^n whenever n ≥ −126 (scale ≤ 253).
//   * Hadamard: round(round(t·hs)·2^n) = round(t·(hs·2^n)) when t·hs and the product are normal numbers
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

template <bool kHad, bool kE2m1>
__device__ __forceinline__ MxBlockScale mx_block_scale(float amax_t, const MxScaleRuleBits& rb, MxElement e, ScaleRule rule,
                                                       float hs) {
    const float amax = kHad ? amax_t * hs : amax_t;
    const uint32_t bits = abs_bits(amax);
    MxBlockScale b;
    if constexpr (kE2m1) b.scale = mx_scale_code_float_elem(bits, rb);  // no branch (mx_block.h)
    else b.scale = bits - 0x00800000u < 0x7F000000u ? mx_scale_code_normal(bits, rb) : mx_scale_code_reference(bits, e, rule);
    // 2^n, n = 127 − scale, as float bits (254 − scale) << 23: exact for the scales of the fast path
    const float pow2n = __uint_as_float((254u - b.scale) << 23);
    if constexpr (kHad) {
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
template <bool kFp4, bool kHad, Rounding kRoundT, bool kFast>
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
        c[j] = mx_encode_reference(kHad ? t[j] * hs : t[j], b.scale, el, r, rnd);
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
template <bool kFp4, bool kHad, Rounding kRoundT>
__device__ __forceinline__ void mx_block32_codes(const float (&t)[32], const MxBlockScale& b, float hs, MxElement e,
                                                 Rounding rounding, const RandomStream& rs, uint64_t idx0, uint64_t idx_step,
                                                 uint32_t (&w)[4][2]) {
    // One branch per block, not per 8 elements: the 32 fast encodes are one straight-line sequence
    // (H200, fused axis 1: 68.3 against 70.4 µs per 8192² BF16 matrix; dev/kernel_lab).
    if (kFp4 && b.fast_ok) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const float(&t8)[8] = *reinterpret_cast<const float(*)[8]>(&t[8 * m]);
            mx_encode8<kFp4, kHad, kRoundT, true>(t8, b, hs, e, rounding, rs, idx0 + uint64_t(8 * m) * idx_step, idx_step, w[m]);
        }
    } else {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const float(&t8)[8] = *reinterpret_cast<const float(*)[8]>(&t[8 * m]);
            mx_encode8<kFp4, kHad, kRoundT, false>(t8, b, hs, e, rounding, rs, idx0 + uint64_t(8 * m) * idx_step, idx_step, w[m]);
        }
    }
}

// ... and stored at blocked index bi (a multiple of 32) of the code array.
template <bool kFp4, bool kHad, Rounding kRoundT>
__device__ __forceinline__ void mx_encode_block32(const float (&t)[32], const MxBlockScale& b, float hs, MxElement e,
                                                  Rounding rounding, const RandomStream& rs, uint64_t idx0, uint64_t idx_step,
                                                  int64_t bi, uint8_t* codes) {
    uint32_t w[4][2];
    mx_block32_codes<kFp4, kHad, kRoundT>(t, b, hs, e, rounding, rs, idx0, idx_step, w);
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
#ifndef LOWBIT_MX_ROWS_CTAS_PER_SM  // kernel-lab override (dev/kernel_lab/bench_variants.sh)
// 8 measured 0.82–0.85 of copy bandwidth for the fused axis-1 kernel, 5 / 10 / 32 / 128 0.81–0.83
// (run-to-run spread ~2 %; bench/results/README.md)
#define LOWBIT_MX_ROWS_CTAS_PER_SM 8
#endif

// Resident CTAs per SM that the row and column kernels (256 threads) ask ptxas for. The fused Hadamard+E2M1
// kernels with RNE / half-away rounding: 5, which caps them at 48 registers (40 warps per SM) without spills;
// left unbounded, small changes elsewhere let ptxas pick 50–53 registers and drop to 4 CTAs. Every other
// instantiation (stochastic draws, the generic element encoders): 4 (≤ 64 registers).
constexpr int mx_min_ctas_per_sm(bool fp4, bool had, Rounding r) { return fp4 && had && r != Rounding::stochastic ? 5 : 4; }

// CTAs of the row kernel for nblocks 32-element blocks: one thread per block up to
// LOWBIT_MX_ROWS_CTAS_PER_SM CTAs per SM (about 1.6 rounds of the 5 resident ones), then the grid strides.
inline unsigned mx_rows_grid(int64_t nblocks) {
    if (nblocks >= (int64_t(1) << 31)) cuda_input_error("MX quantization along rows: matrix too large for one launch (2^31 blocks or more)");
    const int64_t needed = (nblocks + kRowsThreads - 1) / kRowsThreads;
    const int64_t cap = int64_t(cuda_multiprocessor_count()) * LOWBIT_MX_ROWS_CTAS_PER_SM;
    return unsigned(needed < cap ? needed : cap);
}

// The row kernel's block index: 32 bits (mx_rows_grid checks rows·cols/32 < 2^31; a BF16 matrix that large is
// 128 GiB) — fewer instructions per block for the loop and the addresses than 64 bits.
#ifndef LOWBIT_MX_ROWS_INDEX32  // kernel-lab override (dev/kernel_lab/bench_variants.sh)
#define LOWBIT_MX_ROWS_INDEX32 1
#endif
#if LOWBIT_MX_ROWS_INDEX32
using RowsIndex = uint32_t;
#else
using RowsIndex = int64_t;
#endif

template <typename T>
__device__ __forceinline__ void load32(const T* p, float (&v)[32]) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        float t8[8];
        load8(p + 8 * m, t8);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[8 * m + j] = t8[j];
    }
}

template <typename T, bool kFp4, bool kHad, Rounding kRoundT, BlockStats kStats = BlockStats::none>
__global__ void __launch_bounds__(kRowsThreads, mx_min_ctas_per_sm(kFp4, kHad, kRoundT)) mx_rows_kernel(const T* __restrict__ x, int64_t n, MxElement e, ScaleRule rule,
                                                               MxScaleRuleBits rb, Rounding rounding, float hs, uint64_t seed,
                                                               uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                                                               BlockStatsOut stats) {
    static_assert(kStats != BlockStats::detector || kHad, "block sums come from the Hadamard transform");
    const RowsIndex nblocks = RowsIndex(n >> 5);
    const RowsIndex stride = RowsIndex(gridDim.x) * blockDim.x;
    const MxElement el = kFp4 ? MxElement::e2m1 : e;
    const RandomStream rs(seed);
    for (RowsIndex blk = RowsIndex(blockIdx.x) * blockDim.x + threadIdx.x; blk < nblocks; blk += stride) {
        float v[32];
        load32(x + uint64_t(blk) * 32, v);
        float sumsq = 0.0f;
        if constexpr (kStats != BlockStats::none) sumsq = block_sum_squares32(v);
        if constexpr (kStats == BlockStats::sumsq) stats.block_sumsq[blk] = sumsq;
        const float amax = kHad ? fwht32_and_amax(v) : block_amax32(v);
        if constexpr (kStats == BlockStats::detector) stats.detector[blk] = make_float2(v[0], sumsq);
        const MxBlockScale b = mx_block_scale<kHad, kFp4>(amax, rb, el, rule, hs);
        scales[blk] = uint8_t(b.scale);
        mx_encode_block32<kFp4, kHad, kRoundT>(v, b, hs, el, rounding, rs, uint64_t(blk) * 32, 1, int64_t(blk) * 32, codes);
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
#ifndef LOWBIT_MX_COLS_WARPS  // kernel-lab override (dev/kernel_lab/bench_variants.sh)
#define LOWBIT_MX_COLS_WARPS 8
#endif
constexpr int kColsWarps = LOWBIT_MX_COLS_WARPS;
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

// Whether mx_cols_kernel runs as resident CTAs that stride over the tiles (prefetching each warp's next tile)
// or as one CTA per tile (kernel-lab switch; the kernel's loop serves both).
#ifndef LOWBIT_MX_COLS_PERSISTENT
#define LOWBIT_MX_COLS_PERSISTENT 1
#endif


// Grid of the column kernels: tiles of tile_cols columns × kColsWarps row blocks, column tiles fastest.
struct ColsGrid {
    int64_t col_tiles, stripes;
    ColsGrid(int64_t rows, int64_t cols, int64_t tile_cols)
        : col_tiles((cols + tile_cols - 1) / tile_cols), stripes((rows / 32 + kColsWarps - 1) / kColsWarps) {}
    unsigned blocks() const { return unsigned(col_tiles * stripes); }
    // CTAs of the column kernels, which stride over the tiles: at most ctas_per_sm resident ones per SM, or one
    // per tile with stochastic rounding (issue-bound by the counter-based draws: 4–5 % slower resident in
    // mx_cols_kernel, 3 % in the TMA kernel) and, in mx_cols_kernel (tma false), with statistics (~1.5 %
    // slower resident: 48 registers and a 20-byte spill). RNE went 3 % and plain MXFP4 6 % faster resident in
    // mx_cols_kernel (H200, session 14); the TMA kernel with statistics 9 % (session 15).
    unsigned cols_kernel_blocks(int ctas_per_sm, Rounding r, BlockStats stats, bool tma = false) const {
        const bool resident = LOWBIT_MX_COLS_PERSISTENT && r != Rounding::stochastic && (tma || stats == BlockStats::none);
        const int64_t cap = resident ? int64_t(cuda_multiprocessor_count()) * ctas_per_sm : int64_t(blocks());
        return unsigned(int64_t(blocks()) < cap ? int64_t(blocks()) : cap);
    }
};

// The 32-row block r0.. of column c held in registers: Hadamard (kHad) with the block maximum from its last
// stage (fwht32_and_amax; block_amax32 without the transform), scale, and the code
// chunks into the stage (col = the column within the tile, rb = the row block within the tile). Shared by
// the column kernel below and the both-orientations kernel (hadamard_mxfp4.cu).
template <bool kFp4, bool kHad, Rounding kRoundT, int kCols>
__device__ __forceinline__ float mx_encode_column(float (&a)[32], const MxScaleRuleBits& rule_bits, MxElement el,
                                                  ScaleRule rule, Rounding rounding, float hs, const RandomStream& rs, int64_t r0, int64_t c, int64_t cols,
                                                  ColsTileStage<kFp4, kCols>& stage, int col, int rb) {
    float amax;
    if constexpr (kHad) amax = fwht32_and_amax(a);
    else amax = block_amax32(a);
    const float dc = a[0];  // with the transform: Σ of the block's inputs (see BlockStats)
    const MxBlockScale q = mx_block_scale<kHad, kFp4>(amax, rule_bits, el, rule, hs);
    uint32_t w[4][2];  // SR indices (r0 + j)·cols + c
    mx_block32_codes<kFp4, kHad, kRoundT>(a, q, hs, el, rounding, rs, uint64_t(r0 * cols + c), uint64_t(cols), w);
    store_code_chunks<kFp4>(stage.block_chunks(col, rb), w);
    stage.scales[col][rb] = uint8_t(q.scale);
    return dc;
}

// The same for an output known at run time (the both-orientations kernel).
__device__ __forceinline__ void store_block_stats_any(const BlockStatsOut& out, int64_t i, float s, float q) {
    if (out.block_sumsq != nullptr) store_block_stats<BlockStats::sumsq>(out, i, s, q);
    else store_block_stats<BlockStats::detector>(out, i, s, q);
}

// The group statistics of a stripe's column `col` (after __syncthreads): the staged sums of its nrb row
// blocks added in row-block order, stored at index i ([stripe][column]).
template <BlockStats kStats, int kCols>
__device__ __forceinline__ void store_stripe_stats(const float2 (&staged)[kColsWarps][kCols], int col, int nrb, const BlockStatsOut& out,
                                                   int64_t i) {
    float2 t = staged[0][col];
    for (int w = 1; w < nrb; ++w) {
        t.x += staged[w][col].x;
        t.y += staged[w][col].y;
    }
    store_block_stats<kStats>(out, i, t.x, t.y);
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

// 16 bytes global → shared without passing through registers (cp.async, sm_80+; cached in L2 only), and the
// group bookkeeping: a thread's copies since the last commit form a group; wait<N> returns once at most N of
// its groups are still in flight.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(unsigned(__cvta_generic_to_shared(smem))), "l"(gmem) : "memory");
#else
    *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

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

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __uint_as_float(uint32_t(__bfloat16_as_ushort(v)) << 16); }

template <typename T, bool kFp4, bool kHad, Rounding kRoundT, BlockStats kStats = BlockStats::none>
__global__ void __launch_bounds__(kColsThreads, mx_min_ctas_per_sm(kFp4, kHad, kRoundT)) mx_cols_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                                               int64_t col_tiles, MxElement e, ScaleRule rule, MxScaleRuleBits rb,
                                                               Rounding rounding, float hs, uint64_t seed, uint8_t* __restrict__ codes,
                                                               uint8_t* __restrict__ scales, BlockStatsOut stats) {
    static_assert(kStats != BlockStats::detector || kHad, "block sums come from the Hadamard transform");
    // BF16 input is double-buffered: while a warp works on its 32 rows of the current tile, its rows of the
    // CTA's next tile arrive by cp.async (2 × 16 KB per CTA); FP32 input (32 KB per buffer) is loaded when
    // needed.
    constexpr int kBuffers = sizeof(T) == 2 ? 2 : 1;
    __shared__ ColsTileStage<kFp4, kColsTileCols> stage;
    __shared__ ColsWarpTile<T> in[kBuffers][kColsWarps];
    __shared__ float2 stage_stats[kStats == BlockStats::none ? 1 : kColsWarps][kColsTileCols];  // (Σx, Σx²) per warp and column
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
            float sumsq = 0.0f;
            if constexpr (kStats != BlockStats::none) sumsq = block_sum_squares32(a);
            const float dc = mx_encode_column<kFp4, kHad, kRoundT>(a, rb, kFp4 ? MxElement::e2m1 : e, rule, rounding, hs, rs, r0, c,
                                                                   cols, stage, lane, warp);
            if constexpr (kStats != BlockStats::none) stage_stats[warp][lane] = make_float2(dc, sumsq);
        }
        __syncthreads();
        if constexpr (kStats != BlockStats::none)
            if (warp == 0 && c < cols) store_stripe_stats<kStats>(stage_stats, lane, nrb, stats, int64_t(stripe) * cols + c);
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
// (SASS and ncu, session 14: issue-bound at 24.7 warp instructions per element, 17 along rows). Here one
// thread per CTA copies the whole tile (kColsWarps·32 rows × 32 columns of BF16, 16 KB) into shared memory
// with one tensor copy that completes on an mbarrier, and writes the staged codes (32 columns × 128 bytes)
// back with one tensor store: ColsTileStage's swizzle (chunk k of column col at chunk k ^ (col % 8)) is the
// TMA's 128-byte swizzle of a box whose rows are 128 bytes, so the stage is the store's source as it is.
// Out-of-range rows read as zeros and out-of-range codes are not written, so partial tiles need no second
// path. Two input buffers and two stages: the copy of the CTA's next tile is in flight while it works on
// this one, and the tensor store of a stage overlaps the next tile's arithmetic. The scales (8 bytes per
// column and tile, too narrow a box for TMA) and the statistics go out as in mx_cols_kernel.
// Needs cols % 8 == 0 (TMA row strides are multiples of 16 bytes); the launcher falls back to
// mx_cols_kernel otherwise. H200, 8192² (bench/results/gpu_mx_lab_h200.txt, session 15): fused axis 0
// 0.61–0.62 → 0.72–0.73 of copy bandwidth, plain MXFP4 axis 0 0.72 → 0.83; ncu 45.1 M warp instructions
// (51.8 M), issue 81 % busy and "not selected" the leading stall: issue-bound on the block's arithmetic.
#ifndef LOWBIT_MX_COLS_TMA  // kernel-lab switch (dev/kernel_lab/bench_variants.sh): 0 = always mx_cols_kernel
#define LOWBIT_MX_COLS_TMA 1
#endif
constexpr int kColsTmaRows = 32 * kColsWarps;  // rows of a CTA tile

// A stage aligned as the TMA's 128-byte swizzle needs (1024 bytes).
struct alignas(1024) ColsTmaStage {
    ColsTileStage<true, kColsTileCols> s;
};

// The along-rows outputs of the both-orientations variant (kRows) of the TMA column kernel.
struct RowsTmaOut {
    uint8_t* codes = nullptr;
    uint8_t* scales = nullptr;
    BlockStatsOut stats;  // either pointer or none, known at run time
};

// kRows (fused Hadamard only, cols % 32 == 0): both orientations from one read of the input. A tile's 32
// columns are one block along each of its rows, so warp w also takes the rows 32w.. of the tile, lane l row
// 32w + l: four 16-byte shared-memory reads, the row kernel's work, one 16-byte code store. The tile then
// arrives with the TMA's 64-byte swizzle (16-byte chunk k of tile row R at chunk k ^ ((R / 2) % 4)), so the
// 8 lanes of a quarter-warp read 8 distinct bank groups; the column reads apply the same XOR to their lane's
// chunk.
template <bool kHad, Rounding kRoundT, BlockStats kStats, bool kRows>
__global__ void __launch_bounds__(kColsThreads, mx_min_ctas_per_sm(true, kHad, kRoundT))
    mx_cols_e2m1_tma_kernel(const __grid_constant__ CUtensorMap in_map, const __grid_constant__ CUtensorMap codes_map, int64_t rows,
                            int64_t cols, int64_t col_tiles, ScaleRule rule, MxScaleRuleBits rb, float hs, uint64_t seed,
                            uint8_t* __restrict__ scales, BlockStatsOut stats, RowsTmaOut along_rows) {
    static_assert(kStats != BlockStats::detector || kHad, "block sums come from the Hadamard transform");
    static_assert(!kRows || kHad, "the both-orientations variant is the fused Hadamard kernel");
    static_assert(sizeof(ColsTileStage<true, kColsTileCols>::codes) == kColsTileCols * 128, "a staged column is one 128-byte box row");
    __shared__ ColsTmaStage stage[2];
    __shared__ __align__(1024) __nv_bfloat16 in[2][kColsTmaRows][kColsTileCols];
    __shared__ float2 stage_stats[kStats == BlockStats::none ? 1 : 2][kStats == BlockStats::none ? 1 : kColsWarps][kColsTileCols];
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
            float sumsq = 0.0f;
            if constexpr (kStats != BlockStats::none) sumsq = block_sum_squares32(a);
            const float dc = mx_encode_column<true, kHad, kRoundT>(a, rb, MxElement::e2m1, rule, kRoundT, hs, rs, r0, c, cols,
                                                                   stage[buf].s, lane, warp);
            if constexpr (kStats != BlockStats::none) stage_stats[buf][warp][lane] = make_float2(dc, sumsq);
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
                const bool row_stats = along_rows.stats.block_sumsq != nullptr || along_rows.stats.detector != nullptr;
                const float sumsq = row_stats ? block_sum_squares32(v) : 0.0f;
                const float amax = fwht32_and_amax(v);
                const int64_t blk = row * cbs + tile;
                if (row_stats) store_block_stats_any(along_rows.stats, blk, v[0], sumsq);
                const MxBlockScale q = mx_block_scale<true, true>(amax, rb, MxElement::e2m1, rule, hs);
                along_rows.scales[blk] = uint8_t(q.scale);
                const int64_t off = blk * 32;  // = row · cols + tile · 32
                mx_encode_block32<true, true, kRoundT>(v, q, hs, MxElement::e2m1, kRoundT, rs, uint64_t(off), 1, off, along_rows.codes);
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
        if constexpr (kStats != BlockStats::none)
            if (warp == kColsWarps - 2 && c < cols32)
                store_stripe_stats<kStats>(stage_stats[buf], lane, nrb, stats, int64_t(stripe) * cols + c);
        tile = next_tile;
        stripe = next_stripe;
    }
    if (producer) bulk_wait_all<false>();  // shared memory stays until the last stores are complete
}

// Launches mx_cols_e2m1_tma_kernel when it applies (LOWBIT_MX_COLS_TMA, cuda_tma_usable(), cols % 8 == 0, and
// for kRows cols % 32 == 0); returns false otherwise, for the caller to launch its fallback kernel.
template <bool kHad, Rounding kRoundT, BlockStats kStats, bool kRows = false>
bool launch_mx_cols_e2m1_tma(const __nv_bfloat16* x, int64_t rows, int64_t cols, ScaleRule rule, const MxScaleRuleBits& rb, float hs,
                             uint64_t seed, uint8_t* codes, uint8_t* scales, const BlockStatsOut& stats, const ColsGrid& grid,
                             cudaStream_t stream, const RowsTmaOut& along_rows = {}) {
    if (!LOWBIT_MX_COLS_TMA || cols % (kRows ? 32 : 8) != 0 || rows >= (int64_t(1) << 31) || cols >= (int64_t(1) << 31) || !cuda_tma_usable())
        return false;
    const unsigned ctas = grid.cols_kernel_blocks(mx_min_ctas_per_sm(true, kHad, kRoundT), kRoundT, kStats, true);
    const CUtensorMap in_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, x, uint64_t(cols), uint64_t(rows), uint64_t(cols) * 2,
                                                  kColsTileCols, kColsTmaRows, kRows ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE);
    const CUtensorMap codes_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, codes, uint64_t(rows / 2), uint64_t(cols),
                                                     uint64_t(rows / 2), 16 * kColsWarps, kColsTileCols, CU_TENSOR_MAP_SWIZZLE_128B);
    mx_cols_e2m1_tma_kernel<kHad, kRoundT, kStats, kRows><<<ctas, kColsThreads, 0, stream>>>(
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
