// test_cuda_lp_matmul.cu — lp_matmul on the GPU (adahop/cuda/lp_matmul_cuda.cuh) against the CPU's lp_matmul:
// quantized operands bit for bit, products within FP32 summation-order tolerance, the identities that
// hold without quantization, and the same with the random signs of the randomized Hadamard; the census of the
// tensor-core products' window against direct calls of the GEMM and a hand count.
#include "adahop_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <cmath>
#include <vector>

#include "adahop/cuda/lp_matmul_cuda.cuh"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

struct Fmt {
    bool nvfp4;
    MxElement e;
};
const Fmt kFormats[] = {{false, MxElement::e2m1}, {false, MxElement::e4m3}, {true, MxElement::e2m1}};

// Both operands prepared on the CPU and on the GPU: the same fields hold the same bytes (one struct template
// on both sides) — quantized codes, scales, NVFP4's tensor scale, or the unquantized rotated operand; the OE
// indices and slice; the random signs applied.
void expect_same_prepared(const PreparedOperandCuda& pg, const PreparedOperand& pc, Strategy s, const LpMatmulOptions& o) {
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(pg.side, pc.side);
        EXPECT_EQ(pg.rows, pc.rows);
        EXPECT_EQ(pg.cols, pc.cols);
        EXPECT_EQ(pg.codes.size(), pc.codes.size()) << strategy_name(s);
        if (o.quantize) {
            EXPECT_EQ(download(pg.codes, pc.codes.size()), pc.codes) << strategy_name(s);
            EXPECT_EQ(download(pg.scales, pc.scales.size()), pc.scales) << strategy_name(s);
            if (o.nvfp4) EXPECT_EQ(download(pg.tensor_scale, 1), pc.tensor_scale) << strategy_name(s);
        } else {
            ASSERT_EQ(pg.dense.size(), pc.dense.size()) << strategy_name(s);
            EXPECT_EQ(float_bits(download(pg.dense, pc.dense.size())), float_bits(pc.dense)) << strategy_name(s);
        }
        EXPECT_EQ(pg.k_extracted, pc.k_extracted) << strategy_name(s);
        if (pc.k_extracted > 0) {
            EXPECT_EQ(download(pg.indices, size_t(pc.k_extracted)), pc.indices) << strategy_name(s);
            // the slice: the operand's own (unsigned, unrotated) rows or columns, BF16-rounded on both sides
            ASSERT_EQ(pg.slice.size(), pc.slice.size()) << strategy_name(s);
            EXPECT_EQ(float_bits(download(pg.slice, pc.slice.size())), float_bits(pc.slice)) << strategy_name(s);
        }
        EXPECT_EQ(pg.random_signs_seed, pc.random_signs_seed) << strategy_name(s);
        // the whole operand where the strategy keeps it: copied, or (prepare_bf16) a view of the caller's BF16
        // tensor, which storage_bytes() does not count
        const size_t viewed = pg.high_precision_bf16 ? pc.high_precision.size() : 0;
        EXPECT_EQ(pg.storage_bytes() + 2 * viewed, pc.storage_bytes());
        if (pc.high_precision.empty()) {
            EXPECT_EQ(pg.high_precision_bf16, nullptr);
        } else if (pg.high_precision_bf16) {
            EXPECT_TRUE(pg.high_precision.size() == 0) << strategy_name(s);
            std::vector<__nv_bfloat16> v(viewed);
            CUDA_CHECK(cudaMemcpy(v.data(), pg.high_precision_bf16, viewed * 2, cudaMemcpyDeviceToHost));
            std::vector<float> got(viewed);
            for (int64_t r = 0; r < pc.rows; ++r)
                for (int64_t c = 0; c < pc.cols; ++c)
                    got[size_t(r * pc.cols + c)] =
                        __bfloat162float(v[size_t(pg.high_precision_transposed ? c * pc.rows + r : r * pc.cols + c)]);
            EXPECT_EQ(float_bits(got), float_bits(pc.high_precision)) << strategy_name(s);
        } else {
            ASSERT_EQ(pg.high_precision.size(), pc.high_precision.size()) << strategy_name(s);
            EXPECT_EQ(float_bits(download(pg.high_precision, pc.high_precision.size())), float_bits(pc.high_precision));
        }
}

void expect_prepared_operands_match(LpMatmulCuda& gpu, const std::vector<float>& a, const std::vector<float>& b,
                                    const DeviceBuffer<float>& da, const DeviceBuffer<float>& db, int64_t m, int64_t k, int64_t n,
                                    Strategy s, const LpMatmulOptions& o) {
    for (Side side : {Side::left, Side::right}) {
        SCOPED_TRACE(side == Side::left ? "left operand" : "right operand");
        const auto& t = side == Side::left ? a : b;
        const int64_t rr = side == Side::left ? m : k, cc = side == Side::left ? k : n;
        const PreparedOperand pc = lp_prepare(t.data(), rr, cc, side, s, o);
        const PreparedOperandCuda pg = gpu.prepare(side == Side::left ? da.data() : db.data(), rr, cc, side, s, o);
        expect_same_prepared(pg, pc, s, o);
    }
}

std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
    std::vector<float> t(x.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = x[size_t(r * cols + c)];
    return t;
}

DeviceBuffer<__nv_bfloat16> bf16_device(const std::vector<float>& x) {
    const auto h = to_device_bf16(x);
    DeviceBuffer<__nv_bfloat16> d(h.size());
    d.upload(h.data(), h.size());
    return d;
}

}  // namespace

// Both main-product paths: BF16 emulation (the default) and, for MXFP4 × MXFP4, the FP8 tensor cores
// (adahop/cuda/mx_gemm_fp8.cuh: exact block sums, so the same FP32 summation-order tolerance holds).
class LpMatmulPath : public ::testing::TestWithParam<bool> {};

TEST_P(LpMatmulPath, LpMatmulMatchesCpu) {
    REQUIRE_GPU();
    LpMatmulCuda gpu;
    gpu.set_tensor_core_mx(GetParam());
    const int64_t m = 256, k = 320, n = 128;  // OHT on the GPU needs power-of-two M and N
    auto a = synthetic_operand(m, k, Pattern::row, 31), b = synthetic_operand(k, n, Pattern::col, 32);
    auto da = to_device(a), db = to_device(b);
    DeviceBuffer<float> dc(size_t(m * n));
    const Strategy strategies[] = {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right,
                                   Strategy::full, Strategy::oht};
    for (const Fmt& f : kFormats)
        for (Strategy s : strategies)
            for (Rounding rnd : {Rounding::nearest_even, Rounding::stochastic}) {
                LpMatmulOptions o;
                o.nvfp4 = f.nvfp4;
                o.element = f.e;
                o.oe_k = 16;
                o.rounding_b = rnd;
                o.seed_b = 77;
                std::vector<float> cpu(size_t(m * n));
                lp_matmul(a.data(), b.data(), m, k, n, s, o, cpu.data());
                gpu.matmul(da.data(), db.data(), m, k, n, s, o, dc.data());
                const auto got = download(dc, size_t(m * n));
                if (GetParam()) {  // the tensor-core path is taken exactly where it applies
                    const PreparedOperandCuda pa = gpu.prepare(da.data(), m, k, Side::left, s, o);
                    const PreparedOperandCuda pb = gpu.prepare(db.data(), k, n, Side::right, s, o);
                    const bool mxfp4 = !f.nvfp4 && f.e == MxElement::e2m1 && s != Strategy::full && s != Strategy::oht;
                    EXPECT_EQ(gpu.uses_tensor_core_mx(pa, pb), mxfp4 && cuda_tma_usable()) << strategy_name(s);
                }
                // OHT rotates with dense products on the GPU, FWHTs on the CPU: the quantizer sees
                // slightly different inputs, so only the error level is compared there.
                const double tol = s == Strategy::oht ? 0.05 : 2e-5;
                EXPECT_LT(rel_diff(got, cpu), tol) << strategy_name(s) << " nvfp4 " << f.nvfp4 << " " << int(f.e);
                if (s == Strategy::full || s == Strategy::oht) continue;
                // the quantized operands themselves are bit-identical
                expect_prepared_operands_match(gpu, a, b, da, db, m, k, n, s, o);
            }
}

INSTANTIATE_TEST_SUITE_P(AdahopCuda, LpMatmulPath, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "TensorCoreMx" : "Emulation"; });

TEST(AdahopCuda, LpMatmulIdentitiesWithoutQuantization) {
    REQUIRE_GPU();
    LpMatmulCuda gpu;
    const int64_t m = 128, k = 96, n = 64;
    auto a = synthetic_operand(m, k, Pattern::row, 41), b = synthetic_operand(k, n, Pattern::none, 42);
    auto da = to_device(a), db = to_device(b);
    DeviceBuffer<float> dc(size_t(m * n)), dref(size_t(m * n));
    gpu.gemm(da.data(), db.data(), m, k, n, false, dref.data());
    const auto ref = download(dref, size_t(m * n));
    LpMatmulOptions o;
    o.quantize = false;
    o.high_precision_bf16 = false;
    o.oe_k = 8;
    for (Strategy s : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right, Strategy::full, Strategy::oht}) {
        gpu.matmul(da.data(), db.data(), m, k, n, s, o, dc.data());
        EXPECT_LT(rel_diff(download(dc, size_t(m * n)), ref), 1e-6) << strategy_name(s);
    }
}

// mxfp4-rht-sr's gradient GEMMs: random signs along K before the block Hadamard (opts.random_signs_seed),
// stochastic rounding of both operands. The sign pass multiplies by ±1 (exact) in the CPU's order, so the
// rotated operands, and with them codes and scales, are bit-identical; the products then differ only by
// cuBLAS's summation order (2e-5 relative, as above).
TEST(AdahopCuda, LpMatmulWithRandomSignsMatchesCpu) {
    REQUIRE_GPU();
    LpMatmulCuda gpu;
    // M = 200: a partial row group of the sign kernel (32 rows) for A; K = 320: a partial 256-column block
    const int64_t m = 200, k = 320, n = 72;
    auto a = synthetic_operand(m, k, Pattern::row, 51), b = synthetic_operand(k, n, Pattern::col, 52);
    auto da = to_device(a), db = to_device(b);
    DeviceBuffer<float> dc(size_t(m * n));
    for (const Fmt& f : kFormats)
        for (Strategy s : {Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right})
            for (Rounding rnd : {Rounding::nearest_even, Rounding::stochastic}) {
                SCOPED_TRACE(std::string(strategy_name(s)) + (f.nvfp4 ? " nvfp4" : " mx") + " element " + std::to_string(int(f.e)) +
                             (rnd == Rounding::stochastic ? " SR" : " RNE"));
                LpMatmulOptions o;
                o.nvfp4 = f.nvfp4;
                o.element = f.e;
                o.oe_k = 16;
                o.rounding_a = o.rounding_b = rnd;
                o.seed_a = 77, o.seed_b = 78;
                o.random_signs_seed = 0x5EED5EEDull;
                std::vector<float> cpu(size_t(m * n)), unsigned_cpu(size_t(m * n));
                lp_matmul(a.data(), b.data(), m, k, n, s, o, cpu.data());
                gpu.matmul(da.data(), db.data(), m, k, n, s, o, dc.data());
                EXPECT_LT(rel_diff(download(dc, size_t(m * n)), cpu), 2e-5);
                // the signs were applied: the CPU product without them differs
                LpMatmulOptions none = o;
                none.random_signs_seed = 0;
                lp_matmul(a.data(), b.data(), m, k, n, s, none, unsigned_cpu.data());
                EXPECT_NE(cpu, unsigned_cpu);
                expect_prepared_operands_match(gpu, a, b, da, db, m, k, n, s, o);
            }
    // Without quantization: the rotated operands bit for bit, and the product is A·B.
    LpMatmulOptions o;
    o.quantize = false;
    o.high_precision_bf16 = false;
    o.oe_k = 8;
    o.random_signs_seed = 0x5EED5EEDull;
    DeviceBuffer<float> dref(size_t(m * n));
    gpu.gemm(da.data(), db.data(), m, k, n, false, dref.data());
    const auto ref = download(dref, size_t(m * n));
    for (Strategy s : {Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right}) {
        expect_prepared_operands_match(gpu, a, b, da, db, m, k, n, s, o);
        gpu.matmul(da.data(), db.data(), m, k, n, s, o, dc.data());
        EXPECT_LT(rel_diff(download(dc, size_t(m * n)), ref), 1e-6) << strategy_name(s);
    }
    // operands prepared with different signs are refused
    PreparedOperandCuda pa = gpu.prepare(da.data(), m, k, Side::left, Strategy::iht, o);
    LpMatmulOptions other = o;
    other.random_signs_seed = 1;
    PreparedOperandCuda pb = gpu.prepare(db.data(), k, n, Side::right, Strategy::iht, other);
    expect_error(ErrorKind::usage, [&] { gpu.matmul_prepared(pa, pb, o, dc.data()); });
}

// The training engine's route (train/cuda/train_linear_cuda.cu): BF16 operands as they lie in memory — the
// operand or its transpose — prepared into reused operands. Every field equals the CPU's lp_prepare of the
// operand's values bit for bit, on the fused paths (plain, iht, iht+OE from BF16) and on the FP32 fallbacks
// (random signs, stochastic rounding of a transposed tensor, MXFP8 rotations, NVFP4); the products into
// BF16 and into FP32 with beta follow the CPU's lp_matmul within FP32 summation order — for MXFP4 also with the main
// product on the tensor cores (each fold), where the product, and OE's slivers, go straight into the output with its beta.
TEST(AdahopCuda, LpMatmulOfBf16OperandsMatchesCpu) {
    REQUIRE_GPU();
    LpMatmulCuda gpu;
    const int64_t m = 96, k = 320, n = 160;
    const auto a = bf16_values(synthetic_operand(m, k, Pattern::row, 61)), b = bf16_values(synthetic_operand(k, n, Pattern::col, 62));
    const auto da = bf16_device(a), db = bf16_device(b), dat = bf16_device(transposed(a, m, k)), dbt = bf16_device(transposed(b, k, n));
    std::vector<float> old_c(size_t(m * n));
    for (size_t i = 0; i < old_c.size(); ++i) old_c[i] = float(int(i % 7) - 3) * 0.25f;
    PreparedOperandCuda pa, pb;  // reused by every case below, as the training engine reuses its own
    DeviceBuffer<float> c32(size_t(m * n));
    DeviceBuffer<__nv_bfloat16> c16(size_t(m * n));
    for (const Fmt& f : kFormats)
        for (Strategy s : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right, Strategy::full})
            for (int variant = 0; variant < 3; ++variant)  // RNE, SR, random signs + SR
                for (bool transposed_a : {false, true}) {
                    const bool transposed_b = !transposed_a;
                    SCOPED_TRACE(std::string(strategy_name(s)) + (f.nvfp4 ? " nvfp4" : " mx") + " element " + std::to_string(int(f.e)) +
                                 " variant " + std::to_string(variant) + (transposed_a ? " Aᵀ, B" : " A, Bᵀ"));
                    LpMatmulOptions o;
                    o.nvfp4 = f.nvfp4;
                    o.element = f.e;
                    o.oe_k = 12;
                    o.rounding_a = o.rounding_b = variant == 0 ? Rounding::nearest_even : Rounding::stochastic;
                    o.seed_a = 91, o.seed_b = 92;
                    o.random_signs_seed = variant == 2 ? 0xC0FFEEull : 0;
                    gpu.prepare_bf16(pa, transposed_a ? dat.data() : da.data(), transposed_a, m, k, Side::left, s, o);
                    gpu.prepare_bf16(pb, transposed_b ? dbt.data() : db.data(), transposed_b, k, n, Side::right, s, o);
                    if (s != Strategy::full) {
                        expect_same_prepared(pa, lp_prepare(a.data(), m, k, Side::left, s, o), s, o);
                        expect_same_prepared(pb, lp_prepare(b.data(), k, n, Side::right, s, o), s, o);
                    }
                    std::vector<float> cpu(size_t(m * n));
                    lp_matmul(a.data(), b.data(), m, k, n, s, o, cpu.data());
                    std::vector<float> with_beta(cpu.size()), rounded(cpu.size());
                    for (size_t i = 0; i < cpu.size(); ++i) with_beta[i] = cpu[i] + 0.5f * old_c[i];
                    const bool mxfp4 = !f.nvfp4 && f.e == MxElement::e2m1 && s != Strategy::full;
                    const MxGemmFold folds[] = {MxGemmFold::b_columns, MxGemmFold::b_columns, MxGemmFold::int8_stages,
                                                MxGemmFold::int8_stages_columns};
                    for (int engine = 0; engine < (mxfp4 ? 4 : 1); ++engine) {  // 0: emulation, else the tensor cores
                        SCOPED_TRACE("engine " + std::to_string(engine));
                        gpu.set_tensor_core_mx(engine > 0, folds[engine]);
                        c32.upload(old_c.data(), old_c.size());
                        gpu.matmul_prepared(pa, pb, o, LpMatmulOutput{c32.data(), nullptr, 0.5f});
                        gpu.matmul_prepared(pa, pb, o, LpMatmulOutput{nullptr, c16.data(), 0.0f});
                        EXPECT_LT(rel_diff(download(c32, cpu.size()), with_beta), 2e-5);
                        const auto got16 = download(c16, cpu.size());
                        for (size_t i = 0; i < cpu.size(); ++i) rounded[i] = __bfloat162float(got16[i]);
                        EXPECT_LT(rel_diff(rounded, cpu), 8e-3);  // BF16 output: 2^-8 relative per element at most
                    }
                    gpu.set_tensor_core_mx(false);
                }
    expect_error(ErrorKind::usage, [&] { gpu.matmul_prepared(pa, pb, LpMatmulOptions{}, LpMatmulOutput{}); });
    expect_error(ErrorKind::usage, [&] { gpu.matmul_prepared(pa, pb, LpMatmulOptions{}, LpMatmulOutput{nullptr, c16.data(), 1.0f}); });
}

namespace {

// x[outer][kk] = ((7·outer + 13·kk) mod 17 − 8) / 8, stored with K along the columns (A, M × K) or the rows (B, K × N):
// every 32 consecutive kk hold a −1, so every MX block of it has the same scale.
std::vector<float> level_operand(int64_t rows, int64_t cols, Side side) {
    std::vector<float> x(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t outer = side == Side::left ? r : c, kk = side == Side::left ? c : r;
            x[size_t(r * cols + c)] = float((7 * outer + 13 * kk) % 17 - 8) / 8.0f;
        }
    return x;
}

// Multiplies MX block `block` (along K) of outer line `outer` by 2^binades: its scale moves by exactly that much.
void shift_block(std::vector<float>& x, int64_t cols, Side side, int64_t outer, int64_t block, int binades) {
    for (int64_t kk = block * kMxBlock; kk < (block + 1) * kMxBlock; ++kk) {
        float& v = side == Side::left ? x[size_t(outer * cols + kk)] : x[size_t(kk * cols + outer)];
        v = std::ldexp(v, binades);
    }
}

// mx_gemm_fp8_unfolded_blocks of one direct call on prepared operands, with a scratch of its own.
unsigned direct_unfolded_count(const PreparedOperandCuda& a, const PreparedOperandCuda& b, MxGemmFold fold) {
    MxGemmScratch scratch;
    DeviceBuffer<float> c(size_t(a.rows * b.cols));
    mx_gemm_fp8_cuda({a.codes.data(), a.scales.data(), a.element}, {b.codes.data(), b.scales.data(), b.element}, a.rows, b.cols,
                     a.cols, c.data(), nullptr, 0, &scratch, fold);
    return mx_gemm_fp8_unfolded_blocks(scratch);
}

}  // namespace

// The census of the tensor-core products (LpMatmulCuda::set_mx_census) on MXFP4 operands whose block scales spread
// in known places. M 200, K 544, N 300: A 2 tiles of 128 rows, B 3 tiles of 128 columns, K 3 chunks of 256 (the last
// 32 deep, the rest padding), so (2 + 3) · 3 = 15 (operand, tile, chunk) triples and 2 · 3 · 3 = 18 (output tile,
// chunk) pairs per product. A chunk whose live scales (per row of A, per tile of B) span 4 … 7 binades takes two INT8
// planes, more is outside: by hand chunks 0 and 1 of A's tile 0 and chunk 1 of B's tile 1 take two planes, chunk 0
// of B's tile 1 is outside. Chunk 0: the pairs with B's tile 1 go block by block (2), A's tile 0 chains the other two
// with two planes; chunk 1: (0, 1) has two planes on both sides, block by block (1); (0, 0), (0, 2) and (1, 1) chain
// with two planes (3); chunk 2 chains everywhere with one. Each site adds exactly what the direct calls count
// (mx_gemm_fp8_unfolded_blocks), and nothing is counted while the census is off, away from every site, or for
// products not on the tensor cores.
TEST(AdahopCuda, MxCensusTalliesTensorCoreProductsPerSite) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the tensor-core MX GEMM is the sm_90a kernel's";
    const int64_t m = 200, k = 544, n = 300;
    const std::vector<float> level_a = level_operand(m, k, Side::left), level_b = level_operand(k, n, Side::right);
    std::vector<float> a = level_a, b = level_b;
    // (line, block, binades)
    shift_block(a, k, Side::left, 5, 9, 6);      // A tile 0, chunk 1: 6 binades → two planes
    shift_block(a, k, Side::left, 100, 2, -5);   // A tile 0, chunk 0: 5 binades → two planes
    shift_block(a, k, Side::left, 130, 3, 3);    // A tile 1, chunk 0: 3 binades, one plane's edge → one plane
    shift_block(a, k, Side::left, 150, 12, -3);  // A tile 1, chunk 1: 3 binades → one plane
    shift_block(b, n, Side::right, 140, 5, 15);  // B tile 1, chunk 0: 15 binades → outside (unfolded for b_columns)
    shift_block(b, n, Side::right, 200, 12, 4);  // B tile 1, chunk 1: 4 binades → two planes
    shift_block(b, n, Side::right, 10, 0, 2);    // B tile 0, chunk 0: 2 binades → one plane
    const int64_t off_by_hand = 1, triples_by_hand = (2 + 3) * 3, pairs_by_hand = 2 * 3 * 3, slow_by_hand = 3, two_by_hand = 5;
    const auto da = to_device(a), db = to_device(b), dla = to_device(level_a), dlb = to_device(level_b);
    LpMatmulCuda gpu;
    gpu.set_tensor_core_mx(true, MxGemmFold::int8_stages);
    const LpMatmulOptions o;
    const PreparedOperandCuda pa = gpu.prepare(da.data(), m, k, Side::left, Strategy::plain, o);
    const PreparedOperandCuda pb = gpu.prepare(db.data(), k, n, Side::right, Strategy::plain, o);
    const PreparedOperandCuda la = gpu.prepare(dla.data(), m, k, Side::left, Strategy::plain, o);
    const PreparedOperandCuda lb = gpu.prepare(dlb.data(), k, n, Side::right, Strategy::plain, o);
    ASSERT_TRUE(gpu.uses_tensor_core_mx(pa, pb));
    const unsigned per_call = direct_unfolded_count(pa, pb, MxGemmFold::int8_stages);
    EXPECT_EQ(int64_t(per_call), off_by_hand);
    EXPECT_EQ(direct_unfolded_count(la, lb, MxGemmFold::int8_stages), 0u);
    const MxGemmWindowGeometry g =
        mx_gemm_fp8_window_geometry(m, n, k, MxElement::e2m1, MxElement::e2m1, MxGemmFold::int8_stages);
    EXPECT_EQ(g.units, triples_by_hand);
    EXPECT_EQ(g.row_tiles * g.column_tiles * g.chunks, pairs_by_hand);
    EXPECT_EQ(g.chunk_words, 1);
    DeviceBuffer<float> c32(size_t(m * n));
    DeviceBuffer<__nv_bfloat16> c16(size_t(m * n));

    // Off (the default): products count nowhere, and there is no site to pick.
    gpu.matmul_prepared(pa, pb, o, c32.data());
    EXPECT_TRUE(gpu.mx_census().empty());
    expect_error(ErrorKind::usage, [&] { gpu.set_mx_census_site(0); });

    gpu.set_mx_census(2);
    gpu.matmul_prepared(pa, pb, o, c32.data());  // no site picked yet
    gpu.set_mx_census_site(0);
    gpu.matmul_prepared(pa, pb, o, c32.data());
    gpu.matmul_prepared(pa, pb, o, LpMatmulOutput{nullptr, c16.data(), 0.0f});  // the BF16 output as well
    gpu.set_tensor_core_mx(false);
    gpu.matmul_prepared(pa, pb, o, c32.data());  // emulated: not a tensor-core product
    gpu.set_tensor_core_mx(true, MxGemmFold::int8_stages);
    gpu.set_mx_census_site(1);
    gpu.matmul_prepared(la, lb, o, c32.data());
    gpu.set_mx_census_site(-1);
    gpu.matmul_prepared(pa, pb, o, c32.data());
    expect_error(ErrorKind::usage, [&] { gpu.set_mx_census_site(2); });
    std::vector<MxCensusTally> tallies = gpu.mx_census();
    ASSERT_EQ(tallies.size(), 2u);
    EXPECT_EQ(tallies[0].calls, 2);
    EXPECT_EQ(tallies[0].off_window, 2 * int64_t(per_call));
    EXPECT_EQ(tallies[0].units, 2 * triples_by_hand);
    EXPECT_EQ(tallies[0].tile_chunks, 2 * pairs_by_hand);
    EXPECT_EQ(tallies[0].slow_tile_chunks, 2 * slow_by_hand);
    EXPECT_EQ(tallies[0].two_plane_tile_chunks, 2 * two_by_hand);
    EXPECT_EQ(tallies[1].calls, 1);
    EXPECT_EQ(tallies[1].off_window, 0);
    EXPECT_EQ(tallies[1].units, triples_by_hand);
    EXPECT_EQ(tallies[1].tile_chunks, pairs_by_hand);
    EXPECT_EQ(tallies[1].slow_tile_chunks, 0);
    EXPECT_EQ(tallies[1].two_plane_tile_chunks, 0);

    // B folded per (128-column tile, MX block): 3 · 17 pairs, one of them (tile 1, block 5) unfolded; no output tile
    // is decided by the window. Switching the census on again zeroes it.
    gpu.set_mx_census(1);
    gpu.set_tensor_core_mx(true, MxGemmFold::b_columns);
    gpu.set_mx_census_site(0);
    gpu.matmul_prepared(pa, pb, o, c32.data());
    tallies = gpu.mx_census();
    ASSERT_EQ(tallies.size(), 1u);
    EXPECT_EQ(tallies[0].calls, 1);
    EXPECT_EQ(tallies[0].units, 3 * 17);
    EXPECT_EQ(tallies[0].off_window, int64_t(direct_unfolded_count(pa, pb, MxGemmFold::b_columns)));
    EXPECT_EQ(tallies[0].off_window, 1);
    EXPECT_EQ(tallies[0].tile_chunks, 0);
    EXPECT_EQ(tallies[0].slow_tile_chunks, 0);

    // Without the sm_90a kernels the products are emulated: counted nowhere.
    gpu.set_mx_census(1);
    gpu.set_mx_census_site(0);
    cuda_set_tma_allowed(false);
    gpu.matmul_prepared(pa, pb, o, c32.data());
    cuda_set_tma_allowed(true);
    tallies = gpu.mx_census();
    EXPECT_EQ(tallies[0].calls, 0);
    EXPECT_EQ(tallies[0].off_window, 0);

    gpu.set_mx_census(0);
    EXPECT_TRUE(gpu.mx_census().empty());
}
