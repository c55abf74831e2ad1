// cuda_event_timing.h — the median of CUDA-event timings, in microseconds, shared by the GPU benchmarks and
// the kernel-lab programs (dev/kernel_lab): `before(i)` runs untimed ahead of timed call i (an L2 flush, a
// refill of the output), after `warmups` untimed calls of f.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "core/cuda_device.h"

namespace lowbit {

inline double median_event_us(const std::function<void()>& f, int reps, const std::function<void(int)>& before = {}, int warmups = 3) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < warmups; ++i) f();
    std::vector<double> t;
    for (int i = 0; i < std::max(1, reps); ++i) {
        if (before) before(i);
        CUDA_CHECK(cudaEventRecord(a));
        f();
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0);
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace lowbit
