// e2m1_fast.h — branch-free E2M1 (FP4) encoders for the hot loops of the CUDA quantizers. Each one returns
// exactly encode_element(element_spec(e2m1), x, rounding, Overflow::saturate, random24) for every x that
// is not NaN (callers never pass NaN: a NaN makes the MX block scale / NVFP4 denominator NaN and the code 0);
// tests/cuda/test_cuda_e2m1_fast.cu checks this over every non-NaN float on the GPU.
//
// Why not call encode_element: it costs ~40 instructions per element (floorf, a float→int conversion,
// branches). The H200 issues 132 SMs × 4 schedulers × 32 lanes × 1.98 GHz ≈ 33 T thread-instructions/s
// against 4.3 TB/s of memory bandwidth, i.e. ~0.13 bytes per instruction; the fused Hadamard+MXFP4
// kernel moves ~2.5 bytes per element, so it stays at memory speed only with ≲ 20 instructions per
// element in total. The magnitudes take 6 (RNE) to ~14 (stochastic, without the draw) instructions.
//
// Grid of E2M1 magnitudes (code: value): 0:0 1:0.5 2:1 3:1.5 4:2 5:3 6:4 7:6.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bits.h"

namespace lowbit {

// Round to nearest, ties to even. |x| + 2^k is one IEEE add that rounds |x| to a multiple of 2^(k−23)
// (ties to even) as long as |x| < 2^k, and the bits of the sum minus the bits of 2^k count those steps:
//   k = 22: steps of 0.5 — the grid below 2 (codes 0..4);
//   k = 23: steps of 1   — the grid on [2, 4) (codes 4..6 = steps + 2);
//   k = 24: steps of 2   — the grid on [4, 8) (codes 6..7 = steps + 4, saturated at 7).
// On its own range each count is the code; elsewhere the finer ones over-count (above their range) and
// the coarser ones never under-count, so the code is the minimum of the three and 7. Six instructions
// (3 FADD on |x|, 3 add-and-min), checked against encode_element over every non-NaN float.
LOWBIT_HD uint32_t e2m1_magnitude_rne(float x) {
    const float a = fabsf(x);
    uint32_t m = float_bits(a + 16777216.0f) - (0x4B800000u - 4u);
    m = m < 7u ? m : 7u;
    const uint32_t c2 = float_bits(a + 8388608.0f) - (0x4B000000u - 2u);
    m = c2 < m ? c2 : m;
    const uint32_t c1 = float_bits(a + 4194304.0f) - 0x4A800000u;
    return c1 < m ? c1 : m;
}

// Round to nearest, ties away from zero: the midpoints between grid values, each counted when reached.
LOWBIT_HD uint32_t e2m1_magnitude_away(float x) {
    const float a = fabsf(x);
    return uint32_t(a >= 0.25f) + uint32_t(a >= 0.75f) + uint32_t(a >= 1.25f) + uint32_t(a >= 1.75f) + uint32_t(a >= 2.5f) +
           uint32_t(a >= 3.5f) + uint32_t(a >= 5.0f);
}

// Stochastic rounding with the same draw as round_significand: up iff frac(m) > r·2^-24, m = |x|/quantum.
// m·2^24 (exact: a power-of-two multiple of |x| ≤ 6) rounded up to an integer M gives both floor(m) = the
// bits above 24 and ceil(frac·2^24) = the bits below, so "frac > r·2^-24" is the integer test low > r.
// |x| ≥ 6 always ends on code 7, so |x| is clamped to 6 first (Inf too).
LOWBIT_HD uint32_t e2m1_magnitude_stochastic(float x, uint32_t random24) {
    const float a = fminf(fabsf(x), 6.0f);
    const float mul = a < 2.0f ? 33554432.0f : (a < 4.0f ? 16777216.0f : 8388608.0f);  // 2^24 / quantum
    const uint32_t base = a < 2.0f ? 0u : (a < 4.0f ? 2u : 4u);
#if defined(__CUDA_ARCH__)
    const uint32_t m = __float2uint_ru(a * mul);
#else
    const uint32_t m = uint32_t(ceilf(a * mul));
#endif
    return (m >> 24) + ((m & 0xFFFFFFu) > random24 ? 1u : 0u) + base;
}

// The codes: magnitude | sign (bit 3). The kernels that pack eight codes into a word add the sign bits
// there instead (mx_kernels.cuh).
LOWBIT_HD uint32_t e2m1_sign_bit(float x) { return (float_bits(x) >> 28) & 8u; }
LOWBIT_HD uint32_t e2m1_encode_rne(float x) { return e2m1_magnitude_rne(x) | e2m1_sign_bit(x); }
LOWBIT_HD uint32_t e2m1_encode_away(float x) { return e2m1_magnitude_away(x) | e2m1_sign_bit(x); }
LOWBIT_HD uint32_t e2m1_encode_stochastic(float x, uint32_t random24) {
    return e2m1_magnitude_stochastic(x, random24) | e2m1_sign_bit(x);
}

}  // namespace lowbit
