// linear_cuda.cuh — the Linear seam of the CUDA model (the device twin of model/linear.h): the seven
// projections of a block go through CudaLinear, chosen per layer by a CudaLinearFactory, so
// cuda_block_forward never calls cuBLAS for them.
//   CudaDenseLinear      y = x·Wᵀ with cuBLAS: FP32 (pedantic, no TF32) or BF16 × BF16 → FP32
//                        (forward_cuda.cuh states the precision contract)
//   CudaFakeQuantLinear  the dense linear over Q(W) (dequantized on the host by FakeQuantLinear's rule,
//                        or W as loaded without a weight format, then stored in the model's precision),
//                        with the activations quantized per token on the device first when asked
//                        (format_roundtrip_cuda: bit-equal to the CPU)
//   CudaAdahopLinear     y = lp_matmul(x, Wᵀ) through LpMatmulCuda (today's BF16 emulation; the FP8
//                        tensor-core GEMM plugs in there), Wᵀ prepared once
// Every linear reads the FP32 input; dense ones in BF16 precision read the BF16 copy the producing kernel
// wrote (wants_bf16_input()).
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cuda_bf16.h>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "adahop/cuda/lp_matmul_cuda.cuh"
#include "core/cuda_blas.h"
#include "formats/cuda/format_roundtrip_cuda.cuh"
#include "model/linear.h"

namespace lowbit {

enum class CudaPrecision { fp32, bf16 };
const char* cuda_precision_name(CudaPrecision p);
// "fp32" or "bf16"; anything else fails (usage) naming the choices.
CudaPrecision parse_cuda_precision(const std::string& name);

// A row-major [rows, cols] matrix on the device in FP32 or BF16 (one of the two buffers is used).
struct CudaMatrix {
    int64_t rows = 0, cols = 0;
    CudaPrecision precision = CudaPrecision::fp32;
    DeviceBuffer<float> f32;
    DeviceBuffer<__nv_bfloat16> bf16;

    // Copies (BF16: rounded to nearest even on the device, through a transient FP32 buffer); keeps the
    // allocation when it fits.
    void upload(const float* host, int64_t rows, int64_t cols, CudaPrecision p, cudaStream_t stream = nullptr);
    bool empty() const { return rows == 0; }
    size_t bytes() const { return size_t(rows * cols) * (precision == CudaPrecision::bf16 ? 2 : 4); }
};

// y [rows, w.rows] = beta·y + x [rows, w.cols] · wᵀ with FP32 output; x is FP32 for an FP32 matrix and BF16
// for a BF16 one (the other pointer is ignored and may be null).
void cuda_matrix_product(const CudaBlas& blas, const CudaMatrix& w, const float* x_f32, const __nv_bfloat16* x_bf16,
                         int64_t rows, float* y, float beta = 0.0f);

// The input of a linear: [rows, in] on the device in FP32, plus its BF16 copy when one was asked for.
struct CudaLinearInput {
    const float* f32 = nullptr;
    const __nv_bfloat16* bf16 = nullptr;
    int64_t rows = 0;
};

class CudaLinear {
public:
    virtual ~CudaLinear() = default;
    // y [rows, out] (device, FP32) = x·Wᵀ + beta·y, in order on blas.stream().
    virtual void forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta = 0.0f) const = 0;
    virtual int64_t in_features() const = 0;
    virtual int64_t out_features() const = 0;
    virtual bool wants_bf16_input() const = 0;
    virtual size_t bytes() const = 0;  // device bytes held
    virtual std::string describe() const = 0;
};

class CudaDenseLinear final : public CudaLinear {
public:
    // Uploads w [out, in] in precision p, reusing this object's storage when it fits.
    void upload(ConstMatF w, CudaPrecision p, cudaStream_t stream);
    void forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta = 0.0f) const override;
    int64_t in_features() const override { return w_.cols; }
    int64_t out_features() const override { return w_.rows; }
    bool wants_bf16_input() const override { return w_.precision == CudaPrecision::bf16; }
    size_t bytes() const override { return w_.bytes(); }
    std::string describe() const override { return std::string("dense ") + cuda_precision_name(w_.precision); }
    const CudaMatrix& matrix() const { return w_; }

private:
    CudaMatrix w_;
};

class CudaFakeQuantLinear final : public CudaLinear {
public:
    // Q(W) as FakeQuantLinear computes it (W itself without a weight format), stored in precision p;
    // activations must be a CUDA-capable format.
    CudaFakeQuantLinear(ConstMatF w, const QuantSpec& weights, const QuantSpec& activations, CudaPrecision p,
                        cudaStream_t stream);
    void forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta = 0.0f) const override;
    int64_t in_features() const override { return dense_.in_features(); }
    int64_t out_features() const override { return dense_.out_features(); }
    // With activation quantization the BF16 input is made here from the quantized FP32 one.
    bool wants_bf16_input() const override { return !act_spec_.format && dense_.wants_bf16_input(); }
    size_t bytes() const override { return dense_.bytes(); }
    std::string describe() const override { return description_; }

private:
    CudaDenseLinear dense_;
    QuantSpec act_spec_;
    std::string description_;
    // Working memory of forward (one stream per linear, like the model's scratch).
    mutable DeviceBuffer<float> xq_;
    mutable DeviceBuffer<__nv_bfloat16> xq_bf16_;
    mutable FormatRoundtripScratch scratch_;
};

class CudaAdahopLinear final : public CudaLinear {
public:
    CudaAdahopLinear(ConstMatF w, const LayerPlan& plan, const LpMatmulOptions& opts, cudaStream_t stream);
    void forward(const CudaBlas& blas, CudaLinearInput x, float* y, float beta = 0.0f) const override;
    int64_t in_features() const override { return in_; }
    int64_t out_features() const override { return out_; }
    bool wants_bf16_input() const override { return false; }
    size_t bytes() const override { return w_t_.storage_bytes(); }
    std::string describe() const override;

private:
    int64_t out_, in_;
    LayerPlan plan_;
    LpMatmulOptions opts_;
    std::unique_ptr<LpMatmulCuda> lp_;  // on the stream given at construction
    PreparedOperandCuda w_t_;           // Wᵀ [in, out], prepared for plan_.fwd
    mutable DeviceBuffer<float> y_tmp_;
};

struct CudaBlockLinears {
    std::array<std::unique_ptr<CudaLinear>, kProjectionCount> by_projection;
    const CudaLinear& operator[](Projection p) const { return *by_projection[size_t(p)]; }
    // KV-cache quantization for evaluation, as BlockLinears::kv_cache: the keys after RoPE and the values quantized→
    // dequantized per token and KV head (format_roundtrip_cuda, bit-equal to the CPU's rule). No format: off.
    QuantSpec kv_cache;
    size_t bytes() const;
};

// Fills `out` with the linears of block `layer` (host weights b, on `stream`), reusing what `out` holds
// where it can (a streamed model uploads every block into the same object).
using CudaLinearFactory = std::function<void(const LlamaConfig& c, const BlockWeights& b, int64_t layer, CudaPrecision p,
                                             cudaStream_t stream, CudaBlockLinears& out)>;

CudaLinearFactory cuda_dense_linears();
CudaLinearFactory cuda_fake_quant_linears(const QuantSpec& weights, const QuantSpec& activations = {});
CudaLinearFactory cuda_adahop_linears(const Plan& plan, const LpMatmulOptions& opts, const LayerPlan& fallback = {});
// `base`'s linears (empty: dense) with the KV cache quantized to `kv` (a CUDA-capable format; usage error otherwise).
CudaLinearFactory cuda_with_kv_cache(CudaLinearFactory base, const QuantSpec& kv);

}  // namespace lowbit
