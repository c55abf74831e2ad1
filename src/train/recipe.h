// recipe.h — the precision recipes of a training run (`lowbit train --precision`, adahop.md §5–7) and the
// state one carries through a run: which strategy each slot (forward, dgrad, wgrad) of each block
// projection uses at a given step. The LM head, embeddings, attention products, norms, SwiGLU, loss and
// optimizer are never quantized (adahop.md §7 "kept in BF16").
//
//   bf16          every GEMM BF16 operands, FP32 accumulation (Strategy::full); on the CPU: FP32 (dense)
//   mxfp4         every slot plain MXFP4 (both operands along the reduction dimension, no rotation)
//   mxfp4-iht     every slot block-32 Hadamard along the reduction dimension, then MXFP4
//   mxfp4-rht-sr  Tseng et al.'s baseline: forward plain MXFP4 with round-to-nearest; dgrad and wgrad
//                 with a randomized block-32 Hadamard (fixed random signs per run and slot) and stochastic
//                 rounding of both operands
//   adahop-lv1/2  the first `calibration_steps` (30) steps in BF16 while the detector records the pattern
//                 of every projection's X, W and dY; then the majority vote fixes each slot's strategy
//                 from the Lv1 or Lv2 table (strategy_plan.h), kept for the rest of the run and in
//                 checkpoints
// Slot, projection and layer masks (`--mx-slots`, `--mx-projections`, `--mx-layers`) run the unlisted slots,
// projections and blocks of an MXFP4 recipe in BF16: ablations that show which GEMMs carry a recipe's loss gap
// (issue 20's headline experiment). `--mx-scale-rule` picks the MX block-scale rule of every quantized operand.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "adahop/lp_matmul.h"
#include "adahop/outlier_detector.h"
#include "adahop/strategy_plan.h"
#include "model/config.h"
#include "model/linear.h"

namespace lowbit {

enum class Precision : uint8_t { bf16, mxfp4, mxfp4_iht, mxfp4_rht_sr, adahop_lv1, adahop_lv2 };

const char* precision_name(Precision p);                 // "bf16", "mxfp4", "mxfp4-iht", ...
Precision parse_precision(const std::string& name);      // Error(usage) listing the names otherwise
bool precision_calibrates(Precision p);                  // adahop-lv1 / adahop-lv2

struct Recipe {
    Precision precision = Precision::bf16;
    int calibration_steps = 30;  // AdaHOP only
    DetectorOptions detector;    // τ = 2.0
    // CUDA engine: keep the backward's operands quantized from the forward where a slot quantizes
    // (adahop.md §6; the same numbers as re-quantizing in the backward, less memory). Not a plan setting.
    bool save_quantized_operands = true;
    // CUDA engine: MXFP4 × MXFP4 main products on the tensor cores (adahop/cuda/mx_gemm_fp8.cuh, INT8 stages) instead
    // of the BF16 emulation; the same results up to FP32 summation order. Off: on the `base` training step the tensor
    // cores are slower today (bench/results/mx_gemm_h200.md). `lowbit train --mx-gemm tensor-cores`. Not a plan setting.
    bool mx_tensor_cores = false;
    // With mx_tensor_cores: one INT8 base per line of B (MxGemmFold::int8_stages_columns) instead of one per 128-line
    // tile (int8_stages). Real operands need it: on SmolLM2's, per-line bases cut the wgrad chunk pairs computed block
    // by block under IHT from 96 % to 63 % (bench/results/analyze_model_smollm2_cpu_devbox.md).
    // `--mx-gemm tensor-cores-columns`. Not a plan setting.
    bool mx_column_bases = false;
    // The slots (bit Slot) and projections (bit Projection) an MXFP4 recipe quantizes; the others run in BF16
    // (Strategy::full). A plan setting: saved with the recipe, and a resume must use the same masks.
    uint8_t mx_slots = kAllSlots;
    uint8_t mx_projections = kAllProjections;
    static constexpr uint8_t kAllSlots = 0x07, kAllProjections = 0x7f;
    // The blocks (bit = layer index) an MXFP4 recipe quantizes; kAllLayers = every block of any depth. A set mask
    // names blocks 0–63 only (kMaxMaskedLayers) and is refused on a deeper model.
    uint64_t mx_layers = kAllLayers;
    static constexpr uint64_t kAllLayers = ~uint64_t{0};
    static constexpr int kMaxMaskedLayers = 64;

    bool quantizes(int64_t layer, Projection p, Slot s) const {
        return (mx_slots >> int(s) & 1) != 0 && (mx_projections >> int(p) & 1) != 0 &&
               (mx_layers == kAllLayers || (layer < kMaxMaskedLayers && (mx_layers >> layer & 1) != 0));
    }
    bool masked() const { return mx_slots != kAllSlots || mx_projections != kAllProjections || mx_layers != kAllLayers; }
    // The MX scale rule of every quantized operand (formats/mx_block.h; default midmax, AdaHOP's kernel lineage):
    // an ablation of how much of a recipe's gap the block scales' clipping (floor) or coarser grid (rceil) make.
    // A plan setting, saved with the recipe when not the default.
    ScaleRule mx_scale_rule = kDefaultScaleRule;
    // The low-precision options every quantized GEMM of the run starts from (the engines' LpMatmulOptions).
    LpMatmulOptions lp_options() const {
        LpMatmulOptions o;
        o.scale_rule = mx_scale_rule;
        return o;
    }
};

// "fwd,dgrad" → the mask of those slots; "q,k,v,o,gate,up,down" (or "attn" = q,k,v,o, "ffn" = gate,up,down) →
// the mask of those projections. Error(usage) naming the unknown entry, or an empty list.
uint8_t parse_slot_mask(const std::string& list);
uint8_t parse_projection_mask(const std::string& list);
std::string slot_mask_name(uint8_t mask);          // "fwd,dgrad"
std::string projection_mask_name(uint8_t mask);    // "q,k,v,o"
// "0,2-4,11" → bits 0, 2, 3, 4 and 11: block indices and inclusive ranges, each below 64. Error(usage) otherwise.
uint64_t parse_layer_mask(const std::string& list);
std::string layer_mask_name(uint64_t mask);        // "0,2-4,11" (ranges where three or more blocks follow)
// "floor" | "midmax" | "rceil" → the rule; Error(usage) naming them otherwise.
ScaleRule parse_mx_scale_rule(const std::string& name);
// The recipe for logs: "mxfp4", or with masks "mxfp4 (MXFP4 only in slots fwd, projections q,k,v,o, layers 1-4)",
// and ", scale rule rceil" after either when the rule is not the default.
std::string recipe_description(const Recipe& r);

// A run's position in its recipe: calibrating (observations so far) or planned (strategies fixed).
class RecipeState {
public:
    RecipeState() = default;
    RecipeState(const Recipe& r, const LlamaConfig& c);

    const Recipe& recipe() const { return recipe_; }
    // Whether this step's GEMMs run in BF16 with the detector recording (AdaHOP's calibration phase).
    bool calibrating() const { return precision_calibrates(recipe_.precision) && !calibration_.complete(); }
    // The strategy of a slot of block `layer`'s projection `p` at the current step.
    Strategy strategy(int64_t layer, Projection p, Slot s) const;
    // Whether slot s of (layer, p) uses stochastic rounding and random signs (mxfp4-rht-sr's gradient GEMMs).
    bool randomized(Slot s) const { return recipe_.precision == Precision::mxfp4_rht_sr && s != Slot::fwd; }

    // Calibration: record a label; end_step() after every optimizer step (fixes the plan after the last
    // calibration step).
    void record(int64_t layer, Projection p, Operand which, Pattern label);
    void end_step();

    const Plan& plan() const { return plan_; }
    // Counts of slots per strategy over all block projections (the headline table's strategy map).
    std::map<std::string, int64_t> strategy_counts() const;
    // One line per layer: "blk.0  q: IHT/IHT/IHT  k: …" (printed when the plan is fixed).
    std::string plan_map() const;

    nlohmann::json to_json() const;  // recipe, calibration observations, plan
    // The engine settings, which a state does not record (save_quantized_operands, mx_tensor_cores, mx_column_bases),
    // are `engine`'s:
    // a trainer restoring a state passes its own recipe, so a checkpoint never switches them.
    static RecipeState from_json(const nlohmann::json& j, const LlamaConfig& c, const std::string& origin,
                                 const Recipe& engine = Recipe{});

private:
    Recipe recipe_;
    int64_t n_layers_ = 0;
    Calibration calibration_;
    Plan plan_;  // fixed strategies (AdaHOP after calibration); empty for the uniform recipes
};

}  // namespace lowbit
