// test_adahop_kernels.cu — the AdaHOP CUDA paths against their CPU references: detector statistics and
// labels, outlier extraction (indices, slices, clean operands bit for bit; fused into the quantization pass:
// equal to split-then-quantize bit for bit), and lp_matmul (quantized
// operands bit for bit, products within FP32 summation-order tolerance). GPU tests skip without a CUDA
// device; the AdahopIndexLogic tests run the index logic of the statistics and top-k kernels on the host
// (geometry, reduce-scatter lane mapping, radix select + ordered compaction) and need no GPU.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "adahop/cuda/lp_matmul_cuda.cuh"
#include "adahop/cuda/outlier_extraction.cuh"
#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/pair_analysis.h"
#include "formats/element_codec.h"
#include "hadamard/cuda/hadamard_mxfp4.cuh"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

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

// Bit patterns, so that NaN compares equal to the same NaN.
std::vector<uint32_t> float_bits(const std::vector<float>& x) {
    std::vector<uint32_t> b(x.size());
    if (!x.empty()) std::memcpy(b.data(), x.data(), x.size() * 4);
    return b;
}

uint32_t bits_of(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

template <typename T>
constexpr bool is_bf16 = std::is_same_v<T, __nv_bfloat16>;

// The values a T matrix holds, as floats (BF16-rounded for BF16), and the T data itself.
template <typename T>
std::vector<float> held_values(const std::vector<float>& x) {
    if constexpr (is_bf16<T>) return bf16_values(x);
    else return x;
}
template <typename T>
std::vector<T> as_type(const std::vector<float>& x) {
    if constexpr (is_bf16<T>) return to_bf16(x);
    else return x;
}
template <typename T>
std::vector<float> to_float(const std::vector<T>& x) {
    if constexpr (is_bf16<T>) {
        std::vector<float> y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
        return y;
    } else {
        return x;
    }
}

// A device copy of v that starts `offset` elements into its buffer (offset 1: not 16-byte aligned, which
// sends the kernels down their scalar paths).
template <typename T>
struct OffsetDevice {
    DeviceBuffer<T> buf;
    T* ptr = nullptr;
};
template <typename T>
OffsetDevice<T> upload_at(const std::vector<T>& v, size_t offset, size_t capacity = 0) {
    OffsetDevice<T> d;
    d.buf.resize(std::max<size_t>(std::max(capacity, v.size()) + offset, 1));
    d.ptr = d.buf.data() + offset;
    if (!v.empty()) CUDA_CHECK(cudaMemcpy(d.ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
std::vector<T> download_at(const T* p, size_t n) {
    std::vector<T> v(n);
    if (n) CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

std::string shape_name(int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); }

// Gaussian with a non-zero mean (exercises the one-pass variance), optionally with outlier rows/columns.
std::vector<float> test_matrix(int64_t r, int64_t c, Pattern p, uint64_t seed) {
    auto x = synthetic_operand(r, c, p, seed);
    for (float& v : x) v += 0.3f;
    return x;
}

// Small integers: every sum and sum of squares is exact in any order, on the CPU and the GPU alike.
// Rows (or columns) are permutations of one base vector, so their scores tie exactly; `winners` of them
// (spread over the matrix) are doubled and rank first. The top k with k > winners cuts through the ties.
std::vector<float> tied_matrix(int64_t r, int64_t c, bool by_rows, const std::vector<int64_t>& winners, uint64_t seed) {
    const int64_t n = by_rows ? r : c, len = by_rows ? c : r;
    std::mt19937_64 rng(seed);
    std::vector<float> base(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) base[size_t(i)] = float(int(rng() % 7) - 3);
    std::vector<float> x(size_t(r * c));
    for (int64_t i = 0; i < n; ++i) {
        std::vector<float> v = base;
        std::shuffle(v.begin(), v.end(), rng);
        const bool win = std::find(winners.begin(), winners.end(), i) != winners.end();
        for (int64_t j = 0; j < len; ++j) {
            const float val = win ? 2.0f * v[size_t(j)] : v[size_t(j)];
            if (by_rows) x[size_t(i * c + j)] = val;
            else x[size_t(j * c + i)] = val;
        }
    }
    return x;
}

// ---- host mirrors of the warp code (the device versions are in outlier_stats.cu)

// warp_reduce_scatter<V> over 32 simulated lanes, step by step as the warp runs it.
template <int V, typename F>
void emulate_reduce_scatter(std::vector<std::vector<F>>& v) {
    int count = V;
    for (int o = 16; o > 0; o >>= 1) {
        std::vector<std::vector<F>> next = v;
        if (count > 1) {
            const int half = count / 2;
            for (int l = 0; l < 32; ++l) {
                const int partner = l ^ o;
                const bool upper = (l & o) != 0, partner_upper = (partner & o) != 0;
                for (int i = 0; i < half; ++i) {
                    const F received = partner_upper ? v[size_t(partner)][size_t(i)] : v[size_t(partner)][size_t(i + half)];
                    const F keep = upper ? v[size_t(l)][size_t(i + half)] : v[size_t(l)][size_t(i)];
                    next[size_t(l)][size_t(i)] = keep + received;
                }
            }
            count = half;
        } else {
            for (int l = 0; l < 32; ++l) next[size_t(l)][0] = v[size_t(l)][0] + v[size_t(l ^ o)][0];
        }
        v = next;
    }
}

// The detector cases of the GPU tests (DetectorMatchesCpu: seed 17; DetectorAdversarialShapes: one seed per
// case), shared with the host emulation test so that it checks exactly the data the GPU sees.
struct DetectorCase {
    int64_t rows, cols;
    Pattern pattern;
    uint64_t seed;
};
std::vector<DetectorCase> basic_detector_cases() {
    std::vector<DetectorCase> v;
    const int64_t shapes[][2] = {{512, 768}, {1000, 333}, {64, 4096}, {3, 5}};
    for (auto sh : shapes)
        for (Pattern p : {Pattern::row, Pattern::col, Pattern::none}) v.push_back({sh[0], sh[1], p, 17});
    return v;
}
std::vector<DetectorCase> adversarial_detector_cases() {
    // 1-row/1-column, not multiples of the 8-row batch or 256-column slab, cols % 8 != 0 (scalar loads),
    // tall and wide, several slabs × several segments (last-CTA-done over many CTAs). Not 2×2: two variances
    // of two values each leave the CV at the mercy of FP32 rounding in the sums.
    const int64_t shapes[][2] = {{1, 1},    {1, 7},    {7, 1},    {2, 64},     {64, 2},      {1, 4096},  {4096, 1},
                                 {257, 259}, {65, 1000}, {3, 9000}, {9000, 3}, {2048, 1536}, {1500, 3000}, {300, 520}};
    std::vector<DetectorCase> v;
    uint64_t seed = 100;
    for (auto sh : shapes)
        for (Pattern p : {Pattern::row, Pattern::col, Pattern::none}) v.push_back({sh[0], sh[1], p, ++seed});
    return v;
}
// Gaussian with a non-zero mean (exercises the one-pass variance), optionally with outlier rows/columns.
std::vector<float> case_matrix(const DetectorCase& d) {
    auto x = synthetic_operand(d.rows, d.cols, d.pattern, d.seed);
    for (float& v : x) v += 0.3f;
    return x;
}

// The outlier-extraction cases of the GPU tests with random data, shared with the host check of the L2
// ranking (the GPU's FP32 lane partials must not reorder a near-tie of the CPU's FP64 scores at the k-th).
struct SplitCase {
    int64_t rows, cols;
    bool by_rows;
    Pattern pattern;
    uint64_t seed;
    double fraction;
    std::vector<int64_t> ks;
    bool l2_fp32, l2_bf16;  // which element types the GPU tests rank by L2
};
std::vector<float> case_matrix(const SplitCase& d) {
    return synthetic_operand(d.rows, d.cols, d.pattern, d.seed, d.fraction);
}
std::vector<SplitCase> adversarial_split_cases() {
    const int64_t shapes[][2] = {{1, 1}, {1, 50}, {50, 1}, {257, 130}, {130, 257}, {3, 2000}, {2000, 3}, {300, 256}};
    std::vector<SplitCase> v;
    uint64_t seed = 500;
    for (auto sh : shapes)
        for (bool by_rows : {true, false}) {
            const int64_t n = by_rows ? sh[0] : sh[1];
            std::vector<int64_t> ks;
            for (int64_t k : {int64_t(0), int64_t(1), int64_t(7), n - 1, n, n + 5})
                if (k >= 0) ks.push_back(k);
            v.push_back({sh[0], sh[1], by_rows, by_rows ? Pattern::row : Pattern::col, ++seed, 0.03, ks, true, true});
        }
    return v;
}
std::vector<SplitCase> large_split_cases() {
    // 12000 keys: cached in shared memory; 28000: cached for k = 64, from L2 for k close to n (the list
    // takes the room); 70000: read from L2 in every pass, several CTAs, lists at their 16384-entry cap
    std::vector<SplitCase> v;
    for (int64_t n : {int64_t(12000), int64_t(28000), int64_t(70000)}) {
        const std::vector<int64_t> ks = {64, n / 2 + 1, n - 1};
        v.push_back({n, 2, true, Pattern::row, 31 + uint64_t(n), 0.01, ks, true, false});    // FP32, L2
        v.push_back({2, n, false, Pattern::col, 37 + uint64_t(n), 0.01, ks, false, false});  // BF16, absmax
    }
    return v;
}
// the other GPU tests that rank by L2: OutlierExtractionMatchesCpu, …LargeDimensionUsesTheRadixSortPath, and
// the operands lp_matmul extracts from in LpMatmulMatchesCpu / LpMatmulIdentitiesWithoutQuantization
std::vector<SplitCase> other_l2_split_cases() {
    return {{300, 256, true, Pattern::row, 23, 0.03, {7}, true, false},
            {300, 256, false, Pattern::col, 23, 0.03, {7}, true, false},
            {9000, 64, true, Pattern::row, 29, 0.01, {64}, true, false},
            {256, 320, true, Pattern::row, 31, 0.01, {16}, true, false},
            {320, 128, false, Pattern::col, 32, 0.01, {16}, true, false},
            {128, 96, true, Pattern::row, 41, 0.01, {8}, true, false},
            {96, 64, false, Pattern::none, 42, 0.01, {8}, true, false}};
}

// The statistics kernels' arithmetic on the host, in their order: per lane FP32 Σx and Σx² (FMA) over its 8
// columns (rows) and over a batch of B rows of its warp (columns); rows: FP32 xor-tree across the lanes (the
// reduce-scatter gives the same bits, ReduceScatterEqualsXorAllReduce), FP64 per slab; columns: FP64
// accumulation of the batches, FP64 over the 8 warps; then the finalising launch: warp w adds parts w,
// w+8, … (slabs / segments), the 8 warps in order. Returns row_sums and col_sums as the kernels write them.
void emulate_stats_kernel(const std::vector<float>& x, int64_t R, int64_t C, int B, std::vector<double>& row_sums,
                          std::vector<double>& col_sums) {
    using namespace outlier_stats_detail;
    const StatsGeometry g = stats_geometry(R, C, 264);  // 132 SMs × 2 CTAs (H200, ptxas: ≤ 128 registers)
    std::vector<double> rps(size_t(g.slabs * R)), rpq(size_t(g.slabs * R)), cps(size_t(g.segs * C)), cpq(size_t(g.segs * C));
    auto xor_tree = [](std::vector<float> a) {  // what every lane holds after the butterfly
        for (int o = 16; o > 0; o >>= 1) {
            std::vector<float> b(32);
            for (int l = 0; l < 32; ++l) b[size_t(l)] = a[size_t(l)] + a[size_t(l ^ o)];
            a = b;
        }
        return a[0];
    };
    for (int64_t seg = 0; seg < g.segs; ++seg)
        for (int64_t slab = 0; slab < g.slabs; ++slab) {
            const int64_t r_begin = seg * g.seg_rows, r_end = std::min(R, r_begin + g.seg_rows);
            std::vector<double> ws(size_t(kWarps * kSlabCols), 0.0), wq(ws.size(), 0.0);
            for (int warp = 0; warp < kWarps; ++warp)
                for (int64_t rb = r_begin + warp; rb < r_end; rb += int64_t(kWarps) * B) {
                    std::vector<float> bs(kSlabCols, 0.0f), bq(kSlabCols, 0.0f);
                    for (int i = 0; i < B; ++i) {
                        const int64_t r = rb + int64_t(i) * kWarps;
                        std::vector<float> ls(32), lq(32);
                        for (int lane = 0; lane < 32; ++lane) {
                            float rs = 0.0f, rq = 0.0f;
                            for (int j = 0; j < kLaneCols; ++j) {
                                const int64_t c = slab * kSlabCols + lane * kLaneCols + j;
                                const float d = (r < r_end && c < C) ? x[size_t(r * C + c)] : 0.0f;
                                rs += d;
                                rq = std::fmaf(d, d, rq);
                                bs[size_t(lane * kLaneCols + j)] += d;
                                bq[size_t(lane * kLaneCols + j)] = std::fmaf(d, d, bq[size_t(lane * kLaneCols + j)]);
                            }
                            ls[size_t(lane)] = rs;
                            lq[size_t(lane)] = rq;
                        }
                        if (r < r_end) {
                            rps[size_t(slab * R + r)] = double(xor_tree(ls));
                            rpq[size_t(slab * R + r)] = double(xor_tree(lq));
                        }
                    }
                    for (int t = 0; t < kSlabCols; ++t) {
                        ws[size_t(warp * kSlabCols + t)] += double(bs[size_t(t)]);
                        wq[size_t(warp * kSlabCols + t)] += double(bq[size_t(t)]);
                    }
                }
            for (int t = 0; t < kSlabCols; ++t) {
                const int64_t c = slab * kSlabCols + t;
                if (c >= C) continue;
                double s = 0.0, q = 0.0;
                for (int w = 0; w < kWarps; ++w) {
                    s += ws[size_t(w * kSlabCols + t)];
                    q += wq[size_t(w * kSlabCols + t)];
                }
                cps[size_t(seg * C + c)] = s;
                cpq[size_t(seg * C + c)] = q;
            }
        }
    // the finalising launch: warp w adds parts w, w + 8, …; then the warps in order
    auto finalise = [](const std::vector<double>& ps, const std::vector<double>& pq, int64_t parts, int64_t n, int64_t i,
                       double* out) {
        double s = 0.0, q = 0.0;
        for (int w = 0; w < kWarps; ++w) {
            double ws = 0.0, wq = 0.0;
            for (int64_t j = w; j < parts; j += kWarps) {
                ws += ps[size_t(j * n + i)];
                wq += pq[size_t(j * n + i)];
            }
            s += ws;
            q += wq;
        }
        out[0] = s;
        out[1] = q;
    };
    row_sums.assign(size_t(2 * R), 0.0);
    col_sums.assign(size_t(2 * C), 0.0);
    for (int64_t r = 0; r < R; ++r) finalise(rps, rpq, g.slabs, R, r, &row_sums[size_t(2 * r)]);
    for (int64_t c = 0; c < C; ++c) finalise(cps, cpq, g.segs, C, c, &col_sums[size_t(2 * c)]);
}

// The detector from the emulated sums: variances and moments as the finalising launch computes them, the
// power sums added in index order (the kernel adds them in a tree: FP64 rounding apart, the same).
PatternStats emulate_detector(const std::vector<float>& x, int64_t R, int64_t C, int B) {
    std::vector<double> rs, cs;
    emulate_stats_kernel(x, R, C, B, rs, cs);
    auto variance = [](double s, double q, int64_t n) {
        if (n > 1) {
            const double v = (q - s * s / double(n)) / double(n - 1);
            return v < 0.0 ? 0.0 : v;
        }
        return std::isfinite(s) && std::isfinite(q) ? 0.0 : std::nan("");
    };
    auto moments = [&](const std::vector<double>& sums, int64_t count, int64_t per) {
        double S[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < count; ++i) {
            const double v = variance(sums[size_t(2 * i)], sums[size_t(2 * i + 1)], per);
            S[0] += v, S[1] += v * v, S[2] += v * v * v, S[3] += v * v * v * v;
        }
        const double N = double(count), mean = S[0] / N;
        const double m2 = S[1] / N - mean * mean;
        const double m4 = S[3] / N - 4 * mean * S[2] / N + 6 * mean * mean * S[1] / N - 3 * mean * mean * mean * mean;
        const double var = count > 1 ? m2 * N / (N - 1) : 0.0;
        const double sd = var > 0 ? std::sqrt(var) : 0.0;
        return VarianceMoments{mean, sd, sd > 0 ? m4 / (var * var) : 0.0};
    };
    return pattern_from_moments(moments(rs, R, C), R, moments(cs, C, R), C, {});
}

}  // namespace

// ================================ index logic on the host (no GPU needed) ================================

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

TEST(AdahopIndexLogic, ReduceScatterEqualsXorAllReduce) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        check_reduce_scatter<float, 16, 4>(seed);  // BF16 input: 8 rows × (Σx, Σx²), as the kernel runs it
        check_reduce_scatter<float, 8, 3>(seed);   // FP32 input: 4 rows × (Σx, Σx²)
    }
    EXPECT_EQ(outlier_stats_detail::batch_rows<__nv_bfloat16>(), 8);
    EXPECT_EQ(outlier_stats_detail::batch_rows<float>(), 4);
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

// ================================ GPU against the CPU references ================================

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
                auto db = to_device(to_bf16(x));
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
                auto d = to_device(to_bf16(x));
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

namespace {

// The MXFP4 output of one orientation (axis 1: blocks along rows, 0: down columns) in device memory, with the
// Σx² or the detector's (Σx, Σx²) pairs of its groups of blocks when asked.
struct QuantizedDevice {
    DeviceBuffer<uint8_t> codes, scales;
    DeviceBuffer<float> sumsq;
    DeviceBuffer<float2> partials;
    QuantizedDevice(int64_t r, int64_t c, int axis, bool with_sumsq, bool with_detector = false)
        : codes(size_t(r * c / 2)), scales(size_t(r * c / 32)), sumsq(with_sumsq ? size_t(block_stats_count(r, c, axis)) : 0),
          partials(with_detector ? size_t(block_stats_count(r, c, axis)) : 0) {}
    Mxfp4DeviceOutput out() {
        return {codes.data(), scales.data(), sumsq.size() ? sumsq.data() : nullptr, partials.size() ? partials.data() : nullptr};
    }
};

// FP64 (Σx, Σx², Σ|x|) of the input values of a statistics group (hadamard_mxfp4.cuh) — axis 1: block g of
// row o; axis 0: stripe g of column o (up to kBlockStatsStripe row blocks) — of the r × c matrix xv; and the
// entry's index in the layout.
struct GroupSums {
    double s = 0, q = 0, a = 0;
    int64_t at = 0;
};
GroupSums group_sums(const std::vector<float>& xv, int64_t r, int64_t c, int axis, int64_t o, int64_t g) {
    GroupSums t;
    const int64_t span = axis == 1 ? 32 : 32 * kBlockStatsStripe;
    const int64_t end = std::min(g * span + span, axis == 1 ? c : r);
    for (int64_t j = g * span; j < end; ++j) {
        const double v = axis == 1 ? xv[size_t(o * c + j)] : xv[size_t(j * c + o)];
        t.s += v, t.q += v * v, t.a += std::fabs(v);
    }
    t.at = axis == 1 ? o * block_stats_groups(r, c, 1) + g : g * c + o;
    return t;
}

void quantize_axis(const __nv_bfloat16* x, int64_t r, int64_t c, int axis, const HadamardMxfp4Options& o, QuantizedDevice& q) {
    hadamard_mxfp4_cuda(x, r, c, o, axis == 1 ? q.out() : Mxfp4DeviceOutput{}, axis == 0 ? q.out() : Mxfp4DeviceOutput{});
}

// Extraction fused into the quantization pass against the two-step path (split_outliers_cuda, then the
// fused Hadamard+MXFP4 kernel on the clean operand), both tested against the CPU elsewhere: indices, slice,
// codes and scales bit for bit; the per-block Σx² against FP64 sums of the BF16 values; quantizing with
// the sums changes no code.
void expect_fused_extraction_matches(const std::vector<float>& x, int64_t r, int64_t c, int axis, int64_t k,
                                     const HadamardMxfp4Options& o, OutlierExtractionWorkspace& ws, const std::string& what) {
    const bool by_rows = axis == 1;
    const int64_t n = by_rows ? r : c, other = by_rows ? c : r, kk = std::clamp<int64_t>(k, 0, n);
    const std::string w = what + " " + shape_name(r, c) + " axis " + std::to_string(axis) + " k " + std::to_string(k) + " rule " +
                          std::to_string(int(o.rule)) + " rounding " + std::to_string(int(o.rounding));
    const auto xb = to_bf16(x);
    DeviceBuffer<__nv_bfloat16> dx(xb.size()), clean(xb.size()), slice_ref(size_t(std::max<int64_t>(kk * other, 1))),
        slice(size_t(std::max<int64_t>(kk * other, 1)));
    dx.upload(xb.data(), xb.size());
    DeviceBuffer<int32_t> idx_ref(size_t(std::max<int64_t>(kk, 1))), idx(size_t(std::max<int64_t>(kk, 1)));
    ASSERT_EQ(split_outliers_cuda(dx.data(), r, c, by_rows, k, OutlierMetric::l2, clean.data(), slice_ref.data(), idx_ref.data(), ws), kk)
        << w;
    QuantizedDevice ref(r, c, axis, false), plain(r, c, axis, false), fused(r, c, axis, true);
    quantize_axis(clean.data(), r, c, axis, o, ref);
    quantize_axis(dx.data(), r, c, axis, o, plain);
    quantize_axis(dx.data(), r, c, axis, o, fused);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(download_at(fused.codes.data(), fused.codes.size()), download_at(plain.codes.data(), plain.codes.size())) << w;
    EXPECT_EQ(download_at(fused.scales.data(), fused.scales.size()), download_at(plain.scales.data(), plain.scales.size())) << w;
    const auto sums = download_at(fused.sumsq.data(), fused.sumsq.size());
    const auto xv = bf16_values(x);
    ASSERT_EQ(int64_t(sums.size()), n * block_stats_groups(r, c, axis)) << w;
    for (int64_t o_ = 0; o_ < n; ++o_)
        for (int64_t g = 0; g < block_stats_groups(r, c, axis); ++g) {
            const GroupSums want = group_sums(xv, r, c, axis, o_, g);
            ASSERT_NEAR(sums[size_t(want.at)], want.q, 4e-6 * want.q) << w << " group " << o_ << "," << g;
        }
    ASSERT_EQ(extract_outliers_quantized_cuda(dx.data(), r, c, axis, k, o.rule, fused.out(), slice.data(), idx.data(), ws), kk) << w;
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(download_at(idx.data(), size_t(kk)), download_at(idx_ref.data(), size_t(kk))) << w;
    const auto bits16 = [](const std::vector<__nv_bfloat16>& v) {
        std::vector<uint16_t> u(v.size());
        std::memcpy(u.data(), v.data(), v.size() * 2);
        return u;
    };
    EXPECT_EQ(bits16(download_at(slice.data(), size_t(kk * other))), bits16(download_at(slice_ref.data(), size_t(kk * other)))) << w;
    EXPECT_EQ(download_at(fused.codes.data(), fused.codes.size()), download_at(ref.codes.data(), ref.codes.size())) << w;
    EXPECT_EQ(download_at(fused.scales.data(), fused.scales.size()), download_at(ref.scales.data(), ref.scales.size())) << w;
    // Quantizes x into a fresh output, extracts from it and expects the reference indices and slice, and the
    // given codes and scales afterwards.
    auto expect_extraction = [&](QuantizedDevice& q, bool zero_selected, const QuantizedDevice& want, const std::string& tag) {
        quantize_axis(dx.data(), r, c, axis, o, q);
        DeviceBuffer<int32_t> idx_q(size_t(std::max<int64_t>(kk, 1)));
        DeviceBuffer<__nv_bfloat16> slice_q(size_t(std::max<int64_t>(kk * other, 1)));
        ASSERT_EQ(extract_outliers_quantized_cuda(dx.data(), r, c, axis, k, o.rule, q.out(), slice_q.data(), idx_q.data(), ws, 0,
                                                  zero_selected),
                  kk)
            << w << tag;
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(download_at(idx_q.data(), size_t(kk)), download_at(idx_ref.data(), size_t(kk))) << w << tag;
        EXPECT_EQ(bits16(download_at(slice_q.data(), size_t(kk * other))), bits16(download_at(slice_ref.data(), size_t(kk * other))))
            << w << tag;
        EXPECT_EQ(download_at(q.codes.data(), q.codes.size()), download_at(want.codes.data(), want.codes.size())) << w << tag;
        EXPECT_EQ(download_at(q.scales.data(), q.scales.size()), download_at(want.scales.data(), want.scales.size())) << w << tag;
    };
    // the scores from the detector's (Σx, Σx²) pairs instead of block_sumsq: the same Σx² bits, the same result
    QuantizedDevice paired(r, c, axis, false, true);
    expect_extraction(paired, true, ref, " pairs");
    // without the zeroing: the same indices and slice, the quantized operand untouched
    QuantizedDevice kept(r, c, axis, true);
    expect_extraction(kept, false, plain, " kept");
}

}  // namespace

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

TEST(AdahopCuda, BlockSumsOfBothOrientationsEqualTheSingleOrientationOnes) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        const int64_t r = 96, c = 128;
        const auto xb = to_bf16(synthetic_operand(r, c, Pattern::col, 77, 0.05));
        DeviceBuffer<__nv_bfloat16> dx(xb.size());
        dx.upload(xb.data(), xb.size());
        QuantizedDevice rows1(r, c, 1, true), cols1(r, c, 0, true), rows2(r, c, 1, true), cols2(r, c, 0, true);
        HadamardMxfp4Options o;
        quantize_axis(dx.data(), r, c, 1, o, rows1);
        quantize_axis(dx.data(), r, c, 0, o, cols1);
        hadamard_mxfp4_cuda(dx.data(), r, c, o, rows2.out(), cols2.out());
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(float_bits(download_at(rows2.sumsq.data(), rows2.sumsq.size())), float_bits(download_at(rows1.sumsq.data(), rows1.sumsq.size())));
        EXPECT_EQ(float_bits(download_at(cols2.sumsq.data(), cols2.sumsq.size())), float_bits(download_at(cols1.sumsq.data(), cols1.sumsq.size())));
        EXPECT_EQ(download_at(rows2.codes.data(), rows2.codes.size()), download_at(rows1.codes.data(), rows1.codes.size()));
        EXPECT_EQ(download_at(cols2.codes.data(), cols2.codes.size()), download_at(cols1.codes.data(), cols1.codes.size()));
    });
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
                auto dx = to_device(to_bf16(x));
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
        auto db = to_device(to_bf16(bad));
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

// The detector partials themselves: every group's (Σx, Σx²) pair against FP64 sums of its BF16 values, in
// both orientations, from single-orientation passes (full and partial last stripes); the
// both-orientations pass bit for bit equal to them; Σx² equal to the outlier-extraction pass's block_sumsq.
TEST(AdahopCuda, DetectorPartialsHoldTheSumsOfTheirGroups) {
    REQUIRE_GPU();
    with_and_without_tma([&] {  // the TMA column kernels and the portable ones
        const int64_t shapes[][2] = {{96, 96}, {288, 64}, {512, 2048}, {32, 32}, {64, 160}, {800, 128}};
        for (auto sh : shapes) {
            const int64_t r = sh[0], c = sh[1];
            auto x = synthetic_operand(r, c, Pattern::row, 5 + uint64_t(r + c));
            for (float& v : x) v -= 0.2f;
            const auto xv = bf16_values(x);
            auto dx = to_device(to_bf16(x));
            QuantizedDevice rows(r, c, 1, false, true), cols(r, c, 0, false, true), rows2(r, c, 1, false, true), cols2(r, c, 0, false, true),
                sq_rows(r, c, 1, true), sq_cols(r, c, 0, true);
            quantize_axis(dx.data(), r, c, 1, {}, rows);
            quantize_axis(dx.data(), r, c, 0, {}, cols);
            quantize_axis(dx.data(), r, c, 1, {}, sq_rows);
            quantize_axis(dx.data(), r, c, 0, {}, sq_cols);
            hadamard_mxfp4_cuda(dx.data(), r, c, {}, rows2.out(), cols2.out());
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::string w = shape_name(r, c);
            ASSERT_EQ(block_stats_count(r, c, 1), r * (c / 32)) << w;
            ASSERT_EQ(block_stats_count(r, c, 0), c * ((r / 32 + kBlockStatsStripe - 1) / kBlockStatsStripe)) << w;
            const auto pr = download_at(rows.partials.data(), rows.partials.size()), pc = download_at(cols.partials.data(), cols.partials.size());
            for (int axis : {1, 0}) {
                const std::vector<float2>& got = axis == 1 ? pr : pc;
                for (int64_t o = 0; o < (axis == 1 ? r : c); ++o)
                    for (int64_t g = 0; g < block_stats_groups(r, c, axis); ++g) {
                        const GroupSums want = group_sums(xv, r, c, axis, o, g);
                        const float2 p = got[size_t(want.at)];
                        ASSERT_NEAR(p.x, want.s, 1e-6 * want.a + 1e-30) << w << " axis " << axis << " vector " << o << " group " << g;
                        ASSERT_NEAR(p.y, want.q, 1e-6 * want.q + 1e-30) << w << " axis " << axis << " vector " << o << " group " << g;
                    }
            }
            const auto sumsq_of = [](const std::vector<float2>& v) {
                std::vector<float> q;
                for (const float2& p : v) q.push_back(p.y);
                return float_bits(q);
            };
            EXPECT_EQ(sumsq_of(pr), float_bits(download_at(sq_rows.sumsq.data(), sq_rows.sumsq.size()))) << w << " Σx² along rows";
            EXPECT_EQ(sumsq_of(pc), float_bits(download_at(sq_cols.sumsq.data(), sq_cols.sumsq.size()))) << w << " Σx² down columns";
            const auto bits = [](const std::vector<float2>& v) {
                std::vector<uint32_t> u(2 * v.size());
                std::memcpy(u.data(), v.data(), v.size() * sizeof(float2));
                return u;
            };
            EXPECT_EQ(bits(download_at(rows2.partials.data(), rows2.partials.size())), bits(pr)) << w << " both, along rows";
            EXPECT_EQ(bits(download_at(cols2.partials.data(), cols2.partials.size())), bits(pc)) << w << " both, along columns";
        }
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
            inputs.push_back(to_device(to_bf16(x)));
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
            auto dx = to_device(to_bf16(synthetic_operand(r, c, Pattern::col, 41)));
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
