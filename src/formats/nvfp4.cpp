// nvfp4.cpp — CPU reference of NVFP4 quantization over matrices (scalar rules in nvfp4.h).
#include "formats/nvfp4.h"

#include <algorithm>

#include "core/counter_rng.h"
#include "core/thread_pool.h"
#include "formats/blocked_view.h"

namespace lowbit {

Nvfp4Matrix nvfp4_quantize(const float* x, int64_t rows, int64_t cols, const QuantizeOptions& opt) {
    Nvfp4Matrix q;
    q.rows = rows;
    q.cols = cols;
    q.axis = opt.axis;
    check_block_divisible(q.inner(), kNvfp4Block, opt.axis == 1 ? "columns" : "rows", "nvfp4");
    uint32_t amax = 0;
    for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, abs_bits(x[i]));
    q.tensor_scale = nvfp4_tensor_scale(amax);
    const BlockedView v{rows, cols, opt.axis, kNvfp4Block};
    q.codes.resize(size_t(rows * cols));
    q.block_scales.resize(size_t(v.outer() * v.blocks_per_outer()));
    parallel_for(v.outer(), 16, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
                uint32_t bmax = 0;
                for (int i = 0; i < kNvfp4Block; ++i) bmax = std::max(bmax, abs_bits(x[v.source_index(o, b, i)]));
                const uint8_t code = nvfp4_block_code(bmax, q.tensor_scale);
                q.block_scales[size_t(v.scale_index(o, b))] = code;
                const float denom = nvfp4_denominator(code, q.tensor_scale);
                for (int i = 0; i < kNvfp4Block; ++i) {
                    const int64_t src = v.source_index(o, b, i);
                    const uint32_t rnd = opt.rounding == Rounding::stochastic ? counter_random24(opt.seed, uint64_t(src)) : 0;
                    q.codes[size_t(v.blocked_index(o, b, i))] = uint8_t(nvfp4_encode(x[src], denom, opt.rounding, rnd));
                }
            }
    });
    return q;
}

void nvfp4_dequantize(const Nvfp4Matrix& q, float* out) {
    const BlockedView v{q.rows, q.cols, q.axis, kNvfp4Block};
    parallel_for(v.outer(), 16, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
                const float denom = nvfp4_denominator(q.block_scales[size_t(v.scale_index(o, b))], q.tensor_scale);
                for (int i = 0; i < kNvfp4Block; ++i)
                    out[v.source_index(o, b, i)] = nvfp4_decode(q.codes[size_t(v.blocked_index(o, b, i))], denom);
            }
    });
}

}  // namespace lowbit
