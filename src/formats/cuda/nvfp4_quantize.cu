// nvfp4_quantize.cu — NVFP4 kernels (see nvfp4_quantize.cuh): an exact tensor-amax reduction, then block
// quantization, then (separately) dequantization.
//
// Napkin math, 8192×8192 BF16: the amax pass reads 134 MB (31 µs at 4.3 TB/s, read-only streams run a
// little faster than copies); the quantizer reads 134 MB and writes 33.5 MB codes + 4.2 MB block scales
// (40 µs): ~71 µs for both. The two-pass structure is inherent to a tensor scale computed from the same
// tensor (a fused version would need the amax from the previous step, as NVIDIA's recipes do).
// Arithmetic per element: one IEEE division x / denominator (the reference's) + the E2M1 encoder.
#include "formats/cuda/nvfp4_quantize.cuh"

#include <algorithm>
#include <string>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"

namespace lowbit {

using namespace cuda_detail;

namespace {

constexpr int kThreads = 256;

// Integer max of abs_bits over the tensor: order-independent and exact, the CPU's definition.
template <typename T>
__global__ void __launch_bounds__(kThreads) abs_max_bits_kernel(const T* __restrict__ x, int64_t n, uint32_t* __restrict__ out) {
    uint32_t m = 0;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t n8 = n / 8;
#pragma unroll 4
    for (int64_t i = tid; i < n8; i += stride) {
        float v[8];
        load8(x + 8 * i, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) m = max(m, abs_bits(v[j]));
    }
    for (int64_t i = n8 * 8 + tid; i < n; i += stride) m = max(m, abs_bits(load1(x + i)));
    m = __reduce_max_sync(kFullMask, m);
    if ((threadIdx.x & 31) == 0) atomicMax(out, m);
}

// Codes of 8 elements of one block with denominator denom; bad (denominator 0 or not finite): all 0,
// as nvfp4_encode. The fast E2M1 encoders equal encode_element for every non-NaN value, and x / denom is
// never NaN here (a NaN in the tensor makes every denominator NaN).
template <Rounding kRoundT>
__device__ __forceinline__ uint32_t nvfp4_encode8(const float (&t)[8], float denom, bool bad, const RandomStream& rs, uint64_t idx0,
                                                  uint64_t idx_step) {
    uint64_t ik = 0, dk = 0;
    if constexpr (kRoundT == Rounding::stochastic) {
        ik = idx0 * RandomStream::kStep;
        dk = idx_step * RandomStream::kStep;
    }
    uint32_t p = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        uint32_t rnd = 0;
        if constexpr (kRoundT == Rounding::stochastic) rnd = rs.at_scaled(ik + uint64_t(j) * dk);
        const float xs = t[j] / denom;
        p = push_e2m1(p, e2m1_magnitude_fast<kRoundT>(xs, rnd), xs);
    }
    return bad ? 0u : p;
}

struct Nvfp4Block {
    uint8_t code;
    float denom;
    bool bad;
};
__device__ __forceinline__ Nvfp4Block nvfp4_block(uint32_t bmax, float ts) {
    Nvfp4Block b;
    b.code = nvfp4_block_code(bmax, ts);
    b.denom = nvfp4_denominator(b.code, ts);
    b.bad = b.denom == 0.0f || is_nan_or_inf(b.denom);
    return b;
}

// Axis 1: a thread owns two consecutive 16-element blocks (32 elements: 16 code bytes, 2 scale bytes),
// the flat index being the SR index.
template <typename T, Rounding kRoundT>
__global__ void __launch_bounds__(kThreads) nvfp4_rows_kernel(const T* __restrict__ x, int64_t n, const uint32_t* amax_bits,
                                                              uint64_t seed, uint8_t* __restrict__ codes,
                                                              uint8_t* __restrict__ bscales) {
    const float ts = nvfp4_tensor_scale(*amax_bits);
    const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t nb = n >> 4;
    const int64_t b0 = 2 * tid;
    if (b0 >= nb) return;
    const bool has1 = b0 + 1 < nb;
    const RandomStream rs(seed);
    float v[2][16];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            float t8[8];
            if (h == 0 || has1) {
                load8(x + (b0 + h) * 16 + 8 * m, t8);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) t8[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) v[h][8 * m + j] = t8[j];
        }
    uint32_t w[4];
    uint32_t sc = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        uint32_t bmax = 0;
#pragma unroll
        for (int j = 0; j < 16; ++j) bmax = max(bmax, abs_bits(v[h][j]));
        const Nvfp4Block b = nvfp4_block(bmax, ts);
        sc |= uint32_t(b.code) << (8 * h);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            float t8[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) t8[j] = v[h][8 * m + j];
            w[2 * h + m] = nvfp4_encode8<kRoundT>(t8, b.denom, b.bad, rs, uint64_t((b0 + h) * 16 + 8 * m), 1);
        }
    }
    if (has1) {
        reinterpret_cast<uint4*>(codes)[b0 >> 1] = make_uint4(w[0], w[1], w[2], w[3]);
        reinterpret_cast<uint16_t*>(bscales)[b0 >> 1] = uint16_t(sc);
    } else {
        reinterpret_cast<uint2*>(codes)[b0] = make_uint2(w[0], w[1]);
        bscales[b0] = uint8_t(sc);
    }
}

// Axis 0: a thread owns a column pair and kb consecutive 16-row blocks (8 code bytes per column block).
template <typename T, Rounding kRoundT>
__global__ void __launch_bounds__(128) nvfp4_cols_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int kb, int64_t n_chunks,
                                                         bool vec_pairs, const uint32_t* amax_bits, uint64_t seed,
                                                         uint8_t* __restrict__ codes, uint8_t* __restrict__ bscales) {
    const int64_t chunk = int64_t(blockIdx.x) % n_chunks;
    const int64_t tile = int64_t(blockIdx.x) / n_chunks;
    const int64_t c0 = (tile * 128 + threadIdx.x) * 2;
    if (c0 >= cols) return;
    const bool has1 = c0 + 1 < cols;
    const float ts = nvfp4_tensor_scale(*amax_bits);
    const int64_t rbs = rows >> 4;
    const RandomStream rs(seed);
    for (int i = 0; i < kb; ++i) {
        const int64_t rb = chunk * kb + i;
        const int64_t r0 = rb * 16;
        float v[2][16];
#pragma unroll
        for (int r = 0; r < 16; ++r) load_pair(x + (r0 + r) * cols + c0, vec_pairs, has1, v[0][r], v[1][r]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (h == 1 && !has1) break;
            const int64_t c = c0 + h;
            uint32_t bmax = 0;
#pragma unroll
            for (int j = 0; j < 16; ++j) bmax = max(bmax, abs_bits(v[h][j]));
            const Nvfp4Block b = nvfp4_block(bmax, ts);
            uint32_t w[2];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                float t8[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) t8[j] = v[h][8 * m + j];
                w[m] = nvfp4_encode8<kRoundT>(t8, b.denom, b.bad, rs, uint64_t((r0 + 8 * m) * cols + c), uint64_t(cols));
            }
            reinterpret_cast<uint2*>(codes)[(c * rows + r0) >> 4] = make_uint2(w[0], w[1]);
            bscales[c * rbs + rb] = b.code;
        }
    }
}

__global__ void nvfp4_dequantize_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ bscales,
                                        const float* __restrict__ tensor_scale, int64_t rows, int64_t cols, int axis,
                                        float* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t o = axis == 1 ? r : c, k = axis == 1 ? c : r, inner = axis == 1 ? cols : rows;
    const int64_t bi = o * inner + k;
    const float denom = nvfp4_denominator(bscales[o * (inner / kNvfp4Block) + k / kNvfp4Block], *tensor_scale);
    out[i] = nvfp4_decode((codes[bi >> 1] >> (4 * (bi & 1))) & 0xFu, denom);
}

template <typename T, Rounding kRoundT>
void launch_nvfp4(const T* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, const uint32_t* amax_bits, uint8_t* codes,
                  uint8_t* bscales, cudaStream_t stream) {
    if (opt.axis == 1) {
        const int64_t threads = (rows * cols / 16 + 1) / 2;
        nvfp4_rows_kernel<T, kRoundT><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
            x, rows * cols, amax_bits, opt.seed, codes, bscales);
        CUDA_CHECK(cudaGetLastError());
    } else {
        const int kb = cols_blocks_per_thread(rows / 16);
        const int64_t n_chunks = rows / 16 / kb;
        const int64_t tiles = (cols + 255) / 256;
        nvfp4_cols_kernel<T, kRoundT><<<unsigned(n_chunks * tiles), 128, 0, stream>>>(
            x, rows, cols, kb, n_chunks, cols % 2 == 0, amax_bits, opt.seed, codes, bscales);
        CUDA_CHECK(cudaGetLastError());
    }
}

// One thread: tensor_scale = nvfp4_tensor_scale(amax bits). In place when both point to the same word.
__global__ void nvfp4_tensor_scale_kernel(const uint32_t* amax_bits, float* tensor_scale) {
    const uint32_t a = *amax_bits;
    *tensor_scale = nvfp4_tensor_scale(a);
}

template <typename T>
void nvfp4_quantize_any(const T* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, uint8_t* codes, uint8_t* bscales,
                        float* tensor_scale, uint32_t* amax_bits, cudaStream_t stream) {
    const char* op = "nvfp4_quantize_cuda";
    if (opt.axis != 0 && opt.axis != 1) cuda_usage_error(std::string(op) + ": axis must be 0 or 1, got " + std::to_string(opt.axis));
    if (rows <= 0 || cols <= 0) cuda_input_error(std::string(op) + ": empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    check_block_divisible(opt.axis == 1 ? cols : rows, kNvfp4Block, opt.axis == 1 ? "columns" : "rows", "nvfp4");
    cuda_check_aligned(x, 16, "input", op);
    cuda_check_aligned(codes, 16, "codes", op);
    cuda_check_aligned(bscales, 16, "block_scales", op);
    cuda_check_aligned(tensor_scale, 4, "tensor_scale", op);
    cuda_check_aligned(amax_bits, 4, "tensor_amax_bits", op);
    if (rows * cols / 16 / 2 / kThreads > 0x7FFFFFFFll) cuda_input_error(std::string(op) + ": matrix too large for one launch");
    CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(uint32_t), stream));
    const int64_t n = rows * cols;
    const int64_t want = (n / 8 + kThreads - 1) / kThreads;
    const int64_t cap = int64_t(cuda_multiprocessor_count()) * 8;
    abs_max_bits_kernel<T><<<unsigned(std::max<int64_t>(1, std::min(want, cap))), kThreads, 0, stream>>>(x, n, amax_bits);
    CUDA_CHECK(cudaGetLastError());
    switch (opt.rounding) {
        case Rounding::nearest_even: launch_nvfp4<T, Rounding::nearest_even>(x, rows, cols, opt, amax_bits, codes, bscales, stream); break;
        case Rounding::half_away: launch_nvfp4<T, Rounding::half_away>(x, rows, cols, opt, amax_bits, codes, bscales, stream); break;
        case Rounding::stochastic: launch_nvfp4<T, Rounding::stochastic>(x, rows, cols, opt, amax_bits, codes, bscales, stream); break;
        default: cuda_usage_error(std::string(op) + ": unknown rounding mode");
    }
    nvfp4_tensor_scale_kernel<<<1, 1, 0, stream>>>(amax_bits, tensor_scale);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t nvfp4_code_bytes(int64_t rows, int64_t cols) { return rows * cols / 2; }
int64_t nvfp4_scale_bytes(int64_t rows, int64_t cols) { return rows * cols / kNvfp4Block; }

void nvfp4_quantize_cuda(const float* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, const Nvfp4DeviceOutput& out,
                         cudaStream_t stream) {
    nvfp4_quantize_any(x, rows, cols, opt, out.codes, out.block_scales, out.tensor_scale, out.tensor_amax_bits, stream);
}

void nvfp4_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const QuantizeOptions& opt,
                         const Nvfp4DeviceOutput& out, cudaStream_t stream) {
    nvfp4_quantize_any(x, rows, cols, opt, out.codes, out.block_scales, out.tensor_scale, out.tensor_amax_bits, stream);
}

void nvfp4_quantize_cuda(const float* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, uint8_t* codes,
                         uint8_t* block_scales, float* tensor_scale, cudaStream_t stream) {
    nvfp4_quantize_any(x, rows, cols, opt, codes, block_scales, tensor_scale, reinterpret_cast<uint32_t*>(tensor_scale), stream);
}

void nvfp4_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, uint8_t* codes,
                         uint8_t* block_scales, float* tensor_scale, cudaStream_t stream) {
    nvfp4_quantize_any(x, rows, cols, opt, codes, block_scales, tensor_scale, reinterpret_cast<uint32_t*>(tensor_scale), stream);
}

void nvfp4_dequantize_cuda(const uint8_t* codes, const uint8_t* block_scales, const float* tensor_scale, int64_t rows,
                           int64_t cols, int axis, float* out, cudaStream_t stream) {
    if (axis != 0 && axis != 1) cuda_usage_error("nvfp4_dequantize_cuda: axis must be 0 or 1, got " + std::to_string(axis));
    if (rows <= 0 || cols <= 0)
        cuda_input_error("nvfp4_dequantize_cuda: empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    check_block_divisible(axis == 1 ? cols : rows, kNvfp4Block, axis == 1 ? "columns" : "rows", "nvfp4");
    const int64_t n = rows * cols;
    nvfp4_dequantize_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(codes, block_scales, tensor_scale, rows, cols, axis, out);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
