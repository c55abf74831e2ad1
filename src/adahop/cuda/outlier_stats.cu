// outlier_stats.cu — row/column statistics in two launches, and the GPU outlier-pattern detector.
//
// Launch 1, outlier_stats_kernel (streams the matrix once): a CTA of 256 threads covers one slab of 256
// columns × one segment of rows (stats_geometry: whole waves of CTAs, segments of a multiple of 8 rows).
// Lane l of every warp owns the 8 adjacent columns slab·256 + 8l … +7 (one 16-byte BF16 load, two for
// FP32); warp w takes rows w, w+8, w+16, … of the segment, 8 rows (BF16; 4 for FP32) per batch with all
// loads of the batch in flight before any arithmetic.
//   * within a lane: FP32 (Σx, Σx² by FMA, max |x|) over its 8 columns (row sums) and over the batch's rows
//     (column sums);
//   * rows: the batch's FP32 lane partials are summed across the warp by a reduce-scatter butterfly in FP32
//     (16 floats in, 16 shuffles; a pairwise tree over 32 lanes, error ≤ 13 u Σ|x| with the lane's 8 adds);
//     one lane per row writes the slab's partial row_part[slab][row] as FP64;
//   * columns: the batch's FP32 sums are added into FP64 registers (one conversion per 8 rows), the 8 warps
//     combine in shared memory once at the end (stored lane-minor: conflict-free), and the CTA writes
//     col_part[segment][slab position] — position t of a slab is column 8·(t % 32) + t / 32 (slab_column).
// Launch 2, stats_finalize_kernel: one CTA per 32 rows or 32 slab positions; warp w adds the parts w, w+8,
// w+16, … (segments for columns, slabs for rows) of its lane's item, the 8 warps combine in a fixed order
// (equal rows or columns get equal bits, which the top-k ties rely on), warp 0 writes the sums / max and —
// for the detector — each CTA's power sums Σv, Σv², Σv³, Σv⁴ of its variances; the last CTA to finish
// (threadfence + counter) adds those and writes the moments.
// detector_from_partials_kernel: the detector without a pass of its own — the same finalising work over the
// (Σx, Σx²) partials that the fused Hadamard+MXFP4 passes write in each orientation (hadamard_mxfp4_stats.cuh), for
// a batch of operands in one launch (a training step's X, W and dY of every layer: the launch latency is
// paid once, not per operand).
// Why two launches (H200, dev/kernel_lab/detector_lab.cu): a single launch that finalises in the last CTA of
// each slab / segment spends 13–14 µs of its 22–47 µs in that serial tail (ncu: the busiest SM active for
// 94 % of the elapsed cycles, the average SM for 43 %); two launches take 11.8–30.6 µs on the same shapes.
#include "adahop/cuda/outlier_stats.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <string>

namespace lowbit {

using namespace outlier_stats_detail;

namespace {

// Where the partials live inside ws.partials (byte offsets; 0 size = not needed).
struct StatsParams {
    int64_t rows, cols, seg_rows;
    int slabs, segs;
    bool vector;                   // 16-byte loads: cols % 8 == 0 and x 16-byte aligned
    double *row_s, *row_q;         // [slabs][rows]
    uint32_t* row_m;               // [slabs][rows]
    double *col_s, *col_q;         // [segs][slabs · 256] (slab positions)
    uint32_t* col_m;               // [segs][slabs · 256]
    double* pow_part;              // [finalise CTAs][4]
    double *row_sums, *col_sums;   // [2R], [2C]
    uint32_t *row_max, *col_max;   // [R], [C]
    uint32_t* counter;             // finalise CTAs done; zero between launches (the last one resets it)
    double* powers;                // [8]
    double* moments;               // [6]
};

template <typename T>
struct LaneWords;  // 32-bit words that hold a lane's 8 values of one row
template <>
struct LaneWords<__nv_bfloat16> {
    static constexpr int n = 4;
};
template <>
struct LaneWords<float> {
    static constexpr int n = 8;
};

__device__ __forceinline__ uint32_t value_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint32_t value_bits(float v) { return __float_as_uint(v); }

// The lane's 8 values of row r (columns c0 … c0+7, zeros past the last column) as raw words.
template <typename T>
__device__ __forceinline__ void load_lane(const T* __restrict__ x, int64_t r, int64_t cols, int64_t c0, bool vector,
                                          uint32_t (&w)[LaneWords<T>::n]) {
#pragma unroll
    for (int i = 0; i < LaneWords<T>::n; ++i) w[i] = 0;
    if (c0 >= cols) return;
    const int64_t base = r * cols + c0;
    if (vector) {  // cols % 8 == 0: all 8 columns are in range
        const uint4* p = reinterpret_cast<const uint4*>(x + base);
#pragma unroll
        for (int h = 0; h < LaneWords<T>::n / 4; ++h) {
            const uint4 u = p[h];
            w[4 * h] = u.x;
            w[4 * h + 1] = u.y;
            w[4 * h + 2] = u.z;
            w[4 * h + 3] = u.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < kLaneCols; ++j)
            if (c0 + j < cols) {
                const uint32_t b = value_bits(x[base + j]);
                if constexpr (sizeof(T) == 2) w[j >> 1] |= b << (16 * (j & 1));
                else w[j] = b;
            }
    }
}

template <typename T>
__device__ __forceinline__ float unpack(const uint32_t (&w)[LaneWords<T>::n], int j) {
    if constexpr (sizeof(T) == 2) return __uint_as_float((j & 1) ? (w[j >> 1] & 0xFFFF0000u) : (w[j >> 1] << 16));
    else return __uint_as_float(w[j]);
}

// Reduce-scatter across the warp (see scatter_value_of_lane): on return v[0] of lane l is the warp's sum of
// value scatter_value_of_lane(l, log2(V)).
template <int V, typename F>
__device__ __forceinline__ void warp_reduce_scatter(F (&v)[V], int lane) {
    int count = V;  // compile-time after unrolling
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        if (count > 1) {
            const int half = count / 2;
            const bool upper = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < V / 2; ++i)
                if (i < half) {
                    const F send = upper ? v[i] : v[i + half];
                    const F keep = upper ? v[i + half] : v[i];
                    v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, o);
                }
            count = half;
        } else {
            v[0] += __shfl_xor_sync(0xFFFFFFFFu, v[0], o);
        }
    }
}

// The unbiased variance of n values from Σx and Σx² (one-pass; FP64). Rounding can go below 0 → 0; NaN/Inf
// input → NaN, also where n = 1, so that the host's finiteness check sees it.
__device__ __forceinline__ double variance_from_sums(double s, double q, int64_t n) {
    if (n > 1) {
        const double v = (q - s * s / double(n)) / double(n - 1);
        return v < 0.0 ? 0.0 : v;  // NaN passes through
    }
    return isfinite(s) && isfinite(q) ? 0.0 : __longlong_as_double(0x7FF8000000000000LL);
}

// Sums v[0..N) over the CTA (fixed order: xor butterfly in each warp, then warps 0..7): the totals land in
// out[] of thread 0. Every thread must call it. s_red: kWarps × N doubles.
template <int N>
__device__ __forceinline__ void block_sum(double (&v)[N], double* s_red, double* out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < N; ++k) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xFFFFFFFFu, v[k], o);
        if (lane == 0) s_red[warp * N + k] = v[k];
    }
    __syncthreads();
    if (threadIdx.x == 0)
#pragma unroll
        for (int k = 0; k < N; ++k) {
            double t = 0.0;
            for (int w = 0; w < kWarps; ++w) t += s_red[w * N + k];
            out[k] = t;
        }
    __syncthreads();
}

// Mean, unbiased std and kurtosis of n variances from their power sums S1..S4 (FP64; the variances of a
// matrix are positive and of one magnitude, so the expansion loses at most a few of FP64's 16 digits).
__host__ __device__ inline void moments_from_powers(const double* S, int64_t n, double* out) {
    const double N = double(n), mean = S[0] / N;
    const double m2 = S[1] / N - mean * mean;  // biased
    const double m4 = S[3] / N - 4 * mean * S[2] / N + 6 * mean * mean * S[1] / N - 3 * mean * mean * mean * mean;
    const double var = n > 1 ? m2 * N / (N - 1) : 0.0;
    const double sd = var > 0 ? sqrt(var) : 0.0;
    out[0] = mean;
    out[1] = sd;
    out[2] = sd > 0 ? m4 / (var * var) : 0.0;
}

template <typename T, bool kRows, bool kCols, bool kSums, bool kMax>
__global__ void __launch_bounds__(kThreads, 2) outlier_stats_kernel(const T* __restrict__ x, StatsParams p) {
    constexpr int B = batch_rows<T>();
    constexpr int kW = LaneWords<T>::n;
    constexpr bool kColSums = kCols && kSums, kColMax = kCols && kMax;
    // column partials of the 8 warps, lane-minor (s_cs[warp][j·32 + lane] = column 8·lane + j): conflict-free
    __shared__ double s_cs[kColSums ? kWarps : 1][kSlabCols];
    __shared__ double s_cq[kColSums ? kWarps : 1][kSlabCols];
    __shared__ uint32_t s_cm[kColMax ? kWarps : 1][kSlabCols];

#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");  // the finalising CTAs may be scheduled as this grid drains
#endif
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int slab = int(blockIdx.x % unsigned(p.slabs)), seg = int(blockIdx.x / unsigned(p.slabs));
    const int64_t rows = p.rows, cols = p.cols;
    const int64_t r_begin = int64_t(seg) * p.seg_rows;
    const int64_t r_end = min(rows, r_begin + p.seg_rows);
    const int64_t c0 = int64_t(slab) * kSlabCols + lane * kLaneCols;

    // ---- stream the segment: FP32 in the lane, FP64 per batch for the columns
    double cs[kLaneCols], cq[kLaneCols];
    float cm[kLaneCols];
#pragma unroll
    for (int j = 0; j < kLaneCols; ++j) {
        cs[j] = 0.0;
        cq[j] = 0.0;
        cm[j] = 0.0f;
    }
    // A batch is two halves of H rows: the loads of the next half are in flight while a half is summed.
    constexpr int H = B / 2;
    uint32_t wa[H][kW], wb[H][kW];
    auto load_half = [&](uint32_t (&w)[H][kW], int64_t rb, int half) {
#pragma unroll
        for (int i = 0; i < H; ++i) {
            const int64_t r = rb + int64_t(half * H + i) * kWarps;
            if (r < r_end) load_lane(x, r, cols, c0, p.vector, w[i]);
            else
#pragma unroll
                for (int h = 0; h < kW; ++h) w[i][h] = 0;
        }
    };
    float bs[kLaneCols], bq[kLaneCols], rs[B], rq[B], rm[B];
    auto sum_half = [&](const uint32_t (&w)[H][kW], int half) {
#pragma unroll
        for (int i0 = 0; i0 < H; ++i0) {
            const int i = half * H + i0;
            rs[i] = 0.0f;
            rq[i] = 0.0f;
            rm[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < kLaneCols; ++j) {
                const float d = unpack<T>(w[i0], j);  // 0 past the last row/column
                if constexpr (kSums) {
                    if constexpr (kRows) {
                        rs[i] += d;
                        rq[i] = __fmaf_rn(d, d, rq[i]);
                    }
                    if constexpr (kCols) {
                        bs[j] += d;
                        bq[j] = __fmaf_rn(d, d, bq[j]);
                    }
                }
                if constexpr (kMax) {  // fmaxf ignores NaN, as std::max(acc, NaN) in the CPU reference does
                    const float a = fabsf(d);
                    if constexpr (kRows) rm[i] = fmaxf(rm[i], a);
                    if constexpr (kCols) cm[j] = fmaxf(cm[j], a);
                }
            }
        }
    };
    if (r_begin + warp < r_end) load_half(wa, r_begin + warp, 0);
    for (int64_t rb = r_begin + warp; rb < r_end; rb += int64_t(kWarps) * B) {  // warp-uniform
        load_half(wb, rb, 1);
#pragma unroll
        for (int j = 0; j < kLaneCols; ++j) {
            bs[j] = 0.0f;
            bq[j] = 0.0f;
        }
        sum_half(wa, 0);
        const int64_t next = rb + int64_t(kWarps) * B;
        if (next < r_end) load_half(wa, next, 0);
        sum_half(wb, 1);
        if constexpr (kColSums)
#pragma unroll
            for (int j = 0; j < kLaneCols; ++j) {
                cs[j] += double(bs[j]);
                cq[j] += double(bq[j]);
            }
        if constexpr (kRows && kSums) {
            constexpr int V = 2 * B, kLog2V = B == 8 ? 4 : 3;  // value 2i = Σx of row i, 2i+1 = Σx²
            float v[V];
#pragma unroll
            for (int i = 0; i < B; ++i) {
                v[2 * i] = rs[i];
                v[2 * i + 1] = rq[i];
            }
            warp_reduce_scatter<V>(v, lane);
            const int value = scatter_value_of_lane(lane, kLog2V);
            const int64_t r = rb + int64_t(value >> 1) * kWarps;
            if (scatter_lane_writes(lane, kLog2V) && r < r_end)
                ((value & 1) ? p.row_q : p.row_s)[int64_t(slab) * rows + r] = double(v[0]);
        }
        if constexpr (kRows && kMax)
#pragma unroll
            for (int i = 0; i < B; ++i) {
                const uint32_t m = __reduce_max_sync(0xFFFFFFFFu, __float_as_uint(rm[i]));  // ≥ 0, no NaN: bits order
                const int64_t r = rb + int64_t(i) * kWarps;
                if (lane == 0 && r < r_end) p.row_m[int64_t(slab) * rows + r] = m;
            }
    }

    // ---- columns: combine the 8 warps (fixed order), one partial per (segment, slab position)
    if constexpr (kCols) {
#pragma unroll
        for (int j = 0; j < kLaneCols; ++j) {
            if constexpr (kColSums) {
                s_cs[warp][j * 32 + lane] = cs[j];
                s_cq[warp][j * 32 + lane] = cq[j];
            }
            if constexpr (kColMax) s_cm[warp][j * 32 + lane] = __float_as_uint(cm[j]);
        }
        __syncthreads();
        const int t = int(threadIdx.x);
        if (int64_t(slab) * kSlabCols + slab_column(t) < cols) {
            const int64_t at = int64_t(seg) * p.slabs * kSlabCols + int64_t(slab) * kSlabCols + t;
            if constexpr (kColSums) {
                double s = 0.0, q = 0.0;
#pragma unroll
                for (int w2 = 0; w2 < kWarps; ++w2) {
                    s += s_cs[w2][t];
                    q += s_cq[w2][t];
                }
                p.col_s[at] = s;
                p.col_q[at] = q;
            }
            if constexpr (kColMax) {
                uint32_t m = 0;
#pragma unroll
                for (int w2 = 0; w2 < kWarps; ++w2) m = max(m, s_cm[w2][t]);
                p.col_m[at] = m;
            }
        }
    }
}

// Power sums Σv, Σv², Σv³, Σv⁴ of the variances held by warp 0's lanes (0 for lanes without one): warp 0 adds
// them (xor butterfly), lane 0 stores them at pow_part[4b…] and counts the CTA done; *s_last tells every
// thread (after the CTA barrier the caller places) whether this was the last of `ctas` CTAs.
// Warp 0: the power sums of its 32 lanes' variances → pow_part[4b … 4b+3] (b: the CTA, or the tile).
__device__ __forceinline__ void write_power_partial(double (&pw)[4], double* pow_part, int64_t b) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) pw[k] += __shfl_xor_sync(0xFFFFFFFFu, pw[k], o);
    }
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int k = 0; k < 4; ++k) pow_part[4 * b + k] = pw[k];
}
// Warp 0, after its partials are written: counts the CTA done; *s_last = whether it was the last of `ctas`.
__device__ __forceinline__ void count_cta_done(uint32_t* counter, int ctas, int* s_last) {
    if ((threadIdx.x & 31) == 0) {
        __threadfence();
        *s_last = atomicAdd(counter, 1u) == unsigned(ctas - 1);
    }
}
__device__ __forceinline__ void publish_power_sums(double (&pw)[4], double* pow_part, int b, uint32_t* counter, int ctas, int* s_last) {
    write_power_partial(pw, pow_part, b);
    count_cta_done(counter, ctas, s_last);
}

// The last CTA (all its threads): the power sums of the row partials [0, row_parts) and of the column ones
// [row_parts, parts), each added in order, → powers[8] and the moments[6] of the row and column variances;
// resets the counter.
__device__ __forceinline__ void moments_in_last_cta(const double* pow_part, int row_parts, int parts, int64_t rows, int64_t cols,
                                                    double* powers, double* moments, uint32_t* counter, double* s_red) {
    __threadfence();
    double pw[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = threadIdx.x; b < parts; b += kThreads) {
        const bool of_cols = b >= row_parts;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const double v = __ldcg(pow_part + 4 * int64_t(b) + k);
            if (of_cols) pw[4 + k] += v;
            else pw[k] += v;
        }
    }
    double tot[8];
    block_sum<8>(pw, s_red, tot);
    if (threadIdx.x == 0) {
        for (int k = 0; k < 8; ++k) powers[k] = tot[k];
        moments_from_powers(tot, rows, moments);
        moments_from_powers(tot + 4, cols, moments + 3);
        *counter = 0;  // for the next launch
    }
}

// Launch 2: CTA b < row_ctas finalises rows 32b … 32b+31, the others slab positions 32(b − row_ctas) …;
// see the file comment.
template <bool kRows, bool kCols, bool kSums, bool kMax>
__global__ void __launch_bounds__(kThreads) stats_finalize_kernel(StatsParams p, int row_ctas, int ctas) {
    constexpr bool kMoments = kRows && kCols && kSums;
    __shared__ double s_s[kSums ? kWarps : 1][32], s_q[kSums ? kWarps : 1][32];
    __shared__ uint32_t s_m[kMax ? kWarps : 1][32];
    __shared__ double s_red[kWarps * 8];
    __shared__ int s_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // launch 1 complete and its partials visible
#endif
    const bool rows_cta = kRows && int(blockIdx.x) < row_ctas;  // CTA-uniform
    const int64_t pos = int64_t(rows_cta ? blockIdx.x : blockIdx.x - row_ctas) * 32 + lane;
    // the item: a row, or the column at slab position pos
    const int64_t item = rows_cta ? pos : (pos / kSlabCols) * kSlabCols + slab_column(int(pos % kSlabCols));
    const int64_t n_items = rows_cta ? p.rows : p.cols;
    const bool valid = item < n_items && (rows_cta || pos < int64_t(p.slabs) * kSlabCols);
    const int parts = rows_cta ? p.slabs : p.segs;
    const int64_t stride = rows_cta ? p.rows : int64_t(p.slabs) * kSlabCols;
    const double* ps = rows_cta ? p.row_s : p.col_s;
    const double* pq = rows_cta ? p.row_q : p.col_q;
    const uint32_t* pm = rows_cta ? p.row_m : p.col_m;

    double s = 0.0, q = 0.0;
    uint32_t m = 0;
    if (valid)
#pragma unroll 4
        for (int j = warp; j < parts; j += kWarps) {
            const int64_t at = int64_t(j) * stride + pos;
            if constexpr (kSums) {
                s += ps[at];
                q += pq[at];
            }
            if constexpr (kMax) m = max(m, pm[at]);
        }
    if constexpr (kSums) {
        s_s[warp][lane] = s;
        s_q[warp][lane] = q;
    }
    if constexpr (kMax) s_m[warp][lane] = m;
    __syncthreads();
    if (warp == 0) {
        double pw[4] = {0.0, 0.0, 0.0, 0.0};
        if (valid) {
            s = 0.0, q = 0.0, m = 0;
#pragma unroll
            for (int w2 = 0; w2 < kWarps; ++w2) {
                if constexpr (kSums) {
                    s += s_s[w2][lane];
                    q += s_q[w2][lane];
                }
                if constexpr (kMax) m = max(m, s_m[w2][lane]);
            }
            if constexpr (kSums) {
                double* out = rows_cta ? p.row_sums : p.col_sums;
                out[2 * item] = s;
                out[2 * item + 1] = q;
            }
            if constexpr (kMax) (rows_cta ? p.row_max : p.col_max)[item] = m;
            if constexpr (kMoments) {
                const double v = variance_from_sums(s, q, rows_cta ? p.cols : p.rows);
                pw[0] = v;
                pw[1] = v * v;
                pw[2] = v * v * v;
                pw[3] = v * v * v * v;
            }
        }
        if constexpr (kMoments) publish_power_sums(pw, p.pow_part, int(blockIdx.x), p.counter, ctas, &s_last);
    }
    // ---- the last CTA: power sums (row CTAs, then column CTAs, each in CTA order) → moments
    if constexpr (kMoments) {
        __syncthreads();
        if (!s_last) return;
        moments_in_last_cta(p.pow_part, row_ctas, ctas, p.rows, p.cols, p.powers, p.moments, p.counter, s_red);
    }
}

// ---- The detector from the quantization passes' partials, for a batch of operands in one launch. Operand i
// owns CTAs [cta_begin, cta_begin + ctas): the first row_ctas finalise `tiles` tiles of 32 rows each (warp w
// sums rows w, w + 8, w + 16, w + 24 of a tile with its lanes over the row's blocks: coalesced), the others
// tiles of 32 columns (lane = column, warp w over row-block stripes w, w + 8, …; the 8 warps added in order).
// Warp 0 writes the power sums of each tile's variances (in tile order, so the result does not depend on the
// tiles per CTA); then as stats_finalize_kernel: the CTA is counted done, and the operand's last CTA writes
// its moments. Several tiles per CTA when the launch has many: a CTA's fixed costs (scheduling, the fence
// and the counter) then count once per several tiles.
constexpr int kMaxDetectorBatch = 32;  // operands per launch (the descriptors travel as kernel parameters)
constexpr int kMaxTilesPerCta = 8;     // tiles of 32 rows or columns per CTA at most
constexpr int kDetectorFillCtasPerSm = 8;  // CTAs per SM that count as one fill of the GPU (tiles per CTA below)

struct DetectorItemParams {
    const float2* row_parts;  // [rows][row_parts_n] (groups of blocks: hadamard_mxfp4_stats.cuh)
    const float2* col_parts;  // [col_parts_n][cols]
    int64_t rows, cols;
    int row_parts_n, col_parts_n;
    int cta_begin, row_ctas, ctas;  // CTAs: the first row_ctas take rows
    int row_tiles, tiles;           // tiles of 32 rows (the first row_tiles) and of 32 columns
    double *row_sums, *col_sums;  // [2R], [2C] (Σx, Σx² of each row / column), or null
    double* pow_part;             // [tiles][4]: the power sums of each tile, in tile order
    double *powers, *moments;     // [8], [6]
    uint32_t* counter;            // zero between launches
};
struct DetectorBatchParams {
    DetectorItemParams item[kMaxDetectorBatch];
    int n;
    int tiles_per_cta;
};

__global__ void __launch_bounds__(kThreads) detector_from_partials_kernel(const __grid_constant__ DetectorBatchParams batch) {
    __shared__ double s_s[kWarps][32], s_q[kWarps][32];
    __shared__ double s_red[kWarps * 8];
    __shared__ int s_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int i = 0;
    while (i + 1 < batch.n && int(blockIdx.x) >= batch.item[i + 1].cta_begin) ++i;
    const DetectorItemParams& it = batch.item[i];
    const int b = int(blockIdx.x) - it.cta_begin;
    const bool rows_cta = b < it.row_ctas;  // CTA-uniform
    const int own_tiles = rows_cta ? it.row_tiles : it.tiles - it.row_tiles;
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // the quantization passes complete
#endif
    for (int t = 0; t < batch.tiles_per_cta; ++t) {
        const int tile = (rows_cta ? b : b - it.row_ctas) * batch.tiles_per_cta + t;  // among the rows' or the columns' tiles
        if (tile >= own_tiles) break;  // CTA-uniform
        const int64_t first = int64_t(tile) * 32;  // rows and cols are multiples of 32
        if (rows_cta) {
            constexpr int kPerWarp = 32 / kWarps;
            double ts[kPerWarp] = {}, tq[kPerWarp] = {};
            for (int j = lane; j < it.row_parts_n; j += 32)
#pragma unroll
                for (int u = 0; u < kPerWarp; ++u) {
                    const float2 v = it.row_parts[(first + warp + kWarps * u) * it.row_parts_n + j];
                    ts[u] += double(v.x);
                    tq[u] += double(v.y);
                }
#pragma unroll
            for (int u = 0; u < kPerWarp; ++u) {
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    ts[u] += __shfl_xor_sync(0xFFFFFFFFu, ts[u], o);
                    tq[u] += __shfl_xor_sync(0xFFFFFFFFu, tq[u], o);
                }
                if (lane == 0) {
                    s_s[0][warp + kWarps * u] = ts[u];
                    s_q[0][warp + kWarps * u] = tq[u];
                }
            }
        } else {
            double s = 0.0, q = 0.0;
#pragma unroll 4
            for (int j = warp; j < it.col_parts_n; j += kWarps) {
                const float2 v = it.col_parts[int64_t(j) * it.cols + first + lane];
                s += double(v.x);
                q += double(v.y);
            }
            s_s[warp][lane] = s;
            s_q[warp][lane] = q;
        }
        __syncthreads();
        if (warp == 0) {
            double s = s_s[0][lane], q = s_q[0][lane];
            if (!rows_cta)
#pragma unroll
                for (int w2 = 1; w2 < kWarps; ++w2) {
                    s += s_s[w2][lane];
                    q += s_q[w2][lane];
                }
            double* out = rows_cta ? it.row_sums : it.col_sums;
            if (out != nullptr) {
                out[2 * (first + lane)] = s;
                out[2 * (first + lane) + 1] = q;
            }
            const double v = variance_from_sums(s, q, rows_cta ? it.cols : it.rows);
            double pw[4] = {v, v * v, v * v * v, v * v * v * v};
            write_power_partial(pw, it.pow_part, rows_cta ? tile : it.row_tiles + tile);
        }
        __syncthreads();  // s_s, s_q are reused by the next tile
    }
    if (warp == 0) count_cta_done(it.counter, it.ctas, &s_last);
    __syncthreads();
    if (!s_last) return;
    moments_in_last_cta(it.pow_part, it.row_tiles, it.tiles, it.rows, it.cols, it.powers, it.moments, it.counter, s_red);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// The finalising launches' last-CTA counters (one per operand): allocated and zeroed when the workspace grows
// (every launch leaves them at zero).
void ensure_counters(OutlierStatsWorkspace& ws, int64_t n, cudaStream_t stream) {
    if (ws.counters.size() >= size_t(n)) return;
    ws.counters.resize(size_t(n));
    CUDA_CHECK(cudaMemsetAsync(ws.counters.data(), 0, ws.counters.bytes(), stream));
}

// A finalising launch as a programmatic dependent launch: its CTAs get scheduled while the kernel before it
// on the stream drains (measured −1 µs after launch 1; after any other kernel it simply waits for its end).
template <typename Kernel, typename... Args>
void launch_finalize(Kernel kernel, int ctas, cudaStream_t stream, const Args&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(ctas));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream;
    cudaLaunchAttribute dependent;
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &dependent;
    cfg.numAttrs = cuda_supports_dependent_launch() ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <typename Kernel>
int blocks_per_sm(Kernel kernel) {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0));
    return n > 0 ? n : 1;
}

template <typename T, bool kRows, bool kCols, bool kSums, bool kMax>
void launch_stats(const T* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) cuda_input_error("outlier statistics: empty matrix");
    static const int per_sm = blocks_per_sm(outlier_stats_kernel<T, kRows, kCols, kSums, kMax>);
    const StatsGeometry g = stats_geometry(rows, cols, int64_t(cuda_multiprocessor_count()) * per_sm);
    const int64_t positions = g.slabs * kSlabCols;  // column partials per segment
    const int64_t row_ctas = kRows ? (rows + 31) / 32 : 0, col_ctas = kCols ? positions / 32 : 0;
    if (g.slabs * g.segs > int64_t(INT32_MAX) || row_ctas + col_ctas > int64_t(INT32_MAX))
        cuda_input_error("outlier statistics: matrix too large");
    ws.reserve(rows, cols);

    // partials arena
    constexpr bool kMoments = kRows && kCols && kSums;
    size_t off = 0;
    auto take = [&](bool need, size_t bytes) {
        const size_t at = off;
        if (need) off += align256(bytes);
        return need ? at : SIZE_MAX;
    };
    const size_t rn = size_t(g.slabs) * size_t(rows), cn = size_t(g.segs) * size_t(positions);
    const size_t o_rs = take(kRows && kSums, rn * 8), o_rq = take(kRows && kSums, rn * 8), o_rm = take(kRows && kMax, rn * 4);
    const size_t o_cs = take(kCols && kSums, cn * 8), o_cq = take(kCols && kSums, cn * 8), o_cm = take(kCols && kMax, cn * 4);
    const size_t o_pw = take(kMoments, size_t(row_ctas + col_ctas) * 32);
    if (ws.partials.size() < off) ws.partials.resize(off);
    ensure_counters(ws, 1, stream);
    uint8_t* base = ws.partials.data();
    auto ptr = [&](size_t o) { return o == SIZE_MAX ? nullptr : base + o; };

    StatsParams p{};
    p.rows = rows;
    p.cols = cols;
    p.seg_rows = g.seg_rows;
    p.slabs = int(g.slabs);
    p.segs = int(g.segs);
    p.vector = cols % kLaneCols == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    p.row_s = reinterpret_cast<double*>(ptr(o_rs));
    p.row_q = reinterpret_cast<double*>(ptr(o_rq));
    p.row_m = reinterpret_cast<uint32_t*>(ptr(o_rm));
    p.col_s = reinterpret_cast<double*>(ptr(o_cs));
    p.col_q = reinterpret_cast<double*>(ptr(o_cq));
    p.col_m = reinterpret_cast<uint32_t*>(ptr(o_cm));
    p.pow_part = reinterpret_cast<double*>(ptr(o_pw));
    p.row_sums = ws.row_sums.data();
    p.col_sums = ws.col_sums.data();
    p.row_max = ws.row_max.data();
    p.col_max = ws.col_max.data();
    p.counter = ws.counters.data();
    p.powers = ws.powers.data();
    p.moments = ws.moments.data();
    outlier_stats_kernel<T, kRows, kCols, kSums, kMax><<<unsigned(g.slabs * g.segs), kThreads, 0, stream>>>(x, p);
    CUDA_CHECK(cudaGetLastError());
    launch_finalize(stats_finalize_kernel<kRows, kCols, kSums, kMax>, int(row_ctas + col_ctas), stream, p, int(row_ctas),
                    int(row_ctas + col_ctas));
}

// The detector's finalising work over the partials of n operands: launches of up to kMaxDetectorBatch
// operands. Operand i's moments go to moments_out[6i…] (device), or — with `single` — its row and column sums,
// powers and moments to ws.row_sums / col_sums / powers / moments.
void launch_detector_batch(const DetectorPartialsOf* ops, int n, double* moments_out, bool single, OutlierStatsWorkspace& ws,
                           cudaStream_t stream) {
    const char* op = single ? "detector_stats_from_blocks_cuda" : "detector_moments_from_partials_cuda";
    if (n < 0 || (n == 0 && single)) cuda_usage_error(std::string(op) + ": no operands");
    if (n == 0) return;
    if (!single && moments_out == nullptr) cuda_usage_error(std::string(op) + ": no output buffer for the moments");
    int64_t total_tiles = 0;
    for (int i = 0; i < n; ++i) {
        const DetectorPartialsOf& d = ops[i];
        const std::string what = std::string(op) + (single ? "" : ": operand " + std::to_string(i));
        if (d.along_rows == nullptr || d.along_cols == nullptr)
            cuda_usage_error(what + ": needs the detector partials of a quantization pass in each orientation");
        if (d.rows <= 0 || d.cols <= 0) cuda_input_error(what + ": empty matrix");
        check_block_divisible(d.cols, 32, "columns", what.c_str());
        check_block_divisible(d.rows, 32, "rows", what.c_str());
        cuda_check_aligned(d.along_rows, 8, "detector partials along rows", what.c_str());
        cuda_check_aligned(d.along_cols, 8, "detector partials along columns", what.c_str());
        total_tiles += d.rows / 32 + d.cols / 32;
    }
    if (total_tiles > int64_t(INT32_MAX)) cuda_input_error(std::string(op) + ": matrices too large");
    if (single) ws.reserve(ops[0].rows, ops[0].cols);
    if (ws.partials.size() < size_t(total_tiles) * 32) ws.partials.resize(size_t(total_tiles) * 32);  // 4 doubles per tile
    if (ws.powers.size() < size_t(8 * n)) ws.powers.resize(size_t(8 * n));
    ensure_counters(ws, n, stream);
    double* pow_part = reinterpret_cast<double*>(ws.partials.data());
    for (int first = 0; first < n; first += kMaxDetectorBatch) {
        DetectorBatchParams batch{};
        batch.n = std::min(kMaxDetectorBatch, n - first);
        // tiles per CTA: 1 while the launch's tiles fill the GPU about once (8 CTAs per SM), more beyond
        int64_t launch_tiles = 0;
        for (int k = 0; k < batch.n; ++k) launch_tiles += ops[first + k].rows / 32 + ops[first + k].cols / 32;
        batch.tiles_per_cta = int(std::clamp<int64_t>(launch_tiles / (int64_t(cuda_multiprocessor_count()) * kDetectorFillCtasPerSm), 1,
                                                      kMaxTilesPerCta));
        const int per = batch.tiles_per_cta;
        int ctas = 0;
        for (int k = 0; k < batch.n; ++k) {
            const int i = first + k;
            const DetectorPartialsOf& d = ops[i];
            DetectorItemParams& it = batch.item[k];
            it.row_parts = d.along_rows;
            it.col_parts = d.along_cols;
            it.rows = d.rows;
            it.cols = d.cols;
            it.row_parts_n = int(block_stats_groups(d.rows, d.cols, 1));
            it.col_parts_n = int(block_stats_groups(d.rows, d.cols, 0));
            it.row_tiles = int(d.rows / 32);
            it.tiles = int(d.rows / 32 + d.cols / 32);
            it.cta_begin = ctas;
            it.row_ctas = (it.row_tiles + per - 1) / per;
            it.ctas = it.row_ctas + (it.tiles - it.row_tiles + per - 1) / per;
            it.row_sums = single ? ws.row_sums.data() : nullptr;
            it.col_sums = single ? ws.col_sums.data() : nullptr;
            it.pow_part = pow_part;
            it.powers = ws.powers.data() + 8 * i;
            it.moments = single ? ws.moments.data() : moments_out + 6 * i;
            it.counter = ws.counters.data() + i;
            pow_part += 4 * it.tiles;
            ctas += it.ctas;
        }
        launch_finalize(detector_from_partials_kernel, ctas, stream, batch);
    }
}

template <typename T>
void stats(const T* x, int64_t rows, int64_t cols, const OutlierStatsRequest& q, OutlierStatsWorkspace& ws,
           cudaStream_t stream) {
    if (!q.rows && !q.cols) cuda_usage_error("outlier statistics: neither rows nor columns requested");
    if (!q.sums && !q.max) cuda_usage_error("outlier statistics: neither sums nor max requested");
    if (q.rows && q.cols) {  // always with the sums (and the moments)
        if (q.max) launch_stats<T, true, true, true, true>(x, rows, cols, ws, stream);
        else launch_stats<T, true, true, true, false>(x, rows, cols, ws, stream);
    } else if (q.sums && q.max) {  // one axis with everything: the full kernel covers it
        launch_stats<T, true, true, true, true>(x, rows, cols, ws, stream);
    } else if (q.rows) {
        if (q.sums) launch_stats<T, true, false, true, false>(x, rows, cols, ws, stream);
        else launch_stats<T, true, false, false, true>(x, rows, cols, ws, stream);
    } else {
        if (q.sums) launch_stats<T, false, true, true, false>(x, rows, cols, ws, stream);
        else launch_stats<T, false, true, false, true>(x, rows, cols, ws, stream);
    }
}

// The label from the moments the finalising launch left in ws (synchronises `stream`).
PatternStats pattern_from_device_moments(int64_t rows, int64_t cols, const DetectorOptions& opt, OutlierStatsWorkspace& ws,
                                         cudaStream_t stream) {
    double m[6];
    CUDA_CHECK(cudaMemcpyAsync(m, ws.moments.data(), sizeof m, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!std::isfinite(m[0]) || !std::isfinite(m[3])) cuda_input_error("outlier detector: the matrix holds NaN or Inf");
    return pattern_from_moments({m[0], m[1], m[2]}, rows, {m[3], m[4], m[5]}, cols, opt);
}

template <typename T>
PatternStats detect(const T* x, int64_t rows, int64_t cols, const DetectorOptions& opt, OutlierStatsWorkspace& ws,
                    cudaStream_t stream) {
    launch_stats<T, true, true, true, false>(x, rows, cols, ws, stream);
    return pattern_from_device_moments(rows, cols, opt, ws, stream);
}

}  // namespace

void OutlierStatsWorkspace::reserve(int64_t rows, int64_t cols) {
    if (row_sums.size() < size_t(2 * rows)) row_sums.resize(size_t(2 * rows));
    if (col_sums.size() < size_t(2 * cols)) col_sums.resize(size_t(2 * cols));
    if (row_max.size() < size_t(rows)) row_max.resize(size_t(rows));
    if (col_max.size() < size_t(cols)) col_max.resize(size_t(cols));
    if (moments.size() < 6) moments.resize(6);
    if (powers.size() < 8) powers.resize(8);
}

void outlier_stats_cuda(const float* x, int64_t rows, int64_t cols, const OutlierStatsRequest& what,
                        OutlierStatsWorkspace& ws, cudaStream_t stream) {
    stats(x, rows, cols, what, ws, stream);
}
void outlier_stats_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const OutlierStatsRequest& what,
                        OutlierStatsWorkspace& ws, cudaStream_t stream) {
    stats(x, rows, cols, what, ws, stream);
}

void row_col_sums_cuda(const float* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream) {
    launch_stats<float, true, true, true, true>(x, rows, cols, ws, stream);
}
void row_col_sums_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream) {
    launch_stats<__nv_bfloat16, true, true, true, true>(x, rows, cols, ws, stream);
}

void detector_stats_cuda(const float* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream) {
    launch_stats<float, true, true, true, false>(x, rows, cols, ws, stream);
}
void detector_stats_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                         cudaStream_t stream) {
    launch_stats<__nv_bfloat16, true, true, true, false>(x, rows, cols, ws, stream);
}

PatternStats detect_outlier_pattern_cuda(const float* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream) {
    return detect(x, rows, cols, opt, ws, stream);
}
PatternStats detect_outlier_pattern_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream) {
    return detect(x, rows, cols, opt, ws, stream);
}

void detector_stats_from_blocks_cuda(const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, int64_t rows,
                                     int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream) {
    const DetectorPartialsOf d{along_rows.detector_partials, along_cols.detector_partials, rows, cols};
    launch_detector_batch(&d, 1, nullptr, true, ws, stream);
}

void detector_moments_from_partials_cuda(const DetectorPartialsOf* operands, int n, double* moments, OutlierStatsWorkspace& ws,
                                         cudaStream_t stream) {
    launch_detector_batch(operands, n, moments, false, ws, stream);
}

PatternStats detect_outlier_pattern_from_blocks_cuda(const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols,
                                                     int64_t rows, int64_t cols, const DetectorOptions& opt, OutlierStatsWorkspace& ws,
                                                     cudaStream_t stream) {
    detector_stats_from_blocks_cuda(along_rows, along_cols, rows, cols, ws, stream);
    return pattern_from_device_moments(rows, cols, opt, ws, stream);
}

}  // namespace lowbit
