// quantize.cpp — the block loop of `lowbit quantize`: calibration statistics, per-layer solves,
// propagation, progress, per-layer report and resumable checkpoints; the block checkpoint files, which also
// hold the linears of a spilled QuantizedModel (its accessors are here).
#include "ptq/quantize.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/progress.h"
#include "core/wall_clock.h"
#include "io/npy.h"
#include "model/linear.h"

namespace lowbit {

const char* ptq_method_name(PtqMethod m) {
    switch (m) {
        case PtqMethod::rtn: return "rtn";
        case PtqMethod::gptq: return "gptq";
        case PtqMethod::boa: return "boa";
        case PtqMethod::turboboa: return "turboboa";
    }
    return "?";
}

PtqMethod parse_ptq_method(const std::string& name) {
    for (PtqMethod m : {PtqMethod::rtn, PtqMethod::gptq, PtqMethod::boa, PtqMethod::turboboa})
        if (name == ptq_method_name(m)) return m;
    fail(ErrorKind::usage, "unknown method '{}' (rtn | gptq | boa | turboboa)", name);
}

std::string PtqOptions::describe_features() const {
    if (method != PtqMethod::turboboa) return "";
    std::string s;
    for (auto [on, name] : {std::pair{f1, "f1"}, std::pair{f2, "f2"}, std::pair{f3, "f3"}})
        if (on) s += (s.empty() ? "" : ",") + std::string(name);
    return s.empty() ? "none" : s;
}

namespace {
bool adapts_grids(const PtqOptions& o) { return o.method == PtqMethod::gptq || (o.method == PtqMethod::turboboa && o.f3); }
}  // namespace

bool PtqOptions::resolved_static_groups() const { return act_order || static_groups.value_or(!adapts_grids(*this)); }

void PtqOptions::check_static_groups() const {
    if (static_groups.value_or(true)) return;
    LOWBIT_CHECK(!act_order, ErrorKind::usage,
                 "quantize: static groups off (--static-groups off) and --act-order, which fits every grid before the "
                 "sweep (static groups); drop one");
    LOWBIT_CHECK(adapts_grids(*this), ErrorKind::usage,
                 "quantize: grids fitted at each group (static groups off) need adaptive grids: gptq, or turboboa with "
                 "f3 ({} fixes every grid from the original weights)",
                 method == PtqMethod::turboboa ? "turboboa without f3" : ptq_method_name(method));
}

uint64_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return uint64_t(u.ru_maxrss) * 1024u;
}

namespace {

using Clock = WallClock;

// --- checkpoints: state.bin (next block, activations) + block_N.bin (the block's codes and grids) ---

constexpr char kStateMagic[8] = {'L', 'B', 'P', 'T', 'Q', 'S', '0', '1'};

template <typename T>
void put(std::string& out, const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void put_vec(std::string& out, const std::vector<T>& v) {
    put(out, uint64_t(v.size()));
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
void put_str(std::string& out, const std::string& s) {
    put(out, uint64_t(s.size()));
    out += s;
}

struct Reader {
    const std::string& data;
    size_t pos = 0;
    std::string what;
    void need(size_t n) {
        LOWBIT_CHECK(pos + n <= data.size(), ErrorKind::input, "{}: truncated checkpoint (delete it or run without --resume)",
                     what);
    }
    template <typename T>
    T get() {
        need(sizeof(T));
        T v;
        std::memcpy(&v, data.data() + pos, sizeof(T));
        pos += sizeof(T);
        return v;
    }
    template <typename T>
    std::vector<T> get_vec() {
        const uint64_t n = get<uint64_t>();
        LOWBIT_CHECK(n <= data.size() / sizeof(T), ErrorKind::input, "{}: corrupt checkpoint", what);
        need(n * sizeof(T));
        std::vector<T> v(n);
        std::memcpy(v.data(), data.data() + pos, n * sizeof(T));
        pos += n * sizeof(T);
        return v;
    }
    std::string get_str() {
        const uint64_t n = get<uint64_t>();
        need(n);
        std::string s = data.substr(pos, n);
        pos += n;
        return s;
    }
};

std::string read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    LOWBIT_CHECK(f.good(), ErrorKind::input, "cannot read checkpoint {}", path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

void put_weight(std::string& out, const QuantizedWeight& q) {
    put(out, uint8_t(q.spec.format));
    put(out, int32_t(q.spec.bits));
    put(out, q.spec.group);
    put(out, uint8_t(q.spec.sym));
    put(out, uint8_t(q.spec.search));
    put(out, q.rows);
    put(out, q.cols);
    put_vec(out, q.codes);
    put_vec(out, q.grids);
    put_vec(out, q.kscales);
}

QuantizedWeight get_weight(Reader& r) {
    QuantizedWeight q;
    q.spec.format = GridFormat(r.get<uint8_t>());
    q.spec.bits = r.get<int32_t>();
    q.spec.group = r.get<int64_t>();
    q.spec.sym = r.get<uint8_t>() != 0;
    q.spec.search = GridSearch(r.get<uint8_t>());
    q.rows = r.get<int64_t>();
    q.cols = r.get<int64_t>();
    q.codes = r.get_vec<uint8_t>();
    q.grids = r.get_vec<GroupGrid>();
    q.kscales = r.get_vec<KQuantScales>();
    LOWBIT_CHECK(int64_t(q.codes.size()) == q.rows * q.cols, ErrorKind::input, "{}: corrupt checkpoint", r.what);
    return q;
}

// A spilled linear's block and its place in kProjections, from its name ("blk.3.attn_v" → {3, 2}); {-1, -1}
// when the name is not a projection's.
std::pair<int64_t, int> spilled_slot(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return {-1, -1};
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4) return {-1, -1};
    int64_t layer = 0;
    for (size_t i = 4; i < dot; ++i) {
        if (name[i] < '0' || name[i] > '9') return {-1, -1};
        layer = layer * 10 + (name[i] - '0');
    }
    for (size_t i = 0; i < kProjections.size(); ++i)
        if (name.compare(dot + 1, std::string::npos, projection_name(kProjections[i])) == 0) return {layer, int(i)};
    return {-1, -1};
}

std::string fingerprint(const ModelReader& r, const PtqOptions& o) {
    return r.path() + "|" + ptq_method_name(o.method) + "|" + o.describe_features() + "|" + o.grid.describe() + "|" +
           o.calibration.describe() + "|" + std::to_string(o.alpha) + "|" + std::to_string(o.row_block) + "|" +
           (o.rotate ? describe(o.rotation) : "none") + "|" + std::to_string(o.act_order) + "|" +
           std::to_string(o.block_v) + "|" + std::to_string(o.damping) + "|" + o.mix + "|" + o.activations.describe() +
           (o.act_order_row ? "|act_order_row" : "") +  // appended only when set: older checkpoints still resume
           (o.true_sequential ? "|true_sequential" : "") +
           // only when it differs from what the runs before --static-groups did (static everywhere but GPTQ)
           (o.resolved_static_groups() != (o.method != PtqMethod::gptq || o.act_order)
                ? "|static_groups=" + std::to_string(o.resolved_static_groups())
                : "");
}

// A statistics pass of the block loop: the inputs it measures and the layers solved from them. One pass for
// the whole block, or with true-sequential quantization one per input in the forward's order.
struct StatisticsPass {
    uint8_t inputs;
    std::vector<Projection> layers;
};

std::vector<StatisticsPass> statistics_passes(bool true_sequential) {
    if (!true_sequential) return {{kAllBlockInputs, {kProjections.begin(), kProjections.end()}}};
    return {{attention_input, {Projection::q, Projection::k, Projection::v}},
            {attention_output, {Projection::o}},
            {mlp_input, {Projection::gate, Projection::up}},
            {mlp_hidden, {Projection::down}}};
}

bool is_projection_layer(const std::string& linear, Projection p) {
    const std::string suffix = std::string(".") + projection_name(p);
    return linear.size() > suffix.size() && linear.compare(linear.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<QuantizedWeight> read_block_checkpoint(const std::string& path) {
    const std::string data = read_all(path);
    Reader r{data, 0, path};
    std::vector<QuantizedWeight> w;
    for (size_t i = 0; i < kProjections.size(); ++i) w.push_back(get_weight(r));
    LOWBIT_CHECK(r.pos == data.size(), ErrorKind::input, "{}: corrupt checkpoint ({} bytes after its seven linears)", path,
                 data.size() - r.pos);
    return w;
}

std::vector<std::string> QuantizedModel::linear_names() const {
    std::vector<std::string> names;
    for (const auto& [name, w] : linears) names.push_back(name);
    for (const auto& [layer, file] : spilled)
        for (Projection p : kProjections) names.push_back(linear_name(layer, p));
    std::sort(names.begin(), names.end());
    return names;
}

LinearInfo QuantizedModel::linear_info(const std::string& name) const {
    if (const auto it = linears.find(name); it != linears.end()) return {it->second.spec, it->second.rows, it->second.cols};
    const auto [layer, slot] = spilled_slot(name);
    const auto file = spilled.find(layer);
    LOWBIT_CHECK(slot >= 0 && file != spilled.end(), ErrorKind::usage, "quantized model: no linear '{}'", name);
    return file->second.linears[size_t(slot)];
}

bool QuantizedModel::has_linear(const std::string& name) const {
    return linears.count(name) || spilled.count(spilled_slot(name).first);
}

std::shared_ptr<const QuantizedWeight> QuantizedModel::linear(const std::string& name) const {
    if (const auto it = linears.find(name); it != linears.end())
        return std::shared_ptr<const QuantizedWeight>(std::shared_ptr<const QuantizedWeight>(), &it->second);  // not owned
    const auto [layer, slot] = spilled_slot(name);
    const auto file = spilled.find(layer);
    LOWBIT_CHECK(slot >= 0 && file != spilled.end(), ErrorKind::usage, "quantized model: no linear '{}'", name);
    if (!cached_ || cached_->layer != layer) {
        auto block = std::make_shared<SpilledBlock>();
        block->layer = layer;
        block->weights = read_block_checkpoint(file->second.path);
        cached_ = std::move(block);
    }
    return std::shared_ptr<const QuantizedWeight>(cached_, &cached_->weights[size_t(slot)]);  // keeps the block alive
}

QuantizedModel quantize_model(const ModelReader& reader, const std::vector<int32_t>& windows, const PtqOptions& o,
                              PtqReport* report) {
    const Clock::time_point t0 = Clock::now();
    QuantizedModel out;
    out.model = o.stream_blocks ? load_llama_head(reader) : load_llama_model(reader);
    LlamaModel& m = out.model;
    const LlamaConfig& c = m.config;
    if (o.rotate) rotate_head(m, o.rotation);
    // Block l's full-precision weights in m (read and rotated now when streaming, else already there).
    const auto load_block = [&](int64_t l) {
        BlockWeights& b = m.weights.blocks[size_t(l)];
        if (o.stream_blocks) {
            b = reader.block(l);
            check_block_shapes(c, b, l, reader.path());
        }
        if (o.rotate) rotate_block(c, b, o.rotation);
    };
    if (!o.stream_blocks)
        for (int64_t l = 0; l < c.n_layers; ++l) load_block(l);
    // A finished block's projections, when streaming: their codes in out.linears are all that is kept.
    const auto drop_projections = [&](int64_t l) {
        if (!o.stream_blocks) return;
        for (Projection p : kProjections) std::vector<float>().swap(projection_weight(m.weights.blocks[size_t(l)], p));
    };
    // ... and with spill_blocks not even those: the block's checkpoint file holds them.
    LOWBIT_CHECK(!o.spill_blocks || (o.stream_blocks && !o.checkpoint_dir.empty()), ErrorKind::usage,
                 "quantize: spill_blocks needs stream_blocks and a checkpoint_dir (the spilled codes live there)");
    const auto spill = [&](int64_t l, const std::string& file) {
        QuantizedModel::SpilledBlockFile& f = out.spilled[l];
        f.path = file;
        f.linears.clear();
        for (Projection p : kProjections) {
            const auto it = out.linears.find(linear_name(l, p));
            f.linears.push_back({it->second.spec, it->second.rows, it->second.cols});
            out.linears.erase(it);
        }
    };
    out.record.method = ptq_method_name(o.method);
    out.record.features = o.describe_features();
    out.record.format = o.mix.empty() ? o.grid.describe() : o.mix;
    out.record.rotation = o.rotate ? describe(o.rotation) : "none";
    out.record.act_order = o.act_order;
    out.record.act_order_row = o.act_order_row;
    out.record.true_sequential = o.method != PtqMethod::rtn && o.true_sequential;
    out.record.static_groups = o.resolved_static_groups();
    o.check_static_groups();
    out.record.damping = o.damping;
    out.record.activations = o.activations.format ? o.activations.format->name : "none";
    PtqReport rep;

    const bool calibrated = o.method != PtqMethod::rtn;
    const bool two_sided = o.method == PtqMethod::boa || o.method == PtqMethod::turboboa;
    const bool cross = o.method == PtqMethod::turboboa && o.f2;
    const bool block_v = two_sided && o.block_v;
    const int64_t L = o.calibration.length, S = o.calibration.samples;
    if (calibrated) out.record.calibration = o.calibration.describe();

    std::unique_ptr<CalibrationPaths> paths =
        o.calibration_paths ? o.calibration_paths(c, o.batch) : cpu_calibration_paths(c, o.batch, o.activations);
    rep.device = paths->device();
    LOWBIT_CHECK(!calibrated || paths->activations().describe() == o.activations.describe(), ErrorKind::usage,
                 "quantize: the {} calibration paths quantize activations as '{}', not '{}' as asked (make them with "
                 "the activation format, as cpu_calibration_paths/cuda_calibration_paths take it; or --device cpu)",
                 rep.device, paths->activations().describe(), o.activations.describe());
    std::vector<float> xq, xfp;
    int64_t first_block = 0;
    const std::string state_path = o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/state.bin";
    const std::string fp = fingerprint(reader, o);
    if (calibrated && o.resume && !state_path.empty() && std::filesystem::exists(state_path)) {
        const std::string data = read_all(state_path);
        Reader r{data, 0, state_path};
        char magic[8];
        for (char& ch : magic) ch = r.get<char>();
        LOWBIT_CHECK(std::memcmp(magic, kStateMagic, 8) == 0, ErrorKind::input, "{} is not a lowbit checkpoint", state_path);
        const std::string saved = r.get_str();
        LOWBIT_CHECK(saved == fp, ErrorKind::usage,
                     "{} was written by a different run ({}); remove it or repeat that run's options", state_path, saved);
        first_block = r.get<int64_t>();
        std::vector<float> saved_xq = r.get_vec<float>();
        std::vector<float> saved_xfp = r.get_vec<float>();
        paths->load(std::move(saved_xq), std::move(saved_xfp), S, L);
        for (int64_t l = 0; l < first_block; ++l) {
            const std::string bpath = o.checkpoint_dir + "/block_" + std::to_string(l) + ".bin";
            const std::string bdata = read_all(bpath);
            Reader br{bdata, 0, bpath};
            if (o.stream_blocks) load_block(l);  // its norms and biases
            for (Projection p : kProjections) {
                QuantizedWeight q = get_weight(br);
                if (!o.spill_blocks) projection_weight(m.weights.blocks[size_t(l)], p) = q.dequantize();
                out.linears[linear_name(l, p)] = std::move(q);  // spilled again below: read to check the file
            }
            drop_projections(l);
            if (o.spill_blocks) spill(l, bpath);
        }
        rep.resumed_from_block = first_block;
        std::fprintf(stderr, "quantize: resuming after block %lld of %lld from %s\n", (long long)first_block,
                     (long long)c.n_layers, state_path.c_str());
    }

    if (calibrated && first_block == 0) {
        const Clock::time_point tc = Clock::now();
        LOWBIT_CHECK(int64_t(windows.size()) == S * L, ErrorKind::usage, "quantize: {} calibration tokens for {} windows of {}",
                     windows.size(), S, L);
        paths->embed(m, windows, S, L, cross);
        rep.calibration_seconds += seconds_since(tc);
    }
    rep.calibration_tokens = calibrated ? S * L : 0;

    Clock::time_point last_state = Clock::now();  // the resume state was last written (or the run began)
    ProgressLine progress("quantize " + std::string(ptq_method_name(o.method)), c.n_layers, "blocks");
    progress.update(first_block);
    for (int64_t l = first_block; l < c.n_layers; ++l) {
        const Clock::time_point t_block = Clock::now();
        if (o.stream_blocks) load_block(l);
        BlockWeights& bw = m.weights.blocks[size_t(l)];
        // The full-precision block, moved out (no copy of its gigabytes); bw keeps the norms and biases and gets
        // each projection's dequantized weights as it is solved.
        const BlockWeights fpw = std::move(bw);
        bw = BlockWeights{};
        bw.attn_norm = fpw.attn_norm;
        bw.ffn_norm = fpw.ffn_norm;
        bw.bq = fpw.bq;
        bw.bk = fpw.bk;
        bw.bv = fpw.bv;
        // The statistics passes: one for the whole block, or with true_sequential one per input (q/k/v, o,
        // gate/up, down), each on the quantized path with the layers before it already quantized (bw), so that a
        // layer's Hessian is that of the inputs the quantized model gives it. The solves of a pass read only its
        // statistics; they are released before the next pass.
        const bool sequential = calibrated && o.true_sequential;
        const std::vector<StatisticsPass> passes = statistics_passes(sequential);
        if (sequential)  // the quantized path's block: full precision until a pass quantizes its layers
            for (Projection p : {Projection::o, Projection::gate, Projection::up, Projection::down})
                projection_weight(bw, p) = projection_weight(fpw, p);
        std::string block_bin;
        const bool write_block = !o.checkpoint_dir.empty() && (calibrated || o.spill_blocks);
        for (size_t pass = 0; pass < passes.size(); ++pass) {
            BlockStatistics st;
            if (calibrated) {
                const Clock::time_point tc = Clock::now();
                BlockStatsOptions what{two_sided, block_v, cross};
                what.inputs = passes[pass].inputs;
                what.advance_full_precision = pass + 1 == passes.size();
                st = paths->statistics(fpw, l, what, pass > 0 ? &bw : nullptr);
                rep.calibration_seconds += seconds_since(tc);
            }
            // The pass's solves. F2's D = α·D_raw, scaled in place (the raw sums are not read again; gigabytes for 8B).
            const auto alpha_scaled = [&](std::vector<float>& v) {
                parallel_for(int64_t(v.size()), int64_t(1) << 18, [&](int64_t i0, int64_t i1) {
                    for (int64_t i = i0; i < i1; ++i) v[size_t(i)] *= float(o.alpha);
                });
                return std::move(v);
            };
            std::vector<float> d_attn, d_o, d_ffn, d_down, d_v;
            if (cross) {
                d_attn = alpha_scaled(st.d_attn);
                d_o = alpha_scaled(st.d_o);
                d_ffn = alpha_scaled(st.d_ffn);
                d_down = alpha_scaled(st.d_down);
                if (block_v) d_v = alpha_scaled(st.d_v);
            }
            // The device keeps copies of the pass's statistics while its solves read them (released at the end of
            // the pass, also when a solve throws).
            struct HeldInputs {
                const SolverDevice* device;
                ~HeldInputs() {
                    if (device) device->hold_inputs({});
                }
            } held{calibrated ? o.solver_device : nullptr};
            if (held.device) {
                std::vector<ConstMatF> mats;
                for (const std::vector<float>* v : {&st.h_attn, &st.h_o, &st.h_ffn, &st.h_down, &st.h_v, &d_attn, &d_o, &d_ffn,
                                                    &d_down, &d_v})
                    if (!v->empty()) mats.emplace_back(v->data(), 1, int64_t(v->size()));
                held.device->hold_inputs(mats);
            }
            FactorCache factors;  // q/k/v and gate/up share their H_in's factorization
            for (Projection p : passes[pass].layers) {
                const Clock::time_point tl = Clock::now();
                const std::string name = linear_name(l, p);
                const std::vector<float>& w = projection_weight(fpw, p);
                LayerProblem pb;
                pb.w = w.data();
                pb.rows = projection_out_features(c, p);
                pb.cols = projection_in_features(c, p);
                pb.name = name;
                const bool attn_in = p == Projection::q || p == Projection::k || p == Projection::v;
                const bool ffn_in = p == Projection::gate || p == Projection::up;
                if (calibrated) {
                    pb.h_in = attn_in ? st.h_attn.data()
                              : p == Projection::o ? st.h_o.data()
                              : ffn_in ? st.h_ffn.data()
                                       : st.h_down.data();
                    if (cross)
                        pb.d = attn_in ? d_attn.data() : p == Projection::o ? d_o.data() : ffn_in ? d_ffn.data() : d_down.data();
                    if (two_sided && (p == Projection::q || p == Projection::k)) {
                        pb.h_out = p == Projection::q ? st.h_out_q.data() : st.h_out_k.data();
                        pb.head_rows = c.head_dim;
                    }
                    if (block_v && p == Projection::v) {
                        pb.h_in = nullptr;
                        pb.h_in_heads = st.h_v.data();
                        pb.head_rows = c.head_dim;
                        if (cross) pb.d = d_v.data();
                    }
                }
                const GridSpec g = o.per_tensor_grid ? o.per_tensor_grid(name, pb.rows, pb.cols) : o.grid;
                SolverOptions so;
                so.device = o.solver_device;
                so.factor_cache = &factors;
                so.grid = g;
                so.sweep.act_order = o.act_order;
                so.sweep.grids_up_front = o.method == PtqMethod::gptq && o.resolved_static_groups();
                so.one_sided_static_groups = o.resolved_static_groups();
                so.act_order_row = o.act_order_row;  // read by two-sided solves only
                so.damping = o.damping;
                so.dead_value = 1.0f / float(L);
                SolveStats ss;
                QuantizedWeight q;
                switch (o.method) {
                    case PtqMethod::rtn: q = solve_rtn(pb, g, &ss, o.solver_device); break;
                    case PtqMethod::gptq: q = solve_gptq(pb, so, &ss); break;
                    case PtqMethod::boa:
                        so.row_block = 1;
                        so.adaptive_grid = false;
                        q = solve_turboboa(pb, so, &ss);
                        break;
                    case PtqMethod::turboboa:
                        so.row_block = o.f1 ? o.row_block : 1;
                        so.adaptive_grid = o.f3;
                        so.refine_scales = o.f3;
                        so.refine_iters = o.refine_iters;
                        q = solve_turboboa(pb, so, &ss);
                        break;
                }
                projection_weight(bw, p) = q.dequantize();
                LayerReport lr;
                lr.name = name;
                lr.grid = g.describe();
                lr.factor_seconds = ss.factor_seconds;
                lr.sweep_seconds = ss.sweep_seconds;
                lr.refine_seconds = ss.refine_seconds;
                if (calibrated) {
                    const Clock::time_point to = Clock::now();
                    const LayerObjective obj = layer_objective_and_scale(pb, projection_weight(bw, p), o.solver_device);
                    lr.loss = obj.objective;
                    lr.rel_loss = obj.scale > 0 ? obj.objective / obj.scale : 0.0;
                    lr.objective_seconds = seconds_since(to);
                }
                lr.damping = ss.damping;
                lr.retries = ss.retries;
                lr.dead = ss.dead;
                lr.seconds = seconds_since(tl);
                rep.layers.push_back(lr);
                if (write_block) put_weight(block_bin, q);
                out.linears[name] = std::move(q);
            }
        }
        if (calibrated) {  // propagate the quantized path
            const Clock::time_point tc = Clock::now();
            paths->propagate(bw, l);
            rep.calibration_seconds += seconds_since(tc);
        }
        const std::string block_path = o.checkpoint_dir + "/block_" + std::to_string(l) + ".bin";
        if (write_block) {
            std::filesystem::create_directories(o.checkpoint_dir);
            write_file_atomic(block_path, block_bin.data(), block_bin.size());
            std::string().swap(block_bin);
        }
        const bool save_state = calibrated && !o.checkpoint_dir.empty() &&
                                (o.checkpoint_seconds <= 0 || l + 1 == c.n_layers ||
                                 seconds_since(last_state) >= o.checkpoint_seconds);
        if (save_state) {
            last_state = Clock::now();
            // The activations go from their vectors to the file: no serialized copy (4.3 GB per path for an 8B
            // model at 128 × 2048 tokens).
            std::string head(kStateMagic, 8);
            put_str(head, fp);
            put(head, int64_t(l + 1));
            paths->save(xq, xfp);
            AtomicFileWriter state(state_path);
            state.write(head.data(), head.size());
            for (const std::vector<float>* v : {&xq, &xfp}) {
                const uint64_t n = v->size();
                state.write(&n, sizeof(n));
                state.write(v->data(), n * sizeof(float));
            }
            state.commit();
        }
        drop_projections(l);
        if (o.spill_blocks) spill(l, block_path);
        rep.block_seconds.push_back(seconds_since(t_block));
        progress.update(l + 1);
        if (o.on_block_done) o.on_block_done(l);
    }
    progress.finish();
    if (paths) rep.calibration_phases = paths->phases();
    // Flag layers whose relative loss is far above the median of their projection, or that needed more damping.
    for (Projection p : kProjections) {
        std::vector<double> losses;
        for (const LayerReport& lr : rep.layers)
            if (is_projection_layer(lr.name, p)) losses.push_back(lr.rel_loss);
        if (losses.empty()) continue;
        std::nth_element(losses.begin(), losses.begin() + int64_t(losses.size() / 2), losses.end());
        const double median = losses[losses.size() / 2];
        for (LayerReport& lr : rep.layers)
            if (is_projection_layer(lr.name, p)) lr.flagged = lr.retries > 0 || (median > 0 && lr.rel_loss > 10.0 * median);
    }
    rep.seconds = seconds_since(t0);
    rep.peak_rss_bytes = peak_rss_bytes();
    if (report) *report = std::move(rep);
    return out;
}

}  // namespace lowbit
