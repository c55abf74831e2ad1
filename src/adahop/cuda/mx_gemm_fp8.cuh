// mx_gemm_fp8.cuh — exact MXFP4 / MXFP8 GEMM on Hopper's FP8 tensor cores (sm_90a wgmma, adahop.md §13.4,
// issue 21): C (M × N, row-major, FP32 or BF16) = A · Bᵀ with A [M][K] and B [N][K] MX operands blocked along
// the reduction dimension K, exactly as the quantize kernels write them (formats/cuda/mx_quantize.cuh,
// hadamard/cuda/hadamard_mxfp4.cuh; adahop/lp_matmul.h PreparedOperandOf): element codes (E2M1 packed two per
// byte, low nibble first, or E4M3 one per byte) and one E8M0 scale byte per 32 elements, [rows][K/32].
// Reference: the BF16 emulation (adahop/cuda/lp_matmul_cuda.cu: dequantize, cuBLAS BF16 → FP32), i.e.
// C[m][n] = Σ_k deq(A)[m][k] · deq(B)[n][k] in FP32. Test: tests/cuda/test_cuda_mx_gemm_fp8.cu; benchmark:
// bench/bench_mx_gemm.cu.
//
// Why it is exact (MXFP4). Every E2M1 value {0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6} is exact in E4M3, so a
// 16-entry table, built from the element codecs themselves (encode_e4m3(decode_e2m1(code))), turns codes into
// E4M3 bytes with no rounding. A 32-long dot product of E2M1 × E2M1 values is
// a multiple of 1/4 (0.5 · 0.5) bounded by 32 · 6 · 6 = 1152 < 2^11: every partial sum, in any order, is an
// integer number of quarters below 2^13, so an accumulator that keeps ≥ 13 significant bits holds it
// exactly. Hopper's FP8 wgmma with K = 32 is one MX block; started from zero (scale-d = 0) it returns the
// block's dot product P exactly (its accumulator keeps ~14 significant bits by the DeepSeek-V3 report on H800:
// one bit of margin over the 13 needed). The kernel then
// adds C += (2^(sa−127) · 2^(sb−127)) · P in FP32 for the row's and the column's scale: the factor product is
// a power of two, exact while sa + sb − 254 ∈ [−149, 127], and P · factor is exact while the result is a
// normal FP32 number, so each block's contribution is the reference's exact block sum and the only
// difference to the reference is FP32 summation order: |C − C_ref| ≤ (K + K/32) · 2^−24 · Σ_k |a_k · b_k|
// (the reference adds K products in FP32, this kernel K/32 exact block sums).
// Outside that window — factors below 2^−149 or above 2^127, which the quantizers never produce for finite
// FP32 data whose products are finite — contributions flush to zero or overflow to ±Inf (the reference's
// BF16 operands flush below 2^−133 and its products overflow there too). One corner differs: a block pair
// whose factor product overflows (sa + sb − 254 > 127) but whose dot product is exactly 0 gives 0 · Inf = NaN
// where the reference may give a finite sum — only hand-made operands hit it (the quantizers give an all-zero
// block the scale byte 0, and non-zero blocks that large overflow in the reference as well).
//
// MXFP8 (E4M3 × E4M3). Products carry 8 significant bits over exponents 2^−18 … 2^17, so a block's sum needs
// more bits than the tensor core's FP8 accumulator keeps (~14 significant bits by the DeepSeek-V3 report on
// H800; not measured here): the block partial is not exact. Promoting every block to
// FP32 (as for MXFP4) bounds the damage to one block: |P − P_exact| ≤ 32 · 2^−13 · max_k |a_k b_k| ≤
// 2^−8 · Σ_block |a_k b_k| (worst case; typically far smaller), so |C − C_ref| ≤ (2^−8 + (K + K/32) · 2^−24) ·
// Σ_k |a_k · b_k|. The tests use that bound and report the largest ratio seen.
//
// NaN / Inf. An E8M0 byte 0xFF is NaN in the reference (every value of its block decodes to NaN, so every
// product with it is NaN): the staged factor 2^(s−127) is decode_e8m0(0xFF) = NaN, so factor · P and the
// whole row (A's scale) or column (B's scale) of C becomes NaN — the propagation is the FP32 arithmetic's own,
// no flag. E4M3 codes 0x7F / 0xFF are NaN on the tensor cores and in the reference alike. E2M1 and E4M3 hold no
// Inf.
//
// Scale folding (MXFP4 B). Per 128-column tile of C and MX block, B's values are stored as E2M1 · 2^(s − ref)
// in E4M3, with ref = min(s_min + 8, s_max) over the tile-block's non-zero blocks: exact while s − ref ∈ [−8, 6]
// (0.5 · 2^−8 = 2^−9 is E4M3's smallest subnormal; 6 · 2^6 = 384 ≤ 448), i.e. while those scales span ≤ 14
// binades and none is NaN. The shift is the same for all 32 products of a column's block, so the block partial
// is 2^(s − ref) times the unshifted one and stays exact (a multiple of 2^(s−ref−2) below 2^(s−ref+11)); the
// promotion then multiplies by factor(row) · 2^(ref−127), one FFMA per element instead of an FMUL and an FFMA.
// Tile-blocks outside the window are written unshifted and promoted with per-column factors (the unfolded
// path, exact as above), and counted (mx_gemm_fp8_unfolded_blocks): never silently wrong. The folded product
// equals the unfolded one bit for bit except where factor(row) · 2^(ref−127) leaves FP32's range while
// factor(row) · factor(column) does not (ref ≥ s for every column of a tile-block spanning ≤ 8 binades).
//
// INT8 stages (MxGemmFold::int8_stages). 2 · E2M1 is an integer in {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}, and
// shifted left by d ≤ 3 it still fits int8 (12 · 8 = 96). Per chunk of 2 stages (8 blocks, K = 256) the pack pass
// gives each row of A a base exponent (the smallest scale of its non-zero blocks) and stores 2 · E2M1 ·
// 2^(s − base) when the row's scales in the chunk span ≤ 3 binades; B gets one base per 128-column tile and chunk
// under the same condition over all its columns. A chunk's products are then integers, and eight chained
// wgmma.m64n128k32.s32.s8.s8 sum them exactly in int32 (|sum| ≤ 256 · 96 · 96 < 2^22), so one promotion per
// chunk, C += float(sum) · 2^(base_A − 127) · 2^(base_B − 127) / 4, replaces eight: float(sum) is exact
// (|sum| < 2^22: an integer add of 0x4B400000 and an FADD), the factor a power of two, and the only rounding
// is the FFMA's, as in the FP8 paths. Error bound: FP32 summation order over K/256 exact chunk sums.
// Rows, tiles and chunks outside the window (or with a NaN scale) are stored unshifted with their own block
// exponents, and counted (mx_gemm_fp8_unfolded_blocks). An output tile computes such a chunk of its A row tile or
// B column tile block by block (fresh int32 block sums, per-row × per-column factors: exact as the FP8 path's, but
// 4 FP32 ops per element and block, ~0.25× BF16 where a whole GEMM goes that way) and chains its other chunks;
// the decision is per (output tile, chunk) from one bit per (operand tile, chunk), so one outlying block costs
// its chunk, not its tile's whole K (the first INT8 design decided per tile). K is padded to whole chunks (zero fill).
//
// Two planes (int8_stages, both folds). A line (or B's tile) whose chunk spans 4 ≤ d ≤ 7 binades over its base
// (smallest live scale) keeps every block in the main int8 values as 2 · E2M1 · 2^e, e = s − base − 4h, with
// h = 1 for the blocks 4 … 7 binades up (effective exponent base + 4h: the per-block path reads it as any other
// block), and copies the h = 1 blocks into a high plane (zeros elsewhere). The true chunk value in units of
// 2^base / 2 is main + 15 · high, so with one two-plane operand the chunk is two chained int32 sums, S = Σ main · B
// and H = Σ high · B (each |·| < 2^22), promoted once as (float(S) + 15 · float(H)) · factors: float(S) and
// float(H) are exact, 15 · float(H) + float(S) rounds once (an FFMA), then the promotion's FFMA: two roundings of
// exact chunk sums, inside the FP32-summation-order bound. A tile takes two planes when any of its lines does
// (its other lines' high planes are zeros). The high plane holds only the MX blocks that are 4 … 7 up in some line
// of the tile, compacted to the chunk's first slots (a mask per tile-chunk says which), so H costs as many wgmmas as
// such blocks, against the same blocks of the other operand's main plane. The producer loads a two-plane chunk's
// high plane as two more stages (the high tile, the other operand's main tile again, the bases as staged
// exponents), only for output tiles whose other operand's chunk has one plane; where both have two, the chunk goes
// block by block. On SmolLM2-135M's
// operands (IHT, B per line) a 7-binade window leaves 0.2 % (fwd), 6.9 % (dgrad) and 0.8 % (wgrad) of the (output
// tile, chunk) pairs outside, against 17–74 % for 3 (bench/results/analyze_model_smollm2_cpu_devbox.md; that census
// also chains pairs where both operands need two planes). The CPU rule is adahop/int8_window.h.
// Schedule: runs of chained chunks in steps of 4 chunks (then 2, then 1) with two int32 partials alternating, each chunk's wgmmas issued
// before the previous chunk is promoted; every wgmma group a step opens is waited for inside it (a group left
// running across the loop's back edge makes ptxas serialize all wgmmas, C7514). Measured (bench/results/
// mx_gemm_h200.md): 1.08–1.22× cuBLAS BF16 at 8192³ on in-window data across runs (chunks of 1 stage: 1.05–1.10×;
// B's bases per column instead of per tile: 0.95×, no gain on the training step). Bound of this design: per
// chunk and output element 3 issue slots of promotion against 8 · 32 MACs; the measured 1.1–1.2× is
// 55–60 % of the FP8 datasheet peak.
//
// Design (v3). Persistent CTAs of 3 warpgroups over 128 × 128 output tiles (grouped order, 8 M-tiles per
// group, so CTAs in flight share panels in L2); setmaxnreg moves registers from the producer (56) to the two
// consumers (224). One thread of warp 0 is the producer: per stage (K = 128 = 4 MX blocks) it waits for the
// stage's `empty` barrier and issues five asynchronous copies completing on its `full` barrier — two TMA
// tensor copies (A 128 × 128 bytes, B 128 × 128 bytes, 128-byte swizzle, zero fill past M, N and K) and three
// bulk copies of the stage's scale bytes (A's and B's 128 lines × 4 blocks, 512 B each, rearranged into
// such chunks by a small pass before the kernel; folded B's 4 tile references; with INT8 column bases B's 128
// FP32 chunk factors). It waits on no load per stage (the INT8 stages read one word of chunk bits per 64 chunks
// and tile): v2's producer loaded the scale bytes into registers and converted them, one global-load latency per
// stage on the critical path, which bounded v2 at 0.23× BF16 (a replica of the data path without that,
// dev/kernel_lab/tma_stream_lab.cu, streams the 8192³ tiles in 0.67 ms). Warpgroups 1 and 2 are the
// consumers, 64 rows each: per MX block one wgmma.m64n128k32.f32.e4m3.e4m3 from shared memory (K-major
// descriptors, 128-byte swizzle) into a fresh 64-register partial; two partials alternate, so block b + 1's
// wgmma runs while block b is promoted into the running FP32 accumulator with the factors decoded from the
// stage's scale bytes. Every stage multiplies 4 blocks (past K: zero codes, factor 1), so no branch holds a
// wgmma and ptxas keeps them asynchronous. Stores are masked (M, N need not be multiples of 128), FP32 or
// BF16. K must be a multiple of 32.
// MXFP4 codes are expanded to E4M3 bytes by a pass first (A: mx_expand_e2m1_to_e4m3_cuda; B: the folding
// pass; rows·K/2 bytes read, rows·K written: ~24 µs per 8192 × 8192 operand at 4.2 TB/s, ~3 % of an 8192³
// GEMM at ~700 TFLOP/s), MXFP8 codes are used as they are. Without sm_90a (cuda_tma_usable() false) a plain
// CUDA-core kernel computes the same per-block math.
//
// Napkin math (the bound of this design). Per output element and MX block the tensor core does 32 MACs at
// 4096 FP8 MAC/clk/SM (1/128 clk); the promotion issues one FFMA (folded) or one FMUL + one FFMA (unfolded)
// at 128 lanes/clk/SM (1/128 or 1/64 clk). Unfolded, the issue slots bound it at ~50 % of FP8 peak (~990
// TFLOP/s datasheet); folded, MMA and promotion need the same time, so the bound is the FP8 peak only with
// perfect overlap of two warpgroups, and ~50–70 % with realistic issue contention.
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/mx_block.h"

namespace lowbit {

// One operand of mx_gemm_fp8_cuda, on the device: `rows` × K elements blocked along K (A: rows = M, B: rows = N,
// i.e. B stored as [N][K]). element: e2m1 (codes [rows][K/2], two per byte, low nibble first) or e4m3 (codes
// [rows][K]); scales: E8M0 bytes [rows][K/32]. Code pointers 16-byte aligned.
struct MxGemmOperand {
    const uint8_t* codes = nullptr;
    const uint8_t* scales = nullptr;
    MxElement element = MxElement::e2m1;
};

// Where the E4M3 copies of MXFP4 operands (and the scale chunks the kernel copies per stage) go. Without one,
// each call allocates them and frees them before it returns, which waits for the device; a caller that
// multiplies repeatedly keeps one and reuses it (it grows, never shrinks; growing frees the old buffers, which
// waits for the device).
struct MxGemmScratch {
    DeviceBuffer<uint8_t> a_e4m3, b_e4m3;
    DeviceBuffer<uint8_t> a_scale_chunks, b_scale_chunks;  // the scales rearranged per (128-line tile, stage)
    DeviceBuffer<int32_t> b_tile_ref;  // folded B: reference exponent per (128-column tile, MX block)
    // folded B: [0] tile-blocks left unfolded by the last call; int8_stages: [0] tile-chunks outside the window,
    // [1] tile-chunks inside with two planes
    DeviceBuffer<unsigned> unfolded;
    // int8_stages: per 128-line tile, one bit per chunk (set: the chunk inside the window, with one or two planes;
    // two_planes: with two); MxGemmWindowGeometry
    DeviceBuffer<unsigned long long> a_chunk_ok, b_chunk_ok, a_two_planes, b_two_planes;
    // int8_stages: the high planes ([lines][K] int8, written in two-plane tile-chunks only) and their chunks of
    // staged exponents (every block of a line carries its base)
    DeviceBuffer<uint8_t> a_high, b_high, a_base_chunks, b_base_chunks;
    DeviceBuffer<float> b_column_factors;  // int8_stages_columns: 2^(base − 127) per (B tile, chunk, line)
    // two-plane tile-chunks: bit b set where the chunk's block b holds a value 4–7 binades up in some line; the high
    // plane holds those blocks compacted to the chunk's first slots
    DeviceBuffer<uint8_t> a_high_blocks, b_high_blocks;
    // Measurement only: the INT8 stages with one plane (the 3-binade window alone; chunks spanning 4–7 binades go
    // block by block, as before the two planes). bench_mx_gemm compares both in one run.
    bool single_plane = false;
};

// How MXFP4 × MXFP4 products are scheduled (int8_stages is the fastest where the scales fit its window; the
// others are kept for data outside it and as references). b_columns: FP8 tensor cores, B's column scales folded into its
// values per tile-block (the header's "Scale folding"). none: FP8, every block promoted with per-column factors
// (the v1 arithmetic: kept for measurement and as the reference of the folded path's tests). int8_stages: INT8
// tensor cores with exact int32 sums over chunks of 2 stages (the header's "INT8 stages"); other element types fall
// back to b_columns. int8_stages_columns: the same with one base per line of B (per column of C, as A has per row)
// instead of one per 128-line tile, so a chunk fits when each column's scales do; its promotion multiplies per-row ×
// per-column factors (one FMUL more per element and chunk). Built after the CPU census of SmolLM2-135M's operands
// (bench/results/int8_window_smollm2_cpu_devbox.md): per-tile bases put nearly every wgrad chunk outside. On the
// H200's base training step it is the faster INT8 fold (mxfp4 83 against 86 ms, adahop-lv1 87 against 98 ms;
// bench/results/train_cuda_h200.md), still slower than the emulation.
enum class MxGemmFold : uint8_t { none, b_columns, int8_stages, int8_stages_columns };

// C = A · Bᵀ: c_f32 (M × N row-major FP32) or c_bf16 (the same in BF16, rounded to nearest even); exactly one
// of them non-null. With beta ≠ 0 (FP32 output only) the epilogue adds the old C: C = A · Bᵀ + beta · C, the same
// FP32 operation as lp_matmul's store of a product into an output with beta, so an accumulating caller needs no
// scratch product and no second pass over C. K must be a multiple of 32 (K = 0 writes zeros, or beta · C);
// M, N, K < 2^31. Asynchronous on
// `stream` with a scratch (without one, its temporary buffers are freed before return, which waits for the
// device); argument errors throw Error(input / usage) before anything is launched. Uses the wgmma kernel
// where cuda_tma_usable() holds, else the CUDA-core kernel (same results for MXFP4 up to FP32 summation
// order; for MXFP8 the CUDA-core kernel sums each block in FP32, the tensor cores in ~14 bits).
void mx_gemm_fp8_cuda(const MxGemmOperand& a, const MxGemmOperand& b, int64_t m, int64_t n, int64_t k, float* c_f32,
                      __nv_bfloat16* c_bf16, cudaStream_t stream, MxGemmScratch* scratch = nullptr,
                      MxGemmFold fold = MxGemmFold::b_columns, float beta = 0.0f);

// Tile-blocks of B the last call with this scratch left unfolded (their scales span more than the E4M3 window,
// or hold NaN; computed exactly by the per-column path); for int8_stages, the (operand, 128-line tile, chunk)
// triples outside the INT8 window (their output tiles are promoted per block). Waits for the device. The count
// lives in scratch.unfolded[0], reset by every call that counts (MxGemmWindowGeometry::units > 0), so a caller may
// also read it on the device, in stream order after the call (LpMatmulCuda's census does).
unsigned mx_gemm_fp8_unfolded_blocks(const MxGemmScratch& scratch);
// int8_stages: the (operand, 128-line tile, chunk) triples the last call packed with two planes (scratch.unfolded[1];
// 0 after other folds). Waits for the device.
unsigned mx_gemm_fp8_two_plane_units(const MxGemmScratch& scratch);

// What a call mx_gemm_fp8_cuda(a, b, m, n, k, …, fold) with these element types checks against its window: the
// denominators of what it counts. Host only.
struct MxGemmWindowGeometry {
    // Of mx_gemm_fp8_unfolded_blocks. INT8 stages (MXFP4 × MXFP4): (⌈M/128⌉ + ⌈N/128⌉) · ⌈K/256⌉ (operand, 128-line
    // tile, 256-deep chunk) triples; B folded (MXFP4 B, fold b_columns, or int8_stages with MXFP8 A): ⌈N/128⌉ · K/32
    // (128-column tile, MX block) pairs. 0 where a call counts nothing: fold none and MXFP8 B (the counter reads 0),
    // an empty product and the CUDA-core kernel (cuda_tma_usable() false; both leave the counter as it was).
    int64_t units = 0;
    // INT8 stages only (else 0): A's 128-row tiles, B's 128-column tiles and the 256-deep chunks of K. The call sets
    // the first row_tiles · chunk_words words of scratch.a_chunk_ok and a_two_planes (column_tiles · chunk_words of
    // b_chunk_ok and b_two_planes): chunk c of tile t is bit c % 64 of word t · chunk_words + c / 64, set in
    // *_chunk_ok when the chunk lies inside the window and in *_two_planes when it needs two planes. Output tile
    // (i, j) chains chunk c when A's tile i and B's tile j both have its chunk_ok bit and not both its two_planes
    // bit; it takes the per-block path for that chunk otherwise.
    int64_t row_tiles = 0, column_tiles = 0, chunks = 0, chunk_words = 0;
};
MxGemmWindowGeometry mx_gemm_fp8_window_geometry(int64_t m, int64_t n, int64_t k, MxElement a, MxElement b, MxGemmFold fold);

// E2M1 codes [rows][k/2] (two per byte, low nibble first) → the same values as E4M3 bytes [rows][k], exactly
// (sign kept, −0 → 0x80). k % 32 == 0; both pointers 16-byte aligned.
void mx_expand_e2m1_to_e4m3_cuda(const uint8_t* codes, int64_t rows, int64_t k, uint8_t* e4m3, cudaStream_t stream);

}  // namespace lowbit
