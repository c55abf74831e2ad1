// host_copy_lab.cu — how fast host↔device copies of post-training quantization's sizes are on this machine:
// pageable cudaMemcpy (what the PTQ device code does), pinned buffers, pageable memory registered in place
// (cudaHostRegister, timing the registration), and a pageable copy staged through a pinned double buffer
// (host memcpy by several threads overlapped with the DMA); and what a fresh host allocation of that size costs
// to touch (page faults), as malloc gives it, after madvise(MADV_HUGEPAGE), and reused after a free with
// glibc kept from returning memory (mallopt). Run by hand on the GPU host:
//   host_copy_lab [MiB]      (default 1024)
#include "core/cuda_device.h"

#include <malloc.h>
#include <sys/mman.h>

#include <chrono>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

using namespace lowbit;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// memcpy of n bytes by `threads` threads.
void parallel_memcpy(char* dst, const char* src, size_t n, int threads) {
    std::vector<std::thread> pool;
    const size_t part = (n + size_t(threads) - 1) / size_t(threads);
    for (int t = 0; t < threads; ++t) {
        const size_t a = size_t(t) * part, b = std::min(n, a + part);
        if (a < b) pool.emplace_back([=] { std::memcpy(dst + a, src + a, b - a); });
    }
    for (auto& th : pool) th.join();
}

template <typename F>
double best_of(int reps, F f) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        f();
        best = std::min(best, now_s() - t0);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const size_t mib = argc > 1 ? size_t(std::atoll(argv[1])) : 1024, n = mib << 20;
    std::vector<char> pageable(n);
    for (size_t i = 0; i < n; i += 4096) pageable[i] = char(i);
    char* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, n));
    const auto rate = [&](double s) { return double(n) / s / 1e9; };
    std::printf("host_copy_lab: %zu MiB, %u host threads\n", mib, std::thread::hardware_concurrency());

    const double h2d = best_of(3, [&] { CUDA_CHECK(cudaMemcpy(dev, pageable.data(), n, cudaMemcpyHostToDevice)); });
    const double d2h = best_of(3, [&] { CUDA_CHECK(cudaMemcpy(pageable.data(), dev, n, cudaMemcpyDeviceToHost)); });
    std::printf("pageable cudaMemcpy: H2D %.2f GB/s, D2H %.2f GB/s\n", rate(h2d), rate(d2h));

    char* pinned = nullptr;
    double t0 = now_s();
    CUDA_CHECK(cudaHostAlloc(&pinned, n, cudaHostAllocDefault));
    const double alloc = now_s() - t0;
    std::memset(pinned, 1, n);
    const double ph2d = best_of(3, [&] { CUDA_CHECK(cudaMemcpy(dev, pinned, n, cudaMemcpyHostToDevice)); });
    const double pd2h = best_of(3, [&] { CUDA_CHECK(cudaMemcpy(pinned, dev, n, cudaMemcpyDeviceToHost)); });
    std::printf("pinned (cudaHostAlloc %.3f s): H2D %.2f GB/s, D2H %.2f GB/s\n", alloc, rate(ph2d), rate(pd2h));
    for (int threads : {1, 4, 8, 16}) {
        const double m = best_of(3, [&] { parallel_memcpy(pinned, pageable.data(), n, threads); });
        std::printf("host memcpy pageable -> pinned, %d threads: %.2f GB/s\n", threads, rate(m));
    }

    t0 = now_s();
    const cudaError_t reg = cudaHostRegister(pageable.data(), n, cudaHostRegisterDefault);
    const double reg_s = now_s() - t0;
    if (reg == cudaSuccess) {
        const double rh2d = best_of(3, [&] { CUDA_CHECK(cudaMemcpy(dev, pageable.data(), n, cudaMemcpyHostToDevice)); });
        const double rd2h = best_of(3, [&] { CUDA_CHECK(cudaMemcpy(pageable.data(), dev, n, cudaMemcpyDeviceToHost)); });
        t0 = now_s();
        CUDA_CHECK(cudaHostUnregister(pageable.data()));
        std::printf("registered in place (register %.3f s, unregister %.3f s): H2D %.2f GB/s, D2H %.2f GB/s\n", reg_s,
                    now_s() - t0, rate(rh2d), rate(rd2h));
    } else {
        std::printf("cudaHostRegister failed: %s\n", cudaGetErrorString(reg));
        cudaGetLastError();
    }

    // Staged H2D and D2H: 64 MiB chunks through two pinned halves, host copies by 8 threads overlapping the DMA.
    const size_t chunk = size_t(64) << 20;
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t done[2];
    for (auto& e : done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int threads : {4, 8}) {
        const double sh2d = best_of(3, [&] {
            for (size_t off = 0, i = 0; off < n; off += chunk, ++i) {
                const size_t len = std::min(chunk, n - off);
                char* stage = pinned + (i % 2) * chunk;
                if (i >= 2) CUDA_CHECK(cudaEventSynchronize(done[i % 2]));
                parallel_memcpy(stage, pageable.data() + off, len, threads);
                CUDA_CHECK(cudaMemcpyAsync(dev + off, stage, len, cudaMemcpyHostToDevice, st));
                CUDA_CHECK(cudaEventRecord(done[i % 2], st));
            }
            CUDA_CHECK(cudaStreamSynchronize(st));
        });
        const double sd2h = best_of(3, [&] {
            const size_t chunks = (n + chunk - 1) / chunk;
            for (size_t i = 0; i < chunks + 1; ++i) {
                if (i < chunks) {  // queue chunk i into half i % 2 (after half i % 2's previous chunk was drained)
                    const size_t off = i * chunk, len = std::min(chunk, n - off);
                    CUDA_CHECK(cudaMemcpyAsync(pinned + (i % 2) * chunk, dev + off, len, cudaMemcpyDeviceToHost, st));
                    CUDA_CHECK(cudaEventRecord(done[i % 2], st));
                }
                if (i >= 1) {  // drain chunk i − 1
                    const size_t j = i - 1, off = j * chunk, len = std::min(chunk, n - off);
                    CUDA_CHECK(cudaEventSynchronize(done[j % 2]));
                    parallel_memcpy(pageable.data() + off, pinned + (j % 2) * chunk, len, threads);
                }
            }
        });
        std::printf("staged through pinned, %d threads: H2D %.2f GB/s, D2H %.2f GB/s\n", threads, rate(sh2d), rate(sd2h));
    }
    CUDA_CHECK(cudaFreeHost(pinned));
    CUDA_CHECK(cudaFree(dev));

    // Fresh allocations of n bytes, filled once (what a new std::vector of that size costs before use).
    {
        std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
        std::string line;
        std::getline(thp, line);
        std::printf("transparent hugepages: %s\n", line.c_str());
    }
    const auto touch = [&](char* p) { parallel_memcpy(p, pageable.data(), n, 1); };
    for (int rep = 0; rep < 2; ++rep) {
        t0 = now_s();
        char* p = static_cast<char*>(std::malloc(n));
        touch(p);
        const double plain = now_s() - t0;
        std::free(p);
        t0 = now_s();
        p = static_cast<char*>(std::malloc(n + (size_t(2) << 20)));
        char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + (size_t(2) << 20) - 1) & ~((size_t(2) << 20) - 1));
        madvise(aligned, n, MADV_HUGEPAGE);
        touch(aligned);
        const double huge = now_s() - t0;
        std::free(p);
        std::printf("fresh %zu MiB malloc + one-thread fill: %.3f s plain (%.2f GB/s), %.3f s after MADV_HUGEPAGE (%.2f GB/s)\n",
                    mib, plain, rate(plain), huge, rate(huge));
    }
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
    {
        char* p = static_cast<char*>(std::malloc(n));
        touch(p);
        std::free(p);
        t0 = now_s();
        p = static_cast<char*>(std::malloc(n));
        touch(p);
        const double reused = now_s() - t0;
        std::free(p);
        std::printf("malloc again after free with M_MMAP_MAX 0, no trimming: %.3f s (%.2f GB/s)\n", reused, rate(reused));
    }
    return 0;
}
