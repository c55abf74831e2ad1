// run_metrics.h — what a training run logs, DIR/metrics.jsonl (one JSON object per line, appended as the
// run goes; `lowbit plot` reads it), and the model FLOPs behind the MFU.
//
// One line per logged step: every --log-every steps, every step where validation runs, and the last step.
//   step         index of the optimizer step (from 0)
//   loss         mean train loss of the step's batch (before the update)
//   lr           the schedule's learning rate of the step
//   grad_norm    global gradient norm before clipping;  clip_scale  the factor applied (1: not clipped)
//   tokens       tokens trained through this step: (step + 1)·batch_size·seq_len
//   strategies   the recipe's strategy counts over all block-projection slots ({"BF16": 14} while AdaHOP
//                calibrates, then e.g. {"IHT": 30, "IHT+OE-right": 12}) (RecipeState::strategy_counts)
//   val_loss     mean loss over the validation windows (only on validation steps)
//   tokens_per_s tokens per second since the previous line of this process (timing)
//   mfu          model FLOPs per second / the peak given (timing; only when a peak is given)
// Every key but the timing keys depends only on the config, the data and the recipe: a resumed run writes
// the same lines as one that never stopped, up to the timing keys (metrics_timing_keys).
//
// Model FLOPs per token (forward + backward = 3 × forward, PaLM appendix B / llm.c):
//   6·P_gemm + 12·n_layers·q_dim·seq_len
// P_gemm = the weights that are GEMM operands: every block projection and the LM head (vocab·d, tied or not;
// the embedding lookup costs no FLOPs), so norms and embeddings are not counted. The attention term counts
// QKᵀ and P·V over the full T×T (the causal half is not subtracted, as PaLM and llm.c count it).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/plot.h"
#include "model/config.h"

namespace lowbit {

double model_flops_per_token(const LlamaConfig& c, int64_t seq_len);

// The keys whose values depend on time, not only on the run ("tokens_per_s", "mfu").
const std::vector<std::string>& metrics_timing_keys();

// DIR/metrics.jsonl opened for appending after its first `keep_lines` lines (0: a new run; a resume keeps
// the lines up to its checkpoint and drops the later ones, rewriting the file atomically). Error(input)
// when the file holds fewer lines than `keep_lines`.
class MetricsLog {
public:
    MetricsLog(std::string path, int64_t keep_lines);
    // One line, flushed at once (a killed run loses no logged step).
    void append(const nlohmann::json& line);
    int64_t lines() const { return lines_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    std::ofstream out_;
    int64_t lines_ = 0;
};

// Every line of a metrics file; Error(input) naming the file and the line when one is not a JSON object.
std::vector<nlohmann::json> read_metrics(const std::string& path);

// `lowbit plot`: the curve of `metric` ("loss" or "val_loss") of each run directory in one line plot, x =
// step + 1 (lines without the metric are skipped), labelled by the precision in the run's config.json (its
// directory's name when there is none; both when two runs share a precision). Error(input) for a directory
// without metrics.jsonl or without a line that has the metric; Error(usage) for another metric.
LinePlot run_curves_plot(const std::vector<std::string>& run_dirs, const std::string& metric, const std::string& title,
                         bool log_y = false);

}  // namespace lowbit
