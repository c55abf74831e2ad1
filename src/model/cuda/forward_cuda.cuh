// forward_cuda.cuh — the forward pass of a Llama-family decoder on the GPU, in FP32 or BF16, with the same
// block-streaming seam as the CPU reference (model/forward_cpu.h):
//
//     cuda_embed_tokens(config, head, tokens, shape, d_hidden, scratch, blas)          // [n_seq·n_tok, d]
//     for l in layers: cuda_block_forward(config, block_l, l, d_hidden, shape, scratch, blas)   // in place
//     cuda_final_norm_and_logits(config, head, d_hidden_rows, n_rows, d_logits, scratch, blas)
//
// The seven projections of a block go through its CudaBlockLinears (linear_cuda.cuh: dense, fake-quant or
// AdaHOP, made per layer by the CudaLinearFactory of CudaLlamaOptions); the block never calls cuBLAS for them.
// A block's weights live in a CudaBlockWeights; `upload` reuses its device storage when the shapes do not
// change, so a caller that cannot hold the model on the device (post-training quantization of a model
// larger than GPU memory, or CudaLlama in streamed residency) uploads block after block into one object.
// CudaLlama bundles it all for evaluation: it uploads a whole model (or streams its blocks from host memory
// or a ModelReader when they do not fit) and returns host FP32 logits exactly like forward_logits, or scores
// them on the device (token_nll_cuda.cuh) and returns only each position's NLL and argmax.
//
// Precision (CudaPrecision), what is rounded where:
//   fp32  weights, activations and GEMMs in FP32; cuBLAS with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32, no
//         reduced-precision reductions).
//   bf16  every weight matrix (q/k/v/o, gate/up/down, the token embedding and the output projection) is
//         stored in BF16; the inputs of the GEMMs (the two RMSNorm outputs, the attention context, the
//         SwiGLU product, the final-norm output) are rounded to BF16 by the kernel that produces them; the
//         GEMMs multiply BF16 by BF16 with FP32 accumulation and FP32 output (cublasGemmEx CUDA_R_16BF,
//         CUBLAS_COMPUTE_32F). Everything else stays FP32: the residual stream, norm weights, biases,
//         q/k/v after their GEMM, RoPE, attention (scores, softmax, context), SwiGLU, the logits. So the
//         BF16 path is exactly "the FP32 reference with the weight matrices and the GEMM inputs rounded to
//         BF16" (tests/cuda/test_model_cuda.cu checks that statement against a CPU emulation).
//
// Numerics contract (tests/cuda/test_model_cuda.cu, on tiny random models with GQA/MQA, both RoPE pairings,
// q/k/v biases, tied and untied embeddings, head_dim 8…128, 2-3 sequences of odd lengths up to 300):
//   fp32  logits equal the CPU forward_logits within FP32 summation-order error:
//         max|Δlogit| ≤ 1e-3·max|logit|. (A CPU emulation of the kernels' arithmetic order gives 1e-6…2e-5
//         on these models; the test prints the observed values.)
//   bf16  on models with weights of std 0.08: logits equal the CPU emulation of the statement above within
//         1e-2·max|logit| (FP32 order plus GEMM inputs that round to the other BF16 neighbour: the CPU
//         emulation run in two summation orders differs by ≤ 2.9e-3), the CPU FP32 reference within
//         3e-2·max|logit| (emulated 2.2e-3…6.1e-3: BF16 keeps 8 significant bits, 2^-9 relative per rounded
//         weight and GEMM input, compounded over the blocks) with ≥ 95 % top-1 agreement.
//   The FP32 path is deterministic: the same inputs give bit-identical logits run to run, resident or
//   streamed, whole model or block at a time (cuBLAS is bit-reproducible for a given problem and GPU).
//
// Scratch after cuda_block_forward: like BlockScratch on the CPU, it holds the inputs of the block's seven
// linear layers for the batch just processed (attn_in, attn_ctx, ffn_in, ffn_act in FP32 — what PTQ builds
// its Hessians from) and the rotated q/k and v.
//
// Threads/streams: everything runs in order on the stream of the CudaBlas handle; host results are
// synchronized before they are returned. One CudaLlama / CudaBlockScratch per stream.
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/eval.h"
#include "model/cuda/linear_cuda.cuh"
#include "model/forward_cpu.h"
#include "model/weights.h"

namespace lowbit {

// One transformer block on the device: norms and biases (always FP32) and the seven linears.
struct CudaBlockWeights {
    CudaPrecision precision = CudaPrecision::fp32;
    DeviceBuffer<float> attn_norm, ffn_norm, bq, bk, bv;  // bq/bk/bv empty without q/k/v biases
    CudaBlockLinears linears;

    // Checks the shapes (check_block_shapes; `layer` names the block in messages) and uploads, the linears
    // made by `linears` (empty: dense), reusing the device storage of the previous block where it fits.
    void upload(const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision p, cudaStream_t stream = nullptr,
                const CudaLinearFactory& linears = {});
    size_t bytes() const;
};

// Device bytes of one block's weights in precision p with dense linears.
size_t cuda_block_weight_bytes(const LlamaConfig& c, CudaPrecision p);

// The embedding, final norm and output projection on the device.
struct CudaHeadWeights {
    CudaPrecision precision = CudaPrecision::fp32;
    CudaMatrix token_embd;            // [vocab, d]
    DeviceBuffer<float> output_norm;  // [d]
    CudaMatrix output;                // [vocab, d]; empty when the embeddings are tied

    // `output` empty when tied. Checks the sizes against the config.
    void upload(const LlamaConfig& c, const std::vector<float>& token_embd, const std::vector<float>& output_norm,
                const std::vector<float>& output, CudaPrecision p, cudaStream_t stream = nullptr);
    const CudaMatrix& output_matrix() const { return output.empty() ? token_embd : output; }
    size_t bytes() const { return token_embd.bytes() + output_norm.bytes() + output.bytes(); }
};

// Working memory of the device forward, grown on demand and reused across blocks and calls. The first
// `rows` rows of each FP32 buffer hold what BlockScratch's namesakes hold after cuda_block_forward.
struct CudaBlockScratch {
    DeviceBuffer<float> attn_in;   // [rows, d]
    DeviceBuffer<float> q;         // [rows, q_dim]  after bias and RoPE
    DeviceBuffer<float> k;         // [rows, kv_dim] after bias and RoPE
    DeviceBuffer<float> v;         // [rows, kv_dim]
    DeviceBuffer<float> attn_ctx;  // [rows, q_dim]
    DeviceBuffer<float> ffn_in;    // [rows, d]
    DeviceBuffer<float> ffn_act;   // [rows, ffn]
    DeviceBuffer<float> up;        // [rows, ffn]
    // BF16 copies of the GEMM inputs (bf16 precision only).
    DeviceBuffer<__nv_bfloat16> attn_in_bf16, attn_ctx_bf16, ffn_in_bf16, ffn_act_bf16;
    DeviceBuffer<float> head_in;   // final-norm output [n_rows, d]
    DeviceBuffer<__nv_bfloat16> head_in_bf16;
    DeviceBuffer<int32_t> tokens;  // the last batch's token ids
    // Attention on the BF16 tensor cores (flash_attention_cuda.cuh: q, k, v after RoPE rounded to BF16, FP32
    // softmax and accumulation, the context rounded to BF16 — attn_ctx holds that BF16 value) instead of the
    // FP32 kernel, for bf16 precision and the head sizes it supports. Off by default: evaluation keeps the
    // contract above; PTQ's BF16 calibration turns it on (10× less attention time at 2048 tokens).
    bool tensor_core_attention = false;
    DeviceBuffer<__nv_bfloat16> q_bf16, k_bf16, v_bf16, ctx_bf16_own;
    DeviceBuffer<float> lse;
    DeviceBuffer<float> rope_cos, rope_sin;  // [n_tok, head_dim/2] from rope_tables()
    FormatRoundtripScratch kv_scratch;       // CudaBlockLinears::kv_cache
    int64_t rope_n_tok = -1;
    int64_t rows = 0;              // rows of the last batch through cuda_block_forward
};

// hidden [rows, d] (device) = token_embd[tokens]; `tokens` are host ids, checked like embed_tokens (input
// error naming the position), then copied to scratch.tokens.
void cuda_embed_tokens(const LlamaConfig& c, const CudaHeadWeights& head, const int32_t* tokens, BatchShape shape,
                       float* d_hidden, CudaBlockScratch& scratch, const CudaBlas& blas);

// One block in place on d_hidden [rows, d] (device), in the precision of `b`; `layer` names it in messages. `stop`
// as block_forward's (forward_cpu.h).
void cuda_block_forward(const LlamaConfig& c, const CudaBlockWeights& b, int64_t layer, float* d_hidden, BatchShape shape,
                        CudaBlockScratch& scratch, const CudaBlas& blas, BlockStop stop = BlockStop::end);

// d_logits [n_rows, vocab] = RMSNorm(d_hidden rows)·output_norm · outputᵀ (all device; FP32 out).
void cuda_final_norm_and_logits(const LlamaConfig& c, const CudaHeadWeights& head, const float* d_hidden, int64_t n_rows,
                                float* d_logits, CudaBlockScratch& scratch, const CudaBlas& blas);

// Where CudaLlama keeps the blocks: all on the device, or one at a time (uploaded from the host model or
// the reader for every forward call — slow, but bounded by one block of device memory). `automatic`
// keeps them resident when the weights take at most 80 % of the free device memory.
enum class CudaResidency { automatic, resident, streamed };

struct CudaLlamaOptions {
    CudaPrecision precision = CudaPrecision::fp32;
    CudaResidency residency = CudaResidency::automatic;
    CudaLinearFactory linears;  // empty: dense linears in `precision`
};

class CudaLlama {
public:
    // From an in-memory model; in streamed residency `m` must outlive this object.
    explicit CudaLlama(const LlamaModel& m, CudaLlamaOptions opt = {});
    // From a checkpoint reader (no host copy of the whole model); in streamed residency `r` must outlive this.
    explicit CudaLlama(const ModelReader& r, CudaLlamaOptions opt = {});
    CudaLlama(const CudaLlama&) = delete;
    CudaLlama& operator=(const CudaLlama&) = delete;

    const LlamaConfig& config() const { return config_; }
    CudaPrecision precision() const { return opt_.precision; }
    bool streamed() const { return streamed_; }
    size_t weight_bytes() const;  // device bytes of the weights held now
    const CudaBlas& blas() const { return blas_; }
    CudaBlockScratch& scratch() { return scratch_; }

    // Logits of positions first_pos..n_tok−1 of every sequence, [n_seq, n_tok − first_pos, vocab], like the
    // CPU forward_logits. The device variant returns a pointer into this object's buffer, valid until the
    // next call (not synchronized: use it on blas().stream()).
    std::vector<float> forward_logits(const int32_t* tokens, BatchShape shape, int64_t first_pos = 0);
    void forward_logits(const int32_t* tokens, BatchShape shape, int64_t first_pos, float* host_logits);
    const float* forward_logits_device(const int32_t* tokens, BatchShape shape, int64_t first_pos = 0);

    // Scores positions first_pos … first_pos + n_score − 1 of every sequence on the device, where their
    // logits are (token_nll_rows_cuda: token_score's arithmetic, see token_nll_cuda.cuh for the rounding):
    // nll [n_seq, n_score] = −log softmax[targets], argmax [n_seq, n_score] when not null. Only these come
    // back to the host (synchronized). 0 ≤ n_score ≤ n_tok − first_pos; targets [n_seq, n_score] are host
    // ids, checked against the vocabulary (input error naming the position).
    void forward_nll(const int32_t* tokens, BatchShape shape, int64_t first_pos, int64_t n_score, const int32_t* targets,
                     double* nll, int32_t* argmax = nullptr);

private:
    void init(CudaResidency residency, size_t free_bytes);
    void upload_block(CudaBlockWeights& dst, int64_t layer) const;

    LlamaConfig config_;
    CudaLlamaOptions opt_;
    const LlamaModel* host_model_ = nullptr;
    const ModelReader* reader_ = nullptr;
    bool streamed_ = false;
    CudaBlas blas_;
    CudaHeadWeights head_;
    std::vector<CudaBlockWeights> blocks_;  // all layers (resident) or one reused block (streamed)
    CudaBlockScratch scratch_;
    DeviceBuffer<float> hidden_, logits_;
    DeviceBuffer<int32_t> targets_, argmax_;  // forward_nll
    DeviceBuffer<double> nll_;
};

// CudaLlama as the evaluator's logits provider (model/eval.h): the same perplexity/KLD code serves both
// devices. `m` must outlive the function.
WindowLogitsFn cuda_window_logits(CudaLlama& m);
// CudaLlama as the evaluator's scoring provider (CudaLlama::forward_nll): evaluate_perplexity uses it when
// it needs no logits on the host. Per position, |Δnll| against host scoring of the same logits is within a
// few FP32 ulps of the operands and 0 in nearly all positions (token_nll_cuda.cuh). `m` must outlive it.
WindowNllFn cuda_window_nll(CudaLlama& m);

}  // namespace lowbit
