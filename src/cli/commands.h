// commands.h — registration functions of the `lowbit` subcommands (one file per command family).
#pragma once

#include <CLI/CLI.hpp>

namespace lowbit {

void register_formats_command(CLI::App& app);
void register_hadamard_command(CLI::App& app);
void register_demo_command(CLI::App& app);
void register_analyze_command(CLI::App& app);
void register_model_commands(CLI::App& app);  // info, tokenize, eval, export-hf
void register_quantize_command(CLI::App& app);
void register_tokenize_corpus_command(CLI::App& app);
void register_train_command(CLI::App& app);  // training runs (CPU reference or CUDA)
void register_plot_command(CLI::App& app);   // loss curves of training runs

}  // namespace lowbit
