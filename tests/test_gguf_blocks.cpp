// test_gguf_blocks.cpp — byte-level golden tests of the GGUF blocks (formats/gguf_blocks.h, reached through
// formats/gguf_types.h): block sizes, the nibble order, scale bytes, and dequantization; the K-quants
// (formats/kquants.h: byte layout against ggml's packing loops, pack/unpack, the sub-block grid against the
// decoder, errors on ggml's test signal, degenerate blocks) and IQ4_NL (formats/iq4nl.h). Bit-exactness
// against ggml itself is checked by tests/crosscheck/check_gguf.py and tests/peer/check_kquants_ggml.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bits.h"
#include "core/random_fill.h"
#include "error_test_util.h"
#include "formats/gguf_types.h"
#include "formats/iq4nl.h"
#include "formats/kquants.h"

using namespace lowbit;

TEST(GgufBlocks, Sizes) {
    EXPECT_EQ(gguf_type_info(GgufType::Q4_0)->block_bytes, 18);
    EXPECT_EQ(gguf_type_info(GgufType::Q4_1)->block_bytes, 20);
    EXPECT_EQ(gguf_type_info(GgufType::Q8_0)->block_bytes, 34);
    EXPECT_EQ(gguf_type_info(GgufType::MXFP4)->block_bytes, 17);
    EXPECT_EQ(gguf_type_info(GgufType::Q5_0)->block_bytes, int64_t(sizeof(BlockQ5_0)));
    EXPECT_EQ(gguf_type_info(GgufType::Q5_1)->block_bytes, int64_t(sizeof(BlockQ5_1)));
    EXPECT_EQ(gguf_type_info(GgufType::IQ4_NL)->block_bytes, int64_t(sizeof(BlockIq4Nl)));
    EXPECT_EQ(gguf_type_info(GgufType::Q2_K)->block_bytes, int64_t(sizeof(BlockQ2_K)));
    EXPECT_EQ(gguf_type_info(GgufType::Q3_K)->block_bytes, int64_t(sizeof(BlockQ3_K)));
    EXPECT_EQ(gguf_type_info(GgufType::Q4_K)->block_bytes, int64_t(sizeof(BlockQ4_K)));
    EXPECT_EQ(gguf_type_info(GgufType::Q5_K)->block_bytes, int64_t(sizeof(BlockQ5_K)));
    EXPECT_EQ(gguf_type_info(GgufType::Q6_K)->block_bytes, int64_t(sizeof(BlockQ6_K)));
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

// NVFP4's UE4M3 scale byte: every code decodes to (1 + m/8)·2^(e−7)/2 (e = 0: m·2^-9/2), bit 7 ignored, 0x00
// and 0x7F to 0 (0xFF is 240, as in ggml's CPU decoder and gguf-py); the encoder inverts every code it can emit (not 0x78..0x7D: exponent 15 saturates
// to 0x7E), rounds half up, and clamps.
TEST(GgufBlocks, Ue4m3ScaleByte) {
    for (int code = 0; code < 256; ++code) {
        const int e = (code >> 3) & 0xF, m = code & 7;
        const double raw = e == 0 ? m / 512.0 : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
        const double want = code == 0 || code == 0x7F ? 0.0 : raw / 2.0;
        EXPECT_EQ(double(gguf_ue4m3_half(uint8_t(code))), want) << code;
        if (code >= 1 && code < 0x78) {
            EXPECT_EQ(gguf_ue4m3_from_float(float(2.0 * want)), code) << code;
        }
    }
    EXPECT_EQ(gguf_ue4m3_from_float(1.0625f), 0x39);  // half-way between 1 (0x38) and 1.125: up
    EXPECT_EQ(gguf_ue4m3_from_float(1.06f), 0x38);
    EXPECT_EQ(gguf_ue4m3_from_float(300.0f), 0x7E);  // exponent 15 saturates
    EXPECT_EQ(gguf_ue4m3_from_float(1e9f), 0x7E);
    EXPECT_EQ(gguf_ue4m3_from_float(0.0f), 0);
    EXPECT_EQ(gguf_ue4m3_from_float(-1.0f), 0);
    EXPECT_EQ(gguf_ue4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0);
    EXPECT_EQ(gguf_ue4m3_from_float(3.0f / 512.0f), 3);   // subnormal m·2^-9
    EXPECT_EQ(gguf_ue4m3_from_float(0.5f / 512.0f), 1);   // ⌊0.5 + 0.5⌋
    EXPECT_EQ(gguf_ue4m3_from_float(0.4f / 512.0f), 0);
}

TEST(GgufBlocks, Nvfp4GoldenBytes) {
    // Sub-block 0: amax 6 → amax/6 = 1 → code 0x38, half scale 0.5: 6 = 12·0.5 → code 7; sub-block 1 (x[16..31]):
    // amax 3 → 0.5 → code 0x30, half scale 0.25: −3 = −12·0.25 → code 15, 0.25 = 1·0.25 → code 1;
    // sub-blocks 2, 3 zero → code 0, all codes 0.
    std::vector<float> x(64, 0.0f);
    x[0] = 6.0f;
    x[9] = 0.25f;   // tie between 0 and 0.5 at half scale 0.5: the first entry (0) wins
    x[16] = -3.0f;
    x[16 + 8] = 0.25f;
    auto b = gguf_quantize_matrix(GgufType::NVFP4, x.data(), 1, 64);
    ASSERT_EQ(b.size(), 36u);
    EXPECT_EQ(b[0], 0x38);
    EXPECT_EQ(b[1], 0x30);
    EXPECT_EQ(b[2], 0x00);
    EXPECT_EQ(b[3], 0x00);
    EXPECT_EQ(b[4 + 0], 0x07);       // element 0 low, element 8 high
    EXPECT_EQ(b[4 + 1], 0x00);       // element 1 low, element 9 high (the tie)
    EXPECT_EQ(b[4 + 8 + 0], 0x1F);   // element 16 low (code 15), element 24 high (code 1)
    std::vector<float> y(64);
    gguf_dequantize_matrix(GgufType::NVFP4, b.data(), 1, 64, y.data());
    EXPECT_EQ(y[0], 6.0f);
    EXPECT_EQ(y[9], 0.0f);
    EXPECT_EQ(y[16], -3.0f);
    EXPECT_EQ(y[24], 0.25f);
}

TEST(GgufBlocks, MatrixRoundTripError) {
    const int64_t rows = 8, cols = 128;
    std::vector<float> x(size_t(rows * cols)), y(x.size());
    fill_gaussian(x.data(), rows * cols, 1);
    const GgufType types[] = {GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0, GgufType::MXFP4, GgufType::Q5_0,
                              GgufType::Q5_1, GgufType::IQ4_NL};
    const double max_rel[] = {0.13, 0.12, 0.01, 0.2, 0.065, 0.06, 0.12};
    for (int t = 0; t < 7; ++t) {
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

// --- Q5_0, Q5_1, IQ4_NL -------------------------------------------------------------------------------

TEST(GgufBlocks, Q5_0AndQ5_1GoldenBytes) {
    // Q5_0: x_j = j − 16, max |x| = x_0 = −16 → d = 1 (fp16 0x3C00), id = 1, q_j = min(31, trunc(j − 16 + 16.5)) = j.
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16);
    auto b = gguf_quantize_matrix(GgufType::Q5_0, x.data(), 1, 32);
    ASSERT_EQ(b.size(), 22u);
    EXPECT_EQ(b[0] | b[1] << 8, 0x3C00);
    EXPECT_EQ(b[2] | b[3] << 8 | b[4] << 16 | uint32_t(b[5]) << 24, 0xFFFF0000u);  // 5th bit set for j ≥ 16
    EXPECT_EQ(b[6 + 3], 0x33);                                                    // j = 3 and 19 (19 & 15 = 3)
    std::vector<float> y(32);
    gguf_dequantize_matrix(GgufType::Q5_0, b.data(), 1, 32, y.data());
    EXPECT_EQ(y, x);
    // Q5_1: min −16, max 15 → d = 1, m = −16; q_j = trunc(j + 0.5) = j.
    auto c = gguf_quantize_matrix(GgufType::Q5_1, x.data(), 1, 32);
    ASSERT_EQ(c.size(), 24u);
    EXPECT_EQ(c[0] | c[1] << 8, 0x3C00);
    EXPECT_EQ(c[2] | c[3] << 8, 0xCC00);  // −16
    EXPECT_EQ(c[8 + 15], 0xFF);
    gguf_dequantize_matrix(GgufType::Q5_1, c.data(), 1, 32, y.data());
    EXPECT_EQ(y, x);
}

TEST(GgufBlocks, Iq4nlExactOnItsGrid) {
    // x = 0.5·kvalues: the search's itry = 0 candidate fits exactly (d = 0.5, fp16 0x3800); nothing beats it.
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[size_t(j)] = 0.5f * float(kIq4nlValues[(j * 7) % 16]);
    const Iq4nlBlock fit = iq4nl_fit(x.data(), nullptr);
    EXPECT_EQ(fit.d, 0x3800);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(fit.q[j], (j * 7) % 16) << j;
    auto b = gguf_quantize_matrix(GgufType::IQ4_NL, x.data(), 1, 32);
    uint8_t packed[18];
    iq4nl_pack(fit, packed);
    EXPECT_EQ(std::vector<uint8_t>(packed, packed + 18), b);
    std::vector<float> y(32);
    gguf_dequantize_matrix(GgufType::IQ4_NL, b.data(), 1, 32, y.data());
    EXPECT_EQ(y, x);
    for (int q = 0; q < 16; ++q) EXPECT_EQ(iq4nl_value(0x3800, q), 0.5f * float(kIq4nlValues[q]));
    // All-zero block: d = 0 and every code the level nearest to 0 (index 8, value 1).
    const Iq4nlBlock z = iq4nl_fit(std::vector<float>(32, 0.0f).data(), nullptr);
    EXPECT_EQ(z.d, 0);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(z.q[j], 8);
}

// --- K-quants -----------------------------------------------------------------------------------------

namespace {

constexpr GgufType kKQuants[] = {GgufType::Q2_K, GgufType::Q3_K, GgufType::Q4_K, GgufType::Q5_K, GgufType::Q6_K};

int scale_code_max(GgufType t) { return t == GgufType::Q2_K ? 15 : t == GgufType::Q6_K ? 255 : 63; }
bool has_min(GgufType t) { return t == GgufType::Q2_K || t == GgufType::Q4_K || t == GgufType::Q5_K; }

// A random block with every field in range (unused fields zero, as kquant_unpack leaves them).
KQuantSuperBlock random_block(GgufType t, std::mt19937& rng, bool any_d = false) {
    KQuantSuperBlock b;
    auto u = [&](int hi) { return int(rng() % uint32_t(hi + 1)); };
    b.s.d = any_d ? uint16_t(rng()) : uint16_t(0x2000 + u(0x2000));  // any bits, or a sane positive scale
    if (has_min(t)) b.s.dmin = any_d ? uint16_t(rng()) : uint16_t(0x2000 + u(0x2000));
    for (int j = 0; j < kquant_sub_blocks(t); ++j) {
        b.s.scale[j] = uint8_t(u(scale_code_max(t)));
        if (has_min(t)) b.s.min[j] = uint8_t(u(scale_code_max(t)));
    }
    for (int e = 0; e < kQK_K; ++e) b.q[e] = uint8_t(u(kquant_max_code(t)));
    return b;
}

// ggml's packing loops (the end of quantize_row_q*_K_ref in ggml-quants.c), written out per type, from the
// codes L and the scale/min codes: the independent statement of the byte layout.
std::vector<uint8_t> ggml_packing(GgufType t, const KQuantSuperBlock& b) {
    std::vector<uint8_t> y(size_t(gguf_type_info(t)->block_bytes), 0);
    uint8_t L[256];
    std::memcpy(L, b.q, 256);
    auto put16 = [&](size_t at, uint16_t v) { std::memcpy(y.data() + at, &v, 2); };
    auto pack_2bit = [&](uint8_t* qs) {  // Q2_K qs, Q3_K qs
        for (int j = 0; j < 256; j += 128)
            for (int l = 0; l < 32; ++l)
                qs[j / 4 + l] = uint8_t(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
    };
    auto pack_k4_scales = [&](uint8_t* sc) {  // Q4_K, Q5_K
        for (int j = 0; j < 8; ++j) {
            const uint8_t ls = b.s.scale[j], lm = b.s.min[j];
            if (j < 4) {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = uint8_t((ls & 0xF) | (lm & 0xF) << 4);
                sc[j - 4] |= uint8_t((ls >> 4) << 6);
                sc[j] |= uint8_t((lm >> 4) << 6);
            }
        }
    };
    switch (t) {
        case GgufType::Q2_K:
            for (int j = 0; j < 16; ++j) y[size_t(j)] = uint8_t(b.s.scale[j] | b.s.min[j] << 4);
            pack_2bit(y.data() + 16);
            put16(80, b.s.d);
            put16(82, b.s.dmin);
            break;
        case GgufType::Q3_K: {
            uint8_t* sc = y.data() + 96;
            for (int j = 0; j < 16; ++j) {
                int l = b.s.scale[j];
                if (j < 8) sc[j] = uint8_t(l & 0xF);
                else sc[j - 8] |= uint8_t((l & 0xF) << 4);
                l >>= 4;
                sc[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
            }
            int m = 0;
            uint8_t hm = 1;
            for (int j = 0; j < 256; ++j) {
                if (L[j] > 3) {
                    y[size_t(m)] |= hm;
                    L[j] = uint8_t(L[j] - 4);
                }
                if (++m == 32) {
                    m = 0;
                    hm = uint8_t(hm << 1);
                }
            }
            pack_2bit(y.data() + 32);
            put16(108, b.s.d);
            break;
        }
        case GgufType::Q4_K: {
            put16(0, b.s.d);
            put16(2, b.s.dmin);
            pack_k4_scales(y.data() + 4);
            uint8_t* q = y.data() + 16;
            for (int j = 0; j < 256; j += 64, q += 32)
                for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | L[j + l + 32] << 4);
            break;
        }
        case GgufType::Q5_K: {
            put16(0, b.s.d);
            put16(2, b.s.dmin);
            pack_k4_scales(y.data() + 4);
            uint8_t* qh = y.data() + 16;
            uint8_t* ql = y.data() + 48;
            uint8_t m1 = 1, m2 = 2;
            for (int n = 0; n < 256; n += 64, ql += 32) {
                for (int j = 0; j < 32; ++j) {
                    int l1 = L[n + j], l2 = L[n + j + 32];
                    if (l1 > 15) l1 -= 16, qh[j] |= m1;
                    if (l2 > 15) l2 -= 16, qh[j] |= m2;
                    ql[j] = uint8_t(l1 | l2 << 4);
                }
                m1 = uint8_t(m1 << 2);
                m2 = uint8_t(m2 << 2);
            }
            break;
        }
        case GgufType::Q6_K: {
            uint8_t* ql = y.data();
            uint8_t* qh = y.data() + 128;
            for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
                for (int l = 0; l < 32; ++l) {
                    ql[l] = uint8_t((L[j + l] & 0xF) | (L[j + l + 64] & 0xF) << 4);
                    ql[l + 32] = uint8_t((L[j + l + 32] & 0xF) | (L[j + l + 96] & 0xF) << 4);
                    qh[l] = uint8_t(L[j + l] >> 4 | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
                                    (L[j + l + 96] >> 4) << 6);
                }
            std::memcpy(y.data() + 192, b.s.scale, 16);
            put16(208, b.s.d);
            break;
        }
        default: ADD_FAILURE();
    }
    return y;
}

bool same_block(const KQuantSuperBlock& a, const KQuantSuperBlock& b) {
    return a.s.d == b.s.d && a.s.dmin == b.s.dmin && std::memcmp(a.s.scale, b.s.scale, 16) == 0 &&
           std::memcmp(a.s.min, b.s.min, 16) == 0 && std::memcmp(a.q, b.q, 256) == 0;
}

bool same_float_bits(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

// ggml's test signal (tests/test-quantize-fns.cpp: generate_data) and its error measure, sqrt(Σ d²) / n.
std::vector<float> ggml_test_signal(size_t n) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(0.1 + 2.0f * std::cos(float(i)));
    return x;
}
float ggml_total_error(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return float(std::sqrt(sum) / double(a.size()));
}

}  // namespace

TEST(KQuants, Shapes) {
    const int subs[] = {16, 16, 8, 8, 16}, size[] = {16, 16, 32, 32, 16}, maxq[] = {3, 7, 15, 31, 63};
    for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(is_kquant(kKQuants[i]));
        EXPECT_EQ(kquant_sub_blocks(kKQuants[i]), subs[i]);
        EXPECT_EQ(kquant_sub_size(kKQuants[i]), size[i]);
        EXPECT_EQ(kquant_max_code(kKQuants[i]), maxq[i]);
        EXPECT_EQ(gguf_type_info(kKQuants[i])->block_elements, kQK_K);
    }
    EXPECT_FALSE(is_kquant(GgufType::Q8_0));
}

TEST(KQuants, PackIsGgmlsByteLayout) {
    std::mt19937 rng(3);
    for (GgufType t : kKQuants)
        for (int trial = 0; trial < 50; ++trial) {
            const KQuantSuperBlock b = random_block(t, rng);
            std::vector<uint8_t> ours(size_t(gguf_type_info(t)->block_bytes));
            kquant_pack(t, b, ours.data());
            ASSERT_EQ(ours, ggml_packing(t, b)) << gguf_type_name(t) << " trial " << trial;
        }
}

TEST(KQuants, PackUnpackRoundTrip) {
    std::mt19937 rng(4);
    for (GgufType t : kKQuants)
        for (int trial = 0; trial < 50; ++trial) {
            const int64_t nb = gguf_type_info(t)->block_bytes;
            const KQuantSuperBlock b = random_block(t, rng);
            std::vector<uint8_t> bytes(static_cast<size_t>(nb));
            kquant_pack(t, b, bytes.data());
            EXPECT_TRUE(same_block(kquant_unpack(t, bytes.data()), b)) << gguf_type_name(t);
            // Every bit pattern is a valid block: unpack then pack gives the same bytes back.
            std::vector<uint8_t> any(static_cast<size_t>(nb)), again(static_cast<size_t>(nb));
            for (auto& v : any) v = uint8_t(rng());
            kquant_pack(t, kquant_unpack(t, any.data()), again.data());
            EXPECT_EQ(again, any) << gguf_type_name(t);
        }
}

TEST(KQuants, PackRejectsCodesOutOfRange) {
    uint8_t out[256];
    KQuantSuperBlock b;
    b.q[7] = 4;
    expect_error_with([&] { kquant_pack(GgufType::Q2_K, b, out); }, ErrorKind::usage, {"Q2_K", "element 7"});
    b.q[7] = 0;
    b.s.scale[3] = 64;
    expect_error_with([&] { kquant_pack(GgufType::Q4_K, b, out); }, ErrorKind::usage, {"Q4_K", "sub-block 3"});
    kquant_pack(GgufType::Q6_K, b, out);  // Q6_K scales are int8 bits: any byte
}

TEST(KQuants, SubGridIsTheDecoderBitForBit) {
    std::mt19937 rng(5);
    for (GgufType t : kKQuants)
        for (int trial = 0; trial < 200; ++trial) {
            // Any fp16 bits for d and dmin (subnormals, negatives, Inf, NaN) half of the time.
            const KQuantSuperBlock b = random_block(t, rng, trial % 2 == 1);
            uint8_t bytes[256];
            kquant_pack(t, b, bytes);
            std::vector<float> y(256);
            gguf_dequantize_matrix(t, bytes, 1, 256, y.data());
            const int64_t n = kquant_sub_size(t);
            for (int e = 0; e < kQK_K; ++e) {
                const KQuantSubGrid g = kquant_sub_grid(t, b.s, int(e / n));
                const float v = g.scale * (float(b.q[e]) - g.zero) + g.offset;
                ASSERT_TRUE(same_float_bits(v, y[size_t(e)]))
                    << gguf_type_name(t) << " element " << e << ": " << v << " vs " << y[size_t(e)];
            }
        }
}

TEST(KQuants, EncoderIsFitThenPack) {
    std::vector<float> x(4 * 256);
    fill_student_t(x.data(), int64_t(x.size()), 3, 11);
    for (GgufType t : kKQuants) {
        const std::vector<uint8_t> enc = gguf_quantize_matrix(t, x.data(), 4, 256);
        const int64_t nb = gguf_type_info(t)->block_bytes;
        for (int i = 0; i < 4; ++i) {
            std::vector<uint8_t> one(static_cast<size_t>(nb));
            kquant_pack(t, kquant_fit(t, x.data() + 256 * i, nullptr), one.data());
            EXPECT_EQ(one, std::vector<uint8_t>(enc.begin() + i * nb, enc.begin() + (i + 1) * nb)) << gguf_type_name(t);
        }
    }
}

TEST(KQuants, GgmlTestSignalWithinGgmlThresholds) {
    // tests/test-quantize-fns.cpp: 32·128 values, MAX_QUANTIZATION_TOTAL_ERROR 0.002 (2-bit 0.0075, 3-bit 0.004).
    const std::vector<float> x = ggml_test_signal(32 * 128);
    const std::pair<GgufType, float> cases[] = {
        {GgufType::Q2_K, 0.0075f}, {GgufType::Q3_K, 0.004f}, {GgufType::Q4_K, 0.002f}, {GgufType::Q5_K, 0.002f},
        {GgufType::Q6_K, 0.002f},  {GgufType::Q5_0, 0.002f}, {GgufType::Q5_1, 0.002f}, {GgufType::IQ4_NL, 0.002f}};
    for (const auto& [t, limit] : cases) {
        const int64_t cols = 256, rows = int64_t(x.size()) / cols;
        const auto bytes = gguf_quantize_matrix(t, x.data(), rows, cols);
        std::vector<float> y(x.size());
        gguf_dequantize_matrix(t, bytes.data(), rows, cols, y.data());
        EXPECT_LT(ggml_total_error(x, y), limit) << gguf_type_name(t);
    }
}

TEST(KQuants, GaussianErrorFallsWithBits) {
    const int64_t rows = 16, cols = 512;
    std::vector<float> x(size_t(rows * cols)), y(x.size());
    fill_gaussian(x.data(), rows * cols, 2);
    double last = 1.0;
    const double max_rel[] = {0.40, 0.21, 0.11, 0.055, 0.03};  // roughly 2^-bits
    for (int i = 0; i < 5; ++i) {
        const auto b = gguf_quantize_matrix(kKQuants[i], x.data(), rows, cols);
        gguf_dequantize_matrix(kKQuants[i], b.data(), rows, cols, y.data());
        double e2 = 0, x2 = 0;
        for (size_t k = 0; k < x.size(); ++k) {
            e2 += (double(y[k]) - x[k]) * (double(y[k]) - x[k]);
            x2 += double(x[k]) * x[k];
        }
        const double rel = std::sqrt(e2 / x2);
        EXPECT_LT(rel, max_rel[i]) << gguf_type_name(kKQuants[i]);
        EXPECT_LT(rel, last) << gguf_type_name(kKQuants[i]);
        last = rel;
    }
}

TEST(KQuants, ZeroConstantAndNonFiniteBlocks) {
    for (GgufType t : kKQuants) {
        // All zero: zero scales, every decoded value exactly +0 or −0.
        std::vector<float> x(256, 0.0f), y(256);
        auto b = gguf_quantize_matrix(t, x.data(), 1, 256);
        gguf_dequantize_matrix(t, b.data(), 1, 256, y.data());
        for (float v : y) EXPECT_EQ(v, 0.0f) << gguf_type_name(t);
        const KQuantSuperBlock z = kquant_fit(t, x.data(), nullptr);
        EXPECT_EQ(gguf_fp16_to_float(z.s.d), 0.0f) << gguf_type_name(t);
        // A constant block decodes close to the constant.
        std::fill(x.begin(), x.end(), 0.75f);
        b = gguf_quantize_matrix(t, x.data(), 1, 256);
        gguf_dequantize_matrix(t, b.data(), 1, 256, y.data());
        for (float v : y) EXPECT_NEAR(v, 0.75f, 0.75f * 0.15f) << gguf_type_name(t);
        // NaN/Inf: ggml's arithmetic makes some block of them, with no promise about its values; ours must
        // at least be deterministic (that the bytes are ggml's is checked by tests/peer/check_kquants_ggml.py).
        fill_gaussian(x.data(), 256, 9);
        x[5] = std::numeric_limits<float>::quiet_NaN();
        x[200] = std::numeric_limits<float>::infinity();
        EXPECT_EQ(gguf_quantize_matrix(t, x.data(), 1, 256), gguf_quantize_matrix(t, x.data(), 1, 256));
    }
}

TEST(KQuants, ImportanceWeightsSteerTheFit) {
    // Weights 100× larger on the first half of every sub-block: the weighted fit must lower the weighted
    // squared error against the unweighted fit, summed over many blocks.
    const int blocks = 64;
    std::vector<float> x(size_t(blocks) * 256), w(256);
    fill_student_t(x.data(), int64_t(x.size()), 4, 21);
    for (int e = 0; e < 256; ++e) w[size_t(e)] = (e % 16) < 8 ? 100.0f : 1.0f;
    for (GgufType t : kKQuants) {
        const auto plain = gguf_quantize_matrix(t, x.data(), blocks, 256);
        const auto weighted = gguf_quantize_matrix_imatrix(t, x.data(), blocks, 256, w.data());
        ASSERT_EQ(plain.size(), weighted.size());
        std::vector<float> yp(x.size()), yw(x.size());
        gguf_dequantize_matrix(t, plain.data(), blocks, 256, yp.data());
        gguf_dequantize_matrix(t, weighted.data(), blocks, 256, yw.data());
        double ep = 0, ew = 0;
        for (size_t k = 0; k < x.size(); ++k) {
            ep += w[k % 256] * (double(yp[k]) - x[k]) * (double(yp[k]) - x[k]);
            ew += w[k % 256] * (double(yw[k]) - x[k]) * (double(yw[k]) - x[k]);
        }
        EXPECT_LT(ew, ep) << gguf_type_name(t);
        // And the matrix path is kquant_fit with the block's weights.
        uint8_t one[256];
        kquant_pack(t, kquant_fit(t, x.data(), w.data()), one);
        EXPECT_EQ(std::vector<uint8_t>(one, one + gguf_type_info(t)->block_bytes),
                  std::vector<uint8_t>(weighted.begin(), weighted.begin() + gguf_type_info(t)->block_bytes));
    }
    expect_error_with([&] { gguf_quantize_matrix_imatrix(GgufType::Q4_0, x.data(), 1, 256, w.data()); },
                      ErrorKind::usage, {"Q4_0", "importance"});
}
