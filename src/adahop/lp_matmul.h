// lp_matmul.h — AdaHOP's low-precision GEMM C = A·B (A: M×K, B: K×N, row-major) with both operands
// quantized to an MX format (MXFP4 by default; any MX element or NVFP4) in blocks along the reduction
// dimension K, under a Strategy (strategy_plan.h), FP32 accumulation, FP32 or BF16 output.
//   plain        C = deq(Q(A)) · deq(Q(B))
//   iht          C = deq(Q(A·H)) · deq(Q(H·B))                 H = block-diagonal H₃₂ along K
//   iht_oe_left  (Ac, As, i) = top-k rows of A;  C = deq(Q(Ac·H))·deq(Q(H·B));  C[i,:] = As·B  (high precision)
//   iht_oe_right (Bc, Bs, j) = top-k cols of B;  C = deq(Q(A·H))·deq(Q(H·Bc));  C[:,j] = A·Bs
//   full         C = bf16(A) · bf16(B)
//   oht          C = H_M · (deq(Q(H_M·A)) · deq(Q(B·H_N))) · H_N  (full-dimension Hadamards of M and N;
//                analysis only — it rotates outer dimensions, which is what HALO does)
// Random signs (opts.random_signs_seed ≠ 0; Tseng et al.'s randomized Hadamard): the iht family rotates by
// H·S instead of H, with S = diag(s_0 … s_{K−1}) along K and the same S on both operands, so
//   (A·S·H)(H·S·B) = A·B  before quantization;  s_k = hadamard_random_sign(seed, k)
//                  = (counter_random24(seed, k) & 1) ? −1 : +1   (hadamard/hadamard.h, core/counter_rng.h),
// k = 0 … K−1 the global index along K (column of A, row of B) — exactly hadamard_transform's randomized
// block transform with that seed and no permutation. OE extracts from the unsigned operand first (the slices
// stay A's rows / B's columns); plain, full and oht ignore the seed.
// "High precision" is BF16 (operands rounded to BF16, FP32 accumulation) unless opts.high_precision_bf16
// is false (then FP32: the slivers are exact). With opts.quantize = false every strategy returns A·B up
// to FP32 rounding (Hadamards are orthonormal and OE slices are exact).
//
// For training, an operand can be prepared once (quantized, rotated, split) and saved instead of its
// BF16 original — PreparedOperand holds exactly what the GEMM needs, and storage_bytes() counts it.
#pragma once

#include <cstdint>
#include <vector>

#include "adahop/outlier_extraction.h"
#include "adahop/strategy_plan.h"
#include "formats/format_registry.h"
#include "formats/nvfp4.h"

namespace lowbit {

constexpr int64_t kIhtBlock = 32;

struct LpMatmulOptions {
    bool quantize = true;
    bool nvfp4 = false;                         // NVFP4 instead of MX
    MxElement element = MxElement::e2m1;        // MX element type
    ScaleRule scale_rule = kDefaultScaleRule;
    Rounding rounding_a = Rounding::nearest_even;  // stochastic rounding is switchable per operand
    Rounding rounding_b = Rounding::nearest_even;
    uint64_t seed_a = 0, seed_b = 1;
    int64_t oe_k = 64;
    OutlierMetric oe_metric = OutlierMetric::l2;
    bool high_precision_bf16 = true;
    bool output_bf16 = false;
    // Random signs along K for iht / iht_oe_left / iht_oe_right (see the top of this file): 0 = none. A run
    // draws one per slot; keep it apart from seed_a/seed_b (the same generator draws the rounding bits).
    uint64_t random_signs_seed = 0;
};

// The random-signs seed strategy s applies under opts: opts.random_signs_seed for the iht family, else 0.
inline uint64_t applied_random_signs_seed(Strategy s, const LpMatmulOptions& opts) {
    const bool iht_family = s == Strategy::iht || s == Strategy::iht_oe_left || s == Strategy::iht_oe_right;
    return iht_family ? opts.random_signs_seed : 0;
}

enum class Side : uint8_t { left, right };

// What a prepared operand holds, in one template for the CPU reference (HostBuffer) and the CUDA path
// (DeviceBuffer: PreparedOperandCuda in lp_matmul_cuda.cuh), so the two agree field for field and byte for
// byte (the GPU tests compare them so).
template <typename T>
using HostBuffer = std::vector<T>;

template <template <typename> class Buffer>
struct PreparedOperandOf {
    Side side = Side::left;
    Strategy strategy = Strategy::iht;
    int64_t rows = 0, cols = 0;
    bool quantized = false;               // codes/scales hold the (rotated, cleaned) operand
    bool nvfp4 = false;                   // NVFP4 instead of MX
    MxElement element = MxElement::e2m1;  // MX element type
    uint64_t random_signs_seed = 0;       // the signs applied along K (applied_random_signs_seed), 0 = none
    // Blocked along K ([outer][inner]; left: outer = rows, right: outer = cols), as the quantize kernels
    // write them: element codes (E2M1 packed two per byte, low nibble first; others one per byte), one
    // scale byte per block (E8M0, or E4M3 for NVFP4), NVFP4's FP32 tensor scale (one value).
    Buffer<uint8_t> codes, scales;
    Buffer<float> tensor_scale;
    Buffer<float> dense;           // opts.quantize = false: the transformed operand, unrounded (row-major)
    Buffer<float> high_precision;  // the whole operand (BF16-rounded) when the strategy needs it
    Buffer<float> slice;           // OE: rows of A (k × K) or columns of B (K × k)
    Buffer<int32_t> indices;       // OE: the first k_extracted entries are the selected rows / columns
    int64_t k_extracted = 0;

    // What it takes to keep it for a backward pass: quantized bytes, 2 per BF16 value, 4 per index.
    size_t storage_bytes() const {
        const size_t q = quantized ? codes.size() + scales.size() + 4 * tensor_scale.size() : 0;
        return q + 2 * (high_precision.size() + slice.size()) + 4 * size_t(k_extracted);
    }
};

using PreparedOperand = PreparedOperandOf<HostBuffer>;

// One call site's tally in the census of the MX tensor-core GEMM (LpMatmulCuda::set_mx_census; CUDA only, declared
// here so host-only code such as the Trainer interface can carry it).
struct MxCensusTally {
    int64_t calls = 0;         // main products run on the tensor cores
    int64_t units = 0;         // their window units (MxGemmWindowGeometry; INT8 stages: (operand, tile, chunk) triples)
    int64_t off_window = 0;    // of those, outside the window
    int64_t tile_chunks = 0;       // their (128 × 128 output tile, 256-deep chunk) pairs (INT8 stages only)
    int64_t slow_tile_chunks = 0;  // of those, computed block by block (the A or B tile's chunk outside the window,
                                   // or both with two planes)
    int64_t two_plane_tile_chunks = 0;  // of those, chained with two planes (one of the two tiles' chunk has two)
};

PreparedOperand lp_prepare(const float* t, int64_t rows, int64_t cols, Side side, Strategy s, const LpMatmulOptions& opts);
// c: M×N row-major. The operands must have been prepared for the same strategy, random signs and matching K.
void lp_matmul_prepared(const PreparedOperand& a, const PreparedOperand& b, const LpMatmulOptions& opts, float* c);
void lp_matmul(const float* a, const float* b, int64_t m, int64_t k, int64_t n, Strategy s, const LpMatmulOptions& opts,
               float* c);

}  // namespace lowbit
