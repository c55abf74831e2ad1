// linear.h — the Linear seam of the CPU model: every matrix product of a transformer block (the seven
// projections q, k, v, o, gate, up, down) goes through one interface, chosen per layer and projection, so
// the block forward never calls a GEMM itself and the same block serves
//   dense       y = x·Wᵀ in FP32 (the reference; DenseLinear views the block's weights)
//   fake-quant  y = Qa(x)·Q(W)ᵀ: weights quantized→dequantized once into any block format of the
//               registry (post-training-quantization evaluation: exactly the values `formats roundtrip`
//               gives) or used as loaded (Q = identity: a GPTQ/TurboBoA file is already quantized),
//               optionally activations quantized per token at the input (W4A4, W4A8)
//   adahop      y = lp_matmul(x, Wᵀ) under the layer's forward strategy (adahop/lp_matmul.h); the weight
//               operand is prepared (rotated, split, quantized) once. The training engine extends this
//               one with the dgrad and wgrad slots of the same LayerPlan.
// Shapes follow nn.Linear: W is row-major [out_features, in_features].
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "adahop/lp_matmul.h"
#include "adahop/strategy_plan.h"
#include "core/matrix_view.h"
#include "formats/format_registry.h"
#include "model/config.h"
#include "model/weights.h"

namespace lowbit {

// The seven projections of a block, in the order the forward runs them.
enum class Projection : uint8_t { q, k, v, o, gate, up, down };
constexpr int kProjectionCount = 7;
constexpr std::array<Projection, kProjectionCount> kProjections = {Projection::q,    Projection::k,  Projection::v,   Projection::o,
                                                                   Projection::gate, Projection::up, Projection::down};

// GGUF tensor name of the projection ("attn_q", …, "ffn_down"); linear_name adds the block: "blk.3.attn_q".
const char* projection_name(Projection p);
std::string linear_name(int64_t layer, Projection p);
// The projection's weight matrix in BlockWeights and its shape [out, in] under the config.
const std::vector<float>& projection_weight(const BlockWeights& b, Projection p);
std::vector<float>& projection_weight(BlockWeights& b, Projection p);
int64_t projection_out_features(const LlamaConfig& c, Projection p);
int64_t projection_in_features(const LlamaConfig& c, Projection p);

// The dense transpose of a matrix view ([cols, rows] row-major): Wᵀ, the right operand of lp_matmul.
std::vector<float> transposed(ConstMatF m);

class Linear {
public:
    virtual ~Linear() = default;
    // y [rows, out] = x [rows, in] · Wᵀ + beta·y (beta = 1 fuses a residual add). Error(usage) on shapes.
    virtual void forward(ConstMatF x, MatF y, float beta = 0.0f) const = 0;
    virtual int64_t in_features() const = 0;
    virtual int64_t out_features() const = 0;
    // One line for logs and reports, e.g. "dense", "fake-quant int4 g128 sym, activations int8".
    virtual std::string describe() const = 0;

protected:
    void check_shapes(ConstMatF x, MatF y) const;
};

// y = x·Wᵀ in FP32 over a view of W (the weights must outlive the layer).
class DenseLinear final : public Linear {
public:
    explicit DenseLinear(ConstMatF w) : w_(w) {}
    void forward(ConstMatF x, MatF y, float beta = 0.0f) const override;
    int64_t in_features() const override { return w_.cols; }
    int64_t out_features() const override { return w_.rows; }
    std::string describe() const override { return "dense"; }

private:
    ConstMatF w_;
};

// A block format with its options, for weights (blocks along in_features: axis 1) or activations (per
// token, blocks along the row). format == nullptr: not quantized.
struct QuantSpec {
    const FormatInfo* format = nullptr;
    FormatOptions options;
    std::string describe() const;  // "int4 g128 sym", "mxfp4", "off"
};

// The activation quantization named on the command line (`lowbit eval --acts`, `lowbit quantize --act-bits`):
// a format of the registry by name (int8, int4, mxfp4, …) or a bit width (4 → int4, 8 → int8); "none" or "":
// off. The options are the format's defaults (int grids: one asymmetric min–max grid per token, round to
// nearest even), so the format's name alone records the spec. Error(usage) for an unknown name.
QuantSpec parse_activation_spec(const std::string& name);

// Qa(x): the activations x [rows, in] quantized→dequantized per token (blocks along each row) — what
// FakeQuantLinear multiplies. Error(usage) when `acts` has no format.
std::vector<float> quantize_activations(const QuantSpec& acts, ConstMatF x);

// y = Qa(x)·Q(W)ᵀ with Q(W) dequantized once (owned). Without a weight format Q is the identity and the
// layer views W (which must then outlive it): the activations alone are quantized.
class FakeQuantLinear final : public Linear {
public:
    // Error(usage) when neither format is given (that is DenseLinear).
    FakeQuantLinear(ConstMatF w, const QuantSpec& weights, const QuantSpec& activations = {});
    void forward(ConstMatF x, MatF y, float beta = 0.0f) const override;
    int64_t in_features() const override { return in_; }
    int64_t out_features() const override { return out_; }
    std::string describe() const override;
    const std::vector<float>& dequantized_weights() const { return wq_; }  // [out, in]; empty without a weight format
    // The right operand of the product: Q(W), or W as loaded.
    ConstMatF weight() const { return weight_spec_.format ? ConstMatF(wq_.data(), out_, in_) : loaded_; }

private:
    int64_t out_, in_;
    ConstMatF loaded_;       // W as given
    std::vector<float> wq_;  // Q(W) when the weights are quantized
    QuantSpec weight_spec_, act_spec_;
};

// y = lp_matmul(x, Wᵀ) with the forward strategy of `plan`; Wᵀ is prepared once as the right operand.
class AdahopLinear final : public Linear {
public:
    AdahopLinear(ConstMatF w, const LayerPlan& plan, const LpMatmulOptions& opts);
    void forward(ConstMatF x, MatF y, float beta = 0.0f) const override;
    int64_t in_features() const override { return in_; }
    int64_t out_features() const override { return out_; }
    std::string describe() const override;
    const LayerPlan& plan() const { return plan_; }

private:
    int64_t out_, in_;
    LayerPlan plan_;
    LpMatmulOptions opts_;
    PreparedOperand w_t_;  // Wᵀ [in, out], prepared for plan_.fwd
};

// The linear layers of one block, indexed by projection.
struct BlockLinears {
    std::array<std::unique_ptr<Linear>, kProjectionCount> by_projection;
    const Linear& operator[](Projection p) const { return *by_projection[size_t(p)]; }
    // KV-cache quantization for evaluation (W4A4KV4): the keys after RoPE and the values that attention reads,
    // quantized→dequantized per token and KV head (one grid per head_dim values, quantize_activations's rule),
    // as a KV cache in that format would hold them. No format: attention reads them as computed.
    QuantSpec kv_cache;
};

// Builds the linears of block `layer` from its weights (which must outlive them): chosen per layer.
using LinearFactory = std::function<BlockLinears(const LlamaConfig& c, const BlockWeights& b, int64_t layer)>;

LinearFactory dense_linears();
// Every projection fake-quantized with the same specs (per-layer choices: write a factory of your own); an
// empty weight spec keeps the weights as loaded (activation quantization of an already quantized model).
LinearFactory fake_quant_linears(const QuantSpec& weights, const QuantSpec& activations = {});
// Per layer and projection the LayerPlan of `plan.layers[linear_name(layer, p)]`, else `fallback`.
LinearFactory adahop_linears(const Plan& plan, const LpMatmulOptions& opts, const LayerPlan& fallback = {});
// `base`'s linears (empty: dense) with the KV cache quantized to `kv` (BlockLinears::kv_cache).
LinearFactory with_kv_cache(LinearFactory base, const QuantSpec& kv);

}  // namespace lowbit
