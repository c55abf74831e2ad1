// cmd_plot.cpp — `lowbit plot --out FILE.svg|png RUN_DIR... [--metric loss|val_loss] [--title T]`: the loss
// curves of several training runs in one figure (train/run_metrics.h run_curves_plot, io/plot.h).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "io/plot.h"
#include "train/run_metrics.h"

namespace lowbit {

namespace {

struct PlotArgs {
    std::string out, metric = "loss", title;
    std::vector<std::string> runs;
    bool log_y = false;
};

void run_plot(const PlotArgs& a) {
    const LinePlot plot = run_curves_plot(a.runs, a.metric, a.title, a.log_y);
    write_figure(a.out, plot);
    std::printf("%s: %zu runs, %s\n", a.out.c_str(), plot.series.size(), a.metric.c_str());
}

}  // namespace

void register_plot_command(CLI::App& app) {
    auto a = std::make_shared<PlotArgs>();
    auto* c = app.add_subcommand("plot", "the loss curves of several training runs (their metrics.jsonl) in one SVG or PNG");
    c->add_option("runs", a->runs, "run directories of lowbit train")->required();
    c->add_option("--out", a->out, "FILE.svg or FILE.png")->required();
    c->add_option("--metric", a->metric, "loss (default) or val_loss");
    c->add_option("--title", a->title, "figure title");
    c->add_flag("--log-y", a->log_y, "logarithmic loss axis");
    c->callback([a] { run_plot(*a); });
}

}  // namespace lowbit
