// solver.h — the per-layer solvers of post-training quantization (turboboa.md §2–4), on the CPU in FP32
// with FP64 factorizations:
//   GPTQ      column sweep with lazy blocks of 128, act-order, grids at the group (GPTQ) or up front
//             (static groups), dead inputs, relative damping; the GPTAQ column term P of TurboBoA's F2.
//   BoA / TurboBoA F1  rows of a head quantized N at a time (N = 1 is BoA) with the closed-form
//             compensation of the remaining rows through chol_U(H_out⁻¹) (Prop. 3.1; one factorization
//             serves every row block), F2's propagated-error term (Prop. 3.2), F3a adaptive grids
//             (each row block's grids fitted from its compensated rows; fixed-grid mode: from the original W);
//             optionally the rows of each head in order of descending diag(H_out) (act_order_row).
//   F3b       coordinate-descent refinement of each (row, group) scale with the codes fixed (Prop. 3.3),
//             also for group-wise grids; on formats whose scales are quantized (FP16, E8M0, UE4M3, K-quant
//             6-bit sub-scales) the step is projected onto that scale grid and kept only if it lowers the loss.
//
// Conventions: W is row-major [rows = out-channels, cols = in-channels]; H_in [cols, cols]; H_out per head
// [hd, hd]; D (F2) [cols, cols] already scaled by α. All Hessians use the 2/T token normalisation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gemm_cpu.h"
#include "ptq/grid.h"

namespace lowbit {

class SolverDevice;
struct InputSide;  // solver.cpp: one input Hessian (and D) factored and arranged for sweeps

// Factorizations shared by the layers that read the same statistics (q/k/v: one H_in; gate/up: one H_in):
// a solve whose (H_in, D, options) are in the cache reuses that factorization, and a solver device the factor
// it already holds. Keyed by the statistics' addresses: one cache per set of statistics (quantize_model
// keeps one per block).
using FactorCache = std::map<std::string, std::shared_ptr<const InputSide>>;

// chol_U(H⁻¹) (H⁻¹ = UᵀU, U upper) of a symmetric n × n matrix, computed in FP64 (LAPACK potrf/potri).
// Before factorizing: dead inputs (H_jj == 0) get `dead_value` on the diagonal; then H += damping·mean(diag)·I;
// on failure another `damping` is added, up to 50 times, before Error(input) naming `what`.
// NaN/Inf in H: Error(input) naming `what`.
struct InverseCholesky {
    std::vector<float> u;          // [n, n] row-major, upper triangle (zeros below); empty when not asked for and
                                   // the device keeps it (SolverDevice::keeps_factors)
    std::vector<double> h_inv;     // [n, n] H⁻¹ (damped), kept for F2's D·H⁻¹
    std::vector<uint8_t> dead;     // [n] inputs that were dead
    double damping = 0;            // the relative damping that succeeded (0.01 unless retried)
    int retries = 0;
};
// `device` (null: LAPACK on the CPU) runs the factorizations; without `want_h_inv` h_inv stays empty. Without
// `want_u`, a device that keeps its factors leaves u on the device (nothing crosses the bus).
// `factor_id` is passed on to the device (SolverDevice::inverse_cholesky_upper).
InverseCholesky inverse_cholesky(const float* h, int64_t n, double damping, float dead_value, const std::string& what,
                                 const SolverDevice* device = nullptr, bool want_h_inv = true, uint64_t factor_id = 0,
                                 bool want_u = true);

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
    // Wall-clock seconds by phase: preparing the input sides (factorizations, GPTAQ's P), the column sweeps
    // (with TurboBoA's row-block bookkeeping), F3b's refinement.
    double factor_seconds = 0, sweep_seconds = 0, refine_seconds = 0;
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

// One GPTQ column sweep (see sweep_rows in solver.cpp): n rows of w [n, cols] (host, sweep order; a scratch
// copy: afterwards it holds unspecified values) against chol_U(H⁻¹) u [cols, cols] (null when the device keeps
// the factor of input_id) and GPTAQ's p (or null), in lazy blocks of `block` columns; codes and loss go to
// `out` rows [row0, row0 + n) at original columns order[c].
// `fit_block(i1, i2)` fits the grids of the spans that start in [i1, i2) from w's current values (null:
// the grids are already in `out`); the device must bring those columns of w up to date on the host first.
// `input_id` names (u, p) for as long as they live, so a device may keep them between calls.
struct SweepCall {
    float* w = nullptr;
    int64_t n = 0, cols = 0, block = 128, row0 = 0;
    const float* u = nullptr;
    const float* p = nullptr;
    bool p_kept = false;  // GPTAQ's P of input_id is on the device (SolverDevice::keep_gptaq_terms); p is null
    uint64_t input_id = 0;
    const std::vector<int64_t>* order = nullptr;
    QuantizedWeight* out = nullptr;
    std::function<void(int64_t i1, int64_t i2)> fit_block;
};

// F3b's products for per-channel grids (one scale per row), the descent's only O(rows·cols²) work. Rows come
// in heads of hd (hd = 1: one-sided, every row its own head); rows [r, r + hin_rows) read the input Hessian
// h_in + (r / hin_rows)·cols² and, when d is set, F2's term d + (r / hin_rows)·cols². With A = diff·H_in + W·D and
// ZH = Z·H_in, per head and rows j, k of it: n[j·hd + k] = Z_j·A_kᵀ and g[j·hd + k] = Z_j·ZH_kᵀ.
struct ScaleRefineProducts {
    const float* z = nullptr;     // [rows, cols] level(code) − zero
    const float* diff = nullptr;  // [rows, cols] W − Q
    const float* w = nullptr;     // [rows, cols] the solve's W (read with d only)
    int64_t rows = 0, cols = 0, hd = 1, hin_rows = 0;
    const float* h_in = nullptr;  // [rows / hin_rows, cols, cols]
    const float* d = nullptr;     // same shape, or null (no F2)
    double* n = nullptr;          // [rows / hd, hd, hd]
    double* g = nullptr;          // [rows / hd, hd, hd]
};

// Where a solve's O(n³) work runs. Null in SolverOptions: the CPU (LAPACK, OpenBLAS, our threads).
// ptq/cuda/solver_cuda.cuh puts it on the GPU (cuSOLVER FP64, cuBLAS, a sweep kernel); the results equal
// the CPU's up to FP32 summation order (identical when a sweep fits in one lazy block).
class SolverDevice {
public:
    virtual ~SolverDevice() = default;
    // For the damped H = h (row-major n × n FP32, the diagonal of `dead` inputs replaced by dead_value) + damp·I,
    // factored in FP64: true and *u = chol_U(H⁻¹) rounded to FP32 (upper, zeros below) and, when h_inv is not
    // null, *h_inv = H⁻¹; false when H or H⁻¹ is not numerically positive definite.
    // `factor_id` (0: none) names the factor for later sweeps: a device may keep u for a sweep whose
    // input_id equals it instead of receiving it again. u may be null (the factor not wanted on the host) only
    // when keeps_factors() and factor_id != 0.
    virtual bool inverse_cholesky_upper(const float* h, int64_t n, const std::vector<uint8_t>& dead, float dead_value,
                                        double damp, std::vector<float>* u, std::vector<double>* h_inv,
                                        uint64_t factor_id) const = 0;
    // True when every factorization with a factor_id keeps its factor on the device for the sweeps of that id
    // until the next hold_inputs call (a block's solves), so that the host need not receive it.
    virtual bool keeps_factors() const { return false; }
    // F2's terms for the kept factor `id` (keeps_factors), made and kept on the device: D̂ = d (host n × n,
    // original order) in sweep order `order` with the columns of `dead` inputs (sweep order) zeroed, GPTAQ's
    // P = triu₁(D̂·Uᵀ)·U for the sweeps of id (SweepCall::p_kept) and, with want_rh, RH = D̂·H⁻¹ for rh_product.
    // False: this device leaves them to the host.
    virtual bool keep_gptaq_terms(uint64_t id, const float* d, int64_t n, const std::vector<int64_t>& order,
                                  const std::vector<uint8_t>& dead, bool want_rh) const {
        (void)id, (void)d, (void)n, (void)order, (void)dead, (void)want_rh;
        return false;
    }
    // c (host, rows × n) += a (host, rows × n) · RH of input `id`, kept by keep_gptaq_terms with want_rh.
    virtual void rh_product(uint64_t id, ConstMatF a, MatF c) const;  // default: Error(usage)
    // gemm_f32's contract.
    virtual void gemm(ConstMatF a, Trans ta, ConstMatF b, Trans tb, MatF c, float beta) const = 0;
    // sweep_rows' contract; returns the sweep's loss.
    virtual double sweep(const SweepCall& call) const = 0;
    // Where the Hessian-weighted grid search scores its candidates (its largest product); null: the CPU.
    virtual const GridScorer* grid_scorer() const { return nullptr; }
    // Host matrices (contiguous) that stay unchanged until the next call — quantize_model passes a block's
    // statistics: a device may copy them once and read its copies whenever a later call passes a pointer into
    // one of them. An empty list releases them; the caller calls again before any of them changes or dies.
    virtual void hold_inputs(const std::vector<ConstMatF>& mats) const { (void)mats; }
    // ScaleRefineProducts computed here (inputs and outputs on the host); false: this device leaves them to the CPU.
    virtual bool scale_refine_products(const ScaleRefineProducts& call) const {
        (void)call;
        return false;
    }
    // layer_objective_and_scale's two sums computed here; false: this device leaves them to the CPU.
    virtual bool layer_objective(const LayerProblem& p, const float* q, double* objective, double* scale) const {
        (void)p, (void)q, (void)objective, (void)scale;
        return false;
    }
    virtual std::string name() const = 0;
};

// gemm_f32 on `device` (null: the CPU).
void solver_gemm(const SolverDevice* device, ConstMatF a, Trans ta, ConstMatF b, Trans tb, MatF c, float beta = 0.0f);

// ScaleRefineProducts on `device` where it computes them, else on the CPU (its products by solver_gemm on
// `device`): for hd = 1 the row dots in double, for hd > 1 per-head FP32 products.
void scale_refine_products(const ScaleRefineProducts& call, const SolverDevice* device);

struct SolverOptions {
    const SolverDevice* device = nullptr;  // null: the CPU
    FactorCache* factor_cache = nullptr;   // null: every solve factors its own H_in
    GridSpec grid;
    SweepOptions sweep;
    double damping = 0.01;
    float dead_value = 1.0f;     // H_jj for dead inputs (GPTQ: 1; BoA/TurboBoA: 1/seqlen)
    int64_t row_block = 16;      // N of TurboBoA's F1 (1 = BoA)
    // Two-sided layers only (BoA/TurboBoA q and k; ignored elsewhere): the rows of each head are swept in order of
    // descending diag(H_out) (stable), turboboa.md §3.4/§4.2's act_order_row — the problem is solved with its rows
    // and H_out permuted, and the result's rows put back in place.
    bool act_order_row = false;
    bool adaptive_grid = true;   // F3a (false: the fixed-grid mode of the paper's ablations)
    // BoA/TurboBoA one-sided layers (v, o, MLP): every group's grid fitted from the sweep's input W before it
    // starts (static groups, TurboBoA's reference); false (with adaptive_grid): each group's grid fitted when the
    // sweep reaches it, from the compensated values, as GPTQ does. Per-channel grids are the same either way.
    bool one_sided_static_groups = true;
    bool refine_scales = false;  // F3b
    int refine_iters = 1;
};

QuantizedWeight solve_rtn(const LayerProblem& p, const GridSpec& g, SolveStats* stats = nullptr,
                          const SolverDevice* device = nullptr);
// GPTQ (one-sided; with p.d: GPTAQ's column term, TurboBoA's F2 on one-sided layers).
QuantizedWeight solve_gptq(const LayerProblem& p, const SolverOptions& o, SolveStats* stats = nullptr);
// BoA / TurboBoA: two-sided when p.h_out is set (row blocks of o.row_block, in act_order_row's order when
// set), one-sided otherwise; F2 when p.d is set; F3b when o.refine_scales.
QuantizedWeight solve_turboboa(const LayerProblem& p, const SolverOptions& o, SolveStats* stats = nullptr);

// The layer's loss tr(H_out ΔW H_in ΔWᵀ) − 2 tr(H_out W D ΔWᵀ) (turboboa.md §4.1; H_out = I when null,
// D = 0 when null), in double: what every solver decreases; used by the tests and the report.
double layer_objective(const LayerProblem& p, const std::vector<float>& q, const SolverDevice* device = nullptr);
// The same and, from the same products, the output's size tr(H_out W H_in Wᵀ) (the objective of all-zero
// weights without D): the report's relative loss is objective / scale.
struct LayerObjective {
    double objective = 0, scale = 0;
};
LayerObjective layer_objective_and_scale(const LayerProblem& p, const std::vector<float>& q,
                                         const SolverDevice* device = nullptr);

}  // namespace lowbit
