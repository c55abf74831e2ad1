// test_cuda_lp_matmul.cu — lp_matmul on the GPU (adahop/cuda/lp_matmul_cuda.cuh) against the CPU's lp_matmul:
// quantized operands bit for bit, products within FP32 summation-order tolerance, and the identities that
// hold without quantization.
#include "adahop_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <vector>

#include "adahop/cuda/lp_matmul_cuda.cuh"

using namespace lowbit;
using namespace lowbit::testing_util;

TEST(AdahopCuda, LpMatmulMatchesCpu) {
    REQUIRE_GPU();
    LpMatmulCuda gpu;
    const int64_t m = 256, k = 320, n = 128;  // OHT on the GPU needs power-of-two M and N
    auto a = synthetic_operand(m, k, Pattern::row, 31), b = synthetic_operand(k, n, Pattern::col, 32);
    auto da = to_device(a), db = to_device(b);
    DeviceBuffer<float> dc(size_t(m * n));
    struct Fmt { bool nvfp4; MxElement e; };
    const Fmt fmts[] = {{false, MxElement::e2m1}, {false, MxElement::e4m3}, {true, MxElement::e2m1}};
    const Strategy strategies[] = {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right,
                                   Strategy::full, Strategy::oht};
    for (const Fmt& f : fmts)
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
                // OHT rotates with dense products on the GPU, FWHTs on the CPU: the quantizer sees
                // slightly different inputs, so only the error level is compared there.
                const double tol = s == Strategy::oht ? 0.05 : 2e-5;
                EXPECT_LT(rel_diff(got, cpu), tol) << strategy_name(s) << " nvfp4 " << f.nvfp4 << " " << int(f.e);
                if (s == Strategy::full || s == Strategy::oht) continue;
                // the quantized operands themselves are bit-identical
                for (Side side : {Side::left, Side::right}) {
                    const auto& t = side == Side::left ? a : b;
                    const int64_t rr = side == Side::left ? m : k, cc = side == Side::left ? k : n;
                    PreparedOperand pc = lp_prepare(t.data(), rr, cc, side, s, o);
                    PreparedOperandCuda pg = gpu.prepare(side == Side::left ? da.data() : db.data(), rr, cc, side, s, o);
                    CUDA_CHECK(cudaDeviceSynchronize());
                    // One struct template on both sides: the same fields hold the same bytes.
                    EXPECT_EQ(pg.codes.size(), pc.codes.size()) << strategy_name(s);
                    EXPECT_EQ(download(pg.codes, pc.codes.size()), pc.codes) << strategy_name(s);
                    EXPECT_EQ(download(pg.scales, pc.scales.size()), pc.scales) << strategy_name(s);
                    if (f.nvfp4) EXPECT_EQ(download(pg.tensor_scale, 1), pc.tensor_scale) << strategy_name(s);
                    EXPECT_EQ(pg.k_extracted, pc.k_extracted) << strategy_name(s);
                    EXPECT_EQ(pg.storage_bytes(), pc.storage_bytes());
                }
            }
}

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
