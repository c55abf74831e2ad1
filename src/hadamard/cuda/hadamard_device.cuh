// hadamard_device.cuh — device pieces of the Walsh–Hadamard transform: the stage whose partner lives in another
// lane, the 32-point transform of a block in registers with its maximum, and the block-32 Hadamard prologue
// that the fused quantize kernels of formats/cuda/mx_kernels.cuh take as a policy (hadamard_mxfp4.cu).
// In-register stages use fwht_unnormalized<N> (hadamard/hadamard.h), so every value is the CPU reference's.
// Internal to lowbit_cuda: only .cu files include it.
#pragma once

#include <cstdint>

#include "core/cuda/device_math.cuh"
#include "hadamard/hadamard.h"

namespace lowbit::cuda_detail {

// A stage whose partner element lives in another lane (h = 8·lane_mask for 8 elements per lane) is one
// shuffle and one fma. With u = the lower lane's value and v = the upper lane's (the CPU's x[i] = u + v;
// x[i+h] = u − v): the lower lane computes fma(u, +1, v) = u + v, the upper lane fma(v, −1, u) = u − v, each
// rounded once.
template <int N>
__device__ __forceinline__ void fwht_shuffle_stage(float (&v)[N], int lane_mask, int lane) {
    const float sigma = (lane & lane_mask) ? -1.0f : 1.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const float other = __shfl_xor_sync(kFullMask, v[j], lane_mask);
        v[j] = __fmaf_rn(v[j], sigma, other);
    }
}

// The 32-point transform of a block along a row, returning its maximum |y| from the last butterfly stage.
// With u, v that stage's inputs, its outputs are fl(u + v) and fl(u − v); RNE is symmetric and monotonic,
// so max(|fl(u + v)|, |fl(u − v)|) = fl(|u| + |v|) (a NaN input gives NaN both ways; u = v = ±Inf gives Inf
// here and NaN from the outputs, the same E8M0 byte 0xFF). Those 16 non-negative floats order as their bits,
// so the maximum is 8 three-input integer maxima (VIMNMX3, sm_90) and 16 adds instead of 32 float maxima,
// which share the integer pipe with the E2M1 encoding. H200, fused axis 1 at 8192²: 0.852–0.868 of copy
// bandwidth against 0.820–0.837 with a max over the outputs (block_amax32), in alternating runs; down
// columns (the TMA column kernel) 0.718–0.720 against 0.689–0.703 (bench/results/history.jsonl).
__device__ __forceinline__ float fwht32_and_amax(float (&v)[32]) {
    fwht_unnormalized<16>(&v[0]);  // stages h = 1..8 stay inside each half: the same operations as fwht_unnormalized<32>
    fwht_unnormalized<16>(&v[16]);
    uint32_t m[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const float u = v[i], w = v[i + 16];
        m[i] = __float_as_uint(fabsf(u) + fabsf(w));
        v[i] = u + w;
        v[i + 16] = u - w;
    }
#pragma unroll
    for (int i = 0; i < 5; ++i) m[3 * i] = max3_u32(m[3 * i], m[3 * i + 1], m[3 * i + 2]);
    return __uint_as_float(max3_u32(max3_u32(m[0], m[3], m[6]), max3_u32(m[9], m[12], m[15]), 0u));
}

// The prologue policy (mx_kernels.cuh) of the fused Hadamard+MX kernels: the unnormalised 32-point transform,
// whose factor hs = hadamard_inv_sqrt(32) the encoder folds into its multiplier (kScaled). Row 0 of the
// unnormalised H₃₂ is all ones, so output 0 is Σx of the block, added by the butterfly as a tree on the way
// at no cost (kBlockSum).
struct Hadamard32Prologue {
    static constexpr bool kScaled = true;
    static constexpr bool kBlockSum = true;
    __device__ __forceinline__ static float apply(float (&v)[32]) { return fwht32_and_amax(v); }
};

}  // namespace lowbit::cuda_detail
