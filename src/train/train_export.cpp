// train_export.cpp — the llama GGUF of a trained model and the tokenizer of its shards (see train_export.h).
#include "train/train_export.h"

#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "core/error.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "io/model_registry.h"
#include "ptq/export_gguf.h"

namespace lowbit {

namespace {

namespace fs = std::filesystem;

// llama.cpp's names of the pre-tokenizers lowbit normalizes differently (llama-vocab.cpp accepts "gpt-2").
std::string llama_cpp_pre_name(const std::string& pre) { return pre == "gpt2" ? "gpt-2" : pre; }

void set_tokenizer(GgufWriter& w, const Tokenizer& tok) {
    const TokenizerVocab& v = tok.vocab();
    w.set_string("tokenizer.ggml.model", tok.model());
    if (tok.model() == "gpt2") w.set_string("tokenizer.ggml.pre", llama_cpp_pre_name(tok.pre()));
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    std::vector<int32_t> types(tok.vocab_size());
    for (size_t i = 0; i < types.size(); ++i) types[i] = tok.token_type(int32_t(i));
    w.set("tokenizer.ggml.token_type", GgufValue::of_i32_array(types));
    if (!v.scores.empty()) w.set("tokenizer.ggml.scores", GgufValue::of_f32_array(v.scores));
    if (!v.merges.empty()) w.set_string_array("tokenizer.ggml.merges", v.merges);
    if (tok.bos_id() >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(tok.bos_id()));
    if (tok.eos_id() >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(tok.eos_id()));
    if (tok.unk_id() >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(tok.unk_id()));
    w.set_bool("tokenizer.ggml.add_bos_token", tok.add_bos());
    if (tok.model() == "llama") w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

}  // namespace

GgufType parse_export_dtype(const std::string& name) {
    if (name == "f32") return GgufType::F32;
    if (name == "f16") return GgufType::F16;
    if (name == "bf16") return GgufType::BF16;
    fail(ErrorKind::usage, "export type '{}': f32, f16 or bf16", name);
}

namespace {

// The file of export_llama_gguf, whichever way the blocks come: `block(l)` is called by the writer when it
// reaches block l's tensors (in order), so a streamed source is read once per block.
uint64_t write_llama_gguf(const LlamaConfig& c, const std::vector<float>& token_embd, const std::vector<float>& output_norm,
                          const std::vector<float>& output, const std::function<const BlockWeights&(int64_t)>& block,
                          const std::string& path, GgufType matrix_type, const Tokenizer* tokenizer) {
    LOWBIT_CHECK(!c.qkv_bias, ErrorKind::usage, "GGUF export of '{}': q/k/v biases are not a llama model", c.name);
    LOWBIT_CHECK(!tokenizer || int64_t(tokenizer->vocab_size()) == c.vocab_size, ErrorKind::usage,
                 "GGUF export: the tokenizer has {} tokens, the model {}", tokenizer ? tokenizer->vocab_size() : 0,
                 c.vocab_size);
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", c.name.empty() ? "lowbit trained model" : c.name);
    w.set_u32("general.file_type",
              matrix_type == GgufType::BF16 ? 32u : gguf_file_type_for(matrix_type == GgufType::F16 ? "f16" : "f32"));
    w.set_u32("llama.context_length", uint32_t(c.context_length));
    w.set_u32("llama.embedding_length", uint32_t(c.hidden_size));
    w.set_u32("llama.block_count", uint32_t(c.n_layers));
    w.set_u32("llama.feed_forward_length", uint32_t(c.ffn_size));
    w.set_u32("llama.attention.head_count", uint32_t(c.n_heads));
    w.set_u32("llama.attention.head_count_kv", uint32_t(c.n_kv_heads));
    w.set_u32("llama.attention.key_length", uint32_t(c.head_dim));
    w.set_u32("llama.attention.value_length", uint32_t(c.head_dim));
    w.set_f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps);
    w.set_f32("llama.rope.freq_base", float(c.rope_theta));
    w.set_u32("llama.rope.dimension_count", uint32_t(c.head_dim));
    w.set_u32("llama.vocab_size", uint32_t(c.vocab_size));
    if (tokenizer) set_tokenizer(w, *tokenizer);
    else w.set_string("tokenizer.ggml.model", "none");

    const int64_t d = c.hidden_size;
    const auto matrix = [&](const std::string& name, const std::vector<float>& v, int64_t rows, int64_t cols) {
        w.add_tensor(name, {cols, rows}, matrix_type, v.data());
    };
    const auto vector = [&](const std::string& name, const std::vector<float>& v) {
        w.add_tensor(name, {int64_t(v.size())}, GgufType::F32, v.data());
    };
    const bool permute = c.rope_pairing == RopePairing::halves;
    matrix("token_embd.weight", token_embd, c.vocab_size, d);
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (const BlockTensorSpec& spec : block_tensor_specs()) {
            if (spec.is_bias) continue;
            const bool is_vector = spec.cols == BlockDim::none;
            const int64_t rows = is_vector ? 1 : block_dim_size(c, spec.rows), cols = is_vector ? 0 : block_dim_size(c, spec.cols);
            const int64_t n = is_vector ? block_dim_size(c, spec.rows) : 0;
            const GgufType type = is_vector ? GgufType::F32 : matrix_type;
            const std::vector<int64_t> ne = is_vector ? std::vector<int64_t>{n} : std::vector<int64_t>{cols, rows};
            // Encoded when the writer gets here, from the block as the source holds it (q/k rows permuted to
            // GGUF's adjacent pairing when it holds them in HF's halves).
            w.add_tensor_lazy(fmt::format("blk.{}.{}", l, spec.gguf_name), ne, type, [&, l, spec, rows, cols, type] {
                const std::vector<float>& values = block(l).*spec.member;
                if (spec.cols == BlockDim::none) return gguf_quantize_matrix(type, values.data(), 1, int64_t(values.size()));
                if (permute && spec.rope_heads > 0) {
                    const std::vector<float> p =
                        permute_qk_rows_to_gguf(values, spec.rope_heads == 1 ? c.n_heads : c.n_kv_heads, c.head_dim, cols);
                    return gguf_quantize_matrix(type, p.data(), rows, cols);
                }
                return gguf_quantize_matrix(type, values.data(), rows, cols);
            });
        }
    vector("output_norm.weight", output_norm);
    if (!c.tied_embeddings) matrix("output.weight", output, c.vocab_size, d);
    w.write(path);
    return fs::file_size(path);
}

}  // namespace

uint64_t export_llama_gguf(const LlamaModel& m, const std::string& path, GgufType matrix_type,
                           const Tokenizer* tokenizer) {
    check_weight_shapes(m.config, m.weights, "GGUF export");
    return write_llama_gguf(m.config, m.weights.token_embd, m.weights.output_norm, m.weights.output,
                            [&m](int64_t l) -> const BlockWeights& { return m.weights.blocks[size_t(l)]; }, path,
                            matrix_type, tokenizer);
}

uint64_t export_llama_gguf(const ModelReader& r, const std::string& path, GgufType matrix_type,
                           const Tokenizer* tokenizer) {
    const LlamaConfig& c = r.config();
    int64_t held = -1;
    BlockWeights block;
    return write_llama_gguf(c, r.token_embedding(), r.output_norm(), c.tied_embeddings ? std::vector<float>() : r.output(),
                            [&](int64_t l) -> const BlockWeights& {
                                if (held != l) {
                                    block = r.block(l);
                                    check_block_shapes(c, block, l, r.path());
                                    held = l;
                                }
                                return block;
                            },
                            path, matrix_type, tokenizer);
}

std::optional<Tokenizer> shard_set_tokenizer(const TokenShardManifest& m, const std::string& override_path,
                                             std::string& why) {
    std::string source = override_path;
    if (source.empty()) {
        if (!m.info.contains("tokenizer_source") || !m.info["tokenizer_source"].is_string()) {
            why = "the shard manifest records no tokenizer_source (give --tokenizer)";
            return std::nullopt;
        }
        source = m.info["tokenizer_source"].get<std::string>();
    }
    if (source == "gpt2") source = (fs::path(shared_data_dir()) / "tokenizers" / "gpt2").string();
    std::optional<Tokenizer> tok;
    try {
        if (fs::is_directory(source) && fs::exists(fs::path(source) / "encoder.json"))
            tok = Tokenizer::from_gpt2_files((fs::path(source) / "encoder.json").string(),
                                             (fs::path(source) / "vocab.bpe").string());
        else
            tok = load_tokenizer(resolve_model_path(source), "");
    } catch (const Error& e) {
        why = fmt::format("the shards' tokenizer {} cannot be loaded here ({}); give --tokenizer", source, e.what());
        return std::nullopt;
    }
    const std::string prefix = fmt::format("{}/{}/{}/", tok->model(), tok->pre(), tok->vocab_size());
    LOWBIT_CHECK(m.tokenizer.starts_with(prefix), ErrorKind::input,
                 "tokenizer {} ({}…) is not the one the shards were made with ({})", source, prefix, m.tokenizer);
    return tok;
}

}  // namespace lowbit
