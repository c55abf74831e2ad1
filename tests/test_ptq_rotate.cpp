// test_ptq_rotate.cpp — the weight-fused rotations of ptq/rotate.h: the rotation matrices are orthonormal
// and act with the documented conventions (e·Q, W·Q, Qᵀ·W, Hᵀ·wv_g, wo_h·H), norm fusion, logits
// unchanged under every option on small random models (tied/untied, GQA, q/k/v biases, 12·2^k and 36·2^k
// orders), unsupported sizes refused with the model untouched, a planted outlier column spread out, and
// — when scripts/fetch_model.sh has been run — SmolLM2-135M's logits and RTN errors before/after.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/format_registry.h"
#include "hadamard/hadamard_orders.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "io/model_registry.h"
#include "model/eval.h"
#include "model/linear.h"
#include "model/tokenizer.h"
#include "model_test_util.h"
#include "ptq/rotate.h"

using namespace lowbit;
using namespace lowbit::test;

namespace {

// Logit agreement after a rotation, relative to max|logit|. Why 2e-5 (≈ 340 float32 ulps of 1): every
// rotated weight carries ~(log2 2^k + m) float32 roundings of the transform (≤ ~40 for 36·16), relative
// ~sqrt(40)·2^-24 ≈ 4e-7 each, and the forward then sums in a different order; through a few blocks and
// the head this stays around 1e-6 of max|logit| (the measured values are printed). A rotation that is
// wrong anywhere — one matrix left out, a transposed Q, mismatched GQA heads — changes the logits by
// 10–100 % of max|logit| (BrokenRotationIsCaught), five orders of magnitude above this bound.
constexpr double kLogitTolerance = 2e-5;

double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, double(std::abs(x)));
    return m;
}

double relative_logit_error(const std::vector<float>& ref, const std::vector<float>& got) {
    return max_abs_diff(ref, got) / max_abs(ref);
}

LlamaModel random_model(const LlamaConfig& c, uint64_t seed) {
    LlamaModel m;
    m.config = c;
    // Weight std ~1.7/sqrt(d): attention is far from uniform and the blocks matter (tiny_model's 0.3 at d 32).
    m.weights = random_llama_weights(c, seed, float(1.7 / std::sqrt(double(c.hidden_size))));
    return m;
}

// The tiny config with the residual, head and FFN sizes changed.
LlamaConfig sized_config(int64_t d, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t ffn, bool bias,
                         bool tied) {
    LlamaConfig c = tiny_llama_config(bias, tied);
    c.hidden_size = d;
    c.n_heads = n_heads;
    c.n_kv_heads = n_kv_heads;
    c.head_dim = head_dim;
    c.ffn_size = ffn;
    return c;
}

// SmolLM2-135M's shape (d 576 = 36·16, 9 heads sharing 3 kv heads of 64, adjacent RoPE, tied) with a
// small vocabulary and `layers` blocks.
LlamaConfig smollm2_shape(int64_t layers) {
    LlamaConfig c = smollm2_135m_config(layers);
    c.vocab_size = 256;
    return c;
}

std::vector<float> logits_of(const LlamaModel& m, uint64_t token_seed = 3) {
    const BatchShape shape{2, 17};
    const std::vector<int32_t> tokens = random_tokens(shape.rows(), m.config.vocab_size, token_seed);
    return forward_logits(m, tokens.data(), shape);
}

bool same_weights(const LlamaModel& a, const LlamaModel& b) {
    if (a.config.tied_embeddings != b.config.tied_embeddings) return false;
    const LlamaWeights &x = a.weights, &y = b.weights;
    if (x.token_embd != y.token_embd || x.output_norm != y.output_norm || x.output != y.output) return false;
    if (x.blocks.size() != y.blocks.size()) return false;
    for (size_t l = 0; l < x.blocks.size(); ++l)
        for (const BlockTensorSpec& t : block_tensor_specs())
            if (x.blocks[l].*t.member != y.blocks[l].*t.member) return false;
    return true;
}

// a [rows, inner] · b [inner, cols], both row-major, in double.
std::vector<double> matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t rows, int64_t inner,
                           int64_t cols) {
    std::vector<double> c(size_t(rows * cols), 0.0);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < inner; ++k) {
            const double aik = a[size_t(i * inner + k)];
            for (int64_t j = 0; j < cols; ++j) c[size_t(i * cols + j)] += aik * b[size_t(k * cols + j)];
        }
    return c;
}

std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
    std::vector<float> t(a.size());
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) t[size_t(j * rows + i)] = a[size_t(i * cols + j)];
    return t;
}

// Rows [r0, r0 + n) × columns [c0, c0 + w) of a row-major matrix with `cols` columns.
std::vector<float> sub_matrix(const std::vector<float>& a, int64_t cols, int64_t r0, int64_t n, int64_t c0, int64_t w) {
    std::vector<float> s;
    for (int64_t i = r0; i < r0 + n; ++i)
        for (int64_t j = c0; j < c0 + w; ++j) s.push_back(a[size_t(i * cols + j)]);
    return s;
}

void expect_matrix_near(const std::vector<double>& want, const std::vector<float>& got, const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::abs(want[i]));
        err = std::max(err, std::abs(want[i] - double(got[i])));
    }
    EXPECT_LT(err, 1e-5 * scale) << what << ": max error " << err << " of max " << scale;
}

// max|w| / rms(w): how far the largest weight stands out.
double peak_to_rms(const std::vector<float>& w) {
    double ss = 0;
    for (float x : w) ss += double(x) * x;
    return max_abs(w) / std::sqrt(ss / double(w.size()));
}

double rtn_relative_error(const std::vector<float>& w, int64_t rows, int64_t cols, const QuantSpec& spec) {
    const std::vector<float> q = quantize_dequantize(*spec.format, w.data(), rows, cols, spec.options);
    return error_stats(w.data(), q.data(), int64_t(w.size())).rel_fro;
}

QuantSpec mxfp4_spec() { return {&find_format("mxfp4"), {}}; }
QuantSpec int4_g64_spec() {
    QuantSpec s{&find_format("int4"), {}};
    s.options.group = 64;
    return s;
}

}  // namespace

TEST(PtqRotate, RotationMatricesAreOrthonormalAndSeeded) {
    for (int64_t n : {8, 24, 64, 96, 576}) {  // 2^k, 12·2, 2^6, 12·8, 36·16
        for (bool randomized : {true, false})
            for (RotationSite site : {RotationSite::residual, RotationSite::head}) {
                RotationOptions opt;
                opt.randomized = randomized;
                opt.seed = 5;
                const std::vector<float> q = rotation_matrix(opt, site, n);
                double worst = 0;
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t j = 0; j < n; ++j) {
                        double dot = 0;
                        for (int64_t k = 0; k < n; ++k) dot += double(q[size_t(i * n + k)]) * q[size_t(j * n + k)];
                        worst = std::max(worst, std::abs(dot - (i == j ? 1.0 : 0.0)));
                    }
                EXPECT_LT(worst, 1e-6) << "n " << n << " randomized " << randomized;  // Q·Qᵀ = I to float32 rounding
                // A genuine full rotation: every entry ±1/sqrt(n).
                for (float x : q) ASSERT_NEAR(std::abs(x), 1.0 / std::sqrt(double(n)), 1e-6);
            }
        // Seeds matter, and R1 and R2 of one seed differ.
        RotationOptions a, b;
        b.seed = 1;
        EXPECT_NE(rotation_matrix(a, RotationSite::residual, n), rotation_matrix(b, RotationSite::residual, n));
        EXPECT_NE(rotation_matrix(a, RotationSite::residual, n), rotation_matrix(a, RotationSite::head, n));
    }
    // Block-diagonal R1: zero outside the diagonal blocks.
    RotationOptions blocked;
    blocked.residual_block = 8;
    const std::vector<float> q = rotation_matrix(blocked, RotationSite::residual, 24);
    for (int64_t i = 0; i < 24; ++i)
        for (int64_t j = 0; j < 24; ++j)
            if (i / 8 != j / 8) {
                ASSERT_EQ(q[size_t(i * 24 + j)], 0.0f);
            }
}

TEST(PtqRotate, WeightsTransformWithTheDocumentedConventions) {
    // Untied, unit norms (so fusion is the identity): compare every kind of matrix with a double GEMM.
    LlamaModel m = random_model(sized_config(24, 4, 2, 12, 20, true, false), 11);
    const LlamaConfig& c = m.config;
    const int64_t d = c.hidden_size, hd = c.head_dim, V = c.vocab_size;
    for (auto& g : m.weights.output_norm) g = 1.0f;
    for (auto& b : m.weights.blocks) {
        for (auto& g : b.attn_norm) g = 1.0f;
        for (auto& g : b.ffn_norm) g = 1.0f;
    }
    RotationOptions opt;
    opt.seed = 9;
    const std::vector<float> q = rotation_matrix(opt, RotationSite::residual, d);
    const std::vector<float> h = rotation_matrix(opt, RotationSite::head, hd);
    const LlamaModel before = m;
    rotate_model(m, opt);
    const BlockWeights &b0 = before.weights.blocks[1], &b1 = m.weights.blocks[1];

    expect_matrix_near(matmul(before.weights.token_embd, q, V, d, d), m.weights.token_embd, "token_embd = E·Q");
    expect_matrix_near(matmul(before.weights.output, q, V, d, d), m.weights.output, "output = W·Q");
    expect_matrix_near(matmul(b0.wq, q, c.q_dim(), d, d), b1.wq, "wq = W·Q");
    expect_matrix_near(matmul(b0.w_up, q, c.ffn_size, d, d), b1.w_up, "w_up = W·Q");
    expect_matrix_near(matmul(transpose(q, d, d), b0.w_down, d, d, c.ffn_size), b1.w_down, "w_down = Qᵀ·W");
    // wv rows of kv head g: Hᵀ·(wv_g·Q); bv_g: Hᵀ·bv_g (row form bv_g·H); q/k biases untouched.
    const std::vector<float> ht = transpose(h, hd, hd);
    const std::vector<double> wv_q = matmul(b0.wv, q, c.kv_dim(), d, d);
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
        const std::vector<float> wv_g(wv_q.begin() + g * hd * d, wv_q.begin() + (g + 1) * hd * d);
        expect_matrix_near(matmul(ht, wv_g, hd, hd, d), sub_matrix(b1.wv, d, g * hd, hd, 0, d), "wv_g = Hᵀ·W·Q");
        const std::vector<float> bv_g(b0.bv.begin() + g * hd, b0.bv.begin() + (g + 1) * hd);
        expect_matrix_near(matmul(bv_g, h, 1, hd, hd), sub_matrix(b1.bv, hd, g, 1, 0, hd), "bv_g·H");
    }
    EXPECT_EQ(b0.bq, b1.bq);
    EXPECT_EQ(b0.bk, b1.bk);
    // wo: Qᵀ·wo, then every query head's columns ·H.
    const std::vector<double> qt_wo = matmul(transpose(q, d, d), b0.wo, d, d, c.q_dim());
    const std::vector<float> qt_wo_f(qt_wo.begin(), qt_wo.end());
    for (int64_t head = 0; head < c.n_heads; ++head)
        expect_matrix_near(matmul(sub_matrix(qt_wo_f, c.q_dim(), 0, d, head * hd, hd), h, d, hd, hd),
                           sub_matrix(b1.wo, c.q_dim(), 0, d, head * hd, hd), "wo_h = (Qᵀ·W)_h·H");
}

TEST(PtqRotate, NormFusionKeepsLogitsSetsNormsToOneAndUnties) {
    for (bool tied : {true, false}) {
        LlamaModel m = random_model(tiny_llama_config(false, tied), 21);
        const std::vector<float> ref = logits_of(m);
        const LlamaModel before = m;
        fuse_rms_norms(m);
        for (float g : m.weights.output_norm) ASSERT_EQ(g, 1.0f);
        for (const auto& b : m.weights.blocks) {
            for (float g : b.attn_norm) ASSERT_EQ(g, 1.0f);
            for (float g : b.ffn_norm) ASSERT_EQ(g, 1.0f);
        }
        EXPECT_FALSE(m.config.tied_embeddings);
        check_weight_shapes(m.config, m.weights, "fused");  // untied: output present and sized
        EXPECT_EQ(m.weights.token_embd, before.weights.token_embd);
        const int64_t d = m.config.hidden_size;
        const std::vector<float>& head = tied ? before.weights.token_embd : before.weights.output;
        EXPECT_EQ(m.weights.output[5 * d + 3], head[5 * d + 3] * before.weights.output_norm[3]);  // E·diag(g)
        const double err = relative_logit_error(ref, logits_of(m));
        std::printf("fuse_rms_norms, %s: max|dlogit|/max|logit| = %.3g\n", tied ? "tied" : "untied", err);
        EXPECT_LT(err, kLogitTolerance);
    }
}

struct RotateCase {
    const char* name;
    LlamaConfig config;
};

TEST(PtqRotate, RotatedModelComputesTheSameLogits) {
    const std::vector<RotateCase> cases = {
        {"tiny tied (d 32, GQA 4/2 x 8)", tiny_llama_config(false, true)},
        {"tiny untied", tiny_llama_config(false, false)},
        {"tiny qkv bias tied", tiny_llama_config(true, true)},
        {"tiny qkv bias untied", tiny_llama_config(true, false)},
        {"d 96 = 12*8, head 24 = 12*2, GQA 4/2, bias", sized_config(96, 4, 2, 24, 80, true, true)},
        {"d 48 = 12*4, head 12, MHA 4/4, untied", sized_config(48, 4, 4, 12, 40, false, false)},
        {"SmolLM2 shape, 2 layers (d 576 = 36*16, GQA 9/3 x 64)", smollm2_shape(2)},
    };
    struct Variant {
        const char* name;
        RotationOptions opt;
    };
    std::vector<Variant> variants(5);
    variants[0] = {"r1+r2 seed 0", {}};
    variants[1] = {"r1+r2 seed 77", {}};
    variants[1].opt.seed = 77;
    variants[2] = {"r1 only", {}};
    variants[2].opt.head = false;
    variants[3] = {"r2 only", {}};
    variants[3].opt.residual = false;
    variants[4] = {"r1+r2 unrandomized", {}};
    variants[4].opt.randomized = false;
    for (const RotateCase& rc : cases) {
        const LlamaModel original = random_model(rc.config, 31);
        const std::vector<float> ref = logits_of(original);
        for (const Variant& v : variants) {
            LlamaModel m = original;
            rotate_model(m, v.opt);
            check_weight_shapes(m.config, m.weights, "rotated");
            EXPECT_EQ(m.config.tied_embeddings, rc.config.tied_embeddings && !v.opt.residual) << rc.name;
            // The weights really moved: a rotation is not the identity.
            const double moved = v.opt.residual ? max_abs_diff(m.weights.token_embd, original.weights.token_embd)
                                                : max_abs_diff(m.weights.blocks[0].wv, original.weights.blocks[0].wv);
            EXPECT_GT(moved, 0.05) << rc.name << ", " << v.name;
            const double err = relative_logit_error(ref, logits_of(m));
            std::printf("%-52s %-20s max|logit| %6.2f  max|dlogit|/max|logit| = %.3g\n", rc.name, v.name, max_abs(ref),
                        err);
            EXPECT_LT(err, kLogitTolerance) << rc.name << ", " << v.name;
        }
    }
}

TEST(PtqRotate, BrokenRotationIsCaught) {
    // The logit check has teeth: undo one piece of a correct rotation and the logits move far beyond
    // the tolerance.
    const LlamaModel original = random_model(tiny_llama_config(true, false), 41);
    const std::vector<float> ref = logits_of(original);
    LlamaModel fused = original;
    fuse_rms_norms(fused);
    LlamaModel rotated = original;
    rotate_model(rotated, {});

    LlamaModel no_down = rotated;  // one writer left unrotated
    no_down.weights.blocks[1].w_down = fused.weights.blocks[1].w_down;
    LlamaModel r1_only = original;
    RotationOptions only_r1;
    only_r1.head = false;
    rotate_model(r1_only, only_r1);
    LlamaModel head_mismatch = r1_only;  // R2 on wv but not on wo
    RotationOptions only_r2;
    only_r2.residual = false;
    LlamaModel r2 = r1_only;
    rotate_model(r2, only_r2);
    head_mismatch.weights.blocks[0].wv = r2.weights.blocks[0].wv;
    head_mismatch.weights.blocks[0].bv = r2.weights.blocks[0].bv;

    const std::vector<std::pair<const char*, const LlamaModel*>> broken = {
        {"w_down unrotated", &no_down}, {"wv rotated per head, wo not", &head_mismatch}};
    for (const auto& [name, model] : broken) {
        const double err = relative_logit_error(ref, logits_of(*model));
        std::printf("broken rotation (%s): max|dlogit|/max|logit| = %.3g\n", name, err);
        EXPECT_GT(err, 1000 * kLogitTolerance) << name;
    }
}

TEST(PtqRotate, UnsupportedSizesAreRefusedWithTheModelUntouched) {
    ASSERT_FALSE(hadamard_order_supported(88));  // 88 = 11·8 (44 is no base order)
    ASSERT_FALSE(hadamard_order_supported(22));
    {
        LlamaModel m = random_model(sized_config(88, 4, 2, 8, 40, false, true), 51);
        const LlamaModel before = m;
        try {
            rotate_model(m, {});
            ADD_FAILURE() << "d 88 was rotated";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::usage);
            const std::string msg = e.what();
            EXPECT_NE(msg.find("hidden size (R1) 88"), std::string::npos) << msg;
            EXPECT_NE(msg.find("11·8"), std::string::npos) << msg;              // the library's advice
            EXPECT_NE(msg.find("residual_block 8"), std::string::npos) << msg;  // and how to get around it
        }
        EXPECT_TRUE(same_weights(m, before));
        // The advice works: a block-diagonal R1 keeps the logits.
        RotationOptions blocked;
        blocked.residual_block = 8;
        rotate_model(m, blocked);
        EXPECT_LT(relative_logit_error(logits_of(before), logits_of(m)), kLogitTolerance);
        LlamaModel again = before;
        blocked.residual_block = 12;  // a supported order that does not divide 88
        expect_error_mentions([&] { rotate_model(again, blocked); }, "residual_block 12");
        EXPECT_TRUE(same_weights(again, before));
    }
    {
        LlamaModel m = random_model(sized_config(32, 2, 1, 22, 40, true, true), 52);  // head_dim 22 = 2·11
        const LlamaModel before = m;
        try {
            rotate_model(m, {});
            ADD_FAILURE() << "head_dim 22 was rotated";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::usage);
            EXPECT_NE(std::string(e.what()).find("head_dim (R2) 22"), std::string::npos) << e.what();
        }
        EXPECT_TRUE(same_weights(m, before));  // nothing fused, still tied
        RotationOptions no_head;
        no_head.head = false;
        rotate_model(m, no_head);
        EXPECT_LT(relative_logit_error(logits_of(before), logits_of(m)), kLogitTolerance);
    }
    {
        LlamaModel m = random_model(tiny_llama_config(), 53);
        m.weights.blocks[2].w_up.pop_back();  // a malformed model is refused (input) before anything changes
        const LlamaModel before = m;
        try {
            rotate_model(m, {});
            ADD_FAILURE() << "malformed model was rotated";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
        }
        EXPECT_TRUE(same_weights(m, before));
    }
}

TEST(PtqRotate, RotationSpreadsAPlantedOutlierColumn) {
    // One input channel of block 0 carries 20x larger weights in wq/wk/wv (what an outlier activation
    // channel folded into the weights looks like). R1 mixes it over all 576 channels.
    LlamaModel m = random_model(smollm2_shape(1), 61);
    const int64_t d = m.config.hidden_size, rows = m.config.q_dim();
    for (std::vector<float>* w : {&m.weights.blocks[0].wq, &m.weights.blocks[0].wk, &m.weights.blocks[0].wv})
        for (size_t r = 0; r < w->size(); r += size_t(d)) (*w)[r + 100] *= 20.0f;
    const std::vector<float> ref = logits_of(m);
    LlamaModel fused = m;
    fuse_rms_norms(fused);  // the unrotated baseline with the same (fused) weights
    LlamaModel rotated = m;
    rotate_model(rotated, {});
    const std::vector<float>& w0 = fused.weights.blocks[0].wq;
    const std::vector<float>& w1 = rotated.weights.blocks[0].wq;
    const double p0 = peak_to_rms(w0), p1 = peak_to_rms(w1);
    const double e0 = rtn_relative_error(w0, rows, d, mxfp4_spec()), e1 = rtn_relative_error(w1, rows, d, mxfp4_spec());
    const double i0 = rtn_relative_error(w0, rows, d, int4_g64_spec());
    const double i1 = rtn_relative_error(w1, rows, d, int4_g64_spec());
    std::printf("planted outlier column, wq [576 x 576]: max|w|/rms %.2f -> %.2f; RTN rel. error mxfp4 %.4f -> %.4f, "
                "int4 g64 %.4f -> %.4f\n",
                p0, p1, e0, e1, i0, i1);
    EXPECT_GT(p0, 15.0);      // the outlier dominates: ≈ 20·3.2σ over rms σ·sqrt(1 + 399/576) ≈ 49
    EXPECT_LT(p1, p0 / 3.0);  // spread out: what is left is Gaussian-like (≈ 4–5 for 330 k entries)
    EXPECT_LT(e1, 0.8 * e0);
    EXPECT_LT(i1, 0.8 * i0);
    EXPECT_LT(relative_logit_error(ref, logits_of(rotated)), kLogitTolerance);
}

TEST(PtqRotate, DescribeNamesTheRotation) {
    RotationOptions o;
    EXPECT_EQ(describe(o), "hadamard r1+r2 seed 0");
    o.seed = 3;
    o.head = false;
    o.residual_block = 128;
    EXPECT_EQ(describe(o), "hadamard r1 block 128 seed 3");
    o.residual = false;
    o.head = true;
    o.randomized = false;
    EXPECT_EQ(describe(o), "hadamard r2 unrandomized");
    o.head = false;
    EXPECT_EQ(describe(o), "none");
}

TEST(PtqRotate, RealSmolLm2LogitsAndRtnErrors) {
    const std::string path = cached_model_path("smollm2-135m");
    if (path.empty() || !std::filesystem::exists(path))
        GTEST_SKIP() << "SmolLM2-135M GGUF absent (run scripts/fetch_model.sh)";
    const LlamaModel original = load_llama_model(path);
    const LlamaConfig& c = original.config;
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
    const std::vector<int32_t> sentence =
        tok.encode("The rotation of the residual stream leaves the function of the network unchanged.", tok.add_bos());
    const BatchShape shape{1, int64_t(sentence.size())};
    const std::vector<float> ref = forward_logits(original, sentence.data(), shape);

    LlamaModel rotated = original;
    rotate_model(rotated, {});
    EXPECT_FALSE(rotated.config.tied_embeddings);
    const double err = relative_logit_error(ref, forward_logits(rotated, sentence.data(), shape));
    std::printf("SmolLM2-135M (Q4_1 dequantized), %lld tokens: max|logit| %.2f, after r1+r2 max|dlogit|/max|logit| = "
                "%.3g\n",
                (long long)shape.n_tok, max_abs(ref), err);
    EXPECT_LT(err, kLogitTolerance);

    // Every projection RTN-quantized (FakeQuantLinear, exactly `formats roundtrip`) in three models: as
    // loaded, norms fused, r1+r2. Reported: the relative Frobenius weight error over all 210 projections
    // (the rotation is orthonormal, so the error in the rotated basis is the error in the original one),
    // the largest max|w|/rms of a projection, and perplexity on 2 windows of 256 of the SOTU test split.
    // Caveat: the source is Q4_1 (blocks of 32 along in_features), so unrotated int4 g32 would rebuild it
    // almost exactly; int4 g64 spans two Q4_1 blocks and mxfp4 shares the blocks but not the uniform grid,
    // yet both may still favour the unrotated weights somewhat (they are already on a 16-level grid).
    std::string text;
    try {
        text = read_corpus_text("sotu-test");
    } catch (const Error& e) {
        GTEST_SKIP() << "SOTU corpus not available: " << e.what();
    }
    const std::vector<int32_t> tokens = tok.encode(text, tok.add_bos());
    PerplexityOptions opt;
    opt.n_ctx = 256;
    opt.max_chunks = 2;
    opt.add_bos = tok.add_bos();
    opt.bos_id = tok.bos_id();
    opt.progress = false;
    const double base = evaluate_perplexity(tokens, c.vocab_size, opt, cpu_window_logits(original)).ppl;
    std::printf("SmolLM2-135M sotu-test 2x256 PPL fp32 %.4f\n", base);
    LlamaModel fused = original;
    fuse_rms_norms(fused);
    const std::vector<std::pair<const char*, const LlamaModel*>> models = {
        {"as loaded", &original}, {"norms fused", &fused}, {"r1+r2", &rotated}};
    for (const QuantSpec& spec : {mxfp4_spec(), int4_g64_spec()})
        for (const auto& [name, m] : models) {
            const ModelLinears linears = make_model_linears(*m, fake_quant_linears(spec));
            double err2 = 0, norm2 = 0, peak = 0;
            for (int64_t l = 0; l < c.n_layers; ++l)
                for (Projection p : kProjections) {
                    const std::vector<float>& w = projection_weight(m->weights.blocks[size_t(l)], p);
                    const auto& fq = dynamic_cast<const FakeQuantLinear&>(linears[size_t(l)][p]);
                    const std::vector<float>& q = fq.dequantized_weights();
                    for (size_t i = 0; i < w.size(); ++i) {
                        err2 += (double(w[i]) - q[i]) * (double(w[i]) - q[i]);
                        norm2 += double(w[i]) * w[i];
                    }
                    peak = std::max(peak, peak_to_rms(w));
                }
            const double p = evaluate_perplexity(tokens, c.vocab_size, opt, cpu_window_logits(*m, &linears)).ppl;
            std::printf("SmolLM2-135M RTN %-13s %-11s: rel. weight error %.4f, largest max|w|/rms %5.1f, PPL %.4f\n",
                        spec.describe().c_str(), name, std::sqrt(err2 / norm2), peak, p);
            EXPECT_TRUE(std::isfinite(p));
        }
}
