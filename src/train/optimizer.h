// optimizer.h — the optimizer of the training engine: AdamW with decoupled weight decay over the flat
// FP32 parameter buffer (train/param_layout.h), global-norm gradient clipping, and the learning-rate
// schedule (linear warm-up, then cosine decay to a minimum fraction). The definitions, which the CUDA
// engine mirrors:
//
//   schedule (step s counts from 0, peak lr η, W warm-up steps, T total steps, floor η_min = f·η):
//     s < W:       η_s = η·(s + 1)/W                                   (llm.c: the first step is not 0)
//     W ≤ s < T:   η_s = η_min + (η − η_min)·½(1 + cos(π·(s − W)/(T − W)))
//     s ≥ T:       η_s = η_min
//   clipping: n = ‖g‖₂ over every parameter (squares summed in double); the gradients are scaled by
//     c = max_norm/n when n > max_norm, else c = 1 (llm.c; max_norm ≤ 0 turns clipping off). A non-finite
//     norm is an error naming the first tensor with a NaN/Inf gradient.
//   AdamW (t = number of this update, from 1; β₁ᵗ, β₂ᵗ and the bias corrections in double, then FP32):
//     g = c·grad;  m = β₁·m + (1 − β₁)·g;  v = β₂·v + (1 − β₂)·g·g
//     m̂ = m/(1 − β₁ᵗ);  v̂ = v/(1 − β₂ᵗ)
//     p = p − η_s·(m̂/(√v̂ + ε) + λ·p)          λ = weight_decay for matrices, 0 for the RMSNorm gains
//   every per-element operation in FP32, in this order (llm.c's update; equal to PyTorch's AdamW, which
//   first multiplies p by 1 − η_s·λ, up to rounding). Weight decay: the embedding, the projections and an
//   untied LM head decay, the norm gains do not (llm.c / nanoGPT: rank-2 tensors decay; torchtitan, the
//   framework of AdaHOP's runs, decays everything — adahop.md §7 leaves it unverified).
// Defaults: AdaHOP's recipe where adahop.md §7 states it (lr 4e-4, ε 1e-8); β = (0.9, 0.95), λ = 0.1 and
// max_norm = 1 are torchtitan's / llm.c's GPT-2 settings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/param_layout.h"

namespace lowbit {

struct AdamWConfig {
    double lr = 4e-4;  // peak learning rate
    double beta1 = 0.9, beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
    double grad_clip = 1.0;  // max global gradient norm; ≤ 0: no clipping
};

struct LrSchedule {
    int64_t warmup_steps = 0;
    int64_t total_steps = 1;
    double min_lr_fraction = 0.1;
    // η_s for peak `peak_lr` (formula above).
    double lr_at(int64_t step, double peak_lr) const;
};

// Error(usage) naming `source` when a hyper-parameter is out of its range.
void validate_optimizer(const AdamWConfig& a, const LrSchedule& s, const std::string& source);

// ‖grads‖₂ over the whole buffer; Error(runtime) naming the first tensor with a non-finite gradient.
double global_grad_norm(const ParamLayout& layout, const float* grads);
// The clipping factor c for a global norm (formula above).
float grad_clip_scale(double norm, double max_norm);

class AdamW {
public:
    AdamW(const ParamLayout& layout, const AdamWConfig& config);
    // One update of every parameter with learning rate `lr` and the gradients scaled by `grad_scale`.
    void step(float* params, const float* grads, double lr, float grad_scale = 1.0f);
    int64_t steps_done() const { return t_; }
    const std::vector<float>& first_moment() const { return m_; }
    const std::vector<float>& second_moment() const { return v_; }
    // The state put back (a checkpoint): Error(input) when m or v does not hold layout.total() floats or
    // steps_done is negative.
    void set_state(std::vector<float> m, std::vector<float> v, int64_t steps_done);

private:
    const ParamLayout* layout_;
    AdamWConfig config_;
    std::vector<float> m_, v_;
    int64_t t_ = 0;
};

}  // namespace lowbit
