// cmd_hadamard.cpp — `lowbit hadamard [--block B] [--seed S] [--permute] [--inverse] [--axis 0|1] [--json]
// IN.npy OUT.npy`: the orthonormal (block-diagonal, optionally randomized) Hadamard transform of a 2-D .npy,
// written as float32. The arithmetic is hadamard_transform (src/hadamard/hadamard.h).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/wall_clock.h"
#include "hadamard/hadamard.h"
#include "io/npy.h"

namespace lowbit {

namespace {

struct HadamardArgs {
    int64_t block = 0;
    uint64_t seed = 0;
    bool seeded = false;
    bool permute = false;
    bool inverse = false;
    int axis = 1;
    bool json = false;
    std::string in, out;
};

void run_hadamard(const HadamardArgs& a) {
    const auto t_start = std::chrono::steady_clock::now();
    if (a.permute && !a.seeded)
        fail(ErrorKind::usage, "hadamard: --permute needs --seed (the permutation is drawn from the seed)");
    HadamardOptions opt;
    opt.block = a.block;
    opt.axis = a.axis;
    opt.randomized = a.seeded;
    opt.seed = a.seed;
    opt.permute = a.permute;
    opt.inverse = a.inverse;

    NpyArray x = npy_read_matrix(a.in);
    const int64_t rows = x.rows(), cols = x.cols();
    const int64_t dimension = a.axis == 0 ? rows : cols;
    HadamardOrder order;
    try {
        order = hadamard_resolve_block(dimension, opt);
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::input) throw;
        std::string what = e.what();
        if (what.rfind("hadamard: ", 0) == 0) what.erase(0, 10);
        fail(ErrorKind::input, "hadamard: {} ({}×{}): {}", a.in, rows, cols, what);
    }
    const auto t0 = std::chrono::steady_clock::now();
    hadamard_transform(x.data.data(), rows, cols, opt);
    const double transform_s = seconds_since(t0);
    npy_write_f32(a.out, {rows, cols}, x.data.data());
    const double total_s = seconds_since(t_start);

    const std::string order_text = hadamard_describe_size(order.n);
    if (a.json) {
        nlohmann::json j = {{"command", "hadamard"},
                            {"input", a.in},
                            {"output", a.out},
                            {"rows", rows},
                            {"cols", cols},
                            {"axis", a.axis},
                            {"dimension", dimension},
                            {"block", order.n},
                            {"blocks_per_vector", dimension / order.n},
                            {"order", order_text},
                            {"base_order", order.base},
                            {"pow2", order.pow2},
                            {"randomized", a.seeded},
                            {"seed", a.seeded ? nlohmann::json(a.seed) : nlohmann::json(nullptr)},
                            {"permute", a.permute},
                            {"inverse", a.inverse},
                            {"transform_seconds", transform_s},
                            {"total_seconds", total_s}};
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::string mode = a.seeded ? fmt::format("randomized (seed {}{})", a.seed, a.permute ? ", permuted" : "")
                                : std::string("plain");
    std::printf("hadamard %lldx%lld axis %d: block %lld = %s (%lld per vector), %s, %s  "
                "(transform %.3f ms, total %.3f ms) -> %s\n",
                (long long)rows, (long long)cols, a.axis, (long long)order.n, order_text.c_str(),
                (long long)(dimension / order.n), mode.c_str(), a.inverse ? "inverse" : "forward", transform_s * 1e3,
                total_s * 1e3, a.out.c_str());
}

}  // namespace

void register_hadamard_command(CLI::App& app) {
    auto args = std::make_shared<HadamardArgs>();
    auto* cmd = app.add_subcommand(
        "hadamard",
        "orthonormal Hadamard transform of a 2-D .npy along one axis: whole dimension (2^k or m·2^k, m in 12…172) "
        "or block-diagonal (--block), optionally randomized (y = H·D·P·x with --seed/--permute)");
    cmd->add_option("--block", args->block,
                    "block size B: a supported order (16, 32, …, 256, or m·2^k) dividing the dimension; "
                    "default: the whole dimension");
    CLI::Option* seed = cmd->add_option("--seed", args->seed, "randomized transform: seeded ±1 signs before H");
    cmd->add_flag("--permute", args->permute, "randomized transform: also permute each block (needs --seed)");
    cmd->add_flag("--inverse", args->inverse, "apply the inverse (Pᵀ·D·Hᵀ) instead");
    cmd->add_option("--axis", args->axis, "transform along axis 1 (each row, default) or axis 0 (each column)")
        ->check(CLI::IsMember({0, 1}));
    cmd->add_flag("--json", args->json, "machine-readable output");
    cmd->add_option("IN", args->in, "input 2-D .npy (float32/float64/float16/int; 1-D is taken as one row)")
        ->required();
    cmd->add_option("OUT", args->out, "output float32 .npy (written atomically)")->required();
    cmd->callback([args, seed] {
        args->seeded = seed->count() > 0;
        run_hadamard(*args);
    });
}

}  // namespace lowbit
