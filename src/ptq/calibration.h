// calibration.h — what post-training quantization measures on calibration text, block by block
// (turboboa.md §2.2, §3.2, §4.4):
//   windows      `samples` windows of `length` tokens at seeded random offsets of the tokenized text
//                (GPTQ's sampling), each starting with BOS when the vocabulary adds one (as evaluation does);
//   H_in         2/T·Σ x xᵀ per distinct linear input: attention (q, k, v share it), attention output (o),
//                MLP input (gate, up share it), SwiGLU output (down); T = calibration tokens;
//   H_out        for W_q the RoPE-averaged key covariance of its KV head, mean_l R_lᵀ C_K R_l; for W_k the
//                same over the mean query covariance of the query heads that share it (GQA folding);
//   block_v      per KV head, the mean over its query heads of 2/T·Σ (A_h X)ᵀ(A_h X) (attention-mixed inputs);
//   D (F2)       2/T·Σ (x̃ − x) xᵀ per input (x̃: the full-precision model's input of the layer; for block_v
//                (Ã_h x̃ − A_h x)(A_h x)ᵀ), before α.
// Statistics are sums accumulated in FP32 by sgemm (one product per batch of windows) and scaled by 2/T
// at the end — the running mean of the reference codes up to rounding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/forward_cpu.h"
#include "model/tokenizer.h"

namespace lowbit {

struct CalibrationSpec {
    std::string corpus = "sotu-train";  // a named corpus (io/corpus.h) …
    std::string text_file;              // … or a text file (takes precedence)
    int64_t samples = 16;               // windows
    int64_t length = 512;               // tokens per window
    uint64_t seed = 0;
    std::string describe() const;       // "sotu-train 16x512 seed 0"
};

// [samples, length] token ids. Error(input) when the text has fewer than length + 1 tokens.
std::vector<int32_t> calibration_windows(const Tokenizer& tok, const CalibrationSpec& spec);

struct BlockStatsOptions {
    bool attention_aware = false;  // H_out for q/k (BoA, TurboBoA)
    bool block_v = false;          // per-head value Hessians
    bool cross = false;            // F2's D (needs the full-precision path's scratch)
};

struct BlockStatistics {
    int64_t tokens = 0;
    std::vector<float> h_attn, h_o, h_ffn, h_down;   // [d,d], [qd,qd], [d,d], [f,f]
    std::vector<float> h_out_q;                      // [n_heads, hd, hd]
    std::vector<float> h_out_k;                      // [n_kv_heads, hd, hd]
    std::vector<float> h_v;                          // [n_kv_heads, d, d] (block_v)
    std::vector<float> d_attn, d_o, d_ffn, d_down;   // F2, same shapes as h_*
    std::vector<float> d_v;                          // F2 with block_v: [n_kv_heads, d, d]
};

// Accumulates one block's statistics over batches of windows.
class BlockStatsAccumulator {
public:
    BlockStatsAccumulator(const LlamaConfig& c, const BlockStatsOptions& o);
    // `q` holds block_forward's scratch on the quantized path for `shape`; `fp` (F2 only) the scratch of the
    // full-precision model's own path over the same windows.
    void add(const BlockScratch& q, const BlockScratch* fp, BatchShape shape);
    BlockStatistics finish(int64_t rope_length);  // scales by 2/T, RoPE-averages H_out over rope_length positions

private:
    LlamaConfig c_;
    BlockStatsOptions o_;
    BlockStatistics s_;
    std::vector<float> c_k_, c_q_;  // raw post-RoPE key / query covariances per head
};

// mean over positions l = 0..length−1 of R_lᵀ·C·R_l for one head (C [hd, hd]; R_l the RoPE rotation of
// position l in the config's pairing), in double.
std::vector<float> rope_averaged(const LlamaConfig& c, const float* cov, int64_t length);

}  // namespace lowbit
