// forward_cuda.cu — weights on the device, the cuBLAS linear layers, the block/model forward and CudaLlama
// (see forward_cuda.cuh).
//
// Napkin math (SmolLM2-135M, one 512-token window, ~130 GFLOP as on the CPU): the 7 linear layers of a
// block are GEMMs of 512 rows × 576 … 1536 — small enough that cuBLAS runs far below peak (a few µs each,
// ~210 of them per window) — plus the logits GEMM 256 × 49152 × 576 (14.5 GFLOP). BF16 on the H200's tensor
// cores (~780 TFLOP/s peak) is launch- and memory-bound here; FP32 (pedantic, CUDA cores, ~60 TFLOP/s) is
// compute-bound at ~2 ms per window. The logits copied back to the host are 256 · 49152 · 4 B = 50 MB per
// window (~2-4 ms over PCIe/host memcpy): batch several windows per call to amortize launches. The host
// side (copy + log-softmax in the evaluator) bounds eval tokens/s on the GPU unless the windows are scored
// on the device (forward_nll: 12 bytes per position come back instead of 196 KB).
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/forward_cuda.cuh"

#include <algorithm>
#include <climits>
#include <string>

#include "core/thread_pool.h"
#include "model/cuda/attention_cuda.cuh"
#include "model/cuda/flash_attention_cuda.cuh"
#include "model/cuda/model_ops_cuda.cuh"
#include "model/cuda/token_nll_cuda.cuh"

namespace lowbit {

// ---------------------------------------------------------------------------------------------------
// weights

void CudaBlockWeights::upload(const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision p,
                              cudaStream_t stream, const CudaLinearFactory& make_linears) {
    check_block_shapes(c, b, layer, "block upload to the GPU");
    precision = p;
    attn_norm.assign_async(b.attn_norm.data(), b.attn_norm.size(), stream);
    ffn_norm.assign_async(b.ffn_norm.data(), b.ffn_norm.size(), stream);
    bq.assign_async(b.bq.data(), c.qkv_bias ? b.bq.size() : 0, stream);
    bk.assign_async(b.bk.data(), c.qkv_bias ? b.bk.size() : 0, stream);
    bv.assign_async(b.bv.data(), c.qkv_bias ? b.bv.size() : 0, stream);
    (make_linears ? make_linears : cuda_dense_linears())(c, b, layer, p, stream, linears);
}

size_t CudaBlockWeights::bytes() const {
    return attn_norm.bytes() + ffn_norm.bytes() + bq.bytes() + bk.bytes() + bv.bytes() + linears.bytes();
}

size_t cuda_block_weight_bytes(const LlamaConfig& c, CudaPrecision p) {
    const int64_t d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    const int64_t matrix = qd * d + 2 * kvd * d + d * qd + 3 * f * d;
    const int64_t vec = 2 * d + (c.qkv_bias ? qd + 2 * kvd : 0);
    return size_t(matrix) * (p == CudaPrecision::bf16 ? 2 : 4) + size_t(vec) * 4;
}

void CudaHeadWeights::upload(const LlamaConfig& c, const std::vector<float>& embd, const std::vector<float>& norm,
                             const std::vector<float>& out, CudaPrecision p, cudaStream_t stream) {
    const int64_t d = c.hidden_size, V = c.vocab_size;
    if (int64_t(embd.size()) != V * d || int64_t(norm.size()) != d || (!out.empty() && int64_t(out.size()) != V * d) ||
        (out.empty() && !c.tied_embeddings))
        cuda_input_error("head upload to the GPU: token_embd has " + std::to_string(embd.size()) + " values, output_norm " +
                         std::to_string(norm.size()) + ", output " + std::to_string(out.size()) + "; the config wants " +
                         std::to_string(V * d) + ", " + std::to_string(d) + " and " +
                         (c.tied_embeddings ? std::string("none (tied)") : std::to_string(V * d)));
    precision = p;
    token_embd.upload(embd.data(), V, d, p, stream);
    output_norm.assign_async(norm.data(), norm.size(), stream);
    if (out.empty()) {
        output = CudaMatrix{};
    } else {
        output.upload(out.data(), V, d, p, stream);
    }
}

// ---------------------------------------------------------------------------------------------------
// the seam

void cuda_embed_tokens(const LlamaConfig& c, const CudaHeadWeights& head, const int32_t* tokens, BatchShape shape,
                       float* d_hidden, CudaBlockScratch& s, const CudaBlas& blas) {
    const int64_t rows = shape.rows();
    for (int64_t r = 0; r < rows; ++r)
        if (tokens[r] < 0 || tokens[r] >= c.vocab_size)
            cuda_input_error("token id " + std::to_string(tokens[r]) + " at position " + std::to_string(r % shape.n_tok) +
                             " of sequence " + std::to_string(r / shape.n_tok) + " is outside the vocabulary (0.." +
                             std::to_string(c.vocab_size - 1) + "); were the tokens made by this model's tokenizer?");
    if (rows <= 0) return;
    s.tokens.assign_async(tokens, size_t(rows), blas.stream());
    if (head.token_embd.precision == CudaPrecision::bf16)
        embed_rows_cuda(head.token_embd.bf16.data(), s.tokens.data(), rows, c.hidden_size, d_hidden, blas.stream());
    else
        embed_rows_cuda(head.token_embd.f32.data(), s.tokens.data(), rows, c.hidden_size, d_hidden, blas.stream());
}

void cuda_block_forward(const LlamaConfig& c, const CudaBlockWeights& b, int64_t layer, float* d_hidden, BatchShape shape,
                        CudaBlockScratch& s, const CudaBlas& blas, BlockStop stop) {
    if (shape.n_seq <= 0 || shape.n_tok <= 0)
        cuda_usage_error("block " + std::to_string(layer) + ": empty batch (" + std::to_string(shape.n_seq) + " x " +
                         std::to_string(shape.n_tok) + ")");
    const CudaBlockLinears& lin = b.linears;
    for (Projection p : kProjections)
        if (!lin.by_projection[size_t(p)] || lin[p].out_features() != projection_out_features(c, p) ||
            lin[p].in_features() != projection_in_features(c, p))
            cuda_usage_error("block " + std::to_string(layer) + ": the uploaded " + projection_name(p) +
                             " linear does not match the config");
    const cudaStream_t st = blas.stream();
    const int64_t rows = shape.rows(), d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
    // A GEMM input gets its BF16 copy (written by the kernel that produces it) when a linear reading it asks.
    const auto wants_bf16 = [&](std::initializer_list<Projection> readers) {
        for (Projection p : readers)
            if (lin[p].wants_bf16_input()) return true;
        return false;
    };
    float* attn_in = s.attn_in.grow(rows * d);
    float* q = s.q.grow(rows * qd);
    float* k = s.k.grow(rows * kvd);
    float* v = s.v.grow(rows * kvd);
    float* ctx = s.attn_ctx.grow(rows * qd);
    float* ffn_in = s.ffn_in.grow(rows * d);
    float* act = s.ffn_act.grow(rows * f);
    float* up = s.up.grow(rows * f);
    __nv_bfloat16* attn_in_b =
        wants_bf16({Projection::q, Projection::k, Projection::v}) ? s.attn_in_bf16.grow(rows * d) : nullptr;
    __nv_bfloat16* ctx_b = wants_bf16({Projection::o}) ? s.attn_ctx_bf16.grow(rows * qd) : nullptr;
    __nv_bfloat16* ffn_in_b = wants_bf16({Projection::gate, Projection::up}) ? s.ffn_in_bf16.grow(rows * d) : nullptr;
    __nv_bfloat16* act_b = wants_bf16({Projection::down}) ? s.ffn_act_bf16.grow(rows * f) : nullptr;
    s.rows = rows;
    if (s.rope_n_tok != shape.n_tok) {
        std::vector<float> cos_t, sin_t;
        rope_tables(c, shape.n_tok, cos_t, sin_t);  // the CPU's own tables: RoPE is then bit-equal
        s.rope_cos.assign_async(cos_t.data(), cos_t.size(), st);
        s.rope_sin.assign_async(sin_t.data(), sin_t.size(), st);
        s.rope_n_tok = shape.n_tok;
    }

    // Attention.
    rms_norm_rows_cuda(d_hidden, b.attn_norm.data(), rows, d, c.rms_eps, attn_in, attn_in_b, st);
    const CudaLinearInput x_attn{attn_in, attn_in_b, rows};
    lin[Projection::q].forward(blas, x_attn, q);
    lin[Projection::k].forward(blas, x_attn, k);
    lin[Projection::v].forward(blas, x_attn, v);
    if (c.qkv_bias) {
        add_bias_rows_cuda(q, b.bq.data(), rows, qd, st);
        add_bias_rows_cuda(k, b.bk.data(), rows, kvd, st);
        add_bias_rows_cuda(v, b.bv.data(), rows, kvd, st);
    }
    apply_rope_cuda(q, shape, c.n_heads, c.head_dim, c.rope_pairing, s.rope_cos.data(), s.rope_sin.data(), st);
    apply_rope_cuda(k, shape, c.n_kv_heads, c.head_dim, c.rope_pairing, s.rope_cos.data(), s.rope_sin.data(), st);
    if (lin.kv_cache.format)  // what a quantized KV cache would hold: one grid per token and KV head (forward_cpu.cpp)
        for (float* t : {k, v})
            format_roundtrip_cuda(*lin.kv_cache.format, lin.kv_cache.options, t, rows * c.n_kv_heads, c.head_dim, t,
                                  s.kv_scratch, st);
    if (stop == BlockStop::qkv) return;
    if (s.tensor_core_attention && b.precision == CudaPrecision::bf16 && flash_attention_head_dim_supported(c.head_dim)) {
        __nv_bfloat16* qb = s.q_bf16.grow(rows * qd);
        __nv_bfloat16* kb = s.k_bf16.grow(rows * kvd);
        __nv_bfloat16* vb = s.v_bf16.grow(rows * kvd);
        __nv_bfloat16* cb = ctx_b ? ctx_b : s.ctx_bf16_own.grow(rows * qd);
        cast_to_bf16_cuda(q, rows * qd, qb, st);
        cast_to_bf16_cuda(k, rows * kvd, kb, st);
        cast_to_bf16_cuda(v, rows * kvd, vb, st);
        flash_attention_forward_cuda(qb, kb, vb, shape, c.n_heads, c.n_kv_heads, c.head_dim, cb,
                                     s.lse.grow(shape.n_seq * c.n_heads * shape.n_tok), st);
        cast_from_bf16_cuda(cb, rows * qd, ctx, st);
    } else {
        attention_causal_cuda(q, k, v, shape, c.n_heads, c.n_kv_heads, c.head_dim, ctx, ctx_b, st);
    }
    if (stop == BlockStop::attention) return;
    lin[Projection::o].forward(blas, {ctx, ctx_b, rows}, d_hidden, 1.0f);  // residual add in the GEMM (beta = 1)

    // SwiGLU MLP.
    rms_norm_rows_cuda(d_hidden, b.ffn_norm.data(), rows, d, c.rms_eps, ffn_in, ffn_in_b, st);
    if (stop == BlockStop::mlp_input) return;
    const CudaLinearInput x_ffn{ffn_in, ffn_in_b, rows};
    lin[Projection::gate].forward(blas, x_ffn, act);
    lin[Projection::up].forward(blas, x_ffn, up);
    swiglu_cuda(act, up, rows * f, act, act_b, st);
    if (stop == BlockStop::mlp_hidden) return;
    lin[Projection::down].forward(blas, {act, act_b, rows}, d_hidden, 1.0f);
}

void cuda_final_norm_and_logits(const LlamaConfig& c, const CudaHeadWeights& head, const float* d_hidden, int64_t n_rows,
                                float* d_logits, CudaBlockScratch& s, const CudaBlas& blas) {
    if (n_rows <= 0) return;
    const int64_t d = c.hidden_size;
    const bool bf = head.output_matrix().precision == CudaPrecision::bf16;
    float* xn = bf ? nullptr : s.head_in.grow(n_rows * d);
    __nv_bfloat16* xn_b = bf ? s.head_in_bf16.grow(n_rows * d) : nullptr;
    rms_norm_rows_cuda(d_hidden, head.output_norm.data(), n_rows, d, c.rms_eps, xn, xn_b, blas.stream());
    cuda_matrix_product(blas, head.output_matrix(), xn, xn_b, n_rows, d_logits);
}

// ---------------------------------------------------------------------------------------------------
// CudaLlama

CudaLlama::CudaLlama(const LlamaModel& m, CudaLlamaOptions opt) : config_(m.config), opt_(opt), host_model_(&m) {
    validate_config(config_, "CudaLlama");
    check_weight_shapes(config_, m.weights, "CudaLlama");
    head_.upload(config_, m.weights.token_embd, m.weights.output_norm, m.weights.output, opt_.precision, blas_.stream());
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    init(opt_.residency, free_bytes);
}

CudaLlama::CudaLlama(const ModelReader& r, CudaLlamaOptions opt) : config_(r.config()), opt_(opt), reader_(&r) {
    validate_config(config_, r.path());
    head_.upload(config_, r.token_embedding(), r.output_norm(), r.output(), opt_.precision, blas_.stream());
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    init(opt_.residency, free_bytes);
}

void CudaLlama::init(CudaResidency residency, size_t free_bytes) {
    const size_t need = size_t(config_.n_layers) * cuda_block_weight_bytes(config_, opt_.precision);
    streamed_ = residency == CudaResidency::streamed ||
                (residency == CudaResidency::automatic && double(need) > 0.8 * double(free_bytes));
    blocks_ = std::vector<CudaBlockWeights>(streamed_ ? 1 : size_t(config_.n_layers));
    if (!streamed_)
        for (int64_t l = 0; l < config_.n_layers; ++l) upload_block(blocks_[size_t(l)], l);
    blas_.synchronize();
}

void CudaLlama::upload_block(CudaBlockWeights& dst, int64_t layer) const {
    if (host_model_)
        dst.upload(config_, host_model_->weights.blocks[size_t(layer)], layer, opt_.precision, blas_.stream(), opt_.linears);
    else
        dst.upload(config_, reader_->block(layer), layer, opt_.precision, blas_.stream(), opt_.linears);
}

size_t CudaLlama::weight_bytes() const {
    size_t b = head_.bytes();
    for (const auto& blk : blocks_) b += blk.bytes();
    return b;
}

const float* CudaLlama::forward_logits_device(const int32_t* tokens, BatchShape shape, int64_t first_pos) {
    if (shape.n_seq <= 0 || shape.n_tok <= 0)
        cuda_usage_error("forward: empty batch (" + std::to_string(shape.n_seq) + " x " + std::to_string(shape.n_tok) + ")");
    if (first_pos < 0 || first_pos >= shape.n_tok)
        cuda_usage_error("forward: first logit position " + std::to_string(first_pos) + " outside the window of " +
                         std::to_string(shape.n_tok) + " tokens");
    const int64_t d = config_.hidden_size, V = config_.vocab_size, T = shape.n_tok, keep = T - first_pos;
    float* hidden = hidden_.grow(shape.rows() * d);
    cuda_embed_tokens(config_, head_, tokens, shape, hidden, scratch_, blas_);
    for (int64_t l = 0; l < config_.n_layers; ++l) {
        if (streamed_) upload_block(blocks_[0], l);  // ordered after the previous block's kernels on the stream
        cuda_block_forward(config_, blocks_[streamed_ ? 0 : size_t(l)], l, hidden, shape, scratch_, blas_);
    }
    float* logits = logits_.grow(shape.n_seq * keep * V);
    if (first_pos == 0) {
        cuda_final_norm_and_logits(config_, head_, hidden, shape.rows(), logits, scratch_, blas_);
    } else {
        for (int64_t sq = 0; sq < shape.n_seq; ++sq)
            cuda_final_norm_and_logits(config_, head_, hidden + (sq * T + first_pos) * d, keep, logits + sq * keep * V,
                                       scratch_, blas_);
    }
    return logits;
}

void CudaLlama::forward_logits(const int32_t* tokens, BatchShape shape, int64_t first_pos, float* host_logits) {
    const float* d = forward_logits_device(tokens, shape, first_pos);
    const size_t n = size_t(shape.n_seq * (shape.n_tok - first_pos) * config_.vocab_size);
    CUDA_CHECK(cudaMemcpyAsync(host_logits, d, n * sizeof(float), cudaMemcpyDeviceToHost, blas_.stream()));
    blas_.synchronize();
}

void CudaLlama::forward_nll(const int32_t* tokens, BatchShape shape, int64_t first_pos, int64_t n_score,
                            const int32_t* targets, double* nll, int32_t* argmax) {
    if (shape.n_seq <= 0 || shape.n_tok <= 0 || first_pos < 0 || first_pos >= shape.n_tok || n_score < 0 ||
        n_score > shape.n_tok - first_pos)
        cuda_usage_error("forward_nll: " + std::to_string(n_score) + " scored positions from position " +
                         std::to_string(first_pos) + " of " + std::to_string(shape.n_seq) + " windows of " +
                         std::to_string(shape.n_tok) + " tokens");
    const int64_t n = shape.n_seq * n_score, V = config_.vocab_size;
    for (int64_t i = 0; i < n; ++i)
        if (targets[i] < 0 || targets[i] >= V)
            cuda_input_error("target token id " + std::to_string(targets[i]) + " of position " +
                             std::to_string(first_pos + i % n_score) + " of sequence " + std::to_string(i / n_score) +
                             " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
    if (n == 0) return;
    const float* logits = forward_logits_device(tokens, shape, first_pos);
    const cudaStream_t st = blas_.stream();
    targets_.assign_async(targets, size_t(n), st);
    double* d_nll = nll_.grow(n);
    int32_t* d_argmax = argmax ? argmax_.grow(n) : nullptr;
    token_nll_rows_cuda(logits, V, shape.n_seq, shape.n_tok - first_pos, n_score, targets_.data(), d_nll, d_argmax, st);
    CUDA_CHECK(cudaMemcpyAsync(nll, d_nll, size_t(n) * sizeof(double), cudaMemcpyDeviceToHost, st));
    if (argmax) CUDA_CHECK(cudaMemcpyAsync(argmax, d_argmax, size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
    blas_.synchronize();
}

std::vector<float> CudaLlama::forward_logits(const int32_t* tokens, BatchShape shape, int64_t first_pos) {
    std::vector<float> out(size_t(std::max<int64_t>(0, shape.n_seq * (shape.n_tok - first_pos) * config_.vocab_size)));
    forward_logits(tokens, shape, first_pos, out.data());
    return out;
}

WindowLogitsFn cuda_window_logits(CudaLlama& m) {
    return [&m](const int32_t* tokens, BatchShape shape, int64_t first_pos, float* out) {
        m.forward_logits(tokens, shape, first_pos, out);
    };
}

WindowNllFn cuda_window_nll(CudaLlama& m) {
    return [&m](const int32_t* tokens, BatchShape shape, int64_t first_pos, int64_t n_score, const int32_t* targets,
                double* nll, int32_t* argmax) { m.forward_nll(tokens, shape, first_pos, n_score, targets, nll, argmax); };
}

}  // namespace lowbit
