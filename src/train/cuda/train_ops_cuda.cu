// train_ops_cuda.cu — the training engine's element-wise and row-wise kernels, forward and backward (contract in
// train_ops_cuda.cuh). All are memory-bound: each kernel carries the bytes it moves per element; its floor is
// those bytes at the H200's ~4.2 TB/s device copy (DESIGN.md). No float atomics anywhere: every sum runs in a
// fixed order that depends only on the shapes (not on the GPU), so a run is bit-identical to itself.
//
// Rounding contract against the CPU references (lowbit_cuda compiles with --fmad=false, the CPU with
// -ffp-contract=off; u = 2^-24, the FP32 unit roundoff):
//   rms_norm_forward_cuda   rms_norm_rows' arithmetic: FP64 Σx², r = float(1/√(Σx²/d + ε)), y = bf16((x·r)·w).
//                           Only the FP64 summation order differs: r bit-equal in practice (within 1 ulp), y
//                           within 1 BF16 ulp of bf16(CPU y).
//   rms_norm_backward_cuda  the row's Σ dy·w·x and the gain's Σ dy·x·r in FP64 like rms_norm_backward_rows, but
//                           with the saved FP32 r (the CPU recomputes r in FP64: they are ≤ ~u apart) and the dx
//                           update in FP32. The terms of Σ dy·w·x are the CPU's to the bit (dy·w and dy·x are exact
//                           in FP64, so (dy·x)·w = (dy·w)·x); only the order of the FP64 sums differs (as before:
//                           ≤ n·2^-53 of Σ|terms| for n terms, far below u).
//                           With a = r·dy·w, b = c·x, c = r³·mean(dy·w·x):
//                             |Δdx| ≤ 8u·(|a| + |b|) + 2u·|dx|,   |Δdw| ≤ 3u·Σ_rows |dy·x·r| + 2u·|dw|
//                           (dx: a carries 3 roundings, b 5, the difference 1, the CPU's own rounding 1, the add 1
//                           on each side; dw: r's u, then float(Σ) and the add on each side).
//   rope_bf16_cuda          bit-equal to apply_rope / apply_rope_backward on the BF16 values, rounded to BF16
//                           (the same products and sums; the inverse negates sin as apply_rope_backward does).
//   swiglu_*                the CPU's formulas in FP32 with CUDA's expf (≤ 2 ulp, glibc's < 1): a few FP32 ulps
//                           before the BF16 rounding, so within 1 BF16 ulp of bf16(CPU).
//   cross_entropy_cuda      FP32 max, terms expf(l − m) in FP32 (m: the running maximum of the thread), summed in
//                           FP64 and rescaled in FP64; lse = max + log Σ in FP64 (one CTA per row). The CPU
//                           takes every exponential in FP64. A term's relative error is ≤ 4u (expf) + u·|l − m|
//                           (the FP32 difference), and Σ_l p_l·|l − m| ≤ H(p) ≤ ln(vocab), so
//                           |Δloss| ≤ (4 + ln vocab)·u + u·|loss| — about one FP32 ulp of a loss near ln(vocab).
//                           dlogits: expf(l − float(lse)) (relative error ≤ ~(8 + |lse| + |l − lse|)·u ≪ BF16's
//                           2^-9), and for the target expm1f(float(l − lse)) (no cancellation in p − 1), times
//                           grad_scale, rounded to BF16: within one BF16 rounding of cross_entropy_backward.
//   embedding_backward_cuda bit-equal (each table element gets the same FP32 adds in the same order).
//   sum_to_double_cuda, sum_squares_cuda: FP64 terms (a square of an FP32 is exact in FP64), ≤ ⌈n/2^18⌉ terms
//                           per thread, then two fixed trees: relative error ≤ (n/2^18 + 20)·2^-53 of Σ|terms|.
//   adamw_step_cuda         bit-equal to AdamW::step (the same FP32 operations in the same order; IEEE division
//                           and square root, which nvcc keeps without --use_fast_math).
//   casts                   exact (BF16 rounds to nearest even).
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "train/cuda/train_ops_cuda.cuh"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/cuda/device_loads.cuh"
#include "core/cuda/device_math.cuh"

namespace lowbit {

namespace {

using cuda_detail::bf16x2_to_float;
using cuda_detail::kFullMask;
using cuda_detail::pack_bf16x2;
using cuda_detail::to_float;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// ---------------------------------------------------------------------------------------------------
// launch helpers and argument checks

// Blocks for a grid-stride loop over n work items.
unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20)); }

__device__ inline int64_t global_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t global_stride() { return int64_t(gridDim.x) * blockDim.x; }

void require(bool ok, const char* op, const std::string& what) {
    if (!ok) cuda_usage_error(std::string(op) + ": " + what);
}
void require_pointer(const void* p, const char* op, const char* name) {
    require(p != nullptr, op, std::string(name) + " is a null pointer");
}
void require_positive(int64_t v, const char* op, const char* name) {
    require(v > 0, op, std::string(name) + " must be positive, got " + std::to_string(v));
}
void require_grid(int64_t blocks, const char* op, const char* what) {
    require(blocks <= INT32_MAX, op, std::string("more than 2^31 − 1 ") + what);
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ---------------------------------------------------------------------------------------------------
// device helpers

// Butterfly sum over a warp: every lane ends with the same bits (a + b = b + a at each level).
__device__ inline double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}

// Σ of one value per thread of a CTA of kBlock threads, in a fixed order: the warp butterflies, then the warp
// totals in warp order (every thread adds them the same way, so every thread gets the same sum).
template <int kBlock>
__device__ double block_sum(double v, double* warp_totals) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = v;
    __syncthreads();
    double total = warp_totals[0];
    for (int w = 1; w < kBlock / 32; ++w) total += warp_totals[w];
    __syncthreads();  // warp_totals may be written again right after
    return total;
}

// 8 BF16 ↔ 8 floats through one 16-byte access (p 16-byte aligned). Plain loads, not __ldg: outputs may alias
// inputs (swiglu_backward).
__device__ inline void load8_bf16(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    bf16x2_to_float(u.x, v[0], v[1]);
    bf16x2_to_float(u.y, v[2], v[3]);
    bf16x2_to_float(u.z, v[4], v[5]);
    bf16x2_to_float(u.w, v[6], v[7]);
}
__device__ inline void store8_bf16(__nv_bfloat16* p, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(p) =
        uint4{pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7])};
}

// ---------------------------------------------------------------------------------------------------
// RMSNorm

// Rows of a CTA's row group: one warp per row.
constexpr int kRowsPerCta = kWarps;

// Forward: one warp per row (FP64 Σx² per lane, butterfly), then y = bf16((x·r)·w). Bytes per element: 4 read,
// 2 written (the second read of the row hits L1); with x_copy, 4 more written (the residual stream's copy that the
// projection after the norm accumulates into: cheaper here than a device copy, which reads x again).
__global__ void __launch_bounds__(kThreads)
rms_norm_forward_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t rows, int64_t d, float eps,
                        __nv_bfloat16* __restrict__ y, float* __restrict__ inv_rms, float* __restrict__ x_copy) {
    const int64_t r = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / 32;
    const int lane = int(threadIdx.x % 32);
    if (r >= rows) return;  // a whole warp leaves together
    const float* xr = x + r * d;
    double ss = 0.0;
    for (int64_t i = lane; i < d; i += 32) ss += double(xr[i]) * double(xr[i]);
    ss = warp_sum(ss);
    const float inv = float(1.0 / sqrt(ss / double(d) + double(eps)));
    if (lane == 0) inv_rms[r] = inv;
    for (int64_t i = lane; i < d; i += 32) {
        const float v = xr[i];
        y[r * d + i] = __float2bfloat16_rn((v * inv) * w[i]);
        if (x_copy) x_copy[r * d + i] = v;
    }
}

// Backward, fallback for rows longer than the tiled kernel below takes (d > 8192 with 4-column units, > 2048 with
// 1-column ones). CTA b owns rows [b·kNormChunkRows, …) and walks them in groups of kRowsPerCta:
//   dx   warp k takes row k of the group: FP64 Σ dy·w·x by butterfly, then dx += r·(dy·w) − c·x in FP32;
//   dw   thread t owns columns t, t + 256, …: its FP64 partial (shared memory) adds dy·x·r of the group's rows
//        in row order. The two halves read the same rows, so the second touch hits L1; they share no data, so
//        no barrier. At the end the chunk's partials go to ws.partials[b, :], and rms_norm_gain_sum_kernel adds
//        the chunks in order.
// Bytes per element: x, dy 4 + 4 read, dx 4 + 4, dx_bf16 2; the partials add 16·d per 16 rows.
constexpr int64_t kNormChunkRows = 16;  // a multiple of kRowsPerCta

__global__ void __launch_bounds__(kThreads)
rms_norm_backward_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ inv_rms,
                         const float* __restrict__ dy, int64_t rows, int64_t d, float* __restrict__ dx,
                         __nv_bfloat16* __restrict__ dx_bf16, double* __restrict__ partials) {
    extern __shared__ double gain_partial[];  // [d]
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) gain_partial[i] = 0.0;
    const int64_t chunk_begin = int64_t(blockIdx.x) * kNormChunkRows;
    const int64_t chunk_end = rows < chunk_begin + kNormChunkRows ? rows : chunk_begin + kNormChunkRows;
    for (int64_t g = chunk_begin; g < chunk_end; g += kRowsPerCta) {
        const int64_t group_end = chunk_end < g + kRowsPerCta ? chunk_end : g + kRowsPerCta;
        const int64_t r = g + warp;
        if (r < group_end) {
            const float *xr = x + r * d, *dyr = dy + r * d;
            double dot = 0.0;
            for (int64_t i = lane; i < d; i += 32) dot += double(dyr[i]) * double(w[i]) * double(xr[i]);
            dot = warp_sum(dot);
            const float inv = inv_rms[r];
            const double inv_d = inv;
            const float c = float(inv_d * inv_d * inv_d * dot / double(d));
            float* dxr = dx + r * d;
            for (int64_t i = lane; i < d; i += 32) {
                const float v = dxr[i] + (inv * (dyr[i] * w[i]) - c * xr[i]);
                dxr[i] = v;
                if (dx_bf16) dx_bf16[r * d + i] = __float2bfloat16_rn(v);
            }
        }
        for (int64_t i = threadIdx.x; i < d; i += kThreads) {
            double s = gain_partial[i];
            for (int64_t q = g; q < group_end; ++q) s += double(dy[q * d + i]) * double(x[q * d + i]) * double(inv_rms[q]);
            gain_partial[i] = s;
        }
    }
    for (int64_t i = threadIdx.x; i < d; i += kThreads) partials[int64_t(blockIdx.x) * d + i] = gain_partial[i];
}

// Backward, tiled (the training shapes). A CTA of T threads (T = 32·⌈units/(32·kUnits)⌉ ≤ 512, a function of d
// only) covers one row at a time: thread t owns the units t + T·k (k < kUnits) of kWidth columns (kWidth = 4:
// 16-byte accesses, when d % 4 == 0 and the rows of x, dy, dx are 16-byte aligned; else 1), so its x, dy, dx stay
// in registers from the row's load to its update, and the dw partials of its columns never leave it. CTA b walks
// the rows [b·kTiledChunkRows, …) in order, with kDepth rows in registers (kDepth − 1 loads in flight while a row
// is reduced and updated; the wider tiles take fewer, to stay within 128 registers).
//   dx   the thread's FP64 Σ (dy·x)·w (dy·x is exact in FP64, so each term is the CPU's (dy·w)·x to the bit), the
//        warp butterflies, then the warps' sums in warp order (shared memory; one barrier per row, two slots
//        alternate), then dx += r·(dy·w) − c·x in FP32 as in the fallback;
//   dw   the thread's FP64 partial per column adds (dy·x)·r over the chunk's rows in row order, then goes to
//        ws.partials[b, :]; rms_norm_gain_sum_kernel adds the chunks in order.
// Bytes per element: x, dy 4 + 4 read, dx 4 + 4, dx_bf16 2: 18 (226 MB a call at 16 K × 768, 54 µs at 4.2 TB/s;
// 5.7 GB over the base step's 25 calls, 1.35 ms); w is read once per CTA and the partials add 16·d per
// kTiledChunkRows rows (0.3 %). Base shape: 512 CTAs of 192 threads, ~4 per SM, 2–3 rows (18–27 KB) in flight
// each: a load has ~2 rows' processing (its reduction's barrier and FP64 division) to arrive in.
// FP64 work per element: 2 conversions and 5 operations, ~10 µs of the FP64 pipes a call, hidden under the loads.
constexpr int kTiledMaxThreads = 512;
constexpr int kTiledMaxUnits = 4;
constexpr int64_t kTiledChunkRows = 32;

// kWidth consecutive floats at p + i (kWidth = 4: one 16-byte access; i a multiple of 4, p 16-byte aligned), zeros
// when i ≥ d. No __ldg: dx is read and written through it.
template <int kWidth>
__device__ inline void load_cols(const float* p, int64_t i, int64_t d, float* v) {
    if (i >= d) {
#pragma unroll
        for (int j = 0; j < kWidth; ++j) v[j] = 0.0f;
    } else if constexpr (kWidth == 4) {
        const float4 q = *reinterpret_cast<const float4*>(p + i);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
    } else {
        v[0] = p[i];
    }
}

// One row's values of a thread's columns.
template <int kCols>
struct NormRowTile {
    float x[kCols], dy[kCols], dx[kCols];
    float inv;
};

// Registers: at most 128 (512 threads); 80 for the 4-column tiles (the base shape), so that 4 CTAs of 192 fit an
// SM and all 512 of a 16 K-row call are resident at once (at 89, ptxas's choice, only 3 fit).
template <int kWidth, int kUnits, int kDepth>
__global__ void __maxnreg__(kWidth == 4 && kUnits == 1 ? 80 : 128)
rms_norm_backward_tiled_kernel(const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ inv_rms, const float* __restrict__ dy, int64_t rows,
                               int64_t d, float* __restrict__ dx, __nv_bfloat16* __restrict__ dx_bf16,
                               double* __restrict__ partials) {
    constexpr int kCols = kWidth * kUnits;
    __shared__ double warp_dots[2][kTiledMaxThreads / 32];
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
    int64_t col[kUnits];  // the first column of each unit (≥ d: the unit is past the row's end)
    float wf[kCols];
    double wd[kCols], gain[kCols];
#pragma unroll
    for (int k = 0; k < kUnits; ++k) {
        col[k] = (int64_t(threadIdx.x) + int64_t(blockDim.x) * k) * kWidth;
#pragma unroll
        for (int j = 0; j < kWidth; ++j)  // one by one: w (a slice of the flat parameters) need not be aligned
            wf[k * kWidth + j] = col[k] + j < d ? w[col[k] + j] : 0.0f;
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        wd[c] = wf[c];
        gain[c] = 0.0;
    }
    // Zeros past the row's end: they add nothing and are not stored.
    const auto load_row = [&](NormRowTile<kCols>& t, int64_t r) {
        t.inv = inv_rms[r];
#pragma unroll
        for (int k = 0; k < kUnits; ++k) {
            load_cols<kWidth>(x + r * d, col[k], d, t.x + k * kWidth);
            load_cols<kWidth>(dy + r * d, col[k], d, t.dy + k * kWidth);
            load_cols<kWidth>(dx + r * d, col[k], d, t.dx + k * kWidth);
        }
    };
    int slot = 0;
    const auto process_row = [&](const NormRowTile<kCols>& t, int64_t r) {
        const double inv_d = t.inv;
        double dot = 0.0;
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const double p = double(t.dy[c]) * double(t.x[c]);  // exact
            dot += p * wd[c];
            gain[c] += p * inv_d;
        }
        dot = warp_sum(dot);
        if (lane == 0) warp_dots[slot][warp] = dot;
        __syncthreads();
        double total = warp_dots[slot][0];
        for (int k = 1; k < n_warps; ++k) total += warp_dots[slot][k];
        slot ^= 1;  // the next row but one writes this slot only after every thread has passed the next row's barrier

        const float c_row = float(inv_d * inv_d * inv_d * total / double(d));
#pragma unroll
        for (int k = 0; k < kUnits; ++k) {
            if (col[k] >= d) continue;
            float v[kWidth];
#pragma unroll
            for (int j = 0; j < kWidth; ++j) {
                const int c = k * kWidth + j;
                v[j] = t.dx[c] + (t.inv * (t.dy[c] * wf[c]) - c_row * t.x[c]);
            }
            const int64_t at = r * d + col[k];
            if constexpr (kWidth == 4) {
                *reinterpret_cast<float4*>(dx + at) = float4{v[0], v[1], v[2], v[3]};
                if (dx_bf16) *reinterpret_cast<uint2*>(dx_bf16 + at) = uint2{pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3])};
            } else {
                dx[at] = v[0];
                if (dx_bf16) dx_bf16[at] = __float2bfloat16_rn(v[0]);
            }
        }
    };

    // kDepth rows in registers: row r + kDepth is loaded as soon as row r is done, so each load has kDepth − 1
    // rows' processing to arrive in (the tiles are named statically: the loop over s is unrolled).
    const int64_t chunk_begin = int64_t(blockIdx.x) * kTiledChunkRows;
    const int64_t chunk_end = rows < chunk_begin + kTiledChunkRows ? rows : chunk_begin + kTiledChunkRows;
    NormRowTile<kCols> tiles[kDepth];
#pragma unroll
    for (int s = 0; s < kDepth; ++s)
        if (chunk_begin + s < chunk_end) load_row(tiles[s], chunk_begin + s);
    for (int64_t r = chunk_begin; r < chunk_end; r += kDepth) {
#pragma unroll
        for (int s = 0; s < kDepth; ++s) {
            if (r + s < chunk_end) {  // the same for the whole CTA: its barrier is reached by all or none
                process_row(tiles[s], r + s);
                if (r + s + kDepth < chunk_end) load_row(tiles[s], r + s + kDepth);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < kUnits; ++k)
        if (col[k] < d)
#pragma unroll
            for (int j = 0; j < kWidth; ++j) partials[int64_t(blockIdx.x) * d + col[k] + j] = gain[k * kWidth + j];
}

// dw[i] += float(Σ_chunks partials[chunk, i]): a CTA of 1024 threads takes 32 columns (lane = column), warp k sums
// chunks k, k + 32, … in order and the 32 warp sums are added in warp order. Reads 8·n_chunks bytes per column
// (coalesced, mostly from L2: 3 MB at 768 × 512 chunks), up to 8 loads in flight per thread.
constexpr int kGainSumWarps = 32;

__global__ void __launch_bounds__(kGainSumWarps * 32)
rms_norm_gain_sum_kernel(const double* __restrict__ partials, int64_t n_chunks, int64_t d, float* __restrict__ dw) {
    __shared__ double warp_sums[kGainSumWarps][32];
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    const int64_t i = int64_t(blockIdx.x) * 32 + lane;
    double s = 0.0;
    if (i < d) {
#pragma unroll 8
        for (int64_t chunk = warp; chunk < n_chunks; chunk += kGainSumWarps) s += partials[chunk * d + i];
    }
    warp_sums[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && i < d) {
        double total = warp_sums[0][lane];
        for (int k = 1; k < kGainSumWarps; ++k) total += warp_sums[k][lane];
        dw[i] += float(total);
    }
}

// ---------------------------------------------------------------------------------------------------
// RoPE

// (a, b) → (a·cos − b·sin, a·sin + b·cos), apply_rope's operations.
__device__ inline void rotate(float& a, float& b, float c, float s) {
    const float a0 = a, b0 = b;
    a = a0 * c - b0 * s;
    b = a0 * s + b0 * c;
}

// One thread per (row, head, unit). kTwoPairs (head_dim % 4 == 0): a unit is the pairs i, i + 1 (i even), one
// 8-byte access for adjacent pairs (elements 2i … 2i + 3), two 4-byte ones for halves (i, i + 1 and their
// partners at + head_dim/2); else a unit is one pair, two 2-byte accesses. Bytes per element: 2 read, 2 written
// (the cos/sin rows are shared by every head and sequence: L1/L2).
// Both kernels read row r of x at x + r·x_ld and write it at y + r·y_ld (y may be x, with the same ld: in place).
template <bool kTwoPairs>
__global__ void rope_bf16_kernel(const __nv_bfloat16* x, int64_t x_ld, __nv_bfloat16* y, int64_t y_ld, int64_t rows,
                                 int64_t n_tok, int64_t n_heads, int64_t head_dim, bool adjacent,
                                 const float* __restrict__ cos_t, const float* __restrict__ sin_t, float sin_sign) {
    const int64_t half = head_dim / 2, units = kTwoPairs ? half / 2 : half, per_row = n_heads * units;
    const int64_t n = rows * per_row;
    for (int64_t idx = global_index(); idx < n; idx += global_stride()) {
        const int64_t r = idx / per_row, rem = idx % per_row, h = rem / units, unit = rem % units;
        const int64_t pos = r % n_tok;
        const __nv_bfloat16* xh = x + r * x_ld + h * head_dim;
        __nv_bfloat16* yh = y + r * y_ld + h * head_dim;
        const float* cr = cos_t + pos * half;
        const float* sr = sin_t + pos * half;
        if constexpr (kTwoPairs) {
            const int64_t i = 2 * unit;
            const float c0 = cr[i], c1 = cr[i + 1], s0 = sin_sign * sr[i], s1 = sin_sign * sr[i + 1];
            float a0, b0, a1, b1;
            if (adjacent) {
                const uint2 v = *reinterpret_cast<const uint2*>(xh + 2 * i);
                bf16x2_to_float(v.x, a0, b0);
                bf16x2_to_float(v.y, a1, b1);
                rotate(a0, b0, c0, s0);
                rotate(a1, b1, c1, s1);
                *reinterpret_cast<uint2*>(yh + 2 * i) = uint2{pack_bf16x2(a0, b0), pack_bf16x2(a1, b1)};
            } else {
                bf16x2_to_float(*reinterpret_cast<const uint32_t*>(xh + i), a0, a1);
                bf16x2_to_float(*reinterpret_cast<const uint32_t*>(xh + half + i), b0, b1);
                rotate(a0, b0, c0, s0);
                rotate(a1, b1, c1, s1);
                *reinterpret_cast<uint32_t*>(yh + i) = pack_bf16x2(a0, a1);
                *reinterpret_cast<uint32_t*>(yh + half + i) = pack_bf16x2(b0, b1);
            }
        } else {
            const int64_t ia = adjacent ? 2 * unit : unit, ib = ia + (adjacent ? 1 : half);
            float a = to_float(xh[ia]), b = to_float(xh[ib]);
            rotate(a, b, cr[unit], sin_sign * sr[unit]);
            yh[ia] = __float2bfloat16_rn(a);
            yh[ib] = __float2bfloat16_rn(b);
        }
    }
}

// The training shapes (head_dim % 16 == 0, x and the tables 16-byte aligned): a thread rotates 8 pairs of one head
// of one token with 16-byte accesses — halves: elements i … i + 7 and their partners at + head_dim/2; adjacent:
// elements 2i … 2i + 15 — and 8 cos and sin (two float4 each, shared by every head and sequence: L1/L2). A CTA
// takes tok_per_cta positions of sequence blockIdx.y (+ gridDim.y, …): all 32-bit index math but the final
// offset, no division by the row count. Bytes per element: 2 read, 2 written (q at the base shape: 25 MB each way,
// 12 µs at 4.2 TB/s; k 4 µs; 48 calls a step: 0.38 ms).
__global__ void __launch_bounds__(kThreads)
rope_bf16_vec8_kernel(const __nv_bfloat16* x, int64_t x_ld, __nv_bfloat16* y, int64_t y_ld, int64_t n_seq, int n_tok,
                      int n_heads, int head_dim, bool adjacent, const float* __restrict__ cos_t,
                      const float* __restrict__ sin_t, float sin_sign, int tok_per_cta) {
    const int half = head_dim / 2, groups = half / 8, per_tok = n_heads * groups, items = tok_per_cta * per_tok;
    for (int64_t seq = blockIdx.y; seq < n_seq; seq += gridDim.y)
        for (int k = int(threadIdx.x); k < items; k += int(blockDim.x)) {
            const int tok_in_cta = k / per_tok, rem = k - tok_in_cta * per_tok, h = rem / groups, g = rem - h * groups;
            const int pos = int(blockIdx.x) * tok_per_cta + tok_in_cta;
            if (pos >= n_tok) break;  // k only grows
            const int64_t row = seq * n_tok + pos;
            const __nv_bfloat16* xh = x + row * x_ld + h * int64_t(head_dim);
            __nv_bfloat16* yh = y + row * y_ld + h * int64_t(head_dim);
            const float4* cr = reinterpret_cast<const float4*>(cos_t + int64_t(pos) * half + 8 * g);
            const float4* sr = reinterpret_cast<const float4*>(sin_t + int64_t(pos) * half + 8 * g);
            const float4 c0 = cr[0], c1 = cr[1], s0 = sr[0], s1 = sr[1];
            const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
            const float sn[8] = {sin_sign * s0.x, sin_sign * s0.y, sin_sign * s0.z, sin_sign * s0.w,
                                 sin_sign * s1.x, sin_sign * s1.y, sin_sign * s1.z, sin_sign * s1.w};
            float a[8], b[8];
            if (adjacent) {
                const __nv_bfloat16* p = xh + 16 * g;
                float lo[8], hi[8];
                load8_bf16(p, lo);
                load8_bf16(p + 8, hi);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    a[q] = lo[2 * q];
                    b[q] = lo[2 * q + 1];
                    a[q + 4] = hi[2 * q];
                    b[q + 4] = hi[2 * q + 1];
                }
#pragma unroll
                for (int q = 0; q < 8; ++q) rotate(a[q], b[q], c[q], sn[q]);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    lo[2 * q] = a[q];
                    lo[2 * q + 1] = b[q];
                    hi[2 * q] = a[q + 4];
                    hi[2 * q + 1] = b[q + 4];
                }
                store8_bf16(yh + 16 * g, lo);
                store8_bf16(yh + 16 * g + 8, hi);
            } else {
                load8_bf16(xh + 8 * g, a);
                load8_bf16(xh + 8 * g + half, b);
#pragma unroll
                for (int q = 0; q < 8; ++q) rotate(a[q], b[q], c[q], sn[q]);
                store8_bf16(yh + 8 * g, a);
                store8_bf16(yh + 8 * g + half, b);
            }
        }
}

// ---------------------------------------------------------------------------------------------------
// SwiGLU

// swiglu's and swiglu_backward's expressions, operation for operation.
__device__ inline float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ inline void swiglu_grads(float g, float u, float ds, float& dg, float& du) {
    const float sigma = 1.0f / (1.0f + expf(-g));
    du = ds * (g * sigma);
    dg = ds * u * (sigma * (1.0f + g * (1.0f - sigma)));
}

// Grid-stride over groups of 8 (16-byte accesses) when every pointer is 16-byte aligned, the rest one by one.
// Bytes per element: forward 4 read, 2 written; backward 6 read, 4 written.
__global__ void swiglu_forward_kernel(const __nv_bfloat16* __restrict__ gate, const __nv_bfloat16* __restrict__ up,
                                      int64_t n, bool vec8, __nv_bfloat16* __restrict__ out) {
    const int64_t n8 = vec8 ? n / 8 : 0;
    for (int64_t j = global_index(); j < n8; j += global_stride()) {
        float g[8], u[8], s[8];
        load8_bf16(gate + 8 * j, g);
        load8_bf16(up + 8 * j, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) s[k] = swiglu_value(g[k], u[k]);
        store8_bf16(out + 8 * j, s);
    }
    for (int64_t i = 8 * n8 + global_index(); i < n; i += global_stride())
        out[i] = __float2bfloat16_rn(swiglu_value(to_float(gate[i]), to_float(up[i])));
}

// No __restrict__: d_gate / d_up may be gate / up (each element is read before it is written, by one thread).
__global__ void swiglu_backward_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up,
                                       const __nv_bfloat16* d_out, int64_t n, bool vec8, __nv_bfloat16* d_gate,
                                       __nv_bfloat16* d_up) {
    const int64_t n8 = vec8 ? n / 8 : 0;
    for (int64_t j = global_index(); j < n8; j += global_stride()) {
        float g[8], u[8], ds[8], dg[8], du[8];
        load8_bf16(gate + 8 * j, g);
        load8_bf16(up + 8 * j, u);
        load8_bf16(d_out + 8 * j, ds);
#pragma unroll
        for (int k = 0; k < 8; ++k) swiglu_grads(g[k], u[k], ds[k], dg[k], du[k]);
        store8_bf16(d_gate + 8 * j, dg);
        store8_bf16(d_up + 8 * j, du);
    }
    for (int64_t i = 8 * n8 + global_index(); i < n; i += global_stride()) {
        float dg, du;
        swiglu_grads(to_float(gate[i]), to_float(up[i]), to_float(d_out[i]), dg, du);
        d_gate[i] = __float2bfloat16_rn(dg);
        d_up[i] = __float2bfloat16_rn(du);
    }
}

// ---------------------------------------------------------------------------------------------------
// cross entropy

// Σ exp(l − max) over the logits seen so far (none: max = −∞, sum = 0).
struct SoftmaxPartial {
    float max;
    double sum;
};

// exp(from − to) in FP64 (to ≥ from); 1 when equal, which also covers −∞ = −∞ and +∞ = +∞.
__device__ inline double rescale(float from, float to) { return from == to ? 1.0 : exp(double(from) - double(to)); }

__device__ inline SoftmaxPartial merge(const SoftmaxPartial& a, const SoftmaxPartial& b) {
    const float m = fmaxf(a.max, b.max);
    return {m, a.sum * rescale(a.max, m) + b.sum * rescale(b.max, m)};
}

// Adds a group of logits: at most one rescale per group. While the maximum is still −∞ (only −∞ or NaN seen),
// the terms are taken against 0 instead: −∞ gives 0 and NaN stays NaN (the row's loss is then NaN, as on the
// CPU), without evaluating −∞ − (−∞).
template <int kCount>
__device__ inline void absorb(SoftmaxPartial& st, const float (&l)[kCount]) {
    float group_max = l[0];
#pragma unroll
    for (int k = 1; k < kCount; ++k) group_max = fmaxf(group_max, l[k]);
    if (group_max > st.max) {
        st.sum *= rescale(st.max, group_max);
        st.max = group_max;
    }
    const float ref = st.max == -INFINITY ? 0.0f : st.max;
#pragma unroll
    for (int k = 0; k < kCount; ++k) st.sum += double(expf(l[k] - ref));
}

// One CTA per row, two passes over the logits: (max, Σexp) per thread (float4 groups when kVec4) merged by warp
// butterflies and then in warp order; the loss; then, when dlogits is wanted, the gradient. Bytes per element:
// 4 read (loss only); 8 read, 2 written with the gradient — 805 M logits (16 × 1024 rows × 49152) move 8 GB,
// ~1.9 ms at 4.2 TB/s.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads)
cross_entropy_kernel(const float* __restrict__ logits, const int32_t* __restrict__ targets, int64_t vocab,
                     float grad_scale, float* __restrict__ loss_rows, __nv_bfloat16* __restrict__ dlogits) {
    __shared__ float warp_max[kWarps];
    __shared__ double warp_sum_shared[kWarps];
    const int64_t r = blockIdx.x;
    const float* row = logits + r * vocab;
    SoftmaxPartial st{-INFINITY, 0.0};
    if constexpr (kVec4) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4  // several loads in flight per thread
        for (int64_t j = threadIdx.x; j < vocab / 4; j += kThreads) {
            const float4 q = row4[j];
            const float l[4] = {q.x, q.y, q.z, q.w};
            absorb(st, l);
        }
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
            const float l[1] = {row[i]};
            absorb(st, l);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const SoftmaxPartial other{__shfl_xor_sync(kFullMask, st.max, o), __shfl_xor_sync(kFullMask, st.sum, o)};
        st = merge(st, other);
    }
    if (threadIdx.x % 32 == 0) {
        warp_max[threadIdx.x / 32] = st.max;
        warp_sum_shared[threadIdx.x / 32] = st.sum;
    }
    __syncthreads();
    st = {warp_max[0], warp_sum_shared[0]};
    for (int w = 1; w < kWarps; ++w) st = merge(st, {warp_max[w], warp_sum_shared[w]});

    const int32_t t = targets[r];
    const double lse = double(st.max) + log(st.sum);
    if (threadIdx.x == 0) loss_rows[r] = float(lse - double(row[t]));  // the CPU's (max + log Σ) − l[t]
    if (!dlogits) return;
    const float lse_f = float(lse);
    const auto grad = [&](float l, int64_t i) {
        const float p_minus_onehot = i == t ? expm1f(float(double(l) - lse)) : expf(l - lse_f);
        return p_minus_onehot * grad_scale;
    };
    __nv_bfloat16* drow = dlogits + r * vocab;
    if constexpr (kVec4) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        for (int64_t j = threadIdx.x; j < vocab / 4; j += kThreads) {
            const float4 q = row4[j];
            const int64_t i = 4 * j;
            *reinterpret_cast<uint2*>(drow + i) =
                uint2{pack_bf16x2(grad(q.x, i), grad(q.y, i + 1)), pack_bf16x2(grad(q.z, i + 2), grad(q.w, i + 3))};
        }
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += kThreads) drow[i] = __float2bfloat16_rn(grad(row[i], i));
    }
}

// ---------------------------------------------------------------------------------------------------
// sums (two stages: kSumBlocks(n) CTAs write one FP64 partial each, one CTA adds them)

constexpr int kMaxSumBlocks = 1024;  // the second stage's CTA size
constexpr int64_t kSumItemsPerThread = 4;

// Depends on n only, so the order of the sum does too.
int sum_blocks(int64_t n) {
    return int(std::min<int64_t>(kMaxSumBlocks, (n + kThreads * kSumItemsPerThread - 1) / (kThreads * kSumItemsPerThread)));
}

template <bool kSquares>
__device__ inline double sum_term(float v) {
    return kSquares ? double(v) * double(v) : double(v);
}

// Bytes per element: 4 read (float4 when x is 16-byte aligned).
template <bool kSquares>
__global__ void __launch_bounds__(kThreads)
sum_partials_kernel(const float* __restrict__ x, int64_t n, bool vec4, double* __restrict__ partials) {
    __shared__ double warp_totals[kWarps];
    double s = 0.0;
    const int64_t n4 = vec4 ? n / 4 : 0;
#pragma unroll 4  // several loads in flight per thread
    for (int64_t j = global_index(); j < n4; j += global_stride()) {
        const float4 q = reinterpret_cast<const float4*>(x)[j];
        s += sum_term<kSquares>(q.x) + sum_term<kSquares>(q.y) + sum_term<kSquares>(q.z) + sum_term<kSquares>(q.w);
    }
    for (int64_t i = 4 * n4 + global_index(); i < n; i += global_stride()) s += sum_term<kSquares>(x[i]);
    s = block_sum<kThreads>(s, warp_totals);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kMaxSumBlocks)
sum_final_kernel(const double* __restrict__ partials, int n_partials, double* __restrict__ out) {
    __shared__ double warp_totals[kMaxSumBlocks / 32];
    const double s = block_sum<kMaxSumBlocks>(int(threadIdx.x) < n_partials ? partials[threadIdx.x] : 0.0, warp_totals);
    if (threadIdx.x == 0) *out = s;
}

template <bool kSquares>
void sum_cuda(const char* op, const float* x, int64_t n, double* out, SumWorkspace& ws, cudaStream_t stream) {
    require_pointer(x, op, "the input");
    require_pointer(out, op, "the output");
    require_positive(n, op, "the number of values");
    const int blocks = sum_blocks(n);
    double* partials = ws.partials.grow(size_t(blocks));
    sum_partials_kernel<kSquares><<<unsigned(blocks), kThreads, 0, stream>>>(x, n, aligned(x, 16), partials);
    CUDA_CHECK(cudaGetLastError());
    sum_final_kernel<<<1, kMaxSumBlocks, 0, stream>>>(partials, blocks, out);
    CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------------
// embedding backward

// CTA (i, column block): the rows of ids[i] added in plan order to d_table[ids[i]], kVec4: 4 columns per thread.
// Bytes: 4·d per row of d_hidden read, 8·d per distinct id (the table row read and written).
template <bool kVec4>
__global__ void embedding_backward_kernel(const int32_t* __restrict__ ids, const int32_t* __restrict__ offsets,
                                          const int32_t* __restrict__ rows, const float* __restrict__ d_hidden,
                                          int64_t d, float* __restrict__ d_table) {
    constexpr int kCols = kVec4 ? 4 : 1;
    const int64_t col = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * kCols;
    if (col >= d) return;
    const int64_t id = ids[blockIdx.x];
    const int32_t begin = offsets[blockIdx.x], end = offsets[blockIdx.x + 1];
    if constexpr (kVec4) {
        float4* dst = reinterpret_cast<float4*>(d_table + id * d + col);
        float4 acc = *dst;
        for (int32_t k = begin; k < end; ++k) {
            const float4 g = *reinterpret_cast<const float4*>(d_hidden + int64_t(rows[k]) * d + col);
            acc.x += g.x;
            acc.y += g.y;
            acc.z += g.z;
            acc.w += g.w;
        }
        *dst = acc;
    } else {
        float acc = d_table[id * d + col];
        for (int32_t k = begin; k < end; ++k) acc += d_hidden[int64_t(rows[k]) * d + col];
        d_table[id * d + col] = acc;
    }
}

// ---------------------------------------------------------------------------------------------------
// AdamW: AdamW::step's loop body, per element. Bytes per element: p, m, v 4 + 4 each, g 4, mask 1, bf16 copy 2: 31
// (142 M parameters on the base shape: 4.4 GB, 1.05 ms at 4.2 TB/s). kVec4 (every array aligned to its 4-element
// group): 4 elements per thread and iteration with 16-byte accesses (4 for the mask, 8 for the copy), ~70 bytes in
// flight per thread instead of 17; the last n % 4 elements one by one. The same FP32 operations per element either
// way, so bit-exact to AdamW::step on both paths.
struct AdamwElement {
    float p, m, v;
};
__device__ inline AdamwElement adamw_update(float p, float g, float m, float v, uint8_t decay_mask, const AdamwStepArgs& a) {
    const float gi = a.grad_scale * g;
    const float mi = a.beta1 * m + a.one_minus_beta1 * gi;
    const float vi = a.beta2 * v + a.one_minus_beta2 * (gi * gi);
    const float m_hat = mi / a.bias_correction1, v_hat = vi / a.bias_correction2;
    const float decay = decay_mask ? a.weight_decay : 0.0f;
    return {p - a.lr * (m_hat / (sqrtf(v_hat) + a.eps) + decay * p), mi, vi};
}

template <bool kVec4>
__global__ void __launch_bounds__(kThreads)
adamw_step_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ m,
                  float* __restrict__ v, const uint8_t* __restrict__ decay_mask, int64_t n, AdamwStepArgs a,
                  __nv_bfloat16* __restrict__ params_bf16) {
    const int64_t n4 = kVec4 ? n / 4 : 0;
    for (int64_t j = global_index(); j < n4; j += global_stride()) {
        const float4 p = reinterpret_cast<const float4*>(params)[j];
        const float4 g = __ldg(reinterpret_cast<const float4*>(grads) + j);
        const float4 mj = reinterpret_cast<const float4*>(m)[j];
        const float4 vj = reinterpret_cast<const float4*>(v)[j];
        const uint32_t mask = __ldg(reinterpret_cast<const uint32_t*>(decay_mask) + j);  // element k: byte k (little-endian)
        const AdamwElement e0 = adamw_update(p.x, g.x, mj.x, vj.x, uint8_t(mask), a);
        const AdamwElement e1 = adamw_update(p.y, g.y, mj.y, vj.y, uint8_t(mask >> 8), a);
        const AdamwElement e2 = adamw_update(p.z, g.z, mj.z, vj.z, uint8_t(mask >> 16), a);
        const AdamwElement e3 = adamw_update(p.w, g.w, mj.w, vj.w, uint8_t(mask >> 24), a);
        reinterpret_cast<float4*>(m)[j] = float4{e0.m, e1.m, e2.m, e3.m};
        reinterpret_cast<float4*>(v)[j] = float4{e0.v, e1.v, e2.v, e3.v};
        reinterpret_cast<float4*>(params)[j] = float4{e0.p, e1.p, e2.p, e3.p};
        if (params_bf16)
            reinterpret_cast<uint2*>(params_bf16)[j] = uint2{pack_bf16x2(e0.p, e1.p), pack_bf16x2(e2.p, e3.p)};
    }
    for (int64_t i = 4 * n4 + global_index(); i < n; i += global_stride()) {
        const AdamwElement e = adamw_update(params[i], grads[i], m[i], v[i], decay_mask[i], a);
        m[i] = e.m;
        v[i] = e.v;
        params[i] = e.p;
        if (params_bf16) params_bf16[i] = __float2bfloat16_rn(e.p);
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// launchers

void rms_norm_forward_cuda(const float* x, const float* w, int64_t rows, int64_t d, float eps, __nv_bfloat16* y,
                           float* inv_rms, cudaStream_t stream, float* x_copy) {
    const char* op = "rms_norm_forward_cuda";
    require_pointer(x, op, "x");
    require_pointer(w, op, "the gain w");
    require_pointer(y, op, "the output y");
    require_pointer(inv_rms, op, "the output inv_rms");
    require_positive(rows, op, "rows");
    require_positive(d, op, "the row length d");
    require(eps >= 0.0f, op, "eps must not be negative");
    const int64_t blocks = (rows + kRowsPerCta - 1) / kRowsPerCta;
    require_grid(blocks, op, "row groups");
    require(x_copy != x, op, "the copy of x must not be x itself");
    rms_norm_forward_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(x, w, rows, d, eps, y, inv_rms, x_copy);
    CUDA_CHECK(cudaGetLastError());
}

void rms_norm_backward_cuda(const float* x, const float* w, const float* inv_rms, const float* dy, int64_t rows,
                            int64_t d, float* dx, __nv_bfloat16* dx_bf16, float* dw, RmsNormBackwardWorkspace& ws,
                            cudaStream_t stream) {
    const char* op = "rms_norm_backward_cuda";
    require_pointer(x, op, "x");
    require_pointer(w, op, "the gain w");
    require_pointer(inv_rms, op, "inv_rms");
    require_pointer(dy, op, "dy");
    require_pointer(dx, op, "the output dx");
    require_pointer(dw, op, "the output dw");
    require(dx != dy && dx != x, op, "dx may not alias dy or x (it is updated while they are read)");
    require_positive(rows, op, "rows");
    require_positive(d, op, "the row length d");
    // The tiled kernel: units of 4 columns when the rows of x, dy, dx are 16-byte aligned, else of 1; the fewest
    // units per thread (1, 2 or 4) that keep the CTA within 512 threads. Longer rows take the fallback.
    const bool vec4 = d % 4 == 0 && aligned(x, 16) && aligned(dy, 16) && aligned(dx, 16) && (!dx_bf16 || aligned(dx_bf16, 8));
    const int64_t units = vec4 ? d / 4 : d;
    int units_per_thread = 1;
    while (units_per_thread < kTiledMaxUnits && units > int64_t(kTiledMaxThreads) * units_per_thread) units_per_thread *= 2;
    if (units <= int64_t(kTiledMaxThreads) * units_per_thread) {
        const int64_t chunks = (rows + kTiledChunkRows - 1) / kTiledChunkRows;
        require_grid(chunks, op, "row chunks");
        const int64_t per_thread = (units + units_per_thread - 1) / units_per_thread;
        const unsigned threads = unsigned((per_thread + 31) / 32 * 32);
        double* partials = ws.partials.grow(size_t(chunks * d));
        const auto launch = [&](auto kernel) {
            kernel<<<unsigned(chunks), threads, 0, stream>>>(x, w, inv_rms, dy, rows, d, dx, dx_bf16, partials);
            CUDA_CHECK(cudaGetLastError());
        };
        if (vec4) {
            if (units_per_thread == 1) launch(rms_norm_backward_tiled_kernel<4, 1, 3>);
            else if (units_per_thread == 2) launch(rms_norm_backward_tiled_kernel<4, 2, 2>);
            else launch(rms_norm_backward_tiled_kernel<4, 4, 1>);
        } else {
            if (units_per_thread == 1) launch(rms_norm_backward_tiled_kernel<1, 1, 3>);
            else if (units_per_thread == 2) launch(rms_norm_backward_tiled_kernel<1, 2, 3>);
            else launch(rms_norm_backward_tiled_kernel<1, 4, 3>);
        }
        rms_norm_gain_sum_kernel<<<unsigned((d + 31) / 32), kGainSumWarps * 32, 0, stream>>>(partials, chunks, d, dw);
        CUDA_CHECK(cudaGetLastError());
        return;
    }

    const int64_t chunks = (rows + kNormChunkRows - 1) / kNormChunkRows;
    require_grid(chunks, op, "row chunks");
    // The chunk's FP64 gain partials live in shared memory: d·8 bytes.
    const int64_t smem = d * int64_t(sizeof(double));
    if (smem > 48 * 1024) {
        const int64_t limit = cuda_shared_memory_per_block_optin();
        require(smem <= limit, op,
                "a row of " + std::to_string(d) + " needs " + std::to_string(smem) +
                    " bytes of shared memory for the gain's partial sums; this GPU allows " + std::to_string(limit) +
                    " per block (d ≤ " + std::to_string(limit / int64_t(sizeof(double))) + ")");
        cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(&rms_norm_backward_kernel), int(smem));
    }
    double* partials = ws.partials.grow(size_t(chunks * d));
    rms_norm_backward_kernel<<<unsigned(chunks), kThreads, size_t(smem), stream>>>(x, w, inv_rms, dy, rows, d, dx,
                                                                                   dx_bf16, partials);
    CUDA_CHECK(cudaGetLastError());
    rms_norm_gain_sum_kernel<<<unsigned((d + 31) / 32), kGainSumWarps * 32, 0, stream>>>(partials, chunks, d, dw);
    CUDA_CHECK(cudaGetLastError());
}

void rope_bf16_cuda(__nv_bfloat16* x, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                    const float* cos_t, const float* sin_t, bool inverse, cudaStream_t stream) {
    rope_bf16_strided_cuda(x, n_heads * head_dim, x, n_heads * head_dim, shape, n_heads, head_dim, pairing, cos_t, sin_t,
                           inverse, stream);
}

void rope_bf16_strided_cuda(const __nv_bfloat16* x, int64_t x_ld, __nv_bfloat16* y, int64_t y_ld, BatchShape shape,
                            int64_t n_heads, int64_t head_dim, RopePairing pairing, const float* cos_t, const float* sin_t,
                            bool inverse, cudaStream_t stream) {
    const char* op = "rope_bf16_cuda";
    require_pointer(x, op, "x");
    require_pointer(y, op, "y");
    require(x_ld >= n_heads * head_dim && y_ld >= n_heads * head_dim, op,
            "row strides must hold n_heads · head_dim elements, got " + std::to_string(x_ld) + " and " + std::to_string(y_ld));
    require(x != y || x_ld == y_ld, op, "in place needs one row stride");
    require_pointer(cos_t, op, "the cos table");
    require_pointer(sin_t, op, "the sin table");
    require_positive(shape.n_seq, op, "the number of sequences");
    require_positive(shape.n_tok, op, "the number of tokens");
    require_positive(n_heads, op, "the number of heads");
    require(head_dim > 0 && head_dim % 2 == 0, op, "head_dim must be positive and even, got " + std::to_string(head_dim));
    const bool adjacent = pairing == RopePairing::adjacent;
    const float sin_sign = inverse ? -1.0f : 1.0f;
    const int64_t per_tok = n_heads * (head_dim / 16);
    if (head_dim % 16 == 0 && aligned(x, 16) && aligned(y, 16) && x_ld % 8 == 0 && y_ld % 8 == 0 && aligned(cos_t, 16) &&
        aligned(sin_t, 16) && shape.n_tok <= INT32_MAX && n_heads * head_dim <= INT32_MAX) {
        // tok_per_cta positions × per_tok threads, at most kThreads (then per_tok > kThreads: one position, a loop)
        const int64_t tok_per_cta = std::min<int64_t>(std::max<int64_t>(1, kThreads / per_tok), shape.n_tok);
        const int64_t threads = std::min<int64_t>(tok_per_cta * per_tok, kThreads);
        const dim3 grid(unsigned((shape.n_tok + tok_per_cta - 1) / tok_per_cta),
                        unsigned(std::min<int64_t>(shape.n_seq, 65535)));
        rope_bf16_vec8_kernel<<<grid, unsigned(threads), 0, stream>>>(x, x_ld, y, y_ld, shape.n_seq, int(shape.n_tok),
                                                                      int(n_heads), int(head_dim), adjacent, cos_t, sin_t,
                                                                      sin_sign, int(tok_per_cta));
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    const bool two_pairs = head_dim % 4 == 0 && aligned(x, 8) && aligned(y, 8) && x_ld % 4 == 0 && y_ld % 4 == 0;
    const int64_t n = shape.rows() * n_heads * (head_dim / (two_pairs ? 4 : 2));
    if (two_pairs)
        rope_bf16_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(x, x_ld, y, y_ld, shape.rows(), shape.n_tok, n_heads,
                                                                     head_dim, adjacent, cos_t, sin_t, sin_sign);
    else
        rope_bf16_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(x, x_ld, y, y_ld, shape.rows(), shape.n_tok, n_heads,
                                                                      head_dim, adjacent, cos_t, sin_t, sin_sign);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_forward_cuda(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, __nv_bfloat16* out,
                         cudaStream_t stream) {
    const char* op = "swiglu_forward_cuda";
    require_pointer(gate, op, "gate");
    require_pointer(up, op, "up");
    require_pointer(out, op, "the output");
    require_positive(n, op, "the number of elements");
    const bool vec8 = aligned(gate, 16) && aligned(up, 16) && aligned(out, 16);
    swiglu_forward_kernel<<<grid_for(vec8 ? (n + 7) / 8 : n), kThreads, 0, stream>>>(gate, up, n, vec8, out);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward_cuda(const __nv_bfloat16* gate, const __nv_bfloat16* up, const __nv_bfloat16* d_out, int64_t n,
                          __nv_bfloat16* d_gate, __nv_bfloat16* d_up, cudaStream_t stream) {
    const char* op = "swiglu_backward_cuda";
    require_pointer(gate, op, "gate");
    require_pointer(up, op, "up");
    require_pointer(d_out, op, "d_out");
    require_pointer(d_gate, op, "the output d_gate");
    require_pointer(d_up, op, "the output d_up");
    require(d_gate != d_up, op, "d_gate and d_up must be different buffers");
    require_positive(n, op, "the number of elements");
    const bool vec8 = aligned(gate, 16) && aligned(up, 16) && aligned(d_out, 16) && aligned(d_gate, 16) && aligned(d_up, 16);
    swiglu_backward_kernel<<<grid_for(vec8 ? (n + 7) / 8 : n), kThreads, 0, stream>>>(gate, up, d_out, n, vec8, d_gate,
                                                                                       d_up);
    CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_cuda(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                        float* loss_rows, __nv_bfloat16* dlogits, cudaStream_t stream) {
    const char* op = "cross_entropy_cuda";
    require_pointer(logits, op, "the logits");
    require_pointer(targets, op, "the targets");
    require_pointer(loss_rows, op, "the output loss_rows");
    require_positive(rows, op, "rows");
    require_positive(vocab, op, "the vocabulary size");
    require(vocab <= INT32_MAX, op, "a vocabulary of more than 2^31 − 1 entries");
    require_grid(rows, op, "rows");
    const bool vec4 = vocab % 4 == 0 && aligned(logits, 16) && (!dlogits || aligned(dlogits, 8));
    if (vec4)
        cross_entropy_kernel<true><<<unsigned(rows), kThreads, 0, stream>>>(logits, targets, vocab, grad_scale, loss_rows,
                                                                           dlogits);
    else
        cross_entropy_kernel<false><<<unsigned(rows), kThreads, 0, stream>>>(logits, targets, vocab, grad_scale,
                                                                            loss_rows, dlogits);
    CUDA_CHECK(cudaGetLastError());
}

void sum_to_double_cuda(const float* x, int64_t n, double* out, SumWorkspace& ws, cudaStream_t stream) {
    sum_cuda<false>("sum_to_double_cuda", x, n, out, ws, stream);
}

void sum_squares_cuda(const float* g, int64_t n, double* out, SumWorkspace& ws, cudaStream_t stream) {
    sum_cuda<true>("sum_squares_cuda", g, n, out, ws, stream);
}

EmbeddingBackwardPlan embedding_backward_plan(const int32_t* tokens, int64_t n_rows) {
    const char* op = "embedding_backward_plan";
    require_pointer(tokens, op, "the tokens");
    require_positive(n_rows, op, "the number of rows");
    require(n_rows <= INT32_MAX, op, "more than 2^31 − 1 rows");
    for (int64_t r = 0; r < n_rows; ++r)
        if (tokens[r] < 0)
            cuda_input_error(std::string(op) + ": token id " + std::to_string(tokens[r]) + " at row " + std::to_string(r) +
                             " is negative");
    EmbeddingBackwardPlan plan;
    plan.rows.resize(size_t(n_rows));
    std::iota(plan.rows.begin(), plan.rows.end(), 0);
    std::stable_sort(plan.rows.begin(), plan.rows.end(), [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
    for (int32_t k = 0; k < int32_t(n_rows); ++k) {
        const int32_t id = tokens[plan.rows[size_t(k)]];
        if (plan.ids.empty() || plan.ids.back() != id) {
            plan.ids.push_back(id);
            plan.offsets.push_back(k);
        }
    }
    plan.offsets.push_back(int32_t(n_rows));
    return plan;
}

void embedding_backward_cuda(const int32_t* ids, const int32_t* offsets, const int32_t* rows, int64_t n_ids,
                             const float* d_hidden, int64_t d, float* d_table, cudaStream_t stream) {
    const char* op = "embedding_backward_cuda";
    require_pointer(ids, op, "ids");
    require_pointer(offsets, op, "offsets");
    require_pointer(rows, op, "rows");
    require_pointer(d_hidden, op, "d_hidden");
    require_pointer(d_table, op, "the output d_table");
    require_positive(n_ids, op, "the number of distinct ids");
    require_positive(d, op, "the row length d");
    require_grid(n_ids, op, "distinct ids");
    const bool vec4 = d % 4 == 0 && aligned(d_hidden, 16) && aligned(d_table, 16);
    const int64_t items = vec4 ? d / 4 : d;
    const int threads = int(std::min<int64_t>(kThreads, (items + 31) / 32 * 32));
    const dim3 grid(unsigned(n_ids), unsigned((items + threads - 1) / threads));
    require(grid.y <= 65535, op, "a row length of " + std::to_string(d) + " is too long");
    if (vec4)
        embedding_backward_kernel<true><<<grid, threads, 0, stream>>>(ids, offsets, rows, d_hidden, d, d_table);
    else
        embedding_backward_kernel<false><<<grid, threads, 0, stream>>>(ids, offsets, rows, d_hidden, d, d_table);
    CUDA_CHECK(cudaGetLastError());
}

AdamwStepArgs adamw_step_args(const AdamWConfig& config, int64_t t, double lr, float grad_scale) {
    AdamwStepArgs a{};
    a.lr = float(lr);
    a.beta1 = float(config.beta1);
    a.beta2 = float(config.beta2);
    a.one_minus_beta1 = float(1.0 - config.beta1);
    a.one_minus_beta2 = float(1.0 - config.beta2);
    a.eps = float(config.eps);
    a.weight_decay = float(config.weight_decay);
    a.grad_scale = grad_scale;
    a.bias_correction1 = float(1.0 - std::pow(config.beta1, double(t)));
    a.bias_correction2 = float(1.0 - std::pow(config.beta2, double(t)));
    return a;
}

void adamw_step_cuda(float* params, const float* grads, float* m, float* v, const uint8_t* decay_mask, int64_t n,
                     const AdamwStepArgs& a, __nv_bfloat16* params_bf16, cudaStream_t stream) {
    const char* op = "adamw_step_cuda";
    require_pointer(params, op, "params");
    require_pointer(grads, op, "grads");
    require_pointer(m, op, "the first moment m");
    require_pointer(v, op, "the second moment v");
    require_pointer(decay_mask, op, "the decay mask");
    require_positive(n, op, "the number of parameters");
    require(a.bias_correction1 > 0.0f && a.bias_correction2 > 0.0f, op,
            "the bias corrections are the divisors 1 − βᵗ and must be positive (t counts updates from 1)");
    const bool vec4 = aligned(params, 16) && aligned(grads, 16) && aligned(m, 16) && aligned(v, 16) &&
                      aligned(decay_mask, 4) && (!params_bf16 || aligned(params_bf16, 8));
    if (vec4)
        adamw_step_kernel<true><<<grid_for((n + 3) / 4), kThreads, 0, stream>>>(params, grads, m, v, decay_mask, n, a,
                                                                               params_bf16);
    else
        adamw_step_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(params, grads, m, v, decay_mask, n, a, params_bf16);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
