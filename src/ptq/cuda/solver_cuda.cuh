// solver_cuda.cuh — the GPU SolverDevice of post-training quantization (ptq/solver.h): FP64 inverse
// Cholesky with cuSOLVER (potrf → potri → potrf, as the CPU does with LAPACK; the damped FP64 matrix is built on
// the device from the FP32 Hessian and the factor goes back in FP32, half the bytes), FP32 products with cuBLAS
// (no TF32), and GPTQ's column sweep as a kernel (one warp per row, the lazy block's chol_U(H⁻¹) and GPTAQ P
// blocks in shared memory) with the lazy updates between blocks as cuBLAS GEMMs, and the grid search's
// candidate scores (a kernel builds the candidates' errors D, cuBLAS forms D·H_g from three TF32 products of the
// TF32 splits of D and H_g, FP32-like, a kernel the row dots in double).
//
// Exactness: the sweep kernel does the CPU sweep's arithmetic in the CPU's order (nearest code, (x − q)/U_cc,
// the row updates w_j −= e·U_cj [− x·P_cj], built with --fmad=false), so a sweep that fits in one lazy block
// gives bit-identical codes, grids and values; across blocks the lazy GEMMs sum in cuBLAS's order instead of
// OpenBLAS's (tests/cuda/test_ptq_cuda.cu states the observed differences).
//
// Residency: a block's statistics are copied once (hold_inputs) and read in place by the factorizations,
// products, grid scores and layer objectives that name them; the factor of a factorization stays for the
// sweeps of its factor_id, and (u, p) stay between sweeps with the same SweepCall::input_id (TurboBoA sweeps
// each row block against one factorization), so per layer only weights, codes and grids cross the bus. The
// factors of a block's factorizations stay on the device (keeps_factors) until its statistics are released, with
// GPTAQ's P and TurboBoA's RH = D·H⁻¹ made from them there (keep_gptaq_terms: RH as (D̂·Uᵀ)·U, equal to the
// host's D̂·H⁻¹ up to FP32 rounding); a sweep's rows do not come back (only codes and loss). Every buffer grows
// and is reused.
// layer_objective: ΔW·H, W·H and W·D by cuBLAS SGEMM, the row-pair dots in double (one warp per pair), summed
// on the host in the CPU's association — equal to the CPU's objective up to FP32 summation order.
// scale_refine_products: F3b's per-channel products by the same SGEMMs and pair kernel; only the hd × hd numbers
// per head come back (the CPU forms them from rows × cols products brought to the host).
// peak_bytes() is the largest device memory in use seen at the points where this object holds the most.
#pragma once

#include <memory>

#include "ptq/solver.h"

namespace lowbit {

class CudaSolverDevice final : public SolverDevice, public GridScorer {
public:
    CudaSolverDevice();
    ~CudaSolverDevice() override;
    CudaSolverDevice(const CudaSolverDevice&) = delete;
    CudaSolverDevice& operator=(const CudaSolverDevice&) = delete;

    bool inverse_cholesky_upper(const float* h, int64_t n, const std::vector<uint8_t>& dead, float dead_value,
                                double damp, std::vector<float>* u, std::vector<double>* h_inv,
                                uint64_t factor_id) const override;
    bool keeps_factors() const override { return true; }
    bool keep_gptaq_terms(uint64_t id, const float* d, int64_t n, const std::vector<int64_t>& order,
                          const std::vector<uint8_t>& dead, bool want_rh) const override;
    void rh_product(uint64_t id, ConstMatF a, MatF c) const override;
    void hold_inputs(const std::vector<ConstMatF>& mats) const override;
    bool layer_objective(const LayerProblem& p, const float* q, double* objective, double* scale) const override;
    bool scale_refine_products(const ScaleRefineProducts& call) const override;
    void gemm(ConstMatF a, Trans ta, ConstMatF b, Trans tb, MatF c, float beta) const override;
    double sweep(const SweepCall& call) const override;
    void score_int_candidates(const GridSpec& g, const float* w, int64_t ldw, int64_t rows, int64_t n, const float* h,
                              int64_t ldh, uint64_t h_id, const GroupGrid* cand, int64_t k, double* scores) const override;
    const GridScorer* grid_scorer() const override { return this; }
    std::string name() const override { return "cuda"; }

private:
    struct State;
    std::unique_ptr<State> s_;
};

// Device memory in use (total − free, cudaMemGetInfo), sampled by the PTQ GPU code at its high points; the
// largest sample since the process started or the last reset.
void ptq_sample_device_memory();
size_t ptq_peak_device_bytes();
void ptq_reset_peak_device_bytes();

}  // namespace lowbit
