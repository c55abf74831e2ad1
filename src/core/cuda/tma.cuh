// tma.cuh — device wrappers of the sm_90 tensor-memory-accelerator (TMA) copies and the shared-memory
// barriers they complete on (PTX ISA 8.x: cp.async.bulk.tensor, mbarrier): the PTX wrappers every Hopper
// kernel shares (the MX column kernels today, the MXFP4 GEMM of adahop/cuda/gemm/ next). Tensor maps come
// from cuda_tensor_map_2d (core/cuda_device.h) and reach kernels as `const __grid_constant__ CUtensorMap`
// parameters. Compiled for other targets (the portable PTX) the bodies are empty: launchers use TMA kernels
// only where cuda_tma_usable() holds. Only .cu files include this header.
#pragma once

#include <cuda.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LOWBIT_TMA_DEVICE 1
#else
#define LOWBIT_TMA_DEVICE 0
#endif

namespace lowbit::cuda_detail {

__device__ __forceinline__ uint32_t smem_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// A barrier that completes a phase when `count` threads have arrived and every byte they announced landed.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
#if LOWBIT_TMA_DEVICE
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// One arrival that also announces `bytes` of TMA copies completing on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if LOWBIT_TMA_DEVICE
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
#endif
}

// One plain arrival (no transaction bytes).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if LOWBIT_TMA_DEVICE
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
#endif
}

// Waits until the phase with the given parity (0, 1, 0, ... for its uses) has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if LOWBIT_TMA_DEVICE
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(smem_address(bar)),
        "r"(parity)
        : "memory");
#endif
}

// Box (x, y) (x the inner coordinate, in elements) of the map's array → shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
#if LOWBIT_TMA_DEVICE
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            smem_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(smem_address(bar))
        : "memory");
#endif
}

// `bytes` contiguous bytes of global memory → shared memory at dst, completing on bar (a non-tensor bulk
// copy: both addresses 16-byte aligned, bytes a multiple of 16).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if LOWBIT_TMA_DEVICE
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_address(dst)),
                 "l"(src), "r"(bytes), "r"(smem_address(bar))
                 : "memory");
#endif
}

// Shared memory at src → box (x, y) of the map's array, as part of this thread's current bulk group.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int x, int y, const void* src) {
#if LOWBIT_TMA_DEVICE
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map), "r"(x), "r"(y),
                 "r"(smem_address(src))
                 : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit_group() {
#if LOWBIT_TMA_DEVICE
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
// Returns once this thread's committed bulk stores have finished reading their shared memory (kReadOnly) or
// are complete.
template <bool kReadOnly>
__device__ __forceinline__ void bulk_wait_all() {
#if LOWBIT_TMA_DEVICE
    if constexpr (kReadOnly) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

// Makes this thread's ordinary shared-memory writes visible to later TMA reads of them (after a barrier).
__device__ __forceinline__ void fence_proxy_async_shared() {
#if LOWBIT_TMA_DEVICE
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

}  // namespace lowbit::cuda_detail
