// train_linear.cpp — the dense, AdaHOP and observed implementations of the training linear seam.
#include "train/train_linear.h"

#include <fmt/format.h>

#include "core/counter_rng.h"
#include "core/error.h"
#include "core/gemm_cpu.h"
#include "io/token_shards.h"

namespace lowbit {

void TrainLinear::check_forward(ConstMatF x, ConstMatF w, MatF y) const {
    LOWBIT_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows, ErrorKind::usage,
                 "train linear ({}), forward: X {}x{} and Y {}x{} do not fit W {}x{}", describe(), x.rows, x.cols, y.rows,
                 y.cols, w.rows, w.cols);
}

void TrainLinear::check_backward_data(ConstMatF dy, ConstMatF w, MatF dx) const {
    LOWBIT_CHECK(dy.cols == w.rows && dx.rows == dy.rows && dx.cols == w.cols, ErrorKind::usage,
                 "train linear ({}), backward data: dY {}x{} and dX {}x{} do not fit W {}x{}", describe(), dy.rows, dy.cols,
                 dx.rows, dx.cols, w.rows, w.cols);
}

void TrainLinear::check_backward_weight(ConstMatF dy, ConstMatF x, MatF dw) const {
    LOWBIT_CHECK(dy.rows == x.rows && dw.rows == dy.cols && dw.cols == x.cols, ErrorKind::usage,
                 "train linear ({}), backward weight: dY {}x{} and X {}x{} do not fit dW {}x{}", describe(), dy.rows,
                 dy.cols, x.rows, x.cols, dw.rows, dw.cols);
}

// ---------------------------------------------------------------------------------------------------
// dense

void DenseTrainLinear::forward(ConstMatF x, ConstMatF w, MatF y, float beta) {
    check_forward(x, w, y);
    gemm_f32(x, Trans::no, w, Trans::yes, y, beta);
}

void DenseTrainLinear::backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta) {
    check_backward_data(dy, w, dx);
    gemm_f32(dy, Trans::no, w, Trans::no, dx, beta);
}

void DenseTrainLinear::backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta) {
    check_backward_weight(dy, x, dw);
    gemm_f32(dy, Trans::yes, x, Trans::no, dw, beta);
}

// ---------------------------------------------------------------------------------------------------
// adahop

namespace {

// out = c + beta·out, c dense [out.rows, out.cols].
void store(const std::vector<float>& c, MatF out, float beta) {
    for (int64_t r = 0; r < out.rows; ++r) {
        float* o = out.row(r);
        const float* cr = c.data() + r * out.cols;
        for (int64_t j = 0; j < out.cols; ++j) o[j] = beta == 0.0f ? cr[j] : cr[j] + beta * o[j];
    }
}

void check_dense(ConstMatF m, const char* what, const std::string& layer) {
    LOWBIT_CHECK(m.dense(), ErrorKind::usage, "train linear ({}): {} must be a dense matrix (row stride {} for {} columns)",
                 layer, what, m.ld, m.cols);
}

}  // namespace

LpMatmulOptions rht_sr_slot_options(const LpMatmulOptions& base, const RhtSrSeeds& seeds, Slot slot, int64_t step) {
    if (slot == Slot::fwd) return base;
    const std::string name = linear_name(seeds.layer, seeds.projection);
    const uint64_t linear_seed =
        mix64(seeds.run_seed ^ fnv1a64({reinterpret_cast<const uint8_t*>(name.data()), name.size()}));
    const uint64_t s = slot == Slot::dgrad ? 1 : 2;
    LpMatmulOptions o = base;
    o.random_signs_seed = mix64(linear_seed + s);
    o.rounding_a = o.rounding_b = Rounding::stochastic;
    o.seed_a = mix64(linear_seed ^ mix64(4 * uint64_t(step) + s));
    o.seed_b = mix64(o.seed_a);
    return o;
}

LpMatmulOptions AdahopTrainLinear::slot_options(Slot s) const {
    return rht_sr_ ? rht_sr_slot_options(opts_, *rht_sr_, s, step_) : opts_;
}

void AdahopTrainLinear::forward(ConstMatF x, ConstMatF w, MatF y, float beta) {
    check_forward(x, w, y);
    check_dense(x, "X", describe());
    const std::vector<float> w_t = transposed(w);  // B = Wᵀ [K, N]: blocks along K = in_features
    std::vector<float> c(size_t(y.size()));
    lp_matmul(x.data, w_t.data(), x.rows, x.cols, w.rows, plan_.fwd, slot_options(Slot::fwd), c.data());
    store(c, y, beta);
}

void AdahopTrainLinear::backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta) {
    check_backward_data(dy, w, dx);
    check_dense(dy, "dY", describe());
    check_dense(w, "W", describe());
    std::vector<float> c(size_t(dx.size()));
    lp_matmul(dy.data, w.data, dy.rows, dy.cols, w.cols, plan_.dgrad, slot_options(Slot::dgrad), c.data());  // over N
    store(c, dx, beta);
}

void AdahopTrainLinear::backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta) {
    check_backward_weight(dy, x, dw);
    check_dense(x, "X", describe());
    const std::vector<float> dy_t = transposed(dy);  // A = dYᵀ [N, M]: blocks along M (the tokens)
    std::vector<float> c(size_t(dw.size()));
    lp_matmul(dy_t.data(), x.data, dy.cols, dy.rows, x.cols, plan_.wgrad, slot_options(Slot::wgrad), c.data());
    store(c, dw, beta);
}

std::string AdahopTrainLinear::describe() const {
    return fmt::format("adahop fwd {} dgrad {} wgrad {}{}{}", strategy_short_name(plan_.fwd), strategy_short_name(plan_.dgrad),
                       strategy_short_name(plan_.wgrad),
                       rht_sr_ ? ", random signs and stochastic rounding in dgrad/wgrad" : "",
                       opts_.quantize ? "" : " (quantization off)");
}

// ---------------------------------------------------------------------------------------------------
// observed

void ObservedTrainLinear::forward(ConstMatF x, ConstMatF w, MatF y, float beta) {
    observe_(Operand::x, x);
    observe_(Operand::w, w);
    inner_->forward(x, w, y, beta);
}

void ObservedTrainLinear::backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta) {
    observe_(Operand::g, dy);
    inner_->backward_data(dy, w, dx, beta);
}

void ObservedTrainLinear::backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta) {
    inner_->backward_weight(dy, x, dw, beta);
}

// ---------------------------------------------------------------------------------------------------
// factories

void TrainLinears::begin_step(int64_t step) const {
    for (const auto& block : blocks)
        for (const auto& linear : block) linear->begin_step(step);
    lm_head->begin_step(step);
}

TrainLinears make_train_linears(const LlamaConfig& c, const BlockLinearFactory& make) {
    TrainLinears out;
    out.blocks.resize(size_t(c.n_layers));
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections) out.blocks[size_t(l)][size_t(p)] = make(l, p);
    out.lm_head = std::make_unique<DenseTrainLinear>();
    return out;
}

TrainLinears dense_train_linears(const LlamaConfig& c) {
    return make_train_linears(c, [](int64_t, Projection) -> std::unique_ptr<TrainLinear> {
        return std::make_unique<DenseTrainLinear>();
    });
}

TrainLinears adahop_train_linears(const LlamaConfig& c, const Plan& plan, const LpMatmulOptions& opts,
                                  const LayerPlan& fallback) {
    return make_train_linears(c, [&](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
        const auto it = plan.layers.find(linear_name(layer, p));
        return std::make_unique<AdahopTrainLinear>(it != plan.layers.end() ? it->second : fallback, opts);
    });
}

}  // namespace lowbit
