// lp_matmul_cuda.cuh — the CUDA path of AdaHOP's low-precision GEMM (CPU reference: adahop/lp_matmul.h),
// by emulation: rotate (block-32 Hadamard along K, after the random signs when opts.random_signs_seed ≠ 0),
// quantize (MX or NVFP4, bit-identical to the CPU), dequantize to BF16 (exact for every MX element type) and
// multiply with cuBLAS BF16 → FP32 accumulation.
// NVFP4 values (E2M1 × E4M3 × FP32) are not exact in BF16, so NVFP4 runs the product in FP32 (cuBLAS SGEMM).
// OE slivers and the full strategy use BF16 operands (or FP32 when opts.high_precision_bf16 is false).
// OHT (analysis only) rotates M and N with dense Hadamard products (cuBLAS) instead of a fast transform.
// With set_tensor_core_mx(true), MXFP4 × MXFP4 main products (K a multiple of 32, sm_90a) run on the FP8
// tensor cores instead (adahop/cuda/mx_gemm_fp8.cuh: exact block sums, the same result up to FP32 summation
// order). Off by default: the emulation is faster today. MXFP8 always stays emulated (its tensor-core block
// sums are not exact).
//
// Prepared operands hold what a backward pass needs (codes, scales, BF16 slices, indices) on the device.
// The emulated product dequantizes both operands to BF16 in their stored order ([outer][K]) and multiplies
// them with one cuBLAS TN call straight into the caller's output where no sliver or rounding follows.
// BF16 operands (prepare_bf16, the training engine's): quantized from the BF16 tensor as it lies in memory,
// the operand or its transpose, without FP32 copies where the strategy allows (see there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "adahop/cuda/mx_gemm_fp8.cuh"
#include "adahop/cuda/outlier_extraction.cuh"
#include "adahop/lp_matmul.h"
#include "core/cuda_device.h"

namespace lowbit {

// The device twin of PreparedOperand (the same template, adahop/lp_matmul.h), in the blocked layout of
// mx_quantize.cuh / nvfp4_quantize.cuh, plus one view: an operand prepared from BF16 (prepare_bf16) that needs
// its whole value in high precision (strategy full; the side of an OE product that is not extracted) refers to
// the caller's BF16 tensor instead of copying it to high_precision, when the options keep slivers in BF16 —
// valid while the caller's tensor is (the training engine prepares and multiplies such operands in one call).
struct PreparedOperandCuda : PreparedOperandOf<DeviceBuffer> {
    const __nv_bfloat16* high_precision_bf16 = nullptr;  // the operand (rows × cols) or, transposed, its transpose
    bool high_precision_transposed = false;
};

// Where a product goes: exactly one of f32 / bf16. FP32: C = A·B + beta·f32 (beta = 0 overwrites); BF16: A·B
// rounded to nearest even.
struct LpMatmulOutput {
    float* f32 = nullptr;
    __nv_bfloat16* bf16 = nullptr;
    float beta = 0.0f;
};

// Scratch of the emulated GEMM on one stream (cuBLAS through the device's shared handle: core/cuda_blas.h).
class LpMatmulCuda {
public:
    explicit LpMatmulCuda(cudaStream_t stream = 0);
    ~LpMatmulCuda();
    cudaStream_t stream() const;
    LpMatmulCuda(const LpMatmulCuda&) = delete;
    LpMatmulCuda& operator=(const LpMatmulCuda&) = delete;

    // t: device, row-major rows × cols FP32. Asynchronous on stream().
    PreparedOperandCuda prepare(const float* t, int64_t rows, int64_t cols, Side side, Strategy s, const LpMatmulOptions& opts);
    // prepare() of an operand held in BF16: t is the operand (rows × cols, row-major) or, with t_transposed,
    // its transpose (cols × rows, row-major). Writes into p, whose buffers are reused when their sizes repeat
    // (a caller preparing same-shaped operands every step allocates once); asynchronous. The same bytes as
    // prepare() of the operand's FP32 values. MX plain, MXFP4 iht (random signs on a BF16 copy) and MXFP4
    // iht+OE with the L2 metric and no random signs — with stochastic rounding only untransposed: its counters
    // follow the element order — quantize straight from t, rotation and outlier scores fused
    // (hadamard/cuda/hadamard_mxfp4.cuh, outlier_extraction.cuh); every other case takes an FP32 copy first.
    void prepare_bf16(PreparedOperandCuda& p, const __nv_bfloat16* t, bool t_transposed, int64_t rows, int64_t cols, Side side,
                      Strategy s, const LpMatmulOptions& opts);
    // c: device, M × N FP32.
    void matmul_prepared(const PreparedOperandCuda& a, const PreparedOperandCuda& b, const LpMatmulOptions& opts, float* c);
    void matmul_prepared(const PreparedOperandCuda& a, const PreparedOperandCuda& b, const LpMatmulOptions& opts,
                         const LpMatmulOutput& out);
    void matmul(const float* a, const float* b, int64_t m, int64_t k, int64_t n, Strategy s, const LpMatmulOptions& opts, float* c);

    // The main product of prepared MXFP4 operands on the tensor cores (on; `fold` picks mx_gemm_fp8's schedule) or by
    // BF16 emulation (off, the default).
    void set_tensor_core_mx(bool on, MxGemmFold fold = MxGemmFold::b_columns);
    bool uses_tensor_core_mx(const PreparedOperandCuda& a, const PreparedOperandCuda& b) const;

    // Census of the tensor-core products' window, per call site (MxCensusTally): how many of each product's window
    // units (MxGemmWindowGeometry; INT8 stages: (operand, 128-line tile, 256-deep chunk) triples) fell outside the
    // window (mx_gemm_fp8_unfolded_blocks), and how many of its (output tile, chunk) pairs that sent to the slow
    // per-block path.
    // Off by default: nothing is counted or launched. set_mx_census(sites) turns it on with `sites` zeroed tallies
    // (0 turns it off); set_mx_census_site picks the tally the following main products add to (-1, the default:
    // none). A product on the tensor cores at a site then adds its denominators on the host and enqueues one
    // one-CTA kernel that adds the call's device counter and chunk bits into the site's device tally (no
    // synchronization). mx_census() synchronizes the stream and returns the tallies (empty when off).
    void set_mx_census(int sites);
    void set_mx_census_site(int site);
    std::vector<MxCensusTally> mx_census() const;

    // C (m × n) = A (m × k) · B (k × n), row-major FP32 in and out; BF16 operands (values must be exact in
    // BF16 — callers round first) or FP32 ones.
    void gemm(const float* a, const float* b, int64_t m, int64_t k, int64_t n, bool bf16_operands, float* c);
    // The same with BF16 operands as stored: A (m × k) row-major or, a_transposed, Aᵀ (k × m) row-major; B alike.
    void gemm_bf16(const __nv_bfloat16* a, bool a_transposed, const __nv_bfloat16* b, bool b_transposed, int64_t m, int64_t k,
                   int64_t n, float* c);

private:
    void prepare_f32(PreparedOperandCuda& p, const float* t, float* work, int64_t rows, int64_t cols, Side side, Strategy s,
                     const LpMatmulOptions& opts);
    struct State;
    std::unique_ptr<State> st_;
};

}  // namespace lowbit
