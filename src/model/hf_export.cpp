// hf_export.cpp — HF checkpoint export: plans the tensor list from the config (block matrices packed by
// the options' hook where it packs them), splits it into shards of at most max_shard_bytes, and fills
// each shard block by block.
#include "model/hf_export.h"

#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"

namespace lowbit {

namespace {

namespace fs = std::filesystem;

// Where the weights come from: a lazy reader or a model in memory.
struct WeightSource {
    LlamaConfig config;
    std::function<std::vector<float>()> embedding, norm, output;
    std::function<BlockWeights(int64_t)> block;
};

enum class Part { embed, norm, lm_head, block, packed };

struct PlannedTensor {
    std::string name;
    std::vector<int64_t> shape;
    int64_t layer;  // −1 outside the blocks
    Part part;
    const BlockTensorSpec* spec = nullptr;       // Part::block
    SafetensorsDtype dtype = SafetensorsDtype::F32;
    std::optional<SafetensorsWriteTensor> packed;  // Part::packed: written as it is
    uint64_t bytes() const {
        if (packed) return packed->bytes.size();
        uint64_t n = uint64_t(safetensors_dtype_bits(dtype)) / 8;
        for (int64_t s : shape) n *= uint64_t(s);
        return n;
    }
};

// q/k rows are un-permuted when the model rotates adjacent pairs (GGUF arch llama).
int64_t qk_heads_to_unpermute(const LlamaConfig& c, const BlockTensorSpec& t) {
    if (c.rope_pairing != RopePairing::adjacent || t.rope_heads == 0) return 0;
    return t.rope_heads == 1 ? c.n_heads : c.n_kv_heads;
}

std::vector<PlannedTensor> plan_tensors(const LlamaConfig& c, const HfExportOptions& opt) {
    const int64_t d = c.hidden_size;
    const SafetensorsDtype dt = opt.dense_dtype;
    std::vector<PlannedTensor> p;
    p.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, -1, Part::embed, nullptr, dt, {}});
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (const BlockTensorSpec& t : block_tensor_specs()) {
            if (t.is_bias && !c.qkv_bias) continue;
            const std::string prefix = fmt::format("model.layers.{}.{}", l, t.hf_name);
            std::vector<SafetensorsWriteTensor> packed;
            if (opt.pack_linear && t.cols != BlockDim::none) {
                const std::string stem = prefix.substr(0, prefix.size() - std::string(".weight").size());
                packed = opt.pack_linear(HfLinearSlot{l, &t, stem, qk_heads_to_unpermute(c, t)});
            }
            for (SafetensorsWriteTensor& w : packed)
                p.push_back({w.name, w.shape, l, Part::packed, &t, w.dtype, std::move(w)});
            if (!packed.empty()) continue;
            std::vector<int64_t> shape = {block_dim_size(c, t.rows)};
            if (t.cols != BlockDim::none) shape.push_back(block_dim_size(c, t.cols));
            p.push_back({prefix, shape, l, Part::block, &t, dt, {}});
        }
    p.push_back({"model.norm.weight", {d}, -1, Part::norm, nullptr, dt, {}});
    if (!c.tied_embeddings) p.push_back({"lm_head.weight", {c.vocab_size, d}, -1, Part::lm_head, nullptr, dt, {}});
    return p;
}

HfExportReport export_from(const WeightSource& src, const std::string& out_dir, const HfExportOptions& opt) {
    const LlamaConfig& c = src.config;
    const uint64_t max_shard_bytes = opt.max_shard_bytes;
    // config.json first: it fails for what it cannot express, before any large file is written.
    nlohmann::json config = config_to_hf_json(c);
    LOWBIT_CHECK(opt.dense_dtype == SafetensorsDtype::F32 || opt.dense_dtype == SafetensorsDtype::F16 ||
                     opt.dense_dtype == SafetensorsDtype::BF16,
                 ErrorKind::usage, "export-hf: tensors are written as F32, F16 or BF16, not {}",
                 safetensors_dtype_name(opt.dense_dtype));
    config["torch_dtype"] = opt.dense_dtype == SafetensorsDtype::F32   ? "float32"
                            : opt.dense_dtype == SafetensorsDtype::F16 ? "float16"
                                                                       : "bfloat16";
    for (const auto& [key, value] : opt.config_extra.items()) config[key] = value;
    const std::string config_text = config.dump(2) + "\n";
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    LOWBIT_CHECK(fs::is_directory(out_dir), ErrorKind::input, "{}: cannot create the output directory ({})", out_dir,
                 ec.message());

    std::vector<PlannedTensor> plan = plan_tensors(c, opt);
    std::vector<std::vector<size_t>> shards(1);
    uint64_t shard_bytes = 0, total_bytes = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
        if (shard_bytes > 0 && shard_bytes + plan[i].bytes() > max_shard_bytes) shards.emplace_back(), shard_bytes = 0;
        shards.back().push_back(i);
        shard_bytes += plan[i].bytes();
        total_bytes += plan[i].bytes();
    }
    const size_t n_shards = shards.size();
    auto shard_name = [&](size_t s) {
        return n_shards == 1 ? std::string("model.safetensors")
                             : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n_shards);
    };

    HfExportReport rep;
    rep.unpermuted_qk = c.rope_pairing == RopePairing::adjacent;
    int64_t cached_layer = -1;
    BlockWeights blk;
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < n_shards; ++s) {
        std::vector<SafetensorsWriteTensor> tensors;
        for (size_t i : shards[s]) {
            PlannedTensor& t = plan[i];
            weight_map[t.name] = shard_name(s);
            rep.n_tensors += 1;
            if (t.part == Part::packed) {
                tensors.push_back(std::move(*t.packed));
                continue;
            }
            if (t.layer >= 0 && t.layer != cached_layer) {
                blk = src.block(t.layer);
                check_block_shapes(c, blk, t.layer, "export-hf");
                cached_layer = t.layer;
            }
            std::vector<float> v;
            switch (t.part) {
                case Part::embed: v = src.embedding(); break;
                case Part::norm: v = src.norm(); break;
                case Part::lm_head: v = src.output(); break;
                case Part::block: {
                    const std::vector<float>& w = blk.*t.spec->member;
                    const int64_t heads = qk_heads_to_unpermute(c, *t.spec);
                    const int64_t cols = t.spec->cols == BlockDim::none ? 1 : c.hidden_size;
                    v = heads > 0 ? permute_qk_rows_to_hf(w, heads, c.head_dim, cols) : w;
                    break;
                }
                case Part::packed: break;
            }
            int64_t n = 1;
            for (int64_t d : t.shape) n *= d;
            LOWBIT_CHECK(int64_t(v.size()) == n, ErrorKind::input, "export-hf: tensor {} has {} values, expected {}",
                         t.name, v.size(), n);
            tensors.push_back(safetensors_tensor_from_f32(t.name, t.shape, t.dtype, v.data()));
        }
        write_safetensors((fs::path(out_dir) / shard_name(s)).string(), tensors, {{"format", "pt"}});
        rep.files.push_back(shard_name(s));
    }
    rep.bytes = total_bytes;
    if (n_shards > 1) {
        const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
        const std::string text = index.dump(2) + "\n";
        write_file_atomic((fs::path(out_dir) / "model.safetensors.index.json").string(), text.data(), text.size());
        rep.files.push_back("model.safetensors.index.json");
    } else {
        fs::remove(fs::path(out_dir) / "model.safetensors.index.json", ec);  // a stale index would win over the file
    }
    write_file_atomic((fs::path(out_dir) / "config.json").string(), config_text.data(), config_text.size());
    rep.files.push_back("config.json");
    return rep;
}

}  // namespace

HfExportReport export_hf_checkpoint(const ModelReader& r, const std::string& out_dir, uint64_t max_shard_bytes) {
    WeightSource s;
    s.config = r.config();
    s.embedding = [&r] { return r.token_embedding(); };
    s.norm = [&r] { return r.output_norm(); };
    s.output = [&r] { return r.output(); };
    s.block = [&r](int64_t l) { return r.block(l); };
    HfExportOptions opt;
    opt.max_shard_bytes = max_shard_bytes;
    return export_from(s, out_dir, opt);
}

HfExportReport export_hf_checkpoint(const LlamaModel& m, const std::string& out_dir, const HfExportOptions& opt) {
    WeightSource s;
    s.config = m.config;
    s.embedding = [&m] { return m.weights.token_embd; };
    s.norm = [&m] { return m.weights.output_norm; };
    s.output = [&m] { return m.weights.output; };
    if (opt.block) {
        LlamaWeights head = m.weights;
        head.blocks.clear();
        LlamaConfig c0 = m.config;
        c0.n_layers = 0;
        check_weight_shapes(c0, head, "export-hf");
        s.block = [&opt, &m](int64_t l) {
            BlockWeights b = opt.block(l);
            check_block_shapes(m.config, b, l, "export-hf");
            return b;
        };
    } else {
        check_weight_shapes(m.config, m.weights, "export-hf");
        s.block = [&m](int64_t l) { return m.weights.blocks[size_t(l)]; };
    }
    return export_from(s, out_dir, opt);
}

HfExportReport export_hf_checkpoint(const LlamaModel& m, const std::string& out_dir, uint64_t max_shard_bytes) {
    HfExportOptions opt;
    opt.max_shard_bytes = max_shard_bytes;
    return export_hf_checkpoint(m, out_dir, opt);
}

}  // namespace lowbit
