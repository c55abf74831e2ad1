// int8_window.h — the CPU reference of the INT8-stage MX GEMM's window rule (adahop/cuda/mx_gemm_fp8.cuh, "INT8
// stages"): which 256-deep chunks of an MXFP4 operand its pack pass can shift into int8 values over one exponent. A
// chunk is 8 MX blocks of one line (A: per line) or of a 128-line tile (B: per tile); its live blocks (a non-zero
// code, or a NaN scale byte) decide, by the span d of their scale bytes (largest − smallest):
//   - one plane when none is live or d ≤ 3 (2 · 6 · 2^3 = 96 fits int8);
//   - two planes when 4 ≤ d ≤ 7 (the blocks 4 … 7 binades up go to a second int8 plane worth 16×: the header's
//     "Two planes");
//   - outside when d > 7 or a scale is NaN.
// A tile of per-line chunks takes the worst of its lines. The GEMM chains a (output tile, chunk) pair when A's
// 128-row tile and B's 128-column tile are both inside (one or two planes) and not both two-plane; otherwise that
// chunk goes block by block (~4.5× the chained cost). `lowbit analyze detect` reports it for a user's matrix.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit {

constexpr int kInt8WindowBinades = 3;
constexpr int64_t kInt8WindowChunk = 256;  // K elements per chunk (8 MX blocks)
constexpr int64_t kInt8WindowTile = 128;   // lines per tile

struct Int8WindowCensus {
    int64_t tiles = 0, chunks = 0;  // ⌈lines / 128⌉, ⌈K / 256⌉
    std::vector<uint8_t> inside;    // [tile][chunk]: 1 when the tile's chunk is inside the window (one or two planes)
    std::vector<uint8_t> two_planes;  // [tile][chunk]: 1 when it is inside with two planes
    int64_t outside() const;          // tile-chunks outside
    int64_t with_two_planes() const;  // tile-chunks inside with two planes
};

// codes: E2M1 [lines][k / 2] (two per byte, low nibble first); scales: E8M0 [lines][k / 32]; k % 32 == 0.
// per_line: A's rule (each line its own base; a tile takes the worst of its lines), else B's (one base per tile).
// binades: one plane's width w (the kernel's is kInt8WindowBinades; a wider one asks what a wider design would
// chain); two planes then reach 2w + 1. two_planes false: the one-plane rule alone (the kernel's
// MxGemmScratch::single_plane).
Int8WindowCensus int8_window_census(const uint8_t* codes, const uint8_t* scales, int64_t lines, int64_t k, bool per_line,
                                    int binades = kInt8WindowBinades, bool two_planes = true);

// Of the (output tile, chunk) pairs of a product A · Bᵀ with these operand censuses (same chunks), those that take
// the per-block path.
int64_t int8_window_slow_pairs(const Int8WindowCensus& a, const Int8WindowCensus& b);

}  // namespace lowbit
