// cuda_device.cu — CUDA error reporting, device discovery and alignment checks (see cuda_device.h).
#include "core/cuda_device.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <tuple>
#include <vector>

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

namespace {

// The attributes launchers ask on every call, per device, asked from the driver once.
enum CachedAttribute { kSmCount, kComputeMajor, kSharedOptin, kCachedAttributes };

int cached_device_attribute(CachedAttribute which) {
    static constexpr cudaDeviceAttr kAttr[kCachedAttributes] = {cudaDevAttrMultiProcessorCount, cudaDevAttrComputeCapabilityMajor,
                                                                cudaDevAttrMaxSharedMemoryPerBlockOptin};
    static std::atomic<int> cache[kCachedAttributes][64] = {};  // value + 1; 0: not asked yet
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    const bool slot = dev >= 0 && dev < 64;
    if (slot && (v = cache[which][dev].load(std::memory_order_relaxed)) > 0) return v - 1;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, kAttr[which], dev));
    if (slot) cache[which][dev].store(v + 1, std::memory_order_relaxed);
    return v;
}

}  // namespace

int cuda_multiprocessor_count() { return cached_device_attribute(kSmCount); }

bool cuda_supports_dependent_launch() { return cached_device_attribute(kComputeMajor) >= 9; }

namespace {
std::atomic<bool> tma_allowed{true};
}  // namespace

bool cuda_tma_usable() { return tma_allowed.load(std::memory_order_relaxed) && cached_device_attribute(kComputeMajor) == 9; }
void cuda_set_tma_allowed(bool allowed) { tma_allowed.store(allowed, std::memory_order_relaxed); }

CUtensorMap cuda_tensor_map_2d(CUtensorMapDataType type, const void* base, uint64_t inner, uint64_t outer, uint64_t row_bytes,
                               uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2) {
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static const Encode encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || fn == nullptr)
            throw Error(ErrorKind::runtime, "the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12.0 or newer is needed)");
        return reinterpret_cast<Encode>(fn);
    }();
    CUtensorMap map;
    const cuuint64_t dims[2] = {inner, outer};
    const cuuint64_t strides[1] = {row_bytes};
    const cuuint32_t box[2] = {box_inner, box_outer};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult r = encode(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              swizzle, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        throw Error(ErrorKind::runtime, "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ") for a " +
                                            std::to_string(outer) + " x " + std::to_string(inner) + " array");
    return map;
}

int cuda_shared_memory_per_block_optin() { return cached_device_attribute(kSharedOptin); }

void cuda_allow_dynamic_shared_memory(const void* kernel, int bytes) {
    static std::mutex mu;
    static std::vector<std::tuple<const void*, int, int>> allowed;  // kernel, device, bytes
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [k, d, b] : allowed)
        if (k == kernel && d == dev) {
            if (b >= bytes) return;
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            b = bytes;
            return;
        }
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    allowed.emplace_back(kernel, dev, bytes);
}

void cuda_check_aligned(const void* p, size_t alignment, const char* what, const char* op) {
    if (p == nullptr) cuda_input_error(std::string(op) + ": " + what + " is a null pointer");
    if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
        cuda_input_error(std::string(op) + ": " + what + " must be " + std::to_string(alignment) +
                         "-byte aligned (cudaMalloc returns 256-byte aligned memory; pass the start of an allocation "
                         "or an offset that keeps the alignment)");
}

}  // namespace lowbit
