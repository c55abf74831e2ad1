// test_gguf_blocks.cpp — byte-level golden tests of the GGUF blocks (formats/gguf_blocks.h, reached through
// formats/gguf_types.h): block sizes, the nibble order, scale bytes, and dequantization.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/random_fill.h"
#include "formats/gguf_types.h"

using namespace lowbit;

TEST(GgufBlocks, Sizes) {
    EXPECT_EQ(gguf_type_info(GgufType::Q4_0)->block_bytes, 18);
    EXPECT_EQ(gguf_type_info(GgufType::Q4_1)->block_bytes, 20);
    EXPECT_EQ(gguf_type_info(GgufType::Q8_0)->block_bytes, 34);
    EXPECT_EQ(gguf_type_info(GgufType::MXFP4)->block_bytes, 17);
}

TEST(GgufBlocks, Q4_0GoldenBytes) {
    // x_j = j − 16 for j < 32: max |x| is x_0 = −16 → d = −16/−8 = 2 (fp16 0x4000), id = 0.5
    // q_j = min(15, trunc((j − 16)/2 + 8.5)) → j = 0: 0, j = 1: 1 (−7.5+8.5=1), j = 16: 8, j = 31: 15
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16);
    auto b = gguf_quantize_matrix(GgufType::Q4_0, x.data(), 1, 32);
    ASSERT_EQ(b.size(), 18u);
    EXPECT_EQ(b[0], 0x00);
    EXPECT_EQ(b[1], 0x40);
    auto q = [&](int j) { return j < 16 ? (b[2 + size_t(j)] & 0xF) : (b[2 + size_t(j - 16)] >> 4); };
    EXPECT_EQ(q(0), 0);
    EXPECT_EQ(q(1), 1);
    EXPECT_EQ(q(2), 1);
    EXPECT_EQ(q(16), 8);
    EXPECT_EQ(q(31), 15);
    std::vector<float> y(32);
    gguf_dequantize_matrix(GgufType::Q4_0, b.data(), 1, 32, y.data());
    EXPECT_EQ(y[0], -16.0f);
    EXPECT_EQ(y[31], 14.0f);
}

TEST(GgufBlocks, Q8_0AndQ4_1GoldenBytes) {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = -63.5f;  // −63.5·(127/127)=−63.5 → round half away → −64
    auto b = gguf_quantize_matrix(GgufType::Q8_0, x.data(), 1, 32);
    ASSERT_EQ(b.size(), 34u);
    EXPECT_EQ(b[0], 0x00);  // d = 1.0 → fp16 0x3C00
    EXPECT_EQ(b[1], 0x3C);
    EXPECT_EQ(int8_t(b[2]), 127);
    EXPECT_EQ(int8_t(b[3]), -64);
    std::vector<float> z(32);
    for (int j = 0; j < 32; ++j) z[size_t(j)] = float(j) * 0.5f - 1.0f;  // min −1, max 14.5 → d = 15.5/15
    auto c = gguf_quantize_matrix(GgufType::Q4_1, z.data(), 1, 32);
    ASSERT_EQ(c.size(), 20u);
    EXPECT_EQ(c[2] | c[3] << 8, 0xBC00);  // m = −1.0 in fp16
    EXPECT_EQ(c[4] & 0xF, 0);
    EXPECT_EQ(c[4 + 15] >> 4, 15);
}

TEST(GgufBlocks, Mxfp4GoldenBytes) {
    // amax 6 → e = floor(log2 6) − 2 + 127 = 127, d = 2^-1 (half scale), table doubled: 6 = 12·0.5 → code 7
    std::vector<float> x(32, 0.0f);
    x[0] = 6.0f;
    x[16] = -0.5f;  // −1·0.5 → code 9
    x[1] = 0.25f;   // tie between 0 and 0.5: ggml keeps the first entry (0)
    auto b = gguf_quantize_matrix(GgufType::MXFP4, x.data(), 1, 32);
    ASSERT_EQ(b.size(), 17u);
    EXPECT_EQ(b[0], 127);
    EXPECT_EQ(b[1], 0x97);
    EXPECT_EQ(b[2], 0x00);
    std::vector<float> y(32);
    gguf_dequantize_matrix(GgufType::MXFP4, b.data(), 1, 32, y.data());
    EXPECT_EQ(y[0], 6.0f);
    EXPECT_EQ(y[16], -0.5f);
}

TEST(GgufBlocks, MatrixRoundTripError) {
    const int64_t rows = 8, cols = 128;
    std::vector<float> x(size_t(rows * cols)), y(x.size());
    fill_gaussian(x.data(), rows * cols, 1);
    const GgufType types[] = {GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0, GgufType::MXFP4};
    const double max_rel[] = {0.13, 0.12, 0.01, 0.2};
    for (int t = 0; t < 4; ++t) {
        auto b = gguf_quantize_matrix(types[t], x.data(), rows, cols);
        EXPECT_EQ(int64_t(b.size()), rows * cols / 32 * gguf_type_info(types[t])->block_bytes);
        gguf_dequantize_matrix(types[t], b.data(), rows, cols, y.data());
        double e2 = 0, x2 = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            e2 += (y[i] - x[i]) * (y[i] - x[i]);
            x2 += x[i] * x[i];
        }
        EXPECT_LT(std::sqrt(e2 / x2), max_rel[t]) << gguf_type_name(types[t]);
    }
}
