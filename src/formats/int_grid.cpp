// int_grid.cpp — CPU reference of GPTQ-style integer grids over matrices (scalar rules in int_grid.h).
#include "formats/int_grid.h"

#include <algorithm>
#include <string>

#include "core/counter_rng.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/blocked_view.h"

namespace lowbit {

int64_t int_group_size(const IntGridFormat& f, int64_t inner) {
    if (f.bits < 2 || f.bits > 8) fail(ErrorKind::usage, "int grid: bits must be 2..8, got {}", f.bits);
    if (f.group < 0) fail(ErrorKind::usage, "int grid: group size must be positive, got {}", f.group);
    const int64_t g = f.group == 0 ? inner : f.group;
    check_block_divisible(inner, g, "group dimension", ("int" + std::to_string(f.bits)).c_str());
    return g;
}

IntMatrix int_quantize(const float* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt) {
    IntMatrix m;
    m.format = f;
    m.rows = rows;
    m.cols = cols;
    m.axis = opt.axis;
    const BlockedView v{rows, cols, opt.axis, int_group_size(f, opt.axis == 1 ? cols : rows)};
    m.q.resize(size_t(rows * cols));
    m.params.resize(size_t(v.outer() * v.blocks_per_outer()));
    parallel_for(v.outer(), 4, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
                float lo = 0.0f, hi = 0.0f;
                bool bad = false;
                for (int64_t i = 0; i < v.block; ++i) {
                    const float w = x[v.source_index(o, b, i)];
                    bad |= is_nan_or_inf(w);
                    lo = std::min(lo, w);
                    hi = std::max(hi, w);
                }
                const IntGridParams p = bad ? IntGridParams{bits_float(0x7FC00000u), 0.0f} : int_grid_params(lo, hi, f.bits, f.sym);
                m.params[size_t(v.scale_index(o, b))] = p;
                for (int64_t i = 0; i < v.block; ++i) {
                    const int64_t src = v.source_index(o, b, i);
                    const uint32_t rnd = opt.rounding == Rounding::stochastic ? counter_random24(opt.seed, uint64_t(src)) : 0;
                    m.q[size_t(v.blocked_index(o, b, i))] = uint8_t(int_grid_encode(x[src], p, f.bits, opt.rounding, rnd));
                }
            }
    });
    return m;
}

void int_dequantize(const IntMatrix& m, float* out) {
    const BlockedView v{m.rows, m.cols, m.axis, int_group_size(m.format, m.axis == 1 ? m.cols : m.rows)};
    parallel_for(v.outer(), 4, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
                const IntGridParams p = m.params[size_t(v.scale_index(o, b))];
                for (int64_t i = 0; i < v.block; ++i)
                    out[v.source_index(o, b, i)] = int_grid_decode(m.q[size_t(v.blocked_index(o, b, i))], p);
            }
    });
}

}  // namespace lowbit
