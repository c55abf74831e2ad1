// cmd_train.cpp — `lowbit train`: a training run into a run directory (train/training_run.h,
// train/checkpoint.h) on a token-shard set (io/token_shards.h, made by `lowbit tokenize-corpus`), on the CPU
// FP32 reference or the CUDA engine, under a precision recipe (train/recipe.h). Batches are random windows
// of the train split that depend only on (seed, step), so a run resumed from its newest checkpoint
// (--resume) takes the very steps of one that never stopped. Per logged step a line of DIR/metrics.jsonl
// (train/run_metrics.h) and of stderr;
// validation on the val split every --val-every steps and at the end; checkpoints every
// --checkpoint-every steps and when the call stops (--stop-at, --time-limit); with --probe-every, the
// per-slot GEMM errors in DIR/slot_errors.jsonl (training_run.h). When the run is complete: the
// model exported as DIR/hf/ (HF checkpoint: config.json + model.safetensors) and DIR/model.gguf (llama
// GGUF, --export-dtype), and DIR/report.json (the JSON report, with the recipe's strategy map).
//
// The old `--adahop STRATEGY` (one strategy in every slot) is folded into --precision: mxfp4 (plain) and
// mxfp4-iht (hadamard) are its two useful cases; the AdaHOP recipes choose per layer and slot.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "io/token_shards.h"
#include "model/hf_export.h"
#include "train/mx_census_report.h"
#include "train/recipe.h"
#include "train/run_metrics.h"
#include "train/training_run.h"
#include "train/train_export.h"
#include "train/train_model.h"
#include "train/trainer.h"
#include "train/trainer_cpu.h"

namespace lowbit {

namespace {

namespace fs = std::filesystem;

struct TrainArgs {
    std::string config = "tiny", data, device = "cpu", out, report, precision = "bf16", export_dtype = "f32", tokenizer;
    std::string mx_gemm = "emulated", mx_slots, mx_projections, mx_layers, mx_scale_rule;
    int64_t steps = 0, log_every = 0, val_every = 0, val_windows = 8, checkpoint_every = 0, stop_at = 0, probe_every = 0;
    std::string probe_batch = "val";
    int64_t seed = -1, calibration_steps = 0, batch_size = 0, grad_accum = 0;
    int keep_checkpoints = 2;
    double time_limit = 0, peak_tflops = 0;
    int threads = 0;
    bool resume = false, no_progress = false, mx_census = false;
};

TrainConfig load_config(const TrainArgs& a, const TokenShardSet& data) {
    TrainConfig c = a.config.ends_with(".json") ? train_config_from_file(a.config) : train_preset(a.config);
    if (a.steps > 0) {
        c.schedule.total_steps = a.steps;
        if (c.schedule.warmup_steps >= a.steps) c.schedule.warmup_steps = a.steps / 10;
    }
    if (a.seed >= 0) c.seed = uint64_t(a.seed);
    if (a.batch_size > 0) c.batch_size = a.batch_size;
    if (a.grad_accum > 0) c.grad_accum = a.grad_accum;
    if (c.model.vocab_size != int64_t(data.manifest().vocab_size)) {  // the data defines the vocabulary
        std::fprintf(stderr, "train: vocabulary %lld from the shards (the config said %lld)\n",
                     (long long)data.manifest().vocab_size, (long long)c.model.vocab_size);
        c.model.vocab_size = int64_t(data.manifest().vocab_size);
    }
    validate_train_config(c, a.config);
    return c;
}

std::unique_ptr<Trainer> make_trainer(const std::string& device, const TrainConfig& c, const Recipe& r) {
    if (device == "cpu") return std::make_unique<CpuTrainer>(c, r);
    LOWBIT_CHECK(device == "cuda", ErrorKind::usage, "--device {}: cpu or cuda", device);
#if defined(LOWBIT_HAVE_CUDA)
    return make_cuda_trainer(c, r);
#else
    fail(ErrorKind::usage, "--device cuda: this lowbit was built without CUDA (configure with the h200 preset)");
#endif
}

void run_train(const TrainArgs& a) {
    if (a.threads > 0) set_thread_count(a.threads);
    const TokenShardSet data = TokenShardSet::open(a.data);
    const TrainConfig c = load_config(a, data);
    Recipe recipe;
    recipe.precision = parse_precision(a.precision);
    if (a.calibration_steps > 0) recipe.calibration_steps = int(a.calibration_steps);
    if (!a.mx_slots.empty()) recipe.mx_slots = parse_slot_mask(a.mx_slots);
    if (!a.mx_projections.empty()) recipe.mx_projections = parse_projection_mask(a.mx_projections);
    if (!a.mx_layers.empty()) recipe.mx_layers = parse_layer_mask(a.mx_layers);
    if (!a.mx_scale_rule.empty()) recipe.mx_scale_rule = parse_mx_scale_rule(a.mx_scale_rule);
    LOWBIT_CHECK(a.mx_gemm == "emulated" || a.mx_gemm == "tensor-cores" || a.mx_gemm == "tensor-cores-columns",
                 ErrorKind::usage, "--mx-gemm {}: emulated, tensor-cores or tensor-cores-columns", a.mx_gemm);
    recipe.mx_tensor_cores = a.mx_gemm != "emulated";
    recipe.mx_column_bases = a.mx_gemm == "tensor-cores-columns";
    LOWBIT_CHECK(!recipe.mx_tensor_cores || a.device == "cuda", ErrorKind::usage,
                 "--mx-gemm {} runs on the CUDA engine only (--device cuda); the CPU reference emulates", a.mx_gemm);
    LOWBIT_CHECK(!a.mx_census || recipe.mx_tensor_cores, ErrorKind::usage,
                 "--mx-census counts the tensor-core products: it needs --mx-gemm tensor-cores (and --device cuda)");
    std::unique_ptr<Trainer> trainer = make_trainer(a.device, c, recipe);
    if (a.mx_census) trainer->set_mx_census(true);
    std::fprintf(stderr, "train: %s, %lld parameters, %lld layers, d %lld, %lld steps of %lld x %lld tokens%s, %s\n",
                 c.model.name.c_str(), (long long)trainer->layout().total(), (long long)c.model.n_layers,
                 (long long)c.model.hidden_size, (long long)c.schedule.total_steps, (long long)c.batch_size,
                 (long long)c.seq_len,
                 c.grad_accum > 1 ? fmt::format(" ({} micro-batches of {})", c.grad_accum, micro_batch_size(c)).c_str() : "",
                 trainer->describe().c_str());

    RunOptions o;
    o.run_dir = a.out;
    o.data_dir = a.data;
    o.resume = a.resume;
    o.log_every = a.log_every > 0 ? a.log_every : std::max<int64_t>(1, c.schedule.total_steps / 10);
    o.val_every = a.val_every;
    o.val_windows = a.val_windows;
    o.checkpoint_every = a.checkpoint_every;
    o.keep_checkpoints = a.keep_checkpoints;
    o.stop_at = a.stop_at;
    o.time_limit_s = a.time_limit;
    o.peak_flops = a.peak_tflops * 1e12;
    o.probe_every = a.probe_every;
    o.probe_train_batch = a.probe_batch == "train";
    o.progress = !a.no_progress;
    o.log = true;
    RunResult r = run_training(*trainer, data, o);

    const int64_t T = c.seq_len, B = c.batch_size;
    const int64_t tokens_this_call = (r.steps_done - r.first_step) * B * T;
    std::printf("steps %lld of %lld  tokens this call %lld  time %.1f s  %.0f tokens/s\n", (long long)r.steps_done,
                (long long)r.total_steps, (long long)tokens_this_call, r.seconds,
                r.seconds > 0 ? double(tokens_this_call) / r.seconds : 0.0);
    std::printf("strategies:");
    for (const auto& [name, n] : trainer->recipe().strategy_counts()) std::printf("  %s %lld", name.c_str(), (long long)n);
    std::printf("\n");
    nlohmann::json census;
    if (a.mx_census) {
        census = mx_census_report(trainer->mx_census(), r.steps_done - r.first_step);
        print_mx_census(census, stdout);
    }
    if (!r.complete()) {
        std::printf("stopped after %lld of %lld steps: run the same command with --resume to continue (%s)\n",
                    (long long)r.steps_done, (long long)r.total_steps, a.out.c_str());
        return;
    }

    // The run is complete: the last validation, the exports and the report.
    if (r.val_windows > 0 && !r.val_loss) r.val_loss = validation_loss(*trainer, data, r.val_windows / B);
    if (r.steps_done > r.first_step) std::printf("last train loss %.4f", r.last.loss);
    if (r.val_loss) std::printf("  validation loss %.4f (%lld windows)", *r.val_loss, (long long)r.val_windows);
    std::printf("\n");
    const LlamaModel model = to_llama_model(trainer->layout(), trainer->state().params.data());
    export_hf_checkpoint(model, (fs::path(a.out) / "hf").string());
    std::string why;
    const std::optional<Tokenizer> tok = shard_set_tokenizer(data.manifest(), a.tokenizer, why);
    if (!tok) std::fprintf(stderr, "train: model.gguf without a tokenizer: %s\n", why.c_str());
    const std::string gguf_path = (fs::path(a.out) / "model.gguf").string();
    export_llama_gguf(model, gguf_path, parse_export_dtype(a.export_dtype), tok ? &*tok : nullptr);
    std::printf("model: %s (HF checkpoint) and %s (GGUF %s, %s)\n", (fs::path(a.out) / "hf").string().c_str(),
                gguf_path.c_str(), a.export_dtype.c_str(), tok ? "with the shards' tokenizer" : "no tokenizer");

    nlohmann::json report = {{"command", "train"},
                             {"device", a.device},
                             {"trainer", trainer->describe()},
                             {"data", a.data},
                             {"run_dir", a.out},
                             {"config", train_config_to_json(c)},
                             {"precision", precision_name(recipe.precision)},
                             {"mx_gemm", a.mx_gemm},
                             {"parameters", trainer->layout().total()},
                             {"seconds_this_call", r.seconds},
                             {"strategy_counts", nlohmann::json(trainer->recipe().strategy_counts())},
                             {"saved_operand_bytes", trainer->saved_operand_bytes()},
                             {"saved_operand_bytes_bf16", trainer->saved_operand_bytes_bf16()},
                             {"peak_device_bytes", trainer->peak_device_bytes()},
                             {"log", read_metrics(r.metrics_path)}};
    if (r.steps_done > r.first_step) report["final_train_loss"] = r.last.loss;
    if (!trainer->recipe().plan().layers.empty()) report["plan"] = plan_to_json(trainer->recipe().plan());
    if (a.mx_census) report["mx_census"] = census;
    if (r.val_loss) report["validation_loss"] = {{"loss", *r.val_loss}, {"windows", r.val_windows}};
    const std::string text = report.dump(2) + "\n";
    const std::string report_path = a.report.empty() ? (fs::path(a.out) / "report.json").string() : a.report;
    write_file_atomic(report_path, text.data(), text.size());
}

}  // namespace

void register_train_command(CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    auto* c = app.add_subcommand("train", "train a Llama-architecture model from scratch on token shards (CPU FP32 reference or CUDA)");
    c->add_option("--config", a->config, "preset tiny | small | base, or a training config FILE.json (src/train/train_model.h); default tiny");
    c->add_option("--data", a->data, "token-shard directory (lowbit tokenize-corpus)")->required();
    c->add_option("--out", a->out, "the run directory: config.json, metrics.jsonl, checkpoints/, and at the end hf/, model.gguf, report.json")->required();
    c->add_option("--device", a->device, "cpu (FP32 reference) or cuda (default cpu)");
    c->add_option("--precision", a->precision, "bf16 | mxfp4 | mxfp4-iht | mxfp4-rht-sr | adahop-lv1 | adahop-lv2 (default bf16)");
    c->add_option("--mx-gemm", a->mx_gemm,
                  "the MXFP4 main products: emulated (dequantized to BF16, cuBLAS; the default), tensor-cores (exact "
                  "INT8-stage GEMM, adahop/cuda/mx_gemm_fp8.cuh; the same results up to FP32 summation order) or "
                  "tensor-cores-columns (the same with one INT8 base per column of B); CUDA");
    c->add_flag("--mx-census", a->mx_census,
                "count the tensor-core products' window units outside the INT8 window and the output tiles sent to "
                "the slow per-block path, per projection and slot; printed at the end and in report.json "
                "(needs --mx-gemm tensor-cores)");
    c->add_option("--mx-slots", a->mx_slots,
                  "the GEMM slots the MXFP4 recipe quantizes, e.g. fwd,dgrad (of fwd, dgrad, wgrad; default all); the "
                  "others run in BF16: an ablation of where a recipe's loss gap comes from");
    c->add_option("--mx-projections", a->mx_projections,
                  "the projections the MXFP4 recipe quantizes, e.g. attn or gate,up (of q, k, v, o, gate, up, down; attn = "
                  "q,k,v,o, ffn = gate,up,down; default all); the others run in BF16");
    c->add_option("--mx-layers", a->mx_layers,
                  "the blocks the MXFP4 recipe quantizes, e.g. 1-4 or 0,5 (block indices from 0; default all); the "
                  "others run in BF16");
    c->add_option("--mx-scale-rule", a->mx_scale_rule,
                  "the MX block-scale rule of every quantized operand: midmax (AdaHOP's kernels; the default), floor "
                  "(OCP: clips block maxima above 6·2^s) or rceil (2^ceil(log2(amax/6)): never clips)");
    c->add_option("--calibration-steps", a->calibration_steps, "AdaHOP's calibration steps (default 30)");
    c->add_option("--steps", a->steps, "optimizer steps of the run (default: the config's; a longer warm-up is cut to a tenth)");
    c->add_option("--seed", a->seed, "initialization and batch seed (default: the config's)");
    c->add_option("--batch-size", a->batch_size, "sequences per optimizer step (default: the config's)");
    c->add_option("--grad-accum", a->grad_accum,
                  "run each step as N micro-batches of batch-size/N sequences, gradients summed: the same step in a "
                  "N-th of the activation memory (default: the config's, 1); a resume may change it");
    c->add_flag("--resume", a->resume, "continue the run in --out from its newest checkpoint (refused if its config differs)");
    c->add_option("--checkpoint-every", a->checkpoint_every, "a checkpoint every N steps (and always when the call stops)");
    c->add_option("--keep-checkpoints", a->keep_checkpoints, "checkpoints kept (default 2)");
    c->add_option("--stop-at", a->stop_at, "stop this call after this many steps of the run, with a checkpoint (resume later)");
    c->add_option("--time-limit", a->time_limit, "stop this call after the step that passes this many seconds, with a checkpoint");
    c->add_option("--log-every", a->log_every, "a metrics line every N steps (default: a tenth of the run)");
    c->add_option("--val-every", a->val_every, "validation loss every N steps (default: at the end only)");
    c->add_option("--val-windows", a->val_windows, "validation windows, rounded up to whole batches (default 8)");
    c->add_option("--probe-every", a->probe_every,
                  "every N steps, each projection slot's GEMM error vs BF16 (CPU: FP32) under its strategy and each MXFP4 "
                  "one, and whether the wgrad error repeats from probe to probe, into DIR/slot_errors.jsonl (a diagnostic: "
                  "the probe's time counts in tokens/s)");
    c->add_option("--probe-batch", a->probe_batch,
                  "the probe's batch: val (the first val batch, the same every probe; default) or train (the step's, new "
                  "every probe: what the wgrad consistency needs)")
        ->check(CLI::IsMember({"val", "train"}));
    c->add_option("--peak-tflops", a->peak_tflops, "the device's peak TFLOP/s, for the mfu of the metrics (default: no mfu)");
    c->add_option("--export-dtype", a->export_dtype, "matrices of model.gguf: f32 | f16 | bf16 (default f32)");
    c->add_option("--tokenizer", a->tokenizer, "the tokenizer written into model.gguf (default: the shards' own, if it can be loaded)");
    c->add_option("--report", a->report, "write the JSON report here instead of DIR/report.json");
    c->add_option("--threads", a->threads, "worker threads (default: all cores)");
    c->add_flag("--no-progress", a->no_progress, "no progress line on stderr");
    c->callback([a] { run_train(*a); });
}

}  // namespace lowbit
