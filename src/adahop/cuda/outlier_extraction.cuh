// outlier_extraction.cuh — AdaHOP's outlier extraction on the GPU (CPU reference: adahop/outlier_extraction.h):
// rank rows or columns by L2 norm or max |x|, select the top k (ties rank the lower index first; indices
// returned ascending), gather them into a compact slice and zero them in the clean operand; plus the
// scatter of the high-precision sliver product back into C.
// Two launches (outlier_extraction.cu): the one-axis statistics pass of outlier_stats.cuh, then one kernel
// that selects (radix select in every CTA, keys in shared memory) and gathers/zeroes its share.
// Napkin math for 4096×2048 BF16 rows, k = 64 (H200): score pass 16.8 MB → 3.9 µs at 4.3 TB/s; select:
// 4096 keys (32 KB) per CTA, 3–8 histogram passes of 8 bits ≈ 1–2 µs; gather 256 KB + slice 256 KB + zeroing
// 256 KB ≈ 0.2 µs spread over ~16 CTAs; plus ~2 × 2 µs of launch latency. The clean copy (when not in place)
// adds 2 × 16.8 MB (7.8 µs). With k ≥ the dimension nothing is ranked: every row/column is taken.
// The sliver GEMM that follows reads the whole other operand (e.g. W 2048×8192 BF16 = 33.5 MB → 7.8 µs floor):
// only a fused epilogue in the main GEMM could avoid that.
//
// Fused with the quantization pass (extract_outliers_quantized_cuda): the operand is quantized whole by the
// fused Hadamard+MXFP4 kernel, which also writes Σx² of its input per group of 32-blocks (+1 FMA per element
// in a pass that reads the operand anyway; 2 blocks of a row, or a stripe of 8 row blocks of a column:
// hadamard_mxfp4_stats.cuh); a score launch adds each outer vector's group partials (rows: one warp per row;
// columns: lane = column over the [stripe][column] layout; coalesced), and
// the select/gather launch ranks them, gathers the slice and overwrites the
// selected vectors' codes and scales with those of a zero vector. Exact: the extracted dimension (rows of
// A, columns of B) is never the reduction dimension the blocks and the Hadamard run along, so a zeroed
// vector quantizes to zero codes and the zero-amax scale and leaves every other block untouched
// (tests/cuda/test_cuda_outlier_extraction.cu checks this bit for bit against split → quantize). The separate
// statistics pass and the clean copy disappear.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "adahop/cuda/hadamard_mxfp4_stats.cuh"
#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/outlier_extraction.h"
#include "formats/mx_block.h"

namespace lowbit {

struct OutlierExtractionWorkspace {
    OutlierStatsWorkspace stats;
};

// x: rows × cols. by_rows: select rows (slice k × cols) else columns (slice rows × k). clean may equal x
// (in place) or be another rows × cols buffer (x is copied into it first). indices: k int32, ascending.
// k is clamped to the dimension; returns the k used. Scores: Σx² (FP64 sums of FP32 partials) or max |x|
// (NaN ignored); a NaN Σx² ranks first (the CPU reference leaves NaN undefined).
int64_t split_outliers_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            __nv_bfloat16* clean, __nv_bfloat16* slice, int32_t* indices, OutlierExtractionWorkspace& ws,
                            cudaStream_t stream = 0);
int64_t split_outliers_cuda(const float* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            float* clean, float* slice, int32_t* indices, OutlierExtractionWorkspace& ws, cudaStream_t stream = 0);

// Outlier extraction on an operand already quantized by hadamard_mxfp4_cuda along `axis` (1: blocks along
// rows, the extracted vectors are rows; 0: blocks along columns, the extracted vectors are columns) with
// `rule` and quantized.block_sumsq (or the detector pairs, detector_partials: the same Σx² bits) requested:
// ranks the outer vectors by L2 (Σ of their groups' Σx², FP64 in a fixed order per vector; ties → lower
// index), writes the k selected indices (ascending) and their BF16 values into
// slice (rows: k × cols; columns: rows × k), and overwrites their codes and scales in `quantized` with
// those of an all-zero vector — the same bytes as split_outliers_cuda followed by hadamard_mxfp4_cuda of the
// clean operand. Two launches (none to rank when k ≥ the dimension); k is clamped to the dimension; returns the k used. Asynchronous.
// zero_selected = false leaves `quantized` untouched (only its block_sumsq is read): the product rows
// (OE-left) or columns (OE-right) of the selected vectors are then wrong, but scatter_outliers_cuda
// overwrites exactly those with the sliver product, and no other output depends on them (blocks and the
// Hadamard run along the reduction dimension) — so C is the same, and the extraction no longer has to
// finish before the main GEMM starts: it can run on a side stream beside it, with the sliver GEMM.
int64_t extract_outliers_quantized_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, int axis, int64_t k, ScaleRule rule,
                                        const Mxfp4DeviceOutput& quantized, __nv_bfloat16* slice, int32_t* indices,
                                        OutlierExtractionWorkspace& ws, cudaStream_t stream = 0, bool zero_selected = true);

// c (rows_c × cols_c, row-major): by_rows: c[indices[i], :] = src[i, :] (src k × cols_c);
// else c[:, indices[j]] = src[:, j] (src rows_c × k).
void scatter_outliers_cuda(const float* src, int64_t k, const int32_t* indices, bool by_rows, float* c, int64_t rows_c,
                           int64_t cols_c, cudaStream_t stream = 0);
// The same placement straight into a caller's output, so that the main product can be written there first and no
// scratch product has to be stored afterwards (lp_matmul's OE strategies): c_bf16[S] = src rounded to nearest even,
// or c_f32[S] = src + beta · saved (beta ≠ 0; saved holds C's values at S from before the main product, in src's
// layout, as gather_outliers_cuda takes them) or src (beta = 0). Exactly one of c_f32 / c_bf16.
void place_outliers_cuda(const float* src, int64_t k, const int32_t* indices, bool by_rows, const float* saved, float beta,
                         float* c_f32, __nv_bfloat16* c_bf16, int64_t rows_c, int64_t cols_c, cudaStream_t stream = 0);
// dst (src's layout above) = C's values at the selected rows (by_rows) or columns.
void gather_outliers_cuda(const float* c, int64_t k, const int32_t* indices, bool by_rows, int64_t rows_c, int64_t cols_c,
                          float* dst, cudaStream_t stream = 0);

// The selection rule of the GPU kernel, for the host-side tests.
namespace outlier_extraction_detail {

constexpr int kSelectThreads = 1024;                  // one CTA: 32 warps
constexpr int kSelectWarps = kSelectThreads / 32;
static_assert(kSelectWarps == 32, "the select kernel reduces its per-warp values with one warp (lane w = warp w)");
constexpr int kListCap = 16384;                       // selected indices per CTA at most (64 KB of shared memory)

// Radix select of the k-th largest 64-bit key, 8 bits at a time from the first byte in which the keys differ
// (first_differing_byte): after the passes, the keys
// whose masked bits exceed `prefix` are taken, and of those equal to it the first `take_eq` in index order.
struct RadixSelection {
    uint64_t mask = 0, prefix = 0;
    uint32_t take_eq = 0;
};
// The highest byte (7 = the top one) in which the keys differ, given the OR ^ AND of all of them; −1 when
// they are all equal. The passes start there: the bytes above it are the same in every key.
__host__ __device__ inline int first_differing_byte(uint64_t diff) {
    for (int b = 7; b >= 0; --b)
        if ((diff >> (8 * b)) & 0xFFu) return b;
    return -1;
}
// The radix passes' starting mask and prefix from the OR and AND of all keys: the leading bytes every key
// shares are fixed (every bit, when all keys are equal). Returns the first byte to pass over, −1 for none.
__host__ __device__ inline int radix_start(uint64_t k_or, uint64_t k_and, uint64_t& mask, uint64_t& prefix) {
    const int first = first_differing_byte(k_or ^ k_and);
    mask = first < 0 ? ~uint64_t(0) : (first == 7 ? 0 : ~uint64_t(0) << (8 * first + 8));
    prefix = k_and & mask;
    return first;
}
// 1: taken; 0: in the tie class (taken while its rank among equals is < take_eq); -1: not taken.
__host__ __device__ inline int selection_class(uint64_t key, uint64_t mask, uint64_t prefix) {
    const uint64_t m = key & mask;
    return m > prefix ? 1 : (m == prefix ? 0 : -1);
}

// Of the 256 bins counted from the top, the bin b holding the krem-th key: Σ_{d>b} hist[d] < krem ≤
// Σ_{d≥b} hist[d]. Returns b and writes the count above it. The host twin of the warp code.
int find_bin_host(const uint32_t* hist, uint32_t krem, uint32_t* above);

// The whole rule on the host (the passes, the per-warp ranges and bases of the ordered compaction, the
// per-CTA position ranges), as the kernel runs it: the k selected indices, ascending.
std::vector<int32_t> radix_top_k_host(const std::vector<uint64_t>& keys, int64_t k, int64_t chunk);

// The key of a score: the bits of a non-negative double order like its value.
inline uint64_t score_key(double s) {
    uint64_t u;
    std::memcpy(&u, &s, sizeof u);
    return u;
}

}  // namespace outlier_extraction_detail

}  // namespace lowbit
