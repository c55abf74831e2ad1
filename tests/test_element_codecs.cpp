// test_element_codecs.cpp — exhaustive and edge-case tests of the element codecs (formats/element_codec.h):
// every code decoded and round-tripped, tie tables, overflow rules, a brute-force nearest-value oracle,
// the compiler's own FP16 conversion as a peer, and unbiasedness of stochastic rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/counter_rng.h"
#include "formats/element_codec.h"

using namespace lowbit;

namespace {

const ElementType kAllTypes[] = {ElementType::e2m1, ElementType::e2m3, ElementType::e3m2, ElementType::e4m3,
                                 ElementType::e5m2, ElementType::bf16, ElementType::fp16};

bool same_float(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return float_bits(a) == float_bits(b);
}

// All finite non-negative values of a type, ascending (by brute force over codes).
std::vector<float> finite_positive_values(ElementSpec s) {
    std::vector<float> v;
    for (uint32_t c = 0; c < s.sign_bit(); ++c) {
        float f = decode_element(s, c);
        if (std::isfinite(f)) v.push_back(f);
    }
    return v;
}

}  // namespace

TEST(ElementCodec, E2M1DecodeTable) {
    const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    const ElementSpec s = element_spec(ElementType::e2m1);
    for (uint32_t c = 0; c < 16; ++c) EXPECT_TRUE(same_float(decode_element(s, c), expect[c])) << c;
}

TEST(ElementCodec, KnownValuesOfEveryType) {
    EXPECT_EQ(element_max(element_spec(ElementType::e2m1)), 6.0f);
    EXPECT_EQ(element_max(element_spec(ElementType::e2m3)), 7.5f);
    EXPECT_EQ(element_max(element_spec(ElementType::e3m2)), 28.0f);
    EXPECT_EQ(element_max(element_spec(ElementType::e4m3)), 448.0f);
    EXPECT_EQ(element_max(element_spec(ElementType::e5m2)), 57344.0f);
    EXPECT_EQ(element_max(element_spec(ElementType::fp16)), 65504.0f);
    EXPECT_EQ(element_max(element_spec(ElementType::bf16)), bits_float(0x7F7F0000u));
    // smallest subnormals
    EXPECT_EQ(decode_element(element_spec(ElementType::e2m3), 1), 0.125f);
    EXPECT_EQ(decode_element(element_spec(ElementType::e3m2), 1), 0.0625f);
    EXPECT_EQ(decode_element(element_spec(ElementType::e4m3), 1), std::ldexp(1.0f, -9));
    EXPECT_EQ(decode_element(element_spec(ElementType::e5m2), 1), std::ldexp(1.0f, -16));
    EXPECT_EQ(decode_element(element_spec(ElementType::fp16), 1), std::ldexp(1.0f, -24));
    EXPECT_EQ(decode_element(element_spec(ElementType::bf16), 1), std::ldexp(1.0f, -133));
    // specials
    EXPECT_TRUE(std::isnan(decode_element(element_spec(ElementType::e4m3), 0x7F)));
    EXPECT_TRUE(std::isnan(decode_element(element_spec(ElementType::e4m3), 0xFF)));
    EXPECT_EQ(decode_element(element_spec(ElementType::e4m3), 0x7E), 448.0f);
    EXPECT_TRUE(std::isinf(decode_element(element_spec(ElementType::e5m2), 0x7C)));
    EXPECT_TRUE(std::isnan(decode_element(element_spec(ElementType::e5m2), 0x7D)));
    EXPECT_TRUE(std::isinf(decode_element(element_spec(ElementType::fp16), 0xFC00)));
    EXPECT_TRUE(std::isnan(decode_element(element_spec(ElementType::bf16), 0x7FC0)));
}

TEST(ElementCodec, EveryCodeRoundTripsUnderEveryMode) {
    for (ElementType t : kAllTypes) {
        const ElementSpec s = element_spec(t);
        const uint32_t n = 1u << s.total_bits();
        for (uint32_t c = 0; c < n; ++c) {
            const float v = decode_element(s, c);
            if (std::isnan(v)) {
                EXPECT_TRUE(std::isnan(decode_element(s, encode_element(s, v, Rounding::nearest_even, Overflow::special))));
                continue;
            }
            for (Rounding r : {Rounding::nearest_even, Rounding::half_away, Rounding::stochastic})
                for (Overflow o : {Overflow::saturate, Overflow::special}) {
                    if (std::isinf(v) && o == Overflow::saturate) continue;
                    ASSERT_EQ(encode_element(s, v, r, o, 0xABCDEF), c) << element_name(t) << " code " << c;
                }
        }
    }
}

TEST(ElementCodec, DecodedValuesAreMonotonic) {
    for (ElementType t : kAllTypes) {
        auto v = finite_positive_values(element_spec(t));
        for (size_t i = 1; i < v.size(); ++i) ASSERT_LT(v[i - 1], v[i]) << element_name(t);
    }
}

TEST(ElementCodec, E2M1TieTable) {
    // adahop.md §2.3: x in units of the scale.
    const float x[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const float rne[7] = {0, 1, 1, 2, 2, 4, 4};
    const float away[7] = {0.5f, 1, 1.5f, 2, 3, 4, 6};
    const ElementSpec s = element_spec(ElementType::e2m1);
    for (int i = 0; i < 7; ++i) {
        EXPECT_EQ(decode_element(s, encode_element(s, x[i], Rounding::nearest_even, Overflow::saturate)), rne[i]) << x[i];
        EXPECT_EQ(decode_element(s, encode_element(s, x[i], Rounding::half_away, Overflow::saturate)), away[i]) << x[i];
        EXPECT_EQ(decode_element(s, encode_element(s, -x[i], Rounding::nearest_even, Overflow::saturate)), -rne[i]) << x[i];
    }
}

TEST(ElementCodec, OverflowRules) {
    const ElementSpec e4 = element_spec(ElementType::e4m3), e5 = element_spec(ElementType::e5m2),
                      f4 = element_spec(ElementType::e2m1);
    // E4M3: 464 is the midpoint of 448 and (unrepresentable) 480: RNE keeps 448; 465 overflows.
    EXPECT_EQ(decode_element(e4, encode_element(e4, 464.0f, Rounding::nearest_even, Overflow::special)), 448.0f);
    EXPECT_TRUE(std::isnan(decode_element(e4, encode_element(e4, 465.0f, Rounding::nearest_even, Overflow::special))));
    EXPECT_EQ(decode_element(e4, encode_element(e4, 465.0f, Rounding::nearest_even, Overflow::saturate)), 448.0f);
    EXPECT_EQ(decode_element(e4, encode_element(e4, -1e30f, Rounding::nearest_even, Overflow::saturate)), -448.0f);
    EXPECT_TRUE(std::isinf(decode_element(e5, encode_element(e5, 1e30f, Rounding::nearest_even, Overflow::special))));
    EXPECT_EQ(decode_element(e5, encode_element(e5, INFINITY, Rounding::nearest_even, Overflow::saturate)), 57344.0f);
    EXPECT_EQ(decode_element(f4, encode_element(f4, 7.0f, Rounding::nearest_even, Overflow::special)), 6.0f);
    EXPECT_EQ(decode_element(f4, encode_element(f4, -INFINITY, Rounding::nearest_even, Overflow::special)), -6.0f);
    // NaN keeps its sign where the type has NaN; types without NaN give a signed zero.
    EXPECT_EQ(encode_element(e4, -NAN, Rounding::nearest_even, Overflow::special), 0xFFu);
    EXPECT_EQ(encode_element(f4, NAN, Rounding::nearest_even, Overflow::special), 0u);
}

TEST(ElementCodec, MatchesBruteForceNearestValue) {
    // Oracle: scan every finite value in double; nearest wins; ties go to the even code (RNE) or the larger
    // magnitude (half away). Values beyond the max go to max (saturate).
    for (ElementType t : {ElementType::e2m1, ElementType::e2m3, ElementType::e3m2, ElementType::e4m3, ElementType::e5m2}) {
        const ElementSpec s = element_spec(t);
        auto vals = finite_positive_values(s);
        const double maxv = vals.back();
        for (uint64_t i = 0; i < 20000; ++i) {
            // random magnitudes spanning the type's range, plus exact midpoints
            float x;
            if (i % 4 == 0 && i / 4 + 1 < vals.size() * 4) {
                size_t k = (i / 4) % (vals.size() - 1);
                x = float((double(vals[k]) + double(vals[k + 1])) / 2);
            } else {
                double u = double(counter_random24(7, i)) / (1 << 24);
                x = float(std::ldexp(1.0, s.emin() - s.man_bits - 2) * std::pow(2.0, u * (s.emax() - s.emin() + s.man_bits + 4)));
            }
            for (Rounding r : {Rounding::nearest_even, Rounding::half_away}) {
                double best = 0;
                size_t best_k = 0;
                double best_d = INFINITY;
                for (size_t k = 0; k < vals.size(); ++k) {
                    double d = std::fabs(double(vals[k]) - double(x));
                    bool take = d < best_d;
                    if (d == best_d) take = r == Rounding::half_away ? vals[k] > best : ((k & 1) == 0);
                    if (take) {
                        best_d = d;
                        best = vals[k];
                        best_k = k;
                    }
                }
                (void)best_k;
                if (double(x) > maxv) best = maxv;
                const float got = decode_element(s, encode_element(s, x, r, Overflow::saturate));
                ASSERT_EQ(double(got), best) << element_name(t) << " x=" << x << " mode " << rounding_name(r);
            }
        }
    }
}

#if defined(__FLT16_MAX__)
TEST(ElementCodec, Fp16MatchesCompilerConversion) {
    const ElementSpec s = element_spec(ElementType::fp16);
    for (uint64_t i = 0; i < 200000; ++i) {
        const float x = bits_float(uint32_t(counter_random24(3, i)) << 8 | uint32_t(counter_random24(4, i) & 0xFF));
        if (std::isnan(x)) continue;
        _Float16 h = static_cast<_Float16>(x);  // IEEE RNE, overflow to Inf
        uint16_t hb;
        std::memcpy(&hb, &h, 2);
        ASSERT_EQ(encode_element(s, x, Rounding::nearest_even, Overflow::special), hb) << x;
    }
}
#endif

TEST(ElementCodec, Bf16MatchesBitTrickRounding) {
    const ElementSpec s = element_spec(ElementType::bf16);
    for (uint64_t i = 0; i < 200000; ++i) {
        const uint32_t u = uint32_t(counter_random24(5, i)) << 8 | uint32_t(counter_random24(6, i) & 0xFF);
        const float x = bits_float(u);
        if (std::isnan(x)) continue;
        const uint32_t expect = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // RNE on the bit pattern
        ASSERT_EQ(encode_element(s, x, Rounding::nearest_even, Overflow::special), expect) << x;
    }
}

TEST(ElementCodec, StochasticRoundingIsUnbiasedAndBracketed) {
    const ElementSpec s = element_spec(ElementType::e2m1);
    const float xs[] = {0.3f, 0.1f, 1.2f, 2.7f, 4.9f, -3.3f, 5.99f};
    for (float x : xs) {
        const int n = 200000;
        double sum = 0;
        const float lo = decode_element(s, encode_element(s, x, Rounding::nearest_even, Overflow::saturate));
        for (int i = 0; i < n; ++i) {
            const float v = decode_element(s, encode_element(s, x, Rounding::stochastic, Overflow::saturate, counter_random24(11, uint64_t(i))));
            sum += v;
            // the result is one of the two grid neighbours of x
            ASSERT_LE(std::fabs(v - x), 2.0f * std::fabs(lo - x) + 2.0f) << x;
        }
        const double mean = sum / n;
        // grid spacing ≤ 2 here: the std of one draw ≤ 1, so the mean's std ≤ 1/sqrt(n) ≈ 0.0022
        EXPECT_NEAR(mean, x, 0.012) << x;
    }
}

TEST(ElementCodec, StochasticRoundingIsReproducible) {
    const ElementSpec s = element_spec(ElementType::e4m3);
    for (uint64_t i = 0; i < 1000; ++i) {
        const float x = 1.0f + float(i) / 997.0f;
        EXPECT_EQ(encode_element(s, x, Rounding::stochastic, Overflow::saturate, counter_random24(9, i)),
                  encode_element(s, x, Rounding::stochastic, Overflow::saturate, counter_random24(9, i)));
    }
}
