// test_mx_blocks.cpp — MX block formats (formats/mx_block.h): scale rules on hand-picked amax values,
// edge cases (zero, NaN/Inf, subnormal, huge blocks), error bounds, axis equivalence, packing, threads.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random_fill.h"
#include "core/thread_pool.h"
#include "formats/mx_block.h"

using namespace lowbit;

namespace {
uint8_t scale_of(float amax, MxElement e, ScaleRule r) { return mx_scale_code(abs_bits(amax), mx_spec(e), r); }
}  // namespace

TEST(MxScaleRule, Fp4HandPickedAmax) {
    // floor: s = floor(log2 amax) − 2 ; midmax: +1 iff mantissa ≥ 1.75 ; rceil: smallest s with amax ≤ 6·2^s
    struct Case { float amax; int floor_s, midmax_s, rceil_s; };
    const Case cases[] = {
        {1.0f, -2, -2, -2},      {1.49f, -2, -2, -2},  {1.5f, -2, -2, -2},   {1.51f, -2, -2, -1},
        {1.7499f, -2, -2, -1},   {1.75f, -2, -1, -1},  {1.99f, -2, -1, -1},  {2.0f, -1, -1, -1},
        {6.0f, 0, 0, 0},         {6.01f, 0, 0, 1},     {7.0f, 0, 1, 1},      {8.0f, 1, 1, 1},
        {0.75f, -3, -3, -3},     {3e38f, 125, 126, 126},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(int(scale_of(c.amax, MxElement::e2m1, ScaleRule::floor)) - 127, c.floor_s) << c.amax;
        EXPECT_EQ(int(scale_of(c.amax, MxElement::e2m1, ScaleRule::midmax)) - 127, c.midmax_s) << c.amax;
        EXPECT_EQ(int(scale_of(c.amax, MxElement::e2m1, ScaleRule::rceil)) - 127, c.rceil_s) << c.amax;
    }
}

TEST(MxScaleRule, OtherElementsUseTheirEmax) {
    // E4M3: emax 8, max 448 = 1.75·2^8; midmax threshold (1.75+2)/2 = 1.875
    EXPECT_EQ(int(scale_of(1.0f, MxElement::e4m3, ScaleRule::floor)) - 127, -8);
    EXPECT_EQ(int(scale_of(1.8f, MxElement::e4m3, ScaleRule::rceil)) - 127, -7);
    EXPECT_EQ(int(scale_of(1.8f, MxElement::e4m3, ScaleRule::midmax)) - 127, -8);
    EXPECT_EQ(int(scale_of(1.9f, MxElement::e4m3, ScaleRule::midmax)) - 127, -7);
    EXPECT_EQ(int(scale_of(1.0f, MxElement::e5m2, ScaleRule::floor)) - 127, -15);
    EXPECT_EQ(int(scale_of(1.0f, MxElement::e3m2, ScaleRule::floor)) - 127, -4);
    EXPECT_EQ(int(scale_of(1.0f, MxElement::e2m3, ScaleRule::floor)) - 127, -2);
    EXPECT_EQ(int(scale_of(1.0f, MxElement::int8, ScaleRule::floor)) - 127, 0);
    EXPECT_EQ(int(scale_of(1.99f, MxElement::int8, ScaleRule::rceil)) - 127, 1);  // 1.99 > 127/64
}

TEST(MxScaleRule, EdgeCases) {
    for (ScaleRule r : {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax}) {
        EXPECT_EQ(scale_of(0.0f, MxElement::e2m1, r), 0);
        EXPECT_EQ(scale_of(NAN, MxElement::e2m1, r), kE8m0Nan);
        EXPECT_EQ(scale_of(INFINITY, MxElement::e2m1, r), kE8m0Nan);
        EXPECT_EQ(scale_of(std::ldexp(1.0f, -140), MxElement::e2m1, r), 0);  // clamped at 2^-127
        EXPECT_EQ(scale_of(std::ldexp(1.0f, -149), MxElement::e4m3, r), 0);  // smallest subnormal
    }
    EXPECT_EQ(scale_of(std::ldexp(1.0f, -124), MxElement::e2m1, ScaleRule::floor), 1);
    EXPECT_EQ(scale_of(3.4e38f, MxElement::int8, ScaleRule::rceil), 254);  // clamped at 2^127
}

// The integer forms used by the CUDA hot path equal mx_scale_code for every normal amax: all 2^23 mantissas
// at three exponents (one where floor's clamp at 0, one mid-range, one where the clamp at 254 bites), and
// the boundary mantissas at every exponent, for every element and rule (the float-element form: float
// elements).
TEST(MxScaleRule, IntegerFormEqualsReferenceForNormalAmax) {
    for (MxElement e : {MxElement::e2m1, MxElement::e2m3, MxElement::e3m2, MxElement::e4m3, MxElement::e5m2, MxElement::int8})
        for (ScaleRule r : {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax}) {
            const MxSpec s = mx_spec(e);
            const MxScaleRuleBits rb = mx_scale_rule_bits(s, r);
            int64_t bad = 0;
            for (uint32_t exp_field : {1u, 127u, 254u})
                for (uint32_t m = 0; m < (1u << 23); ++m) {
                    const uint32_t bits = (exp_field << 23) | m;
                    bad += mx_scale_code_normal(bits, rb) != mx_scale_code(bits, s, r);
                    if (!s.is_int()) bad += mx_scale_code_float_elem(bits, rb) != mx_scale_code(bits, s, r);
                }
            for (uint32_t exp_field = 1; exp_field < 255; ++exp_field)
                for (uint32_t m : {0u, 1u, rb.inc_from - 1, rb.inc_from, rb.inc_from + 1, 0x7FFFFFu}) {
                    const uint32_t bits = (exp_field << 23) | (m & 0x7FFFFFu);
                    bad += mx_scale_code_normal(bits, rb) != mx_scale_code(bits, s, r);
                    if (!s.is_int()) bad += mx_scale_code_float_elem(bits, rb) != mx_scale_code(bits, s, r);
                }
            EXPECT_EQ(bad, 0) << mx_element_name(e) << " " << scale_rule_name(r);
        }
}

// The branch-free form for float elements equals mx_scale_code for zero, every subnormal, Inf and the NaN
// patterns (normal amax: the test above), for every float element and rule.
TEST(MxScaleRule, FloatElementFormEqualsReferenceForZeroSubnormalInfNan) {
    for (MxElement e : {MxElement::e2m1, MxElement::e2m3, MxElement::e3m2, MxElement::e4m3, MxElement::e5m2})
        for (ScaleRule r : {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax}) {
            const MxSpec s = mx_spec(e);
            const MxScaleRuleBits rb = mx_scale_rule_bits(s, r);
            int64_t bad = 0;
            for (uint32_t bits = 0; bits < 0x00800000u; ++bits) bad += mx_scale_code_float_elem(bits, rb) != mx_scale_code(bits, s, r);
            for (uint32_t bits : {0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x00800000u, 0x7F7FFFFFu})
                bad += mx_scale_code_float_elem(bits, rb) != mx_scale_code(bits, s, r);
            EXPECT_EQ(bad, 0) << mx_element_name(e) << " " << scale_rule_name(r);
        }
}

TEST(MxBlocks, ZeroNanInfBlocksAreIsolated) {
    std::vector<float> x(4 * 64);
    fill_gaussian(x.data(), int64_t(x.size()), 3);
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // row 0 block 0: zeros
    x[64 + 5] = NAN;                            // row 1 block 0
    x[128 + 40] = -INFINITY;                    // row 2 block 1
    MxMatrix q = mx_quantize(x.data(), 4, 64, MxElement::e2m1, ScaleRule::floor, {});
    EXPECT_EQ(q.scales[0], 0);
    EXPECT_EQ(q.scales[2], kE8m0Nan);
    EXPECT_EQ(q.scales[5], kE8m0Nan);
    std::vector<float> y(x.size());
    mx_dequantize(q, y.data());
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f);
    for (int i = 64; i < 96; ++i) EXPECT_TRUE(std::isnan(y[i]));
    for (int i = 160; i < 192; ++i) EXPECT_TRUE(std::isnan(y[i]));
    for (int i = 96; i < 128; ++i) EXPECT_TRUE(std::isfinite(y[i]));  // neighbours untouched
    for (int i = 192; i < 256; ++i) EXPECT_TRUE(std::isfinite(y[i]));
}

TEST(MxBlocks, ErrorBoundsForEveryElementAndRule) {
    const int64_t rows = 8, cols = 256;
    std::vector<float> x(size_t(rows * cols));
    fill_student_t(x.data(), rows * cols, 3, 5);
    for (int64_t i = 0; i < rows * cols; ++i) x[size_t(i)] *= std::ldexp(1.0f, int(i / 32 % 40) - 20);  // mixed block scales
    for (MxElement e : {MxElement::e2m1, MxElement::e2m3, MxElement::e3m2, MxElement::e4m3, MxElement::e5m2, MxElement::int8})
        for (ScaleRule r : {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax}) {
            MxMatrix q = mx_quantize(x.data(), rows, cols, e, r, {});
            std::vector<float> y(x.size());
            mx_dequantize(q, y.data());
            const MxSpec s = mx_spec(e);
            for (int64_t i = 0; i < rows * cols; ++i) {
                const float X = decode_e8m0(q.scales[size_t(i / 32)]);
                const float ax = std::fabs(x[size_t(i)]);
                // quantum at |x|: spacing of the element grid in x's binade (elements: man_bits; int8: 1/64)
                float quantum = s.is_int() ? X / 64.0f
                                           : std::ldexp(X, std::max(floor_log2(std::max(ax / X, 1e-30f)), s.elem.emin()) - s.elem.man_bits);
                const float clip = s.max_value() * X;
                const float bound = ax > clip ? ax - clip + 1e-30f : quantum / 2 * 1.0001f;
                ASSERT_LE(std::fabs(y[size_t(i)] - x[size_t(i)]), bound) << mx_element_name(e) << " " << scale_rule_name(r) << " i=" << i;
                if (r == ScaleRule::rceil) {
                    ASSERT_LE(ax, clip) << "rceil never clips";
                }
            }
        }
}

TEST(MxBlocks, Axis0IsAxis1OfTheTranspose) {
    const int64_t rows = 96, cols = 40;
    std::vector<float> x(size_t(rows * cols)), xt(x.size());
    fill_gaussian(x.data(), rows * cols, 8);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) xt[size_t(c * rows + r)] = x[size_t(r * cols + c)];
    QuantizeOptions o0;
    o0.axis = 0;
    MxMatrix a = mx_quantize(x.data(), rows, cols, MxElement::e2m1, ScaleRule::midmax, o0);
    MxMatrix b = mx_quantize(xt.data(), cols, rows, MxElement::e2m1, ScaleRule::midmax, {});
    EXPECT_EQ(a.codes, b.codes);
    EXPECT_EQ(a.scales, b.scales);
}

TEST(MxBlocks, NonDivisibleShapeIsAClearError) {
    std::vector<float> x(3 * 48, 1.0f);
    try {
        mx_quantize(x.data(), 3, 48, MxElement::e2m1, ScaleRule::floor, {});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input);
        EXPECT_NE(std::string(e.what()).find("48"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("multiple of the block size 32"), std::string::npos);
    }
    QuantizeOptions o0;
    o0.axis = 0;
    EXPECT_THROW(mx_quantize(x.data(), 3, 48, MxElement::e2m1, ScaleRule::floor, o0), Error);
}

TEST(MxBlocks, Mxint8GridAndSaturation) {
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i - 16) / 8.0f;  // amax 2 → s = 1 (floor), X = 2
    MxMatrix q = mx_quantize(x.data(), 1, 32, MxElement::int8, ScaleRule::floor, {});
    EXPECT_EQ(int(q.scales[0]) - 127, 1);
    std::vector<float> y(32);
    mx_dequantize(q, y.data());
    for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], x[size_t(i)]);  // k/8 is on the 2·k/64 grid
    EXPECT_EQ(int8_t(q.codes[0]), -64);
    // clipping at ±127/64·X with the floor rule: amax 1.999 → s = 0, 1.999 > 127/64
    std::vector<float> z(32, 0.0f);
    z[0] = 1.999f;
    mx_dequantize(mx_quantize(z.data(), 1, 32, MxElement::int8, ScaleRule::floor, {}), y.data());
    EXPECT_FLOAT_EQ(y[0], 127.0f / 64.0f);
}

TEST(MxBlocks, E2m1PackingNibbleOrder) {
    std::vector<uint8_t> codes = {0x1, 0xF, 0x7, 0x8};
    auto packed = pack_e2m1(codes);
    ASSERT_EQ(packed.size(), 2u);
    EXPECT_EQ(packed[0], 0xF1);  // element 0 low nibble, element 1 high nibble
    EXPECT_EQ(packed[1], 0x87);
    EXPECT_EQ(unpack_e2m1(packed), codes);
}

TEST(MxBlocks, ThreadCountDoesNotChangeResults) {
    const int64_t rows = 64, cols = 512;
    std::vector<float> x(size_t(rows * cols));
    fill_gaussian(x.data(), rows * cols, 21);
    QuantizeOptions o;
    o.rounding = Rounding::stochastic;
    o.seed = 99;
    set_thread_count(1);
    MxMatrix a = mx_quantize(x.data(), rows, cols, MxElement::e2m1, ScaleRule::rceil, o);
    set_thread_count(2);
    MxMatrix b = mx_quantize(x.data(), rows, cols, MxElement::e2m1, ScaleRule::rceil, o);
    set_thread_count(7);
    MxMatrix c = mx_quantize(x.data(), rows, cols, MxElement::e2m1, ScaleRule::rceil, o);
    EXPECT_EQ(a.codes, b.codes);
    EXPECT_EQ(a.codes, c.codes);
    o.seed = 100;
    MxMatrix d = mx_quantize(x.data(), rows, cols, MxElement::e2m1, ScaleRule::rceil, o);
    EXPECT_NE(a.codes, d.codes);
}

TEST(MxBlocks, StochasticRoundingIsUnbiasedOverABlockStream) {
    // Mean of the dequantized values over many seeds approaches x (SR within the block's grid).
    std::vector<float> x(32);
    fill_gaussian(x.data(), 32, 4);
    std::vector<double> mean(32, 0.0);
    const int n = 20000;
    for (int s = 0; s < n; ++s) {
        QuantizeOptions o;
        o.rounding = Rounding::stochastic;
        o.seed = uint64_t(s);
        std::vector<float> y(32);
        mx_dequantize(mx_quantize(x.data(), 1, 32, MxElement::e2m1, ScaleRule::rceil, o), y.data());
        for (int i = 0; i < 32; ++i) mean[size_t(i)] += y[size_t(i)] / n;
    }
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(mean[size_t(i)], x[size_t(i)], 0.03) << i;
}

TEST(MxBlocks, FloorRuleClipsRceilDoesNot) {
    std::vector<float> x(256 * 256);
    fill_gaussian(x.data(), int64_t(x.size()), 2);
    const double fl = mx_clipped_block_fraction(x.data(), 256, 256, MxElement::e2m1, ScaleRule::floor, 1);
    const double rc = mx_clipped_block_fraction(x.data(), 256, 256, MxElement::e2m1, ScaleRule::rceil, 1);
    const double mm = mx_clipped_block_fraction(x.data(), 256, 256, MxElement::e2m1, ScaleRule::midmax, 1);
    EXPECT_GT(fl, 0.2);  // amax mantissa in (1.5, 2) for roughly 40 % of blocks
    EXPECT_EQ(rc, 0.0);
    EXPECT_GT(mm, 0.0);
    EXPECT_LT(mm, fl);
}
