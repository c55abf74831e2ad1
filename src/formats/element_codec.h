// element_codec.h — scalar codecs for the element types of lowbit: FP4 E2M1, FP6 E2M3/E3M2, FP8 E4M3/E5M2
// (OCP MX v1.0 §5.3), BF16 and FP16, plus the E8M0 scale (§5.4.1). This header *defines* every element
// conversion: CPU references and CUDA kernels call these same LOWBIT_HD functions.
//
// Encoding is exact: |x| is split into a quantum 2^q of the target's grid (q from the exponent of x,
// clamped at the subnormal boundary) and a significand m = |x|/2^q < 2^(M+1) computed exactly in FP32;
// m is rounded to an integer (nearest-even, half-away-from-zero, or stochastic with 24 random bits); the
// result is range-checked after rounding.
//   Overflow::saturate — finite overflow and ±Inf clamp to ±max normal (OCP MX rule for elements).
//   Overflow::special  — overflow and ±Inf become Inf where the type has Inf (E5M2, FP16, BF16), NaN where
//                        it has only NaN (E4M3), max normal where it has neither (E2M1, E2M3, E3M2).
// NaN input gives the type's NaN (sign kept); for types without NaN it gives +0 with the sign of the
// input — MX blocks never rely on this, since a NaN anywhere in a block makes the block scale NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bits.h"

namespace lowbit {

enum class ElementType : uint8_t { e2m1, e2m3, e3m2, e4m3, e5m2, bf16, fp16 };
enum class Rounding : uint8_t { nearest_even, half_away, stochastic };
enum class Overflow : uint8_t { saturate, special };

struct ElementSpec {
    int exp_bits;
    int man_bits;
    int bias;
    bool ieee_special;  // exponent all-ones holds Inf (mantissa 0) and NaN (E5M2, FP16, BF16)
    bool nan_all_ones;  // only S.1111.111 is NaN, the rest of the top binade is finite (OCP E4M3)

    LOWBIT_HD int total_bits() const { return 1 + exp_bits + man_bits; }
    LOWBIT_HD uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
    LOWBIT_HD int max_exp_field() const { return (1 << exp_bits) - (ieee_special ? 2 : 1); }
    LOWBIT_HD int max_man_at_top() const { return (1 << man_bits) - (nan_all_ones ? 2 : 1); }
    LOWBIT_HD int emin() const { return 1 - bias; }                  // exponent of the smallest normal
    LOWBIT_HD int emax() const { return max_exp_field() - bias; }    // exponent of the largest normal
    LOWBIT_HD bool has_inf() const { return ieee_special; }
    LOWBIT_HD bool has_nan() const { return ieee_special || nan_all_ones; }
    LOWBIT_HD uint32_t max_finite_code() const { return uint32_t(max_exp_field() << man_bits) | uint32_t(max_man_at_top()); }
    LOWBIT_HD uint32_t inf_code() const { return uint32_t(((1 << exp_bits) - 1) << man_bits); }
    LOWBIT_HD uint32_t nan_code() const {
        return ieee_special ? inf_code() | (1u << (man_bits - 1)) : (nan_all_ones ? (1u << (exp_bits + man_bits)) - 1 : 0u);
    }
};

LOWBIT_HD ElementSpec element_spec(ElementType t) {
    switch (t) {
        case ElementType::e2m1: return {2, 1, 1, false, false};
        case ElementType::e2m3: return {2, 3, 1, false, false};
        case ElementType::e3m2: return {3, 2, 3, false, false};
        case ElementType::e4m3: return {4, 3, 7, false, true};
        case ElementType::e5m2: return {5, 2, 15, true, false};
        case ElementType::bf16: return {8, 7, 127, true, false};
        case ElementType::fp16: return {5, 10, 15, true, false};
    }
    return {2, 1, 1, false, false};
}

LOWBIT_HD float decode_element(ElementSpec s, uint32_t code) {
    const uint32_t sign = code & s.sign_bit();
    const int exp = int((code >> s.man_bits) & ((1u << s.exp_bits) - 1));
    const uint32_t man = code & ((1u << s.man_bits) - 1);
    float v;
    if (s.ieee_special && exp == (1 << s.exp_bits) - 1) {
        v = man == 0 ? bits_float(0x7F800000u) : bits_float(0x7FC00000u);
    } else if (s.nan_all_ones && exp == (1 << s.exp_bits) - 1 && man == (1u << s.man_bits) - 1) {
        v = bits_float(0x7FC00000u);
    } else if (exp == 0) {
        v = scale_pow2(float(man), s.emin() - s.man_bits);
    } else {
        v = scale_pow2(float((1u << s.man_bits) | man), exp - s.bias - s.man_bits);
    }
    return sign ? -v : v;
}

// Rounds the non-negative significand m (exact FP32) to an integer with the given mode.
LOWBIT_HD uint32_t round_significand(float m, Rounding r, uint32_t random24) {
    const float fl = floorf(m);
    const float frac = m - fl;
    uint32_t n = uint32_t(fl);
    bool up;
    switch (r) {
        case Rounding::nearest_even: up = frac > 0.5f || (frac == 0.5f && (n & 1u)); break;
        case Rounding::half_away: up = frac >= 0.5f; break;
        default: up = frac > float(random24) * 0x1p-24f; break;  // P(up) = frac: unbiased
    }
    return n + (up ? 1u : 0u);
}

LOWBIT_HD uint32_t overflow_code(ElementSpec s, uint32_t sign, Overflow o) {
    if (o == Overflow::special && s.has_inf()) return sign | s.inf_code();
    if (o == Overflow::special && s.has_nan()) return sign | s.nan_code();
    return sign | s.max_finite_code();
}

LOWBIT_HD uint32_t encode_element(ElementSpec s, float x, Rounding r, Overflow o, uint32_t random24 = 0) {
    const uint32_t sign = (float_bits(x) >> 31) ? s.sign_bit() : 0u;
    if (is_nan(x)) return sign | s.nan_code();
    if (is_nan_or_inf(x)) return overflow_code(s, sign, o);
    const float a = fabsf(x);
    if (a == 0.0f) return sign;
    int e = floor_log2(a);
    if (e < s.emin()) e = s.emin();
    const float m = scale_pow2(a, s.man_bits - e);  // exact, < 2^(man_bits+1)
    uint32_t n = round_significand(m, r, random24);
    if (n == 0) return sign;
    if (n == (2u << s.man_bits)) {  // rounded up into the next binade
        n >>= 1;
        ++e;
    }
    uint32_t exp_field, man;
    if (n < (1u << s.man_bits)) {  // subnormal (e == emin)
        exp_field = 0;
        man = n;
    } else {
        exp_field = uint32_t(e + s.bias);
        man = n - (1u << s.man_bits);
    }
    if (int(exp_field) > s.max_exp_field() || (int(exp_field) == s.max_exp_field() && int(man) > s.max_man_at_top()))
        return overflow_code(s, sign, o);
    return sign | (exp_field << s.man_bits) | man;
}

// The value of the largest finite element (6 for E2M1, 448 for E4M3, ...).
LOWBIT_HD float element_max(ElementSpec s) { return decode_element(s, s.max_finite_code()); }

// --- E8M0 shared scale: byte b is 2^(b-127), b = 255 is NaN (no zero, no Inf). ---
constexpr uint8_t kE8m0Nan = 0xFF;
LOWBIT_HD float decode_e8m0(uint8_t b) { return b == kE8m0Nan ? bits_float(0x7FC00000u) : pow2f(int(b) - 127); }

// Host-side helpers (names for tables and CLI).
const char* element_name(ElementType t);
bool parse_element(const char* name, ElementType* out);
const char* rounding_name(Rounding r);
bool parse_rounding(const char* name, Rounding* out);

}  // namespace lowbit
