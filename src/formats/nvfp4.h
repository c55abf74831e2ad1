// nvfp4.h — NVFP4 (NVIDIA, arXiv 2509.25149): E2M1 elements in blocks of 16 with an E4M3 block scale and
// one FP32 tensor scale. Two-level scaling, defined here exactly (every step is one IEEE FP32 operation):
//   tensor_scale = amax(tensor) / (6 · 448)                      (0 for an all-zero tensor)
//   block byte   = E4M3_rne_saturate((amax(block) / 6) / tensor_scale)
//   denom        = decode(block byte) · tensor_scale
//   element      = E2M1(x / denom), rounded (RNE / half-away / stochastic) and saturated to ±6
//   value        = decode(element) · denom                      (0 when denom is 0)
// A NaN/Inf anywhere makes tensor_scale NaN/Inf and the whole tensor decodes to NaN: NVFP4's single
// tensor scale cannot isolate a bad value the way a per-block E8M0 scale can.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/mx_block.h"

namespace lowbit {

constexpr int kNvfp4Block = 16;

LOWBIT_HD float nvfp4_tensor_scale(uint32_t tensor_amax_bits) {
    if (tensor_amax_bits >= 0x7F800000u) return bits_float(0x7FC00000u);
    return bits_float(tensor_amax_bits) / (6.0f * 448.0f);
}

LOWBIT_HD uint8_t nvfp4_block_code(uint32_t block_amax_bits, float tensor_scale) {
    if (tensor_scale == 0.0f) return 0;
    const float target = (bits_float(block_amax_bits) / 6.0f) / tensor_scale;
    return uint8_t(encode_element(element_spec(ElementType::e4m3), target, Rounding::nearest_even, Overflow::saturate));
}

LOWBIT_HD float nvfp4_denominator(uint8_t block_code, float tensor_scale) {
    return decode_element(element_spec(ElementType::e4m3), block_code) * tensor_scale;
}

LOWBIT_HD uint32_t nvfp4_encode(float x, float denom, Rounding r, uint32_t random24) {
    if (denom == 0.0f || is_nan_or_inf(denom)) return 0;
    return encode_element(element_spec(ElementType::e2m1), x / denom, r, Overflow::saturate, random24);
}

LOWBIT_HD float nvfp4_decode(uint32_t code, float denom) {
    if (is_nan_or_inf(denom)) return bits_float(0x7FC00000u);
    if (denom == 0.0f) return 0.0f;
    return decode_element(element_spec(ElementType::e2m1), code) * denom;
}

// Blocked layout as MxMatrix: codes [outer][inner] (one per byte), block_scales [outer][inner/16].
struct Nvfp4Matrix {
    int64_t rows = 0, cols = 0;
    int axis = 1;
    float tensor_scale = 0.0f;
    std::vector<uint8_t> codes;
    std::vector<uint8_t> block_scales;

    int64_t outer() const { return axis == 1 ? rows : cols; }
    int64_t inner() const { return axis == 1 ? cols : rows; }
};

Nvfp4Matrix nvfp4_quantize(const float* x, int64_t rows, int64_t cols, const QuantizeOptions& opt);
void nvfp4_dequantize(const Nvfp4Matrix& q, float* out);

}  // namespace lowbit
