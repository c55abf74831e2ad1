// trainer_cpu.h — one training run on the CPU in FP32: the flat master parameters (initialized from the
// config's seed), their gradients, AdamW's state and the linears, and the optimizer step
//     loss = train_forward; grads = train_backward; n = ‖grads‖₂; c = clip(n); AdamW(lr = schedule(step), c)
// (train/backward_cpu.h, train/optimizer.h). The reference the CUDA engine's steps are compared with.
#pragma once

#include <cstdint>
#include <vector>

#include "train/backward_cpu.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace lowbit {

struct StepStats {
    int64_t step = 0;        // index of the step just taken (from 0)
    double loss = 0;         // mean cross entropy of the batch before the update
    double grad_norm = 0;    // before clipping
    float clip_scale = 1;
    double lr = 0;
};

class CpuTrainer {
public:
    // Validates the config; parameters from init_params(config.seed); dense linears unless given.
    explicit CpuTrainer(const TrainConfig& config);
    CpuTrainer(const TrainConfig& config, TrainLinears linears);

    // One optimizer step on the batch (its shape must be batch_size x seq_len of the config).
    StepStats step(const TokenBatch& batch);
    // The loss of the current parameters on a batch (no update).
    double loss(const TokenBatch& batch);

    const TrainConfig& config() const { return config_; }
    const ParamLayout& layout() const { return layout_; }
    const std::vector<float>& params() const { return params_; }
    std::vector<float>& params() { return params_; }
    const std::vector<float>& grads() const { return grads_; }  // of the last step, before clipping
    int64_t steps_done() const { return optimizer_.steps_done(); }

private:
    TrainConfig config_;
    ParamLayout layout_;
    std::vector<float> params_, grads_;
    AdamW optimizer_;
    TrainLinears linears_;
    TrainActivations acts_;
};

}  // namespace lowbit
