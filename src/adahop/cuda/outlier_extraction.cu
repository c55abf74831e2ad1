// outlier_extraction.cu — top-k row/column selection fused with the gather/zero, and the sliver scatter.
//
// split_outliers_cuda = two launches:
//   1. the statistics pass of outlier_stats.cu on one axis only (Σx² for L2, max |x| for absmax);
//   2. select_gather_kernel, G CTAs of 1024 threads. Every CTA selects the same k indices from the n scores
//      (a deterministic function of them), so no second launch or grid-wide barrier is needed between the
//      selection and the gather; CTA g then owns the selected positions [g·chunk, (g+1)·chunk):
//        a. keys = the FP64 bits of the scores (non-negative, so the bits order like the values), cached in
//           shared memory when n × 8 B fits next to the list (n ≲ 28 K on the H200), else read from L2 in
//           each pass (slower: ~n × 16 B per pass per CTA, so at most 4 CTAs then);
//        b. radix select, 8 bits per pass from the first byte in which the keys differ (one OR/AND reduction
//           finds it: scores of one magnitude share their sign and top exponent bits): a 256-bin histogram of
//           the keys that still match the prefix (plain shared atomics: warp aggregation with __match_any_sync
//           measures the same on the H200; one atomic for the warp's smallest and largest digit
//           (__reduce_min/max_sync + ballots) 10–30 % slower), warp 0 finds the bin of the k-th largest; stop
//           when that bin holds exactly the keys still needed, or after the last digit. Then the keys above
//           the final prefix are taken, and of those equal to it the first `take_eq` by index (ties → lower
//           index first, as the CPU reference ranks them);
//        c. ordered compaction: warp w scans the index range [w·span, (w+1)·span) (ballots), per-warp counts
//           give each warp its base rank among equals and its base output position; positions come out in
//           index order, so the indices are ascending without a sort;
//        d. gather its positions into the slice (16-byte copies for rows when possible) and zero them in clean.
// Napkin math (n = 4096, k = 64, X rows 4096×2048 BF16): keys 32 KB per CTA from L2 (~1 µs), 3–8 passes of
// ~0.2 µs, gather 256 KB read + 512 KB written over ~16 CTAs (~0.2 µs). The previous version (scores kernel,
// CUB radix sort of all n keys, a bitonic sort, a gather kernel) took 80 µs on X rows, 105 µs on W's 8192 rows.
// The host twin of 2b–c is radix_top_k_host (tested against top_k_indices on the host).
#include "adahop/cuda/outlier_extraction.cuh"

#include <algorithm>

namespace lowbit {

using namespace outlier_extraction_detail;

namespace {

template <typename T>
struct SelectGatherParams {
    const double* sums;       // l2: the score of i is sums[2i+1] (Σx²)
    const uint32_t* maxbits;  // absmax: the float bits of max |x|
    bool l2;
    bool rank;                // false when k == n: everything is taken, no scores are read
    bool cache_keys;          // keys in shared memory
    bool vector;              // rows: 16-byte copies
    int n, k, chunk;
    const T* x;               // may equal clean (in place)
    T* clean;                 // nullptr: nothing to zero in x's layout …
    uint8_t* codes;           // … but, when set, the quantized operand's codes [n][code_bytes] and
    uint8_t* scales;          //     scales [n][nb], overwritten with those of an all-zero vector
    int64_t code_bytes, nb;
    uint8_t zero_scale;
    T* slice;
    int32_t* indices;
    int64_t rows, cols;
    bool by_rows;
};

template <typename T>
__device__ __forceinline__ uint64_t global_key(const SelectGatherParams<T>& p, int i) {
    const double s = p.l2 ? p.sums[2 * int64_t(i) + 1] : double(__uint_as_float(p.maxbits[i]));
    return uint64_t(__double_as_longlong(s));
}

template <typename T>
__device__ __forceinline__ T zero_value();
template <>
__device__ __forceinline__ float zero_value<float>() { return 0.0f; }
template <>
__device__ __forceinline__ __nv_bfloat16 zero_value<__nv_bfloat16>() { return __ushort_as_bfloat16(0); }

// Σ of v over the lanes below this one.
__device__ __forceinline__ uint32_t exclusive_scan_warp(uint32_t v, int lane) {
    uint32_t incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
        if (lane >= o) incl += t;
    }
    return incl - v;
}

template <typename T>
__global__ void __launch_bounds__(kSelectThreads, 1) select_gather_kernel(const SelectGatherParams<T> p) {
    extern __shared__ __align__(16) unsigned char smem[];  // [cached keys: n × 8 B][list: chunk × 4 B]
    uint64_t* s_keys = reinterpret_cast<uint64_t*>(smem);
    int32_t* s_list = reinterpret_cast<int32_t*>(smem + (p.cache_keys ? size_t(p.n) * 8 : 0));
    __shared__ __align__(16) uint32_t s_hist[256];
    __shared__ uint32_t s_gt[kSelectWarps], s_eq[kSelectWarps], s_eq_base[kSelectWarps], s_sel_base[kSelectWarps];
    __shared__ uint32_t s_bin, s_above, s_bin_count;
    __shared__ uint64_t s_or[kSelectWarps], s_and[kSelectWarps];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = p.n;
    const int p0 = int(blockIdx.x) * p.chunk, p1 = min(p.k, p0 + p.chunk);

    // ---- b. radix select (all threads hold the same mask / prefix / krem)
    uint64_t mask = 0, prefix = 0;
    uint32_t krem = uint32_t(p.k);
    if (p.rank) {
        // the leading bytes every key shares need no pass: OR and AND of all keys (the barrier also publishes
        // the cached keys)
        uint64_t k_or = 0, k_and = ~uint64_t(0);
        for (int i = tid; i < n; i += kSelectThreads) {
            const uint64_t key = global_key(p, i);
            if (p.cache_keys) s_keys[i] = key;
            k_or |= key;
            k_and &= key;
        }
        const uint64_t w_or = (uint64_t(__reduce_or_sync(0xFFFFFFFFu, uint32_t(k_or >> 32))) << 32) | __reduce_or_sync(0xFFFFFFFFu, uint32_t(k_or));
        const uint64_t w_and =
            (uint64_t(__reduce_and_sync(0xFFFFFFFFu, uint32_t(k_and >> 32))) << 32) | __reduce_and_sync(0xFFFFFFFFu, uint32_t(k_and));
        if (lane == 0) {
            s_or[warp] = w_or;
            s_and[warp] = w_and;
        }
        __syncthreads();
        k_or = (uint64_t(__reduce_or_sync(0xFFFFFFFFu, uint32_t(s_or[lane] >> 32))) << 32) | __reduce_or_sync(0xFFFFFFFFu, uint32_t(s_or[lane]));
        k_and = (uint64_t(__reduce_and_sync(0xFFFFFFFFu, uint32_t(s_and[lane] >> 32))) << 32) |
                __reduce_and_sync(0xFFFFFFFFu, uint32_t(s_and[lane]));  // lane l holds warp l's (kSelectWarps = 32)
        const int first = radix_start(k_or, k_and, mask, prefix);  // < 0: all keys equal, the tie rule picks the first k
        for (int shift = 8 * first; first >= 0; shift -= 8) {
            if (tid < 256) s_hist[tid] = 0;
            __syncthreads();
            for (int i0 = 0; i0 < n; i0 += kSelectThreads) {  // block-uniform trip count: full warps below
                const int i = i0 + tid;
                uint32_t digit = 256u;  // not counted
                if (i < n) {
                    const uint64_t key = p.cache_keys ? s_keys[i] : global_key(p, i);
                    if ((key & mask) == prefix) digit = uint32_t(key >> shift) & 255u;
                }
                if (digit < 256u) atomicAdd(&s_hist[digit], 1u);
            }
            __syncthreads();
            if (warp == 0) {  // lane l holds bins 8l … 8l+7; find b with above(b) < krem ≤ above(b) + hist[b]
                const uint4 lo = reinterpret_cast<const uint4*>(s_hist)[2 * lane], hi = reinterpret_cast<const uint4*>(s_hist)[2 * lane + 1];
                const uint32_t h[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
                const uint32_t local = h[0] + h[1] + h[2] + h[3] + h[4] + h[5] + h[6] + h[7];
                uint32_t suffix = local;  // Σ over lanes ≥ lane
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const uint32_t t = __shfl_down_sync(0xFFFFFFFFu, suffix, o);
                    if (lane + o < 32) suffix += t;
                }
                uint32_t above = suffix - local;  // keys in the bins of the lanes above
#pragma unroll
                for (int j = 7; j >= 0; --j) {
                    if (above < krem && krem <= above + h[j]) {  // exactly one (lane, j) of the warp
                        s_bin = uint32_t(8 * lane + j);
                        s_above = above;
                        s_bin_count = h[j];
                    }
                    above += h[j];
                }
            }
            __syncthreads();
            krem -= s_above;
            prefix |= uint64_t(s_bin) << shift;
            mask |= uint64_t(0xFF) << shift;
            if (s_bin_count == krem || shift == 0) break;  // block-uniform
        }
    }
    const uint32_t take_eq = krem;  // without ranking: mask = 0, every index is "equal" and k = n are taken

    // ---- c. ordered compaction
    const int span = ((n + kSelectWarps - 1) / kSelectWarps + 31) / 32 * 32;
    const int w0 = min(n, warp * span), w1 = min(n, w0 + span);
    auto class_of = [&](int i) -> int {
        if (i >= w1) return -1;
        if (!p.rank) return 0;
        return selection_class(p.cache_keys ? s_keys[i] : global_key(p, i), mask, prefix);
    };
    {
        uint32_t gt = 0, eq = 0;
        for (int b = w0; b < w1; b += 32) {  // warp-uniform
            const int cls = class_of(b + lane);
            gt += uint32_t(__popc(__ballot_sync(0xFFFFFFFFu, cls > 0)));
            eq += uint32_t(__popc(__ballot_sync(0xFFFFFFFFu, cls == 0)));
        }
        if (lane == 0) {
            s_gt[warp] = gt;
            s_eq[warp] = eq;
        }
    }
    __syncthreads();
    if (warp == 0) {  // lane w: warp w's bases, two exclusive scans over the warps
        const uint32_t eq = s_eq[lane], eq_base = exclusive_scan_warp(eq, lane);
        const uint32_t taken_eq = take_eq > eq_base ? min(take_eq - eq_base, eq) : 0u;
        s_eq_base[lane] = eq_base;
        s_sel_base[lane] = exclusive_scan_warp(s_gt[lane] + taken_eq, lane);
    }
    __syncthreads();
    {
        uint32_t run_eq = s_eq_base[warp], run_sel = s_sel_base[warp];
        const unsigned below = (1u << lane) - 1u;  // lanes before this one
        for (int b = w0; b < w1; b += 32) {
            const int i = b + lane;
            const int cls = class_of(i);
            const unsigned eq_mask = __ballot_sync(0xFFFFFFFFu, cls == 0);
            const bool take = cls > 0 || (cls == 0 && run_eq + uint32_t(__popc(eq_mask & below)) < take_eq);
            const unsigned sel_mask = __ballot_sync(0xFFFFFFFFu, take);
            const int pos = int(run_sel + uint32_t(__popc(sel_mask & below)));
            if (take && pos >= p0 && pos < p1) {
                s_list[pos - p0] = i;
                p.indices[pos] = i;
            }
            run_eq += uint32_t(__popc(eq_mask));
            run_sel += uint32_t(__popc(sel_mask));
        }
    }
    __syncthreads();

    // ---- d. gather this CTA's positions into the slice, zero them in clean (read before write: in place is fine)
    const int64_t cnt = p1 - p0, cols = p.cols;
    if (p.by_rows) {
        if (p.vector) {
            const int64_t per_row = cols * int64_t(sizeof(T)) / 16, total = cnt * per_row;
            for (int64_t u = tid; u < total; u += kSelectThreads) {
                const int64_t pi = u / per_row, j = u - pi * per_row, r = s_list[pi];
                const uint4 v = reinterpret_cast<const uint4*>(p.x + r * cols)[j];
                reinterpret_cast<uint4*>(p.slice + (p0 + pi) * cols)[j] = v;
                if (p.clean != nullptr) reinterpret_cast<uint4*>(p.clean + r * cols)[j] = make_uint4(0u, 0u, 0u, 0u);
            }
        } else {
            const int64_t total = cnt * cols;
            for (int64_t u = tid; u < total; u += kSelectThreads) {
                const int64_t pi = u / cols, j = u - pi * cols, r = s_list[pi];
                const T v = p.x[r * cols + j];
                p.slice[(p0 + pi) * cols + j] = v;
                if (p.clean != nullptr) p.clean[r * cols + j] = zero_value<T>();
            }
        }
    } else {
        const int64_t total = p.rows * cnt;
        for (int64_t u = tid; u < total; u += kSelectThreads) {  // consecutive threads: the positions of one row
            const int64_t r = u / cnt, pi = u - r * cnt, c = s_list[pi];
            const T v = p.x[r * cols + c];
            p.slice[r * p.k + p0 + pi] = v;
            if (p.clean != nullptr) p.clean[r * cols + c] = zero_value<T>();
        }
    }
    if (p.codes != nullptr) {  // the quantized operand: codes (16-byte runs) and scales of the taken vectors
        const int64_t per = p.code_bytes / 16;
        for (int64_t u = tid; u < cnt * per; u += kSelectThreads)
            reinterpret_cast<uint4*>(p.codes + int64_t(s_list[u / per]) * p.code_bytes)[u % per] = make_uint4(0u, 0u, 0u, 0u);
        for (int64_t u = tid; u < cnt * p.nb; u += kSelectThreads) p.scales[int64_t(s_list[u / p.nb]) * p.nb + u % p.nb] = p.zero_scale;
    }
}

// The L2 score of outer vector i from the Σx² partials of its groups of blocks (hadamard_mxfp4_stats.cuh), written
// as sums[2i+1] (where select_gather_kernel reads the Σx² of the statistics pass); a fixed order per vector,
// so equal vectors get equal bits (the tie rule relies on it).
// Group b's Σx² is sq[b · sq_stride]: the pass's block_sumsq (stride 1) or the Σx² half of its detector pairs
// (stride 2).
// Rows ([n][nb]): one warp per vector, lane l adds groups l, l + 32, … in FP64, then an xor tree.
constexpr int kScoreThreads = 256;
__global__ void __launch_bounds__(kScoreThreads) row_block_scores_kernel(const float* __restrict__ sq, int sq_stride, int64_t n,
                                                                       int64_t nb, double* __restrict__ sums) {
    const int64_t i = (int64_t(blockIdx.x) * kScoreThreads + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (i >= n) return;  // warp-uniform
    double s = 0.0;
    for (int64_t j = lane; j < nb; j += 32) s += double(sq[(i * nb + j) * sq_stride]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) sums[2 * i + 1] = s;
}
// Columns ([nb][n], the column pass's layout): a CTA per 32 columns, lane = column (coalesced); warp w adds
// stripes w, w + 8, … in FP64, then warp 0 adds the 8 warps' sums in order.
__global__ void __launch_bounds__(kScoreThreads) column_block_scores_kernel(const float* __restrict__ sq, int sq_stride, int64_t n,
                                                                          int64_t nb, double* __restrict__ sums) {
    constexpr int kWarps = kScoreThreads / 32;
    __shared__ double s_part[kWarps][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = int64_t(blockIdx.x) * 32 + lane;
    double s = 0.0;
    if (i < n)
#pragma unroll 4
        for (int64_t j = warp; j < nb; j += kWarps) s += double(sq[(j * n + i) * sq_stride]);
    s_part[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && i < n) {
        double t = 0.0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) t += s_part[w][lane];
        sums[2 * i + 1] = t;
    }
}

// The selected rows (by_rows) or columns of C, visited as (position in C, position in the k-vector slice) pairs:
// rows: slice k × cols_c, c[indices[i]][j] ↔ slice[i][j]; columns: slice rows_c × k, c[j][indices[i]] ↔ slice[j][i].
// `op(at_c, at_slice)` does the work: placing sliver values into C (OutlierPlacement) or saving C's old values.
constexpr int kScatterThreads = 256;

// Rows: CTA (x, y) walks columns [x·1024, x·1024 + 1024) of the slice rows y, y + gridDim.y, … (coalesced on both
// sides). No integer division per element (a 64-bit one is ~70 instructions).
template <typename Op>
__global__ void __launch_bounds__(kScatterThreads) selected_rows_kernel(int64_t k, const int32_t* __restrict__ indices,
                                                                      int64_t cols_c, Op op) {
    const int64_t j0 = int64_t(blockIdx.x) * (4 * kScatterThreads) + int64_t(threadIdx.x);
    for (int64_t i = blockIdx.y; i < k; i += gridDim.y) {
        const int64_t row = int64_t(indices[i]) * cols_c, slice_row = i * cols_c;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int64_t j = j0 + int64_t(u) * kScatterThreads;
            if (j < cols_c) op(row + j, slice_row + j);
        }
    }
}

// Columns: one warp per row of C: lane l takes positions l, l + 32, … — the slice row is read coalesced, the
// accesses to C land in one row (their sectors are the floor: one 32-byte sector per selected column that is not
// next to another).
template <typename Op>
__global__ void __launch_bounds__(kScatterThreads) selected_columns_kernel(int64_t k, const int32_t* __restrict__ indices,
                                                                         int64_t rows_c, int64_t cols_c, Op op) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = int64_t(gridDim.x) * (kScatterThreads / 32);
    for (int64_t j = (int64_t(blockIdx.x) * kScatterThreads + threadIdx.x) >> 5; j < rows_c; j += warps)
        for (int64_t i = lane; i < k; i += 32) op(j * cols_c + __ldg(indices + i), j * k + i);
}

// C[at] = the sliver value: BF16 rounded to nearest even, or FP32 v + beta · old (lp_matmul's store, with old the
// value C held before the main product overwrote it, saved by gather_outliers_cuda).
struct OutlierPlacement {
    const float* src;
    float* f32;
    __nv_bfloat16* bf16;
    const float* saved;
    float beta;
    __device__ void operator()(int64_t at_c, int64_t at_slice) const {
        const float v = __ldg(src + at_slice);
        if (bf16) bf16[at_c] = __float2bfloat16_rn(v);
        else f32[at_c] = beta != 0.0f ? v + beta * __ldg(saved + at_slice) : v;
    }
};

struct OutlierSave {
    const float* c;
    float* dst;
    __device__ void operator()(int64_t at_c, int64_t at_slice) const { dst[at_slice] = c[at_c]; }
};

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename Op>
void for_selected(int64_t k, const int32_t* indices, bool by_rows, int64_t rows_c, int64_t cols_c, Op op, cudaStream_t stream) {
    const int64_t other = by_rows ? cols_c : rows_c;
    if (k <= 0 || other <= 0) return;
    if (by_rows) {
        const dim3 grid(blocks_for(cols_c, 4 * kScatterThreads), unsigned(std::min<int64_t>(k, 65535)));
        selected_rows_kernel<<<grid, kScatterThreads, 0, stream>>>(k, indices, cols_c, op);
    } else {
        const int64_t ctas = std::min<int64_t>(blocks_for(rows_c, kScatterThreads / 32), int64_t(cuda_multiprocessor_count()) * 16);
        selected_columns_kernel<<<unsigned(ctas), kScatterThreads, 0, stream>>>(k, indices, rows_c, cols_c, op);
    }
    CUDA_CHECK(cudaGetLastError());
}

// Plans and launches select_gather_kernel for p (everything but rank, cache_keys, chunk filled in).
// CTAs: ~16 KB of slice each, at most 64 (each reads all n keys), 4 when the keys do not fit in shared
// memory (each pass then reads them from L2), 128 without ranking; each CTA's list ≤ kListCap entries.
// Shared memory: the keys (n × 8 B) when they fit next to the list in the device's opt-in limit
// (227 KB on the H200: up to ~28 K keys with k = 64).
template <typename T>
void launch_select_gather(SelectGatherParams<T> p, cudaStream_t stream) {
    const int64_t n = p.n, k = p.k, other = p.by_rows ? p.cols : p.rows;
    p.rank = k < n;
    // the kernel's static shared memory (~1.6 KB) and a margin
    const int64_t budget = int64_t(cuda_shared_memory_per_block_optin()) - 4096;
    const int64_t list_cap = std::min<int64_t>(kListCap, budget / 4);
    auto plan = [&](int64_t max_ctas, int64_t& ctas, int64_t& chunk) {
        ctas = std::clamp<int64_t>(ceil_div(k * other * int64_t(sizeof(T)), 16384), 1, std::min(max_ctas, k));
        chunk = std::min<int64_t>(ceil_div(k, ctas), list_cap);
        ctas = ceil_div(k, chunk);  // every CTA owns at least one position
    };
    int64_t ctas = 0, chunk = 0;
    plan(!p.rank ? 128 : 64, ctas, chunk);
    p.cache_keys = p.rank && n * 8 + chunk * 4 <= budget;
    if (p.rank && !p.cache_keys) plan(4, ctas, chunk);
    p.chunk = int(chunk);
    const size_t smem = (p.cache_keys ? size_t(n) * 8 : 0) + size_t(chunk) * 4;
    if (smem > 48 * 1024)  // raised to the whole budget once, not per size
        cuda_allow_dynamic_shared_memory(reinterpret_cast<const void*>(select_gather_kernel<T>), int(budget));
    select_gather_kernel<T><<<unsigned(ctas), kSelectThreads, smem, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
}

template <typename T>
SelectGatherParams<T> select_params(const T* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, T* slice, int32_t* indices) {
    SelectGatherParams<T> p{};
    p.n = int(by_rows ? rows : cols);
    p.k = int(k);
    p.x = x;
    p.slice = slice;
    p.indices = indices;
    p.rows = rows;
    p.cols = cols;
    p.by_rows = by_rows;
    p.vector = by_rows && (cols * int64_t(sizeof(T))) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(slice) % 16 == 0;
    return p;
}

// k clamped to [0, n]; the dimension checked against the kernel's int indexing.
int64_t clamp_k(int64_t n, int64_t k) {
    if (n > int64_t(INT32_MAX) - kListCap - kSelectThreads) cuda_input_error("outlier extraction: dimension beyond 2^31");
    return k < 0 ? 0 : (k > n ? n : k);
}

template <typename T>
int64_t split(const T* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric, T* clean, T* slice,
              int32_t* indices, OutlierExtractionWorkspace& ws, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) cuda_input_error("outlier extraction: empty matrix");
    const int64_t n = by_rows ? rows : cols;
    k = clamp_k(n, k);
    if (clean != x) CUDA_CHECK(cudaMemcpyAsync(clean, x, size_t(rows * cols) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    if (k == 0) return 0;
    const bool l2 = metric == OutlierMetric::l2;
    if (k < n) {
        OutlierStatsRequest q;
        q.rows = by_rows;
        q.cols = !by_rows;
        q.sums = l2;
        q.max = !l2;
        outlier_stats_cuda(x, rows, cols, q, ws.stats, stream);
    }
    SelectGatherParams<T> p = select_params(x, rows, cols, by_rows, k, slice, indices);
    p.sums = by_rows ? ws.stats.row_sums.data() : ws.stats.col_sums.data();
    p.maxbits = by_rows ? ws.stats.row_max.data() : ws.stats.col_max.data();
    p.l2 = l2;
    p.clean = clean;
    p.vector = p.vector && reinterpret_cast<uintptr_t>(clean) % 16 == 0;
    launch_select_gather(p, stream);
    return k;
}

}  // namespace

int64_t split_outliers_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            __nv_bfloat16* clean, __nv_bfloat16* slice, int32_t* indices, OutlierExtractionWorkspace& ws,
                            cudaStream_t stream) {
    return split(x, rows, cols, by_rows, k, metric, clean, slice, indices, ws, stream);
}

int64_t split_outliers_cuda(const float* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            float* clean, float* slice, int32_t* indices, OutlierExtractionWorkspace& ws, cudaStream_t stream) {
    return split(x, rows, cols, by_rows, k, metric, clean, slice, indices, ws, stream);
}

int64_t extract_outliers_quantized_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, int axis, int64_t k, ScaleRule rule,
                                        const Mxfp4DeviceOutput& quantized, __nv_bfloat16* slice, int32_t* indices,
                                        OutlierExtractionWorkspace& ws, cudaStream_t stream, bool zero_selected) {
    const char* op = "extract_outliers_quantized_cuda";
    if (axis != 0 && axis != 1) cuda_usage_error(std::string(op) + ": axis must be 0 or 1, got " + std::to_string(axis));
    const bool have_sumsq = quantized.block_sumsq != nullptr || quantized.detector_partials != nullptr;
    if (!have_sumsq || (zero_selected && (!quantized.requested() || quantized.scales == nullptr)))
        cuda_usage_error(std::string(op) + (zero_selected ? ": needs the codes, scales and block_sumsq (or detector_partials) of the quantization pass"
                                                          : ": needs the block_sumsq (or detector_partials) of the quantization pass"));
    if (rows <= 0 || cols <= 0) cuda_input_error(std::string(op) + ": empty matrix");
    const bool by_rows = axis == 1;
    const int64_t n = by_rows ? rows : cols, inner = by_rows ? cols : rows;
    check_block_divisible(inner, 32, by_rows ? "columns" : "rows", "outlier extraction on an MXFP4 operand");
    if (zero_selected) cuda_check_aligned(quantized.codes, 16, "codes", op);
    k = clamp_k(n, k);
    if (k == 0) return 0;
    SelectGatherParams<__nv_bfloat16> p = select_params(x, rows, cols, by_rows, k, slice, indices);
    p.l2 = true;
    p.nb = inner / 32;
    if (k < n) {
        ws.stats.reserve(rows, cols);
        double* sums = by_rows ? ws.stats.row_sums.data() : ws.stats.col_sums.data();
        const float* sq = quantized.block_sumsq != nullptr ? quantized.block_sumsq : &quantized.detector_partials->y;
        const int sq_stride = quantized.block_sumsq != nullptr ? 1 : 2;
        const int64_t groups = block_stats_groups(rows, cols, axis);
        if (by_rows)
            row_block_scores_kernel<<<blocks_for(n * 32, kScoreThreads), kScoreThreads, 0, stream>>>(sq, sq_stride, n, groups, sums);
        else
            column_block_scores_kernel<<<blocks_for(n, 32), kScoreThreads, 0, stream>>>(sq, sq_stride, n, groups, sums);
        CUDA_CHECK(cudaGetLastError());
        p.sums = sums;
    }
    if (zero_selected) {
        p.codes = quantized.codes;
        p.scales = quantized.scales;
    }
    p.code_bytes = inner / 2;
    p.zero_scale = mx_scale_code(0u, mx_spec(MxElement::e2m1), rule);
    launch_select_gather(p, stream);
    return k;
}

void scatter_outliers_cuda(const float* src, int64_t k, const int32_t* indices, bool by_rows, float* c, int64_t rows_c,
                           int64_t cols_c, cudaStream_t stream) {
    for_selected(k, indices, by_rows, rows_c, cols_c, OutlierPlacement{src, c, nullptr, nullptr, 0.0f}, stream);
}

void place_outliers_cuda(const float* src, int64_t k, const int32_t* indices, bool by_rows, const float* saved, float beta,
                         float* c_f32, __nv_bfloat16* c_bf16, int64_t rows_c, int64_t cols_c, cudaStream_t stream) {
    if ((c_f32 == nullptr) == (c_bf16 == nullptr)) cuda_usage_error("place_outliers: pass exactly one output (FP32 or BF16)");
    if (beta != 0.0f && (c_f32 == nullptr || saved == nullptr))
        cuda_usage_error("place_outliers: beta needs the FP32 output and the saved old values");
    for_selected(k, indices, by_rows, rows_c, cols_c, OutlierPlacement{src, c_f32, c_bf16, saved, beta}, stream);
}

void gather_outliers_cuda(const float* c, int64_t k, const int32_t* indices, bool by_rows, int64_t rows_c, int64_t cols_c,
                          float* dst, cudaStream_t stream) {
    for_selected(k, indices, by_rows, rows_c, cols_c, OutlierSave{c, dst}, stream);
}

namespace outlier_extraction_detail {

int find_bin_host(const uint32_t* hist, uint32_t krem, uint32_t* above_out) {
    // as warp 0 does it: lane l sums bins 8l … 8l+7, a Hillis–Steele suffix scan over the lanes, then each
    // lane walks its bins from the top
    uint32_t local[32], suffix[32];
    for (int l = 0; l < 32; ++l) {
        local[l] = 0;
        for (int j = 0; j < 8; ++j) local[l] += hist[8 * l + j];
        suffix[l] = local[l];
    }
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t next[32];
        for (int l = 0; l < 32; ++l) next[l] = suffix[l] + (l + o < 32 ? suffix[l + o] : 0u);
        std::copy(next, next + 32, suffix);
    }
    int found = -1, hits = 0;
    for (int l = 0; l < 32; ++l) {
        uint32_t above = suffix[l] - local[l];
        for (int j = 7; j >= 0; --j) {
            if (above < krem && krem <= above + hist[8 * l + j]) {
                found = 8 * l + j;
                *above_out = above;
                ++hits;
            }
            above += hist[8 * l + j];
        }
    }
    return hits == 1 ? found : -1;
}

std::vector<int32_t> radix_top_k_host(const std::vector<uint64_t>& keys, int64_t k_in, int64_t chunk) {
    const int n = int(keys.size());
    const int k = int(std::clamp<int64_t>(k_in, 0, n));
    if (k == 0) return {};
    const bool rank = k < n;
    uint64_t mask = 0, prefix = 0;
    uint32_t krem = uint32_t(k);
    if (rank) {
        uint64_t k_or = 0, k_and = ~uint64_t(0);
        for (uint64_t key : keys) {
            k_or |= key;
            k_and &= key;
        }
        const int first = radix_start(k_or, k_and, mask, prefix);
        for (int shift = 8 * first; first >= 0; shift -= 8) {
            uint32_t hist[256] = {};
            for (int i = 0; i < n; ++i)
                if ((keys[size_t(i)] & mask) == prefix) ++hist[(keys[size_t(i)] >> shift) & 255u];
            uint32_t above = 0;
            const int b = find_bin_host(hist, krem, &above);
            if (b < 0) return {};  // the kernel's invariant broke: the test reports the mismatch
            krem -= above;
            prefix |= uint64_t(b) << shift;
            mask |= uint64_t(0xFF) << shift;
            if (hist[b] == krem || shift == 0) break;
        }
    }
    const uint32_t take_eq = krem;
    const int span = ((n + kSelectWarps - 1) / kSelectWarps + 31) / 32 * 32;
    auto class_of = [&](int i, int w1) { return i >= w1 ? -1 : (!rank ? 0 : selection_class(keys[size_t(i)], mask, prefix)); };
    uint32_t gt[kSelectWarps], eq[kSelectWarps], eq_base[kSelectWarps], sel_base[kSelectWarps];
    for (int w = 0; w < kSelectWarps; ++w) {
        const int w0 = std::min(n, w * span), w1 = std::min(n, w0 + span);
        gt[w] = eq[w] = 0;
        for (int i = w0; i < w1; ++i) {
            gt[w] += class_of(i, w1) > 0;
            eq[w] += class_of(i, w1) == 0;
        }
    }
    uint32_t eb = 0, sb = 0;
    for (int w = 0; w < kSelectWarps; ++w) {
        eq_base[w] = eb;
        sel_base[w] = sb;
        sb += gt[w] + (take_eq > eb ? std::min(take_eq - eb, eq[w]) : 0u);
        eb += eq[w];
    }
    // every CTA runs the same compaction and keeps the positions [g·chunk, min(k, (g+1)·chunk)): emulate the
    // compaction once, and check that the CTAs' ranges cover every position exactly once
    std::vector<int32_t> out(size_t(k), -1);
    for (int w = 0; w < kSelectWarps; ++w) {
        const int w0 = std::min(n, w * span), w1 = std::min(n, w0 + span);
        uint32_t run_eq = eq_base[w], run_sel = sel_base[w];
        for (int b = w0; b < w1; b += 32) {  // one warp step: ballots over the 32 lanes
            uint32_t eq_mask = 0, sel_mask = 0;
            int cls[32];
            for (int l = 0; l < 32; ++l) {
                cls[l] = class_of(b + l, w1);
                if (cls[l] == 0) eq_mask |= 1u << l;
            }
            bool take[32];
            for (int l = 0; l < 32; ++l) {
                const uint32_t below = (1u << l) - 1u;
                take[l] = cls[l] > 0 || (cls[l] == 0 && run_eq + uint32_t(__builtin_popcount(eq_mask & below)) < take_eq);
                if (take[l]) sel_mask |= 1u << l;
            }
            for (int l = 0; l < 32; ++l) {
                const int pos = int(run_sel + uint32_t(__builtin_popcount(sel_mask & ((1u << l) - 1u))));
                if (!take[l]) continue;
                if (pos < 0 || pos >= k || out[size_t(pos)] != -1) return {};  // outside or written twice
                out[size_t(pos)] = b + l;
            }
            run_eq += uint32_t(__builtin_popcount(eq_mask));
            run_sel += uint32_t(__builtin_popcount(sel_mask));
        }
    }
    std::vector<int> covered(size_t(k), 0);
    const int64_t ctas = (k + chunk - 1) / chunk;
    for (int64_t g = 0; g < ctas; ++g) {
        const int64_t p0 = g * chunk, p1 = std::min<int64_t>(k, p0 + chunk);
        if (p1 <= p0) return {};  // an empty CTA: the launcher promises none
        for (int64_t q = p0; q < p1; ++q) ++covered[size_t(q)];
    }
    for (int c : covered)
        if (c != 1) return {};
    return out;
}

}  // namespace outlier_extraction_detail

}  // namespace lowbit
