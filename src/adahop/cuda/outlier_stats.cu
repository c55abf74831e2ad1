// outlier_stats.cu — row/column statistics in one launch, and the GPU outlier-pattern detector.
//
// Kernel shape (outlier_stats_kernel): a CTA of 256 threads covers one slab of 256 columns × one segment of
// rows (stats_geometry: whole waves of CTAs, segments of a multiple of 8 rows). Lane l of every warp
// owns the 8 adjacent columns slab·256 + 8l … +7 (one 16-byte BF16 load, two for FP32); warp w takes rows
// w, w+8, w+16, … of the segment, 8 rows (BF16; 4 for FP32) per batch with all loads of the batch in flight
// before any arithmetic.
//   * within a lane: FP32 (Σx, Σx² by FMA, max |x|) over its 8 columns (row sums) and over the batch's rows
//     (column sums);
//   * rows: the batch's FP32 lane partials become FP64 and are summed across the warp by a reduce-scatter
//     butterfly (16 doubles in, 16 shuffles of 64 bits instead of 80); one lane per row writes the slab's
//     partial row_part[slab][row];
//   * columns: the batch's FP32 sums are added into FP64 registers (one conversion per 8 rows), the 8 warps
//     combine in shared memory once at the end, and the CTA writes col_part[segment][column];
//   * last-CTA-done (threadfence + atomic counter): the last CTA of a slab adds its columns' partials over
//     the segments, the last CTA of a segment adds its rows' partials over the slabs (fixed order: the result
//     does not depend on scheduling, so equal rows or columns get equal bits, which the top-k ties rely
//     on); both write the sums and — for the detector — the power sums Σv, Σv², Σv³, Σv⁴ of their
//     variances; the last of those finalisers adds the power sums and writes the moments. ONE launch.
// The previous version (64×256 tiles, a partial-reduction kernel, a one-thread moments kernel) took 29 µs
// on 4096×2048 BF16: 28 % occupancy with short CTAs, plus two more launches.
// Partials are read with ld.global.cg: L1 is not coherent, and a finaliser's line can hold another slab's
// partials read earlier by a CTA of the same SM.
#include "adahop/cuda/outlier_stats.cuh"

#include <cuda_bf16.h>

#include <algorithm>

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
    double *col_s, *col_q;         // [segs][cols]
    uint32_t* col_m;               // [segs][cols]
    double* row_pow;               // [segs][4]
    double* col_pow;               // [slabs][4]
    double *row_sums, *col_sums;   // [2R], [2C]
    uint32_t *row_max, *col_max;   // [R], [C]
    uint32_t* counters;            // [0]: finalisers done, [1, 1+slabs): per slab, [1+slabs, 1+slabs+segs): per segment
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
template <int V>
__device__ __forceinline__ void warp_reduce_scatter(double (&v)[V], int lane) {
    int count = V;  // compile-time after unrolling
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        if (count > 1) {
            const int half = count / 2;
            const bool upper = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < V / 2; ++i)
                if (i < half) {
                    const double send = upper ? v[i] : v[i + half];
                    const double keep = upper ? v[i + half] : v[i];
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

// A finaliser's sum of item i's partials over n parts (part j at j·stride + i), in part order so that the
// result does not depend on which CTA finishes last; __ldcg: the partials were written by other CTAs.
template <bool kSums, bool kMax>
__device__ __forceinline__ void add_partials(const double* ps, const double* pq, const uint32_t* pm, int64_t n,
                                             int64_t stride, int64_t i, double& s, double& q, uint32_t& m) {
#pragma unroll 16  // loads in flight: a finaliser is L2-bound on one SM
    for (int64_t j = 0; j < n; ++j) {
        const int64_t at = j * stride + i;
        if constexpr (kSums) {
            s += __ldcg(ps + at);
            q += __ldcg(pq + at);
        }
        if constexpr (kMax) m = max(m, __ldcg(pm + at));
    }
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
    constexpr bool kMoments = kRows && kCols && kSums;
    constexpr bool kColSums = kCols && kSums, kColMax = kCols && kMax;
    __shared__ double s_cs[kColSums ? kWarps : 1][kSlabCols];
    __shared__ double s_cq[kColSums ? kWarps : 1][kSlabCols];
    __shared__ uint32_t s_cm[kColMax ? kWarps : 1][kSlabCols];
    __shared__ double s_red[kWarps * 8];
    __shared__ int s_last_slab, s_last_seg, s_final;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int slab = int(blockIdx.x % unsigned(p.slabs)), seg = int(blockIdx.x / unsigned(p.slabs));
    const int64_t rows = p.rows, cols = p.cols;
    const int64_t r_begin = int64_t(seg) * p.seg_rows;
    const int64_t r_end = min(rows, r_begin + p.seg_rows);
    const int64_t c0 = int64_t(slab) * kSlabCols + lane * kLaneCols;

    // ---- stream the segment: FP32 in the lane, FP64 per batch
    double cs[kLaneCols], cq[kLaneCols];
    float cm[kLaneCols];
#pragma unroll
    for (int j = 0; j < kLaneCols; ++j) {
        cs[j] = 0.0;
        cq[j] = 0.0;
        cm[j] = 0.0f;
    }
    for (int64_t rb = r_begin + warp; rb < r_end; rb += int64_t(kWarps) * B) {  // warp-uniform
        uint32_t w[B][kW];
#pragma unroll
        for (int i = 0; i < B; ++i) {
            const int64_t r = rb + int64_t(i) * kWarps;
            if (r < r_end) load_lane(x, r, cols, c0, p.vector, w[i]);
            else
#pragma unroll
                for (int h = 0; h < kW; ++h) w[i][h] = 0;
        }
        float bs[kLaneCols], bq[kLaneCols];
#pragma unroll
        for (int j = 0; j < kLaneCols; ++j) {
            bs[j] = 0.0f;
            bq[j] = 0.0f;
        }
        float rs[B], rq[B], rm[B];
#pragma unroll
        for (int i = 0; i < B; ++i) {
            rs[i] = 0.0f;
            rq[i] = 0.0f;
            rm[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < kLaneCols; ++j) {
                const float d = unpack<T>(w[i], j);  // 0 past the last row/column
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
        if constexpr (kColSums)
#pragma unroll
            for (int j = 0; j < kLaneCols; ++j) {
                cs[j] += double(bs[j]);
                cq[j] += double(bq[j]);
            }
        if constexpr (kRows && kSums) {
            constexpr int V = 2 * B, kLog2V = B == 8 ? 4 : 3;  // value 2i = Σx of row i, 2i+1 = Σx²
            double v[V];
#pragma unroll
            for (int i = 0; i < B; ++i) {
                v[2 * i] = double(rs[i]);
                v[2 * i + 1] = double(rq[i]);
            }
            warp_reduce_scatter<V>(v, lane);
            const int value = scatter_value_of_lane(lane, kLog2V);
            const int64_t r = rb + int64_t(value >> 1) * kWarps;
            if (scatter_lane_writes(lane, kLog2V) && r < r_end)
                ((value & 1) ? p.row_q : p.row_s)[int64_t(slab) * rows + r] = v[0];
        }
        if constexpr (kRows && kMax)
#pragma unroll
            for (int i = 0; i < B; ++i) {
                const uint32_t m = __reduce_max_sync(0xFFFFFFFFu, __float_as_uint(rm[i]));  // ≥ 0, no NaN: bits order
                const int64_t r = rb + int64_t(i) * kWarps;
                if (lane == 0 && r < r_end) p.row_m[int64_t(slab) * rows + r] = m;
            }
    }

    // ---- columns: combine the 8 warps (fixed order), one partial per (segment, column)
    if constexpr (kCols) {
#pragma unroll
        for (int j = 0; j < kLaneCols; ++j) {
            if constexpr (kColSums) {
                s_cs[warp][lane * kLaneCols + j] = cs[j];
                s_cq[warp][lane * kLaneCols + j] = cq[j];
            }
            if constexpr (kColMax) s_cm[warp][lane * kLaneCols + j] = __float_as_uint(cm[j]);
        }
        __syncthreads();
        const int64_t c = int64_t(slab) * kSlabCols + threadIdx.x;
        if (c < cols) {
            const int64_t at = int64_t(seg) * cols + c;
            if constexpr (kColSums) {
                double s = 0.0, q = 0.0;
#pragma unroll
                for (int w2 = 0; w2 < kWarps; ++w2) {
                    s += s_cs[w2][threadIdx.x];
                    q += s_cq[w2][threadIdx.x];
                }
                p.col_s[at] = s;
                p.col_q[at] = q;
            }
            if constexpr (kColMax) {
                uint32_t m = 0;
#pragma unroll
                for (int w2 = 0; w2 < kWarps; ++w2) m = max(m, s_cm[w2][threadIdx.x]);
                p.col_m[at] = m;
            }
        }
    }

    // ---- last CTA done: of this slab (columns), of this segment (rows)
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        s_last_slab = kCols ? atomicAdd(&p.counters[1 + slab], 1u) == unsigned(p.segs - 1) : 0;
        s_last_seg = kRows ? atomicAdd(&p.counters[1 + p.slabs + seg], 1u) == unsigned(p.slabs - 1) : 0;
    }
    __syncthreads();
    const bool last_slab = s_last_slab != 0, last_seg = s_last_seg != 0;  // CTA-uniform

    if (kCols && last_slab) {
        __threadfence();
        const int64_t c = int64_t(slab) * kSlabCols + threadIdx.x;
        double pw[4] = {0.0, 0.0, 0.0, 0.0};
        if (c < cols) {
            double s = 0.0, q = 0.0;
            uint32_t m = 0;
            add_partials<kColSums, kColMax>(p.col_s, p.col_q, p.col_m, p.segs, cols, c, s, q, m);
            if constexpr (kColSums) {
                p.col_sums[2 * c] = s;
                p.col_sums[2 * c + 1] = q;
            }
            if constexpr (kColMax) p.col_max[c] = m;
            if constexpr (kMoments) {
                const double v = variance_from_sums(s, q, rows);
                pw[0] = v;
                pw[1] = v * v;
                pw[2] = v * v * v;
                pw[3] = v * v * v * v;
            }
        }
        if constexpr (kMoments) {
            double tot[4];
            block_sum<4>(pw, s_red, tot);
            if (threadIdx.x == 0)
                for (int k = 0; k < 4; ++k) p.col_pow[4 * slab + k] = tot[k];
        }
        if (threadIdx.x == 0) p.counters[1 + slab] = 0;  // for the next launch
    }

    if (kRows && last_seg) {
        __threadfence();
        double pw[4] = {0.0, 0.0, 0.0, 0.0};
        for (int64_t r = r_begin + threadIdx.x; r < r_end; r += kThreads) {
            double s = 0.0, q = 0.0;
            uint32_t m = 0;
            add_partials<kSums, kMax>(p.row_s, p.row_q, p.row_m, p.slabs, rows, r, s, q, m);
            if constexpr (kSums) {
                p.row_sums[2 * r] = s;
                p.row_sums[2 * r + 1] = q;
            }
            if constexpr (kMax) p.row_max[r] = m;
            if constexpr (kMoments) {
                const double v = variance_from_sums(s, q, cols);
                pw[0] += v;
                pw[1] += v * v;
                pw[2] += v * v * v;
                pw[3] += v * v * v * v;
            }
        }
        if constexpr (kMoments) {
            double tot[4];
            block_sum<4>(pw, s_red, tot);
            if (threadIdx.x == 0)
                for (int k = 0; k < 4; ++k) p.row_pow[4 * seg + k] = tot[k];
        }
        if (threadIdx.x == 0) p.counters[1 + p.slabs + seg] = 0;
    }

    // ---- the last finaliser: power sums → moments
    if constexpr (kMoments) {
        if (last_slab || last_seg) {
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) {
                const unsigned mine = unsigned(last_slab) + unsigned(last_seg);
                s_final = atomicAdd(&p.counters[0], mine) + mine == unsigned(p.slabs + p.segs);
            }
            __syncthreads();
            if (s_final) {
                __threadfence();
                double pw[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int j = threadIdx.x; j < p.segs; j += kThreads)
                    for (int k = 0; k < 4; ++k) pw[k] += __ldcg(p.row_pow + 4 * j + k);
                for (int j = threadIdx.x; j < p.slabs; j += kThreads)
                    for (int k = 0; k < 4; ++k) pw[4 + k] += __ldcg(p.col_pow + 4 * j + k);
                double tot[8];
                block_sum<8>(pw, s_red, tot);
                if (threadIdx.x == 0) {
                    for (int k = 0; k < 8; ++k) p.powers[k] = tot[k];
                    moments_from_powers(tot, rows, p.moments);
                    moments_from_powers(tot + 4, cols, p.moments + 3);
                    p.counters[0] = 0;
                }
            }
        }
    }
}

__global__ void variance_moments_kernel(const double* powers, int64_t rows, int64_t cols, double* moments) {
    moments_from_powers(powers, rows, moments);
    moments_from_powers(powers + 4, cols, moments + 3);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

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
    const StatsGeometry g = stats_geometry(rows, cols, int64_t(cuda_multiprocessor_count()) * per_sm, kRows && kCols);
    if (g.slabs * g.segs > int64_t(INT32_MAX) || g.slabs + g.segs + 1 > int64_t(INT32_MAX))
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
    const size_t rn = size_t(g.slabs) * size_t(rows), cn = size_t(g.segs) * size_t(cols);
    const size_t o_rs = take(kRows && kSums, rn * 8), o_rq = take(kRows && kSums, rn * 8), o_rm = take(kRows && kMax, rn * 4);
    const size_t o_cs = take(kCols && kSums, cn * 8), o_cq = take(kCols && kSums, cn * 8), o_cm = take(kCols && kMax, cn * 4);
    const size_t o_rp = take(kMoments, size_t(g.segs) * 32), o_cp = take(kMoments, size_t(g.slabs) * 32);
    if (ws.partials.size() < off) ws.partials.resize(off);
    const size_t n_counters = size_t(1 + g.slabs + g.segs);
    if (ws.counters.size() < n_counters) {
        ws.counters.resize(n_counters);
        CUDA_CHECK(cudaMemsetAsync(ws.counters.data(), 0, ws.counters.bytes(), stream));
    }
    uint8_t* base = ws.partials.data();
    auto ptr = [&](size_t o) { return o == SIZE_MAX ? nullptr : base + o; };

    StatsParams p;
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
    p.row_pow = reinterpret_cast<double*>(ptr(o_rp));
    p.col_pow = reinterpret_cast<double*>(ptr(o_cp));
    p.row_sums = ws.row_sums.data();
    p.col_sums = ws.col_sums.data();
    p.row_max = ws.row_max.data();
    p.col_max = ws.col_max.data();
    p.counters = ws.counters.data();
    p.powers = ws.powers.data();
    p.moments = ws.moments.data();
    outlier_stats_kernel<T, kRows, kCols, kSums, kMax><<<unsigned(g.slabs * g.segs), kThreads, 0, stream>>>(x, p);
    CUDA_CHECK(cudaGetLastError());
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

template <typename T>
PatternStats detect(const T* x, int64_t rows, int64_t cols, const DetectorOptions& opt, OutlierStatsWorkspace& ws,
                    cudaStream_t stream) {
    launch_stats<T, true, true, true, false>(x, rows, cols, ws, stream);
    double m[6];
    CUDA_CHECK(cudaMemcpyAsync(m, ws.moments.data(), sizeof m, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!std::isfinite(m[0]) || !std::isfinite(m[3])) cuda_input_error("outlier detector: the matrix holds NaN or Inf");
    return pattern_from_moments({m[0], m[1], m[2]}, rows, {m[3], m[4], m[5]}, cols, opt);
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

void variance_moments_cuda(int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream) {
    ws.reserve(rows, cols);
    variance_moments_kernel<<<1, 1, 0, stream>>>(ws.powers.data(), rows, cols, ws.moments.data());
    CUDA_CHECK(cudaGetLastError());
}

PatternStats detect_outlier_pattern_cuda(const float* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream) {
    return detect(x, rows, cols, opt, ws, stream);
}
PatternStats detect_outlier_pattern_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream) {
    return detect(x, rows, cols, opt, ws, stream);
}

}  // namespace lowbit
