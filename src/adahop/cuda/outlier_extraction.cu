// outlier_extraction.cu — top-k row/column selection, gather/zero, and the sliver scatter.
#include "adahop/cuda/outlier_extraction.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace lowbit {

namespace {

__global__ void scores_kernel(const double* sums, const uint32_t* maxbits, int64_t n, bool l2, double* keys, int32_t* index) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    keys[i] = l2 ? sums[2 * i + 1] : double(__uint_as_float(maxbits[i]));
    index[i] = int32_t(i);
}

// One thread per (selected index, element): copy into the slice and zero in clean.
template <typename T>
__global__ void gather_zero_kernel(T* clean, int64_t rows, int64_t cols, bool by_rows, const int32_t* indices, int64_t k,
                                   T* slice) {
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t other = by_rows ? cols : rows;
    if (t >= k * other) return;
    const int64_t i = t / other, j = t % other;
    const int64_t sel = indices[i];
    const int64_t src = by_rows ? sel * cols + j : j * cols + sel;
    slice[by_rows ? i * cols + j : j * k + i] = clean[src];
    clean[src] = T(0.0f);
}

__global__ void scatter_kernel(const float* src, int64_t k, const int32_t* indices, bool by_rows, float* c, int64_t rows_c,
                               int64_t cols_c) {
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t other = by_rows ? cols_c : rows_c;
    if (t >= k * other) return;
    const int64_t i = t / other, j = t % other;
    if (by_rows) c[int64_t(indices[i]) * cols_c + j] = src[i * cols_c + j];
    else c[j * cols_c + indices[i]] = src[j * k + i];
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

template <typename T>
int64_t split(const T* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric, T* clean, T* slice,
              int32_t* indices, OutlierExtractionWorkspace& ws, cudaStream_t stream) {
    const int64_t n = by_rows ? rows : cols;
    k = k < 0 ? 0 : (k > n ? n : k);
    if (n > INT32_MAX) cuda_input_error("outlier extraction: dimension beyond 2^31");
    const bool l2 = metric == OutlierMetric::l2;
    row_col_sums_cuda(x, rows, cols, ws.stats, stream);
    if (clean != x) CUDA_CHECK(cudaMemcpyAsync(clean, x, size_t(rows * cols) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    if (k == 0) return 0;
    if (ws.keys_in.size() < size_t(n)) {
        ws.keys_in.resize(size_t(n));
        ws.keys_out.resize(size_t(n));
        ws.index_in.resize(size_t(n));
        ws.index_out.resize(size_t(n));
    }
    scores_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(by_rows ? ws.stats.row_sums.data() : ws.stats.col_sums.data(),
                                                          by_rows ? ws.stats.row_max.data() : ws.stats.col_max.data(), n, l2,
                                                          ws.keys_in.data(), ws.index_in.data());
    CUDA_CHECK(cudaGetLastError());
    size_t temp1 = 0, temp2 = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, temp1, ws.keys_in.data(), ws.keys_out.data(),
                                                         ws.index_in.data(), ws.index_out.data(), int(n), 0, 64, stream));
    CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp2, ws.index_out.data(), indices, int(k), 0, 32, stream));
    const size_t temp = temp1 > temp2 ? temp1 : temp2;
    if (ws.sort_temp.size() < temp) ws.sort_temp.resize(temp);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(ws.sort_temp.data(), temp1, ws.keys_in.data(), ws.keys_out.data(),
                                                         ws.index_in.data(), ws.index_out.data(), int(n), 0, 64, stream));
    CUDA_CHECK(cub::DeviceRadixSort::SortKeys(ws.sort_temp.data(), temp2, ws.index_out.data(), indices, int(k), 0, 32, stream));
    const int64_t other = by_rows ? cols : rows;
    gather_zero_kernel<<<blocks_for(k * other, 256), 256, 0, stream>>>(clean, rows, cols, by_rows, indices, k, slice);
    CUDA_CHECK(cudaGetLastError());
    return k;
}

}  // namespace

int64_t split_outliers_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            __nv_bfloat16* clean, __nv_bfloat16* slice, int32_t* indices, OutlierExtractionWorkspace& ws,
                            cudaStream_t stream) {
    return split(x, rows, cols, by_rows, k, metric, clean, slice, indices, ws, stream);
}

int64_t split_outliers_cuda(const float* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            float* clean, float* slice, int32_t* indices, OutlierExtractionWorkspace& ws, cudaStream_t stream) {
    return split(x, rows, cols, by_rows, k, metric, clean, slice, indices, ws, stream);
}

void scatter_outliers_cuda(const float* src, int64_t k, const int32_t* indices, bool by_rows, float* c, int64_t rows_c,
                           int64_t cols_c, cudaStream_t stream) {
    const int64_t other = by_rows ? cols_c : rows_c;
    if (k <= 0) return;
    scatter_kernel<<<blocks_for(k * other, 256), 256, 0, stream>>>(src, k, indices, by_rows, c, rows_c, cols_c);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
