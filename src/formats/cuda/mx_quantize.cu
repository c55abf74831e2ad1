// mx_quantize.cu — launchers of the MX quantization kernels (templates in mx_kernels.cuh) and the MX
// dequantization kernel.
//
// Napkin math, 8192×8192 BF16 input, MXFP4: reads 134 MB, writes 33.5 MB codes + 2.1 MB scales = 170 MB;
// at the H200's ~4.3 TB/s device-copy rate (read + write) the floor is ~40 µs. MXFP8: writes 67 MB codes,
// floor ~47 µs. FP32 input doubles the reads. The E2M1 path is issue-bound near that floor (~20
// instructions per element, see e2m1_fast.h); the other elements use the generic encode_element (~40
// instructions per element) and are issue-bound above it.
#include "formats/cuda/mx_quantize.cuh"

#include <string>
#include <type_traits>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"

namespace lowbit {

using namespace cuda_detail;

int64_t mx_code_bytes(MxElement e, int64_t rows, int64_t cols) {
    return e == MxElement::e2m1 ? rows * cols / 2 : rows * cols;
}
int64_t mx_scale_bytes(int64_t rows, int64_t cols) { return rows * cols / kMxBlock; }

namespace {

template <typename T, bool kFp4, Rounding kRoundT>
void launch_mx(const T* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, const QuantizeOptions& opt, uint8_t* codes,
               uint8_t* scales, cudaStream_t stream) {
    const MxScaleRuleBits rb = mx_scale_rule_bits(mx_spec(e), rule);
    if (opt.axis == 1) {
        const int64_t n = rows * cols;
        mx_rows_kernel<T, kFp4, IdentityPrologue, kRoundT><<<mx_rows_grid(n / kMxBlock), kRowsThreads, 0, stream>>>(
            x, n, e, rule, rb, opt.rounding, 1.0f, opt.seed, codes, scales, NoBlockStats::Out{});
    } else {
        const ColsGrid grid(rows, cols, kColsTileCols);
        const unsigned ctas = grid.cols_kernel_blocks(mx_min_ctas_per_sm(kFp4, false, kRoundT), kRoundT, false);
        if constexpr (kFp4 && std::is_same_v<T, __nv_bfloat16>)
            if (launch_mx_cols_e2m1_tma<IdentityPrologue, kRoundT, NoBlockStats>(x, rows, cols, rule, rb, 1.0f, opt.seed, codes, scales,
                                                                                 NoBlockStats::Out{}, grid, stream)) {
                CUDA_CHECK(cudaGetLastError());
                return;
            }
        mx_cols_kernel<T, kFp4, IdentityPrologue, kRoundT><<<ctas, kColsThreads, 0, stream>>>(
            x, rows, cols, grid.col_tiles, e, rule, rb, opt.rounding, 1.0f, opt.seed, codes, scales, NoBlockStats::Out{});
    }
    CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void mx_quantize_any(const T* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, const QuantizeOptions& opt,
                     uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
    if (opt.axis != 0 && opt.axis != 1) cuda_usage_error("mx_quantize_cuda: axis must be 0 or 1, got " + std::to_string(opt.axis));
    if (rows <= 0 || cols <= 0)
        cuda_input_error("mx_quantize_cuda: empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    check_block_divisible(opt.axis == 1 ? cols : rows, kMxBlock, opt.axis == 1 ? "columns" : "rows", mx_element_name(e));
    cuda_check_aligned(x, 16, "input", "mx_quantize_cuda");
    cuda_check_aligned(codes, 16, "codes", "mx_quantize_cuda");
    cuda_check_aligned(scales, 16, "scales", "mx_quantize_cuda");
    if (opt.axis == 0 && (rows / 32 / kColsWarps + 1) * (cols / kColsTileCols + 1) > 0x7FFFFFFFll)
        cuda_input_error("mx_quantize_cuda: matrix too large for one launch");
    if (e == MxElement::e2m1) {
        switch (opt.rounding) {
            case Rounding::nearest_even:
                return launch_mx<T, true, Rounding::nearest_even>(x, rows, cols, e, rule, opt, codes, scales, stream);
            case Rounding::half_away:
                return launch_mx<T, true, Rounding::half_away>(x, rows, cols, e, rule, opt, codes, scales, stream);
            case Rounding::stochastic:
                return launch_mx<T, true, Rounding::stochastic>(x, rows, cols, e, rule, opt, codes, scales, stream);
        }
        cuda_usage_error("mx_quantize_cuda: unknown rounding mode");
    }
    if (opt.rounding == Rounding::stochastic)
        return launch_mx<T, false, Rounding::stochastic>(x, rows, cols, e, rule, opt, codes, scales, stream);
    return launch_mx<T, false, Rounding::nearest_even>(x, rows, cols, e, rule, opt, codes, scales, stream);
}

// One thread per output element (row-major, so the FP32 writes coalesce); dequantization is not on a hot
// path and reads 1/8 of what it writes.
__global__ void mx_dequantize_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales, int64_t rows,
                                     int64_t cols, MxElement e, int axis, float* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t o = axis == 1 ? r : c, k = axis == 1 ? c : r, inner = axis == 1 ? cols : rows;
    const int64_t bi = o * inner + k;
    const uint8_t scale = scales[o * (inner / kMxBlock) + k / kMxBlock];
    const uint32_t code = e == MxElement::e2m1 ? (codes[bi >> 1] >> (4 * (bi & 1))) & 0xFu : codes[bi];
    out[i] = mx_decode(code, scale, mx_spec(e));
}

// One thread per 8 consecutive values of the blocked order (one MX block holds 4 such groups): E2M1 reads one
// 32-bit word, byte elements 8 bytes; 16 bytes of BF16 written.
__global__ void mx_dequantize_blocked_bf16_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                                                  int64_t groups, MxElement e, __nv_bfloat16* __restrict__ out) {
    const MxSpec spec = mx_spec(e);
    for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
        const uint8_t scale = scales[g / (kMxBlock / 8)];
        uint32_t lo, hi;  // the 8 codes, 4 bits (E2M1) or 8 bits each
        if (e == MxElement::e2m1) {
            lo = reinterpret_cast<const uint32_t*>(codes)[g];
            hi = 0;
        } else {
            const uint2 w = reinterpret_cast<const uint2*>(codes)[g];
            lo = w.x;
            hi = w.y;
        }
        __align__(16) __nv_bfloat16 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t code = e == MxElement::e2m1 ? (lo >> (4 * i)) & 0xFu : ((i < 4 ? lo : hi) >> (8 * (i % 4))) & 0xFFu;
            v[i] = __float2bfloat16_rn(mx_decode(code, scale, spec));
        }
        reinterpret_cast<uint4*>(out)[g] = *reinterpret_cast<const uint4*>(v);
    }
}

}  // namespace

void mx_quantize_cuda(const float* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, const QuantizeOptions& opt,
                      uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
    mx_quantize_any(x, rows, cols, e, rule, opt, codes, scales, stream);
}

void mx_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule,
                      const QuantizeOptions& opt, uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
    mx_quantize_any(x, rows, cols, e, rule, opt, codes, scales, stream);
}

void mx_dequantize_cuda(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, MxElement e, int axis,
                        float* out, cudaStream_t stream) {
    if (axis != 0 && axis != 1) cuda_usage_error("mx_dequantize_cuda: axis must be 0 or 1, got " + std::to_string(axis));
    if (rows <= 0 || cols <= 0)
        cuda_input_error("mx_dequantize_cuda: empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    check_block_divisible(axis == 1 ? cols : rows, kMxBlock, axis == 1 ? "columns" : "rows", mx_element_name(e));
    const int64_t n = rows * cols;
    mx_dequantize_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(codes, scales, rows, cols, e, axis, out);
    CUDA_CHECK(cudaGetLastError());
}

void mx_dequantize_blocked_bf16_cuda(const uint8_t* codes, const uint8_t* scales, int64_t outer, int64_t inner, MxElement e,
                                     __nv_bfloat16* out, cudaStream_t stream) {
    if (outer <= 0 || inner <= 0)
        cuda_input_error("mx_dequantize_blocked_bf16_cuda: empty matrix " + std::to_string(outer) + "x" + std::to_string(inner));
    check_block_divisible(inner, kMxBlock, "inner elements", mx_element_name(e));
    cuda_check_aligned(codes, 16, "codes", "mx_dequantize_blocked_bf16_cuda");
    cuda_check_aligned(out, 16, "out", "mx_dequantize_blocked_bf16_cuda");
    const int64_t groups = outer * inner / 8, wanted = (groups + 255) / 256, limit = int64_t(1) << 16;
    mx_dequantize_blocked_bf16_kernel<<<unsigned(wanted < limit ? wanted : limit), 256, 0, stream>>>(codes, scales, groups, e, out);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
