// linear_cuda.cu — device matrices, the cuBLAS product of a linear layer, and the dense, fake-quant and
// AdaHOP CUDA linears with their factories (see linear_cuda.cuh).
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/linear_cuda.cuh"

#include <climits>
#include <string>
#include <vector>

#include "core/cuda_host_copy.h"
#include "model/cuda/model_ops_cuda.cuh"

namespace lowbit {

namespace {

// y = beta·y + t for n FP32 values (cuBLAS scal + axpy on the handle's stream).
void scale_and_add(const CudaBlas& blas, const float* t, int64_t n, float beta, float* y) {
    if (n > INT_MAX) cuda_usage_error("linear output of " + std::to_string(n) + " values is beyond 2^31");
    const float one = 1.0f;
    if (beta != 1.0f) cublas_check(cublasSscal(blas.handle(), int(n), &beta, y, 1), "cublasSscal");
    cublas_check(cublasSaxpy(blas.handle(), int(n), &one, t, 1, y, 1), "cublasSaxpy");
}

}  // namespace

const char* cuda_precision_name(CudaPrecision p) { return p == CudaPrecision::bf16 ? "bf16" : "fp32"; }

CudaPrecision parse_cuda_precision(const std::string& name) {
    if (name == "fp32") return CudaPrecision::fp32;
    if (name == "bf16") return CudaPrecision::bf16;
    cuda_usage_error("unknown precision '" + name + "' (known: fp32, bf16)");
}

void CudaMatrix::upload(const float* host, int64_t r, int64_t c, CudaPrecision p, cudaStream_t stream) {
    const size_t n = size_t(r * c);
    rows = r;
    cols = c;
    precision = p;
    if (p == CudaPrecision::fp32) {
        bf16.release();
        copy_host_to_device(f32.fit(n), host, n * sizeof(float), stream);
        return;
    }
    f32.release();
    // Rounded on the device (the same round-to-nearest-even as on the host): the FP32 values cross the bus into a
    // transient buffer, so no host pass and no fresh host buffer per upload (post-training quantization uploads
    // two blocks' weights per block; a fresh host buffer costs its page faults, ~0.7 s per GiB on the H200 host).
    if (n == 0) return bf16.release();
    DeviceBuffer<float> staging(n);
    copy_host_to_device(staging.data(), host, n * sizeof(float), stream);
    cast_to_bf16_cuda(staging.data(), int64_t(n), bf16.fit(n), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the staging buffer is read before it goes
}

void cuda_matrix_product(const CudaBlas& blas, const CudaMatrix& w, const float* x_f32, const __nv_bfloat16* x_bf16,
                         int64_t rows, float* y, float beta) {
    if (rows <= 0) return;
    if (rows > INT_MAX || w.rows > INT_MAX || w.cols > INT_MAX)
        cuda_usage_error("linear layer: dimensions beyond 2^31 (" + std::to_string(rows) + " x " + std::to_string(w.cols) +
                         " x " + std::to_string(w.rows) + ")");
    const float one = 1.0f;
    // Row-major y [rows, out] = x [rows, in] · Wᵀ (W [out, in]) is column-major yᵀ (out × rows) = op_T(W) · xᵀ,
    // where W and x read as column-major matrices are in × out and in × rows (ld = in).
    const int m = int(w.rows), n = int(rows), k = int(w.cols);
    if (w.precision == CudaPrecision::bf16) {
        if (!x_bf16) cuda_usage_error("linear layer: a BF16 matrix needs the BF16 copy of its input");
        cublas_check(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w.bf16.data(), CUDA_R_16BF, k,
                                  x_bf16, CUDA_R_16BF, k, &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx(bf16 x bf16 -> fp32)");
    } else {
        if (!x_f32) cuda_usage_error("linear layer: an FP32 matrix needs an FP32 input");
        cublas_check(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w.f32.data(), CUDA_R_32F, k, x_f32,
                                  CUDA_R_32F, k, &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx(fp32, pedantic)");
    }
}

// ---------------------------------------------------------------------------------------------------
// dense

void CudaDenseLinear::upload(ConstMatF w, CudaPrecision p, cudaStream_t stream) {
    if (!w.dense()) cuda_usage_error("CudaDenseLinear::upload: the weight view must be dense");
    w_.upload(w.data, w.rows, w.cols, p, stream);
}

void CudaDenseLinear::forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta) const {
    cuda_matrix_product(blas, w_, x.f32, x.bf16, x.rows, y, beta);
}

// ---------------------------------------------------------------------------------------------------
// fake-quant

CudaFakeQuantLinear::CudaFakeQuantLinear(ConstMatF w, const QuantSpec& weights, const QuantSpec& activations,
                                         CudaPrecision p, cudaStream_t stream)
    : act_spec_(activations) {
    act_spec_.options.axis = 1;  // per token, as FakeQuantLinear
    if (act_spec_.format && !format_roundtrip_cuda_supported(*act_spec_.format))
        cuda_usage_error(std::string("activation format ") + act_spec_.format->name +
                         " has no CUDA quantizer; use an MX, NVFP4 or INT format for activations on the GPU");
    const FakeQuantLinear host(w, weights, activations);  // Q(W) by the CPU's rule
    description_ = host.describe() + ", " + cuda_precision_name(p);
    dense_.upload(host.weight(), p, stream);
}

void CudaFakeQuantLinear::forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta) const {
    if (!act_spec_.format) {
        dense_.forward(blas, x, y, beta);
        return;
    }
    const int64_t n = x.rows * in_features();
    float* xq = xq_.grow(n);
    format_roundtrip_cuda(*act_spec_.format, act_spec_.options, x.f32, x.rows, in_features(), xq, scratch_, blas.stream());
    CudaLinearInput q{xq, nullptr, x.rows};
    if (dense_.wants_bf16_input()) {
        q.bf16 = xq_bf16_.grow(n);
        cast_to_bf16_cuda(xq, n, xq_bf16_.data(), blas.stream());
    }
    dense_.forward(blas, q, y, beta);
}

// ---------------------------------------------------------------------------------------------------
// adahop

CudaAdahopLinear::CudaAdahopLinear(ConstMatF w, const LayerPlan& plan, const LpMatmulOptions& opts, cudaStream_t stream)
    : out_(w.rows), in_(w.cols), plan_(plan), opts_(opts), lp_(std::make_unique<LpMatmulCuda>(stream)) {
    const std::vector<float> wt = transposed(w);  // B = Wᵀ [in, out]: quantized along K = in_features
    DeviceBuffer<float> d;
    d.assign_async(wt.data(), wt.size(), stream);
    w_t_ = lp_->prepare(d.data(), in_, out_, Side::right, plan_.fwd, opts_);  // synchronizes: `d` may go
}

void CudaAdahopLinear::forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta) const {
    if (x.rows <= 0) return;
    if (!x.f32) cuda_usage_error("adahop linear: needs the FP32 input");
    const bool other_stream = lp_->stream() != blas.stream();
    if (other_stream) CUDA_CHECK(cudaStreamSynchronize(blas.stream()));  // x must be ready on lp_'s stream
    const PreparedOperandCuda px = lp_->prepare(x.f32, x.rows, in_, Side::left, plan_.fwd, opts_);
    const int64_t n = x.rows * out_;
    float* c = beta == 0.0f ? y : y_tmp_.grow(n);
    lp_->matmul_prepared(px, w_t_, opts_, c);
    if (other_stream) CUDA_CHECK(cudaStreamSynchronize(lp_->stream()));
    if (beta != 0.0f) scale_and_add(blas, c, n, beta, y);
}

std::string CudaAdahopLinear::describe() const {
    return std::string("adahop ") + strategy_short_name(plan_.fwd) + (opts_.quantize ? "" : " (quantization off)");
}

// ---------------------------------------------------------------------------------------------------
// factories

size_t CudaBlockLinears::bytes() const {
    size_t b = 0;
    for (const auto& l : by_projection)
        if (l) b += l->bytes();
    return b;
}

namespace {

ConstMatF projection_view(const LlamaConfig& c, const BlockWeights& b, Projection p) {
    return ConstMatF(projection_weight(b, p).data(), projection_out_features(c, p), projection_in_features(c, p));
}

}  // namespace

CudaLinearFactory cuda_dense_linears() {
    return [](const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision p, cudaStream_t stream,
              CudaBlockLinears& out) {
        check_block_shapes(c, b, layer, "block upload to the GPU");
        for (Projection pr : kProjections) {
            auto& slot = out.by_projection[size_t(pr)];
            auto* dense = dynamic_cast<CudaDenseLinear*>(slot.get());
            if (!dense) {
                slot = std::make_unique<CudaDenseLinear>();
                dense = static_cast<CudaDenseLinear*>(slot.get());
            }
            dense->upload(projection_view(c, b, pr), p, stream);
        }
    };
}

CudaLinearFactory cuda_fake_quant_linears(const QuantSpec& weights, const QuantSpec& activations) {
    return [weights, activations](const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision p,
                                  cudaStream_t stream, CudaBlockLinears& out) {
        check_block_shapes(c, b, layer, "block upload to the GPU");
        for (Projection pr : kProjections)
            out.by_projection[size_t(pr)] =
                std::make_unique<CudaFakeQuantLinear>(projection_view(c, b, pr), weights, activations, p, stream);
    };
}

CudaLinearFactory cuda_adahop_linears(const Plan& plan, const LpMatmulOptions& opts, const LayerPlan& fallback) {
    return [plan, opts, fallback](const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision,
                                  cudaStream_t stream, CudaBlockLinears& out) {
        check_block_shapes(c, b, layer, "block upload to the GPU");
        for (Projection pr : kProjections) {
            const auto it = plan.layers.find(linear_name(layer, pr));
            out.by_projection[size_t(pr)] = std::make_unique<CudaAdahopLinear>(
                projection_view(c, b, pr), it != plan.layers.end() ? it->second : fallback, opts, stream);
        }
    };
}

CudaLinearFactory cuda_with_kv_cache(CudaLinearFactory base, const QuantSpec& kv) {
    if (kv.format && !format_roundtrip_cuda_supported(*kv.format))
        cuda_usage_error(std::string("KV-cache format ") + kv.format->name + " has no CUDA quantizer (MX, NVFP4 and INT grids do)");
    if (!base) base = cuda_dense_linears();
    return [base = std::move(base), kv](const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision p,
                                        cudaStream_t stream, CudaBlockLinears& out) {
        base(c, b, layer, p, stream, out);
        out.kv_cache = kv;
        out.kv_cache.options.axis = 1;  // per token (and KV head), as quantize_activations
    };
}

}  // namespace lowbit
