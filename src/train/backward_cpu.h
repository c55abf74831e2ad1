// backward_cpu.h — the CPU FP32 reference of the training engine's math, llm.c style: an explicit forward
// that saves what the backward needs, and an explicit backward, no autograd. It defines what the CUDA
// engine computes (which keeps activations in BF16: the parity tests there measure that difference).
//
// The model is the runtime's Llama decoder (model/forward_cpu.h), built from the same reference ops —
// embed_tokens, rms_norm_rows, rope_tables/apply_rope, attention_causal, swiglu — in the same order, with
// every projection and the LM head going through the TrainLinear seam (train/train_linear.h), so with
// dense linears the training forward's logits are bit-identical to forward_logits on the same weights.
// Per block, with n(·) = RMSNorm:
//     a = n(x)·attn_norm;  q = rope(a·Wqᵀ);  k = rope(a·Wkᵀ);  v = a·Wvᵀ;  c = attn(q, k, v)
//     h = x + c·Woᵀ;  f = n(h)·ffn_norm;  g = f·Wgateᵀ;  u = f·Wupᵀ;  s = silu(g)·u;  x' = h + s·Wdownᵀ
// then logits = (n(x_L)·output_norm)·Woutᵀ (Wout = token_embd when tied) and the loss is the mean over all
// rows of −log softmax(logits)[target]. The backward computes dLoss/dθ for every tensor of the flat
// parameter buffer (train/param_layout.h).
//
// Backward definitions (the reference ops below; each is one CUDA kernel to mirror):
//   cross entropy   dlogits = (softmax(logits) − onehot(target)) / rows
//   RMSNorm         y = x·r·w, r = (mean(x²) + ε)^(−½):  dw += Σ_rows dy·x·r;
//                   dx += r·(dy·w) − x·r³·mean(dy·w·x)
//   RoPE            a rotation by θ: the backward rotates the gradient by −θ (apply_rope with −sin)
//   attention       per query head with P = softmax(q·kᵀ/√hd), recomputed as flash attention does (by
//                   attention_probabilities, whose P may differ from the forward's in the last bit):
//                   dv += Pᵀ·dO;  dP = dO·vᵀ;  dS = P ⊙ (dP − rowsum(dP ⊙ P)) / √hd;  dq = dS·k;  dk += dSᵀ·q
//                   (GQA: dk, dv of a key/value head sum over the query heads of its group)
//   SwiGLU          s = silu(g)·u, silu(g) = g·σ(g):  du = ds·silu(g);  dg = ds·u·σ(g)·(1 + g·(1 − σ(g)))
//   embedding       d token_embd[token] += dx_0[row] (rows in order; tied: added to the LM head's dWout)
//
// Threads: the GEMMs go to OpenBLAS; norms, RoPE and SwiGLU are split by rows or elements; the attention
// backward runs its (sequence, key/value head) tasks in order. Results do not depend on our thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward_cpu.h"
#include "train/param_layout.h"
#include "train/train_linear.h"

namespace lowbit {

// One batch: n_seq sequences of n_tok input tokens and, for every row, the token to predict.
struct TokenBatch {
    const int32_t* inputs = nullptr;   // [n_seq, n_tok]
    const int32_t* targets = nullptr;  // [n_seq, n_tok]
    BatchShape shape;
};

// What the forward saves for the backward, per block ([rows, width] row-major).
struct BlockActivations {
    std::vector<float> x;         // [rows, d]       block input (residual stream)
    std::vector<float> attn_in;   // [rows, d]       n(x)·attn_norm
    std::vector<float> q;         // [rows, q_dim]   after RoPE
    std::vector<float> k;         // [rows, kv_dim]  after RoPE
    std::vector<float> v;         // [rows, kv_dim]
    std::vector<float> attn_ctx;  // [rows, q_dim]   attention output, input of Wo
    std::vector<float> h;         // [rows, d]       x + attention
    std::vector<float> ffn_in;    // [rows, d]       n(h)·ffn_norm
    std::vector<float> gate;      // [rows, ffn]     before silu
    std::vector<float> up;        // [rows, ffn]
    std::vector<float> ffn_act;   // [rows, ffn]     silu(gate)·up, input of Wdown
};

struct TrainActivations {
    BatchShape shape;
    std::vector<BlockActivations> blocks;
    std::vector<float> final_x;   // [rows, d]      output of the last block
    std::vector<float> final_xn;  // [rows, d]      n(final_x)·output_norm, input of the LM head
    std::vector<float> logits;    // [rows, vocab]
    std::vector<float> rope_cos, rope_sin;  // [n_tok, head_dim/2]
    double loss = 0;
};

// --- reference ops of the backward ---

// Mean over rows of −log softmax(logits[r])[targets[r]] (log-sum-exp in double). Error(input) on a target
// outside the vocabulary.
double cross_entropy_mean(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab);
// dlogits = (softmax(logits) − onehot(targets)) / rows (softmax in double, stored in FP32).
void cross_entropy_backward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, float* dlogits);

// Given y = rms_norm_rows(x, w): dx += dL/dx, dw += dL/dw (formulas above; sums in double).
void rms_norm_backward_rows(const float* x, const float* w, const float* dy, int64_t rows, int64_t d, float eps,
                            float* dx, float* dw);

// The gradient of apply_rope's input from the gradient of its output, in place (rotation by −θ).
void apply_rope_backward(float* dx, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                         const float* cos_t, const float* sin_t);

// Given out = attention_causal(q, k, v) (q after RoPE): dq, dk, dv from d_out (overwritten).
void attention_causal_backward(const float* q, const float* k, const float* v, const float* d_out, BatchShape shape,
                               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float* dq, float* dk, float* dv);

// Given out = swiglu(gate, up): d_gate, d_up from d_out (overwritten).
void swiglu_backward(const float* gate, const float* up, const float* d_out, int64_t n, float* d_gate, float* d_up);

// d_token_embd[tokens[r]] += d_hidden[r] for r = 0..rows-1 in order.
void embedding_backward(const int32_t* tokens, const float* d_hidden, int64_t rows, int64_t d, float* d_token_embd);

// --- the model ---

// The forward over `params` (layout's buffer), saving activations; returns (and stores) the mean loss.
double train_forward(const ParamLayout& layout, const float* params, TrainLinears& linears, const TokenBatch& batch,
                     TrainActivations& acts);

// grads (layout's buffer, overwritten) = dLoss/dparams for the batch `acts` was made from by train_forward.
void train_backward(const ParamLayout& layout, const float* params, TrainLinears& linears, const TokenBatch& batch,
                    const TrainActivations& acts, float* grads);

}  // namespace lowbit
