// lp_matmul_cuda.cu — GPU emulation of the low-precision GEMM: kernels for BF16 rounding/conversion and the
// random signs along K, the cuBLAS products, and the orchestration of split → sign → rotate → quantize →
// dequantize → GEMM → slivers.
#include "adahop/cuda/lp_matmul_cuda.cuh"

#include "core/cuda_blas.h"

#include <map>
#include <string>
#include <vector>

#include "formats/cuda/mx_quantize.cuh"
#include "formats/cuda/nvfp4_quantize.cuh"
#include "hadamard/cuda/block_hadamard.cuh"
#include "hadamard/hadamard.h"

namespace lowbit {

namespace {

__global__ void round_bf16_kernel(float* x, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

unsigned blocks_for(int64_t n) { return unsigned((n + 255) / 256); }

// out = in·S along K: the random signs of the iht family (s_k = hadamard_random_sign(seed, k), k = column for
// the left operand, row for the right one), an exact multiply by ±1 as in the CPU's randomized transform, so
// the block Hadamard that follows sees the CPU's bits. in == out is allowed. A thread walks one column down
// kSignRows rows: the left operand draws its sign once per thread, the right one once per row.
// Napkin math, 4096×4096 FP32: 134 MB moved → 31 µs at 4.3 TB/s, the cost of the plain copy it replaces
// (without OE); the draw (two 64-bit mix chains, ~40 integer instructions) stays under that.
constexpr int kSignRows = 32;

__global__ void multiply_k_signs_kernel(const float* in, float* out, int64_t rows, int64_t cols, bool k_is_column,
                                        uint64_t seed) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const float column_sign = k_is_column ? hadamard_random_sign(seed, c) : 1.0f;
    for (int64_t r0 = int64_t(blockIdx.y) * kSignRows; r0 < rows; r0 += int64_t(gridDim.y) * kSignRows) {
        const int64_t r1 = r0 + kSignRows < rows ? r0 + kSignRows : rows;
        for (int64_t r = r0; r < r1; ++r) {
            const float sign = k_is_column ? column_sign : hadamard_random_sign(seed, r);
            out[r * cols + c] = in[r * cols + c] * sign;
        }
    }
}

void multiply_k_signs(const float* in, float* out, int64_t rows, int64_t cols, Side side, uint64_t seed, cudaStream_t s) {
    if (rows == 0 || cols == 0) return;
    const int64_t row_groups = (rows + kSignRows - 1) / kSignRows;
    const dim3 grid(blocks_for(cols), unsigned(row_groups < 65535 ? row_groups : 65535));
    multiply_k_signs_kernel<<<grid, 256, 0, s>>>(in, out, rows, cols, side == Side::left, seed);
    CUDA_CHECK(cudaGetLastError());
}

void round_bf16(float* x, int64_t n, cudaStream_t s) {
    if (n == 0) return;
    round_bf16_kernel<<<blocks_for(n), 256, 0, s>>>(x, n);
    CUDA_CHECK(cudaGetLastError());
}

int k_axis(Side s) { return s == Side::left ? 1 : 0; }

}  // namespace

struct LpMatmulCuda::State {
    explicit State(cudaStream_t s) : stream(s), blas(s) {}
    cudaStream_t stream;
    CudaBlas blas;
    OutlierExtractionWorkspace oe;
    DeviceBuffer<float> deq_a, deq_b, tmp;
    DeviceBuffer<__nv_bfloat16> bf_a, bf_b;
    std::map<int64_t, DeviceBuffer<float>> dense_hadamard;  // n → H_n (n × n), for OHT
    MxGemmScratch mx;                                        // the tensor-core MX GEMM's E4M3 copies
    bool tensor_core_mx = false;

    const float* hadamard_matrix(int64_t n) {
        auto it = dense_hadamard.find(n);
        if (it != dense_hadamard.end()) return it->second.data();
        std::vector<float> h(size_t(n * n), 0.0f);
        for (int64_t i = 0; i < n; ++i) h[size_t(i * n + i)] = 1.0f;
        HadamardOptions o;
        o.axis = 1;
        hadamard_transform(h.data(), n, n, o);  // rows of the identity transformed: H (symmetric for 2^k)
        DeviceBuffer<float> d(h.size());
        d.upload(h.data(), h.size());
        return dense_hadamard.emplace(n, std::move(d)).first->second.data();
    }
};

LpMatmulCuda::LpMatmulCuda(cudaStream_t stream) : st_(std::make_unique<State>(stream)) {}

LpMatmulCuda::~LpMatmulCuda() = default;

cudaStream_t LpMatmulCuda::stream() const { return st_->stream; }

void LpMatmulCuda::set_tensor_core_mx(bool on) { st_->tensor_core_mx = on; }

bool LpMatmulCuda::uses_tensor_core_mx(const PreparedOperandCuda& a, const PreparedOperandCuda& b) const {
    auto fp8_exact = [](const PreparedOperandCuda& p) {
        return p.quantized && !p.nvfp4 && p.element == MxElement::e2m1;
    };
    return st_->tensor_core_mx && a.strategy != Strategy::full && a.strategy != Strategy::oht && fp8_exact(a) && fp8_exact(b) &&
           a.cols % kMxBlock == 0 && cuda_tma_usable();
}

void LpMatmulCuda::gemm(const float* a, const float* b, int64_t m, int64_t k, int64_t n, bool bf16_operands, float* c) {
    const float one = 1.0f, zero = 0.0f;
    // row-major C = A·B  ⇔  column-major Cᵀ = Bᵀ·Aᵀ
    if (bf16_operands) {
        if (st_->bf_a.size() < size_t(m * k)) st_->bf_a.resize(size_t(m * k));
        if (st_->bf_b.size() < size_t(k * n)) st_->bf_b.resize(size_t(k * n));
        to_bf16_kernel<<<blocks_for(m * k), 256, 0, st_->stream>>>(a, st_->bf_a.data(), m * k);
        to_bf16_kernel<<<blocks_for(k * n), 256, 0, st_->stream>>>(b, st_->bf_b.data(), k * n);
        CUDA_CHECK(cudaGetLastError());
        cublas_check(cublasGemmEx(st_->blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, st_->bf_b.data(),
                                  CUDA_R_16BF, int(n), st_->bf_a.data(), CUDA_R_16BF, int(k), &zero, c, CUDA_R_32F, int(n),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx(bf16)");
    } else {
        cublas_check(cublasGemmEx(st_->blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, b, CUDA_R_32F, int(n), a,
                                  CUDA_R_32F, int(k), &zero, c, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx(fp32)");
    }
}

PreparedOperandCuda LpMatmulCuda::prepare(const float* t, int64_t rows, int64_t cols, Side side, Strategy s,
                                          const LpMatmulOptions& opts) {
    cudaStream_t stream = st_->stream;
    PreparedOperandCuda p;
    p.side = side;
    p.strategy = s;
    p.rows = rows;
    p.cols = cols;
    p.nvfp4 = opts.nvfp4;
    p.element = opts.element;
    p.random_signs_seed = applied_random_signs_seed(s, opts);
    const int64_t n = rows * cols;
    const bool needs_hp = s == Strategy::full || (s == Strategy::iht_oe_left && side == Side::right) ||
                          (s == Strategy::iht_oe_right && side == Side::left);
    if (needs_hp) {
        p.high_precision.resize(size_t(n));
        CUDA_CHECK(cudaMemcpyAsync(p.high_precision.data(), t, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream));
        if (opts.high_precision_bf16) round_bf16(p.high_precision.data(), n, stream);
    }
    if (s == Strategy::full) return p;

    DeviceBuffer<float> work(static_cast<size_t>(n));
    const bool extract = (s == Strategy::iht_oe_left && side == Side::left) || (s == Strategy::iht_oe_right && side == Side::right);
    // The random signs ride on the working copy; OE takes its slice from the unsigned operand and signs the
    // clean one after (the CPU's order, so the zeroed vectors get the same signed zeros).
    const bool signs = p.random_signs_seed != 0;
    if (signs && !extract) multiply_k_signs(t, work.data(), rows, cols, side, p.random_signs_seed, stream);
    else CUDA_CHECK(cudaMemcpyAsync(work.data(), t, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream));
    if (extract) {
        const bool by_rows = side == Side::left;
        const int64_t dim = by_rows ? rows : cols, kk = opts.oe_k < dim ? opts.oe_k : dim;
        p.slice.resize(size_t(kk * (by_rows ? cols : rows)));
        p.indices.resize(size_t(kk > 0 ? kk : 1));
        p.k_extracted = split_outliers_cuda(work.data(), rows, cols, by_rows, kk, opts.oe_metric, work.data(), p.slice.data(),
                                            p.indices.data(), st_->oe, stream);
        if (opts.high_precision_bf16) round_bf16(p.slice.data(), int64_t(p.slice.size()), stream);
        if (signs) multiply_k_signs(work.data(), work.data(), rows, cols, side, p.random_signs_seed, stream);
    }
    if (s == Strategy::oht) {
        // outer dimension, full size: left H_M·A, right B·H_N (dense products; analysis only)
        const int64_t dim = side == Side::left ? rows : cols;
        if (dim <= 0 || (dim & (dim - 1)) != 0)  // the dense H_n below is symmetric (H = Hᵀ = H⁻¹) only for 2^k
            cuda_input_error("lp_matmul (CUDA): OHT needs power-of-two outer dimensions, got " + std::to_string(dim));
        const float* h = st_->hadamard_matrix(dim);
        DeviceBuffer<float> out(static_cast<size_t>(n));
        if (side == Side::left) gemm(h, work.data(), rows, rows, cols, false, out.data());
        else gemm(work.data(), h, rows, cols, cols, false, out.data());
        work = std::move(out);
    } else if (s != Strategy::plain) {
        block_hadamard_cuda(work.data(), rows, cols, kIhtBlock, k_axis(side), stream);
    }
    if (!opts.quantize) {
        p.dense = std::move(work);
        return p;
    }
    p.quantized = true;
    const QuantizeOptions qo{k_axis(side), side == Side::left ? opts.rounding_a : opts.rounding_b,
                             side == Side::left ? opts.seed_a : opts.seed_b};
    if (opts.nvfp4) {
        p.codes.resize(size_t(nvfp4_code_bytes(rows, cols)));
        p.scales.resize(size_t(nvfp4_scale_bytes(rows, cols)));
        p.tensor_scale.resize(1);
        nvfp4_quantize_cuda(work.data(), rows, cols, qo, p.codes.data(), p.scales.data(), p.tensor_scale.data(), stream);
    } else {
        p.codes.resize(size_t(mx_code_bytes(opts.element, rows, cols)));
        p.scales.resize(size_t(mx_scale_bytes(rows, cols)));
        mx_quantize_cuda(work.data(), rows, cols, opts.element, opts.scale_rule, qo, p.codes.data(), p.scales.data(), stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));  // `work` is freed on return
    return p;
}

void LpMatmulCuda::matmul_prepared(const PreparedOperandCuda& a, const PreparedOperandCuda& b, const LpMatmulOptions& opts,
                                   float* c) {
    if (a.side != Side::left || b.side != Side::right) cuda_usage_error("lp_matmul: operands must be prepared as (left, right)");
    if (a.strategy != b.strategy) cuda_usage_error("lp_matmul: operands prepared for different strategies");
    if (a.random_signs_seed != b.random_signs_seed)
        cuda_usage_error("lp_matmul: operands prepared with different random signs (seeds " + std::to_string(a.random_signs_seed) +
                         " and " + std::to_string(b.random_signs_seed) + "); prepare both with the same random_signs_seed");
    if (a.cols != b.rows) cuda_input_error("lp_matmul: inner dimensions of A and B differ");
    const int64_t m = a.rows, k = a.cols, n = b.cols;
    const Strategy s = a.strategy;
    cudaStream_t stream = st_->stream;
    if (s == Strategy::full) {
        gemm(a.high_precision.data(), b.high_precision.data(), m, k, n, opts.high_precision_bf16, c);
    } else {
        auto main_operand = [&](const PreparedOperandCuda& p, DeviceBuffer<float>& deq) -> const float* {
            if (!p.quantized) return p.dense.data();
            if (deq.size() < size_t(p.rows * p.cols)) deq.resize(size_t(p.rows * p.cols));
            if (p.nvfp4)
                nvfp4_dequantize_cuda(p.codes.data(), p.scales.data(), p.tensor_scale.data(), p.rows, p.cols, k_axis(p.side),
                                      deq.data(), stream);
            else
                mx_dequantize_cuda(p.codes.data(), p.scales.data(), p.rows, p.cols, p.element, k_axis(p.side), deq.data(), stream);
            return deq.data();
        };
        if (uses_tensor_core_mx(a, b)) {
            // codes and scales as prepared: A [M][K] and B's [N][K] storage, both blocked along K
            mx_gemm_fp8_cuda({a.codes.data(), a.scales.data(), a.element}, {b.codes.data(), b.scales.data(), b.element}, m, n, k,
                             c, nullptr, stream, &st_->mx);
        } else {
            const float* am = main_operand(a, st_->deq_a);
            const float* bm = main_operand(b, st_->deq_b);
            // MX values are exact in BF16; NVFP4 values and unquantized operands are not → FP32 product
            gemm(am, bm, m, k, n, a.quantized && !a.nvfp4, c);
        }
        if (s == Strategy::oht) {
            if (st_->tmp.size() < size_t(m * n)) st_->tmp.resize(size_t(m * n));
            gemm(st_->hadamard_matrix(m), c, m, m, n, false, st_->tmp.data());
            gemm(st_->tmp.data(), st_->hadamard_matrix(n), m, n, n, false, c);
        }
    }
    if (s == Strategy::iht_oe_left && a.k_extracted > 0) {
        if (st_->tmp.size() < size_t(a.k_extracted * n)) st_->tmp.resize(size_t(a.k_extracted * n));
        gemm(a.slice.data(), b.high_precision.data(), a.k_extracted, k, n, opts.high_precision_bf16, st_->tmp.data());
        scatter_outliers_cuda(st_->tmp.data(), a.k_extracted, a.indices.data(), true, c, m, n, stream);
    }
    if (s == Strategy::iht_oe_right && b.k_extracted > 0) {
        if (st_->tmp.size() < size_t(m * b.k_extracted)) st_->tmp.resize(size_t(m * b.k_extracted));
        gemm(a.high_precision.data(), b.slice.data(), m, k, b.k_extracted, opts.high_precision_bf16, st_->tmp.data());
        scatter_outliers_cuda(st_->tmp.data(), b.k_extracted, b.indices.data(), false, c, m, n, stream);
    }
    if (opts.output_bf16) round_bf16(c, m * n, stream);
}

void LpMatmulCuda::matmul(const float* a, const float* b, int64_t m, int64_t k, int64_t n, Strategy s,
                          const LpMatmulOptions& opts, float* c) {
    PreparedOperandCuda pa = prepare(a, m, k, Side::left, s, opts);
    PreparedOperandCuda pb = prepare(b, k, n, Side::right, s, opts);
    matmul_prepared(pa, pb, opts, c);
    CUDA_CHECK(cudaStreamSynchronize(st_->stream));
}

}  // namespace lowbit
