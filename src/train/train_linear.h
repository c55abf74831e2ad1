// train_linear.h — the training seam of a linear layer: the three GEMMs of y = x·Wᵀ (adahop.md §3)
//   forward          Y  = X·Wᵀ     X [M, K], W [N, K] (nn.Linear layout), Y [M, N]
//   backward_data    dX = dY·W     dY [M, N] → dX [M, K]
//   backward_weight  dW = dYᵀ·X    → dW [N, K]
// each with `+ beta·out` (beta = 1 fuses a residual add, sums the gradient of three projections reading one
// input, or adds the LM head's gradient to a tied embedding's). The training forward and backward
// (train/backward_cpu.h) call nothing else for the projections and the LM head, so the GEMM strategy is
// chosen per layer and per slot by what is plugged in here:
//   dense    FP32 gemm_f32 (the reference; the forward is the very call the inference DenseLinear makes)
//   adahop   lp_matmul under the layer's LayerPlan (fwd / dgrad / wgrad strategies), CPU emulation of
//            MXFP4 training. The operands are quantized from the FP32 values at each call: the same numbers
//            AdaHOP's forward-time quantization of the saved X and W gives (§6), without its memory saving.
//            With RhtSrSeeds it is mxfp4-rht-sr's linear (rht_sr_slot_options below).
//   observed any linear with its operands handed to an observer first (AdaHOP's calibration: the detector)
// The weights change every step, so they are passed to every call (nothing is prepared once).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adahop/lp_matmul.h"
#include "adahop/strategy_plan.h"
#include "core/matrix_view.h"
#include "model/config.h"
#include "model/linear.h"

namespace lowbit {

class TrainLinear {
public:
    virtual ~TrainLinear() = default;
    virtual void forward(ConstMatF x, ConstMatF w, MatF y, float beta = 0.0f) = 0;
    virtual void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta = 0.0f) = 0;
    virtual void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta = 0.0f) = 0;
    virtual std::string describe() const = 0;
    // Called by the trainer before the forward of optimizer step `step` (from 0): linears whose numbers
    // depend on the step (stochastic rounding bits) take it here.
    virtual void begin_step(int64_t /*step*/) {}

protected:
    // Error(usage) unless the three matrices of a slot fit W [N, K] (names the layer's description).
    void check_forward(ConstMatF x, ConstMatF w, MatF y) const;
    void check_backward_data(ConstMatF dy, ConstMatF w, MatF dx) const;
    void check_backward_weight(ConstMatF dy, ConstMatF x, MatF dw) const;
};

class DenseTrainLinear final : public TrainLinear {
public:
    void forward(ConstMatF x, ConstMatF w, MatF y, float beta = 0.0f) override;
    void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta = 0.0f) override;
    void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta = 0.0f) override;
    std::string describe() const override { return "dense"; }
};

// mxfp4-rht-sr (Tseng et al.; recipe.h): the forward keeps the options as given (round to nearest, no signs);
// dgrad and wgrad rotate with random signs fixed for the run, layer and slot, and round both operands
// stochastically with bits that change every step. From the run's seed r, the linear's name n
// ("blk.3.attn_q"), the slot index s (1 dgrad, 2 wgrad) and the step t:
//   base               = mix64(r ^ fnv1a64(n))
//   random_signs_seed  = mix64(base + s)                  (core/counter_rng.h; lp_matmul.h: the signs along K)
//   seed_a             = mix64(base ^ mix64(4·t + s)),  seed_b = mix64(seed_a)   (element bits: mx_block.h)
// so a resumed run draws the same bits as one that never stopped. The CUDA engine uses the same function.
struct RhtSrSeeds {
    uint64_t run_seed = 0;
    int64_t layer = 0;
    Projection projection = Projection::q;
};
LpMatmulOptions rht_sr_slot_options(const LpMatmulOptions& base, const RhtSrSeeds& seeds, Slot slot, int64_t step);

// Every slot through lp_matmul with the plan's strategy for it (operands must be dense views; every
// reduction dimension a multiple of 32 for the Hadamard strategies).
class AdahopTrainLinear final : public TrainLinear {
public:
    AdahopTrainLinear(const LayerPlan& plan, const LpMatmulOptions& opts, std::optional<RhtSrSeeds> rht_sr = {})
        : plan_(plan), opts_(opts), rht_sr_(rht_sr) {}
    void forward(ConstMatF x, ConstMatF w, MatF y, float beta = 0.0f) override;
    void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta = 0.0f) override;
    void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta = 0.0f) override;
    std::string describe() const override;
    void begin_step(int64_t step) override { step_ = step; }

private:
    LpMatmulOptions slot_options(Slot s) const;

    LayerPlan plan_;
    LpMatmulOptions opts_;
    std::optional<RhtSrSeeds> rht_sr_;
    int64_t step_ = 0;
};

// Hands X and W (forward) and dY (backward_data) to `observe`, then runs the wrapped linear: AdaHOP's
// calibration plugs the outlier detector in here (the operands of wgrad are the same dY and X).
using OperandObserver = std::function<void(Operand which, ConstMatF m)>;
class ObservedTrainLinear final : public TrainLinear {
public:
    ObservedTrainLinear(std::unique_ptr<TrainLinear> inner, OperandObserver observe)
        : inner_(std::move(inner)), observe_(std::move(observe)) {}
    void forward(ConstMatF x, ConstMatF w, MatF y, float beta = 0.0f) override;
    void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta = 0.0f) override;
    void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta = 0.0f) override;
    std::string describe() const override { return "observed " + inner_->describe(); }
    void begin_step(int64_t step) override { inner_->begin_step(step); }

private:
    std::unique_ptr<TrainLinear> inner_;
    OperandObserver observe_;
};

// The linears of the model: one per projection of every block, and the LM head.
struct TrainLinears {
    std::vector<std::array<std::unique_ptr<TrainLinear>, kProjectionCount>> blocks;
    std::unique_ptr<TrainLinear> lm_head;
    TrainLinear& at(int64_t layer, Projection p) const { return *blocks[size_t(layer)][size_t(p)]; }
    void begin_step(int64_t step) const;  // TrainLinear::begin_step of every linear
};

// Block projection (layer, p) from make(layer, p); the LM head dense.
using BlockLinearFactory = std::function<std::unique_ptr<TrainLinear>(int64_t layer, Projection p)>;
TrainLinears make_train_linears(const LlamaConfig& c, const BlockLinearFactory& make);
// Dense everywhere.
TrainLinears dense_train_linears(const LlamaConfig& c);
// AdaHOP's recipe (adahop.md §7): every projection of every block through lp_matmul with the plan of
// `plan.layers[linear_name(layer, p)]`, else `fallback`; the LM head stays dense (AdaHOP keeps it in BF16).
TrainLinears adahop_train_linears(const LlamaConfig& c, const Plan& plan, const LpMatmulOptions& opts,
                                  const LayerPlan& fallback = {});

}  // namespace lowbit
