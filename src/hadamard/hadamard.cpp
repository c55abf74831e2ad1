// hadamard.cpp — the CPU Hadamard transforms defined in hadamard.h: validation, the row engine (axis 1,
// one contiguous vector at a time) and the tile engine (axis 0, butterflies between whole rows of a
// B×W column tile so the loop over W columns vectorises). Both give every element exactly the sequence
// of float operations of the definition, so they are bit-identical to each other and to any CUDA kernel
// that follows hadamard.h.
//
// Napkin math: a 2^k transform costs k add/sub per element (n = 4096: 12 flops/element, ~4 passes over
// L1/L2-resident data with SSE); an m·2^k order adds m add/sub per element (172·64: 172 flops/element),
// which dominates for the big base orders.
#include "hadamard/hadamard.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace lowbit {

namespace {

// Resolved transform of one block: sizes, constants and the randomisation tables for the whole axis.
struct Plan {
    int64_t dimension = 0;
    int64_t block = 0;
    int base = 1;
    int64_t pow2 = 1;
    float scale = 1.0f;
    bool inverse = false;
    std::vector<uint32_t> base_signs;  // m×m sign-bit masks, row a = output chunk a (H_m, or H_mᵀ for inverse)
    std::vector<float> signs;          // dimension entries ±1, empty when not randomized
    std::vector<int32_t> perm;         // dimension entries, empty when not permuting
};

Plan make_plan(int64_t dimension, const HadamardOptions& opt) {
    const HadamardOrder order = hadamard_resolve_block(dimension, opt);
    Plan p;
    p.dimension = dimension;
    p.block = order.n;
    p.base = order.base;
    p.pow2 = order.pow2;
    p.scale = hadamard_inv_sqrt(order.n);
    p.inverse = opt.inverse;
    if (p.base > 1) {
        const std::span<const int8_t> h = hadamard_base_matrix(p.base);
        const int m = p.base;
        p.base_signs.resize(size_t(m) * m);
        for (int a = 0; a < m; ++a)
            for (int j = 0; j < m; ++j) {
                const int8_t coef = opt.inverse ? h[size_t(j) * m + a] : h[size_t(a) * m + j];
                p.base_signs[size_t(a) * m + j] = coef < 0 ? 0x80000000u : 0u;
            }
    }
    if (opt.randomized) {
        p.signs.resize(size_t(dimension));
        for (int64_t j = 0; j < dimension; ++j) p.signs[size_t(j)] = hadamard_random_sign(opt.seed, j);
        if (opt.permute) p.perm = hadamard_permutation(opt.seed, dimension, p.block);
    }
    return p;
}

// One butterfly stage between two disjoint runs: a[t], b[t] ← a[t] + b[t], a[t] − b[t]. Fixed 8-wide
// inner blocks so that GCC vectorises it even at -O2 (very-cheap cost model).
inline void butterfly_runs(float* __restrict a, float* __restrict b, int64_t len) {
    int64_t t = 0;
    for (; t + 8 <= len; t += 8) {
        float u[8], v[8];
        for (int k = 0; k < 8; ++k) {
            u[k] = a[t + k];
            v[k] = b[t + k];
        }
        for (int k = 0; k < 8; ++k) {
            a[t + k] = u[k] + v[k];
            b[t + k] = u[k] - v[k];
        }
    }
    for (; t < len; ++t) {
        const float u = a[t], v = b[t];
        a[t] = u + v;
        b[t] = u - v;
    }
}

// Stages h_begin ≤ h < h_end of the unnormalised FWHT of every run of n elements in x (count elements of
// `width` contiguous floats). Stage h pairs element i with i + h inside each run of 2h elements.
void fwht_stage_range(float* x, int64_t count, int64_t h_begin, int64_t h_end, int64_t width) {
    int64_t h = h_begin;
    if (width == 1 && h == 1 && h_end >= 8) {
        // Stages 1, 2, 4 fused in registers: the same adds/subs per element, one pass over memory.
        for (int64_t i = 0; i < count; i += 8) {
            float* q = x + i;
            const float a0 = q[0], a1 = q[1], a2 = q[2], a3 = q[3], a4 = q[4], a5 = q[5], a6 = q[6], a7 = q[7];
            const float b0 = a0 + a1, b1 = a0 - a1, b2 = a2 + a3, b3 = a2 - a3;
            const float b4 = a4 + a5, b5 = a4 - a5, b6 = a6 + a7, b7 = a6 - a7;
            const float c0 = b0 + b2, c2 = b0 - b2, c1 = b1 + b3, c3 = b1 - b3;
            const float c4 = b4 + b6, c6 = b4 - b6, c5 = b5 + b7, c7 = b5 - b7;
            q[0] = c0 + c4;
            q[4] = c0 - c4;
            q[1] = c1 + c5;
            q[5] = c1 - c5;
            q[2] = c2 + c6;
            q[6] = c2 - c6;
            q[3] = c3 + c7;
            q[7] = c3 - c7;
        }
        h = 8;
    }
    const int64_t total = count * width;
    for (; h < h_end; h <<= 1) {
        const int64_t span = h * width;
        for (int64_t i0 = 0; i0 < total; i0 += 2 * span) butterfly_runs(x + i0, x + i0 + span, span);
    }
}

// Unnormalised FWHT (step 1) of every run of n elements in x. Cache-blocked: the stages that stay inside
// a 16 KiB sub-run are done sub-run by sub-run (L1-resident), the rest over the whole run. Every element
// still sees stages h = 1, 2, 4, … in order, so the result is unchanged.
void fwht_elements(float* x, int64_t count, int64_t n, int64_t width) {
    constexpr int64_t l1_floats = 4096;
    int64_t sub = 1;
    while (sub < n && 2 * sub * width <= l1_floats) sub <<= 1;
    if (sub >= n || sub < 8) {
        fwht_stage_range(x, count, 1, n, width);
        return;
    }
    for (int64_t i = 0; i < count; i += sub) fwht_stage_range(x + i * width, sub, 1, sub, width);
    fwht_stage_range(x, count, sub, n, width);
}

// 4 floats in an SSE register (GCC/Clang vector extension: element-wise IEEE arithmetic, same results).
typedef float float4 __attribute__((vector_size(16)));
typedef uint32_t uint4 __attribute__((vector_size(16)));

inline float4 load4(const float* p) {
    float4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store4(float* p, float4 v) { std::memcpy(p, &v, sizeof v); }
// x·(±1) as a sign-bit flip: exact, like the multiply, but cheaper.
inline float4 flip4(float4 x, uint32_t sign_mask) { return (float4)((uint4)x ^ sign_mask); }
inline float flip1(float x, uint32_t sign_mask) { return sign_mask ? -x : x; }

// Step 2: out chunk a (len floats) = Σ_j H[a][j]·in chunk j, j = 0…m−1 in order, starting from the
// exact ±in chunk 0; sign_masks[a·m + j] = 0x80000000 where H[a][j] = −1 (u + (−v) ≡ u − v in IEEE).
// Register-blocked: 4 outputs × 8 floats of accumulators in 8 SSE registers; the m input runs of one
// 8-float column stay in L1 while all outputs are formed (m·len adds per call, e.g. 172 per element).
void base_mix(const float* __restrict in, float* __restrict out, int m, int64_t len, const uint32_t* sign_masks) {
    int64_t t0 = 0;
    for (; t0 + 8 <= len; t0 += 8) {
        int a = 0;
        for (; a + 4 <= m; a += 4) {
            const uint32_t* c = sign_masks + size_t(a) * m;
            const float4 in_lo = load4(in + t0), in_hi = load4(in + t0 + 4);
            float4 lo0 = flip4(in_lo, c[0]), hi0 = flip4(in_hi, c[0]);
            float4 lo1 = flip4(in_lo, c[m]), hi1 = flip4(in_hi, c[m]);
            float4 lo2 = flip4(in_lo, c[2 * m]), hi2 = flip4(in_hi, c[2 * m]);
            float4 lo3 = flip4(in_lo, c[3 * m]), hi3 = flip4(in_hi, c[3 * m]);
            for (int j = 1; j < m; ++j) {
                const float* s = in + j * len + t0;
                const float4 slo = load4(s), shi = load4(s + 4);
                const uint32_t k0 = c[j], k1 = c[m + j], k2 = c[2 * m + j], k3 = c[3 * m + j];
                lo0 = lo0 + flip4(slo, k0);
                hi0 = hi0 + flip4(shi, k0);
                lo1 = lo1 + flip4(slo, k1);
                hi1 = hi1 + flip4(shi, k1);
                lo2 = lo2 + flip4(slo, k2);
                hi2 = hi2 + flip4(shi, k2);
                lo3 = lo3 + flip4(slo, k3);
                hi3 = hi3 + flip4(shi, k3);
            }
            float* o = out + a * len + t0;
            store4(o, lo0);
            store4(o + 4, hi0);
            store4(o + len, lo1);
            store4(o + len + 4, hi1);
            store4(o + 2 * len, lo2);
            store4(o + 2 * len + 4, hi2);
            store4(o + 3 * len, lo3);
            store4(o + 3 * len + 4, hi3);
        }
        for (; a < m; ++a) {
            const uint32_t* c = sign_masks + size_t(a) * m;
            float4 lo = flip4(load4(in + t0), c[0]), hi = flip4(load4(in + t0 + 4), c[0]);
            for (int j = 1; j < m; ++j) {
                lo = lo + flip4(load4(in + j * len + t0), c[j]);
                hi = hi + flip4(load4(in + j * len + t0 + 4), c[j]);
            }
            store4(out + a * len + t0, lo);
            store4(out + a * len + t0 + 4, hi);
        }
    }
    for (; t0 < len; ++t0)
        for (int a = 0; a < m; ++a) {
            const uint32_t* c = sign_masks + size_t(a) * m;
            float acc = flip1(in[t0], c[0]);
            for (int j = 1; j < m; ++j) acc = acc + flip1(in[j * len + t0], c[j]);
            out[a * len + t0] = acc;
        }
}

// Axis 1: transforms one row of plan.dimension floats in place. work: dimension floats; tmp: block floats.
void transform_row(float* row, const Plan& p, float* work, float* tmp) {
    const int64_t dim = p.dimension, bsz = p.block;
    const bool randomized = !p.signs.empty();
    float* v = row;
    if (randomized) {
        v = work;
        if (!p.inverse) {
            if (p.perm.empty())
                for (int64_t j = 0; j < dim; ++j) work[j] = p.signs[size_t(j)] * row[j];
            else
                for (int64_t j = 0; j < dim; ++j) work[j] = p.signs[size_t(j)] * row[p.perm[size_t(j)]];
        } else {
            std::memcpy(work, row, size_t(dim) * sizeof(float));
        }
    }
    fwht_elements(v, dim, p.pow2, 1);
    const float scale = p.scale;
    for (int64_t j0 = 0; j0 < dim; j0 += bsz) {
        const float* src = v + j0;
        if (p.base > 1) {
            base_mix(v + j0, tmp, p.base, p.pow2, p.base_signs.data());
            src = tmp;
        }
        if (!randomized || !p.inverse) {
            float* dst = row + j0;
            for (int64_t i = 0; i < bsz; ++i) dst[i] = src[i] * scale;
        } else {
            const float* sg = p.signs.data() + j0;
            if (p.perm.empty())
                for (int64_t i = 0; i < bsz; ++i) row[j0 + i] = sg[i] * (src[i] * scale);
            else
                for (int64_t i = 0; i < bsz; ++i) row[p.perm[size_t(j0 + i)]] = sg[i] * (src[i] * scale);
        }
    }
}

// Axis 0: transforms rows [j0, j0 + block) × columns [c0, c0 + w) of the rows×cols matrix x in place.
// work, tmp: block·w floats each (element i of the tile = matrix row j0 + i, w contiguous floats).
void transform_tile(float* x, int64_t cols, int64_t j0, int64_t c0, int64_t w, const Plan& p, float* work,
                    float* tmp) {
    const int64_t bsz = p.block;
    const bool randomized = !p.signs.empty();
    for (int64_t i = 0; i < bsz; ++i) {
        float* dst = work + i * w;
        if (randomized && !p.inverse) {
            const int64_t src_row = p.perm.empty() ? j0 + i : p.perm[size_t(j0 + i)];
            const float s = p.signs[size_t(j0 + i)];
            const float* src = x + src_row * cols + c0;
            for (int64_t c = 0; c < w; ++c) dst[c] = s * src[c];
        } else {
            std::memcpy(dst, x + (j0 + i) * cols + c0, size_t(w) * sizeof(float));
        }
    }
    fwht_elements(work, bsz, p.pow2, w);
    const float* result = work;
    if (p.base > 1) {
        base_mix(work, tmp, p.base, p.pow2 * w, p.base_signs.data());
        result = tmp;
    }
    const float scale = p.scale;
    for (int64_t i = 0; i < bsz; ++i) {
        const float* src = result + i * w;
        if (randomized && p.inverse) {
            const int64_t dst_row = p.perm.empty() ? j0 + i : p.perm[size_t(j0 + i)];
            const float s = p.signs[size_t(j0 + i)];
            float* dst = x + dst_row * cols + c0;
            for (int64_t c = 0; c < w; ++c) dst[c] = s * (src[c] * scale);
        } else {
            float* dst = x + (j0 + i) * cols + c0;
            for (int64_t c = 0; c < w; ++c) dst[c] = src[c] * scale;
        }
    }
}

}  // namespace

HadamardOrder hadamard_resolve_block(int64_t dimension, const HadamardOptions& opt) {
    if (opt.axis != 0 && opt.axis != 1) fail(ErrorKind::usage, "hadamard: axis must be 0 or 1, got {}", opt.axis);
    if (opt.block < 0) fail(ErrorKind::usage, "hadamard: block size must be positive, got {}", opt.block);
    if (opt.permute && !opt.randomized)
        fail(ErrorKind::usage, "hadamard: a permutation is only applied by the randomized transform (give a seed)");
    if (opt.block > 0 && !hadamard_order_supported(opt.block))
        fail(ErrorKind::usage,
             "hadamard: block {} is not a Hadamard order lowbit supports; use a power of two (16, 32, 64, 128, 256, …) "
             "or m·2^k with m in {{12, 20, 28, 36, 52, 60, 108, 140, 156, 172}}",
             opt.block);
    if (dimension <= 0) fail(ErrorKind::input, "hadamard: the transformed dimension is empty (axis {})", opt.axis);
    if (opt.block == 0) {
        const HadamardOrder order = hadamard_factor_order(dimension);
        if (!order.supported()) fail(ErrorKind::input, "{} (axis {})", hadamard_size_advice(dimension), opt.axis);
        return order;
    }
    if (dimension % opt.block != 0) {
        const int64_t fit = hadamard_largest_block_dividing(dimension);
        const int64_t padded = (dimension + opt.block - 1) / opt.block * opt.block;
        fail(ErrorKind::input,
             "hadamard: dimension {} (axis {}) is not a multiple of block {}; use a block that divides it "
             "(largest supported: {}) or pad to {}",
             dimension, opt.axis, opt.block, fit, padded);
    }
    return hadamard_factor_order(opt.block);
}

std::vector<int32_t> hadamard_permutation(uint64_t seed, int64_t dimension, int64_t block) {
    if (block <= 0 || dimension % block != 0 || dimension > INT32_MAX)
        fail(ErrorKind::usage, "hadamard: permutation needs a block dividing the dimension (got {} and {})", block,
             dimension);
    std::vector<int32_t> out(static_cast<size_t>(dimension));
    std::vector<int32_t> p(static_cast<size_t>(block));
    for (int64_t j0 = 0; j0 < dimension; j0 += block) {
        for (int64_t i = 0; i < block; ++i) p[size_t(i)] = int32_t(i);
        for (int64_t i = block - 1; i >= 1; --i)
            std::swap(p[size_t(i)], p[hadamard_permutation_draw(seed, j0 + i, uint32_t(i + 1))]);
        for (int64_t i = 0; i < block; ++i) out[size_t(j0 + i)] = int32_t(j0 + p[size_t(i)]);
    }
    return out;
}

void hadamard_transform(float* x, int64_t rows, int64_t cols, const HadamardOptions& opt) {
    if (rows < 0 || cols < 0) fail(ErrorKind::usage, "hadamard: negative shape {}×{}", rows, cols);
    const int64_t dimension = opt.axis == 0 ? rows : cols;
    const int64_t other = opt.axis == 0 ? cols : rows;
    const Plan plan = make_plan(dimension, opt);  // validates even when `other` is 0
    if (other == 0) return;

    if (opt.axis == 1) {
        // ~64 KiB of rows per task so small rows are not scheduled one by one.
        const int64_t grain = std::max<int64_t>(1, 16384 / cols);
        parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
            std::vector<float> work(plan.signs.empty() ? 0 : size_t(cols));
            std::vector<float> tmp(plan.base > 1 ? size_t(plan.block) : 0);
            for (int64_t r = r0; r < r1; ++r) transform_row(x + r * cols, plan, work.data(), tmp.data());
        });
        return;
    }
    // Axis 0: tiles of block rows × w columns, sized so a tile (×2 buffers) stays in L2 (~128 KiB each).
    int64_t w = std::clamp<int64_t>(32768 / plan.block, 16, 512);
    w = std::min(w, cols);
    const int64_t tiles_per_block = (cols + w - 1) / w;
    const int64_t blocks = rows / plan.block;
    parallel_for(blocks * tiles_per_block, 1, [&](int64_t u0, int64_t u1) {
        std::vector<float> work(size_t(plan.block * w));
        std::vector<float> tmp(plan.base > 1 ? size_t(plan.block * w) : 0);
        for (int64_t u = u0; u < u1; ++u) {
            const int64_t bi = u / tiles_per_block, ti = u % tiles_per_block;
            const int64_t c0 = ti * w;
            const int64_t wt = std::min(w, cols - c0);
            transform_tile(x, cols, bi * plan.block, c0, wt, plan, work.data(), tmp.data());
        }
    });
}

void hadamard_transform_vector(float* x, int64_t n, bool transpose) {
    HadamardOptions opt;
    opt.inverse = transpose;
    hadamard_transform(x, 1, n, opt);
}

void fwht(float* x, int64_t n) {
    if (n <= 0 || (n & (n - 1)) != 0)
        fail(ErrorKind::input, "hadamard: fwht needs a power-of-two length, got {} ({})", n,
             hadamard_size_advice(n));
    HadamardOptions opt;
    hadamard_transform(x, 1, n, opt);
}

}  // namespace lowbit
