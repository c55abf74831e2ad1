// lp_matmul_cuda.cu — GPU emulation of the low-precision GEMM: kernels for BF16 rounding/conversion and the
// random signs along K, the cuBLAS products, and the orchestration of split → sign → rotate → quantize →
// dequantize → GEMM → slivers (FP32 operands), or of the fused quantization straight from BF16 operands; the
// census of the tensor-core products' window per call site.
#include "adahop/cuda/lp_matmul_cuda.cuh"

#include "core/cuda_blas.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "adahop/cuda/hadamard_mxfp4_stats.cuh"
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

constexpr int kTile = 32;

// out[c][r] = float(in[r][c]) for in [rows, cols] BF16 (a tiled transpose through shared memory).
__global__ void transpose_bf16_to_f32_kernel(const __nv_bfloat16* in, int64_t rows, int64_t cols, float* out) {
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

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, int64_t n, float* out) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = __bfloat162float(in[i]);
}

// out = in (rows × cols) or, transposed, inᵀ (cols × rows), as FP32 (exact).
void bf16_to_f32(const __nv_bfloat16* in, int64_t rows, int64_t cols, bool transpose, float* out, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    if (transpose) {
        const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
        transpose_bf16_to_f32_kernel<<<grid, dim3(kTile, 8), 0, s>>>(in, rows, cols, out);
    } else {
        const int64_t n = rows * cols;
        bf16_to_f32_kernel<<<unsigned(std::min<int64_t>(blocks_for(n), 1 << 16)), 256, 0, s>>>(in, n, out);
    }
    CUDA_CHECK(cudaGetLastError());
}

// out = c (+ beta·out) into FP32, or bf16(c), over n elements.
__global__ void store_kernel(const float* c, int64_t n, float* out_f32, __nv_bfloat16* out_bf16, float beta) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        if (out_bf16) out_bf16[i] = __float2bfloat16_rn(c[i]);
        else out_f32[i] = beta == 0.0f ? c[i] : c[i] + beta * out_f32[i];
    }
}

void store(const float* c, int64_t n, const LpMatmulOutput& out, cudaStream_t s) {
    if (n <= 0) return;
    store_kernel<<<unsigned(std::min<int64_t>(blocks_for(n), 1 << 16)), 256, 0, s>>>(c, n, out.f32, out.bf16, out.beta);
    CUDA_CHECK(cudaGetLastError());
}

void check_output(const LpMatmulOutput& o) {
    if ((o.f32 == nullptr) == (o.bf16 == nullptr))
        cuda_usage_error("lp_matmul: exactly one of the FP32 and BF16 outputs must be given");
    if (o.bf16 && o.beta != 0.0f) cuda_usage_error("lp_matmul: beta needs the FP32 output");
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// out = in·S along K: the random signs of the iht family (s_k = hadamard_random_sign(seed, k), k = column for
// the left operand, row for the right one), an exact multiply by ±1 as in the CPU's randomized transform, so
// the block Hadamard that follows sees the CPU's bits. in == out is allowed. A thread walks one column down
// kSignRows rows: with K along the columns it draws its sign once, with K along the rows the CTA draws one per
// row (drawn per element before: ~40 integer instructions each, which made the rows' case issue-bound).
// Napkin math, 4096×4096 FP32: 134 MB moved → 31 µs at 4.3 TB/s, the cost of the plain copy it replaces
// (without OE); the draws (two 64-bit mix chains each) stay under that.
constexpr int kSignRows = 32;

// Also on BF16 (prepare_bf16's fused path): a sign flip is exact in either type. With K along the rows, the
// CTA draws its 32 rows' signs once into shared memory (every thread of a row needs the same one).
template <typename T>
__global__ void multiply_k_signs_kernel(const T* in, T* out, int64_t rows, int64_t cols, bool k_is_column, uint64_t seed) {
    __shared__ float row_sign[kSignRows];
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const float column_sign = k_is_column && c < cols ? hadamard_random_sign(seed, c) : 1.0f;
    for (int64_t r0 = int64_t(blockIdx.y) * kSignRows; r0 < rows; r0 += int64_t(gridDim.y) * kSignRows) {
        const int64_t r1 = r0 + kSignRows < rows ? r0 + kSignRows : rows;
        if (!k_is_column) {
            __syncthreads();  // the previous rows' signs are read
            if (threadIdx.x < r1 - r0) row_sign[threadIdx.x] = hadamard_random_sign(seed, r0 + threadIdx.x);
            __syncthreads();
        }
        if (c >= cols) continue;
        for (int64_t r = r0; r < r1; ++r) {
            const float sign = k_is_column ? column_sign : row_sign[r - r0];
            out[r * cols + c] = T(float(in[r * cols + c]) * sign);  // exact: ±1 times a T value is a T value
        }
    }
}

// k_is_column: K runs along the columns of in (the left operand as stored; the right one transposed).
template <typename T>
void multiply_k_signs(const T* in, T* out, int64_t rows, int64_t cols, bool k_is_column, uint64_t seed, cudaStream_t s) {
    if (rows == 0 || cols == 0) return;
    const int64_t row_groups = (rows + kSignRows - 1) / kSignRows;
    const dim3 grid(blocks_for(cols), unsigned(row_groups < 65535 ? row_groups : 65535));
    multiply_k_signs_kernel<<<grid, 256, 0, s>>>(in, out, rows, cols, k_is_column, seed);
    CUDA_CHECK(cudaGetLastError());
}

void round_bf16(float* x, int64_t n, cudaStream_t s) {
    if (n == 0) return;
    round_bf16_kernel<<<blocks_for(n), 256, 0, s>>>(x, n);
    CUDA_CHECK(cudaGetLastError());
}

int k_axis(Side s) { return s == Side::left ? 1 : 0; }

// One product's census into its call site's device tally, in stream order (the census never waits for the device):
// tally[0] += its units outside the window (mx_gemm_fp8's per-call counter), tally[1] += its (output tile, chunk)
// pairs on the per-block path, tally[2] += those chained with two planes. Per chunk c, a pair chains when its A tile
// and B tile both have chunk_ok bit c and not both two_planes bit c (INT8 stages, MxGemmWindowGeometry; otherwise
// chunks = 0). One thread per chunk counts its bits. Napkin math: chunks × (row_tiles + column_tiles) × 2 bits, a
// few thousand, read once: ~µs.
constexpr int kCensusThreads = 256;
constexpr int kCensusCounts = 3;  // per site: units outside, pairs block by block, pairs with two planes

__global__ void __launch_bounds__(kCensusThreads)
    add_census_kernel(const unsigned* off_window, const unsigned long long* a_chunk_ok, const unsigned long long* a_two_planes,
                      int row_tiles, const unsigned long long* b_chunk_ok, const unsigned long long* b_two_planes,
                      int column_tiles, int chunks, int words, unsigned long long* tally) {
    __shared__ unsigned long long slow, two;
    if (threadIdx.x == 0) slow = two = 0;
    __syncthreads();
    for (int c = int(threadIdx.x); c < chunks; c += kCensusThreads) {
        const int w = c / 64;
        const unsigned long long bit = 1ull << (c % 64);
        unsigned long long ok_a = 0, ok_b = 0, two_a = 0, two_b = 0;  // two ⊂ ok
        for (int i = 0; i < row_tiles; ++i) {
            ok_a += (a_chunk_ok[int64_t(i) * words + w] & bit) != 0;
            two_a += (a_two_planes[int64_t(i) * words + w] & bit) != 0;
        }
        for (int j = 0; j < column_tiles; ++j) {
            ok_b += (b_chunk_ok[int64_t(j) * words + w] & bit) != 0;
            two_b += (b_two_planes[int64_t(j) * words + w] & bit) != 0;
        }
        atomicAdd(&slow, (unsigned long long)row_tiles * (unsigned long long)column_tiles - (ok_a * ok_b - two_a * two_b));
        atomicAdd(&two, two_a * (ok_b - two_b) + (ok_a - two_a) * two_b);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    tally[0] += *off_window;
    tally[1] += slow;
    tally[2] += two;
}

}  // namespace

struct LpMatmulCuda::State {
    explicit State(cudaStream_t s) : stream(s), blas(s) {}
    cudaStream_t stream;
    CudaBlas blas;
    OutlierExtractionWorkspace oe;
    DeviceBuffer<float> deq_a, deq_b, tmp, c;
    DeviceBuffer<float> old_at_slivers;              // the output's values at the OE rows/columns, for beta
    DeviceBuffer<float> work;                        // prepare's FP32 working copy
    DeviceBuffer<float> sumsq;                       // the fused OE pass's Σx² per block group
    DeviceBuffer<__nv_bfloat16> bf_a, bf_b;          // gemm()'s BF16 operands
    DeviceBuffer<__nv_bfloat16> deq16_a, deq16_b;    // dequantized MX operands, [outer][K]
    DeviceBuffer<__nv_bfloat16> slice16;             // the fused OE pass's slice
    DeviceBuffer<__nv_bfloat16> signed16;            // prepare_bf16's operand times its random signs
    std::map<int64_t, DeviceBuffer<float>> dense_hadamard;  // n → H_n (n × n), for OHT
    MxGemmScratch mx;                                        // the tensor-core MX GEMM's E4M3 copies
    bool tensor_core_mx = false;
    MxGemmFold mx_fold = MxGemmFold::b_columns;
    // The census (set_mx_census): per site, calls, units and (output tile, chunk) pairs on the host; on the device
    // census_counts[3·site …] the units outside the window, the pairs on the per-block path, the pairs with two planes.
    std::vector<MxCensusTally> census;
    DeviceBuffer<unsigned long long> census_counts;
    int census_site = -1;

    // Tallies one product on the tensor cores, just enqueued with these sizes, at the current site.
    void census_product(int64_t m, int64_t n, int64_t k, MxElement a, MxElement b) {
        MxCensusTally& tally = census[size_t(census_site)];
        const MxGemmWindowGeometry g = mx_gemm_fp8_window_geometry(m, n, k, a, b, mx_fold);
        ++tally.calls;
        tally.units += g.units;
        tally.tile_chunks += g.row_tiles * g.column_tiles * g.chunks;
        if (g.units == 0) return;  // the call counted nothing: the counter is not this call's
        add_census_kernel<<<1, kCensusThreads, 0, stream>>>(mx.unfolded.data(), mx.a_chunk_ok.data(), mx.a_two_planes.data(),
                                                            int(g.row_tiles), mx.b_chunk_ok.data(), mx.b_two_planes.data(),
                                                            int(g.column_tiles), int(g.chunks), int(g.chunk_words),
                                                            census_counts.data() + kCensusCounts * census_site);
        CUDA_CHECK(cudaGetLastError());
    }

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

void LpMatmulCuda::set_tensor_core_mx(bool on, MxGemmFold fold) {
    st_->tensor_core_mx = on;
    st_->mx_fold = fold;
}

void LpMatmulCuda::set_mx_census(int sites) {
    if (sites < 0) cuda_usage_error("lp_matmul: the MX census needs a number of sites >= 0, got " + std::to_string(sites));
    st_->census.assign(size_t(sites), MxCensusTally{});
    st_->census_site = -1;
    if (sites == 0) {
        st_->census_counts.release();
        return;
    }
    st_->census_counts.fit(kCensusCounts * size_t(sites));
    CUDA_CHECK(cudaMemsetAsync(st_->census_counts.data(), 0, st_->census_counts.bytes(), st_->stream));
}

void LpMatmulCuda::set_mx_census_site(int site) {
    if (site < -1 || site >= int(st_->census.size()))
        cuda_usage_error("lp_matmul: MX census site " + std::to_string(site) + " outside [-1, " +
                         std::to_string(st_->census.size()) + ") (set_mx_census sets the number of sites; 0: off)");
    st_->census_site = site;
}

std::vector<MxCensusTally> LpMatmulCuda::mx_census() const {
    std::vector<MxCensusTally> tallies = st_->census;
    if (tallies.empty()) return tallies;
    std::vector<unsigned long long> counts(kCensusCounts * tallies.size());
    CUDA_CHECK(cudaMemcpyAsync(counts.data(), st_->census_counts.data(), st_->census_counts.bytes(), cudaMemcpyDeviceToHost,
                               st_->stream));
    CUDA_CHECK(cudaStreamSynchronize(st_->stream));
    for (size_t i = 0; i < tallies.size(); ++i) {
        tallies[i].off_window = int64_t(counts[kCensusCounts * i]);
        tallies[i].slow_tile_chunks = int64_t(counts[kCensusCounts * i + 1]);
        tallies[i].two_plane_tile_chunks = int64_t(counts[kCensusCounts * i + 2]);
    }
    return tallies;
}

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

namespace {

// What prepare() makes of an operand under (strategy, options): sizes of every buffer, so that a reused
// operand keeps its allocations when they repeat and drops what this strategy does not hold.
struct PrepareShape {
    bool needs_hp = false, extract = false, quantized = false, dense = false;
    int64_t slice = 0, indices = 0, codes = 0, scales = 0, tensor_scale = 0, kk = 0;
};

PrepareShape prepare_shape(int64_t rows, int64_t cols, Side side, Strategy s, const LpMatmulOptions& opts) {
    PrepareShape sh;
    sh.needs_hp = s == Strategy::full || (s == Strategy::iht_oe_left && side == Side::right) ||
                  (s == Strategy::iht_oe_right && side == Side::left);
    if (s == Strategy::full) return sh;
    sh.extract = (s == Strategy::iht_oe_left && side == Side::left) || (s == Strategy::iht_oe_right && side == Side::right);
    if (sh.extract) {
        const bool by_rows = side == Side::left;
        const int64_t dim = by_rows ? rows : cols;
        sh.kk = opts.oe_k < dim ? opts.oe_k : dim;
        sh.slice = sh.kk * (by_rows ? cols : rows);
        sh.indices = sh.kk > 0 ? sh.kk : 1;
    }
    sh.quantized = opts.quantize;
    sh.dense = !opts.quantize;
    if (sh.quantized) {
        sh.codes = opts.nvfp4 ? nvfp4_code_bytes(rows, cols) : mx_code_bytes(opts.element, rows, cols);
        sh.scales = opts.nvfp4 ? nvfp4_scale_bytes(rows, cols) : mx_scale_bytes(rows, cols);
        sh.tensor_scale = opts.nvfp4 ? 1 : 0;
    }
    return sh;
}

// Sets p's description and sizes its buffers for sh (contents undefined until filled).
void shape_prepared(PreparedOperandCuda& p, const PrepareShape& sh, int64_t rows, int64_t cols, Side side, Strategy s,
                    const LpMatmulOptions& opts, const __nv_bfloat16* hp_view = nullptr, bool hp_view_transposed = false) {
    p.side = side;
    p.strategy = s;
    p.rows = rows;
    p.cols = cols;
    p.nvfp4 = opts.nvfp4;
    p.element = opts.element;
    p.random_signs_seed = applied_random_signs_seed(s, opts);
    p.quantized = sh.quantized;
    p.k_extracted = 0;
    const int64_t n = rows * cols;
    p.high_precision_bf16 = sh.needs_hp ? hp_view : nullptr;
    p.high_precision_transposed = p.high_precision_bf16 != nullptr && hp_view_transposed;
    p.high_precision.fit(size_t(sh.needs_hp && p.high_precision_bf16 == nullptr ? n : 0));
    p.dense.fit(size_t(sh.dense ? n : 0));
    p.slice.fit(size_t(sh.slice));
    p.indices.fit(size_t(sh.indices));
    p.codes.fit(size_t(sh.codes));
    p.scales.fit(size_t(sh.scales));
    p.tensor_scale.fit(size_t(sh.tensor_scale));
}

}  // namespace

void LpMatmulCuda::gemm_bf16(const __nv_bfloat16* a, bool a_transposed, const __nv_bfloat16* b, bool b_transposed, int64_t m,
                             int64_t k, int64_t n, float* c) {
    const float one = 1.0f, zero = 0.0f;
    // row-major C = A·B  ⇔  column-major Cᵀ = Bᵀ·Aᵀ; a row-major X [r][c] is the column-major c × r matrix Xᵀ
    cublas_check(cublasGemmEx(st_->blas.handle(), b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                              int(n), int(m), int(k), &one, b, CUDA_R_16BF, int(b_transposed ? k : n), a, CUDA_R_16BF,
                              int(a_transposed ? m : k), &zero, c, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx(bf16 views)");
}

PreparedOperandCuda LpMatmulCuda::prepare(const float* t, int64_t rows, int64_t cols, Side side, Strategy s,
                                          const LpMatmulOptions& opts) {
    PreparedOperandCuda p;
    prepare_f32(p, t, st_->work.grow(size_t(rows * cols)), rows, cols, side, s, opts);
    return p;
}

// The FP32 path: t (the operand) is copied into work (work may be t itself: then t is overwritten), signed,
// split, rotated there and quantized from there.
void LpMatmulCuda::prepare_f32(PreparedOperandCuda& p, const float* t, float* work, int64_t rows, int64_t cols, Side side,
                               Strategy s, const LpMatmulOptions& opts) {
    cudaStream_t stream = st_->stream;
    const PrepareShape sh = prepare_shape(rows, cols, side, s, opts);
    shape_prepared(p, sh, rows, cols, side, s, opts);
    const int64_t n = rows * cols;
    if (sh.needs_hp) {
        CUDA_CHECK(cudaMemcpyAsync(p.high_precision.data(), t, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream));
        if (opts.high_precision_bf16) round_bf16(p.high_precision.data(), n, stream);
    }
    if (s == Strategy::full) return;

    // The random signs ride on the working copy; OE takes its slice from the unsigned operand and signs the
    // clean one after (the CPU's order, so the zeroed vectors get the same signed zeros).
    const bool signs = p.random_signs_seed != 0;
    if (signs && !sh.extract) multiply_k_signs(t, work, rows, cols, side == Side::left, p.random_signs_seed, stream);
    else if (work != t) CUDA_CHECK(cudaMemcpyAsync(work, t, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream));
    if (sh.extract) {
        p.k_extracted = split_outliers_cuda(work, rows, cols, side == Side::left, sh.kk, opts.oe_metric, work, p.slice.data(),
                                            p.indices.data(), st_->oe, stream);
        if (opts.high_precision_bf16) round_bf16(p.slice.data(), int64_t(p.slice.size()), stream);
        if (signs) multiply_k_signs(work, work, rows, cols, side == Side::left, p.random_signs_seed, stream);
    }
    DeviceBuffer<float> rotated;  // OHT's dense product (analysis only)
    if (s == Strategy::oht) {
        // outer dimension, full size: left H_M·A, right B·H_N (dense products)
        const int64_t dim = side == Side::left ? rows : cols;
        if (dim <= 0 || (dim & (dim - 1)) != 0)  // the dense H_n below is symmetric (H = Hᵀ = H⁻¹) only for 2^k
            cuda_input_error("lp_matmul (CUDA): OHT needs power-of-two outer dimensions, got " + std::to_string(dim));
        const float* h = st_->hadamard_matrix(dim);
        rotated.resize(size_t(n));
        if (side == Side::left) gemm(h, work, rows, rows, cols, false, rotated.data());
        else gemm(work, h, rows, cols, cols, false, rotated.data());
        work = rotated.data();
    } else if (s != Strategy::plain) {
        block_hadamard_cuda(work, rows, cols, kIhtBlock, k_axis(side), stream);
    }
    if (!opts.quantize) {
        CUDA_CHECK(cudaMemcpyAsync(p.dense.data(), work, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream));
    } else {
        const QuantizeOptions qo{k_axis(side), side == Side::left ? opts.rounding_a : opts.rounding_b,
                                 side == Side::left ? opts.seed_a : opts.seed_b};
        if (opts.nvfp4)
            nvfp4_quantize_cuda(work, rows, cols, qo, p.codes.data(), p.scales.data(), p.tensor_scale.data(), stream);
        else
            mx_quantize_cuda(work, rows, cols, opts.element, opts.scale_rule, qo, p.codes.data(), p.scales.data(), stream);
    }
    if (rotated.size() > 0) CUDA_CHECK(cudaStreamSynchronize(stream));  // `rotated` is freed on return
}

void LpMatmulCuda::prepare_bf16(PreparedOperandCuda& p, const __nv_bfloat16* t, bool t_transposed, int64_t rows, int64_t cols,
                                Side side, Strategy s, const LpMatmulOptions& opts) {
    cudaStream_t stream = st_->stream;
    const bool left = side == Side::left;
    const int64_t n = rows * cols;
    // t's own shape, and the axis of t along which the operand's K runs (left: its columns, right: its rows)
    const int64_t t_rows = t_transposed ? cols : rows, t_cols = t_transposed ? rows : cols;
    const int axis = left != t_transposed ? 1 : 0;
    const int64_t k = left ? cols : rows;
    const Rounding rounding = left ? opts.rounding_a : opts.rounding_b;
    const uint64_t seed = left ? opts.seed_a : opts.seed_b;
    const bool iht_family = s == Strategy::iht || s == Strategy::iht_oe_left || s == Strategy::iht_oe_right;
    const PrepareShape sh = prepare_shape(rows, cols, side, s, opts);
    const uint64_t signs = applied_random_signs_seed(s, opts);
    // Random signs ride on a signed BF16 copy of t (exact) except with OE, where the CPU signs the cleaned
    // operand after extraction (its zeroed vectors become ±0, which the fused extraction does not reproduce).
    const bool fused = opts.quantize && !opts.nvfp4 && (signs == 0 || !sh.extract) && n > 0 && k % kMxBlock == 0 &&
                       (s == Strategy::plain || (iht_family && opts.element == MxElement::e2m1)) &&
                       (!sh.extract || opts.oe_metric == OutlierMetric::l2) &&
                       (rounding != Rounding::stochastic || !t_transposed) && aligned16(t);
    if (!fused) {  // the FP32 path on a copy in the operand's own layout
        float* work = st_->work.grow(size_t(n));
        bf16_to_f32(t, t_rows, t_cols, t_transposed, work, stream);
        prepare_f32(p, work, work, rows, cols, side, s, opts);
        return;
    }
    // the whole operand in high precision is t itself (BF16 already; OE with random signs took the FP32 path)
    const bool hp_view = sh.needs_hp && opts.high_precision_bf16;
    shape_prepared(p, sh, rows, cols, side, s, opts, hp_view ? t : nullptr, t_transposed);
    if (sh.needs_hp && !hp_view) bf16_to_f32(t, t_rows, t_cols, t_transposed, p.high_precision.data(), stream);
    if (signs != 0) {  // (needs_hp only with OE, which took the FP32 path above)
        __nv_bfloat16* signed_t = st_->signed16.grow(size_t(n));
        multiply_k_signs(t, signed_t, t_rows, t_cols, axis == 1, signs, stream);
        t = signed_t;
    }
    if (s == Strategy::plain) {
        mx_quantize_cuda(t, t_rows, t_cols, opts.element, opts.scale_rule, QuantizeOptions{axis, rounding, seed}, p.codes.data(),
                         p.scales.data(), stream);
        return;
    }
    Mxfp4DeviceOutput out;
    out.codes = p.codes.data();
    out.scales = p.scales.data();
    if (sh.extract) out.block_sumsq = st_->sumsq.grow(size_t(block_stats_count(t_rows, t_cols, axis)));
    const HadamardMxfp4Options ho{opts.scale_rule, rounding, seed};
    hadamard_mxfp4_cuda(t, t_rows, t_cols, ho, axis == 1 ? out : Mxfp4DeviceOutput{}, axis == 0 ? out : Mxfp4DeviceOutput{},
                        stream);
    if (!sh.extract) return;
    // The selected outer vectors (rows of A, columns of B) are t's rows along axis 1, its columns along axis 0;
    // the slice comes back in t's orientation and is stored in the operand's (A: k × K, B: K × k).
    __nv_bfloat16* slice = st_->slice16.grow(size_t(sh.slice > 0 ? sh.slice : 1));
    p.k_extracted = extract_outliers_quantized_cuda(t, t_rows, t_cols, axis, sh.kk, opts.scale_rule, out, slice,
                                                    p.indices.data(), st_->oe, stream);
    const int64_t other = left ? cols : rows;  // the slice's length along K
    if (axis == 1) bf16_to_f32(slice, p.k_extracted, other, !left, p.slice.data(), stream);
    else bf16_to_f32(slice, other, p.k_extracted, left, p.slice.data(), stream);
}

void LpMatmulCuda::matmul_prepared(const PreparedOperandCuda& a, const PreparedOperandCuda& b, const LpMatmulOptions& opts,
                                   float* c) {
    matmul_prepared(a, b, opts, LpMatmulOutput{c, nullptr, 0.0f});
}

void LpMatmulCuda::matmul_prepared(const PreparedOperandCuda& a, const PreparedOperandCuda& b, const LpMatmulOptions& opts,
                                   const LpMatmulOutput& out) {
    check_output(out);
    if (a.side != Side::left || b.side != Side::right) cuda_usage_error("lp_matmul: operands must be prepared as (left, right)");
    if (a.strategy != b.strategy) cuda_usage_error("lp_matmul: operands prepared for different strategies");
    if (a.random_signs_seed != b.random_signs_seed)
        cuda_usage_error("lp_matmul: operands prepared with different random signs (seeds " + std::to_string(a.random_signs_seed) +
                         " and " + std::to_string(b.random_signs_seed) + "); prepare both with the same random_signs_seed");
    if (a.cols != b.rows) cuda_input_error("lp_matmul: inner dimensions of A and B differ");
    const int64_t m = a.rows, k = a.cols, n = b.cols;
    const Strategy s = a.strategy;
    cudaStream_t stream = st_->stream;
    // The MX main products (tensor cores or dequantized + cuBLAS) go straight into the caller's output, with its
    // beta, unless OHT's rotations or BF16 rounding follow them in FP32; OE's sliver product then lands on its rows
    // (OE-left) or columns (OE-right) of the output itself (place_outliers_cuda: the output's old values there are
    // saved first where beta needs them). No scratch product, no second pass over C. The other products (BF16,
    // FP32 paths) go into a scratch C (or the FP32 output when beta = 0), stored into the output at the end.
    const bool slivers = (s == Strategy::iht_oe_left && a.k_extracted > 0) || (s == Strategy::iht_oe_right && b.k_extracted > 0);
    const bool tensor_cores = uses_tensor_core_mx(a, b);
    const bool dequantized = !tensor_cores && s != Strategy::full && a.quantized && b.quantized && !a.nvfp4;
    const bool in_place = (tensor_cores || dequantized) && s != Strategy::oht && !opts.output_bf16;
    const bool by_rows = s == Strategy::iht_oe_left;
    const PreparedOperandCuda& extracted = by_rows ? a : b;
    const float* old_at_slivers = nullptr;
    if (in_place && slivers && out.f32 && out.beta != 0.0f) {
        float* saved = st_->old_at_slivers.grow(size_t(extracted.k_extracted * (by_rows ? n : m)));
        gather_outliers_cuda(out.f32, extracted.k_extracted, extracted.indices.data(), by_rows, m, n, saved, stream);
        old_at_slivers = saved;
    }
    float* c = in_place ? nullptr : out.f32 && out.beta == 0.0f ? out.f32 : st_->c.grow(size_t(m * n));
    // The whole operand in FP32 (row-major rows × cols): high_precision, or its BF16 view converted into scratch.
    auto hp_f32 = [&](const PreparedOperandCuda& p, DeviceBuffer<float>& scratch) -> const float* {
        if (!p.high_precision_bf16) return p.high_precision.data();
        float* d = scratch.grow(size_t(p.rows * p.cols));
        const bool tr = p.high_precision_transposed;
        bf16_to_f32(p.high_precision_bf16, tr ? p.cols : p.rows, tr ? p.rows : p.cols, tr, d, stream);
        return d;
    };
    if (s == Strategy::full && a.high_precision_bf16 && b.high_precision_bf16 && opts.high_precision_bf16) {
        gemm_bf16(a.high_precision_bf16, a.high_precision_transposed, b.high_precision_bf16, b.high_precision_transposed, m, k, n, c);
    } else if (s == Strategy::full) {
        gemm(hp_f32(a, st_->deq_a), hp_f32(b, st_->deq_b), m, k, n, opts.high_precision_bf16, c);
    } else if (tensor_cores) {
        // codes and scales as prepared: A [M][K] and B's [N][K] storage, both blocked along K
        const LpMatmulOutput target = in_place ? out : LpMatmulOutput{c, nullptr, 0.0f};
        mx_gemm_fp8_cuda({a.codes.data(), a.scales.data(), a.element}, {b.codes.data(), b.scales.data(), b.element}, m, n, k,
                         target.f32, target.bf16, stream, &st_->mx, st_->mx_fold, target.beta);
        if (st_->census_site >= 0) st_->census_product(m, n, k, a.element, b.element);
    } else if (dequantized) {
        // MX values are exact in BF16: both operands dequantized in their stored order [outer][K], one TN product
        const __nv_bfloat16* ad = st_->deq16_a.grow(size_t(m * k));
        const __nv_bfloat16* bd = st_->deq16_b.grow(size_t(n * k));
        mx_dequantize_blocked_bf16_cuda(a.codes.data(), a.scales.data(), m, k, a.element, st_->deq16_a.data(), stream);
        mx_dequantize_blocked_bf16_cuda(b.codes.data(), b.scales.data(), n, k, b.element, st_->deq16_b.data(), stream);
        const float one = 1.0f;
        const LpMatmulOutput target = in_place ? out : LpMatmulOutput{c, nullptr, 0.0f};
        void* cp = target.f32 ? static_cast<void*>(target.f32) : static_cast<void*>(target.bf16);
        // row-major C = A·B_sᵀ (B_s = B's [N][K] storage)  ⇔  column-major Cᵀ = B_s·Aᵀ: op(B_s) = T, Aᵀ as stored
        cublas_check(cublasGemmEx(st_->blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, bd, CUDA_R_16BF,
                                  int(k), ad, CUDA_R_16BF, int(k), &target.beta, cp, target.f32 ? CUDA_R_32F : CUDA_R_16BF,
                                  int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx(dequantized MX)");
    } else {
        auto main_operand = [&](const PreparedOperandCuda& p, DeviceBuffer<float>& deq) -> const float* {
            if (!p.quantized) return p.dense.data();
            float* d = deq.grow(size_t(p.rows * p.cols));
            if (p.nvfp4)
                nvfp4_dequantize_cuda(p.codes.data(), p.scales.data(), p.tensor_scale.data(), p.rows, p.cols, k_axis(p.side), d,
                                      stream);
            else
                mx_dequantize_cuda(p.codes.data(), p.scales.data(), p.rows, p.cols, p.element, k_axis(p.side), d, stream);
            return d;
        };
        const float* am = main_operand(a, st_->deq_a);
        const float* bm = main_operand(b, st_->deq_b);
        // NVFP4 values and unquantized operands are not exact in BF16 → FP32 product
        gemm(am, bm, m, k, n, false, c);
    }
    if (s == Strategy::oht) {
        if (st_->tmp.size() < size_t(m * n)) st_->tmp.resize(size_t(m * n));
        gemm(st_->hadamard_matrix(m), c, m, m, n, false, st_->tmp.data());
        gemm(st_->tmp.data(), st_->hadamard_matrix(n), m, n, n, false, c);
    }
    // The sliver product: the extracted rows of A (k × K) times B, or A times the extracted columns of B (K × k),
    // with the other operand as its BF16 view where it has one; then onto its rows / columns of C.
    if (slivers) {
        auto slice_bf16 = [&](const PreparedOperandCuda& p) {
            __nv_bfloat16* d = st_->bf_a.grow(p.slice.size());
            to_bf16_kernel<<<blocks_for(int64_t(p.slice.size())), 256, 0, stream>>>(p.slice.data(), d, int64_t(p.slice.size()));
            CUDA_CHECK(cudaGetLastError());
            return d;
        };
        const int64_t kx = extracted.k_extracted;
        float* t = st_->tmp.grow(size_t(kx * (by_rows ? n : m)));
        const PreparedOperandCuda& other = by_rows ? b : a;
        const bool bf16_views = other.high_precision_bf16 && opts.high_precision_bf16;
        if (by_rows && bf16_views)
            gemm_bf16(slice_bf16(a), false, b.high_precision_bf16, b.high_precision_transposed, kx, k, n, t);
        else if (by_rows)
            gemm(a.slice.data(), hp_f32(b, st_->deq_b), kx, k, n, opts.high_precision_bf16, t);
        else if (bf16_views)
            gemm_bf16(a.high_precision_bf16, a.high_precision_transposed, slice_bf16(b), false, m, k, kx, t);
        else
            gemm(hp_f32(a, st_->deq_a), b.slice.data(), m, k, kx, opts.high_precision_bf16, t);
        if (in_place)
            place_outliers_cuda(t, kx, extracted.indices.data(), by_rows, old_at_slivers, out.beta, out.f32, out.bf16, m, n, stream);
        else
            scatter_outliers_cuda(t, kx, extracted.indices.data(), by_rows, c, m, n, stream);
    }
    if (in_place) return;
    if (opts.output_bf16) round_bf16(c, m * n, stream);
    if (c != out.f32) store(c, m * n, out, stream);
}

void LpMatmulCuda::matmul(const float* a, const float* b, int64_t m, int64_t k, int64_t n, Strategy s,
                          const LpMatmulOptions& opts, float* c) {
    PreparedOperandCuda pa = prepare(a, m, k, Side::left, s, opts);
    PreparedOperandCuda pb = prepare(b, k, n, Side::right, s, opts);
    matmul_prepared(pa, pb, opts, c);
    CUDA_CHECK(cudaStreamSynchronize(st_->stream));
}

}  // namespace lowbit
