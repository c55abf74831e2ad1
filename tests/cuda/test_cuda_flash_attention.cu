// test_cuda_flash_attention.cu — flash_attention_forward_cuda / flash_attention_backward_cuda against the CPU
// references attention_causal (model/forward_cpu.h) and attention_causal_backward (train/backward_cpu.h), in
// FP32 on the same BF16-rounded inputs, and the lse against a double-precision log-sum-exp computed here.
// Shapes: tiny, one token, odd n_tok (partial last tiles: 77, 129, 130, 200), exactly one tile plus one (65),
// several of the forward's 128-query tiles (300 at hd 32, 513 at hd 64: query tiles whose last key tiles are
// hidden from some warps, partial pieces of the diagonal skipped), head_dim 16/32/64/128, MHA and GQA
// (groups 2, 3, 4), several sequences, a sharply peaked softmax (queries ×4: the running max jumps between
// key tiles). Also: two runs bit-identical (the header's determinism
// contract), and the argument errors (these need no GPU).
//
// Tolerances, from the numerics in flash_attention_cuda.cu: scores and dP are exact BF16 products summed in
// FP32 (differences from the CPU ~1e-6 relative); what differs visibly is BF16 rounding — of P before P·V and
// Pᵀ·dO, of dS before dS·K and dSᵀ·Q, of the output O that D = rowsum(dO⊙O) is computed from, and of every
// output. Each rounding is a relative error ≤ 2^-8 (half an ulp of 8 significant bits), RMS 2^-8/√3, and
// independent between elements, so each result's RMS error is ≈ 2^-8 of its RMS value (two or three such
// terms add in quadrature: ≈ 0.004); we allow 2^-7 (0.0078). The largest error over a few thousand values
// is a few of those standard deviations while the largest value is a few RMS values: we allow 2^-6 of
// max|value| for out and 2^-5 for the gradients (their dS terms cancel partly: Σ_j dS_ij = 0). A wrong
// fragment layout, mask or rescale gives errors of tens of percent. lse: FP32 scores, exp2f/log2f (2 ulp):
// |Δ| ≤ 1e-4·max(1, |lse|).
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/flash_attention_cuda.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "model/forward_cpu.h"
#include "train/backward_cpu.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

struct Case {
    const char* name;
    int64_t n_seq, n_tok, n_heads, n_kv_heads, head_dim;
    float q_gain;  // queries scaled by this before rounding: > 1 sharpens the softmax
};

const Case kCases[] = {
    {"tiny", 2, 64, 4, 2, 16, 1.0f},
    {"one_token", 1, 1, 2, 1, 64, 1.0f},
    {"odd77_hd32_mha", 1, 77, 3, 3, 32, 1.0f},
    {"odd130_hd64_gqa3_3seq", 3, 130, 6, 2, 64, 1.0f},
    {"sharp65_hd64_gqa4", 2, 65, 4, 1, 64, 4.0f},
    {"odd200_hd128_gqa3", 2, 200, 3, 1, 128, 1.0f},
    {"odd129_hd16_sharp", 3, 129, 2, 1, 16, 2.0f},
    {"odd300_hd32_gqa2", 1, 300, 4, 2, 32, 1.0f},
    {"odd513_hd64_sharp", 1, 513, 2, 2, 64, 3.0f},
};

std::string case_label(const Case& c) {
    return std::string(c.name) + " (n_seq " + std::to_string(c.n_seq) + ", n_tok " + std::to_string(c.n_tok) + ", heads " +
           std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + ", hd " + std::to_string(c.head_dim) + ")";
}

// BF16 bit patterns of the inputs and the FP32 values they stand for.
struct Inputs {
    std::vector<uint16_t> q, k, v, d_out;
    std::vector<float> qf, kf, vf, d_outf;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
    const int64_t rows = c.n_seq * c.n_tok;
    std::vector<float> q = gaussian(rows, c.n_heads * c.head_dim, seed);
    for (float& x : q) x *= c.q_gain;
    Inputs in;
    in.q = to_bf16(q);
    in.k = to_bf16(gaussian(rows, c.n_kv_heads * c.head_dim, seed + 1));
    in.v = to_bf16(gaussian(rows, c.n_kv_heads * c.head_dim, seed + 2));
    in.d_out = to_bf16(gaussian(rows, c.n_heads * c.head_dim, seed + 3));
    in.qf = from_bf16(in.q);
    in.kf = from_bf16(in.k);
    in.vf = from_bf16(in.v);
    in.d_outf = from_bf16(in.d_out);
    return in;
}

struct Results {
    std::vector<uint16_t> out, dq, dk, dv;
    std::vector<float> lse;
};

Results run_gpu(const Case& c, const Inputs& in, FlashAttentionBackwardWorkspace& ws) {
    const BatchShape shape{c.n_seq, c.n_tok};
    DeviceBuffer<uint16_t> q = to_device(in.q), k = to_device(in.k), v = to_device(in.v), d_out = to_device(in.d_out);
    DeviceBuffer<uint16_t> out = poisoned<uint16_t>(in.q.size()), dq = poisoned<uint16_t>(in.q.size());
    DeviceBuffer<uint16_t> dk = poisoned<uint16_t>(in.k.size()), dv = poisoned<uint16_t>(in.k.size());
    DeviceBuffer<float> lse = poisoned<float>(size_t(c.n_seq * c.n_heads * c.n_tok));
    flash_attention_forward_cuda(bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), shape, c.n_heads, c.n_kv_heads, c.head_dim, bf16_ptr(out),
                                 lse.data());
    flash_attention_backward_cuda(bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), bf16_ptr(out), lse.data(), bf16_ptr(d_out), shape,
                                  c.n_heads, c.n_kv_heads, c.head_dim, bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv), ws);
    device_sync();
    return {to_host(out), to_host(dq), to_host(dk), to_host(dv), to_host(lse)};
}

// ln Σ_{j ≤ t} e^(q_t·k_j/√hd) per (sequence, head, position), in double: [n_seq, n_heads, n_tok].
std::vector<float> reference_lse(const Case& c, const Inputs& in) {
    const int64_t T = c.n_tok, hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
    const int64_t q_width = c.n_heads * hd, kv_width = c.n_kv_heads * hd;
    const double scale = 1.0 / std::sqrt(double(hd));
    std::vector<float> lse(size_t(c.n_seq * c.n_heads * T));
    std::vector<double> s(static_cast<size_t>(T));
    for (int64_t seq = 0; seq < c.n_seq; ++seq)
        for (int64_t h = 0; h < c.n_heads; ++h)
            for (int64_t t = 0; t < T; ++t) {
                const float* qt = in.qf.data() + (seq * T + t) * q_width + h * hd;
                double mx = -INFINITY;
                for (int64_t j = 0; j <= t; ++j) {
                    const float* kj = in.kf.data() + (seq * T + j) * kv_width + (h / group) * hd;
                    double dot = 0.0;
                    for (int64_t e = 0; e < hd; ++e) dot += double(qt[e]) * double(kj[e]);
                    s[size_t(j)] = dot * scale;
                    mx = std::max(mx, s[size_t(j)]);
                }
                double sum = 0.0;
                for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[size_t(j)] - mx);
                lse[size_t((seq * c.n_heads + h) * T + t)] = float(mx + std::log(sum));
            }
    return lse;
}

// All finite, max|got − want| ≤ max_tol·max|want| and rms(got − want) ≤ rms_tol·rms(want).
::testing::AssertionResult close_to(const std::vector<float>& want, const std::vector<float>& got, double max_tol,
                                    double rms_tol, const std::string& what) {
    if (want.size() != got.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << ", expected " << want.size();
    double max_want = 0, max_err = 0, sum_want = 0, sum_err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << what << ": non-finite value at " << i;
        const double err = std::fabs(double(got[i]) - double(want[i]));
        if (err > max_err) {
            max_err = err;
            worst = i;
        }
        max_want = std::max(max_want, std::fabs(double(want[i])));
        sum_want += double(want[i]) * double(want[i]);
        sum_err += err * err;
    }
    const double rms_want = std::sqrt(sum_want / double(want.size())), rms_err = std::sqrt(sum_err / double(want.size()));
    if (max_err <= max_tol * max_want && rms_err <= rms_tol * rms_want) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": max |Δ| " << max_err << " at " << worst << " (CPU " << want[worst]
                                         << ", GPU " << got[worst] << ") against " << max_tol << "·max|CPU| = "
                                         << max_tol * max_want << "; RMS Δ " << rms_err << " against " << rms_tol
                                         << "·RMS CPU = " << rms_tol * rms_want;
}

constexpr double kRmsTol = 1.0 / 128;          // 2^-7 (see the top of the file)
constexpr double kOutMaxTol = 1.0 / 64;        // 2^-6
constexpr double kGradMaxTol = 1.0 / 32;       // 2^-5
constexpr double kLseTol = 1e-4;

TEST(CudaFlashAttention, MatchesCpuReference) {
    REQUIRE_GPU();
    FlashAttentionBackwardWorkspace ws;  // shared by the cases: grows and is reused
    uint64_t seed = 2024;
    for (const Case& c : kCases) {
        SCOPED_TRACE(case_label(c));
        const Inputs in = make_inputs(c, seed += 16);
        const BatchShape shape{c.n_seq, c.n_tok};
        std::vector<float> out(in.qf.size()), dq(in.qf.size()), dk(in.kf.size()), dv(in.kf.size());
        attention_causal(in.qf.data(), in.kf.data(), in.vf.data(), shape, c.n_heads, c.n_kv_heads, c.head_dim, out.data());
        attention_causal_backward(in.qf.data(), in.kf.data(), in.vf.data(), in.d_outf.data(), shape, c.n_heads, c.n_kv_heads,
                                  c.head_dim, dq.data(), dk.data(), dv.data());
        const std::vector<float> lse = reference_lse(c, in);

        const Results gpu = run_gpu(c, in, ws);
        EXPECT_TRUE(close_to(out, from_bf16(gpu.out), kOutMaxTol, kRmsTol, "out"));
        for (size_t i = 0; i < lse.size(); ++i)
            if (!(std::fabs(gpu.lse[i] - lse[i]) <= kLseTol * std::max(1.0f, std::fabs(lse[i])))) {
                ADD_FAILURE() << "lse[" << i << "]: GPU " << gpu.lse[i] << ", reference " << lse[i];
                break;
            }
        EXPECT_TRUE(close_to(dq, from_bf16(gpu.dq), kGradMaxTol, kRmsTol, "dq"));
        EXPECT_TRUE(close_to(dk, from_bf16(gpu.dk), kGradMaxTol, kRmsTol, "dk"));
        EXPECT_TRUE(close_to(dv, from_bf16(gpu.dv), kGradMaxTol, kRmsTol, "dv"));
    }
}

TEST(CudaFlashAttention, RunsAreBitIdentical) {
    REQUIRE_GPU();
    const Case c{"determinism", 3, 130, 6, 2, 64, 1.0f};  // GQA: dK/dV sum over 3 heads and 3 query tiles
    const Inputs in = make_inputs(c, 77);
    FlashAttentionBackwardWorkspace ws1, ws2;
    const Results a = run_gpu(c, in, ws1), b = run_gpu(c, in, ws2);
    EXPECT_TRUE(bf16_equal(a.out, b.out, "out"));
    EXPECT_TRUE(floats_equal(a.lse, b.lse, "lse"));
    EXPECT_TRUE(bf16_equal(a.dq, b.dq, "dq"));
    EXPECT_TRUE(bf16_equal(a.dk, b.dk, "dk"));
    EXPECT_TRUE(bf16_equal(a.dv, b.dv, "dv"));
}

// The launchers check their arguments before touching the device: no GPU needed.
TEST(CudaFlashAttention, RejectsUnsupportedArguments) {
    for (int64_t hd : {16, 32, 64, 128}) EXPECT_TRUE(flash_attention_head_dim_supported(hd)) << hd;
    for (int64_t hd : {0, 8, 48, 80, 96, 256}) EXPECT_FALSE(flash_attention_head_dim_supported(hd)) << hd;
    const BatchShape shape{1, 64};
    FlashAttentionBackwardWorkspace ws;
    auto forward = [&](int64_t n_heads, int64_t n_kv_heads, int64_t hd) {
        flash_attention_forward_cuda(nullptr, nullptr, nullptr, shape, n_heads, n_kv_heads, hd, nullptr, nullptr);
    };
    auto backward = [&](int64_t n_heads, int64_t n_kv_heads, int64_t hd) {
        flash_attention_backward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, shape, n_heads, n_kv_heads, hd, nullptr,
                                      nullptr, nullptr, ws);
    };
    expect_error(ErrorKind::usage, [&] { forward(4, 2, 48); });
    expect_error(ErrorKind::usage, [&] { forward(4, 2, 256); });
    expect_error(ErrorKind::usage, [&] { backward(4, 2, 96); });
    expect_error(ErrorKind::usage, [&] { forward(5, 2, 64); });   // 5 query heads cannot share 2 key/value heads
    expect_error(ErrorKind::usage, [&] { backward(4, 0, 64); });
}

}  // namespace
