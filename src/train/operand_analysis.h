// operand_analysis.h — AdaHOP's view of a model's real GEMM operands (`lowbit analyze model`). One FP32 forward and
// backward of a model (a pretrained one, loaded by the runtime) on a batch of real text, with no update
// (train/backward_cpu.h), and for every block projection's three GEMMs (adahop.md §3; strategy_plan.h)
//   fwd    Y  = X·Wᵀ    A = X  [M, in],   B = Wᵀ [in, out]
//   dgrad  dX = dY·W    A = dY [M, out],  B = W  [out, in]
//   wgrad  dW = dYᵀ·X   A = dYᵀ [out, M], B = X  [M, in]
// (M = tokens of the batch):
//   - the outlier pattern of X, W and dY (the detector of AdaHOP's calibration, adahop/outlier_detector.h) and the
//     strategy the planner gives each slot from them (one batch = one calibration step: no vote across steps);
//   - the relative Frobenius error ‖C_s − C‖ / ‖C‖ of the product under each strategy s (the CPU lp_matmul), C the FP32
//     product of the same operands;
//   - for MXFP4 operands, the census of the INT8-stage tensor-core GEMM's window (adahop/int8_window.h), plain and
//     under IHT: the (128-line tile, 256-deep chunk) units of A and of B outside the window, and the (128 × 128 output
//     tile, chunk) pairs that go block by block under B's two folds (mx_gemm_fp8.cuh: MxGemmFold::int8_stages, one
//     base per 128-line tile of B, and int8_stages_columns, one per line).
// The operands are the analysis linear's own arguments at the TrainLinear seam: W from the forward, dY and X at the
// weight gradient, where the three slots of a projection are analysed; no operand is copied beyond one slot's
// temporaries (memory: the training forward's activations and two model-sized FP32 buffers).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "adahop/int8_window.h"
#include "adahop/lp_matmul.h"
#include "adahop/outlier_detector.h"
#include "adahop/strategy_plan.h"
#include "model/weights.h"
#include "train/backward_cpu.h"

namespace lowbit {

struct OperandAnalysisOptions {
    LpMatmulOptions lp;  // element format, scale rule, rounding, OE k: the training engine's defaults
    DetectorOptions detector;
    StrategyTable table = strategy_table_lv1();
    std::vector<Strategy> strategies = {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right,
                                        Strategy::full};
    // The census's window width in binades: the kernel's 3, or wider to ask what a wider-window design would chain.
    int window_binades = kInt8WindowBinades;
    std::function<void(int64_t done, int64_t total)> progress;  // after each analysed projection
};

// One slot's operands under one rotation (plain or IHT), in the units of adahop/int8_window.h.
struct WindowCensus {
    int64_t a_outside = 0, a_units = 0;                            // A's (row tile, chunk) units
    int64_t b_tile_outside = 0, b_line_outside = 0, b_units = 0;  // B's (column tile, chunk) units, per-tile / per-line bases
    int64_t pairs = 0;                                             // (output tile, chunk) pairs of the product
    int64_t slow_pairs_tile = 0, slow_pairs_line = 0;              // of those, block by block under each fold of B
};

struct SlotAnalysis {
    Slot slot = Slot::fwd;
    int64_t m = 0, k = 0, n = 0;
    Pattern a = Pattern::none, b = Pattern::none;  // the pattern pair the planner reads (slot_pair)
    Strategy planned = Strategy::iht;
    std::vector<double> rel_error;  // per OperandAnalysisOptions::strategies; NaN when K is not a multiple of 32
    std::optional<WindowCensus> census_plain, census_iht;  // MXFP4 operands with K a multiple of 32 only
};

struct ProjectionAnalysis {
    int64_t layer = 0;
    Projection projection = Projection::q;
    PatternStats x, w, g;  // detector on X [M, in], W [out, in], dY [M, out]
    LayerPlan plan;
    std::array<SlotAnalysis, 3> slots;  // fwd, dgrad, wgrad
};

struct ModelOperandAnalysis {
    double loss = 0;  // the batch's mean next-token loss (nats)
    BatchShape shape;
    std::vector<ProjectionAnalysis> projections;  // layer-major, kProjections order
    std::string table_name;
    Plan plan() const;  // the strategies the planner fixed, in the training engine's plan format
};

// The analysis of one GEMM C = A·B (A [m, k], B [k, n], row-major, dense) whose planner inputs are `pair`.
SlotAnalysis analyze_slot(Slot slot, const float* a, const float* b, int64_t m, int64_t k, int64_t n,
                          std::pair<Pattern, Pattern> pair, Strategy planned, const OperandAnalysisOptions& opts);

// The three slots of one projection from its operands X [M, in], W [out, in], dY [M, out].
ProjectionAnalysis analyze_projection(int64_t layer, Projection p, ConstMatF x, ConstMatF w, ConstMatF dy,
                                      const OperandAnalysisOptions& opts);

// Every projection of `model` (Llama architecture without q/k/v biases: Error(usage) otherwise) on `batch`.
ModelOperandAnalysis analyze_model_operands(const LlamaModel& model, const TokenBatch& batch,
                                            const OperandAnalysisOptions& opts);

}  // namespace lowbit
