// solver_cuda.cu — CudaSolverDevice: cuSOLVER factorizations, cuBLAS products and the GPTQ sweep kernel.
#include "ptq/cuda/solver_cuda.cuh"

#include "core/cuda_blas.h"
#include "core/cuda_host_copy.h"

#include <cusolverDn.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <numeric>

namespace lowbit {

namespace {

std::atomic<size_t> g_peak_bytes{0};

void cusolver_check(cusolverStatus_t st, const char* call) {
    LOWBIT_CHECK(st == CUSOLVER_STATUS_SUCCESS, ErrorKind::runtime, "{} failed (cuSOLVER status {})", call, int(st));
}

// Row-major square matrix: copy the upper triangle into the lower one (symmetric = true) or zero the lower one.
__global__ void fill_lower_kernel(double* a, int64_t n, bool symmetric) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n * n) return;
    const int64_t i = idx / n, j = idx % n;
    if (i > j) a[idx] = symmetric ? a[j * n + i] : 0.0;
}

// a (FP64) = the damped Hessian: h with the diagonal of dead inputs replaced by dead_value, plus damp·I.
__global__ void damped_hessian_kernel(const float* h, const uint8_t* dead, float dead_value, double damp, double* a,
                                      int64_t n) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n * n) return;
    const int64_t i = idx / n, j = idx % n;
    a[idx] = i == j ? (dead[i] ? double(dead_value) : double(h[idx])) + damp : double(h[idx]);
}

// D̂ = F2's D in sweep order with the columns of dead inputs zeroed: out[i][j] = dead[j] ? 0 : d[order[i]][order[j]]
// (prepare_input's host loop).
__global__ void sweep_order_d_kernel(const float* d, const int32_t* order, const uint8_t* dead, int64_t n, float* out) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n * n) return;
    const int64_t i = idx / n, j = idx % n;
    out[idx] = dead[j] ? 0.0f : d[int64_t(order[i]) * n + order[j]];
}

// Row-major square: the diagonal and the lower triangle zeroed (triu₁).
__global__ void strict_upper_kernel(float* a, int64_t n) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n * n) return;
    if (idx / n >= idx % n) a[idx] = 0.0f;
}

__global__ void to_float_kernel(const double* a, float* out, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float(a[i]);
}

// The grid of one sweep on the device: value(q) = scale·(level(q) − zero) [+ offset], levels from a table of
// at most 64 entries or q itself.
struct SweepGrid {
    float levels[64];
    int has_levels;
    int has_offset;
    int maxq;
};

__device__ __forceinline__ float grid_value_dev(const SweepGrid& g, float scale, float zero, float offset, uint32_t q) {
    const float level = g.has_levels ? g.levels[q] : float(q);
    const float v = scale * (level - zero);
    return g.has_offset ? v + offset : v;
}

// grid_nearest (ptq/grid.cpp), operation for operation.
__device__ __forceinline__ uint32_t grid_nearest_dev(const SweepGrid& g, float scale, float zero, float offset, float w) {
    if (g.has_levels) {
        uint32_t best = 0;
        float best_err = INFINITY;
        for (int q = 0; q <= g.maxq; ++q) {
            const float e = fabsf(grid_value_dev(g, scale, zero, offset, uint32_t(q)) - w);
            if (e < best_err) {
                best_err = e;
                best = uint32_t(q);
            }
        }
        return best;
    }
    if (!(scale != 0.0f) || isnan(scale) || isinf(scale)) return uint32_t(min(max(int(zero), 0), g.maxq));
    const float x = g.has_offset ? __fdiv_rn(w - offset, scale) : __fdiv_rn(w, scale);
    const float xc = isnan(x) ? x : fminf(fmaxf(x, -4096.0f), 4096.0f);
    const float q = rintf(xc) + zero;
    const float qc = isnan(q) ? q : fminf(fmaxf(q, 0.0f), float(g.maxq));
    return uint32_t(qc);
}

constexpr int kSweepWarps = 8;
constexpr int kMaxSubBlock = 128;

// One lazy sub-block [i1, i1 + nb) of the sweep, one warp per row: the columns in order, each quantized on
// its (row, group) grid, its error e = (x − q)/U_cc spread over the block's later columns. Writes the codes
// (at original columns), the block's final values (q), err = −e and (GPTAQ) pre = x, and adds the loss.
__global__ void sweep_block_kernel(float* w, int64_t cols, int n, int64_t i1, int nb, const float* u, const float* p,
                                   const int32_t* order, uint8_t* codes, const float* grids, int64_t per_row,
                                   int64_t group, SweepGrid g, float* err, float* pre, double* loss) {
    extern __shared__ float smem[];
    float* us = smem;                                  // [nb, nb]
    float* ps = us + nb * nb;                          // [nb, nb] when p
    float* rows_s = ps + (p ? nb * nb : 0);            // [warps, nb] current values
    float* qs_s = rows_s + kSweepWarps * kMaxSubBlock; // [warps, nb] final values
    for (int idx = threadIdx.x; idx < nb * nb; idx += blockDim.x) {
        const int r = idx / nb, c = idx % nb;
        us[idx] = u[(i1 + r) * cols + i1 + c];
        if (p) ps[idx] = p[(i1 + r) * cols + i1 + c];
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * kSweepWarps + warp;
    float* rs = rows_s + warp * kMaxSubBlock;
    float* qs = qs_s + warp * kMaxSubBlock;
    if (row < n)
        for (int j = lane; j < nb; j += 32) rs[j] = w[int64_t(row) * cols + i1 + j];
    __syncthreads();
    if (row >= n) return;
    double row_loss = 0.0;
    for (int c = 0; c < nb; ++c) {
        __syncwarp();
        const float x = rs[c];
        const int32_t oc = order[i1 + c];
        const float* gg = grids + (int64_t(row) * per_row + oc / group) * 3;
        const float scale = gg[0], zero = gg[1], offset = gg[2];
        const uint32_t q = grid_nearest_dev(g, scale, zero, offset, x);
        const float qv = grid_value_dev(g, scale, zero, offset, q);
        const float d = us[c * nb + c];
        const float e = __fdiv_rn(x - qv, d);
        const float* uc = us + c * nb;
        if (p) {
            const float* pc = ps + c * nb;
            for (int j = c + 1 + lane; j < nb; j += 32) rs[j] -= __fsub_rn(__fmul_rn(e, uc[j]), __fmul_rn(x, pc[j]));
        } else {
            for (int j = c + 1 + lane; j < nb; j += 32) rs[j] -= __fmul_rn(e, uc[j]);
        }
        if (lane == 0) {
            codes[int64_t(row) * cols + oc] = uint8_t(q);
            qs[c] = qv;
            err[int64_t(row) * nb + c] = -e;
            if (pre) pre[int64_t(row) * nb + c] = x;
            row_loss += double(x - qv) * double(x - qv) / (double(d) * double(d)) * 0.5;
        }
    }
    __syncwarp();
    for (int j = lane; j < nb; j += 32) w[int64_t(row) * cols + i1 + j] = qs[j];
    if (lane == 0) loss[row] += row_loss;
}

// D[a][j] = value(nearest(w[a / k][j])) − w[a / k][j] on candidate grid a (grid_value/grid_nearest's
// arithmetic), for candidates [a0, a0 + m) of rows holding k each; D is m × n, w has leading dimension ldw.
// x rounded to the nearest TF32 value (10 stored mantissa bits, ties to even; x finite): the high part of a split
// x = hi + lo whose lo = x − hi is exact in FP32.
__device__ __forceinline__ float tf32_high(float x) {
    uint32_t u = __float_as_uint(x);
    u += 0xfffu + ((u >> 13) & 1u);
    return __uint_as_float(u & ~0x1fffu);
}

// The candidate errors d = value(nearest(w)) − w as their TF32 split: hi = tf32_high(d), lo = d − hi.
__global__ void candidate_error_kernel(const float* w, int64_t ldw, int64_t n, const float* cand, int64_t k, int64_t a0,
                                       int64_t m, SweepGrid g, float* hi, float* lo) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= m * n) return;
    const int64_t a = a0 + idx / n, j = idx % n;
    const float* c = cand + a * 3;
    const float x = w[(a / k) * ldw + j];
    const float d = grid_value_dev(g, c[0], c[1], c[2], grid_nearest_dev(g, c[0], c[1], c[2], x)) - x;
    hi[idx] = tf32_high(d);
    lo[idx] = d - hi[idx];
}

// The n × n block h (leading dimension ldh) as its TF32 split, contiguous.
__global__ void tf32_split_kernel(const float* h, int64_t ldh, int64_t n, float* hi, float* lo) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= n * n) return;
    const float x = h[(idx / n) * ldh + idx % n];
    hi[idx] = tf32_high(x);
    lo[idx] = x - hi[idx];
}

// scores[a] = Σ_j (hi + lo)[a][j]·t[a][j] in double, one warp per candidate.
__global__ void row_dot_kernel(const float* hi, const float* lo, const float* t, int64_t m, int64_t n, double* scores) {
    const int64_t a = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (a >= m) return;
    double s = 0.0;
    for (int64_t j = lane; j < n; j += 32) s += (double(hi[a * n + j]) + double(lo[a * n + j])) * double(t[a * n + j]);
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) scores[a] = s;
}

// dw = q − w over n elements.
__global__ void weight_error_kernel(const float* q, const float* w, float* dw, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dw[i] = q[i] - w[i];
}

// layer_objective_and_scale's pair terms, one warp per pair (head, j, k) of `heads` heads of hd rows (hd = 1
// and no h_out: one pair per row): obj = h_jk·Σ_c (m_k − 2·nd_k)·dw_j and scl = h_jk·Σ_c mw_k·w_j in double
// (h_jk = 1 without h_out; pairs with h_jk = 0 give 0, as the CPU skips them). nd may be null (no F2).
__global__ void objective_pairs_kernel(const float* m, const float* nd, const float* mw, const float* dw, const float* w,
                                       const float* h_out, int64_t heads, int64_t hd, int64_t cols, double* obj,
                                       double* scl) {
    const int64_t pair = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (pair >= heads * hd * hd) return;
    const int64_t head = pair / (hd * hd), j = pair / hd % hd, k = pair % hd;
    const double hjk = h_out ? double(h_out[pair]) : 1.0;
    double s = 0.0, t = 0.0;
    if (hjk != 0.0) {
        const int64_t rj = (head * hd + j) * cols, rk = (head * hd + k) * cols;
        for (int64_t c = lane; c < cols; c += 32) {
            s += (double(m[rk + c]) - (nd ? 2.0 * double(nd[rk + c]) : 0.0)) * double(dw[rj + c]);
            t += double(mw[rk + c]) * double(w[rj + c]);
        }
    }
    for (int off = 16; off > 0; off /= 2) {
        s += __shfl_down_sync(0xffffffffu, s, off);
        t += __shfl_down_sync(0xffffffffu, t, off);
    }
    if (lane == 0) {
        obj[pair] = hjk * s;
        scl[pair] = hjk * t;
    }
}

template <typename T>
T* grown(DeviceBuffer<T>& b, size_t n) {
    return b.grow(std::max<size_t>(n, 1));
}

}  // namespace

void ptq_sample_device_memory() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return;
    const size_t used = total_b - free_b;
    size_t prev = g_peak_bytes.load();
    while (used > prev && !g_peak_bytes.compare_exchange_weak(prev, used)) {
    }
}
size_t ptq_peak_device_bytes() { return g_peak_bytes.load(); }
void ptq_reset_peak_device_bytes() { g_peak_bytes.store(0); }

struct CudaSolverDevice::State {
    CudaBlas blas;
    cusolverDnHandle_t solver = nullptr;
    DeviceBuffer<double> chol_a, chol_work;
    DeviceBuffer<int> chol_info;
    DeviceBuffer<uint8_t> chol_dead;
    DeviceBuffer<float> ga, gb, gc;                       // gemm operands
    uint64_t su_id = 0, sp_id = 0;                        // the input_id of the u in su / the p in sp (0: none)
    DeviceBuffer<float> su, sp, sw, serr, spre, sgrids;
    // What this block's factorizations left here, by factor_id, until hold_inputs (the buffers then go to
    // `spare` for the next block's): the factor U, and GPTAQ's P and RH (keep_gptaq_terms). The sweeps and
    // rh_product read them here, so they never cross the bus.
    struct Kept {
        DeviceBuffer<float> u, p, rh;
    };
    std::map<uint64_t, Kept> kept;
    std::vector<DeviceBuffer<float>> spare;
    float* keep(DeviceBuffer<float>& b, size_t count) {
        if (!b.data() && !spare.empty()) {
            b = std::move(spare.back());
            spare.pop_back();
        }
        return grown(b, count);
    }
    const Kept* kept_of(uint64_t id) const {
        const auto it = id != 0 ? kept.find(id) : kept.end();
        return it == kept.end() ? nullptr : &it->second;
    }
    void release_kept() {
        for (auto& [id, k] : kept)
            for (DeviceBuffer<float>* b : {&k.u, &k.p, &k.rh})
                if (b->data()) spare.push_back(std::move(*b));
        kept.clear();
    }
    DeviceBuffer<float> dhat, dut;  // keep_gptaq_terms' D̂ and D̂·Uᵀ

    // Row-major C (m × n) = op(A)·op(B) + beta·C over dense device matrices: column-major Cᵀ = op(B)ᵀ·op(A)ᵀ
    // over the same storage.
    void row_major_sgemm(const float* a, Trans ta, const float* b, Trans tb, int64_t m, int64_t n, int64_t k, float* c,
                         float beta) const {
        const float one = 1.0f;
        cublas_check(cublasSgemm(blas.handle(), tb == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &one, b,
                                 int(tb == Trans::yes ? k : n), a, int(ta == Trans::yes ? m : k), &beta, c, int(n)),
                     "cublasSgemm");
    }
    // A host operand on the device, dense: its held copy (dense operands), else uploaded into `scratch`.
    const float* operand(DeviceBuffer<float>& scratch, ConstMatF v) {
        if (v.dense())
            if (const float* held = held_copy(v.data, v.size())) return held;
        float* dst = grown(scratch, size_t(v.rows * v.cols));
        if (v.dense())
            copy_host_to_device(dst, v.data, size_t(v.size()) * 4, blas.stream());
        else
            CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(v.cols) * 4, v.data, size_t(v.ld) * 4, size_t(v.cols) * 4,
                                         size_t(v.rows), cudaMemcpyHostToDevice, blas.stream()));
        return dst;
    }
    // The device buffer of a host result c (dense there), holding c's values when beta ≠ 0; result_out copies
    // it back and waits.
    float* result_in(MatF c, float beta) {
        float* dc = grown(gc, size_t(c.rows * c.cols));
        if (beta != 0.0f)
            CUDA_CHECK(cudaMemcpy2DAsync(dc, size_t(c.cols) * 4, c.data, size_t(c.ld) * 4, size_t(c.cols) * 4,
                                         size_t(c.rows), cudaMemcpyHostToDevice, blas.stream()));
        ptq_sample_device_memory();
        return dc;
    }
    void result_out(MatF c, const float* dc) {
        if (c.dense())
            copy_device_to_host(c.data, dc, size_t(c.rows * c.cols) * 4, blas.stream());
        else
            CUDA_CHECK(cudaMemcpy2DAsync(c.data, size_t(c.ld) * 4, dc, size_t(c.cols) * 4, size_t(c.cols) * 4,
                                         size_t(c.rows), cudaMemcpyDeviceToHost, blas.stream()));
        CUDA_CHECK(cudaStreamSynchronize(blas.stream()));
    }
    DeviceBuffer<int32_t> sorder;
    DeviceBuffer<uint8_t> scodes;
    DeviceBuffer<double> sloss;
    // grid candidate scoring: the Hessian block held (named by h_id, its address and shape), w, candidates, D, D·H
    uint64_t score_h_id = 0;
    const float* score_h_ptr = nullptr;
    int64_t score_h_n = 0, score_h_ld = 0;
    DeviceBuffer<float> score_h, score_h_hi, score_h_lo, score_w, score_cand, score_d_hi, score_d_lo, score_t;
    DeviceBuffer<double> score_out;
    // hold_inputs' copies: the first held_count entries (the rest are buffers kept for the next block)
    struct Held {
        const float* host = nullptr;
        int64_t count = 0;
        DeviceBuffer<float> dev;
    };
    std::vector<Held> held;
    size_t held_count = 0;
    // layer objectives: W, ΔW, M = ΔW·H, MW = W·H, N = W·D, H and D when not held, H_out, the pair sums; the same
    // buffers serve scale_refine_products (Z, W − Q, A, ZH, W)
    DeviceBuffer<float> ow, odw, om, omw, ond, oh, od, ohout;
    DeviceBuffer<double> oobj, oscl;
    // objective_pairs_kernel over `heads` heads of hd rows (device operands, h_out and nd may be null), its two sums
    // per pair copied into obj and scl (host, heads·hd² each).
    void pair_sums(const float* m, const float* nd, const float* mw, const float* dw, const float* w, const float* h_out,
                   int64_t heads, int64_t hd, int64_t cols, double* obj, double* scl) {
        const int64_t pairs = heads * hd * hd;
        const cudaStream_t st = blas.stream();
        double* dobj = grown(oobj, size_t(pairs));
        double* dscl = grown(oscl, size_t(pairs));
        objective_pairs_kernel<<<unsigned((pairs * 32 + 255) / 256), 256, 0, st>>>(m, nd, mw, dw, w, h_out, heads, hd,
                                                                                    cols, dobj, dscl);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpyAsync(obj, dobj, size_t(pairs) * sizeof(double), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaMemcpyAsync(scl, dscl, size_t(pairs) * sizeof(double), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
    }

    // The device copy of host elements [p, p + count) when a held matrix contains them, else null.
    const float* held_copy(const float* p, int64_t count) const {
        const auto addr = reinterpret_cast<uintptr_t>(p);
        for (size_t i = 0; i < held_count; ++i) {
            const auto base = reinterpret_cast<uintptr_t>(held[i].host);
            if (addr >= base && addr + uintptr_t(count) * sizeof(float) <= base + uintptr_t(held[i].count) * sizeof(float))
                return held[i].dev.data() + (addr - base) / sizeof(float);
        }
        return nullptr;
    }
    // `count` host elements at p on the device: the held copy, or uploaded into `scratch`.
    const float* on_device(const float* p, int64_t count, DeviceBuffer<float>& scratch) {
        if (const float* d = held_copy(p, count)) return d;
        float* d = grown(scratch, size_t(count));
        copy_host_to_device(d, p, size_t(count) * sizeof(float), blas.stream());
        return d;
    }
};

CudaSolverDevice::CudaSolverDevice() : s_(std::make_unique<State>()) {
    cusolver_check(cusolverDnCreate(&s_->solver), "cusolverDnCreate");
    cusolver_check(cusolverDnSetStream(s_->solver, s_->blas.stream()), "cusolverDnSetStream");
    CUDA_CHECK(cudaFuncSetAttribute(sweep_block_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int((2 * kMaxSubBlock * kMaxSubBlock + 2 * kSweepWarps * kMaxSubBlock) * sizeof(float))));
}

CudaSolverDevice::~CudaSolverDevice() {
    if (s_ && s_->solver) cusolverDnDestroy(s_->solver);
}

bool CudaSolverDevice::inverse_cholesky_upper(const float* h, int64_t n, const std::vector<uint8_t>& dead, float dead_value,
                                              double damp, std::vector<float>* u, std::vector<double>* h_inv,
                                              uint64_t factor_id) const {
    State& s = *s_;
    const cudaStream_t st = s.blas.stream();
    double* da = grown(s.chol_a, size_t(n * n));
    const float* dh = s.on_device(h, n * n, s.ga);  // FP32 in and out: half the bytes of FP64 over the bus
    uint8_t* ddead = grown(s.chol_dead, size_t(n));
    CUDA_CHECK(cudaMemcpyAsync(ddead, dead.data(), size_t(n), cudaMemcpyHostToDevice, st));
    damped_hessian_kernel<<<unsigned((n * n + 255) / 256), 256, 0, st>>>(dh, ddead, dead_value, damp, da, n);
    CUDA_CHECK(cudaGetLastError());
    const int nn = int(n);
    int lwork = 0, lwork2 = 0;
    // Row-major upper U (A = UᵀU) is LAPACK's column-major lower factor.
    cusolver_check(cusolverDnDpotrf_bufferSize(s.solver, CUBLAS_FILL_MODE_LOWER, nn, da, nn, &lwork), "potrf_bufferSize");
    cusolver_check(cusolverDnDpotri_bufferSize(s.solver, CUBLAS_FILL_MODE_LOWER, nn, da, nn, &lwork2), "potri_bufferSize");
    double* work = grown(s.chol_work, size_t(std::max(lwork, lwork2)));
    int* info = grown(s.chol_info, 1);
    ptq_sample_device_memory();
    const auto ok = [&]() {
        int h = 0;
        CUDA_CHECK(cudaMemcpyAsync(&h, info, sizeof(int), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        return h == 0;
    };
    const int threads = 256;
    const unsigned blocks = unsigned((n * n + threads - 1) / threads);
    cusolver_check(cusolverDnDpotrf(s.solver, CUBLAS_FILL_MODE_LOWER, nn, da, nn, work, lwork, info), "cusolverDnDpotrf");
    if (!ok()) return false;
    cusolver_check(cusolverDnDpotri(s.solver, CUBLAS_FILL_MODE_LOWER, nn, da, nn, work, lwork2, info), "cusolverDnDpotri");
    if (!ok()) return false;
    fill_lower_kernel<<<blocks, threads, 0, st>>>(da, n, true);  // H⁻¹, both triangles
    CUDA_CHECK(cudaGetLastError());
    if (h_inv) {
        h_inv->resize(size_t(n * n));
        copy_device_to_host(h_inv->data(), da, size_t(n * n) * sizeof(double), st);
    }
    cusolver_check(cusolverDnDpotrf(s.solver, CUBLAS_FILL_MODE_LOWER, nn, da, nn, work, lwork, info), "cusolverDnDpotrf");
    if (!ok()) return false;
    fill_lower_kernel<<<blocks, threads, 0, st>>>(da, n, false);
    float* du = factor_id != 0 ? s.keep(s.kept[factor_id].u, size_t(n * n)) : grown(s.su, size_t(n * n));
    if (factor_id == 0) s.su_id = 0;
    to_float_kernel<<<blocks, threads, 0, st>>>(da, du, n * n);
    CUDA_CHECK(cudaGetLastError());
    ptq_sample_device_memory();
    if (u) {
        u->resize(size_t(n * n));
        copy_device_to_host(u->data(), du, size_t(n * n) * sizeof(float), st);
    } else {
        LOWBIT_CHECK(factor_id != 0, ErrorKind::usage, "inverse_cholesky_upper: a factor without an id must come back");
    }
    return true;
}

void CudaSolverDevice::hold_inputs(const std::vector<ConstMatF>& mats) const {
    State& s = *s_;
    CUDA_CHECK(cudaStreamSynchronize(s.blas.stream()));  // nothing queued still reads the copies being replaced
    s.held_count = 0;
    s.release_kept();
    if (s.held.size() < mats.size()) s.held.resize(mats.size());
    for (const ConstMatF& m : mats) {
        LOWBIT_CHECK(m.dense(), ErrorKind::usage, "hold_inputs: a matrix with a row stride");
        State::Held& h = s.held[s.held_count];
        h.host = m.data;
        h.count = m.size();
        h.dev.grow(size_t(std::max<int64_t>(h.count, 1)));
        copy_host_to_device(h.dev.data(), m.data, size_t(h.count) * sizeof(float), s.blas.stream());  // returns on arrival
        ++s.held_count;
    }
    ptq_sample_device_memory();
}

bool CudaSolverDevice::layer_objective(const LayerProblem& p, const float* q, double* objective, double* scale) const {
    State& s = *s_;
    const cudaStream_t st = s.blas.stream();
    const int64_t rows = p.rows, cols = p.cols, n = rows * cols;
    const int64_t hd = p.h_out ? p.head_rows : 1;
    const int64_t hin_rows = p.h_in_heads ? p.head_rows : rows;  // rows sharing one H_in (and D)
    if (n == 0) return false;
    float* dw = grown(s.ow, size_t(n));
    float* ddw = grown(s.odw, size_t(n));
    float* dm = grown(s.om, size_t(n));
    float* dmw = grown(s.omw, size_t(n));
    float* dnd = p.d ? grown(s.ond, size_t(n)) : nullptr;
    copy_host_to_device(dw, p.w, size_t(n) * sizeof(float), st);
    copy_host_to_device(ddw, q, size_t(n) * sizeof(float), st);
    weight_error_kernel<<<unsigned((n + 255) / 256), 256, 0, st>>>(ddw, dw, ddw, n);
    CUDA_CHECK(cudaGetLastError());
    const float one = 1.0f, zero = 0.0f;
    // Row-major C (r × cols) = A (r × cols) · B (cols × cols) is column-major Cᵀ = Bᵀ·Aᵀ over the same storage.
    const auto product = [&](const float* a, const float* b, float* c, int64_t r) {
        cublas_check(cublasSgemm(s.blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(cols), int(r), int(cols), &one, b, int(cols),
                                 a, int(cols), &zero, c, int(cols)),
                     "cublasSgemm (layer objective)");
    };
    for (int64_t r0 = 0; r0 < rows; r0 += hin_rows) {
        const float* hin = p.h_in_heads ? p.h_in_heads + (r0 / p.head_rows) * cols * cols : p.h_in;
        const float* dh = s.on_device(hin, cols * cols, s.oh);
        ptq_sample_device_memory();
        product(ddw + r0 * cols, dh, dm + r0 * cols, hin_rows);
        product(dw + r0 * cols, dh, dmw + r0 * cols, hin_rows);
        if (p.d) {
            const float* dd = s.on_device(p.h_in_heads ? p.d + (r0 / p.head_rows) * cols * cols : p.d, cols * cols, s.od);
            product(dw + r0 * cols, dd, dnd + r0 * cols, hin_rows);
        }
    }
    const int64_t heads = rows / hd, pairs = heads * hd * hd;
    const float* dhout = nullptr;
    if (p.h_out) {
        float* b = grown(s.ohout, size_t(pairs));
        CUDA_CHECK(cudaMemcpyAsync(b, p.h_out, size_t(pairs) * sizeof(float), cudaMemcpyHostToDevice, st));
        dhout = b;
    }
    std::vector<double> obj(static_cast<size_t>(pairs)), scl(static_cast<size_t>(pairs));
    s.pair_sums(dm, dnd, dmw, ddw, dw, dhout, heads, hd, cols, obj.data(), scl.data());
    // The CPU's association: per head in (j, k) order, then over the heads.
    double total_obj = 0.0, total_scl = 0.0;
    for (int64_t head = 0; head < heads; ++head) {
        double ho = 0.0, hs = 0.0;
        for (int64_t i = head * hd * hd; i < (head + 1) * hd * hd; ++i) {
            ho += obj[size_t(i)];
            hs += scl[size_t(i)];
        }
        total_obj += ho;
        total_scl += hs;
    }
    *objective = total_obj;
    *scale = total_scl;
    return true;
}

// F3b's per-channel products: A = (W − Q)·H_in (+ W·D) and ZH = Z·H_in by SGEMM per group of rows sharing an H_in,
// then N[j,k] = Z_j·A_kᵀ and G[j,k] = Z_j·ZH_kᵀ per head by objective_pairs_kernel (with H_out = I and no D term its
// two sums are exactly these dots, in double). Only N and G come back.
bool CudaSolverDevice::scale_refine_products(const ScaleRefineProducts& c) const {
    State& s = *s_;
    const cudaStream_t st = s.blas.stream();
    const int64_t rows = c.rows, cols = c.cols, n = rows * cols, hd = c.hd;
    if (n == 0) return false;
    // Z, W − Q and W go up; A and ZH are formed here (layer_objective's buffers).
    const auto upload = [&](DeviceBuffer<float>& b, const float* host) {
        float* dst = grown(b, size_t(n));
        copy_host_to_device(dst, host, size_t(n) * sizeof(float), st);
        return dst;
    };
    const float* dz = upload(s.ow, c.z);
    const float* ddiff = upload(s.odw, c.diff);
    const float* dw = c.d ? upload(s.ond, c.w) : nullptr;
    float* da = grown(s.om, size_t(n));
    float* dzh = grown(s.omw, size_t(n));
    for (int64_t r0 = 0; r0 < rows; r0 += c.hin_rows) {
        const int64_t at = (r0 / c.hin_rows) * cols * cols;
        const float* dh = s.on_device(c.h_in + at, cols * cols, s.oh);
        ptq_sample_device_memory();
        s.row_major_sgemm(ddiff + r0 * cols, Trans::no, dh, Trans::no, c.hin_rows, cols, cols, da + r0 * cols, 0.0f);
        if (dw)
            s.row_major_sgemm(dw + r0 * cols, Trans::no, s.on_device(c.d + at, cols * cols, s.od), Trans::no, c.hin_rows,
                              cols, cols, da + r0 * cols, 1.0f);
        s.row_major_sgemm(dz + r0 * cols, Trans::no, dh, Trans::no, c.hin_rows, cols, cols, dzh + r0 * cols, 0.0f);
    }
    s.pair_sums(da, nullptr, dzh, dz, dz, nullptr, rows / hd, hd, cols, c.n, c.g);
    return true;
}

void CudaSolverDevice::gemm(ConstMatF a, Trans ta, ConstMatF b, Trans tb, MatF c, float beta) const {
    const int64_t m = c.rows, n = c.cols, k = ta == Trans::yes ? a.rows : a.cols;
    LOWBIT_CHECK((ta == Trans::yes ? a.cols : a.rows) == m && (tb == Trans::yes ? b.cols : b.rows) == k &&
                     (tb == Trans::yes ? b.rows : b.cols) == n,
                 ErrorKind::usage, "gemm: shapes {}x{} · {}x{} → {}x{} do not agree", a.rows, a.cols, b.rows, b.cols, m, n);
    if (m == 0 || n == 0) return;
    State& s = *s_;
    float* dc = s.result_in(c, beta);
    s.row_major_sgemm(s.operand(s.ga, a), ta, s.operand(s.gb, b), tb, m, n, k, dc, beta);
    s.result_out(c, dc);
}

bool CudaSolverDevice::keep_gptaq_terms(uint64_t id, const float* d, int64_t n, const std::vector<int64_t>& order,
                                        const std::vector<uint8_t>& dead, bool want_rh) const {
    State& s = *s_;
    const cudaStream_t st = s.blas.stream();
    const auto it = s.kept.find(id);
    LOWBIT_CHECK(id != 0 && it != s.kept.end() && it->second.u.data(), ErrorKind::usage,
                 "keep_gptaq_terms: no factor kept for input {}", id);
    State::Kept& k = it->second;
    const float* dd = s.on_device(d, n * n, s.ga);
    std::vector<int32_t> order32(order.begin(), order.end());
    int32_t* dorder = grown(s.sorder, size_t(n));
    CUDA_CHECK(cudaMemcpyAsync(dorder, order32.data(), size_t(n) * 4, cudaMemcpyHostToDevice, st));
    uint8_t* ddead = grown(s.chol_dead, size_t(n));
    CUDA_CHECK(cudaMemcpyAsync(ddead, dead.data(), size_t(n), cudaMemcpyHostToDevice, st));
    float* dhat = grown(s.dhat, size_t(n * n));
    float* dut = grown(s.dut, size_t(n * n));
    const unsigned blocks = unsigned((n * n + 255) / 256);
    sweep_order_d_kernel<<<blocks, 256, 0, st>>>(dd, dorder, ddead, n, dhat);
    CUDA_CHECK(cudaGetLastError());
    s.row_major_sgemm(dhat, Trans::no, k.u.data(), Trans::yes, n, n, n, dut, 0.0f);  // D̂·Uᵀ
    if (want_rh)  // RH = D̂·H⁻¹ = (D̂·Uᵀ)·U
        s.row_major_sgemm(dut, Trans::no, k.u.data(), Trans::no, n, n, n, s.keep(k.rh, size_t(n * n)), 0.0f);
    strict_upper_kernel<<<blocks, 256, 0, st>>>(dut, n);
    CUDA_CHECK(cudaGetLastError());
    s.row_major_sgemm(dut, Trans::no, k.u.data(), Trans::no, n, n, n, s.keep(k.p, size_t(n * n)), 0.0f);  // P
    ptq_sample_device_memory();
    CUDA_CHECK(cudaStreamSynchronize(st));  // order32 and dead are read before they go
    return true;
}

void CudaSolverDevice::rh_product(uint64_t id, ConstMatF a, MatF c) const {
    State& s = *s_;
    const State::Kept* k = s.kept_of(id);
    LOWBIT_CHECK(k && k->rh.data(), ErrorKind::usage, "rh_product: no RH kept for input {}", id);
    LOWBIT_CHECK(a.rows == c.rows && a.cols == c.cols, ErrorKind::usage, "rh_product: {}x{} into {}x{}", a.rows, a.cols,
                 c.rows, c.cols);
    if (c.rows == 0 || c.cols == 0) return;
    float* dc = s.result_in(c, 1.0f);
    s.row_major_sgemm(s.operand(s.ga, a), Trans::no, k->rh.data(), Trans::no, c.rows, c.cols, c.cols, dc, 1.0f);
    s.result_out(c, dc);
}

double CudaSolverDevice::sweep(const SweepCall& call) const {
    State& s = *s_;
    const cudaStream_t st = s.blas.stream();
    QuantizedWeight& out = *call.out;
    const GridSpec& g = out.spec;
    const int64_t n = call.n, cols = call.cols, group = g.group_size(cols), per_row = cols / group;
    const int64_t span = g.fit_span(cols);
    if (n == 0) return 0.0;
    // u: the kept factor of this input_id, else the host's (once per input_id); p likewise.
    const State::Kept* kept = s.kept_of(call.input_id);
    const float* du = nullptr;
    if (kept && kept->u.data()) {
        du = kept->u.data();
    } else {
        LOWBIT_CHECK(call.u, ErrorKind::usage, "sweep: no factor for input {} on the device and none given", call.input_id);
        if (s.su_id != call.input_id || call.input_id == 0) {
            s.su_id = 0;
            copy_host_to_device(grown(s.su, size_t(cols * cols)), call.u, size_t(cols * cols) * sizeof(float), st);
            s.su_id = call.input_id;
        }
        du = s.su.data();
    }
    const float* dp = nullptr;
    if (call.p_kept) {
        LOWBIT_CHECK(kept && kept->p.data(), ErrorKind::usage, "sweep: no GPTAQ P kept for input {}", call.input_id);
        dp = kept->p.data();
    } else if (call.p) {
        if (s.sp_id != call.input_id || call.input_id == 0) {
            s.sp_id = 0;
            copy_host_to_device(grown(s.sp, size_t(cols * cols)), call.p, size_t(cols * cols) * sizeof(float), st);
            s.sp_id = call.input_id;
        }
        dp = s.sp.data();
    }
    float* dw = grown(s.sw, size_t(n * cols));
    copy_host_to_device(dw, call.w, size_t(n * cols) * 4, st);
    std::vector<int32_t> order32(call.order->begin(), call.order->end());
    int32_t* dorder = grown(s.sorder, size_t(cols));
    CUDA_CHECK(cudaMemcpyAsync(dorder, order32.data(), size_t(cols) * 4, cudaMemcpyHostToDevice, st));
    float* dgrids = grown(s.sgrids, size_t(n * per_row * 3));
    static_assert(sizeof(GroupGrid) == 3 * sizeof(float), "GroupGrid is three floats");
    const GroupGrid* host_grids = out.grids.data() + call.row0 * per_row;
    const auto upload_grids = [&]() {
        CUDA_CHECK(cudaMemcpyAsync(dgrids, host_grids, size_t(n * per_row) * sizeof(GroupGrid), cudaMemcpyHostToDevice, st));
        CUDA_CHECK(cudaStreamSynchronize(st));  // host_grids may change again before the next copy
    };
    upload_grids();
    uint8_t* dcodes = grown(s.scodes, size_t(n * cols));
    const int64_t sub = std::min<int64_t>(kMaxSubBlock, call.block);
    float* derr = grown(s.serr, size_t(n * sub));
    float* dpre = dp ? grown(s.spre, size_t(n * sub)) : nullptr;
    double* dloss = grown(s.sloss, size_t(n));
    CUDA_CHECK(cudaMemsetAsync(dloss, 0, size_t(n) * sizeof(double), st));
    ptq_sample_device_memory();

    SweepGrid sg{};
    const float* levels = grid_levels(g);
    sg.has_levels = levels != nullptr;
    sg.has_offset = grid_has_offset(g);
    sg.maxq = g.max_code();
    LOWBIT_CHECK(sg.maxq < 64 || !levels, ErrorKind::runtime, "sweep: level table of {} entries", sg.maxq + 1);
    if (levels) std::copy(levels, levels + sg.maxq + 1, sg.levels);

    const float one = 1.0f;
    for (int64_t i1 = 0; i1 < cols; i1 += call.block) {
        const int64_t i2 = std::min(cols, i1 + call.block);
        if (call.fit_block) {
            const int64_t s_first = (i1 + span - 1) / span * span;
            if (s_first < i2) {  // bring the spans' columns up to date on the host, fit, send the grids
                const int64_t s_last = (i2 - 1) / span * span, c_end = std::min(cols, s_last + span);
                if (i1 > 0)  // before the first block nothing has moved: the host's rows are current (per channel:
                             // the whole matrix would come back for nothing)
                    CUDA_CHECK(cudaMemcpy2DAsync(call.w + s_first, size_t(cols) * 4, dw + s_first, size_t(cols) * 4,
                                                 size_t(c_end - s_first) * 4, size_t(n), cudaMemcpyDeviceToHost, st));
                CUDA_CHECK(cudaStreamSynchronize(st));
                call.fit_block(i1, i2);
                upload_grids();
            }
        }
        for (int64_t j1 = i1; j1 < i2; j1 += sub) {  // sub-blocks of at most 128 columns, lazily coupled
            const int64_t j2 = std::min(i2, j1 + sub), nb = j2 - j1;
            const size_t smem = size_t((dp ? 2 : 1) * nb * nb + 2 * kSweepWarps * kMaxSubBlock) * sizeof(float);
            sweep_block_kernel<<<unsigned((n + kSweepWarps - 1) / kSweepWarps), kSweepWarps * 32, smem, st>>>(
                dw, cols, int(n), j1, int(nb), du, dp, dorder, dcodes, dgrids, per_row,
                group, sg, derr, dpre, dloss);
            CUDA_CHECK(cudaGetLastError());
            if (j2 < cols) {  // W[:, j2:] += err·U[j1:j2, j2:] (+ pre·P[j1:j2, j2:])
                cublas_check(cublasSgemm(s.blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(cols - j2), int(n), int(nb), &one,
                                         du + j1 * cols + j2, int(cols), derr, int(nb), &one, dw + j2, int(cols)),
                             "cublasSgemm (lazy update)");
                if (dp)
                    cublas_check(cublasSgemm(s.blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(cols - j2), int(n), int(nb), &one,
                                             dp + j1 * cols + j2, int(cols), dpre, int(nb), &one, dw + j2, int(cols)),
                                 "cublasSgemm (lazy GPTAQ update)");
            }
        }
    }
    copy_device_to_host(out.codes.data() + call.row0 * cols, dcodes, size_t(n * cols), st);  // w stays: scratch
    std::vector<double> loss(static_cast<size_t>(n));
    CUDA_CHECK(cudaMemcpyAsync(loss.data(), dloss, size_t(n) * sizeof(double), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    return std::accumulate(loss.begin(), loss.end(), 0.0);
}

void CudaSolverDevice::score_int_candidates(const GridSpec& g, const float* w, int64_t ldw, int64_t rows, int64_t n,
                                            const float* h, int64_t ldh, uint64_t h_id, const GroupGrid* cand, int64_t k,
                                            double* scores) const {
    if (rows == 0 || n == 0) return;
    State& s = *s_;
    const cudaStream_t st = s.blas.stream();
    const float* dh = s.held_copy(h, (n - 1) * ldh + n);  // the block of a held H_in, read in place (ld = ldh)
    int64_t dh_ld = ldh;
    if (!dh && (h_id == 0 || s.score_h_id != h_id || s.score_h_ptr != h || s.score_h_n != n || s.score_h_ld != ldh)) {
        s.score_h_id = 0;
        float* dh = grown(s.score_h, size_t(n * n));
        CUDA_CHECK(cudaMemcpy2DAsync(dh, size_t(n) * 4, h, size_t(ldh) * 4, size_t(n) * 4, size_t(n), cudaMemcpyHostToDevice, st));
        s.score_h_id = h_id;
        s.score_h_ptr = h;
        s.score_h_n = n;
        s.score_h_ld = ldh;
    }
    if (!dh) {
        dh = s.score_h.data();
        dh_ld = n;
    }
    float* dh_hi = grown(s.score_h_hi, size_t(n * n));
    float* dh_lo = grown(s.score_h_lo, size_t(n * n));
    tf32_split_kernel<<<unsigned((n * n + 255) / 256), 256, 0, st>>>(dh, dh_ld, n, dh_hi, dh_lo);
    CUDA_CHECK(cudaGetLastError());
    float* dw = grown(s.score_w, size_t(rows * n));
    CUDA_CHECK(cudaMemcpy2DAsync(dw, size_t(n) * 4, w, size_t(ldw) * 4, size_t(n) * 4, size_t(rows), cudaMemcpyHostToDevice, st));
    const int64_t m = rows * k;
    float* dcand = grown(s.score_cand, size_t(m * 3));
    CUDA_CHECK(cudaMemcpyAsync(dcand, cand, size_t(m) * sizeof(GroupGrid), cudaMemcpyHostToDevice, st));
    double* dscores = grown(s.score_out, size_t(m));
    SweepGrid sg{};
    sg.has_levels = 0;
    sg.has_offset = grid_has_offset(g);
    sg.maxq = g.max_code();
    // D and D·H in chunks of whole rows' candidates, at most 2^26 floats (256 MiB) each.
    const int64_t chunk = std::max<int64_t>(k, std::min<int64_t>(m, ((int64_t(1) << 26) / n) / k * k));
    float* dd_hi = grown(s.score_d_hi, size_t(chunk * n));
    float* dd_lo = grown(s.score_d_lo, size_t(chunk * n));
    float* dt = grown(s.score_t, size_t(chunk * n));
    ptq_sample_device_memory();
    // Row-major T = D·H is column-major Tᵀ = Hᵀ·Dᵀ over the same storage (H is symmetric; either way). Three TF32
    // products of the splits, D·H ≈ D_hi·H_hi + D_hi·H_lo + D_lo·H_hi (the dropped D_lo·H_lo and the TF32 rounding of the
    // low parts are ~2^-21 of each product; FP32 accumulation as in SGEMM): FP32-like accuracy at ~3× SGEMM's rate.
    const float one = 1.0f;
    const auto product = [&](const float* h, const float* d, int64_t mc, float beta) {
        cublas_check(cublasGemmEx(s.blas.handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(mc), int(n), &one, h, CUDA_R_32F,
                                  int(n), d, CUDA_R_32F, int(n), &beta, dt, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F_FAST_TF32,
                                  CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx (grid candidates, TF32 split)");
    };
    for (int64_t a0 = 0; a0 < m; a0 += chunk) {
        const int64_t mc = std::min(chunk, m - a0);
        candidate_error_kernel<<<unsigned((mc * n + 255) / 256), 256, 0, st>>>(dw, n, n, dcand, k, a0, mc, sg, dd_hi, dd_lo);
        CUDA_CHECK(cudaGetLastError());
        product(dh_hi, dd_hi, mc, 0.0f);
        product(dh_lo, dd_hi, mc, 1.0f);
        product(dh_hi, dd_lo, mc, 1.0f);
        row_dot_kernel<<<unsigned((mc * 32 + 255) / 256), 256, 0, st>>>(dd_hi, dd_lo, dt, mc, n, dscores + a0);
        CUDA_CHECK(cudaGetLastError());
    }
    CUDA_CHECK(cudaMemcpyAsync(scores, dscores, size_t(m) * sizeof(double), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace lowbit
