// test_ptq_cuda.cu — the GPU post-training-quantization path against the CPU one:
//   CudaSolverDevice  inverse Cholesky (cuSOLVER FP64) vs LAPACK; products vs OpenBLAS; the grid search's
//                     candidate scores vs a double quadratic form and its fits vs the CPU's; GPTQ / GPTAQ /
//                     TurboBoA sweeps bit-identical to the CPU's when the factorization is shared and a sweep
//                     fits in one lazy block (every grid kind: int with groups fitted at the group, per channel,
//                     level tables, offsets), and equal in objective across lazy blocks (cuBLAS vs OpenBLAS
//                     summation order only);
//   cuda_calibration_paths  every block statistic (H_in, H_out, block_v, F2's D) and the propagated
//                     activations vs cpu_calibration_paths, FP32, whole blocks and the true-sequential passes;
//   quantize_model    end to end on a tiny GGUF model with both devices (also true-sequential): same codes nearly
//                     everywhere, same loss.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <cmath>
#include <tuple>
#include <vector>

#include "core/gemm_cpu.h"
#include "core/random_fill.h"
#include "../model_test_util.h"
#include "ptq/cuda/calibration_cuda.cuh"
#include "ptq/cuda/solver_cuda.cuh"
#include "ptq/quantize.h"

extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
}

namespace lowbit {
namespace {

using testing_util::have_gpu;

#define SKIP_WITHOUT_GPU() \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

// The CPU's factorization (LAPACK, as solver.cpp calls it) and products with the GPU's sweep: isolates the
// sweep kernel, so that its codes must equal the CPU sweep's bit for bit.
class CpuFactorGpuSweep final : public SolverDevice {
public:
    bool inverse_cholesky_upper(const float* h, int64_t n, const std::vector<uint8_t>& dead, float dead_value, double damp,
                                std::vector<float>* u, std::vector<double>* h_inv, uint64_t) const override {
        std::vector<double> a(size_t(n * n));  // the damped H, as inverse_cholesky builds it for LAPACK
        for (int64_t i = 0; i < n * n; ++i) a[size_t(i)] = double(h[i]);
        for (int64_t j = 0; j < n; ++j) a[size_t(j * n + j)] = (dead[size_t(j)] ? double(dead_value) : double(h[j * n + j])) + damp;
        const int nn = int(n);
        int info = 0;
        const auto zero_lower = [&]() {
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < i; ++j) a[size_t(i * n + j)] = 0.0;
        };
        dpotrf_("L", &nn, a.data(), &nn, &info);
        if (info != 0) return false;
        zero_lower();
        dpotri_("L", &nn, a.data(), &nn, &info);
        if (info != 0) return false;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < i; ++j) a[size_t(i * n + j)] = a[size_t(j * n + i)];
        if (h_inv) *h_inv = a;
        dpotrf_("L", &nn, a.data(), &nn, &info);
        if (info != 0) return false;
        zero_lower();
        u->assign(a.begin(), a.end());  // never null: this device keeps no factors
        return true;
    }
    void gemm(ConstMatF a, Trans ta, ConstMatF b, Trans tb, MatF c, float beta) const override {
        gemm_f32(a, ta, b, tb, c, beta);
    }
    double sweep(const SweepCall& call) const override { return gpu.sweep(call); }
    std::string name() const override { return "cpu factors, cuda sweep"; }
    CudaSolverDevice gpu;
};

std::vector<float> random_normal(size_t n, uint64_t seed) {
    std::vector<float> v(n);
    fill_gaussian(v.data(), int64_t(n), seed);
    return v;
}

// 2/T·XᵀX of T random rows with a few strong and a few dead inputs (a realistic, ill-conditioned Hessian).
std::vector<float> random_hessian(int64_t n, uint64_t seed, bool dead = true) {
    const int64_t t = 3 * n;
    std::vector<float> x = random_normal(size_t(t * n), seed);
    for (int64_t r = 0; r < t; ++r) {
        x[size_t(r * n + 3)] *= 8.0f;
        if (dead) x[size_t(r * n + n - 2)] = 0.0f;
    }
    std::vector<float> h(size_t(n * n));
    gemm_f32(ConstMatF(x.data(), t, n), Trans::yes, ConstMatF(x.data(), t, n), Trans::no, MatF(h.data(), n, n));
    for (float& v : h) v *= 2.0f / float(t);
    return h;
}

struct Problem {
    std::vector<float> w, h, d;
    LayerProblem p;
};

Problem make_problem(int64_t rows, int64_t cols, uint64_t seed, bool with_d) {
    Problem pr;
    pr.w = random_normal(size_t(rows * cols), seed);
    for (float& v : pr.w) v *= 0.05f;
    pr.h = random_hessian(cols, seed + 1);
    if (with_d) {
        pr.d = random_normal(size_t(cols * cols), seed + 2);
        for (float& v : pr.d) v *= 0.002f;
    }
    pr.p.w = pr.w.data();
    pr.p.rows = rows;
    pr.p.cols = cols;
    pr.p.h_in = pr.h.data();
    pr.p.d = with_d ? pr.d.data() : nullptr;
    pr.p.name = "test";
    return pr;
}

int64_t code_differences(const QuantizedWeight& a, const QuantizedWeight& b) {
    int64_t n = 0;
    for (size_t i = 0; i < a.codes.size(); ++i) n += a.codes[i] != b.codes[i];
    return n;
}

bool same_grids(const QuantizedWeight& a, const QuantizedWeight& b) {
    if (a.grids.size() != b.grids.size()) return false;
    for (size_t i = 0; i < a.grids.size(); ++i)
        if (a.grids[i].scale != b.grids[i].scale || a.grids[i].zero != b.grids[i].zero ||
            a.grids[i].offset != b.grids[i].offset)
            return false;
    return true;
}

TEST(PtqCuda, InverseCholeskyMatchesLapack) {
    SKIP_WITHOUT_GPU();
    const CudaSolverDevice dev;
    for (int64_t n : {5, 64, 200}) {
        const std::vector<float> h = random_hessian(n, 40 + uint64_t(n));
        const InverseCholesky cpu = inverse_cholesky(h.data(), n, 0.01, 1.0f, "t");
        const InverseCholesky gpu = inverse_cholesky(h.data(), n, 0.01, 1.0f, "t", &dev);
        ASSERT_EQ(gpu.u.size(), cpu.u.size());
        double du = 0, mu = 0, dh = 0, mh = 0;
        for (size_t i = 0; i < cpu.u.size(); ++i) {
            du = std::max(du, std::fabs(double(cpu.u[i]) - double(gpu.u[i])));
            mu = std::max(mu, std::fabs(double(cpu.u[i])));
            dh = std::max(dh, std::fabs(cpu.h_inv[i] - gpu.h_inv[i]));
            mh = std::max(mh, std::fabs(cpu.h_inv[i]));
        }
        EXPECT_LT(du / mu, 1e-6) << "n = " << n;   // FP64 factors, rounded to FP32
        EXPECT_LT(dh / mh, 1e-10) << "n = " << n;  // FP64 inverses, different operation order
        EXPECT_EQ(gpu.dead, cpu.dead);
        EXPECT_EQ(gpu.retries, cpu.retries);
        for (int64_t i = 1; i < n; ++i) EXPECT_EQ(gpu.u[size_t(i * n)], 0.0f);  // lower triangle zero
    }
    // A rank-2 Hessian is factored with the default damping on both, and an all-zero one (every input
    // dead) gives the same U. (With a damping of 1e-12 LAPACK still factors a rank-2 16 × 16 H while cuSOLVER
    // reports it singular and the retries run out: near that boundary the devices may differ by retries.)
    const int64_t n = 16;
    std::vector<float> x = random_normal(size_t(2 * n), 9);
    std::vector<float> h(size_t(n * n));
    gemm_f32(ConstMatF(x.data(), 2, n), Trans::yes, ConstMatF(x.data(), 2, n), Trans::no, MatF(h.data(), n, n));
    const InverseCholesky cpu = inverse_cholesky(h.data(), n, 0.01, 1.0f, "t");
    const InverseCholesky gpu = inverse_cholesky(h.data(), n, 0.01, 1.0f, "t", &dev);
    EXPECT_EQ(gpu.retries, cpu.retries);
    const std::vector<float> zero(size_t(n * n), 0.0f);
    EXPECT_EQ(inverse_cholesky(zero.data(), n, 0.01, 0.5f, "t", &dev).u, inverse_cholesky(zero.data(), n, 0.01, 0.5f, "t").u);
    // NaN is refused before any device work.
    h[5] = NAN;
    testing_util::expect_error(ErrorKind::input, [&] { inverse_cholesky(h.data(), n, 0.01, 1.0f, "t", &dev); });
}

TEST(PtqCuda, GemmMatchesCpu) {
    SKIP_WITHOUT_GPU();
    const CudaSolverDevice dev;
    const int64_t m = 37, k = 53, n = 29;
    const std::vector<float> a = random_normal(size_t(k * (m + 3)), 1), b = random_normal(size_t(k * n), 2);
    std::vector<float> c0 = random_normal(size_t(m * (n + 5)), 3), c1 = c0;
    // a stored transposed with a leading dimension > its width; c with a leading dimension; beta = 1.
    gemm_f32(ConstMatF(a.data(), k, m, m + 3), Trans::yes, ConstMatF(b.data(), k, n), Trans::no, MatF(c0.data(), m, n, n + 5), 1.0f);
    dev.gemm(ConstMatF(a.data(), k, m, m + 3), Trans::yes, ConstMatF(b.data(), k, n), Trans::no, MatF(c1.data(), m, n, n + 5), 1.0f);
    double diff = 0;
    for (size_t i = 0; i < c0.size(); ++i) diff = std::max(diff, std::fabs(double(c0[i]) - double(c1[i])));
    EXPECT_LT(diff, 1e-4);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t j = n; j < n + 5; ++j) EXPECT_EQ(c0[size_t(r * (n + 5) + j)], c1[size_t(r * (n + 5) + j)]);  // untouched
}

// The layer objective on the GPU (held statistics read in place, or uploaded per call) equals the CPU's up
// to FP32 summation order: one-sided with F2's D, two-sided (H_out per head), per-head H_in (v with block_v).
TEST(PtqCuda, LayerObjectiveMatchesCpu) {
    SKIP_WITHOUT_GPU();
    const CudaSolverDevice dev;
    const int64_t rows = 24, cols = 96, hd = 8, heads = rows / hd;
    Problem pr = make_problem(rows, cols, 41, true);
    std::vector<float> q = pr.w;
    std::vector<float> noise = random_normal(q.size(), 42);
    for (size_t i = 0; i < q.size(); ++i) q[i] += 0.01f * noise[i];
    std::vector<float> h_out(size_t(heads * hd * hd)), h_heads(size_t(heads) * size_t(cols * cols)), d_heads = h_heads;
    for (int64_t h = 0; h < heads; ++h) {
        const std::vector<float> ho = random_hessian(hd, 50 + uint64_t(h), false), hi = random_hessian(cols, 60 + uint64_t(h));
        std::copy(ho.begin(), ho.end(), h_out.begin() + h * hd * hd);
        std::copy(hi.begin(), hi.end(), h_heads.begin() + h * cols * cols);
        for (int64_t i = 0; i < cols * cols; ++i) d_heads[size_t(h * cols * cols + i)] = 0.5f * pr.d[size_t(i)];
    }
    LayerProblem one = pr.p, two = pr.p, per_head = pr.p;
    two.h_out = h_out.data();
    two.head_rows = hd;
    per_head.h_in = nullptr;
    per_head.h_in_heads = h_heads.data();
    per_head.d = d_heads.data();
    per_head.head_rows = hd;
    for (const bool held : {false, true}) {
        if (held)
            dev.hold_inputs({ConstMatF(pr.h.data(), cols, cols), ConstMatF(pr.d.data(), cols, cols),
                             ConstMatF(h_heads.data(), 1, int64_t(h_heads.size())),
                             ConstMatF(d_heads.data(), 1, int64_t(d_heads.size()))});
        for (const LayerProblem* lp : {&one, &two, &per_head}) {
            const LayerObjective c = layer_objective_and_scale(*lp, q, nullptr);
            const LayerObjective g = layer_objective_and_scale(*lp, q, &dev);
            EXPECT_NEAR(g.objective, c.objective, 1e-4 * std::fabs(c.objective)) << (held ? "held" : "uploaded");
            EXPECT_NEAR(g.scale, c.scale, 1e-5 * std::fabs(c.scale)) << (held ? "held" : "uploaded");
            EXPECT_GT(c.objective, 0.0);
        }
    }
    dev.hold_inputs({});
}

// F3b's per-channel products on the GPU (one-sided rows with one input Hessian or one per head, two-sided heads;
// with and without F2's D) equal the CPU's up to FP32 summation order, and a per-channel TurboBoA solve with F3b
// reaches the CPU's objective on the GPU, lower than without F3b.
TEST(PtqCuda, ScaleRefineProductsMatchCpu) {
    SKIP_WITHOUT_GPU();
    const CudaSolverDevice dev;
    const int64_t rows = 24, cols = 96, hd = 8, heads = rows / hd;
    Problem pr = make_problem(rows, cols, 81, true);
    const std::vector<float> z = random_normal(size_t(rows * cols), 82);
    std::vector<float> diff = random_normal(size_t(rows * cols), 83);
    for (float& v : diff) v *= 0.01f;
    std::vector<float> h_heads(size_t(heads * cols * cols)), d_heads(h_heads.size());
    for (int64_t h = 0; h < heads; ++h) {
        const std::vector<float> hi = random_hessian(cols, 90 + uint64_t(h));
        std::copy(hi.begin(), hi.end(), h_heads.begin() + h * cols * cols);
        for (int64_t i = 0; i < cols * cols; ++i) d_heads[size_t(h * cols * cols + i)] = 0.5f * pr.d[size_t(i)];
    }
    struct Case {
        int64_t hd;
        bool per_head, with_d;
    };
    for (const Case& cs : {Case{1, false, false}, Case{1, false, true}, Case{1, true, true}, Case{hd, false, false},
                           Case{hd, false, true}}) {
        ScaleRefineProducts call;
        call.z = z.data();
        call.diff = diff.data();
        call.w = pr.w.data();
        call.rows = rows;
        call.cols = cols;
        call.hd = cs.hd;
        call.hin_rows = cs.per_head ? hd : rows;
        call.h_in = cs.per_head ? h_heads.data() : pr.h.data();
        call.d = cs.with_d ? (cs.per_head ? d_heads.data() : pr.d.data()) : nullptr;
        const size_t pairs = size_t(rows * cs.hd);
        std::vector<double> nc(pairs), gc(pairs), ng(pairs), gg(pairs);
        call.n = nc.data();
        call.g = gc.data();
        scale_refine_products(call, nullptr);
        call.n = ng.data();
        call.g = gg.data();
        ASSERT_TRUE(dev.scale_refine_products(call));
        for (const auto& [c, g, what] : {std::tuple{&nc, &ng, "N"}, std::tuple{&gc, &gg, "G"}}) {
            double top = 0, worst = 0;
            for (size_t i = 0; i < pairs; ++i) {
                top = std::max(top, std::fabs((*c)[i]));
                worst = std::max(worst, std::fabs((*c)[i] - (*g)[i]));
            }
            EXPECT_GT(top, 0.0);
            EXPECT_LE(worst, 1e-4 * top) << what << " hd " << cs.hd << " per-head " << cs.per_head << " d " << cs.with_d;
        }
    }
    SolverOptions o;
    o.grid = parse_grid("int3", 0, false);
    o.refine_scales = true;
    const QuantizedWeight cpu = solve_turboboa(pr.p, o);
    o.device = &dev;
    const QuantizedWeight gpu = solve_turboboa(pr.p, o);
    o.refine_scales = false;
    const QuantizedWeight unrefined = solve_turboboa(pr.p, o);
    const double oc = layer_objective(pr.p, cpu.dequantize()), og = layer_objective(pr.p, gpu.dequantize()),
                 ou = layer_objective(pr.p, unrefined.dequantize());
    std::printf("  one-sided int3 per channel: objective cpu %.6g, gpu %.6g, gpu without F3b %.6g\n", oc, og, ou);
    EXPECT_NEAR(og, oc, 1e-3 * std::fabs(oc));
    EXPECT_LT(og, ou);
}

// The grid search's candidate scores on the GPU: each candidate's Δ·H·Δᵀ equals a double-precision quadratic
// form to FP32 product accuracy, and the grids fitted with the GPU scorer are (nearly always) the CPU's — where
// a pick differs, its exact score is within FP32 summation noise of the CPU pick's.
TEST(PtqCuda, GridCandidateScoresMatchCpu) {
    SKIP_WITHOUT_GPU();
    const CudaSolverDevice dev;
    const int64_t rows = 40, cols = 256;
    std::vector<float> w = random_normal(size_t(rows * cols), 21);
    for (float& v : w) v *= 0.05f;
    const std::vector<float> h = random_hessian(cols, 22);
    for (const GridSpec& g : {parse_grid("int2", 0, false), parse_grid("int3", 64, true), parse_grid("int4", 0, false),
                              parse_grid("int4", 32, false)}) {
        const int64_t gs = g.group_size(cols), per_row = cols / gs;
        const auto exact = [&](int64_t r, int64_t j, const GroupGrid& gg) {
            const float* x = w.data() + r * cols + j * gs;
            const float* hb = h.data() + j * gs * cols + j * gs;
            std::vector<double> d(static_cast<size_t>(gs));
            for (int64_t t = 0; t < gs; ++t) d[size_t(t)] = double(grid_value(g, gg, grid_nearest(g, gg, x[t]))) - double(x[t]);
            double q = 0.0;
            for (int64_t t = 0; t < gs; ++t)
                for (int64_t k = 0; k < gs; ++k) q += d[size_t(t)] * double(hb[t * cols + k]) * d[size_t(k)];
            return q;
        };
        // The raw scores of a few candidates per row (group 0), against the double quadratic form.
        const int64_t k = 3;
        std::vector<GroupGrid> cand(size_t(rows * k));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < k; ++c) cand[size_t(r * k + c)] = {0.004f * float(c + 1) * float(g.bits), float(c), 0.0f};
        std::vector<double> scores(size_t(rows * k));
        dev.score_int_candidates(g, w.data(), cols, rows, gs, h.data(), cols, 0, cand.data(), k, scores.data());
        for (int64_t a = 0; a < rows * k; ++a) {
            const double want = exact(a / k, 0, cand[size_t(a)]);
            EXPECT_NEAR(scores[size_t(a)], want, 1e-5 * std::fabs(want) + 1e-12) << g.describe() << " candidate " << a;
        }
        // Whole fits: the CPU's stacked search vs the GPU scorer's.
        const SpanGrids cpu = fit_span_grids(g, w.data(), cols, rows, cols, h.data(), cols);
        const SpanGrids gpu = fit_span_grids(g, w.data(), cols, rows, cols, h.data(), cols, dev.grid_scorer(), 5);
        const SpanGrids again = fit_span_grids(g, w.data(), cols, rows, cols, h.data(), cols, dev.grid_scorer(), 5);  // cached H
        ASSERT_EQ(gpu.grids.size(), cpu.grids.size());
        int64_t same = 0;
        for (int64_t i = 0; i < int64_t(cpu.grids.size()); ++i) {
            const GroupGrid &a = cpu.grids[size_t(i)], &b = gpu.grids[size_t(i)];
            EXPECT_TRUE(b.scale == again.grids[size_t(i)].scale && b.zero == again.grids[size_t(i)].zero);
            if (a.scale == b.scale && a.zero == b.zero) {
                ++same;
                continue;
            }
            const double sa = exact(i / per_row, i % per_row, a), sb = exact(i / per_row, i % per_row, b);
            EXPECT_NEAR(sb, sa, 1e-5 * sa) << g.describe() << " group " << i;
        }
        std::printf("  %s: %lld of %zu grids identical\n", g.describe().c_str(), (long long)same, cpu.grids.size());
        EXPECT_GE(double(same), 0.9 * double(cpu.grids.size())) << g.describe();
    }
}

// Every grid kind, one lazy block (cols ≤ 128): the GPU sweep is the CPU sweep, bit for bit.
TEST(PtqCuda, SweepInOneBlockIsBitExact) {
    SKIP_WITHOUT_GPU();
    const CpuFactorGpuSweep hybrid;
    struct Case {
        GridSpec g;
        const char* what;
    };
    const std::vector<Case> cases = {
        {parse_grid("int4", 32, false, GridSearch::minmax), "int4 g32 asym (grids at the group)"},
        {parse_grid("int3", 0, true, GridSearch::mse), "int3 per channel sym"},
        {parse_grid("int2", 64, false, GridSearch::hessian), "int2 g64 hessian"},
        {parse_grid("mxfp4"), "mxfp4 (level table)"},
        {parse_grid("q4_1"), "q4_1 (offset)"},
        {parse_grid("iq4_nl"), "iq4_nl"},
        {parse_grid("q8_0"), "q8_0"},
    };
    for (const Case& cs : cases)
        for (bool with_d : {false, true})
            for (bool act_order : {false, true}) {
                Problem pr = make_problem(45, 128, 100 + uint64_t(with_d) + 2 * uint64_t(act_order), with_d);
                SolverOptions o;
                o.grid = cs.g;
                o.sweep.act_order = act_order;
                const QuantizedWeight cpu = solve_gptq(pr.p, o);
                o.device = &hybrid;
                const QuantizedWeight gpu = solve_gptq(pr.p, o);
                EXPECT_EQ(code_differences(cpu, gpu), 0) << cs.what << " d " << with_d << " act-order " << act_order;
                EXPECT_TRUE(same_grids(cpu, gpu)) << cs.what;
            }
    // TurboBoA's two-sided row blocks (q with H_out, F2, F3b), one block of columns.
    Problem pr = make_problem(32, 96, 7, true);
    std::vector<float> hout = random_hessian(16, 77, false);
    std::vector<float> hout2(2 * 16 * 16);
    std::copy(hout.begin(), hout.end(), hout2.begin());
    std::copy(hout.begin(), hout.end(), hout2.begin() + 256);
    pr.p.h_out = hout2.data();
    pr.p.head_rows = 16;
    SolverOptions o;
    o.grid = parse_grid("int3", 32, false);
    o.row_block = 4;
    o.refine_scales = true;
    const QuantizedWeight cpu = solve_turboboa(pr.p, o);
    o.device = &hybrid;
    const QuantizedWeight gpu = solve_turboboa(pr.p, o);
    EXPECT_EQ(code_differences(cpu, gpu), 0);
    EXPECT_TRUE(same_grids(cpu, gpu));
}

// Several lazy blocks and the full GPU device: the same solution up to FP32 summation order.
TEST(PtqCuda, SweepAcrossBlocksMatchesCpu) {
    SKIP_WITHOUT_GPU();
    const CudaSolverDevice dev;
    for (const char* fmt : {"int4", "q4_k", "mxfp4"}) {
        Problem pr = make_problem(70, 512, 300, false);
        SolverOptions o;
        o.grid = std::string(fmt) == "int4" ? parse_grid("int4", 128, false) : parse_grid(fmt);
        const QuantizedWeight cpu = solve_gptq(pr.p, o);
        o.device = &dev;
        const QuantizedWeight gpu = solve_gptq(pr.p, o);
        const double lc = layer_objective(pr.p, cpu.dequantize()), lg = layer_objective(pr.p, gpu.dequantize(), &dev);
        const double differ = double(code_differences(cpu, gpu)) / double(cpu.codes.size());
        std::printf("  %s: objective cpu %.6g gpu %.6g, codes differing %.4f%%\n", fmt, lc, lg, 100.0 * differ);
        EXPECT_LT(differ, 0.01) << fmt;
        EXPECT_NEAR(lg, lc, 0.01 * lc) << fmt;
        const QuantizedWeight rtn = solve_rtn(pr.p, o.grid);
        EXPECT_LT(lg, layer_objective(pr.p, rtn.dequantize())) << fmt;  // still a GPTQ solution
    }
}

LlamaModel ptq_model(uint64_t seed = 3) {
    LlamaModel m;
    m.config = tiny_llama_config(false, true);
    m.config.ffn_size = 64;
    m.config.rope_pairing = RopePairing::adjacent;
    m.weights = random_llama_weights(m.config, seed, 0.3f);
    return m;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0, s = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
        s = std::max(s, std::fabs(double(b[i])));
    }
    return s > 0 ? m / s : m;
}

// The CPU's and the GPU's calibration paths over the same 3 windows of 24 tokens of m (Xfp too when `cross`).
struct BothPaths {
    std::unique_ptr<CalibrationPaths> cpu, gpu;
};
BothPaths both_paths(const LlamaModel& m, bool cross, CudaPrecision precision, const QuantSpec& activations = {},
                     ValueProducts value_products = ValueProducts::automatic) {
    const int64_t S = 3, L = 24;
    const std::vector<int32_t> windows = test::random_tokens(S * L, m.config.vocab_size, 5);
    BothPaths b{cpu_calibration_paths(m.config, 2, activations),
                cuda_calibration_paths(m.config, 2, precision, activations, value_products)};
    b.cpu->embed(m, windows, S, L, cross);
    b.gpu->embed(m, windows, S, L, cross);
    return b;
}

// Both paths propagate a perturbed ("quantized") copy of block l; their activations afterwards agree within
// tol_q (the quantized path) and tol_fp (the full-precision one).
void expect_same_propagation(CalibrationPaths& cpu, CalibrationPaths& gpu, const LlamaModel& m, int64_t l, double tol_q,
                             double tol_fp) {
    BlockWeights q = m.weights.blocks[size_t(l)];
    for (float& v : q.wq) v *= 0.9f;
    cpu.propagate(q, l);
    gpu.propagate(q, l);
    std::vector<float> xq0, xfp0, xq1, xfp1;
    cpu.save(xq0, xfp0);
    gpu.save(xq1, xfp1);
    EXPECT_LT(max_rel(xq1, xq0), tol_q) << "block " << l;
    EXPECT_LT(max_rel(xfp1, xfp0), tol_fp) << "block " << l;
}

// block_v's products by query head and by KV group (ValueProducts) both give the CPU's sums.
TEST(PtqCuda, CalibrationStatisticsMatchCpu) {
    SKIP_WITHOUT_GPU();
    const LlamaModel m = ptq_model();
    for (ValueProducts vp : {ValueProducts::by_head, ValueProducts::by_group}) {
    SCOPED_TRACE(vp == ValueProducts::by_head ? "block_v by head" : "block_v by group");
    const auto [cpu, gpu] = both_paths(m, true, CudaPrecision::fp32, {}, vp);
    const BlockStatsOptions all{true, true, true};
    for (int64_t l = 0; l < 2; ++l) {
        const BlockStatistics a = cpu->statistics(m.weights.blocks[size_t(l)], l, all);
        const BlockStatistics b = gpu->statistics(m.weights.blocks[size_t(l)], l, all);
        EXPECT_EQ(a.tokens, b.tokens);
        const std::vector<std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>> fields = {
            {"h_attn", {&a.h_attn, &b.h_attn}}, {"h_o", {&a.h_o, &b.h_o}},       {"h_ffn", {&a.h_ffn, &b.h_ffn}},
            {"h_down", {&a.h_down, &b.h_down}}, {"h_out_q", {&a.h_out_q, &b.h_out_q}}, {"h_out_k", {&a.h_out_k, &b.h_out_k}},
            {"h_v", {&a.h_v, &b.h_v}},           {"d_attn", {&a.d_attn, &b.d_attn}}, {"d_o", {&a.d_o, &b.d_o}},
            {"d_ffn", {&a.d_ffn, &b.d_ffn}},     {"d_down", {&a.d_down, &b.d_down}}, {"d_v", {&a.d_v, &b.d_v}}};
        for (const auto& [name, pair] : fields) {
            ASSERT_FALSE(pair.first->empty()) << name;
            // D is a difference of two paths: compare it to the scale of the Hessian it corrects.
            EXPECT_LT(max_rel(*pair.second, *pair.first), name[0] == 'd' ? 1e-3 : 1e-4) << name << " block " << l;
        }
        expect_same_propagation(*cpu, *gpu, m, l, 1e-5, 1e-5);
    }
    }
}

// True-sequential passes: one input at a time on a quantized path that differs from the full-precision block
// (its own upload), Xfp advanced only by the last pass; every measured statistic as the CPU's, the others empty,
// and both paths' activations afterwards as the CPU's.
TEST(PtqCuda, CalibrationStatisticsByInputMatchCpu) {
    SKIP_WITHOUT_GPU();
    const LlamaModel m = ptq_model();
    const auto [cpu, gpu] = both_paths(m, true, CudaPrecision::fp32);
    const BlockWeights& fp = m.weights.blocks[0];
    BlockWeights partly = fp;  // "q/k/v/o quantized"
    for (std::vector<float>* w : {&partly.wq, &partly.wk, &partly.wv, &partly.wo})
        for (float& v : *w) v *= 0.9f;
    for (const BlockInput input : {attention_input, attention_output, mlp_input, mlp_hidden}) {
        BlockStatsOptions so{true, true, true};
        so.inputs = input;
        so.advance_full_precision = input == mlp_hidden;
        const BlockStatistics a = cpu->statistics(fp, 0, so, &partly);
        const BlockStatistics b = gpu->statistics(fp, 0, so, &partly);
        for (const auto& [name, pa, pb] :
             {std::tuple{"h_attn", &a.h_attn, &b.h_attn}, std::tuple{"h_o", &a.h_o, &b.h_o},
              std::tuple{"h_ffn", &a.h_ffn, &b.h_ffn}, std::tuple{"h_down", &a.h_down, &b.h_down},
              std::tuple{"h_out_q", &a.h_out_q, &b.h_out_q}, std::tuple{"h_v", &a.h_v, &b.h_v},
              std::tuple{"d_attn", &a.d_attn, &b.d_attn}, std::tuple{"d_o", &a.d_o, &b.d_o},
              std::tuple{"d_ffn", &a.d_ffn, &b.d_ffn}, std::tuple{"d_down", &a.d_down, &b.d_down},
              std::tuple{"d_v", &a.d_v, &b.d_v}}) {
            ASSERT_EQ(pa->empty(), pb->empty()) << name << " input " << int(input);
            if (!pa->empty()) EXPECT_LT(max_rel(*pb, *pa), name[0] == 'd' ? 1e-3 : 1e-4) << name << " input " << int(input);
        }
        EXPECT_FALSE(a.h_attn.empty() && a.h_o.empty() && a.h_ffn.empty() && a.h_down.empty());
    }
    expect_same_propagation(*cpu, *gpu, m, 0, 1e-5, 1e-5);
}

// BF16 calibration: the input Hessians are sums of the BF16 GEMM inputs on the tensor cores, so they equal
// the FP32 statistics only to BF16 accuracy (8 significant bits per input, compounded through the block).
TEST(PtqCuda, CalibrationStatisticsBf16NearCpu) {
    SKIP_WITHOUT_GPU();
    const LlamaModel m = ptq_model();
    const auto [cpu, gpu] = both_paths(m, false, CudaPrecision::bf16);
    const BlockStatistics a = cpu->statistics(m.weights.blocks[0], 0, BlockStatsOptions{});
    const BlockStatistics b = gpu->statistics(m.weights.blocks[0], 0, BlockStatsOptions{});
    for (const auto& [name, pa, pb] : {std::tuple{"h_attn", &a.h_attn, &b.h_attn}, std::tuple{"h_o", &a.h_o, &b.h_o},
                                       std::tuple{"h_ffn", &a.h_ffn, &b.h_ffn}, std::tuple{"h_down", &a.h_down, &b.h_down}}) {
        const double rel = max_rel(*pb, *pa);
        std::printf("  bf16 %s: max relative difference %.2e\n", name, rel);
        EXPECT_LT(rel, 3e-2) << name;
        const int64_t n = int64_t(std::lround(std::sqrt(double(pb->size()))));
        for (int64_t i = 0; i < n; ++i)  // exactly symmetric after the full GEMM
            for (int64_t j = 0; j < i; ++j) ASSERT_EQ((*pb)[size_t(i * n + j)], (*pb)[size_t(j * n + i)]) << name;
    }
    EXPECT_GT(gpu->phases().forwards, 0.0);
    EXPECT_GT(gpu->phases().products, 0.0);
}

// BF16 calibration with block_v and F2: the value Hessians and the cross terms run on the TF32 tensor cores over
// the BF16 forward's activations. After a perturbed block 0 the two paths differ, so D ≠ 0 at block 1. H_v is a
// Hessian like the input ones (BF16 accuracy, 3e-2). D is a difference of the two paths, each rounded by its own
// BF16 forward (2^-9 of |X| per element) against a 10 % perturbation of wq: compared to the scale of the Hessian
// it corrects (max |H|), as the FP32 test does, that noise is ≈ 2^-9·|X|² / |X|² per entry, far under 2e-2.
TEST(PtqCuda, CalibrationStatisticsBf16BlockVAndCrossNearCpu) {
    SKIP_WITHOUT_GPU();
    const LlamaModel m = ptq_model();
    for (ValueProducts vp : {ValueProducts::by_head, ValueProducts::by_group}) {
    SCOPED_TRACE(vp == ValueProducts::by_head ? "block_v by head" : "block_v by group");
    const auto [cpu, gpu] = both_paths(m, true, CudaPrecision::bf16, {}, vp);
    const BlockStatsOptions all{true, true, true};
    BlockWeights q0 = m.weights.blocks[0];
    for (float& v : q0.wq) v *= 0.9f;
    cpu->propagate(q0, 0);
    gpu->propagate(q0, 0);
    const BlockStatistics a = cpu->statistics(m.weights.blocks[1], 1, all);
    const BlockStatistics b = gpu->statistics(m.weights.blocks[1], 1, all);
    const auto max_abs = [](const std::vector<float>& v) {
        double mx = 0;
        for (float x : v) mx = std::max(mx, double(std::fabs(x)));
        return mx;
    };
    ASSERT_GT(max_abs(a.d_attn), 0.0);  // the perturbation reached block 1
    const double rel_hv = max_rel(b.h_v, a.h_v);
    std::printf("  bf16 + tf32 h_v: max relative difference %.2e\n", rel_hv);
    EXPECT_LT(rel_hv, 3e-2);
    for (const auto& [name, pd, ph, pdg] : {std::tuple{"d_attn", &a.d_attn, &a.h_attn, &b.d_attn},
                                            std::tuple{"d_down", &a.d_down, &a.h_down, &b.d_down},
                                            std::tuple{"d_v", &a.d_v, &a.h_v, &b.d_v}}) {
        ASSERT_EQ(pd->size(), pdg->size()) << name;
        double diff = 0;
        for (size_t i = 0; i < pd->size(); ++i) diff = std::max(diff, std::fabs(double((*pdg)[i]) - double((*pd)[i])));
        const double rel = diff / max_abs(*ph);
        std::printf("  bf16 + tf32 %s: max difference %.2e of max |H|\n", name, rel);
        EXPECT_LT(rel, 2e-2) << name;
    }
    }
}

// W·A calibration (--act-bits): the quantized path runs activation-quantized linears and its statistics are
// of the quantized inputs, on both devices. A per-token INT8 grid rounds the two devices' FP32 activations
// alike except where one straddles a rounding boundary (a flip moves one entry by a step, ≈ 1e-3 of the
// sums here); observed on the H200: ≤ 1.7e-7 for H, ≤ 2.5e-5 for D, no flip.
TEST(PtqCuda, ActivationQuantizedCalibrationMatchesCpu) {
    SKIP_WITHOUT_GPU();
    const LlamaModel m = ptq_model();
    const QuantSpec acts = parse_activation_spec("8");
    const auto [cpu, gpu] = both_paths(m, true, CudaPrecision::fp32, acts);
    EXPECT_EQ(gpu->activations().describe(), acts.describe());
    const BlockStatsOptions all{true, true, true};
    for (int64_t l = 0; l < 2; ++l) {
        const BlockStatistics a = cpu->statistics(m.weights.blocks[size_t(l)], l, all);
        const BlockStatistics b = gpu->statistics(m.weights.blocks[size_t(l)], l, all);
        for (const auto& [name, pa, pb] : {std::tuple{"h_attn", &a.h_attn, &b.h_attn}, std::tuple{"h_down", &a.h_down, &b.h_down},
                                           std::tuple{"h_v", &a.h_v, &b.h_v}, std::tuple{"d_ffn", &a.d_ffn, &b.d_ffn}}) {
            const double rel = max_rel(*pb, *pa);
            std::printf("  int8 activations, block %lld %s: max relative difference %.2e\n", (long long)l, name, rel);
            EXPECT_LT(rel, 3e-3) << name << " block " << l;
        }
        expect_same_propagation(*cpu, *gpu, m, l, 3e-3, 1e-5);  // the full-precision path is not quantized
    }
}

TEST(PtqCuda, QuantizeModelMatchesCpu) {
    SKIP_WITHOUT_GPU();
    const LlamaModel m = ptq_model(11);
    const std::string path = test::temp_path("ptq_cuda.gguf");
    test::write_model_gguf(m, "llama", path);
    const std::unique_ptr<ModelReader> reader = ModelReader::open(path);
    const int64_t S = 4, L = 32;
    const std::vector<int32_t> windows = test::random_tokens(S * L, m.config.vocab_size, 3);
    const CudaSolverDevice dev;
    for (const auto& [method, sequential] : {std::pair{PtqMethod::gptq, false}, std::pair{PtqMethod::turboboa, false},
                                             std::pair{PtqMethod::gptq, true}, std::pair{PtqMethod::turboboa, true}}) {
        PtqOptions o;
        o.method = method;
        o.true_sequential = sequential;
        o.grid = parse_grid("int3", 32, false);
        o.calibration.samples = S;
        o.calibration.length = L;
        o.batch = 3;
        PtqReport rc, rg;
        const QuantizedModel cpu = quantize_model(*reader, windows, o, &rc);
        o.solver_device = &dev;
        o.calibration_paths = [](const LlamaConfig& c, int64_t batch) { return cuda_calibration_paths(c, batch); };
        const QuantizedModel gpu = quantize_model(*reader, windows, o, &rg);
        EXPECT_EQ(rg.device, "cuda fp32");
        int64_t codes = 0, differ = 0;
        double loss_c = 0, loss_g = 0;
        for (const auto& [name, qc] : cpu.linears) {
            const QuantizedWeight& qg = gpu.linears.at(name);
            codes += int64_t(qc.codes.size());
            differ += code_differences(qc, qg);
        }
        for (size_t i = 0; i < rc.layers.size(); ++i) {
            loss_c += rc.layers[i].loss;
            loss_g += rg.layers[i].loss;
        }
        std::printf("  %s%s: codes differing %lld of %lld, loss cpu %.6g gpu %.6g\n", ptq_method_name(method),
                    sequential ? " true-sequential" : "", (long long)differ, (long long)codes, loss_c, loss_g);
        EXPECT_LT(double(differ) / double(codes), 0.02) << ptq_method_name(method);
        EXPECT_NEAR(loss_g, loss_c, 0.02 * loss_c) << ptq_method_name(method);
    }
}

}  // namespace
}  // namespace lowbit
