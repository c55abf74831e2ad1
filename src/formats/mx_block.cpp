// mx_block.cpp — CPU reference of MX block quantization over matrices (the scalar rules are in mx_block.h).
#include "formats/mx_block.h"

#include <algorithm>
#include <cstring>

#include "core/counter_rng.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/blocked_view.h"

namespace lowbit {

void check_block_divisible(int64_t dim, int64_t block, const char* what, const char* format) {
    if (dim <= 0 || dim % block != 0)
        fail(ErrorKind::input,
             "{}: the blocked dimension ({}) is {}, not a positive multiple of the block size {}; "
             "pad the matrix or choose the other --axis",
             format, what, dim, block);
}

MxMatrix mx_quantize(const float* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, const QuantizeOptions& opt) {
    MxMatrix q;
    q.element = e;
    q.rule = rule;
    q.rows = rows;
    q.cols = cols;
    q.axis = opt.axis;
    check_block_divisible(q.inner(), kMxBlock, opt.axis == 1 ? "columns" : "rows", mx_element_name(e));
    const BlockedView v{rows, cols, opt.axis, kMxBlock};
    q.codes.resize(size_t(rows * cols));
    q.scales.resize(size_t(v.outer() * v.blocks_per_outer()));
    const MxSpec s = mx_spec(e);
    parallel_for(v.outer(), 16, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
            for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
                uint32_t amax = 0;
                for (int i = 0; i < kMxBlock; ++i) amax = std::max(amax, abs_bits(x[v.source_index(o, b, i)]));
                const uint8_t scale = mx_scale_code(amax, s, rule);
                q.scales[size_t(v.scale_index(o, b))] = scale;
                for (int i = 0; i < kMxBlock; ++i) {
                    const int64_t src = v.source_index(o, b, i);
                    const uint32_t rnd = opt.rounding == Rounding::stochastic ? counter_random24(opt.seed, uint64_t(src)) : 0;
                    q.codes[size_t(v.blocked_index(o, b, i))] = uint8_t(mx_encode(x[src], scale, s, opt.rounding, rnd));
                }
            }
        }
    });
    return q;
}

void mx_dequantize(const MxMatrix& q, float* out) {
    const MxSpec s = mx_spec(q.element);
    const BlockedView v{q.rows, q.cols, q.axis, kMxBlock};
    parallel_for(v.outer(), 16, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
                const uint8_t scale = q.scales[size_t(v.scale_index(o, b))];
                for (int i = 0; i < kMxBlock; ++i)
                    out[v.source_index(o, b, i)] = mx_decode(q.codes[size_t(v.blocked_index(o, b, i))], scale, s);
            }
    });
}

std::vector<uint8_t> pack_e2m1(const std::vector<uint8_t>& codes) {
    std::vector<uint8_t> out(codes.size() / 2);
    for (size_t j = 0; j < out.size(); ++j) out[j] = uint8_t((codes[2 * j] & 0xF) | (codes[2 * j + 1] & 0xF) << 4);
    return out;
}

std::vector<uint8_t> unpack_e2m1(const std::vector<uint8_t>& packed) {
    std::vector<uint8_t> out(packed.size() * 2);
    for (size_t j = 0; j < packed.size(); ++j) {
        out[2 * j] = packed[j] & 0xF;
        out[2 * j + 1] = packed[j] >> 4;
    }
    return out;
}

const char* scale_rule_name(ScaleRule r) {
    switch (r) {
        case ScaleRule::floor: return "floor";
        case ScaleRule::rceil: return "rceil";
        case ScaleRule::midmax: return "midmax";
    }
    return "?";
}

bool parse_scale_rule(const char* name, ScaleRule* out) {
    if (std::strcmp(name, "floor") == 0) *out = ScaleRule::floor;
    else if (std::strcmp(name, "rceil") == 0) *out = ScaleRule::rceil;
    else if (std::strcmp(name, "midmax") == 0) *out = ScaleRule::midmax;
    else return false;
    return true;
}

const char* mx_element_name(MxElement e) {
    switch (e) {
        case MxElement::e2m1: return "mxfp4";
        case MxElement::e2m3: return "mxfp6_e2m3";
        case MxElement::e3m2: return "mxfp6_e3m2";
        case MxElement::e4m3: return "mxfp8_e4m3";
        case MxElement::e5m2: return "mxfp8_e5m2";
        case MxElement::int8: return "mxint8";
    }
    return "?";
}

}  // namespace lowbit

namespace lowbit {

double mx_clipped_block_fraction(const float* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, int axis) {
    const BlockedView v{rows, cols, axis, kMxBlock};
    check_block_divisible(v.inner(), kMxBlock, axis == 1 ? "columns" : "rows", mx_element_name(e));
    const MxSpec s = mx_spec(e);
    int64_t clipped = 0;
    for (int64_t o = 0; o < v.outer(); ++o)
        for (int64_t b = 0; b < v.blocks_per_outer(); ++b) {
            uint32_t amax = 0;
            for (int i = 0; i < kMxBlock; ++i) amax = std::max(amax, abs_bits(x[v.source_index(o, b, i)]));
            const uint8_t sc = mx_scale_code(amax, s, rule);
            if (sc != kE8m0Nan && amax != 0 && bits_float(amax) > scale_pow2(s.max_value(), int(sc) - 127)) ++clipped;
        }
    return double(clipped) / double(v.outer() * v.blocks_per_outer());
}

}  // namespace lowbit
