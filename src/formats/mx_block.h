// mx_block.h — OCP Microscaling (MX v1.0) block formats: MXFP4 (E2M1), MXFP6 (E2M3, E3M2), MXFP8 (E4M3,
// E5M2) and MXINT8, 32 elements per block sharing one E8M0 scale, blocks along a chosen axis of a matrix.
//
// Shared-scale rules (adahop.md §2.2), with e = floor(log2 amax) and emax = exponent of the element's
// largest normal (2 for E2M1):
//   floor  : s = e − emax                        (OCP §6.3; microxcaling, ggml)      amax/X in [4, 8) for E2M1
//   rceil  : smallest s with amax ≤ max_elem·2^s  (NVIDIA/cuBLAS "ceil(log2(amax/max))", computed exactly)
//   midmax : s = e − emax + [amax/2^e ≥ (max_mant + 2)/2]   (AMD "round even (adaptive)"; 1.75 for E2M1)
// The biased byte s + 127 is clamped to [0, 254]. An all-zero block gets byte 0. A block holding NaN or
// ±Inf gets the NaN scale 0xFF, so every value of that block decodes to NaN (microxcaling does the same).
// Elements are x·2^−s rounded (RNE / half-away / stochastic) and saturated to ±max normal.
// MXINT8: 8-bit two's complement with an implicit 2^−6 (values k/64), symmetric range ±127/64.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/element_codec.h"

namespace lowbit {

enum class ScaleRule : uint8_t { floor, rceil, midmax };
enum class MxElement : uint8_t { e2m1, e2m3, e3m2, e4m3, e5m2, int8 };

constexpr int kMxBlock = 32;

struct MxSpec {
    MxElement element;
    ElementSpec elem;  // unused for int8
    LOWBIT_HD bool is_int() const { return element == MxElement::int8; }
    LOWBIT_HD int emax() const { return is_int() ? 0 : elem.emax(); }
    LOWBIT_HD float max_value() const { return is_int() ? 127.0f / 64.0f : element_max(elem); }
    LOWBIT_HD int bits() const { return is_int() ? 8 : elem.total_bits(); }
};

LOWBIT_HD MxSpec mx_spec(MxElement e) {
    switch (e) {
        case MxElement::e2m1: return {e, element_spec(ElementType::e2m1)};
        case MxElement::e2m3: return {e, element_spec(ElementType::e2m3)};
        case MxElement::e3m2: return {e, element_spec(ElementType::e3m2)};
        case MxElement::e4m3: return {e, element_spec(ElementType::e4m3)};
        case MxElement::e5m2: return {e, element_spec(ElementType::e5m2)};
        default: return {e, element_spec(ElementType::e2m1)};
    }
}

// |x| as ordered bits: the max of these over a block is the bit pattern of amax, and NaN (largest) and
// Inf dominate every finite value. Integer max is exact and order-independent on CPU and GPU.
LOWBIT_HD uint32_t abs_bits(float x) { return float_bits(x) & 0x7FFFFFFFu; }

LOWBIT_HD uint8_t mx_scale_code(uint32_t amax_bits, MxSpec s, ScaleRule rule) {
    if (amax_bits >= 0x7F800000u) return kE8m0Nan;  // Inf or NaN in the block
    if (amax_bits == 0) return 0;
    const float amax = bits_float(amax_bits);
    const int e = floor_log2(amax);
    int se = e - s.emax();
    if (rule == ScaleRule::rceil) {
        if (amax > scale_pow2(s.max_value(), se)) ++se;
    } else if (rule == ScaleRule::midmax) {
        const float max_mant = scale_pow2(s.max_value(), -s.emax());  // in [1, 2)
        const float threshold = (max_mant + 2.0f) * 0.5f;
        if (scale_pow2(amax, -e) >= threshold) ++se;
    }
    int biased = se + 127;
    if (biased < 0) biased = 0;
    if (biased > 254) biased = 254;
    return uint8_t(biased);
}

// The same rules in integer form for a normal amax (0x00800000 ≤ bits < 0x7F800000), the hot path of the
// CUDA quantizers: with e = exponent field − 127 and m = the 23 mantissa bits, every rule is
//     s = e − emax + [m ≥ inc_from],
// floor never increments (inc_from = 2^23), rceil increments when amax > max_elem·2^(e−emax) ⇔ m > the
// mantissa bits of max_elem, midmax when amax·2^−e ≥ (max_mant + 2)/2 ⇔ m ≥ that threshold's mantissa bits
// (both thresholds are exact floats in [1, 2)). tests/test_mx_blocks.cpp checks it against mx_scale_code.
struct MxScaleRuleBits {
    int emax;
    uint32_t inc_from;  // mantissa bits from which the exponent is incremented
};

LOWBIT_HD MxScaleRuleBits mx_scale_rule_bits(MxSpec s, ScaleRule rule) {
    const float max_mant = scale_pow2(s.max_value(), -s.emax());  // in [1, 2)
    uint32_t inc_from = 0x00800000u;
    if (rule == ScaleRule::rceil) inc_from = (float_bits(max_mant) & 0x007FFFFFu) + 1u;
    else if (rule == ScaleRule::midmax) inc_from = float_bits((max_mant + 2.0f) * 0.5f) & 0x007FFFFFu;
    return {s.emax(), inc_from};
}

LOWBIT_HD uint8_t mx_scale_code_normal(uint32_t amax_bits, MxScaleRuleBits r) {
    int biased = int(amax_bits >> 23) - r.emax + ((amax_bits & 0x007FFFFFu) >= r.inc_from ? 1 : 0);
    biased = biased < 0 ? 0 : biased;
    return uint8_t(biased > 254 ? 254 : biased);
}

// mx_scale_code for every amax bit pattern of a float element type (emax ≥ 1), without a branch: the integer
// form above, where the clamp at 254 never binds (exponent field ≤ 254 gives ≤ 255 − emax); zero and
// subnormal amax give 0 on both sides (the reference's exponent is ≤ −127, so se + 127 ≤ 1 − emax ≤ 0 before
// its clamp; here the exponent field is 0: −emax + [m ≥ inc_from] ≤ 0); Inf/NaN give 0xFF (OR-ed in).
// tests/test_mx_blocks.cpp checks it against mx_scale_code for every float element and rule.
LOWBIT_HD uint8_t mx_scale_code_float_elem(uint32_t amax_bits, MxScaleRuleBits r) {
    const int biased = int(amax_bits >> 23) - r.emax + ((amax_bits & 0x007FFFFFu) >= r.inc_from ? 1 : 0);
    const uint32_t special = amax_bits >= 0x7F800000u ? 0xFFu : 0u;
    return uint8_t(uint32_t(biased < 0 ? 0 : biased) | special);
}

// Element code of x in a block whose scale byte is `scale` (code 0 when the scale is NaN).
LOWBIT_HD uint32_t mx_encode(float x, uint8_t scale, MxSpec s, Rounding r, uint32_t random24) {
    if (scale == kE8m0Nan) return 0;
    const float xs = scale_pow2(x, 127 - int(scale));
    if (s.is_int()) {
        // k/64 grid: significand m = |xs|·64, rounded, clamped to 127.
        const float a = fminf(fabsf(xs) * 64.0f, 256.0f);
        uint32_t n = round_significand(a, r, random24);
        if (n > 127) n = 127;
        const int v = (float_bits(xs) >> 31) ? -int(n) : int(n);
        return uint32_t(uint8_t(int8_t(v)));
    }
    return encode_element(s.elem, xs, r, Overflow::saturate, random24);
}

LOWBIT_HD float mx_decode(uint32_t code, uint8_t scale, MxSpec s) {
    if (scale == kE8m0Nan) return bits_float(0x7FC00000u);
    const float v = s.is_int() ? float(int8_t(uint8_t(code))) * (1.0f / 64.0f) : decode_element(s.elem, code);
    return scale_pow2(v, int(scale) - 127);
}

// A matrix quantized in MX blocks. Blocked layout: the matrix is viewed as [outer][inner] with the blocks
// running along `inner` (axis 1: outer = rows, inner = cols, i.e. the input layout; axis 0: outer = cols,
// inner = rows, i.e. the transpose). codes holds one element code per byte in that layout, scales holds
// one E8M0 byte per block, [outer][inner/32]. pack_e2m1 packs FP4 codes two per byte.
struct MxMatrix {
    MxElement element = MxElement::e2m1;
    ScaleRule rule = ScaleRule::midmax;
    int64_t rows = 0, cols = 0;
    int axis = 1;
    std::vector<uint8_t> codes;
    std::vector<uint8_t> scales;

    int64_t outer() const { return axis == 1 ? rows : cols; }
    int64_t inner() const { return axis == 1 ? cols : rows; }
};

struct QuantizeOptions {
    int axis = 1;
    Rounding rounding = Rounding::nearest_even;
    uint64_t seed = 0;  // stochastic rounding: element (r, c) uses counter_random24(seed, r·cols + c)
};

// x is row-major rows × cols. The blocked dimension must be a multiple of 32 (else Error(input)).
MxMatrix mx_quantize(const float* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, const QuantizeOptions& opt);
void mx_dequantize(const MxMatrix& q, float* out);  // row-major rows × cols

// FP4 packing shared by the CUDA kernels: byte j of a row holds code 2j in the low nibble and 2j+1 in the
// high nibble (the AMD kernel order, adahop.md §2.1). `codes` length must be even.
std::vector<uint8_t> pack_e2m1(const std::vector<uint8_t>& codes);
std::vector<uint8_t> unpack_e2m1(const std::vector<uint8_t>& packed);

const char* scale_rule_name(ScaleRule r);
bool parse_scale_rule(const char* name, ScaleRule* out);
const char* mx_element_name(MxElement e);

// Checks that `dim` (the blocked dimension, named `what`) is a positive multiple of `block`.
void check_block_divisible(int64_t dim, int64_t block, const char* what, const char* format);

}  // namespace lowbit

namespace lowbit {
// Fraction of MX blocks whose largest |x| exceeds max_elem·X, i.e. blocks whose maximum is clipped by
// the shared-scale rule (the statistic behind the floor rule's "~37 % of groups clipped", adahop.md §2.1).
double mx_clipped_block_fraction(const float* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, int axis);
}  // namespace lowbit
