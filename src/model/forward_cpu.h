// forward_cpu.h — the CPU forward pass of a Llama-family decoder in FP32 (the reference the CUDA port is
// tested against), built so that post-training quantization can stream it one transformer block at a
// time over a batch of calibration sequences:
//
//     hidden = embed_tokens(config, token_embd, tokens, shape)            // [n_seq, n_tok, d]
//     for l in layers: block_forward(config, block_l, linears_l, l, hidden, shape, scratch)   // in place
//     final_norm_and_logits(config, output_norm, output_matrix, hidden_rows, n_rows, logits)
//
// `forward_logits` is exactly that sequence. The seven projections of a block go through its BlockLinears
// (model/linear.h: dense, fake-quant or AdaHOP, chosen per layer by a LinearFactory); the block itself
// never calls a GEMM for them. A batch is n_seq independent sequences of n_tok tokens
// each (rows = n_seq·n_tok, sequence-major); every sequence starts at position 0 and attends causally
// to itself only. No KV cache: evaluation and calibration see whole windows.
//
// Threads: the projection GEMMs go to OpenBLAS (core/gemm_cpu.h), which threads them; attention runs one
// (sequence, head) task per parallel_for index, each calling single-threaded sgemm for QKᵀ and PV; norms,
// RoPE and SwiGLU are split by rows. Results do not depend on our thread count, only on OpenBLAS's
// summation order.
//
// Napkin math (SmolLM2-135M, one 512-token window): the linear layers are 2·512·(30·3.39 M) = 104 GFLOP,
// attention 0.625·30·9·2·2·512²·64 = 11 GFLOP (see attention_causal), the logits of the scored half
// 2·256·49152·576 = 14.5 GFLOP: ~130 GFLOP per window, ~1.3 s at 100 GFLOP/s of sgemm.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/linear.h"
#include "model/weights.h"

namespace lowbit {

struct BatchShape {
    int64_t n_seq = 1;
    int64_t n_tok = 0;
    int64_t rows() const { return n_seq * n_tok; }
};

// Working memory of block_forward, reused across blocks. After block_forward returns it holds the
// inputs of the block's seven linear layers for the batch just processed — what PTQ accumulates its
// Hessians from — and the rotated queries/keys (attention-aware solvers):
struct BlockScratch {
    std::vector<float> attn_in;   // [rows, d]      RMSNorm(x)·attn_norm: input of wq, wk, wv
    std::vector<float> q;         // [rows, q_dim]  after bias and RoPE
    std::vector<float> k;         // [rows, kv_dim] after bias and RoPE
    std::vector<float> v;         // [rows, kv_dim]
    std::vector<float> attn_ctx;  // [rows, q_dim]  softmax(q·kᵀ/√head_dim)·v: input of wo
    std::vector<float> ffn_in;    // [rows, d]      RMSNorm(h)·ffn_norm: input of w_gate, w_up
    std::vector<float> ffn_act;   // [rows, ffn]    silu(gate)·up: input of w_down
    std::vector<float> up;        // [rows, ffn]    up projection (working buffer)
    std::vector<float> rope_cos, rope_sin;  // [n_tok, head_dim/2]
    int64_t rope_n_tok = -1;                // the n_tok the RoPE tables were built for
};

// --- reference operations (each is one thing a CUDA kernel will mirror) ---

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w, row by row (sum of squares in double). y may alias x.
void rms_norm_rows(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y);

// cos/sin of position·inv_freq[i] for positions 0..n_tok-1 ([n_tok, head_dim/2], computed in double).
void rope_tables(const LlamaConfig& c, int64_t n_tok, std::vector<float>& cos_t, std::vector<float>& sin_t);

// Rotates every head of x ([rows, n_heads·head_dim], row r at position r mod n_tok) in place:
// (a, b) → (a·cos − b·sin, a·sin + b·cos) for the pairs given by `pairing`.
void apply_rope(float* x, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                const float* cos_t, const float* sin_t);

// Causal grouped-query attention: out[r, h] = Σ_{j ≤ t} softmax_j(q_h·k_g[j]/√head_dim) v_g[j] with
// g = h / (n_heads/n_kv_heads), within each sequence. q/out [rows, n_heads·hd], k/v [rows, n_kv·hd].
void attention_causal(const float* q, const float* k, const float* v, BatchShape shape, int64_t n_heads,
                      int64_t n_kv_heads, int64_t head_dim, float* out);

// The causal attention probabilities of one (sequence, query head): probs [n_tok, n_tok], row t = softmax of
// q_t·k_j/√head_dim over j ≤ t (zeros after t) — the A_h of attention-aware PTQ (turboboa.md §3.2),
// with attention_causal's softmax (the scores come from their own sgemm call, so they may differ from
// attention_causal's in the last bit).
void attention_probabilities(const float* q, const float* k, BatchShape shape, int64_t n_heads, int64_t n_kv_heads,
                             int64_t head_dim, int64_t seq, int64_t head, float* probs);

// out = silu(gate) · up, elementwise; out may alias gate.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// --- the block-streaming seam ---

// hidden [rows, d] = token_embd[tokens]; fails (input) on a token id outside the vocabulary.
std::vector<float> embed_tokens(const LlamaConfig& c, const float* token_embd, const int32_t* tokens, BatchShape shape);

// Where a block forward may stop (CPU and CUDA): after q, k, v with RoPE; after the attention context; after the
// MLP input (o's residual added, the MLP norm); after the SwiGLU product; or at the end, the block's output in
// hidden. A stopped forward leaves hidden partly updated and the later scratch stale — for callers that read only
// the scratch up to that point (PTQ's true-sequential statistics passes).
enum class BlockStop : uint8_t { qkv, attention, mlp_input, mlp_hidden, end };

// One transformer block, in place on hidden [rows, d]:
//   h = x + Wo·attn(rope(Wq·n(x)+bq), rope(Wk·n(x)+bk), Wv·n(x)+bv);  x' = h + Wdown·(silu(Wgate·n(h)) ⊙ Wup·n(h))
// The projections run through `linears`; `b` gives the norms and biases. `layer` is used in messages only.
// With linears.kv_cache, attention reads (and the scratch keeps) the quantized keys and values.
void block_forward(const LlamaConfig& c, const BlockWeights& b, const BlockLinears& linears, int64_t layer, float* hidden,
                   BatchShape shape, BlockScratch& scratch, BlockStop stop = BlockStop::end);
// The same with dense linears over b's own weights.
void block_forward(const LlamaConfig& c, const BlockWeights& b, int64_t layer, float* hidden, BatchShape shape,
                   BlockScratch& scratch, BlockStop stop = BlockStop::end);

// logits [n_rows, vocab] = RMSNorm(hidden rows)·output_norm · outputᵀ. Pass a sub-range of the hidden
// rows to compute only the logits that are needed (evaluation scores the second half of each window).
void final_norm_and_logits(const LlamaConfig& c, const float* output_norm, const float* output_matrix,
                           const float* hidden, int64_t n_rows, float* logits);

// The linears of every block of a model, made once by a factory (fake-quant weights are quantized then,
// not per forward call). They view m's weights: m must outlive them.
using ModelLinears = std::vector<BlockLinears>;
ModelLinears make_model_linears(const LlamaModel& m, const LinearFactory& factory);

// Whole model: logits of positions first_pos..n_tok-1 of every sequence, [n_seq, n_tok − first_pos, vocab],
// through `linears` (null: dense linears over m's weights).
std::vector<float> forward_logits(const LlamaModel& m, const int32_t* tokens, BatchShape shape, int64_t first_pos = 0,
                                  const ModelLinears* linears = nullptr);
// The same into a caller's buffer of n_seq·(n_tok − first_pos)·vocab floats.
void forward_logits(const LlamaModel& m, const int32_t* tokens, BatchShape shape, int64_t first_pos, float* logits,
                    const ModelLinears* linears = nullptr);

}  // namespace lowbit
