// forward_cpu.cpp — RMSNorm, RoPE, causal GQA attention, SwiGLU, and the block/model forward on the CPU.
#include "model/forward_cpu.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/thread_pool.h"

namespace lowbit {

void rms_norm_rows(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
    parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * d;
            float* yr = y + r * d;
            double ss = 0.0;
            for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * double(xr[i]);
            const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
            for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] * inv) * w[i];
        }
    });
}

void rope_tables(const LlamaConfig& c, int64_t n_tok, std::vector<float>& cos_t, std::vector<float>& sin_t) {
    const std::vector<double> inv = rope_inv_freq(c);
    const int64_t half = int64_t(inv.size());
    cos_t.resize(size_t(n_tok * half));
    sin_t.resize(size_t(n_tok * half));
    for (int64_t p = 0; p < n_tok; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const double a = double(p) * inv[i];
            cos_t[p * half + i] = float(std::cos(a));
            sin_t[p * half + i] = float(std::sin(a));
        }
}

void apply_rope(float* x, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                const float* cos_t, const float* sin_t) {
    const int64_t half = head_dim / 2, width = n_heads * head_dim;
    // pair i of a head: elements (2i, 2i+1) when adjacent, (i, i + half) when halves.
    const int64_t stride_i = pairing == RopePairing::adjacent ? 2 : 1;
    const int64_t offset_b = pairing == RopePairing::adjacent ? 1 : half;
    parallel_for(shape.rows(), 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t pos = r % shape.n_tok;
            const float* cr = cos_t + pos * half;
            const float* sr = sin_t + pos * half;
            for (int64_t h = 0; h < n_heads; ++h) {
                float* xh = x + r * width + h * head_dim;
                for (int64_t i = 0; i < half; ++i) {
                    float& a = xh[i * stride_i];
                    float& b = xh[i * stride_i + offset_b];
                    const float a0 = a, b0 = b;
                    a = a0 * cr[i] - b0 * sr[i];
                    b = a0 * sr[i] + b0 * cr[i];
                }
            }
        }
    });
}

namespace {

extern "C" {
int openblas_get_num_threads(void);  // OpenBLAS extensions (cblas.h of Debian's libopenblas)
void openblas_set_num_threads(int num_threads);
}
// While it lives, OpenBLAS runs every call in the calling thread, so our own workers can call it side by
// side. (OpenBLAS's pool handing many small GEMMs back and forth with our threads was measured 5-10x
// slower than this on a busy 2-core machine.)
class SingleThreadedBlas {
public:
    SingleThreadedBlas() : saved_(openblas_get_num_threads()) {
        if (saved_ != 1) openblas_set_num_threads(1);
    }
    ~SingleThreadedBlas() {
        if (saved_ != 1) openblas_set_num_threads(saved_);
    }
    SingleThreadedBlas(const SingleThreadedBlas&) = delete;
    SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

private:
    int saved_;
};

}  // namespace

namespace {

// Row t of the attention matrix in place: softmax over keys 0..t of the scores·scale, zeros after t.
void causal_softmax_row(float* st, int64_t t, int64_t n_keys, float scale) {
    float m = st[0] * scale;
    for (int64_t j = 0; j <= t; ++j) m = std::max(m, st[j] * scale);
    double sum = 0.0;
    for (int64_t j = 0; j <= t; ++j) {
        st[j] = std::exp(st[j] * scale - m);
        sum += st[j];
    }
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j <= t; ++j) st[j] *= inv;
    std::fill(st + t + 1, st + n_keys, 0.0f);  // causal mask
}

}  // namespace

void attention_probabilities(const float* q, const float* k, BatchShape shape, int64_t n_heads, int64_t n_kv_heads,
                             int64_t head_dim, int64_t seq, int64_t head, float* probs) {
    const int64_t T = shape.n_tok, hd = head_dim, g = head / (n_heads / n_kv_heads);
    const float scale = float(1.0 / std::sqrt(double(hd)));
    gemm_f32(ConstMatF(q + seq * T * n_heads * hd + head * hd, T, hd, n_heads * hd), Trans::no,
             ConstMatF(k + seq * T * n_kv_heads * hd + g * hd, T, hd, n_kv_heads * hd), Trans::yes, MatF(probs, T, T));
    for (int64_t t = 0; t < T; ++t) causal_softmax_row(probs + t * T, t, T, scale);
}

void attention_causal(const float* q, const float* k, const float* v, BatchShape shape, int64_t n_heads,
                      int64_t n_kv_heads, int64_t head_dim, float* out) {
    const int64_t T = shape.n_tok, hd = head_dim;
    const int64_t q_width = n_heads * hd, kv_width = n_kv_heads * hd;
    const int64_t group = n_heads / n_kv_heads;
    const float scale = float(1.0 / std::sqrt(double(hd)));
    // One task per (sequence, head) on our threads; inside, per block of kQueryBlock query rows [r0, r1):
    // S = Q·K[0, r1)ᵀ and O = P·V[0, r1) as two single-threaded sgemm calls around the causal softmax of
    // S's rows. Keys past r1 are skipped; inside the block the GEMMs still do the masked upper triangle:
    // for T = 512 that is 62.5 % of the full-square FLOPs, at sgemm speed. Measured on the busy 2-core dev
    // machine, one SmolLM2 layer at T = 512: a triangular loop the compiler vectorizes (no FMA) 36-82 ms,
    // this 13-27 ms; same results to 1e-6.
    // Napkin math, SmolLM2 (T = 512, hd = 64, 9 heads, 30 layers): 0.625·2·2·512²·64·270 = 11 GFLOP per window.
    constexpr int64_t kQueryBlock = 128;
    SingleThreadedBlas single_threaded_blas;
    parallel_for(shape.n_seq * n_heads, 1, [&](int64_t task0, int64_t task1) {
        std::vector<float> s(static_cast<size_t>(std::min(T, kQueryBlock) * T));
        for (int64_t task = task0; task < task1; ++task) {
            const int64_t seq = task / n_heads, h = task % n_heads, g = h / group;
            const float* qs = q + seq * T * q_width + h * hd;
            const float* ks = k + seq * T * kv_width + g * hd;
            const float* vs = v + seq * T * kv_width + g * hd;
            float* os = out + seq * T * q_width + h * hd;
            for (int64_t r0 = 0; r0 < T; r0 += kQueryBlock) {
                const int64_t r1 = std::min(T, r0 + kQueryBlock), nk = r1;  // keys 0..r1-1
                gemm_f32(ConstMatF(qs + r0 * q_width, r1 - r0, hd, q_width), Trans::no, ConstMatF(ks, nk, hd, kv_width),
                         Trans::yes, MatF(s.data(), r1 - r0, nk));
                for (int64_t t = r0; t < r1; ++t) causal_softmax_row(s.data() + (t - r0) * nk, t, nk, scale);
                gemm_f32(ConstMatF(s.data(), r1 - r0, nk), Trans::no, ConstMatF(vs, nk, hd, kv_width), Trans::no,
                         MatF(os + r0 * q_width, r1 - r0, hd, q_width));
            }
        }
    });
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    parallel_for(n, 1 << 14, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const float g = gate[i];
            out[i] = g / (1.0f + std::exp(-g)) * up[i];
        }
    });
}

std::vector<float> embed_tokens(const LlamaConfig& c, const float* token_embd, const int32_t* tokens, BatchShape shape) {
    const int64_t d = c.hidden_size, rows = shape.rows();
    for (int64_t r = 0; r < rows; ++r)
        LOWBIT_CHECK(tokens[r] >= 0 && tokens[r] < c.vocab_size, ErrorKind::input,
                     "token id {} at position {} of sequence {} is outside the vocabulary (0..{}); were the tokens "
                     "made by this model's tokenizer?",
                     tokens[r], r % shape.n_tok, r / shape.n_tok, c.vocab_size - 1);
    std::vector<float> hidden(static_cast<size_t>(rows * d));
    parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            std::copy(token_embd + int64_t(tokens[r]) * d, token_embd + (int64_t(tokens[r]) + 1) * d,
                      hidden.begin() + r * d);
    });
    return hidden;
}

namespace {

void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n) {
    parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t i = 0; i < n; ++i) y[r * n + i] += bias[i];
    });
}

}  // namespace

void block_forward(const LlamaConfig& c, const BlockWeights& b, const BlockLinears& lin, int64_t layer, float* hidden,
                   BatchShape shape, BlockScratch& s, BlockStop stop) {
    LOWBIT_CHECK(shape.n_seq > 0 && shape.n_tok > 0, ErrorKind::usage, "block {}: empty batch ({} x {})", layer,
                 shape.n_seq, shape.n_tok);
    const int64_t rows = shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    s.attn_in.resize(size_t(rows * d));
    s.q.resize(size_t(rows * qd));
    s.k.resize(size_t(rows * kvd));
    s.v.resize(size_t(rows * kvd));
    s.attn_ctx.resize(size_t(rows * qd));
    s.ffn_in.resize(size_t(rows * d));
    s.ffn_act.resize(size_t(rows * f));
    s.up.resize(size_t(rows * f));
    if (s.rope_n_tok != shape.n_tok) {
        rope_tables(c, shape.n_tok, s.rope_cos, s.rope_sin);
        s.rope_n_tok = shape.n_tok;
    }
    const auto mat = [rows](std::vector<float>& v, int64_t cols) { return MatF(v.data(), rows, cols); };
    const MatF h(hidden, rows, d);

    // Attention.
    rms_norm_rows(hidden, b.attn_norm.data(), rows, d, c.rms_eps, s.attn_in.data());
    lin[Projection::q].forward(mat(s.attn_in, d), mat(s.q, qd));
    lin[Projection::k].forward(mat(s.attn_in, d), mat(s.k, kvd));
    lin[Projection::v].forward(mat(s.attn_in, d), mat(s.v, kvd));
    if (c.qkv_bias) {
        add_bias_rows(s.q.data(), b.bq.data(), rows, qd);
        add_bias_rows(s.k.data(), b.bk.data(), rows, kvd);
        add_bias_rows(s.v.data(), b.bv.data(), rows, kvd);
    }
    apply_rope(s.q.data(), shape, c.n_heads, c.head_dim, c.rope_pairing, s.rope_cos.data(), s.rope_sin.data());
    apply_rope(s.k.data(), shape, c.n_kv_heads, c.head_dim, c.rope_pairing, s.rope_cos.data(), s.rope_sin.data());
    if (lin.kv_cache.format)  // what a quantized KV cache would hold: one grid per token and KV head
        for (std::vector<float>* kv : {&s.k, &s.v})
            *kv = quantize_activations(lin.kv_cache, ConstMatF(kv->data(), rows * c.n_kv_heads, c.head_dim));
    if (stop == BlockStop::qkv) return;
    attention_causal(s.q.data(), s.k.data(), s.v.data(), shape, c.n_heads, c.n_kv_heads, c.head_dim, s.attn_ctx.data());
    if (stop == BlockStop::attention) return;
    lin[Projection::o].forward(mat(s.attn_ctx, qd), h, 1.0f);  // residual add fused (beta = 1)

    // SwiGLU MLP.
    rms_norm_rows(hidden, b.ffn_norm.data(), rows, d, c.rms_eps, s.ffn_in.data());
    if (stop == BlockStop::mlp_input) return;
    lin[Projection::gate].forward(mat(s.ffn_in, d), mat(s.ffn_act, f));
    lin[Projection::up].forward(mat(s.ffn_in, d), mat(s.up, f));
    swiglu(s.ffn_act.data(), s.up.data(), rows * f, s.ffn_act.data());
    if (stop == BlockStop::mlp_hidden) return;
    lin[Projection::down].forward(mat(s.ffn_act, f), h, 1.0f);
}

void block_forward(const LlamaConfig& c, const BlockWeights& b, int64_t layer, float* hidden, BatchShape shape,
                   BlockScratch& scratch, BlockStop stop) {
    block_forward(c, b, dense_linears()(c, b, layer), layer, hidden, shape, scratch, stop);
}

void final_norm_and_logits(const LlamaConfig& c, const float* output_norm, const float* output_matrix,
                           const float* hidden, int64_t n_rows, float* logits) {
    const int64_t d = c.hidden_size;
    std::vector<float> xn(static_cast<size_t>(n_rows * d));
    rms_norm_rows(hidden, output_norm, n_rows, d, c.rms_eps, xn.data());
    DenseLinear(ConstMatF(output_matrix, c.vocab_size, d)).forward(ConstMatF(xn.data(), n_rows, d), MatF(logits, n_rows, c.vocab_size));
}

ModelLinears make_model_linears(const LlamaModel& m, const LinearFactory& factory) {
    check_weight_shapes(m.config, m.weights, "linear layers");
    ModelLinears out;
    out.reserve(m.weights.blocks.size());
    for (int64_t l = 0; l < m.config.n_layers; ++l) out.push_back(factory(m.config, m.weights.blocks[size_t(l)], l));
    return out;
}

void forward_logits(const LlamaModel& m, const int32_t* tokens, BatchShape shape, int64_t first_pos, float* logits,
                    const ModelLinears* linears) {
    const LlamaConfig& c = m.config;
    LOWBIT_CHECK(first_pos >= 0 && first_pos < shape.n_tok, ErrorKind::usage,
                 "forward: first logit position {} outside the window of {} tokens", first_pos, shape.n_tok);
    std::vector<float> hidden = embed_tokens(c, m.weights.token_embd.data(), tokens, shape);
    BlockScratch scratch;
    LOWBIT_CHECK(!linears || int64_t(linears->size()) == c.n_layers, ErrorKind::usage,
                 "forward: {} blocks of linears for a model of {} layers", linears ? linears->size() : 0, c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const BlockWeights& b = m.weights.blocks[size_t(l)];
        if (linears) block_forward(c, b, (*linears)[size_t(l)], l, hidden.data(), shape, scratch);
        else block_forward(c, b, l, hidden.data(), shape, scratch);
    }
    const int64_t keep = shape.n_tok - first_pos, d = c.hidden_size;
    for (int64_t sq = 0; sq < shape.n_seq; ++sq)
        final_norm_and_logits(c, m.weights.output_norm.data(), m.weights.output_matrix(),
                              hidden.data() + (sq * shape.n_tok + first_pos) * d, keep,
                              logits + sq * keep * c.vocab_size);
}

std::vector<float> forward_logits(const LlamaModel& m, const int32_t* tokens, BatchShape shape, int64_t first_pos,
                                  const ModelLinears* linears) {
    LOWBIT_CHECK(first_pos >= 0 && first_pos < shape.n_tok, ErrorKind::usage,
                 "forward: first logit position {} outside the window of {} tokens", first_pos, shape.n_tok);
    std::vector<float> logits(static_cast<size_t>(shape.n_seq * (shape.n_tok - first_pos) * m.config.vocab_size));
    forward_logits(m, tokens, shape, first_pos, logits.data(), linears);
    return logits;
}

}  // namespace lowbit
