// config.cpp — LlamaConfig from GGUF metadata or HF config.json, RoPE inverse frequencies, validation,
// and the config.json written by the HF export.
#include "model/config.h"

#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"

namespace lowbit {

const char* rope_pairing_name(RopePairing p) { return p == RopePairing::adjacent ? "adjacent" : "halves"; }

const char* rope_scaling_name(RopeScaling s) {
    switch (s) {
        case RopeScaling::none: return "none";
        case RopeScaling::linear: return "linear";
        case RopeScaling::llama3: return "llama3";
    }
    return "?";
}

int64_t LlamaConfig::block_params() const {
    const int64_t d = hidden_size;
    int64_t n = 2 * d;                                // attn_norm, ffn_norm
    n += d * q_dim() + 2 * d * kv_dim() + q_dim() * d;  // q, k, v, o
    if (qkv_bias) n += q_dim() + 2 * kv_dim();
    n += 3 * d * ffn_size;                            // gate, up, down
    return n;
}

int64_t LlamaConfig::total_params() const {
    int64_t n = n_layers * block_params() + vocab_size * hidden_size + hidden_size;
    if (!tied_embeddings) n += vocab_size * hidden_size;
    return n;
}

LlamaConfig smollm2_135m_config(int64_t n_layers) {
    LlamaConfig c;
    c.architecture = "llama";
    c.name = "SmolLM2-135M shape";
    c.vocab_size = 49152;
    c.hidden_size = 576;
    c.n_layers = n_layers;
    c.n_heads = 9;
    c.n_kv_heads = 3;
    c.head_dim = 64;
    c.ffn_size = 1536;
    c.context_length = 8192;
    c.rms_eps = 1e-5f;
    c.rope_theta = 100000.0;
    c.rope_pairing = RopePairing::adjacent;
    c.tied_embeddings = true;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

LlamaConfig tiny_llama_config(bool qkv_bias, bool tied_embeddings) {
    LlamaConfig c;
    c.architecture = qkv_bias ? "qwen2" : "llama";
    c.name = "tiny";
    c.vocab_size = 61;
    c.hidden_size = 32;
    c.n_layers = 3;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.ffn_size = 48;
    c.context_length = 4096;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0;
    c.rope_pairing = RopePairing::halves;
    c.qkv_bias = qkv_bias;
    c.tied_embeddings = tied_embeddings;
    c.bos_token_id = 1;
    return c;
}

std::vector<double> rope_inv_freq(const LlamaConfig& c) {
    const int64_t half = c.head_dim / 2;
    std::vector<double> f(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) f[i] = std::pow(c.rope_theta, -double(2 * i) / double(c.head_dim));
    if (c.rope_scaling == RopeScaling::linear) {
        for (auto& x : f) x /= c.rope_factor;
    } else if (c.rope_scaling == RopeScaling::llama3) {
        // transformers' _compute_llama3_parameters: wavelengths longer than original_context/low_freq_factor
        // are slowed down by `factor`, shorter than original_context/high_freq_factor are kept, and the band
        // in between interpolates smoothly: inv·((1−s)/factor + s), s = (ctx/wavelen − low)/(high − low).
        const double low_wavelen = double(c.rope_original_context) / c.rope_low_freq_factor;
        const double high_wavelen = double(c.rope_original_context) / c.rope_high_freq_factor;
        for (auto& x : f) {
            const double wavelen = 2.0 * std::numbers::pi / x;
            if (wavelen < high_wavelen) continue;
            if (wavelen > low_wavelen) {
                x /= c.rope_factor;
            } else {
                const double s = (double(c.rope_original_context) / wavelen - c.rope_low_freq_factor) /
                                 (c.rope_high_freq_factor - c.rope_low_freq_factor);
                x = x * ((1.0 - s) / c.rope_factor + s);
            }
        }
    }
    if (!c.rope_freq_divisors.empty())
        for (int64_t i = 0; i < half; ++i) f[i] /= double(c.rope_freq_divisors[i]);
    return f;
}

void validate_config(const LlamaConfig& c, const std::string& source) {
    auto positive = [&](int64_t v, const char* what) {
        LOWBIT_CHECK(v > 0, ErrorKind::input, "{}: {} must be positive (got {})", source, what, v);
    };
    positive(c.vocab_size, "vocab_size");
    positive(c.hidden_size, "hidden_size");
    positive(c.n_layers, "number of layers");
    positive(c.n_heads, "number of attention heads");
    positive(c.n_kv_heads, "number of key/value heads");
    positive(c.head_dim, "head_dim");
    positive(c.ffn_size, "feed-forward size");
    LOWBIT_CHECK(c.n_heads % c.n_kv_heads == 0, ErrorKind::input,
                 "{}: {} attention heads are not a multiple of {} key/value heads (GQA needs whole groups)", source,
                 c.n_heads, c.n_kv_heads);
    LOWBIT_CHECK(c.head_dim % 2 == 0, ErrorKind::input, "{}: head_dim {} is odd; RoPE rotates pairs", source,
                 c.head_dim);
    LOWBIT_CHECK(c.rms_eps > 0 && std::isfinite(c.rms_eps), ErrorKind::input, "{}: RMSNorm epsilon {} is not positive",
                 source, c.rms_eps);
    LOWBIT_CHECK(c.rope_theta > 0 && std::isfinite(c.rope_theta), ErrorKind::input, "{}: rope theta {} is not positive",
                 source, c.rope_theta);
    if (c.rope_scaling != RopeScaling::none)
        LOWBIT_CHECK(c.rope_factor > 0, ErrorKind::input, "{}: rope scaling factor {} is not positive", source,
                     c.rope_factor);
    if (c.rope_scaling == RopeScaling::llama3)
        LOWBIT_CHECK(c.rope_high_freq_factor != c.rope_low_freq_factor && c.rope_original_context > 0, ErrorKind::input,
                     "{}: llama3 rope scaling needs high_freq_factor != low_freq_factor and a positive "
                     "original_max_position_embeddings",
                     source);
    LOWBIT_CHECK(c.rope_freq_divisors.empty() || int64_t(c.rope_freq_divisors.size()) == c.head_dim / 2,
                 ErrorKind::input, "{}: rope_freqs has {} entries, expected head_dim/2 = {}", source,
                 c.rope_freq_divisors.size(), c.head_dim / 2);
}

// ---------------------------------------------------------------------------------------------------
// GGUF

LlamaConfig config_from_gguf(const GgufFile& f) {
    const std::string src = f.name();
    const std::string arch = f.get_string_or("general.architecture", "");
    LOWBIT_CHECK(!arch.empty(), ErrorKind::input, "{}: no general.architecture key; is this a model GGUF?", src);
    LOWBIT_CHECK(arch == "llama" || arch == "qwen2", ErrorKind::input,
                 "{}: architecture '{}' is not supported; lowbit runs Llama-family decoders (GGUF architectures "
                 "'llama' and 'qwen2': Llama 2/3, SmolLM2, Mistral-style, Qwen2/2.5)",
                 src, arch);
    const std::string p = arch + ".";
    auto required_int = [&](const std::string& key) {
        LOWBIT_CHECK(f.has(p + key), ErrorKind::input, "{}: required key '{}{}' is missing", src, p, key);
        return f.get_int(p + key);
    };
    LlamaConfig c;
    c.architecture = arch;
    c.name = f.get_string_or("general.name", "");
    c.hidden_size = required_int("embedding_length");
    c.n_layers = required_int("block_count");
    c.ffn_size = required_int("feed_forward_length");
    c.n_heads = required_int("attention.head_count");
    c.n_kv_heads = f.get_int_or(p + "attention.head_count_kv", c.n_heads);
    c.context_length = f.get_int_or(p + "context_length", 0);
    LOWBIT_CHECK(f.has(p + "attention.layer_norm_rms_epsilon"), ErrorKind::input,
                 "{}: required key '{}attention.layer_norm_rms_epsilon' is missing", src, p);
    c.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon"));
    c.head_dim = c.n_heads > 0 ? f.get_int_or(p + "attention.key_length", c.hidden_size / c.n_heads) : 0;
    const int64_t v_len = f.get_int_or(p + "attention.value_length", c.head_dim);
    LOWBIT_CHECK(v_len == c.head_dim, ErrorKind::input,
                 "{}: key length {} differs from value length {}; not a Llama-family attention", src, c.head_dim, v_len);
    const int64_t rope_dim = f.get_int_or(p + "rope.dimension_count", c.head_dim);
    LOWBIT_CHECK(rope_dim == c.head_dim, ErrorKind::input,
                 "{}: rope.dimension_count {} != head_dim {}; partial rotary embeddings are not supported", src,
                 rope_dim, c.head_dim);
    c.rope_theta = f.get_float_or(p + "rope.freq_base", 10000.0);
    c.rope_pairing = arch == "llama" ? RopePairing::adjacent : RopePairing::halves;

    const std::string scaling = f.get_string_or(p + "rope.scaling.type", "none");
    if (scaling == "linear") {
        c.rope_scaling = RopeScaling::linear;
        c.rope_factor = f.get_float_or(p + "rope.scaling.factor", 1.0);
        if (c.rope_factor == 1.0) c.rope_scaling = RopeScaling::none;
    } else if (scaling != "none" && !scaling.empty()) {
        fail(ErrorKind::input, "{}: rope scaling '{}' is not supported (lowbit implements none, linear and llama3)",
             src, scaling);
    }
    if (const GgufTensorInfo* rf = f.find_tensor("rope_freqs.weight")) c.rope_freq_divisors = f.tensor_to_f32(*rf);

    const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
    LOWBIT_CHECK(embd != nullptr, ErrorKind::input, "{}: tensor 'token_embd.weight' is missing", src);
    LOWBIT_CHECK(embd->ne.size() == 2, ErrorKind::input, "{}: token_embd.weight is not 2-D", src);
    c.vocab_size = f.get_int_or(p + "vocab_size", embd->ne[1]);
    LOWBIT_CHECK(c.vocab_size == embd->ne[1], ErrorKind::input,
                 "{}: {}vocab_size = {} but token_embd.weight has {} rows", src, p, c.vocab_size, embd->ne[1]);
    c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.bos_token_id = f.get_int_or("tokenizer.ggml.bos_token_id", -1);
    c.eos_token_id = f.get_int_or("tokenizer.ggml.eos_token_id", -1);
    validate_config(c, src);
    return c;
}

// ---------------------------------------------------------------------------------------------------
// HF config.json

namespace {

int64_t json_int(const nlohmann::json& j, const char* key, const std::string& src) {
    LOWBIT_CHECK(j.contains(key), ErrorKind::input, "{}: required field '{}' is missing", src, key);
    LOWBIT_CHECK(j[key].is_number_integer(), ErrorKind::input, "{}: field '{}' must be an integer (got {})", src, key,
                 j[key].dump());
    return j[key].get<int64_t>();
}

int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t def, const std::string& src) {
    if (!j.contains(key) || j[key].is_null()) return def;
    return json_int(j, key, src);
}

double json_num_or(const nlohmann::json& j, const char* key, double def, const std::string& src) {
    if (!j.contains(key) || j[key].is_null()) return def;
    LOWBIT_CHECK(j[key].is_number(), ErrorKind::input, "{}: field '{}' must be a number (got {})", src, key,
                 j[key].dump());
    return j[key].get<double>();
}

bool json_bool_or(const nlohmann::json& j, const char* key, bool def, const std::string& src) {
    if (!j.contains(key) || j[key].is_null()) return def;
    LOWBIT_CHECK(j[key].is_boolean(), ErrorKind::input, "{}: field '{}' must be true/false (got {})", src, key,
                 j[key].dump());
    return j[key].get<bool>();
}

// bos/eos ids may be an integer, a list (first entry is used) or null.
int64_t json_token_id(const nlohmann::json& j, const char* key) {
    if (!j.contains(key)) return -1;
    const auto& v = j[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
    return -1;
}

// Applies a rope scaling object: `rope_scaling` (older files) or `rope_parameters` (transformers v5).
void apply_rope_object(LlamaConfig& c, const nlohmann::json& r, const char* field, const std::string& src) {
    if (r.is_null()) return;
    LOWBIT_CHECK(r.is_object(), ErrorKind::input, "{}: '{}' must be an object (got {})", src, field, r.dump());
    if (r.contains("rope_theta")) c.rope_theta = json_num_or(r, "rope_theta", c.rope_theta, src);
    std::string type = "default";
    if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"].get<std::string>();
    else if (r.contains("type") && r["type"].is_string()) type = r["type"].get<std::string>();
    if (type == "default") {
        c.rope_scaling = RopeScaling::none;
    } else if (type == "linear") {
        c.rope_scaling = RopeScaling::linear;
        c.rope_factor = json_num_or(r, "factor", 1.0, src);
    } else if (type == "llama3") {
        c.rope_scaling = RopeScaling::llama3;
        c.rope_factor = json_num_or(r, "factor", 8.0, src);
        c.rope_low_freq_factor = json_num_or(r, "low_freq_factor", 1.0, src);
        c.rope_high_freq_factor = json_num_or(r, "high_freq_factor", 4.0, src);
        c.rope_original_context = json_int_or(r, "original_max_position_embeddings", 8192, src);
    } else {
        fail(ErrorKind::input, "{}: {}.rope_type '{}' is not supported (lowbit implements default, linear and llama3)",
             src, field, type);
    }
}

}  // namespace

LlamaConfig config_from_hf_json(const nlohmann::json& j, const std::string& src) {
    LOWBIT_CHECK(j.is_object(), ErrorKind::input, "{}: config.json must hold a JSON object", src);
    std::string model_type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
    LOWBIT_CHECK(!model_type.empty(), ErrorKind::input,
                 "{}: no 'model_type' field; is this a Hugging Face transformers config.json?", src);
    LOWBIT_CHECK(model_type == "llama" || model_type == "qwen2" || model_type == "mistral", ErrorKind::input,
                 "{}: model_type '{}' is not supported; lowbit runs Llama-family decoders (model_type 'llama', "
                 "'mistral' and 'qwen2': Llama 2/3, SmolLM2, Mistral, Qwen2/2.5)",
                 src, model_type);
    // Mistral is Llama's decoder (no biases) with an optional sliding attention window: it runs as "llama", as
    // llama.cpp's converter writes it.
    const bool mistral = model_type == "mistral";
    LlamaConfig c;
    c.architecture = mistral ? "llama" : model_type;
    c.vocab_size = json_int(j, "vocab_size", src);
    c.hidden_size = json_int(j, "hidden_size", src);
    c.ffn_size = json_int(j, "intermediate_size", src);
    c.n_layers = json_int(j, "num_hidden_layers", src);
    c.n_heads = json_int(j, "num_attention_heads", src);
    c.n_kv_heads = json_int_or(j, "num_key_value_heads", c.n_heads, src);
    c.head_dim = json_int_or(j, "head_dim", c.n_heads > 0 ? c.hidden_size / c.n_heads : 0, src);
    c.context_length = json_int_or(j, "max_position_embeddings", 0, src);
    c.rms_eps = float(json_num_or(j, "rms_norm_eps", 1e-6, src));
    c.rope_theta = json_num_or(j, "rope_theta", 10000.0, src);
    c.rope_pairing = RopePairing::halves;
    if (j.contains("rope_scaling")) apply_rope_object(c, j["rope_scaling"], "rope_scaling", src);
    if (j.contains("rope_parameters")) apply_rope_object(c, j["rope_parameters"], "rope_parameters", src);
    c.tied_embeddings = json_bool_or(j, "tie_word_embeddings", false, src);
    c.bos_token_id = json_token_id(j, "bos_token_id");
    c.eos_token_id = json_token_id(j, "eos_token_id");

    const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string() ? j["hidden_act"].get<std::string>() : "silu";
    LOWBIT_CHECK(act == "silu", ErrorKind::input, "{}: hidden_act '{}' is not supported (Llama-family MLPs use silu)",
                 src, act);
    LOWBIT_CHECK(!json_bool_or(j, "mlp_bias", false, src), ErrorKind::input,
                 "{}: mlp_bias = true is not supported (Llama-family MLPs have no biases)", src);
    if (mistral && j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
        // Attention within the window only (Mistral 7B v0.1: 4096). lowbit attends to the whole context, as
        // llama.cpp does, which is the same model for every context up to the window: that is the context
        // recorded.
        const int64_t window = j["sliding_window"].get<int64_t>();
        if (window > 0 && (c.context_length <= 0 || window < c.context_length)) c.context_length = window;
    }
    if (model_type == "llama" || mistral) {
        // LlamaAttention puts `attention_bias` on q, k, v *and* o; lowbit carries q/k/v biases only.
        LOWBIT_CHECK(!json_bool_or(j, "attention_bias", false, src), ErrorKind::input,
                     "{}: attention_bias = true (biases on q/k/v/o) is not supported for model_type llama", src);
        c.qkv_bias = false;
    } else {
        c.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
        LOWBIT_CHECK(!json_bool_or(j, "use_sliding_window", false, src), ErrorKind::input,
                     "{}: use_sliding_window = true is not supported (full causal attention only)", src);
    }
    validate_config(c, src);
    return c;
}

LlamaConfig config_from_hf_file(const std::string& path) {
    std::ifstream in(path);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open (expected a Hugging Face config.json)", path);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: not valid JSON ({})", path, e.what());
    }
    return config_from_hf_json(j, path);
}

nlohmann::json config_to_hf_json(const LlamaConfig& c) {
    LOWBIT_CHECK(c.rope_freq_divisors.empty(), ErrorKind::input,
                 "model '{}': its RoPE frequencies come from a GGUF rope_freqs tensor, which config.json cannot "
                 "express; export the model from its original HF checkpoint instead",
                 c.name);
    const bool qwen = c.qkv_bias;  // q/k/v biases without an o bias exist only as Qwen2 in transformers
    nlohmann::json j;
    j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    j["model_type"] = qwen ? "qwen2" : "llama";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.ffn_size;
    j["num_hidden_layers"] = c.n_layers;
    j["num_attention_heads"] = c.n_heads;
    j["num_key_value_heads"] = c.n_kv_heads;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.context_length > 0 ? c.context_length : 2048;
    j["rms_norm_eps"] = double(c.rms_eps);
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling == RopeScaling::linear) {
        j["rope_scaling"] = {{"rope_type", "linear"}, {"type", "linear"}, {"factor", c.rope_factor}};
    } else if (c.rope_scaling == RopeScaling::llama3) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", c.rope_factor},
                             {"low_freq_factor", c.rope_low_freq_factor},
                             {"high_freq_factor", c.rope_high_freq_factor},
                             {"original_max_position_embeddings", c.rope_original_context}};
    } else {
        j["rope_scaling"] = nullptr;
    }
    j["tie_word_embeddings"] = c.tied_embeddings;
    if (!qwen) {
        j["attention_bias"] = false;
        j["mlp_bias"] = false;
    } else {
        j["use_sliding_window"] = false;
        j["sliding_window"] = nullptr;
        j["max_window_layers"] = c.n_layers;
    }
    j["attention_dropout"] = 0.0;
    j["initializer_range"] = 0.02;
    j["use_cache"] = true;
    j["torch_dtype"] = "float32";
    if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
    return j;
}

}  // namespace lowbit
