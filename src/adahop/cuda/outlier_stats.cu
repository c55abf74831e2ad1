// outlier_stats.cu — row/column sums in one pass, variance moments, and the GPU outlier-pattern detector.
// Kernel shape: a block of 256 threads covers a tile of 64 rows × 256 columns; lane l owns 8 adjacent
// columns (one 16-byte BF16 load per row), warp w rows w, w+8, …; row partials are reduced across the warp
// (shuffles), column partials across the 8 warps in shared memory, and both are stored per tile (no
// atomics: a first version with FP64 atomicAdd ran at ~0.37 TB/s, serialised on the 64 tiles that update
// each column). A second kernel adds the tile partials in FP64.
#include "adahop/cuda/outlier_stats.cuh"

#include <cuda_bf16.h>

namespace lowbit {

namespace {

constexpr int kTileRows = 64, kTileCols = 256, kThreads = 256, kWarps = kThreads / 32, kColsPerLane = 8;
constexpr int kRowsPerWarp = kTileRows / kWarps;

__device__ __forceinline__ void load8(const float* p, float* v) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* v) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}
__device__ __forceinline__ float load1(const float* p) { return *p; }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Partials: row_part[col_tile][row] and col_part[row_tile][col], each (Σx, Σx², max |x| bits).
struct Partial {
    double s, q;
    uint32_t m;
};

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads) row_col_partials_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                                                     Partial* __restrict__ row_part,
                                                                     Partial* __restrict__ col_part) {
    __shared__ double s_sum[kWarps][kTileCols];
    __shared__ double s_sq[kWarps][kTileCols];
    __shared__ uint32_t s_max[kWarps][kTileCols];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t c0 = int64_t(blockIdx.x) * kTileCols + lane * kColsPerLane;
    const int64_t r0 = int64_t(blockIdx.y) * kTileRows;
    // FP32 within a thread (8 rows × 8 columns), FP64 from the tile reductions on: FP64 arithmetic per
    // element (~5 ops at 1/2 the FP32 rate plus conversions) made the first version compute-bound.
    float cs[kColsPerLane], cq[kColsPerLane];
    uint32_t cm[kColsPerLane];
#pragma unroll
    for (int j = 0; j < kColsPerLane; ++j) { cs[j] = 0; cq[j] = 0; cm[j] = 0; }
    // all loads first (8 rows × 16 bytes in flight per lane), then the arithmetic
    float vv[kRowsPerWarp][kColsPerLane];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int64_t r = r0 + warp + int64_t(i) * kWarps;
#pragma unroll
        for (int j = 0; j < kColsPerLane; ++j) vv[i][j] = 0.0f;
        if (r >= rows) continue;
        if (kVector) {
            if (c0 < cols) load8(x + r * cols + c0, vv[i]);  // cols % 8 == 0: all 8 columns in, or none
        } else {
#pragma unroll
            for (int j = 0; j < kColsPerLane; ++j)
                if (c0 + j < cols) vv[i][j] = load1(x + r * cols + c0 + j);
        }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int64_t r = r0 + warp + int64_t(i) * kWarps;
        if (r >= rows) break;  // uniform across the warp
        const float* v = vv[i];
        float rs_f = 0, rq_f = 0;
        uint32_t rm = 0;
#pragma unroll
        for (int j = 0; j < kColsPerLane; ++j) {
            const float d = v[j];
            rs_f += d;
            rq_f += d * d;
            cs[j] += d;
            cq[j] += d * d;
            const uint32_t a = __float_as_uint(v[j]) & 0x7FFFFFFFu;  // columns out of range hold 0
            rm = max(rm, a);
            cm[j] = max(cm[j], a);
        }
        double rs = rs_f, rq = rq_f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            rs += __shfl_xor_sync(0xFFFFFFFFu, rs, o);
            rq += __shfl_xor_sync(0xFFFFFFFFu, rq, o);
        }
        rm = __reduce_max_sync(0xFFFFFFFFu, rm);
        if (lane == 0) row_part[int64_t(blockIdx.x) * rows + r] = {rs, rq, rm};
    }
#pragma unroll
    for (int j = 0; j < kColsPerLane; ++j) {
        s_sum[warp][lane * kColsPerLane + j] = cs[j];
        s_sq[warp][lane * kColsPerLane + j] = cq[j];
        s_max[warp][lane * kColsPerLane + j] = cm[j];
    }
    __syncthreads();
    const int64_t c = int64_t(blockIdx.x) * kTileCols + threadIdx.x;
    if (c < cols) {
        double s = 0, q = 0;
        uint32_t m = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            s += s_sum[w][threadIdx.x];
            q += s_sq[w][threadIdx.x];
            m = max(m, s_max[w][threadIdx.x]);
        }
        col_part[int64_t(blockIdx.y) * cols + c] = {s, q, m};
    }
}

// Block (32, 8): 32 rows or columns per block (blockIdx.x < row_chunks: rows), threadIdx.y strides over
// the tile partials, shared memory combines the 8 strides. Lane 0..31 of y = 0 then holds the item's
// Σx, Σx², max |x|, writes them, and adds its variance's powers v, v², v³, v⁴ to `powers` (rows: 0–3,
// columns: 4–7) so that the moments need no second pass. (A version with one thread per item looping over
// all tiles took 18 µs on 4096×2048, latency-bound: ncu.)
__global__ void __launch_bounds__(256) reduce_partials_kernel(const Partial* __restrict__ row_part, int64_t rows,
                                                              int64_t col_tiles, const Partial* __restrict__ col_part,
                                                              int64_t cols, int64_t row_tiles, int64_t row_chunks,
                                                              double* row_sums, double* col_sums, uint32_t* row_max,
                                                              uint32_t* col_max, double* powers) {
    __shared__ double s_s[8][32], s_q[8][32];
    __shared__ uint32_t s_m[8][32];
    const bool is_row = int64_t(blockIdx.x) < row_chunks;
    const int64_t i = (is_row ? int64_t(blockIdx.x) : int64_t(blockIdx.x) - row_chunks) * 32 + threadIdx.x;
    const int64_t count = is_row ? rows : cols;
    const Partial* p = is_row ? row_part : col_part;
    const int64_t n = is_row ? col_tiles : row_tiles, stride = is_row ? rows : cols;
    double s = 0, q = 0;
    uint32_t m = 0;
    if (i < count) {
#pragma unroll 4
        for (int64_t k = threadIdx.y; k < n; k += 8) {
            const Partial v = p[k * stride + i];
            s += v.s;
            q += v.q;
            m = max(m, v.m);
        }
    }
    s_s[threadIdx.y][threadIdx.x] = s;
    s_q[threadIdx.y][threadIdx.x] = q;
    s_m[threadIdx.y][threadIdx.x] = m;
    __syncthreads();
    if (threadIdx.y != 0) return;
    for (int y = 1; y < 8; ++y) {
        s += s_s[y][threadIdx.x];
        q += s_q[y][threadIdx.x];
        m = max(m, s_m[y][threadIdx.x]);
    }
    double pw[4] = {0, 0, 0, 0};
    if (i < count) {
        double* sums = is_row ? row_sums : col_sums;
        sums[2 * i] = s;
        sums[2 * i + 1] = q;
        (is_row ? row_max : col_max)[i] = m;
        const int64_t per = is_row ? cols : rows;  // values behind each variance
        double v = 0.0;
        if (per > 1) {
            v = (q - s * s / double(per)) / double(per - 1);
            v = v < 0.0 ? 0.0 : v;  // rounding can go below 0; NaN (from NaN/Inf input) passes through
        }
        pw[0] = v;
        pw[1] = v * v;
        pw[2] = v * v * v;
        pw[3] = v * v * v * v;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        for (int o = 16; o > 0; o >>= 1) pw[k] += __shfl_xor_sync(0xFFFFFFFFu, pw[k], o);
        if (threadIdx.x == 0) atomicAdd(&powers[(is_row ? 0 : 4) + k], pw[k]);
    }
}

// Mean, unbiased std and kurtosis of n variances from their power sums S1..S4 (FP64; the variances of a
// matrix are positive and of one magnitude, so the expansion loses at most a few of FP64's 16 digits).
__device__ void moments_from_powers(const double* S, int64_t n, double* out) {
    const double N = double(n), mean = S[0] / N;
    const double m2 = S[1] / N - mean * mean;                                            // biased
    const double m4 = S[3] / N - 4 * mean * S[2] / N + 6 * mean * mean * S[1] / N - 3 * mean * mean * mean * mean;
    const double var = n > 1 ? m2 * N / (N - 1) : 0.0;
    const double sd = var > 0 ? sqrt(var) : 0.0;
    out[0] = mean;
    out[1] = sd;
    out[2] = sd > 0 ? m4 / (var * var) : 0.0;
}

__global__ void variance_moments_kernel(const double* powers, int64_t rows, int64_t cols, double* moments) {
    moments_from_powers(powers, rows, moments);
    moments_from_powers(powers + 4, cols, moments + 3);
}

template <typename T>
void launch_sums(const T* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) cuda_input_error("outlier statistics: empty matrix");
    if ((rows + kTileRows - 1) / kTileRows > 65535) cuda_input_error("outlier statistics: more than 4194240 rows");
    ws.reserve(rows, cols);
    const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols, row_tiles = (rows + kTileRows - 1) / kTileRows;
    const size_t part_bytes = size_t(col_tiles * rows + row_tiles * cols) * sizeof(Partial);
    if (ws.partials.size() < part_bytes) ws.partials.resize(part_bytes);
    Partial* row_part = reinterpret_cast<Partial*>(ws.partials.data());
    Partial* col_part = row_part + col_tiles * rows;
    const dim3 grid{unsigned(col_tiles), unsigned(row_tiles)};
    const bool vector = cols % kColsPerLane == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    if (vector) row_col_partials_kernel<T, true><<<grid, kThreads, 0, stream>>>(x, rows, cols, row_part, col_part);
    else row_col_partials_kernel<T, false><<<grid, kThreads, 0, stream>>>(x, rows, cols, row_part, col_part);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemsetAsync(ws.powers.data(), 0, ws.powers.bytes(), stream));
    const int64_t row_chunks = (rows + 31) / 32, col_chunks = (cols + 31) / 32;
    reduce_partials_kernel<<<unsigned(row_chunks + col_chunks), dim3(32, 8), 0, stream>>>(
        row_part, rows, col_tiles, col_part, cols, row_tiles, row_chunks, ws.row_sums.data(), ws.col_sums.data(),
        ws.row_max.data(), ws.col_max.data(), ws.powers.data());
    CUDA_CHECK(cudaGetLastError());
}

template <typename T>
PatternStats detect(const T* x, int64_t rows, int64_t cols, const DetectorOptions& opt, OutlierStatsWorkspace& ws,
                    cudaStream_t stream) {
    launch_sums(x, rows, cols, ws, stream);
    variance_moments_cuda(rows, cols, ws, stream);
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

void row_col_sums_cuda(const float* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream) {
    launch_sums(x, rows, cols, ws, stream);
}
void row_col_sums_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream) {
    launch_sums(x, rows, cols, ws, stream);
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
