// test_model_cuda.cu — the CUDA forward of Llama-family models against the CPU reference (model/forward_cpu.h):
// each kernel against its reference op (RMSNorm, RoPE both pairings, GQA causal attention up to 2048 tokens
// and head_dim 256, SwiGLU, bias, embedding), then whole tiny random models (GQA/MQA, both RoPE pairings,
// q/k/v biases, tied and untied embeddings, 2 sequences of an odd length) in FP32 against forward_logits,
// block-at-a-time streaming against the whole model, streamed against resident residency, BF16 against a
// CPU emulation of its rounding and against FP32, and the evaluator fed by the CUDA provider. Scoring on the
// device (token_nll_rows_cuda, CudaLlama::forward_nll, cuda_window_nll) against token_score on the host
// for the same logits — random rows, ±80, ±100 peaks, ties, ±Inf and NaN, both load paths — and the
// evaluator's perplexity scored on the device against the host-scored one. Every comparison prints its
// observed error next to its tolerance. Skips (except the argument checks) without a CUDA device.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/gemm_cpu.h"
#include "core/random_fill.h"
#include "model/cuda/attention_cuda.cuh"
#include "model/cuda/forward_cuda.cuh"
#include "model/cuda/linear_cuda.cuh"
#include "model/cuda/model_ops_cuda.cuh"
#include "model/cuda/token_nll_cuda.cuh"
#include "model/eval.h"
#include "model/forward_cpu.h"
#include "model/weights.h"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(counter_random24(seed, uint64_t(i)) % uint32_t(vocab));
    return t;
}

double max_abs(const std::vector<float>& a) {
    double m = 0;
    for (float x : a) m = std::max(m, double(std::fabs(x)));
    return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const double d = std::fabs(double(a[i]) - double(b[i]));
        if (!(d <= m)) m = d;  // NaN propagates as a failure
    }
    return m;
}

std::vector<float> bf16_to_float(const std::vector<__nv_bfloat16>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
    return y;
}

float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
void bf16_round(std::vector<float>& v) {
    for (auto& x : v) x = bf16_round(x);
}

// Prints one observed error against its bound (so the GPU log shows the margins) and checks it.
void expect_within(const std::string& what, double err, double bound) {
    std::printf("    %-58s %.3e  (bound %.1e)\n", what.c_str(), err, bound);
    EXPECT_LE(err, bound) << what;
}

struct ModelCase {
    const char* name;
    LlamaConfig config;
    int64_t n_seq, n_tok;
};

LlamaConfig base_config() { return tiny_llama_config(/*qkv_bias=*/false, /*tied_embeddings=*/false); }

// Tiny models covering the switches of the forward: GQA and MQA, both RoPE pairings, q/k/v biases, tied and
// untied embeddings, head_dim 8 … 128, several attention tiles (n_tok 300).
std::vector<ModelCase> model_cases() {
    std::vector<ModelCase> cases;
    LlamaConfig a = base_config();
    a.tied_embeddings = true;
    cases.push_back({"gqa4/2 hd8 halves, no bias, tied", a, 2, 37});
    LlamaConfig b = base_config();
    b.architecture = "qwen2";
    b.rope_pairing = RopePairing::adjacent;
    b.qkv_bias = true;
    cases.push_back({"gqa4/2 hd8 adjacent, q/k/v bias, untied", b, 2, 37});
    LlamaConfig c = base_config();
    c.vocab_size = 301, c.hidden_size = 192, c.n_heads = 6, c.n_kv_heads = 2, c.head_dim = 32, c.ffn_size = 320, c.n_layers = 4;
    c.qkv_bias = true, c.rope_pairing = RopePairing::adjacent, c.tied_embeddings = true;
    cases.push_back({"gqa6/2 hd32 adjacent, bias, tied", c, 2, 37});
    LlamaConfig d = base_config();
    d.vocab_size = 150, d.hidden_size = 96, d.n_heads = 3, d.n_kv_heads = 1, d.head_dim = 64, d.ffn_size = 160, d.n_layers = 2;
    cases.push_back({"mqa3/1 hd64 halves, untied, 300 tokens", d, 2, 300});
    LlamaConfig e = base_config();
    e.vocab_size = 97, e.hidden_size = 256, e.n_heads = 2, e.n_kv_heads = 1, e.head_dim = 128, e.ffn_size = 256, e.n_layers = 2;
    e.rope_theta = 500000.0, e.tied_embeddings = true;
    cases.push_back({"gqa2/1 hd128 halves, tied, theta 5e5", e, 3, 45});
    return cases;
}

LlamaModel make_model(const LlamaConfig& c, uint64_t seed, float scale) {
    LlamaModel m;
    m.config = c;
    m.weights = random_llama_weights(c, seed, scale);
    return m;
}

// The CPU statement of the BF16 path (forward_cuda.cuh): the FP32 reference with every weight matrix and
// every GEMM input rounded to BF16. `m` must already hold BF16-rounded matrices (bf16_rounded_model).
LlamaModel bf16_rounded_model(const LlamaModel& m) {
    LlamaModel r = m;
    bf16_round(r.weights.token_embd);
    bf16_round(r.weights.output);
    for (auto& b : r.weights.blocks)
        for (auto* w : {&b.wq, &b.wk, &b.wv, &b.wo, &b.w_gate, &b.w_up, &b.w_down}) bf16_round(*w);
    return r;
}

std::vector<float> cpu_bf16_emulation(const LlamaModel& m, const int32_t* tokens, BatchShape shape, int64_t first_pos) {
    const LlamaConfig& c = m.config;
    const int64_t rows = shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    auto linear = [](const std::vector<float>& x, const std::vector<float>& w, int64_t n_rows, int64_t in, int64_t out,
                     float* y, float beta) {
        gemm_f32(ConstMatF(x.data(), n_rows, in), Trans::no, ConstMatF(w.data(), out, in), Trans::yes, MatF(y, n_rows, out), beta);
    };
    std::vector<float> x = embed_tokens(c, m.weights.token_embd.data(), tokens, shape);
    std::vector<float> ain(size_t(rows * d)), q(size_t(rows * qd)), k(size_t(rows * kvd)), v(k.size()), ctx(q.size()),
        fin(ain.size()), act(size_t(rows * f)), up(act.size()), cos_t, sin_t;
    rope_tables(c, shape.n_tok, cos_t, sin_t);
    for (const BlockWeights& b : m.weights.blocks) {
        rms_norm_rows(x.data(), b.attn_norm.data(), rows, d, c.rms_eps, ain.data());
        bf16_round(ain);
        linear(ain, b.wq, rows, d, qd, q.data(), 0.0f);
        linear(ain, b.wk, rows, d, kvd, k.data(), 0.0f);
        linear(ain, b.wv, rows, d, kvd, v.data(), 0.0f);
        if (c.qkv_bias)
            for (int64_t r = 0; r < rows; ++r) {
                for (int64_t i = 0; i < qd; ++i) q[size_t(r * qd + i)] += b.bq[size_t(i)];
                for (int64_t i = 0; i < kvd; ++i) k[size_t(r * kvd + i)] += b.bk[size_t(i)], v[size_t(r * kvd + i)] += b.bv[size_t(i)];
            }
        apply_rope(q.data(), shape, c.n_heads, c.head_dim, c.rope_pairing, cos_t.data(), sin_t.data());
        apply_rope(k.data(), shape, c.n_kv_heads, c.head_dim, c.rope_pairing, cos_t.data(), sin_t.data());
        attention_causal(q.data(), k.data(), v.data(), shape, c.n_heads, c.n_kv_heads, c.head_dim, ctx.data());
        bf16_round(ctx);
        linear(ctx, b.wo, rows, qd, d, x.data(), 1.0f);
        rms_norm_rows(x.data(), b.ffn_norm.data(), rows, d, c.rms_eps, fin.data());
        bf16_round(fin);
        linear(fin, b.w_gate, rows, d, f, act.data(), 0.0f);
        linear(fin, b.w_up, rows, d, f, up.data(), 0.0f);
        swiglu(act.data(), up.data(), rows * f, act.data());
        bf16_round(act);
        linear(act, b.w_down, rows, f, d, x.data(), 1.0f);
    }
    const int64_t keep = shape.n_tok - first_pos, V = c.vocab_size;
    std::vector<float> logits(size_t(shape.n_seq * keep * V)), xn(size_t(keep * d));
    for (int64_t s = 0; s < shape.n_seq; ++s) {
        rms_norm_rows(x.data() + (s * shape.n_tok + first_pos) * d, m.weights.output_norm.data(), keep, d, c.rms_eps, xn.data());
        bf16_round(xn);
        gemm_f32(ConstMatF(xn.data(), keep, d), Trans::no, ConstMatF(m.weights.output_matrix(), V, d), Trans::yes,
                 MatF(logits.data() + s * keep * V, keep, V));
    }
    return logits;
}

double top1_agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
    const int64_t n = int64_t(a.size()) / vocab;
    int64_t same = 0;
    for (int64_t r = 0; r < n; ++r) {
        const auto ia = std::max_element(a.begin() + r * vocab, a.begin() + (r + 1) * vocab) - (a.begin() + r * vocab);
        const auto ib = std::max_element(b.begin() + r * vocab, b.begin() + (r + 1) * vocab) - (b.begin() + r * vocab);
        same += ia == ib;
    }
    return double(same) / double(n);
}

// Device scores (nll, argmax) of `rows` against token_score on the host. The NLL bound, 2^-20·(1 + |max| +
// |logit[target]| + |nll|), is ≥ 8 FP32 ulps of the largest operand: token_nll_cuda.cuh expects at most a
// 1-ulp disagreement (exp rounding, FP64 summation order) and bit-equality in nearly all rows, printed here.
// A NaN on the host must be a NaN on the device; the argmax must be equal.
void expect_scores_match_host(const std::string& name, const std::vector<const float*>& rows, int64_t vocab,
                              const std::vector<int32_t>& targets, const std::vector<double>& nll,
                              const std::vector<int32_t>& argmax) {
    ASSERT_EQ(rows.size(), targets.size());
    ASSERT_EQ(rows.size(), nll.size());
    ASSERT_EQ(rows.size(), argmax.size());
    double worst = 0;
    int64_t equal = 0, finite = 0;
    for (size_t g = 0; g < rows.size(); ++g) {
        const TokenScore h = token_score(rows[g], vocab, targets[g]);
        EXPECT_EQ(argmax[g], h.argmax) << name << ", row " << g;
        if (std::isnan(h.nll)) {
            EXPECT_TRUE(std::isnan(nll[g])) << name << ", row " << g << ": host NaN, device " << nll[g];
            continue;
        }
        ++finite;
        const double bound = 0x1p-20 * (1.0 + std::fabs(rows[g][h.argmax]) + std::fabs(rows[g][targets[g]]) + std::fabs(h.nll));
        const double err = std::fabs(nll[g] - h.nll) / bound;
        if (!(err <= worst)) worst = err;  // NaN propagates as a failure
        equal += nll[g] == h.nll;
    }
    expect_within(name + ": max|d nll| / 2^-20(1+|max|+|l_t|+|nll|)", worst, 1.0);
    std::printf("    %-58s %lld of %lld\n", (name + ": NLLs bit-equal to the host's").c_str(), (long long)equal,
                (long long)finite);
}

// token_nll_rows_cuda on host logits [n_seq, rows_per_seq, vocab] (uploaded `offset` floats into the device
// buffer: 1 makes the rows misaligned for float4), scored rows 0 … n_score − 1 of each sequence.
void check_token_nll_rows(const std::string& name, const std::vector<float>& logits, int64_t vocab, int64_t n_seq,
                          int64_t rows_per_seq, int64_t n_score, const std::vector<int32_t>& targets, int64_t offset) {
    DeviceBuffer<float> d_logits(logits.size() + size_t(offset));
    CUDA_CHECK(cudaMemcpy(d_logits.data() + offset, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
    auto d_targets = to_device(targets);
    DeviceBuffer<double> d_nll(targets.size());
    DeviceBuffer<int32_t> d_argmax(targets.size());
    d_nll.fill_bytes(0xFF);  // poisoned (NaN): an unwritten row fails
    d_argmax.fill_bytes(0xFF);
    token_nll_rows_cuda(d_logits.data() + offset, vocab, n_seq, rows_per_seq, n_score, d_targets.data(), d_nll.data(),
                        d_argmax.data());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<const float*> rows;
    for (int64_t s = 0; s < n_seq; ++s)
        for (int64_t r = 0; r < n_score; ++r) rows.push_back(logits.data() + (s * rows_per_seq + r) * vocab);
    expect_scores_match_host(name + (offset ? " (misaligned)" : ""), rows, vocab, targets, to_host(d_nll), to_host(d_argmax));
}

std::vector<float> uniform(int64_t n, uint64_t seed, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = lo + (hi - lo) * float(counter_random24(seed, uint64_t(i))) * 0x1p-24f;
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// kernels against their reference ops

TEST(ModelCudaOps, RmsNormMatchesCpu) {
    REQUIRE_GPU();
    for (int64_t d : {32, 33, 576, 4096}) {
        const int64_t rows = 37 * 2;
        auto x = gaussian_vector(rows * d, 11, 3.0f), w = gaussian_vector(d, 12, 0.1f);
        for (auto& v : w) v += 1.0f;
        std::vector<float> ref(x.size());
        rms_norm_rows(x.data(), w.data(), rows, d, 1e-5f, ref.data());
        auto dx = to_device(x), dw = to_device(w);
        DeviceBuffer<float> dy(x.size());
        DeviceBuffer<__nv_bfloat16> dyb(x.size());
        rms_norm_rows_cuda(dx.data(), dw.data(), rows, d, 1e-5f, dy.data(), dyb.data());
        const auto y = to_host(dy);
        const auto yb = bf16_to_float(to_host(dyb));
        double rel = 0;
        for (size_t i = 0; i < y.size(); ++i) rel = std::max(rel, std::fabs(double(y[i]) - ref[i]) / (std::fabs(ref[i]) + 1e-30));
        expect_within("rmsnorm d=" + std::to_string(d) + ": max relative |gpu - cpu|", rel, 0x1p-22);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yb[i], bf16_round(y[i])) << "bf16 copy, element " << i;
        // In place (y = x), FP32 only.
        rms_norm_rows_cuda(dx.data(), dw.data(), rows, d, 1e-5f, dx.data(), nullptr);
        EXPECT_EQ(to_host(dx), y) << "in place, d=" << d;
    }
}

TEST(ModelCudaOps, RopeMatchesCpuBitForBit) {
    REQUIRE_GPU();
    LlamaConfig c = base_config();
    for (int64_t hd : {8, 64, 128})
        for (RopePairing p : {RopePairing::adjacent, RopePairing::halves}) {
            c.head_dim = hd;
            const BatchShape shape{2, 37};
            const int64_t heads = 3;
            std::vector<float> cos_t, sin_t;
            rope_tables(c, shape.n_tok, cos_t, sin_t);
            auto x = gaussian_vector(shape.rows() * heads * hd, 21);
            std::vector<float> ref = x;
            apply_rope(ref.data(), shape, heads, hd, p, cos_t.data(), sin_t.data());
            auto dx = to_device(x), dc = to_device(cos_t), ds = to_device(sin_t);
            apply_rope_cuda(dx.data(), shape, heads, hd, p, dc.data(), ds.data());
            EXPECT_EQ(to_host(dx), ref) << "head_dim " << hd << " pairing " << rope_pairing_name(p);
        }
}

TEST(ModelCudaOps, AttentionMatchesCpu) {
    REQUIRE_GPU();
    struct Shape {
        int64_t n_seq, n_tok, heads, kv_heads, head_dim;
    };
    // Odd lengths, one token, several tiles, GQA/MQA/MHA, head_dim not a power of two, up to 2048 × 128 and 256.
    const Shape shapes[] = {{2, 37, 4, 2, 8},   {1, 300, 9, 3, 64},  {2, 65, 4, 4, 80},  {1, 2048, 2, 1, 128},
                            {1, 130, 2, 2, 256}, {3, 1, 2, 1, 64},   {1, 33, 2, 1, 12},  {2, 513, 3, 1, 64}};
    for (const Shape& s : shapes)
        for (float q_scale : {1.0f, 3.0f}) {  // 3: peaked softmax
            const BatchShape shape{s.n_seq, s.n_tok};
            const int64_t rows = shape.rows();
            auto q = gaussian_vector(rows * s.heads * s.head_dim, 31, q_scale), k = gaussian_vector(rows * s.kv_heads * s.head_dim, 32),
                 v = gaussian_vector(rows * s.kv_heads * s.head_dim, 33);
            std::vector<float> ref(q.size());
            attention_causal(q.data(), k.data(), v.data(), shape, s.heads, s.kv_heads, s.head_dim, ref.data());
            auto dq = to_device(q), dk = to_device(k), dv = to_device(v);
            DeviceBuffer<float> dout(q.size());
            DeviceBuffer<__nv_bfloat16> doutb(q.size());
            dout.fill_bytes(0xAB);  // poisoned: an unwritten element fails
            attention_causal_cuda(dq.data(), dk.data(), dv.data(), shape, s.heads, s.kv_heads, s.head_dim, dout.data(),
                                  doutb.data());
            const auto out = to_host(dout);
            const auto outb = bf16_to_float(to_host(doutb));
            const std::string name = "attention " + std::to_string(s.n_seq) + "x" + std::to_string(s.n_tok) + " heads " +
                                     std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " hd " +
                                     std::to_string(s.head_dim) + " q x" + std::to_string(int(q_scale));
            expect_within(name + ": max|d|/max|v|", max_abs_diff(out, ref) / max_abs(v), 2e-5);
            for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(outb[i], bf16_round(out[i])) << name << " bf16 copy, element " << i;
        }
}

TEST(ModelCudaOps, SwigluBiasAndEmbeddingMatchCpu) {
    REQUIRE_GPU();
    const int64_t n = 37 * 2 * 48 + 1;
    auto g = gaussian_vector(n, 41, 4.0f), u = gaussian_vector(n, 42);
    std::vector<float> ref(static_cast<size_t>(n));
    swiglu(g.data(), u.data(), n, ref.data());
    auto dg = to_device(g), du = to_device(u);
    DeviceBuffer<__nv_bfloat16> db(static_cast<size_t>(n));
    swiglu_cuda(dg.data(), du.data(), n, dg.data(), db.data());  // in place, as the block does
    const auto y = to_host(dg);
    double rel = 0;
    for (int64_t i = 0; i < n; ++i) rel = std::max(rel, std::fabs(double(y[i]) - ref[i]) / (std::fabs(ref[i]) + 1e-30));
    expect_within("swiglu: max relative |gpu - cpu| (expf within 2 ulp)", rel, 1e-6);
    const auto yb = bf16_to_float(to_host(db));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(yb[i], bf16_round(y[i])) << "bf16 copy, element " << i;

    const int64_t rows = 37, width = 24;
    auto yv = gaussian_vector(rows * width, 43), bias = gaussian_vector(width, 44);
    std::vector<float> yref = yv;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) yref[size_t(r * width + i)] += bias[size_t(i)];
    auto dy = to_device(yv), dbias = to_device(bias);
    add_bias_rows_cuda(dy.data(), dbias.data(), rows, width);
    EXPECT_EQ(to_host(dy), yref) << "bias add";

    const int64_t vocab = 61, d = 40;
    auto table = gaussian_vector(vocab * d, 45);
    const auto tok = random_tokens(rows, vocab, 46);
    const BatchShape shape{1, rows};
    LlamaConfig c = base_config();
    c.vocab_size = vocab, c.hidden_size = d;
    const auto eref = embed_tokens(c, table.data(), tok.data(), shape);
    auto dt = to_device(table);
    auto dtok = to_device(tok);
    DeviceBuffer<float> de(static_cast<size_t>(rows * d));
    embed_rows_cuda(dt.data(), dtok.data(), rows, d, de.data());
    EXPECT_EQ(to_host(de), eref) << "embedding gather (fp32 table)";
    std::vector<__nv_bfloat16> tb(table.size());
    for (size_t i = 0; i < table.size(); ++i) tb[i] = __float2bfloat16_rn(table[i]);
    auto dtb = to_device(tb);
    embed_rows_cuda(dtb.data(), dtok.data(), rows, d, de.data());
    std::vector<float> eb = eref;
    bf16_round(eb);
    EXPECT_EQ(to_host(de), eb) << "embedding gather (bf16 table)";
}

TEST(ModelCudaOps, TokenNllRowsMatchHostScoring) {
    REQUIRE_GPU();
    // Vocabularies for the scalar path (61, 301), the float4 path (4096, 49152 = SmolLM2's) and, shifted by
    // one float, the scalar path on a multiple of 4. 3 sequences of 6 rows, 5 scored: the last row of each
    // is skipped, as in the evaluator.
    const int64_t n_seq = 3, rows_per_seq = 6, n_score = 5;
    uint64_t seed = 500;
    for (int64_t vocab : {61, 301, 4096, 49152})
        for (int dist = 0; dist < 2; ++dist) {
            const int64_t n = n_seq * rows_per_seq * vocab;
            const auto logits = dist == 0 ? gaussian_vector(n, seed++, 3.0f) : uniform(n, seed++, -80.0f, 80.0f);
            const auto targets = random_tokens(n_seq * n_score, vocab, seed++);
            const std::string name = "vocab " + std::to_string(vocab) + (dist == 0 ? ", gaussian x3" : ", uniform +-80");
            for (int64_t offset : {0, 1}) {
                if (offset == 1 && vocab % 4 != 0) continue;  // already the scalar path
                check_token_nll_rows(name, logits, vocab, n_seq, rows_per_seq, n_score, targets, offset);
            }
        }
}

TEST(ModelCudaOps, TokenNllRowsHandlePeaksTiesAndNonFiniteLogits) {
    REQUIRE_GPU();
    for (int64_t vocab : {int64_t(4096), int64_t(4099)}) {  // float4 path, scalar path
        const int64_t n_rows = 9;
        std::vector<float> logits = gaussian_vector(n_rows * vocab, 600, 2.0f);
        std::vector<int32_t> targets = random_tokens(n_rows, vocab, 601);
        auto row = [&](int64_t r) { return logits.data() + r * vocab; };
        std::fill(row(0), row(0) + vocab, 0.5f);  // constant: argmax 0, nll = log(vocab)
        row(1)[vocab - 1] = 50.0f;                // the maximum in the last element
        std::fill(row(2), row(2) + vocab, -100.0f);
        row(2)[17] = 100.0f;  // one peak 200 above the rest (exp(100) overflows FP32 unless the max goes first)
        targets[2] = 17;      // nll ≈ 0
        std::copy(row(2), row(2) + vocab, row(3));
        targets[3] = 3;                                                // nll ≈ 200
        row(4)[7] = row(4)[vocab - 5] = 40.0f;                         // two equal maxima: the first wins
        for (int64_t i = 0; i < vocab; i += 2) row(5)[i] = -INFINITY;  // masked tokens
        targets[5] = 1;
        row(6)[vocab / 2] = NAN;  // NaN → NaN NLL (the evaluator then reports it)
        row(7)[5] = INFINITY;     // +Inf → NaN NLL, argmax 5
        std::fill(row(8), row(8) + vocab, -INFINITY);  // nothing finite: NaN NLL, argmax 0
        check_token_nll_rows("peaks, ties, +-Inf, NaN, vocab " + std::to_string(vocab), logits, vocab, 1, n_rows, n_rows,
                             targets, 0);
    }
}

// Launcher argument checks run before any CUDA call: they need no GPU.
TEST(ModelCudaOps, UnsupportedArgumentsAreRefusedWithAMessage) {
    try {
        attention_causal_cuda(nullptr, nullptr, nullptr, {1, 4}, 2, 1, 512, reinterpret_cast<float*>(16), nullptr);
        ADD_FAILURE() << "head_dim 512 accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::usage);
        EXPECT_NE(std::string(e.what()).find("head_dim 512"), std::string::npos) << e.what();
    }
    EXPECT_THROW(attention_causal_cuda(nullptr, nullptr, nullptr, {1, 4}, 3, 2, 64, reinterpret_cast<float*>(16), nullptr),
                 Error);
    EXPECT_THROW(rms_norm_rows_cuda(nullptr, nullptr, 4, 8, 1e-5f, nullptr, nullptr), Error);
    EXPECT_THROW(parse_cuda_precision("fp16"), Error);
    EXPECT_THROW(token_nll_rows_cuda(nullptr, 0, 1, 4, 3, nullptr, nullptr, nullptr), Error);  // empty vocabulary
    EXPECT_THROW(token_nll_rows_cuda(nullptr, 8, 1, 4, 5, nullptr, nullptr, nullptr), Error);  // 5 scored of 4 rows
    EXPECT_EQ(parse_cuda_precision("bf16"), CudaPrecision::bf16);
}

// ---------------------------------------------------------------------------------------------------
// whole models

TEST(ModelCuda, Fp32LogitsMatchCpuForwardLogits) {
    REQUIRE_GPU();
    int idx = 0;
    for (const ModelCase& mc : model_cases()) {
        // Weights of std 0.3 (as test_model): attention far from uniform, blocks that matter.
        const LlamaModel m = make_model(mc.config, 100 + idx++, 0.3f);
        const BatchShape shape{mc.n_seq, mc.n_tok};
        const auto tok = random_tokens(shape.rows(), m.config.vocab_size, 7);
        CudaLlama gpu(m, {CudaPrecision::fp32, CudaResidency::resident});
        for (int64_t first : {int64_t(0), mc.n_tok / 2}) {
            const auto ref = forward_logits(m, tok.data(), shape, first);
            const auto got = gpu.forward_logits(tok.data(), shape, first);
            expect_within(std::string(mc.name) + ", first " + std::to_string(first) + ": max|d|/max|logit|",
                          max_abs_diff(got, ref) / max_abs(ref), 1e-3);
        }
    }
}

TEST(ModelCuda, BlockAtATimeEqualsWholeModelAndScratchHoldsTheLinearInputs) {
    REQUIRE_GPU();
    LlamaConfig cfg = model_cases()[1].config;  // adjacent pairing, biases, untied
    const LlamaModel m = make_model(cfg, 5, 0.3f);
    const LlamaConfig& c = m.config;
    const BatchShape shape{2, 37};
    const int64_t first = 18, keep = shape.n_tok - first, rows = shape.rows(), d = c.hidden_size, V = c.vocab_size;
    const auto tok = random_tokens(rows, V, 9);
    for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::bf16}) {
        CudaLlama whole(m, {p, CudaResidency::resident});
        const auto expect = whole.forward_logits(tok.data(), shape, first);
        const CudaBlas& blas = whole.blas();  // the same handle: cuBLAS is then bit-reproducible

        // Stream: head and one reused block object, a fresh scratch, the CPU running alongside.
        CudaHeadWeights head;
        head.upload(c, m.weights.token_embd, m.weights.output_norm, m.weights.output, p, blas.stream());
        CudaBlockWeights blk;
        CudaBlockScratch s;
        DeviceBuffer<float> hidden(static_cast<size_t>(rows * d));
        cuda_embed_tokens(c, head, tok.data(), shape, hidden.data(), s, blas);
        std::vector<float> cpu_hidden = embed_tokens(c, m.weights.token_embd.data(), tok.data(), shape);
        BlockScratch cs;
        for (int64_t l = 0; l < c.n_layers; ++l) {
            blk.upload(c, m.weights.blocks[size_t(l)], l, p, blas.stream());
            cuda_block_forward(c, blk, l, hidden.data(), shape, s, blas);
            block_forward(c, m.weights.blocks[size_t(l)], l, cpu_hidden.data(), shape, cs);
            blas.synchronize();
            EXPECT_EQ(s.rows, rows);
            if (p == CudaPrecision::fp32) {  // the scratch mirrors BlockScratch (what PTQ reads)
                const struct {
                    const char* name;
                    const DeviceBuffer<float>& gpu;
                    const std::vector<float>& cpu;
                } views[] = {{"attn_in", s.attn_in, cs.attn_in}, {"q", s.q, cs.q},           {"k", s.k, cs.k},
                             {"v", s.v, cs.v},                   {"attn_ctx", s.attn_ctx, cs.attn_ctx},
                             {"ffn_in", s.ffn_in, cs.ffn_in},    {"ffn_act", s.ffn_act, cs.ffn_act}};
                for (const auto& vw : views)
                    expect_within("layer " + std::to_string(l) + " scratch " + vw.name + ": max|d|/max|cpu|",
                                  max_abs_diff(download(vw.gpu, vw.cpu.size()), vw.cpu) / max_abs(vw.cpu), 1e-4);
            }
        }
        DeviceBuffer<float> logits(static_cast<size_t>(shape.n_seq * keep * V));
        for (int64_t sq = 0; sq < shape.n_seq; ++sq)
            cuda_final_norm_and_logits(c, head, hidden.data() + (sq * shape.n_tok + first) * d, keep,
                                       logits.data() + sq * keep * V, s, blas);
        EXPECT_EQ(to_host(logits), expect) << "block at a time vs whole, " << cuda_precision_name(p);

        // Streamed residency (one block on the device, uploaded per layer per call) gives the same logits.
        CudaLlama streamed(m, {p, CudaResidency::streamed});
        EXPECT_TRUE(streamed.streamed());
        EXPECT_LT(streamed.weight_bytes(), whole.weight_bytes());
        const auto got = streamed.forward_logits(tok.data(), shape, first);
        // (cuBLAS is bit-reproducible for the same problem on the same GPU, so FP32 is held to equality — the
        // documented contract; BF16 only to summation order.)
        if (p == CudaPrecision::fp32)
            EXPECT_EQ(got, expect) << "streamed vs resident (fp32)";
        else
            expect_within("streamed vs resident (bf16): max|d|/max|logit|", max_abs_diff(got, expect) / max_abs(expect), 1e-4);
        // Deterministic run to run.
        EXPECT_EQ(whole.forward_logits(tok.data(), shape, first), expect) << "second run, " << cuda_precision_name(p);
    }
}

// The Linear seam on the device: AdaHOP linears with quantization off give the dense logits; fake-quant
// linears (weights, per-token activations, or activations alone over the weights as loaded) give the CPU's
// fake-quant logits; streamed uploads reuse them.
TEST(ModelCuda, LinearSeamMatchesDenseAndTheCpuLinears) {
    REQUIRE_GPU();
    const ModelCase mc = model_cases()[2];  // hidden 192, ffn 320: every in_features a multiple of 32
    const LlamaModel m = make_model(mc.config, 21, 0.3f);
    const BatchShape shape{mc.n_seq, mc.n_tok};
    const auto tok = random_tokens(shape.rows(), m.config.vocab_size, 4);
    const auto dense = CudaLlama(m, {CudaPrecision::fp32, CudaResidency::resident}).forward_logits(tok.data(), shape);

    LpMatmulOptions off;
    off.quantize = false;
    off.high_precision_bf16 = false;
    off.oe_k = 8;
    for (Strategy st : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right, Strategy::full}) {
        LayerPlan lp;
        lp.fwd = st;
        CudaLlama ada(m, {CudaPrecision::fp32, CudaResidency::resident, cuda_adahop_linears(Plan{}, off, lp)});
        expect_within(std::string("adahop ") + strategy_short_name(st) + ", quantization off vs dense: max|d|/max|logit|",
                      max_abs_diff(ada.forward_logits(tok.data(), shape), dense) / max_abs(dense), 1e-4);
    }

    QuantSpec w, a;
    w.format = &find_format("mxfp4");
    a.format = &find_format("int8");
    struct FakeQuantCase {
        QuantSpec weights, acts;  // no weight format: the weights as loaded (W·A8 of a quantized file)
        const char* name;
    };
    for (const FakeQuantCase& k : {FakeQuantCase{w, {}, "fake-quant mxfp4"},
                                   FakeQuantCase{w, a, "fake-quant mxfp4 + int8 activations"},
                                   FakeQuantCase{{}, a, "weights as loaded + int8 activations"}}) {
        const ModelLinears cpu_linears = make_model_linears(m, fake_quant_linears(k.weights, k.acts));
        const auto cpu = forward_logits(m, tok.data(), shape, 0, &cpu_linears);
        for (CudaResidency r : {CudaResidency::resident, CudaResidency::streamed}) {
            CudaLlama fq(m, {CudaPrecision::fp32, r, cuda_fake_quant_linears(k.weights, k.acts)});
            // Per-token activation rounding can flip where FP32 summation order moved an input across a
            // rounding boundary: one INT8 step (1/127 of the row's range) on a few inputs. Measured on the
            // H200: 1.0e-2 with MXFP4 weights, 2.6e-2 over the weights as loaded (more flips reach the logits).
            const auto gpu = fq.forward_logits(tok.data(), shape);
            expect_within(std::string(k.name) + (r == CudaResidency::streamed ? ", streamed" : "") + " vs CPU: max|d|/max|logit|",
                          max_abs_diff(gpu, cpu) / max_abs(cpu), k.acts.format ? 4e-2 : 1e-3);
            if (!k.weights.format) EXPECT_GT(max_abs_diff(gpu, dense), 0.0f) << k.name << ": not the dense logits";
        }
    }
    // A GGUF format has no CUDA activation quantizer: refused with a message.
    QuantSpec gguf;
    gguf.format = &find_format("q8_0");
    EXPECT_THROW(CudaLlama(m, {CudaPrecision::fp32, CudaResidency::resident, cuda_fake_quant_linears(w, gguf)}), Error);
    EXPECT_THROW(CudaLlama(m, {CudaPrecision::fp32, CudaResidency::resident, cuda_with_kv_cache({}, gguf)}), Error);

    // The KV cache quantized per token and KV head (W4A4KV4 evaluation): the CPU's logits, alone and over fake-quant
    // weights, resident and streamed; and not the dense ones. Not over int8 activations as well: two per-token
    // quantizers in a row compound their flips (an INT8 step that moves a key across an INT4 boundary moves it by a
    // whole INT4 step), measured on the H200 at 0.12-0.14 of the largest logit against 1.0e-2 for the activations
    // alone — a comparison of rounding luck, not of the KV quantizer, which the cases here pin down.
    for (const char* kv_name : {"int4", "mxfp4"}) {
        QuantSpec kv;
        kv.format = &find_format(kv_name);
        for (const FakeQuantCase& k : {FakeQuantCase{{}, {}, "dense"}, FakeQuantCase{w, {}, "fake-quant mxfp4"}}) {
            const LinearFactory cpu_base = k.weights.format ? fake_quant_linears(k.weights, k.acts) : LinearFactory{};
            const ModelLinears cpu_linears = make_model_linears(m, with_kv_cache(cpu_base, kv));
            const auto cpu = forward_logits(m, tok.data(), shape, 0, &cpu_linears);
            const CudaLinearFactory gpu_base = k.weights.format ? cuda_fake_quant_linears(k.weights, k.acts) : CudaLinearFactory{};
            for (CudaResidency r : {CudaResidency::resident, CudaResidency::streamed}) {
                CudaLlama q(m, {CudaPrecision::fp32, r, cuda_with_kv_cache(gpu_base, kv)});
                const auto gpu = q.forward_logits(tok.data(), shape);
                // Per-token rounding flips where FP32 summation order moved a key or value across a boundary (as
                // for the activations above).
                expect_within(std::string("KV ") + kv_name + " over " + k.name + (r == CudaResidency::streamed ? ", streamed" : "") +
                                  " vs CPU: max|d|/max|logit|",
                              max_abs_diff(gpu, cpu) / max_abs(cpu), 4e-2);
                EXPECT_GT(max_abs_diff(gpu, dense), 0.0f) << kv_name << " over " << k.name << ": not the dense logits";
            }
        }
    }
}

TEST(ModelCuda, Bf16MatchesItsCpuEmulationAndStaysCloseToFp32) {
    REQUIRE_GPU();
    int idx = 0;
    for (const ModelCase& mc : model_cases()) {
        // Weights of std 0.08 (random_llama_weights' default): the std-0.3 models are chaotic enough that
        // BF16 rounding alone moves their logits by 5-17 % (measured with the CPU emulation).
        const LlamaModel m = make_model(mc.config, 200 + idx++, 0.08f);
        const BatchShape shape{mc.n_seq, mc.n_tok};
        const int64_t first = mc.n_tok / 2;
        const auto tok = random_tokens(shape.rows(), m.config.vocab_size, 8);
        const auto ref = forward_logits(m, tok.data(), shape, first);
        const auto emu = cpu_bf16_emulation(bf16_rounded_model(m), tok.data(), shape, first);
        CudaLlama gpu(m, {CudaPrecision::bf16, CudaResidency::resident});
        const auto got = gpu.forward_logits(tok.data(), shape, first);
        const double scale = max_abs(ref);
        // vs the emulation: FP32 summation order, plus GEMM inputs that land on the other side of a BF16
        // rounding boundary (CPU emulation with another summation order: ≤ 2.9e-3).
        expect_within(std::string(mc.name) + ": bf16 vs cpu bf16 emulation", max_abs_diff(got, emu) / scale, 1e-2);
        // vs FP32: the rounding itself (CPU emulation: 2.2e-3 … 6.1e-3 on these models, top-1 ≥ 0.997).
        const double vs_fp32 = max_abs_diff(got, ref) / scale;
        expect_within(std::string(mc.name) + ": bf16 vs cpu fp32", vs_fp32, 3e-2);
        EXPECT_GT(vs_fp32, 1e-4) << mc.name << ": BF16 logits equal FP32 ones — was BF16 really used?";
        const double top1 = top1_agreement(got, ref, m.config.vocab_size);
        std::printf("    %-58s %.4f  (bound >= 0.95)\n", (std::string(mc.name) + ": bf16 top-1 agreement with fp32").c_str(), top1);
        EXPECT_GE(top1, 0.95) << mc.name;
    }
}

TEST(ModelCuda, BadInputsAreRefused) {
    REQUIRE_GPU();
    const LlamaModel m = make_model(model_cases()[0].config, 3, 0.3f);
    CudaLlama gpu(m);
    std::vector<int32_t> tok = {1, 2, int32_t(m.config.vocab_size)};
    try {
        gpu.forward_logits(tok.data(), {1, 3}, 0);
        ADD_FAILURE() << "out-of-vocabulary token accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input);
        EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
    }
    tok[2] = 0;
    EXPECT_THROW(gpu.forward_logits(tok.data(), {1, 3}, 3), Error);  // first_pos outside the window
    EXPECT_THROW(gpu.forward_logits(tok.data(), {0, 3}, 0), Error);  // empty batch
    EXPECT_EQ(gpu.forward_logits(tok.data(), {1, 3}, 2).size(), size_t(m.config.vocab_size));  // still usable
}

TEST(ModelCuda, ForwardNllMatchesHostScoringOfItsLogits) {
    REQUIRE_GPU();
    int idx = 0;
    for (const ModelCase& mc : model_cases())
        for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::bf16}) {
            const LlamaModel m = make_model(mc.config, 300 + idx++, 0.3f);
            const BatchShape shape{mc.n_seq, mc.n_tok};
            const int64_t first = mc.n_tok / 2, keep = mc.n_tok - first, n_score = keep - 1, V = m.config.vocab_size;
            const auto tok = random_tokens(shape.rows(), V, 11);
            const auto targets = random_tokens(shape.n_seq * n_score, V, 12);
            CudaLlama gpu(m, {p, CudaResidency::resident});
            // The same logits twice (the forward is bit-reproducible run to run): to the host, then scored on the device.
            const auto logits = gpu.forward_logits(tok.data(), shape, first);
            std::vector<double> nll(targets.size());
            std::vector<int32_t> argmax(targets.size());
            gpu.forward_nll(tok.data(), shape, first, n_score, targets.data(), nll.data(), argmax.data());
            std::vector<const float*> rows;
            for (int64_t s = 0; s < shape.n_seq; ++s)
                for (int64_t r = 0; r < n_score; ++r) rows.push_back(logits.data() + (s * keep + r) * V);
            expect_scores_match_host(std::string(mc.name) + ", " + cuda_precision_name(p), rows, V, targets, nll, argmax);
            std::vector<double> nll_only(targets.size());  // without argmax
            gpu.forward_nll(tok.data(), shape, first, n_score, targets.data(), nll_only.data());
            EXPECT_EQ(nll_only, nll) << mc.name << ", " << cuda_precision_name(p) << ": run to run";
        }

    const LlamaModel m = make_model(model_cases()[0].config, 3, 0.3f);
    CudaLlama gpu(m);
    const auto tok = random_tokens(8, m.config.vocab_size, 13);
    std::vector<int32_t> targets = {1, 2, int32_t(m.config.vocab_size)};
    std::vector<double> nll(3);
    try {
        gpu.forward_nll(tok.data(), {1, 8}, 4, 3, targets.data(), nll.data());
        ADD_FAILURE() << "out-of-vocabulary target accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input);
        EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
    }
    targets[2] = 0;
    EXPECT_THROW(gpu.forward_nll(tok.data(), {1, 8}, 6, 3, targets.data(), nll.data()), Error);  // 3 scored of 2 rows
}

TEST(ModelCuda, EvaluatorGivesTheSamePerplexityWithTheCudaProvider) {
    REQUIRE_GPU();
    LlamaConfig cfg = model_cases()[2].config;
    const LlamaModel m = make_model(cfg, 17, 0.3f);
    const auto tokens = random_tokens(5 * 64 + 7, cfg.vocab_size, 77);
    PerplexityOptions opt;
    opt.n_ctx = 64;
    opt.seqs_per_batch = 2;  // batches of 2, 2 and 1 windows
    opt.add_bos = true;
    opt.bos_id = 1;
    opt.progress = false;
    const PerplexityResult cpu = evaluate_perplexity(tokens, cfg.vocab_size, opt, cpu_window_logits(m));
    CudaLlama gpu(m);
    const PerplexityResult cuda = evaluate_perplexity(tokens, cfg.vocab_size, opt, cuda_window_logits(gpu));
    EXPECT_EQ(cuda.n_chunks, 5);
    EXPECT_EQ(cuda.n_scored, cpu.n_scored);
    expect_within("perplexity cuda fp32 vs cpu: |d ln ppl|", std::fabs(cuda.mean_nll - cpu.mean_nll), 1e-3);
    for (size_t i = 0; i < cpu.chunk_ppl.size() && i < cuda.chunk_ppl.size(); ++i)
        EXPECT_NEAR(cuda.chunk_ppl[i], cpu.chunk_ppl[i], 1e-3 * cpu.chunk_ppl[i]) << "window " << i;

    // Scored on the device (cuda_window_nll) against the host scoring of the same logits: |Δ ln PPL| ≤ 1e-6.
    // Per position the two NLLs are equal but for rare 1-ulp disagreements (token_nll_cuda.cuh: ≤ ~4e-6 at
    // logits of ~30, of either sign, in a small fraction of positions), so the mean moves by far less; the
    // chunk perplexities (31 positions each) likewise.
    for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::bf16}) {
        const std::string pn = cuda_precision_name(p);
        CudaLlama g(m, {p, CudaResidency::resident});
        const PerplexityResult host = evaluate_perplexity(tokens, cfg.vocab_size, opt, cuda_window_logits(g));
        const PerplexityResult dev = evaluate_perplexity(tokens, cfg.vocab_size, opt, cuda_window_logits(g), cuda_window_nll(g));
        EXPECT_FALSE(host.scored_by_provider);
        EXPECT_TRUE(dev.scored_by_provider);
        EXPECT_EQ(dev.n_chunks, 5);
        EXPECT_EQ(dev.n_scored, host.n_scored);
        expect_within("perplexity " + pn + ", device vs host scoring: |d ln ppl|", std::fabs(dev.mean_nll - host.mean_nll),
                      1e-6);
        expect_within("perplexity " + pn + ", device vs host scoring: |d ppl_err|/ppl_err",
                      std::fabs(dev.ppl_err - host.ppl_err) / host.ppl_err, 1e-5);
        double chunk_err = 0;
        ASSERT_EQ(dev.chunk_ppl.size(), host.chunk_ppl.size());
        for (size_t i = 0; i < host.chunk_ppl.size(); ++i)
            chunk_err = std::max(chunk_err, std::fabs(std::log(dev.chunk_ppl[i]) - std::log(host.chunk_ppl[i])));
        expect_within("perplexity " + pn + ", device vs host scoring: max |d ln chunk ppl|", chunk_err, 1e-6);
    }
}
