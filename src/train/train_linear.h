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
// The weights change every step, so they are passed to every call (nothing is prepared once).
#pragma once

#include <array>
#include <memory>
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

// Every slot through lp_matmul with the plan's strategy for it (operands must be dense views; every
// reduction dimension a multiple of 32 for the Hadamard strategies).
class AdahopTrainLinear final : public TrainLinear {
public:
    AdahopTrainLinear(const LayerPlan& plan, const LpMatmulOptions& opts) : plan_(plan), opts_(opts) {}
    void forward(ConstMatF x, ConstMatF w, MatF y, float beta = 0.0f) override;
    void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta = 0.0f) override;
    void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta = 0.0f) override;
    std::string describe() const override;

private:
    LayerPlan plan_;
    LpMatmulOptions opts_;
};

// The linears of the model: one per projection of every block, and the LM head.
struct TrainLinears {
    std::vector<std::array<std::unique_ptr<TrainLinear>, kProjectionCount>> blocks;
    std::unique_ptr<TrainLinear> lm_head;
    TrainLinear& at(int64_t layer, Projection p) const { return *blocks[size_t(layer)][size_t(p)]; }
};

// Dense everywhere.
TrainLinears dense_train_linears(const LlamaConfig& c);
// AdaHOP's recipe (adahop.md §7): every projection of every block through lp_matmul with the plan of
// `plan.layers[linear_name(layer, p)]`, else `fallback`; the LM head stays dense (AdaHOP keeps it in BF16).
TrainLinears adahop_train_linears(const LlamaConfig& c, const Plan& plan, const LpMatmulOptions& opts,
                                  const LayerPlan& fallback = {});

}  // namespace lowbit
