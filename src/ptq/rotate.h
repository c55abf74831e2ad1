// rotate.h — QuaRot-style computational-invariance rotations fused into the weights of a Llama-family
// model, so that post-training quantization sees weights without outlier channels and the exported GGUF
// still runs in plain llama.cpp (no online transform anywhere).
//
// Row-vector convention of the forward (y = x·Wᵀ, W row-major [out, in]). With M the orthonormal
// (randomized) Hadamard of hadamard.h that the library applies to every d-indexed vector, Q = Mᵀ and:
//   1. fuse_rms_norms: RMSNorm(x)·diag(g)·Wᵀ = RMSNorm(x)·(W·diag(g))ᵀ, so every norm weight g moves into
//      the columns of the linears that read it (attn_norm → wq, wk, wv; ffn_norm → w_gate, w_up;
//      output_norm → the output head) and becomes 1.
//   2. R1, residual stream x' = x·Q (d × d): token_embd rows e ← e·Q; readers wq, wk, wv, w_gate, w_up
//      and the head W ← W·Q; writers wo, w_down W ← Qᵀ·W. A unit-weight RMSNorm commutes with Q
//      (‖x·Q‖ = ‖x‖), so every block input, output and the logits are unchanged. Biases of q/k/v live in
//      the projection's output space and are unchanged.
//   3. R2, per attention head, v' = v·H (head_dim × head_dim) for every kv head: wv rows and bv ← Hᵀ·(·)
//      per head; the head's columns of wo for every query head that reads the kv head ← wo_h·H. Softmax
//      weights do not see v, so attention outputs are ctx·H and wo undoes it. All heads use the same H,
//      which is what makes GQA work (query heads sharing a kv head take the same inverse).
// Not done, because llama.cpp would then need an online transform (interop.md §7.7): QuaRot's R4 (an
// online Hadamard of the SwiGLU output before down_proj) and R3 (post-RoPE q/k, only for KV-cache
// quantization). Activations entering down_proj therefore keep their outliers.
//
// Rotations are meant to precede an error-compensating quantizer (GPTQ/BoA/TurboBoA, turboboa.md §5),
// not plain round-to-nearest. Measured on SmolLM2-135M (tests/test_ptq_rotate.cpp, sotu-test 2×256):
// RTN mxfp4 of the projections gives PPL 31.1 as loaded but 52.9 after r1+r2, although the weight error
// is unchanged (rel. 0.114 vs 0.113); norm fusion alone gives 33.8, R2 alone 30.3 (fp32: 23.0). The
// readers cause it (only q/k/v/gate/up quantized: 27.0 → 44.2; only o/down: 25.6 → 25.2), and their
// input is far from isotropic: a massive residual channel (rms 12–18 against a median 0.5 after the norm;
// the BOS token has ≈ 98 % of its energy in one channel). Likely mechanism (inferred, not isolated):
// unrotated, the weights reading that channel keep their own small RTN errors; R1 makes the weight
// error isotropic and so puts a typical error on the direction the activations are largest in.
//
// Tied embeddings: the rotated embedding is e·Q while the head is E·diag(output_norm)·Q, two different
// matrices, so R1 unties the model: weights.output gets its own [vocab, d] tensor and
// config.tied_embeddings becomes false. The exported GGUF then has `output.weight` (SmolLM2-135M:
// +28.3 M parameters, ≈ +16 MB at Q4_0) and llama.cpp loads it as an untied model.
//
// Sizes: d and head_dim must be Hadamard orders the library supports (hadamard_orders.h: 2^k or m·2^k,
// m a base order); SmolLM2-135M (d 576 = 36·16, head_dim 64) is. Otherwise Error(usage) with the
// library's advice, before anything is changed; residual_block gives a block-diagonal R1 (still
// orthonormal, still invariant) for dimensions like 896 = 7·128.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace lowbit {

struct RotationOptions {
    bool residual = true;        // R1 on the residual stream (fuses the RMSNorm weights first)
    bool head = true;            // R2 per attention head on wv / wo
    bool randomized = true;      // random Hadamard H·D (seeded ±1 signs), as QuaRot; false: plain Hadamard
    uint64_t seed = 0;           // R1 uses it as is, R2 salted (rotation_head_seed) so the two differ
    int64_t residual_block = 0;  // 0: one d×d rotation; B: block-diagonal R1 with blocks of B (B | d)
};

// Where a rotation acts: the residual stream (n = hidden_size) or one attention head (n = head_dim).
enum class RotationSite { residual, head };

// The seed of the R2 transform for a rotation seed.
uint64_t rotation_head_seed(uint64_t seed);

// Error(usage) naming the dimension and the Hadamard library's advice when `c` cannot be rotated with
// `opt` (also usable before the weights are loaded).
void check_rotation_supported(const LlamaConfig& c, const RotationOptions& opt);

// Step 1 alone: moves every RMSNorm weight into the linears that read it and sets the norms to 1;
// unties tied embeddings (see above). Logits are unchanged up to FP32 rounding.
void fuse_rms_norms(LlamaModel& m);

// Steps 1–3 as `opt` selects them, in place. Checks the weights' shapes (Error(input)) and the sizes
// (Error(usage)) first: on failure the model is unchanged.
void rotate_model(LlamaModel& m, const RotationOptions& opt);
// rotate_model in parts, for a model read block by block: rotate_head on the embeddings, final norm and head
// (the model's blocks are not touched; they may be empty) and rotate_block on each block as it is read.
// rotate_head then every rotate_block equals rotate_model.
void rotate_head(LlamaModel& m, const RotationOptions& opt);
void rotate_block(const LlamaConfig& c, BlockWeights& b, const RotationOptions& opt);

// The rotation a site applies, as an explicit n×n row-major matrix: residual Q (x' = x·Q), head H
// (v' = v·H). Built by transforming the identity, so it is exactly what rotate_model applies (for tests
// and diagnostics; rotate_model itself never forms it).
std::vector<float> rotation_matrix(const RotationOptions& opt, RotationSite site, int64_t n);

// One line for metadata and logs: "hadamard r1+r2 seed 0", "hadamard r1 block 128 seed 3",
// "hadamard r2 unrandomized", "none".
std::string describe(const RotationOptions& opt);

}  // namespace lowbit
