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
//   both   → hadamard_mxfp4_both_kernel below: the warp's 32×64 tile staged through shared memory (4 KB per
//            warp), read as columns for the axis-0 work and as 8-element row chunks for the axis-1 work —
//            one read of the input.
#include "hadamard/cuda/hadamard_mxfp4.cuh"

#include <string>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"
#include "hadamard/hadamard.h"

namespace lowbit {

using namespace cuda_detail;

namespace {

// A CTA owns a tile of 64 columns × kColsWarps row blocks (column tiles fastest, as mx_cols_kernel), warp w
// the 32×64 warp tile of row block stripe·kColsWarps + w:
//   load:   the warp reads its 32 rows × 128 bytes as 16-byte chunks (4 rows per warp instruction) into
//           shared memory, row r's chunk k at chunk k ^ (r % 8) (word w at word w ^ 4·(r % 8));
//   axis 0: lane l takes column cw + 2l, then cw + 2l + 1, reading its 32 values back (lane l reads word
//           l ^ 4·(r % 8) of row r: 32 distinct banks) and does the mx_cols_kernel work, staging codes
//           and scales for whole-column-run stores (one column at a time keeps ~60 registers);
//   axis 1: lane l reads row l as eight 16-byte chunks (chunk m at chunk m ^ (l % 8); each quarter-warp
//           reads 8 distinct chunks = 32 distinct banks) and quantizes the row's two blocks as
//           mx_rows_kernel does, storing them directly (32 bytes = one sector). No shuffles anywhere.
constexpr int kBothTileCols = 64;
#ifndef LOWBIT_MX_BOTH_MIN_BLOCKS  // kernel-lab override (dev/kernel_lab/bench_variants.sh)
// 3 CTAs per SM caps the kernel at 85 registers (8 bytes of spills) instead of 102 (2 CTAs).
#define LOWBIT_MX_BOTH_MIN_BLOCKS 3
#endif

template <Rounding kRoundT>
__global__ void __launch_bounds__(kColsThreads, LOWBIT_MX_BOTH_MIN_BLOCKS) hadamard_mxfp4_both_kernel(
    const __nv_bfloat16* __restrict__ x, int64_t rows, int64_t cols, int64_t col_tiles, ScaleRule rule, MxScaleRuleBits rb, float hs,
    uint64_t seed, uint8_t* __restrict__ codes_r, uint8_t* __restrict__ scales_r, BlockStatsOut stats_r, uint8_t* __restrict__ codes_c,
    uint8_t* __restrict__ scales_c, BlockStatsOut stats_c) {
    __shared__ __align__(16) uint32_t tile[kColsWarps][32][32];
    __shared__ ColsTileStage<true, kBothTileCols> stage;
    __shared__ float2 stage_stats[kColsWarps][kBothTileCols];  // (Σx, Σx²) per warp and column, for the stripe's groups
    const bool col_stats = stats_c.block_sumsq != nullptr || stats_c.detector != nullptr;
    const bool row_stats = stats_r.block_sumsq != nullptr || stats_r.detector != nullptr;
    constexpr MxElement E = MxElement::e2m1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned ctile = blockIdx.x % unsigned(col_tiles), stripe = blockIdx.x / unsigned(col_tiles);
    int64_t rb_first;
    const int nrb = cols_tile_row_blocks(rows, stripe, rb_first);
    const int64_t cbs = cols >> 5;
    const int64_t cw = ctile * kBothTileCols;
    const int64_t c0 = cw + 2 * lane;
    const bool col_ok = c0 < cols;            // cols % 32 == 0, so c0 + 1 < cols as well
    const bool hi_block_ok = cw + 32 < cols;  // axis 1: the strip's second block exists
    if (warp < nrb) {
        const int64_t r0 = (rb_first + warp) * 32;
        const RandomStream rs(seed);
        uint32_t(&my_tile)[32][32] = tile[warp];
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // 32 rows × 8 chunks of 16 bytes; chunk q = 32i + lane: row q / 8, chunk q % 8
            const int q = 32 * i + lane, r = q >> 3, k = q & 7;
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (cw + 8 * k < cols) u = __ldg(reinterpret_cast<const uint4*>(x + (r0 + r) * cols + cw) + k);
            reinterpret_cast<uint4*>(&my_tile[r][0])[k ^ (r & 7)] = u;
        }
        __syncwarp();

        if (col_ok) {  // blocks down the columns: c0, then c0 + 1
#pragma unroll 1
            for (int half = 0; half < 2; ++half) {
                float a[32];
#pragma unroll
                for (int r = 0; r < 32; ++r) {
                    const uint32_t w = my_tile[r][lane ^ (4 * (r & 7))];
                    a[r] = __uint_as_float(half ? (w & 0xFFFF0000u) : (w << 16));
                }
                const float sumsq = col_stats ? block_sum_squares32(a) : 0.0f;
                const float dc = mx_encode_column<true, true, kRoundT>(a, rb, E, rule, kRoundT, hs, rs, r0, c0 + half, cols, stage,
                                                                       2 * lane + half, warp);
                if (col_stats) stage_stats[warp][2 * lane + half] = make_float2(dc, sumsq);
            }
        }

        {  // blocks along the rows: lane l takes row r0 + l, blocks (cw, cw + 32)
            const int64_t row = r0 + lane;
            uint32_t sc = 0;  // scale of block 0 | scale of block 1 << 8
#pragma unroll 1
            for (int beta = 0; beta < 2; ++beta) {
                float v[32];
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    const int chunk16 = (4 * beta + m) ^ (lane & 7);
                    const uint4 u = *reinterpret_cast<const uint4*>(&my_tile[lane][4 * chunk16]);
                    bf16x2_to_float(u.x, v[8 * m + 0], v[8 * m + 1]);
                    bf16x2_to_float(u.y, v[8 * m + 2], v[8 * m + 3]);
                    bf16x2_to_float(u.z, v[8 * m + 4], v[8 * m + 5]);
                    bf16x2_to_float(u.w, v[8 * m + 6], v[8 * m + 7]);
                }
                const bool block_ok = beta == 0 || hi_block_ok;
                const float sumsq = row_stats ? block_sum_squares32(v) : 0.0f;
                const float amax = fwht32_and_amax(v);
                if (row_stats && block_ok) store_block_stats_any(stats_r, row * cbs + (cw >> 5) + beta, v[0], sumsq);
                const MxBlockScale q = mx_block_scale<true, true>(amax, rb, E, rule, hs);
                sc |= q.scale << (8 * beta);
                const int64_t off = row * cols + cw + 32 * beta;
                if (block_ok) mx_encode_block32<true, true, kRoundT>(v, q, hs, E, kRoundT, rs, uint64_t(off), 1, off, codes_r);
            }
            const int64_t si = row * cbs + (cw >> 5);
            if (hi_block_ok && (si & 1) == 0) {
                *reinterpret_cast<uint16_t*>(scales_r + si) = uint16_t(sc);
            } else {
                scales_r[si] = uint8_t(sc);
                if (hi_block_ok) scales_r[si + 1] = uint8_t(sc >> 8);
            }
        }
    }
    __syncthreads();
    if (col_stats && threadIdx.x < kBothTileCols && cw + threadIdx.x < cols) {
        const int64_t at = int64_t(stripe) * cols + cw + threadIdx.x;
        if (stats_c.block_sumsq != nullptr) store_stripe_stats<BlockStats::sumsq>(stage_stats, threadIdx.x, nrb, stats_c, at);
        else store_stripe_stats<BlockStats::detector>(stage_stats, threadIdx.x, nrb, stats_c, at);
    }
    write_cols_tile(stage, cw, rb_first, nrb, rows, cols, codes_c, scales_c);
}

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
        const ColsGrid grid(rows, cols, kBothTileCols);
        hadamard_mxfp4_both_kernel<kRoundT><<<grid.blocks(), kColsThreads, 0, stream>>>(
            x, rows, cols, grid.col_tiles, opt.rule, rb, hs, opt.seed, along_rows.codes, along_rows.scales, stats_out(along_rows),
            along_cols.codes, along_cols.scales, stats_out(along_cols));
        CUDA_CHECK(cudaGetLastError());
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
        if (tma(x, rows, cols, opt.rule, rb, hs, opt.seed, along_cols.codes, along_cols.scales, stats_out(along_cols), grid, stream)) {
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
