// lp_matmul.cpp — CPU reference (emulation) of the low-precision GEMM: quantize → dequantize → FP32 GEMM.
#include "adahop/lp_matmul.h"

#include <algorithm>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "hadamard/hadamard.h"

namespace lowbit {

namespace {

float round_bf16(float x) {
    const ElementSpec s = element_spec(ElementType::bf16);
    return decode_element(s, encode_element(s, x, Rounding::nearest_even, Overflow::special));
}

std::vector<float> high_precision_copy(const float* t, int64_t n, const LpMatmulOptions& opts) {
    std::vector<float> v(t, t + n);
    if (opts.high_precision_bf16)
        for (float& x : v) x = round_bf16(x);
    return v;
}

// Hadamard along `axis` in blocks of `block` (0: the whole dimension); random_signs_seed ≠ 0 makes it the
// randomized H·S of hadamard.h (signs only, no permutation).
void rotate(std::vector<float>& t, int64_t rows, int64_t cols, int axis, int64_t block, uint64_t random_signs_seed = 0,
            bool inverse = false) {
    HadamardOptions h;
    h.block = block;
    h.axis = axis;
    h.randomized = random_signs_seed != 0;
    h.seed = random_signs_seed;
    h.inverse = inverse;
    hadamard_transform(t.data(), rows, cols, h);
}

// K is the reduction axis: axis 1 of the left operand, axis 0 of the right one.
int k_axis(Side s) { return s == Side::left ? 1 : 0; }

// Quantizes the (rotated, cleaned) operand into p's blocked codes and scales.
void quantize_into(PreparedOperand& p, const float* t, Rounding rounding, uint64_t seed, const LpMatmulOptions& opts) {
    const QuantizeOptions qo{k_axis(p.side), rounding, seed};
    p.quantized = true;
    if (opts.nvfp4) {
        Nvfp4Matrix nv = nvfp4_quantize(t, p.rows, p.cols, qo);
        p.codes = pack_e2m1(nv.codes);
        p.scales = std::move(nv.block_scales);
        p.tensor_scale = {nv.tensor_scale};
    } else {
        MxMatrix mx = mx_quantize(t, p.rows, p.cols, opts.element, opts.scale_rule, qo);
        p.codes = opts.element == MxElement::e2m1 ? pack_e2m1(mx.codes) : std::move(mx.codes);
        p.scales = std::move(mx.scales);
    }
}

// The dense (transformed) operand the main product uses: dequantized codes, or the unquantized operand.
std::vector<float> main_operand(const PreparedOperand& p) {
    if (!p.quantized) return p.dense;
    std::vector<float> out(size_t(p.rows * p.cols));
    if (p.nvfp4) {
        Nvfp4Matrix nv;
        nv.rows = p.rows, nv.cols = p.cols, nv.axis = k_axis(p.side);
        nv.tensor_scale = p.tensor_scale.at(0);
        nv.codes = unpack_e2m1(p.codes);
        nv.block_scales = p.scales;
        nvfp4_dequantize(nv, out.data());
    } else {
        MxMatrix mx;
        mx.element = p.element;
        mx.rows = p.rows, mx.cols = p.cols, mx.axis = k_axis(p.side);
        mx.codes = p.element == MxElement::e2m1 ? unpack_e2m1(p.codes) : p.codes;
        mx.scales = p.scales;
        mx_dequantize(mx, out.data());
    }
    return out;
}

}  // namespace

PreparedOperand lp_prepare(const float* t, int64_t rows, int64_t cols, Side side, Strategy s, const LpMatmulOptions& opts) {
    PreparedOperand p;
    p.side = side;
    p.strategy = s;
    p.rows = rows;
    p.cols = cols;
    p.nvfp4 = opts.nvfp4;
    p.element = opts.element;
    p.random_signs_seed = applied_random_signs_seed(s, opts);
    const int64_t n = rows * cols;
    const Rounding rnd = side == Side::left ? opts.rounding_a : opts.rounding_b;
    const uint64_t seed = side == Side::left ? opts.seed_a : opts.seed_b;
    const bool needs_hp = s == Strategy::full || (s == Strategy::iht_oe_left && side == Side::right) ||
                          (s == Strategy::iht_oe_right && side == Side::left);
    if (needs_hp) p.high_precision = high_precision_copy(t, n, opts);
    if (s == Strategy::full) return p;

    std::vector<float> work;
    const bool extract = (s == Strategy::iht_oe_left && side == Side::left) || (s == Strategy::iht_oe_right && side == Side::right);
    if (extract) {
        OutlierSplit sp = side == Side::left ? split_outlier_rows(t, rows, cols, opts.oe_k, opts.oe_metric)
                                             : split_outlier_cols(t, rows, cols, opts.oe_k, opts.oe_metric);
        work = std::move(sp.clean);
        p.slice = high_precision_copy(sp.slice.data(), int64_t(sp.slice.size()), opts);
        p.indices = std::move(sp.indices);
        p.k_extracted = int64_t(p.indices.size());
    } else {
        work.assign(t, t + n);
    }
    if (s == Strategy::oht) rotate(work, rows, cols, 1 - k_axis(side), 0);  // outer dimension, full size
    else if (s != Strategy::plain)                                          // inner dimension, H₃₂ blocks (·S)
        rotate(work, rows, cols, k_axis(side), kIhtBlock, p.random_signs_seed);
    if (opts.quantize) quantize_into(p, work.data(), rnd, seed, opts);
    else p.dense = std::move(work);  // identity quantizer (exactness identities)
    return p;
}

void lp_matmul_prepared(const PreparedOperand& a, const PreparedOperand& b, const LpMatmulOptions& opts, float* c) {
    if (a.side != Side::left || b.side != Side::right)
        fail(ErrorKind::usage, "lp_matmul: operands must be prepared as (left, right)");
    if (a.strategy != b.strategy)
        fail(ErrorKind::usage, "lp_matmul: operands prepared for different strategies ({} vs {})", strategy_name(a.strategy),
             strategy_name(b.strategy));
    if (a.random_signs_seed != b.random_signs_seed)
        fail(ErrorKind::usage, "lp_matmul: operands prepared with different random signs (seeds {} and {}); prepare both with the same "
             "random_signs_seed", a.random_signs_seed, b.random_signs_seed);
    if (a.cols != b.rows)
        fail(ErrorKind::input, "lp_matmul: inner dimensions differ: A is {}x{}, B is {}x{}", a.rows, a.cols, b.rows, b.cols);
    const int64_t m = a.rows, k = a.cols, n = b.cols;
    const Strategy s = a.strategy;
    if (s == Strategy::full) {
        gemm_f32(ConstMatF(a.high_precision.data(), m, k), Trans::no, ConstMatF(b.high_precision.data(), k, n), Trans::no, MatF(c, m, n));
    } else {
        std::vector<float> am = main_operand(a), bm = main_operand(b);
        gemm_f32(ConstMatF(am.data(), m, k), Trans::no, ConstMatF(bm.data(), k, n), Trans::no, MatF(c, m, n));
        if (s == Strategy::oht) {
            std::vector<float> cv(c, c + m * n);
            // C' = H_M·A·B·H_Nᵀ  →  C = H_Mᵀ·C'·H_N (inverse transforms along both axes)
            rotate(cv, m, n, 0, 0, /*random_signs_seed=*/0, /*inverse=*/true);
            rotate(cv, m, n, 1, 0, /*random_signs_seed=*/0, /*inverse=*/true);
            std::copy(cv.begin(), cv.end(), c);
        }
    }
    if (s == Strategy::iht_oe_left && a.k_extracted > 0) {
        const int64_t kk = int64_t(a.indices.size());
        std::vector<float> rows(size_t(kk * n));
        gemm_f32(ConstMatF(a.slice.data(), kk, k), Trans::no, ConstMatF(b.high_precision.data(), k, n), Trans::no,
                 MatF(rows.data(), kk, n));
        for (int64_t i = 0; i < kk; ++i) std::copy(rows.begin() + i * n, rows.begin() + (i + 1) * n, c + int64_t(a.indices[size_t(i)]) * n);
    }
    if (s == Strategy::iht_oe_right && b.k_extracted > 0) {
        const int64_t kk = int64_t(b.indices.size());
        std::vector<float> cols(size_t(m * kk));
        gemm_f32(ConstMatF(a.high_precision.data(), m, k), Trans::no, ConstMatF(b.slice.data(), k, kk), Trans::no,
                 MatF(cols.data(), m, kk));
        for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < kk; ++j) c[r * n + b.indices[size_t(j)]] = cols[size_t(r * kk + j)];
    }
    if (opts.output_bf16)
        for (int64_t i = 0; i < m * n; ++i) c[i] = round_bf16(c[i]);
}

void lp_matmul(const float* a, const float* b, int64_t m, int64_t k, int64_t n, Strategy s, const LpMatmulOptions& opts,
               float* c) {
    PreparedOperand pa = lp_prepare(a, m, k, Side::left, s, opts);
    PreparedOperand pb = lp_prepare(b, k, n, Side::right, s, opts);
    lp_matmul_prepared(pa, pb, opts, c);
}

}  // namespace lowbit
