// test_nvfp4.cpp — NVFP4 two-level scaling (formats/nvfp4.h): golden block, zero/NaN tensors, error
// bound, axis equivalence.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/random_fill.h"
#include "formats/nvfp4.h"

using namespace lowbit;

TEST(Nvfp4, GoldenBlock) {
    // amax 6 → tensor_scale = 6/2688; block target = (6/6)/ts = 448 → E4M3 448 (0x7E); denom = 448·ts = 1
    std::vector<float> x(16);
    for (int i = 0; i < 16; ++i) x[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * float(i % 7);
    x[3] = 6.0f;
    Nvfp4Matrix q = nvfp4_quantize(x.data(), 1, 16, {});
    EXPECT_FLOAT_EQ(q.tensor_scale, 6.0f / 2688.0f);
    EXPECT_EQ(q.block_scales[0], 0x7E);
    std::vector<float> y(16);
    nvfp4_dequantize(q, y.data());
    const ElementSpec s = element_spec(ElementType::e2m1);
    for (int i = 0; i < 16; ++i)
        EXPECT_NEAR(y[size_t(i)], decode_element(s, encode_element(s, x[size_t(i)], Rounding::nearest_even, Overflow::saturate)), 1e-6);
}

TEST(Nvfp4, ZeroTensorAndZeroBlocks) {
    std::vector<float> x(64, 0.0f);
    Nvfp4Matrix q = nvfp4_quantize(x.data(), 2, 32, {});
    EXPECT_EQ(q.tensor_scale, 0.0f);
    std::vector<float> y(64, 1.0f);
    nvfp4_dequantize(q, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f);
    x[40] = 3.0f;  // one non-zero block: the others stay exactly 0
    q = nvfp4_quantize(x.data(), 2, 32, {});
    nvfp4_dequantize(q, y.data());
    for (int i = 0; i < 64; ++i) EXPECT_EQ(y[size_t(i)], i == 40 ? 3.0f : 0.0f);
}

TEST(Nvfp4, NanPoisonsTheTensor) {
    std::vector<float> x(32, 1.0f);
    x[7] = NAN;
    Nvfp4Matrix q = nvfp4_quantize(x.data(), 1, 32, {});
    std::vector<float> y(32);
    nvfp4_dequantize(q, y.data());
    for (float v : y) EXPECT_TRUE(std::isnan(v));
}

TEST(Nvfp4, RelativeErrorOnGaussianAndAxisEquivalence) {
    const int64_t rows = 64, cols = 256;
    std::vector<float> x(size_t(rows * cols)), xt(x.size()), y(x.size());
    fill_gaussian(x.data(), rows * cols, 12);
    Nvfp4Matrix q = nvfp4_quantize(x.data(), rows, cols, {});
    nvfp4_dequantize(q, y.data());
    double e2 = 0, x2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        e2 += (y[i] - x[i]) * (y[i] - x[i]);
        x2 += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(e2 / x2), 0.12);  // FP4 with 16-blocks and fine E4M3 scales: ~9-10 % on N(0,1)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) xt[size_t(c * rows + r)] = x[size_t(r * cols + c)];
    QuantizeOptions o0;
    o0.axis = 0;
    Nvfp4Matrix a = nvfp4_quantize(xt.data(), cols, rows, o0);
    EXPECT_EQ(a.codes, q.codes);
    EXPECT_EQ(a.block_scales, q.block_scales);
}
