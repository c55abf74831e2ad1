// test_int_grid.cpp — GPTQ-convention integer grids (formats/int_grid.h): parameters on hand-computed
// groups, symmetric quirks, per-row vs groups, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random_fill.h"
#include "formats/int_grid.h"

using namespace lowbit;

TEST(IntGrid, AsymmetricParamsContainZero) {
    // w in [1, 3]: lo forced to 0 → scale = 3/15, zero = 0
    IntGridParams p = int_grid_params(1.0f, 3.0f, 4, false);
    EXPECT_FLOAT_EQ(p.scale, 0.2f);
    EXPECT_EQ(p.zero, 0.0f);
    // w in [-1, 3]: scale 4/15, zero = rint(1/(4/15)) = rint(3.75) = 4
    p = int_grid_params(-1.0f, 3.0f, 4, false);
    EXPECT_FLOAT_EQ(p.scale, 4.0f / 15.0f);
    EXPECT_EQ(p.zero, 4.0f);
    EXPECT_FLOAT_EQ(int_grid_decode(int_grid_encode(0.0f, p, 4, Rounding::nearest_even, 0), p), 0.0f);  // 0 exact
}

TEST(IntGrid, SymmetricParams) {
    IntGridParams p = int_grid_params(-2.0f, 1.0f, 4, true);
    EXPECT_FLOAT_EQ(p.scale, 4.0f / 15.0f);
    EXPECT_EQ(p.zero, 8.0f);
    // INT2 sym: zero 2, levels {-2,-1,0,1}·scale
    p = int_grid_params(-1.0f, 1.0f, 2, true);
    EXPECT_EQ(p.zero, 2.0f);
    EXPECT_FLOAT_EQ(p.scale, 2.0f / 3.0f);
    // all-positive group with sym keeps lo = 0 (GPTQ quirk): scale = hi/maxq
    p = int_grid_params(0.5f, 1.5f, 4, true);
    EXPECT_FLOAT_EQ(p.scale, 1.5f / 15.0f);
    // all-zero group → [-1, 1]
    p = int_grid_params(0.0f, 0.0f, 4, false);
    EXPECT_FLOAT_EQ(p.scale, 2.0f / 15.0f);
}

TEST(IntGrid, QuantizeRoundTripAndClamp) {
    std::vector<float> x = {-1.0f, 0.0f, 1.0f, 3.0f};
    IntMatrix m = int_quantize(x.data(), 1, 4, {4, 0, false}, {});
    std::vector<float> y(4);
    int_dequantize(m, y.data());
    EXPECT_EQ(m.q[0], 0);
    EXPECT_EQ(m.q[3], 15);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], (4.0f / 15.0f) / 2 + 1e-6f);
}

TEST(IntGrid, GroupsAndErrorsByBits) {
    const int64_t rows = 16, cols = 256;
    std::vector<float> x(size_t(rows * cols)), y(x.size());
    fill_gaussian(x.data(), rows * cols, 4);
    double prev = 1e9;
    for (int bits = 2; bits <= 8; ++bits) {
        IntMatrix m = int_quantize(x.data(), rows, cols, {bits, 64, false}, {});
        EXPECT_EQ(m.params.size(), size_t(rows * 4));
        int_dequantize(m, y.data());
        double e2 = 0;
        for (size_t i = 0; i < x.size(); ++i) e2 += (y[i] - x[i]) * (y[i] - x[i]);
        EXPECT_LT(e2, prev) << bits;
        prev = e2;
    }
    EXPECT_THROW(int_quantize(x.data(), rows, cols, {4, 48, false}, {}), Error);
    EXPECT_THROW(int_quantize(x.data(), rows, cols, {9, 0, false}, {}), Error);
}

TEST(IntGrid, NanGroupDecodesToNan) {
    std::vector<float> x(8, 1.0f);
    x[2] = NAN;
    IntMatrix m = int_quantize(x.data(), 2, 4, {4, 0, false}, {});
    std::vector<float> y(8);
    int_dequantize(m, y.data());
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(y[size_t(i)]));
    for (int i = 4; i < 8; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], 1.0f);
}
