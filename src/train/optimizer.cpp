// optimizer.cpp — learning-rate schedule, global-norm clipping and AdamW on the flat parameter buffer.
#include "train/optimizer.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/thread_pool.h"

namespace lowbit {

double LrSchedule::lr_at(int64_t step, double peak_lr) const {
    const double floor_lr = min_lr_fraction * peak_lr;
    if (step < warmup_steps) return peak_lr * double(step + 1) / double(warmup_steps);
    if (step >= total_steps) return floor_lr;
    const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
    return floor_lr + (peak_lr - floor_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

void validate_optimizer(const AdamWConfig& a, const LrSchedule& s, const std::string& source) {
    LOWBIT_CHECK(a.lr > 0 && std::isfinite(a.lr), ErrorKind::usage, "{}: learning rate {} must be positive", source, a.lr);
    LOWBIT_CHECK(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1, ErrorKind::usage,
                 "{}: AdamW betas ({}, {}) must lie in [0, 1)", source, a.beta1, a.beta2);
    LOWBIT_CHECK(a.eps > 0, ErrorKind::usage, "{}: AdamW epsilon {} must be positive", source, a.eps);
    LOWBIT_CHECK(a.weight_decay >= 0, ErrorKind::usage, "{}: weight decay {} must not be negative", source, a.weight_decay);
    LOWBIT_CHECK(std::isfinite(a.grad_clip), ErrorKind::usage, "{}: gradient clip {} is not finite", source, a.grad_clip);
    LOWBIT_CHECK(s.total_steps > 0, ErrorKind::usage, "{}: the number of steps {} must be positive", source, s.total_steps);
    LOWBIT_CHECK(s.warmup_steps >= 0 && s.warmup_steps < s.total_steps, ErrorKind::usage,
                 "{}: {} warm-up steps must be fewer than the {} steps of the run", source, s.warmup_steps, s.total_steps);
    LOWBIT_CHECK(s.min_lr_fraction >= 0 && s.min_lr_fraction <= 1, ErrorKind::usage,
                 "{}: min_lr_fraction {} must lie in [0, 1]", source, s.min_lr_fraction);
}

double global_grad_norm(const ParamLayout& layout, const float* grads) {
    double sum = 0.0;
    for (const ParamTensor& t : layout.tensors()) {
        double tensor_sum = 0.0;
        for (int64_t i = 0; i < t.size(); ++i) tensor_sum += double(grads[t.offset + i]) * double(grads[t.offset + i]);
        LOWBIT_CHECK(std::isfinite(tensor_sum), ErrorKind::runtime,
                     "the gradient of {} is not finite (NaN or Inf); lower the learning rate or check the data", t.name);
        sum += tensor_sum;
    }
    return std::sqrt(sum);
}

float grad_clip_scale(double norm, double max_norm) {
    return max_norm > 0 && norm > max_norm ? float(max_norm / norm) : 1.0f;
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config)
    : layout_(&layout), config_(config), m_(size_t(layout.total()), 0.0f), v_(size_t(layout.total()), 0.0f) {}

void AdamW::set_state(std::vector<float> m, std::vector<float> v, int64_t steps_done) {
    LOWBIT_CHECK(int64_t(m.size()) == layout_->total() && int64_t(v.size()) == layout_->total(), ErrorKind::input,
                 "AdamW state: moments of {} and {} values for a model of {} parameters", m.size(), v.size(),
                 layout_->total());
    LOWBIT_CHECK(steps_done >= 0, ErrorKind::input, "AdamW state: {} steps done", steps_done);
    m_ = std::move(m);
    v_ = std::move(v);
    t_ = steps_done;
}

void AdamW::step(float* params, const float* grads, double lr, float grad_scale) {
    ++t_;
    const float beta1 = float(config_.beta1), beta2 = float(config_.beta2);
    const float one_minus_beta1 = float(1.0 - config_.beta1), one_minus_beta2 = float(1.0 - config_.beta2);
    const float bias_correction1 = float(1.0 - std::pow(config_.beta1, double(t_)));
    const float bias_correction2 = float(1.0 - std::pow(config_.beta2, double(t_)));
    const float eta = float(lr), eps = float(config_.eps);
    for (const ParamTensor& t : layout_->tensors()) {
        const float decay = t.weight_decay() ? float(config_.weight_decay) : 0.0f;
        float* p = params + t.offset;
        float* m = m_.data() + t.offset;
        float* v = v_.data() + t.offset;
        const float* g = grads + t.offset;
        parallel_for(t.size(), 1 << 14, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                const float gi = grad_scale * g[i];
                m[i] = beta1 * m[i] + one_minus_beta1 * gi;
                v[i] = beta2 * v[i] + one_minus_beta2 * (gi * gi);
                const float m_hat = m[i] / bias_correction1, v_hat = v[i] / bias_correction2;
                p[i] -= eta * (m_hat / (std::sqrt(v_hat) + eps) + decay * p[i]);
            }
        });
    }
}

}  // namespace lowbit
