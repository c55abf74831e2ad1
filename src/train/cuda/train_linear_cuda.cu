// train_linear_cuda.cu — the GPU training GEMMs: cuBLAS BF16 for Strategy::full, AdaHOP's lp_matmul on the BF16
// tensors for the low-precision strategies (train_linear_cuda.cuh).
#include "train/cuda/train_linear_cuda.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "core/cuda_blas.h"

namespace lowbit {

namespace {

void check_out(const TrainGemmOut& o, const char* what) {
    if ((o.f32 == nullptr) == (o.bf16 == nullptr))
        cuda_usage_error(std::string("training GEMM (") + what + "): exactly one of the FP32 and BF16 outputs must be given");
    if (o.bf16 && o.beta != 0.0f)
        cuda_usage_error(std::string("training GEMM (") + what + "): beta needs the FP32 output");
}

void check_sizes(int64_t m, int64_t k, int64_t n, const char* what) {
    if (m <= 0 || k <= 0 || n <= 0)
        cuda_usage_error(std::string("training GEMM (") + what + "): sizes must be positive, got M " + std::to_string(m) +
                         " K " + std::to_string(k) + " N " + std::to_string(n));
}

void check_saved(const PreparedOperandCuda& p, const TrainGemmMode& mode, int64_t k) {
    if (p.rows != k || p.strategy != mode.strategy || p.side != Side::right)
        cuda_usage_error("training GEMM: a saved operand of " + std::to_string(p.rows) + " rows (strategy " +
                         strategy_short_name(p.strategy) + ") does not fit a reduction of " + std::to_string(k) + " under " +
                         strategy_short_name(mode.strategy));
}

}  // namespace

struct CudaTrainGemm::State {
    explicit State(cudaStream_t s) : stream(s), blas(s), lp(s) {}
    cudaStream_t stream;
    CudaBlas blas;
    LpMatmulCuda lp;
    // The operands of low-precision calls, one per (side, shape, strategy): a prepared operand holds exactly
    // its sizes, so one shared pair would reallocate (and cudaFree would synchronize) whenever consecutive
    // projections differ; a model has a few dozen such keys, each allocated once.
    std::map<std::tuple<Side, int64_t, int64_t, Strategy>, PreparedOperandCuda> operands;
    PreparedOperandCuda& operand(Side side, int64_t rows, int64_t cols, Strategy s) { return operands[{side, rows, cols, s}]; }

    // C (column-major m × n, ld ldc) = op(A)·op(B) with BF16 A, B and an FP32 or BF16 C.
    void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const __nv_bfloat16* a_,
                   int64_t lda, const __nv_bfloat16* b_, int64_t ldb, TrainGemmOut out, int64_t ldc) {
        const float one = 1.0f, beta = out.beta;
        void* c_ = out.f32 ? static_cast<void*>(out.f32) : static_cast<void*>(out.bf16);
        cublas_check(cublasGemmEx(blas.handle(), ta, tb, int(m), int(n), int(k), &one, a_, CUDA_R_16BF, int(lda), b_,
                                  CUDA_R_16BF, int(ldb), &beta, c_, out.f32 ? CUDA_R_32F : CUDA_R_16BF, int(ldc),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx(training, bf16 operands)");
    }
};

CudaTrainGemm::CudaTrainGemm(cudaStream_t stream) : st_(std::make_unique<State>(stream)) {}
CudaTrainGemm::~CudaTrainGemm() = default;

void CudaTrainGemm::set_tensor_core_mx(bool on, MxGemmFold fold) { st_->lp.set_tensor_core_mx(on, fold); }
void CudaTrainGemm::set_mx_census(int sites) { st_->lp.set_mx_census(sites); }
void CudaTrainGemm::set_mx_census_site(int site) { st_->lp.set_mx_census_site(site); }
std::vector<MxCensusTally> CudaTrainGemm::mx_census() const { return st_->lp.mx_census(); }

// In lp_matmul's terms C = A·B with A [M, K'] and B [K', N'] (K' the reduction): the BF16 tensors are A or Aᵀ
// and B or Bᵀ as they lie in memory (prepare_bf16's t_transposed).
void CudaTrainGemm::forward(const TrainGemmMode& mode, const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t m, int64_t k,
                            int64_t n, TrainGemmOut y) {
    check_out(y, "forward");
    check_sizes(m, k, n, "forward");
    if (mode.strategy == Strategy::full) {
        st_->gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, w, k, x, k, y, n);
        return;
    }
    PreparedOperandCuda& a = st_->operand(Side::left, m, k, mode.strategy);
    PreparedOperandCuda& b = st_->operand(Side::right, k, n, mode.strategy);
    st_->lp.prepare_bf16(a, x, false, m, k, Side::left, mode.strategy, mode.lp);  // X [M, K]
    st_->lp.prepare_bf16(b, w, true, k, n, Side::right, mode.strategy, mode.lp);  // Wᵀ [K, N]: W as stored
    st_->lp.matmul_prepared(a, b, mode.lp, y);
}

void CudaTrainGemm::backward_data(const TrainGemmMode& mode, const __nv_bfloat16* dy, const __nv_bfloat16* w, int64_t m,
                                  int64_t k, int64_t n, TrainGemmOut dx) {
    check_out(dx, "backward data");
    check_sizes(m, k, n, "backward data");
    if (mode.strategy == Strategy::full) {
        st_->gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, w, k, dy, n, dx, k);
        return;
    }
    PreparedOperandCuda& b = st_->operand(Side::right, n, k, mode.strategy);
    st_->lp.prepare_bf16(b, w, false, n, k, Side::right, mode.strategy, mode.lp);  // W [N, K]: reduction over N
    backward_data(mode, dy, b, m, k, n, dx);
}

void CudaTrainGemm::backward_weight(const TrainGemmMode& mode, const __nv_bfloat16* dy, const __nv_bfloat16* x, int64_t m,
                                    int64_t k, int64_t n, float* dw, float beta) {
    if (dw == nullptr) cuda_usage_error("training GEMM (backward weight): no output");
    check_sizes(m, k, n, "backward weight");
    if (mode.strategy == Strategy::full) {
        st_->gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, x, k, dy, n, TrainGemmOut{dw, nullptr, beta}, k);
        return;
    }
    PreparedOperandCuda& b = st_->operand(Side::right, m, k, mode.strategy);
    st_->lp.prepare_bf16(b, x, false, m, k, Side::right, mode.strategy, mode.lp);  // X [M, K]: reduction over M
    backward_weight(mode, dy, b, m, k, n, dw, beta);
}

void CudaTrainGemm::prepare_saved(const TrainGemmMode& mode, const __nv_bfloat16* t, int64_t rows, int64_t cols,
                                  PreparedOperandCuda& saved) {
    if (mode.strategy == Strategy::full) cuda_usage_error("training GEMM: a BF16 slot keeps its BF16 operand, nothing to prepare");
    check_sizes(rows, cols, 1, "saved operand");
    st_->lp.prepare_bf16(saved, t, false, rows, cols, Side::right, mode.strategy, mode.lp);
}

void CudaTrainGemm::backward_data(const TrainGemmMode& mode, const __nv_bfloat16* dy, const PreparedOperandCuda& w,
                                  int64_t m, int64_t k, int64_t n, TrainGemmOut dx) {
    check_out(dx, "backward data");
    check_sizes(m, k, n, "backward data");
    if (w.cols != k) cuda_usage_error("training GEMM (backward data): the saved W has " + std::to_string(w.cols) +
                                      " columns, the layer " + std::to_string(k));
    check_saved(w, mode, n);
    PreparedOperandCuda& a = st_->operand(Side::left, m, n, mode.strategy);
    st_->lp.prepare_bf16(a, dy, false, m, n, Side::left, mode.strategy, mode.lp);  // dY [M, N]
    st_->lp.matmul_prepared(a, w, mode.lp, dx);
}

void CudaTrainGemm::backward_weight(const TrainGemmMode& mode, const __nv_bfloat16* dy, const PreparedOperandCuda& x,
                                    int64_t m, int64_t k, int64_t n, float* dw, float beta) {
    if (dw == nullptr) cuda_usage_error("training GEMM (backward weight): no output");
    check_sizes(m, k, n, "backward weight");
    if (x.cols != k) cuda_usage_error("training GEMM (backward weight): the saved X has " + std::to_string(x.cols) +
                                      " columns, the layer " + std::to_string(k));
    check_saved(x, mode, m);
    PreparedOperandCuda& a = st_->operand(Side::left, n, m, mode.strategy);
    st_->lp.prepare_bf16(a, dy, true, n, m, Side::left, mode.strategy, mode.lp);  // dYᵀ [N, M]: dY as stored
    st_->lp.matmul_prepared(a, x, mode.lp, TrainGemmOut{dw, nullptr, beta});
}

namespace {

// out = (slot's product under mode) + beta·out, FP32.
void slot_product(CudaTrainGemm& gemm, Slot slot, const TrainGemmMode& mode, const __nv_bfloat16* a,
                  const __nv_bfloat16* b, int64_t m, int64_t k, int64_t n, float* out, float beta) {
    switch (slot) {
        case Slot::fwd: gemm.forward(mode, a, b, m, k, n, TrainGemmOut{out, nullptr, beta}); return;
        case Slot::dgrad: gemm.backward_data(mode, a, b, m, k, n, TrainGemmOut{out, nullptr, beta}); return;
        case Slot::wgrad: gemm.backward_weight(mode, a, b, m, k, n, out, beta); return;
    }
}

}  // namespace

std::vector<double> slot_relative_errors(CudaTrainGemm& gemm, Slot slot, const std::vector<TrainGemmMode>& modes,
                                         const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m, int64_t k, int64_t n,
                                         SlotProbeScratch& scratch, cudaStream_t stream, const SlotErrorSink& on_error) {
    check_sizes(m, k, n, "slot probe");
    const int64_t size = slot == Slot::fwd ? m * n : slot == Slot::dgrad ? m * k : n * k;
    float* ref = scratch.ref.grow(size_t(size));
    float* diff = scratch.diff.grow(size_t(size));
    double* sums = scratch.sums.grow(modes.size() + 1);
    slot_product(gemm, slot, TrainGemmMode{}, a, b, m, k, n, ref, 0.0f);
    sum_squares_cuda(ref, size, sums, scratch.ws, stream);
    for (size_t i = 0; i < modes.size(); ++i) {
        CUDA_CHECK(cudaMemcpyAsync(diff, ref, size_t(size) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        slot_product(gemm, slot, modes[i], a, b, m, k, n, diff, -1.0f);
        sum_squares_cuda(diff, size, sums + 1 + i, scratch.ws, stream);
        if (on_error) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            on_error(i, diff, ref, size);
        }
    }
    std::vector<double> host(modes.size() + 1);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), sums, host.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> errors(modes.size());
    for (size_t i = 0; i < modes.size(); ++i)
        errors[i] = host[0] > 0 ? std::sqrt(host[1 + i] / host[0])
                                : (host[1 + i] == 0 ? 0.0 : std::numeric_limits<double>::infinity());
    return errors;
}

int64_t prepared_device_bytes(const PreparedOperandCuda& p) {
    return int64_t(p.codes.bytes() + p.scales.bytes() + p.tensor_scale.bytes() + p.dense.bytes() + p.high_precision.bytes() +
                   p.slice.bytes() + p.indices.bytes());
}

int64_t saved_operand_bytes(Strategy dgrad, Strategy wgrad, int64_t m, int64_t k, int64_t n, int64_t oe_k) {
    const auto mx = [](int64_t elements) { return elements / 2 + (elements + 31) / 32; };
    int64_t bytes = 0;
    switch (dgrad) {  // W [N, K], reduction over N
        case Strategy::full:
        case Strategy::iht_oe_left: bytes += 2 * n * k; break;
        case Strategy::iht_oe_right: bytes += mx(n * k) + 2 * n * std::min(oe_k, k) + 4 * std::min(oe_k, k); break;
        default: bytes += mx(n * k); break;
    }
    switch (wgrad) {  // X [M, K], reduction over M
        case Strategy::full: bytes += 2 * m * k; break;
        case Strategy::iht_oe_right: bytes += mx(m * k) + 2 * m * std::min(oe_k, k) + 4 * std::min(oe_k, k); break;
        default: bytes += mx(m * k); break;
    }
    return bytes;
}

}  // namespace lowbit
