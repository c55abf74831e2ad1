// hadamard_mxfp4_stats.cu — the fused Hadamard + MXFP4 pass with AdaHOP's statistics (see
// hadamard_mxfp4_stats.cuh): the statistics epilogues of the quantize kernels (mx_kernels.cuh's policy
// contract) and the launches of hadamard_mxfp4_launch.cuh with them.
//
// Cost: Σx² is 32 FMAs per block (1 per element, the integer pipe of the E2M1 encoding stays the bound);
// the stores add 4 bytes (Σx²) or 8 bytes (pairs) per group: along rows 1/8 (1/4) of the scale bytes, down
// columns 1/64 (1/32) — the stripes of 8 row blocks.
#include "adahop/cuda/hadamard_mxfp4_stats.cuh"

#include <string>
#include <type_traits>

#include "core/cuda_device.h"
#include "hadamard/cuda/hadamard_mxfp4_launch.cuh"

namespace lowbit {

namespace cuda_detail {

static_assert(kColsWarps == kBlockStatsStripe, "a stripe of row blocks is one CTA of the column kernels");

// Where the statistics go (the unused one null); each epilogue writes one of them.
struct BlockStatsOut {
    float* block_sumsq = nullptr;  // Σx² (BlockSumSquares)
    float2* detector = nullptr;    // (Σx, Σx²) (DetectorPartials)
};

// Σx² of a block's input values in FP32, fused multiply-adds in element order, before the transform.
__device__ __forceinline__ float block_sum_squares32(const float (&v)[32]) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) s = __fmaf_rn(v[j], v[j], s);
    return s;
}

// The scores of outlier extraction: Σx² per group.
struct BlockSumSquares {
    static constexpr bool kEnabled = true;
    static constexpr bool kNeedsSum = false;
    using Out = BlockStatsOut;
    __device__ __forceinline__ static bool active(const Out&) { return true; }
    __device__ __forceinline__ static float partial(const float (&x)[32]) { return block_sum_squares32(x); }
    template <typename Index>
    __device__ __forceinline__ static void store(const Out& out, Index i, float, float q) {
        out.block_sumsq[i] = q;
    }
};

// The detector's partials: (Σx, Σx²) per group, one 8-byte store.
struct DetectorPartials {
    static constexpr bool kEnabled = true;
    static constexpr bool kNeedsSum = true;
    using Out = BlockStatsOut;
    __device__ __forceinline__ static bool active(const Out&) { return true; }
    __device__ __forceinline__ static float partial(const float (&x)[32]) { return block_sum_squares32(x); }
    template <typename Index>
    __device__ __forceinline__ static void store(const Out& out, Index i, float s, float q) {
        out.detector[i] = make_float2(s, q);
    }
};

// Either of them or none, chosen at run time by the pointers: the along-rows side of the both-orientations
// kernel, whose three instantiations (one per column epilogue) would otherwise be nine.
struct EitherBlockStats {
    static constexpr bool kEnabled = true;
    static constexpr bool kNeedsSum = true;
    using Out = BlockStatsOut;
    __device__ __forceinline__ static bool active(const Out& out) { return out.block_sumsq != nullptr || out.detector != nullptr; }
    __device__ __forceinline__ static float partial(const float (&x)[32]) { return block_sum_squares32(x); }
    template <typename Index>
    __device__ __forceinline__ static void store(const Out& out, Index i, float s, float q) {
        if (out.block_sumsq != nullptr) BlockSumSquares::store(out, i, s, q);
        else DetectorPartials::store(out, i, s, q);
    }
};

namespace {

enum class StatsKind { none, sumsq, detector };

StatsKind stats_kind(const Mxfp4DeviceOutput& o) {
    return o.block_sumsq != nullptr ? StatsKind::sumsq : o.detector_partials != nullptr ? StatsKind::detector : StatsKind::none;
}
BlockStatsOut stats_out(const Mxfp4DeviceOutput& o) { return {o.block_sumsq, o.detector_partials}; }

template <class Epilogue>
typename Epilogue::Out epilogue_out(const Mxfp4DeviceOutput& o) {
    if constexpr (std::is_same_v<Epilogue, NoBlockStats>) return {};
    else return stats_out(o);
}

template <class RowsEpilogue, class ColsEpilogue>
void launch_with(const char* op, const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                 const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream) {
    const Mxfp4Epilogues<RowsEpilogue, ColsEpilogue, EitherBlockStats> stats{epilogue_out<RowsEpilogue>(along_rows),
                                                                             epilogue_out<ColsEpilogue>(along_cols), stats_out(along_rows)};
    launch_hadamard_mxfp4(op, x, rows, cols, opt, along_rows, along_cols, stats, stream);
}

template <class RowsEpilogue>
void launch_cols_kind(const char* op, const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                      const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream) {
    switch (stats_kind(along_cols)) {
        case StatsKind::none: return launch_with<RowsEpilogue, NoBlockStats>(op, x, rows, cols, opt, along_rows, along_cols, stream);
        case StatsKind::sumsq: return launch_with<RowsEpilogue, BlockSumSquares>(op, x, rows, cols, opt, along_rows, along_cols, stream);
        case StatsKind::detector: return launch_with<RowsEpilogue, DetectorPartials>(op, x, rows, cols, opt, along_rows, along_cols, stream);
    }
}

}  // namespace
}  // namespace cuda_detail

int64_t block_stats_groups(int64_t rows, int64_t cols, int axis) {
    return axis == 1 ? cols / 32 : (rows / 32 + kBlockStatsStripe - 1) / kBlockStatsStripe;
}
int64_t block_stats_count(int64_t rows, int64_t cols, int axis) { return (axis == 1 ? rows : cols) * block_stats_groups(rows, cols, axis); }

void hadamard_mxfp4_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                         const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream) {
    using namespace cuda_detail;
    const char* op = "hadamard_mxfp4_cuda";
    check_hadamard_mxfp4_args(op, x, rows, cols, along_rows, along_cols);
    for (const Mxfp4DeviceOutput* o : {&along_rows, &along_cols})
        if (o->requested()) {
            if (o->block_sumsq != nullptr) cuda_check_aligned(o->block_sumsq, 4, "block_sumsq", op);
            if (o->detector_partials != nullptr) {
                if (o->block_sumsq != nullptr)
                    cuda_usage_error(std::string(op) + ": block_sumsq and detector_partials are written by separate passes, not one");
                cuda_check_aligned(o->detector_partials, 8, "detector_partials", op);
            }
        }
    const StatsKind rows_kind = along_rows.requested() ? stats_kind(along_rows) : StatsKind::none;
    const StatsKind cols_kind = along_cols.requested() ? stats_kind(along_cols) : StatsKind::none;
    if (rows_kind == StatsKind::none && cols_kind == StatsKind::none)  // the plain pass
        return hadamard_mxfp4_cuda(x, rows, cols, opt, Mxfp4DeviceCodes(along_rows), Mxfp4DeviceCodes(along_cols), stream);
    switch (rows_kind) {
        case StatsKind::none: return launch_cols_kind<NoBlockStats>(op, x, rows, cols, opt, along_rows, along_cols, stream);
        case StatsKind::sumsq: return launch_cols_kind<BlockSumSquares>(op, x, rows, cols, opt, along_rows, along_cols, stream);
        case StatsKind::detector: return launch_cols_kind<DetectorPartials>(op, x, rows, cols, opt, along_rows, along_cols, stream);
    }
}

}  // namespace lowbit
