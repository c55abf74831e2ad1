// linear.cpp — the dense, fake-quant and AdaHOP linear layers of the CPU model and their factories.
#include "model/linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/thread_pool.h"

namespace lowbit {

const char* projection_name(Projection p) {
    switch (p) {
        case Projection::q: return "attn_q";
        case Projection::k: return "attn_k";
        case Projection::v: return "attn_v";
        case Projection::o: return "attn_output";
        case Projection::gate: return "ffn_gate";
        case Projection::up: return "ffn_up";
        case Projection::down: return "ffn_down";
    }
    return "?";
}

std::string linear_name(int64_t layer, Projection p) { return fmt::format("blk.{}.{}", layer, projection_name(p)); }

const std::vector<float>& projection_weight(const BlockWeights& b, Projection p) {
    switch (p) {
        case Projection::q: return b.wq;
        case Projection::k: return b.wk;
        case Projection::v: return b.wv;
        case Projection::o: return b.wo;
        case Projection::gate: return b.w_gate;
        case Projection::up: return b.w_up;
        case Projection::down: return b.w_down;
    }
    fail(ErrorKind::usage, "projection_weight: unknown projection {}", int(p));
}

std::vector<float>& projection_weight(BlockWeights& b, Projection p) {
    return const_cast<std::vector<float>&>(projection_weight(static_cast<const BlockWeights&>(b), p));
}

int64_t projection_out_features(const LlamaConfig& c, Projection p) {
    switch (p) {
        case Projection::q: return c.q_dim();
        case Projection::k:
        case Projection::v: return c.kv_dim();
        case Projection::o:
        case Projection::down: return c.hidden_size;
        case Projection::gate:
        case Projection::up: return c.ffn_size;
    }
    return 0;
}

int64_t projection_in_features(const LlamaConfig& c, Projection p) {
    switch (p) {
        case Projection::o: return c.q_dim();
        case Projection::down: return c.ffn_size;
        default: return c.hidden_size;
    }
}

void Linear::check_shapes(ConstMatF x, MatF y) const {
    LOWBIT_CHECK(x.cols == in_features() && y.cols == out_features() && x.rows == y.rows, ErrorKind::usage,
                 "linear ({}): input {}x{} and output {}x{} do not fit a {}x{} weight", describe(), x.rows, x.cols, y.rows,
                 y.cols, out_features(), in_features());
}

// ---------------------------------------------------------------------------------------------------
// dense

void DenseLinear::forward(ConstMatF x, MatF y, float beta) const {
    check_shapes(x, y);
    gemm_f32(x, Trans::no, w_, Trans::yes, y, beta);
}

// ---------------------------------------------------------------------------------------------------
// fake-quant

std::string QuantSpec::describe() const {
    if (!format) return "off";
    std::string s = format->name;
    if (format->kind == FormatKind::int_grid) {
        s += options.group > 0 ? fmt::format(" g{}", options.group) : std::string(" per-row");
        s += options.sym ? " sym" : " asym";
    }
    return s;
}

namespace {

QuantSpec along_rows(QuantSpec s) {
    s.options.axis = 1;  // weights: blocks along in_features; activations: along each token's row
    return s;
}

// The rows of a view contiguous (quantize_dequantize and lp_prepare want them so): the view's own memory
// when it is dense, else a copy kept in `storage`.
const float* contiguous(ConstMatF m, std::vector<float>& storage) {
    if (m.dense()) return m.data;
    storage.resize(size_t(m.size()));
    for (int64_t r = 0; r < m.rows; ++r) std::copy(m.row(r), m.row(r) + m.cols, storage.begin() + r * m.cols);
    return storage.data();
}

}  // namespace

QuantSpec parse_activation_spec(const std::string& name) {
    QuantSpec s;
    if (name.empty() || name == "none") return s;
    const bool bits = name.find_first_not_of("0123456789") == std::string::npos;
    LOWBIT_CHECK(!bits || (name.size() == 1 && name[0] >= '2' && name[0] <= '8'), ErrorKind::usage,
                 "activation bits {}: 2 to 8 (the int2..int8 grids), or a format name such as int8 or mxfp4", name);
    s.format = &find_format(bits ? "int" + name : name);
    return s;
}

std::vector<float> quantize_activations(const QuantSpec& acts, ConstMatF x) {
    LOWBIT_CHECK(acts.format, ErrorKind::usage, "quantize_activations: no activation format given");
    const QuantSpec s = along_rows(acts);
    std::vector<float> copy;
    return quantize_dequantize(*s.format, contiguous(x, copy), x.rows, x.cols, s.options);
}

FakeQuantLinear::FakeQuantLinear(ConstMatF w, const QuantSpec& weights, const QuantSpec& activations)
    : out_(w.rows), in_(w.cols), loaded_(w), weight_spec_(along_rows(weights)), act_spec_(along_rows(activations)) {
    LOWBIT_CHECK(weights.format || activations.format, ErrorKind::usage,
                 "fake-quant linear: neither a weight nor an activation format given (that is the dense linear)");
    if (!weight_spec_.format) return;
    std::vector<float> copy;
    wq_ = quantize_dequantize(*weight_spec_.format, contiguous(w, copy), out_, in_, weight_spec_.options);
}

void FakeQuantLinear::forward(ConstMatF x, MatF y, float beta) const {
    check_shapes(x, y);
    const ConstMatF w = weight();
    if (!act_spec_.format) {
        gemm_f32(x, Trans::no, w, Trans::yes, y, beta);
        return;
    }
    const std::vector<float> xq = quantize_activations(act_spec_, x);
    gemm_f32(ConstMatF(xq.data(), x.rows, x.cols), Trans::no, w, Trans::yes, y, beta);
}

std::string FakeQuantLinear::describe() const {
    std::string s = weight_spec_.format ? "fake-quant " + weight_spec_.describe() : std::string("weights as loaded");
    if (act_spec_.format) s += ", activations " + act_spec_.describe();
    return s;
}

// ---------------------------------------------------------------------------------------------------
// adahop

std::vector<float> transposed(ConstMatF m) {
    std::vector<float> t(size_t(m.size()));
    parallel_for(m.rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < m.cols; ++c) t[size_t(c * m.rows + r)] = m.row(r)[c];
    });
    return t;
}

AdahopLinear::AdahopLinear(ConstMatF w, const LayerPlan& plan, const LpMatmulOptions& opts)
    : out_(w.rows), in_(w.cols), plan_(plan), opts_(opts) {
    const std::vector<float> wt = transposed(w);  // B = Wᵀ [in, out]: quantized along K = in_features
    w_t_ = lp_prepare(wt.data(), in_, out_, Side::right, plan_.fwd, opts_);
}

void AdahopLinear::forward(ConstMatF x, MatF y, float beta) const {
    check_shapes(x, y);
    std::vector<float> copy;
    const PreparedOperand px = lp_prepare(contiguous(x, copy), x.rows, in_, Side::left, plan_.fwd, opts_);
    if (beta == 0.0f && y.dense()) {
        lp_matmul_prepared(px, w_t_, opts_, y.data);
        return;
    }
    std::vector<float> c(size_t(x.rows * out_));
    lp_matmul_prepared(px, w_t_, opts_, c.data());
    for (int64_t r = 0; r < y.rows; ++r) {
        float* yr = y.row(r);
        const float* cr = c.data() + r * out_;
        for (int64_t j = 0; j < out_; ++j) yr[j] = beta == 0.0f ? cr[j] : cr[j] + beta * yr[j];
    }
}

std::string AdahopLinear::describe() const {
    return fmt::format("adahop {}{}", strategy_short_name(plan_.fwd), opts_.quantize ? "" : " (quantization off)");
}

// ---------------------------------------------------------------------------------------------------
// factories

namespace {

template <typename Make>
BlockLinears make_block_linears(const LlamaConfig& c, const BlockWeights& b, int64_t layer, Make&& make) {
    check_block_shapes(c, b, layer, "linear layers");
    BlockLinears out;
    for (Projection p : kProjections) {
        const std::vector<float>& w = projection_weight(b, p);
        out.by_projection[size_t(p)] =
            make(ConstMatF(w.data(), projection_out_features(c, p), projection_in_features(c, p)), p);
    }
    return out;
}

}  // namespace

LinearFactory dense_linears() {
    return [](const LlamaConfig& c, const BlockWeights& b, int64_t layer) {
        return make_block_linears(c, b, layer, [](ConstMatF w, Projection) { return std::make_unique<DenseLinear>(w); });
    };
}

LinearFactory fake_quant_linears(const QuantSpec& weights, const QuantSpec& activations) {
    return [weights, activations](const LlamaConfig& c, const BlockWeights& b, int64_t layer) {
        return make_block_linears(c, b, layer, [&](ConstMatF w, Projection) {
            return std::make_unique<FakeQuantLinear>(w, weights, activations);
        });
    };
}

LinearFactory with_kv_cache(LinearFactory base, const QuantSpec& kv) {
    if (!base) base = dense_linears();
    return [base = std::move(base), kv](const LlamaConfig& c, const BlockWeights& b, int64_t layer) {
        BlockLinears lin = base(c, b, layer);
        lin.kv_cache = kv;
        return lin;
    };
}

LinearFactory adahop_linears(const Plan& plan, const LpMatmulOptions& opts, const LayerPlan& fallback) {
    return [plan, opts, fallback](const LlamaConfig& c, const BlockWeights& b, int64_t layer) {
        return make_block_linears(c, b, layer, [&](ConstMatF w, Projection p) {
            const auto it = plan.layers.find(linear_name(layer, p));
            return std::make_unique<AdahopLinear>(w, it != plan.layers.end() ? it->second : fallback, opts);
        });
    };
}

}  // namespace lowbit
