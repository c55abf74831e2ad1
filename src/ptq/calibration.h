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
#include <memory>
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

// The four distinct linear inputs of a block, one H_in (and D) each: the attention input (q, k, v — with it
// H_out and block_v, which belong to q, k and v), the attention output (o), the MLP input (gate, up) and the
// MLP's SwiGLU product (down). A bit set of them says which a statistics pass measures.
enum BlockInput : uint8_t { attention_input = 1, attention_output = 2, mlp_input = 4, mlp_hidden = 8 };
constexpr uint8_t kAllBlockInputs = attention_input | attention_output | mlp_input | mlp_hidden;

struct BlockStatsOptions {
    bool attention_aware = false;  // H_out for q/k (BoA, TurboBoA)
    bool block_v = false;          // per-head value Hessians
    bool cross = false;            // F2's D (needs the full-precision path's scratch)
    // Which inputs' statistics this pass takes (BlockInput bits; the others stay empty). True-sequential
    // quantization takes one input at a time, each after the layers before it were quantized.
    uint8_t inputs = kAllBlockInputs;
    // F2: the full-precision path Xfp advances through the block in this pass (the block's last pass).
    bool advance_full_precision = true;
    bool measures(BlockInput i) const { return (inputs & i) != 0; }
    bool measures_h_out() const { return attention_aware && measures(attention_input); }
    bool measures_block_v() const { return block_v && measures(attention_input); }
    // How far a block forward must run for the scratch this pass reads (the last input it measures).
    BlockStop forward_stop() const {
        return measures(mlp_hidden) ? BlockStop::mlp_hidden
               : measures(mlp_input) ? BlockStop::mlp_input
               : measures(attention_output) ? BlockStop::attention
                                            : BlockStop::qkv;
    }
};

// The inputs a pass did not measure (BlockStatsOptions::inputs) leave their fields empty.
struct BlockStatistics {
    int64_t tokens = 0;
    std::vector<float> h_attn, h_o, h_ffn, h_down;   // [d,d], [qd,qd], [d,d], [f,f]
    std::vector<float> h_out_q;                      // [n_heads, hd, hd]
    std::vector<float> h_out_k;                      // [n_kv_heads, hd, hd]
    std::vector<float> h_v;                          // [n_kv_heads, d, d] (block_v)
    std::vector<float> d_attn, d_o, d_ffn, d_down;   // F2, same shapes as h_*
    std::vector<float> d_v;                          // F2 with block_v: [n_kv_heads, d, d]
};

// How block_v's sums are associated (see block_v_by_group_takes_fewer_flops): per query head, per KV group, or
// (automatic) whichever takes fewer FLOPs, on both devices. The same sums up to FP32 rounding; the tests run both.
enum class ValueProducts : uint8_t { automatic, by_head, by_group };

// Accumulates one block's statistics over batches of windows.
class BlockStatsAccumulator {
public:
    BlockStatsAccumulator(const LlamaConfig& c, const BlockStatsOptions& o,
                          ValueProducts value_products = ValueProducts::automatic);
    // `q` holds block_forward's scratch on the quantized path for `shape`; `fp` (F2 only) the scratch of the
    // full-precision model's own path over the same windows.
    void add(const BlockScratch& q, const BlockScratch* fp, BatchShape shape);
    BlockStatistics finish(int64_t rope_length);  // scales by 2/T, RoPE-averages H_out over rope_length positions

private:
    void add_value_hessians_by_group(const BlockScratch& q, const BlockScratch* fp, BatchShape shape);

    LlamaConfig c_;
    BlockStatsOptions o_;
    ValueProducts value_products_;
    BlockStatistics s_;
    std::vector<float> c_k_, c_q_;  // raw post-RoPE key / query covariances per head
};

// block_v's sums per window and KV group of g query heads (T tokens, width d) can be associated per head,
// Σ_h (A_h·X)ᵀ(A_h·X) — g·(2T²d + 2Td²) FLOPs — or through the T × T matrix M = Σ_h A_hᵀA_h as Xᵀ·(M·X) —
// g·2T³ + 2T²d + 2Td² (F2's D alike with N = Σ_h Ã_hᵀA_h: X̃ᵀ·(N·X) − Xᵀ·(M·X)). True where the second takes fewer:
// T below the width times about (g − 1)/g (8B with T = 2048: 2.4× fewer; SmolLM2 with T = 512: 1.3× fewer).
// BlockStatsAccumulator takes the cheaper one. block_v_flops: those counts (full GEMMs, per window and KV group,
// without F2; F2 doubles both).
double block_v_flops(const LlamaConfig& c, int64_t T, bool by_group);
bool block_v_by_group_takes_fewer_flops(const LlamaConfig& c, int64_t T);

// Raw sums (what BlockStatsAccumulator::add accumulates: the h_*/d_* fields unscaled, `tokens` counted,
// post-RoPE key/query covariances per head in c_k/c_q) → the statistics the solvers take: scaled by 2/T,
// H_out RoPE-averaged over rope_length positions with GQA folding. Shared by the CPU and GPU accumulators.
BlockStatistics finish_block_statistics(const LlamaConfig& c, const BlockStatsOptions& o, BlockStatistics raw,
                                        std::vector<float> c_k, std::vector<float> c_q, int64_t rope_length);

// The two calibration paths of the block loop (turboboa.md §4.6) — Xq through the quantized blocks and, for
// F2, Xfp through the full-precision ones — and what is measured on them. The CPU implementation holds the
// activations in host memory and runs block_forward; ptq/cuda/calibration_cuda.cuh keeps them on the GPU.
// Where a device's calibration time went (seconds, summed over the run); zeros where a device does not time.
struct CalibrationPhases {
    double forwards = 0;    // block forwards (both paths, statistics and propagation)
    double products = 0;    // the statistics' products (Hessians, covariances, block_v, F2)
    double transfers = 0;   // statistics to the host and their finishing (scaling, RoPE averaging); CPU: the finishing
    double finishing = 0;   // of `transfers`: the host's finishing alone (finish_block_statistics)
};

class CalibrationPaths {
public:
    virtual ~CalibrationPaths() = default;
    // Xq (and Xfp when `cross`) ← embeddings of `windows` ([samples, length]).
    virtual void embed(const LlamaModel& m, const std::vector<int32_t>& windows, int64_t samples, int64_t length,
                       bool cross) = 0;
    // The statistics of block `layer` on Xq (and Xfp) that `o` asks for. Xfp runs the full-precision weights
    // `fp` and advances through the block when o.advance_full_precision; Xq runs `quantized_path` (true-sequential:
    // the block with the projections quantized so far, the others full precision), or `fp` when null, and does
    // not advance (propagate does).
    virtual BlockStatistics statistics(const BlockWeights& fp, int64_t layer, const BlockStatsOptions& o,
                                       const BlockWeights* quantized_path = nullptr) = 0;
    // Xq ← the block with weights `q` (the quantized ones) applied to Xq.
    virtual void propagate(const BlockWeights& q, int64_t layer) = 0;
    // The activations as host vectors (checkpoints), and back (resume); xfp empty without F2.
    virtual void save(std::vector<float>& xq, std::vector<float>& xfp) const = 0;
    virtual void load(std::vector<float> xq, std::vector<float> xfp, int64_t samples, int64_t length) = 0;
    virtual std::string device() const = 0;  // "cpu", "cuda"
    // The per-token quantization of the quantized path's linear inputs (W·A quantization, `--act-bits`);
    // none unless the paths were made with one.
    virtual QuantSpec activations() const { return {}; }
    virtual CalibrationPhases phases() const { return {}; }
};

// block_forward on the CPU over `batch` windows at a time. With `activations` (W·A quantization) the quantized
// path Xq runs its seven projections as fake_quant_linears(QuantSpec{}, activations) — `lowbit eval --acts`'s
// linears — in statistics() and propagate(), and its statistics are taken of the quantized inputs
// Qa(x) (quantize_activations): H_in, block_v's A_h·Qa(X) and F2's (x̃ − Qa(x))·Qa(x)ᵀ; the full-precision
// path Xfp stays unquantized.
std::unique_ptr<CalibrationPaths> cpu_calibration_paths(const LlamaConfig& c, int64_t batch,
                                                        const QuantSpec& activations = {});

// mean over positions l = 0..length−1 of R_lᵀ·C·R_l for one head (C [hd, hd]; R_l the RoPE rotation of
// position l in the config's pairing), in double. Block (i, j) of the pairs (i, j) needs only the position means
// of cos θ_i l·cos θ_j l, cos·sin and sin·sin, which do not depend on C: RopeAverages computes them once
// (O(length · (hd/2)²)), and apply() each head's average in O(hd²).
class RopeAverages {
public:
    RopeAverages(const LlamaConfig& c, int64_t length);
    std::vector<float> apply(const float* cov) const;

private:
    int64_t hd_, half_;
    bool adjacent_;
    std::vector<double> cc_, cs_, ss_;  // [half, half]: means of c_i·c_j, c_i·s_j, s_i·s_j
};
std::vector<float> rope_averaged(const LlamaConfig& c, const float* cov, int64_t length);

}  // namespace lowbit
