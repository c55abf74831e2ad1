// int8_window.h — the CPU reference of the INT8-stage MX GEMM's window rule (adahop/cuda/mx_gemm_fp8.cuh, "INT8
// stages"): which 256-deep chunks of an MXFP4 operand its pack pass can shift into one int8 exponent. A chunk is 8
// MX blocks of one line (A: per line) or of a 128-line tile (B: per tile); its live blocks (a non-zero code, or a
// NaN scale byte) decide: inside when none is live, or when no scale is NaN and the largest and smallest live scale
// bytes differ by at most 3 (2 · 6 · 2^3 = 96 fits int8). The GEMM chains a (output tile, chunk) pair when A's
// 128-row tile and B's 128-column tile are both inside in that chunk (A's tile: every line inside); otherwise that
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
    std::vector<uint8_t> inside;    // [tile][chunk]: 1 when the tile's chunk is inside the window
    int64_t outside() const;        // tile-chunks outside
};

// codes: E2M1 [lines][k / 2] (two per byte, low nibble first); scales: E8M0 [lines][k / 32]; k % 32 == 0.
// per_line: A's rule (each line its own base; a tile is inside when all its lines are), else B's (one base per tile).
// binades: the window's width (the kernel's is kInt8WindowBinades; a wider one asks what a wider design would chain).
Int8WindowCensus int8_window_census(const uint8_t* codes, const uint8_t* scales, int64_t lines, int64_t k, bool per_line,
                                    int binades = kInt8WindowBinades);

// Of the (output tile, chunk) pairs of a product A · Bᵀ with these operand censuses (same chunks), those that take
// the per-block path.
int64_t int8_window_slow_pairs(const Int8WindowCensus& a, const Int8WindowCensus& b);

}  // namespace lowbit
