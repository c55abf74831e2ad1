// main.cpp — the `lowbit` binary: subcommand dispatch and the mapping of errors to exit codes
//   0 success · 2 usage error · 3 bad input (file, shape, value) · 4 runtime/device failure.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace {

// OpenBLAS's idle worker threads spin on sched_yield for 2^28 cycles before they sleep (OPENBLAS_THREAD_TIMEOUT,
// read when the library loads, before main). Between BLAS calls lowbit runs its own worker threads, which the
// spinning ones slow down: GPTQ INT2 g64 on SmolLM2 (4 calibration windows), 2 cores: 173 s → 118 s wall clock
// with the shortest timeout, the same output. Unless the caller chose a value, lowbit starts itself once more with it.
void shorten_openblas_spin(char** argv) {
    if (std::getenv("OPENBLAS_THREAD_TIMEOUT")) return;
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: go on with OpenBLAS's default
}

}  // namespace

int main(int argc, char** argv) {
    shorten_openblas_spin(argv);
    lowbit::keep_freed_host_memory();
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
