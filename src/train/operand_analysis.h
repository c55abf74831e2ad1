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
//     product of the same operands, and its gain ⟨C_s, C⟩ / ‖C‖² (the part of C_s along C: below 1, the low-precision
//     product is shrunk, which for wgrad acts like a smaller learning rate rather than noise);
//   - for MXFP4 operands, the census of the INT8-stage tensor-core GEMM's window (adahop/int8_window.h), plain and
//     under IHT: the (128-line tile, 256-deep chunk) units of A and of B outside the window, and the (128 × 128 output
//     tile, chunk) pairs that go block by block under B's two folds (mx_gemm_fp8.cuh: MxGemmFold::int8_stages, one
//     base per 128-line tile of B, and int8_stages_columns, one per line).
// The operands are the analysis linear's own arguments at the TrainLinear seam: W from the forward, dY and X at the
// weight gradient, where the three slots of a projection are analysed; no operand is copied beyond one slot's
// temporaries (memory: the training forward's activations and two model-sized FP32 buffers).
//
// Several batches (AdaHOP calibrates over 30 steps): merge_batches takes the majority vote of the labels, as the
// training engine's calibration does, and the means of the errors; ErrorConsistency watches one slot's products
// across the batches and says whether their error is noise (independent from batch to batch, so it averages out over
// steps) or systematic (the same direction every batch, so an optimizer accumulates it).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "adahop/int8_window.h"
#include "adahop/lp_matmul.h"
#include "adahop/outlier_detector.h"
#include "adahop/strategy_plan.h"
#include "model/weights.h"
#include "train/backward_cpu.h"

namespace lowbit {

// One low-precision product: C_s under strategy number `strategy` of the observer's list and the reference C (the
// FP32 product here; the BF16-operand product in the CUDA training engine's probe), both [m, n] host arrays; or, with
// `error` set, E = C_s − C itself instead of C_s.
struct ProductObservation {
    int64_t layer = 0;
    Projection projection = Projection::q;
    Slot slot = Slot::fwd;
    size_t strategy = 0;  // index into OperandAnalysisOptions::strategies (the training probe: kProbeStrategies)
    const float* c_s = nullptr;
    const float* c = nullptr;
    int64_t m = 0, n = 0;
    const float* error = nullptr;
};
using ProductObserver = std::function<void(const ProductObservation&)>;

struct OperandAnalysisOptions {
    LpMatmulOptions lp;  // element format, scale rule, rounding, OE k: the training engine's defaults
    DetectorOptions detector;
    StrategyTable table = strategy_table_lv1();
    std::vector<Strategy> strategies = {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right,
                                        Strategy::full};
    // The census's window width in binades: the kernel's 3 (two planes: 7), or wider to ask what a wider-window
    // design would chain.
    int window_binades = kInt8WindowBinades;
    // Leave the first `skip_positions` positions of every window out of the analysed operands (the rows of X and dY;
    // the forward and backward still see them): is a slot's error carried by the first tokens, where pretrained
    // models keep their attention sinks? 0: every position.
    int64_t skip_positions = 0;
    std::function<void(int64_t done, int64_t total)> progress;  // after each analysed projection
    ProductObserver observe_product;  // every product, while it is at hand
};

// One slot's operands under one rotation (plain or IHT), in the units of adahop/int8_window.h.
struct WindowCensus {
    int64_t a_outside = 0, a_units = 0;                            // A's (row tile, chunk) units
    int64_t b_tile_outside = 0, b_line_outside = 0, b_units = 0;  // B's (column tile, chunk) units, per-tile / per-line bases
    int64_t a_two_planes = 0, b_tile_two_planes = 0, b_line_two_planes = 0;  // units inside with two planes
    int64_t pairs = 0;                                             // (output tile, chunk) pairs of the product
    int64_t slow_pairs_tile = 0, slow_pairs_line = 0;              // of those, block by block under each fold of B
    WindowCensus& operator+=(const WindowCensus& c);              // sums (over blocks or batches)
};

struct SlotAnalysis {
    Slot slot = Slot::fwd;
    int64_t m = 0, k = 0, n = 0;
    Pattern a = Pattern::none, b = Pattern::none;  // the pattern pair the planner reads (slot_pair)
    Strategy planned = Strategy::iht;
    std::vector<double> rel_error;  // per OperandAnalysisOptions::strategies; NaN when K is not a multiple of 32
    std::vector<double> gain;       // ⟨C_s, C⟩ / ‖C‖² per strategy; NaN likewise
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

// ‖c_s − c‖ / ‖c‖ over n values (FP64 sums; 0 when both are zero, ∞ when only c is).
double relative_frobenius_error(const float* c_s, const float* c, size_t n);

// The analysis of one GEMM C = A·B (A [m, k], B [k, n], row-major, dense) whose planner inputs are `pair`; `observe`
// (if any) sees each strategy's product next to C.
SlotAnalysis analyze_slot(Slot slot, const float* a, const float* b, int64_t m, int64_t k, int64_t n,
                          std::pair<Pattern, Pattern> pair, Strategy planned, const OperandAnalysisOptions& opts,
                          const std::function<void(size_t strategy, const float* c_s, const float* c)>& observe = {});

// The three slots of one projection from its operands X [M, in], W [out, in], dY [M, out].
ProjectionAnalysis analyze_projection(int64_t layer, Projection p, ConstMatF x, ConstMatF w, ConstMatF dy,
                                      const OperandAnalysisOptions& opts);

// Every projection of `model` (Llama architecture without q/k/v biases: Error(usage) otherwise) on `batch`.
ModelOperandAnalysis analyze_model_operands(const LlamaModel& model, const TokenBatch& batch,
                                            const OperandAnalysisOptions& opts);

// The analyses of several batches of one model as one: per projection, each label is the majority vote over the
// batches (ties: the label seen first; strategy_plan.h's Calibration), the plan and the slots' pattern pairs follow
// from the votes, the detector statistics, errors, gains and loss are means over the batches, the census counts sums,
// and the shape counts every window. Error(usage) on an empty list or analyses of different models.
ModelOperandAnalysis merge_batches(const std::vector<ModelOperandAnalysis>& batches, const StrategyTable& table);

// Across batches, for one slot: per (layer, projection, strategy) the sums Σ_b E_b (E_b = C_s,b − C_b) and Σ_b ‖E_b‖²,
// and per (layer, projection) Σ_b C_b — FP32 running sums of the slot's output size per strategy (wgrad: the weights'
// size, so about (strategies + 1) × the model's parameters of memory).
class ErrorConsistency {
public:
    explicit ErrorConsistency(Slot slot = Slot::wgrad) : slot_(slot) {}
    void observe(const ProductObservation& p);  // products of other slots are ignored; call end_batch after each batch
    void end_batch() { ++batches_; }
    int64_t batches() const { return batches_; }
    Slot slot() const { return slot_; }

    struct Entry {
        int64_t layer = 0;
        Projection projection = Projection::q;
        size_t strategy = 0;
        double sum_error_norm2 = 0;  // ‖Σ_b E_b‖²
        double error_norm2_sum = 0;  // Σ_b ‖E_b‖²
        double sum_c_norm2 = 0;      // ‖Σ_b C_b‖²
        double dot = 0;              // ⟨Σ_b E_b, Σ_b C_b⟩
        // ‖Σ E‖ / √(Σ ‖E‖²): 1 when the batches' errors are independent and zero-mean, √batches when they are equal.
        double consistency() const { return error_norm2_sum > 0 ? std::sqrt(sum_error_norm2 / error_norm2_sum) : 0.0; }
    };
    std::vector<Entry> entries() const;  // layer-major, kProjections order, then strategy

    // The entries of each (projection kind, strategy) summed over the layers: consistency √(Σ‖ΣE‖² / ΣΣ‖E‖²), the summed
    // error relative to the summed product √(Σ‖ΣE‖² / Σ‖ΣC‖²), and the cosine between the two sums (NaN where undefined).
    struct Summary {
        double sum_error_norm2 = 0, error_norm2_sum = 0, sum_c_norm2 = 0, dot = 0;
        double consistency() const;
        double relative() const;
        double cosine() const;
    };
    std::map<std::pair<Projection, size_t>, Summary> by_projection() const;
    // {"attn_q": {"plain": {"consistency", "relative", "cosine"}, …}, …}: by_projection with `strategies` naming the
    // strategy numbers (null for NaN).
    nlohmann::json by_projection_json(const std::vector<Strategy>& strategies) const;

private:
    struct Sums {
        std::vector<float> error;
        double error_norm2_sum = 0;
    };
    Slot slot_;
    int64_t batches_ = 0;
    std::map<std::tuple<int64_t, int, size_t>, Sums> errors_;  // (layer, projection, strategy)
    std::map<std::pair<int64_t, int>, std::vector<float>> products_;
};

}  // namespace lowbit
