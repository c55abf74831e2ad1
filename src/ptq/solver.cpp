// solver.cpp — RTN, GPTQ (lazy column sweep), BoA/TurboBoA row blocks (F1, F2, F3a) and the coordinate-
// descent scale refinement (F3b); FP64 inverse Cholesky with the damping retry (turboboa.md §2–4).
#include "ptq/solver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/thread_pool.h"
#include "core/wall_clock.h"

extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
}

namespace lowbit {

namespace {

using Clock = WallClock;

// In place: lower Cholesky in LAPACK's column-major view = row-major upper U with A = UᵀU.
bool cholesky_upper_rowmajor(std::vector<double>& a, int64_t n) {
    const int nn = int(n);
    int info = 0;
    dpotrf_("L", &nn, a.data(), &nn, &info);
    if (info != 0) return false;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) a[size_t(i * n + j)] = 0.0;  // row-major lower part: not referenced
    return true;
}

}  // namespace

void SolverDevice::rh_product(uint64_t id, ConstMatF a, MatF c) const {
    (void)a, (void)c;
    fail(ErrorKind::usage, "{}: no RH kept for input {} (this device keeps none)", name(), id);
}

void solver_gemm(const SolverDevice* device, ConstMatF a, Trans ta, ConstMatF b, Trans tb, MatF c, float beta) {
    if (device)
        device->gemm(a, ta, b, tb, c, beta);
    else
        gemm_f32(a, ta, b, tb, c, beta);
}

void scale_refine_products(const ScaleRefineProducts& c, const SolverDevice* device) {
    if (device && device->scale_refine_products(c)) return;
    const int64_t rows = c.rows, cols = c.cols, hd = c.hd;
    std::vector<float> a(size_t(rows * cols)), zh(size_t(rows * cols));
    for (int64_t r0 = 0; r0 < rows; r0 += c.hin_rows) {
        const int64_t at = (r0 / c.hin_rows) * cols * cols;
        const MatF ar(a.data() + r0 * cols, c.hin_rows, cols);
        solver_gemm(device, ConstMatF(c.diff + r0 * cols, c.hin_rows, cols), Trans::no, ConstMatF(c.h_in + at, cols, cols),
                    Trans::no, ar);
        if (c.d)  // A += W·D
            solver_gemm(device, ConstMatF(c.w + r0 * cols, c.hin_rows, cols), Trans::no, ConstMatF(c.d + at, cols, cols),
                        Trans::no, ar, 1.0f);
        solver_gemm(device, ConstMatF(c.z + r0 * cols, c.hin_rows, cols), Trans::no, ConstMatF(c.h_in + at, cols, cols),
                    Trans::no, MatF(zh.data() + r0 * cols, c.hin_rows, cols));
    }
    if (hd == 1) {
        parallel_for(rows, 64, [&](int64_t i0, int64_t i1) {
            for (int64_t r = i0; r < i1; ++r) {
                double sn = 0.0, sg = 0.0;
                for (int64_t k = r * cols; k < (r + 1) * cols; ++k) {
                    sn += double(c.z[k]) * double(a[size_t(k)]);
                    sg += double(c.z[k]) * double(zh[size_t(k)]);
                }
                c.n[r] = sn;
                c.g[r] = sg;
            }
        });
        return;
    }
    std::vector<float> nm(size_t(hd * hd)), gm(size_t(hd * hd));
    for (int64_t head = 0; head < rows / hd; ++head) {
        const ConstMatF zj(c.z + head * hd * cols, hd, cols);
        solver_gemm(device, zj, Trans::no, ConstMatF(a.data() + head * hd * cols, hd, cols), Trans::yes, MatF(nm.data(), hd, hd));
        solver_gemm(device, zj, Trans::no, ConstMatF(zh.data() + head * hd * cols, hd, cols), Trans::yes, MatF(gm.data(), hd, hd));
        std::copy(nm.begin(), nm.end(), c.n + head * hd * hd);
        std::copy(gm.begin(), gm.end(), c.g + head * hd * hd);
    }
}

InverseCholesky inverse_cholesky(const float* h, int64_t n, double damping, float dead_value, const std::string& what,
                                 const SolverDevice* device, bool want_h_inv, uint64_t factor_id, bool want_u) {
    InverseCholesky out;
    out.dead.assign(size_t(n), 0);
    std::atomic<int64_t> first_bad{n * n};  // the scan of a large H runs on our threads
    parallel_for(n, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * n; i < r1 * n; ++i)
            if (!std::isfinite(h[i])) {
                int64_t prev = first_bad.load();
                while (i < prev && !first_bad.compare_exchange_weak(prev, i)) {
                }
                return;
            }
    });
    const int64_t bad = first_bad.load();
    LOWBIT_CHECK(bad == n * n, ErrorKind::input, "{}: the Hessian holds NaN/Inf (element {}, {}); the "
                 "calibration activations overflowed", what, bad / n, bad % n);
    double mean_diag = 0.0;
    for (int64_t j = 0; j < n; ++j) {
        const double djj = h[j * n + j] == 0.0f ? double(dead_value) : double(h[j * n + j]);
        out.dead[size_t(j)] = h[j * n + j] == 0.0f;
        mean_diag += djj;
    }
    mean_diag /= double(n);
    if (!(mean_diag > 0.0)) mean_diag = 1.0;
    std::vector<double> a(device ? 0 : size_t(n * n));  // one buffer for every attempt (a large H is gigabytes)
    for (int attempt = 0; attempt <= 50; ++attempt) {
        const double damp = damping * double(attempt + 1) * mean_diag;
        if (device) {
            const bool u_on_host = want_u || !device->keeps_factors() || factor_id == 0;
            if (!device->inverse_cholesky_upper(h, n, out.dead, dead_value, damp, u_on_host ? &out.u : nullptr,
                                                want_h_inv ? &out.h_inv : nullptr, factor_id))
                continue;
            out.damping = damping * double(attempt + 1);
            out.retries = attempt;
            return out;
        }
        parallel_for(n, 64, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i)
                for (int64_t j = 0; j < n; ++j) a[size_t(i * n + j)] = double(h[i * n + j]);
        });
        for (int64_t j = 0; j < n; ++j)
            a[size_t(j * n + j)] = (out.dead[size_t(j)] ? double(dead_value) : double(h[j * n + j])) + damp;
        if (!cholesky_upper_rowmajor(a, n)) continue;
        const int nn = int(n);
        int info = 0;
        dpotri_("L", &nn, a.data(), &nn, &info);  // H⁻¹ in the row-major upper triangle
        if (info != 0) continue;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < i; ++j) a[size_t(i * n + j)] = a[size_t(j * n + i)];
        if (want_h_inv) out.h_inv = a;
        if (!cholesky_upper_rowmajor(a, n)) continue;
        out.u.resize(size_t(n * n));
        for (int64_t i = 0; i < n * n; ++i) out.u[size_t(i)] = float(a[size_t(i)]);
        out.damping = damping * double(attempt + 1);
        out.retries = attempt;
        return out;
    }
    fail(ErrorKind::input, "{}: the Hessian stays singular after 51 damping steps of {}% (a layer whose inputs are "
         "all zero or collinear; more or different calibration text may help)", what, damping * 100.0);
}

namespace {

bool is_kquant_grid(const GridSpec& g) {
    return g.format == GridFormat::q2_k || g.format == GridFormat::q3_k || g.format == GridFormat::q4_k ||
           g.format == GridFormat::q5_k || g.format == GridFormat::q6_k;
}

QuantizedWeight empty_result(const GridSpec& g, int64_t rows, int64_t cols) {
    QuantizedWeight q;
    q.spec = g;
    q.rows = rows;
    q.cols = cols;
    q.codes.assign(size_t(rows * cols), 0);
    q.grids.assign(size_t(rows * (cols / g.group_size(cols))), GroupGrid{});
    if (is_kquant_grid(g)) q.kscales.assign(size_t(rows * (cols / kQK_K)), KQuantScales{});
    return q;
}

// Fits the grids of rows [row0, row0 + n) of `out` for the span starting at column s0 from w (n rows of
// leading dimension ldw, w pointing at column s0) and the Hessian block at (s0, s0) of h (ldh; h_id names
// h for the device's cache, 0: none). `device` (null: the CPU) scores the grid search's candidates.
void fit_rows_span(QuantizedWeight& out, int64_t row0, int64_t n, int64_t s0, const float* w, int64_t ldw,
                   const float* h, int64_t ldh, const SolverDevice* device, uint64_t h_id) {
    const GridSpec& g = out.spec;
    const int64_t span = g.fit_span(out.cols), group = g.group_size(out.cols);
    const int64_t per_row = out.cols / group, per_span = span / group;
    SpanGrids sg = fit_span_grids(g, w, ldw, n, span, h, ldh, device ? device->grid_scorer() : nullptr, h_id);
    for (int64_t r = 0; r < n; ++r) {
        std::copy_n(sg.grids.begin() + r * per_span, per_span, out.grids.begin() + (row0 + r) * per_row + s0 / group);
        if (!sg.kscales.empty()) out.kscales[size_t((row0 + r) * (out.cols / span) + s0 / span)] = sg.kscales[size_t(r)];
    }
}

// The column sweep of GPTQ over n rows (row-major, leading dimension cols; a scratch copy: the CPU leaves the
// rows' last compensated values in it, a device need not write them back). Columns are visited in `order`
// (act-order permutation; identity otherwise); u, p are in that order too. Codes go to out rows
// [row0, row0 + n) at the original columns. Grids: when `fit_at_group`, each span's grids are fitted from the rows' current values when the
// sweep reaches the span (h = H_in in original order); otherwise they must already be in `out`.
// With p (F2, GPTAQ): W[:, c:] −= e⊗U[c, c:] − w_c⊗P[c, c:], w_c the column's pre-quantization value.
// p_kept: the device holds P (and u) of input_id; u and p are then null.
double sweep_rows(float* w, int64_t n, int64_t cols, const float* u, const float* p, bool p_kept, uint64_t input_id,
                  const std::vector<int64_t>& order, bool fit_at_group, const float* h, int64_t lazy_block,
                  QuantizedWeight& out, int64_t row0, const SolverDevice* device) {
    const GridSpec& g = out.spec;
    const int64_t span = g.fit_span(cols), group = g.group_size(cols), per_row = cols / group;
    int64_t block = std::max<int64_t>(1, lazy_block);
    if (fit_at_group && span < block) block = std::max<int64_t>(span, block / span * span);  // spans inside blocks
    // Spans that start in [i1, i2), from the current values (all updates so far).
    const auto fit_block = [&](int64_t i1, int64_t i2) {
        for (int64_t s0 = (i1 + span - 1) / span * span; s0 < i2; s0 += span)
            fit_rows_span(out, row0, n, s0, w + s0, cols, h + s0 * cols + s0, cols, device, input_id);
    };
    if (device) {
        SweepCall call;
        call.w = w;
        call.n = n;
        call.cols = cols;
        call.block = block;
        call.row0 = row0;
        call.u = u;
        call.p = p;
        call.p_kept = p_kept;
        call.input_id = input_id;
        call.order = &order;
        call.out = &out;
        if (fit_at_group) call.fit_block = fit_block;
        return device->sweep(call);
    }
    std::vector<float> err(size_t(n * block)), pre(p ? size_t(n * block) : 0);
    std::vector<double> loss_rows(size_t(n), 0.0);
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
        const int64_t i2 = std::min(cols, i1 + block), nb = i2 - i1;
        if (fit_at_group) fit_block(i1, i2);
        parallel_for(n, 1, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                float* row = w + r * cols;
                float* er = err.data() + r * nb;
                float* pr = p ? pre.data() + r * nb : nullptr;
                double loss = 0.0;
                for (int64_t c = i1; c < i2; ++c) {
                    const int64_t oc = order[size_t(c)];
                    const GroupGrid& gg = out.grids[size_t((row0 + r) * per_row + oc / group)];
                    const float x = row[c];
                    const uint32_t q = grid_nearest(g, gg, x);
                    out.codes[size_t((row0 + r) * cols + oc)] = uint8_t(q);
                    const float qv = grid_value(g, gg, q);
                    const float d = u[c * cols + c];
                    const float e = (x - qv) / d;
                    loss += double(x - qv) * double(x - qv) / (double(d) * double(d)) * 0.5;
                    const float* uc = u + c * cols;
                    if (p) {
                        const float* pc = p + c * cols;
                        for (int64_t j = c + 1; j < i2; ++j) row[j] -= e * uc[j] - x * pc[j];
                        pr[c - i1] = x;
                    } else {
                        for (int64_t j = c + 1; j < i2; ++j) row[j] -= e * uc[j];
                    }
                    row[c] = qv;
                    er[c - i1] = -e;
                }
                loss_rows[size_t(r)] += loss;
            }
        });
        if (i2 < cols) {  // the lazy update of the columns after the block: one GEMM (two with F2)
            const MatF rest(w + i2, n, cols - i2, cols);
            gemm_f32(ConstMatF(err.data(), n, nb), Trans::no, ConstMatF(u + i1 * cols + i2, nb, cols - i2, cols),
                     Trans::no, rest, 1.0f);
            if (p)
                gemm_f32(ConstMatF(pre.data(), n, nb), Trans::no, ConstMatF(p + i1 * cols + i2, nb, cols - i2, cols),
                         Trans::no, rest, 1.0f);
        }
    }
    return std::accumulate(loss_rows.begin(), loss_rows.end(), 0.0);
}

// Permutes a square matrix: out[i][j] = a[order[i]][order[j]].
std::vector<float> permute_square(const float* a, int64_t n, const std::vector<int64_t>& order) {
    std::vector<float> out(size_t(n * n));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) out[size_t(i * n + j)] = a[order[size_t(i)] * n + order[size_t(j)]];
    return out;
}

}  // namespace

// One input side (H_in, and F2's D) prepared for sweeps: dead columns, damping, act-order, chol_U(H⁻¹),
// GPTAQ's P = triu₁(D·Uᵀ)·U and, for row blocks, RH = D·H⁻¹ — all in sweep order.
struct InputSide {
    std::vector<int64_t> order;  // sweep position → original column
    InverseCholesky chol;
    std::vector<float> u;        // chol.u in sweep order; empty when the solver device keeps it
    std::vector<float> p;        // empty without D, or when terms_kept
    std::vector<float> rh;       // D·H⁻¹ in original order (row blocks with F2), else empty; empty when terms_kept
    bool terms_kept = false;     // P (and RH) live on the solver device (SolverDevice::keep_gptaq_terms)
    bool has_rh = false;         // RH was made (here or on the device)
    const float* h = nullptr;    // H_in in original order (grid fitting)
    uint64_t id = 0;             // names (u, p) for a SolverDevice's cache
};

namespace {

uint64_t next_input_id() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
}

InputSide prepare_input_uncached(const float* h, const float* d, int64_t n, const SolverOptions& o, bool need_rh,
                                 const std::string& what) {
    InputSide s;
    s.h = h;
    s.id = next_input_id();
    s.order.resize(size_t(n));
    std::iota(s.order.begin(), s.order.end(), int64_t(0));
    if (o.sweep.act_order)
        std::stable_sort(s.order.begin(), s.order.end(),
                         [&](int64_t a, int64_t b) { return h[a * n + a] > h[b * n + b]; });
    const bool permuted = o.sweep.act_order;
    const std::vector<float> hp = permuted ? permute_square(h, n, s.order) : std::vector<float>();
    LOWBIT_CHECK(!(d && need_rh && permuted), ErrorKind::usage, "{}: act-order is not supported with F2 row blocks", what);
    // A device that keeps its factors makes F2's terms from them itself: nothing n × n crosses the bus. Else the
    // host forms them from U (and H⁻¹) with the device's products.
    const bool device_terms = o.device && o.device->keeps_factors();
    s.chol = inverse_cholesky(permuted ? hp.data() : h, n, o.damping, o.dead_value, what, o.device,
                              d && need_rh && !device_terms, s.id, d != nullptr && !device_terms);
    s.u = std::move(s.chol.u);  // chol.u is not read again
    if (d && device_terms) {
        LOWBIT_CHECK(o.device->keep_gptaq_terms(s.id, d, n, s.order, s.chol.dead, need_rh), ErrorKind::runtime,
                     "{}: solver device {} keeps factors but not their GPTAQ terms", what, o.device->name());
        s.terms_kept = true;
        s.has_rh = need_rh;
    } else if (d) {
        // D in sweep order with dead columns zeroed; P = triu₁(D·Uᵀ)·U.
        std::vector<float> dp(size_t(n * n));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
                dp[size_t(i * n + j)] = s.chol.dead[size_t(j)] ? 0.0f : d[s.order[size_t(i)] * n + s.order[size_t(j)]];
        std::vector<float> dut(size_t(n * n));
        solver_gemm(o.device, ConstMatF(dp.data(), n, n), Trans::no, ConstMatF(s.u.data(), n, n), Trans::yes,
                    MatF(dut.data(), n, n));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j <= i; ++j) dut[size_t(i * n + j)] = 0.0f;  // strictly upper part only
        s.p.resize(size_t(n * n));
        solver_gemm(o.device, ConstMatF(dut.data(), n, n), Trans::no, ConstMatF(s.u.data(), n, n), Trans::no,
                    MatF(s.p.data(), n, n));
        if (need_rh) {
            s.has_rh = true;
            std::vector<float> hinv(s.chol.h_inv.begin(), s.chol.h_inv.end());
            s.rh.resize(size_t(n * n));
            solver_gemm(o.device, ConstMatF(dp.data(), n, n), Trans::no, ConstMatF(hinv.data(), n, n), Trans::no,
                        MatF(s.rh.data(), n, n));
        }
    }
    return s;
}

// The input side of (h, d) from o.factor_cache when an earlier layer prepared it with the same options.
std::shared_ptr<const InputSide> prepare_input(const float* h, const float* d, int64_t n, const SolverOptions& o,
                                               bool need_rh, const std::string& what) {
    if (!o.factor_cache) return std::make_shared<const InputSide>(prepare_input_uncached(h, d, n, o, need_rh, what));
    const std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}", static_cast<const void*>(h), static_cast<const void*>(d),
                                        n, o.sweep.act_order, o.damping, o.dead_value, need_rh);
    std::shared_ptr<const InputSide>& slot = (*o.factor_cache)[key];
    if (!slot) slot = std::make_shared<const InputSide>(prepare_input_uncached(h, d, n, o, need_rh, what));
    return slot;
}

// Rows in sweep order: a copy of rows [r0, r0 + n) of w with columns permuted.
std::vector<float> rows_in_order(const float* w, int64_t r0, int64_t n, int64_t cols, const std::vector<int64_t>& order) {
    std::vector<float> out(size_t(n * cols));
    parallel_for(n, 16, [&](int64_t i0, int64_t i1) {  // a large layer's rows are hundreds of MB
        for (int64_t r = i0; r < i1; ++r)
            for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = w[(r0 + r) * cols + order[size_t(c)]];
    });
    return out;
}

// Fits every span of rows [r0, r0 + n) from w (original order) — static groups / fixed grids.
void fit_rows_up_front(QuantizedWeight& out, const float* w, int64_t r0, int64_t n, const float* h,
                       const SolverDevice* device, uint64_t h_id) {
    const int64_t cols = out.cols, span = out.spec.fit_span(cols);
    for (int64_t s0 = 0; s0 < cols; s0 += span)
        fit_rows_span(out, r0, n, s0, w + r0 * cols + s0, cols, h ? h + s0 * cols + s0 : nullptr, cols, device, h_id);
}

// How a sweep gets its grids: fitted when the sweep reaches each span (GPTQ), all fitted from the sweep's
// input first (static groups, TurboBoA), or already in `out` (fixed grids, row blocks).
enum class GridFit { at_group, from_input, given };

// A one-sided GPTQ/GPTAQ solve of rows [r0, r0 + n) of `w` (the sweep's input, original order).
double solve_rows_one_sided(const float* w, int64_t r0, int64_t n, const InputSide& in, const SolverOptions& o,
                            GridFit fit, QuantizedWeight& out) {
    const int64_t cols = out.cols;
    if (fit == GridFit::from_input) fit_rows_up_front(out, w, r0, n, in.h, o.device, in.id);
    std::vector<float> work = rows_in_order(w, r0, n, cols, in.order);
    return sweep_rows(work.data(), n, cols, in.u.empty() ? nullptr : in.u.data(), in.p.empty() ? nullptr : in.p.data(),
                      in.terms_kept, in.id, in.order, fit == GridFit::at_group, in.h, o.sweep.lazy_block, out, r0,
                      o.device);
}

void check_problem(const LayerProblem& p, bool needs_hessian) {
    LOWBIT_CHECK(p.w && p.rows > 0 && p.cols > 0, ErrorKind::usage, "{}: empty layer", p.name);
    if (!needs_hessian) return;
    LOWBIT_CHECK(p.h_in || p.h_in_heads, ErrorKind::usage, "{}: no input Hessian", p.name);
    if (p.h_in_heads || p.h_out)
        LOWBIT_CHECK(p.head_rows > 0 && p.rows % p.head_rows == 0, ErrorKind::usage,
                     "{}: {} rows are not whole heads of {}", p.name, p.rows, p.head_rows);
}

// One coordinate-descent step of F3b on the scale of (row, group gi), given the objective's linear and
// quadratic coefficients in that scale (change = −2·Δ·num + Δ²·den): the best candidate on the format's
// scale grid near scale + num/den, taken only when it lowers the objective. Returns the step taken (0: none).
double refine_step(QuantizedWeight& q, int64_t row, int64_t gi, double num, double den) {
    const GridSpec& g = q.spec;
    const int64_t cols = q.cols, group = g.group_size(cols), per_row = cols / group, span = g.fit_span(cols);
    const int64_t c0 = gi * group;
    const bool kq = is_kquant_grid(g);
    GroupGrid& gg = q.grids[size_t(row * per_row + gi)];
    const double step = num / den;
    KQuantScales* ks = kq ? &q.kscales[size_t(row * (cols / span) + c0 / span)] : nullptr;
    const int sub = kq ? int((c0 % span) / group) : 0;
    const std::vector<ScaleCandidate> cands = scale_candidates(g, gg, ks, sub, float(double(gg.scale) + step));
    double best_change = 0.0;
    int best = -1;
    for (size_t ci = 0; ci < cands.size(); ++ci) {
        const double dlt = double(cands[ci].grid.scale) - double(gg.scale);
        const double change = -2.0 * dlt * num + dlt * dlt * den;
        if (change < best_change) {
            best_change = change;
            best = int(ci);
        }
    }
    if (best < 0) return 0.0;
    const double dlt = double(cands[size_t(best)].grid.scale) - double(gg.scale);
    if (dlt == 0.0) return 0.0;
    if (cands[size_t(best)].has_kquant_code) set_kquant_scale_code(*ks, sub, cands[size_t(best)].kquant_code);
    gg = cands[size_t(best)].grid;
    return dlt;
}

// F3b: coordinate descent on every (row, group) scale with the codes fixed (turboboa.md §4.5, extended to
// groups). For a row j and group g with Z = level(q) − zero on the group's columns:
//   Δs = [ Σ_k H_out[j,k] ((W − Q)_k H_in Zᵀ + (W D)_k Zᵀ) ] / (H_out[j,j] · Z H_in Zᵀ)
// The objective changes by −2·Δ·num + Δ²·den; on constrained scale grids the best projected candidate is
// taken only when that change is negative (refine_step).
//
// One-sided layers (H_out = I) with grids in groups (per channel: refine_scales_per_channel): rows are
// independent, and within a row the groups couple only through
// M[g][g'] = Z_g·H_in[g, g']·Z_g'ᵀ. So (W − Q)·H_in and W·D are formed once, M by one product per group
// (group_gram: ZH_g = Z[:, g]·H_in[g, :], then its dot products with Z), and the descent runs on
// num_g = ((W − Q)·H_in + W·D)_g·Z_gᵀ − Σ_g' Δ_g'·M[g'][g] (Δ: the steps taken so far) — O(rows·cols²) in
// products (on the solver device) instead of a scalar loop. Rows go in chunks so that M stays ≤ 2^26 entries.
void refine_scales_one_sided(const LayerProblem& p, const SolverOptions& o, QuantizedWeight& q) {
    const GridSpec& g = q.spec;
    const int64_t rows = p.rows, cols = p.cols, group = g.group_size(cols), per_row = cols / group;
    const float* levels = grid_levels(g);
    const int64_t hin_rows = p.h_in_heads ? p.head_rows : rows;  // rows sharing one H_in (and D)
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(hin_rows, (int64_t(1) << 26) / (per_row * per_row)));
    std::vector<float> z, diff, a, b, zh;
    std::vector<double> m;
    for (int64_t h0 = 0; h0 < rows; h0 += hin_rows) {
        const float* hin = p.h_in_heads ? p.h_in_heads + (h0 / p.head_rows) * cols * cols : p.h_in;
        const float* dm = p.d ? (p.h_in_heads ? p.d + (h0 / p.head_rows) * cols * cols : p.d) : nullptr;
        for (int64_t r0 = h0; r0 < h0 + hin_rows; r0 += chunk) {
            const int64_t n = std::min(chunk, h0 + hin_rows - r0);
            z.resize(size_t(n * cols));
            diff.resize(size_t(n * cols));
            parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
                for (int64_t r = i0; r < i1; ++r)
                    for (int64_t c = 0; c < cols; ++c) {
                        const uint32_t code = q.codes[size_t((r0 + r) * cols + c)];
                        const GroupGrid& gg = q.grids[size_t((r0 + r) * per_row + c / group)];
                        z[size_t(r * cols + c)] = (levels ? levels[code] : float(code)) - gg.zero;
                        diff[size_t(r * cols + c)] = p.w[(r0 + r) * cols + c] - grid_value(g, gg, code);
                    }
            });
            a.resize(size_t(n * cols));
            b.assign(size_t(n * cols), 0.0f);
            solver_gemm(o.device, ConstMatF(diff.data(), n, cols), Trans::no, ConstMatF(hin, cols, cols), Trans::no,
                        MatF(a.data(), n, cols));
            if (dm)
                solver_gemm(o.device, ConstMatF(p.w + r0 * cols, n, cols), Trans::no, ConstMatF(dm, cols, cols), Trans::no,
                            MatF(b.data(), n, cols));
            m.assign(size_t(n * per_row * per_row), 0.0);
            zh.resize(size_t(n * cols));
            for (int64_t gi = 0; gi < per_row; ++gi) {  // M[r][gi][·] from ZH_gi = Z[:, gi]·H_in[gi, :]
                solver_gemm(o.device, ConstMatF(z.data() + gi * group, n, group, cols), Trans::no,
                            ConstMatF(hin + gi * group * cols, group, cols), Trans::no, MatF(zh.data(), n, cols));
                parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
                    for (int64_t r = i0; r < i1; ++r)
                        for (int64_t gj = 0; gj < per_row; ++gj) {
                            double s = 0.0;
                            for (int64_t t = 0; t < group; ++t)
                                s += double(zh[size_t(r * cols + gj * group + t)]) * double(z[size_t(r * cols + gj * group + t)]);
                            m[size_t((r * per_row + gi) * per_row + gj)] = s;
                        }
                });
            }
            parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
                std::vector<double> num0(static_cast<size_t>(per_row)), taken(static_cast<size_t>(per_row));
                for (int64_t r = i0; r < i1; ++r) {
                    const double* mr = m.data() + r * per_row * per_row;
                    for (int64_t gi = 0; gi < per_row; ++gi) {
                        double s = 0.0;
                        for (int64_t t = 0; t < group; ++t) {
                            const size_t at = size_t(r * cols + gi * group + t);
                            s += (double(a[at]) + double(b[at])) * double(z[at]);
                        }
                        num0[size_t(gi)] = s;
                    }
                    std::fill(taken.begin(), taken.end(), 0.0);
                    for (int iter = 0; iter < o.refine_iters; ++iter)
                        for (int64_t gi = 0; gi < per_row; ++gi) {
                            const double den = mr[gi * per_row + gi];
                            if (!(den > 0.0)) continue;  // all-zero Z, or a dead group
                            double num = num0[size_t(gi)];
                            for (int64_t gj = 0; gj < per_row; ++gj) num -= taken[size_t(gj)] * mr[gj * per_row + gi];
                            taken[size_t(gi)] += refine_step(q, r0 + r, gi, num, den);
                        }
                }
            });
        }
    }
}

// Per-channel grids (one scale per row), one- and two-sided: the descent of refine_scales below in products. With
// Z = level(q) − zero, A = (W − Q)·H_in + W·D and ZH = Z·H_in, a step Δ_k on row k's scale moves A_k by −Δ_k·ZH_k,
// so row j's numerator Σ_k H_out[j,k]·A_k·Z_jᵀ is Σ_k H_out[j,k]·(N[j,k] − taken_k·G[k,j]) with, per head,
// N = Z·Aᵀ and G = Z·ZHᵀ (hd × hd; one-sided layers: H_out = I, every row its own head of one), and its
// denominator H_out[j,j]·G[j,j]. So the O(hd·cols²) per head of the row-by-row loop becomes the rows × cols × cols
// products of scale_refine_products (on the solver device, which may form N and G there: only they come back),
// and the descent itself runs on hd × hd numbers per head.
void refine_scales_per_channel(const LayerProblem& p, const SolverOptions& o, QuantizedWeight& q) {
    const GridSpec& g = q.spec;
    const int64_t rows = p.rows, cols = p.cols, hd = p.h_out ? p.head_rows : 1, heads = rows / hd;
    const float* levels = grid_levels(g);
    std::vector<float> z(size_t(rows * cols)), diff(size_t(rows * cols));
    parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const GroupGrid& gg = q.grids[size_t(r)];
            for (int64_t c = 0; c < cols; ++c) {
                const uint32_t code = q.codes[size_t(r * cols + c)];
                z[size_t(r * cols + c)] = (levels ? levels[code] : float(code)) - gg.zero;
                diff[size_t(r * cols + c)] = p.w[r * cols + c] - grid_value(g, gg, code);
            }
        }
    });
    std::vector<double> nm(size_t(heads * hd * hd)), gm(size_t(heads * hd * hd));
    ScaleRefineProducts call;
    call.z = z.data();
    call.diff = diff.data();
    call.w = p.w;
    call.rows = rows;
    call.cols = cols;
    call.hd = hd;
    call.hin_rows = p.h_in_heads ? p.head_rows : rows;
    call.h_in = p.h_in_heads ? p.h_in_heads : p.h_in;
    call.d = p.d;
    call.n = nm.data();
    call.g = gm.data();
    scale_refine_products(call, o.device);
    parallel_for(heads, 1, [&](int64_t h0, int64_t h1) {
        std::vector<double> taken(static_cast<size_t>(hd));
        for (int64_t head = h0; head < h1; ++head) {
            const float* hout = p.h_out ? p.h_out + head * hd * hd : nullptr;
            const double* n = nm.data() + head * hd * hd;   // n[j * hd + k] = Z_j·A_kᵀ
            const double* gr = gm.data() + head * hd * hd;  // gr[j * hd + k] = Z_j·ZH_kᵀ
            std::fill(taken.begin(), taken.end(), 0.0);
            for (int iter = 0; iter < o.refine_iters; ++iter)
                for (int64_t j = 0; j < hd; ++j) {
                    const double den = (hout ? double(hout[j * hd + j]) : 1.0) * gr[j * hd + j];
                    if (!(den > 0.0)) continue;  // all-zero Z, or a dead row
                    double num = 0.0;
                    for (int64_t k = 0; k < hd; ++k) {
                        const double hk = hout ? double(hout[j * hd + k]) : 1.0;
                        if (hk != 0.0) num += hk * (n[j * hd + k] - taken[size_t(k)] * gr[j * hd + k]);
                    }
                    taken[size_t(j)] += refine_step(q, head * hd + j, 0, num, den);
                }
        }
    });
}

// F3b: per-channel grids go to refine_scales_per_channel, one-sided layers with groups to refine_scales_one_sided;
// two-sided layers with groups are refined here, head by head, coupled by H_out within a head of hd rows.
void refine_scales(const LayerProblem& p, const SolverOptions& o, QuantizedWeight& q) {
    if (q.groups_per_row() == 1) return refine_scales_per_channel(p, o, q);
    if (!p.h_out) return refine_scales_one_sided(p, o, q);
    const GridSpec& g = q.spec;
    const int64_t rows = p.rows, cols = p.cols, group = g.group_size(cols), per_row = cols / group;
    const int64_t hd = p.head_rows;
    const float* levels = grid_levels(g);
    // a = (W − Q)·H_in and b = W·D for every row.
    std::vector<float> a(size_t(rows * cols)), b(size_t(rows * cols), 0.0f), diff(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            diff[size_t(r * cols + c)] =
                p.w[r * cols + c] - grid_value(g, q.grids[size_t(r * per_row + c / group)], q.codes[size_t(r * cols + c)]);
    solver_gemm(o.device, ConstMatF(diff.data(), rows, cols), Trans::no, ConstMatF(p.h_in, cols, cols), Trans::no,
                MatF(a.data(), rows, cols));
    if (p.d)
        solver_gemm(o.device, ConstMatF(p.w, rows, cols), Trans::no, ConstMatF(p.d, cols, cols), Trans::no,
                    MatF(b.data(), rows, cols));
    parallel_for(rows / hd, 1, [&](int64_t h0, int64_t h1) {
        for (int64_t head = h0; head < h1; ++head) {
            const int64_t r0 = head * hd;
            const float* hout = p.h_out + head * hd * hd;
            std::vector<float> z(static_cast<size_t>(group)), zh(static_cast<size_t>(cols));
            for (int iter = 0; iter < o.refine_iters; ++iter)
                for (int64_t j = 0; j < hd; ++j)
                    for (int64_t gi = 0; gi < per_row; ++gi) {
                        const int64_t c0 = gi * group, row = r0 + j;
                        const GroupGrid& gg = q.grids[size_t(row * per_row + gi)];
                        bool any = false;
                        for (int64_t t = 0; t < group; ++t) {
                            const uint32_t code = q.codes[size_t(row * cols + c0 + t)];
                            z[size_t(t)] = (levels ? levels[code] : float(code)) - gg.zero;
                            any |= z[size_t(t)] != 0.0f;
                        }
                        if (!any) continue;
                        // zh = Z H_in (over all columns), den = H_out[j,j]·Z H_in Zᵀ.
                        std::fill(zh.begin(), zh.end(), 0.0f);
                        for (int64_t t = 0; t < group; ++t) {
                            const float zt = z[size_t(t)];
                            if (zt == 0.0f) continue;
                            const float* hrow = p.h_in + (c0 + t) * cols;
                            for (int64_t c = 0; c < cols; ++c) zh[size_t(c)] += zt * hrow[c];
                        }
                        double zhz = 0.0;
                        for (int64_t t = 0; t < group; ++t) zhz += double(zh[size_t(c0 + t)]) * double(z[size_t(t)]);
                        const double den = double(hout[j * hd + j]) * zhz;
                        if (!(den > 0.0)) continue;
                        double num = 0.0;
                        for (int64_t k = 0; k < hd; ++k) {
                            const double hk = double(hout[j * hd + k]);
                            if (hk == 0.0) continue;
                            double s = 0.0;
                            const int64_t rk = (r0 + k) * cols + c0;
                            for (int64_t t = 0; t < group; ++t)
                                s += (double(a[size_t(rk + t)]) + double(b[size_t(rk + t)])) * double(z[size_t(t)]);
                            num += hk * s;
                        }
                        const double dlt = refine_step(q, row, gi, num, den);
                        if (dlt == 0.0) continue;
                        // a_j = (W − Q)_j H_in loses dlt·Z H_in (the other rows of the head did not move).
                        const float fd = float(dlt);
                        float* aj = a.data() + row * cols;
                        for (int64_t c = 0; c < cols; ++c) aj[c] -= fd * zh[size_t(c)];
                    }
        }
    });
}

}  // namespace

QuantizedWeight solve_rtn(const LayerProblem& p, const GridSpec& g, SolveStats* stats, const SolverDevice* device) {
    check_problem(p, false);
    g.check_cols(p.cols, p.name);
    QuantizedWeight q = quantize_rtn(g, p.w, p.rows, p.cols, g.search == GridSearch::hessian ? p.h_in : nullptr,
                                     device ? device->grid_scorer() : nullptr);
    if (stats) *stats = SolveStats{};
    return q;
}

QuantizedWeight solve_gptq(const LayerProblem& p, const SolverOptions& o, SolveStats* stats) {
    check_problem(p, true);
    o.grid.check_cols(p.cols, p.name);
    QuantizedWeight q = empty_result(o.grid, p.rows, p.cols);
    const bool up_front = o.sweep.grids_up_front || o.sweep.act_order;
    SolveStats st;
    const int64_t heads = p.h_in_heads ? p.rows / p.head_rows : 1;
    const int64_t rows_per = p.h_in_heads ? p.head_rows : p.rows;
    for (int64_t hh = 0; hh < heads; ++hh) {
        const int64_t n2 = p.cols * p.cols;
        const float* h = p.h_in_heads ? p.h_in_heads + hh * n2 : p.h_in;
        const float* d = p.d ? (p.h_in_heads ? p.d + hh * n2 : p.d) : nullptr;
        const Clock::time_point tf = Clock::now();
        const std::shared_ptr<const InputSide> side = prepare_input(h, d, p.cols, o, false, p.name);
        const InputSide& in = *side;
        st.factor_seconds += seconds_since(tf);
        // Dead inputs: their weights are zeroed before the sweep (they never reach the output), in a copy made
        // only when there are any (the sweep takes its own copy of the rows anyway).
        const float* w = p.w + hh * rows_per * p.cols;
        std::vector<float> w_live;
        if (std::find(in.chol.dead.begin(), in.chol.dead.end(), uint8_t(1)) != in.chol.dead.end()) {
            w_live.assign(w, w + rows_per * p.cols);
            for (int64_t c = 0; c < p.cols; ++c)
                if (in.chol.dead[size_t(c)])
                    for (int64_t r = 0; r < rows_per; ++r) w_live[size_t(r * p.cols + c)] = 0.0f;
            w = w_live.data();
        }
        // One H_in for all rows: the sweep writes q itself; per head: a head's part, copied in below.
        QuantizedWeight part = heads == 1 ? QuantizedWeight{} : empty_result(o.grid, rows_per, p.cols);
        QuantizedWeight& dst = heads == 1 ? q : part;
        const Clock::time_point ts = Clock::now();
        st.loss += solve_rows_one_sided(w, 0, rows_per, in, o, up_front ? GridFit::from_input : GridFit::at_group, dst);
        st.sweep_seconds += seconds_since(ts);
        st.damping = std::max(st.damping, in.chol.damping);
        st.retries = std::max(st.retries, in.chol.retries);
        st.dead += int64_t(std::count(in.chol.dead.begin(), in.chol.dead.end(), uint8_t(1)));
        if (heads == 1) continue;
        const int64_t gpr = part.groups_per_row();
        std::copy(part.codes.begin(), part.codes.end(), q.codes.begin() + hh * rows_per * p.cols);
        std::copy(part.grids.begin(), part.grids.end(), q.grids.begin() + hh * rows_per * gpr);
        std::copy(part.kscales.begin(), part.kscales.end(), q.kscales.begin() + hh * int64_t(part.kscales.size()));
    }
    if (stats) *stats = st;
    return q;
}

namespace {

// act_order_row's order (turboboa.md §3.4, §4.2): for each head h, its rows [h·hd, (h+1)·hd) by descending
// diag(H_out[h]), stably (ties keep their order). order[h·hd + i] = the row within head h swept at position i.
std::vector<int64_t> row_act_order(const LayerProblem& p) {
    const int64_t hd = p.head_rows, heads = p.rows / hd;
    std::vector<int64_t> order(size_t(p.rows));
    for (int64_t head = 0; head < heads; ++head) {
        const float* h = p.h_out + head * hd * hd;
        for (int64_t j = 0; j < hd; ++j)  // a NaN would break the sort's ordering
            LOWBIT_CHECK(std::isfinite(h[j * hd + j]), ErrorKind::input, "{} (H_out of head {}): the Hessian holds "
                         "NaN/Inf (diagonal element {}); the calibration activations overflowed", p.name, head, j);
        const auto first = order.begin() + head * hd;
        std::iota(first, first + hd, int64_t(0));
        std::stable_sort(first, first + hd, [&](int64_t a, int64_t b) { return h[a * hd + a] > h[b * hd + b]; });
    }
    return order;
}

// The two-sided solve with act_order_row, as a wrapper: W's rows and both indices of every H_out[h] permuted into
// row_act_order's order, that problem solved by the one two-sided path (so a SolverDevice only ever sees ordinary
// host arrays), and every row-indexed part of the result — codes, grids, K-quant sub-scales — put back at its
// original row. H_in and D are indexed by columns only (two-sided layers take one shared H_in and D), so they stay
// as they are and the factorization cache still serves them. Costs one copy of W and of H_out.
QuantizedWeight solve_two_sided_act_order_row(const LayerProblem& p, const SolverOptions& o, SolveStats* stats) {
    const int64_t rows = p.rows, cols = p.cols, hd = p.head_rows, heads = rows / hd;
    const std::vector<int64_t> order = row_act_order(p);
    std::vector<float> w(size_t(rows * cols)), h_out(size_t(heads * hd * hd));
    for (int64_t head = 0; head < heads; ++head) {
        const std::vector<int64_t> in_head(order.begin() + head * hd, order.begin() + (head + 1) * hd);
        const std::vector<float> hp = permute_square(p.h_out + head * hd * hd, hd, in_head);
        std::copy(hp.begin(), hp.end(), h_out.begin() + head * hd * hd);
        for (int64_t i = 0; i < hd; ++i)
            std::copy_n(p.w + (head * hd + in_head[size_t(i)]) * cols, cols, w.begin() + (head * hd + i) * cols);
    }
    LayerProblem permuted = p;
    permuted.w = w.data();
    permuted.h_out = h_out.data();
    SolverOptions plain = o;
    plain.act_order_row = false;
    const QuantizedWeight qp = solve_turboboa(permuted, plain, stats);
    QuantizedWeight q = qp;
    const int64_t gpr = qp.groups_per_row(), kpr = int64_t(qp.kscales.size()) / rows;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t orig = r / hd * hd + order[size_t(r)];
        std::copy_n(qp.codes.begin() + r * cols, cols, q.codes.begin() + orig * cols);
        std::copy_n(qp.grids.begin() + r * gpr, gpr, q.grids.begin() + orig * gpr);
        std::copy_n(qp.kscales.begin() + r * kpr, kpr, q.kscales.begin() + orig * kpr);
    }
    return q;
}

}  // namespace

QuantizedWeight solve_turboboa(const LayerProblem& p, const SolverOptions& o, SolveStats* stats) {
    if (!p.h_out) {  // one-sided layers: GPTAQ sweep with TurboBoA's grid (+ F3b)
        SolverOptions one = o;
        // Grids from the sweep's input W (static groups, turboboa.md §4.5), unless asked to fit them at each group.
        one.sweep.grids_up_front |= o.one_sided_static_groups || !o.adaptive_grid;
        SolveStats st;
        QuantizedWeight q = solve_gptq(p, one, &st);
        const Clock::time_point tr = Clock::now();
        if (o.refine_scales) refine_scales(p, o, q);
        st.refine_seconds = seconds_since(tr);
        if (stats) *stats = st;
        return q;
    }
    check_problem(p, true);
    LOWBIT_CHECK(p.h_in, ErrorKind::usage, "{}: two-sided layers take one shared H_in", p.name);
    o.grid.check_cols(p.cols, p.name);
    if (o.act_order_row) return solve_two_sided_act_order_row(p, o, stats);
    const int64_t rows = p.rows, cols = p.cols, hd = p.head_rows, heads = rows / hd;
    const int64_t nblk = std::max<int64_t>(1, o.row_block);
    QuantizedWeight q = empty_result(o.grid, rows, cols);
    SolverOptions so = o;
    const Clock::time_point tf = Clock::now();
    const std::shared_ptr<const InputSide> side = prepare_input(p.h_in, p.d, cols, so, p.d != nullptr, p.name);
    const InputSide& in = *side;
    SolveStats st;
    st.factor_seconds = seconds_since(tf);
    const Clock::time_point ts = Clock::now();
    st.damping = in.chol.damping;
    st.retries = in.chol.retries;
    st.dead = int64_t(std::count(in.chol.dead.begin(), in.chol.dead.end(), uint8_t(1)));
    std::vector<float> wu(p.w, p.w + rows * cols);  // the row-compensated weights
    for (int64_t c = 0; c < cols; ++c)
        if (in.chol.dead[size_t(c)])
            for (int64_t r = 0; r < rows; ++r) wu[size_t(r * cols + c)] = 0.0f;
    if (!o.adaptive_grid) fit_rows_up_front(q, wu.data(), 0, rows, p.h_in, o.device, in.id);  // fixed grids from the original W
    for (int64_t head = 0; head < heads; ++head) {
        const InverseCholesky out_side =
            inverse_cholesky(p.h_out + head * hd * hd, hd, o.damping, o.dead_value, p.name + " (H_out)", nullptr, false);
        st.retries = std::max(st.retries, out_side.retries);
        const std::vector<float>& uo = out_side.u;
        for (int64_t r1 = 0; r1 < hd; r1 += nblk) {
            const int64_t r2 = std::min(hd, r1 + nblk), nb = r2 - r1, row0 = head * hd + r1, rest = hd - r2;
            const std::vector<float> before(wu.begin() + row0 * cols, wu.begin() + (row0 + nb) * cols);
            if (o.adaptive_grid) fit_rows_up_front(q, wu.data(), row0, nb, p.h_in, o.device, in.id);  // F3a: from the compensated rows
            st.loss += solve_rows_one_sided(wu.data(), row0, nb, in, so, GridFit::given, q);
            if (rest == 0) continue;
            // E = (W_B − Q_B) [+ W_B·D·H⁻¹], W_B the rows before their own sweep (Prop. 3.1/3.2).
            std::vector<float> e(size_t(nb * cols));
            for (int64_t b = 0; b < nb; ++b)
                for (int64_t c = 0; c < cols; ++c)
                    e[size_t(b * cols + c)] = before[size_t(b * cols + c)] -
                                              grid_value(q.spec, q.grid(row0 + b, c), q.codes[size_t((row0 + b) * cols + c)]);
            if (in.terms_kept && in.has_rh)
                o.device->rh_product(in.id, ConstMatF(before.data(), nb, cols), MatF(e.data(), nb, cols));
            else if (in.has_rh)
                solver_gemm(o.device, ConstMatF(before.data(), nb, cols), Trans::no, ConstMatF(in.rh.data(), cols, cols),
                            Trans::no, MatF(e.data(), nb, cols), 1.0f);
            // T = Uout[B,B]⁻¹·Uout[B, R] (nb × rest, in double), so that ΔW_R = −Tᵀ·E.
            std::vector<double> inv(size_t(nb * nb), 0.0);  // upper-triangular inverse by back substitution
            for (int64_t j = 0; j < nb; ++j) {
                inv[size_t(j * nb + j)] = 1.0 / double(uo[(r1 + j) * hd + r1 + j]);
                for (int64_t i = j - 1; i >= 0; --i) {
                    double s = 0.0;
                    for (int64_t k = i + 1; k <= j; ++k) s += double(uo[(r1 + i) * hd + r1 + k]) * inv[size_t(k * nb + j)];
                    inv[size_t(i * nb + j)] = -s / double(uo[(r1 + i) * hd + r1 + i]);
                }
            }
            std::vector<float> t(size_t(nb * rest));
            for (int64_t b = 0; b < nb; ++b)
                for (int64_t i = 0; i < rest; ++i) {
                    double s = 0.0;
                    for (int64_t k = b; k < nb; ++k) s += inv[size_t(b * nb + k)] * double(uo[(r1 + k) * hd + r2 + i]);
                    t[size_t(b * rest + i)] = float(-s);
                }
            gemm_f32(ConstMatF(t.data(), nb, rest), Trans::yes, ConstMatF(e.data(), nb, cols), Trans::no,
                     MatF(wu.data() + (head * hd + r2) * cols, rest, cols), 1.0f);
        }
    }
    st.sweep_seconds = seconds_since(ts);
    const Clock::time_point tr = Clock::now();
    if (o.refine_scales) refine_scales(p, o, q);
    st.refine_seconds = seconds_since(tr);
    if (stats) *stats = st;
    return q;
}

LayerObjective layer_objective_and_scale(const LayerProblem& p, const std::vector<float>& q, const SolverDevice* device) {
    LayerObjective on_device;
    if (device && device->layer_objective(p, q.data(), &on_device.objective, &on_device.scale)) return on_device;
    const int64_t rows = p.rows, cols = p.cols;
    const int64_t hd = p.h_out ? p.head_rows : 1;
    const int64_t hin_rows = p.h_in_heads ? p.head_rows : rows;  // rows sharing one H_in (and D)
    std::vector<float> dw(size_t(rows * cols)), nd(p.d ? size_t(rows * cols) : 0);
    for (int64_t i = 0; i < rows * cols; ++i) dw[size_t(i)] = q[size_t(i)] - p.w[i];
    // Per group of rows sharing H_in, one product of the stacked [ΔW; W] with H_in: M = ΔW·H_in and
    // MW = W·H_in; and N = W·D.
    std::vector<float> stacked(size_t(2 * hin_rows * cols)), prod(size_t(2 * hin_rows * cols));
    std::vector<float> m(size_t(rows * cols)), mw(size_t(rows * cols));
    for (int64_t r0 = 0; r0 < rows; r0 += hin_rows) {
        const float* hin = p.h_in_heads ? p.h_in_heads + (r0 / p.head_rows) * cols * cols : p.h_in;
        std::copy_n(dw.data() + r0 * cols, hin_rows * cols, stacked.data());
        std::copy_n(p.w + r0 * cols, hin_rows * cols, stacked.data() + hin_rows * cols);
        solver_gemm(device, ConstMatF(stacked.data(), 2 * hin_rows, cols), Trans::no, ConstMatF(hin, cols, cols), Trans::no,
                    MatF(prod.data(), 2 * hin_rows, cols));
        std::copy_n(prod.data(), hin_rows * cols, m.data() + r0 * cols);
        std::copy_n(prod.data() + hin_rows * cols, hin_rows * cols, mw.data() + r0 * cols);
        if (p.d) {
            const float* dm = p.h_in_heads ? p.d + (r0 / p.head_rows) * cols * cols : p.d;
            solver_gemm(device, ConstMatF(p.w + r0 * cols, hin_rows, cols), Trans::no, ConstMatF(dm, cols, cols),
                        Trans::no, MatF(nd.data() + r0 * cols, hin_rows, cols));
        }
    }
    // Σ_head Σ_{j,k} H_out[j,k]·(M_k − 2·N_k)·ΔW_jᵀ and Σ H_out[j,k]·MW_k·W_jᵀ (H_out = I for one-sided
    // layers), in double, head by head on our threads.
    const int64_t heads = rows / hd;
    std::vector<double> obj(size_t(heads), 0.0), scale(size_t(heads), 0.0);
    parallel_for(heads, 1, [&](int64_t h0, int64_t h1) {
        for (int64_t head = h0; head < h1; ++head)
            for (int64_t j = 0; j < hd; ++j)
                for (int64_t k = 0; k < hd; ++k) {
                    const double hjk = p.h_out ? double(p.h_out[head * hd * hd + j * hd + k]) : 1.0;
                    if (hjk == 0.0) continue;
                    const int64_t rj = (head * hd + j) * cols, rk = (head * hd + k) * cols;
                    double s = 0.0, t = 0.0;
                    for (int64_t c = 0; c < cols; ++c) {
                        s += (double(m[size_t(rk + c)]) - (p.d ? 2.0 * double(nd[size_t(rk + c)]) : 0.0)) *
                             double(dw[size_t(rj + c)]);
                        t += double(mw[size_t(rk + c)]) * double(p.w[rj + c]);
                    }
                    obj[size_t(head)] += hjk * s;
                    scale[size_t(head)] += hjk * t;
                }
    });
    return {std::accumulate(obj.begin(), obj.end(), 0.0), std::accumulate(scale.begin(), scale.end(), 0.0)};
}

double layer_objective(const LayerProblem& p, const std::vector<float>& q, const SolverDevice* device) {
    return layer_objective_and_scale(p, q, device).objective;
}

}  // namespace lowbit
