// mx_gemm_fp8.cu — the MX GEMM of mx_gemm_fp8.cuh: the E2M1 → E4M3 expansion pass, B's folding pass, the
// scale-chunk pass, the sm_90a kernel (a TMA producer thread, two wgmma consumer warpgroups, per-32 FP32
// promotion), the CUDA-core kernel for other devices, and the launcher. The exactness argument, the design and
// its bound are in the header.
#include "adahop/cuda/mx_gemm_fp8.cuh"

#include <string>

#include "core/cuda/tma.cuh"
#include "formats/element_codec.h"

// wgmma exists only in sm_90a machine code; for other targets (the portable PTX of the dev preset) its
// wrappers are empty, like tma.cuh's, and the launcher never starts the kernel there.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LOWBIT_WGMMA_DEVICE 1
#else
#define LOWBIT_WGMMA_DEVICE 0
#endif

namespace lowbit {

namespace {

using namespace cuda_detail;

// ---------------------------------------------------------------------------------------------------
// E2M1 → E4M3, exact. The 16 E4M3 bytes come from the formats' own codecs (formats/element_codec.h), not
// from a hand table: byte c % 8 of word c / 8 is encode_e4m3(decode_e2m1(c)) — exact, since every E2M1 value
// {0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6} is an E4M3 value (the test checks all 16 codes through the kernel).

struct E2m1AsE4m3 {
    uint64_t word[2];  // codes 0–7 (sign clear), codes 8–15 (sign set)
};

E2m1AsE4m3 e2m1_as_e4m3_table() {
    const ElementSpec e2m1 = element_spec(ElementType::e2m1), e4m3 = element_spec(ElementType::e4m3);
    E2m1AsE4m3 t{{0, 0}};
    for (uint32_t code = 0; code < 16; ++code) {
        const uint32_t byte = encode_element(e4m3, decode_element(e2m1, code), Rounding::nearest_even, Overflow::saturate);
        t.word[code / 8] |= uint64_t(byte) << (8 * (code % 8));
    }
    return t;
}

__device__ __forceinline__ uint32_t e2m1_as_e4m3(const E2m1AsE4m3& t, uint32_t code) {
    return uint32_t(((code & 8u) ? t.word[1] : t.word[0]) >> (8 * (code & 7u))) & 0xFFu;  // a select, no indexed load
}

// 4 packed bytes (8 codes, low nibble first) → 8 E4M3 bytes in element order.
__device__ __forceinline__ uint2 expand_e2m1_word(const E2m1AsE4m3& t, uint32_t packed) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        lo |= e2m1_as_e4m3(t, (packed >> (4 * i)) & 0xFu) << (8 * i);
        hi |= e2m1_as_e4m3(t, (packed >> (16 + 4 * i)) & 0xFu) << (8 * i);
    }
    return make_uint2(lo, hi);
}

// One thread per 8 packed bytes (16 codes) → 16 E4M3 bytes. Napkin math: 8192 × 8192 codes read 33.5 MB and
// write 67 MB → ~24 µs at 4.2 TB/s (an 8192³ GEMM at ~700 TFLOP/s takes ~1.6 ms: 1.5 % per operand).
__global__ void expand_e2m1_kernel(const uint2* packed, uint4* out, int64_t chunks, E2m1AsE4m3 table) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
        const uint2 p = packed[i];
        const uint2 lo = expand_e2m1_word(table, p.x), hi = expand_e2m1_word(table, p.y);
        out[i] = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
}

// ---------------------------------------------------------------------------------------------------
// B's column scales folded into its E4M3 values, per 128-column tile and MX block (the header's "Scale
// folding"). An E2M1 value times 2^d is exact in E4M3 for d ∈ [−8, 6] (0.5 · 2^−8 = 2^−9 is E4M3's smallest
// subnormal, 6 · 2^6 = 384 ≤ 448), so a tile-block whose non-zero blocks' scales span at most 14 binades is
// stored as codes · 2^(s − ref) with one reference exponent per tile-block; the GEMM then needs only the row's
// factor times the tile-block's. Other tile-blocks (wider spread, a NaN scale) keep their values unshifted and
// the GEMM promotes them with per-column factors: exact either way.

constexpr int kFoldDown = 8, kFoldUp = 6, kFoldShifts = kFoldDown + kFoldUp + 1;
constexpr int32_t kUnfolded = INT32_MIN;  // b_tile_ref entry of a tile-block kept unshifted
constexpr int kFoldTileRows = 128;        // = kTileN of the GEMM (static_assert there)
constexpr int kFoldBlocksPerCta = 8;
constexpr int kFoldThreads = 256;

struct E2m1ShiftedAsE4m3 {
    uint8_t byte[kFoldShifts][8];  // E4M3 bytes of |E2M1 code c| · 2^(i − kFoldDown), c = 0 … 7
};

E2m1ShiftedAsE4m3 e2m1_shifted_table() {
    const ElementSpec e2m1 = element_spec(ElementType::e2m1), e4m3 = element_spec(ElementType::e4m3);
    E2m1ShiftedAsE4m3 t{};
    for (int i = 0; i < kFoldShifts; ++i)
        for (uint32_t c = 0; c < 8; ++c) {
            const float v = std::ldexp(decode_element(e2m1, c), i - kFoldDown);
            const uint32_t byte = encode_element(e4m3, v, Rounding::nearest_even, Overflow::saturate);
            if (decode_element(e4m3, byte) != v) cuda_input_error("mx_gemm_fp8: E2M1 · 2^d not exact in E4M3 (table)");
            t.byte[i][c] = uint8_t(byte);
        }
    return t;
}

// One CTA: one 128-row tile of B × 8 MX blocks. Unit u = (row u / 8, block u % 8); eight consecutive threads
// read one row's 8 × 16 code bytes (coalesced). Phase 1: the min / max scale over the tile-block's rows whose
// block holds a non-zero value; phase 2: each unit's 32 codes → E4M3 bytes shifted by s − ref.
__global__ void __launch_bounds__(kFoldThreads)
    fold_b_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales, int rows, int k_blocks,
                  uint8_t* __restrict__ e4m3, int32_t* __restrict__ tile_ref, int ref_stride, unsigned* unfolded,
                  E2m1ShiftedAsE4m3 table) {
    __shared__ uint8_t shifted[kFoldShifts][8];
    __shared__ int smin[kFoldBlocksPerCta], smax[kFoldBlocksPerCta], refs[kFoldBlocksPerCta];
    const int t = int(threadIdx.x);
    if (t < kFoldShifts * 8) shifted[t / 8][t % 8] = table.byte[t / 8][t % 8];
    if (t < kFoldBlocksPerCta) {
        smin[t] = 1 << 30;
        smax[t] = -1;
    }
    __syncthreads();
    constexpr int kUnits = kFoldTileRows * kFoldBlocksPerCta / kFoldThreads;
    const int row0 = int(blockIdx.x) * kFoldTileRows, kb0 = int(blockIdx.y) * kFoldBlocksPerCta;
    uint4 code[kUnits];
    int scale[kUnits];
#pragma unroll
    for (int r = 0; r < kUnits; ++r) {
        const int u = t + kFoldThreads * r, row = row0 + u / kFoldBlocksPerCta, kb = kb0 + u % kFoldBlocksPerCta;
        scale[r] = -1;
        if (row >= rows || kb >= k_blocks) continue;
        code[r] = reinterpret_cast<const uint4*>(codes + (int64_t(row) * k_blocks + kb) * (kMxBlock / 2))[0];
        scale[r] = scales[int64_t(row) * k_blocks + kb];
        const uint32_t magnitude = (code[r].x | code[r].y | code[r].z | code[r].w) & 0x77777777u;
        if (magnitude == 0 && scale[r] != kE8m0Nan) continue;  // ±0 everywhere: any shift keeps it
        atomicMin(&smin[u % kFoldBlocksPerCta], scale[r]);
        atomicMax(&smax[u % kFoldBlocksPerCta], scale[r]);
    }
    __syncthreads();
    if (t < kFoldBlocksPerCta && kb0 + t < ref_stride) {  // the padding past K too: the GEMM multiplies whole stages
        int ref;
        if (smax[t] < 0) ref = 127;  // every value zero (and the padding: factor 1 for its zero-filled codes)
        else if (smax[t] == kE8m0Nan || smax[t] - smin[t] > kFoldDown + kFoldUp) ref = kUnfolded;
        else ref = min(smin[t] + kFoldDown, smax[t]);  // shifts s − ref ∈ [−8, 6], as few upward as possible
        refs[t] = ref;
        tile_ref[int64_t(blockIdx.x) * ref_stride + kb0 + t] = ref;
        if (ref == kUnfolded) atomicAdd(unfolded, 1u);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kUnits; ++r) {
        if (scale[r] < 0) continue;
        const int u = t + kFoldThreads * r, row = row0 + u / kFoldBlocksPerCta, kb = kb0 + u % kFoldBlocksPerCta;
        const int ref = refs[u % kFoldBlocksPerCta];
        int d = ref == kUnfolded ? 0 : scale[r] - ref;
        d = d < -kFoldDown ? -kFoldDown : (d > kFoldUp ? kFoldUp : d);  // only all-zero blocks fall outside
        const uint8_t* lut = shifted[d + kFoldDown];
        const uint32_t in[4] = {code[r].x, code[r].y, code[r].z, code[r].w};
        uint32_t out[8];
#pragma unroll
        for (int w = 0; w < 4; ++w)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                uint32_t word = 0;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint32_t c = (in[w] >> (16 * half + 4 * i)) & 0xFu;
                    word |= (uint32_t(lut[c & 7u]) | ((c & 8u) << 4)) << (8 * i);
                }
                out[2 * w + half] = word;
            }
        uint4* dst = reinterpret_cast<uint4*>(e4m3 + (int64_t(row) * k_blocks + kb) * kMxBlock);
        dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
        dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
    }
}

// ---------------------------------------------------------------------------------------------------
// INT8 stages (the header's "INT8 stages" and "Two planes"): E2M1 codes → int8 2 · value · 2^(s − base), per chunk
// of 8 blocks, with the base per line (A; B with column bases) or per 128-line tile (B). Per (tile, chunk) the CTA
// decides the planes: one (every line, or the tile, spans ≤ 3 binades), two (some span 4 … 7: the blocks 4 … 7 up
// keep 2 · value · 2^(s − base − 4) in the main values, effective exponent base + 4, and a copy in the high plane),
// or outside (> 7 binades or a NaN scale: lines stored unshifted, except per-line ones that fit one plane). The
// effective exponent of every (line, block) is written straight into the kernel's staged chunks ([tile][stage][line]
// [4 blocks], 127 past the operand); two-plane tile-chunks also write the high plane and the bases as staged chunks.
// Per (tile, chunk) two bits (chunk c of tile t is bit c % 64 of word t · words + c / 64, words = ⌈chunks / 64⌉):
// chunk_ok starts all ones and a chunk outside clears its bit; two_planes starts all zeros and a two-plane chunk
// sets its bit. counts[0] += tile-chunks outside, counts[1] += tile-chunks with two planes.

constexpr int kInt8Window = 3;                           // 12 · 2^3 = 96 ≤ 127
constexpr int kInt8HighShift = kInt8Window + 1;          // the high plane's blocks lie 4 … 7 binades over the base
constexpr int kInt8TwoPlaneWindow = 2 * kInt8Window + 1;
constexpr int kInt8ChunkStages = 2;     // stages chained per promotion (a chunk: 8 blocks, K = 256)
constexpr int kPackStagesPerCta = 2;    // 8 blocks: eight consecutive threads read one line's 8 × 16 code bytes
static_assert(kPackStagesPerCta % kInt8ChunkStages == 0, "a pack CTA holds whole chunks");
constexpr int kPackThreads = 256;
// 64-bit words of chunk bits per 128-line tile.
__host__ __device__ constexpr int int8_chunk_words(int k_stages) { return (k_stages / kInt8ChunkStages + 63) / 64; }

// How a line's or a tile's chunk is packed; ordered, so a tile of per-line chunks takes the largest of its lines'.
enum Int8Planes : int { kPlanesOne = 0, kPlanesTwo = 1, kPlanesOut = 2 };

// lo / hi: the smallest and largest live scale (hi < 0: nothing live; lo < 0: a NaN scale).
__device__ __forceinline__ int int8_planes(int lo, int hi, bool two_planes) {
    if (hi < 0 || (lo >= 0 && hi - lo <= kInt8Window)) return kPlanesOne;
    return two_planes && lo >= 0 && hi - lo <= kInt8TwoPlaneWindow ? kPlanesTwo : kPlanesOut;
}

__device__ __forceinline__ uint32_t int8_of_e2m1(uint32_t code, int shift) {
    constexpr uint32_t kTwice = 0xC8643210u;  // 2 · |E2M1| of codes 0–7, one nibble each: 0 1 2 3 4 6 8 12
    const uint32_t magnitude = ((kTwice >> (4 * (code & 7u))) & 0xFu) << shift;
    return ((code & 8u) ? 0u - magnitude : magnitude) & 0xFFu;
}

// One CTA: one 128-line tile × 2 stages (one chunk); unit u = (line u / 8, block u % 8), 4 units per thread.
// Lanes 8q … 8q + 7 hold one line's chunk, so its min / max come from shuffles; a tile-chunk's from shared atomics.
template <bool kPerLine>
__global__ void __launch_bounds__(kPackThreads)
    pack_int8_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales, int lines, int k_blocks,
                     int k_stages, bool two_planes_allowed, uint8_t* __restrict__ out, uint8_t* __restrict__ high,
                     uint8_t* __restrict__ chunks, uint8_t* __restrict__ base_chunks, float* __restrict__ column_factors,
                     uint8_t* __restrict__ high_blocks, unsigned long long* chunk_ok, unsigned long long* two_planes,
                     int words_per_tile, unsigned* counts) {
    constexpr int kChunks = kPackStagesPerCta / kInt8ChunkStages, kChunkLanes = 4 * kInt8ChunkStages;
    static_assert(kChunks == 1, "the lanes' block index (lane % 8) is the chunk's: one chunk per CTA");
    __shared__ int smin[kChunks], smax[kChunks], sworst[kChunks];
    __shared__ unsigned smask[kChunks];
    const int t = int(threadIdx.x), lane = t % 32;
    if (t < kChunks) {
        smin[t] = 1 << 30;
        smax[t] = -1;
        sworst[t] = kPlanesOne;
        smask[t] = 0;
    }
    __syncthreads();
    constexpr int kBlocks = 4 * kPackStagesPerCta, kUnits = kFoldTileRows * kBlocks / kPackThreads;
    const int tile = int(blockIdx.x), row0 = tile * kFoldTileRows, ks0 = int(blockIdx.y) * kPackStagesPerCta;
    const int chunk = lane % kBlocks / kChunkLanes;  // of this CTA, for every unit of the thread (u % kBlocks = lane % 8)
    uint4 code[kUnits];
    int scale[kUnits];
    bool live[kUnits];  // the block holds a non-zero value or a NaN scale: it decides the window
#pragma unroll
    for (int r = 0; r < kUnits; ++r) {
        const int u = t + kPackThreads * r, row = row0 + u / kBlocks, kb = ks0 * 4 + u % kBlocks;
        scale[r] = -1;
        live[r] = false;
        if (row < lines && kb < k_blocks) {
            code[r] = reinterpret_cast<const uint4*>(codes + (int64_t(row) * k_blocks + kb) * (kMxBlock / 2))[0];
            scale[r] = scales[int64_t(row) * k_blocks + kb];
            live[r] = ((code[r].x | code[r].y | code[r].z | code[r].w) & 0x77777777u) != 0 || scale[r] == kE8m0Nan;
        }
    }
    int lo[kUnits], hi[kUnits];
#pragma unroll
    for (int r = 0; r < kUnits; ++r) {
        lo[r] = live[r] ? (scale[r] == kE8m0Nan ? -(1 << 20) : scale[r]) : (1 << 30);  // NaN: never inside
        hi[r] = live[r] ? scale[r] : -1;
        if (kPerLine) {
#pragma unroll
            for (int x = 1; x < kChunkLanes; x <<= 1) {
                lo[r] = min(lo[r], __shfl_xor_sync(0xFFFFFFFFu, lo[r], x));
                hi[r] = max(hi[r], __shfl_xor_sync(0xFFFFFFFFu, hi[r], x));
            }
            if (lane % kChunkLanes == 0) atomicMax(&sworst[chunk], int8_planes(lo[r], hi[r], two_planes_allowed));
        } else if (live[r]) {
            atomicMin(&smin[chunk], lo[r]);
            atomicMax(&smax[chunk], hi[r]);
        }
    }
    __syncthreads();
    const int tile_planes = kPerLine ? sworst[chunk] : int8_planes(smin[chunk], smax[chunk], two_planes_allowed);
    if (t < kChunks && ks0 + t * kInt8ChunkStages < k_stages) {
        const int planes = kPerLine ? sworst[t] : int8_planes(smin[t], smax[t], two_planes_allowed);
        const int c = (ks0 + t * kInt8ChunkStages) / kInt8ChunkStages;
        const int64_t word = int64_t(tile) * words_per_tile + c / 64;
        if (planes == kPlanesOut) {
            atomicAnd(&chunk_ok[word], ~(1ull << (c % 64)));
            atomicAdd(&counts[0], 1u);
        } else if (planes == kPlanesTwo) {
            atomicOr(&two_planes[word], 1ull << (c % 64));
            atomicAdd(&counts[1], 1u);
        }
    }
    // Per unit: its base, and its shift and effective exponent (one plane → s − base over base; two planes, in a
    // two-plane tile → the same less 4 over base + 4 for the blocks 4 … 7 up; otherwise unshifted over its own scale).
    struct Encoding {
        int base, shift, eff;
        bool up;  // the block goes to the high plane
    };
    const auto encode = [&](int r) {
        const int l = kPerLine ? lo[r] : smin[chunk], h = kPerLine ? hi[r] : smax[chunk];
        Encoding e{h < 0 ? 127 : l, 0, scale[r], false};  // nothing live: any base will do
        const int planes = kPerLine ? int8_planes(l, h, two_planes_allowed) : tile_planes;
        if (scale[r] >= 0 && (planes == kPlanesOne || (planes == kPlanesTwo && tile_planes == kPlanesTwo))) {
            e.shift = live[r] ? scale[r] - e.base : 0;
            e.up = e.shift >= kInt8HighShift;
            e.shift -= e.up ? kInt8HighShift : 0;
            e.eff = e.base + (e.up ? kInt8HighShift : 0);
        }
        return e;
    };
    // A two-plane tile-chunk's high plane holds only its blocks with a value 4 … 7 up in some line (bit b of
    // high_blocks), compacted to the chunk's first popcount slots, so the GEMM multiplies only those.
    if (tile_planes == kPlanesTwo) {
#pragma unroll
        for (int r = 0; r < kUnits; ++r)
            if (encode(r).up) atomicOr(&smask[chunk], 1u << (lane % kBlocks));
    }
    __syncthreads();
    if (tile_planes == kPlanesTwo && t < kChunks && ks0 + t * kInt8ChunkStages < k_stages)
        high_blocks[int64_t(tile) * (k_stages / kInt8ChunkStages) + (ks0 + t * kInt8ChunkStages) / kInt8ChunkStages] = uint8_t(smask[t]);
#pragma unroll
    for (int r = 0; r < kUnits; ++r) {
        const int u = t + kPackThreads * r, line = u / kBlocks, row = row0 + line, kb = ks0 * 4 + u % kBlocks;
        const int stage = ks0 + (u % kBlocks) / 4;
        if (stage >= k_stages) continue;
        const int64_t at = ((int64_t(tile) * k_stages + stage) * kFoldTileRows + line) * 4 + (u % 4);
        const Encoding e = encode(r);
        if (tile_planes == kPlanesTwo) base_chunks[at] = uint8_t(e.base);
        if (kPerLine && column_factors && u % kBlocks == 0)  // the line's chunk factor 2^(base − 127) (NaN: never read)
            column_factors[(int64_t(tile) * (k_stages / kInt8ChunkStages) + ks0 / kInt8ChunkStages) * kFoldTileRows + line] =
                e.base >= 0 && e.base < 255 ? pow2f(e.base - 127) : 1.0f;
        if (scale[r] < 0) {  // past the operand: factor 1 for TMA's zero fill
            chunks[at] = 127;
            continue;
        }
        chunks[at] = uint8_t(e.eff);
        const uint32_t in[4] = {code[r].x, code[r].y, code[r].z, code[r].w};
        uint32_t word[8];
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            const uint32_t packed = in[w / 2] >> (16 * (w % 2));
            word[w] = int8_of_e2m1(packed & 0xFu, e.shift) | int8_of_e2m1((packed >> 4) & 0xFu, e.shift) << 8 |
                      int8_of_e2m1((packed >> 8) & 0xFu, e.shift) << 16 | int8_of_e2m1((packed >> 12) & 0xFu, e.shift) << 24;
        }
        uint4* dst = reinterpret_cast<uint4*>(out + (int64_t(row) * k_blocks + kb) * kMxBlock);
        dst[0] = make_uint4(word[0], word[1], word[2], word[3]);
        dst[1] = make_uint4(word[4], word[5], word[6], word[7]);
        const unsigned mask = smask[chunk], b = unsigned(lane % kBlocks);
        if (tile_planes == kPlanesTwo && ((mask >> b) & 1u)) {  // slot p of the compacted high plane: this block, or zeros
            const int p = __popc(mask & ((1u << b) - 1u));
            uint4* hdst = reinterpret_cast<uint4*>(high + (int64_t(row) * k_blocks + ks0 * 4 + p) * kMxBlock);
            hdst[0] = e.up ? make_uint4(word[0], word[1], word[2], word[3]) : make_uint4(0, 0, 0, 0);
            hdst[1] = e.up ? make_uint4(word[4], word[5], word[6], word[7]) : make_uint4(0, 0, 0, 0);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The sm_90a kernel's geometry.

constexpr int kTileM = 128;              // rows of C per CTA tile (two consumer warpgroups × 64)
constexpr int kTileN = 128;              // columns of C per tile (the wgmma's N)
constexpr int kStageK = 128;             // K elements (bytes) per pipeline stage: one 128-byte swizzle row
constexpr int kBlocksPerStage = kStageK / kMxBlock;
constexpr int kStages = 6;               // 6 × 34 KB of the 227 KB of shared memory
constexpr int kConsumerWarpgroups = 2;
constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
constexpr int kGroupTilesM = 8;          // tile order: 8 M-tiles per group, N-tiles within the group (L2 reuse)
static_assert(kTileM == kTileN, "one chunk size serves A's and B's staged scales");

struct alignas(1024) MxGemmStage {          // 1024: the 128-byte swizzle pattern repeats every 8 rows of 128 B
    uint8_t a[kTileM * kStageK];            // TMA box 128 × 128, SWIZZLE_128B
    uint8_t b[kTileN * kStageK];
    uint8_t a_scale[kTileM][kBlocksPerStage];  // E8M0 bytes of each row's 4 blocks (staged_scales_kernel's chunks)
    uint8_t b_scale[kTileN][kBlocksPerStage];
    int32_t tile_ref[kBlocksPerStage];         // folded B: the tile-blocks' reference exponents (kUnfolded: per column)
    float b_factor[kTileN];                    // INT8 stages with column bases: 2^(base − 127) of each line's chunk
};
static_assert(sizeof(MxGemmStage) == 34 * 1024, "stage: A and B tiles 16 KB each, the scale chunks 512 B each, padding");
static_assert(kFoldTileRows == kTileN, "B is folded per GEMM column tile");
constexpr uint32_t kScaleChunkBytes = kTileM * kBlocksPerStage;  // one (128-line tile, stage) chunk of staged scales

struct MxGemmShared {
    MxGemmStage stage[kStages];
    uint64_t full[kStages];   // producer → consumers: the stage's TMA and bulk copies landed (1 arrival + tx)
    uint64_t empty[kStages];  // consumers → producer: stage read (one arrival per consumer warp)
};
constexpr int kSharedBytes = int(sizeof(MxGemmShared)) + 1024;  // + slack to align the dynamic base to 1024
constexpr uint32_t kStageTxBytes = uint32_t(kTileM * kStageK + kTileN * kStageK);

struct TileGrid {
    int tiles_m, tiles_n;
    __host__ __device__ int count() const { return tiles_m * tiles_n; }
    // Tile t → its first row and column: groups of kGroupTilesM M-tiles, column-major inside a group.
    __host__ __device__ void origin(int t, int* m0, int* n0) const {
        const int per_group = kGroupTilesM * tiles_n;
        const int group = t / per_group, first_m = group * kGroupTilesM;
        const int group_m = tiles_m - first_m < kGroupTilesM ? tiles_m - first_m : kGroupTilesM;
        const int in_group = t - group * per_group;
        *m0 = (first_m + in_group % group_m) * kTileM;
        *n0 = (in_group / group_m) * kTileN;
    }
};

// ---------------------------------------------------------------------------------------------------
// PTX wrappers of this kernel (sm_90a): wgmma and its shared-memory descriptors.


// Descriptor of a K-major operand tile in shared memory written by TMA with 128-byte swizzle: rows of 128
// bytes, 8-row groups 1024 bytes apart (stride byte offset), leading byte offset unused for swizzled K-major
// (encoded 1), layout type 1 = 128-byte swizzle in bits 62–63. Start addresses inside a row (k · 32 bytes for
// the k-th MX block) select the K slice; the swizzle is applied to absolute addresses, hence the 1024-byte
// aligned tiles.
__device__ __forceinline__ uint64_t sw128_kmajor_descriptor(const void* p) {
    const uint64_t address = smem_address(p);
    return ((address & 0x3FFFFull) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#if LOWBIT_WGMMA_DEVICE
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if LOWBIT_WGMMA_DEVICE
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most `pending` committed wgmma groups of this warpgroup are still running.
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
#if LOWBIT_WGMMA_DEVICE
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(pending) : "memory");
#endif
}
// Register budgets of the warp-specialized kernel (setmaxnreg: the producer gives registers back, the
// consumers take them: 128 · 56 + 256 · 224 ≤ 65536).
template <int count>
__device__ __forceinline__ void registers_decrease() {
#if LOWBIT_WGMMA_DEVICE
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(count));
#endif
}
template <int count>
__device__ __forceinline__ void registers_increase() {
#if LOWBIT_WGMMA_DEVICE
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(count));
#endif
}
// Keeps the compiler from moving reads of wgmma results above the wait (the registers are written
// asynchronously; to the compiler they are defined by the wgmma statement).
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// D (64 × 128 FP32, fresh: scale-d = 0) = A (64 × 32 E4M3) · B (128 × 32 E4M3)ᵀ, both from shared memory.
// Fragment of thread t of the warpgroup (warp w, lane l): d[4j + 2h + e] is row 16w + l/4 + 8h, column
// 8j + 2(l % 4) + e, j = 0 … 15.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t a_desc, uint64_t b_desc) {
#if LOWBIT_WGMMA_DEVICE
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, 0, 1, 1;"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]),
          "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]),
          "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]),
          "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]),
          "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]),
          "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]),
          "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]),
          "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
        : "l"(a_desc), "l"(b_desc)
        : "memory");
#endif
}


// D (64 × 128 int32) = [D +] A (64 × 32 int8) · B (128 × 32 int8)ᵀ from shared memory (the same descriptors and
// fragment layout as the E4M3 form); kAccumulate 0 starts a fresh sum.
template <int kAccumulate>
__device__ __forceinline__ void wgmma_m64n128k32_s8(int32_t (&d)[64], uint64_t a_desc, uint64_t b_desc) {
#if LOWBIT_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(a_desc), "l"(b_desc), "n"(kAccumulate)
        : "memory");
#endif
}

// ---------------------------------------------------------------------------------------------------
// The CUDA-core kernel's factors: 2^(s−127) of block kb of line `line` (decode_e8m0: NaN for 0xFF), 0 for
// lines and blocks outside the matrix (their codes are not read there).

constexpr uint32_t kOutside = 0x100;  // not a scale byte: the block lies outside the matrix

__device__ __forceinline__ uint32_t scale_byte_or_outside(const uint8_t* scales, int line, int lines, int kb, int k_blocks) {
    return line < lines && kb < k_blocks ? uint32_t(scales[int64_t(line) * k_blocks + kb]) : kOutside;
}
__device__ __forceinline__ float factor_of_scale(uint32_t raw) { return raw == kOutside ? 0.0f : decode_e8m0(uint8_t(raw)); }
__device__ __forceinline__ float block_factor(const uint8_t* scales, int line, int lines, int kb, int k_blocks) {
    return factor_of_scale(scale_byte_or_outside(scales, line, lines, kb, k_blocks));
}

// v + beta · old: lp_matmul's store of a product into an FP32 output (adahop/cuda/lp_matmul_cuda.cu, store_kernel).
__device__ __forceinline__ float with_old(float v, float beta, float old) { return v + beta * old; }

__device__ __forceinline__ void store_pair(float* c_f32, __nv_bfloat16* c_bf16, float beta, int m, int n, int row, int col,
                                           float v0, float v1) {
    if (row >= m || col >= n) return;
    const int64_t at = int64_t(row) * n + col;
    const bool pair = col + 1 < n && (n & 1) == 0;  // even n: (row·n + col) is even, the pair aligned
    if (c_f32) {
        if (pair) {
            float2* p = reinterpret_cast<float2*>(c_f32 + at);
            if (beta != 0.0f) {
                const float2 old = *p;
                v0 = with_old(v0, beta, old.x);
                v1 = with_old(v1, beta, old.y);
            }
            *p = make_float2(v0, v1);
        } else {
            c_f32[at] = beta != 0.0f ? with_old(v0, beta, c_f32[at]) : v0;
            if (col + 1 < n) c_f32[at + 1] = beta != 0.0f ? with_old(v1, beta, c_f32[at + 1]) : v1;
        }
    } else {
        if (pair) *reinterpret_cast<__nv_bfloat162*>(c_bf16 + at) = __floats2bfloat162_rn(v0, v1);
        else {
            c_bf16[at] = __float2bfloat16_rn(v0);
            if (col + 1 < n) c_bf16[at + 1] = __float2bfloat16_rn(v1);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The sm_90a kernel. a_map / b_map: E4M3 bytes [M][K] / [N][K], boxes 128 × 128, 128-byte swizzle.
// a_chunks / b_chunks: the scale bytes as staged_scales_kernel arranges them (512 B per 128-line tile and stage).
// b_tile_ref: [N-tiles][whole stages × 4] reference exponents of B's folded tile-blocks (kUnfolded: per-column
// factors; 127 past K), or null (nothing folded).

// One MX block of a consumer: C += P · factor(row) · factor(column), P the block's fresh wgmma partial, the
// factors 2^(s−127) decoded from the stage's scale bytes (decode_e8m0: NaN for 0xFF). Folded tile-block
// (tile_ref ≠ kUnfolded): B's values carry 2^(s − ref), the column factor is the tile's 2^(ref−127).
__device__ __forceinline__ void promote_block(float (&acc)[64], float (&part)[64], const MxGemmStage& st, bool folded, int kb,
                                              int row_local, int col_local) {
#pragma unroll
    for (int i = 0; i < 64; ++i) fence_operand(part[i]);
    const float fa0 = decode_e8m0(st.a_scale[row_local][kb]), fa1 = decode_e8m0(st.a_scale[row_local + 8][kb]);
    const int32_t ref = folded ? st.tile_ref[kb] : kUnfolded;
    if (ref != kUnfolded) {
        const float tile_factor = pow2f(ref - 127);
        const float f0 = fa0 * tile_factor, f1 = fa1 * tile_factor;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            acc[4 * j + 0] = __fmaf_rn(part[4 * j + 0], f0, acc[4 * j + 0]);
            acc[4 * j + 1] = __fmaf_rn(part[4 * j + 1], f0, acc[4 * j + 1]);
            acc[4 * j + 2] = __fmaf_rn(part[4 * j + 2], f1, acc[4 * j + 2]);
            acc[4 * j + 3] = __fmaf_rn(part[4 * j + 3], f1, acc[4 * j + 3]);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float fb0 = decode_e8m0(st.b_scale[8 * j + col_local][kb]), fb1 = decode_e8m0(st.b_scale[8 * j + col_local + 1][kb]);
        acc[4 * j + 0] = __fmaf_rn(part[4 * j + 0], fa0 * fb0, acc[4 * j + 0]);
        acc[4 * j + 1] = __fmaf_rn(part[4 * j + 1], fa0 * fb1, acc[4 * j + 1]);
        acc[4 * j + 2] = __fmaf_rn(part[4 * j + 2], fa1 * fb0, acc[4 * j + 2]);
        acc[4 * j + 3] = __fmaf_rn(part[4 * j + 3], fa1 * fb1, acc[4 * j + 3]);
    }
}

__device__ __forceinline__ void issue_block(float (&part)[64], const MxGemmStage& st, int consumer, int kb) {
    wgmma_fence();
    wgmma_m64n128k32_e4m3(part, sw128_kmajor_descriptor(st.a + consumer * 64 * kStageK + kb * kMxBlock),
                          sw128_kmajor_descriptor(st.b + kb * kMxBlock));
    wgmma_commit();
}

// INT8 stages: an int32 sum below 2^22 as FP32, exactly: its bits added to 1.5 · 2^23's land in the mantissa.
__device__ __forceinline__ float exact_float(int32_t q) { return __int_as_float(q + 0x4B400000) - 12582912.0f; }
__device__ __forceinline__ void fence_operand(int32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// One chunk's stages (kInt8ChunkStages × 4 blocks) chained into one int32 partial (exact: the header's "INT8 stages").
__device__ __forceinline__ void issue_int8_chunk(int32_t (&part)[64], const MxGemmStage* const (&st)[kInt8ChunkStages], int consumer) {
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < kInt8ChunkStages; ++i) {
        const uint8_t* a = st[i]->a + consumer * 64 * kStageK;
        const uint8_t* b = st[i]->b;
        if (i == 0) wgmma_m64n128k32_s8<0>(part, sw128_kmajor_descriptor(a), sw128_kmajor_descriptor(b));
        else wgmma_m64n128k32_s8<1>(part, sw128_kmajor_descriptor(a), sw128_kmajor_descriptor(b));
#pragma unroll
        for (int kb = 1; kb < kBlocksPerStage; ++kb)
            wgmma_m64n128k32_s8<1>(part, sw128_kmajor_descriptor(a + kb * kMxBlock), sw128_kmajor_descriptor(b + kb * kMxBlock));
    }
    wgmma_commit();
}

// A chunk's sum as FP32: one plane, the int32 sum S (|S| < 2^22) converted exactly; two planes, the FP32 bits that
// int8_two_plane_step left in place (15 · float(H) + float(S), rounded once).
template <bool kTwoPlanes>
__device__ __forceinline__ float chunk_sum(int32_t q) {
    if constexpr (kTwoPlanes) return __int_as_float(q);
    else return exact_float(q);
}

// C += chunk sum · 2^(base_A(row) − 127) · 2^(base_B − 127) / 4: every block of a shifted chunk carries its base as
// effective exponent (in a two-plane chunk, the stage of the high plane carries the bases), so the first stage's
// block 0 gives the chunk's (the 1/4 undoes the int8 encoding's 2 · 2). kTwoPlanes: part holds FP32 bits (chunk_sum).
template <bool kTwoPlanes>
__device__ __forceinline__ void promote_int8_chunk(float (&acc)[64], int32_t (&part)[64], const MxGemmStage& st, int row_local) {
#pragma unroll
    for (int i = 0; i < 64; ++i) fence_operand(part[i]);
    const float fb = decode_e8m0(st.b_scale[0][0]);
    const float f0 = decode_e8m0(st.a_scale[row_local][0]) * fb * 0.25f, f1 = decode_e8m0(st.a_scale[row_local + 8][0]) * fb * 0.25f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        acc[4 * j + 0] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 0]), f0, acc[4 * j + 0]);
        acc[4 * j + 1] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 1]), f0, acc[4 * j + 1]);
        acc[4 * j + 2] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 2]), f1, acc[4 * j + 2]);
        acc[4 * j + 3] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 3]), f1, acc[4 * j + 3]);
    }
}

// The per-block path of tiles with a stage outside the window: a fresh int32 sum per block, per-row × per-column
// factors from the effective exponents.
__device__ __forceinline__ void issue_int8_block(int32_t (&part)[64], const MxGemmStage& st, int consumer, int kb) {
    wgmma_fence();
    wgmma_m64n128k32_s8<0>(part, sw128_kmajor_descriptor(st.a + consumer * 64 * kStageK + kb * kMxBlock),
                           sw128_kmajor_descriptor(st.b + kb * kMxBlock));
    wgmma_commit();
}
// Block kb's exact sum times per-row × per-column factors from the effective exponents.
__device__ __forceinline__ void promote_int8_block(float (&acc)[64], int32_t (&part)[64], const MxGemmStage& st, int kb, int row_local,
                                                   int col_local) {
#pragma unroll
    for (int i = 0; i < 64; ++i) fence_operand(part[i]);
    const float fa0 = decode_e8m0(st.a_scale[row_local][kb]) * 0.25f, fa1 = decode_e8m0(st.a_scale[row_local + 8][kb]) * 0.25f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float fb0 = decode_e8m0(st.b_scale[8 * j + col_local][kb]), fb1 = decode_e8m0(st.b_scale[8 * j + col_local + 1][kb]);
        acc[4 * j + 0] = __fmaf_rn(exact_float(part[4 * j + 0]), fa0 * fb0, acc[4 * j + 0]);
        acc[4 * j + 1] = __fmaf_rn(exact_float(part[4 * j + 1]), fa0 * fb1, acc[4 * j + 1]);
        acc[4 * j + 2] = __fmaf_rn(exact_float(part[4 * j + 2]), fa1 * fb0, acc[4 * j + 2]);
        acc[4 * j + 3] = __fmaf_rn(exact_float(part[4 * j + 3]), fa1 * fb1, acc[4 * j + 3]);
    }
}

// Column bases (MxGemmFold::int8_stages_columns): a chained chunk's sum times per-row × per-column factors, the row's
// decoded from its base byte, the columns' read as FP32 (st.b_factor, written by the pack pass: no byte load and
// decode per column; two scalar loads per column pair, as an 8-byte load made ptxas spill); kTwoPlanes as for
// promote_int8_chunk.
template <bool kTwoPlanes>
__device__ __forceinline__ void promote_int8_columns(float (&acc)[64], int32_t (&part)[64], const MxGemmStage& st, int row_local,
                                                     int col_local) {
#pragma unroll
    for (int i = 0; i < 64; ++i) fence_operand(part[i]);
    const float fa0 = decode_e8m0(st.a_scale[row_local][0]) * 0.25f, fa1 = decode_e8m0(st.a_scale[row_local + 8][0]) * 0.25f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float fb0 = st.b_factor[8 * j + col_local], fb1 = st.b_factor[8 * j + col_local + 1];
        acc[4 * j + 0] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 0]), fa0 * fb0, acc[4 * j + 0]);
        acc[4 * j + 1] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 1]), fa0 * fb1, acc[4 * j + 1]);
        acc[4 * j + 2] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 2]), fa1 * fb0, acc[4 * j + 2]);
        acc[4 * j + 3] = __fmaf_rn(chunk_sum<kTwoPlanes>(part[4 * j + 3]), fa1 * fb1, acc[4 * j + 3]);
    }
}

// Every lane of the warp is done with the stage (its wgmmas waited on, its scales read): one arrival per warp.
__device__ __forceinline__ void release_stage(uint64_t* empty, int lane) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty);
}

// One stage's 4 blocks, each in a fresh partial: two partials alternate, block b + 1's wgmma issued before block b
// is promoted, every group waited for before the stage is released (FP8 and the INT8 per-block path alike).
template <typename Part, typename Issue, typename Promote>
__device__ __forceinline__ void stage_block_by_block(Part (&part0)[64], Part (&part1)[64], Issue issue, Promote promote) {
    issue(part0, 0);
    issue(part1, 1);
    wgmma_wait<1>();
    promote(part0, 0);
    issue(part0, 2);
    wgmma_wait<1>();
    promote(part1, 1);
    issue(part1, 3);
    wgmma_wait<1>();
    promote(part0, 2);
    wgmma_wait<0>();
    promote(part1, 3);
}

// kChunks chunks from pipeline use `use` on: two partials alternate, each chunk's wgmmas issued before the
// previous chunk is promoted, and every group opened here is also waited for here (a group still running at the
// loop's back edge makes ptxas serialize every wgmma of the kernel).
// kColumnBases (MxGemmFold::int8_stages_columns): B's lines carry their own bases, so a chunk is promoted with
// per-row × per-column factors (promote_int8_columns: the row's from the chunk's first block, whose effective
// exponents are the bases, the columns' from the pack pass's FP32 factors) instead of the per-row factor times one
// tile factor.
template <int kChunks, bool kColumnBases>
__device__ __forceinline__ void int8_chained_step(float (&acc)[64], MxGemmShared& sh, uint32_t use, int consumer, int row_local,
                                                  int col_local, int lane) {
    int32_t part0[64], part1[64];
    const MxGemmStage* chunk[kChunks][kInt8ChunkStages];
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int i = 0; i < kInt8ChunkStages; ++i) chunk[c][i] = &sh.stage[(use + c * kInt8ChunkStages + i) % kStages];
    auto ready = [&](int c) -> const MxGemmStage* const(&)[kInt8ChunkStages] {
#pragma unroll
        for (int i = 0; i < kInt8ChunkStages; ++i) {
            const uint32_t u = use + c * kInt8ChunkStages + i;
            mbarrier_wait(&sh.full[u % kStages], (u / kStages) & 1u);
        }
        return chunk[c];
    };
    issue_int8_chunk(part0, ready(0), consumer);
    if constexpr (kChunks > 1) issue_int8_chunk(part1, ready(1), consumer);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
        if (c + 1 < kChunks) wgmma_wait<1>();
        else wgmma_wait<0>();
        int32_t(&part)[64] = c % 2 ? part1 : part0;
        if constexpr (kColumnBases) promote_int8_columns<false>(acc, part, *chunk[c][0], row_local, col_local);
        else promote_int8_chunk<false>(acc, part, *chunk[c][0], row_local);
#pragma unroll
        for (int i = 0; i < kInt8ChunkStages; ++i) release_stage(&sh.empty[(use + c * kInt8ChunkStages + i) % kStages], lane);
        if (c + 2 < kChunks) issue_int8_chunk(part, ready(c + 2), consumer);
    }
}

// The wgmmas of one two-plane chunk, all waited for here: the main plane's 8 blocks chained into `main`, and the high
// plane's kHigh compacted blocks into `high`, block i of the high plane (stage i / 4 of `high_st`, the two-plane
// operand) against the block of the i-th set bit of `blocks` in the other operand's main plane. kHigh is fixed per
// code path, so ptxas keeps the wgmmas asynchronous (a wgmma under a condition would serialize them).
template <int kHigh>
__device__ __forceinline__ void issue_two_planes(int32_t (&main)[64], int32_t (&high)[64], const MxGemmStage* const (&main_st)[kInt8ChunkStages],
                                                 const MxGemmStage* const (&high_st)[kInt8ChunkStages], bool a_high, unsigned blocks,
                                                 int consumer) {
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < kInt8ChunkStages; ++i)
#pragma unroll
        for (int kb = 0; kb < kBlocksPerStage; ++kb) {
            const uint64_t a = sw128_kmajor_descriptor(main_st[i]->a + consumer * 64 * kStageK + kb * kMxBlock);
            const uint64_t b = sw128_kmajor_descriptor(main_st[i]->b + kb * kMxBlock);
            if (i == 0 && kb == 0) wgmma_m64n128k32_s8<0>(main, a, b);
            else wgmma_m64n128k32_s8<1>(main, a, b);
        }
#pragma unroll
    for (int i = 0; i < kHigh; ++i) {
        const int block = __ffs(int(blocks)) - 1;  // the i-th set bit
        blocks &= blocks - 1u;
        const MxGemmStage& h = *high_st[i / kBlocksPerStage];
        static_assert(kInt8ChunkStages == 2, "a block of the chunk lies in its first or its second stage");
        const MxGemmStage& o = block < kBlocksPerStage ? *main_st[0] : *main_st[1];  // a select: no indexed local array
        const int hk = (i % kBlocksPerStage) * kMxBlock, ok = (block % kBlocksPerStage) * kMxBlock;
        const uint64_t a = sw128_kmajor_descriptor(a_high ? h.a + consumer * 64 * kStageK + hk : o.a + consumer * 64 * kStageK + ok);
        const uint64_t b = sw128_kmajor_descriptor(a_high ? o.b + ok : h.b + hk);
        if (i == 0) wgmma_m64n128k32_s8<0>(high, a, b);
        else wgmma_m64n128k32_s8<1>(high, a, b);
    }
    wgmma_commit();
    wgmma_wait<0>();
}

// One two-plane chunk (the header's "Two planes") from pipeline use `use` on: its two main stages, then the two
// stages the producer loaded with one operand's high plane (and that operand's bases as staged exponents). The high
// plane's blocks (`high_blocks`, bit b: block b has a value 4 … 7 up in some line of the tile) are compacted to its
// first slots; only those are multiplied, against the same blocks of the other operand. Promoted once from the high
// stages' exponents.
template <bool kColumnBases>
__device__ __forceinline__ void int8_two_plane_step(float (&acc)[64], MxGemmShared& sh, uint32_t use, bool a_high, unsigned high_blocks,
                                                    int consumer, int row_local, int col_local, int lane) {
    int32_t main_part[64], high_part[64];
    const MxGemmStage* planes[2][kInt8ChunkStages];
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int i = 0; i < kInt8ChunkStages; ++i) {
            const uint32_t u = use + p * kInt8ChunkStages + i;
            mbarrier_wait(&sh.full[u % kStages], (u / kStages) & 1u);
            planes[p][i] = &sh.stage[u % kStages];
        }
    switch (__popc(high_blocks)) {  // ≥ 1: a two-plane chunk has a block 4 … 7 up
        case 1: issue_two_planes<1>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        case 2: issue_two_planes<2>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        case 3: issue_two_planes<3>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        case 4: issue_two_planes<4>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        case 5: issue_two_planes<5>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        case 6: issue_two_planes<6>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        case 7: issue_two_planes<7>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
        default: issue_two_planes<8>(main_part, high_part, planes[0], planes[1], a_high, high_blocks, consumer); break;
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {  // the chunk's sum in main-plane units, S + 15 · H, as FP32 bits in place
        fence_operand(main_part[i]);
        fence_operand(high_part[i]);
        main_part[i] = __float_as_int(__fmaf_rn(exact_float(high_part[i]), 15.0f, exact_float(main_part[i])));
    }
    if constexpr (kColumnBases) promote_int8_columns<true>(acc, main_part, *planes[1][0], row_local, col_local);
    else promote_int8_chunk<true>(acc, main_part, *planes[1][0], row_local);
#pragma unroll
    for (int i = 0; i < 2 * kInt8ChunkStages; ++i) release_stage(&sh.empty[(use + i) % kStages], lane);
}

// The INT8 stages' per-(128-line tile, chunk) decisions and the two-plane operands' extras (MxGemmWindowGeometry).
struct Int8ChunkPlan {
    const unsigned long long *a_ok = nullptr, *b_ok = nullptr, *a_two = nullptr, *b_two = nullptr;
    const uint8_t *a_base = nullptr, *b_base = nullptr;  // the bases as staged exponents, two-plane tile-chunks only
    const float* b_factors = nullptr;  // column bases: [B tile][chunk][128 lines] 2^(base − 127), copied with each stage
    const uint8_t *a_high_blocks = nullptr, *b_high_blocks = nullptr;  // [tile][chunk]: the high plane's blocks (bit b)
    int words = 0;
};

// What output tile (ti, tj) does with the 64 chunks of bit word w: chained with one plane each, chained with two
// planes on A's side (bit set in a_high) or on B's, and (the rest) block by block.
struct Int8ChunkWord {
    unsigned long long chained, a_high, b_high;
};
__device__ __forceinline__ Int8ChunkWord int8_chunk_word(const Int8ChunkPlan& p, int ti, int tj, int w) {
    // < 2^31: tiles · words ≥ 2^31 would need M · K ≥ 2^52, petabytes of codes
    const int ia = ti * p.words + w, ib = tj * p.words + w;
    const unsigned long long ok = p.a_ok[ia] & p.b_ok[ib], two_a = p.a_two[ia], two_b = p.b_two[ib];
    return {ok & ~(two_a | two_b), ok & two_a & ~two_b, ok & two_b & ~two_a};
}

template <bool kInt8, bool kColumnBases>
__global__ void __launch_bounds__(kThreads, 1)
    mx_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                         const __grid_constant__ CUtensorMap a_high_map, const __grid_constant__ CUtensorMap b_high_map,
                         const uint8_t* __restrict__ a_chunks, const uint8_t* __restrict__ b_chunks,
                         const int32_t* __restrict__ b_tile_ref, Int8ChunkPlan plan, int m, int n, int k_stages, float* c_f32,
                         __nv_bfloat16* c_bf16, float beta) {
    extern __shared__ uint8_t shared_raw[];
    const uint32_t misalignment = smem_address(shared_raw) & 1023u;
    MxGemmShared& sh = *reinterpret_cast<MxGemmShared*>(shared_raw + ((1024u - misalignment) & 1023u));

    const TileGrid grid{(m + kTileM - 1) / kTileM, (n + kTileN - 1) / kTileN};
    const int warpgroup = int(threadIdx.x) / 128;
    const int lane = int(threadIdx.x) % 32;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&sh.full[s], 1);
            mbarrier_init(&sh.empty[s], 4 * kConsumerWarpgroups);
        }
    }
    __syncthreads();

    if (warpgroup == 0) {
        registers_decrease<56>();
        // Producer: one thread. Per (tile, stage) pair of this CTA, in order: wait for the slot, then five
        // asynchronous copies completing on its `full` barrier — the A and B code tiles (TMA) and the staged
        // scale chunks of A's and B's 128 lines (and, folded, B's 4 tile references) as bulk copies. It waits for
        // no load but the INT8 stages' chunk bits (one word of 64 chunks per tile and operand), so the ring stays as
        // full as the consumers allow. A two-plane chunk gets two more stages: the high plane of its two-plane
        // operand with that operand's bases, and the other operand's main tile and exponents again.
        if (threadIdx.x != 0) return;
        constexpr uint32_t kFactorBytes = uint32_t(sizeof(float)) * kTileN;
        const uint32_t tx = kStageTxBytes + 2 * kScaleChunkBytes + (b_tile_ref ? uint32_t(sizeof(int32_t) * kBlocksPerStage) : 0u) +
                            (plan.b_factors ? kFactorBytes : 0u);
        uint32_t use = 0;
        for (int t = int(blockIdx.x); t < grid.count(); t += int(gridDim.x)) {
            int m0, n0;
            grid.origin(t, &m0, &n0);
            const int64_t a_chunk = int64_t(m0 / kTileM) * k_stages, b_chunk = int64_t(n0 / kTileN) * k_stages;
            auto load = [&](int ks, const CUtensorMap* am, const CUtensorMap* bm, const uint8_t* a_exp, const uint8_t* b_exp) {
                const int slot = int(use % kStages);
                const uint32_t round = use / kStages;
                if (round > 0) mbarrier_wait(&sh.empty[slot], (round - 1) & 1u);
                MxGemmStage& st = sh.stage[slot];
                mbarrier_arrive_expect_tx(&sh.full[slot], tx);
                tma_load_2d(st.a, am, ks * kStageK, m0, &sh.full[slot]);
                tma_load_2d(st.b, bm, ks * kStageK, n0, &sh.full[slot]);
                bulk_load(st.a_scale, a_exp + (a_chunk + ks) * kScaleChunkBytes, kScaleChunkBytes, &sh.full[slot]);
                bulk_load(st.b_scale, b_exp + (b_chunk + ks) * kScaleChunkBytes, kScaleChunkBytes, &sh.full[slot]);
                if (b_tile_ref)
                    bulk_load(st.tile_ref, b_tile_ref + (b_chunk + ks) * kBlocksPerStage, sizeof(int32_t) * kBlocksPerStage,
                              &sh.full[slot]);
                if (plan.b_factors)  // chunk ks / 2 of B's tile n0 / 128
                    bulk_load(st.b_factor, plan.b_factors + (b_chunk / kInt8ChunkStages + ks / kInt8ChunkStages) * kTileN, kFactorBytes,
                              &sh.full[slot]);
                ++use;
            };
            if constexpr (kInt8) {
                Int8ChunkWord word{};
                for (int c = 0; c < k_stages / kInt8ChunkStages; ++c) {
                    if (c % 64 == 0) word = int8_chunk_word(plan, m0 / kTileM, n0 / kTileN, c / 64);
                    const unsigned long long bit = 1ull << (c % 64);
                    for (int i = 0; i < kInt8ChunkStages; ++i) load(c * kInt8ChunkStages + i, &a_map, &b_map, a_chunks, b_chunks);
                    if ((word.a_high | word.b_high) & bit) {
                        const bool a_high = (word.a_high & bit) != 0;
                        for (int i = 0; i < kInt8ChunkStages; ++i)
                            load(c * kInt8ChunkStages + i, a_high ? &a_high_map : &a_map, a_high ? &b_map : &b_high_map,
                                 a_high ? plan.a_base : a_chunks, a_high ? b_chunks : plan.b_base);
                    }
                }
            } else {
                for (int ks = 0; ks < k_stages; ++ks) load(ks, &a_map, &b_map, a_chunks, b_chunks);
            }
        }
        return;
    }
    registers_increase<224>();

    // Consumers: warpgroup 1 takes rows 0–63 of the tile, warpgroup 2 rows 64–127.
    const bool folded = b_tile_ref != nullptr;
    const int consumer = warpgroup - 1;
    const int warp_in_group = (int(threadIdx.x) % 128) / 32;
    const int row_local = consumer * 64 + warp_in_group * 16 + lane / 4;  // and row_local + 8
    const int col_local = 2 * (lane % 4);                                  // + 8j, and + 1
    // FP8: per use of a stage its 4 blocks (a partial last stage of K multiplies TMA's zero fill with factor 1,
    // so no branch holds a wgmma and ptxas keeps them asynchronous): each block's wgmma is issued before the
    // previous block is promoted. INT8 stages (k_stages whole chunks, the padding zero fill): per chunk, where the
    // row tile and the column tile both have one plane, the chunk is chained into one partial (int8_chained_step,
    // runs of such chunks in steps of 4, 2, 1); where one of them has two, into two (int8_two_plane_step, 4
    // stages); any other chunk goes block by block.
    uint32_t use = 0;
    for (int t = int(blockIdx.x); t < grid.count(); t += int(gridDim.x)) {
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
        int m0, n0;
        grid.origin(t, &m0, &n0);
        auto stage_at = [&](uint32_t u) -> const MxGemmStage& {
            mbarrier_wait(&sh.full[u % kStages], (u / kStages) & 1u);
            return sh.stage[u % kStages];
        };
        if constexpr (kInt8) {
            const int chunks = k_stages / kInt8ChunkStages;
            for (int c = 0; c < chunks;) {
                const Int8ChunkWord word = int8_chunk_word(plan, m0 / kTileM, n0 / kTileN, c / 64);
                // bit i: chunk c + i chained, up to the end of c's word (the bits shifted in past it are zeros)
                const unsigned long long chained = word.chained >> (c % 64);
                const bool two_planes = (((word.a_high | word.b_high) >> (c % 64)) & 1u) != 0;
                if (chained & 1u) {
                    int run = ~chained != 0 ? __ffsll(static_cast<long long>(~chained)) - 1 : 64;
                    if (run > chunks - c) run = chunks - c;
                    c += run;
                    for (; run >= 4; run -= 4, use += 4 * kInt8ChunkStages) int8_chained_step<4, kColumnBases>(acc, sh, use, consumer, row_local, col_local, lane);
                    if (run >= 2) {
                        int8_chained_step<2, kColumnBases>(acc, sh, use, consumer, row_local, col_local, lane);
                        run -= 2;
                        use += 2 * kInt8ChunkStages;
                    }
                    if (run == 1) {
                        int8_chained_step<1, kColumnBases>(acc, sh, use, consumer, row_local, col_local, lane);
                        use += kInt8ChunkStages;
                    }
                } else if (two_planes) {
                    const bool a_high = ((word.a_high >> (c % 64)) & 1u) != 0;
                    const int64_t at = int64_t(a_high ? m0 / kTileM : n0 / kTileN) * chunks + c;
                    const unsigned blocks = (a_high ? plan.a_high_blocks : plan.b_high_blocks)[at];
                    int8_two_plane_step<kColumnBases>(acc, sh, use, a_high, blocks, consumer, row_local, col_local, lane);
                    use += 2 * kInt8ChunkStages;
                    ++c;
                } else {  // chunk c block by block
                    for (int i = 0; i < kInt8ChunkStages; ++i, ++use) {
                        const MxGemmStage& st = stage_at(use);
                        int32_t part0[64], part1[64];
                        stage_block_by_block(
                            part0, part1, [&](int32_t(&p)[64], int kb) { issue_int8_block(p, st, consumer, kb); },
                            [&](int32_t(&p)[64], int kb) { promote_int8_block(acc, p, st, kb, row_local, col_local); });
                        release_stage(&sh.empty[use % kStages], lane);
                    }
                    ++c;
                }
            }
        } else {
            for (int ks = 0; ks < k_stages; ++ks, ++use) {
                const MxGemmStage& st = stage_at(use);
                float part0[64], part1[64];
                stage_block_by_block(
                    part0, part1, [&](float(&p)[64], int kb) { issue_block(p, st, consumer, kb); },
                    [&](float(&p)[64], int kb) { promote_block(acc, p, st, folded, kb, row_local, col_local); });
                release_stage(&sh.empty[use % kStages], lane);
            }
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int col = n0 + 8 * j + col_local;
            store_pair(c_f32, c_bf16, beta, m, n, m0 + row_local, col, acc[4 * j + 0], acc[4 * j + 1]);
            store_pair(c_f32, c_bf16, beta, m, n, m0 + row_local + 8, col, acc[4 * j + 2], acc[4 * j + 3]);
        }
    }
}

// The scale bytes of one operand ([lines][k_blocks], row-major) rearranged into the chunks the producer copies
// whole: chunk (tile, stage) = 128 lines × the stage's 4 blocks, [line][block], 512 contiguous bytes. Lines past
// the operand and blocks past K get 127 (factor 1: their codes are TMA's zero fill, so they add 0). One thread
// per (chunk, line): 4 bytes read (one 32-bit load when aligned), one 32-bit store. Napkin math: 8192 × 8192
// MXFP4 has 2 MB of scales → ~1 µs of DRAM traffic, plus a launch.
__global__ void staged_scales_kernel(const uint8_t* __restrict__ scales, int lines, int k_blocks, int k_stages, int64_t words,
                                     uint32_t* __restrict__ chunks) {
    for (int64_t w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += int64_t(gridDim.x) * blockDim.x) {
        const int line_in_tile = int(w % kTileM);
        const int64_t chunk = w / kTileM;
        const int ks = int(chunk % k_stages), tile = int(chunk / k_stages);
        const int line = tile * kTileM + line_in_tile, kb0 = ks * kBlocksPerStage;
        uint32_t v = 0x7F7F7F7Fu;
        if (line < lines) {
            const uint8_t* p = scales + int64_t(line) * k_blocks + kb0;
            if (kb0 + kBlocksPerStage <= k_blocks && (reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
                v = *reinterpret_cast<const uint32_t*>(p);
            } else {
                for (int i = 0; i < kBlocksPerStage && kb0 + i < k_blocks; ++i)
                    v = (v & ~(0xFFu << (8 * i))) | (uint32_t(p[i]) << (8 * i));
            }
        }
        chunks[w] = v;
    }
}

// ---------------------------------------------------------------------------------------------------
// The CUDA-core kernel (devices without sm_90a, TMA switched off): the same per-block math — each block's
// dot product of the unscaled element values in FP32 (exact for E2M1), then acc += P · (fa · fb).
// 16 × 16 threads, one output each; per MX block the CTA stages 16 rows of A and 16 of B as FP32.

constexpr int kSimtTile = 16;

__device__ __forceinline__ float element_value(const uint8_t* codes, MxElement e, int64_t line, int64_t k, int64_t i) {
    if (e == MxElement::e2m1) {
        const uint32_t byte = codes[line * (k / 2) + i / 2];
        return decode_element(element_spec(ElementType::e2m1), (i & 1) ? byte >> 4 : byte & 0xFu);
    }
    return decode_element(element_spec(ElementType::e4m3), codes[line * k + i]);
}

__global__ void mx_gemm_simt_kernel(MxGemmOperand a, MxGemmOperand b, int m, int n, int k_blocks, float* c_f32, __nv_bfloat16* c_bf16,
                                    float beta) {
    __shared__ float a_vals[kSimtTile][kMxBlock + 1], b_vals[kSimtTile][kMxBlock + 1];
    __shared__ float a_fac[kSimtTile], b_fac[kSimtTile];
    const int tx = int(threadIdx.x), ty = int(threadIdx.y), tid = ty * kSimtTile + tx;
    const int m0 = int(blockIdx.y) * kSimtTile, n0 = int(blockIdx.x) * kSimtTile;
    const int64_t k = int64_t(k_blocks) * kMxBlock;
    float acc = 0.0f;
    for (int kb = 0; kb < k_blocks; ++kb) {
        for (int i = tid; i < kSimtTile * kMxBlock; i += kSimtTile * kSimtTile) {
            const int line = i / kMxBlock, e = i % kMxBlock;
            const int64_t at = int64_t(kb) * kMxBlock + e;
            a_vals[line][e] = m0 + line < m ? element_value(a.codes, a.element, m0 + line, k, at) : 0.0f;
            b_vals[line][e] = n0 + line < n ? element_value(b.codes, b.element, n0 + line, k, at) : 0.0f;
        }
        if (tid < kSimtTile) a_fac[tid] = block_factor(a.scales, m0 + tid, m, kb, k_blocks);
        else if (tid < 2 * kSimtTile) b_fac[tid - kSimtTile] = block_factor(b.scales, n0 + tid - kSimtTile, n, kb, k_blocks);
        __syncthreads();
        float part = 0.0f;
#pragma unroll
        for (int e = 0; e < kMxBlock; ++e) part = __fmaf_rn(a_vals[ty][e], b_vals[tx][e], part);
        acc = __fmaf_rn(part, a_fac[ty] * b_fac[tx], acc);
        __syncthreads();
    }
    const int row = m0 + ty, col = n0 + tx;
    if (row >= m || col >= n) return;
    const int64_t at = int64_t(row) * n + col;
    if (c_f32) c_f32[at] = beta != 0.0f ? with_old(acc, beta, c_f32[at]) : acc;
    else c_bf16[at] = __float2bfloat16_rn(acc);
}

// C = beta · C (an empty product with beta): 0 + beta · old, as the store does it.
__global__ void scale_output_kernel(float* c, int64_t n, float beta) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        c[i] = with_old(0.0f, beta, c[i]);
}

// ---------------------------------------------------------------------------------------------------
// Launcher pieces.

void check_operand(const MxGemmOperand& op, const char* name) {
    if (op.element != MxElement::e2m1 && op.element != MxElement::e4m3)
        cuda_usage_error(std::string("mx_gemm_fp8: operand ") + name + " must be MXFP4 (e2m1) or MXFP8 (e4m3), got " +
                         mx_element_name(op.element));
    if (op.codes == nullptr || op.scales == nullptr)
        cuda_usage_error(std::string("mx_gemm_fp8: operand ") + name + " has no codes or no scales (null device pointer)");
    cuda_check_aligned(op.codes, 16, name, "mx_gemm_fp8");
}

// B's E4M3 bytes with its column scales folded per tile-block (MXFP4 B only), the tile references in
// *tile_ref; the count of tile-blocks left unfolded in *unfolded (zeroed first).
const uint8_t* folded_b_codes(const MxGemmOperand& b, int64_t n, int64_t k, MxGemmScratch& scratch, cudaStream_t stream) {
    const int k_blocks = int(k / kMxBlock), tiles = int((n + kTileN - 1) / kTileN);
    const int ref_stride = (k_blocks + kBlocksPerStage - 1) / kBlocksPerStage * kBlocksPerStage;  // whole stages per tile
    uint8_t* out = scratch.b_e4m3.grow(size_t(n * k));
    int32_t* refs = scratch.b_tile_ref.grow(size_t(tiles) * size_t(ref_stride));
    unsigned* unfolded = scratch.unfolded.grow(1);
    CUDA_CHECK(cudaMemsetAsync(unfolded, 0, sizeof(unsigned), stream));
    static const E2m1ShiftedAsE4m3 table = e2m1_shifted_table();
    const dim3 grid(unsigned(tiles), unsigned((k_blocks + kFoldBlocksPerCta - 1) / kFoldBlocksPerCta));
    fold_b_kernel<<<grid, kFoldThreads, 0, stream>>>(b.codes, b.scales, int(n), k_blocks, out, refs, ref_stride, unfolded, table);
    CUDA_CHECK(cudaGetLastError());
    return out;
}

// Both MXFP4 operands packed for the INT8 path: int8 bytes in a_e4m3 / b_e4m3, effective exponents in the scale
// chunks, the per-(tile, chunk) bits, (two planes) the high planes with their bases, and (B per line) B's chunk
// factors as FP32; k_stages a multiple of
// kInt8ChunkStages (the padding is TMA's zero fill). s.unfolded: [0] tile-chunks outside, [1] with two planes.
void pack_int8_operands(const MxGemmOperand& a, const MxGemmOperand& b, int64_t m, int64_t n, int64_t k, int k_stages,
                        bool b_per_line, MxGemmScratch& s, cudaStream_t stream) {
    const int k_blocks = int(k / kMxBlock);
    unsigned* counts = s.unfolded.grow(2);
    CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned), stream));
    const int words = int8_chunk_words(k_stages);
    const bool two_planes = !s.single_plane;
    auto pack = [&](const MxGemmOperand& op, int64_t lines, DeviceBuffer<uint8_t>& values, DeviceBuffer<uint8_t>& high,
                    DeviceBuffer<uint8_t>& chunks, DeviceBuffer<uint8_t>& base_chunks, DeviceBuffer<unsigned long long>& ok,
                    DeviceBuffer<unsigned long long>& two, DeviceBuffer<uint8_t>& high_blocks, bool per_line,
                    float* column_factors) {
        const int tiles = int((lines + kTileM - 1) / kTileM);
        const size_t chunk_bytes = size_t(tiles) * size_t(k_stages) * kScaleChunkBytes, bit_words = size_t(tiles) * size_t(words);
        uint8_t* out = values.grow(size_t(lines * k));
        uint8_t* ch = chunks.grow(chunk_bytes);
        uint8_t* hi = two_planes ? high.grow(size_t(lines * k)) : nullptr;
        uint8_t* bases = two_planes ? base_chunks.grow(chunk_bytes) : nullptr;
        uint8_t* blocks = two_planes ? high_blocks.grow(size_t(tiles) * size_t(k_stages / kInt8ChunkStages)) : nullptr;
        unsigned long long* ok_bits = ok.grow(bit_words);
        unsigned long long* two_bits = two.grow(bit_words);
        CUDA_CHECK(cudaMemsetAsync(ok_bits, 0xFF, sizeof(unsigned long long) * bit_words, stream));
        CUDA_CHECK(cudaMemsetAsync(two_bits, 0, sizeof(unsigned long long) * bit_words, stream));
        const dim3 grid(unsigned(tiles), unsigned((k_stages + kPackStagesPerCta - 1) / kPackStagesPerCta));
        const auto kernel = per_line ? &pack_int8_kernel<true> : &pack_int8_kernel<false>;
        kernel<<<grid, kPackThreads, 0, stream>>>(op.codes, op.scales, int(lines), k_blocks, k_stages, two_planes, out, hi, ch, bases,
                                                  column_factors, blocks, ok_bits, two_bits, words, counts);
        CUDA_CHECK(cudaGetLastError());
    };
    pack(a, m, s.a_e4m3, s.a_high, s.a_scale_chunks, s.a_base_chunks, s.a_chunk_ok, s.a_two_planes, s.a_high_blocks, true, nullptr);
    const size_t factors = size_t((n + kTileN - 1) / kTileN) * size_t(k_stages / kInt8ChunkStages) * kTileN;
    pack(b, n, s.b_e4m3, s.b_high, s.b_scale_chunks, s.b_base_chunks, s.b_chunk_ok, s.b_two_planes, s.b_high_blocks, b_per_line,
         b_per_line ? s.b_column_factors.grow(factors) : nullptr);
}

// Which schedule the wgmma kernel runs for these element types under `fold` (the INT8 stages need MXFP4 on both
// sides; B's folding needs MXFP4 B), and how many stages of kStageK it multiplies (the INT8 path whole chunks).
struct WgmmaSchedule {
    bool int8 = false, folded = false, column_bases = false;
    int k_stages = 0;
};

WgmmaSchedule wgmma_schedule(MxElement a, MxElement b, int64_t k, MxGemmFold fold) {
    WgmmaSchedule w;
    const bool int8_fold = fold == MxGemmFold::int8_stages || fold == MxGemmFold::int8_stages_columns;
    w.int8 = int8_fold && a == MxElement::e2m1 && b == MxElement::e2m1;
    w.column_bases = w.int8 && fold == MxGemmFold::int8_stages_columns;
    w.folded = (fold == MxGemmFold::b_columns || int8_fold) && !w.int8 && b == MxElement::e2m1;
    const int k_blocks = int(k / kMxBlock);
    w.k_stages = (k_blocks + kBlocksPerStage - 1) / kBlocksPerStage;
    if (w.int8) w.k_stages = (w.k_stages + kInt8ChunkStages - 1) / kInt8ChunkStages * kInt8ChunkStages;
    return w;
}

void launch_wgmma(const MxGemmOperand& a, const MxGemmOperand& b, int64_t m, int64_t n, int64_t k, float* c_f32,
                  __nv_bfloat16* c_bf16, float beta, cudaStream_t stream, MxGemmScratch* scratch, MxGemmFold fold) {
    MxGemmScratch local;  // freed at return: its destructors wait for the device (only callers without scratch)
    MxGemmScratch& s = scratch ? *scratch : local;
    const WgmmaSchedule schedule = wgmma_schedule(a.element, b.element, k, fold);
    const bool int8 = schedule.int8, folded = schedule.folded;
    const int k_blocks = int(k / kMxBlock), k_stages = schedule.k_stages;
    const uint8_t *a8 = nullptr, *b8 = nullptr, *a_chunks = nullptr, *b_chunks = nullptr;
    if (int8) {
        pack_int8_operands(a, b, m, n, k, k_stages, schedule.column_bases, s, stream);
        a8 = s.a_e4m3.data();
        b8 = s.b_e4m3.data();
        a_chunks = s.a_scale_chunks.data();
        b_chunks = s.b_scale_chunks.data();
    } else {
        a8 = a.element == MxElement::e4m3 ? a.codes : s.a_e4m3.grow(size_t(m * k));
        if (a.element == MxElement::e2m1) mx_expand_e2m1_to_e4m3_cuda(a.codes, m, k, const_cast<uint8_t*>(a8), stream);
        if (folded) {
            b8 = folded_b_codes(b, n, k, s, stream);
        } else if (b.element == MxElement::e4m3) {
            b8 = b.codes;
        } else {
            b8 = s.b_e4m3.grow(size_t(n * k));
            mx_expand_e2m1_to_e4m3_cuda(b.codes, n, k, const_cast<uint8_t*>(b8), stream);
        }
        if (!folded && s.unfolded.size() > 0) CUDA_CHECK(cudaMemsetAsync(s.unfolded.data(), 0, sizeof(unsigned), stream));
        if (s.unfolded.size() > 1) CUDA_CHECK(cudaMemsetAsync(s.unfolded.data() + 1, 0, sizeof(unsigned), stream));  // no planes
        auto stage_scales = [&](const uint8_t* scales, int64_t lines, DeviceBuffer<uint8_t>& buf) -> const uint8_t* {
            const int64_t words = (lines + kTileM - 1) / kTileM * k_stages * kTileM;
            uint8_t* out = buf.grow(size_t(words) * 4);
            const int64_t wanted = (words + 255) / 256, limit = int64_t(cuda_multiprocessor_count()) * 16;
            staged_scales_kernel<<<unsigned(wanted < limit ? wanted : limit), 256, 0, stream>>>(
                scales, int(lines), k_blocks, k_stages, words, reinterpret_cast<uint32_t*>(out));
            CUDA_CHECK(cudaGetLastError());
            return out;
        };
        a_chunks = stage_scales(a.scales, m, s.a_scale_chunks);
        b_chunks = stage_scales(b.scales, n, s.b_scale_chunks);
    }
    const CUtensorMap a_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, a8, uint64_t(k), uint64_t(m), uint64_t(k), kStageK,
                                                 kTileM, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap b_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, b8, uint64_t(k), uint64_t(n), uint64_t(k), kStageK,
                                                 kTileN, CU_TENSOR_MAP_SWIZZLE_128B);
    const TileGrid grid{int((m + kTileM - 1) / kTileM), int((n + kTileN - 1) / kTileN)};
    const int ctas = grid.count() < cuda_multiprocessor_count() ? grid.count() : cuda_multiprocessor_count();
    const int32_t* tile_ref = folded ? s.b_tile_ref.data() : nullptr;
    if (int8) {
        Int8ChunkPlan plan;
        plan.a_ok = s.a_chunk_ok.data();
        plan.b_ok = s.b_chunk_ok.data();
        plan.a_two = s.a_two_planes.data();
        plan.b_two = s.b_two_planes.data();
        plan.words = int8_chunk_words(k_stages);
        if (schedule.column_bases) plan.b_factors = s.b_column_factors.data();
        CUtensorMap a_high_map = a_map, b_high_map = b_map;  // single plane: never loaded
        if (!s.single_plane) {
            plan.a_base = s.a_base_chunks.data();
            plan.b_base = s.b_base_chunks.data();
            plan.a_high_blocks = s.a_high_blocks.data();
            plan.b_high_blocks = s.b_high_blocks.data();
            a_high_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, s.a_high.data(), uint64_t(k), uint64_t(m), uint64_t(k),
                                            kStageK, kTileM, CU_TENSOR_MAP_SWIZZLE_128B);
            b_high_map = cuda_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, s.b_high.data(), uint64_t(k), uint64_t(n), uint64_t(k),
                                            kStageK, kTileN, CU_TENSOR_MAP_SWIZZLE_128B);
        }
        const auto kernel = schedule.column_bases ? &mx_gemm_wgmma_kernel<true, true> : &mx_gemm_wgmma_kernel<true, false>;
        cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kSharedBytes);
        kernel<<<ctas, kThreads, kSharedBytes, stream>>>(a_map, b_map, a_high_map, b_high_map, a_chunks, b_chunks, nullptr, plan,
                                                         int(m), int(n), k_stages, c_f32, c_bf16, beta);
    } else {
        cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(&mx_gemm_wgmma_kernel<false, false>), kSharedBytes);
        mx_gemm_wgmma_kernel<false, false><<<ctas, kThreads, kSharedBytes, stream>>>(a_map, b_map, a_map, b_map, a_chunks, b_chunks,
                                                                                     tile_ref, Int8ChunkPlan{}, int(m), int(n),
                                                                                     k_stages, c_f32, c_bf16, beta);
    }
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void mx_expand_e2m1_to_e4m3_cuda(const uint8_t* codes, int64_t rows, int64_t k, uint8_t* e4m3, cudaStream_t stream) {
    if (rows < 0 || k < 0 || k % kMxBlock != 0)
        cuda_input_error("mx_expand_e2m1_to_e4m3: K must be a multiple of 32, got " + std::to_string(k) + " (rows " +
                         std::to_string(rows) + ")");
    const int64_t chunks = rows * k / 16;  // 8 packed bytes → 16 E4M3 bytes
    if (chunks == 0) return;
    cuda_check_aligned(codes, 16, "codes", "mx_expand_e2m1_to_e4m3");
    cuda_check_aligned(e4m3, 16, "e4m3", "mx_expand_e2m1_to_e4m3");
    const int64_t wanted = (chunks + 255) / 256, limit = int64_t(cuda_multiprocessor_count()) * 16;
    static const E2m1AsE4m3 table = e2m1_as_e4m3_table();
    expand_e2m1_kernel<<<unsigned(wanted < limit ? wanted : limit), 256, 0, stream>>>(reinterpret_cast<const uint2*>(codes),
                                                                                     reinterpret_cast<uint4*>(e4m3), chunks, table);
    CUDA_CHECK(cudaGetLastError());
}

void mx_gemm_fp8_cuda(const MxGemmOperand& a, const MxGemmOperand& b, int64_t m, int64_t n, int64_t k, float* c_f32,
                      __nv_bfloat16* c_bf16, cudaStream_t stream, MxGemmScratch* scratch, MxGemmFold fold, float beta) {
    constexpr int64_t kLimit = int64_t(1) << 31;
    if (m < 0 || n < 0 || k < 0 || m >= kLimit || n >= kLimit || k >= kLimit)
        cuda_input_error("mx_gemm_fp8: M, N, K must lie in [0, 2^31), got M " + std::to_string(m) + ", N " + std::to_string(n) +
                         ", K " + std::to_string(k));
    if (k % kMxBlock != 0)
        cuda_input_error("mx_gemm_fp8: K must be a multiple of the MX block (32), got K " + std::to_string(k) +
                         "; pad the reduction dimension with zero blocks");
    if ((c_f32 == nullptr) == (c_bf16 == nullptr))
        cuda_usage_error("mx_gemm_fp8: pass exactly one output (c_f32 or c_bf16)");
    if (beta != 0.0f && c_f32 == nullptr) cuda_usage_error("mx_gemm_fp8: beta needs the FP32 output");
    if (m == 0 || n == 0) return;
    if (k == 0 && beta != 0.0f) {
        const int64_t count = m * n, wanted = (count + 255) / 256, limit = int64_t(cuda_multiprocessor_count()) * 16;
        scale_output_kernel<<<unsigned(wanted < limit ? wanted : limit), 256, 0, stream>>>(c_f32, count, beta);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    if (k == 0) {  // an empty sum: zeros (+0 is all-zero bits in FP32 and BF16)
        const size_t bytes = size_t(m * n) * (c_f32 ? sizeof(float) : sizeof(__nv_bfloat16));
        CUDA_CHECK(cudaMemsetAsync(c_f32 ? static_cast<void*>(c_f32) : static_cast<void*>(c_bf16), 0, bytes, stream));
        return;
    }
    check_operand(a, "A");
    check_operand(b, "B");
    cuda_check_aligned(c_f32 ? static_cast<const void*>(c_f32) : static_cast<const void*>(c_bf16), 16, "C", "mx_gemm_fp8");
    if (((m + kTileM - 1) / kTileM) * ((n + kTileN - 1) / kTileN) >= kLimit)
        cuda_input_error("mx_gemm_fp8: M " + std::to_string(m) + " x N " + std::to_string(n) + " has too many 128 x 128 tiles");
    if (cuda_tma_usable()) {
        launch_wgmma(a, b, m, n, k, c_f32, c_bf16, beta, stream, scratch, fold);
        return;
    }
    if ((m + kSimtTile - 1) / kSimtTile > 65535)
        cuda_input_error("mx_gemm_fp8: M " + std::to_string(m) + " too large for the CUDA-core kernel (at most 65535 · 16 rows)");
    const dim3 grid(unsigned((n + kSimtTile - 1) / kSimtTile), unsigned((m + kSimtTile - 1) / kSimtTile));
    mx_gemm_simt_kernel<<<grid, dim3(kSimtTile, kSimtTile), 0, stream>>>(a, b, int(m), int(n), int(k / kMxBlock), c_f32, c_bf16,
                                                                       beta);
    CUDA_CHECK(cudaGetLastError());
}

MxGemmWindowGeometry mx_gemm_fp8_window_geometry(int64_t m, int64_t n, int64_t k, MxElement a, MxElement b, MxGemmFold fold) {
    MxGemmWindowGeometry g;
    if (m <= 0 || n <= 0 || k <= 0 || !cuda_tma_usable()) return g;  // nothing launched, or the CUDA-core kernel
    const WgmmaSchedule schedule = wgmma_schedule(a, b, k, fold);
    const int64_t tiles_a = (m + kTileM - 1) / kTileM, tiles_b = (n + kTileN - 1) / kTileN;
    if (schedule.int8) {
        g.units = (tiles_a + tiles_b) * (schedule.k_stages / kInt8ChunkStages);  // pack_int8_kernel's chunks
        g.row_tiles = tiles_a;
        g.column_tiles = tiles_b;
        g.chunks = schedule.k_stages / kInt8ChunkStages;
        g.chunk_words = int8_chunk_words(schedule.k_stages);
    } else if (schedule.folded) {
        g.units = tiles_b * (k / kMxBlock);  // fold_b_kernel's tile-blocks (the padding past K never counts)
    }
    return g;
}

namespace {
unsigned scratch_count(const MxGemmScratch& scratch, size_t index) {
    if (scratch.unfolded.size() <= index) return 0;
    unsigned count = 0;
    CUDA_CHECK(cudaMemcpy(&count, scratch.unfolded.data() + index, sizeof(unsigned), cudaMemcpyDeviceToHost));
    return count;
}
}  // namespace

unsigned mx_gemm_fp8_unfolded_blocks(const MxGemmScratch& scratch) { return scratch_count(scratch, 0); }
unsigned mx_gemm_fp8_two_plane_units(const MxGemmScratch& scratch) { return scratch_count(scratch, 1); }

}  // namespace lowbit
