// bench_train.cpp — tokens/s, MFU and peak GPU memory of the CUDA training engine's optimizer step
// (train/cuda/trainer_cuda.cu) per precision recipe, on random tokens, for the headline shape (`base`: 12
// layers, d 768, 12/4 heads, ffn 3072, vocab 49152), SmolLM2-135M's (30 layers, d 576, 9/3 heads, ffn 1536) or
// another preset of train/train_model.h (small, tiny).
// Warm-up steps are excluded; each step synchronizes (the loss and gradient norm come back to the host).
//
//   bench_train [--shape base|smollm2|small|tiny] [--batch 16] [--grad-accum 1] [--seq 1024] [--steps 10] [--warmup 3]
//               [--precision bf16,mxfp4-iht,…] [--profile] [--mx-census] [--json PATH]
// --grad-accum G runs each step of `batch` sequences as G micro-batches (TrainConfig::grad_accum): the same
// tokens per step with a G-th of the activations.
// A precision written P:tensor-cores runs recipe P with its MXFP4 main products on the INT8 tensor cores
// (Recipe::mx_tensor_cores) instead of the BF16 emulation (the engine's default); P:tensor-cores-columns the same with
// one INT8 base per column of B (Recipe::mx_column_bases, MxGemmFold::int8_stages_columns).
// --profile: a second pass of the same steps with the engine's phase clock on (CUDA events at phase
// boundaries; trainer.h phase_seconds) prints where a step's time goes, with the FLOP floor of the GEMM and
// attention phases at the 989 TFLOP/s peak next to it (the timed pass above runs without the events).
// --mx-census: every precision runs as P:tensor-cores, and after the timed (and profiled) steps one more pass of
// the same steps counts, per projection and slot summed over layers, the (operand, 128-line tile, 256-deep chunk)
// triples of the INT8 GEMM outside its window against all its triples, and the (128 × 128 output tile, chunk) pairs
// these sent to the slow per-block path against all pairs (Trainer::mx_census). The count adds one tiny kernel per
// product, so the timed pass runs without it.
//
// Model FLOPs per token (the figure MFU divides by; PaLM's accounting with the causal half of attention):
//   6·P_matmul + 6·n_layers·q_dim·T,  P_matmul = every projection and the LM head (d·vocab), T = sequence length
// and the peak is the H200's dense BF16 tensor-core rate, 989 TFLOP/s (NVIDIA's H100/H200 SXM datasheet);
// cuBLAS reaches ~780 of it on 8192³ here (bench/results), so MFU ≈ 0.8 is the GEMM-bound ceiling.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/counter_rng.h"
#include "core/error.h"
#include "io/npy.h"
#include "train/mx_census_report.h"
#include "train/trainer.h"

using namespace lowbit;

namespace {

constexpr double kPeakBf16 = 989e12;

TrainConfig shape_config(const std::string& shape, int64_t batch, int64_t grad_accum, int64_t seq) {
    TrainConfig t = train_preset(shape == "smollm2" ? "base" : shape);  // tiny | small | base (Error otherwise)
    if (shape == "smollm2") {
        t.model = smollm2_135m_config(30);
        t.model.bos_token_id = t.model.eos_token_id = -1;
    }
    t.model.context_length = std::max(t.model.context_length, seq);
    t.batch_size = batch;
    t.grad_accum = grad_accum;
    t.seq_len = seq;
    t.schedule.total_steps = 1000;
    t.schedule.warmup_steps = 10;
    return t;
}

double flops_per_token(const LlamaConfig& c, int64_t seq) {
    const double d = double(c.hidden_size), proj = d * double(c.q_dim()) * 2 + d * double(c.kv_dim()) * 2 +
                                                    3 * d * double(c.ffn_size);
    const double matmul = double(c.n_layers) * proj + d * double(c.vocab_size);
    return 6 * matmul + 6 * double(c.n_layers) * double(c.q_dim()) * double(seq);
}

// The phase table of one recipe: ms per step, share, and for the GEMM / attention phases TFLOP/s and the
// time at the BF16 peak. Returns the ms per step by phase.
nlohmann::json print_profile(const std::map<std::string, double>& phases, const LlamaConfig& c, int64_t batch, int64_t seq,
                             int64_t steps) {
    const double tokens = double(batch * seq), d = double(c.hidden_size);
    const double proj = double(c.n_layers) * (d * double(c.q_dim()) * 2 + d * double(c.kv_dim()) * 2 + 3 * d * double(c.ffn_size));
    const double gemm = 2 * tokens * proj, head = 3 * 2 * tokens * d * double(c.vocab_size);
    const double attn_fwd = double(c.n_layers) * 4 * double(batch) * double(c.n_heads) * double(seq) * double(seq) *
                            double(c.head_dim) / 2;
    const std::map<std::string, double> flops = {{"linear forward", gemm}, {"linear dgrad", gemm}, {"linear wgrad", gemm},
                                                 {"lm head", head}, {"attention forward", attn_fwd},
                                                 {"attention backward", 2.5 * attn_fwd}};
    double total = 0;
    for (const auto& [name, sec] : phases) total += sec;
    std::printf("  %-24s %9s %7s %9s %10s\n", "phase", "ms/step", "share", "TFLOP/s", "floor ms");
    nlohmann::json out;
    for (const auto& [name, sec] : phases) {
        const double ms = 1e3 * sec / double(steps);
        out[name] = ms;
        const auto f = flops.find(name);
        if (f != flops.end())
            std::printf("  %-24s %9.2f %6.1f%% %9.0f %10.2f\n", name.c_str(), ms, 100 * sec / total, f->second / (ms * 1e9),
                        1e3 * f->second / kPeakBf16);
        else
            std::printf("  %-24s %9.2f %6.1f%%\n", name.c_str(), ms, 100 * sec / total);
    }
    std::printf("  %-24s %9.2f\n\n", "total", 1e3 * total / double(steps));
    return out;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string shape = "base", precisions = "bf16", json_path;
    int64_t batch = 16, grad_accum = 1, seq = 1024, steps = 10, warmup = 3;
    bool profile = false, mx_census = false;
    for (int i = 1; i < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--profile" || k == "--mx-census") {
            (k == "--profile" ? profile : mx_census) = true;
            --i;
            continue;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "bench_train: %s needs a value\n", k.c_str());
            return 2;
        }
        const std::string v = argv[i + 1];
        if (k == "--shape") shape = v;
        else if (k == "--batch") batch = std::atoll(v.c_str());
        else if (k == "--grad-accum") grad_accum = std::atoll(v.c_str());
        else if (k == "--seq") seq = std::atoll(v.c_str());
        else if (k == "--steps") steps = std::atoll(v.c_str());
        else if (k == "--warmup") warmup = std::atoll(v.c_str());
        else if (k == "--precision") precisions = v;
        else if (k == "--json") json_path = v;
        else {
            std::fprintf(stderr, "bench_train: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_train: no CUDA device\n");
        return 1;
    }
    TrainConfig cfg;
    try {
        cfg = shape_config(shape, batch, grad_accum, seq);
        validate_train_config(cfg, "bench_train");
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_train: %s\n", e.what());
        return 2;
    }
    const double fpt = flops_per_token(cfg.model, seq);
    std::printf("device: %s\nshape %s: %lld layers, d %lld, %lld/%lld heads, ffn %lld, vocab %lld; batch %lld x %lld"
                "%s\n",
                cuda_device_description().c_str(), shape.c_str(), (long long)cfg.model.n_layers,
                (long long)cfg.model.hidden_size, (long long)cfg.model.n_heads, (long long)cfg.model.n_kv_heads,
                (long long)cfg.model.ffn_size, (long long)cfg.model.vocab_size, (long long)batch, (long long)seq,
                grad_accum > 1 ? (" in " + std::to_string(grad_accum) + " micro-batches").c_str() : "");
    std::printf("model FLOPs per token %.3g (6·P_matmul + 6·L·q_dim·T); MFU against %.0f TFLOP/s BF16\n\n", fpt,
                kPeakBf16 / 1e12);
    std::printf("%-14s %10s %12s %7s %10s %12s %10s\n", "precision", "ms/step", "tokens/s", "MFU", "peak GiB",
                "saved/BF16", "loss");
    nlohmann::json rows = nlohmann::json::array();
    std::vector<int32_t> inputs(size_t(batch * seq)), targets(size_t(batch * seq));
    for (const std::string& p : split(precisions)) {
        Recipe r;
        // The MX main products on the INT8 tensor cores: P:tensor-cores, or P:tensor-cores-columns with B's bases per line.
        const size_t colon = p.find(':');
        const std::string engine = colon == std::string::npos ? "" : p.substr(colon + 1);
        LOWBIT_CHECK(engine.empty() || engine == "tensor-cores" || engine == "tensor-cores-columns", ErrorKind::usage,
                     "--precision {}: P, P:tensor-cores or P:tensor-cores-columns", p);
        const bool suffixed = !engine.empty();
        r.precision = parse_precision(p.substr(0, colon));
        r.mx_tensor_cores = suffixed || mx_census;
        r.mx_column_bases = engine == "tensor-cores-columns";
        const std::string label = r.mx_tensor_cores && !suffixed ? p + ":tensor-cores" : p;
        r.calibration_steps = int(warmup);  // AdaHOP: calibrate during the warm-up, time the planned steps
        auto trainer = make_cuda_trainer(cfg, r);
        double seconds = 0, loss = 0;
        for (int64_t s = 0; s < warmup + steps; ++s) {
            for (size_t i = 0; i < inputs.size(); ++i) {
                inputs[i] = int32_t(counter_random24(uint64_t(s), 2 * i) % uint32_t(cfg.model.vocab_size));
                targets[i] = int32_t(counter_random24(uint64_t(s), 2 * i + 1) % uint32_t(cfg.model.vocab_size));
            }
            const auto t0 = std::chrono::steady_clock::now();
            loss = trainer->step({inputs.data(), targets.data(), {batch, seq}}).loss;
            if (s >= warmup) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        const double ms = 1e3 * seconds / double(steps), tps = double(batch * seq) * double(steps) / seconds;
        const double mfu = tps * fpt / kPeakBf16;
        const double ratio = double(trainer->saved_operand_bytes()) / double(trainer->saved_operand_bytes_bf16());
        const double peak = double(trainer->peak_device_bytes()) / double(1ll << 30);
        std::printf("%-14s %10.1f %12.0f %7.3f %10.1f %12.3f %10.4f\n", label.c_str(), ms, tps, mfu, peak, ratio, loss);
        std::fflush(stdout);
        nlohmann::json row = {{"precision", label}, {"ms_per_step", ms}, {"tokens_per_s", tps}, {"mfu", mfu}, {"peak_gib", peak},
                              {"saved_operand_ratio", ratio}, {"loss", loss},
                              {"strategies", trainer->recipe().strategy_counts()}};
        if (profile) {
            trainer->set_profiling(true);
            for (int64_t s = 0; s < steps; ++s) trainer->step({inputs.data(), targets.data(), {batch, seq}});
            row["phases_ms_per_step"] = print_profile(trainer->phase_seconds(), cfg.model, batch, seq, steps);
        }
        if (mx_census) {
            trainer->set_mx_census(true);
            for (int64_t s = 0; s < steps; ++s) trainer->step({inputs.data(), targets.data(), {batch, seq}});
            row["mx_census"] = mx_census_report(trainer->mx_census(), steps);
            print_mx_census(row["mx_census"], stdout);
            trainer->set_mx_census(false);
        }
        rows.push_back(row);
    }
    if (!json_path.empty()) {
        const nlohmann::json j = {{"device", cuda_device_description()}, {"shape", shape}, {"batch", batch},
                                  {"grad_accum", grad_accum}, {"seq", seq}, {"steps", steps}, {"warmup", warmup}, {"flops_per_token", fpt}, {"rows", rows}};
        const std::string text = j.dump(2) + "\n";
        write_file_atomic(json_path, text.data(), text.size());
    }
    return 0;
}
