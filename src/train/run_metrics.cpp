// run_metrics.cpp — the metrics file of a run and the model FLOPs per token (see run_metrics.h).
#include "train/run_metrics.h"

#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "io/npy.h"
#include "model/linear.h"

namespace lowbit {

double model_flops_per_token(const LlamaConfig& c, int64_t seq_len) {
    double gemm_params = double(c.vocab_size) * double(c.hidden_size);  // the LM head
    for (Projection p : kProjections)
        gemm_params += double(c.n_layers) * double(projection_in_features(c, p)) * double(projection_out_features(c, p));
    return 6.0 * gemm_params + 12.0 * double(c.n_layers) * double(c.q_dim()) * double(seq_len);
}

const std::vector<std::string>& metrics_timing_keys() {
    static const std::vector<std::string> keys = {"tokens_per_s", "mfu"};
    return keys;
}

namespace {

std::vector<std::string> file_lines(const std::string& path) {
    const std::vector<uint8_t> bytes = read_file(path);
    std::vector<std::string> lines;
    std::istringstream in(std::string(bytes.begin(), bytes.end()));
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
    return lines;
}

}  // namespace

MetricsLog::MetricsLog(std::string path, int64_t keep_lines) : path_(std::move(path)) {
    if (keep_lines > 0) {
        const std::vector<std::string> lines = file_lines(path_);
        LOWBIT_CHECK(int64_t(lines.size()) >= keep_lines, ErrorKind::input,
                     "{}: {} lines, but the checkpoint was written after {}; the metrics file does not belong to this "
                     "checkpoint", path_, lines.size(), keep_lines);
        std::string kept;
        for (int64_t i = 0; i < keep_lines; ++i) kept += lines[size_t(i)] + "\n";
        write_file_atomic(path_, kept.data(), kept.size());
    }
    out_.open(path_, keep_lines > 0 ? std::ios::app : std::ios::trunc);
    LOWBIT_CHECK(out_.good(), ErrorKind::input, "{}: cannot open for writing", path_);
    lines_ = std::max<int64_t>(keep_lines, 0);
}

void MetricsLog::append(const nlohmann::json& line) {
    out_ << line.dump() << "\n";
    out_.flush();
    LOWBIT_CHECK(out_.good(), ErrorKind::input, "{}: write failed (disk full?)", path_);
    ++lines_;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
    std::vector<nlohmann::json> out;
    const std::vector<std::string> lines = file_lines(path);
    for (size_t i = 0; i < lines.size(); ++i) {
        nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, false);
        LOWBIT_CHECK(j.is_object(), ErrorKind::input, "{}: line {} is not a JSON object", path, i + 1);
        out.push_back(std::move(j));
    }
    return out;
}

namespace {

namespace fs = std::filesystem;

std::string run_name(const std::string& dir) {
    const fs::path p = fs::path(dir).lexically_normal();
    return (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
}

// The recipe's precision in DIR/config.json, or "" when it has none.
std::string recorded_precision(const std::string& dir) {
    const fs::path config = fs::path(dir) / "config.json";
    if (!fs::exists(config)) return "";
    const std::vector<uint8_t> bytes = read_file(config.string());
    const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (j.is_discarded() || !j.contains("recipe") || !j["recipe"].is_object()) return "";
    const nlohmann::json& r = j["recipe"];
    return r.contains("precision") && r["precision"].is_string() ? r["precision"].get<std::string>() : "";
}

}  // namespace

LinePlot run_curves_plot(const std::vector<std::string>& run_dirs, const std::string& metric, const std::string& title,
                         bool log_y) {
    LOWBIT_CHECK(metric == "loss" || metric == "val_loss", ErrorKind::usage, "--metric {}: loss or val_loss", metric);
    LinePlot plot;
    plot.title = title.empty() ? (metric == "loss" ? "training loss" : "validation loss") : title;
    plot.x_label = "step";
    plot.y_label = metric == "loss" ? "train loss (nats)" : "validation loss (nats)";
    plot.log_y = log_y;
    std::map<std::string, int> label_uses;
    std::vector<std::string> labels;
    for (const std::string& dir : run_dirs) {
        const std::string precision = recorded_precision(dir);
        labels.push_back(precision.empty() ? run_name(dir) : precision);
        ++label_uses[labels.back()];
    }
    for (size_t i = 0; i < run_dirs.size(); ++i) {
        const std::string path = (fs::path(run_dirs[i]) / "metrics.jsonl").string();
        LOWBIT_CHECK(fs::exists(path), ErrorKind::input, "{}: no metrics.jsonl (is it a `lowbit train` run directory?)",
                     run_dirs[i]);
        LineSeries s;
        s.label = label_uses[labels[i]] > 1 ? fmt::format("{} ({})", labels[i], run_name(run_dirs[i])) : labels[i];
        for (const nlohmann::json& line : read_metrics(path)) {
            if (!line.contains(metric) || !line[metric].is_number() || !line.contains("step")) continue;
            s.x.push_back(line["step"].get<double>() + 1);
            s.y.push_back(line[metric].get<double>());
        }
        LOWBIT_CHECK(!s.x.empty(), ErrorKind::input, "{}: no line has \"{}\"", path, metric);
        plot.series.push_back(std::move(s));
    }
    return plot;
}

}  // namespace lowbit
