// hf_export.h — writes a Llama-family model as a Hugging Face checkpoint (model.safetensors in float32 +
// config.json) that transformers loads with AutoModelForCausalLM, so its logits can be checked against
// ours by an independent implementation (tests/peer/check_transformers.py). Options let a quantized
// export (ptq/export_safetensors.h) write its block matrices packed, other tensors in FP16/BF16, and its
// own keys in config.json.
//
// Names: model.embed_tokens.weight, model.norm.weight, lm_head.weight (untied only),
// model.layers.N.{input_layernorm, post_attention_layernorm}.weight,
// model.layers.N.self_attn.{q,k,v,o}_proj.weight (+ q/k/v .bias for Qwen2), model.layers.N.mlp.{gate,up,down}_proj.weight.
// q/k rows of a model with adjacent RoPE pairing (GGUF arch llama) are un-permuted back to HF order
// (model/weights.h permute_qk_rows_to_hf), because transformers rotates halves.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/weights.h"

namespace lowbit {

struct HfExportReport {
    int64_t n_tensors = 0;
    uint64_t bytes = 0;               // tensor data written
    bool unpermuted_qk = false;       // q/k rows were converted from adjacent to halves order
    std::vector<std::string> files;   // written, inside the output directory
};

// Shards hold at most `max_shard_bytes` of tensor data (one file, model.safetensors, when everything fits;
// else model-0000i-of-0000N.safetensors and model.safetensors.index.json, as transformers writes them).
constexpr uint64_t kHfShardBytes = 2ull << 30;

// One block matrix (q, k, v, o, gate, up, down) as the exporter is about to write it.
struct HfLinearSlot {
    int64_t layer = 0;
    const BlockTensorSpec* spec = nullptr;  // its names, shape and member
    std::string prefix;                     // "model.layers.3.self_attn.q_proj"
    int64_t qk_heads = 0;  // > 0: q/k in adjacent RoPE order, to be un-permuted (qk_hf_row_sources with these heads)
};

// What the export of a quantized model changes (ptq/export_safetensors.h).
struct HfExportOptions {
    uint64_t max_shard_bytes = kHfShardBytes;
    SafetensorsDtype dense_dtype = SafetensorsDtype::F32;  // every tensor written from floats: F32, F16 or BF16
    nlohmann::json config_extra = nlohmann::json::object();  // top-level keys set in config.json (replacing)
    // When set, called once per block matrix before anything is written: a non-empty result is written in
    // place of "<prefix>.weight" (e.g. GPTQ's qweight/qzeros/scales/g_idx), in HF row order.
    std::function<std::vector<SafetensorsWriteTensor>(const HfLinearSlot&)> pack_linear;
    // When set (the LlamaModel overload), block l's weights come from here instead of the model's blocks, one
    // at a time (a quantizer whose model keeps only the norms and biases of its blocks fills in the rest).
    std::function<BlockWeights(int64_t layer)> block;
};

// Reads block by block from `r` (one block of f32 weights in memory at a time besides the embeddings).
HfExportReport export_hf_checkpoint(const ModelReader& r, const std::string& out_dir,
                                    uint64_t max_shard_bytes = kHfShardBytes);
// From a model in memory (e.g. the dequantized output of a quantizer).
HfExportReport export_hf_checkpoint(const LlamaModel& m, const std::string& out_dir,
                                    uint64_t max_shard_bytes = kHfShardBytes);
HfExportReport export_hf_checkpoint(const LlamaModel& m, const std::string& out_dir, const HfExportOptions& opt);

}  // namespace lowbit
