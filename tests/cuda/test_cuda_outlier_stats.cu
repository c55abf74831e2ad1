// test_cuda_outlier_stats.cu — the GPU statistics and outlier-pattern detector (adahop/cuda/outlier_stats.cuh)
// against the CPU references: row/column sums, maxima and variances, detector labels and moments on
// adversarial shapes and non-finite inputs, the workspace across mixed calls, the detector from the fused
// quantization passes' partials (single and batched). The AdahopIndexLogic tests run the index logic of the
// statistics kernels on the host (geometry, reduce-scatter lane mapping) and need no GPU.
#include "adahop_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <vector>

using namespace lowbit;
using namespace lowbit::testing_util;

TEST(AdahopIndexLogic, StatsKernelArithmeticMeetsTheGpuTolerances) {
    // the data of the GPU detector tests, through the kernel's arithmetic on the host: the tolerances those
    // tests use are reachable with FP32 lane partials (B = 8 rows per batch for BF16, 4 for FP32)
    auto cases = basic_detector_cases();
    for (const auto& d : adversarial_detector_cases())
        if (d.rows * d.cols <= 600000) cases.push_back(d);  // the largest two take long on a small host
    cases.push_back({70, 90, Pattern::col, 4});     // StatisticsWorkspaceSurvivesMixedCalls
    cases.push_back({257, 300, Pattern::col, 9});   // DetectorRejectsNanAndInfLikeTheCpu, afterwards
    for (const DetectorCase& d : cases)
            for (bool bf16 : {true, false}) {
                const int64_t r = d.rows, c = d.cols;
                const Pattern p = d.pattern;
                auto x = case_matrix(d);
                if (bf16) x = bf16_values(x);
                const PatternStats cpu = detect_outlier_pattern(x.data(), r, c);
                const PatternStats emu = emulate_detector(x, r, c, bf16 ? 8 : 4);
                if (r < 2 || c < 2) {
                    EXPECT_EQ(emu.pattern, Pattern::none);
                    continue;
                }
                const std::string w = shape_name(r, c) + " " + pattern_name(p) + (bf16 ? " bf16" : " fp32");
                EXPECT_EQ(emu.pattern, cpu.pattern) << w;
                EXPECT_NEAR(emu.cv_row, cpu.cv_row, 1e-6 * (1 + cpu.cv_row)) << w;
                EXPECT_NEAR(emu.cv_col, cpu.cv_col, 1e-6 * (1 + cpu.cv_col)) << w;
                EXPECT_NEAR(emu.kurtosis_row, cpu.kurtosis_row, 1e-5 * (1 + cpu.kurtosis_row)) << w;
                EXPECT_NEAR(emu.kurtosis_col, cpu.kurtosis_col, 1e-5 * (1 + cpu.kurtosis_col)) << w;
                EXPECT_NEAR(emu.mean_row_variance, cpu.mean_row_variance, 1e-6 * cpu.mean_row_variance + 1e-300) << w;
                EXPECT_NEAR(emu.mean_col_variance, cpu.mean_col_variance, 1e-6 * cpu.mean_col_variance + 1e-300) << w;
            }
}

TEST(AdahopIndexLogic, StatsGeometryCoversEveryRowOnce) {
    using namespace outlier_stats_detail;
    const int64_t shapes[][2] = {{1, 1},     {1, 300},   {300, 1},   {63, 257},   {64, 256},    {65, 4097},
                                 {4096, 2048}, {8192, 4096}, {4096, 8192}, {100000, 3}, {5, 100000}, {9000, 64}};
    for (auto sh : shapes)
        for (int64_t target : {1, 132, 264, 528}) {
            const int64_t R = sh[0], C = sh[1];
            const StatsGeometry g = stats_geometry(R, C, target);
            const std::string what = shape_name(R, C) + " target " + std::to_string(target);
            EXPECT_EQ(g.slabs, (C + kSlabCols - 1) / kSlabCols) << what;
            ASSERT_GE(g.segs, 1) << what;
            EXPECT_EQ(g.seg_rows % kSegmentRowAlign, 0) << what;
            EXPECT_GE(g.segs * g.seg_rows, R) << what;
            EXPECT_LT((g.segs - 1) * g.seg_rows, R) << what;  // no empty segment
            for (int B : {8, 4}) {  // the warps' row loop, for BF16 (8 rows per batch) and FP32 (4)
                std::vector<int> visits(static_cast<size_t>(R), 0);
                for (int64_t seg = 0; seg < g.segs; ++seg) {
                    const int64_t r_begin = seg * g.seg_rows, r_end = std::min(R, r_begin + g.seg_rows);
                    for (int warp = 0; warp < kWarps; ++warp)
                        for (int64_t rb = r_begin + warp; rb < r_end; rb += int64_t(kWarps) * B)
                            for (int i = 0; i < B; ++i) {
                                const int64_t r = rb + int64_t(i) * kWarps;
                                if (r < r_end) ++visits[size_t(r)];
                            }
                }
                EXPECT_TRUE(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; })) << what << " B " << B;
            }
        }
    // the lane → column map: lane l of slab s owns columns 256s + 8l … +7, every column exactly once
    std::vector<int> cols(2 * kSlabCols, 0);
    for (int slab = 0; slab < 2; ++slab)
        for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < kLaneCols; ++j) ++cols[size_t(slab * kSlabCols + lane * kLaneCols + j)];
    EXPECT_TRUE(std::all_of(cols.begin(), cols.end(), [](int v) { return v == 1; }));
    // slab positions: position j·32 + lane (where lane l stores its column j in the CTA's shared combine)
    // holds column 8·lane + j, and the positions cover every column of the slab once
    std::vector<int> seen(kSlabCols, 0);
    for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kLaneCols; ++j) {
            EXPECT_EQ(slab_column(j * 32 + lane), lane * kLaneCols + j);
            ++seen[size_t(slab_column(j * 32 + lane))];
        }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    // one wave where the work allows it: 4096×2048 on 264 CTA slots → 8 slabs × 32 segments of 128 rows
    const StatsGeometry g = stats_geometry(4096, 2048, 264);
    EXPECT_EQ(g.slabs, 8);
    EXPECT_LE(g.segs * g.slabs, 264);
    EXPECT_EQ(g.seg_rows, 128);
}

namespace {

template <typename F, int V, int kLog2V>
void check_reduce_scatter(uint64_t seed) {
    using namespace outlier_stats_detail;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<std::vector<F>> v(32, std::vector<F>(V));
    for (auto& lane : v)
        for (F& x : lane) x = F(u(rng) * std::ldexp(1.0, int(rng() % 40) - 20));  // mixed magnitudes: order matters
    // the plain xor all-reduce of each value (what the host emulation of the kernel computes)
    std::vector<F> plain(V);
    for (int val = 0; val < V; ++val) {
        std::vector<F> a(32);
        for (int l = 0; l < 32; ++l) a[size_t(l)] = v[size_t(l)][size_t(val)];
        for (int o = 16; o > 0; o >>= 1) {
            std::vector<F> b(32);
            for (int l = 0; l < 32; ++l) b[size_t(l)] = a[size_t(l)] + a[size_t(l ^ o)];
            a = b;
        }
        for (int l = 1; l < 32; ++l) ASSERT_EQ(a[size_t(l)], a[0]);  // every lane holds the same bits
        plain[size_t(val)] = a[0];
    }
    emulate_reduce_scatter<V, F>(v);
    std::vector<int> writers(V, 0);
    for (int l = 0; l < 32; ++l) {
        const int val = scatter_value_of_lane(l, kLog2V);
        ASSERT_GE(val, 0);
        ASSERT_LT(val, V);
        EXPECT_EQ(v[size_t(l)][0], plain[size_t(val)]) << "lane " << l << " value " << val;
        if (scatter_lane_writes(l, kLog2V)) ++writers[size_t(val)];
    }
    for (int val = 0; val < V; ++val) EXPECT_EQ(writers[size_t(val)], 1) << "value " << val;
}

}  // namespace

TEST(AdahopIndexLogic, ReduceScatterEqualsXorAllReduce) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        check_reduce_scatter<float, 16, 4>(seed);  // BF16 input: 8 rows × (Σx, Σx²), as the kernel runs it
        check_reduce_scatter<float, 8, 3>(seed);   // FP32 input: 4 rows × (Σx, Σx²)
    }
    EXPECT_EQ(outlier_stats_detail::batch_rows<__nv_bfloat16>(), 8);
    EXPECT_EQ(outlier_stats_detail::batch_rows<float>(), 4);
}

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
            auto dxb = to_device(to_device_bf16(x));
            const PatternStats gpu_b = detect_outlier_pattern_cuda(dxb.data(), r, c, {}, ws);
            EXPECT_EQ(gpu_b.pattern, cpu_b.pattern);
            EXPECT_NEAR(gpu_b.cv_row, cpu_b.cv_row, 1e-6 * (1 + cpu_b.cv_row));
        }
    std::vector<float> bad(64 * 64, 1.0f);
    bad[100] = NAN;
    auto db = to_device(bad);
    EXPECT_THROW(detect_outlier_pattern_cuda(db.data(), 64, 64, {}, ws), Error);
}

namespace {

template <typename T>
void expect_detector_matches(const std::vector<float>& x, int64_t r, int64_t c, size_t offset, OutlierStatsWorkspace& ws,
                             const std::string& what) {
    const auto xv = held_values<T>(x);
    const PatternStats cpu = detect_outlier_pattern(xv.data(), r, c);
    auto d = upload_at(as_type<T>(x), offset);
    const PatternStats gpu = detect_outlier_pattern_cuda(d.ptr, r, c, {}, ws);
    const std::string w = what + " " + shape_name(r, c) + (is_bf16<T> ? " bf16" : " fp32") + " offset " + std::to_string(offset);
    EXPECT_EQ(gpu.pattern, cpu.pattern) << w;
    EXPECT_EQ(gpu.rows, cpu.rows) << w;
    EXPECT_EQ(gpu.cols, cpu.cols) << w;
    if (r < 2 || c < 2) {  // degenerate: both return the zero statistics
        EXPECT_EQ(gpu.cv_row, 0.0) << w;
        EXPECT_EQ(gpu.cv_col, 0.0) << w;
        EXPECT_EQ(gpu.kurtosis_row, 0.0) << w;
        EXPECT_EQ(gpu.mean_row_variance, 0.0) << w;
        return;
    }
    EXPECT_NEAR(gpu.cv_row, cpu.cv_row, 1e-6 * (1 + cpu.cv_row)) << w;
    EXPECT_NEAR(gpu.cv_col, cpu.cv_col, 1e-6 * (1 + cpu.cv_col)) << w;
    EXPECT_NEAR(gpu.kurtosis_row, cpu.kurtosis_row, 1e-5 * (1 + cpu.kurtosis_row)) << w;
    EXPECT_NEAR(gpu.kurtosis_col, cpu.kurtosis_col, 1e-5 * (1 + cpu.kurtosis_col)) << w;
    EXPECT_NEAR(gpu.mean_row_variance, cpu.mean_row_variance, 1e-6 * cpu.mean_row_variance + 1e-300) << w;
    EXPECT_NEAR(gpu.mean_col_variance, cpu.mean_col_variance, 1e-6 * cpu.mean_col_variance + 1e-300) << w;
}

}  // namespace

TEST(AdahopCuda, DetectorAdversarialShapes) {
    REQUIRE_GPU();
    OutlierStatsWorkspace ws;
    for (const DetectorCase& d : adversarial_detector_cases()) {
        const auto x = case_matrix(d);
        expect_detector_matches<float>(x, d.rows, d.cols, 0, ws, pattern_name(d.pattern));
        expect_detector_matches<__nv_bfloat16>(x, d.rows, d.cols, 0, ws, pattern_name(d.pattern));
        if (d.pattern == Pattern::row) {  // misaligned start: the scalar path even where cols % 8 == 0
            expect_detector_matches<__nv_bfloat16>(x, d.rows, d.cols, 1, ws, "misaligned");
            expect_detector_matches<float>(x, d.rows, d.cols, 1, ws, "misaligned");
        }
    }
    // all zeros: every variance 0 → none, all statistics 0 on both
    std::vector<float> zeros(size_t(300 * 520), 0.0f);
    expect_detector_matches<float>(zeros, 300, 520, 0, ws, "zeros");
}

TEST(AdahopCuda, DetectorRejectsNanAndInfLikeTheCpu) {
    REQUIRE_GPU();
    OutlierStatsWorkspace ws;
    const int64_t shapes[][2] = {{1, 1}, {1, 9}, {9, 1}, {64, 64}, {300, 700}};
    for (auto sh : shapes)
        for (float bad : {NAN, INFINITY, -INFINITY})
            for (int where : {0, 1, 2}) {  // first, middle, last element
                const int64_t r = sh[0], c = sh[1], n = r * c;
                std::vector<float> x = test_matrix(r, c, Pattern::none, 5);
                x[size_t(where == 0 ? 0 : where == 1 ? n / 2 : n - 1)] = bad;
                EXPECT_THROW(detect_outlier_pattern(x.data(), r, c), Error);
                auto d = to_device(x);
                EXPECT_THROW(detect_outlier_pattern_cuda(d.data(), r, c, {}, ws), Error) << shape_name(r, c) << " " << bad;
                auto db = to_device(to_device_bf16(x));
                EXPECT_THROW(detect_outlier_pattern_cuda(db.data(), r, c, {}, ws), Error) << shape_name(r, c) << " bf16 " << bad;
            }
    // the workspace is still good afterwards (counters reset by the kernel, not by the host)
    const auto x = test_matrix(257, 300, Pattern::col, 9);
    expect_detector_matches<float>(x, 257, 300, 0, ws, "after errors");
}

TEST(AdahopCuda, RowColStatisticsMatchFp64Sums) {
    REQUIRE_GPU();
    OutlierStatsWorkspace ws;
    const int64_t shapes[][2] = {{1, 1}, {3, 5}, {257, 259}, {1000, 333}, {64, 4096}, {4100, 300}};
    for (auto sh : shapes) {
        const int64_t r = sh[0], c = sh[1];
        auto x = held_values<__nv_bfloat16>(test_matrix(r, c, Pattern::col, 77));
        x[size_t((r * c) / 3)] = NAN;  // max |x| ignores NaN, as the CPU's std::max(acc, NaN) does
        std::vector<double> rs(size_t(2 * r), 0.0), cs(size_t(2 * c), 0.0), rabs(size_t(r), 0.0), cabs(size_t(c), 0.0);
        std::vector<double> rmax(size_t(r), 0.0), cmax(size_t(c), 0.0);
        for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < c; ++j) {
                const double v = x[size_t(i * c + j)];
                if (std::isnan(v)) continue;
                rs[size_t(2 * i)] += v, rs[size_t(2 * i + 1)] += v * v, rabs[size_t(i)] += std::fabs(v);
                cs[size_t(2 * j)] += v, cs[size_t(2 * j + 1)] += v * v, cabs[size_t(j)] += std::fabs(v);
                rmax[size_t(i)] = std::max(rmax[size_t(i)], std::fabs(v));
                cmax[size_t(j)] = std::max(cmax[size_t(j)], std::fabs(v));
            }
        for (bool bf16 : {true, false}) {
            if (bf16) {
                auto d = to_device(to_device_bf16(x));
                row_col_sums_cuda(d.data(), r, c, ws);
                CUDA_CHECK(cudaDeviceSynchronize());  // before d is freed
            } else {
                auto d = to_device(x);
                row_col_sums_cuda(d.data(), r, c, ws);
                CUDA_CHECK(cudaDeviceSynchronize());
            }
            const auto grs = download(ws.row_sums, size_t(2 * r)), gcs = download(ws.col_sums, size_t(2 * c));
            const auto grm = download(ws.row_max, size_t(r)), gcm = download(ws.col_max, size_t(c));
            const int64_t bad_r = (r * c) / 3 / c, bad_c = (r * c) / 3 % c;
            for (int64_t i = 0; i < r; ++i) {
                if (i == bad_r) {
                    EXPECT_TRUE(std::isnan(grs[size_t(2 * i)]));
                } else {
                    EXPECT_NEAR(grs[size_t(2 * i)], rs[size_t(2 * i)], 1e-6 * rabs[size_t(i)] + 1e-30) << "row " << i;
                    EXPECT_NEAR(grs[size_t(2 * i + 1)], rs[size_t(2 * i + 1)], 1e-6 * rs[size_t(2 * i + 1)] + 1e-30) << "row " << i;
                }
                EXPECT_EQ(grm[size_t(i)], bits_of(float(rmax[size_t(i)]))) << "row max " << i;
            }
            for (int64_t j = 0; j < c; ++j) {
                if (j == bad_c) {
                    EXPECT_TRUE(std::isnan(gcs[size_t(2 * j + 1)]));
                } else {
                    EXPECT_NEAR(gcs[size_t(2 * j)], cs[size_t(2 * j)], 1e-6 * cabs[size_t(j)] + 1e-30) << "col " << j;
                    EXPECT_NEAR(gcs[size_t(2 * j + 1)], cs[size_t(2 * j + 1)], 1e-6 * cs[size_t(2 * j + 1)] + 1e-30) << "col " << j;
                }
                EXPECT_EQ(gcm[size_t(j)], bits_of(float(cmax[size_t(j)]))) << "col max " << j;
            }
        }
    }
}

TEST(AdahopCuda, StatisticsWorkspaceSurvivesMixedCalls) {
    REQUIRE_GPU();
    // one workspace through kernels of different geometries and axes: partials and counters are reused
    OutlierStatsWorkspace ws;
    const auto big = test_matrix(2048, 1536, Pattern::row, 3), small = test_matrix(70, 90, Pattern::col, 4);
    auto dbig = to_device(big), dsmall = to_device(small);
    for (int round = 0; round < 3; ++round) {
        OutlierStatsRequest rows_only;
        rows_only.cols = false;
        rows_only.max = false;
        outlier_stats_cuda(dsmall.data(), 70, 90, rows_only, ws);
        const PatternStats a = detect_outlier_pattern_cuda(dbig.data(), 2048, 1536, {}, ws);
        OutlierStatsRequest cols_max;
        cols_max.rows = false;
        cols_max.sums = false;
        outlier_stats_cuda(dbig.data(), 2048, 1536, cols_max, ws);
        const PatternStats b = detect_outlier_pattern_cuda(dsmall.data(), 70, 90, {}, ws);
        const PatternStats ca = detect_outlier_pattern(big.data(), 2048, 1536), cb = detect_outlier_pattern(small.data(), 70, 90);
        EXPECT_EQ(a.pattern, ca.pattern);
        EXPECT_NEAR(a.cv_row, ca.cv_row, 1e-6 * (1 + ca.cv_row));
        EXPECT_EQ(b.pattern, cb.pattern);
        EXPECT_NEAR(b.cv_col, cb.cv_col, 1e-6 * (1 + cb.cv_col));
    }
}

// The detector from the partials of a quantization pass in each orientation (one both-orientations pass,
// or one pass per orientation: the same bits) against the CPU detector on the same BF16 values; its row and
// column sums against FP64 sums; quantizing with the partials changes no code.
TEST(AdahopCuda, DetectorFromQuantizationBlockSumsMatchesCpu) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        OutlierStatsWorkspace ws;
        const int64_t shapes[][2] = {{512, 768}, {64, 4096}, {4096, 64}, {32, 32}, {1024, 2048}};
        for (auto sh : shapes)
            for (Pattern pat : {Pattern::row, Pattern::col, Pattern::none}) {
                const int64_t r = sh[0], c = sh[1];
                const std::string w = shape_name(r, c) + " " + pattern_name(pat);
                auto x = synthetic_operand(r, c, pat, 19);
                for (float& v : x) v += 0.3f;  // non-zero mean exercises the one-pass variance
                const auto xv = bf16_values(x);
                const PatternStats cpu = detect_outlier_pattern(xv.data(), r, c);
                auto dx = to_device(to_device_bf16(x));
                QuantizedDevice rows(r, c, 1, false, true), cols(r, c, 0, false, true), plain_rows(r, c, 1, false), plain_cols(r, c, 0, false);
                hadamard_mxfp4_cuda(dx.data(), r, c, {}, plain_rows.out(), plain_cols.out());
                std::vector<double> first_rows, first_cols;
                for (bool together : {true, false}) {
                    if (together) {
                        hadamard_mxfp4_cuda(dx.data(), r, c, {}, rows.out(), cols.out());
                    } else {
                        hadamard_mxfp4_cuda(dx.data(), r, c, {}, rows.out(), Mxfp4DeviceOutput{});
                        hadamard_mxfp4_cuda(dx.data(), r, c, {}, Mxfp4DeviceOutput{}, cols.out());
                    }
                    const PatternStats gpu = detect_outlier_pattern_from_blocks_cuda(rows.out(), cols.out(), r, c, {}, ws);
                    const std::string ww = w + (together ? " together" : " separate");
                    EXPECT_EQ(gpu.pattern, cpu.pattern) << ww;
                    EXPECT_NEAR(gpu.cv_row, cpu.cv_row, 1e-6 * (1 + cpu.cv_row)) << ww;
                    EXPECT_NEAR(gpu.cv_col, cpu.cv_col, 1e-6 * (1 + cpu.cv_col)) << ww;
                    EXPECT_NEAR(gpu.kurtosis_row, cpu.kurtosis_row, 1e-5 * (1 + cpu.kurtosis_row)) << ww;
                    EXPECT_NEAR(gpu.kurtosis_col, cpu.kurtosis_col, 1e-5 * (1 + cpu.kurtosis_col)) << ww;
                    EXPECT_NEAR(gpu.mean_row_variance, cpu.mean_row_variance, 1e-6 * cpu.mean_row_variance) << ww;
                    EXPECT_NEAR(gpu.mean_col_variance, cpu.mean_col_variance, 1e-6 * cpu.mean_col_variance) << ww;
                    const auto grs = download(ws.row_sums, size_t(2 * r)), gcs = download(ws.col_sums, size_t(2 * c));
                    if (together) {
                        first_rows = grs, first_cols = gcs;
                        // vector v of a row (step 1, stride c) or a column (step c, stride 1): Σx and Σx² in FP64
                        auto expect_sums = [&](const std::vector<double>& got, int64_t count, int64_t len, int64_t step, int64_t stride,
                                               const char* what) {
                            for (int64_t v = 0; v < count; ++v) {
                                double s = 0, q = 0, a = 0;
                                for (int64_t t = 0; t < len; ++t) {
                                    const double x_ = xv[size_t(v * stride + t * step)];
                                    s += x_, q += x_ * x_, a += std::fabs(x_);
                                }
                                ASSERT_NEAR(got[size_t(2 * v)], s, 1e-6 * a) << ww << " " << what << " " << v;
                                ASSERT_NEAR(got[size_t(2 * v + 1)], q, 1e-6 * q) << ww << " " << what << " " << v;
                            }
                        };
                        expect_sums(grs, r, c, 1, c, "row");
                        expect_sums(gcs, c, r, c, 1, "col");
                    } else {
                        EXPECT_EQ(grs, first_rows) << ww;
                        EXPECT_EQ(gcs, first_cols) << ww;
                    }
                    EXPECT_EQ(download_at(rows.codes.data(), rows.codes.size()), download_at(plain_rows.codes.data(), plain_rows.codes.size())) << ww;
                    EXPECT_EQ(download_at(cols.codes.data(), cols.codes.size()), download_at(plain_cols.codes.data(), plain_cols.codes.size())) << ww;
                }
            }
        // NaN → an input error, as the CPU detector; missing partials, a missing orientation, partials and Σx² in one pass
        std::vector<float> bad(64 * 64, 1.0f);
        bad[100] = NAN;
        auto db = to_device(to_device_bf16(bad));
        QuantizedDevice rows(64, 64, 1, false, true), cols(64, 64, 0, false, true), no_sum(64, 64, 0, true);
        hadamard_mxfp4_cuda(db.data(), 64, 64, {}, rows.out(), cols.out());
        expect_error(ErrorKind::input, [&] { detect_outlier_pattern_from_blocks_cuda(rows.out(), cols.out(), 64, 64, {}, ws); });
        expect_error(ErrorKind::usage, [&] { detector_stats_from_blocks_cuda(rows.out(), no_sum.out(), 64, 64, ws); });
        expect_error(ErrorKind::usage, [&] { detector_stats_from_blocks_cuda(rows.out(), Mxfp4DeviceOutput{}, 64, 64, ws); });
        expect_error(ErrorKind::input, [&] { detector_stats_from_blocks_cuda(rows.out(), cols.out(), 64, 40, ws); });
        Mxfp4DeviceOutput both_stats = rows.out();
        both_stats.block_sumsq = no_sum.sumsq.data();
        expect_error(ErrorKind::usage, [&] { hadamard_mxfp4_cuda(db.data(), 64, 64, {}, both_stats, Mxfp4DeviceOutput{}); });
        CUDA_CHECK(cudaDeviceSynchronize());
    });
}

// A batch of operands in one call (more than one launch's worth: 35 > 32) gives each operand the moments of
// the single-operand call bit for bit, and the CPU detector's label.
TEST(AdahopCuda, DetectorBatchEqualsSingleOperandCalls) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        OutlierStatsWorkspace single_ws, batch_ws;
        const int64_t shapes[][2] = {{64, 96}, {256, 64}, {96, 512}, {32, 32}, {320, 160}};
        const Pattern pats[] = {Pattern::row, Pattern::col, Pattern::none};
        constexpr int kN = 35;
        std::vector<DeviceBuffer<__nv_bfloat16>> inputs;
        std::vector<QuantizedDevice> along_rows, along_cols;
        std::vector<DetectorPartialsOf> ops;
        std::vector<PatternStats> cpu;
        for (int i = 0; i < kN; ++i) {
            const int64_t r = shapes[i % 5][0], c = shapes[i % 5][1];
            auto x = synthetic_operand(r, c, pats[i % 3], 300 + uint64_t(i));
            const auto xv = bf16_values(x);
            cpu.push_back(detect_outlier_pattern(xv.data(), r, c));
            inputs.push_back(to_device(to_device_bf16(x)));
            along_rows.emplace_back(r, c, 1, false, true);
            along_cols.emplace_back(r, c, 0, false, true);
        }
        for (int i = 0; i < kN; ++i) {
            const int64_t r = shapes[i % 5][0], c = shapes[i % 5][1];
            hadamard_mxfp4_cuda(inputs[size_t(i)].data(), r, c, {}, along_rows[size_t(i)].out(), along_cols[size_t(i)].out());
            ops.push_back({along_rows[size_t(i)].partials.data(), along_cols[size_t(i)].partials.data(), r, c});
        }
        const auto bits64 = [](double d) {
            uint64_t u;
            std::memcpy(&u, &d, 8);
            return u;
        };
        DeviceBuffer<double> moments(6 * kN);
        detector_moments_from_partials_cuda(ops.data(), kN, moments.data(), batch_ws);
        const auto got = download(moments, 6 * kN);
        for (int i = 0; i < kN; ++i) {
            const int64_t r = ops[size_t(i)].rows, c = ops[size_t(i)].cols;
            const PatternStats one = detect_outlier_pattern_from_blocks_cuda(along_rows[size_t(i)].out(), along_cols[size_t(i)].out(), r, c, {}, single_ws);
            const auto want = download(single_ws.moments, 6);
            for (int k = 0; k < 6; ++k) EXPECT_EQ(bits64(got[size_t(6 * i + k)]), bits64(want[size_t(k)])) << "operand " << i << " moment " << k;
            const PatternStats batch = pattern_from_moments({got[size_t(6 * i)], got[size_t(6 * i + 1)], got[size_t(6 * i + 2)]}, r,
                                                            {got[size_t(6 * i + 3)], got[size_t(6 * i + 4)], got[size_t(6 * i + 5)]}, c, {});
            EXPECT_EQ(batch.pattern, one.pattern) << "operand " << i;
            EXPECT_EQ(batch.pattern, cpu[size_t(i)].pattern) << "operand " << i;
        }
        // an operand without partials or with bad rows → errors naming it; an empty batch does nothing
        std::vector<DetectorPartialsOf> bad = {ops[0], ops[1]};
        bad[1].along_cols = nullptr;
        expect_error(ErrorKind::usage, [&] { detector_moments_from_partials_cuda(bad.data(), 2, moments.data(), batch_ws); });
        bad[1] = ops[1];
        bad[1].rows = 48;
        expect_error(ErrorKind::input, [&] { detector_moments_from_partials_cuda(bad.data(), 2, moments.data(), batch_ws); });
        expect_error(ErrorKind::usage, [&] { detector_moments_from_partials_cuda(ops.data(), 2, nullptr, batch_ws); });
        detector_moments_from_partials_cuda(nullptr, 0, moments.data(), batch_ws);
        CUDA_CHECK(cudaDeviceSynchronize());
        // a launch with enough tiles for several per CTA (12 × 320 tiles of 32 rows or columns) gives each operand
        // the bits of the single-operand call (one tile per CTA)
        {
            const int64_t r = 2048, c = 8192;
            auto dx = to_device(to_device_bf16(synthetic_operand(r, c, Pattern::col, 41)));
            QuantizedDevice big_rows(r, c, 1, false, true), big_cols(r, c, 0, false, true);
            hadamard_mxfp4_cuda(dx.data(), r, c, {}, big_rows.out(), big_cols.out());
            detect_outlier_pattern_from_blocks_cuda(big_rows.out(), big_cols.out(), r, c, {}, single_ws);
            const auto want = download(single_ws.moments, 6);
            const std::vector<DetectorPartialsOf> many(12, DetectorPartialsOf{big_rows.partials.data(), big_cols.partials.data(), r, c});
            DeviceBuffer<double> big_moments(6 * many.size());
            detector_moments_from_partials_cuda(many.data(), int(many.size()), big_moments.data(), batch_ws);
            const auto got_big = download(big_moments, 6 * many.size());
            for (size_t i = 0; i < many.size(); ++i)
                for (int k = 0; k < 6; ++k)
                    EXPECT_EQ(bits64(got_big[6 * i + size_t(k)]), bits64(want[size_t(k)])) << "large batch, operand " << i << " moment " << k;
        }
    });
}
