// cmd_train.cpp — `lowbit train --device cpu`: a training run of the CPU FP32 reference (src/train/) on a
// token-shard set (io/token_shards.h, made by `lowbit tokenize-corpus`), for tiny configurations: batches
// of random windows from the train split (deterministic from the seed), the AdamW step on the schedule,
// a log line every --log-every steps, validation loss on the val split, an HF checkpoint at the end
// (config.json + model.safetensors: `lowbit info/eval --model DIR`) and a JSON report. The CUDA engine is
// not built yet.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "adahop/strategy_plan.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "io/token_shards.h"
#include "model/hf_export.h"
#include "train/train_model.h"
#include "train/trainer_cpu.h"

namespace lowbit {

namespace {

struct TrainArgs {
    std::string config = "tiny", data, device = "cpu", out, report, adahop;
    int64_t steps = 0, log_every = 0, val_windows = 8;
    int64_t seed = -1;
    int threads = 0;
    bool no_progress = false;
};

TrainConfig load_config(const TrainArgs& a) {
    TrainConfig c = a.config.ends_with(".json") ? train_config_from_file(a.config) : train_preset(a.config);
    if (a.steps > 0) {
        c.schedule.total_steps = a.steps;
        if (c.schedule.warmup_steps >= a.steps) c.schedule.warmup_steps = a.steps / 10;
    }
    if (a.seed >= 0) c.seed = uint64_t(a.seed);
    return c;
}

// The mean loss over the first n consecutive windows of the split (batch_size at a time).
double split_loss(CpuTrainer& trainer, const TokenShardSet& data, const std::string& split, int64_t n) {
    const TrainConfig& c = trainer.config();
    const int64_t window = c.seq_len + 1;
    double sum = 0;
    std::vector<int32_t> w(static_cast<size_t>(window)), inputs, targets;
    for (int64_t i0 = 0; i0 < n; i0 += c.batch_size) {
        const int64_t nb = std::min(c.batch_size, n - i0);
        inputs.clear();
        targets.clear();
        for (int64_t i = i0; i < i0 + nb; ++i) {
            data.read_sequential_window(split, i, window, w.data());
            inputs.insert(inputs.end(), w.begin(), w.end() - 1);
            targets.insert(targets.end(), w.begin() + 1, w.end());
        }
        sum += double(nb) * trainer.loss({inputs.data(), targets.data(), {nb, c.seq_len}});
    }
    return sum / double(n);
}

void run_train(const TrainArgs& a) {
    LOWBIT_CHECK(a.device == "cpu", ErrorKind::usage,
                 "--device {}: only the CPU FP32 reference trains today (--device cpu); the CUDA engine is not built yet",
                 a.device);
    LayerPlan adahop_plan;  // --adahop: the same strategy in every slot
    if (!a.adahop.empty()) adahop_plan.fwd = adahop_plan.dgrad = adahop_plan.wgrad = parse_strategy(a.adahop);
    if (a.threads > 0) set_thread_count(a.threads);
    const TokenShardSet data = TokenShardSet::open(a.data);
    LOWBIT_CHECK(data.has_split("train"), ErrorKind::input, "{}: the shard set has no train split", a.data);
    TrainConfig c = load_config(a);
    if (c.model.vocab_size != int64_t(data.manifest().vocab_size)) {  // the data defines the vocabulary
        std::fprintf(stderr, "train: vocabulary %lld from the shards (the config said %lld)\n",
                     (long long)data.manifest().vocab_size, (long long)c.model.vocab_size);
        c.model.vocab_size = int64_t(data.manifest().vocab_size);
    }
    validate_train_config(c, a.config);
    TrainLinears linears = a.adahop.empty() ? dense_train_linears(c.model)
                                            : adahop_train_linears(c.model, Plan{}, LpMatmulOptions{}, adahop_plan);
    const std::string linear_desc = linears.at(0, Projection::q).describe();
    CpuTrainer trainer(c, std::move(linears));
    const int64_t steps = c.schedule.total_steps, T = c.seq_len, B = c.batch_size;
    const int64_t log_every = a.log_every > 0 ? a.log_every : std::max<int64_t>(1, steps / 10);
    std::fprintf(stderr, "train: %s, %lld parameters, %lld layers, d %lld, %lld steps of %lld x %lld tokens, linears %s\n",
                 c.model.name.c_str(), (long long)trainer.layout().total(), (long long)c.model.n_layers,
                 (long long)c.model.hidden_size, (long long)steps, (long long)B, (long long)T, linear_desc.c_str());

    nlohmann::json log = nlohmann::json::array();
    std::vector<int32_t> windows(size_t(B * (T + 1))), inputs(size_t(B * T)), targets(size_t(B * T));
    std::unique_ptr<ProgressLine> progress;
    if (!a.no_progress) progress = std::make_unique<ProgressLine>("train", steps);
    const auto start = std::chrono::steady_clock::now();
    StepStats s;
    for (int64_t step = 0; step < steps; ++step) {
        data.sample_windows("train", c.seed, uint64_t(step), B, T + 1, windows.data());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
                inputs[size_t(b * T + t)] = windows[size_t(b * (T + 1) + t)];
                targets[size_t(b * T + t)] = windows[size_t(b * (T + 1) + t + 1)];
            }
        s = trainer.step({inputs.data(), targets.data(), {B, T}});
        if (progress) progress->update(step + 1);
        if ((step + 1) % log_every == 0 || step + 1 == steps) {
            std::fprintf(stderr, "%sstep %6lld  loss %.4f  lr %.3g  grad norm %.3g%s\n", progress ? "\n" : "",
                         (long long)step, s.loss, s.lr, s.grad_norm, s.clip_scale < 1 ? " (clipped)" : "");
            log.push_back({{"step", step}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm}});
        }
    }
    if (progress) progress->finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t val_windows =
        data.has_split("val") ? std::min(a.val_windows, data.sequential_window_count("val", T + 1)) : 0;
    const bool has_val = val_windows > 0;
    const double val_loss = has_val ? split_loss(trainer, data, "val", val_windows) : 0.0;

    std::printf("steps %lld  tokens %lld  time %.1f s  %.0f tokens/s\n", (long long)steps, (long long)(steps * B * T),
                seconds, double(steps * B * T) / seconds);
    std::printf("last train loss %.4f%s\n", s.loss,
                has_val ? fmt::format("  validation loss {:.4f} ({} windows)", val_loss, val_windows).c_str() : "");
    if (!a.out.empty()) {
        export_hf_checkpoint(to_llama_model(trainer.layout(), trainer.params().data()), a.out);
        std::printf("model: %s (HF checkpoint: config.json + model.safetensors)\n", a.out.c_str());
    }
    if (!a.report.empty()) {
        nlohmann::json j = {{"command", "train"},       {"device", a.device},     {"data", a.data},
                            {"config", train_config_to_json(c)}, {"linears", linear_desc}, {"parameters", trainer.layout().total()},
                            {"seconds", seconds},       {"log", log},             {"final_train_loss", s.loss}};
        if (has_val) j["validation_loss"] = {{"loss", val_loss}, {"windows", val_windows}};
        const std::string text = j.dump(2) + "\n";
        write_file_atomic(a.report, text.data(), text.size());
    }
}

}  // namespace

void register_train_command(CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    auto* c = app.add_subcommand("train", "train a Llama-architecture model from scratch on token shards (CPU FP32 reference)");
    c->add_option("--config", a->config, "preset tiny | small | base, or a training config FILE.json (src/train/train_model.h); default tiny");
    c->add_option("--data", a->data, "token-shard directory (lowbit tokenize-corpus)")->required();
    c->add_option("--device", a->device, "cpu (the only one today)");
    c->add_option("--steps", a->steps, "optimizer steps (default: the config's; a longer warm-up is cut to a tenth)");
    c->add_option("--seed", a->seed, "initialization and batch seed (default: the config's)");
    c->add_option("--adahop", a->adahop, "every projection's three GEMMs through AdaHOP's lp_matmul (MXFP4) with this strategy: hadamard, none, …");
    c->add_option("--log-every", a->log_every, "a log line every N steps (default: a tenth of the run)");
    c->add_option("--val-windows", a->val_windows, "validation windows scored at the end (default 8)");
    c->add_option("--out", a->out, "write the trained model as an HF checkpoint into this directory");
    c->add_option("--report", a->report, "write a JSON report");
    c->add_option("--threads", a->threads, "worker threads (default: all cores)");
    c->add_flag("--no-progress", a->no_progress, "no progress line on stderr");
    c->callback([a] { run_train(*a); });
}

}  // namespace lowbit
