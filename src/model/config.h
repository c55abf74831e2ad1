// config.h — LlamaConfig: the hyper-parameters of a Llama-family decoder (Llama 2/3, SmolLM2, Qwen2:
// RMSNorm, SwiGLU, GQA, RoPE, optional q/k/v biases, tied or untied embeddings), read from GGUF metadata
// (`llama.*` / `qwen2.*` keys) or from a Hugging Face config.json (both `rope_theta` + `rope_scaling` and
// the transformers-v5 `rope_parameters` form). Anything else is refused with a message saying why.
//
// RoPE pairing — the one subtle point. HF applies RoPE to the two *halves* of a head (dimension i is
// rotated with i + head_dim/2, "neox" in ggml). llama.cpp's converter permutes the rows of q/k of
// Llama-architecture models (`LlamaModel.permute` in convert_hf_to_gguf.py: per head, reshape the rows
// to (2, head_dim/2) and swap the axes) so that ggml can rotate *adjacent* pairs (2i, 2i+1) ("norm").
// Qwen2 GGUFs are not permuted and use neox. lowbit keeps the weights exactly as the file stores them
// and records the pairing here: adjacent for GGUF arch `llama`, halves for GGUF `qwen2` and every HF
// checkpoint. Both pairings compute the same function once the rows are permuted accordingly
// (test_model checks it); the HF export un-permutes q/k (model/hf_export.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lowbit {

class GgufFile;

enum class RopePairing {
    adjacent,  // rotate (2i, 2i+1): ggml "norm" mode, GGUF arch llama (rows permuted by the converter)
    halves,    // rotate (i, i + head_dim/2): HF rotate_half, ggml "neox" mode, GGUF arch qwen2
};

enum class RopeScaling {
    none,
    linear,  // every inverse frequency divided by `factor` (positions compressed)
    llama3,  // Llama 3.1 smooth per-frequency scaling (factor, low/high_freq_factor, original context)
};

const char* rope_pairing_name(RopePairing p);
const char* rope_scaling_name(RopeScaling s);

struct LlamaConfig {
    std::string architecture;  // "llama" or "qwen2"
    std::string name;          // general.name / the checkpoint's directory; informational
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;   // d
    int64_t n_layers = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;    // GQA: n_heads / n_kv_heads query heads share one key/value head
    int64_t head_dim = 0;
    int64_t ffn_size = 0;
    int64_t context_length = 0;
    float rms_eps = 1e-5f;

    double rope_theta = 10000.0;
    RopePairing rope_pairing = RopePairing::halves;
    RopeScaling rope_scaling = RopeScaling::none;
    double rope_factor = 1.0;            // linear and llama3
    double rope_low_freq_factor = 1.0;   // llama3
    double rope_high_freq_factor = 4.0;  // llama3
    int64_t rope_original_context = 8192;  // llama3 original_max_position_embeddings
    // GGUF `rope_freqs.weight` (head_dim/2 values): llama.cpp's converter bakes llama3 scaling into this
    // tensor; each inverse frequency is divided by its entry. Empty when absent.
    std::vector<float> rope_freq_divisors;

    bool qkv_bias = false;         // Qwen2: q/k/v projections carry biases (o_proj does not)
    bool tied_embeddings = false;  // output projection = token embedding
    int64_t bos_token_id = -1;
    int64_t eos_token_id = -1;

    int64_t q_dim() const { return n_heads * head_dim; }
    int64_t kv_dim() const { return n_kv_heads * head_dim; }
    // Parameters of one transformer block and of the whole model (embeddings counted once when tied).
    int64_t block_params() const;
    int64_t total_params() const;
};

// The shape of SmolLM2-135M as its GGUF describes it (arch llama: adjacent RoPE pairs, tied embeddings,
// BOS 1), with `n_layers` blocks (30 in the real model): benchmarks and tests that need no download.
LlamaConfig smollm2_135m_config(int64_t n_layers = 30);

// A tiny Llama-family config (vocab 61, d 32, 3 layers, 4 heads sharing 2 key/value heads of 8, ffn 48,
// HF halves pairing) for unit tests of the CPU and CUDA forwards; `qkv_bias` makes it Qwen2-style.
LlamaConfig tiny_llama_config(bool qkv_bias = false, bool tied_embeddings = true);

// The head_dim/2 inverse frequencies of RoPE (theta^(-2i/head_dim), then the scaling), in double.
std::vector<double> rope_inv_freq(const LlamaConfig& c);

// Checks internal consistency (positive sizes, heads divisible, even head_dim, rope divisors sized);
// `source` names the file in the message.
void validate_config(const LlamaConfig& c, const std::string& source);

// From GGUF metadata (general.architecture ∈ {llama, qwen2}); also looks at the tensor list for the
// vocabulary size, tied embeddings (no `output.weight`), q/k/v biases and `rope_freqs.weight`.
LlamaConfig config_from_gguf(const GgufFile& f);

// From a parsed HF config.json (model_type ∈ {llama, qwen2}); `source` names the file in messages.
LlamaConfig config_from_hf_json(const nlohmann::json& j, const std::string& source);
LlamaConfig config_from_hf_file(const std::string& config_json_path);

// The HF config.json that describes `c` (model_type llama, or qwen2 when q/k/v have biases), as written
// by the HF export. Fails for GGUF rope_freqs scaling, which config.json cannot express.
nlohmann::json config_to_hf_json(const LlamaConfig& c);

}  // namespace lowbit
