// calibration.cpp — calibration windows and the per-block statistics of GPTQ, BoA and TurboBoA.
#include "ptq/calibration.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/gemm_cpu.h"
#include "core/wall_clock.h"
#include "io/corpus.h"

namespace lowbit {

std::string CalibrationSpec::describe() const {
    return (text_file.empty() ? corpus : text_file) + " " + std::to_string(samples) + "x" + std::to_string(length) +
           " seed " + std::to_string(seed);
}

namespace {

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// dst (n × n) += xᵀx for x = rows × n (leading dimension ld).
void add_gram(std::vector<float>& dst, const float* x, int64_t rows, int64_t n, int64_t ld) {
    gram_f32(ConstMatF(x, rows, n, ld), MatF(dst.data(), n, n), 1.0f);
}

// dst (n × n) += (a − b)ᵀ b for rows × n matrices.
void add_cross(std::vector<float>& dst, const float* a, const float* b, int64_t rows, int64_t n) {
    std::vector<float> diff(size_t(rows * n));
    for (int64_t i = 0; i < rows * n; ++i) diff[size_t(i)] = a[i] - b[i];
    gemm_f32(ConstMatF(diff.data(), rows, n), Trans::yes, ConstMatF(b, rows, n), Trans::no, MatF(dst.data(), n, n), 1.0f);
}

void scale(std::vector<float>& v, double f) {
    parallel_for(int64_t(v.size()), int64_t(1) << 18, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) v[size_t(i)] = float(double(v[size_t(i)]) * f);
    });
}

}  // namespace

std::vector<int32_t> calibration_windows(const Tokenizer& tok, const CalibrationSpec& spec) {
    LOWBIT_CHECK(spec.samples > 0 && spec.length > 1, ErrorKind::usage, "calibration: {} windows of {} tokens",
                 spec.samples, spec.length);
    const std::string text = spec.text_file.empty() ? read_corpus_text(spec.corpus) : read_text_file(spec.text_file);
    const std::vector<int32_t> ids = tok.encode(text, false);
    const int64_t n = int64_t(ids.size());
    LOWBIT_CHECK(n > spec.length, ErrorKind::input,
                 "calibration text {} has {} tokens, fewer than one window of {} + 1 (use a longer text or --calib-len)",
                 spec.text_file.empty() ? spec.corpus : spec.text_file, n, spec.length);
    std::vector<int32_t> out(size_t(spec.samples * spec.length));
    uint64_t state = spec.seed;
    const bool bos = tok.add_bos();
    for (int64_t s = 0; s < spec.samples; ++s) {
        const int64_t start = int64_t(splitmix64(state) % uint64_t(n - spec.length));
        std::copy(ids.begin() + start, ids.begin() + start + spec.length, out.begin() + s * spec.length);
        if (bos) out[size_t(s * spec.length)] = tok.bos_id();
    }
    return out;
}

BlockStatsAccumulator::BlockStatsAccumulator(const LlamaConfig& c, const BlockStatsOptions& o, ValueProducts value_products)
    : c_(c), o_(o), value_products_(value_products) {
    const int64_t d = c.hidden_size, qd = c.q_dim(), f = c.ffn_size, hd = c.head_dim;
    for (const auto& [input, h, dd, n] : {std::tuple{attention_input, &s_.h_attn, &s_.d_attn, d},
                                          std::tuple{attention_output, &s_.h_o, &s_.d_o, qd},
                                          std::tuple{mlp_input, &s_.h_ffn, &s_.d_ffn, d},
                                          std::tuple{mlp_hidden, &s_.h_down, &s_.d_down, f}}) {
        if (!o.measures(input)) continue;
        h->assign(size_t(n * n), 0.0f);
        if (o.cross) dd->assign(size_t(n * n), 0.0f);
    }
    if (o.measures_h_out()) {
        c_k_.assign(size_t(c.n_kv_heads * hd * hd), 0.0f);
        c_q_.assign(size_t(c.n_heads * hd * hd), 0.0f);
    }
    if (o.measures_block_v()) {
        s_.h_v.assign(size_t(c.n_kv_heads * d * d), 0.0f);
        if (o.cross) s_.d_v.assign(size_t(c.n_kv_heads * d * d), 0.0f);
    }
}

void BlockStatsAccumulator::add(const BlockScratch& q, const BlockScratch* fp, BatchShape shape) {
    LOWBIT_CHECK(!o_.cross || fp, ErrorKind::usage, "calibration: F2 statistics need the full-precision path");
    const int64_t rows = shape.rows(), d = c_.hidden_size, qd = c_.q_dim(), kvd = c_.kv_dim(), f = c_.ffn_size;
    const int64_t hd = c_.head_dim, T = shape.n_tok, group = c_.n_heads / c_.n_kv_heads;
    s_.tokens += rows;
    for (const auto& [input, h, dd, x, x_fp, n] :
         {std::tuple{attention_input, &s_.h_attn, &s_.d_attn, &q.attn_in, fp ? &fp->attn_in : nullptr, d},
          std::tuple{attention_output, &s_.h_o, &s_.d_o, &q.attn_ctx, fp ? &fp->attn_ctx : nullptr, qd},
          std::tuple{mlp_input, &s_.h_ffn, &s_.d_ffn, &q.ffn_in, fp ? &fp->ffn_in : nullptr, d},
          std::tuple{mlp_hidden, &s_.h_down, &s_.d_down, &q.ffn_act, fp ? &fp->ffn_act : nullptr, f}}) {
        if (!o_.measures(input)) continue;
        add_gram(*h, x->data(), rows, n, n);
        if (o_.cross) add_cross(*dd, x_fp->data(), x->data(), rows, n);
    }
    if (o_.measures_h_out()) {
        for (int64_t g = 0; g < c_.n_kv_heads; ++g) {
            std::vector<float> tmp(size_t(hd * hd), 0.0f);
            add_gram(tmp, q.k.data() + g * hd, rows, hd, kvd);
            for (size_t i = 0; i < tmp.size(); ++i) c_k_[size_t(g * hd * hd) + i] += tmp[i];
        }
        for (int64_t h = 0; h < c_.n_heads; ++h) {
            std::vector<float> tmp(size_t(hd * hd), 0.0f);
            add_gram(tmp, q.q.data() + h * hd, rows, hd, qd);
            for (size_t i = 0; i < tmp.size(); ++i) c_q_[size_t(h * hd * hd) + i] += tmp[i];
        }
    }
    if (!o_.measures_block_v()) return;
    const bool by_group = value_products_ == ValueProducts::automatic ? block_v_by_group_takes_fewer_flops(c_, T)
                                                                      : value_products_ == ValueProducts::by_group;
    if (by_group) {
        add_value_hessians_by_group(q, fp, shape);
        return;
    }
    // Per (sequence, query head): AX = A_h·X (T × d); H_v[g] += AXᵀAX; F2: D_v[g] += (ÃX̃ − AX)ᵀ AX.
    std::vector<float> probs(size_t(T * T)), ax(size_t(T * d)), ax_fp(o_.cross ? size_t(T * d) : 0);
    for (int64_t sq = 0; sq < shape.n_seq; ++sq)
        for (int64_t h = 0; h < c_.n_heads; ++h) {
            const int64_t g = h / group;
            attention_probabilities(q.q.data(), q.k.data(), shape, c_.n_heads, c_.n_kv_heads, hd, sq, h, probs.data());
            gemm_f32(ConstMatF(probs.data(), T, T), Trans::no, ConstMatF(q.attn_in.data() + sq * T * d, T, d),
                     Trans::no, MatF(ax.data(), T, d));
            std::vector<float> hv(size_t(d * d), 0.0f);
            add_gram(hv, ax.data(), T, d, d);
            for (size_t i = 0; i < hv.size(); ++i) s_.h_v[size_t(g * d * d) + i] += hv[i];
            if (o_.cross) {
                attention_probabilities(fp->q.data(), fp->k.data(), shape, c_.n_heads, c_.n_kv_heads, hd, sq, h,
                                        probs.data());
                gemm_f32(ConstMatF(probs.data(), T, T), Trans::no, ConstMatF(fp->attn_in.data() + sq * T * d, T, d),
                         Trans::no, MatF(ax_fp.data(), T, d));
                std::fill(hv.begin(), hv.end(), 0.0f);
                add_cross(hv, ax_fp.data(), ax.data(), T, d);
                for (size_t i = 0; i < hv.size(); ++i) s_.d_v[size_t(g * d * d) + i] += hv[i];
            }
        }
}

// block_v per (sequence, KV group): H_v[g] += Xᵀ·(M·X) with M = Σ_h∈g A_hᵀA_h; F2: D_v[g] += X̃ᵀ·(N·X) − Xᵀ·(M·X)
// with N = Σ_h∈g Ã_hᵀA_h — the sums of add()'s per-head loop, associated through T × T products.
void BlockStatsAccumulator::add_value_hessians_by_group(const BlockScratch& q, const BlockScratch* fp, BatchShape shape) {
    const int64_t d = c_.hidden_size, hd = c_.head_dim, T = shape.n_tok, group = c_.n_heads / c_.n_kv_heads;
    std::vector<float> probs(size_t(T * T)), probs_fp(o_.cross ? size_t(T * T) : 0), m(size_t(T * T)),
        n(o_.cross ? size_t(T * T) : 0), mx(size_t(T * d)), nx(o_.cross ? size_t(T * d) : 0), xmx(size_t(d * d)),
        xnx(o_.cross ? size_t(d * d) : 0);
    for (int64_t sq = 0; sq < shape.n_seq; ++sq) {
        const ConstMatF x(q.attn_in.data() + sq * T * d, T, d);
        for (int64_t g = 0; g < c_.n_kv_heads; ++g) {
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                const float beta = h == g * group ? 0.0f : 1.0f;
                attention_probabilities(q.q.data(), q.k.data(), shape, c_.n_heads, c_.n_kv_heads, hd, sq, h, probs.data());
                gram_f32(ConstMatF(probs.data(), T, T), MatF(m.data(), T, T), beta);
                if (o_.cross) {
                    attention_probabilities(fp->q.data(), fp->k.data(), shape, c_.n_heads, c_.n_kv_heads, hd, sq, h,
                                            probs_fp.data());
                    gemm_f32(ConstMatF(probs_fp.data(), T, T), Trans::yes, ConstMatF(probs.data(), T, T), Trans::no,
                             MatF(n.data(), T, T), beta);
                }
            }
            gemm_f32(ConstMatF(m.data(), T, T), Trans::no, x, Trans::no, MatF(mx.data(), T, d));
            gemm_f32(x, Trans::yes, ConstMatF(mx.data(), T, d), Trans::no, MatF(xmx.data(), d, d));
            float* hv = s_.h_v.data() + g * d * d;
            for (size_t i = 0; i < xmx.size(); ++i) hv[i] += xmx[i];
            if (!o_.cross) continue;
            gemm_f32(ConstMatF(n.data(), T, T), Trans::no, x, Trans::no, MatF(nx.data(), T, d));
            gemm_f32(ConstMatF(fp->attn_in.data() + sq * T * d, T, d), Trans::yes, ConstMatF(nx.data(), T, d), Trans::no,
                     MatF(xnx.data(), d, d));
            float* dv = s_.d_v.data() + g * d * d;
            for (size_t i = 0; i < xnx.size(); ++i) dv[i] += xnx[i] - xmx[i];  // close terms: subtracted first
        }
    }
}

double block_v_flops(const LlamaConfig& c, int64_t T, bool by_group) {
    const double t = double(T), d = double(c.hidden_size), g = double(c.n_heads / c.n_kv_heads);
    return by_group ? g * 2 * t * t * t + 2 * t * t * d + 2 * t * d * d : g * (2 * t * t * d + 2 * t * d * d);
}

bool block_v_by_group_takes_fewer_flops(const LlamaConfig& c, int64_t T) {
    return block_v_flops(c, T, true) < block_v_flops(c, T, false);
}

RopeAverages::RopeAverages(const LlamaConfig& c, int64_t length) : hd_(c.head_dim), half_(c.head_dim / 2) {
    LOWBIT_CHECK(length > 0, ErrorKind::usage, "RoPE averaging over {} positions", length);
    adjacent_ = c.rope_pairing == RopePairing::adjacent;
    const std::vector<double> inv = rope_inv_freq(c);
    const size_t pairs = size_t(half_ * half_);
    cc_.assign(pairs, 0.0);
    cs_.assign(pairs, 0.0);
    ss_.assign(pairs, 0.0);
    std::vector<double> co(static_cast<size_t>(half_)), si(static_cast<size_t>(half_));
    for (int64_t l = 0; l < length; ++l) {
        for (int64_t i = 0; i < half_; ++i) {
            co[size_t(i)] = std::cos(double(l) * inv[size_t(i)]);
            si[size_t(i)] = std::sin(double(l) * inv[size_t(i)]);
        }
        for (int64_t i = 0; i < half_; ++i)
            for (int64_t j = 0; j < half_; ++j) {
                const size_t k = size_t(i * half_ + j);
                cc_[k] += co[size_t(i)] * co[size_t(j)];
                cs_[k] += co[size_t(i)] * si[size_t(j)];
                ss_[k] += si[size_t(i)] * si[size_t(j)];
            }
    }
    for (size_t k = 0; k < pairs; ++k) {
        cc_[k] /= double(length);
        cs_[k] /= double(length);
        ss_[k] /= double(length);
    }
}

std::vector<float> RopeAverages::apply(const float* cov) const {
    const int64_t hd = hd_, half = half_;
    const auto idx_a = [&](int64_t i) { return adjacent_ ? 2 * i : i; };
    const auto idx_b = [&](int64_t i) { return adjacent_ ? 2 * i + 1 : i + half; };
    std::vector<float> out(size_t(hd * hd));
    for (int64_t i = 0; i < half; ++i)
        for (int64_t j = 0; j < half; ++j) {
            // Block (i, j) of mean_l R_lᵀ·C·R_l with R = [[c, −s], [s, c]] on each pair (a, b): the means of the
            // products c_i·c_j, c_i·s_j, s_i·c_j (= cs of (j, i)) and s_i·s_j over the positions.
            const int64_t ai = idx_a(i), bi = idx_b(i), aj = idx_a(j), bj = idx_b(j);
            const double caa = cov[ai * hd + aj], cab = cov[ai * hd + bj], cba = cov[bi * hd + aj], cbb = cov[bi * hd + bj];
            const size_t k = size_t(i * half + j);
            const double CC = cc_[k], CS = cs_[k], SC = cs_[size_t(j * half + i)], SS = ss_[k];
            out[size_t(ai * hd + aj)] = float(caa * CC + cab * CS + cba * SC + cbb * SS);
            out[size_t(ai * hd + bj)] = float(-caa * CS + cab * CC - cba * SS + cbb * SC);
            out[size_t(bi * hd + aj)] = float(-caa * SC - cab * SS + cba * CC + cbb * CS);
            out[size_t(bi * hd + bj)] = float(caa * SS - cab * SC - cba * CS + cbb * CC);
        }
    return out;
}

std::vector<float> rope_averaged(const LlamaConfig& c, const float* cov, int64_t length) {
    return RopeAverages(c, length).apply(cov);
}

BlockStatistics finish_block_statistics(const LlamaConfig& c, const BlockStatsOptions& o, BlockStatistics s,
                                        std::vector<float> c_k, std::vector<float> c_q, int64_t rope_length) {
    LOWBIT_CHECK(s.tokens > 0, ErrorKind::usage, "calibration: no tokens accumulated");
    const double f = 2.0 / double(s.tokens);
    for (std::vector<float>* v : {&s.h_attn, &s.h_o, &s.h_ffn, &s.h_down, &s.d_attn, &s.d_o, &s.d_ffn, &s.d_down})
        scale(*v, f);
    const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
    scale(s.h_v, f / double(group));  // mean over the query heads of a KV head
    scale(s.d_v, f / double(group));
    if (o.measures_h_out()) {
        scale(c_k, f);
        scale(c_q, f);
        s.h_out_q.resize(size_t(c.n_heads * hd * hd));
        s.h_out_k.resize(size_t(c.n_kv_heads * hd * hd));
        const RopeAverages rope(c, rope_length);
        std::vector<std::vector<float>> key_avg(size_t(c.n_kv_heads));
        for (int64_t g = 0; g < c.n_kv_heads; ++g) {
            key_avg[size_t(g)] = rope.apply(c_k.data() + g * hd * hd);
            std::vector<float> q_mean(size_t(hd * hd), 0.0f);  // GQA folding: mean query covariance of the group
            for (int64_t h = g * group; h < (g + 1) * group; ++h)
                for (int64_t i = 0; i < hd * hd; ++i) q_mean[size_t(i)] += c_q[size_t(h * hd * hd + i)] / float(group);
            const std::vector<float> qa = rope.apply(q_mean.data());
            std::copy(qa.begin(), qa.end(), s.h_out_k.begin() + g * hd * hd);
        }
        for (int64_t h = 0; h < c.n_heads; ++h)
            std::copy(key_avg[size_t(h / group)].begin(), key_avg[size_t(h / group)].end(), s.h_out_q.begin() + h * hd * hd);
    }
    return s;
}

BlockStatistics BlockStatsAccumulator::finish(int64_t rope_length) {
    return finish_block_statistics(c_, o_, std::move(s_), std::move(c_k_), std::move(c_q_), rope_length);
}

namespace {

class CpuCalibrationPaths final : public CalibrationPaths {
public:
    CpuCalibrationPaths(const LlamaConfig& c, int64_t batch, const QuantSpec& acts)
        : c_(c), batch_(std::max<int64_t>(1, batch)), acts_(acts) {}

    void embed(const LlamaModel& m, const std::vector<int32_t>& windows, int64_t samples, int64_t length,
               bool cross) override {
        samples_ = samples;
        length_ = length;
        xq_ = embed_tokens(c_, m.weights.token_embd.data(), windows.data(), BatchShape{samples, length});
        xfp_.clear();
        if (cross) xfp_ = xq_;
    }

    BlockStatistics statistics(const BlockWeights& fp, int64_t layer, const BlockStatsOptions& o,
                               const BlockWeights* quantized_path) override {
        const int64_t d = c_.hidden_size, L = length_;
        BlockStatsAccumulator acc(c_, o);
        BlockScratch sq, sfp;
        std::vector<float> tmp, tmp_fp;
        const BlockWeights& wq = quantized_path ? *quantized_path : fp;
        const BlockLinears q_linears = quantized_path_linears(wq, layer);
        for (int64_t s0 = 0; s0 < samples_; s0 += batch_) {
            const BatchShape shape{std::min(batch_, samples_ - s0), L};
            const WallClock::time_point t0 = WallClock::now();
            if (o.cross) {
                float* x_fp = xfp_.data() + s0 * L * d;  // Xfp advances here, or a copy of it runs the block
                if (!o.advance_full_precision) {
                    tmp_fp.assign(x_fp, x_fp + shape.rows() * d);
                    x_fp = tmp_fp.data();
                }
                block_forward(c_, fp, layer, x_fp, shape, sfp, o.advance_full_precision ? BlockStop::end : o.forward_stop());
            }
            tmp.assign(xq_.begin() + s0 * L * d, xq_.begin() + (s0 + shape.n_seq) * L * d);
            block_forward(c_, wq, q_linears, layer, tmp.data(), shape, sq, o.forward_stop());  // Xq does not advance
            if (acts_.format) quantize_linear_inputs(sq, shape.rows());
            phases_.forwards += seconds_since(t0);
            const WallClock::time_point t1 = WallClock::now();
            acc.add(sq, o.cross ? &sfp : nullptr, shape);
            phases_.products += seconds_since(t1);
        }
        const WallClock::time_point t2 = WallClock::now();
        BlockStatistics done = acc.finish(L);
        phases_.finishing += seconds_since(t2);
        phases_.transfers = phases_.finishing;  // no transfer on the CPU: only the finishing
        return done;
    }

    void propagate(const BlockWeights& q, int64_t layer) override {
        BlockScratch sq;
        const int64_t d = c_.hidden_size, L = length_;
        const BlockLinears linears = quantized_path_linears(q, layer);
        const WallClock::time_point t0 = WallClock::now();
        for (int64_t s0 = 0; s0 < samples_; s0 += batch_)
            block_forward(c_, q, linears, layer, xq_.data() + s0 * L * d, BatchShape{std::min(batch_, samples_ - s0), L}, sq);
        phases_.forwards += seconds_since(t0);
    }

    void save(std::vector<float>& xq, std::vector<float>& xfp) const override {
        xq = xq_;
        xfp = xfp_;
    }
    void load(std::vector<float> xq, std::vector<float> xfp, int64_t samples, int64_t length) override {
        samples_ = samples;
        length_ = length;
        xq_ = std::move(xq);
        xfp_ = std::move(xfp);
    }
    std::string device() const override { return "cpu"; }
    QuantSpec activations() const override { return acts_; }
    CalibrationPhases phases() const override { return phases_; }

private:
    // The projections of the quantized path: with activation quantization `lowbit eval --acts`'s linears
    // (the weights as given, the inputs quantized per token), else dense.
    BlockLinears quantized_path_linears(const BlockWeights& b, int64_t layer) const {
        return (acts_.format ? fake_quant_linears(QuantSpec{}, acts_) : dense_linears())(c_, b, layer);
    }
    // The inputs of the seven projections in the scratch (attn_in: q/k/v, attn_ctx: o, ffn_in: gate/up,
    // ffn_act: down) replaced by what the activation-quantized linears multiplied, Qa(x).
    void quantize_linear_inputs(BlockScratch& s, int64_t rows) const {
        for (std::vector<float>* x : {&s.attn_in, &s.attn_ctx, &s.ffn_in, &s.ffn_act})
            *x = quantize_activations(acts_, ConstMatF(x->data(), rows, int64_t(x->size()) / rows));
    }

    LlamaConfig c_;
    int64_t batch_ = 1, samples_ = 0, length_ = 0;
    QuantSpec acts_;
    std::vector<float> xq_, xfp_;
    CalibrationPhases phases_;
};

}  // namespace

std::unique_ptr<CalibrationPaths> cpu_calibration_paths(const LlamaConfig& c, int64_t batch, const QuantSpec& activations) {
    return std::make_unique<CpuCalibrationPaths>(c, batch, activations);
}

}  // namespace lowbit
