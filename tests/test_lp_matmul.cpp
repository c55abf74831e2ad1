// test_lp_matmul.cpp — the low-precision GEMM (adahop/lp_matmul.h): exactness identities with quantization
// off, exact OE rows/columns with it on, outlier extraction, prepared operands, storage accounting, and the
// random signs of the randomized Hadamard (Tseng et al.).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adahop/int8_window.h"
#include "adahop/lp_matmul.h"
#include "adahop/pair_analysis.h"
#include "core/counter_rng.h"
#include "core/error.h"
#include "core/gemm_cpu.h"
#include "hadamard/hadamard.h"

using namespace lowbit;

namespace {
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        e += double(a[i] - b[i]) * double(a[i] - b[i]);
        r += double(b[i]) * double(b[i]);
    }
    return std::sqrt(e / r);
}
const Strategy kAll[] = {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right, Strategy::full, Strategy::oht};
}  // namespace

TEST(LpMatmul, EveryStrategyIsExactWithoutQuantization) {
    const int64_t m = 96, k = 96, n = 128;  // M = 12·8: OHT with a non-symmetric (Paley) Hadamard
    auto a = synthetic_operand(m, k, Pattern::row, 1), b = synthetic_operand(k, n, Pattern::col, 2);
    std::vector<float> ref(size_t(m * n)), c(ref.size());
    gemm_f32(ConstMatF(a.data(), m, k), Trans::no, ConstMatF(b.data(), k, n), Trans::no, MatF(ref.data(), m, n));
    LpMatmulOptions o;
    o.quantize = false;
    o.high_precision_bf16 = false;
    o.oe_k = 8;
    for (Strategy s : kAll) {
        lp_matmul(a.data(), b.data(), m, k, n, s, o, c.data());
        EXPECT_LT(rel_diff(c, ref), 1e-6) << strategy_name(s);  // FP32 rounding only
    }
}

TEST(LpMatmul, OeRowsAndColumnsEqualTheHighPrecisionProduct) {
    const int64_t m = 128, k = 64, n = 96;
    auto a = synthetic_operand(m, k, Pattern::row, 3), b = synthetic_operand(k, n, Pattern::col, 4);
    LpMatmulOptions o;
    o.oe_k = 5;
    std::vector<float> c(size_t(m * n)), hp(size_t(m * n));
    // high-precision reference with BF16-rounded operands (what the sliver uses)
    LpMatmulOptions full = o;
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::full, full, hp.data());
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht_oe_left, o, c.data());
    PreparedOperand pa = lp_prepare(a.data(), m, k, Side::left, Strategy::iht_oe_left, o);
    ASSERT_EQ(pa.indices.size(), 5u);
    for (int32_t r : pa.indices)
        for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(c[size_t(r * n + j)], hp[size_t(r * n + j)], 1e-4f * (1 + std::fabs(hp[size_t(r * n + j)])));
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht_oe_right, o, c.data());
    PreparedOperand pb = lp_prepare(b.data(), k, n, Side::right, Strategy::iht_oe_right, o);
    for (int32_t col : pb.indices)
        for (int64_t i = 0; i < m; ++i) EXPECT_NEAR(c[size_t(i * n + col)], hp[size_t(i * n + col)], 1e-4f * (1 + std::fabs(hp[size_t(i * n + col)])));
}

// Why the GPU extraction may leave the selected vectors in the quantized operand (zero_selected = false in
// outlier_extraction.cuh): the product's other rows (OE-left) or columns (OE-right) do not depend on them —
// the blocks and the Hadamard run along K — so IHT without extraction and IHT+OE agree bit for bit outside
// the selected ones, which the sliver overwrites.
TEST(LpMatmul, OeChangesOnlyTheSelectedRowsOrColumnsOfTheProduct) {
    const int64_t m = 96, k = 128, n = 64;
    auto a = synthetic_operand(m, k, Pattern::row, 11), b = synthetic_operand(k, n, Pattern::col, 12);
    LpMatmulOptions o;
    o.oe_k = 6;
    std::vector<float> iht(size_t(m * n)), oe(size_t(m * n));
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, iht.data());
    for (Strategy s : {Strategy::iht_oe_left, Strategy::iht_oe_right}) {
        const bool left = s == Strategy::iht_oe_left;
        lp_matmul(a.data(), b.data(), m, k, n, s, o, oe.data());
        const PreparedOperand p = left ? lp_prepare(a.data(), m, k, Side::left, s, o) : lp_prepare(b.data(), k, n, Side::right, s, o);
        ASSERT_EQ(p.indices.size(), 6u);
        std::vector<bool> selected(size_t(left ? m : n), false);
        for (int32_t v : p.indices) selected[size_t(v)] = true;
        int64_t differ = 0;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                if (selected[size_t(left ? i : j)]) differ += oe[size_t(i * n + j)] != iht[size_t(i * n + j)];
                else ASSERT_EQ(oe[size_t(i * n + j)], iht[size_t(i * n + j)]) << strategy_name(s) << " at " << i << "," << j;
            }
        EXPECT_GT(differ, 0) << strategy_name(s);  // the selected ones did change (the sliver is BF16, not MXFP4)
    }
}

TEST(LpMatmul, OeSelectsTheOutlierRows) {
    const int64_t m = 200, k = 64;
    auto a = synthetic_operand(m, k, Pattern::row, 7, 0.01, 20.0f);  // 2 outlier rows
    auto sp = split_outlier_rows(a.data(), m, k, 2, OutlierMetric::l2);
    auto sp2 = split_outlier_rows(a.data(), m, k, 2, OutlierMetric::absmax);
    EXPECT_EQ(sp.indices, sp2.indices);
    for (int32_t r : sp.indices) {
        double norm = 0;
        for (int64_t c = 0; c < k; ++c) {
            norm += double(a[size_t(r * k + c)]) * a[size_t(r * k + c)];
            EXPECT_EQ(sp.clean[size_t(r * k + c)], 0.0f);
        }
        EXPECT_GT(std::sqrt(norm / k), 10.0);
    }
    // ties rank the lower index first; k beyond the dimension takes all
    EXPECT_EQ(top_k_indices({1, 3, 3, 2}, 2), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(top_k_indices({5, 5, 5}, 1), (std::vector<int32_t>{0}));
    EXPECT_EQ(top_k_indices({1, 2}, 10).size(), 2u);
}

TEST(LpMatmul, IhtHelpsInnerOutliersAndOeHelpsOuterOnes) {
    const int64_t m = 256, k = 256, n = 256;
    std::vector<float> c(size_t(m * n)), ref(c.size());
    auto err = [&](Pattern pa, Pattern pb, Strategy s) {
        auto a = synthetic_operand(m, k, pa, 11), b = synthetic_operand(k, n, pb, 12);
        gemm_f32(ConstMatF(a.data(), m, k), Trans::no, ConstMatF(b.data(), k, n), Trans::no, MatF(ref.data(), m, n));
        LpMatmulOptions o;
        o.oe_k = 16;
        lp_matmul(a.data(), b.data(), m, k, n, s, o, c.data());
        return rel_diff(c, ref);
    };
    EXPECT_LT(err(Pattern::col, Pattern::row, Strategy::iht), 0.8 * err(Pattern::col, Pattern::row, Strategy::plain));
    EXPECT_LT(err(Pattern::row, Pattern::none, Strategy::iht_oe_left), 0.6 * err(Pattern::row, Pattern::none, Strategy::iht));
    EXPECT_LT(err(Pattern::none, Pattern::col, Strategy::iht_oe_right), 0.6 * err(Pattern::none, Pattern::col, Strategy::iht));
}

TEST(LpMatmul, PreparedOperandsMatchDirectCallAndCountBytes) {
    const int64_t m = 64, k = 128, n = 32;
    auto a = synthetic_operand(m, k, Pattern::none, 1), b = synthetic_operand(k, n, Pattern::none, 2);
    LpMatmulOptions o;
    o.rounding_b = Rounding::stochastic;
    std::vector<float> c1(size_t(m * n)), c2(c1.size());
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c1.data());
    PreparedOperand pa = lp_prepare(a.data(), m, k, Side::left, Strategy::iht, o);
    PreparedOperand pb = lp_prepare(b.data(), k, n, Side::right, Strategy::iht, o);
    lp_matmul_prepared(pa, pb, o, c2.data());
    EXPECT_EQ(c1, c2);
    // MXFP4: 4 bits per element + one byte per 32 → 4.25 bits
    EXPECT_EQ(pa.storage_bytes(), size_t(m * k / 2 + m * k / 32));
    PreparedOperand full = lp_prepare(a.data(), m, k, Side::left, Strategy::full, o);
    EXPECT_EQ(full.storage_bytes(), size_t(m * k * 2));
    // mismatched strategies / shapes are refused
    PreparedOperand pf = lp_prepare(b.data(), k, n, Side::right, Strategy::full, o);
    EXPECT_THROW(lp_matmul_prepared(pa, pf, o, c2.data()), Error);
    EXPECT_THROW(lp_matmul_prepared(pb, pa, o, c2.data()), Error);
}

TEST(LpMatmul, Nvfp4AndMxfp8AreSelectable) {
    const int64_t m = 32, k = 64, n = 32;
    auto a = synthetic_operand(m, k, Pattern::none, 5), b = synthetic_operand(k, n, Pattern::none, 6);
    std::vector<float> ref(size_t(m * n)), c(ref.size());
    gemm_f32(ConstMatF(a.data(), m, k), Trans::no, ConstMatF(b.data(), k, n), Trans::no, MatF(ref.data(), m, n));
    LpMatmulOptions o;
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c.data());
    const double e4 = rel_diff(c, ref);
    o.element = MxElement::e4m3;
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c.data());
    EXPECT_LT(rel_diff(c, ref), e4 / 3);
    o.nvfp4 = true;
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c.data());
    EXPECT_LT(rel_diff(c, ref), e4);  // 16-blocks with E4M3 scales beat MXFP4 on Gaussian data
}

// Random signs (Tseng et al.'s randomized Hadamard, LpMatmulOptions::random_signs_seed).
namespace {
const Strategy kIhtFamily[] = {Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right};

// The documented draw, written out from core/counter_rng.h: s_k = −1 when bit 0 of counter_random24(seed, k) is set.
float documented_sign(uint64_t seed, int64_t k) { return (counter_random24(seed, uint64_t(k)) & 1u) ? -1.0f : 1.0f; }
}  // namespace

TEST(LpMatmul, RandomSignsAreTheDocumentedDrawBeforeTheBlockHadamard) {
    const int64_t m = 8, k = 64, n = 16;
    auto a = synthetic_operand(m, k, Pattern::none, 21), b = synthetic_operand(k, n, Pattern::none, 22);
    LpMatmulOptions o;
    o.quantize = false;
    o.random_signs_seed = 0xC0FFEE;
    // A·S then the plain block Hadamard along K (rows of A; columns of B), bit for bit
    std::vector<float> as = a, bs = b;
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c) as[size_t(r * k + c)] *= documented_sign(o.random_signs_seed, c);
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) bs[size_t(r * n + c)] *= documented_sign(o.random_signs_seed, r);
    HadamardOptions h;
    h.block = kIhtBlock;
    h.axis = 1;
    hadamard_transform(as.data(), m, k, h);
    h.axis = 0;
    hadamard_transform(bs.data(), k, n, h);
    const PreparedOperand pa = lp_prepare(a.data(), m, k, Side::left, Strategy::iht, o);
    const PreparedOperand pb = lp_prepare(b.data(), k, n, Side::right, Strategy::iht, o);
    EXPECT_EQ(pa.dense, as);
    EXPECT_EQ(pb.dense, bs);
    EXPECT_EQ(pa.random_signs_seed, o.random_signs_seed);
    // the signs do something: some are −1 and the rotated operand is not the unsigned one
    int negative = 0;
    for (int64_t c = 0; c < k; ++c) negative += documented_sign(o.random_signs_seed, c) < 0;
    EXPECT_GT(negative, 16);
    EXPECT_LT(negative, 48);
    o.random_signs_seed = 0;
    EXPECT_NE(lp_prepare(a.data(), m, k, Side::left, Strategy::iht, o).dense, pa.dense);
}

TEST(LpMatmul, RandomSignsKeepTheProductExactWithoutQuantization) {
    const int64_t m = 96, k = 128, n = 64;
    auto a = synthetic_operand(m, k, Pattern::row, 23), b = synthetic_operand(k, n, Pattern::col, 24);
    std::vector<float> ref(size_t(m * n)), c(ref.size());
    gemm_f32(ConstMatF(a.data(), m, k), Trans::no, ConstMatF(b.data(), k, n), Trans::no, MatF(ref.data(), m, n));
    LpMatmulOptions o;
    o.quantize = false;
    o.high_precision_bf16 = false;
    o.oe_k = 8;
    o.random_signs_seed = 99;
    for (Strategy s : kIhtFamily) {
        lp_matmul(a.data(), b.data(), m, k, n, s, o, c.data());
        EXPECT_LT(rel_diff(c, ref), 1e-6) << strategy_name(s);  // (A·S·H)(H·S·B) = A·B: FP32 rounding only
    }
    // the OE slices are the unsigned rows of A / columns of B (exact slivers)
    const PreparedOperand pa = lp_prepare(a.data(), m, k, Side::left, Strategy::iht_oe_left, o);
    for (size_t i = 0; i < pa.indices.size(); ++i)
        for (int64_t j = 0; j < k; ++j) ASSERT_EQ(pa.slice[i * size_t(k) + size_t(j)], a[size_t(pa.indices[i]) * size_t(k) + size_t(j)]);
}

TEST(LpMatmul, RandomSignsChangeTheQuantizedProductButNotItsErrorLevel) {
    const int64_t m = 128, k = 256, n = 128;
    std::vector<float> ref(size_t(m * n)), signed_c(ref.size()), unsigned_c(ref.size());
    for (Pattern pa : {Pattern::none, Pattern::col}) {
        auto a = synthetic_operand(m, k, pa, 25), b = synthetic_operand(k, n, Pattern::none, 26);
        gemm_f32(ConstMatF(a.data(), m, k), Trans::no, ConstMatF(b.data(), k, n), Trans::no, MatF(ref.data(), m, n));
        for (Strategy s : kIhtFamily) {
            LpMatmulOptions o;
            o.oe_k = 8;
            lp_matmul(a.data(), b.data(), m, k, n, s, o, unsigned_c.data());
            o.random_signs_seed = 1234;
            lp_matmul(a.data(), b.data(), m, k, n, s, o, signed_c.data());
            EXPECT_NE(signed_c, unsigned_c) << strategy_name(s);
            // Both rotations are orthonormal and leave the block statistics of these operands alike (Gaussian
            // bulk; outlier columns of A are spread by H either way), so the MXFP4 error stays at the same level:
            // measured ratios here are 1.00–1.03 (relative errors ~0.14–0.16); ±10 % leaves room for the draw.
            const double e_signed = rel_diff(signed_c, ref), e_unsigned = rel_diff(unsigned_c, ref);
            EXPECT_GT(e_signed, 0.9 * e_unsigned) << strategy_name(s);
            EXPECT_LT(e_signed, 1.1 * e_unsigned) << strategy_name(s);
        }
    }
}

TEST(LpMatmul, RandomSignsAreDeterministicBySeedAndOnlyForTheIhtFamily) {
    const int64_t m = 64, k = 128, n = 32;
    auto a = synthetic_operand(m, k, Pattern::none, 27), b = synthetic_operand(k, n, Pattern::none, 28);
    LpMatmulOptions o;
    o.rounding_a = o.rounding_b = Rounding::stochastic;  // mxfp4-rht-sr's gradient GEMMs
    o.seed_a = 5, o.seed_b = 6;
    o.random_signs_seed = 41;
    std::vector<float> c1(size_t(m * n)), c2(c1.size()), c3(c1.size());
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c1.data());
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c2.data());
    EXPECT_EQ(c1, c2);
    o.random_signs_seed = 42;
    lp_matmul(a.data(), b.data(), m, k, n, Strategy::iht, o, c3.data());
    EXPECT_NE(c1, c3);
    // plain, full and oht ignore the seed
    for (Strategy s : {Strategy::plain, Strategy::full, Strategy::oht}) {
        LpMatmulOptions none = o;
        none.random_signs_seed = 0;
        lp_matmul(a.data(), b.data(), m, k, n, s, o, c1.data());
        lp_matmul(a.data(), b.data(), m, k, n, s, none, c2.data());
        EXPECT_EQ(c1, c2) << strategy_name(s);
        EXPECT_EQ(lp_prepare(a.data(), m, k, Side::left, s, o).random_signs_seed, 0u) << strategy_name(s);
    }
    // operands prepared with different signs are refused (their product would not be A·B)
    const PreparedOperand pa = lp_prepare(a.data(), m, k, Side::left, Strategy::iht, o);
    o.random_signs_seed = 43;
    const PreparedOperand pb = lp_prepare(b.data(), k, n, Side::right, Strategy::iht, o);
    EXPECT_THROW(lp_matmul_prepared(pa, pb, o, c1.data()), Error);
}

// The INT8-stage window rule (int8_window.h) on hand-set scales. 200 lines of K = 544: 2 tiles, 3 chunks (the last
// one block deep). A chunk takes one plane when its live scales span at most 3 binades, two planes up to 7: per line
// for A (a tile takes its worst line), per 128-line tile for B. Zero blocks do not count whatever their scale; a NaN
// scale is always outside.
TEST(Int8Window, ChunksOutsideTheWindowPerLineAndPerTile) {
    const int64_t lines = 200, k = 544, kb = k / 32;
    std::vector<uint8_t> codes(size_t(lines * k / 2), 0x11), scales(size_t(lines * kb), 127);  // every value 0.5 · 2^0
    const auto at = [&](int64_t line, int64_t block) -> uint8_t& { return scales[size_t(line * kb + block)]; };
    at(5, 9) = 133;    // tile 0, chunk 1: line 5 spans 6 binades → two planes for A and B
    at(130, 3) = 130;  // tile 1, chunk 0: 3 binades → one plane both ways
    at(140, 1) = 129;  // tile 1, chunk 0: with line 130's 130 and the others' 127, still 3 for the tile
    at(7, 0) = 129;    // tile 0, chunk 0: 2 binades in line 7; with line 8 at 125 the tile spans 4 (B: two planes)
    at(8, 2) = 125;
    at(150, 16) = 0xFF;  // tile 1, chunk 2 (the one-block chunk): NaN scale → outside both ways
    at(60, 16) = 200;    // tile 0, chunk 2: a zero block (its codes −0), its scale ignored: still inside
    for (int64_t i = 0; i < 16; ++i) codes[size_t(60 * k / 2 + 16 * 16 + i)] = 0x88;
    at(190, 12) = 135;  // tile 1, chunk 1: line 190 spans 8 binades → outside both ways
    const Int8WindowCensus a = int8_window_census(codes.data(), scales.data(), lines, k, true);
    const Int8WindowCensus b = int8_window_census(codes.data(), scales.data(), lines, k, false);
    ASSERT_EQ(a.tiles, 2);
    ASSERT_EQ(a.chunks, 3);
    EXPECT_EQ(a.inside, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));  // [tile][chunk]
    EXPECT_EQ(a.two_planes, (std::vector<uint8_t>{0, 1, 0, 0, 0, 0}));
    EXPECT_EQ(b.inside, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
    EXPECT_EQ(b.two_planes, (std::vector<uint8_t>{1, 1, 0, 0, 0, 0}));  // B's tile 0, chunk 0 spans 125…129
    EXPECT_EQ(a.outside(), 2);
    EXPECT_EQ(a.with_two_planes(), 1);
    EXPECT_EQ(b.with_two_planes(), 2);
    // A · Bᵀ with these as A and B: chunk 0 chains all 4 pairs (B's two-plane tile meets A's one-plane tiles); chunk 1
    // has one tile inside per operand, both two-plane: 4 slow; chunk 2 chains (A 1 of 2) × (B 1 of 2): 3 slow.
    EXPECT_EQ(int8_window_slow_pairs(a, b), 7);
    EXPECT_THROW(int8_window_census(codes.data(), scales.data(), lines, 40, true), Error);
    // One plane alone (the kernel's single_plane): nothing spanning 4 binades or more is inside.
    const Int8WindowCensus a1 = int8_window_census(codes.data(), scales.data(), lines, k, true, kInt8WindowBinades, false);
    const Int8WindowCensus b1 = int8_window_census(codes.data(), scales.data(), lines, k, false, kInt8WindowBinades, false);
    EXPECT_EQ(a1.inside, (std::vector<uint8_t>{1, 0, 1, 1, 0, 0}));
    EXPECT_EQ(b1.inside, (std::vector<uint8_t>{0, 0, 1, 1, 0, 0}));
    EXPECT_EQ(a1.with_two_planes() + b1.with_two_planes(), 0);
    // chunk 0: (A 2 of 2) × (B 1 of 2) = 2 of 4 chained; chunk 1: none; chunk 2: 1 of 4.
    EXPECT_EQ(int8_window_slow_pairs(a1, b1), 2 + 4 + 3);
    // Other widths w (two planes reach 2w + 1): w = 2 drops line 130's 3-binade chunk to two planes and keeps line 5's
    // 6 binades out (2 · 2 + 1 = 5); w = 4 takes line 190's 8 binades in with two planes; NaN stays outside at any width.
    const Int8WindowCensus a2 = int8_window_census(codes.data(), scales.data(), lines, k, true, 2);
    EXPECT_EQ(a2.inside, (std::vector<uint8_t>{1, 0, 1, 1, 0, 0}));
    EXPECT_EQ(a2.two_planes, (std::vector<uint8_t>{0, 0, 0, 1, 0, 0}));
    const Int8WindowCensus a4 = int8_window_census(codes.data(), scales.data(), lines, k, true, 4);
    EXPECT_EQ(a4.inside, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));
    EXPECT_EQ(a4.two_planes, (std::vector<uint8_t>{0, 1, 0, 0, 1, 0}));
    EXPECT_THROW(int8_window_census(codes.data(), scales.data(), lines, k, true, -1), Error);
}
