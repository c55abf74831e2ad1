// model_test_util.h — shared by the model suites: tiny random Llama models, the converter's q/k permutation
// applied to a whole model, a GGUF writer for them, the evaluator's options for them, and small checks.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/random_fill.h"
#include "io/gguf_file.h"
#include "model/config.h"
#include "model/eval.h"
#include "model/forward_cpu.h"
#include "model/weights.h"

namespace lowbit::test {

inline LlamaConfig tiny_config(bool qkv_bias = false, bool tied = true) { return tiny_llama_config(qkv_bias, tied); }

inline LlamaModel tiny_model(bool qkv_bias = false, bool tied = true, uint64_t seed = 7) {
    LlamaModel m;
    m.config = tiny_config(qkv_bias, tied);
    // Large enough weights that attention is far from uniform and the blocks matter.
    m.weights = random_llama_weights(m.config, seed, 0.3f);
    return m;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[i] = int32_t(counter_random24(seed, uint64_t(i)) % uint32_t(vocab));
    return t;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
    return m;
}

// The same model with q/k rows (and biases) permuted the way llama.cpp's converter does, run with
// adjacent-pair RoPE — what a GGUF of arch llama holds.
inline LlamaModel to_gguf_layout(const LlamaModel& hf) {
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

inline std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / fmt::format("lowbit_test_model_{}_{}", getpid(), name)).string();
}

inline void expect_error_mentions(const std::function<void()>& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// A GGUF of arch `arch` holding `m` (whose q/k rows are in the layout that arch expects), all F32.
inline void write_model_gguf(const LlamaModel& m, const std::string& arch, const std::string& path,
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

// The protocol's options for the tiny models: BOS (id 1) first in every window, no progress line.
inline PerplexityOptions bos_options(int64_t n_ctx, int64_t seqs_per_batch) {
    PerplexityOptions opt;
    opt.n_ctx = n_ctx;
    opt.add_bos = true;
    opt.bos_id = 1;
    opt.progress = false;
    opt.seqs_per_batch = seqs_per_batch;
    return opt;
}

}  // namespace lowbit::test
