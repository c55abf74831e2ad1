// int_grid.h — uniform integer grids INT2…INT8 with GPTQ conventions (turboboa.md §1.1), per row or in
// groups of G consecutive elements along the chosen axis:
//   maxq = 2^b − 1;  lo = min(min w, 0);  hi = max(max w, 0)          (the range always contains 0)
//   sym:  hi = max(|lo|, hi);  if lo < 0: lo = −hi
//   lo == hi == 0  →  lo = −1, hi = +1
//   scale = (hi − lo) / maxq;   zero = (maxq + 1)/2 (sym)  or  rint(−lo / scale) (asym, an integer)
//   q = clamp(round(w / scale) + zero, 0, maxq);   value = scale · (q − zero)
// round is RNE (torch.round), half-away or stochastic. A group holding NaN/Inf gets a NaN scale and
// decodes to NaN.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/mx_block.h"

namespace lowbit {

struct IntGridParams {
    float scale;
    float zero;
};

LOWBIT_HD IntGridParams int_grid_params(float lo, float hi, int bits, bool sym) {
    const float maxq = float((1 << bits) - 1);
    if (is_nan_or_inf(lo) || is_nan_or_inf(hi)) return {bits_float(0x7FC00000u), 0.0f};
    lo = fminf(lo, 0.0f);
    hi = fmaxf(hi, 0.0f);
    if (sym) {
        hi = fmaxf(-lo, hi);
        if (lo < 0.0f) lo = -hi;
    }
    if (lo == 0.0f && hi == 0.0f) {
        lo = -1.0f;
        hi = 1.0f;
    }
    const float scale = (hi - lo) / maxq;
    const float zero = sym ? (maxq + 1.0f) * 0.5f : rintf(-lo / scale);
    return {scale, zero};
}

LOWBIT_HD uint32_t int_grid_encode(float w, IntGridParams p, int bits, Rounding r, uint32_t random24) {
    if (is_nan_or_inf(p.scale)) return 0;
    const float maxq = float((1 << bits) - 1);
    const float t = w / p.scale;
    const float a = fminf(fabsf(t), 4096.0f);  // far beyond any grid; keeps the significand exact
    const float ra = float(round_significand(a, r, random24));
    const float rounded = t < 0.0f ? -ra : ra;
    return uint32_t(fminf(fmaxf(rounded + p.zero, 0.0f), maxq));
}

LOWBIT_HD float int_grid_decode(uint32_t q, IntGridParams p) { return p.scale * (float(q) - p.zero); }

struct IntGridFormat {
    int bits = 4;        // 2..8
    int64_t group = 0;   // 0 = one group per row (per-channel)
    bool sym = false;
};

// Blocked layout (blocked_view.h): q [outer][inner], params [outer][inner/group].
struct IntMatrix {
    IntGridFormat format;
    int64_t rows = 0, cols = 0;
    int axis = 1;
    std::vector<uint8_t> q;
    std::vector<IntGridParams> params;
};

int64_t int_group_size(const IntGridFormat& f, int64_t inner);  // resolves group 0, checks divisibility
IntMatrix int_quantize(const float* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt);
void int_dequantize(const IntMatrix& q, float* out);

}  // namespace lowbit
