// adahop_test_util.h — what the AdaHOP GPU suites share (detector, outlier extraction, the statistics of the
// fused Hadamard+MXFP4 pass, lp_matmul): BF16 device vectors, device copies at an offset (misaligned
// pointers), test matrices with outlier patterns and exact ties, the detector and extraction cases, host
// mirrors of the statistics kernels' warp code, and the quantized operand with its block statistics.
#pragma once

#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "adahop/cuda/hadamard_mxfp4_stats.cuh"
#include "adahop/cuda/outlier_extraction.cuh"
#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/pair_analysis.h"
#include "formats/element_codec.h"

namespace lowbit::testing_util {

inline std::vector<__nv_bfloat16> to_device_bf16(const std::vector<float>& x) {
    std::vector<__nv_bfloat16> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = __float2bfloat16_rn(x[i]);
    return y;
}
inline std::vector<float> bf16_values(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
    return y;
}

inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        e += double(a[i] - b[i]) * double(a[i] - b[i]);
        r += double(b[i]) * double(b[i]);
    }
    return std::sqrt(e / (r > 0 ? r : 1));
}

// Bit patterns, so that NaN compares equal to the same NaN.
inline std::vector<uint32_t> float_bits(const std::vector<float>& x) {
    std::vector<uint32_t> b(x.size());
    if (!x.empty()) std::memcpy(b.data(), x.data(), x.size() * 4);
    return b;
}

inline uint32_t bits_of(float v) {
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
    if constexpr (is_bf16<T>) return to_device_bf16(x);
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

inline std::string shape_name(int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); }

// Gaussian with a non-zero mean (exercises the one-pass variance), optionally with outlier rows/columns.
inline std::vector<float> test_matrix(int64_t r, int64_t c, Pattern p, uint64_t seed) {
    auto x = synthetic_operand(r, c, p, seed);
    for (float& v : x) v += 0.3f;
    return x;
}

// Small integers: every sum and sum of squares is exact in any order, on the CPU and the GPU alike.
// Rows (or columns) are permutations of one base vector, so their scores tie exactly; `winners` of them
// (spread over the matrix) are doubled and rank first. The top k with k > winners cuts through the ties.
inline std::vector<float> tied_matrix(int64_t r, int64_t c, bool by_rows, const std::vector<int64_t>& winners, uint64_t seed) {
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
inline std::vector<DetectorCase> basic_detector_cases() {
    std::vector<DetectorCase> v;
    const int64_t shapes[][2] = {{512, 768}, {1000, 333}, {64, 4096}, {3, 5}};
    for (auto sh : shapes)
        for (Pattern p : {Pattern::row, Pattern::col, Pattern::none}) v.push_back({sh[0], sh[1], p, 17});
    return v;
}
inline std::vector<DetectorCase> adversarial_detector_cases() {
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
inline std::vector<float> case_matrix(const DetectorCase& d) {
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
inline std::vector<float> case_matrix(const SplitCase& d) {
    return synthetic_operand(d.rows, d.cols, d.pattern, d.seed, d.fraction);
}
inline std::vector<SplitCase> adversarial_split_cases() {
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
inline std::vector<SplitCase> large_split_cases() {
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
inline std::vector<SplitCase> other_l2_split_cases() {
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
inline void emulate_stats_kernel(const std::vector<float>& x, int64_t R, int64_t C, int B, std::vector<double>& row_sums,
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
inline PatternStats emulate_detector(const std::vector<float>& x, int64_t R, int64_t C, int B) {
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
inline GroupSums group_sums(const std::vector<float>& xv, int64_t r, int64_t c, int axis, int64_t o, int64_t g) {
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

inline void quantize_axis(const __nv_bfloat16* x, int64_t r, int64_t c, int axis, const HadamardMxfp4Options& o, QuantizedDevice& q) {
    hadamard_mxfp4_cuda(x, r, c, o, axis == 1 ? q.out() : Mxfp4DeviceOutput{}, axis == 0 ? q.out() : Mxfp4DeviceOutput{});
}

// Extraction fused into the quantization pass against the two-step path (split_outliers_cuda, then the
// fused Hadamard+MXFP4 kernel on the clean operand), both tested against the CPU elsewhere: indices, slice,
// codes and scales bit for bit; the per-block Σx² against FP64 sums of the BF16 values; quantizing with
// the sums changes no code.
inline void expect_fused_extraction_matches(const std::vector<float>& x, int64_t r, int64_t c, int axis, int64_t k,
                                     const HadamardMxfp4Options& o, OutlierExtractionWorkspace& ws, const std::string& what) {
    const bool by_rows = axis == 1;
    const int64_t n = by_rows ? r : c, other = by_rows ? c : r, kk = std::clamp<int64_t>(k, 0, n);
    const std::string w = what + " " + shape_name(r, c) + " axis " + std::to_string(axis) + " k " + std::to_string(k) + " rule " +
                          std::to_string(int(o.rule)) + " rounding " + std::to_string(int(o.rounding));
    const auto xb = to_device_bf16(x);
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

}  // namespace lowbit::testing_util
