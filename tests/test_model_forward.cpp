// test_model_forward.cpp — the CPU forward of the Llama-family model (model/forward_cpu.h): RMSNorm, RoPE
// (pairings and llama3 scaling), GQA causal attention against a naive double-precision implementation, and
// the forward's invariants: causality, block streaming, stopping early, batching, the two RoPE pairings under
// the converter's permutation, and out-of-vocabulary tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "model/forward_cpu.h"
#include "model_test_util.h"

using namespace lowbit;
using namespace lowbit::test;

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

// A stopped forward computes what the full one computes up to its stop, bit for bit: the scratch of the linear
// inputs (and q, k after RoPE) it reached equals the full forward's.
TEST(ModelForward, StoppedBlockForwardEqualsTheFullOneUpToItsStop) {
    const LlamaModel m = tiny_model(true, false);
    const LlamaConfig& c = m.config;
    const BatchShape shape{2, 7};
    const std::vector<int32_t> tok = random_tokens(shape.rows(), c.vocab_size, 4);
    const std::vector<float> x = embed_tokens(c, m.weights.token_embd.data(), tok.data(), shape);
    std::vector<float> full_out = x;
    BlockScratch full;
    block_forward(c, m.weights.blocks[0], 0, full_out.data(), shape, full);
    using F = std::vector<float> BlockScratch::*;
    const std::vector<std::pair<BlockStop, std::vector<F>>> reached = {
        {BlockStop::qkv, {&BlockScratch::attn_in, &BlockScratch::q, &BlockScratch::k, &BlockScratch::v}},
        {BlockStop::attention, {&BlockScratch::attn_ctx}},
        {BlockStop::mlp_input, {&BlockScratch::ffn_in}},
        {BlockStop::mlp_hidden, {&BlockScratch::ffn_act}}};
    std::vector<F> fields;
    for (const auto& [stop, more] : reached) {
        fields.insert(fields.end(), more.begin(), more.end());
        std::vector<float> h = x;
        BlockScratch s;
        block_forward(c, m.weights.blocks[0], 0, h.data(), shape, s, stop);
        for (F f : fields) EXPECT_EQ(s.*f, full.*f) << "stop " << int(stop);
        EXPECT_NE(h, full_out) << "stop " << int(stop);  // the block's output is not there yet
    }
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
