// train_model.h — what a training run trains and how: TrainConfig (the model's LlamaConfig, sequence length,
// batch, steps, seed, initialization, AdamW and schedule), its presets, JSON files, the deterministic
// initialization of the flat parameter buffer (train/param_layout.h), and the conversions between that
// buffer and the runtime's LlamaModel (evaluation, export, starting from a pretrained model).
//
// Presets (Llama architecture, SwiGLU, GQA, RoPE halves pairing as HF checkpoints have it, tied embeddings):
//   tiny    2 layers, d 64,  4 heads / 2 KV heads (head 16), ffn 256,  vocab 512,   ctx 64    (~0.16 M params)
//   small   6 layers, d 512, 8 heads / 4 KV heads (head 64), ffn 1536, vocab 49152, ctx 512   (~44 M)
//   base    12 layers, d 768, 12 heads / 4 KV heads (head 64), ffn 3072, vocab 49152, ctx 1024 (~142 M)
// vocab 49152 is SmolLM2's tokenizer; d and ffn of small and base are multiples of 256 (GEMM tiles).
//
// JSON (every key optional except that a run without "preset" must give a complete "model"; unknown
// keys are refused so a typo is not silently ignored):
//   { "preset": "tiny" | "small" | "base",
//     "model": { Hugging Face config.json keys, merged over the preset's: "num_hidden_layers": 4, … },
//     "rope_pairing": "halves" | "adjacent",
//     "seq_len": 64, "batch_size": 4, "grad_accum": 1, "steps": 300, "seed": 1, "init_std": 0.02,
//     "optimizer": { "lr": 4e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0 },
//     "schedule": { "warmup_steps": 200, "min_lr_fraction": 0.1 } }
// "steps" is the run's number of optimizer steps: the schedule's total. "grad_accum" splits each step's batch into
// that many micro-batches of batch_size / grad_accum sequences (it must divide batch_size), run one after the other
// with their gradients summed before the update: the step sees the same windows and the same mean loss, and the
// activations held at once are a micro-batch's. It is a memory setting, not part of the run: a resume may change
// it (the curve then continues equal within rounding, not bit for bit).
//
// Initialization (GPT-2 / llm.c): every matrix ~ N(0, init_std²), the two output projections of each block
// (attn_output, ffn_down) with std init_std/√(2·n_layers), RMSNorm gains 1. Tensor t draws from the counter
// stream (seed, FNV-1a hash of its name) (core/random_fill.h), so a tensor's values depend only on the seed,
// its name and its shape — not on the thread count or on the other tensors (tied or not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/weights.h"
#include "train/optimizer.h"
#include "train/param_layout.h"

namespace lowbit {

struct TrainConfig {
    std::string preset;  // informational: the preset it started from ("" when none)
    LlamaConfig model;
    int64_t seq_len = 64;     // tokens per sequence, ≤ model.context_length
    int64_t batch_size = 4;   // sequences per optimizer step
    int64_t grad_accum = 1;   // micro-batches per step (batch_size / grad_accum sequences each)
    uint64_t seed = 1;        // initialization
    double init_std = 0.02;
    AdamWConfig optimizer;
    LrSchedule schedule;      // schedule.total_steps: the optimizer steps of the run
};

// Sequences of one forward and backward: batch_size / grad_accum.
inline int64_t micro_batch_size(const TrainConfig& c) { return c.batch_size / c.grad_accum; }

// "tiny", "small" or "base" (Error(usage) listing them otherwise).
TrainConfig train_preset(const std::string& name);
TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& source);
TrainConfig train_config_from_file(const std::string& path);
nlohmann::json train_config_to_json(const TrainConfig& c);  // read back by train_config_from_json
// Error(usage) naming `source` when the config cannot be trained (sizes, biases, seq_len > context, …).
void validate_train_config(const TrainConfig& c, const std::string& source);

// The flat buffer initialized as above.
std::vector<float> init_params(const ParamLayout& layout, uint64_t seed, double init_std);

// The runtime's model with these weights (copies), and the flat buffer of a runtime model's weights.
LlamaModel to_llama_model(const ParamLayout& layout, const float* params);
std::vector<float> params_from_model(const ParamLayout& layout, const LlamaModel& m);

}  // namespace lowbit
