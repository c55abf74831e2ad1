// cuda_test_util.h — what the GPU test suites share: the skip-without-GPU guard, host↔device copies of
// std::vectors (whole buffers or their first n elements), the check that a call throws a given Error, and
// running a check with the TMA kernels allowed and switched off.
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace lowbit::testing_util {

inline bool have_gpu() {
    static const bool ok = cuda_device_available();
    return ok;
}

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
    DeviceBuffer<T> d(v.size());
    d.upload(v.data(), v.size());
    return d;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer<T>& d) {
    std::vector<T> v(d.size());
    d.download(v.data(), v.size());
    return v;
}

// The first n elements of a device buffer.
template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d, size_t n) {
    std::vector<T> v(n);
    d.download(v.data(), n);
    return v;
}

// f() must throw Error of this kind with a message that says something.
template <typename F>
void expect_error(ErrorKind kind, F&& f) {
    try {
        f();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
        EXPECT_GT(std::strlen(e.what()), 20u);
    }
}

// Runs f() with the TMA kernels allowed and then switched off (cuda_set_tma_allowed, process-wide), so a check
// covers both the sm_90 kernels and the portable ones on the same GPU; leaves them allowed.
template <typename F>
void with_and_without_tma(F&& f) {
    for (bool tma : {true, false}) {
        SCOPED_TRACE(tma ? "TMA kernels allowed" : "TMA kernels off");
        cuda_set_tma_allowed(tma);
        f();
    }
    cuda_set_tma_allowed(true);
}

}  // namespace lowbit::testing_util

#define REQUIRE_GPU() \
    if (!::lowbit::testing_util::have_gpu()) GTEST_SKIP() << "no CUDA device"
