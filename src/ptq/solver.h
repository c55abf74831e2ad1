// solver.h — the per-layer solvers of post-training quantization (turboboa.md §2–4), on the CPU in FP32
// with FP64 factorizations:
//   GPTQ      column sweep with lazy blocks of 128, act-order, grids at the group (GPTQ) or up front
//             (static groups), dead inputs, relative damping; the GPTAQ column term P of TurboBoA's F2.
//   BoA / TurboBoA F1  rows of a head quantized N at a time (N = 1 is BoA) with the closed-form
//             compensation of the remaining rows through chol_U(H_out⁻¹) (Prop. 3.1; one factorization
//             serves every row block), F2's propagated-error term (Prop. 3.2), F3a adaptive grids
//             (each row block's grids fitted from its compensated rows; fixed-grid mode: from the original W).
//   F3b       coordinate-descent refinement of each (row, group) scale with the codes fixed (Prop. 3.3),
//             also for group-wise grids; on formats whose scales are quantized (FP16, E8M0, UE4M3, K-quant
//             6-bit sub-scales) the step is projected onto that scale grid and kept only if it lowers the loss.
//
// Conventions: W is row-major [rows = out-channels, cols = in-channels]; H_in [cols, cols]; H_out per head
// [hd, hd]; D (F2) [cols, cols] already scaled by α. All Hessians use the 2/T token normalisation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptq/grid.h"

namespace lowbit {

// chol_U(H⁻¹) (H⁻¹ = UᵀU, U upper) of a symmetric n × n matrix, computed in FP64 (LAPACK potrf/potri).
// Before factorizing: dead inputs (H_jj == 0) get `dead_value` on the diagonal; then H += damping·mean(diag)·I;
// on failure another `damping` is added, up to 50 times, before Error(input) naming `what`.
// NaN/Inf in H: Error(input) naming `what`.
struct InverseCholesky {
    std::vector<float> u;          // [n, n] row-major, upper triangle (zeros below)
    std::vector<double> h_inv;     // [n, n] H⁻¹ (damped), kept for F2's D·H⁻¹
    std::vector<uint8_t> dead;     // [n] inputs that were dead
    double damping = 0;            // the relative damping that succeeded (0.01 unless retried)
    int retries = 0;
};
InverseCholesky inverse_cholesky(const float* h, int64_t n, double damping, float dead_value, const std::string& what);

struct SweepOptions {
    int64_t lazy_block = 128;
    bool act_order = false;         // columns by descending diag(H_in); grids then fitted up front
    bool grids_up_front = false;    // static groups: every grid fitted from the sweep's input W first
};

// Statistics of one solve, for the report.
struct SolveStats {
    double loss = 0;          // Σ_rows (w − q)²/U_cc² / 2 (GPTQ's error) — the layer's proxy loss
    double damping = 0;       // relative damping used for H_in
    int retries = 0;          // extra damping steps needed
    int64_t dead = 0;         // dead input columns
};

// One layer's problem. Pointers are borrowed; h_in (cols × cols) is required except for RTN.
struct LayerProblem {
    const float* w = nullptr;          // [rows, cols] the full-precision weights
    int64_t rows = 0, cols = 0;
    const float* h_in = nullptr;       // [cols, cols] one input Hessian for every row …
    const float* h_in_heads = nullptr; // … or per head of `head_rows` rows: [rows / head_rows, cols, cols] (v with block_v)
    const float* h_out = nullptr;      // [rows / head_rows, head_rows, head_rows] q/k (two-sided); null: one-sided
    int64_t head_rows = 0;             // rows per head (needed with h_in_heads or h_out)
    const float* d = nullptr;          // [cols, cols] F2's α·D_raw, D_raw = 2/T (X̃ − X)Xᵀ (per head like h_in_heads
                                       // when h_in_heads is set); null: no F2
    std::string name;                  // "blk.3.attn_q", for messages
};

struct SolverOptions {
    GridSpec grid;
    SweepOptions sweep;
    double damping = 0.01;
    float dead_value = 1.0f;     // H_jj for dead inputs (GPTQ: 1; BoA/TurboBoA: 1/seqlen)
    int64_t row_block = 16;      // N of TurboBoA's F1 (1 = BoA)
    bool adaptive_grid = true;   // F3a (false: the fixed-grid mode of the paper's ablations)
    bool refine_scales = false;  // F3b
    int refine_iters = 1;
};

QuantizedWeight solve_rtn(const LayerProblem& p, const GridSpec& g, SolveStats* stats = nullptr);
// GPTQ (one-sided; with p.d: GPTAQ's column term, TurboBoA's F2 on one-sided layers).
QuantizedWeight solve_gptq(const LayerProblem& p, const SolverOptions& o, SolveStats* stats = nullptr);
// BoA / TurboBoA: two-sided when p.h_out is set (row blocks of o.row_block), one-sided otherwise; F2 when
// p.d is set; F3b when o.refine_scales.
QuantizedWeight solve_turboboa(const LayerProblem& p, const SolverOptions& o, SolveStats* stats = nullptr);

// The layer's loss tr(H_out ΔW H_in ΔWᵀ) − 2 tr(H_out W D ΔWᵀ) (turboboa.md §4.1; H_out = I when null,
// D = 0 when null), in double: what every solver decreases; used by the tests and the report.
double layer_objective(const LayerProblem& p, const std::vector<float>& q);

}  // namespace lowbit
