// main.cpp — the `lowbit` binary: subcommand dispatch and the mapping of errors to exit codes
//   0 success · 2 usage error · 3 bad input (file, shape, value) · 4 runtime/device failure.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{"lowbit — low-precision LLM toolkit: number formats, Hadamard transforms, AdaHOP, TurboBoA"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "lowbit 0.1.0");
    lowbit::register_formats_command(app);
    lowbit::register_hadamard_command(app);
    lowbit::register_demo_command(app);
    lowbit::register_analyze_command(app);
    lowbit::register_model_commands(app);
    lowbit::register_quantize_command(app);
    lowbit::register_tokenize_corpus_command(app);
    lowbit::register_train_command(app);
    lowbit::register_plot_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return 2;
    } catch (const lowbit::Error& e) {
        std::fprintf(stderr, "lowbit: error: %s\n", e.what());
        return int(e.kind());
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "lowbit: error: out of memory\n");
        return 4;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "lowbit: internal error: %s\n", e.what());
        return 4;
    }
    return 0;
}
