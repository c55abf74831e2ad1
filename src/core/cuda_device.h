// cuda_device.h — what every CUDA launcher needs: CUDA_CHECK (a failed call becomes lowbit::Error of kind
// runtime naming the call, file and line), device discovery for tests and benchmarks, and a small RAII
// device buffer. Usable from C++ (g++) and CUDA translation units.
//
// Note for .cu files: nvcc's front end cannot evaluate fmt's consteval format-string checks, so CUDA
// translation units never call lowbit::fail(...); they use cuda_input_error / cuda_usage_error below, or the
// host checks compiled into lowbit_lib (check_block_divisible, int_group_size, ...).
#pragma once

// fmt 9 turns FMT_CONSTEXPR off under nvcc, which leaves its own constexpr is_constant_evaluated calling a
// non-constexpr function: with C++20 the host compiler rejects any CUDA translation unit that includes
// <fmt/format.h> (core/error.h). Turning it on matches what the g++-compiled translation units get. This
// must come before the first fmt include, so CUDA sources include this header first (lowbit_cuda should
// also define it: target_compile_definitions(lowbit_cuda PUBLIC $<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)).
#if defined(__CUDACC__) && !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda.h>  // CUtensorMap (the type only; the driver's encoder is looked up at run time)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"

namespace lowbit {

[[noreturn]] void cuda_fail(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void cuda_input_error(const std::string& message);  // Error(ErrorKind::input, message)
[[noreturn]] void cuda_usage_error(const std::string& message);  // Error(ErrorKind::usage, message)

// True when at least one CUDA device can be used (false without a driver or a GPU; never throws).
bool cuda_device_available();
// One line for logs and reports, e.g. "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, L2 60 MiB), driver 13.0, runtime 13.0".
std::string cuda_device_description();
int cuda_multiprocessor_count();  // of the current device
// Whether the current device runs programmatic dependent launches (compute capability ≥ 9.0: a kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization starts while its predecessor drains).
bool cuda_supports_dependent_launch();
// Whether launchers may use the kernels built on Hopper-only instructions (TMA tensor copies): the current
// device runs lowbit's sm_90a machine code (compute capability 9.x) and TMA is not switched off. Other
// devices get the portable kernels; tests switch TMA off (process-wide) to check those on the same GPU.
bool cuda_tma_usable();
void cuda_set_tma_allowed(bool allowed);
// A 2-D TMA tensor map (sm_90) over a row-major array of `outer` rows × `inner` elements of `type` at `base`,
// rows `row_bytes` apart (a multiple of 16), copied in boxes of box_inner × box_outer elements; reads outside
// the array fill zeros, writes outside it are dropped; l2 is the L2 promotion of its loads. Throws lowbit::Error
// (runtime) when the driver rejects it.
CUtensorMap cuda_tensor_map_2d(CUtensorMapDataType type, const void* base, uint64_t inner, uint64_t outer, uint64_t row_bytes,
                               uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swizzle,
                               CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
// The most shared memory one CTA may opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize), in bytes.
int cuda_shared_memory_per_block_optin();
// Lets `kernel` (a __global__ function's address) take `bytes` of dynamic shared memory on the current device:
// cudaFuncSetAttribute once per kernel, device and larger size, not on every launch (a driver call each time).
void cuda_allow_dynamic_shared_memory(const void* kernel, int bytes);

// Checks that a device pointer is aligned to `alignment` bytes (launchers use 16-byte vector accesses).
void cuda_check_aligned(const void* p, size_t alignment, const char* what, const char* op);

// Owns count elements of T in device memory (cudaMalloc/cudaFree). Move-only.
template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) { resize(count); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }

    // Reallocates (contents are not kept).
    void resize(size_t count) {
        release();
        if (count == 0) return;
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, count * sizeof(T));
        if (err != cudaSuccess) cuda_fail(err, "cudaMalloc", __FILE__, __LINE__);
        ptr_ = static_cast<T*>(p);
        count_ = count;
    }
    // Grows to at least `count` elements (contents are not kept when it grows) and returns data().
    T* grow(size_t count) {
        if (count_ < count) resize(count);
        return ptr_;
    }
    // Holds exactly `count` elements afterwards, reallocated only when the count changes (contents are not
    // kept then), and returns data(): buffers refilled with same-sized data every step allocate once.
    T* fit(size_t count) {
        if (count_ != count) resize(count);
        return ptr_;
    }
    // Holds exactly the n host elements from `host` afterwards (grown when too small, released when n is 0),
    // copied in order on `stream`. From pageable memory cudaMemcpyAsync returns once the data is staged, so
    // the host buffer may be reused when this returns.
    void assign_async(const T* host, size_t n, cudaStream_t stream) {
        if (n == 0) {
            release();
            return;
        }
        grow(n);
        const cudaError_t err = cudaMemcpyAsync(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice, stream);
        if (err != cudaSuccess) cuda_fail(err, "cudaMemcpyAsync(host to device)", __FILE__, __LINE__);
    }
    void release() noexcept {
        if (ptr_) cudaFree(ptr_);
        ptr_ = nullptr;
        count_ = 0;
    }

    T* data() { return ptr_; }
    const T* data() const { return ptr_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

    void upload(const T* host, size_t count) {
        const cudaError_t err = cudaMemcpy(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice);
        if (err != cudaSuccess) cuda_fail(err, "cudaMemcpy(host to device)", __FILE__, __LINE__);
    }
    void download(T* host, size_t count) const {
        const cudaError_t err = cudaMemcpy(host, ptr_, count * sizeof(T), cudaMemcpyDeviceToHost);
        if (err != cudaSuccess) cuda_fail(err, "cudaMemcpy(device to host)", __FILE__, __LINE__);
    }
    void fill_bytes(uint8_t byte) {
        const cudaError_t err = cudaMemset(ptr_, byte, bytes());
        if (err != cudaSuccess) cuda_fail(err, "cudaMemset", __FILE__, __LINE__);
    }

private:
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

}  // namespace lowbit

#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        const cudaError_t lowbit_cuda_err_ = (call);                              \
        if (lowbit_cuda_err_ != cudaSuccess)                                      \
            ::lowbit::cuda_fail(lowbit_cuda_err_, #call, __FILE__, __LINE__);     \
    } while (0)
