// trainer_cpu.h — one training run on the CPU in FP32 (train/trainer.h's Trainer): the flat master
// parameters (initialized from the config's seed), their gradients, AdamW's state, the recipe's state and the
// linears, and the optimizer step
//     loss = train_forward; grads = train_backward; n = ‖grads‖₂; c = clip(n); AdamW(lr = schedule(step), c)
// (train/backward_cpu.h, train/optimizer.h). The reference the CUDA engine's steps are compared with.
// With grad_accum G > 1 the forward and backward run per micro-batch; the step's loss is the mean of their
// losses and its gradient float(1/G)·Σ (micro-batch gradients), summed in micro-batch order.
//
// Linears from a Recipe (recipe.h): bf16 → dense FP32 (the CPU has no BF16 GEMM; FP32 is the reference);
// mxfp4, mxfp4-iht, mxfp4-rht-sr → AdahopTrainLinear with the recipe's strategy per slot (rht-sr with its
// random signs and stochastic rounding); adahop-lv1/2 → dense FP32 while calibrating, every block
// projection observed (the detector labels X and W in the forward and dY in backward_data, recorded only
// during optimizer steps, not in loss()); after the last calibration step the plan is fixed and the linears
// are rebuilt from it. The LM head is always dense.
//
// Errors (thrown before the update, so the parameters stay those of the last good step): a non-finite loss
// is Error(runtime) "step N: loss is NaN/Inf …"; a non-finite gradient is global_grad_norm's error naming
// the tensor, prefixed with "step N: ".
// saved_operand_bytes*() are 0: the CPU seam re-quantizes X and W from FP32 in the backward and keeps no
// quantized copies (the CUDA engine reports the real numbers); peak_device_bytes() is 0.
// probe_slot_errors: one forward and backward of the first micro-batch through probing wrappers of the run's own
// linears (nothing of the run changes): each slot's product exactly (FP32), by the run's linear, and under each
// kProbeStrategies strategy (operand_analysis.h analyze_slot).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/backward_cpu.h"
#include "train/optimizer.h"
#include "train/recipe.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace lowbit {

class CpuTrainer final : public Trainer {
public:
    // Validates the config; parameters from init_params(config.seed).
    explicit CpuTrainer(const TrainConfig& config);  // the bf16 recipe (dense linears)
    CpuTrainer(const TrainConfig& config, const Recipe& recipe);
    // Given linears (tests); the recipe state is bf16's and set_state keeps these linears.
    CpuTrainer(const TrainConfig& config, TrainLinears linears);

    StepStats step(const TokenBatch& batch) override;
    double loss(const TokenBatch& batch) override;
    const TrainConfig& config() const override { return config_; }
    const ParamLayout& layout() const override { return layout_; }
    int64_t steps_done() const override { return optimizer_.steps_done(); }
    TrainerState state() const override;
    void set_state(const TrainerState& s) override;
    std::vector<float> gradients() const override { return grads_; }
    const RecipeState& recipe() const override { return recipe_; }
    int64_t saved_operand_bytes() const override { return 0; }
    int64_t saved_operand_bytes_bf16() const override { return 0; }
    int64_t peak_device_bytes() const override { return 0; }
    std::string describe() const override;
    std::vector<SlotError> probe_slot_errors(const TokenBatch& batch) override;
    void set_probe_observer(ProductObserver observe) override { probe_observer_ = std::move(observe); }

    // The host buffers themselves (tests).
    const std::vector<float>& params() const { return params_; }
    std::vector<float>& params() { return params_; }
    const std::vector<float>& grads() const { return grads_; }  // of the last step, before clipping

private:
    // The linears of the recipe at its current state (replacing linears_).
    void build_recipe_linears();
    void observe(int64_t layer, Projection p, Operand which, ConstMatF m);

    TrainConfig config_;
    ParamLayout layout_;
    std::vector<float> params_, grads_;
    std::vector<float> micro_grads_;  // one micro-batch's gradients (grad_accum > 1)
    AdamW optimizer_;
    RecipeState recipe_;
    bool linears_from_recipe_ = true;
    TrainLinears linears_;
    TrainActivations acts_;
    bool recording_ = false;  // inside step(): the observed linears record patterns
    ProductObserver probe_observer_;
};

}  // namespace lowbit
