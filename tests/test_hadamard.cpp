// test_hadamard.cpp — tests of the CPU Hadamard layer: base matrices (H·Hᵀ = m·I), order factorisation and
// advice, the transform against a literal scalar implementation of the definition (bit-exact) and against
// dense double-precision matrices, orthonormality, involution, block-diagonal and axis equivalences,
// the randomised variant and its inverse, thread-count independence, and error messages.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "hadamard/hadamard.h"
#include "hadamard/hadamard_orders.h"
#include "error_test_util.h"

using namespace lowbit;

namespace {

const std::vector<int> all_base_orders = {12, 20, 28, 36, 52, 60, 76, 108, 140, 148, 156, 172};

std::vector<float> random_vector(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
    return rel_error(got, std::vector<double>(want.begin(), want.end()));
}

double norm(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s);
}

// The definition in hadamard.h, written out literally (scalar, one vector, no tricks).
std::vector<float> literal_transform(std::vector<float> x, bool transpose) {
    const int64_t n = int64_t(x.size());
    const HadamardOrder order = hadamard_factor_order(n);
    const int64_t p = order.pow2;
    const int m = order.base;
    for (int a = 0; a < m; ++a)
        for (int64_t h = 1; h < p; h *= 2)
            for (int64_t i = 0; i < p; ++i)
                if ((i & h) == 0) {
                    float u = x[a * p + i], v = x[a * p + i + h];
                    x[a * p + i] = u + v;
                    x[a * p + i + h] = u - v;
                }
    if (m > 1) {
        const auto hm = hadamard_base_matrix(m);
        std::vector<float> y(x.size());
        for (int a = 0; a < m; ++a)
            for (int64_t b = 0; b < p; ++b) {
                auto coef = [&](int j) { return transpose ? hm[j * m + a] : hm[a * m + j]; };
                float acc = coef(0) > 0 ? x[b] : -x[b];
                for (int j = 1; j < m; ++j) acc = coef(j) > 0 ? acc + x[j * p + b] : acc - x[j * p + b];
                y[a * p + b] = acc;
            }
        x = y;
    }
    const float scale = float(1.0 / std::sqrt(double(n)));
    for (auto& v : x) v = v * scale;
    return x;
}

// Entry (i, j) of the unnormalised H_n = H_m ⊗ H_{2^k} (Sylvester: (−1)^popcount(b & b')).
int dense_entry(const HadamardOrder& o, int64_t i, int64_t j) {
    const auto hm = hadamard_base_matrix(o.base);
    const int64_t a = i / o.pow2, b = i % o.pow2, a2 = j / o.pow2, b2 = j % o.pow2;
    const int sylvester = (std::popcount(uint64_t(b & b2)) & 1) ? -1 : 1;
    return hm[a * o.base + a2] * sylvester;
}

std::vector<double> dense_transform(const std::vector<float>& x, bool transpose) {
    const int64_t n = int64_t(x.size());
    const HadamardOrder o = hadamard_factor_order(n);
    std::vector<double> y(x.size(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += (transpose ? dense_entry(o, j, i) : dense_entry(o, i, j)) * double(x[j]);
        y[i] = s / std::sqrt(double(n));
    }
    return y;
}

std::vector<float> transform_copy(std::vector<float> x, int64_t rows, int64_t cols, const HadamardOptions& opt) {
    hadamard_transform(x.data(), rows, cols, opt);
    return x;
}

std::vector<float> transpose(const std::vector<float>& x, int64_t rows, int64_t cols) {
    std::vector<float> t(x.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
    return t;
}

// Restores the thread count after a test changes it.
struct ThreadCountGuard {
    int saved = thread_count();
    ~ThreadCountGuard() { set_thread_count(saved); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Base matrices and orders

TEST(HadamardOrders, BaseMatricesAreHadamard) {
    for (int m : all_base_orders) {
        const auto h = hadamard_base_matrix(m);
        ASSERT_EQ(h.size(), size_t(m) * m) << m;
        for (int8_t v : h) ASSERT_TRUE(v == 1 || v == -1) << m;
        for (int i = 0; i < m; ++i)
            for (int j = 0; j < m; ++j) {
                int s = 0;
                for (int k = 0; k < m; ++k) s += h[i * m + k] * h[j * m + k];
                ASSERT_EQ(s, i == j ? m : 0) << "order " << m << " rows " << i << ", " << j;
            }
        EXPECT_FALSE(hadamard_base_construction(m).empty()) << m;
    }
    EXPECT_EQ(hadamard_base_matrix(1).size(), 1u);
    EXPECT_TRUE(hadamard_base_matrix(44).empty());
    EXPECT_TRUE(hadamard_base_matrix(40).empty());  // 40·2^k is factorised as 20·2^(k+1)
}

TEST(HadamardOrders, ConstructionsNamed) {
    EXPECT_EQ(hadamard_base_construction(12), "Paley I, q = 11");
    EXPECT_EQ(hadamard_base_construction(28), "Paley II, q = 13");
    EXPECT_EQ(hadamard_base_construction(52), "Paley II, q = 25 (GF(25))");
    EXPECT_EQ(hadamard_base_construction(172), "Williamson array, n = 43");
    // Other Paley orders than the ones in the table are genuine too (the constructions are general).
    for (auto [q, second] : {std::pair{23, false}, {43, false}, {9, true}, {29, true}, {49, true}}) {
        const auto h = second ? hadamard_paley2(q) : hadamard_paley1(q);
        const int m = second ? 2 * (q + 1) : q + 1;
        ASSERT_EQ(h.size(), size_t(m) * m);
        for (int i = 0; i < m; ++i)
            for (int j = 0; j < m; ++j) {
                int s = 0;
                for (int k = 0; k < m; ++k) s += h[i * m + k] * h[j * m + k];
                ASSERT_EQ(s, i == j ? m : 0) << "q " << q;
            }
    }
}

TEST(HadamardOrders, Factorisation) {
    struct Case {
        int64_t n;
        int base;
        int64_t pow2;
    };
    for (const Case& c : std::vector<Case>{{1, 1, 1},       {2, 1, 2},         {4096, 1, 4096}, {12, 12, 1},
                                           {40, 20, 2},     {160, 20, 8},      {768, 12, 64},   {3072, 12, 256},
                                           {11008, 172, 64}, {14336, 28, 512}, {896, 28, 32},   {3584, 28, 128},
                                           {52, 52, 1},     {156 * 4, 156, 4}, {140, 140, 1},   {108 * 2, 108, 2}}) {
        const HadamardOrder o = hadamard_factor_order(c.n);
        EXPECT_TRUE(o.supported()) << c.n;
        EXPECT_EQ(o.base, c.base) << c.n;
        EXPECT_EQ(o.pow2, c.pow2) << c.n;
        EXPECT_EQ(int64_t(o.base) * o.pow2, c.n);
    }
    for (int64_t n : {0, -4, 3, 6, 10, 14, 44, 92, 100, 5888, 137})
        EXPECT_FALSE(hadamard_order_supported(n)) << n;
}

TEST(HadamardOrders, AdviceText) {
    EXPECT_EQ(hadamard_size_advice(5888),
              "hadamard: size 5888 = 23·256 has no Hadamard order lowbit supports; use a block-diagonal "
              "transform (--block 256) or pad to 6144 = 12·512");
    EXPECT_EQ(hadamard_largest_block_dividing(5888), 256);
    EXPECT_TRUE(hadamard_order_supported(4864));   // Qwen2.5-0.5B FFN: 76·64
    EXPECT_TRUE(hadamard_order_supported(18944));  // Qwen2.5-7B FFN: 148·128
    EXPECT_EQ(hadamard_next_supported_order(5888), 6144);
    EXPECT_EQ(hadamard_largest_block_dividing(100), 20);
    EXPECT_EQ(hadamard_describe_size(4096), "2^12");
    EXPECT_EQ(hadamard_describe_size(11008), "172·64");
    EXPECT_NE(hadamard_size_advice(7).find("pad to 8"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
// The transform against its definition and against dense matrices

TEST(Hadamard, GoldenSylvester4) {
    std::vector<float> x = {1, 2, 3, 4};
    fwht(x.data(), 4);
    // H_4 = [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]]; (10, -2, -4, 0) / 2.
    EXPECT_TRUE(bit_equal(x, {5.0f, -1.0f, -2.0f, 0.0f}));
}

TEST(Hadamard, NormalisationConstant) {
    EXPECT_EQ(hadamard_inv_sqrt(4), 0.5f);
    EXPECT_EQ(hadamard_inv_sqrt(2), float(1.0 / std::sqrt(2.0)));
    EXPECT_EQ(hadamard_inv_sqrt(11008), float(1.0 / std::sqrt(11008.0)));
}

TEST(Hadamard, MatchesLiteralDefinitionBitExact) {
    std::vector<int64_t> sizes;
    for (int64_t n = 1; n <= 8192; n *= 2) sizes.push_back(n);
    for (int m : all_base_orders)
        for (int64_t p : {1, 2, 8, 32}) sizes.push_back(m * p);
    sizes.push_back(11008);
    sizes.push_back(14336);
    for (int64_t n : sizes)
        for (bool tr : {false, true}) {
            auto x = random_vector(size_t(n), uint32_t(n));
            auto want = literal_transform(x, tr);
            hadamard_transform_vector(x.data(), n, tr);
            ASSERT_TRUE(bit_equal(x, want)) << "n = " << n << (tr ? " transposed" : "");
        }
}

TEST(Hadamard, ScalarHelpersMatchBitExact) {
    // The LOWBIT_HD helpers (what a CUDA kernel runs per thread) against the CPU engine.
    auto x = random_vector(16, 5);
    auto y = x;
    fwht_unnormalized<16>(y.data());
    for (auto& v : y) v = v * hadamard_inv_sqrt(16);
    fwht(x.data(), 16);
    EXPECT_TRUE(bit_equal(x, y));

    const int m = 28;
    const int64_t p = 4, n = m * p;
    auto u = random_vector(size_t(n), 6);
    for (bool tr : {false, true}) {
        auto t = u;
        for (int a = 0; a < m; ++a) fwht_unnormalized(t.data() + a * p, p);
        std::vector<float> want(static_cast<size_t>(n));
        const auto hm = hadamard_base_matrix(m);
        for (int a = 0; a < m; ++a)
            for (int64_t b = 0; b < p; ++b) {
                const int8_t* coef = tr ? hm.data() + a : hm.data() + a * m;
                want[a * p + b] = hadamard_base_mix(coef, tr ? m : 1, m, t.data() + b, p) * hadamard_inv_sqrt(n);
            }
        auto got = u;
        hadamard_transform_vector(got.data(), n, tr);
        EXPECT_TRUE(bit_equal(got, want)) << tr;
    }
}

TEST(Hadamard, MatchesDenseDoubleMatrix) {
    // Golden values for every base order (and a few m·2^k) from an explicit dense product in double.
    std::vector<int64_t> sizes = {1, 2, 4, 8, 64, 256};
    for (int m : all_base_orders) sizes.push_back(m);
    for (int64_t n : {24, 80, 112, 144, 344, 624}) sizes.push_back(n);
    for (int64_t n : sizes)
        for (bool tr : {false, true}) {
            auto x = random_vector(size_t(n), uint32_t(1000 + n));
            const auto want = dense_transform(x, tr);
            hadamard_transform_vector(x.data(), n, tr);
            EXPECT_LT(rel_error(x, want), 1e-6) << "n = " << n;
        }
}

// Transforms the identity (row i becomes (H e_i)ᵀ, a column of H) and returns max |M·Mᵀ − I|.
double orthonormality_error(int64_t n) {
    std::vector<float> mat(size_t(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i) mat[size_t(i * n + i)] = 1.0f;
    hadamard_transform(mat.data(), n, n, HadamardOptions{});
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t k = 0; k < n; ++k) s += double(mat[i * n + k]) * mat[j * n + k];
            worst = std::max(worst, std::abs(s - (i == j ? 1.0 : 0.0)));
        }
    return worst;
}

TEST(Hadamard, OrthonormalPowersOfTwo) {
    for (int64_t n = 1; n <= 4096; n *= 2) {
        if (n <= 512) {
            EXPECT_LT(orthonormality_error(n), 1e-6) << "n = " << n;
        }
        auto x = random_vector(size_t(n), uint32_t(n + 7));
        auto y = x;
        fwht(y.data(), n);
        EXPECT_NEAR(norm(y), norm(x), 1e-6 * norm(x)) << n;
        fwht(y.data(), n);  // involution: H·H = I for Sylvester
        EXPECT_LT(rel_error(y, x), 1e-6) << n;
    }
}

TEST(Hadamard, OrthonormalNonPowerOfTwo) {
    std::vector<int64_t> sizes;
    for (int m : all_base_orders)
        for (int64_t p : {1, 4, 64}) sizes.push_back(m * p);
    sizes.push_back(11008);
    sizes.push_back(14336);
    sizes.push_back(768);
    sizes.push_back(40 * 128);
    for (int64_t n : sizes) {
        if (n <= 700) {
            EXPECT_LT(orthonormality_error(n), 1e-5) << "n = " << n;
        }
        for (uint32_t seed : {1u, 2u, 3u}) {
            auto x = random_vector(size_t(n), seed * 7919u + uint32_t(n));
            auto y = x;
            hadamard_transform_vector(y.data(), n, false);
            EXPECT_NEAR(norm(y), norm(x), 1e-5 * norm(x)) << n;
            hadamard_transform_vector(y.data(), n, true);  // Hᵀ inverts H
            EXPECT_LT(rel_error(y, x), 1e-5) << n;
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Block-diagonal, axes, randomisation, threads

TEST(Hadamard, BlockDiagonalEqualsPerSliceTransform) {
    const int64_t rows = 5;
    for (auto [cols, block] : std::vector<std::pair<int64_t, int64_t>>{
             {256, 16}, {512, 32}, {1024, 64}, {768, 128}, {4096, 256}, {960, 12 * 4}, {3584, 28 * 32},
             {11008, 172}, {11008, 172 * 64}, {64, 1}, {6, 2}}) {
        auto x = random_vector(size_t(rows * cols), uint32_t(cols + block));
        HadamardOptions opt;
        opt.block = block;
        auto got = transform_copy(x, rows, cols, opt);
        auto want = x;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j0 = 0; j0 < cols; j0 += block) hadamard_transform_vector(&want[r * cols + j0], block);
        EXPECT_TRUE(bit_equal(got, want)) << cols << " / " << block;
    }
    // Full transform = block equal to the dimension.
    auto x = random_vector(3 * 768, 9);
    HadamardOptions full, blk;
    blk.block = 768;
    EXPECT_TRUE(bit_equal(transform_copy(x, 3, 768, full), transform_copy(x, 3, 768, blk)));
}

TEST(Hadamard, Axis0IsTransposedAxis1BitExact) {
    struct Case {
        int64_t rows, cols, block;
        bool randomized, permute, inverse;
    };
    for (const Case& c : std::vector<Case>{{256, 7, 0, false, false, false},
                                           {256, 33, 64, false, false, true},
                                           {1024, 40, 128, true, false, false},
                                           {768, 19, 0, true, true, false},
                                           {768, 19, 0, true, true, true},
                                           {112, 600, 28, true, true, false},
                                           {4096, 3, 0, false, false, false},
                                           {344, 1, 0, true, false, true},
                                           {16, 1000, 16, true, true, true}}) {
        auto x = random_vector(size_t(c.rows * c.cols), uint32_t(c.rows * 31 + c.cols));
        HadamardOptions opt;
        opt.block = c.block;
        opt.randomized = c.randomized;
        opt.permute = c.permute;
        opt.inverse = c.inverse;
        opt.seed = 1234;
        opt.axis = 0;
        auto got = transform_copy(x, c.rows, c.cols, opt);
        opt.axis = 1;
        auto want = transpose(transform_copy(transpose(x, c.rows, c.cols), c.cols, c.rows, opt), c.cols, c.rows);
        EXPECT_TRUE(bit_equal(got, want)) << c.rows << "x" << c.cols << " block " << c.block;
    }
}

TEST(Hadamard, RandomizedDefinitionAndInverse) {
    const int64_t rows = 3, cols = 512, block = 128;
    auto x = random_vector(size_t(rows * cols), 77);
    for (bool permute : {false, true}) {
        HadamardOptions opt;
        opt.block = block;
        opt.randomized = true;
        opt.seed = 0xC0FFEE;
        opt.permute = permute;
        auto y = transform_copy(x, rows, cols, opt);
        // Reproducible from the seed.
        EXPECT_TRUE(bit_equal(y, transform_copy(x, rows, cols, opt)));
        // Spelled out: y_block = H·D·P·x_block with the documented signs and permutation.
        const auto perm = permute ? hadamard_permutation(opt.seed, cols, block) : std::vector<int32_t>{};
        auto want = x;
        for (int64_t r = 0; r < rows; ++r) {
            const float* src = &x[r * cols];
            for (int64_t j = 0; j < cols; ++j) {
                const int64_t from = permute ? perm[j] : j;
                const float s = (counter_random24(opt.seed, uint64_t(j)) & 1) ? -1.0f : 1.0f;
                want[r * cols + j] = s * src[from];
            }
            for (int64_t j0 = 0; j0 < cols; j0 += block) hadamard_transform_vector(&want[r * cols + j0], block);
        }
        EXPECT_TRUE(bit_equal(y, want)) << permute;
        // A different seed gives a different rotation.
        HadamardOptions other = opt;
        other.seed = opt.seed + 1;
        EXPECT_FALSE(bit_equal(y, transform_copy(x, rows, cols, other)));
        // The inverse undoes it (to rounding), for both axes.
        HadamardOptions inv = opt;
        inv.inverse = true;
        EXPECT_LT(rel_error(transform_copy(y, rows, cols, inv), x), 1e-6) << permute;
        opt.axis = inv.axis = 0;
        auto xt = transpose(x, rows, cols);
        EXPECT_LT(rel_error(transform_copy(transform_copy(xt, cols, rows, opt), cols, rows, inv), xt), 1e-6);
    }
    // Non-power-of-two randomized, full dimension.
    auto z = random_vector(2 * 11008, 78);
    HadamardOptions opt;
    opt.randomized = opt.permute = true;
    opt.seed = 42;
    auto w = transform_copy(z, 2, 11008, opt);
    opt.inverse = true;
    EXPECT_LT(rel_error(transform_copy(w, 2, 11008, opt), z), 1e-5);
}

TEST(Hadamard, PermutationIsPerBlockShuffle) {
    const int64_t dim = 1024, block = 256;
    const auto p = hadamard_permutation(99, dim, block);
    ASSERT_EQ(p.size(), size_t(dim));
    for (int64_t j0 = 0; j0 < dim; j0 += block) {
        std::vector<int> seen(size_t(block), 0);
        int fixed = 0;
        for (int64_t i = 0; i < block; ++i) {
            const int64_t v = p[j0 + i];
            ASSERT_GE(v, j0);
            ASSERT_LT(v, j0 + block);
            seen[size_t(v - j0)]++;
            fixed += v == j0 + i;
        }
        for (int s : seen) EXPECT_EQ(s, 1);
        EXPECT_LT(fixed, 16);  // a shuffle, not the identity (expected ~1 fixed point)
    }
    EXPECT_EQ(p, hadamard_permutation(99, dim, block));
    EXPECT_NE(p, hadamard_permutation(100, dim, block));
    // Blocks are shuffled independently (draws are indexed by global position).
    EXPECT_NE(std::vector<int32_t>(p.begin(), p.begin() + block),
              [&] {
                  std::vector<int32_t> q(p.begin() + block, p.begin() + 2 * block);
                  for (auto& v : q) v -= int32_t(block);
                  return q;
              }());
}

TEST(Hadamard, ThreadCountIndependent) {
    ThreadCountGuard guard;
    struct Case {
        int64_t rows, cols, block;
        int axis;
        bool randomized;
    };
    for (const Case& c : std::vector<Case>{{64, 4096, 0, 1, false},
                                           {37, 11008, 0, 1, true},
                                           {4096, 130, 0, 0, false},
                                           {1024, 300, 64, 0, true},
                                           {14336, 8, 0, 0, true},
                                           {333, 768, 256, 1, true}}) {
        auto x = random_vector(size_t(c.rows * c.cols), uint32_t(c.rows + c.cols));
        HadamardOptions opt;
        opt.block = c.block;
        opt.axis = c.axis;
        opt.randomized = c.randomized;
        opt.permute = c.randomized;
        opt.seed = 5;
        set_thread_count(1);
        auto one = transform_copy(x, c.rows, c.cols, opt);
        set_thread_count(2);
        auto two = transform_copy(x, c.rows, c.cols, opt);
        set_thread_count(5);
        auto five = transform_copy(x, c.rows, c.cols, opt);
        EXPECT_TRUE(bit_equal(one, two)) << c.rows << "x" << c.cols;
        EXPECT_TRUE(bit_equal(one, five)) << c.rows << "x" << c.cols;
    }
}

TEST(Hadamard, SpecialValuesFollowTheDefinition) {
    // Signed zeros, infinities and NaN go through the same float operations as the literal definition.
    std::vector<float> x(24, 0.0f);
    x[0] = -0.0f;
    x[3] = INFINITY;
    x[5] = -0.0f;
    auto want = literal_transform(x, false);
    hadamard_transform_vector(x.data(), 24);
    for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(want[i])) {
            EXPECT_TRUE(std::isnan(x[i])) << i;
        } else {
            EXPECT_EQ(std::memcmp(&x[i], &want[i], sizeof(float)), 0) << i;
        }
    }
    std::vector<float> zeros(8, -0.0f);
    fwht(zeros.data(), 8);
    EXPECT_TRUE(std::signbit(zeros[0]));  // −0 + −0 = −0
}

// ---------------------------------------------------------------------------------------------------
// Errors

TEST(Hadamard, ErrorsForUnsupportedSizes) {
    std::vector<float> x(5888, 1.0f);
    expect_error_with([&] { hadamard_transform(x.data(), 1, 5888, HadamardOptions{}); }, ErrorKind::input,
                 {"5888 = 23·256", "--block 256", "pad to 6144 = 12·512"});
    expect_error_with([&] { fwht(x.data(), 12); }, ErrorKind::input, {"power-of-two", "12"});
    HadamardOptions opt;
    opt.block = 256;
    std::vector<float> y(1000, 1.0f);
    expect_error_with([&] { hadamard_transform(y.data(), 1, 1000, opt); }, ErrorKind::input,
                 {"1000", "not a multiple of block 256", "largest supported: 40", "pad to 1024"});
    opt.axis = 0;
    expect_error_with([&] { hadamard_transform(y.data(), 1000, 1, opt); }, ErrorKind::input, {"axis 0"});
    opt.block = 100;
    expect_error_with([&] { hadamard_transform(y.data(), 1000, 1, opt); }, ErrorKind::usage, {"block 100"});
    HadamardOptions bad_axis;
    bad_axis.axis = 2;
    expect_error_with([&] { hadamard_transform(y.data(), 10, 100, bad_axis); }, ErrorKind::usage, {"axis"});
    HadamardOptions perm_only;
    perm_only.permute = true;
    expect_error_with([&] { hadamard_transform(y.data(), 1, 1000, perm_only); }, ErrorKind::usage, {"seed"});
    // Nothing was written on failure.
    for (float v : y) ASSERT_EQ(v, 1.0f);
}
