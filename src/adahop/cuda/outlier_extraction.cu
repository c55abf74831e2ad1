// outlier_extraction.cu — top-k row/column selection, gather/zero, and the sliver scatter.
#include "adahop/cuda/outlier_extraction.cuh"

#include <algorithm>

#include <cub/block/block_radix_sort.cuh>
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

// Top-k in one block for n ≤ kBlockTopkMax: a CUB block radix sort of (~score bits, index) — scores are
// non-negative, so their FP64 bit patterns order like the values, and complementing them sorts the largest
// first; radix sort is stable, so ties keep the lower index first, as the CPU reference ranks them — then a
// bitonic sort of the first k indices ascending. One launch: CUB's device-wide sorts cost ~80 µs at
// n = 4096 (launch-bound), a shared-memory bitonic sort of all n about as much.
constexpr int kBlockTopkThreads = 512, kBlockTopkItems = 16, kBlockTopkMax = kBlockTopkThreads * kBlockTopkItems;
using BlockTopkSort = cub::BlockRadixSort<uint64_t, kBlockTopkThreads, kBlockTopkItems, int32_t>;

__global__ void __launch_bounds__(kBlockTopkThreads) block_topk_kernel(const double* sums, const uint32_t* maxbits, int n,
                                                                      bool l2, int k, int k2, int32_t* out) {
    extern __shared__ unsigned char smem[];  // BlockTopkSort::TempStorage, then reused for the k indices
    uint64_t key[kBlockTopkItems];
    int32_t idx[kBlockTopkItems];
#pragma unroll
    for (int j = 0; j < kBlockTopkItems; ++j) {
        const int i = threadIdx.x * kBlockTopkItems + j;  // blocked arrangement
        const double score = i < n ? (l2 ? sums[2 * i + 1] : double(__uint_as_float(maxbits[i]))) : 0.0;
        key[j] = i < n ? ~uint64_t(__double_as_longlong(score)) : ~uint64_t(0);
        idx[j] = i < n ? i : INT32_MAX;
    }
    BlockTopkSort(*reinterpret_cast<BlockTopkSort::TempStorage*>(smem)).Sort(key, idx);
    __syncthreads();
    int32_t* first = reinterpret_cast<int32_t*>(smem);  // ranks 0..k2-1, padded with INT32_MAX
#pragma unroll
    for (int j = 0; j < kBlockTopkItems; ++j) {
        const int rank = threadIdx.x * kBlockTopkItems + j;
        if (rank < k2) first[rank] = rank < k ? idx[j] : INT32_MAX;
    }
    __syncthreads();
    for (int size = 2; size <= k2; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < k2; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool up = (i & size) == 0;
                    if (up ? first[i] > first[j] : first[i] < first[j]) {
                        const int32_t t = first[i];
                        first[i] = first[j];
                        first[j] = t;
                    }
                }
            }
            __syncthreads();
        }
    for (int i = threadIdx.x; i < k; i += blockDim.x) out[i] = first[i];
}

int next_pow2(int64_t n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

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
    const double* sums = by_rows ? ws.stats.row_sums.data() : ws.stats.col_sums.data();
    const uint32_t* maxbits = by_rows ? ws.stats.row_max.data() : ws.stats.col_max.data();
    const int64_t other = by_rows ? cols : rows;
    if (n <= kBlockTopkMax) {
        const int k2 = next_pow2(k);
        const size_t smem = std::max(sizeof(BlockTopkSort::TempStorage), size_t(k2) * sizeof(int32_t));
        CUDA_CHECK(cudaFuncSetAttribute(block_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        block_topk_kernel<<<1, kBlockTopkThreads, smem, stream>>>(sums, maxbits, int(n), l2, int(k), k2, indices);
        CUDA_CHECK(cudaGetLastError());
        gather_zero_kernel<<<blocks_for(k * other, 256), 256, 0, stream>>>(clean, rows, cols, by_rows, indices, k, slice);
        CUDA_CHECK(cudaGetLastError());
        return k;
    }
    if (ws.keys_in.size() < size_t(n)) {
        ws.keys_in.resize(size_t(n));
        ws.keys_out.resize(size_t(n));
        ws.index_in.resize(size_t(n));
        ws.index_out.resize(size_t(n));
    }
    scores_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(sums, maxbits, n, l2, ws.keys_in.data(), ws.index_in.data());
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
