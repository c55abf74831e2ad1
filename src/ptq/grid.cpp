// grid.cpp — PTQ grids: the per-format traits, grid fitting (turboboa.md §1; ggml's scale rules), nearest
// codes, dequantization and packing of the chosen codes into ggml blocks.
#include "ptq/grid.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/bits.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/element_codec.h"
#include "formats/gguf_blocks.h"
#include "formats/int_grid.h"
#include "formats/iq4nl.h"

namespace lowbit {

namespace {

// The level tables of the non-uniform grids, as floats: ggml's doubled E2M1 values (MXFP4, NVFP4) and
// IQ4_NL's non-linear table.
constexpr std::array<float, 16> as_levels(const int8_t (&values)[16]) {
    std::array<float, 16> out{};
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(values[i]);
    return out;
}
constexpr std::array<float, 16> kE2m1Doubled = as_levels(kMxfp4Doubled);
constexpr std::array<float, 16> kIq4nlLevels = as_levels(kIq4nlValues);

struct Traits {
    GridFormat format;
    const char* name;
    GgufType type;
    int64_t group;      // columns per affine map (int grids: from the spec)
    int max_code;       // int grids: from the spec
    bool has_offset;    // value = scale·(q − zero) + offset (else no offset term)
    const float* levels;
};

constexpr Traits kTraits[] = {
    {GridFormat::int_grid, "int", GgufType::F32, 0, 0, false, nullptr},
    {GridFormat::q4_0, "q4_0", GgufType::Q4_0, 32, 15, false, nullptr},
    {GridFormat::q4_1, "q4_1", GgufType::Q4_1, 32, 15, true, nullptr},
    {GridFormat::q5_0, "q5_0", GgufType::Q5_0, 32, 31, false, nullptr},
    {GridFormat::q5_1, "q5_1", GgufType::Q5_1, 32, 31, true, nullptr},
    {GridFormat::q8_0, "q8_0", GgufType::Q8_0, 32, 255, false, nullptr},
    {GridFormat::iq4_nl, "iq4_nl", GgufType::IQ4_NL, 32, 15, false, kIq4nlLevels.data()},
    {GridFormat::q2_k, "q2_k", GgufType::Q2_K, 16, 3, true, nullptr},
    {GridFormat::q3_k, "q3_k", GgufType::Q3_K, 16, 7, false, nullptr},
    {GridFormat::q4_k, "q4_k", GgufType::Q4_K, 32, 15, true, nullptr},
    {GridFormat::q5_k, "q5_k", GgufType::Q5_K, 32, 31, true, nullptr},
    {GridFormat::q6_k, "q6_k", GgufType::Q6_K, 16, 63, false, nullptr},
    {GridFormat::mxfp4, "mxfp4", GgufType::MXFP4, 32, 15, false, kE2m1Doubled.data()},
    {GridFormat::nvfp4, "nvfp4", GgufType::NVFP4, 16, 15, false, kE2m1Doubled.data()},
};

const Traits& traits(GridFormat f) {
    for (const Traits& t : kTraits)
        if (t.format == f) return t;
    fail(ErrorKind::runtime, "grid: unknown format id {}", int(f));
}

bool is_kquant_format(GridFormat f) {
    return f == GridFormat::q2_k || f == GridFormat::q3_k || f == GridFormat::q4_k || f == GridFormat::q5_k ||
           f == GridFormat::q6_k;
}

// The FP16 bits of a fitted scale: nearest even, saturating at ±65504, so that a grid keeps a finite scale
// where ggml's conversion (gguf_fp16_from_float, which writes the stored scales) would give Inf.
uint16_t fp16_scale_bits(float x) {
    return uint16_t(encode_element(element_spec(ElementType::fp16), x, Rounding::nearest_even, Overflow::saturate));
}
float round_fp16(float x) { return gguf_fp16_to_float(fp16_scale_bits(x)); }

// E8M0 exponent e with 2^(e−128) = the halved MXFP4 scale (ggml_e8m0_to_fp32_half), clamped to 1..254.
float mxfp4_half_scale(int e) {
    e = std::clamp(e, 1, 254);
    return bits_float(uint32_t(e - 1) << 23);
}
int mxfp4_exponent_of(float half_scale) { return int((float_bits(half_scale) >> 23) & 0xFF) + 1; }

// ggml NVFP4: UE4M3 sub-block scales with ggml's own encoder (so that RTN's min–max grid is ggml's reference
// quantizer), value = kvalues·(ue4m3/2). The codes the encoder gives back from their own value (not
// 0x78..0x7D, which it saturates to 0x7E) are the ones a grid may use: the packer re-encodes scales.
bool nvfp4_code_round_trips(int k) {
    return k >= 1 && k <= 0x7E && gguf_ue4m3_from_float(2.0f * gguf_ue4m3_half(uint8_t(k))) == k;
}

// Δ·H·Δᵀ for one vector Δ of n values (h with leading dimension ldh), in double.
double quadratic_form(const float* delta, int64_t n, const float* h, int64_t ldh) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (delta[i] == 0.0f) continue;
        double hi = 0.0;
        const float* row = h + i * ldh;
        for (int64_t j = 0; j < n; ++j) hi += double(row[j]) * double(delta[j]);
        s += double(delta[i]) * hi;
    }
    return s;
}

struct Scorer {
    GridSearch search;
    const float* h;  // n × n block of the group (ldh)
    int64_t ldh;
    // Error of quantizing w (n values) with grid p.
    double operator()(const GridSpec& g, const GroupGrid& p, const float* w, int64_t n, float* delta) const {
        for (int64_t j = 0; j < n; ++j) delta[j] = grid_value(g, p, grid_nearest(g, p, w[j])) - w[j];
        if (search == GridSearch::hessian && h) return quadratic_form(delta, n, h, ldh);
        double s = 0.0;
        if (search == GridSearch::mse)
            for (int64_t j = 0; j < n; ++j) s += std::pow(std::fabs(double(delta[j])), 2.4);
        else
            for (int64_t j = 0; j < n; ++j) s += double(delta[j]) * double(delta[j]);
        return s;
    }
};

// The candidates of one group, best first by the scorer; `make(p)` builds the grid of shrink factor p
// (or returns false to skip it). The unshrunk grid is always a candidate.
template <typename Make>
GroupGrid best_of_shrinks(const GridSpec& g, const float* w, int64_t n, const Scorer& score, int n_shrinks, Make make,
                          std::vector<float>& delta) {
    GroupGrid best{};
    double best_score = INFINITY;
    bool have = false;
    GroupGrid last{};
    for (int i = 0; i < n_shrinks; ++i) {
        const float p = 1.0f - float(i) / 100.0f;
        GroupGrid cand[2];
        const int nc = make(p, cand);
        for (int c = 0; c < nc; ++c) {
            if (have && cand[c].scale == last.scale && cand[c].zero == last.zero && cand[c].offset == last.offset)
                continue;  // the rounded scale did not change: same score
            last = cand[c];
            const double s = score(g, cand[c], w, n, delta.data());
            if (!have || s < best_score) {
                best = cand[c];
                best_score = s;
                have = true;
            }
        }
    }
    return best;
}

// min/max, signed max (largest |x|, first wins), absmax of n values.
struct Range {
    float lo = 0, hi = 0, signed_max = 0, amax = 0;
};
Range range_of(const float* w, int64_t n) {
    Range r{w[0], w[0], 0.0f, 0.0f};
    for (int64_t j = 0; j < n; ++j) {
        r.lo = std::min(r.lo, w[j]);
        r.hi = std::max(r.hi, w[j]);
        if (std::fabs(w[j]) > r.amax) {
            r.amax = std::fabs(w[j]);
            r.signed_max = w[j];
        }
    }
    return r;
}

// An int grid's range before shrinking (turboboa.md §1.1): it contains 0, is symmetric for sym grids, and
// [−1, 1] for an all-zero group.
struct IntRange {
    float lo, hi;
};
IntRange int_range(const GridSpec& g, const Range& r) {
    float lo = std::min(r.lo, 0.0f), hi = std::max(r.hi, 0.0f);
    if (g.sym) {
        hi = std::max(-lo, hi);
        if (lo < 0.0f) lo = -hi;
    }
    if (lo == 0.0f && hi == 0.0f) {
        lo = -1.0f;
        hi = 1.0f;
    }
    return {lo, hi};
}

// §1.3: 100 shrink factors p, each with the floor and the ceil zero (asym) or the middle zero (sym).
constexpr int kIntShrinks = 100;
int int_shrink_candidates(const GridSpec& g, const IntRange& ir, float p, GroupGrid* c) {
    const float maxq = float(g.max_code());
    const float lo = p * ir.lo, hi = p * ir.hi;
    const float scale = (hi - lo) / maxq;
    if (!(scale > 0.0f)) return 0;
    if (g.sym) {
        c[0] = {round_fp16(scale), (maxq + 1.0f) * 0.5f, 0.0f};
        return 1;
    }
    const float z = -lo / scale;
    c[0] = {round_fp16(scale), std::floor(z), 0.0f};
    c[1] = {round_fp16(scale), std::ceil(z), 0.0f};
    return 2;
}

// The Hessian-scored int grids of `rows` rows over one group of n columns (per channel: the whole row), the
// 200 candidates of §1.3 per row. Ties keep the earlier candidate, as best_of_shrinks does.
//
// With a scorer, every row's candidates are scored there at once as Σ (D·H_g) ⊙ D, D the stacked candidate errors.
// On the CPU, row by row and without forming D·H: a candidate's error is Δ = s·u − w with u = q − zero an integer
// vector (s is an FP16 number and |u| ≤ 255, so s·u is the FP32 grid value itself, exactly), hence
//     Δ·H·Δᵀ = s²·uᵀHu − s·uᵀ(H + Hᵀ)w + wᵀHw.
// (H + Hᵀ)w and wᵀHw are computed once per row, and uᵀHu = u·a with a = Hᵀu, which follows the previous candidate
// of the same zero rule (the floor zero and the ceil zero each form a chain over the 100 shrinks) through the rows
// of H at the positions where u changed — a few per cent of n per step at 2–4 bits (turboboa.md §10's
// "incremental ΔH") — so a row costs ~4·n² + 200·n·(changed positions) multiply-adds instead of 200·n². All in
// double from FP32 inputs (the products are exact, the sums carry ~1e-16 relative error): the scores are the
// quadratic forms of the true errors, where the stacked FP32 product rounds Δ and D·H to FP32.
// The hot loops below have an AVX2 clone chosen at load time where the CPU has it. They give the same bits as the
// baseline clone: elementwise IEEE operations, and sums in a fixed association (four interleaved partial sums).

// a[j] += d·row[j] for j < n.
__attribute__((target_clones("avx2", "default"))) void add_scaled_row(double* a, double d, const float* row, int64_t n) {
    for (int64_t j = 0; j < n; ++j) a[j] += d * double(row[j]);
}

// a[j] += da·row[j] and b[j] += db·row[j]: one read of H's row for both zero rules' chains.
__attribute__((target_clones("avx2", "default"))) void add_scaled_row2(double* a, double da, double* b, double db,
                                                                        const float* row, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        const double r = row[j];
        a[j] += da * r;
        b[j] += db * r;
    }
}

// u[j] = q − zero with q = grid_nearest(w[j]) on an int grid of a finite non-zero scale (inlined).
__attribute__((target_clones("avx2", "default"))) void int_offsets(const float* w, int64_t n, float scale, float zero,
                                                                   float maxq, int16_t* u) {
    for (int64_t j = 0; j < n; ++j)
        u[j] = int16_t(std::clamp(std::rint(std::clamp(w[j] / scale, -4096.0f, 4096.0f)) + zero, 0.0f, maxq) - zero);
}

// Σ u[j]·a[j] and Σ u[j]·b[j] in double.
__attribute__((target_clones("avx2", "default"))) void offset_dots(const int16_t* u, const double* a, const double* b,
                                                                   int64_t n, double* ua, double* ub) {
    double sa[4] = {0, 0, 0, 0}, sb[4] = {0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        for (int t = 0; t < 4; ++t) {
            sa[t] += double(u[j + t]) * a[j + t];
            sb[t] += double(u[j + t]) * b[j + t];
        }
    for (; j < n; ++j) {
        sa[0] += double(u[j]) * a[j];
        sb[0] += double(u[j]) * b[j];
    }
    *ua = (sa[0] + sa[1]) + (sa[2] + sa[3]);
    *ub = (sb[0] + sb[1]) + (sb[2] + sb[3]);
}

// Σ row[j]·w[j] in double.
__attribute__((target_clones("avx2", "default"))) double row_dot(const float* row, const float* w, int64_t n) {
    double s[4] = {0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        for (int t = 0; t < 4; ++t) s[t] += double(row[j + t]) * double(w[j + t]);
    for (; j < n; ++j) s[0] += double(row[j]) * double(w[j]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

struct RowScratch {
    std::vector<int16_t> u[2], next[2];
    std::vector<double> a[2], hw;
    std::vector<float> delta;
};

// Scores of one row's candidates (cand[s·per_shrink + k]: shrink s, zero rule k; valid where the shrink gave one).
void score_int_row(const GridSpec& g, const float* w, int64_t n, const float* h, int64_t ldh, const GroupGrid* cand,
                   const uint8_t* valid, int per_shrink, double* scores, RowScratch& rs) {
    rs.hw.assign(size_t(n), 0.0);
    double c0 = 0.0;  // wᵀHw
    for (int64_t i = 0; i < n; ++i) {
        const float* row = h + i * ldh;
        const double dot = row_dot(row, w, n);
        add_scaled_row(rs.hw.data(), double(w[i]), row, n);  // (Hᵀw)_j
        rs.hw[size_t(i)] += dot;                              // (Hw)_i
        c0 += double(w[i]) * dot;
    }
    const float maxq = float(g.max_code());
    bool live[2] = {false, false};
    for (int k = 0; k < per_shrink; ++k) {
        rs.u[k].resize(size_t(n));
        rs.next[k].resize(size_t(n));
        rs.a[k].resize(size_t(n));
    }
    for (int s = 0; s < kIntShrinks; ++s) {
        bool step[2] = {false, false};  // the chains this shrink continues
        for (int k = 0; k < per_shrink; ++k) {
            const int c = s * per_shrink + k;
            if (!valid[c]) {
                live[k] = false;
                continue;
            }
            const GroupGrid& p = cand[c];
            if (!(p.scale != 0.0f) || is_nan_or_inf(p.scale)) {  // no integer form: the direct quadratic form
                rs.delta.resize(size_t(n));
                for (int64_t j = 0; j < n; ++j) rs.delta[size_t(j)] = grid_value(g, p, grid_nearest(g, p, w[j])) - w[j];
                scores[c] = quadratic_form(rs.delta.data(), n, h, ldh);
                live[k] = false;
                continue;
            }
            int_offsets(w, n, p.scale, p.zero, maxq, rs.next[k].data());
            if (live[k]) {
                step[k] = true;
                continue;
            }
            double* a = rs.a[k].data();  // a new chain: a = Hᵀu from scratch
            std::fill(a, a + n, 0.0);
            const int16_t* u = rs.next[k].data();
            for (int64_t i = 0; i < n; ++i)
                if (u[i] != 0) add_scaled_row(a, double(u[i]), h + i * ldh, n);
            live[k] = true;
        }
        if (step[0] || step[1]) {  // a += Hᵀ(next − u) over the positions that changed, both chains per read of a row
            const int16_t *u0 = rs.u[0].data(), *n0 = rs.next[0].data();
            const int16_t *u1 = per_shrink > 1 ? rs.u[1].data() : nullptr, *n1 = per_shrink > 1 ? rs.next[1].data() : nullptr;
            for (int64_t i = 0; i < n; ++i) {
                const double d0 = step[0] ? double(n0[i] - u0[i]) : 0.0, d1 = step[1] ? double(n1[i] - u1[i]) : 0.0;
                if (d0 != 0.0 && d1 != 0.0) add_scaled_row2(rs.a[0].data(), d0, rs.a[1].data(), d1, h + i * ldh, n);
                else if (d0 != 0.0) add_scaled_row(rs.a[0].data(), d0, h + i * ldh, n);
                else if (d1 != 0.0) add_scaled_row(rs.a[1].data(), d1, h + i * ldh, n);
            }
        }
        for (int k = 0; k < per_shrink; ++k) {
            if (!live[k]) continue;
            rs.u[k].swap(rs.next[k]);
            double quad = 0.0, cross = 0.0;
            offset_dots(rs.u[k].data(), rs.a[k].data(), rs.hw.data(), n, &quad, &cross);
            const double sc = cand[s * per_shrink + k].scale;
            scores[s * per_shrink + k] = sc * sc * quad - sc * cross + c0;
        }
    }
}

void fit_int_groups(const GridSpec& g, const float* w, int64_t ldw, int64_t rows, int64_t n, const float* h,
                    int64_t ldh, const GridScorer* scorer, uint64_t h_id, GroupGrid* out, int64_t out_stride) {
    const int per_shrink = g.sym ? 1 : 2, per_row = kIntShrinks * per_shrink;
    // Kept across calls (GPTQ fits every span of every layer here). The worker threads below use the calling
    // thread's buffers (through these references; a thread_local named inside a lambda would be the worker's own).
    thread_local std::vector<GroupGrid> cand;
    thread_local std::vector<uint8_t> valid;
    thread_local std::vector<double> scores;
    const int64_t m = rows * per_row;
    cand.assign(size_t(m), GroupGrid{});
    valid.assign(size_t(m), 0);
    scores.assign(size_t(m), 0.0);
    std::vector<GroupGrid>& cand_ref = cand;
    std::vector<uint8_t>& valid_ref = valid;
    std::vector<double>& scores_ref = scores;
    parallel_for(rows, 1, [&](int64_t i0, int64_t i1) {
        RowScratch rs;
        for (int64_t i = i0; i < i1; ++i) {
            const float* wr = w + i * ldw;
            const IntRange ir = int_range(g, range_of(wr, n));
            GroupGrid* rc = cand_ref.data() + i * per_row;
            uint8_t* rv = valid_ref.data() + i * per_row;
            for (int s = 0; s < kIntShrinks; ++s) {
                GroupGrid c[2];
                const int nc = int_shrink_candidates(g, ir, 1.0f - float(s) / 100.0f, c);
                for (int k = 0; k < nc; ++k) {
                    rc[s * per_shrink + k] = c[k];
                    rv[s * per_shrink + k] = 1;
                }
            }
            if (!scorer) score_int_row(g, wr, n, h, ldh, rc, rv, per_shrink, scores_ref.data() + i * per_row, rs);
        }
    });
    if (scorer) scorer->score_int_candidates(g, w, ldw, rows, n, h, ldh, h_id, cand.data(), per_row, scores.data());
    for (int64_t i = 0; i < rows; ++i) {
        double best = INFINITY;
        GroupGrid pick{};
        for (int k = 0; k < per_row; ++k) {
            const int64_t at = i * per_row + k;
            if (valid[size_t(at)] && scores[size_t(at)] < best) {
                best = scores[size_t(at)];
                pick = cand[size_t(at)];
            }
        }
        out[i * out_stride] = pick;
    }
}

// One group of a single-map format (everything except the K-quants).
GroupGrid fit_group(const GridSpec& g, const float* w, int64_t n, const Scorer& score, std::vector<float>& delta) {
    const Range r = range_of(w, n);
    const bool search = g.search != GridSearch::minmax;
    switch (g.format) {
        case GridFormat::int_grid: {
            const IntRange ir = int_range(g, r);
            // Scales are rounded to FP16 (what GPTQ checkpoints store), so that an export is lossless.
            const IntGridParams base = int_grid_params(ir.lo, ir.hi, g.bits, g.sym);
            if (!search) return {round_fp16(base.scale), base.zero, 0.0f};
            return best_of_shrinks(g, w, n, score, kIntShrinks,
                                   [&](float p, GroupGrid* c) { return int_shrink_candidates(g, ir, p, c); }, delta);
        }
        case GridFormat::q4_0:
        case GridFormat::q5_0: {
            const float half_levels = g.format == GridFormat::q4_0 ? 8.0f : 16.0f;
            const auto make = [&](float p, GroupGrid* c) {
                c[0] = {round_fp16(p * r.signed_max / -half_levels), half_levels, 0.0f};
                return 1;
            };
            GroupGrid c[2];
            if (!search) return make(1.0f, c), c[0];
            return best_of_shrinks(g, w, n, score, 21, make, delta);
        }
        case GridFormat::q8_0: {
            const auto make = [&](float p, GroupGrid* c) {
                c[0] = {round_fp16(p * r.amax / 127.0f), 128.0f, 0.0f};
                return 1;
            };
            GroupGrid c[2];
            if (!search) return make(1.0f, c), c[0];
            return best_of_shrinks(g, w, n, score, 21, make, delta);
        }
        case GridFormat::q4_1:
        case GridFormat::q5_1: {
            const float maxq = float(g.max_code());
            const auto make = [&](float p, GroupGrid* c) {
                c[0] = {round_fp16(p * (r.hi - r.lo) / maxq), 0.0f, round_fp16(p * r.lo)};
                return 1;
            };
            GroupGrid c[2];
            if (!search) return make(1.0f, c), c[0];
            return best_of_shrinks(g, w, n, score, 21, make, delta);
        }
        case GridFormat::iq4_nl: {
            // ggml's quantize_iq4_nl search (what llama-quantize writes), importance = diag H when searching.
            float weights[kIq4nlBlock];
            const bool weighted = search && score.h;
            if (weighted)
                for (int64_t j = 0; j < n; ++j) weights[j] = std::max(0.0f, score.h[j * score.ldh + j]);
            return {gguf_fp16_to_float(iq4nl_fit(w, weighted ? weights : nullptr).d), 0.0f, 0.0f};
        }
        case GridFormat::mxfp4: {
            // OCP floor rule (ggml): e = floor(log2 amax) − 2 + 127; candidates e − 1 … e + 1 when searching.
            const int e0 = r.amax > 0.0f ? floor_log2(r.amax) - 2 + 127 : 0;
            const GroupGrid base{mxfp4_half_scale(e0), 0.0f, 0.0f};
            if (!search || r.amax == 0.0f) return base;
            GroupGrid best = base;
            double best_score = score(g, base, w, n, delta.data());
            for (int e : {e0 - 1, e0 + 1}) {
                const GroupGrid c{mxfp4_half_scale(e), 0.0f, 0.0f};
                const double s = score(g, c, w, n, delta.data());
                if (s < best_score) {
                    best = c;
                    best_score = s;
                }
            }
            return best;
        }
        case GridFormat::nvfp4: {
            const auto make = [&](float p, GroupGrid* c) {
                c[0] = {gguf_ue4m3_half(gguf_ue4m3_from_float(p * r.amax / 6.0f)), 0.0f, 0.0f};
                return 1;
            };
            GroupGrid c[2];
            if (!search) return make(1.0f, c), c[0];
            return best_of_shrinks(g, w, n, score, 21, make, delta);
        }
        default: fail(ErrorKind::runtime, "grid: fit_group called for {}", g.name());
    }
}

}  // namespace

// --- GridSpec ---

std::string GridSpec::name() const {
    if (format == GridFormat::int_grid) return "int" + std::to_string(bits);
    return traits(format).name;
}

std::string GridSpec::describe() const {
    if (format != GridFormat::int_grid) return name();
    return name() + (group ? " g" + std::to_string(group) : " per-channel") + (sym ? " sym" : " asym");
}

int64_t GridSpec::group_size(int64_t cols) const {
    if (format == GridFormat::int_grid) return group == 0 ? cols : group;
    return traits(format).group;
}

int64_t GridSpec::fit_span(int64_t cols) const {
    if (is_kquant_format(format)) return kQK_K;
    if (format == GridFormat::nvfp4) return 64;  // one GGUF block of four sub-blocks
    return group_size(cols);
}

int GridSpec::max_code() const {
    if (format == GridFormat::int_grid) return (1 << bits) - 1;
    return traits(format).max_code;
}

GgufType GridSpec::gguf_type() const {
    LOWBIT_CHECK(is_gguf(), ErrorKind::usage, "{} is not a GGUF block type (export it as safetensors)", describe());
    return traits(format).type;
}

double GridSpec::bits_per_weight(int64_t cols) const {
    if (format == GridFormat::int_grid) {
        const double g = double(group_size(cols));
        return double(bits) + (16.0 + (sym ? 0.0 : double(bits))) / g;  // FP16 scale (+ a b-bit zero)
    }
    const GgufTypeInfo* info = gguf_type_info(gguf_type());
    return 8.0 * double(info->block_bytes) / double(info->block_elements);
}

void GridSpec::check_cols(int64_t cols, const std::string& what) const {
    const int64_t span = fit_span(cols);
    LOWBIT_CHECK(span > 0 && cols % span == 0, ErrorKind::usage,
                 "{}: {} columns are not a multiple of {}'s block of {} (choose another format or group size)", what,
                 cols, describe(), span);
}

GridSpec parse_grid(const std::string& name, int64_t group, bool sym, GridSearch search) {
    GridSpec g;
    g.search = search;
    if (name.size() == 4 && name.rfind("int", 0) == 0 && name[3] >= '2' && name[3] <= '8') {
        g.format = GridFormat::int_grid;
        g.bits = name[3] - '0';
        LOWBIT_CHECK(group >= 0, ErrorKind::usage, "--group must be positive (0 = per channel), got {}", group);
        g.group = group;
        g.sym = sym;
        return g;
    }
    for (const Traits& t : kTraits) {
        if (t.format == GridFormat::int_grid || name != t.name) continue;
        LOWBIT_CHECK(group == 0 || group == t.group, ErrorKind::usage, "{} has a fixed block of {} (got --group {})",
                     t.name, t.group, group);
        g.format = t.format;
        g.bits = t.format == GridFormat::q8_0 ? 8 : 0;
        return g;
    }
    std::string names = "int2..int8";
    for (const Traits& t : kTraits)
        if (t.format != GridFormat::int_grid) names += std::string(", ") + t.name;
    fail(ErrorKind::usage, "unknown quantization format '{}' (known: {})", name, names);
}

GridSpec grid_of_gguf_type(GgufType type, GridSearch search) {
    for (const Traits& t : kTraits)
        if (t.format != GridFormat::int_grid && t.type == type) return parse_grid(t.name, 0, false, search);
    fail(ErrorKind::usage, "GGUF type {} is not a weight grid lowbit can solve for", gguf_type_label(type));
}

const char* grid_search_name(GridSearch s) {
    switch (s) {
        case GridSearch::minmax: return "minmax";
        case GridSearch::mse: return "mse";
        case GridSearch::hessian: return "hessian";
    }
    return "?";
}

bool parse_grid_search(const std::string& name, GridSearch* out) {
    for (GridSearch s : {GridSearch::minmax, GridSearch::mse, GridSearch::hessian})
        if (name == grid_search_name(s)) {
            *out = s;
            return true;
        }
    return false;
}

// --- values and codes ---

const float* grid_levels(const GridSpec& g) { return traits(g.format).levels; }
bool grid_has_offset(const GridSpec& g) { return traits(g.format).has_offset; }

float grid_value(const GridSpec& g, const GroupGrid& p, uint32_t q) {
    const Traits& t = traits(g.format);
    const float level = t.levels ? t.levels[q] : float(q);
    const float v = p.scale * (level - p.zero);
    return t.has_offset ? v + p.offset : v;
}

uint32_t grid_nearest(const GridSpec& g, const GroupGrid& p, float w) {
    const Traits& t = traits(g.format);
    const int maxq = g.max_code();
    if (t.levels) {
        uint32_t best = 0;
        float best_err = INFINITY;
        for (int q = 0; q <= maxq; ++q) {
            const float e = std::fabs(grid_value(g, p, uint32_t(q)) - w);
            if (e < best_err) {
                best_err = e;
                best = uint32_t(q);
            }
        }
        return best;
    }
    if (!(p.scale != 0.0f) || is_nan_or_inf(p.scale)) return uint32_t(std::clamp(int(p.zero), 0, maxq));
    const float x = t.has_offset ? (w - p.offset) / p.scale : w / p.scale;
    const float q = std::rint(std::clamp(x, -4096.0f, 4096.0f)) + p.zero;
    return uint32_t(std::clamp(q, 0.0f, float(maxq)));
}

// --- fitting ---

SpanGrids fit_span_grids(const GridSpec& g, const float* w, int64_t ldw, int64_t rows, int64_t n, const float* h,
                         int64_t ldh, const GridScorer* scorer, uint64_t h_id) {
    SpanGrids out;
    if (is_kquant_format(g.format)) {
        LOWBIT_CHECK(n == kQK_K, ErrorKind::runtime, "grid: K-quant span of {} columns", n);
        const GgufType type = g.gguf_type();
        const int subs = kquant_sub_blocks(type);
        out.grids.resize(size_t(rows * subs));
        out.kscales.resize(size_t(rows));
        std::vector<float> weights;
        if (g.search == GridSearch::hessian && h) {  // importance = diag H (what llama-imatrix collects)
            weights.resize(size_t(n));
            for (int64_t j = 0; j < n; ++j) weights[size_t(j)] = std::max(0.0f, h[j * ldh + j]);
        }
        parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const KQuantSuperBlock b = kquant_fit(type, w + r * ldw, weights.empty() ? nullptr : weights.data());
                out.kscales[size_t(r)] = b.s;
                for (int j = 0; j < subs; ++j) {
                    const KQuantSubGrid s = kquant_sub_grid(type, b.s, j);
                    out.grids[size_t(r * subs + j)] = {s.scale, s.zero, s.offset};
                }
            }
        });
        return out;
    }
    const int64_t group = g.format == GridFormat::nvfp4 ? 16 : g.group_size(n);
    LOWBIT_CHECK(n % group == 0, ErrorKind::runtime, "grid: span {} not a multiple of group {}", n, group);
    const int64_t per_row = n / group;
    out.grids.resize(size_t(rows * per_row));
    if (g.format == GridFormat::int_grid && g.search == GridSearch::hessian && h) {
        for (int64_t j = 0; j < per_row; ++j)
            fit_int_groups(g, w + j * group, ldw, rows, group, h + j * group * ldh + j * group, ldh, scorer, h_id,
                           out.grids.data() + j, per_row);
        return out;
    }
    parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
        std::vector<float> delta(static_cast<size_t>(group));
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t j = 0; j < per_row; ++j) {
                const Scorer score{g.search, h ? h + j * group * ldh + j * group : nullptr, ldh};
                out.grids[size_t(r * per_row + j)] = fit_group(g, w + r * ldw + j * group, group, score, delta);
            }
    });
    return out;
}

// --- scale candidates (F3 on constrained grids) ---

namespace {

// The code range of a K-quant sub-block scale and how the decoder turns code and d into the scale factor.
struct KScaleCode {
    int lo, hi, bias;  // value factor = d·(code − bias) (Q6_K: int8(code))
};
KScaleCode kscale_code_range(GridFormat f) {
    switch (f) {
        case GridFormat::q2_k: return {0, 15, 0};
        case GridFormat::q3_k: return {0, 63, 32};
        case GridFormat::q6_k: return {-128, 127, 0};
        default: return {0, 63, 0};  // Q4_K, Q5_K
    }
}

}  // namespace

void set_kquant_scale_code(KQuantScales& ks, int sub, int code) {
    ks.scale[sub] = uint8_t(int8_t(code));  // Q6_K stores int8 bits; the others 0..63 fit unchanged
}

std::vector<ScaleCandidate> scale_candidates(const GridSpec& g, const GroupGrid& p, const KQuantScales* ks, int sub,
                                             float target) {
    std::vector<ScaleCandidate> out;
    const auto with_scale = [&](float s) {
        GroupGrid q = p;
        q.scale = s;
        out.push_back({q, false, 0});
    };
    if (!std::isfinite(target)) return out;
    switch (g.format) {
        case GridFormat::int_grid:
        case GridFormat::q4_0:
        case GridFormat::q4_1:
        case GridFormat::q5_0:
        case GridFormat::q5_1:
        case GridFormat::q8_0:
        case GridFormat::iq4_nl: {
            const uint16_t h = fp16_scale_bits(target);
            with_scale(gguf_fp16_to_float(h));
            if ((h & 0x7FFF) < 0x7BFF) with_scale(gguf_fp16_to_float(uint16_t(h + 1)));  // the neighbour away from zero
            if ((h & 0x7FFF) > 0) with_scale(gguf_fp16_to_float(uint16_t(h - 1)));
            break;
        }
        case GridFormat::mxfp4: {
            if (!(target > 0.0f)) break;
            const int e = mxfp4_exponent_of(mxfp4_half_scale(floor_log2(target) + 128));
            for (int c : {e, e + 1}) with_scale(mxfp4_half_scale(c));
            break;
        }
        case GridFormat::nvfp4: {
            const uint8_t c = gguf_ue4m3_from_float(target * 2.0f);
            for (int k : {int(c) - 1, int(c), int(c) + 1})
                if (nvfp4_code_round_trips(k)) with_scale(gguf_ue4m3_half(uint8_t(k)));
            break;
        }
        default: {  // K-quants: scale = d·(code − bias)
            LOWBIT_CHECK(ks != nullptr, ErrorKind::runtime, "scale_candidates: K-quant without its scales");
            const float d = gguf_fp16_to_float(ks->d);
            if (!(d != 0.0f)) break;
            const KScaleCode r = kscale_code_range(g.format);
            const float t = target / d + float(r.bias);
            for (int code : {int(std::floor(t)), int(std::ceil(t))}) {
                code = std::clamp(code, r.lo, r.hi);
                KQuantScales tmp = *ks;
                set_kquant_scale_code(tmp, sub, code);
                const KQuantSubGrid sg = kquant_sub_grid(g.gguf_type(), tmp, sub);
                out.push_back({{sg.scale, sg.zero, sg.offset}, true, code});
            }
        }
    }
    return out;
}

// --- QuantizedWeight ---

std::vector<float> QuantizedWeight::dequantize() const {
    std::vector<float> out(size_t(rows * cols));
    const int64_t group = spec.group_size(cols), per_row = cols / group;
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < cols; ++c)
                out[size_t(r * cols + c)] =
                    grid_value(spec, grids[size_t(r * per_row + c / group)], codes[size_t(r * cols + c)]);
    });
    return out;
}

std::vector<uint8_t> QuantizedWeight::gguf_bytes() const {
    const GgufTypeInfo* info = gguf_type_info(spec.gguf_type());
    const int64_t be = info->block_elements, bb = info->block_bytes;
    LOWBIT_CHECK(cols % be == 0, ErrorKind::usage, "{} columns are not a multiple of {}'s block of {}", cols, info->name, be);
    const int64_t blocks_per_row = cols / be, group = spec.group_size(cols), per_row = cols / group;
    std::vector<uint8_t> out(size_t(rows * blocks_per_row * bb));
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t b = 0; b < blocks_per_row; ++b) {
                uint8_t* dst = out.data() + (r * blocks_per_row + b) * bb;
                const uint8_t* q = codes.data() + r * cols + b * be;
                const GroupGrid& p = grids[size_t(r * per_row + b * be / group)];
                // The FP16 scales and minima were fitted as FP16 values: ggml's conversion stores them unchanged.
                switch (spec.format) {
                    case GridFormat::q4_0: {
                        auto* y = reinterpret_cast<BlockQ4_0*>(dst);
                        y->d = gguf_fp16_from_float(p.scale);
                        gguf_pack_nibbles32(q, y->qs);
                        break;
                    }
                    case GridFormat::iq4_nl: {
                        Iq4nlBlock y;
                        y.d = gguf_fp16_from_float(p.scale);
                        std::memcpy(y.q, q, sizeof(y.q));
                        iq4nl_pack(y, dst);
                        break;
                    }
                    case GridFormat::q4_1: {
                        auto* y = reinterpret_cast<BlockQ4_1*>(dst);
                        y->d = gguf_fp16_from_float(p.scale);
                        y->m = gguf_fp16_from_float(p.offset);
                        gguf_pack_nibbles32(q, y->qs);
                        break;
                    }
                    case GridFormat::q5_0: {
                        auto* y = reinterpret_cast<BlockQ5_0*>(dst);
                        y->d = gguf_fp16_from_float(p.scale);
                        gguf_pack_q5_codes(q, y->qh, y->qs);
                        break;
                    }
                    case GridFormat::q5_1: {
                        auto* y = reinterpret_cast<BlockQ5_1*>(dst);
                        y->d = gguf_fp16_from_float(p.scale);
                        y->m = gguf_fp16_from_float(p.offset);
                        gguf_pack_q5_codes(q, y->qh, y->qs);
                        break;
                    }
                    case GridFormat::q8_0: {
                        auto* y = reinterpret_cast<BlockQ8_0*>(dst);
                        y->d = gguf_fp16_from_float(p.scale);
                        for (int j = 0; j < 32; ++j) y->qs[j] = int8_t(int(q[j]) - 128);
                        break;
                    }
                    case GridFormat::mxfp4: {
                        auto* y = reinterpret_cast<BlockMxfp4*>(dst);
                        y->e = uint8_t(mxfp4_exponent_of(p.scale));
                        gguf_pack_nibbles32(q, y->qs);
                        break;
                    }
                    case GridFormat::nvfp4:
                        for (int s = 0; s < 4; ++s) {
                            const GroupGrid& ps = grids[size_t(r * per_row + b * 4 + s)];
                            dst[s] = gguf_ue4m3_from_float(ps.scale * 2.0f);
                            for (int j = 0; j < 8; ++j)
                                dst[4 + 8 * s + j] = uint8_t((q[16 * s + j] & 0xF) | (q[16 * s + j + 8] & 0xF) << 4);
                        }
                        break;
                    default: {  // K-quants
                        KQuantSuperBlock kb;
                        kb.s = kscales[size_t(r * blocks_per_row + b)];
                        std::memcpy(kb.q, q, size_t(kQK_K));
                        kquant_pack(info->type, kb, dst);
                    }
                }
            }
    });
    return out;
}

QuantizedWeight quantize_rtn(const GridSpec& g, const float* w, int64_t rows, int64_t cols, const float* h,
                             const GridScorer* scorer) {
    g.check_cols(cols, "quantize");
    QuantizedWeight qw;
    qw.spec = g;
    qw.rows = rows;
    qw.cols = cols;
    qw.codes.resize(size_t(rows * cols));
    const int64_t span = g.fit_span(cols), group = g.group_size(cols);
    const int64_t per_row = cols / group, per_span = span / group;
    qw.grids.resize(size_t(rows * per_row));
    const bool kq = is_kquant_format(g.format);
    if (kq) qw.kscales.resize(size_t(rows * (cols / span)));
    for (int64_t s0 = 0; s0 < cols; s0 += span) {
        SpanGrids sg = fit_span_grids(g, w + s0, cols, rows, span, h ? h + s0 * cols + s0 : nullptr, cols, scorer);
        for (int64_t r = 0; r < rows; ++r) {
            std::copy_n(sg.grids.begin() + r * per_span, per_span, qw.grids.begin() + r * per_row + s0 / group);
            if (kq) qw.kscales[size_t(r * (cols / span) + s0 / span)] = sg.kscales[size_t(r)];
        }
    }
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < cols; ++c)
                qw.codes[size_t(r * cols + c)] =
                    uint8_t(grid_nearest(g, qw.grids[size_t(r * per_row + c / group)], w[r * cols + c]));
    });
    return qw;
}

}  // namespace lowbit
