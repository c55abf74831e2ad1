// int8_window.cpp — the INT8-stage GEMM's window rule on the CPU (int8_window.h).
#include "adahop/int8_window.h"

#include <algorithm>

#include "core/error.h"
#include "formats/element_codec.h"
#include "formats/mx_block.h"

namespace lowbit {

int64_t Int8WindowCensus::outside() const {
    return int64_t(std::count(inside.begin(), inside.end(), uint8_t(0)));
}

int64_t Int8WindowCensus::with_two_planes() const {
    return int64_t(std::count(two_planes.begin(), two_planes.end(), uint8_t(1)));
}

Int8WindowCensus int8_window_census(const uint8_t* codes, const uint8_t* scales, int64_t lines, int64_t k, bool per_line,
                                    int binades, bool two_planes) {
    LOWBIT_CHECK(lines >= 0 && k >= 0 && k % kMxBlock == 0, ErrorKind::usage,
                 "int8_window_census: {} lines of K {}: K must be a multiple of 32", lines, k);
    LOWBIT_CHECK(binades >= 0 && binades <= 254, ErrorKind::usage, "int8_window_census: a window of {} binades", binades);
    constexpr int64_t kBlocksPerChunk = kInt8WindowChunk / kMxBlock;
    const int64_t k_blocks = k / kMxBlock;
    Int8WindowCensus c;
    c.tiles = (lines + kInt8WindowTile - 1) / kInt8WindowTile;
    c.chunks = (k_blocks + kBlocksPerChunk - 1) / kBlocksPerChunk;
    c.inside.assign(size_t(c.tiles * c.chunks), 1);
    c.two_planes.assign(c.inside.size(), 0);
    constexpr int kNone = -1, kNan = -2;  // lo/hi of a group with no live block; NaN never fits
    enum Planes : int { kOne = 0, kTwo = 1, kOut = 2 };  // ordered: a tile of lines takes the largest
    const int two_plane_span = two_planes ? 2 * binades + 1 : binades;
    const auto planes = [&](int lo, int hi) -> int {
        if (hi == kNone || (lo != kNan && hi - lo <= binades)) return kOne;
        return lo != kNan && hi - lo <= two_plane_span ? kTwo : kOut;
    };
    for (int64_t t = 0; t < c.tiles; ++t)
        for (int64_t ch = 0; ch < c.chunks; ++ch) {
            int tile_lo = kNone, tile_hi = kNone, worst_line = kOne;
            for (int64_t line = t * kInt8WindowTile; line < std::min(lines, (t + 1) * kInt8WindowTile); ++line) {
                int lo = kNone, hi = kNone;
                for (int64_t kb = ch * kBlocksPerChunk; kb < std::min(k_blocks, (ch + 1) * kBlocksPerChunk); ++kb) {
                    const uint8_t* block = codes + (line * k_blocks + kb) * (kMxBlock / 2);
                    const int s = scales[line * k_blocks + kb];
                    const bool live = s == kE8m0Nan || std::any_of(block, block + kMxBlock / 2, [](uint8_t b) { return (b & 0x77u) != 0; });
                    if (!live) continue;
                    const int v = s == kE8m0Nan ? kNan : s;
                    lo = lo == kNone ? v : (lo == kNan || v == kNan ? kNan : std::min(lo, v));
                    hi = std::max(hi, s == kE8m0Nan ? 255 : s);
                }
                worst_line = std::max(worst_line, planes(lo, hi));
                if (hi != kNone) {
                    tile_lo = tile_lo == kNone ? lo : (tile_lo == kNan || lo == kNan ? kNan : std::min(tile_lo, lo));
                    tile_hi = std::max(tile_hi, hi);
                }
            }
            const int p = per_line ? worst_line : planes(tile_lo, tile_hi);
            c.inside[size_t(t * c.chunks + ch)] = uint8_t(p != kOut);
            c.two_planes[size_t(t * c.chunks + ch)] = uint8_t(p == kTwo);
        }
    return c;
}

int64_t int8_window_slow_pairs(const Int8WindowCensus& a, const Int8WindowCensus& b) {
    LOWBIT_CHECK(a.chunks == b.chunks, ErrorKind::usage, "int8_window_slow_pairs: {} and {} chunks", a.chunks, b.chunks);
    int64_t slow = 0;
    for (int64_t ch = 0; ch < a.chunks; ++ch) {  // chained: both inside, not both with two planes
        int64_t ok_a = 0, ok_b = 0, two_a = 0, two_b = 0;
        for (int64_t i = 0; i < a.tiles; ++i) ok_a += a.inside[size_t(i * a.chunks + ch)], two_a += a.two_planes[size_t(i * a.chunks + ch)];
        for (int64_t j = 0; j < b.tiles; ++j) ok_b += b.inside[size_t(j * b.chunks + ch)], two_b += b.two_planes[size_t(j * b.chunks + ch)];
        slow += a.tiles * b.tiles - (ok_a * ok_b - two_a * two_b);
    }
    return slow;
}

}  // namespace lowbit
