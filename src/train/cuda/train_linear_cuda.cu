// train_linear_cuda.cu — the GPU training GEMMs: cuBLAS BF16 for Strategy::full, AdaHOP's emulated
// lp_matmul for the low-precision strategies (train_linear_cuda.cuh).
#include "train/cuda/train_linear_cuda.cuh"

#include <algorithm>
#include <string>

#include "core/cuda_blas.h"
#include "train/cuda/train_ops_cuda.cuh"

namespace lowbit {

namespace {

constexpr int kTile = 32;

// out[c][r] = float(in[r][c]) for in [rows, cols] BF16 (a tiled transpose through shared memory).
__global__ void transpose_to_f32_kernel(const __nv_bfloat16* in, int64_t rows, int64_t cols, float* out) {
    __shared__ float tile[kTile][kTile + 1];
    const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = __bfloat162float(in[r * cols + c]);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][i];
    }
}

// out = c (+ beta·out) into FP32, or bf16(c), over n elements.
__global__ void store_kernel(const float* c, int64_t n, float* out_f32, __nv_bfloat16* out_bf16, float beta) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        if (out_bf16) out_bf16[i] = __float2bfloat16_rn(c[i]);
        else out_f32[i] = beta == 0.0f ? c[i] : c[i] + beta * out_f32[i];
    }
}

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

}  // namespace

struct CudaTrainGemm::State {
    explicit State(cudaStream_t s) : stream(s), blas(s), lp(s) {}
    cudaStream_t stream;
    CudaBlas blas;
    LpMatmulCuda lp;
    DeviceBuffer<float> a, b, c;  // FP32 operands and product of the emulated path

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

    float* as_f32(DeviceBuffer<float>& buf, const __nv_bfloat16* x, int64_t n) {
        float* p = buf.grow(size_t(n));
        cast_bf16_to_fp32_cuda(x, n, p, stream);
        return p;
    }
    float* transposed_f32(DeviceBuffer<float>& buf, const __nv_bfloat16* x, int64_t rows, int64_t cols) {
        float* p = buf.grow(size_t(rows * cols));
        const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
        transpose_to_f32_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(x, rows, cols, p);
        CUDA_CHECK(cudaGetLastError());
        return p;
    }
    // C = A·B (A m × k, B k × n, FP32 row-major) through lp_matmul, then stored into out.
    void emulated(const TrainGemmMode& mode, const float* a_, const float* b_, int64_t m, int64_t k, int64_t n,
                  float* out_f32, __nv_bfloat16* out_bf16, float beta) {
        lp.matmul(a_, b_, m, k, n, mode.strategy, mode.lp, c.grow(size_t(m * n)));
        store(m * n, out_f32, out_bf16, beta);
    }
    // The same with B prepared already (A: m × k FP32 row-major, quantized here as the left operand).
    void emulated(const TrainGemmMode& mode, const float* a_, const PreparedOperandCuda& b_, int64_t m, int64_t k,
                  float* out_f32, __nv_bfloat16* out_bf16, float beta) {
        if (b_.rows != k || b_.strategy != mode.strategy)
            cuda_usage_error("training GEMM: a saved operand of " + std::to_string(b_.rows) + " rows (strategy " +
                             strategy_short_name(b_.strategy) + ") does not fit a reduction of " + std::to_string(k) +
                             " under " + strategy_short_name(mode.strategy));
        const PreparedOperandCuda pa = lp.prepare(a_, m, k, Side::left, mode.strategy, mode.lp);
        lp.matmul_prepared(pa, b_, mode.lp, c.grow(size_t(m * b_.cols)));
        store(m * b_.cols, out_f32, out_bf16, beta);
        CUDA_CHECK(cudaStreamSynchronize(stream));  // pa's buffers are freed on return
    }
    void store(int64_t count, float* out_f32, __nv_bfloat16* out_bf16, float beta) {
        const unsigned blocks = unsigned(std::min<int64_t>((count + 255) / 256, 1 << 16));
        store_kernel<<<blocks, 256, 0, stream>>>(c.data(), count, out_f32, out_bf16, beta);
        CUDA_CHECK(cudaGetLastError());
    }
};

CudaTrainGemm::CudaTrainGemm(cudaStream_t stream) : st_(std::make_unique<State>(stream)) {}
CudaTrainGemm::~CudaTrainGemm() = default;

void CudaTrainGemm::set_tensor_core_mx(bool on) { st_->lp.set_tensor_core_mx(on); }

void CudaTrainGemm::forward(const TrainGemmMode& mode, const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t m, int64_t k,
                            int64_t n, TrainGemmOut y) {
    check_out(y, "forward");
    check_sizes(m, k, n, "forward");
    if (mode.strategy == Strategy::full) {
        st_->gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, w, k, x, k, y, n);
        return;
    }
    const float* a = st_->as_f32(st_->a, x, m * k);            // X [M, K]
    const float* b = st_->transposed_f32(st_->b, w, n, k);     // Wᵀ [K, N]: blocks along K
    st_->emulated(mode, a, b, m, k, n, y.f32, y.bf16, y.beta);
}

void CudaTrainGemm::backward_data(const TrainGemmMode& mode, const __nv_bfloat16* dy, const __nv_bfloat16* w, int64_t m,
                                  int64_t k, int64_t n, TrainGemmOut dx) {
    check_out(dx, "backward data");
    check_sizes(m, k, n, "backward data");
    if (mode.strategy == Strategy::full) {
        st_->gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, w, k, dy, n, dx, k);
        return;
    }
    const float* a = st_->as_f32(st_->a, dy, m * n);  // dY [M, N]
    const float* b = st_->as_f32(st_->b, w, n * k);   // W [N, K]: reduction over N
    st_->emulated(mode, a, b, m, n, k, dx.f32, dx.bf16, dx.beta);
}

void CudaTrainGemm::backward_weight(const TrainGemmMode& mode, const __nv_bfloat16* dy, const __nv_bfloat16* x, int64_t m,
                                    int64_t k, int64_t n, float* dw, float beta) {
    if (dw == nullptr) cuda_usage_error("training GEMM (backward weight): no output");
    check_sizes(m, k, n, "backward weight");
    if (mode.strategy == Strategy::full) {
        st_->gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, x, k, dy, n, TrainGemmOut{dw, nullptr, beta}, k);
        return;
    }
    const float* a = st_->transposed_f32(st_->a, dy, m, n);  // dYᵀ [N, M]: blocks along M (the tokens)
    const float* b = st_->as_f32(st_->b, x, m * k);          // X [M, K]
    st_->emulated(mode, a, b, n, m, k, dw, nullptr, beta);
}

PreparedOperandCuda CudaTrainGemm::prepare_saved(const TrainGemmMode& mode, const __nv_bfloat16* t, int64_t rows,
                                                 int64_t cols) {
    if (mode.strategy == Strategy::full) cuda_usage_error("training GEMM: a BF16 slot keeps its BF16 operand, nothing to prepare");
    check_sizes(rows, cols, 1, "saved operand");
    const float* f = st_->as_f32(st_->b, t, rows * cols);
    PreparedOperandCuda p = st_->lp.prepare(f, rows, cols, Side::right, mode.strategy, mode.lp);
    CUDA_CHECK(cudaStreamSynchronize(st_->stream));  // the FP32 copy is scratch reused by the next call
    return p;
}

void CudaTrainGemm::backward_data(const TrainGemmMode& mode, const __nv_bfloat16* dy, const PreparedOperandCuda& w,
                                  int64_t m, int64_t k, int64_t n, TrainGemmOut dx) {
    check_out(dx, "backward data");
    check_sizes(m, k, n, "backward data");
    if (w.cols != k) cuda_usage_error("training GEMM (backward data): the saved W has " + std::to_string(w.cols) +
                                      " columns, the layer " + std::to_string(k));
    st_->emulated(mode, st_->as_f32(st_->a, dy, m * n), w, m, n, dx.f32, dx.bf16, dx.beta);
}

void CudaTrainGemm::backward_weight(const TrainGemmMode& mode, const __nv_bfloat16* dy, const PreparedOperandCuda& x,
                                    int64_t m, int64_t k, int64_t n, float* dw, float beta) {
    if (dw == nullptr) cuda_usage_error("training GEMM (backward weight): no output");
    check_sizes(m, k, n, "backward weight");
    if (x.cols != k) cuda_usage_error("training GEMM (backward weight): the saved X has " + std::to_string(x.cols) +
                                      " columns, the layer " + std::to_string(k));
    st_->emulated(mode, st_->transposed_f32(st_->a, dy, m, n), x, n, m, dw, nullptr, beta);
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
