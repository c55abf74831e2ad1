// calibration_cuda.cuh — the calibration paths of post-training quantization on the GPU (ptq/calibration.h's
// CalibrationPaths): Xq and Xfp stay in device memory for the whole run; each block is uploaded once
// (CudaBlockWeights, FP32 or BF16 per CudaPrecision), run by cuda_block_forward over batches of windows,
// and its statistics are accumulated on the device from the forward's scratch (in BF16 precision with the
// forward's tensor-core attention, CudaBlockScratch::tensor_core_attention):
//   H_in (four inputs)       cuBLAS SSYRK, FP32 sums (symmetrised at the end); in BF16 precision of the BF16
//                             copies the layers multiply, on the BF16 tensor cores (cublasGemmEx: exact
//                             products, FP32 accumulation) — 10× the FP32 rate on the largest product
//                             (the others stay FP32, of the FP32 activations)
//   post-RoPE q/k covariances SSYRK per head (strided views of q, k)
//   block_v                   per (window, query head): S = Q_h·K_gᵀ (SGEMM), the causal softmax of
//                             attention_probabilities (a kernel, FP32 exp, FP64 row sums), A·X and (A·X)ᵀ(A·X);
//                             or per (window, KV group) Xᵀ·(M·X) with M = Σ_h AᵀA (T × T): 2.4× fewer FLOPs at
//                             the 8B shape with T = 2048 (ValueProducts; automatic: the smaller count)
//   F2's D terms              (x̃ − x)ᵀx; block_v's per head (Ã·X̃ − A·X)ᵀ(A·X), or per group X̃ᵀ·(N·X) − Xᵀ·(M·X)
//                             with N = Σ_h ÃᵀA
//   The products of the last two are SGEMM/SSYRK in FP32 precision; in BF16 precision they run on the TF32
//   tensor cores (FP32 data, inputs rounded to 11 significant bits, FP32 accumulation; the Gram product as a
//   full GEMM): 8× the FP32 rate on what was 3/4 of TurboBoA's calibration time (8B: ≈ 5.6e14 FLOP per block),
//   and finer than the BF16 activations they multiply.
// then copied to the host once per block and finished by finish_block_statistics (2/T scaling, RoPE
// averaging, GQA folding) — the CPU path's code. True-sequential passes (BlockStatsOptions::inputs) take one
// input's statistics each, upload the partly quantized block as the quantized path's own copy, stop the forwards
// where their scratch is complete (BlockStop) and advance Xfp only in the last pass. The only host↔device traffic per block is the block's
// weights and its statistics (plus the activations at checkpoints). phases() says where the time went
// (CUDA events around the forwards and the products, host clocks around the transfers).
//
// Agreement with the CPU paths (tests/cuda/test_ptq_cuda.cu): FP32 statistics equal BlockStatsAccumulator's
// within FP32 summation order (relative 1e-4 of the largest entry on tiny random models); BF16 is faster
// and only as exact as the BF16 forward (forward_cuda.cuh states it).
#pragma once

#include <memory>

#include "model/cuda/linear_cuda.cuh"
#include "ptq/calibration.h"

namespace lowbit {

// With `activations` (W·A calibration, --act-bits) the quantized path runs activation-quantized linears
// (cuda_fake_quant_linears) and its statistics are taken of the quantized inputs, as cpu_calibration_paths
// does; the full-precision path stays unquantized. The format needs a CUDA quantizer (format_roundtrip_cuda).
// value_products (ptq/calibration.h): how block_v's products are associated; `automatic` takes
// block_v_by_group_takes_fewer_flops, as the CPU does. The GPU tests run both forms.
std::unique_ptr<CalibrationPaths> cuda_calibration_paths(const LlamaConfig& c, int64_t batch,
                                                         CudaPrecision precision = CudaPrecision::fp32,
                                                         const QuantSpec& activations = {},
                                                         ValueProducts value_products = ValueProducts::automatic);

}  // namespace lowbit
