// trainer_cpu.cpp — the CPU optimizer step (forward, backward, clipping, AdamW on the schedule), the recipe's
// linears and calibration, and the run state.
#include "train/trainer_cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "adahop/outlier_detector.h"
#include "core/error.h"

namespace lowbit {

namespace {

const TrainConfig& validated(const TrainConfig& c) {
    validate_train_config(c, "training config");
    return c;
}

// The probe's wrapper of one of the run's linears: every call goes through `inner` as in a step; before it, the
// slot's product is also computed exactly, by `inner` alone, and under each kProbeStrategies strategy.
class ProbeTrainLinear final : public TrainLinear {
public:
    ProbeTrainLinear(TrainLinear& inner, int64_t layer, Projection p, std::array<Strategy, 3> active, std::vector<SlotError>& out,
                     const ProductObserver& observe)
        : inner_(inner), layer_(layer), p_(p), active_(active), out_(out), observe_(observe) {}
    void forward(ConstMatF x, ConstMatF w, MatF y, float beta) override {
        std::vector<float> own(size_t(x.rows * w.rows));
        inner_.forward(x, w, MatF(own.data(), x.rows, w.rows));
        const std::vector<float> w_t = transposed(w);
        record(Slot::fwd, dense_copy(x), w_t, x.rows, x.cols, w.rows, own);
        inner_.forward(x, w, y, beta);
    }
    void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta) override {
        std::vector<float> own(size_t(dy.rows * w.cols));
        inner_.backward_data(dy, w, MatF(own.data(), dy.rows, w.cols));
        record(Slot::dgrad, dense_copy(dy), dense_copy(w), dy.rows, dy.cols, w.cols, own);
        inner_.backward_data(dy, w, dx, beta);
    }
    void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta) override {
        std::vector<float> own(size_t(dy.cols * x.cols));
        inner_.backward_weight(dy, x, MatF(own.data(), dy.cols, x.cols));
        record(Slot::wgrad, transposed(dy), dense_copy(x), dy.cols, dy.rows, x.cols, own);
        inner_.backward_weight(dy, x, dw, beta);
    }
    std::string describe() const override { return "probed " + inner_.describe(); }

private:
    static std::vector<float> dense_copy(ConstMatF m) {
        std::vector<float> d(size_t(m.rows * m.cols));
        for (int64_t r = 0; r < m.rows; ++r) std::copy(m.row(r), m.row(r) + m.cols, d.begin() + r * m.cols);
        return d;
    }
    // C = A·B (A [m, k], B [k, n]); `own` is the run's linear's C.
    void record(Slot slot, const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k, int64_t n,
                const std::vector<float>& own) {
        OperandAnalysisOptions o;
        o.strategies.assign(kProbeStrategies.begin(), kProbeStrategies.end());
        // The run's own error against analyze_slot's exact product (the first candidate's callback hands it over);
        // NaN where analyze_slot measures nothing (K not a multiple of 32).
        double own_error = std::numeric_limits<double>::quiet_NaN();
        const auto observe = [&](size_t i, const float* c_s, const float* c) {
            if (i == 0) own_error = relative_frobenius_error(own.data(), c, own.size());
            if (slot == Slot::wgrad && observe_) observe_(ProductObservation{layer_, p_, Slot::wgrad, i, c_s, c, m, n});
        };
        const SlotAnalysis s = analyze_slot(slot, a.data(), b.data(), m, k, n, {}, Strategy::full, o, observe);
        SlotError e;
        e.layer = layer_;
        e.projection = p_;
        e.slot = slot;
        e.active = active_[size_t(slot)];
        e.active_error = own_error;
        std::copy(s.rel_error.begin(), s.rel_error.end(), e.error.begin());
        out_.push_back(e);
    }

    TrainLinear& inner_;
    int64_t layer_;
    Projection p_;
    std::array<Strategy, 3> active_;
    std::vector<SlotError>& out_;
    const ProductObserver& observe_;
};

bool all_finite(ConstMatF m) {
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t c = 0; c < m.cols; ++c)
            if (!std::isfinite(m.row(r)[c])) return false;
    return true;
}

}  // namespace

CpuTrainer::CpuTrainer(const TrainConfig& config) : CpuTrainer(config, Recipe{}) {}

CpuTrainer::CpuTrainer(const TrainConfig& config, const Recipe& recipe)
    : config_(validated(config)),
      layout_(config_.model),
      params_(init_params(layout_, config_.seed, config_.init_std)),
      grads_(size_t(layout_.total()), 0.0f),
      optimizer_(layout_, config_.optimizer),
      recipe_(recipe, config_.model) {
    build_recipe_linears();
}

CpuTrainer::CpuTrainer(const TrainConfig& config, TrainLinears linears)
    : config_(validated(config)),
      layout_(config_.model),
      params_(init_params(layout_, config_.seed, config_.init_std)),
      grads_(size_t(layout_.total()), 0.0f),
      optimizer_(layout_, config_.optimizer),
      recipe_(Recipe{}, config_.model),
      linears_from_recipe_(false),
      linears_(std::move(linears)) {}

void CpuTrainer::observe(int64_t layer, Projection p, Operand which, ConstMatF m) {
    // A NaN/Inf operand is left to the loss and gradient checks of step(), which name the step.
    if (!recording_ || !all_finite(m)) return;
    std::vector<float> dense;
    if (!m.dense())
        for (int64_t r = 0; r < m.rows; ++r) dense.insert(dense.end(), m.row(r), m.row(r) + m.cols);
    const float* data = m.dense() ? m.data : dense.data();
    recipe_.record(layer, p, which, detect_outlier_pattern(data, m.rows, m.cols, recipe_.recipe().detector).pattern);
}

void CpuTrainer::build_recipe_linears() {
    const Precision precision = recipe_.recipe().precision;
    if (precision == Precision::bf16) {
        linears_ = dense_train_linears(config_.model);
        return;
    }
    if (recipe_.calibrating()) {
        linears_ = make_train_linears(config_.model, [this](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
            return std::make_unique<ObservedTrainLinear>(
                std::make_unique<DenseTrainLinear>(),
                [this, layer, p](Operand which, ConstMatF m) { observe(layer, p, which, m); });
        });
        return;
    }
    linears_ = make_train_linears(config_.model, [this](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
        LayerPlan plan;
        plan.fwd = recipe_.strategy(layer, p, Slot::fwd);
        plan.dgrad = recipe_.strategy(layer, p, Slot::dgrad);
        plan.wgrad = recipe_.strategy(layer, p, Slot::wgrad);
        std::optional<RhtSrSeeds> rht_sr;
        if (recipe_.randomized(Slot::dgrad)) rht_sr = RhtSrSeeds{config_.seed, layer, p};
        return std::make_unique<AdahopTrainLinear>(plan, recipe_.recipe().lp_options(), rht_sr);
    });
}

StepStats CpuTrainer::step(const TokenBatch& batch) {
    LOWBIT_CHECK(batch.shape.n_seq == config_.batch_size && batch.shape.n_tok == config_.seq_len, ErrorKind::usage,
                 "training step: a batch of {} x {} tokens, but the config trains {} sequences of {}", batch.shape.n_seq,
                 batch.shape.n_tok, config_.batch_size, config_.seq_len);
    StepStats s;
    s.step = optimizer_.steps_done();
    const int64_t micros = config_.grad_accum, micro_seqs = micro_batch_size(config_);
    recording_ = recipe_.calibrating();
    try {
        double loss_sum = 0;
        for (int64_t k = 0; k < micros; ++k) {
            const TokenBatch micro = batch_rows(batch, k * micro_seqs, micro_seqs);
            linears_.begin_step(s.step * micros + k);
            const double loss = train_forward(layout_, params_.data(), linears_, micro, acts_);
            LOWBIT_CHECK(std::isfinite(loss), ErrorKind::runtime,
                         "step {}: loss is NaN/Inf ({}{}); the parameters are those after step {} (lower the learning "
                         "rate, check the data, or resume from the last checkpoint)",
                         s.step, loss, micros > 1 ? fmt::format(", micro-batch {} of {}", k + 1, micros) : "",
                         s.step - 1);
            loss_sum += loss;
            if (micros == 1) {
                train_backward(layout_, params_.data(), linears_, micro, acts_, grads_.data());
                continue;
            }
            micro_grads_.resize(grads_.size());
            train_backward(layout_, params_.data(), linears_, micro, acts_, micro_grads_.data());
            for (size_t i = 0; i < grads_.size(); ++i) grads_[i] = k == 0 ? micro_grads_[i] : grads_[i] + micro_grads_[i];
        }
        if (micros > 1) {
            const float inv = float(1.0 / double(micros));
            for (float& g : grads_) g *= inv;
        }
        s.loss = micros == 1 ? loss_sum : loss_sum / double(micros);
        recording_ = false;
        s.grad_norm = global_grad_norm(layout_, grads_.data());
    } catch (const Error& e) {
        recording_ = false;
        if (std::string(e.what()).starts_with("step ")) throw;
        throw Error(e.kind(), fmt::format("step {}: {}", s.step, e.what()));
    }
    s.clip_scale = grad_clip_scale(s.grad_norm, config_.optimizer.grad_clip);
    s.lr = config_.schedule.lr_at(s.step, config_.optimizer.lr);
    optimizer_.step(params_.data(), grads_.data(), s.lr, s.clip_scale);
    const bool was_calibrating = recipe_.calibrating();
    recipe_.end_step();
    if (was_calibrating && !recipe_.calibrating() && linears_from_recipe_) build_recipe_linears();
    return s;
}

double CpuTrainer::loss(const TokenBatch& batch) {
    return mean_loss_by_parts(batch, micro_batch_size(config_), [&](const TokenBatch& part) {
        return train_forward(layout_, params_.data(), linears_, part, acts_);
    });
}

TrainerState CpuTrainer::state() const {
    return {params_, optimizer_.first_moment(), optimizer_.second_moment(), optimizer_.steps_done(), recipe_.to_json()};
}

void CpuTrainer::set_state(const TrainerState& s) {
    LOWBIT_CHECK(int64_t(s.params.size()) == layout_.total(), ErrorKind::input,
                 "trainer state: {} parameters for a model of {}", s.params.size(), layout_.total());
    optimizer_.set_state(s.m, s.v, s.steps_done);
    params_ = s.params;
    if (!s.recipe_state.is_null()) recipe_ = RecipeState::from_json(s.recipe_state, config_.model, "trainer state", recipe_.recipe());
    if (linears_from_recipe_) build_recipe_linears();
}

std::vector<SlotError> CpuTrainer::probe_slot_errors(const TokenBatch& batch) {
    LOWBIT_CHECK(batch.shape.n_seq == config_.batch_size && batch.shape.n_tok == config_.seq_len, ErrorKind::usage,
                 "slot-error probe: a batch of {} x {} tokens, but the config trains {} sequences of {}", batch.shape.n_seq,
                 batch.shape.n_tok, config_.batch_size, config_.seq_len);
    std::vector<SlotError> out;
    TrainLinears probe = make_train_linears(config_.model, [&](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
        const std::array<Strategy, 3> active = {recipe_.strategy(layer, p, Slot::fwd), recipe_.strategy(layer, p, Slot::dgrad),
                                                recipe_.strategy(layer, p, Slot::wgrad)};
        return std::make_unique<ProbeTrainLinear>(linears_.at(layer, p), layer, p, active, out, probe_observer_);
    });
    const TokenBatch first = batch_rows(batch, 0, micro_batch_size(config_));
    TrainActivations acts;  // the step's own buffers and state stay as they are
    train_forward(layout_, params_.data(), probe, first, acts);
    std::vector<float> grads(size_t(layout_.total()));
    train_backward(layout_, params_.data(), probe, first, acts, grads.data());
    std::stable_sort(out.begin(), out.end(), [](const SlotError& a, const SlotError& b) {
        return std::tie(a.layer, a.projection, a.slot) < std::tie(b.layer, b.projection, b.slot);
    });
    return out;
}

std::string CpuTrainer::describe() const {
    return fmt::format("cpu (FP32 reference), recipe {}{}, block linears {}", recipe_description(recipe_.recipe()),
                       recipe_.calibrating() ? " (calibrating)" : "", linears_.at(0, Projection::q).describe());
}

}  // namespace lowbit
