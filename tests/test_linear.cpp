// test_linear.cpp — the model's Linear seam (model/linear.h): dense, fake-quant and AdaHOP linears give
// the logits they promise, per projection and per layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "error_test_util.h"
#include "model/forward_cpu.h"
#include "model/linear.h"

namespace lowbit {
namespace {

// The tiny test config with every in_features a multiple of 32 (MX blocks and H₃₂ along K).
LlamaConfig seam_config(bool qkv_bias = false) {
    LlamaConfig c = tiny_llama_config(qkv_bias, true);
    c.ffn_size = 64;
    return c;
}

LlamaModel seam_model(bool qkv_bias = false, uint64_t seed = 11) {
    LlamaModel m;
    m.config = seam_config(qkv_bias);
    m.weights = random_llama_weights(m.config, seed, 0.3f);
    return m;
}

std::vector<int32_t> tokens_for(const LlamaConfig& c, BatchShape shape, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(size_t(shape.rows()));
    for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_size));
    return t;
}

float max_abs(const std::vector<float>& v) {
    float m = 0.0f;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed, float scale = 1.0f) {
    std::vector<float> v(size_t(rows * cols));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, scale);
    for (auto& x : v) x = n(rng);
    return v;
}

TEST(LinearSeam, ProjectionShapesAndNames) {
    const LlamaConfig c = seam_config();
    EXPECT_EQ(projection_out_features(c, Projection::k), c.kv_dim());
    EXPECT_EQ(projection_in_features(c, Projection::o), c.q_dim());
    EXPECT_EQ(projection_in_features(c, Projection::down), c.ffn_size);
    EXPECT_EQ(linear_name(3, Projection::down), "blk.3.ffn_down");
    const LlamaModel m = seam_model();
    const BlockLinears lin = dense_linears()(c, m.weights.blocks[0], 0);
    for (Projection p : kProjections) {
        EXPECT_EQ(lin[p].out_features(), projection_out_features(c, p)) << projection_name(p);
        EXPECT_EQ(lin[p].in_features(), projection_in_features(c, p)) << projection_name(p);
    }
}

TEST(LinearSeam, WrongShapesAreUsageErrors) {
    const std::vector<float> w = random_matrix(8, 32, 1);
    DenseLinear lin(ConstMatF(w.data(), 8, 32));
    std::vector<float> x(size_t(4 * 16)), y(size_t(4 * 8));
    EXPECT_THROW(lin.forward(ConstMatF(x.data(), 4, 16), MatF(y.data(), 4, 8)), Error);
}

// The dense Linear is the old block forward: y = x·Wᵀ, residual add through beta.
TEST(LinearSeam, DenseMatchesGemm) {
    const std::vector<float> w = random_matrix(24, 32, 2), x = random_matrix(5, 32, 3);
    std::vector<float> y(size_t(5 * 24), 1.0f), ref(y);
    DenseLinear(ConstMatF(w.data(), 24, 32)).forward(ConstMatF(x.data(), 5, 32), MatF(y.data(), 5, 24), 1.0f);
    for (int64_t r = 0; r < 5; ++r)
        for (int64_t o = 0; o < 24; ++o) {
            double s = 0;
            for (int64_t i = 0; i < 32; ++i) s += double(x[size_t(r * 32 + i)]) * double(w[size_t(o * 32 + i)]);
            ref[size_t(r * 24 + o)] = float(s + 1.0);
        }
    EXPECT_LT(max_abs_diff(y, ref), 1e-4f);
}

// With quantization off, every AdaHOP strategy computes x·Wᵀ up to FP32 rounding (orthonormal Hadamards,
// exact OE slices): the logits through the AdaHOP Linear equal the dense ones.
// gram_f32 (core/gemm_cpu.h): AᵀA by ssyrk, mirrored — the gemm's product to FP32 rounding, exactly symmetric,
// accumulating with beta, on a strided view; shapes that do not agree are usage errors.
TEST(GemmCpu, GramIsTheSymmetricProduct) {
    const int64_t k = 37, n = 19, ld = 23;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<float> a(size_t(k * ld));
    for (float& v : a) v = nd(rng);
    std::vector<float> want(size_t(n * n)), got(size_t(n * n), 0.5f);
    gemm_f32(ConstMatF(a.data(), k, n, ld), Trans::yes, ConstMatF(a.data(), k, n, ld), Trans::no, MatF(want.data(), n, n));
    for (float& v : want) v += 0.5f;
    gram_f32(ConstMatF(a.data(), k, n, ld), MatF(got.data(), n, n), 1.0f);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            EXPECT_NEAR(got[size_t(i * n + j)], want[size_t(i * n + j)], 1e-4f * (1.0f + std::fabs(want[size_t(i * n + j)])));
            EXPECT_EQ(got[size_t(i * n + j)], got[size_t(j * n + i)]);
        }
    std::vector<float> empty(size_t(n * n), 3.0f);
    gram_f32(ConstMatF(a.data(), 0, n, ld), MatF(empty.data(), n, n), 0.0f);
    EXPECT_EQ(empty, std::vector<float>(size_t(n * n), 0.0f));
    expect_error_with([&] { gram_f32(ConstMatF(a.data(), k, n, ld), MatF(got.data(), n - 1, n - 1)); }, ErrorKind::usage,
                      {"gram_f32"});
}

// This process runs on OpenBLAS's kernels for its CPU: where the CPU (and OS) has AVX2 + FMA, the chosen core is
// not one of OpenBLAS's generic SSE ones — the library re-executed the process with OPENBLAS_CORETYPE if OpenBLAS
// had fallen back to them (gemm_cpu.cpp) — unless the environment asked otherwise.
TEST(GemmCpu, RunsOnTheKernelsOfThisCpu) {
    const std::string kernels = blas_kernels();
    std::printf("  %s\n", kernels.c_str());
    ASSERT_EQ(kernels.rfind("OpenBLAS ", 0), 0u) << kernels;
    const char* off = std::getenv("LOWBIT_NATIVE_BLAS");
    const char* forced = std::getenv("OPENBLAS_CORETYPE");  // the re-execution sets SkylakeX or Haswell only
    const std::vector<std::string> generic = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge"};
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) || (off && std::string(off) == "0") ||
        (forced && std::find(generic.begin(), generic.end(), std::string(forced)) != generic.end()))
        GTEST_SKIP() << "no AVX2 + FMA, LOWBIT_NATIVE_BLAS=0, or a generic OPENBLAS_CORETYPE asked for";
    for (const std::string& g : generic) EXPECT_NE(kernels, "OpenBLAS " + g);
#else
    (void)off, (void)forced, (void)generic;
    GTEST_SKIP() << "the re-execution is for x86-64 Linux with glibc";
#endif
}

TEST(LinearSeam, AdahopWithoutQuantizationGivesDenseLogits) {
    for (bool bias : {false, true}) {
        const LlamaModel m = seam_model(bias);
        const BatchShape shape{2, 13};
        const std::vector<int32_t> tok = tokens_for(m.config, shape, 5);
        const std::vector<float> dense = forward_logits(m, tok.data(), shape);
        LpMatmulOptions opts;
        opts.quantize = false;
        opts.high_precision_bf16 = false;
        opts.oe_k = 4;
        for (Strategy s : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right, Strategy::full}) {
            LayerPlan lp;
            lp.fwd = s;
            const ModelLinears ada_linears = make_model_linears(m, adahop_linears(Plan{}, opts, lp));
            const std::vector<float> ada = forward_logits(m, tok.data(), shape, 0, &ada_linears);
            EXPECT_LE(max_abs_diff(ada, dense), 1e-5f * max_abs(dense)) << strategy_short_name(s) << " bias " << bias;
        }
    }
}

// The AdaHOP Linear with quantization on is lp_matmul(x, Wᵀ) with the layer's forward strategy.
TEST(LinearSeam, AdahopIsLpMatmulOfTheTransposedWeight) {
    const int64_t out = 40, in = 64, rows = 9;
    const std::vector<float> w = random_matrix(out, in, 7), x = random_matrix(rows, in, 8);
    std::vector<float> wt(size_t(in * out));
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) wt[size_t(i * out + o)] = w[size_t(o * in + i)];
    LpMatmulOptions opts;
    opts.oe_k = 3;
    for (Strategy s : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right, Strategy::full}) {
        LayerPlan lp;
        lp.fwd = s;
        AdahopLinear lin(ConstMatF(w.data(), out, in), lp, opts);
        std::vector<float> y(size_t(rows * out)), ref(y.size());
        lin.forward(ConstMatF(x.data(), rows, in), MatF(y.data(), rows, out));
        lp_matmul(x.data(), wt.data(), rows, in, out, s, opts, ref.data());
        EXPECT_EQ(y, ref) << strategy_short_name(s);
        // beta = 1 adds to what y holds.
        std::vector<float> y1(y.size(), 2.0f);
        lin.forward(ConstMatF(x.data(), rows, in), MatF(y1.data(), rows, out), 1.0f);
        for (size_t i = 0; i < y1.size(); ++i) EXPECT_EQ(y1[i], ref[i] + 2.0f);
    }
}

// A fake-quant Linear multiplies by exactly the weights `formats roundtrip` gives: fed the identity, its
// output is the transposed roundtrip, bit for bit.
TEST(LinearSeam, FakeQuantReproducesTheFormatRoundtrip) {
    const int64_t out = 24, in = 64;
    const std::vector<float> w = random_matrix(out, in, 9, 0.5f);
    std::vector<float> eye(size_t(in * in), 0.0f);
    for (int64_t i = 0; i < in; ++i) eye[size_t(i * in + i)] = 1.0f;
    struct Case {
        const char* format;
        int64_t group;
        bool sym;
    };
    for (const Case& k : {Case{"int4", 32, true}, Case{"int4", 0, false}, Case{"int8", 64, false}, Case{"mxfp4", 0, false},
                          Case{"mxfp8_e4m3", 0, false}, Case{"nvfp4", 0, false}, Case{"q4_0", 0, false}, Case{"q4_1", 0, false},
                          Case{"q8_0", 0, false}}) {
        QuantSpec spec;
        spec.format = &find_format(k.format);
        spec.options.group = k.group;
        spec.options.sym = k.sym;
        const std::vector<float> roundtrip = quantize_dequantize(*spec.format, w.data(), out, in, spec.options);
        FakeQuantLinear lin(ConstMatF(w.data(), out, in), spec);
        EXPECT_EQ(lin.dequantized_weights(), roundtrip) << k.format;
        std::vector<float> y(size_t(in * out));
        lin.forward(ConstMatF(eye.data(), in, in), MatF(y.data(), in, out));
        for (int64_t i = 0; i < in; ++i)
            for (int64_t o = 0; o < out; ++o)
                ASSERT_EQ(y[size_t(i * out + o)], roundtrip[size_t(o * in + i)]) << k.format << " at " << o << "," << i;
    }
}

// W4A8: the activations are quantized per token (int8 per row) before the product.
TEST(LinearSeam, FakeQuantActivationsPerToken) {
    const int64_t out = 16, in = 32, rows = 6;
    const std::vector<float> w = random_matrix(out, in, 10), x = random_matrix(rows, in, 11);
    QuantSpec wq, aq;
    wq.format = &find_format("int4");
    wq.options.group = 32;
    aq.format = &find_format("int8");
    FakeQuantLinear lin(ConstMatF(w.data(), out, in), wq, aq);
    EXPECT_EQ(lin.describe(), "fake-quant int4 g32 asym, activations int8 per-row asym");
    std::vector<float> y(size_t(rows * out)), ref(y.size());
    lin.forward(ConstMatF(x.data(), rows, in), MatF(y.data(), rows, out));
    const std::vector<float> xq = quantize_dequantize(*aq.format, x.data(), rows, in, aq.options);
    EXPECT_NE(xq, x);
    gemm_f32(ConstMatF(xq.data(), rows, in), Trans::no, ConstMatF(lin.dequantized_weights().data(), out, in), Trans::yes,
             MatF(ref.data(), rows, out));
    EXPECT_EQ(y, ref);
}

// W4A4 of an already quantized model (`eval --acts int4` without --weights): the weights as loaded (a view,
// no copy), the activations quantized per token before the product; neither format is refused.
TEST(LinearSeam, ActivationsOnlyOverTheLoadedWeights) {
    const int64_t out = 16, in = 64, rows = 5;
    const std::vector<float> w = random_matrix(out, in, 12), x = random_matrix(rows, in, 13);
    QuantSpec aq;
    aq.format = &find_format("int4");
    FakeQuantLinear lin(ConstMatF(w.data(), out, in), QuantSpec{}, aq);
    EXPECT_EQ(lin.describe(), "weights as loaded, activations int4 per-row asym");
    EXPECT_EQ(lin.weight().data, w.data());
    EXPECT_TRUE(lin.dequantized_weights().empty());
    std::vector<float> y(size_t(rows * out), 1.0f), ref(y.size(), 1.0f), dense(y.size());
    lin.forward(ConstMatF(x.data(), rows, in), MatF(y.data(), rows, out), 1.0f);  // a fused residual add as well
    const std::vector<float> xq = quantize_dequantize(*aq.format, x.data(), rows, in, aq.options);
    gemm_f32(ConstMatF(xq.data(), rows, in), Trans::no, ConstMatF(w.data(), out, in), Trans::yes, MatF(ref.data(), rows, out),
             1.0f);
    EXPECT_EQ(y, ref);
    gemm_f32(ConstMatF(x.data(), rows, in), Trans::no, ConstMatF(w.data(), out, in), Trans::yes, MatF(dense.data(), rows, out));
    for (float& v : dense) v += 1.0f;
    EXPECT_GT(max_abs_diff(y, dense), 0.01f);  // int4 activations are not the dense product
    expect_error_with([&] { FakeQuantLinear(ConstMatF(w.data(), out, in), QuantSpec{}); }, ErrorKind::usage,
                      {"neither a weight nor an activation format"});
}

// KV-cache quantization (`eval --kv`): attention reads the keys after RoPE and the values quantized per token
// and KV head — the scratch keeps exactly Qa of the unquantized block's K and V, viewed as [rows·n_kv, head_dim]
// — and the projections are untouched (the same block input and Q); int4 moves the block's output, int8 little.
TEST(LinearSeam, KvCacheQuantizedPerTokenAndHead) {
    const LlamaModel m = seam_model();
    const LlamaConfig& c = m.config;
    const BatchShape shape{2, 7};
    const std::vector<int32_t> tok = tokens_for(c, shape, 5);
    const std::vector<float> x0 = embed_tokens(c, m.weights.token_embd.data(), tok.data(), shape);
    const BlockWeights& b = m.weights.blocks[0];
    const auto run = [&](const LinearFactory& f, BlockScratch& s) {
        std::vector<float> x = x0;
        block_forward(c, b, f(c, b, 0), 0, x.data(), shape, s);
        return x;
    };
    BlockScratch plain, kv4, kv8;
    const std::vector<float> y = run(dense_linears(), plain);
    const QuantSpec int4 = parse_activation_spec("int4"), int8 = parse_activation_spec("int8");
    const std::vector<float> y4 = run(with_kv_cache(LinearFactory(), int4), kv4);
    const std::vector<float> y8 = run(with_kv_cache(dense_linears(), int8), kv8);
    const int64_t heads_rows = shape.rows() * c.n_kv_heads;
    EXPECT_EQ(kv4.k, quantize_activations(int4, ConstMatF(plain.k.data(), heads_rows, c.head_dim)));
    EXPECT_EQ(kv4.v, quantize_activations(int4, ConstMatF(plain.v.data(), heads_rows, c.head_dim)));
    EXPECT_NE(kv4.k, plain.k);
    EXPECT_EQ(kv4.q, plain.q);
    EXPECT_EQ(kv4.attn_in, plain.attn_in);
    const float d4 = max_abs_diff(y4, y), d8 = max_abs_diff(y8, y);
    EXPECT_GT(d4, 1e-3f);
    EXPECT_LT(d8, d4 / 4);
    EXPECT_GT(d8, 0.0f);
    EXPECT_EQ(with_kv_cache(LinearFactory(), int4)(c, b, 0).kv_cache.describe(), int4.describe());
}

// Linears are chosen per layer: fake-quantizing only block 1 gives the logits of the dense model whose
// block-1 projections were replaced by their roundtrip.
TEST(LinearSeam, ChosenPerLayer) {
    const LlamaModel m = seam_model();
    QuantSpec spec;
    spec.format = &find_format("mxfp4");
    const LinearFactory dense = dense_linears(), fq = fake_quant_linears(spec);
    const LinearFactory mixed = [&](const LlamaConfig& c, const BlockWeights& b, int64_t layer) {
        return layer == 1 ? fq(c, b, layer) : dense(c, b, layer);
    };
    LlamaModel replaced = m;
    BlockWeights& b1 = replaced.weights.blocks[1];
    for (std::vector<float>* w : {&b1.wq, &b1.wk, &b1.wv, &b1.wo, &b1.w_gate, &b1.w_up, &b1.w_down}) {
        const int64_t in = w == &b1.wo ? m.config.q_dim() : w == &b1.w_down ? m.config.ffn_size : m.config.hidden_size;
        *w = quantize_dequantize(*spec.format, w->data(), int64_t(w->size()) / in, in, spec.options);
    }
    const BatchShape shape{1, 17};
    const std::vector<int32_t> tok = tokens_for(m.config, shape, 12);
    const ModelLinears mixed_linears = make_model_linears(m, mixed);
    const std::vector<float> a = forward_logits(m, tok.data(), shape, 0, &mixed_linears);
    const std::vector<float> b = forward_logits(replaced, tok.data(), shape);
    EXPECT_EQ(a, b);
    EXPECT_GT(max_abs_diff(a, forward_logits(m, tok.data(), shape)), 0.0f);
}

TEST(LinearSeam, AdahopPlanPerLinearName) {
    const LlamaModel m = seam_model();
    Plan plan;
    plan.layers[linear_name(2, Projection::up)].fwd = Strategy::full;
    LayerPlan fallback;
    fallback.fwd = Strategy::plain;
    const BlockLinears lin = adahop_linears(plan, LpMatmulOptions{}, fallback)(m.config, m.weights.blocks[2], 2);
    EXPECT_EQ(lin[Projection::up].describe(), "adahop BF16");
    EXPECT_EQ(lin[Projection::gate].describe(), "adahop plain");
}

}  // namespace
}  // namespace lowbit
