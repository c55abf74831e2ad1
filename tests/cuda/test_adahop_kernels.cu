// test_adahop_kernels.cu — the AdaHOP CUDA paths against their CPU references: detector statistics and
// labels, outlier extraction (indices, slices, clean operands bit for bit), and lp_matmul (quantized
// operands bit for bit, products within FP32 summation-order tolerance). Skips without a CUDA device.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <cmath>
#include <vector>

#include "adahop/cuda/lp_matmul_cuda.cuh"
#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/pair_analysis.h"
#include "formats/element_codec.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

// The first n elements of a device buffer.
template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d, size_t n) {
    std::vector<T> v(n);
    d.download(v.data(), n);
    return v;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x) {
    std::vector<__nv_bfloat16> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = __float2bfloat16_rn(x[i]);
    return y;
}
std::vector<float> bf16_values(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
    return y;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        e += double(a[i] - b[i]) * double(a[i] - b[i]);
        r += double(b[i]) * double(b[i]);
    }
    return std::sqrt(e / (r > 0 ? r : 1));
}

}  // namespace

TEST(AdahopCuda, DetectorMatchesCpu) {
    REQUIRE_GPU();
    OutlierStatsWorkspace ws;
    const int64_t shapes[][2] = {{512, 768}, {1000, 333}, {64, 4096}, {3, 5}};
    for (auto sh : shapes)
        for (Pattern p : {Pattern::row, Pattern::col, Pattern::none}) {
            const int64_t r = sh[0], c = sh[1];
            auto x = synthetic_operand(r, c, p, 17);
            for (float& v : x) v += 0.3f;  // non-zero mean exercises the one-pass variance
            const PatternStats cpu = detect_outlier_pattern(x.data(), r, c);
            auto dx = to_device(x);
            const PatternStats gpu = detect_outlier_pattern_cuda(dx.data(), r, c, {}, ws);
            EXPECT_EQ(gpu.pattern, cpu.pattern) << r << "x" << c << " " << pattern_name(p);
            EXPECT_NEAR(gpu.cv_row, cpu.cv_row, 1e-6 * (1 + cpu.cv_row));
            EXPECT_NEAR(gpu.cv_col, cpu.cv_col, 1e-6 * (1 + cpu.cv_col));
            EXPECT_NEAR(gpu.kurtosis_row, cpu.kurtosis_row, 1e-5 * (1 + cpu.kurtosis_row));
            // BF16 input: the CPU reference sees the same BF16 values
            const auto xb = bf16_values(x);
            const PatternStats cpu_b = detect_outlier_pattern(xb.data(), r, c);
            auto dxb = to_device(to_bf16(x));
            const PatternStats gpu_b = detect_outlier_pattern_cuda(dxb.data(), r, c, {}, ws);
            EXPECT_EQ(gpu_b.pattern, cpu_b.pattern);
            EXPECT_NEAR(gpu_b.cv_row, cpu_b.cv_row, 1e-6 * (1 + cpu_b.cv_row));
        }
    std::vector<float> bad(64 * 64, 1.0f);
    bad[100] = NAN;
    auto db = to_device(bad);
    EXPECT_THROW(detect_outlier_pattern_cuda(db.data(), 64, 64, {}, ws), Error);
}

TEST(AdahopCuda, OutlierExtractionMatchesCpu) {
    REQUIRE_GPU();
    OutlierExtractionWorkspace ws;
    for (bool by_rows : {true, false})
        for (OutlierMetric m : {OutlierMetric::l2, OutlierMetric::absmax})
            for (bool in_place : {true, false}) {
                const int64_t r = 300, c = 256, k = 7;
                auto x = synthetic_operand(r, c, by_rows ? Pattern::row : Pattern::col, 23, 0.03);
                const OutlierSplit cpu = by_rows ? split_outlier_rows(x.data(), r, c, k, m) : split_outlier_cols(x.data(), r, c, k, m);
                auto dx = to_device(x);
                DeviceBuffer<float> clean(x.size()), slice(cpu.slice.size());
                DeviceBuffer<int32_t> idx(static_cast<size_t>(k));
                float* clean_ptr = in_place ? dx.data() : clean.data();
                const int64_t got = split_outliers_cuda(dx.data(), r, c, by_rows, k, m, clean_ptr, slice.data(), idx.data(), ws);
                CUDA_CHECK(cudaDeviceSynchronize());
                ASSERT_EQ(got, k);
                EXPECT_EQ(download(idx, size_t(k)), cpu.indices);
                EXPECT_EQ(download(slice, cpu.slice.size()), cpu.slice);
                std::vector<float> cl(x.size());
                CUDA_CHECK(cudaMemcpy(cl.data(), clean_ptr, x.size() * 4, cudaMemcpyDeviceToHost));
                EXPECT_EQ(cl, cpu.clean);
            }
}

TEST(AdahopCuda, OutlierExtractionLargeDimensionUsesTheRadixSortPath) {
    REQUIRE_GPU();
    OutlierExtractionWorkspace ws;
    const int64_t r = 9000, c = 64, k = 64;  // 9000 rows > the one-block top-k limit
    auto x = synthetic_operand(r, c, Pattern::row, 29, 0.01);
    const OutlierSplit cpu = split_outlier_rows(x.data(), r, c, k, OutlierMetric::l2);
    auto dx = to_device(x);
    DeviceBuffer<float> slice(cpu.slice.size());
    DeviceBuffer<int32_t> idx(static_cast<size_t>(k));
    split_outliers_cuda(dx.data(), r, c, true, k, OutlierMetric::l2, dx.data(), slice.data(), idx.data(), ws);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(download(idx, size_t(k)), cpu.indices);
    EXPECT_EQ(download(slice, cpu.slice.size()), cpu.slice);
}

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
                    std::vector<uint8_t> codes = f.nvfp4 ? pack_e2m1(pc.quantized.nv.codes)
                                                         : (f.e == MxElement::e2m1 ? pack_e2m1(pc.quantized.mx.codes) : pc.quantized.mx.codes);
                    EXPECT_EQ(download(pg.codes, codes.size()), codes) << strategy_name(s);
                    const auto& sc = f.nvfp4 ? pc.quantized.nv.block_scales : pc.quantized.mx.scales;
                    EXPECT_EQ(download(pg.scales, sc.size()), sc) << strategy_name(s);
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
