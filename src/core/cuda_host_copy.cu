// cuda_host_copy.cu — the pinned double buffer of copy_host_to_device / copy_device_to_host.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "core/cuda_host_copy.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/thread_pool.h"

namespace lowbit {

namespace {

constexpr size_t kHalf = size_t(64) << 20;      // bytes per staging half
constexpr size_t kStagedMin = size_t(8) << 20;  // smaller copies go straight
constexpr int64_t kHostGrain = int64_t(4) << 20;  // bytes per host thread at least

struct Staging {
    std::mutex lock;
    char* pinned = nullptr;  // 2 × kHalf
    bool unavailable = false;
    cudaEvent_t done[2] = {nullptr, nullptr};

    // The pinned halves, allocated on first use; null when pinned memory cannot be had (then copies go straight).
    char* get() {
        if (pinned || unavailable) return pinned;
        void* p = nullptr;
        if (cudaHostAlloc(&p, 2 * kHalf, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            unavailable = true;
            return nullptr;
        }
        for (cudaEvent_t& e : done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        pinned = static_cast<char*>(p);
        return pinned;
    }
};

Staging& staging() {
    static Staging* s = new Staging();  // never destroyed: copies may run during static destruction
    return *s;
}

void host_copy(char* dst, const char* src, size_t n) {
    parallel_for(int64_t(n), kHostGrain, [&](int64_t a, int64_t b) { std::memcpy(dst + a, src + a, size_t(b - a)); });
}

// The pinned halves for a staged copy of `bytes`, taking the lock into `guard`; null when the copy went
// straight (small, or no pinned memory): then it is done.
char* staging_for(std::unique_lock<std::mutex>& guard, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                  cudaStream_t stream) {
    Staging& s = staging();
    guard = std::unique_lock<std::mutex>(s.lock);
    char* pinned = bytes >= kStagedMin ? s.get() : nullptr;
    if (pinned) return pinned;
    guard.unlock();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return nullptr;
}

}  // namespace

void copy_host_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    std::unique_lock<std::mutex> guard;
    char* pinned = staging_for(guard, dst, src, bytes, cudaMemcpyHostToDevice, stream);
    if (!pinned) return;
    Staging& s = staging();
    char* d = static_cast<char*>(dst);
    const char* h = static_cast<const char*>(src);
    for (size_t off = 0, i = 0; off < bytes; off += kHalf, ++i) {
        const size_t len = std::min(kHalf, bytes - off);
        char* half = pinned + (i % 2) * kHalf;
        if (i >= 2) CUDA_CHECK(cudaEventSynchronize(s.done[i % 2]));  // the DMA of this half's last chunk is done
        host_copy(half, h + off, len);
        CUDA_CHECK(cudaMemcpyAsync(d + off, half, len, cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaEventRecord(s.done[i % 2], stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    std::unique_lock<std::mutex> guard;
    char* pinned = staging_for(guard, dst, src, bytes, cudaMemcpyDeviceToHost, stream);
    if (!pinned) return;
    Staging& s = staging();
    char* h = static_cast<char*>(dst);
    const char* d = static_cast<const char*>(src);
    const size_t chunks = (bytes + kHalf - 1) / kHalf;
    for (size_t i = 0; i <= chunks; ++i) {
        if (i < chunks) {  // queue chunk i into half i % 2 (its previous chunk, i − 2, was drained at step i − 1)
            const size_t off = i * kHalf, len = std::min(kHalf, bytes - off);
            CUDA_CHECK(cudaMemcpyAsync(pinned + (i % 2) * kHalf, d + off, len, cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaEventRecord(s.done[i % 2], stream));
        }
        if (i >= 1) {  // drain chunk i − 1 while chunk i is in flight
            const size_t j = i - 1, off = j * kHalf, len = std::min(kHalf, bytes - off);
            CUDA_CHECK(cudaEventSynchronize(s.done[j % 2]));
            host_copy(h + off, pinned + (j % 2) * kHalf, len);
        }
    }
}

}  // namespace lowbit
