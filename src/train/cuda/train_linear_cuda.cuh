// train_linear_cuda.cuh — the training seam of a linear layer on the GPU: the three GEMMs of y = x·Wᵀ
// (train/train_linear.h defines them on the CPU)
//   forward          Y  = X·Wᵀ     X [M, K], W [N, K] (nn.Linear layout), Y [M, N]
//   backward_data    dX = dY·W     dY [M, N] → dX [M, K]
//   backward_weight  dW = dYᵀ·X    → dW [N, K] (FP32, `+ beta·dW`: gradients of tied or shared tensors add)
// with BF16 operands (the engine's activations and its BF16 weight copies) under a Strategy:
//   full             cuBLAS BF16 × BF16 → FP32 accumulation (the bf16 recipe, the LM head, calibration)
//   any other        AdaHOP's lp_matmul on the GPU (adahop/cuda/lp_matmul_cuda.cuh: Hadamard, MX quantization,
//                    OE, then the exact MXFP4 GEMM on the FP8 tensor cores, or its BF16 emulation) on the
//                    BF16 tensors as they lie (LpMatmulCuda::prepare_bf16: Wᵀ and dYᵀ are the transposes
//                    of W and dY), with per-call operands kept and reused from call to call.
// Outputs: Y and dX into a BF16 tensor or into an FP32 one with `+ beta·out` (beta = 1 fuses the residual add
// and sums the input gradient of the projections that read one input).
//
// cuBLAS is column-major; a row-major [R, C] matrix is its column-major transpose, so (row-major)
//   Y = X·Wᵀ  ⇔  Yᵀ = W·Xᵀ:   gemm(T, N, m = N, n = M, k = K, A = W (ld K), B = X (ld K), C = Y (ld N))
//   dX = dY·W ⇔  dXᵀ = Wᵀ·dYᵀ: gemm(N, N, m = K, n = M, k = N, A = W (ld K), B = dY (ld N), C = dX (ld K))
//   dW = dYᵀ·X ⇔ dWᵀ = Xᵀ·dY:  gemm(N, T, m = K, n = N, k = M, A = X (ld K), B = dY (ld N), C = dW (ld K))
// cuBLAS gives bit-identical results run to run on one GPU model (its documented reproducibility), which
// bit-exact resume relies on; the emulated path is deterministic as lp_matmul is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "adahop/cuda/lp_matmul_cuda.cuh"
#include "adahop/lp_matmul.h"
#include "adahop/strategy_plan.h"
#include "core/cuda_device.h"
#include "train/cuda/train_ops_cuda.cuh"

namespace lowbit {

// Where a GEMM writes: exactly one of f32 / bf16; beta applies to f32 only.
using TrainGemmOut = LpMatmulOutput;

// The low-precision options of one call (strategy, rounding, seeds); ignored under Strategy::full.
struct TrainGemmMode {
    Strategy strategy = Strategy::full;
    LpMatmulOptions lp;
};

class CudaTrainGemm {
public:
    explicit CudaTrainGemm(cudaStream_t stream);
    ~CudaTrainGemm();
    CudaTrainGemm(const CudaTrainGemm&) = delete;
    CudaTrainGemm& operator=(const CudaTrainGemm&) = delete;

    void forward(const TrainGemmMode& mode, const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t m, int64_t k,
                 int64_t n, TrainGemmOut y);
    void backward_data(const TrainGemmMode& mode, const __nv_bfloat16* dy, const __nv_bfloat16* w, int64_t m, int64_t k,
                       int64_t n, TrainGemmOut dx);
    void backward_weight(const TrainGemmMode& mode, const __nv_bfloat16* dy, const __nv_bfloat16* x, int64_t m,
                         int64_t k, int64_t n, float* dw, float beta);

    // The MX products on the tensor cores or by BF16 emulation (the default; LpMatmulCuda::set_tensor_core_mx).
    void set_tensor_core_mx(bool on, MxGemmFold fold = MxGemmFold::b_columns);
    // The census of the tensor-core products' window per call site (LpMatmulCuda::set_mx_census: off by default).
    void set_mx_census(int sites);
    void set_mx_census_site(int site);
    std::vector<MxCensusTally> mx_census() const;

    // AdaHOP's forward-time quantization (adahop.md §6): a tensor t [rows, cols] prepared now as the right
    // operand of a backward GEMM whose reduction runs along its rows — X [M, K] for wgrad (blocks along M),
    // W [N, K] for dgrad (blocks along N) — so the backward keeps codes, scales and OE slices instead of the
    // BF16 tensor. The same numbers as the backward quantizing the BF16 tensor itself (lp_matmul is
    // prepare + matmul_prepared). mode.strategy must not be Strategy::full.
    // Written into `saved`, whose buffers are reused when the shapes repeat (the trainer keeps one per slot).
    void prepare_saved(const TrainGemmMode& mode, const __nv_bfloat16* t, int64_t rows, int64_t cols, PreparedOperandCuda& saved);
    // The backward GEMMs on a saved operand (w: prepare_saved of W [N, K]; x: of X [M, K]).
    void backward_data(const TrainGemmMode& mode, const __nv_bfloat16* dy, const PreparedOperandCuda& w, int64_t m,
                       int64_t k, int64_t n, TrainGemmOut dx);
    void backward_weight(const TrainGemmMode& mode, const __nv_bfloat16* dy, const PreparedOperandCuda& x, int64_t m,
                         int64_t k, int64_t n, float* dw, float beta);

private:
    struct State;
    std::unique_ptr<State> st_;
};

// The probe of `lowbit train --probe-every` (which layers and slots carry a recipe's error): the relative
// error ‖C_mode − C_full‖_F / ‖C_full‖_F of one slot's product under each of `modes`, C_full the cuBLAS BF16
// product of the same BF16 operands (Strategy::full). The operands as the slot's call takes them:
//   Slot::fwd    a = X [m, k],  b = W [n, k]  → C [m, n]
//   Slot::dgrad  a = dY [m, n], b = W [n, k]  → C [m, k]
//   Slot::wgrad  a = dY [m, n], b = X [m, k]  → C [n, k]
// Each mode's product lands on a copy of C_full with beta = −1, so the difference is formed in FP32 without a
// kernel of its own. A zero C_full gives 0 where the mode's product is zero too, else infinity. Synchronizes
// `stream` (the GEMM's) to return the errors on the host; the scratch grows on demand.
struct SlotProbeScratch {
    DeviceBuffer<float> ref, diff;
    DeviceBuffer<double> sums;
    SumWorkspace ws;
};
// on_error (optional): called after each mode's product with the device arrays E = C_mode − C_BF16 and C_BF16 (the
// slot's output size each), before the next mode overwrites E; the stream is synchronized first.
using SlotErrorSink = std::function<void(size_t mode, const float* error, const float* ref, int64_t size)>;
std::vector<double> slot_relative_errors(CudaTrainGemm& gemm, Slot slot, const std::vector<TrainGemmMode>& modes,
                                         const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m, int64_t k, int64_t n,
                                         SlotProbeScratch& scratch, cudaStream_t stream, const SlotErrorSink& on_error = {});

// Device bytes a prepared operand holds (codes, scales, slices and indices as stored: FP32 slices count 4).
int64_t prepared_device_bytes(const PreparedOperandCuda& p);

// Bytes the backward of one linear layer keeps from its forward under the slot strategies of adahop.md §6
// (dgrad: W [N, K] quantized along N, wgrad: X [M, K] quantized along M; OE keeps a BF16 slice of k columns
// and its indices; BF16 slots keep the BF16 tensor), and what BF16 copies of X and W take (2·(M·K + N·K)).
// MXFP4: 4 bits per element + one E8M0 byte per 32.
int64_t saved_operand_bytes(Strategy dgrad, Strategy wgrad, int64_t m, int64_t k, int64_t n, int64_t oe_k);
inline int64_t saved_operand_bytes_bf16(int64_t m, int64_t k, int64_t n) { return 2 * (m * k + n * k); }

}  // namespace lowbit
