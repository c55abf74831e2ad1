// cuda_device.cu — CUDA error reporting, device discovery and alignment checks (see cuda_device.h).
#include "core/cuda_device.h"

#include <atomic>
#include <cstdio>

namespace lowbit {

void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
    throw Error(ErrorKind::runtime, std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                                        ") in " + call + " at " + file + ":" + std::to_string(line));
}

void cuda_input_error(const std::string& message) { throw Error(ErrorKind::input, message); }
void cuda_usage_error(const std::string& message) { throw Error(ErrorKind::usage, message); }

bool cuda_device_available() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver / no device" error
        return false;
    }
    return n > 0;
}

std::string cuda_device_description() {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB), driver %d.%d, runtime %d.%d", p.name, p.major,
                  p.minor, p.multiProcessorCount, double(p.totalGlobalMem) / double(1ull << 30), p.l2CacheSize >> 20,
                  driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
    return buf;
}

int cuda_multiprocessor_count() {
    static std::atomic<int> cache[64] = {};  // per device: launchers ask on every call
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 0 && dev < 64 && (n = cache[dev].load(std::memory_order_relaxed)) > 0) return n;
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev >= 0 && dev < 64) cache[dev].store(n, std::memory_order_relaxed);
    return n;
}

bool cuda_supports_dependent_launch() {
    static std::atomic<int> cache[64] = {};  // per device: 0 unknown, 1 no, 2 yes
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 0 && dev < 64 && cache[dev].load(std::memory_order_relaxed) != 0) return cache[dev].load() == 2;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (dev >= 0 && dev < 64) cache[dev].store(major >= 9 ? 2 : 1, std::memory_order_relaxed);
    return major >= 9;
}

void cuda_check_aligned(const void* p, size_t alignment, const char* what, const char* op) {
    if (p == nullptr) cuda_input_error(std::string(op) + ": " + what + " is a null pointer");
    if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
        cuda_input_error(std::string(op) + ": " + what + " must be " + std::to_string(alignment) +
                         "-byte aligned (cudaMalloc returns 256-byte aligned memory; pass the start of an allocation "
                         "or an offset that keeps the alignment)");
}

}  // namespace lowbit
