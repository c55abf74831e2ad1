// weights.h — float32 weights of a Llama-family decoder, one struct per transformer block, and the
// reader that loads them from a GGUF file (dequantized with GgufFile::tensor_to_f32) or a Hugging Face
// checkpoint directory (config.json + model.safetensors or a sharded index). A GPTQ checkpoint
// (config.json `quantization_config.quant_method = "gptq"`, checkpoint_format gptq or gptq_v2, as
// GPTQModel and lowbit's export write it) is read by dequantizing each packed linear's qweight, qzeros,
// scales and g_idx to f32 on load (model/gptq_tensors.h).
//
// Every matrix is stored like an nn.Linear weight: row-major [out_features, in_features] (GGUF
// ne = [in, out]), so y = x·Wᵀ. q/k rows stay in the file's order; LlamaConfig::rope_pairing says which
// RoPE pairing that order needs (config.h). The reader loads block by block (`ModelReader::block`), so a
// caller that streams blocks — post-training quantization — never holds more than one block of f32
// weights (napkin math: one Llama-3-8B block is 218 M params = 0.87 GB in f32, the model 32 GB).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"

namespace lowbit {

struct BlockWeights {
    std::vector<float> attn_norm;  // [d]
    std::vector<float> wq;         // [q_dim, d]
    std::vector<float> wk;         // [kv_dim, d]
    std::vector<float> wv;         // [kv_dim, d]
    std::vector<float> wo;         // [d, q_dim]
    std::vector<float> bq, bk, bv; // [q_dim], [kv_dim], [kv_dim]; empty without q/k/v biases
    std::vector<float> ffn_norm;   // [d]
    std::vector<float> w_gate;     // [ffn, d]
    std::vector<float> w_up;       // [ffn, d]
    std::vector<float> w_down;     // [d, ffn]
};

struct LlamaWeights {
    std::vector<float> token_embd;   // [vocab, d]
    std::vector<float> output_norm;  // [d]
    std::vector<float> output;       // [vocab, d]; empty when the embeddings are tied
    std::vector<BlockWeights> blocks;

    // The output projection: `output`, or `token_embd` when tied.
    const float* output_matrix() const { return output.empty() ? token_embd.data() : output.data(); }
};

struct LlamaModel {
    LlamaConfig config;
    LlamaWeights weights;
};

// The tensors of one block: their names in GGUF files (after "blk.N.") and HF checkpoints (after
// "model.layers.N."), their shape in terms of the config, and where they live in BlockWeights. The order
// is the HF export's. Biases exist only when the config has q/k/v biases.
enum class BlockDim { hidden, q, kv, ffn, none };
struct BlockTensorSpec {
    const char* gguf_name;
    const char* hf_name;
    std::vector<float> BlockWeights::*member;
    BlockDim rows, cols;  // cols == none: a vector of `rows` values
    bool is_bias;
    int rope_heads;       // 1: q rows (n_heads heads), 2: k rows (n_kv_heads heads), 0: no RoPE permutation
};
const std::vector<BlockTensorSpec>& block_tensor_specs();
int64_t block_dim_size(const LlamaConfig& c, BlockDim d);

// Checks every tensor of a block (and of the model) against the config's shapes; `what` names the
// source in the message.
void check_block_shapes(const LlamaConfig& c, const BlockWeights& b, int64_t layer, const std::string& what);
void check_weight_shapes(const LlamaConfig& c, const LlamaWeights& w, const std::string& what);

// A small random model (normal weights with std `scale`, norms near 1) for tests and benchmarks.
LlamaWeights random_llama_weights(const LlamaConfig& c, uint64_t seed, float scale = 0.08f);

// One tensor of the checkpoint as `lowbit info` lists it.
struct ModelTensorSummary {
    std::string name;
    std::vector<int64_t> shape;  // as the file states it (GGUF: ne order; safetensors: row-major)
    std::string type;            // "Q4_1", "F32", "BF16", ...
    uint64_t n_bytes = 0;
};

// Reads a checkpoint lazily. Opened from a .gguf file, an HF directory (config.json + safetensors) or
// that directory's config.json.
class ModelReader {
public:
    static std::unique_ptr<ModelReader> open(const std::string& path);
    virtual ~ModelReader() = default;

    const LlamaConfig& config() const { return config_; }
    const std::string& path() const { return path_; }
    virtual std::string format() const = 0;  // "gguf" or "safetensors"

    virtual std::vector<float> token_embedding() const = 0;  // [vocab, d]
    virtual std::vector<float> output_norm() const = 0;      // [d]
    virtual std::vector<float> output() const = 0;           // [vocab, d]; empty when tied
    virtual BlockWeights block(int64_t layer) const = 0;
    virtual std::vector<ModelTensorSummary> tensor_summaries() const = 0;

protected:
    LlamaConfig config_;
    std::string path_;
};

// Everything in memory (f32): the embedding, all blocks, the head.
LlamaModel load_llama_model(const std::string& path);
LlamaModel load_llama_model(const ModelReader& r);
// The embeddings, final norm and head of r's model, with n_layers empty blocks (read each with r.block(l)).
LlamaModel load_llama_head(const ModelReader& r);

// llama.cpp's q/k row permutation (convert_hf_to_gguf.py `LlamaModel.permute`): within each of `n_heads`
// heads of `head_dim` rows, HF row j·head_dim/2 + i moves to row 2i + j. `rows_to_gguf` applies it (HF →
// adjacent pairing); `rows_to_hf` undoes it. `cols` is the row length (1 for a bias vector).
std::vector<float> permute_qk_rows_to_gguf(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols);
std::vector<float> permute_qk_rows_to_hf(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols);
// The permutation itself: HF row r comes from row qk_hf_row_sources(…)[r] of the adjacent (GGUF) order, so
// per-row data other than floats (codes, grids of a quantized q/k) can follow the rows.
std::vector<int64_t> qk_hf_row_sources(int64_t n_heads, int64_t head_dim);

}  // namespace lowbit
