// int_quantize.cu — integer-grid kernels (see int_quantize.cuh).
//
// Napkin math, 8192×8192 BF16, INT4 groups of 128 along rows: reads 134 MB (twice from the kernel's view:
// the second pass over a 256-byte group hits L1/L2), writes 67 MB codes (one byte each, as the CPU
// layout) + 4.2 MB params = 205 MB → 48 µs at 4.3 TB/s. Arithmetic: the reference's IEEE division and
// round_significand per element (~30 instructions): issue-bound near ~60 µs.
//
// Group statistics follow the CPU exactly: lo/hi start at +0 and are replaced only by strictly smaller /
// larger values (std::min / std::max semantics), so the result is the same in any reduction order; a NaN
// or Inf anywhere in the group gives the NaN params {NaN, 0}.
#include "formats/cuda/int_quantize.cuh"

#include <string>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"

namespace lowbit {

using namespace cuda_detail;

namespace {

constexpr int kThreads = 256;

struct GroupStats {
    float lo = 0.0f, hi = 0.0f;
    bool bad = false;
    __device__ __forceinline__ void add(float w) {
        bad |= is_nan_or_inf(w);
        lo = w < lo ? w : lo;
        hi = hi < w ? w : hi;
    }
    __device__ __forceinline__ void merge(const GroupStats& o) {
        bad |= o.bad;
        lo = o.lo < lo ? o.lo : lo;
        hi = hi < o.hi ? o.hi : hi;
    }
    __device__ __forceinline__ IntGridParams params(int bits, bool sym) const {
        return bad ? IntGridParams{__uint_as_float(0x7FC00000u), 0.0f} : int_grid_params(lo, hi, bits, sym);
    }
};

__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
}
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&v)[4]) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    bf16x2_to_float(u.x, v[0], v[1]);
    bf16x2_to_float(u.y, v[2], v[3]);
}

template <bool kDraw>
__device__ __forceinline__ uint32_t int_code(float w, const IntGridParams& p, int bits, Rounding r, uint64_t seed, uint64_t idx) {
    const uint32_t rnd = kDraw ? counter_random24(seed, idx) : 0u;
    return int_grid_encode(w, p, bits, r, rnd);
}

// Axis 1: one warp per (row, group); the group is the flat range [g·G, g·G + G) (row-major, so the flat
// index is also the SR index and the blocked index). vec4: G % 4 == 0, each lane takes 4 consecutive
// elements per step (16/8-byte loads, one 4-byte code store).
template <typename T, bool kDraw>
__global__ void __launch_bounds__(kThreads) int_rows_kernel(const T* __restrict__ x, int64_t groups, int64_t G, int bits, bool sym,
                                                            Rounding rounding, uint64_t seed, bool vec4, uint8_t* __restrict__ q,
                                                            IntGridParams* __restrict__ params) {
    const int lane = threadIdx.x & 31;
    const int64_t g = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    if (g >= groups) return;  // whole warp
    const int64_t base = g * G;
    GroupStats st;
    if (vec4) {
        for (int64_t i = 4 * lane; i < G; i += 128) {
            float v[4];
            load4(x + base + i, v);
#pragma unroll
            for (int j = 0; j < 4; ++j) st.add(v[j]);
        }
    } else {
        for (int64_t i = lane; i < G; i += 32) st.add(load1(x + base + i));
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) {
        GroupStats o;
        o.lo = __shfl_xor_sync(kFullMask, st.lo, m);
        o.hi = __shfl_xor_sync(kFullMask, st.hi, m);
        o.bad = __shfl_xor_sync(kFullMask, int(st.bad), m) != 0;
        st.merge(o);
    }
    const IntGridParams p = st.params(bits, sym);
    if (lane == 0) params[g] = p;
    if (vec4) {
        for (int64_t i = 4 * lane; i < G; i += 128) {
            float v[4];
            load4(x + base + i, v);
            uint32_t word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) word |= int_code<kDraw>(v[j], p, bits, rounding, seed, uint64_t(base + i + j)) << (8 * j);
            *reinterpret_cast<uint32_t*>(q + base + i) = word;
        }
    } else {
        for (int64_t i = lane; i < G; i += 32)
            q[base + i] = uint8_t(int_code<kDraw>(load1(x + base + i), p, bits, rounding, seed, uint64_t(base + i)));
    }
}

// Axis 0: one thread per (column, group of G rows); threads of a warp take consecutive columns, so every
// row access is coalesced. Codes of a column are contiguous ([col][rows]); pack4 (G % 4 == 0) stores
// them 4 at a time. blockIdx.x = group · col_tiles + col_tile.
template <typename T, bool kDraw>
__global__ void __launch_bounds__(kThreads) int_cols_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t G,
                                                            int64_t col_tiles, int bits, bool sym, Rounding rounding, uint64_t seed,
                                                            bool pack4, uint8_t* __restrict__ q, IntGridParams* __restrict__ params) {
    const int64_t g = int64_t(blockIdx.x) / col_tiles;
    const int64_t c = (int64_t(blockIdx.x) % col_tiles) * kThreads + threadIdx.x;
    if (c >= cols) return;
    const int64_t r0 = g * G;
    GroupStats st;
    for (int64_t i = 0; i < G; ++i) st.add(load1(x + (r0 + i) * cols + c));
    const IntGridParams p = st.params(bits, sym);
    params[c * (rows / G) + g] = p;
    uint8_t* qc = q + c * rows + r0;
    if (pack4) {
        for (int64_t i = 0; i < G; i += 4) {
            uint32_t word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t r = r0 + i + j;
                word |= int_code<kDraw>(load1(x + r * cols + c), p, bits, rounding, seed, uint64_t(r * cols + c)) << (8 * j);
            }
            *reinterpret_cast<uint32_t*>(qc + i) = word;
        }
    } else {
        for (int64_t i = 0; i < G; ++i) {
            const int64_t r = r0 + i;
            qc[i] = uint8_t(int_code<kDraw>(load1(x + r * cols + c), p, bits, rounding, seed, uint64_t(r * cols + c)));
        }
    }
}

__global__ void int_dequantize_kernel(const uint8_t* __restrict__ q, const IntGridParams* __restrict__ params, int64_t rows,
                                      int64_t cols, int64_t G, int axis, float* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t o = axis == 1 ? r : c, k = axis == 1 ? c : r, inner = axis == 1 ? cols : rows;
    out[i] = int_grid_decode(q[o * inner + k], params[o * (inner / G) + k / G]);
}

template <typename T, bool kDraw>
void launch_int(const T* x, int64_t rows, int64_t cols, int64_t G, const IntGridFormat& f, const QuantizeOptions& opt, uint8_t* q,
                IntGridParams* params, cudaStream_t stream) {
    if (opt.axis == 1) {
        const int64_t groups = rows * (cols / G);
        int_rows_kernel<T, kDraw><<<unsigned((groups * 32 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
            x, groups, G, f.bits, f.sym, opt.rounding, opt.seed, G % 4 == 0, q, params);
    } else {
        const int64_t col_tiles = (cols + kThreads - 1) / kThreads;
        int_cols_kernel<T, kDraw><<<unsigned(col_tiles * (rows / G)), kThreads, 0, stream>>>(
            x, rows, cols, G, col_tiles, f.bits, f.sym, opt.rounding, opt.seed, G % 4 == 0, q, params);
    }
    CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void int_quantize_any(const T* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt, uint8_t* q,
                      IntGridParams* params, cudaStream_t stream) {
    const char* op = "int_quantize_cuda";
    if (opt.axis != 0 && opt.axis != 1) cuda_usage_error(std::string(op) + ": axis must be 0 or 1, got " + std::to_string(opt.axis));
    if (rows <= 0 || cols <= 0) cuda_input_error(std::string(op) + ": empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    const int64_t G = int_group_size(f, opt.axis == 1 ? cols : rows);  // checks bits and divisibility
    cuda_check_aligned(x, 16, "input", op);
    cuda_check_aligned(q, 16, "codes", op);
    cuda_check_aligned(params, 16, "params", op);
    if (rows * cols / G * 32 / kThreads > 0x7FFFFFFFll) cuda_input_error(std::string(op) + ": matrix too large for one launch");
    if (opt.rounding == Rounding::stochastic) launch_int<T, true>(x, rows, cols, G, f, opt, q, params, stream);
    else launch_int<T, false>(x, rows, cols, G, f, opt, q, params, stream);
}

}  // namespace

void int_quantize_cuda(const float* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt, uint8_t* q,
                       IntGridParams* params, cudaStream_t stream) {
    int_quantize_any(x, rows, cols, f, opt, q, params, stream);
}

void int_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt,
                       uint8_t* q, IntGridParams* params, cudaStream_t stream) {
    int_quantize_any(x, rows, cols, f, opt, q, params, stream);
}

void int_dequantize_cuda(const uint8_t* q, const IntGridParams* params, int64_t rows, int64_t cols, const IntGridFormat& f,
                         int axis, float* out, cudaStream_t stream) {
    if (axis != 0 && axis != 1) cuda_usage_error("int_dequantize_cuda: axis must be 0 or 1, got " + std::to_string(axis));
    if (rows <= 0 || cols <= 0)
        cuda_input_error("int_dequantize_cuda: empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    const int64_t G = int_group_size(f, axis == 1 ? cols : rows);
    const int64_t n = rows * cols;
    int_dequantize_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(q, params, rows, cols, G, axis, out);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
