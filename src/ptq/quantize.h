// quantize.h — `lowbit quantize`: a whole model through RTN, GPTQ, BoA or TurboBoA, block by block
// (turboboa.md §4.6):
//   Xq ← embeddings of the calibration windows (Xfp ← the same, for F2)
//   for each block: statistics of all seven linears from the full-precision block on Xq (and Xfp), then
//   the linears quantized (q, k two-sided for BoA/TurboBoA; v with per-KV-head value Hessians; o and the
//   MLP one-sided), then Xq ← quantized block(Xq), Xfp ← full-precision block(Xfp). With true_sequential
//   (GPTQ's --true-sequential) the statistics are taken one input at a time — q/k/v, o, gate/up, down — each
//   on Xq through the block with the layers before it already quantized.
// Only one block's statistics are in flight (and, with stream_blocks, one block's FP32 weights: the others
// are read when their turn comes and dropped to their codes after, and with spill_blocks the codes go to disk
// too); the calibration activations are the rest of the memory. After every block its codes, and the state
// (the activations; at most every checkpoint_seconds), are written atomically to `checkpoint_dir`, so an
// interrupted run resumes from the last checkpointed block (`resume`).
//
// Methods: rtn (no calibration); gptq (one-sided everywhere, grids fitted at each group from the current
// weights, optional act-order); boa (two-sided q/k with one row at a time, grids fixed from the original
// weights, block_v); turboboa with features f1 (rows in blocks of N = row_block), f2 (α·D propagated-error
// terms), f3 (adaptive grids + scale refinement; without it: the fixed-grid mode); boa and turboboa may sweep
// the rows of each q/k head by descending diag(H_out) (act_order_row). Which tensors the
// statistics pass shares: q/k/v one H_in, gate/up one H_in (computed once each). With `activations` the
// quantized path is the W·A-quantized model (its linear inputs quantized per token, as `lowbit eval --acts`
// does), so the solvers see its Hessians and propagated activations; the full-precision path is not.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ptq/calibration.h"
#include "ptq/quantized_model.h"
#include "ptq/rotate.h"
#include "ptq/solver.h"

namespace lowbit {

enum class PtqMethod : uint8_t { rtn, gptq, boa, turboboa };
const char* ptq_method_name(PtqMethod m);
PtqMethod parse_ptq_method(const std::string& name);  // Error(usage) listing the methods

struct PtqOptions {
    PtqMethod method = PtqMethod::turboboa;
    bool f1 = true, f2 = true, f3 = true;     // turboboa features
    GridSpec grid;                            // the projections' grid, unless per_tensor_grid is set
    // Per linear ("blk.3.attn_v") grid, e.g. from a llama.cpp mix (named by `mix`); null: `grid` everywhere.
    std::function<GridSpec(const std::string& linear, int64_t rows, int64_t cols)> per_tensor_grid;
    std::string mix;
    CalibrationSpec calibration;
    double alpha = 0.25;                      // F2
    int64_t row_block = 16;                   // F1's N
    bool block_v = true;
    bool act_order = false;
    bool act_order_row = false;               // boa/turboboa q and k: rows by descending diag(H_out) per head
    // Statistics per input in the forward's order (q/k/v, o, gate/up, down), each after the layers before it in
    // the block were quantized: four statistics passes per block instead of one (GPTQ's --true-sequential;
    // GPTQModel's default). Off: every statistic from the full-precision block, as TurboBoA's reference does.
    bool true_sequential = false;
    // Grouped grids fitted from the input W before the sweep (static groups) or at each group from the compensated
    // values (GPTQ's timing); null: at each group where the method adapts its grids — gptq, and turboboa with f3 on
    // its one-sided layers (TurboBoA's reference is static there: docs/ptq.md says why lowbit is not) — static for
    // boa and turboboa without f3 (fixed grids), where off is refused. act_order forces static groups.
    std::optional<bool> static_groups;
    bool resolved_static_groups() const;
    // Error(usage) when static_groups is false where grids cannot be fitted at each group: with act_order, boa, or
    // turboboa without f3. quantize_model calls it; a CLI may call it earlier.
    void check_static_groups() const;
    double damping = 0.01;
    int refine_iters = 1;
    bool rotate = false;
    RotationOptions rotation;
    // W·A quantization (`--act-bits`, parse_activation_spec): the quantized path's linear inputs quantized per
    // token during calibration (cpu_calibration_paths), recorded for evaluation; no format: weights only.
    QuantSpec activations;
    int64_t batch = 4;                        // calibration windows per forward pass
    // Blocks read from the model when their turn comes (rotated then), their FP32 projections dropped once
    // quantized: host memory holds one block in FP32 besides the head and every block's codes, not the whole
    // model. The QuantizedModel's blocks then hold no projection values (only norms and biases): its
    // `linears` are the projections (the exporters take them from there). `lowbit quantize` streams.
    bool stream_blocks = false;
    // With stream_blocks: a finished block's linears leave memory too. Its checkpoint file in checkpoint_dir
    // (written for every method then) holds them, and the QuantizedModel lists it in `spilled`; the exporters
    // read the blocks back one at a time, so host memory holds no codes at all. The files must stay until the
    // export is written. `lowbit quantize` spills.
    bool spill_blocks = false;
    std::string checkpoint_dir;               // empty: no checkpoints
    // The resume state (the calibration activations: 2 × tokens × hidden × 4 bytes with F2, 8.6 GB for an 8B
    // model at 128 × 2048) is written after a block only when this many seconds have passed since the last
    // one (and after the last block); 0: after every block. Block files are written after every block either
    // way; a resume recomputes the blocks after the last state.
    double checkpoint_seconds = 0;
    bool resume = false;
    std::function<void(int64_t block)> on_block_done;  // after each finished (and checkpointed) block
    // Where the work runs (both null: the CPU). `solver_device` takes the factorizations, sweeps and big
    // products of the solvers; `calibration_paths` makes the calibration paths (forwards and statistics).
    const SolverDevice* solver_device = nullptr;
    std::function<std::unique_ptr<CalibrationPaths>(const LlamaConfig&, int64_t batch)> calibration_paths;
    std::string describe_features() const;    // "f1,f2,f3" for turboboa, "" otherwise
};

struct LayerReport {
    std::string name;
    std::string grid;
    double loss = 0;         // the layer objective (turboboa.md §4.1) of the quantized weights
    double rel_loss = 0;     // loss / tr(H_out W H_in Wᵀ): the output error relative to the output's size
    double seconds = 0;      // the whole layer: solve, dequantization and the report's objectives
    double factor_seconds = 0, sweep_seconds = 0, refine_seconds = 0, objective_seconds = 0;  // parts of it
    double damping = 0;
    int retries = 0;
    int64_t dead = 0;
    bool flagged = false;    // rel_loss ≥ 10× the median of its projection, or extra damping
};

struct PtqReport {
    std::vector<LayerReport> layers;
    std::string device = "cpu";
    double seconds = 0, calibration_seconds = 0;
    CalibrationPhases calibration_phases;  // the parts of calibration_seconds a GPU device timed
    std::vector<double> block_seconds;     // wall clock of each block quantized in this run (statistics to checkpoint)
    int64_t calibration_tokens = 0;
    uint64_t peak_rss_bytes = 0;
    int64_t resumed_from_block = 0;
};

// Quantizes the model read by `r`, calibrating on `windows` ([samples, length] token ids as
// o.calibration says; calibration_windows makes them; ignored by rtn). Progress on stderr.
QuantizedModel quantize_model(const ModelReader& r, const std::vector<int32_t>& windows, const PtqOptions& o,
                              PtqReport* report);

// Peak resident memory of this process so far (getrusage), in bytes.
uint64_t peak_rss_bytes();

}  // namespace lowbit
