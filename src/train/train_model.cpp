// train_model.cpp — training presets, JSON reading and writing, initialization, and the conversions between
// the flat parameter buffer and LlamaModel.
#include "train/train_model.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/random_fill.h"
#include "io/npy.h"
#include "io/token_shards.h"

namespace lowbit {

namespace {

LlamaConfig preset_model(const std::string& name, int64_t layers, int64_t d, int64_t heads, int64_t kv_heads,
                         int64_t ffn, int64_t vocab, int64_t ctx) {
    LlamaConfig c;
    c.architecture = "llama";
    c.name = name;
    c.vocab_size = vocab;
    c.hidden_size = d;
    c.n_layers = layers;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = d / heads;
    c.ffn_size = ffn;
    c.context_length = ctx;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0;
    c.rope_pairing = RopePairing::halves;
    c.tied_embeddings = true;
    return c;
}

}  // namespace

TrainConfig train_preset(const std::string& name) {
    TrainConfig t;
    t.preset = name;
    if (name == "tiny") {
        t.model = preset_model(name, 2, 64, 4, 2, 256, 512, 64);
        t.seq_len = 64;
        t.batch_size = 4;
        t.schedule.total_steps = 300;
        t.optimizer.lr = 1e-3;
        t.schedule.warmup_steps = 10;
    } else if (name == "small") {
        t.model = preset_model(name, 6, 512, 8, 4, 1536, 49152, 512);
        t.seq_len = 512;
        t.batch_size = 16;
        t.schedule.total_steps = 5000;
        t.optimizer.lr = 6e-4;
        t.schedule.warmup_steps = 200;
    } else if (name == "base") {
        t.model = preset_model(name, 12, 768, 12, 4, 3072, 49152, 1024);
        t.seq_len = 1024;
        t.batch_size = 64;
        t.schedule.total_steps = 20000;
        t.optimizer.lr = 4e-4;  // AdaHOP's (adahop.md §7)
        t.schedule.warmup_steps = 200;
    } else {
        fail(ErrorKind::usage, "unknown training preset '{}' (presets: tiny, small, base)", name);
    }
    return t;
}

// ---------------------------------------------------------------------------------------------------
// JSON

namespace {

void refuse_unknown_keys(const nlohmann::json& j, const std::set<std::string>& known, const std::string& where,
                         const std::string& source) {
    LOWBIT_CHECK(j.is_object(), ErrorKind::usage, "{}: {} must be a JSON object (got {})", source, where, j.dump());
    for (const auto& item : j.items())
        LOWBIT_CHECK(known.count(item.key()), ErrorKind::usage, "{}: unknown key '{}' in {}", source, item.key(), where);
}

double number_or(const nlohmann::json& j, const char* key, double def, const std::string& source) {
    if (!j.contains(key)) return def;
    LOWBIT_CHECK(j[key].is_number(), ErrorKind::usage, "{}: '{}' must be a number (got {})", source, key, j[key].dump());
    return j[key].get<double>();
}

int64_t integer_or(const nlohmann::json& j, const char* key, int64_t def, const std::string& source) {
    if (!j.contains(key)) return def;
    LOWBIT_CHECK(j[key].is_number_integer(), ErrorKind::usage, "{}: '{}' must be an integer (got {})", source, key,
                 j[key].dump());
    return j[key].get<int64_t>();
}

}  // namespace

TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& source) {
    refuse_unknown_keys(j,
                        {"preset", "model", "rope_pairing", "seq_len", "batch_size", "grad_accum", "steps", "seed", "init_std",
                         "optimizer", "schedule"},
                        "the training config", source);
    TrainConfig t;
    nlohmann::json model = nlohmann::json::object();
    if (j.contains("preset")) {
        LOWBIT_CHECK(j["preset"].is_string(), ErrorKind::usage, "{}: 'preset' must be a string", source);
        t = train_preset(j["preset"].get<std::string>());
        model = config_to_hf_json(t.model);
    } else {
        LOWBIT_CHECK(j.contains("model"), ErrorKind::usage,
                     "{}: give a 'preset' (tiny, small, base) or a complete 'model' (Hugging Face config.json keys)", source);
    }
    if (j.contains("model")) {
        LOWBIT_CHECK(j["model"].is_object(), ErrorKind::usage, "{}: 'model' must be a JSON object", source);
        model.update(j["model"]);
        t.model = config_from_hf_json(model, source + " (model)");
        t.model.name = t.preset.empty() ? "custom" : t.preset + " (modified)";
    }
    if (j.contains("rope_pairing")) {
        const std::string p = j["rope_pairing"].is_string() ? j["rope_pairing"].get<std::string>() : "";
        LOWBIT_CHECK(p == "halves" || p == "adjacent", ErrorKind::usage,
                     "{}: rope_pairing must be \"halves\" or \"adjacent\" (got {})", source, j["rope_pairing"].dump());
        t.model.rope_pairing = p == "halves" ? RopePairing::halves : RopePairing::adjacent;
    }
    t.seq_len = integer_or(j, "seq_len", t.seq_len, source);
    t.batch_size = integer_or(j, "batch_size", t.batch_size, source);
    t.grad_accum = integer_or(j, "grad_accum", t.grad_accum, source);
    t.schedule.total_steps = integer_or(j, "steps", t.schedule.total_steps, source);
    const int64_t seed = integer_or(j, "seed", int64_t(t.seed), source);
    LOWBIT_CHECK(seed >= 0, ErrorKind::usage, "{}: seed {} must not be negative", source, seed);
    t.seed = uint64_t(seed);
    t.init_std = number_or(j, "init_std", t.init_std, source);
    if (j.contains("optimizer")) {
        const nlohmann::json& o = j["optimizer"];
        refuse_unknown_keys(o, {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"}, "'optimizer'", source);
        t.optimizer.lr = number_or(o, "lr", t.optimizer.lr, source);
        t.optimizer.beta1 = number_or(o, "beta1", t.optimizer.beta1, source);
        t.optimizer.beta2 = number_or(o, "beta2", t.optimizer.beta2, source);
        t.optimizer.eps = number_or(o, "eps", t.optimizer.eps, source);
        t.optimizer.weight_decay = number_or(o, "weight_decay", t.optimizer.weight_decay, source);
        t.optimizer.grad_clip = number_or(o, "grad_clip", t.optimizer.grad_clip, source);
    }
    if (j.contains("schedule")) {
        const nlohmann::json& s = j["schedule"];
        refuse_unknown_keys(s, {"warmup_steps", "min_lr_fraction"}, "'schedule'", source);
        t.schedule.warmup_steps = integer_or(s, "warmup_steps", t.schedule.warmup_steps, source);
        t.schedule.min_lr_fraction = number_or(s, "min_lr_fraction", t.schedule.min_lr_fraction, source);
    }
    validate_train_config(t, source);
    return t;
}

TrainConfig train_config_from_file(const std::string& path) {
    const std::vector<uint8_t> bytes = read_file(path);
    const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    LOWBIT_CHECK(!j.is_discarded(), ErrorKind::input, "{}: not valid JSON", path);
    return train_config_from_json(j, path);
}

nlohmann::json train_config_to_json(const TrainConfig& t) {
    nlohmann::json j;
    if (!t.preset.empty()) j["preset"] = t.preset;
    j["model"] = config_to_hf_json(t.model);
    j["rope_pairing"] = rope_pairing_name(t.model.rope_pairing);
    j["seq_len"] = t.seq_len;
    j["batch_size"] = t.batch_size;
    j["grad_accum"] = t.grad_accum;
    j["steps"] = t.schedule.total_steps;
    j["seed"] = t.seed;
    j["init_std"] = t.init_std;
    j["optimizer"] = {{"lr", t.optimizer.lr},
                      {"beta1", t.optimizer.beta1},
                      {"beta2", t.optimizer.beta2},
                      {"eps", t.optimizer.eps},
                      {"weight_decay", t.optimizer.weight_decay},
                      {"grad_clip", t.optimizer.grad_clip}};
    j["schedule"] = {{"warmup_steps", t.schedule.warmup_steps}, {"min_lr_fraction", t.schedule.min_lr_fraction}};
    return j;
}

void validate_train_config(const TrainConfig& t, const std::string& source) {
    validate_config(t.model, source);
    LOWBIT_CHECK(!t.model.qkv_bias, ErrorKind::usage,
                 "{}: q/k/v biases (model_type qwen2) are not supported; the trained architecture is Llama's", source);
    LOWBIT_CHECK(t.seq_len > 0 && t.batch_size > 0, ErrorKind::usage,
                 "{}: seq_len {} and batch_size {} must be positive", source, t.seq_len, t.batch_size);
    LOWBIT_CHECK(t.grad_accum > 0 && t.batch_size % t.grad_accum == 0, ErrorKind::usage,
                 "{}: grad_accum {} must be positive and divide batch_size {} (micro-batches of equal size)", source,
                 t.grad_accum, t.batch_size);
    LOWBIT_CHECK(t.model.context_length <= 0 || t.seq_len <= t.model.context_length, ErrorKind::usage,
                 "{}: seq_len {} exceeds the model's context length {} (max_position_embeddings)", source, t.seq_len,
                 t.model.context_length);
    LOWBIT_CHECK(t.init_std > 0 && std::isfinite(t.init_std), ErrorKind::usage, "{}: init_std {} must be positive",
                 source, t.init_std);
    validate_optimizer(t.optimizer, t.schedule, source);
}

// ---------------------------------------------------------------------------------------------------
// initialization and conversions

std::vector<float> init_params(const ParamLayout& layout, uint64_t seed, double init_std) {
    const LlamaConfig& c = layout.config();
    std::vector<float> p(size_t(layout.total()));
    const double residual_std = init_std / std::sqrt(2.0 * double(c.n_layers));
    for (const ParamTensor& t : layout.tensors()) {
        float* v = p.data() + t.offset;
        if (t.kind == ParamKind::norm) {
            std::fill(v, v + t.size(), 1.0f);
            continue;
        }
        const bool residual = t.kind == ParamKind::projection && (t.projection == Projection::o || t.projection == Projection::down);
        const float std_dev = float(residual ? residual_std : init_std);
        const std::span<const uint8_t> name(reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size());
        fill_gaussian(v, t.size(), mix64(seed ^ fnv1a64(name)));
        for (int64_t i = 0; i < t.size(); ++i) v[i] *= std_dev;
    }
    return p;
}

namespace {

// The vector of `w` (LlamaWeights, const or not) that holds layout tensor `t`: block tensors are matched by
// their GGUF names through model/weights.h's table.
template <typename Weights>
auto& weights_tensor(Weights& w, const ParamTensor& t) {
    if (t.kind == ParamKind::embedding) return w.token_embd;
    if (t.kind == ParamKind::lm_head) return w.output;
    if (t.layer < 0) return w.output_norm;
    const std::string prefix = fmt::format("blk.{}.", t.layer);
    for (const BlockTensorSpec& spec : block_tensor_specs())
        if (t.name == prefix + spec.gguf_name) return w.blocks[size_t(t.layer)].*spec.member;
    fail(ErrorKind::usage, "training model: tensor {} has no place in the runtime's weights", t.name);
}

}  // namespace

LlamaModel to_llama_model(const ParamLayout& layout, const float* params) {
    LlamaModel m;
    m.config = layout.config();
    m.weights.blocks.resize(size_t(m.config.n_layers));
    for (const ParamTensor& t : layout.tensors())
        weights_tensor(m.weights, t).assign(params + t.offset, params + t.offset + t.size());
    return m;
}

std::vector<float> params_from_model(const ParamLayout& layout, const LlamaModel& m) {
    const LlamaConfig& c = layout.config();
    LOWBIT_CHECK(m.config.vocab_size == c.vocab_size && m.config.hidden_size == c.hidden_size &&
                     m.config.n_layers == c.n_layers && m.config.q_dim() == c.q_dim() && m.config.kv_dim() == c.kv_dim() &&
                     m.config.ffn_size == c.ffn_size && m.config.tied_embeddings == c.tied_embeddings && !m.config.qkv_bias,
                 ErrorKind::usage, "model '{}' does not have the shape of the training model '{}'", m.config.name, c.name);
    check_weight_shapes(m.config, m.weights, "training model");
    std::vector<float> p(size_t(layout.total()));
    for (const ParamTensor& t : layout.tensors()) {
        const std::vector<float>& src = weights_tensor(m.weights, t);
        std::copy(src.begin(), src.end(), p.begin() + t.offset);
    }
    return p;
}

}  // namespace lowbit
