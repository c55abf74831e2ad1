// hadamard_mxfp4_launch.cuh — the launch logic of the fused block-32 Hadamard + MXFP4 pass, a template over
// the statistics epilogues (mx_kernels.cuh's policy contract): hadamard_mxfp4.cu instantiates it without
// statistics, adahop/cuda/hadamard_mxfp4_stats.cu with AdaHOP's. Internal to lowbit_cuda: only .cu files
// include it.
//
// Kernels (mx_kernels.cuh, with Hadamard32Prologue):
//   axis 1 → mx_rows_kernel: a lane owns a 32-element block (four 16-byte loads), all 5 butterfly stages in
//            registers, one 16-byte code store per lane and one 32-byte scale store per warp; no shuffles.
//   axis 0 → mx_cols_e2m1_tma_kernel on sm_90 (cols % 8 == 0), else mx_cols_kernel: a lane owns 1 column ×
//            32 rows, all 5 stages in registers read from the warp's rows staged in shared memory (by one TMA
//            tensor copy per CTA tile, or by the lanes' cp.async copies); the CTA's codes and scales are
//            staged in shared memory and written as whole column runs (one TMA tensor store for the codes).
//   both   → with statistics or stochastic rounding, on sm_90, the TMA column kernel's both-orientations
//            variant (one read of the input: each warp also quantizes the 32 rows of its tile along the
//            rows); otherwise (and on other devices) the two passes above.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"
#include "hadamard/cuda/hadamard_device.cuh"
#include "hadamard/cuda/hadamard_mxfp4.cuh"
#include "hadamard/hadamard.h"

namespace lowbit::cuda_detail {

// The argument checks of hadamard_mxfp4_cuda (orientations, shape, alignment of x, codes and scales, launch
// size), shared with its statistics variant; op names the caller in the messages.
void check_hadamard_mxfp4_args(const char* op, const __nv_bfloat16* x, int64_t rows, int64_t cols, const Mxfp4DeviceCodes& along_rows,
                               const Mxfp4DeviceCodes& along_cols);

// The statistics epilogues of one request and where they write: along rows, down columns, and along rows in
// the both-orientations kernel (there a run-time choice: RowsEpilogue::active).
template <class RowsEpilogue = NoBlockStats, class ColsEpilogue = NoBlockStats, class BothRowsEpilogue = NoBlockStats>
struct Mxfp4Epilogues {
    using Rows = RowsEpilogue;
    using Cols = ColsEpilogue;
    using BothRows = BothRowsEpilogue;
    typename Rows::Out rows{};
    typename Cols::Out cols{};
    typename BothRows::Out both_rows{};
};

template <Rounding kRoundT, class Epilogues>
void launch_hadamard_mxfp4(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                           const Mxfp4DeviceCodes& along_rows, const Mxfp4DeviceCodes& along_cols, const Epilogues& stats,
                           cudaStream_t stream) {
    using Prologue = Hadamard32Prologue;
    using Rows = typename Epilogues::Rows;
    using Cols = typename Epilogues::Cols;
    using BothRows = typename Epilogues::BothRows;
    constexpr MxElement E = MxElement::e2m1;
    const float hs = hadamard_inv_sqrt(32);
    const MxScaleRuleBits rb = mx_scale_rule_bits(mx_spec(E), opt.rule);
    // Both orientations without statistics and with deterministic rounding: two single passes, which the
    // H200 runs faster than the one-read kernel (8192² BF16, bench_kernels at e803c75: 51.6 + 60.4 µs against
    // 139.9 µs; at 23d6f02 113-114 µs against 119-123 µs): that kernel's row work per warp costs more than the
    // second read of the input saves. With stochastic rounding (284 µs against 144 + 157) or statistics
    // (training's path) the one-read kernel stays.
    constexpr bool kTwoPasses = kRoundT != Rounding::stochastic && !Rows::kEnabled && !Cols::kEnabled && !BothRows::kEnabled;
    if (along_rows.requested() && along_cols.requested() && !kTwoPasses) {
        const RowsTmaOut<BothRows> rows_out{along_rows.codes, along_rows.scales, stats.both_rows};
        if (launch_mx_cols_e2m1_tma<Prologue, kRoundT, Cols, true, BothRows>(x, rows, cols, opt.rule, rb, hs, opt.seed, along_cols.codes,
                                                                           along_cols.scales, stats.cols, ColsGrid(rows, cols, kColsTileCols),
                                                                           stream, rows_out)) {
            CUDA_CHECK(cudaGetLastError());
            return;
        }
        launch_hadamard_mxfp4<kRoundT>(x, rows, cols, opt, along_rows, Mxfp4DeviceCodes{}, stats, stream);
        launch_hadamard_mxfp4<kRoundT>(x, rows, cols, opt, Mxfp4DeviceCodes{}, along_cols, stats, stream);
        return;
    }
    if (along_rows.requested() && along_cols.requested()) {
        launch_hadamard_mxfp4<kRoundT>(x, rows, cols, opt, along_rows, Mxfp4DeviceCodes{}, stats, stream);
        launch_hadamard_mxfp4<kRoundT>(x, rows, cols, opt, Mxfp4DeviceCodes{}, along_cols, stats, stream);
        return;
    }
    if (along_rows.requested()) {
        const int64_t n = rows * cols;
        mx_rows_kernel<__nv_bfloat16, true, Prologue, kRoundT, Rows><<<mx_rows_grid(n / kMxBlock), kRowsThreads, 0, stream>>>(
            x, n, E, opt.rule, rb, opt.rounding, hs, opt.seed, along_rows.codes, along_rows.scales, stats.rows);
    } else {
        const ColsGrid grid(rows, cols, kColsTileCols);
        if (launch_mx_cols_e2m1_tma<Prologue, kRoundT, Cols>(x, rows, cols, opt.rule, rb, hs, opt.seed, along_cols.codes, along_cols.scales,
                                                             stats.cols, grid, stream)) {
            CUDA_CHECK(cudaGetLastError());
            return;
        }
        const unsigned ctas = grid.cols_kernel_blocks(mx_min_ctas_per_sm(true, true, kRoundT), kRoundT, Cols::kEnabled);
        mx_cols_kernel<__nv_bfloat16, true, Prologue, kRoundT, Cols><<<ctas, kColsThreads, 0, stream>>>(
            x, rows, cols, grid.col_tiles, E, opt.rule, rb, opt.rounding, hs, opt.seed, along_cols.codes, along_cols.scales, stats.cols);
    }
    CUDA_CHECK(cudaGetLastError());
}

// The same with the rounding mode of opt as a template argument.
template <class Epilogues>
void launch_hadamard_mxfp4(const char* op, const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                           const Mxfp4DeviceCodes& along_rows, const Mxfp4DeviceCodes& along_cols, const Epilogues& stats,
                           cudaStream_t stream) {
    switch (opt.rounding) {
        case Rounding::nearest_even:
            return launch_hadamard_mxfp4<Rounding::nearest_even>(x, rows, cols, opt, along_rows, along_cols, stats, stream);
        case Rounding::half_away:
            return launch_hadamard_mxfp4<Rounding::half_away>(x, rows, cols, opt, along_rows, along_cols, stats, stream);
        case Rounding::stochastic:
            return launch_hadamard_mxfp4<Rounding::stochastic>(x, rows, cols, opt, along_rows, along_cols, stats, stream);
    }
    cuda_usage_error(std::string(op) + ": unknown rounding mode");
}

}  // namespace lowbit::cuda_detail
