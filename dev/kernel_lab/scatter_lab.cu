// scatter_lab.cu — kernel lab: the OE-right column scatter c[:, idx[i]] = sliver[:, i] into a large
// row-major FP32 C (AdaHOP's 8192×4096 shape, 64 columns), production kernel against variants, each checked
// byte for byte against the production result and timed (a) right after C was rewritten by a full-size
// copy (the GEMM's output, as in training) and (b) batched on an L2-warm C. CMake target scatter_lab
// (dev/CMakeLists.txt); run the binary on the GPU machine.
//
// Measured (H200, bench/results/history.jsonl): every variant writes the same bytes and takes
// 25–33 µs either way (production 27.2 / 27.4, reverse rows 24.9 / 27.6, lane per row 32.6 / 28.8, flat 25.6 /
// 25.3). ncu of the production kernel: 21 µs, ~1.07 M L2 write sectors for the 524 K scattered 4-byte stores,
// write hit rate 59 %, L2 throughput 36 %, 176 cycles per issued instruction: the scattered partial-sector
// writes are L2-latency-bound whatever the order; the floor moves only if the sliver's columns are written
// where C is produced (the GEMM epilogue).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "adahop/cuda/outlier_extraction.cuh"
#include "core/cuda_device.h"
#include "../../bench/cuda_event_timing.h"

using namespace lowbit;

namespace {

constexpr int kThreads = 256;

// rows in reverse order (the rows the previous kernel wrote last first)
__global__ void scatter_reverse_kernel(const float* __restrict__ src, int k, const int32_t* __restrict__ idx, float* __restrict__ c,
                                       int64_t rows, int64_t cols) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
    for (int64_t w = (int64_t(blockIdx.x) * kThreads + threadIdx.x) >> 5; w < rows; w += warps) {
        const int64_t j = rows - 1 - w;
        for (int i = lane; i < k; i += 32) c[j * cols + __ldg(idx + i)] = __ldg(src + j * k + i);
    }
}

// lane = row: a warp takes 32 consecutive rows and walks the k columns (one column per store instruction)
__global__ void scatter_lane_rows_kernel(const float* __restrict__ src, int k, const int32_t* __restrict__ idx, float* __restrict__ c,
                                         int64_t rows, int64_t cols) {
    const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (j >= rows) return;
    for (int i = 0; i < k; ++i) c[j * cols + __ldg(idx + i)] = __ldg(src + j * k + i);
}

// a thread per (row, column) with the column fastest (as production) but a flat grid
__global__ void scatter_flat_kernel(const float* __restrict__ src, int k, const int32_t* __restrict__ idx, float* __restrict__ c,
                                    int64_t rows, int64_t cols) {
    const int64_t t = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (t >= rows * k) return;
    const int64_t j = t / k;
    const int i = int(t % k);
    c[j * cols + __ldg(idx + i)] = __ldg(src + t);
}


}  // namespace

int main() {
    const int64_t M = 8192, N = 4096;
    const int k = 64;
    std::mt19937 gen(7);
    std::vector<int32_t> all(N);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    std::vector<int32_t> idx(all.begin(), all.begin() + k);
    std::sort(idx.begin(), idx.end());
    std::vector<float> src(size_t(M * k));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : src) x = u(gen);
    DeviceBuffer<float> d_src(src.size()), d_c(size_t(M * N)), d_fill(size_t(M * N)), d_ref(size_t(M * N));
    DeviceBuffer<int32_t> d_idx(idx.size());
    CUDA_CHECK(cudaMemcpy(d_src.data(), src.data(), src.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_idx.data(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_fill.data(), 0x3c, size_t(M * N) * 4));
    auto refill = [&] { CUDA_CHECK(cudaMemcpy(d_c.data(), d_fill.data(), size_t(M * N) * 4, cudaMemcpyDeviceToDevice)); };
    const unsigned warps_grid = unsigned(std::min<int64_t>((M + 7) / 8, int64_t(cuda_multiprocessor_count()) * 16));
    struct Variant {
        const char* name;
        std::function<void()> run;
    };
    std::vector<Variant> vs = {
        {"production (warp per row)", [&] { scatter_outliers_cuda(d_src.data(), k, d_idx.data(), false, d_c.data(), M, N); }},
        {"reverse rows", [&] { scatter_reverse_kernel<<<warps_grid, kThreads>>>(d_src.data(), k, d_idx.data(), d_c.data(), M, N); }},
        {"lane per row", [&] { scatter_lane_rows_kernel<<<unsigned((M + kThreads - 1) / kThreads), kThreads>>>(d_src.data(), k, d_idx.data(), d_c.data(), M, N); }},
        {"flat thread per element", [&] { scatter_flat_kernel<<<unsigned((M * k + kThreads - 1) / kThreads), kThreads>>>(d_src.data(), k, d_idx.data(), d_c.data(), M, N); }},
    };
    refill();
    vs[0].run();
    CUDA_CHECK(cudaMemcpy(d_ref.data(), d_c.data(), size_t(M * N) * 4, cudaMemcpyDeviceToDevice));
    std::vector<float> ref(size_t(M * N)), got(size_t(M * N));
    CUDA_CHECK(cudaMemcpy(ref.data(), d_ref.data(), ref.size() * 4, cudaMemcpyDeviceToHost));
    const double copy_us = median_event_us(refill, 20);
    std::printf("device %s\nC %lldx%lld FP32, %d columns; the refill copy (512 MB moved) %.1f us\n", cuda_device_description().c_str(),
                (long long)M, (long long)N, k, copy_us);
    for (auto& v : vs) {
        refill();
        v.run();
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(got.data(), d_c.data(), got.size() * 4, cudaMemcpyDeviceToHost));
        const bool same = got == ref;
        const double after_fill = median_event_us(v.run, 30, [&](int) { refill(); });
        const double warm = median_event_us([&] { for (int i = 0; i < 20; ++i) v.run(); }, 10) / 20.0;
        std::printf("%-28s %s  after a full rewrite of C: %6.1f us   batched on a warm C: %6.1f us\n", v.name, same ? "same bytes" : "DIFFERENT",
                    after_fill, warm);
    }
    return 0;
}
