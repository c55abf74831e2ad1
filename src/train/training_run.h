// training_run.h — the loop of a training run in its run directory (train/checkpoint.h), whatever the
// device: batches from the train split that depend only on (seed, step) (TokenShardSet::sample_windows),
// Trainer::step, a metrics line per logged step (train/run_metrics.h), validation, checkpoints, and the
// resume that makes a stopped run continue as if it never stopped:
//   * a new run refuses a directory that already holds config.json (pass resume);
//   * resume = true: the directory's config.json must equal this run's (check_same_run names the key that
//     differs), the newest complete checkpoint is loaded (Trainer::set_state) and metrics.jsonl is cut
//     back to the lines written up to it; without config.json it starts the run.
// Guarantee (tested on the CPU): N steps straight and k steps + resume + N − k steps give bit-identical
// parameters, AdamW moments and metrics lines (timing keys aside). A NaN/Inf loss or gradient stops the
// run with Trainer::step's error; the last checkpoint written stays the last good one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/token_shards.h"
#include "train/trainer.h"

namespace lowbit {

struct RunOptions {
    std::string run_dir;             // DIR
    std::string data_dir;            // recorded in config.json
    bool resume = false;
    int64_t log_every = 1;           // a metrics line every N steps (and on validation steps and the last)
    int64_t val_every = 0;           // validation every N steps (0: only after the last step of the run)
    int64_t val_windows = 8;         // rounded up to whole batches, capped by the val split
    int64_t checkpoint_every = 0;    // 0: only when the call stops
    int keep_checkpoints = 2;
    int64_t stop_at = 0;             // stop this call after this many steps of the run (0: the run's end)
    double time_limit_s = 0;         // stop this call after the step that passes it (0: none)
    double peak_flops = 0;           // for "mfu" (0: omitted)
    // Every N steps (0: never) Trainer::probe_slot_errors on the first batch of the val split (the step's
    // train batch without one, or with probe_train_batch), one JSON line per probe appended to DIR/slot_errors.jsonl:
    //   {"step": s, "batch": "val"|"train", "slots": [{"layer", "projection", "slot", "active",
    //    "active_error", "plain", "IHT", "IHT+OE-left", "IHT+OE-right"}, …],
    //    "wgrad_consistency": {"probes": n, "by_projection": {"attn_q": {"plain": {"consistency", "relative",
    //    "cosine"}, …}, …}}}
    // (errors relative to the BF16 product of the same operands; a resume keeps the lines before its step).
    // wgrad_consistency: ErrorConsistency (operand_analysis.h) over this call's probes so far — is the weight
    // gradient's error under each strategy the same from probe to probe (systematic: it accumulates) or independent
    // (it averages out)? Meaningful on train batches, which differ from probe to probe; it keeps (strategies + 1) ×
    // the block parameters in host memory.
    int64_t probe_every = 0;
    bool probe_train_batch = false;
    bool progress = true;            // the progress line on stderr
    bool log = true;                 // a line per logged step, the resume and the AdaHOP plan map on stderr
};

struct RunResult {
    int64_t first_step = 0;          // steps done when this call began
    int64_t steps_done = 0;          // when it ended
    int64_t total_steps = 0;         // of the run (config.schedule.total_steps)
    StepStats last;                  // of the last step this call took
    std::optional<double> val_loss;  // of the last step, when validation ran there
    int64_t val_windows = 0;         // windows a validation scores (0: no val split long enough)
    double seconds = 0;
    std::string metrics_path;
    bool complete() const { return steps_done == total_steps; }
};

RunResult run_training(Trainer& trainer, const TokenShardSet& data, const RunOptions& options);

// The mean loss over the first `batches` whole batches of consecutive windows of the val split.
double validation_loss(Trainer& trainer, const TokenShardSet& data, int64_t batches);

}  // namespace lowbit
