// detector_lab.cu — kernel lab: the GPU detector's device part (detector_stats_cuda: both launches) on BF16
// matrices of the bench_adahop operand shapes, timed in the steady state of a stream (20 back-to-back calls
// per event pair, median of 15), next to a device-to-device copy of the same matrix measured in the same run
// (the copy moves 2× the bytes the detector reads, so half its time is the detector's floor). CMake target
// detector_lab (dev/CMakeLists.txt), linked against the tree's outlier_stats.cu: to time a variant, edit that
// file in a working tree, rebuild and run `detector_lab NAME` (NAME labels the output lines).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "adahop/cuda/outlier_stats.cuh"

using namespace lowbit;

namespace {

template <class F>
double steady_us(F f) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 5; ++i) f();
    std::vector<double> t;
    for (int rep = 0; rep < 15; ++rep) {
        CUDA_CHECK(cudaEventRecord(a));
        for (int i = 0; i < 20; ++i) f();
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0 / 20);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const char* tag = argc > 1 ? argv[1] : "tree";
    const int64_t shapes[][2] = {{4096, 2048}, {8192, 2048}, {4096, 4096}, {2048, 8192}, {4096, 8192}, {8192, 4096}};
    OutlierStatsWorkspace ws;
    std::printf("%-12s %-10s %12s %10s %10s %8s  moments (mean, sd of the row / column variances)\n", "variant", "shape",
                "detector us", "copy us", "floor us", "floor/t");
    for (auto s : shapes) {
        const int64_t R = s[0], C = s[1];
        std::vector<__nv_bfloat16> h(size_t(R * C));
        uint32_t state = 12345;  // uniform in [-1, 1): the numbers only have to be reproducible
        for (auto& v : h) {
            state = state * 1664525u + 1013904223u;
            v = __float2bfloat16(float(int(state >> 9) - (1 << 22)) / float(1 << 22));
        }
        DeviceBuffer<__nv_bfloat16> x(h.size()), y(h.size());
        x.upload(h.data(), h.size());
        const double us = steady_us([&] { detector_stats_cuda(x.data(), R, C, ws); });
        const double copy = steady_us([&] {
            CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), x.bytes(), cudaMemcpyDeviceToDevice));
        });
        double m[6];
        CUDA_CHECK(cudaMemcpy(m, ws.moments.data(), sizeof m, cudaMemcpyDeviceToHost));
        std::printf("%-12s %5ldx%-5ld %12.2f %10.2f %10.2f %8.2f  %.6g %.6g / %.6g %.6g\n", tag, long(R), long(C), us, copy,
                    copy / 2, copy / 2 / us, m[0], m[1], m[3], m[4]);
    }
    return 0;
}
