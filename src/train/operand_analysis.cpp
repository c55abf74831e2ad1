// operand_analysis.cpp — `lowbit analyze model`'s library half: patterns, plan, per-strategy error and INT8-window
// census of every block GEMM of one forward and backward (operand_analysis.h).
#include "train/operand_analysis.h"

#include <cmath>
#include <limits>
#include <memory>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "model/linear.h"
#include "train/param_layout.h"
#include "train/train_model.h"

namespace lowbit {

namespace {

bool census_applies(const LpMatmulOptions& lp, int64_t k) {
    return !lp.nvfp4 && lp.element == MxElement::e2m1 && lp.quantize && k % 32 == 0;
}

WindowCensus window_census_of(const PreparedOperand& a, const PreparedOperand& b, int64_t m, int64_t k, int64_t n, int binades) {
    const Int8WindowCensus ca = int8_window_census(a.codes.data(), a.scales.data(), m, k, true, binades);
    const Int8WindowCensus cb_tile = int8_window_census(b.codes.data(), b.scales.data(), n, k, false, binades);
    const Int8WindowCensus cb_line = int8_window_census(b.codes.data(), b.scales.data(), n, k, true, binades);
    WindowCensus w;
    w.a_outside = ca.outside();
    w.a_two_planes = ca.with_two_planes();
    w.a_units = ca.tiles * ca.chunks;
    w.b_tile_outside = cb_tile.outside();
    w.b_line_outside = cb_line.outside();
    w.b_tile_two_planes = cb_tile.with_two_planes();
    w.b_line_two_planes = cb_line.with_two_planes();
    w.b_units = cb_tile.tiles * cb_tile.chunks;
    w.pairs = ca.tiles * cb_tile.tiles * ca.chunks;
    w.slow_pairs_tile = int8_window_slow_pairs(ca, cb_tile);
    w.slow_pairs_line = int8_window_slow_pairs(ca, cb_line);
    return w;
}

// Dense row-major copy check: the analysis hands raw pointers to lp_prepare.
void check_dense(ConstMatF m, const char* what) {
    LOWBIT_CHECK(m.dense(), ErrorKind::usage, "operand analysis: {} must be a dense matrix view", what);
}

// The analysis linear: FP32 products (DenseTrainLinear), and at the weight gradient, where X, dY and (from the
// forward) W are at hand, the analysis of the projection's three slots.
class AnalysedTrainLinear final : public TrainLinear {
public:
    using Analyse = std::function<void(ConstMatF x, ConstMatF w, ConstMatF dy)>;
    explicit AnalysedTrainLinear(Analyse analyse) : analyse_(std::move(analyse)) {}
    void forward(ConstMatF x, ConstMatF w, MatF y, float beta) override {
        w_ = w;
        dense_.forward(x, w, y, beta);
    }
    void backward_data(ConstMatF dy, ConstMatF w, MatF dx, float beta) override { dense_.backward_data(dy, w, dx, beta); }
    void backward_weight(ConstMatF dy, ConstMatF x, MatF dw, float beta) override {
        LOWBIT_CHECK(w_.data != nullptr, ErrorKind::usage, "operand analysis: backward before forward");
        analyse_(x, w_, dy);
        dense_.backward_weight(dy, x, dw, beta);
    }
    std::string describe() const override { return "analysed dense"; }

private:
    DenseTrainLinear dense_;
    Analyse analyse_;
    ConstMatF w_;
};

}  // namespace

double relative_frobenius_error(const float* c_s, const float* c, size_t n) {
    double err2 = 0, norm2 = 0;
    for (size_t j = 0; j < n; ++j) {
        const double d = double(c_s[j]) - c[j];
        err2 += d * d;
        norm2 += double(c[j]) * c[j];
    }
    return norm2 > 0 ? std::sqrt(err2 / norm2) : (err2 > 0 ? std::numeric_limits<double>::infinity() : 0.0);
}

WindowCensus& WindowCensus::operator+=(const WindowCensus& c) {
    a_outside += c.a_outside;
    a_units += c.a_units;
    b_tile_outside += c.b_tile_outside;
    b_line_outside += c.b_line_outside;
    a_two_planes += c.a_two_planes;
    b_tile_two_planes += c.b_tile_two_planes;
    b_line_two_planes += c.b_line_two_planes;
    b_units += c.b_units;
    pairs += c.pairs;
    slow_pairs_tile += c.slow_pairs_tile;
    slow_pairs_line += c.slow_pairs_line;
    return *this;
}

SlotAnalysis analyze_slot(Slot slot, const float* a, const float* b, int64_t m, int64_t k, int64_t n,
                          std::pair<Pattern, Pattern> pair, Strategy planned, const OperandAnalysisOptions& opts,
                          const std::function<void(size_t strategy, const float* c_s, const float* c)>& observe) {
    SlotAnalysis s;
    s.slot = slot;
    s.m = m;
    s.k = k;
    s.n = n;
    s.a = pair.first;
    s.b = pair.second;
    s.planned = planned;
    s.rel_error.assign(opts.strategies.size(), std::numeric_limits<double>::quiet_NaN());
    s.gain = s.rel_error;
    if (k % 32 != 0) return s;  // MX blocks and the block-32 Hadamard run along K

    std::vector<float> exact(size_t(m * n)), c(size_t(m * n));
    gemm_f32(ConstMatF(a, m, k), Trans::no, ConstMatF(b, k, n), Trans::no, MatF(exact.data(), m, n));
    double norm2 = 0;
    for (const float v : exact) norm2 += double(v) * v;
    const bool census = census_applies(opts.lp, k);
    for (size_t i = 0; i < opts.strategies.size(); ++i) {
        const Strategy st = opts.strategies[i];
        const PreparedOperand pa = lp_prepare(a, m, k, Side::left, st, opts.lp);
        const PreparedOperand pb = lp_prepare(b, k, n, Side::right, st, opts.lp);
        lp_matmul_prepared(pa, pb, opts.lp, c.data());
        double dot = 0;
        for (size_t j = 0; j < c.size(); ++j) dot += double(c[j]) * exact[j];
        s.rel_error[i] = relative_frobenius_error(c.data(), exact.data(), c.size());
        s.gain[i] = norm2 > 0 ? dot / norm2 : std::numeric_limits<double>::quiet_NaN();
        if (observe) observe(i, c.data(), exact.data());
        if (census && st == Strategy::plain) s.census_plain = window_census_of(pa, pb, m, k, n, opts.window_binades);
        if (census && st == Strategy::iht) s.census_iht = window_census_of(pa, pb, m, k, n, opts.window_binades);
    }
    return s;
}

ProjectionAnalysis analyze_projection(int64_t layer, Projection p, ConstMatF x, ConstMatF w, ConstMatF dy,
                                      const OperandAnalysisOptions& opts) {
    check_dense(x, "X");
    check_dense(w, "W");
    check_dense(dy, "dY");
    LOWBIT_CHECK(x.rows == dy.rows && x.cols == w.cols && dy.cols == w.rows, ErrorKind::usage,
                 "operand analysis of {}: X {}x{}, W {}x{} and dY {}x{} do not fit one linear layer", linear_name(layer, p),
                 x.rows, x.cols, w.rows, w.cols, dy.rows, dy.cols);
    ProjectionAnalysis r;
    r.layer = layer;
    r.projection = p;
    r.x = detect_outlier_pattern(x.data, x.rows, x.cols, opts.detector);
    r.w = detect_outlier_pattern(w.data, w.rows, w.cols, opts.detector);
    r.g = detect_outlier_pattern(dy.data, dy.rows, dy.cols, opts.detector);
    const LayerPatterns patterns{r.x.pattern, r.w.pattern, r.g.pattern};
    r.plan = plan_layer(patterns, opts.table);
    const int64_t tokens = x.rows, in = x.cols, out = w.rows;

    // Each slot's products go to opts.observe_product with the slot's place.
    const auto observer = [&](Slot slot, int64_t m, int64_t n) -> std::function<void(size_t, const float*, const float*)> {
        if (!opts.observe_product) return {};
        return [&opts, layer, p, slot, m, n](size_t i, const float* c_s, const float* c) {
            opts.observe_product(ProductObservation{layer, p, slot, i, c_s, c, m, n});
        };
    };
    const std::vector<float> w_t = transposed(w);  // Wᵀ [in, out]
    r.slots[0] = analyze_slot(Slot::fwd, x.data, w_t.data(), tokens, in, out, slot_pair(Slot::fwd, patterns), r.plan.fwd, opts,
                              observer(Slot::fwd, tokens, out));
    r.slots[1] = analyze_slot(Slot::dgrad, dy.data, w.data, tokens, out, in, slot_pair(Slot::dgrad, patterns), r.plan.dgrad, opts,
                              observer(Slot::dgrad, tokens, in));
    const std::vector<float> dy_t = transposed(dy);  // dYᵀ [out, M]
    r.slots[2] = analyze_slot(Slot::wgrad, dy_t.data(), x.data, out, tokens, in, slot_pair(Slot::wgrad, patterns), r.plan.wgrad,
                              opts, observer(Slot::wgrad, out, in));
    return r;
}

Plan ModelOperandAnalysis::plan() const {
    Plan p;
    p.table_name = table_name;
    for (const ProjectionAnalysis& a : projections) p.layers[linear_name(a.layer, a.projection)] = a.plan;
    return p;
}

ModelOperandAnalysis analyze_model_operands(const LlamaModel& model, const TokenBatch& batch,
                                            const OperandAnalysisOptions& opts) {
    const ParamLayout layout(model.config);  // refuses q/k/v biases
    const std::vector<float> params = params_from_model(layout, model);
    const LlamaConfig& c = layout.config();
    ModelOperandAnalysis out;
    out.shape = batch.shape;
    out.table_name = opts.table.name;
    out.projections.resize(size_t(c.n_layers * kProjectionCount));
    const int64_t total = c.n_layers * kProjectionCount;
    int64_t done = 0;
    const int64_t skip = opts.skip_positions, n_tok = batch.shape.n_tok;
    LOWBIT_CHECK(skip >= 0 && skip < n_tok, ErrorKind::usage, "operand analysis: skipping {} of {} positions per window", skip,
                 n_tok);
    // The rows of m at positions ≥ skip of their window (m's rows are the batch's tokens, window-major).
    const auto kept_rows = [skip, n_tok](ConstMatF m) {
        std::vector<float> k;
        k.reserve(size_t((m.rows / n_tok) * (n_tok - skip) * m.cols));
        for (int64_t r = 0; r < m.rows; ++r)
            if (r % n_tok >= skip) k.insert(k.end(), m.row(r), m.row(r) + m.cols);
        return k;
    };
    TrainLinears linears = make_train_linears(c, [&](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
        return std::make_unique<AnalysedTrainLinear>([&, layer, p](ConstMatF x, ConstMatF w, ConstMatF dy) {
            ProjectionAnalysis& into = out.projections[size_t(layer * kProjectionCount + int64_t(p))];
            if (skip == 0) {
                into = analyze_projection(layer, p, x, w, dy, opts);
            } else {
                const std::vector<float> xk = kept_rows(x), dyk = kept_rows(dy);
                const int64_t rows = int64_t(xk.size()) / x.cols;
                into = analyze_projection(layer, p, ConstMatF(xk.data(), rows, x.cols), w, ConstMatF(dyk.data(), rows, dy.cols), opts);
            }
            if (opts.progress) opts.progress(++done, total);
        });
    });
    TrainActivations acts;
    out.loss = train_forward(layout, params.data(), linears, batch, acts);
    std::vector<float> grads(size_t(layout.total()));
    train_backward(layout, params.data(), linears, batch, acts, grads.data());
    return out;
}

namespace {

// The mean of a per-strategy metric over batches, NaN where any batch has NaN (a slot whose K is not a multiple of 32
// is so in every batch).
std::vector<double> mean_over(const std::vector<const std::vector<double>*>& v) {
    std::vector<double> out(v.front()->size(), 0.0);
    for (const std::vector<double>* x : v)
        for (size_t i = 0; i < out.size(); ++i) out[i] += (*x)[i] / double(v.size());
    return out;
}

PatternStats mean_stats(const std::vector<const PatternStats*>& v, Pattern voted) {
    PatternStats s = *v.front();
    s.pattern = voted;
    s.cv_row = s.cv_col = s.kurtosis_row = s.kurtosis_col = s.mean_row_variance = s.mean_col_variance = 0;
    const double n = double(v.size());
    for (const PatternStats* x : v) {
        s.cv_row += x->cv_row / n;
        s.cv_col += x->cv_col / n;
        s.kurtosis_row += x->kurtosis_row / n;
        s.kurtosis_col += x->kurtosis_col / n;
        s.mean_row_variance += x->mean_row_variance / n;
        s.mean_col_variance += x->mean_col_variance / n;
    }
    return s;
}

void add_into(std::optional<WindowCensus>& into, const std::optional<WindowCensus>& c) {
    if (!c) return;
    if (!into) into = WindowCensus{};
    *into += *c;
}

}  // namespace

ModelOperandAnalysis merge_batches(const std::vector<ModelOperandAnalysis>& batches, const StrategyTable& table) {
    LOWBIT_CHECK(!batches.empty(), ErrorKind::usage, "merge_batches: no analyses");
    const ModelOperandAnalysis& first = batches.front();
    Calibration votes(int(batches.size()));
    for (const ModelOperandAnalysis& b : batches) {
        LOWBIT_CHECK(b.projections.size() == first.projections.size() && b.shape.n_tok == first.shape.n_tok, ErrorKind::usage,
                     "merge_batches: analyses of different models or window lengths");
        for (const ProjectionAnalysis& p : b.projections) {
            const std::string name = linear_name(p.layer, p.projection);
            votes.record(name, Operand::x, p.x.pattern);
            votes.record(name, Operand::w, p.w.pattern);
            votes.record(name, Operand::g, p.g.pattern);
        }
        votes.end_step();
    }
    ModelOperandAnalysis out;
    out.table_name = table.name;
    out.shape = first.shape;
    out.shape.n_seq = 0;
    for (const ModelOperandAnalysis& b : batches) {
        out.shape.n_seq += b.shape.n_seq;
        out.loss += b.loss / double(batches.size());
    }
    for (size_t j = 0; j < first.projections.size(); ++j) {
        ProjectionAnalysis p = first.projections[j];
        const LayerPatterns voted = votes.majority(linear_name(p.layer, p.projection));
        std::vector<const PatternStats*> xs, ws, gs;
        for (const ModelOperandAnalysis& b : batches) {
            xs.push_back(&b.projections[j].x);
            ws.push_back(&b.projections[j].w);
            gs.push_back(&b.projections[j].g);
        }
        p.x = mean_stats(xs, voted.x);
        p.w = mean_stats(ws, voted.w);
        p.g = mean_stats(gs, voted.g);
        p.plan = plan_layer(voted, table);
        for (size_t sl = 0; sl < 3; ++sl) {
            SlotAnalysis& s = p.slots[sl];
            std::vector<const std::vector<double>*> errors, gains;
            s.census_plain.reset();
            s.census_iht.reset();
            for (const ModelOperandAnalysis& b : batches) {
                const SlotAnalysis& bs = b.projections[j].slots[sl];
                errors.push_back(&bs.rel_error);
                gains.push_back(&bs.gain);
                add_into(s.census_plain, bs.census_plain);
                add_into(s.census_iht, bs.census_iht);
            }
            s.rel_error = mean_over(errors);
            s.gain = mean_over(gains);
            std::tie(s.a, s.b) = slot_pair(s.slot, voted);
            s.planned = p.plan.at(s.slot);
        }
        out.projections.push_back(std::move(p));
    }
    return out;
}

void ErrorConsistency::observe(const ProductObservation& p) {
    if (p.slot != slot_) return;
    const size_t n = size_t(p.m * p.n);
    Sums& e = errors_[{p.layer, int(p.projection), p.strategy}];
    if (e.error.empty()) e.error.assign(n, 0.0f);
    LOWBIT_CHECK(e.error.size() == n, ErrorKind::usage, "ErrorConsistency: {} changed shape", linear_name(p.layer, p.projection));
    double norm2 = 0;
    for (size_t i = 0; i < n; ++i) {
        const float d = p.error ? p.error[i] : p.c_s[i] - p.c[i];
        e.error[i] += d;
        norm2 += double(d) * d;
    }
    e.error_norm2_sum += norm2;
    if (p.strategy != 0) return;  // C is the same for every strategy: summed once per batch
    std::vector<float>& c = products_[{p.layer, int(p.projection)}];
    if (c.empty()) c.assign(n, 0.0f);
    for (size_t i = 0; i < n; ++i) c[i] += p.c[i];
}

std::vector<ErrorConsistency::Entry> ErrorConsistency::entries() const {
    std::vector<Entry> out;
    for (const auto& [key, sums] : errors_) {
        const auto& [layer, projection, strategy] = key;
        const std::vector<float>& c = products_.at({layer, projection});
        Entry e;
        e.layer = layer;
        e.projection = Projection(projection);
        e.strategy = strategy;
        e.error_norm2_sum = sums.error_norm2_sum;
        for (size_t i = 0; i < c.size(); ++i) {
            e.sum_error_norm2 += double(sums.error[i]) * sums.error[i];
            e.sum_c_norm2 += double(c[i]) * c[i];
            e.dot += double(sums.error[i]) * c[i];
        }
        out.push_back(e);
    }
    return out;
}

double ErrorConsistency::Summary::consistency() const {
    return error_norm2_sum > 0 ? std::sqrt(sum_error_norm2 / error_norm2_sum) : std::numeric_limits<double>::quiet_NaN();
}
double ErrorConsistency::Summary::relative() const {
    return sum_c_norm2 > 0 ? std::sqrt(sum_error_norm2 / sum_c_norm2) : std::numeric_limits<double>::quiet_NaN();
}
double ErrorConsistency::Summary::cosine() const {
    return sum_error_norm2 > 0 && sum_c_norm2 > 0 ? dot / std::sqrt(sum_error_norm2 * sum_c_norm2)
                                                  : std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json ErrorConsistency::by_projection_json(const std::vector<Strategy>& strategies) const {
    const auto number = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, s] : by_projection()) {
        LOWBIT_CHECK(key.second < strategies.size(), ErrorKind::usage, "ErrorConsistency: strategy {} of {} named",
                     key.second, strategies.size());
        out[projection_name(key.first)][strategy_short_name(strategies[key.second])] = {
            {"consistency", number(s.consistency())}, {"relative", number(s.relative())}, {"cosine", number(s.cosine())}};
    }
    return out;
}

std::map<std::pair<Projection, size_t>, ErrorConsistency::Summary> ErrorConsistency::by_projection() const {
    std::map<std::pair<Projection, size_t>, Summary> by;
    for (const Entry& e : entries()) {
        Summary& s = by[{e.projection, e.strategy}];
        s.sum_error_norm2 += e.sum_error_norm2;
        s.error_norm2_sum += e.error_norm2_sum;
        s.sum_c_norm2 += e.sum_c_norm2;
        s.dot += e.dot;
    }
    return by;
}

}  // namespace lowbit
