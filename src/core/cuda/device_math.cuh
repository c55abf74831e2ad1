// device_math.cuh — generic device arithmetic: the full warp mask of the *_sync intrinsics, the NaN-propagating
// float maximum (max.NaN) and the three-input integer maximum (VIMNMX3). Only .cu files include this header.
#pragma once

#include <cstdint>

namespace lowbit::cuda_detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;  // every lane of the warp takes part

// max.NaN (sm_80+) returns NaN when either input is NaN, so the float maximum of |x| over a block has the
// same E8M0 consequence as the CPU's integer max of abs_bits: NaN/Inf → scale 0xFF, and for finite values
// the float order of |x| is the integer order of abs_bits. Associative and commutative.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else  // host compilation of this device code (CPU emulation of the kernels in development)
    return (a != a || b != b) ? __uint_as_float(0x7FFFFFFFu) : (a > b ? a : b);
#endif
}
__device__ __forceinline__ float max_nan_abs(float acc, float x) { return max_nan(acc, fabsf(x)); }

// Maximum of three unsigned words in one instruction (VIMNMX3, sm_90).
__device__ __forceinline__ uint32_t max3_u32(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
    return __vimax3_u32(a, b, c);
#else
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
#endif
}

}  // namespace lowbit::cuda_detail
