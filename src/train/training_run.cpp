// training_run.cpp — the run loop: the run directory, batches, steps, metrics, validation, checkpoints and
// resume (see training_run.h).
#include "train/training_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/progress.h"
#include "core/wall_clock.h"
#include "io/npy.h"
#include "train/checkpoint.h"
#include "train/run_metrics.h"

namespace lowbit {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Windows of batch × (T + 1) tokens and the inputs / next-token targets made from them.
struct WindowBatch {
    int64_t b, t;
    std::vector<int32_t> windows, inputs, targets;
    WindowBatch(int64_t batch, int64_t seq)
        : b(batch), t(seq), windows(size_t(batch * (seq + 1))), inputs(size_t(batch * seq)), targets(size_t(batch * seq)) {}
    TokenBatch tokens() {
        for (int64_t s = 0; s < b; ++s)
            for (int64_t i = 0; i < t; ++i) {
                inputs[size_t(s * t + i)] = windows[size_t(s * (t + 1) + i)];
                targets[size_t(s * t + i)] = windows[size_t(s * (t + 1) + i + 1)];
            }
        return {inputs.data(), targets.data(), {b, t}};
    }
};

// Opens DIR for this run (new or resumed); returns the metrics lines to keep.
int64_t open_run_dir(Trainer& trainer, const TokenShardSet& data, const RunOptions& o) {
    const std::string config_path = (fs::path(o.run_dir) / "config.json").string();
    const nlohmann::json run_config = run_config_json(trainer.config(), trainer.recipe().recipe(), o.data_dir,
                                                      shard_set_checksum(data.manifest()));
    const bool existing = fs::exists(config_path);
    LOWBIT_CHECK(!existing || o.resume, ErrorKind::usage,
                 "{} already holds a training run; resume it (--resume) or train into another --out", o.run_dir);
    if (!existing) {
        fs::create_directories(o.run_dir);
        const std::string text = run_config.dump(2) + "\n";
        write_file_atomic(config_path, text.data(), text.size());
        return 0;
    }
    const std::vector<uint8_t> bytes = read_file(config_path);
    const nlohmann::json saved = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    LOWBIT_CHECK(!saved.is_discarded(), ErrorKind::input, "{}: not valid JSON", config_path);
    check_same_run(saved, run_config, config_path);
    const std::optional<std::string> newest = newest_checkpoint(o.run_dir);
    if (!newest) return 0;
    const Checkpoint c = load_checkpoint(*newest, trainer.layout().total());
    trainer.set_state(c.state);
    if (o.log)
        std::fprintf(stderr, "train: resumed from %s (%lld steps done)\n", newest->c_str(), (long long)c.state.steps_done);
    return c.metrics_lines;
}

// The lines of DIR/slot_errors.jsonl a resume at `first_step` keeps: those of the probes before it.
int64_t probe_lines_before(const std::string& path, int64_t first_step) {
    if (!fs::exists(path)) return 0;
    int64_t n = 0;
    for (const nlohmann::json& line : read_metrics(path)) {
        const int64_t step = line.is_object() && line.contains("step") && line["step"].is_number_integer()
                                 ? line["step"].get<int64_t>()
                                 : 0;
        if (step >= first_step) break;
        ++n;
    }
    return n;
}

nlohmann::json slot_errors_json(int64_t step, const char* batch, const std::vector<SlotError>& errors,
                                const ErrorConsistency& consistency) {
    nlohmann::json slots = nlohmann::json::array();
    for (const SlotError& e : errors) {
        nlohmann::json j = {{"layer", e.layer},
                            {"projection", projection_name(e.projection)},
                            {"slot", slot_name(e.slot)},
                            {"active", strategy_short_name(e.active)},
                            {"active_error", e.active_error}};
        for (size_t i = 0; i < kProbeStrategies.size(); ++i) j[strategy_short_name(kProbeStrategies[i])] = e.error[i];
        slots.push_back(std::move(j));
    }
    return {{"step", step},
            {"batch", batch},
            {"slots", std::move(slots)},
            {"wgrad_consistency",
             {{"probes", consistency.batches()},
              {"by_projection", consistency.by_projection_json({kProbeStrategies.begin(), kProbeStrategies.end()})}}}};
}

}  // namespace

double validation_loss(Trainer& trainer, const TokenShardSet& data, int64_t batches) {
    const TrainConfig& c = trainer.config();
    WindowBatch batch(c.batch_size, c.seq_len);
    double sum = 0;
    for (int64_t k = 0; k < batches; ++k) {
        for (int64_t s = 0; s < c.batch_size; ++s)
            data.read_sequential_window("val", k * c.batch_size + s, c.seq_len + 1,
                                        batch.windows.data() + s * (c.seq_len + 1));
        sum += trainer.loss(batch.tokens());
    }
    return sum / double(batches);
}

RunResult run_training(Trainer& trainer, const TokenShardSet& data, const RunOptions& o) {
    LOWBIT_CHECK(data.has_split("train"), ErrorKind::input, "{}: the shard set has no train split", o.data_dir);
    const TrainConfig& c = trainer.config();
    const int64_t steps = c.schedule.total_steps, B = c.batch_size, T = c.seq_len;
    const int64_t stop_at = o.stop_at > 0 ? std::min(o.stop_at, steps) : steps;
    const int64_t log_every = std::max<int64_t>(1, o.log_every);
    const int64_t keep_lines = open_run_dir(trainer, data, o);

    RunResult r;
    r.metrics_path = (fs::path(o.run_dir) / "metrics.jsonl").string();
    MetricsLog metrics(r.metrics_path, keep_lines);
    const int64_t val_batches =
        data.has_split("val")
            ? std::min((std::max<int64_t>(1, o.val_windows) + B - 1) / B, data.sequential_window_count("val", T + 1) / B)
            : 0;
    r.val_windows = val_batches * B;
    r.first_step = trainer.steps_done();
    r.total_steps = steps;
    const double flops_per_token = model_flops_per_token(c.model, T);

    WindowBatch batch(B, T);
    std::unique_ptr<MetricsLog> probes;
    WindowBatch probe_batch(B, T);
    ErrorConsistency consistency(Slot::wgrad);
    // The trainer outlives this call: the observer, which points at `consistency`, is cleared on every way out.
    struct ObserverReset {
        Trainer& t;
        ~ObserverReset() { t.set_probe_observer({}); }
    } observer_reset{trainer};
    if (o.probe_every > 0) {
        trainer.set_probe_observer([&consistency](const ProductObservation& p) { consistency.observe(p); });
        const std::string path = (fs::path(o.run_dir) / "slot_errors.jsonl").string();
        probes = std::make_unique<MetricsLog>(path, probe_lines_before(path, r.first_step));
        if (val_batches > 0)
            for (int64_t s = 0; s < B; ++s)
                data.read_sequential_window("val", s, T + 1, probe_batch.windows.data() + s * (T + 1));
    }
    std::unique_ptr<ProgressLine> progress;
    if (o.progress && stop_at > r.first_step) progress = std::make_unique<ProgressLine>("train", stop_at - r.first_step);
    const char* nl = progress ? "\n" : "";
    const auto start = Clock::now();
    auto line_time = start;
    int64_t line_tokens = r.first_step * B * T;
    for (int64_t step = r.first_step; step < stop_at; ++step) {
        data.sample_windows("train", c.seed, uint64_t(step), B, T + 1, batch.windows.data());
        const bool was_calibrating = trainer.recipe().calibrating();
        r.last = trainer.step(batch.tokens());
        if (was_calibrating && !trainer.recipe().calibrating()) {
            plan_save(trainer.recipe().plan(), (fs::path(o.run_dir) / "plan.json").string());
            if (o.log)
                std::fprintf(stderr, "%strain: AdaHOP plan fixed after %lld calibration steps (fwd/dgrad/wgrad):\n%s", nl,
                             (long long)(step + 1), trainer.recipe().plan_map().c_str());
        }
        const bool last = step + 1 == steps;
        const bool validate = val_batches > 0 && ((o.val_every > 0 && (step + 1) % o.val_every == 0) || last);
        r.val_loss.reset();
        if (validate) r.val_loss = validation_loss(trainer, data, val_batches);
        if (probes && (step + 1) % o.probe_every == 0) {
            const bool on_val = val_batches > 0 && !o.probe_train_batch;
            if (!on_val) probe_batch.windows = batch.windows;
            const std::vector<SlotError> errors = trainer.probe_slot_errors(probe_batch.tokens());
            consistency.end_batch();
            probes->append(slot_errors_json(step, on_val ? "val" : "train", errors, consistency));
        }
        if ((step + 1) % log_every == 0 || validate || last) {
            const auto now = Clock::now();
            const int64_t tokens = (step + 1) * B * T;
            const double secs = std::chrono::duration<double>(now - line_time).count();
            const double tokens_per_s = secs > 0 ? double(tokens - line_tokens) / secs : 0.0;
            nlohmann::json line = {{"step", step},
                                   {"loss", r.last.loss},
                                   {"lr", r.last.lr},
                                   {"grad_norm", r.last.grad_norm},
                                   {"clip_scale", r.last.clip_scale},
                                   {"tokens", tokens},
                                   {"strategies", nlohmann::json(trainer.recipe().strategy_counts())}};
            if (r.val_loss) line["val_loss"] = *r.val_loss;
            line["tokens_per_s"] = tokens_per_s;
            if (o.peak_flops > 0) line["mfu"] = tokens_per_s * flops_per_token / o.peak_flops;
            metrics.append(line);
            if (o.log)
                std::fprintf(stderr, "%sstep %6lld  loss %.4f%s  lr %.3g  grad norm %.3g%s  %.0f tokens/s\n", nl,
                             (long long)step, r.last.loss,
                             r.val_loss ? fmt::format("  val {:.4f}", *r.val_loss).c_str() : "", r.last.lr,
                             r.last.grad_norm, r.last.clip_scale < 1 ? " (clipped)" : "", tokens_per_s);
            line_time = now;
            line_tokens = tokens;
        }
        if (progress) progress->update(step + 1 - r.first_step);
        const double elapsed = seconds_since(start);
        const bool out_of_time = o.time_limit_s > 0 && elapsed >= o.time_limit_s && step + 1 < stop_at;
        if ((o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) || step + 1 == stop_at || out_of_time)
            save_checkpoint(o.run_dir, {trainer.state(), metrics.lines()}, o.keep_checkpoints);
        if (out_of_time) {
            if (o.log)
                std::fprintf(stderr, "%strain: the time limit of %.0f s passed after step %lld\n", nl, o.time_limit_s,
                             (long long)step);
            break;
        }
    }
    if (progress) progress->finish();
    r.seconds = seconds_since(start);
    r.steps_done = trainer.steps_done();
    return r;
}

}  // namespace lowbit
