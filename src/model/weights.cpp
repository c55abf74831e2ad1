// weights.cpp — shape checks, random models, the q/k row permutation, and ModelReader for GGUF files
// (tensor names of interop.md §2.4) and HF safetensors checkpoints (model.layers.N.self_attn.q_proj...),
// unquantized or GPTQ-packed (dequantized on load).
#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/random_fill.h"
#include "io/gguf_file.h"
#include "io/safetensors.h"
#include "model/gptq_tensors.h"

namespace lowbit {

namespace {

void check_size(const std::vector<float>& v, int64_t expected, const std::string& tensor, const std::string& what) {
    LOWBIT_CHECK(int64_t(v.size()) == expected, ErrorKind::input, "{}: tensor {} has {} values, the config needs {}",
                 what, tensor, v.size(), expected);
}

}  // namespace

const std::vector<BlockTensorSpec>& block_tensor_specs() {
    using B = BlockDim;
    static const std::vector<BlockTensorSpec> specs = {
        {"attn_norm.weight", "input_layernorm.weight", &BlockWeights::attn_norm, B::hidden, B::none, false, 0},
        {"attn_q.weight", "self_attn.q_proj.weight", &BlockWeights::wq, B::q, B::hidden, false, 1},
        {"attn_q.bias", "self_attn.q_proj.bias", &BlockWeights::bq, B::q, B::none, true, 1},
        {"attn_k.weight", "self_attn.k_proj.weight", &BlockWeights::wk, B::kv, B::hidden, false, 2},
        {"attn_k.bias", "self_attn.k_proj.bias", &BlockWeights::bk, B::kv, B::none, true, 2},
        {"attn_v.weight", "self_attn.v_proj.weight", &BlockWeights::wv, B::kv, B::hidden, false, 0},
        {"attn_v.bias", "self_attn.v_proj.bias", &BlockWeights::bv, B::kv, B::none, true, 0},
        {"attn_output.weight", "self_attn.o_proj.weight", &BlockWeights::wo, B::hidden, B::q, false, 0},
        {"ffn_norm.weight", "post_attention_layernorm.weight", &BlockWeights::ffn_norm, B::hidden, B::none, false, 0},
        {"ffn_gate.weight", "mlp.gate_proj.weight", &BlockWeights::w_gate, B::ffn, B::hidden, false, 0},
        {"ffn_up.weight", "mlp.up_proj.weight", &BlockWeights::w_up, B::ffn, B::hidden, false, 0},
        {"ffn_down.weight", "mlp.down_proj.weight", &BlockWeights::w_down, B::hidden, B::ffn, false, 0},
    };
    return specs;
}

int64_t block_dim_size(const LlamaConfig& c, BlockDim d) {
    switch (d) {
        case BlockDim::hidden: return c.hidden_size;
        case BlockDim::q: return c.q_dim();
        case BlockDim::kv: return c.kv_dim();
        case BlockDim::ffn: return c.ffn_size;
        case BlockDim::none: return 0;
    }
    return 0;
}

namespace {

// Fills a block through `get(name, rows, cols)` (cols 0 for vectors), names from the GGUF or HF column.
using TensorGetter = std::function<std::vector<float>(const std::string& name, int64_t rows, int64_t cols)>;

BlockWeights read_block(const LlamaConfig& c, int64_t l, bool hf_names, const std::string& path, const TensorGetter& get) {
    LOWBIT_CHECK(l >= 0 && l < c.n_layers, ErrorKind::usage, "{}: no block {} (the model has {})", path, l, c.n_layers);
    BlockWeights b;
    for (const BlockTensorSpec& t : block_tensor_specs()) {
        if (t.is_bias && !c.qkv_bias) continue;
        const std::string name = hf_names ? fmt::format("model.layers.{}.{}", l, t.hf_name)
                                          : fmt::format("blk.{}.{}", l, t.gguf_name);
        b.*t.member = get(name, block_dim_size(c, t.rows), block_dim_size(c, t.cols));
    }
    return b;
}

}  // namespace

void check_block_shapes(const LlamaConfig& c, const BlockWeights& b, int64_t layer, const std::string& what) {
    for (const BlockTensorSpec& t : block_tensor_specs()) {
        const std::string name = fmt::format("blk.{}.{}", layer, t.gguf_name);
        if (t.is_bias && !c.qkv_bias) {
            LOWBIT_CHECK((b.*t.member).empty(), ErrorKind::input, "{}: {} is present but the config has no q/k/v biases",
                         what, name);
            continue;
        }
        const int64_t cols = t.cols == BlockDim::none ? 1 : block_dim_size(c, t.cols);
        check_size(b.*t.member, block_dim_size(c, t.rows) * cols, name, what);
    }
}

void check_weight_shapes(const LlamaConfig& c, const LlamaWeights& w, const std::string& what) {
    check_size(w.token_embd, c.vocab_size * c.hidden_size, "token_embd", what);
    check_size(w.output_norm, c.hidden_size, "output_norm", what);
    if (c.tied_embeddings)
        LOWBIT_CHECK(w.output.empty(), ErrorKind::input, "{}: tied embeddings but an output matrix is present", what);
    else
        check_size(w.output, c.vocab_size * c.hidden_size, "output", what);
    LOWBIT_CHECK(int64_t(w.blocks.size()) == c.n_layers, ErrorKind::input, "{}: {} blocks, the config has {}", what,
                 w.blocks.size(), c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l) check_block_shapes(c, w.blocks[l], l, what);
}

LlamaWeights random_llama_weights(const LlamaConfig& c, uint64_t seed, float scale) {
    uint64_t stream = seed * 1000003ull;
    auto gauss = [&](int64_t n, float s, float mean = 0.0f) {
        std::vector<float> v(static_cast<size_t>(n));
        fill_gaussian(v.data(), n, ++stream);
        for (auto& x : v) x = mean + s * x;
        return v;
    };
    const int64_t d = c.hidden_size;
    LlamaWeights w;
    w.token_embd = gauss(c.vocab_size * d, 1.0f);
    w.output_norm = gauss(d, 0.1f, 1.0f);
    if (!c.tied_embeddings) w.output = gauss(c.vocab_size * d, scale);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        BlockWeights b;
        b.attn_norm = gauss(d, 0.1f, 1.0f);
        b.wq = gauss(c.q_dim() * d, scale);
        b.wk = gauss(c.kv_dim() * d, scale);
        b.wv = gauss(c.kv_dim() * d, scale);
        b.wo = gauss(d * c.q_dim(), scale);
        if (c.qkv_bias) {
            b.bq = gauss(c.q_dim(), 0.1f);
            b.bk = gauss(c.kv_dim(), 0.1f);
            b.bv = gauss(c.kv_dim(), 0.1f);
        }
        b.ffn_norm = gauss(d, 0.1f, 1.0f);
        b.w_gate = gauss(c.ffn_size * d, scale);
        b.w_up = gauss(c.ffn_size * d, scale);
        b.w_down = gauss(d * c.ffn_size, scale);
        w.blocks.push_back(std::move(b));
    }
    return w;
}

namespace {

// to_gguf: destination row src[r] takes source row r; to_hf the inverse (src = qk_hf_row_sources).
std::vector<float> permute_rows(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols,
                                bool to_gguf) {
    LOWBIT_CHECK(int64_t(w.size()) == n_heads * head_dim * cols && head_dim % 2 == 0, ErrorKind::input,
                 "q/k permutation: {} values do not form {} heads of {} rows of {}", w.size(), n_heads, head_dim, cols);
    std::vector<float> out(w.size());
    const std::vector<int64_t> src = qk_hf_row_sources(n_heads, head_dim);
    for (int64_t hf_row = 0; hf_row < int64_t(src.size()); ++hf_row) {
        const int64_t from = to_gguf ? hf_row : src[size_t(hf_row)], to = to_gguf ? src[size_t(hf_row)] : hf_row;
        std::copy(w.begin() + from * cols, w.begin() + (from + 1) * cols, out.begin() + to * cols);
    }
    return out;
}

}  // namespace

std::vector<int64_t> qk_hf_row_sources(int64_t n_heads, int64_t head_dim) {
    // Within each head, HF row j·hd/2 + i (halves) is GGUF row 2i + j (adjacent pairs).
    std::vector<int64_t> src(size_t(n_heads * head_dim));
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t i = 0; i < half; ++i)
            for (int64_t j = 0; j < 2; ++j) src[size_t(h * head_dim + j * half + i)] = h * head_dim + 2 * i + j;
    return src;
}

std::vector<float> permute_qk_rows_to_gguf(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols) {
    return permute_rows(w, n_heads, head_dim, cols, true);
}

std::vector<float> permute_qk_rows_to_hf(const std::vector<float>& w, int64_t n_heads, int64_t head_dim, int64_t cols) {
    return permute_rows(w, n_heads, head_dim, cols, false);
}

// ---------------------------------------------------------------------------------------------------
// GGUF

namespace {

class GgufModelReader final : public ModelReader {
public:
    explicit GgufModelReader(const std::string& path) : file_(GgufFile::open(path)) {
        path_ = path;
        config_ = config_from_gguf(file_);
        if (config_.name.empty()) config_.name = std::filesystem::path(path).stem().string();
    }
    std::string format() const override { return "gguf"; }

    std::vector<float> token_embedding() const override {
        return matrix("token_embd.weight", config_.vocab_size, config_.hidden_size);
    }
    std::vector<float> output_norm() const override { return vector("output_norm.weight", config_.hidden_size); }
    std::vector<float> output() const override {
        if (config_.tied_embeddings) return {};
        return matrix("output.weight", config_.vocab_size, config_.hidden_size);
    }
    BlockWeights block(int64_t l) const override {
        return read_block(config_, l, false, path_, [this](const std::string& name, int64_t rows, int64_t cols) {
            return cols > 0 ? matrix(name, rows, cols) : vector(name, rows);
        });
    }
    std::vector<ModelTensorSummary> tensor_summaries() const override {
        std::vector<ModelTensorSummary> s;
        for (const auto& t : file_.tensors()) s.push_back({t.name, t.ne, gguf_type_name(t.type), t.n_bytes});
        return s;
    }

private:
    // [rows, cols] row-major = GGUF ne [cols, rows].
    std::vector<float> matrix(const std::string& name, int64_t rows, int64_t cols) const {
        const GgufTensorInfo* t = file_.find_tensor(name);
        LOWBIT_CHECK(t != nullptr, ErrorKind::input, "{}: tensor '{}' is missing", path_, name);
        LOWBIT_CHECK(t->ne.size() == 2 && t->ne[0] == cols && t->ne[1] == rows, ErrorKind::input,
                     "{}: tensor '{}' has ne [{}], the config needs [{}, {}]", path_, name, fmt::join(t->ne, ", "), cols,
                     rows);
        return file_.tensor_to_f32(*t);
    }
    std::vector<float> vector(const std::string& name, int64_t n) const {
        const GgufTensorInfo* t = file_.find_tensor(name);
        LOWBIT_CHECK(t != nullptr, ErrorKind::input, "{}: tensor '{}' is missing", path_, name);
        LOWBIT_CHECK(t->n_elements() == n, ErrorKind::input, "{}: tensor '{}' has {} values, the config needs {}",
                     path_, name, t->n_elements(), n);
        return file_.tensor_to_f32(*t);
    }

    GgufFile file_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// HF safetensors

namespace {

// The GPTQ settings of a checkpoint: config.json's quantization_config (transformers, vLLM), else
// quantize_config.json (AutoGPTQ, GPTQModel).
struct GptqCheckpoint {
    int bits = 4;
    int64_t group_size = -1;  // −1: one group per output channel
    GptqZeroConvention zeros = GptqZeroConvention::v1;
};

nlohmann::json read_json_file(const std::string& path) {
    std::ifstream in(path);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open", path);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: not valid JSON ({})", path, e.what());
    }
}

std::optional<GptqCheckpoint> read_quantization_config(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string config_path = (fs::path(dir) / "config.json").string();
    const nlohmann::json config = read_json_file(config_path);
    std::string source = config_path + " quantization_config";
    nlohmann::json q;
    if (config.is_object() && config.contains("quantization_config")) {
        q = config["quantization_config"];
    } else if (fs::exists(fs::path(dir) / "quantize_config.json")) {
        source = (fs::path(dir) / "quantize_config.json").string();
        q = read_json_file(source);
    } else {
        return std::nullopt;
    }
    LOWBIT_CHECK(q.is_object(), ErrorKind::input, "{}: must be a JSON object", source);
    auto text = [&](const char* key, const char* fallback) {
        if (!q.contains(key) || q[key].is_null()) return std::string(fallback);
        LOWBIT_CHECK(q[key].is_string(), ErrorKind::input, "{}: '{}' must be a string", source, key);
        return q[key].get<std::string>();
    };
    const std::string method = text("quant_method", "gptq");
    LOWBIT_CHECK(method == "gptq", ErrorKind::input,
                 "{}: quant_method '{}' is not supported; lowbit reads unquantized checkpoints and GPTQ ones "
                 "(quant_method gptq, checkpoint_format gptq or gptq_v2)",
                 source, method);
    GptqCheckpoint g;
    const std::string format = q.contains("checkpoint_format") ? text("checkpoint_format", "") : text("format", "");
    LOWBIT_CHECK(parse_gptq_checkpoint_format(format, &g.zeros), ErrorKind::input,
                 "{}: checkpoint_format '{}' is not supported; lowbit reads gptq (v1) and gptq_v2 (kernel-repacked "
                 "layouts such as marlin are not GPTQ's)",
                 source, format);
    const std::string pack_dtype = text("pack_dtype", "int32");
    LOWBIT_CHECK(pack_dtype == "int32", ErrorKind::input, "{}: pack_dtype '{}' is not supported (int32 only)", source,
                 pack_dtype);
    LOWBIT_CHECK(q.contains("bits") && q["bits"].is_number_integer() && gptq_bits_supported(q["bits"].get<int>()),
                 ErrorKind::input, "{}: 'bits' must be 2, 3, 4 or 8 (got {})", source,
                 q.contains("bits") ? q["bits"].dump() : "nothing");
    g.bits = q["bits"].get<int>();
    LOWBIT_CHECK(q.contains("group_size") && q["group_size"].is_number_integer() &&
                     (q["group_size"].get<int64_t>() == -1 || q["group_size"].get<int64_t>() > 0),
                 ErrorKind::input, "{}: 'group_size' must be −1 or positive (got {})", source,
                 q.contains("group_size") ? q["group_size"].dump() : "nothing");
    g.group_size = q["group_size"].get<int64_t>();
    return g;
}

class SafetensorsModelReader final : public ModelReader {
public:
    explicit SafetensorsModelReader(const std::string& dir)
        : st_(SafetensorsModel::open(dir)) {
        path_ = dir;
        config_ = config_from_hf_file((std::filesystem::path(dir) / "config.json").string());
        config_.name = std::filesystem::path(dir).filename().string();
        if (config_.name.empty()) config_.name = std::filesystem::path(dir).parent_path().filename().string();
        gptq_ = read_quantization_config(dir);
    }
    std::string format() const override {
        if (!gptq_) return "safetensors";
        return fmt::format("safetensors, GPTQ {}-bit {} ({})", gptq_->bits,
                           gptq_->group_size > 0 ? fmt::format("g{}", gptq_->group_size) : std::string("per channel"),
                           gptq_checkpoint_format(gptq_->zeros));
    }

    std::vector<float> token_embedding() const override {
        return get("model.embed_tokens.weight", {config_.vocab_size, config_.hidden_size});
    }
    std::vector<float> output_norm() const override { return get("model.norm.weight", {config_.hidden_size}); }
    std::vector<float> output() const override {
        if (config_.tied_embeddings) return {};
        return get("lm_head.weight", {config_.vocab_size, config_.hidden_size});
    }
    BlockWeights block(int64_t l) const override {
        return read_block(config_, l, true, path_, [this](const std::string& name, int64_t rows, int64_t cols) {
            return cols > 0 ? get(name, {rows, cols}) : get(name, {rows});
        });
    }
    std::vector<ModelTensorSummary> tensor_summaries() const override {
        std::vector<ModelTensorSummary> s;
        for (const auto& name : st_.tensor_names()) {
            const SafetensorsTensor& t = st_.tensor(name);
            s.push_back({t.name, t.shape, safetensors_dtype_name(t.dtype), t.n_bytes()});
        }
        return s;
    }

private:
    std::vector<float> get(const std::string& name, const std::vector<int64_t>& shape) const {
        const std::string suffix = ".weight";
        if (gptq_ && !st_.has(name) && shape.size() == 2 && name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
            const std::string stem = name.substr(0, name.size() - suffix.size());
            if (st_.has(stem + ".qweight")) return gptq_weight(stem, shape[0], shape[1]);
        }
        LOWBIT_CHECK(st_.has(name), ErrorKind::input, "{}: tensor '{}' is missing", path_, name);
        const SafetensorsTensor& t = st_.tensor(name);
        LOWBIT_CHECK(t.shape == shape, ErrorKind::input, "{}: tensor '{}' has shape [{}], the config needs [{}]", path_,
                     name, fmt::join(t.shape, ", "), fmt::join(shape, ", "));
        return st_.tensor_to_f32(name);
    }

    // An int32 tensor of exactly `shape`.
    std::vector<int32_t> int32_tensor(const std::string& name, const std::vector<int64_t>& shape) const {
        LOWBIT_CHECK(st_.has(name), ErrorKind::input, "{}: tensor '{}' is missing (a GPTQ linear has qweight, qzeros "
                     "and scales)", path_, name);
        const SafetensorsTensor& t = st_.tensor(name);
        LOWBIT_CHECK(t.dtype == SafetensorsDtype::I32, ErrorKind::input, "{}: tensor '{}' is {}, GPTQ packs into I32",
                     path_, name, safetensors_dtype_name(t.dtype));
        LOWBIT_CHECK(t.shape == shape, ErrorKind::input,
                     "{}: tensor '{}' has shape [{}], but {}-bit GPTQ of this config needs [{}]", path_, name,
                     fmt::join(t.shape, ", "), gptq_->bits, fmt::join(shape, ", "));
        std::vector<int32_t> v(size_t(t.n_elements()));
        const std::span<const uint8_t> bytes = st_.tensor_bytes(name);
        if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
        return v;
    }

    // The dense [rows, cols] weight of the GPTQ linear `stem` (qweight, qzeros, scales, g_idx).
    std::vector<float> gptq_weight(const std::string& stem, int64_t rows, int64_t cols) const {
        GptqLinear t;
        t.bits = gptq_->bits;
        t.out_features = rows;
        t.in_features = cols;
        t.group_size = gptq_->group_size > 0 ? gptq_->group_size : cols;
        t.qweight = int32_tensor(stem + ".qweight", {t.qweight_rows(), rows});
        t.qzeros = int32_tensor(stem + ".qzeros", {t.n_groups(), t.qzeros_cols()});
        const std::string scales = stem + ".scales";
        LOWBIT_CHECK(st_.has(scales), ErrorKind::input, "{}: tensor '{}' is missing", path_, scales);
        LOWBIT_CHECK(st_.tensor(scales).shape == std::vector<int64_t>({t.n_groups(), rows}), ErrorKind::input,
                     "{}: tensor '{}' has shape [{}], but groups of {} need [{}, {}]", path_, scales,
                     fmt::join(st_.tensor(scales).shape, ", "), t.group_size, t.n_groups(), rows);
        t.scales = st_.tensor_to_f32(scales);
        if (st_.has(stem + ".g_idx")) {
            t.g_idx = int32_tensor(stem + ".g_idx", {cols});
        } else {
            t.g_idx.resize(size_t(cols));
            for (int64_t k = 0; k < cols; ++k) t.g_idx[size_t(k)] = int32_t(k / t.group_size);
        }
        return gptq_dequantize(t, gptq_->zeros, fmt::format("{}: {}", path_, stem));
    }

    SafetensorsModel st_;
    std::optional<GptqCheckpoint> gptq_;
};

std::unique_ptr<ModelReader> open_safetensors_model_reader(const std::string& dir) {
    namespace fs = std::filesystem;
    LOWBIT_CHECK(fs::exists(fs::path(dir) / "config.json"), ErrorKind::input,
                 "{}: no config.json; a Hugging Face checkpoint directory holds config.json and model.safetensors "
                 "(or model.safetensors.index.json with its shards)",
                 dir);
    return std::make_unique<SafetensorsModelReader>(dir);
}

}  // namespace

std::unique_ptr<ModelReader> ModelReader::open(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    LOWBIT_CHECK(fs::exists(path, ec), ErrorKind::input,
                 "{}: no such file or directory (expected a .gguf file or a Hugging Face checkpoint directory)", path);
    if (fs::is_directory(path, ec)) return open_safetensors_model_reader(path);
    if (fs::path(path).filename() == "config.json") return open_safetensors_model_reader(fs::path(path).parent_path().string());
    return std::make_unique<GgufModelReader>(path);
}

LlamaModel load_llama_head(const ModelReader& r) {
    LlamaModel m;
    m.config = r.config();
    m.weights.token_embd = r.token_embedding();
    m.weights.output_norm = r.output_norm();
    m.weights.output = r.output();
    m.weights.blocks.resize(size_t(std::max<int64_t>(m.config.n_layers, 0)));
    return m;
}

LlamaModel load_llama_model(const ModelReader& r) {
    LlamaModel m = load_llama_head(r);
    for (int64_t l = 0; l < m.config.n_layers; ++l) m.weights.blocks[size_t(l)] = r.block(l);
    check_weight_shapes(m.config, m.weights, r.path());
    return m;
}

LlamaModel load_llama_model(const std::string& path) { return load_llama_model(*ModelReader::open(path)); }

}  // namespace lowbit
