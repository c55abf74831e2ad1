// test_cuda_outlier_extraction.cu — outlier extraction on the GPU (adahop/cuda/outlier_extraction.cuh) against
// the CPU reference: indices, slices and clean operands bit for bit (ties rank the lower index first;
// Inf/NaN; the radix-select path of large dimensions), fused into the quantization pass (equal to
// split-then-quantize bit for bit), the scatter of a sliver back into a product. The AdahopIndexLogic tests
// run the score arithmetic and the radix select + ordered compaction on the host and need no GPU.
#include "adahop_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <vector>

using namespace lowbit;
using namespace lowbit::testing_util;

TEST(AdahopIndexLogic, OutlierScoresArithmeticKeepsTheCpuRanking) {
    using namespace outlier_extraction_detail;
    auto cases = adversarial_split_cases();
    for (const auto& d : large_split_cases()) cases.push_back(d);
    for (const auto& d : other_l2_split_cases()) cases.push_back(d);
    for (const SplitCase& d : cases)
        for (bool bf16 : {false, true}) {
            if (!(bf16 ? d.l2_bf16 : d.l2_fp32)) continue;
            auto x = case_matrix(d);
            if (bf16) x = bf16_values(x);
            std::vector<double> rs, cs;
            emulate_stats_kernel(x, d.rows, d.cols, bf16 ? 8 : 4, rs, cs);
            const std::vector<double>& sums = d.by_rows ? rs : cs;
            const int64_t n = d.by_rows ? d.rows : d.cols;
            std::vector<uint64_t> keys(static_cast<size_t>(n));
            std::vector<double> cpu(static_cast<size_t>(n), 0.0);  // the CPU reference's scores: Σ double(x)²
            for (int64_t i = 0; i < n; ++i) keys[size_t(i)] = score_key(sums[size_t(2 * i + 1)]);
            for (int64_t r = 0; r < d.rows; ++r)
                for (int64_t c = 0; c < d.cols; ++c) {
                    const double v = x[size_t(r * d.cols + c)];
                    cpu[size_t(d.by_rows ? r : c)] += v * v;
                }
            for (int64_t k : d.ks)
                EXPECT_EQ(radix_top_k_host(keys, k, 64), top_k_indices(cpu, k))
                    << shape_name(d.rows, d.cols) << (d.by_rows ? " rows" : " cols") << " seed " << d.seed << " k " << k
                    << (bf16 ? " bf16" : " fp32");
        }
}

TEST(AdahopIndexLogic, RadixTopKMatchesCpuTopK) {
    using namespace outlier_extraction_detail;
    std::mt19937_64 rng(7);
    auto check = [&](const std::vector<double>& scores, int64_t k, const std::string& what) {
        std::vector<uint64_t> keys(scores.size());
        for (size_t i = 0; i < scores.size(); ++i) keys[i] = score_key(scores[i]);
        const std::vector<int32_t> want = top_k_indices(scores, k);
        for (int64_t chunk : {int64_t(1), int64_t(7), int64_t(64), int64_t(kListCap)}) {
            EXPECT_EQ(radix_top_k_host(keys, k, chunk), want) << what << " n " << scores.size() << " k " << k << " chunk " << chunk;
        }
    };
    const int ns[] = {1, 2, 31, 32, 33, 1000, 4096, 9000, 20000};
    for (int n : ns) {
        std::vector<std::vector<double>> sets;
        std::vector<std::string> names;
        std::vector<double> s(static_cast<size_t>(n));
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (double& v : s) v = u(rng) * std::ldexp(1.0, int(rng() % 30));  // distinct, spread exponents
        sets.push_back(s), names.push_back("random");
        for (double& v : s) v = double(rng() % 4);  // heavy ties
        sets.push_back(s), names.push_back("ties");
        std::fill(s.begin(), s.end(), 5.0);  // all equal
        sets.push_back(s), names.push_back("equal");
        std::fill(s.begin(), s.end(), 0.0);
        sets.push_back(s), names.push_back("zero");
        for (int i = 0; i < n; ++i) s[size_t(i)] = 1.0 + double(rng() % 200) * std::numeric_limits<double>::epsilon();  // last byte
        sets.push_back(s), names.push_back("ulps");
        for (int i = 0; i < n; ++i) s[size_t(i)] = std::ldexp(1.0, int(rng() % 50));  // exponent bits only
        sets.push_back(s), names.push_back("pow2");
        for (int i = 0; i < n; ++i) s[size_t(i)] = rng() % 5 == 0 ? std::numeric_limits<double>::infinity() : u(rng);
        sets.push_back(s), names.push_back("inf");
        for (size_t t = 0; t < sets.size(); ++t)
            for (int64_t k : {int64_t(0), int64_t(1), int64_t(2), int64_t(63), int64_t(64), int64_t(n - 1), int64_t(n), int64_t(n + 3)})
                check(sets[t], k, names[t]);
    }
    // the warp's bin search: above(b) < krem ≤ above(b) + hist[b]
    uint32_t hist[256] = {};
    hist[3] = 5;
    hist[200] = 2;
    hist[255] = 1;
    uint32_t above = 0;
    EXPECT_EQ(find_bin_host(hist, 1, &above), 255);
    EXPECT_EQ(above, 0u);
    EXPECT_EQ(find_bin_host(hist, 2, &above), 200);
    EXPECT_EQ(above, 1u);
    EXPECT_EQ(find_bin_host(hist, 3, &above), 200);
    EXPECT_EQ(find_bin_host(hist, 4, &above), 3);
    EXPECT_EQ(above, 3u);
    EXPECT_EQ(find_bin_host(hist, 8, &above), 3);
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
    const int64_t r = 9000, c = 64, k = 64;  // 9000 rows: several stats segments, 9000 keys in the select
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

namespace {

template <typename T>
void expect_split_matches(const std::vector<float>& x, int64_t r, int64_t c, bool by_rows, int64_t k, OutlierMetric m,
                          bool in_place, size_t offset, OutlierExtractionWorkspace& ws, const std::string& what) {
    const auto xv = held_values<T>(x);
    const OutlierSplit cpu = by_rows ? split_outlier_rows(xv.data(), r, c, k, m) : split_outlier_cols(xv.data(), r, c, k, m);
    const int64_t kk = int64_t(cpu.indices.size());
    const std::string w = what + " " + shape_name(r, c) + (by_rows ? " rows" : " cols") + " k " + std::to_string(k) +
                          (m == OutlierMetric::l2 ? " l2" : " absmax") + (in_place ? " in place" : " copy") +
                          (is_bf16<T> ? " bf16" : " fp32") + " offset " + std::to_string(offset);
    auto dx = upload_at(as_type<T>(x), offset);
    auto dclean = upload_at(std::vector<T>(), offset, x.size());
    auto dslice = upload_at(std::vector<T>(), offset, cpu.slice.size());
    DeviceBuffer<int32_t> idx(static_cast<size_t>(std::max<int64_t>(kk, 1)));
    T* clean = in_place ? dx.ptr : dclean.ptr;
    const int64_t got = split_outliers_cuda(dx.ptr, r, c, by_rows, k, m, clean, dslice.ptr, idx.data(), ws);
    CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_EQ(got, kk) << w;
    EXPECT_EQ(download_at(idx.data(), size_t(kk)), cpu.indices) << w;
    EXPECT_EQ(float_bits(to_float(download_at(dslice.ptr, cpu.slice.size()))), float_bits(cpu.slice)) << w;
    EXPECT_EQ(float_bits(to_float(download_at(clean, x.size()))), float_bits(cpu.clean)) << w;
}

}  // namespace

TEST(AdahopCuda, OutlierExtractionAdversarial) {
    REQUIRE_GPU();
    OutlierExtractionWorkspace ws;
    for (const SplitCase& d : adversarial_split_cases()) {
        const auto x = case_matrix(d);
        const int64_t r = d.rows, c = d.cols;
        for (int64_t k : d.ks) {
            for (OutlierMetric m : {OutlierMetric::l2, OutlierMetric::absmax}) {
                expect_split_matches<float>(x, r, c, d.by_rows, k, m, true, 0, ws, "synthetic");
                expect_split_matches<__nv_bfloat16>(x, r, c, d.by_rows, k, m, false, 0, ws, "synthetic");
            }
            expect_split_matches<__nv_bfloat16>(x, r, c, d.by_rows, k, OutlierMetric::l2, true, 1, ws, "misaligned");
            expect_split_matches<float>(x, r, c, d.by_rows, k, OutlierMetric::absmax, false, 1, ws, "misaligned");
        }
    }
}

TEST(AdahopCuda, OutlierExtractionTiesRankTheLowerIndexFirst) {
    REQUIRE_GPU();
    OutlierExtractionWorkspace ws;
    const std::vector<int64_t> winners = {3, 40, 41, 150};
    for (bool by_rows : {true, false}) {
        const int64_t r = by_rows ? 200 : 24, c = by_rows ? 24 : 200;
        const auto x = tied_matrix(r, c, by_rows, winners, 11);
        for (int64_t k : {2, 4, 5, 9, 64, 199})
            for (OutlierMetric m : {OutlierMetric::l2, OutlierMetric::absmax}) {
                expect_split_matches<float>(x, r, c, by_rows, k, m, true, 0, ws, "ties");
                expect_split_matches<__nv_bfloat16>(x, r, c, by_rows, k, m, true, 0, ws, "ties");
            }
        // all zeros: everything ties, the first k indices win
        std::vector<float> zeros(size_t(r * c), 0.0f);
        expect_split_matches<float>(zeros, r, c, by_rows, 13, OutlierMetric::l2, true, 0, ws, "zeros");
        expect_split_matches<float>(zeros, r, c, by_rows, 13, OutlierMetric::absmax, false, 0, ws, "zeros");
    }
}

TEST(AdahopCuda, OutlierExtractionInfAndNan) {
    REQUIRE_GPU();
    OutlierExtractionWorkspace ws;
    for (bool by_rows : {true, false}) {
        const int64_t r = 120, c = 72;
        auto x = synthetic_operand(r, c, Pattern::none, 13);
        // Inf: scores Inf on the CPU and the GPU (L2 and absmax); two of them tie → lower index first
        auto xi = x;
        xi[size_t(7 * c + 3)] = INFINITY;
        xi[size_t(2 * c + 0)] = -INFINITY;
        xi[size_t(90 * c + 70)] = INFINITY;
        for (int64_t k : {1, 2, 3, 10})
            for (OutlierMetric m : {OutlierMetric::l2, OutlierMetric::absmax}) {
                expect_split_matches<float>(xi, r, c, by_rows, k, m, true, 0, ws, "inf");
                expect_split_matches<__nv_bfloat16>(xi, r, c, by_rows, k, m, false, 0, ws, "inf");
            }
        // NaN with absmax: ignored by max on both sides (the CPU leaves NaN undefined for L2)
        auto xn = x;
        xn[size_t(5 * c + 5)] = NAN;
        xn[size_t(60 * c + 1)] = NAN;
        for (int64_t k : {1, 4, 30}) {
            expect_split_matches<float>(xn, r, c, by_rows, k, OutlierMetric::absmax, true, 0, ws, "nan");
            expect_split_matches<__nv_bfloat16>(xn, r, c, by_rows, k, OutlierMetric::absmax, true, 0, ws, "nan");
        }
    }
}

TEST(AdahopCuda, OutlierExtractionLargeDimensions) {
    REQUIRE_GPU();
    OutlierExtractionWorkspace ws;
    for (const SplitCase& d : large_split_cases()) {
        const auto x = case_matrix(d);
        for (int64_t k : d.ks) {
            if (d.l2_fp32) expect_split_matches<float>(x, d.rows, d.cols, d.by_rows, k, OutlierMetric::l2, true, 0, ws, "large");
            else expect_split_matches<__nv_bfloat16>(x, d.rows, d.cols, d.by_rows, k, OutlierMetric::absmax, false, 0, ws, "large");
        }
    }
}

TEST(AdahopCuda, OutlierExtractionFusedIntoQuantizationEqualsSplitThenQuantize) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        OutlierExtractionWorkspace ws;
        uint64_t seed = 900;
        const int64_t shapes[][2] = {{64, 96}, {96, 64}, {256, 320}, {32, 2048}, {2048, 32}};
        for (auto sh : shapes)
            for (int axis : {1, 0}) {
                const int64_t r = sh[0], c = sh[1], n = axis == 1 ? r : c;
                const auto x = synthetic_operand(r, c, axis == 1 ? Pattern::row : Pattern::col, ++seed, 0.05);
                for (int64_t k : {int64_t(0), int64_t(1), int64_t(7), n - 1, n, n + 3}) {
                    HadamardMxfp4Options o;
                    expect_fused_extraction_matches(x, r, c, axis, k, o, ws, "synthetic");
                }
                for (ScaleRule rule : {ScaleRule::floor, ScaleRule::rceil, ScaleRule::midmax})
                    for (Rounding rnd : {Rounding::nearest_even, Rounding::stochastic}) {
                        HadamardMxfp4Options o;
                        o.rule = rule;
                        o.rounding = rnd;
                        o.seed = seed;
                        expect_fused_extraction_matches(x, r, c, axis, 5, o, ws, "rules");
                    }
            }
        // blocks along rows only, rows not a multiple of 32 (the row kernel's last warp partly empty)
        for (int64_t c : {128, 96}) {
            const auto x = synthetic_operand(37, c, Pattern::row, ++seed, 0.05);
            for (int64_t k : {int64_t(1), int64_t(5), int64_t(36)})
                expect_fused_extraction_matches(x, 37, c, 1, k, HadamardMxfp4Options{}, ws, "rows only");
        }
        // exact ties (small integers: every sum is exact in any order) rank the lower index first; all zeros
        const std::vector<int64_t> winners = {3, 40, 41, 150};
        for (int axis : {1, 0}) {
            const bool by_rows = axis == 1;
            const int64_t r = by_rows ? 200 : 64, c = by_rows ? 64 : 200;
            const auto x = tied_matrix(r, c, by_rows, winners, 17);
            for (int64_t k : {2, 4, 5, 9, 64, 199}) expect_fused_extraction_matches(x, r, c, axis, k, HadamardMxfp4Options{}, ws, "ties");
            expect_fused_extraction_matches(std::vector<float>(size_t(r * c), 0.0f), r, c, axis, 13, HadamardMxfp4Options{}, ws, "zeros");
        }
    });
}

TEST(AdahopCuda, FusedExtractionRejectsMissingBuffersAndBadAxes) {
    REQUIRE_GPU();
    DeviceBuffer<__nv_bfloat16> dx(64 * 64), slice(64 * 4);
    DeviceBuffer<int32_t> idx(4);
    OutlierExtractionWorkspace ws;
    QuantizedDevice q(64, 64, 1, true), no_sums(64, 64, 1, false);
    expect_error(ErrorKind::usage, [&] { extract_outliers_quantized_cuda(dx.data(), 64, 64, 1, 4, ScaleRule::rceil, no_sums.out(), slice.data(), idx.data(), ws); });
    expect_error(ErrorKind::usage, [&] {
        extract_outliers_quantized_cuda(dx.data(), 64, 64, 1, 4, ScaleRule::rceil, no_sums.out(), slice.data(), idx.data(), ws, 0, false);
    });
    expect_error(ErrorKind::usage, [&] { extract_outliers_quantized_cuda(dx.data(), 64, 64, 2, 4, ScaleRule::rceil, q.out(), slice.data(), idx.data(), ws); });
    expect_error(ErrorKind::input, [&] { extract_outliers_quantized_cuda(dx.data(), 64, 40, 1, 4, ScaleRule::rceil, q.out(), slice.data(), idx.data(), ws); });
}

TEST(AdahopCuda, ScatterMatchesHost) {
    REQUIRE_GPU();
    const int64_t shapes[][2] = {{37, 53}, {300, 17000}, {40000, 130}};  // small; past the grid caps in both layouts
    for (auto sh : shapes) {
        for (bool by_rows : {true, false}) {
            const int64_t rows_c = sh[0], cols_c = sh[1];
            const int64_t n = by_rows ? rows_c : cols_c, other = by_rows ? cols_c : rows_c;
            std::vector<int32_t> idx = {0, 5, 6, int32_t(n - 1)};
            for (int32_t extra = 7; extra < std::min<int64_t>(n - 1, 77); extra += 2) idx.push_back(extra);  // k > 32 positions
            const int64_t k = int64_t(idx.size());
            std::vector<float> src(size_t(k * other)), c(size_t(rows_c * cols_c), -1.0f);
            for (size_t i = 0; i < src.size(); ++i) src[i] = float(i) + 0.5f;
            auto want = c;
            for (int64_t i = 0; i < k; ++i)
                for (int64_t j = 0; j < other; ++j) {
                    if (by_rows) want[size_t(idx[size_t(i)] * cols_c + j)] = src[size_t(i * cols_c + j)];
                    else want[size_t(j * cols_c + idx[size_t(i)])] = src[size_t(j * k + i)];
                }
            auto ds = to_device(src), dc = to_device(c);
            auto di = to_device(idx);
            scatter_outliers_cuda(ds.data(), k, di.data(), by_rows, dc.data(), rows_c, cols_c);
            CUDA_CHECK(cudaDeviceSynchronize());
            EXPECT_EQ(to_host(dc), want) << (by_rows ? "rows " : "cols ") << shape_name(rows_c, cols_c);
        }
    }
}
