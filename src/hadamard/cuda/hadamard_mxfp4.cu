// hadamard_mxfp4.cu — fused block-32 Hadamard + MXFP4 quantization of a BF16 matrix (see hadamard_mxfp4.cuh).
//
// Napkin math, 8192×8192 BF16 (67 M elements):
//   one orientation: reads 134 MB, writes 33.5 MB codes + 2.1 MB scales = 170 MB → 40 µs at 4.3 TB/s.
//   both:            reads 134 MB once, writes 2 × 35.6 MB               = 205 MB → 48 µs.
//   Arithmetic per element and orientation: 1 widen + 5 butterfly adds + 1 max (along rows 0.75: the
//   maximum from the last stage, fwht32_and_amax) + 1 multiply + 6 for the E2M1 magnitude (e2m1_fast.h) + 2
//   for sign and packing + ~1 per-block share ≈ 17 instructions (SASS of the row kernel). ncu at the boost
//   clock, along rows, before the maximum moved to the last stage: issue 76 % busy, the integer (ALU) pipe
//   67 %, DRAM 68 % (bench/results/gpu_mx_lab_h200.txt, session 14).
//   The H200 issues 132 SMs × 4 × 1.98 GHz ≈ 1.05 T warp-instructions/s = 33 T thread-instructions/s,
//   so one orientation is ~35 µs of issue: compute and memory floors nearly coincide, and "both" is
//   issue-bound (~2× the instructions for 1.2× the bytes). Stochastic rounding adds ~20 integer instructions per element for
//   the counter-based draw (issue-bound, ~2× slower).
//
// Kernels:
//   axis 1 → mx_rows_kernel<bf16, e2m1, Hadamard> (mx_kernels.cuh): a lane owns a 32-element block (four
//            16-byte loads), all 5 butterfly stages in registers, one 16-byte code store per lane and one
//            32-byte scale store per warp; no shuffles.
//   axis 0 → mx_cols_e2m1_tma_kernel<Hadamard> on sm_90 (cols % 8 == 0), else mx_cols_kernel<bf16, e2m1,
//            Hadamard>: a lane owns 1 column × 32 rows, all 5 stages in registers read from the warp's rows
//            staged in shared memory (by one TMA tensor copy per CTA tile, or by the lanes' cp.async
//            copies); the CTA's codes and scales are staged in shared memory and written as whole column
//            runs (one TMA tensor store for the codes; mx_kernels.cuh).
//   both   → on sm_90 the TMA column kernel's both-orientations variant (one read of the input: each warp
//            also quantizes the 32 rows of its tile along the rows); elsewhere the two passes above. H200,
//            8192²: 118.5–118.8 µs against 118.0–119.3 for the earlier one-pass kernel (a warp tile of 32 × 64
//            staged by the lanes' loads); the two single passes, each timed alone, add up to 113 µs (52 + 61).
//            All are issue-bound on the sum of both orientations' arithmetic (ncu: 83.1 M warp instructions =
//            35.9 M along rows + 44.6 M down columns + the loads; issue 73 % busy), so one read of the input
//            saves no time; stochastic rounding: 292 µs against 306 (bench/results/gpu_mx_lab_h200.txt,
//            session 15).
#include "hadamard/cuda/hadamard_mxfp4.cuh"

#include <string>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"
#include "hadamard/hadamard.h"

namespace lowbit {

using namespace cuda_detail;

namespace {

// Which statistics an output asks for (not both: checked by the caller), and where they go.
BlockStats stats_kind(const Mxfp4DeviceOutput& o) {
    return o.block_sumsq != nullptr ? BlockStats::sumsq : o.detector_partials != nullptr ? BlockStats::detector : BlockStats::none;
}
template <BlockStats kStats>
bool with_stats(const Mxfp4DeviceOutput& o) {
    return stats_kind(o) == kStats;
}
BlockStatsOut stats_out(const Mxfp4DeviceOutput& o) { return {o.block_sumsq, o.detector_partials}; }
static_assert(kColsWarps == kBlockStatsStripe, "a stripe of row blocks is one CTA of the column kernels");

template <Rounding kRoundT>
void launch_hadamard_mxfp4(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                           const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream) {
    constexpr MxElement E = MxElement::e2m1;
    const float hs = hadamard_inv_sqrt(32);
    const MxScaleRuleBits rb = mx_scale_rule_bits(mx_spec(E), opt.rule);
    if (along_rows.requested() && along_cols.requested()) {
        const RowsTmaOut rows_out{along_rows.codes, along_rows.scales, stats_out(along_rows)};
        auto tma = with_stats<BlockStats::none>(along_cols)    ? launch_mx_cols_e2m1_tma<true, kRoundT, BlockStats::none, true>
                   : with_stats<BlockStats::sumsq>(along_cols) ? launch_mx_cols_e2m1_tma<true, kRoundT, BlockStats::sumsq, true>
                                                               : launch_mx_cols_e2m1_tma<true, kRoundT, BlockStats::detector, true>;
        if (tma(x, rows, cols, opt.rule, rb, hs, opt.seed, along_cols.codes, along_cols.scales, stats_out(along_cols),
                ColsGrid(rows, cols, kColsTileCols), stream, rows_out)) {
            CUDA_CHECK(cudaGetLastError());
            return;
        }
        launch_hadamard_mxfp4<kRoundT>(x, rows, cols, opt, along_rows, Mxfp4DeviceOutput{}, stream);
        launch_hadamard_mxfp4<kRoundT>(x, rows, cols, opt, Mxfp4DeviceOutput{}, along_cols, stream);
        return;
    }
    if (along_rows.requested()) {
        const int64_t n = rows * cols;
        auto kernel = with_stats<BlockStats::none>(along_rows) ? mx_rows_kernel<__nv_bfloat16, true, true, kRoundT, BlockStats::none>
                      : with_stats<BlockStats::sumsq>(along_rows) ? mx_rows_kernel<__nv_bfloat16, true, true, kRoundT, BlockStats::sumsq>
                                                                  : mx_rows_kernel<__nv_bfloat16, true, true, kRoundT, BlockStats::detector>;
        kernel<<<mx_rows_grid(n / kMxBlock), kRowsThreads, 0, stream>>>(x, n, E, opt.rule, rb, opt.rounding, hs, opt.seed, along_rows.codes,
                                                                         along_rows.scales, stats_out(along_rows));
    } else {
        const ColsGrid grid(rows, cols, kColsTileCols);
        auto kernel = with_stats<BlockStats::none>(along_cols) ? mx_cols_kernel<__nv_bfloat16, true, true, kRoundT, BlockStats::none>
                      : with_stats<BlockStats::sumsq>(along_cols) ? mx_cols_kernel<__nv_bfloat16, true, true, kRoundT, BlockStats::sumsq>
                                                                  : mx_cols_kernel<__nv_bfloat16, true, true, kRoundT, BlockStats::detector>;
        const unsigned ctas = grid.cols_kernel_blocks(mx_min_ctas_per_sm(true, true, kRoundT), kRoundT, stats_kind(along_cols));
        auto tma = with_stats<BlockStats::none>(along_cols)    ? launch_mx_cols_e2m1_tma<true, kRoundT, BlockStats::none>
                   : with_stats<BlockStats::sumsq>(along_cols) ? launch_mx_cols_e2m1_tma<true, kRoundT, BlockStats::sumsq>
                                                               : launch_mx_cols_e2m1_tma<true, kRoundT, BlockStats::detector>;
        if (tma(x, rows, cols, opt.rule, rb, hs, opt.seed, along_cols.codes, along_cols.scales, stats_out(along_cols), grid, stream, {})) {
            CUDA_CHECK(cudaGetLastError());
            return;
        }
        kernel<<<ctas, kColsThreads, 0, stream>>>(x, rows, cols, grid.col_tiles, E, opt.rule, rb, opt.rounding, hs, opt.seed,
                                                  along_cols.codes, along_cols.scales, stats_out(along_cols));
    }
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t block_stats_groups(int64_t rows, int64_t cols, int axis) {
    return axis == 1 ? cols / 32 : (rows / 32 + kBlockStatsStripe - 1) / kBlockStatsStripe;
}
int64_t block_stats_count(int64_t rows, int64_t cols, int axis) { return (axis == 1 ? rows : cols) * block_stats_groups(rows, cols, axis); }

void hadamard_mxfp4_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                         const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream) {
    const char* op = "hadamard_mxfp4_cuda";
    if (!along_rows.requested() && !along_cols.requested())
        cuda_usage_error(std::string(op) + ": request at least one orientation (along_rows or along_cols)");
    if (rows <= 0 || cols <= 0) cuda_input_error(std::string(op) + ": empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    if (along_rows.requested()) check_block_divisible(cols, 32, "columns", "hadamard+mxfp4 along rows");
    if (along_cols.requested()) check_block_divisible(rows, 32, "rows", "hadamard+mxfp4 along columns");
    cuda_check_aligned(x, 16, "input", op);
    for (const Mxfp4DeviceOutput* o : {&along_rows, &along_cols})
        if (o->requested()) {
            cuda_check_aligned(o->codes, 16, "codes", op);
            cuda_check_aligned(o->scales, 16, "scales", op);
            if (o->block_sumsq != nullptr) cuda_check_aligned(o->block_sumsq, 4, "block_sumsq", op);
            if (o->detector_partials != nullptr) {
                if (o->block_sumsq != nullptr)
                    cuda_usage_error(std::string(op) + ": block_sumsq and detector_partials are written by separate passes, not one");
                cuda_check_aligned(o->detector_partials, 8, "detector_partials", op);
            }
        }
    if ((rows / 32 / kColsWarps + 1) * (cols / kColsTileCols + 1) > 0x7FFFFFFFll) cuda_input_error(std::string(op) + ": matrix too large for one launch");
    switch (opt.rounding) {
        case Rounding::nearest_even:
            return launch_hadamard_mxfp4<Rounding::nearest_even>(x, rows, cols, opt, along_rows, along_cols, stream);
        case Rounding::half_away:
            return launch_hadamard_mxfp4<Rounding::half_away>(x, rows, cols, opt, along_rows, along_cols, stream);
        case Rounding::stochastic:
            return launch_hadamard_mxfp4<Rounding::stochastic>(x, rows, cols, opt, along_rows, along_cols, stream);
    }
    cuda_usage_error(std::string(op) + ": unknown rounding mode");
}

}  // namespace lowbit
