// backward_cpu.cpp — the training forward with saved activations, the backward ops and the model backward.
#include "train/backward_cpu.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/thread_pool.h"

namespace lowbit {

// ---------------------------------------------------------------------------------------------------
// reference ops

namespace {

void check_targets(const int32_t* targets, int64_t rows, int64_t vocab) {
    for (int64_t r = 0; r < rows; ++r)
        LOWBIT_CHECK(targets[r] >= 0 && targets[r] < vocab, ErrorKind::input,
                     "target token id {} at row {} is outside the vocabulary (0..{})", targets[r], r, vocab - 1);
}

// max and log Σ exp(l − max) of one row, in double.
struct RowSoftmax {
    double max, log_sum_exp;
};

RowSoftmax row_softmax(const float* l, int64_t vocab) {
    const double m = double(*std::max_element(l, l + vocab));
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(l[i]) - m);
    return {m, std::log(sum)};
}

}  // namespace

double cross_entropy_mean(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab) {
    check_targets(targets, rows, vocab);
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* l = logits + r * vocab;
        const RowSoftmax s = row_softmax(l, vocab);
        sum += s.max + s.log_sum_exp - double(l[targets[r]]);
    }
    return sum / double(rows);
}

void cross_entropy_backward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, float* dlogits) {
    check_targets(targets, rows, vocab);
    const double inv_rows = 1.0 / double(rows);
    parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* l = logits + r * vocab;
            float* dl = dlogits + r * vocab;
            const RowSoftmax s = row_softmax(l, vocab);
            const double log_norm = s.max + s.log_sum_exp;
            for (int64_t i = 0; i < vocab; ++i) {
                const double p = std::exp(double(l[i]) - log_norm);
                dl[i] = float((p - (i == targets[r] ? 1.0 : 0.0)) * inv_rows);
            }
        }
    });
}

namespace {

// r = (mean(x²) + ε)^(−½) of one row, as rms_norm_rows computes it.
double rms_inverse(const float* xr, int64_t d, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * double(xr[i]);
    return 1.0 / std::sqrt(ss / double(d) + double(eps));
}

}  // namespace

void rms_norm_backward_rows(const float* x, const float* w, const float* dy, int64_t rows, int64_t d, float eps,
                            float* dx, float* dw) {
    std::vector<double> inv(static_cast<size_t>(rows));
    parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float *xr = x + r * d, *dyr = dy + r * d;
            const double ri = rms_inverse(xr, d, eps);
            inv[size_t(r)] = ri;
            double dot = 0.0;  // Σ dy·w·x
            for (int64_t i = 0; i < d; ++i) dot += double(dyr[i]) * double(w[i]) * double(xr[i]);
            const double c = ri * ri * ri * dot / double(d);
            float* dxr = dx + r * d;
            for (int64_t i = 0; i < d; ++i) dxr[i] += float(ri * double(dyr[i]) * double(w[i]) - c * double(xr[i]));
        }
    });
    parallel_for(d, 16, [&](int64_t i0, int64_t i1) {  // dw column by column: each sums its rows in order
        for (int64_t i = i0; i < i1; ++i) {
            double s = 0.0;
            for (int64_t r = 0; r < rows; ++r) s += double(dy[r * d + i]) * double(x[r * d + i]) * inv[size_t(r)];
            dw[i] += float(s);
        }
    });
}

void apply_rope_backward(float* dx, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                         const float* cos_t, const float* sin_t) {
    const int64_t n = shape.n_tok * (head_dim / 2);
    std::vector<float> minus_sin(sin_t, sin_t + n);
    for (float& s : minus_sin) s = -s;
    apply_rope(dx, shape, n_heads, head_dim, pairing, cos_t, minus_sin.data());
}

void attention_causal_backward(const float* q, const float* k, const float* v, const float* d_out, BatchShape shape,
                               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float* dq, float* dk, float* dv) {
    const int64_t T = shape.n_tok, hd = head_dim;
    const int64_t q_width = n_heads * hd, kv_width = n_kv_heads * hd, group = n_heads / n_kv_heads;
    const float scale = float(1.0 / std::sqrt(double(hd)));
    std::vector<float> p(size_t(T * T)), dp(size_t(T * T));
    for (int64_t seq = 0; seq < shape.n_seq; ++seq)
        for (int64_t g = 0; g < n_kv_heads; ++g) {
            const ConstMatF k_g(k + seq * T * kv_width + g * hd, T, hd, kv_width);
            const ConstMatF v_g(v + seq * T * kv_width + g * hd, T, hd, kv_width);
            const MatF dk_g(dk + seq * T * kv_width + g * hd, T, hd, kv_width);
            const MatF dv_g(dv + seq * T * kv_width + g * hd, T, hd, kv_width);
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                const float beta = h == g * group ? 0.0f : 1.0f;  // the group's first head overwrites dk, dv
                const ConstMatF q_h(q + seq * T * q_width + h * hd, T, hd, q_width);
                const ConstMatF do_h(d_out + seq * T * q_width + h * hd, T, hd, q_width);
                attention_probabilities(q, k, shape, n_heads, n_kv_heads, hd, seq, h, p.data());
                const ConstMatF pm(p.data(), T, T);
                gemm_f32(pm, Trans::yes, do_h, Trans::no, dv_g, beta);                     // dv += Pᵀ·dO
                gemm_f32(do_h, Trans::no, v_g, Trans::yes, MatF(dp.data(), T, T));         // dP = dO·vᵀ
                for (int64_t t = 0; t < T; ++t) {                                           // dS, scaled
                    const float* pt = p.data() + t * T;
                    float* dpt = dp.data() + t * T;
                    double row = 0.0;
                    for (int64_t j = 0; j <= t; ++j) row += double(dpt[j]) * double(pt[j]);
                    for (int64_t j = 0; j <= t; ++j) dpt[j] = pt[j] * (dpt[j] - float(row)) * scale;
                    std::fill(dpt + t + 1, dpt + T, 0.0f);
                }
                const ConstMatF ds(dp.data(), T, T);
                gemm_f32(ds, Trans::no, k_g, Trans::no, MatF(dq + seq * T * q_width + h * hd, T, hd, q_width));  // dq
                gemm_f32(ds, Trans::yes, q_h, Trans::no, dk_g, beta);                       // dk += dSᵀ·q
            }
        }
}

void swiglu_backward(const float* gate, const float* up, const float* d_out, int64_t n, float* d_gate, float* d_up) {
    parallel_for(n, 1 << 14, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const float g = gate[i], sigma = 1.0f / (1.0f + std::exp(-g));
            d_up[i] = d_out[i] * (g * sigma);
            d_gate[i] = d_out[i] * up[i] * (sigma * (1.0f + g * (1.0f - sigma)));
        }
    });
}

void embedding_backward(const int32_t* tokens, const float* d_hidden, int64_t rows, int64_t d, float* d_token_embd) {
    for (int64_t r = 0; r < rows; ++r) {
        float* e = d_token_embd + int64_t(tokens[r]) * d;
        const float* g = d_hidden + r * d;
        for (int64_t i = 0; i < d; ++i) e[i] += g[i];
    }
}

// ---------------------------------------------------------------------------------------------------
// the model

namespace {

MatF mat(std::vector<float>& v, int64_t rows, int64_t cols) { return MatF(v.data(), rows, cols); }
ConstMatF cmat(const std::vector<float>& v, int64_t rows, int64_t cols) { return ConstMatF(v.data(), rows, cols); }

void size_to(std::vector<float>& v, int64_t n) { v.resize(size_t(n)); }

void check_batch(const ParamLayout& layout, const TrainLinears& linears, const TokenBatch& batch) {
    const LlamaConfig& c = layout.config();
    LOWBIT_CHECK(batch.inputs && batch.targets && batch.shape.n_seq > 0 && batch.shape.n_tok > 0, ErrorKind::usage,
                 "training batch: empty ({} x {} tokens)", batch.shape.n_seq, batch.shape.n_tok);
    LOWBIT_CHECK(int64_t(linears.blocks.size()) == c.n_layers && linears.lm_head, ErrorKind::usage,
                 "training: {} blocks of linears for a model of {} layers", linears.blocks.size(), c.n_layers);
}

}  // namespace

double train_forward(const ParamLayout& layout, const float* params, TrainLinears& linears, const TokenBatch& batch,
                     TrainActivations& a) {
    check_batch(layout, linears, batch);
    const LlamaConfig& c = layout.config();
    const ModelTensors<const float> w = layout.views(params);
    const BatchShape shape = batch.shape;
    const int64_t rows = shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    a.shape = shape;
    rope_tables(c, shape.n_tok, a.rope_cos, a.rope_sin);
    std::vector<float> x = embed_tokens(c, w.token_embd, batch.inputs, shape);
    a.blocks.resize(size_t(c.n_layers));
    for (int64_t l = 0; l < c.n_layers; ++l) {
        BlockActivations& b = a.blocks[size_t(l)];
        const BlockTensors<const float>& bw = w.blocks[size_t(l)];
        auto weight = [&](Projection p) {
            return ConstMatF(bw[p], projection_out_features(c, p), projection_in_features(c, p));
        };
        auto linear = [&](Projection p) -> TrainLinear& { return linears.at(l, p); };
        b.x = x;
        size_to(b.attn_in, rows * d);
        size_to(b.q, rows * qd);
        size_to(b.k, rows * kvd);
        size_to(b.v, rows * kvd);
        size_to(b.attn_ctx, rows * qd);
        size_to(b.ffn_in, rows * d);
        size_to(b.gate, rows * f);
        size_to(b.up, rows * f);
        size_to(b.ffn_act, rows * f);

        rms_norm_rows(x.data(), bw.attn_norm, rows, d, c.rms_eps, b.attn_in.data());
        linear(Projection::q).forward(cmat(b.attn_in, rows, d), weight(Projection::q), mat(b.q, rows, qd));
        linear(Projection::k).forward(cmat(b.attn_in, rows, d), weight(Projection::k), mat(b.k, rows, kvd));
        linear(Projection::v).forward(cmat(b.attn_in, rows, d), weight(Projection::v), mat(b.v, rows, kvd));
        apply_rope(b.q.data(), shape, c.n_heads, c.head_dim, c.rope_pairing, a.rope_cos.data(), a.rope_sin.data());
        apply_rope(b.k.data(), shape, c.n_kv_heads, c.head_dim, c.rope_pairing, a.rope_cos.data(), a.rope_sin.data());
        attention_causal(b.q.data(), b.k.data(), b.v.data(), shape, c.n_heads, c.n_kv_heads, c.head_dim, b.attn_ctx.data());
        linear(Projection::o).forward(cmat(b.attn_ctx, rows, qd), weight(Projection::o), mat(x, rows, d), 1.0f);
        b.h = x;

        rms_norm_rows(x.data(), bw.ffn_norm, rows, d, c.rms_eps, b.ffn_in.data());
        linear(Projection::gate).forward(cmat(b.ffn_in, rows, d), weight(Projection::gate), mat(b.gate, rows, f));
        linear(Projection::up).forward(cmat(b.ffn_in, rows, d), weight(Projection::up), mat(b.up, rows, f));
        swiglu(b.gate.data(), b.up.data(), rows * f, b.ffn_act.data());
        linear(Projection::down).forward(cmat(b.ffn_act, rows, f), weight(Projection::down), mat(x, rows, d), 1.0f);
    }
    a.final_x = std::move(x);
    size_to(a.final_xn, rows * d);
    size_to(a.logits, rows * c.vocab_size);
    rms_norm_rows(a.final_x.data(), w.output_norm, rows, d, c.rms_eps, a.final_xn.data());
    linears.lm_head->forward(cmat(a.final_xn, rows, d), ConstMatF(w.output, c.vocab_size, d), mat(a.logits, rows, c.vocab_size));
    a.loss = cross_entropy_mean(a.logits.data(), batch.targets, rows, c.vocab_size);
    return a.loss;
}

void train_backward(const ParamLayout& layout, const float* params, TrainLinears& linears, const TokenBatch& batch,
                    const TrainActivations& a, float* grads) {
    check_batch(layout, linears, batch);
    const LlamaConfig& c = layout.config();
    const BatchShape shape = batch.shape;
    LOWBIT_CHECK(a.shape.n_seq == shape.n_seq && a.shape.n_tok == shape.n_tok &&
                     int64_t(a.blocks.size()) == c.n_layers && !a.logits.empty(),
                 ErrorKind::usage, "train_backward: the activations were not made by train_forward on this batch");
    const ModelTensors<const float> w = layout.views(params);
    const ModelTensors<float> gw = layout.views(grads);
    const int64_t rows = shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    const int64_t vocab = c.vocab_size;
    std::fill(grads, grads + layout.total(), 0.0f);

    // Loss and LM head. With tied embeddings the head's dW lands in token_embd's gradient first; the
    // embedding's scatter adds to it at the end.
    std::vector<float> dlogits(size_t(rows * vocab));
    cross_entropy_backward(a.logits.data(), batch.targets, rows, vocab, dlogits.data());
    std::vector<float> d_xn(size_t(rows * d));
    linears.lm_head->backward_data(cmat(dlogits, rows, vocab), ConstMatF(w.output, vocab, d), mat(d_xn, rows, d));
    linears.lm_head->backward_weight(cmat(dlogits, rows, vocab), cmat(a.final_xn, rows, d), MatF(gw.output, vocab, d));
    dlogits = {};

    // dx: the gradient of the residual stream, carried from the top down.
    std::vector<float> dx(size_t(rows * d), 0.0f);
    rms_norm_backward_rows(a.final_x.data(), w.output_norm, d_xn.data(), rows, d, c.rms_eps, dx.data(), gw.output_norm);

    std::vector<float> d_ffn_act(size_t(rows * f)), d_gate(size_t(rows * f)), d_up(size_t(rows * f)), d_ffn_in(size_t(rows * d));
    std::vector<float> d_ctx(size_t(rows * qd)), dq(size_t(rows * qd)), dk(size_t(rows * kvd)), dv(size_t(rows * kvd));
    std::vector<float> d_attn_in(size_t(rows * d));
    for (int64_t l = c.n_layers - 1; l >= 0; --l) {
        const BlockActivations& b = a.blocks[size_t(l)];
        const BlockTensors<const float>& bw = w.blocks[size_t(l)];
        const BlockTensors<float>& bg = gw.blocks[size_t(l)];
        auto weight = [&](Projection p) {
            return ConstMatF(bw[p], projection_out_features(c, p), projection_in_features(c, p));
        };
        auto weight_grad = [&](Projection p) {
            return MatF(bg[p], projection_out_features(c, p), projection_in_features(c, p));
        };
        auto linear = [&](Projection p) -> TrainLinear& { return linears.at(l, p); };

        // MLP: x' = h + s·Wdownᵀ. dx holds dL/dx' and becomes dL/dh.
        linear(Projection::down).backward_data(cmat(dx, rows, d), weight(Projection::down), mat(d_ffn_act, rows, f));
        linear(Projection::down).backward_weight(cmat(dx, rows, d), cmat(b.ffn_act, rows, f), weight_grad(Projection::down));
        swiglu_backward(b.gate.data(), b.up.data(), d_ffn_act.data(), rows * f, d_gate.data(), d_up.data());
        linear(Projection::gate).backward_data(cmat(d_gate, rows, f), weight(Projection::gate), mat(d_ffn_in, rows, d));
        linear(Projection::up).backward_data(cmat(d_up, rows, f), weight(Projection::up), mat(d_ffn_in, rows, d), 1.0f);
        linear(Projection::gate).backward_weight(cmat(d_gate, rows, f), cmat(b.ffn_in, rows, d), weight_grad(Projection::gate));
        linear(Projection::up).backward_weight(cmat(d_up, rows, f), cmat(b.ffn_in, rows, d), weight_grad(Projection::up));
        rms_norm_backward_rows(b.h.data(), bw.ffn_norm, d_ffn_in.data(), rows, d, c.rms_eps, dx.data(), bg.ffn_norm);

        // Attention: h = x + c·Woᵀ. dx holds dL/dh and becomes dL/dx.
        linear(Projection::o).backward_data(cmat(dx, rows, d), weight(Projection::o), mat(d_ctx, rows, qd));
        linear(Projection::o).backward_weight(cmat(dx, rows, d), cmat(b.attn_ctx, rows, qd), weight_grad(Projection::o));
        attention_causal_backward(b.q.data(), b.k.data(), b.v.data(), d_ctx.data(), shape, c.n_heads, c.n_kv_heads,
                                  c.head_dim, dq.data(), dk.data(), dv.data());
        apply_rope_backward(dq.data(), shape, c.n_heads, c.head_dim, c.rope_pairing, a.rope_cos.data(), a.rope_sin.data());
        apply_rope_backward(dk.data(), shape, c.n_kv_heads, c.head_dim, c.rope_pairing, a.rope_cos.data(), a.rope_sin.data());
        linear(Projection::q).backward_data(cmat(dq, rows, qd), weight(Projection::q), mat(d_attn_in, rows, d));
        linear(Projection::k).backward_data(cmat(dk, rows, kvd), weight(Projection::k), mat(d_attn_in, rows, d), 1.0f);
        linear(Projection::v).backward_data(cmat(dv, rows, kvd), weight(Projection::v), mat(d_attn_in, rows, d), 1.0f);
        linear(Projection::q).backward_weight(cmat(dq, rows, qd), cmat(b.attn_in, rows, d), weight_grad(Projection::q));
        linear(Projection::k).backward_weight(cmat(dk, rows, kvd), cmat(b.attn_in, rows, d), weight_grad(Projection::k));
        linear(Projection::v).backward_weight(cmat(dv, rows, kvd), cmat(b.attn_in, rows, d), weight_grad(Projection::v));
        rms_norm_backward_rows(b.x.data(), bw.attn_norm, d_attn_in.data(), rows, d, c.rms_eps, dx.data(), bg.attn_norm);
    }
    embedding_backward(batch.inputs, dx.data(), rows, d, gw.token_embd);
}

}  // namespace lowbit
