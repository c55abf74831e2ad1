// test_model.cpp — the Llama-family model layer: RMSNorm, RoPE (pairings and llama3 scaling), GQA causal
// attention against a naive double-precision implementation, block streaming and batching invariants,
// config from GGUF metadata and config.json, the GGUF load path of a tiny model written here, the
// perplexity protocol against a hand-computed NLL, the scoring-provider path of the evaluator (same targets,
// same result), the KLD base file, and (when the file is present) the real SmolLM2-135M GGUF.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/random_fill.h"
#include "io/gguf_file.h"
#include "model/config.h"
#include "model/eval.h"
#include "model/forward_cpu.h"
#include "model/hf_export.h"
#include "model/weights.h"

using namespace lowbit;

namespace {

LlamaConfig tiny_config(bool qkv_bias = false, bool tied = true) { return tiny_llama_config(qkv_bias, tied); }

LlamaModel tiny_model(bool qkv_bias = false, bool tied = true, uint64_t seed = 7) {
    LlamaModel m;
    m.config = tiny_config(qkv_bias, tied);
    // Large enough weights that attention is far from uniform and the blocks matter.
    m.weights = random_llama_weights(m.config, seed, 0.3f);
    return m;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[i] = int32_t(counter_random24(seed, uint64_t(i)) % uint32_t(vocab));
    return t;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
    return m;
}

// The same model with q/k rows (and biases) permuted the way llama.cpp's converter does, run with
// adjacent-pair RoPE — what a GGUF of arch llama holds.
LlamaModel to_gguf_layout(const LlamaModel& hf) {
    LlamaModel g = hf;
    const LlamaConfig& c = hf.config;
    g.config.rope_pairing = RopePairing::adjacent;
    for (auto& b : g.weights.blocks) {
        b.wq = permute_qk_rows_to_gguf(b.wq, c.n_heads, c.head_dim, c.hidden_size);
        b.wk = permute_qk_rows_to_gguf(b.wk, c.n_kv_heads, c.head_dim, c.hidden_size);
        if (c.qkv_bias) {
            b.bq = permute_qk_rows_to_gguf(b.bq, c.n_heads, c.head_dim, 1);
            b.bk = permute_qk_rows_to_gguf(b.bk, c.n_kv_heads, c.head_dim, 1);
        }
    }
    return g;
}

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / fmt::format("lowbit_test_model_{}_{}", getpid(), name)).string();
}

void expect_error_mentions(const std::function<void()>& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// reference operations

TEST(ModelOps, RmsNormMatchesHandComputedValues) {
    const float x[4] = {1, 2, 3, 4}, w[4] = {1, 0.5f, 2, -1};
    float y[4];
    rms_norm_rows(x, w, 1, 4, 0.0f, y);
    const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0);  // sqrt(7.5)
    EXPECT_NEAR(y[0], 1 / rms, 1e-6);
    EXPECT_NEAR(y[1], 2 / rms * 0.5, 1e-6);
    EXPECT_NEAR(y[2], 3 / rms * 2, 1e-6);
    EXPECT_NEAR(y[3], -4 / rms, 1e-6);
    // eps enters under the root; in place works.
    float z[2] = {3, 4};
    const float ones[2] = {1, 1};
    rms_norm_rows(z, ones, 1, 2, 0.5f, z);
    EXPECT_NEAR(z[0], 3 / std::sqrt(12.5 + 0.5), 1e-6);
}

TEST(ModelOps, RopeRotatesThePairsOfEachPairing) {
    LlamaConfig c = tiny_config();
    c.head_dim = 4;
    c.rope_theta = 100.0;  // inv_freq = {1, 0.1}
    std::vector<float> ct, st;
    rope_tables(c, 3, ct, st);
    const double a = 2.0 * 1.0, b = 2.0 * 0.1;  // position 2
    EXPECT_NEAR(ct[2 * 2 + 0], std::cos(a), 1e-7);
    EXPECT_NEAR(st[2 * 2 + 1], std::sin(b), 1e-7);
    // One head, one sequence of 3; look at position 2.
    std::vector<float> x = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    std::vector<float> halves = x, adjacent = x;
    apply_rope(halves.data(), {1, 3}, 1, 4, RopePairing::halves, ct.data(), st.data());
    apply_rope(adjacent.data(), {1, 3}, 1, 4, RopePairing::adjacent, ct.data(), st.data());
    // halves: pairs (0,2) at angle a and (1,3) at angle b.
    EXPECT_NEAR(halves[8], 1 * std::cos(a) - 3 * std::sin(a), 1e-6);
    EXPECT_NEAR(halves[10], 1 * std::sin(a) + 3 * std::cos(a), 1e-6);
    EXPECT_NEAR(halves[9], 2 * std::cos(b) - 4 * std::sin(b), 1e-6);
    EXPECT_NEAR(halves[11], 2 * std::sin(b) + 4 * std::cos(b), 1e-6);
    // adjacent: pairs (0,1) at angle a and (2,3) at angle b.
    EXPECT_NEAR(adjacent[8], 1 * std::cos(a) - 2 * std::sin(a), 1e-6);
    EXPECT_NEAR(adjacent[9], 1 * std::sin(a) + 2 * std::cos(a), 1e-6);
    EXPECT_NEAR(adjacent[10], 3 * std::cos(b) - 4 * std::sin(b), 1e-6);
    EXPECT_NEAR(adjacent[11], 3 * std::sin(b) + 4 * std::cos(b), 1e-6);
    // Position 0 is the identity.
    for (int i = 0; i < 4; ++i) EXPECT_EQ(halves[i], 0.0f);
}

TEST(ModelOps, RopeHalvesEqualsAdjacentUnderTheConverterPermutation) {
    LlamaConfig c = tiny_config();
    const int64_t n_tok = 5, heads = 3, hd = 8;
    std::vector<float> ct, st;
    rope_tables(c, n_tok, ct, st);
    std::vector<float> x(static_cast<size_t>(n_tok * heads * hd));
    fill_gaussian(x.data(), int64_t(x.size()), 11);
    // rows of the permutation = head rows; do it per token (cols = 1 per element of a row vector).
    auto permute_tokens = [&](const std::vector<float>& v, bool to_gguf) {
        std::vector<float> out(v.size());
        for (int64_t t = 0; t < n_tok; ++t) {
            std::vector<float> row(v.begin() + t * heads * hd, v.begin() + (t + 1) * heads * hd);
            row = to_gguf ? permute_qk_rows_to_gguf(row, heads, hd, 1) : permute_qk_rows_to_hf(row, heads, hd, 1);
            std::copy(row.begin(), row.end(), out.begin() + t * heads * hd);
        }
        return out;
    };
    std::vector<float> hf = x;
    apply_rope(hf.data(), {1, n_tok}, heads, hd, RopePairing::halves, ct.data(), st.data());
    std::vector<float> gg = permute_tokens(x, true);
    apply_rope(gg.data(), {1, n_tok}, heads, hd, RopePairing::adjacent, ct.data(), st.data());
    EXPECT_EQ(permute_tokens(gg, false), hf);  // same arithmetic on the same pairs: bit-identical
    // The permutation and its inverse.
    EXPECT_EQ(permute_qk_rows_to_hf(permute_qk_rows_to_gguf(x, heads * n_tok, hd, 1), heads * n_tok, hd, 1), x);
    // Spot check against convert_hf_to_gguf's reshape(n_head, 2, hd/2).swapaxes(1, 2): GGUF row 2i+j = HF row j·hd/2+i.
    std::vector<float> r = {0, 1, 2, 3, 4, 5, 6, 7};
    EXPECT_EQ(permute_qk_rows_to_gguf(r, 1, 8, 1), (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
}

TEST(ModelOps, Llama3RopeScalingMatchesHandComputedFrequencies) {
    LlamaConfig c = tiny_config();
    c.head_dim = 128;
    c.rope_theta = 500000.0;
    c.rope_scaling = RopeScaling::llama3;
    c.rope_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_context = 8192;
    const std::vector<double> f = rope_inv_freq(c);
    ASSERT_EQ(f.size(), 64u);
    // Values computed by hand (Python, transformers' formula): i = 0 keeps its frequency (wavelength
    // 2π < 8192/4), i = 30 and 32 fall in the smooth band, i = 63 is divided by the factor.
    EXPECT_DOUBLE_EQ(f[0], 1.0);
    EXPECT_NEAR(f[30], 0.0013718935677611381, 1e-15);
    EXPECT_NEAR(f[32], 0.0005248461609929546, 1e-15);
    EXPECT_NEAR(f[63], 3.068925988914511e-07, 1e-20);
    // Linear scaling divides every frequency; GGUF rope_freqs divisors divide each entry.
    LlamaConfig lin = c;
    lin.rope_scaling = RopeScaling::linear;
    lin.rope_factor = 4.0;
    EXPECT_NEAR(rope_inv_freq(lin)[32], 0.001414213562373095 / 4, 1e-15);
    LlamaConfig div = c;
    div.rope_scaling = RopeScaling::none;
    div.rope_freq_divisors.assign(64, 1.0f);
    div.rope_freq_divisors[63] = 8.0f;
    EXPECT_NEAR(rope_inv_freq(div)[63], 3.068925988914511e-07, 1e-20);
}

TEST(ModelOps, GqaCausalAttentionMatchesNaiveDoublePrecision) {
    const int64_t n_seq = 2, T = 7, H = 6, KV = 2, hd = 8;
    const BatchShape shape{n_seq, T};
    std::vector<float> q(size_t(n_seq * T * H * hd)), k(size_t(n_seq * T * KV * hd)), v(k.size()), out(q.size());
    fill_gaussian(q.data(), int64_t(q.size()), 1);
    fill_gaussian(k.data(), int64_t(k.size()), 2);
    fill_gaussian(v.data(), int64_t(v.size()), 3);
    for (auto& x : q) x *= 2.0f;  // peaky attention
    attention_causal(q.data(), k.data(), v.data(), shape, H, KV, hd, out.data());
    double worst = 0;
    for (int64_t s = 0; s < n_seq; ++s)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / KV);  // query heads 0-2 → kv 0, 3-5 → kv 1
            for (int64_t t = 0; t < T; ++t) {
                std::vector<double> p(static_cast<size_t>(t + 1));
                double m = -1e300, z = 0;
                for (int64_t j = 0; j <= t; ++j) {
                    double dot = 0;
                    for (int64_t e = 0; e < hd; ++e)
                        dot += double(q[((s * T + t) * H + h) * hd + e]) * double(k[((s * T + j) * KV + g) * hd + e]);
                    p[j] = dot / std::sqrt(double(hd));
                    m = std::max(m, p[j]);
                }
                for (auto& x : p) z += (x = std::exp(x - m));
                for (int64_t e = 0; e < hd; ++e) {
                    double o = 0;
                    for (int64_t j = 0; j <= t; ++j) o += p[j] / z * double(v[((s * T + j) * KV + g) * hd + e]);
                    worst = std::max(worst, std::abs(o - double(out[((s * T + t) * H + h) * hd + e])));
                }
            }
        }
    EXPECT_LT(worst, 2e-6);
}

// ---------------------------------------------------------------------------------------------------
// forward invariants

TEST(ModelForward, LogitsOfTokenTDoNotDependOnLaterTokens) {
    const LlamaModel m = tiny_model(true, false);
    const int64_t T = 12;
    std::vector<int32_t> a = random_tokens(T, m.config.vocab_size, 5), b = a;
    for (int64_t t = 7; t < T; ++t) b[t] = (b[t] + 13) % int32_t(m.config.vocab_size);
    const auto la = forward_logits(m, a.data(), {1, T}), lb = forward_logits(m, b.data(), {1, T});
    const int64_t V = m.config.vocab_size;
    for (int64_t t = 0; t < T; ++t) {
        double diff = 0;
        for (int64_t i = 0; i < V; ++i) diff = std::max(diff, double(std::abs(la[t * V + i] - lb[t * V + i])));
        if (t < 7)
            EXPECT_EQ(diff, 0.0) << "position " << t;
        else
            EXPECT_GT(diff, 1e-3) << "position " << t;  // the changed tokens do matter
    }
}

TEST(ModelForward, BlockAtATimeEqualsWholeForward) {
    const LlamaModel m = tiny_model(false, false);
    const LlamaConfig& c = m.config;
    const int64_t T = 10;
    const BatchShape shape{2, T};
    const std::vector<int32_t> tok = random_tokens(shape.rows(), c.vocab_size, 9);
    const std::vector<float> whole = forward_logits(m, tok.data(), shape, 3);

    // Stream: a fresh scratch per block (as a PTQ pass that frees everything between blocks) and a
    // block copied out of the model just before use.
    std::vector<float> hidden = embed_tokens(c, m.weights.token_embd.data(), tok.data(), shape);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const BlockWeights blk = m.weights.blocks[l];
        const std::vector<float> input = hidden;
        BlockScratch s;
        block_forward(c, blk, l, hidden.data(), shape, s);
        // The scratch holds the inputs of the linear layers: check the first one.
        std::vector<float> expect_in(input.size());
        rms_norm_rows(input.data(), blk.attn_norm.data(), shape.rows(), c.hidden_size, c.rms_eps, expect_in.data());
        EXPECT_EQ(s.attn_in, expect_in);
        EXPECT_EQ(s.ffn_act.size(), size_t(shape.rows() * c.ffn_size));
    }
    std::vector<float> logits(static_cast<size_t>(2 * (T - 3) * c.vocab_size));
    for (int64_t sq = 0; sq < 2; ++sq)
        final_norm_and_logits(c, m.weights.output_norm.data(), m.weights.output_matrix(),
                              hidden.data() + (sq * T + 3) * c.hidden_size, T - 3,
                              logits.data() + sq * (T - 3) * c.vocab_size);
    EXPECT_EQ(logits, whole);
}

TEST(ModelForward, BatchOfSequencesEqualsEachSequenceAlone) {
    const LlamaModel m = tiny_model(true, true);
    const int64_t T = 9, S = 3, V = m.config.vocab_size;
    const std::vector<int32_t> tok = random_tokens(S * T, V, 21);
    const std::vector<float> batch = forward_logits(m, tok.data(), {S, T});
    for (int64_t s = 0; s < S; ++s) {
        const std::vector<float> alone = forward_logits(m, tok.data() + s * T, {1, T});
        const std::vector<float> part(batch.begin() + s * T * V, batch.begin() + (s + 1) * T * V);
        EXPECT_LT(max_abs_diff(part, alone), 1e-4) << "sequence " << s;  // BLAS blocking may differ
    }
}

TEST(ModelForward, AdjacentPairingOnPermutedWeightsEqualsHalvesOnHfWeights) {
    for (bool bias : {false, true}) {
        const LlamaModel hf = tiny_model(bias, !bias, 31);
        const LlamaModel gg = to_gguf_layout(hf);
        const int64_t T = 11;
        const std::vector<int32_t> tok = random_tokens(T, hf.config.vocab_size, 4);
        const auto a = forward_logits(hf, tok.data(), {1, T}), b = forward_logits(gg, tok.data(), {1, T});
        EXPECT_LT(max_abs_diff(a, b), 1e-4) << "bias " << bias;
        // And the wrong pairing on permuted weights is really different (the test has teeth).
        LlamaModel wrong = gg;
        wrong.config.rope_pairing = RopePairing::halves;
        EXPECT_GT(max_abs_diff(a, forward_logits(wrong, tok.data(), {1, T})), 1e-2);
    }
}

TEST(ModelForward, OutOfVocabularyTokenIsRefused) {
    const LlamaModel m = tiny_model();
    std::vector<int32_t> tok = {1, 2, int32_t(m.config.vocab_size)};
    expect_error_mentions([&] { forward_logits(m, tok.data(), {1, 3}); }, "outside the vocabulary");
}

// ---------------------------------------------------------------------------------------------------
// config and files

namespace {

// A GGUF of arch `arch` holding `m` (whose q/k rows are in the layout that arch expects), all F32.
void write_model_gguf(const LlamaModel& m, const std::string& arch, const std::string& path,
                      GgufType matrix_type = GgufType::F32) {
    const LlamaConfig& c = m.config;
    GgufWriter w;
    w.set_string("general.architecture", arch);
    w.set_string("general.name", "tiny test model");
    const std::string p = arch + ".";
    w.set_u32(p + "context_length", uint32_t(c.context_length));
    w.set_u32(p + "embedding_length", uint32_t(c.hidden_size));
    w.set_u32(p + "block_count", uint32_t(c.n_layers));
    w.set_u32(p + "feed_forward_length", uint32_t(c.ffn_size));
    w.set_u32(p + "attention.head_count", uint32_t(c.n_heads));
    w.set_u32(p + "attention.head_count_kv", uint32_t(c.n_kv_heads));
    w.set_f32(p + "rope.freq_base", float(c.rope_theta));
    w.set_f32(p + "attention.layer_norm_rms_epsilon", c.rms_eps);
    w.set_u32(p + "rope.dimension_count", uint32_t(c.head_dim));
    w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(c.bos_token_id));
    const int64_t d = c.hidden_size;
    auto mat = [&](const std::string& name, const std::vector<float>& v, int64_t rows, int64_t cols, GgufType t) {
        w.add_tensor(name, {cols, rows}, t, v.data());
    };
    auto vec = [&](const std::string& name, const std::vector<float>& v) {
        w.add_tensor(name, {int64_t(v.size())}, GgufType::F32, v.data());
    };
    mat("token_embd.weight", m.weights.token_embd, c.vocab_size, d, matrix_type);
    vec("output_norm.weight", m.weights.output_norm);
    if (!c.tied_embeddings) mat("output.weight", m.weights.output, c.vocab_size, d, matrix_type);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const BlockWeights& b = m.weights.blocks[l];
        auto n = [&](const char* t) { return fmt::format("blk.{}.{}", l, t); };
        vec(n("attn_norm.weight"), b.attn_norm);
        mat(n("attn_q.weight"), b.wq, c.q_dim(), d, matrix_type);
        mat(n("attn_k.weight"), b.wk, c.kv_dim(), d, matrix_type);
        mat(n("attn_v.weight"), b.wv, c.kv_dim(), d, matrix_type);
        mat(n("attn_output.weight"), b.wo, d, c.q_dim(), matrix_type);
        if (c.qkv_bias) {
            vec(n("attn_q.bias"), b.bq);
            vec(n("attn_k.bias"), b.bk);
            vec(n("attn_v.bias"), b.bv);
        }
        vec(n("ffn_norm.weight"), b.ffn_norm);
        mat(n("ffn_gate.weight"), b.w_gate, c.ffn_size, d, matrix_type);
        mat(n("ffn_up.weight"), b.w_up, c.ffn_size, d, matrix_type);
        mat(n("ffn_down.weight"), b.w_down, d, c.ffn_size, matrix_type);
    }
    w.write(path);
}

}  // namespace

TEST(ModelConfig, FromGgufMetadata) {
    const LlamaModel m = tiny_model(false, true);
    const std::string path = temp_path("cfg.gguf");
    write_model_gguf(to_gguf_layout(m), "llama", path);
    const LlamaConfig c = config_from_gguf(GgufFile::open(path));
    EXPECT_EQ(c.architecture, "llama");
    EXPECT_EQ(c.name, "tiny test model");
    EXPECT_EQ(c.vocab_size, 61);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.n_layers, 3);
    EXPECT_EQ(c.n_heads, 4);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.ffn_size, 48);
    EXPECT_EQ(c.context_length, 4096);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.rope_pairing, RopePairing::adjacent);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ(c.bos_token_id, 1);
    std::remove(path.c_str());

    // qwen2: neox pairing, biases found from the tensor list, untied.
    const LlamaModel q = tiny_model(true, false);
    write_model_gguf(q, "qwen2", path);
    const LlamaConfig cq = config_from_gguf(GgufFile::open(path));
    EXPECT_EQ(cq.architecture, "qwen2");
    EXPECT_EQ(cq.rope_pairing, RopePairing::halves);
    EXPECT_TRUE(cq.qkv_bias);
    EXPECT_FALSE(cq.tied_embeddings);
    std::remove(path.c_str());
}

TEST(ModelConfig, UnknownArchitecturesAreRefused) {
    const std::string path = temp_path("gpt2.gguf");
    GgufWriter w;
    w.set_string("general.architecture", "gpt2");
    w.write(path);
    expect_error_mentions([&] { config_from_gguf(GgufFile::open(path)); }, "'gpt2' is not supported");
    std::remove(path.c_str());
    expect_error_mentions([&] { config_from_hf_json(nlohmann::json{{"model_type", "mixtral"}}, "config.json"); },
                          "'mixtral' is not supported");
    expect_error_mentions([&] { config_from_hf_json(nlohmann::json{{"n_embd", 768}}, "config.json"); }, "model_type");
}

TEST(ModelConfig, FromHfConfigJsonBothRopeFormats) {
    // Llama-3.1-style, older form: top-level rope_theta + rope_scaling.
    nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"vocab_size", 128256},
                        {"hidden_size", 4096},
                        {"intermediate_size", 14336},
                        {"num_hidden_layers", 32},
                        {"num_attention_heads", 32},
                        {"num_key_value_heads", 8},
                        {"max_position_embeddings", 131072},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 500000.0},
                        {"rope_scaling",
                         {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}}},
                        {"tie_word_embeddings", false},
                        {"bos_token_id", 128000},
                        {"eos_token_id", {128001, 128008, 128009}},
                        {"hidden_act", "silu"}};
    const LlamaConfig a = config_from_hf_json(j, "config.json");
    EXPECT_EQ(a.head_dim, 128);
    EXPECT_EQ(a.n_kv_heads, 8);
    EXPECT_EQ(a.rope_pairing, RopePairing::halves);
    EXPECT_EQ(a.rope_scaling, RopeScaling::llama3);
    EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
    EXPECT_DOUBLE_EQ(a.rope_factor, 8.0);
    EXPECT_EQ(a.rope_original_context, 8192);
    EXPECT_EQ(a.eos_token_id, 128001);
    EXPECT_FALSE(a.tied_embeddings);
    EXPECT_FALSE(a.qkv_bias);

    // transformers v5: rope_parameters carries theta and the scaling.
    nlohmann::json v5 = j;
    v5.erase("rope_theta");
    v5.erase("rope_scaling");
    v5["rope_parameters"] = {{"rope_type", "llama3"},       {"rope_theta", 500000.0},       {"factor", 8.0},
                             {"low_freq_factor", 1.0},      {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
    const LlamaConfig b = config_from_hf_json(v5, "config.json");
    EXPECT_DOUBLE_EQ(b.rope_theta, 500000.0);
    EXPECT_EQ(rope_inv_freq(a), rope_inv_freq(b));
    nlohmann::json v5_default = j;
    v5_default.erase("rope_scaling");
    v5_default["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100000.0}};
    const LlamaConfig d = config_from_hf_json(v5_default, "config.json");
    EXPECT_EQ(d.rope_scaling, RopeScaling::none);
    EXPECT_DOUBLE_EQ(d.rope_theta, 100000.0);

    // Qwen2: q/k/v biases implied; tied embeddings.
    nlohmann::json q = {{"model_type", "qwen2"},       {"vocab_size", 151936}, {"hidden_size", 896},
                        {"intermediate_size", 4864},   {"num_hidden_layers", 24}, {"num_attention_heads", 14},
                        {"num_key_value_heads", 2},    {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
                        {"tie_word_embeddings", true}, {"use_sliding_window", false}};
    const LlamaConfig cq = config_from_hf_json(q, "config.json");
    EXPECT_TRUE(cq.qkv_bias);
    EXPECT_TRUE(cq.tied_embeddings);
    EXPECT_EQ(cq.head_dim, 64);

    // Unsupported variants are refused with the reason.
    nlohmann::json yarn = j;
    yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    expect_error_mentions([&] { config_from_hf_json(yarn, "config.json"); }, "'yarn' is not supported");
    nlohmann::json bias = j;
    bias["attention_bias"] = true;
    expect_error_mentions([&] { config_from_hf_json(bias, "config.json"); }, "attention_bias");

    // Round trip through the exporter's config.json.
    const LlamaConfig r = config_from_hf_json(config_to_hf_json(a), "exported");
    EXPECT_EQ(rope_inv_freq(r), rope_inv_freq(a));
    EXPECT_EQ(r.n_kv_heads, a.n_kv_heads);
    EXPECT_EQ(config_from_hf_json(config_to_hf_json(cq), "exported").qkv_bias, true);
}

TEST(ModelFiles, TinyGgufLoadsThroughTheFullPath) {
    for (bool bias : {false, true}) {
        const LlamaModel hf = tiny_model(bias, !bias, 41);
        const std::string path = temp_path("tiny.gguf");
        // arch llama stores permuted q/k (adjacent pairing); qwen2 stores HF order (halves).
        if (bias)
            write_model_gguf(hf, "qwen2", path);
        else
            write_model_gguf(to_gguf_layout(hf), "llama", path);
        const LlamaModel loaded = load_llama_model(path);
        EXPECT_EQ(loaded.config.rope_pairing, bias ? RopePairing::halves : RopePairing::adjacent);
        const int64_t T = 13;
        const std::vector<int32_t> tok = random_tokens(2 * T, hf.config.vocab_size, 8);
        EXPECT_LT(max_abs_diff(forward_logits(hf, tok.data(), {2, T}), forward_logits(loaded, tok.data(), {2, T})), 1e-4)
            << "bias " << bias;
        // Block-wise reader returns the same block as the full load.
        auto reader = ModelReader::open(path);
        EXPECT_EQ(reader->block(2).w_down, loaded.weights.blocks[2].w_down);
        EXPECT_EQ(reader->format(), "gguf");
        std::remove(path.c_str());
    }
}

TEST(ModelFiles, MissingTensorIsNamed) {
    LlamaModel m = tiny_model();
    const std::string path = temp_path("broken.gguf");
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.embedding_length", 32);
    w.set_u32("llama.block_count", 1);
    w.set_u32("llama.feed_forward_length", 48);
    w.set_u32("llama.attention.head_count", 4);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_tensor("token_embd.weight", {32, 61}, GgufType::F32, m.weights.token_embd.data());
    w.write(path);
    expect_error_mentions([&] { load_llama_model(path); }, "output_norm.weight");
    std::remove(path.c_str());
}

TEST(ModelFiles, HfExportUnpermutesAndReadsBack) {
    for (bool bias : {false, true}) {
        const LlamaModel hf = tiny_model(bias, !bias, 51);
        const std::string gguf = temp_path("exp.gguf"), dir = temp_path(fmt::format("hf{}", int(bias)));
        if (bias)
            write_model_gguf(hf, "qwen2", gguf);
        else
            write_model_gguf(to_gguf_layout(hf), "llama", gguf);
        // Tiny shards force the sharded layout (index + several files).
        const HfExportReport rep = export_hf_checkpoint(*ModelReader::open(gguf), dir, bias ? kHfShardBytes : 40000);
        EXPECT_EQ(rep.unpermuted_qk, !bias);
        EXPECT_EQ(std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors.index.json"), !bias);
        const auto reader = ModelReader::open(dir);
        EXPECT_EQ(reader->format(), "safetensors");
        EXPECT_EQ(reader->config().architecture, bias ? "qwen2" : "llama");
        EXPECT_EQ(reader->config().rope_pairing, RopePairing::halves);
        // The exported q/k rows are the HF originals, exactly.
        EXPECT_EQ(reader->block(1).wq, hf.weights.blocks[1].wq);
        EXPECT_EQ(reader->block(2).wk, hf.weights.blocks[2].wk);
        if (bias) {
            EXPECT_EQ(reader->block(0).bk, hf.weights.blocks[0].bk);
        }
        const LlamaModel back = load_llama_model(*reader);
        const int64_t T = 9;
        const std::vector<int32_t> tok = random_tokens(T, hf.config.vocab_size, 12);
        EXPECT_EQ(forward_logits(back, tok.data(), {1, T}), forward_logits(hf, tok.data(), {1, T}));
        std::remove(gguf.c_str());
        std::filesystem::remove_all(dir);
    }
}

// ---------------------------------------------------------------------------------------------------
// evaluation

namespace {

// The protocol's options for the tiny models: BOS (id 1) first in every window, no progress line.
PerplexityOptions bos_options(int64_t n_ctx, int64_t seqs_per_batch) {
    PerplexityOptions opt;
    opt.n_ctx = n_ctx;
    opt.add_bos = true;
    opt.bos_id = 1;
    opt.progress = false;
    opt.seqs_per_batch = seqs_per_batch;
    return opt;
}

}  // namespace

TEST(ModelEval, PerplexityProtocolMatchesHandComputedNll) {
    const LlamaModel m = tiny_model(false, true, 3);
    const int64_t V = m.config.vocab_size, n_ctx = 8;
    const std::vector<int32_t> text = random_tokens(27, V, 77);  // 3 windows, 3 tokens dropped
    PerplexityOptions opt = bos_options(n_ctx, 2);  // windows 0-1 together, then 2
    const PerplexityResult r = evaluate_perplexity(text, V, opt, cpu_window_logits(m));
    EXPECT_EQ(r.n_chunks, 3);
    EXPECT_EQ(r.n_scored, 3 * 3);  // n_ctx − 1 − n_ctx/2 = 3 per window

    // By hand: each window alone, BOS first, positions 4, 5, 6 predict tokens 5, 6, 7 (originals).
    std::vector<double> nll;
    for (int64_t c = 0; c < 3; ++c) {
        std::vector<int32_t> w(text.begin() + c * n_ctx, text.begin() + (c + 1) * n_ctx);
        w[0] = 1;
        const auto lg = forward_logits(m, w.data(), {1, n_ctx});
        for (int64_t pos = 4; pos <= 6; ++pos) {
            double mx = -1e300, z = 0;
            for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(lg[pos * V + i]));
            for (int64_t i = 0; i < V; ++i) z += std::exp(double(lg[pos * V + i]) - mx);
            nll.push_back(mx + std::log(z) - double(lg[pos * V + text[c * n_ctx + pos + 1]]));
        }
    }
    double mean = 0, mean2 = 0;
    for (double x : nll) mean += x / double(nll.size()), mean2 += x * x / double(nll.size());
    const double ppl = std::exp(mean), err = ppl * std::sqrt((mean2 - mean * mean) / double(nll.size() - 1));
    EXPECT_NEAR(r.ppl, ppl, 1e-4 * ppl);
    EXPECT_NEAR(r.ppl_err, err, 1e-3 * err);
    EXPECT_NEAR(r.mean_nll, mean, 1e-5);
    ASSERT_EQ(r.chunk_ppl.size(), 3u);
    EXPECT_NEAR(std::log(r.chunk_ppl[1]), (nll[3] + nll[4] + nll[5]) / 3, 1e-5);

    // --chunks limits; too little text is refused (llama.cpp needs 2·n_ctx tokens).
    opt.max_chunks = 1;
    EXPECT_EQ(evaluate_perplexity(text, V, opt, cpu_window_logits(m)).n_chunks, 1);
    const std::vector<int32_t> short_text(text.begin(), text.begin() + 15);
    expect_error_mentions([&] { evaluate_perplexity(short_text, V, opt, cpu_window_logits(m)); }, "at least 16");
}

TEST(ModelEval, TokenScoreIsTheFirstMaximumAndTheNll) {
    const float l[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, -INFINITY};
    const TokenScore s = token_score(l, 6, 2);
    EXPECT_EQ(s.argmax, 1);  // the first of two equal maxima
    const double lse = 3.0 + std::log(std::exp(-2.0) + 1 + std::exp(-5.0) + 1 + std::exp(-2.5));  // exp(−Inf) = 0
    EXPECT_NEAR(s.nll, lse + 2.0, 1e-6);
    EXPECT_EQ(s.nll, token_nll(l, 6, 2));
    // Logits far from 0: the max is subtracted first (exp(100) overflows FP32).
    const float big[4] = {-100.0f, 100.0f, 99.0f, -80.0f};
    const TokenScore b = token_score(big, 4, 0);
    EXPECT_EQ(b.argmax, 1);
    EXPECT_NEAR(b.nll, 200.0 + std::log1p(std::exp(-1.0)), 3e-5);  // FP32 result: ulp(200) = 1.5e-5
    EXPECT_NEAR(token_score(big, 4, 1).nll, std::log1p(std::exp(-1.0)), 8e-6);  // (100 + lse) − 100: ulp(100) = 7.6e-6
    const float nan_row[3] = {0.0f, NAN, 1.0f};
    EXPECT_TRUE(std::isnan(token_score(nan_row, 3, 0).nll));
}

// The scoring provider (WindowNllFn): the evaluator hands it the protocol's windows (BOS first) and
// targets; one that scores on the host like the evaluator gives bit-identical results. A run that needs the
// logits on the host (--save-logits, --kld-base) does not use it.
TEST(ModelEval, ScoringProviderGetsTheProtocolsTargetsAndGivesTheSameResult) {
    const LlamaModel m = tiny_model(false, true, 3);
    const int64_t V = m.config.vocab_size, n_ctx = 10, first = 5, n_score = 4;
    const std::vector<int32_t> text = random_tokens(47, V, 78);  // 4 windows, 7 tokens dropped
    PerplexityOptions opt = bos_options(n_ctx, 3);  // windows 0-2 together, then 3
    int calls = 0;
    std::vector<int32_t> seen_targets;
    const WindowNllFn host_scoring = [&](const int32_t* t, BatchShape shape, int64_t first_pos, int64_t ns,
                                         const int32_t* targets, double* nll, int32_t* argmax) {
        ++calls;
        EXPECT_EQ(shape.n_tok, n_ctx);
        EXPECT_EQ(first_pos, first);
        EXPECT_EQ(ns, n_score);
        for (int64_t s = 0; s < shape.n_seq; ++s) EXPECT_EQ(t[s * n_ctx], 1) << "BOS first";
        seen_targets.insert(seen_targets.end(), targets, targets + shape.n_seq * ns);
        const auto lg = forward_logits(m, t, shape, first_pos);
        const int64_t keep = shape.n_tok - first_pos;
        for (int64_t s = 0; s < shape.n_seq; ++s)
            for (int64_t r = 0; r < ns; ++r) {
                const TokenScore sc = token_score(lg.data() + (s * keep + r) * V, V, targets[s * ns + r]);
                nll[s * ns + r] = sc.nll;
                if (argmax) argmax[s * ns + r] = sc.argmax;
            }
    };
    const PerplexityResult host = evaluate_perplexity(text, V, opt, cpu_window_logits(m));
    const PerplexityResult prov = evaluate_perplexity(text, V, opt, cpu_window_logits(m), host_scoring);
    EXPECT_EQ(calls, 2);
    EXPECT_FALSE(host.scored_by_provider);
    EXPECT_TRUE(prov.scored_by_provider);
    std::vector<int32_t> want;  // positions 5 … 8 of each window predict the original tokens 6 … 9
    for (int64_t c = 0; c < 4; ++c)
        for (int64_t r = 0; r < n_score; ++r) want.push_back(text[size_t(c * n_ctx + first + 1 + r)]);
    EXPECT_EQ(seen_targets, want);
    EXPECT_EQ(prov.n_chunks, 4);
    EXPECT_EQ(prov.n_scored, host.n_scored);
    EXPECT_EQ(prov.mean_nll, host.mean_nll);
    EXPECT_EQ(prov.ppl_err, host.ppl_err);
    EXPECT_EQ(prov.chunk_ppl, host.chunk_ppl);
    EXPECT_EQ(evaluate_perplexity(text, V, opt, {}, host_scoring).mean_nll, host.mean_nll);  // no logits provider needed

    // Runs that need the logits on the host score them there.
    calls = 0;
    const std::string path = temp_path("provider.kld");
    opt.save_logits = path;
    const PerplexityResult saved = evaluate_perplexity(text, V, opt, cpu_window_logits(m), host_scoring);
    EXPECT_FALSE(saved.scored_by_provider);
    EXPECT_EQ(saved.mean_nll, host.mean_nll);
    opt.save_logits.clear();
    opt.kld_base = path;
    const PerplexityResult cmp = evaluate_perplexity(text, V, opt, cpu_window_logits(m), host_scoring);
    EXPECT_TRUE(cmp.has_kld);
    EXPECT_FALSE(cmp.scored_by_provider);
    EXPECT_EQ(calls, 0);
    expect_error_mentions([&] { evaluate_perplexity(text, V, opt, {}, host_scoring); }, "need the logits");
    std::remove(path.c_str());

    // A non-finite NLL from the provider is refused like NaN logits, naming the position.
    opt.kld_base.clear();
    const WindowNllFn nan_scoring = [&](const int32_t* t, BatchShape shape, int64_t f, int64_t ns, const int32_t* tg,
                                        double* nll, int32_t* am) {
        host_scoring(t, shape, f, ns, tg, nll, am);
        nll[ns + 2] = NAN;  // window 1, position 7
    };
    expect_error_mentions([&] { evaluate_perplexity(text, V, opt, cpu_window_logits(m), nan_scoring); },
                          "non-finite log-likelihood at window 1, position 7");
}

TEST(ModelEval, KldRecordEncodingIsLlamaCppCompatible) {
    const int64_t V = 5;
    const float logits[V] = {2.0f, -1.0f, 0.5f, -30.0f, 2.0f};
    std::vector<uint16_t> rec(static_cast<size_t>(kld_record_slots(V)));
    EXPECT_EQ(rec.size(), 2u * 3 + 4);  // 2·⌈5/2⌉ + 4
    const double nll = kld_encode_record(logits, V, 2, rec.data());
    float hdr[2];
    std::memcpy(hdr, rec.data(), 8);
    const double lse = std::log(1 + std::exp(-3.0) + std::exp(-1.5) + std::exp(-32.0) + 1);
    EXPECT_NEAR(hdr[0], 16.0 / 65535.0, 1e-9);       // range clamped to max − 16
    EXPECT_NEAR(hdr[1], -16.0 - lse, 1e-5);           // min_log_prob
    EXPECT_NEAR(nll, 1.5 + lse, 1e-5);
    EXPECT_EQ(rec[4 + 0], 65535);                     // the maximum
    EXPECT_EQ(rec[4 + 3], 0);                         // below the window
    EXPECT_EQ(rec[4 + 1], uint16_t(std::nearbyint(13.0 / 16.0 * 65535.0)));
    EXPECT_EQ(rec[4 + 5], 0);                         // padding slot
    // Comparing the logits with their own record: KLD at the 16-bit floor, same top.
    const KldStep s = kld_compare_record(logits, V, rec.data(), 2);
    EXPECT_LT(std::abs(s.kld), 1e-4);
    EXPECT_TRUE(s.same_top);
    EXPECT_NEAR(s.nll_base, s.nll, 1e-3);
}

TEST(ModelEval, KldBaseFileRoundTrip) {
    // Untied: the small random output matrix keeps every log-probability above the file's −16 floor, so
    // the base perplexity read back is the true one.
    const LlamaModel a = tiny_model(false, false, 3);
    LlamaModel b = a;  // a perturbed copy
    for (auto& x : b.weights.blocks[1].w_up) x *= 1.3f;
    const int64_t V = a.config.vocab_size;
    const std::vector<int32_t> text = random_tokens(40, V, 5);
    const std::string path = temp_path("base.kld");
    PerplexityOptions opt = bos_options(10, 1);
    opt.save_logits = path;
    const PerplexityResult ra = evaluate_perplexity(text, V, opt, cpu_window_logits(a));
    EXPECT_EQ(ra.n_chunks, 4);

    const KldBaseHeader h = read_kld_base_header(path);
    EXPECT_EQ(h.n_ctx, 10);
    EXPECT_EQ(h.n_vocab, V);
    EXPECT_EQ(h.n_chunk, 4);
    EXPECT_EQ(h.tokens, std::vector<int32_t>(text.begin(), text.begin() + 40));  // originals, not BOS
    EXPECT_EQ(std::filesystem::file_size(path), uint64_t(20 + 4 * 40 + 4 * 4 * kld_record_slots(V) * 2));

    opt.save_logits.clear();
    opt.kld_base = path;
    const PerplexityResult self = evaluate_perplexity({}, V, opt, cpu_window_logits(a));
    EXPECT_TRUE(self.has_kld);
    EXPECT_LT(std::abs(self.kld_mean), 1e-4);
    EXPECT_DOUBLE_EQ(self.top1_agreement, 1.0);
    EXPECT_NEAR(self.ppl_ratio, 1.0, 1e-3);
    EXPECT_NEAR(self.ppl, ra.ppl, 1e-9 * ra.ppl);

    const PerplexityResult rb = evaluate_perplexity(text, V, opt, cpu_window_logits(b));
    EXPECT_GT(rb.kld_mean, 1e-4);
    // Against KLD computed directly in double from both models' logits.
    double direct = 0;
    for (int64_t c = 0; c < 4; ++c) {
        std::vector<int32_t> w(text.begin() + c * 10, text.begin() + (c + 1) * 10);
        w[0] = 1;
        const auto la = forward_logits(a, w.data(), {1, 10}, 5), lb = forward_logits(b, w.data(), {1, 10}, 5);
        for (int64_t r = 0; r < 4; ++r) {
            auto logp = [&](const std::vector<float>& l) {
                std::vector<double> o(static_cast<size_t>(V));
                double mx = -1e300, z = 0;
                for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(l[r * V + i]));
                for (int64_t i = 0; i < V; ++i) z += std::exp(double(l[r * V + i]) - mx);
                for (int64_t i = 0; i < V; ++i) o[i] = double(l[r * V + i]) - mx - std::log(z);
                return o;
            };
            const auto pa = logp(la), pb = logp(lb);
            for (int64_t i = 0; i < V; ++i)
                if (pa[i] > -16) direct += std::exp(pa[i]) * (pa[i] - pb[i]);
        }
    }
    direct /= 16.0;
    EXPECT_NEAR(rb.kld_mean, direct, 2e-3 * direct + 1e-5);

    // A text that does not match the base file's tokens is refused.
    std::vector<int32_t> other = text;
    other[3] = (other[3] + 1) % int32_t(V);
    expect_error_mentions([&] { evaluate_perplexity(other, V, opt, cpu_window_logits(a)); }, "tokens differ");
    std::remove(path.c_str());
}

TEST(ModelEval, SotuCorpusSplits) {
    std::string text;
    try {
        text = read_corpus_text("sotu-test");
    } catch (const Error& e) {
        GTEST_SKIP() << "SOTU corpus not available: " << e.what();
    }
    EXPECT_EQ(text.rfind("Mr. Speaker", 0), 0u);  // 2011 starts the test split
    EXPECT_GT(text.size(), 300000u);
    EXPECT_EQ(text.find("\n\n\n"), std::string::npos);
    const std::string val = read_corpus_text("sotu-validation");
    EXPECT_GT(val.size(), 100000u);
    expect_error_mentions([] { read_corpus_text("wikitext"); }, "unknown corpus");
}

// ---------------------------------------------------------------------------------------------------
// the real model (skips when scripts/fetch_model.sh has not been run)

#include "io/model_registry.h"
#include "model/tokenizer.h"

TEST(ModelReal, SmolLm2LogitsAreFiniteAndSotuPerplexityIsSane) {
    const std::string path = cached_model_path("smollm2-135m");
    if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "SmolLM2-135M GGUF absent (run scripts/fetch_model.sh)";
    std::string text;
    try {
        text = read_corpus_text("sotu-test");
    } catch (const Error& e) {
        GTEST_SKIP() << "SOTU corpus not available: " << e.what();
    }
    const LlamaModel m = load_llama_model(path);
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
    EXPECT_EQ(m.config.n_layers, 30);
    EXPECT_EQ(m.config.rope_pairing, RopePairing::adjacent);
    EXPECT_TRUE(m.config.tied_embeddings);
    const std::vector<int32_t> tokens = tok.encode(text, tok.add_bos());

    PerplexityOptions opt;
    opt.n_ctx = 256;
    opt.max_chunks = 2;
    opt.add_bos = tok.add_bos();
    opt.bos_id = tok.bos_id();
    opt.progress = false;
    const PerplexityResult r = evaluate_perplexity(tokens, m.config.vocab_size, opt, cpu_window_logits(m));
    std::printf("SmolLM2-135M Q4_1, sotu-test, 2 windows of 256: PPL %.4f +/- %.4f\n", r.ppl, r.ppl_err);
    EXPECT_TRUE(std::isfinite(r.ppl));
    EXPECT_GT(r.ppl, 3.0);   // a 135M model does not know these speeches by heart
    EXPECT_LT(r.ppl, 60.0);  // but it does model English (a broken forward gives hundreds to thousands)

    // Logits are finite everywhere in a window, and the wrong RoPE pairing is much worse (the GGUF's q/k
    // rows really are permuted for adjacent pairs).
    const std::vector<float> lg = forward_logits(m, tokens.data(), {1, 64});
    for (float x : lg) ASSERT_TRUE(std::isfinite(x));
    LlamaModel wrong = m;
    wrong.config.rope_pairing = RopePairing::halves;
    const PerplexityResult rw = evaluate_perplexity(tokens, m.config.vocab_size, opt, cpu_window_logits(wrong));
    EXPECT_GT(rw.ppl, 1.5 * r.ppl) << "halves pairing PPL " << rw.ppl;
}
