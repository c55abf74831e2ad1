// bench_calibration_cpu.cpp — the CPU calibration's attention-input statistics (BlockStatsAccumulator::add with
// only the attention input measured: H_in, H_out's covariances, block_v and, with F2, D) per batch of windows, with
// block_v's sums associated per query head (the baseline, in the same run) and per KV group
// (ptq/calibration.h, ValueProducts). Random activations at a model's shape; the FLOPs of block_v's products
// as block_v_flops counts them (full GEMMs; the CPU's Gram products, by ssyrk, take half).
// Median of --reps runs after a warm-up.
//   bench_calibration_cpu [--shape smollm2|llama-1b] [--len T] [--batch B] [--reps N] [--threads N] [--json PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/random_fill.h"
#include "core/thread_pool.h"
#include "ptq/calibration.h"

using namespace lowbit;

int main(int argc, char** argv) {
    std::string shape = "smollm2", json_path;
    int64_t len = 512, batch = 2;
    int reps = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool more = i + 1 < argc;
        if (a == "--shape" && more) shape = argv[++i];
        else if (a == "--len" && more) len = std::atoll(argv[++i]);
        else if (a == "--batch" && more) batch = std::atoll(argv[++i]);
        else if (a == "--reps" && more) reps = std::max(1, std::atoi(argv[++i]));
        else if (a == "--threads" && more) set_thread_count(std::atoi(argv[++i]));
        else if (a == "--json" && more) json_path = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_calibration_cpu [--shape smollm2|llama-1b] [--len T] [--batch B] [--reps N] "
                                 "[--threads N] [--json PATH]\n");
            return 2;
        }
    }
    LlamaConfig c;
    if (shape == "smollm2") {
        c.hidden_size = 576, c.n_heads = 9, c.n_kv_heads = 3, c.head_dim = 64, c.ffn_size = 1536;
    } else if (shape == "llama-1b") {
        c.hidden_size = 2048, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 64, c.ffn_size = 8192;
    } else {
        std::fprintf(stderr, "bench_calibration_cpu: unknown shape %s (smollm2, llama-1b)\n", shape.c_str());
        return 2;
    }
    const BatchShape bs{batch, len};
    BlockScratch q, fp;
    uint64_t seed = 1;
    for (BlockScratch* s : {&q, &fp})
        for (auto [v, width] : {std::pair{&s->attn_in, c.hidden_size}, std::pair{&s->q, c.q_dim()}, std::pair{&s->k, c.kv_dim()}}) {
            v->resize(size_t(bs.rows() * width));
            fill_gaussian(v->data(), int64_t(v->size()), seed++);
        }
    std::printf("bench_calibration_cpu: %s shape (d %lld, %lld/%lld heads), %lld windows of %lld, %d threads; automatic: %s\n",
                shape.c_str(), (long long)c.hidden_size, (long long)c.n_heads, (long long)c.n_kv_heads, (long long)batch,
                (long long)len, thread_count(), block_v_by_group_takes_fewer_flops(c, len) ? "by group" : "by head");
    std::printf("| F2 | block_v | block_v GFLOP | s per batch | vs by head |\n|---|---|---:|---:|---:|\n");
    nlohmann::json rows = nlohmann::json::array();
    for (bool cross : {false, true}) {
        double base = 0;
        for (ValueProducts vp : {ValueProducts::by_head, ValueProducts::by_group}) {
            BlockStatsOptions o{true, true, cross};
            o.inputs = attention_input;
            BlockStatsAccumulator acc(c, o, vp);
            acc.add(q, cross ? &fp : nullptr, bs);  // warm-up
            std::vector<double> times;
            for (int r = 0; r < reps; ++r) {
                const auto t0 = std::chrono::steady_clock::now();
                acc.add(q, cross ? &fp : nullptr, bs);
                times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            std::sort(times.begin(), times.end());
            const double t = times[times.size() / 2];
            const bool by_group = vp == ValueProducts::by_group;
            if (!by_group) base = t;
            const double gflop = block_v_flops(c, len, by_group) * double(c.n_kv_heads * batch) * (cross ? 2 : 1) / 1e9;
            std::printf("| %s | %s | %.1f | %.3f | %.2f |\n", cross ? "yes" : "no", by_group ? "by KV group" : "by head", gflop, t,
                        t / base);
            rows.push_back({{"f2", cross}, {"block_v", by_group ? "by_group" : "by_head"}, {"block_v_gflop", gflop},
                            {"seconds_per_batch", t}, {"ratio_to_by_head", t / base}});
        }
    }
    if (!json_path.empty()) {
        const nlohmann::json j = {{"bench", "bench_calibration_cpu"}, {"shape", shape}, {"len", len}, {"batch", batch},
                                  {"threads", thread_count()}, {"rows", rows}};
        std::FILE* f = std::fopen(json_path.c_str(), "w");
        if (!f) return 1;
        std::fprintf(f, "%s\n", j.dump(2).c_str());
        std::fclose(f);
    }
}
