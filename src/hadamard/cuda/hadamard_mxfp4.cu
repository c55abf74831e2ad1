// hadamard_mxfp4.cu — fused block-32 Hadamard + MXFP4 quantization of a BF16 matrix (see hadamard_mxfp4.cuh).
//
// Napkin math, 8192×8192 BF16 (67 M elements):
//   one orientation: reads 134 MB, writes 33.5 MB codes + 2.1 MB scales = 170 MB → 40 µs at 4.3 TB/s.
//   both:            reads 134 MB once, writes 2 × 35.6 MB               = 205 MB → 48 µs.
//   Arithmetic per element and orientation: 1 widen + 5 butterfly adds + 1 max + 1 multiply + 9 for the
//   E2M1 code with its sign and packing (e2m1_fast.h) + per-block scale and addressing ≈ 19 instructions. The H200 issues
//   132 SMs × 4 × 1.98 GHz ≈ 1.05 T warp-instructions/s = 33 T thread-instructions/s, so one orientation
//   is ~40 µs of issue: compute and memory floors coincide, and "both" is issue-bound (~2× the
//   instructions for 1.2× the bytes). Stochastic rounding adds ~20 integer instructions per element for
//   the counter-based draw (issue-bound, ~2× slower).
//
// Kernels:
//   axis 1 → mx_rows_kernel<bf16, e2m1, Hadamard> (mx_kernels.cuh): a lane owns a 32-element block (four
//            16-byte loads), all 5 butterfly stages in registers, one 16-byte code store per lane and one
//            32-byte scale store per warp; no shuffles.
//   axis 0 → mx_cols_kernel<bf16, e2m1, Hadamard>: a lane owns 2 columns × 32 rows, all 5 stages in
//            registers, a 16-byte code store per column block, kb scale bytes per column in one store.
//   both   → hadamard_mxfp4_both_kernel below: the axis-0 work on the loaded registers, and the same tile,
//            staged through shared memory (4 KB per warp), re-read as 8-element row chunks for the axis-1
//            work — one read of the input.
#include "hadamard/cuda/hadamard_mxfp4.cuh"

#include <string>

#include "core/cuda_device.h"
#include "formats/cuda/mx_kernels.cuh"
#include "hadamard/hadamard.h"

namespace lowbit {

using namespace cuda_detail;

namespace {

constexpr int kBothThreads = 128;
constexpr int kBothWarps = kBothThreads / 32;

// A warp owns a 64-column strip and kb consecutive 32-row blocks of it. Per 32×64 tile:
//   axis 0: lane l holds columns cw + 2l, cw + 2l + 1 (one 4-byte load per row, 128 bytes per warp) and
//           does the mx_cols_kernel work on them;
//   axis 1: the raw tile goes to shared memory, row r's word w (columns cw + 2w, +1) at word
//           w ^ 4·(r % 8): the 4-byte writes of a row still hit 32 distinct banks, and when lane l then
//           reads row l as eight 16-byte chunks (chunk m at chunk m ^ (l % 8)), each quarter-warp reads 8
//           distinct chunks = 32 distinct banks. Lane l quantizes the two blocks of row r0 + l as
//           mx_rows_kernel does (no shuffles anywhere).
template <Rounding kRoundT>
__global__ void __launch_bounds__(kBothThreads) hadamard_mxfp4_both_kernel(
    const __nv_bfloat16* __restrict__ x, int64_t rows, int64_t cols, int kb, int64_t n_chunks, ScaleRule rule, float hs,
    uint64_t seed, uint8_t* __restrict__ codes_r, uint8_t* __restrict__ scales_r, uint8_t* __restrict__ codes_c,
    uint8_t* __restrict__ scales_c) {
    __shared__ __align__(16) uint32_t tile[kBothWarps][32][32];
    constexpr MxElement E = MxElement::e2m1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t chunk = int64_t(blockIdx.x) % n_chunks;
    const int64_t ctile = int64_t(blockIdx.x) / n_chunks;
    const int64_t cw = (ctile * kBothWarps + warp) * 64;
    if (cw >= cols) return;  // whole warp
    const int64_t c0 = cw + 2 * lane;
    const bool col_ok = c0 < cols;            // cols % 32 == 0, so c0 + 1 < cols as well
    const bool hi_block_ok = cw + 32 < cols;  // axis 1: the strip's second block exists
    const int64_t rbs = rows >> 5, cbs = cols >> 5;
    const uint32_t* xw = reinterpret_cast<const uint32_t*>(x);
    const RandomStream rs(seed);
    uint32_t(&my_tile)[32][32] = tile[warp];

    uint64_t sa = 0, sb = 0;
    for (int i = 0; i < kb; ++i) {
        const int64_t r0 = (chunk * kb + i) * 32;
        uint32_t raw[32];
#pragma unroll
        for (int r = 0; r < 32; ++r) raw[r] = col_ok ? __ldg(xw + (((r0 + r) * cols + c0) >> 1)) : 0u;
#pragma unroll
        for (int r = 0; r < 32; ++r) my_tile[r][lane ^ (4 * (r & 7))] = raw[r];

        {  // blocks down the columns
            float a[32], b[32];
#pragma unroll
            for (int r = 0; r < 32; ++r) bf16x2_to_float(raw[r], a[r], b[r]);
            const uint32_t sc = mx_encode_column_pair<true, true, kRoundT>(a, b, col_ok, col_ok, E, rule, kRoundT, hs, rs, r0,
                                                                           c0, rows, cols, codes_c);
            sa |= uint64_t(sc & 0xFFu) << (8 * i);
            sb |= uint64_t(sc >> 8) << (8 * i);
        }
        __syncwarp();

        {  // blocks along the rows: lane l takes row r0 + l, blocks (cw, cw + 32)
            const int64_t row = r0 + lane;
            uint32_t sc[2];
#pragma unroll
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
                fwht_unnormalized<32>(v);
                float am = 0.0f;
#pragma unroll
                for (int j = 0; j < 32; ++j) am = max_nan_abs(am, v[j]);
                const MxBlockScale q = mx_block_scale<true>(am, E, rule, hs);
                sc[beta] = q.scale;
                const int64_t off = row * cols + cw + 32 * beta;
                if (beta == 0 || hi_block_ok)
                    mx_encode_block32<true, true, kRoundT>(v, q, hs, E, kRoundT, rs, uint64_t(off), 1, off, codes_r);
            }
            const int64_t si = row * cbs + (cw >> 5);
            if (hi_block_ok && (si & 1) == 0) {
                *reinterpret_cast<uint16_t*>(scales_r + si) = uint16_t(sc[0] | (sc[1] << 8));
            } else {
                scales_r[si] = uint8_t(sc[0]);
                if (hi_block_ok) scales_r[si + 1] = uint8_t(sc[1]);
            }
        }
        __syncwarp();  // the next tile overwrites shared memory
    }
    if (col_ok) {
        store_scale_run(scales_c, c0 * rbs + chunk * kb, kb, sa);
        store_scale_run(scales_c, (c0 + 1) * rbs + chunk * kb, kb, sb);
    }
}

template <Rounding kRoundT>
void launch_hadamard_mxfp4(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                           const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream) {
    constexpr MxElement E = MxElement::e2m1;
    const float hs = hadamard_inv_sqrt(32);
    if (along_rows.requested() && along_cols.requested()) {
        const int kb = cols_blocks_per_thread(rows / 32);
        const int64_t n_chunks = rows / 32 / kb;
        const int64_t tiles = (cols + 64 * kBothWarps - 1) / (64 * kBothWarps);
        hadamard_mxfp4_both_kernel<kRoundT><<<unsigned(n_chunks * tiles), kBothThreads, 0, stream>>>(
            x, rows, cols, kb, n_chunks, opt.rule, hs, opt.seed, along_rows.codes, along_rows.scales, along_cols.codes,
            along_cols.scales);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    if (along_rows.requested()) {
        const int64_t n = rows * cols;
        const int64_t warps = (n / 32 + kRowsItems * 32 - 1) / (kRowsItems * 32);
        const int64_t blocks = (warps * 32 + kRowsThreads - 1) / kRowsThreads;
        mx_rows_kernel<__nv_bfloat16, true, true, kRoundT><<<unsigned(blocks), kRowsThreads, 0, stream>>>(
            x, n, E, opt.rule, opt.rounding, hs, opt.seed, along_rows.codes, along_rows.scales);
    } else {
        const int kb = cols_blocks_per_thread(rows / 32);
        const int64_t n_chunks = rows / 32 / kb;
        const int64_t tiles = (cols + 2 * kColsThreads - 1) / (2 * kColsThreads);
        mx_cols_kernel<__nv_bfloat16, true, true, kRoundT><<<unsigned(n_chunks * tiles), kColsThreads, 0, stream>>>(
            x, rows, cols, kb, n_chunks, cols % 2 == 0, E, opt.rule, opt.rounding, hs, opt.seed, along_cols.codes,
            along_cols.scales);
    }
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

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
        }
    if ((rows / 32 + 1) * (cols / 64 + 1) > 0x7FFFFFFFll) cuda_input_error(std::string(op) + ": matrix too large for one launch");
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
