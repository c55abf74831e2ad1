// hadamard_mxfp4.cu — fused block-32 Hadamard + MXFP4 quantization of a BF16 matrix (see hadamard_mxfp4.cuh);
// the kernels and their launch: hadamard_mxfp4_launch.cuh.
//
// Napkin math, 8192×8192 BF16 (67 M elements):
//   one orientation: reads 134 MB, writes 33.5 MB codes + 2.1 MB scales = 170 MB → 40 µs at 4.3 TB/s.
//   both:            reads 134 MB once, writes 2 × 35.6 MB               = 205 MB → 48 µs.
//   Arithmetic per element and orientation: 1 widen + 5 butterfly adds + 1 max (along rows 0.75: the
//   maximum from the last stage, fwht32_and_amax) + 1 multiply + 6 for the E2M1 magnitude (e2m1_fast.h) + 2
//   for sign and packing + ~1 per-block share ≈ 17 instructions (SASS of the row kernel). ncu at the boost
//   clock, along rows, with the maximum taken over the outputs: issue 76 % busy, the integer (ALU) pipe 67 %,
//   DRAM 68 % (bench/results/history.jsonl).
//   The H200 issues 132 SMs × 4 × 1.98 GHz ≈ 1.05 T warp-instructions/s = 33 T thread-instructions/s,
//   so one orientation is ~35 µs of issue: compute and memory floors nearly coincide, and "both" is
//   issue-bound (~2× the instructions for 1.2× the bytes). Stochastic rounding adds ~20 integer instructions
//   per element for the counter-based draw (issue-bound, ~2× slower).
//   Both orientations, H200, 8192²: 118.5–118.8 µs from one read; the two single passes, each timed alone,
//   add up to 113 µs (52 + 61). Both are issue-bound on the sum of both orientations' arithmetic (ncu: 83.1 M
//   warp instructions = 35.9 M along rows + 44.6 M down columns + the loads; issue 73 % busy), so one read of
//   the input saves no time; stochastic rounding: 292 µs (bench/results/history.jsonl).
#include "hadamard/cuda/hadamard_mxfp4.cuh"

#include <string>

#include "core/cuda_device.h"
#include "hadamard/cuda/hadamard_mxfp4_launch.cuh"

namespace lowbit {

namespace cuda_detail {

void check_hadamard_mxfp4_args(const char* op, const __nv_bfloat16* x, int64_t rows, int64_t cols, const Mxfp4DeviceCodes& along_rows,
                               const Mxfp4DeviceCodes& along_cols) {
    if (!along_rows.requested() && !along_cols.requested())
        cuda_usage_error(std::string(op) + ": request at least one orientation (along_rows or along_cols)");
    if (rows <= 0 || cols <= 0) cuda_input_error(std::string(op) + ": empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    if (along_rows.requested()) check_block_divisible(cols, 32, "columns", "hadamard+mxfp4 along rows");
    if (along_cols.requested()) check_block_divisible(rows, 32, "rows", "hadamard+mxfp4 along columns");
    cuda_check_aligned(x, 16, "input", op);
    for (const Mxfp4DeviceCodes* o : {&along_rows, &along_cols})
        if (o->requested()) {
            cuda_check_aligned(o->codes, 16, "codes", op);
            cuda_check_aligned(o->scales, 16, "scales", op);
        }
    if ((rows / 32 / kColsWarps + 1) * (cols / kColsTileCols + 1) > 0x7FFFFFFFll) cuda_input_error(std::string(op) + ": matrix too large for one launch");
}

}  // namespace cuda_detail

void hadamard_mxfp4_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                         const Mxfp4DeviceCodes& along_rows, const Mxfp4DeviceCodes& along_cols, cudaStream_t stream) {
    const char* op = "hadamard_mxfp4_cuda";
    cuda_detail::check_hadamard_mxfp4_args(op, x, rows, cols, along_rows, along_cols);
    cuda_detail::launch_hadamard_mxfp4(op, x, rows, cols, opt, along_rows, along_cols, cuda_detail::Mxfp4Epilogues<>{}, stream);
}

}  // namespace lowbit
