// bench_ptq.cpp — time and peak memory of `lowbit quantize --device cuda` (ptq/quantize.h with the GPU solver
// device and calibration paths) on random-weight models shaped like SmolLM2-135M, Llama-3.2-1B, Llama-3-8B
// and Llama-3.1-70B: weights generated block by block from a seed in host memory (never on disk), random
// calibration tokens. `--layers K` builds only K blocks of the shape and extrapolates the whole model as
// (time − the K blocks) + K_full/K · (the K blocks' time), said so in the output.
//
//   bench_ptq --shape smollm2|llama-1b|llama-8b|llama-70b [--layers K] [--method gptq|turboboa|boa|rtn]
//             [--features f1,f2,f3] [--format int4] [--group G] [--grid-search minmax|mse|hessian]
//             [--calib-samples 128] [--calib-len 2048] [--calib-precision fp32|bf16] [--batch 4] [--true-sequential]
//             [--value-products auto|by-head|by-group] [--json PATH]
// --value-products: how the calibration associates block_v's products (ptq/cuda/calibration_cuda.cuh, ValueProducts).
//
// Floors (written next to the times in the output): per block, the calibration forwards are
// 2 passes · 2·T·P_block FLOP (T calibration tokens, P_block the block's projection parameters), the input
// Hessians T·Σ n_in² FLOP (SYRK), the sweeps rows·cols² FLOP per layer (the lazy GEMMs) and the FP64
// factorizations (4/3)·n³ per distinct factorization; at the H200's ~60 TFLOP/s FP32 (non-tensor) and
// ~60 TFLOP/s FP64 (tensor-core DGEMM) and ~700 TFLOP/s BF16.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/counter_rng.h"
#include "core/gemm_cpu.h"
#include "core/host_memory.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "ptq/cuda/calibration_cuda.cuh"
#include "ptq/cuda/solver_cuda.cuh"
#include "ptq/quantize.h"

using namespace lowbit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

LlamaConfig shape_config(const std::string& shape) {
    LlamaConfig c = smollm2_135m_config(30);
    if (shape == "smollm2") return c;
    c.tied_embeddings = false;
    c.rope_theta = 500000.0;
    c.rms_eps = 1e-5f;
    c.vocab_size = 128256;
    if (shape == "llama-1b") {
        c.name = "random Llama-3.2-1B-shaped";
        c.n_layers = 16, c.hidden_size = 2048, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 64, c.ffn_size = 8192;
        c.tied_embeddings = true;
    } else if (shape == "llama-8b") {
        c.name = "random Llama-3-8B-shaped";
        c.n_layers = 32, c.hidden_size = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128, c.ffn_size = 14336;
    } else if (shape == "llama-70b") {
        c.name = "random Llama-3.1-70B-shaped";
        c.n_layers = 80, c.hidden_size = 8192, c.n_heads = 64, c.n_kv_heads = 8, c.head_dim = 128, c.ffn_size = 28672;
    } else {
        std::fprintf(stderr, "bench_ptq: unknown shape %s (smollm2 | llama-1b | llama-8b | llama-70b)\n", shape.c_str());
        std::exit(2);
    }
    return c;
}

// Uniform values of standard deviation `std` from the counter generator (fast, threaded, reproducible).
std::vector<float> random_tensor(size_t n, uint64_t seed, float std) {
    std::vector<float> v(n);
    const float a = std * std::sqrt(3.0f);
    parallel_for(int64_t(n), 1 << 16, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            v[size_t(i)] = a * (float(counter_random24(seed, uint64_t(i))) / float(1u << 24) * 2.0f - 1.0f);
    });
    return v;
}

// A model that exists only as a seed: every tensor is generated when it is asked for.
class SyntheticReader final : public ModelReader {
public:
    explicit SyntheticReader(const LlamaConfig& c) {
        config_ = c;
        path_ = "synthetic:" + c.name;
    }
    std::string format() const override { return "synthetic"; }
    std::vector<float> token_embedding() const override {
        return random_tensor(size_t(config_.vocab_size * config_.hidden_size), 1, 0.02f);
    }
    std::vector<float> output_norm() const override { return std::vector<float>(size_t(config_.hidden_size), 1.0f); }
    std::vector<float> output() const override {
        return config_.tied_embeddings ? std::vector<float>()
                                       : random_tensor(size_t(config_.vocab_size * config_.hidden_size), 2, 0.02f);
    }
    BlockWeights block(int64_t l) const override {
        const LlamaConfig& c = config_;
        const int64_t d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_size;
        const uint64_t s = 100 + uint64_t(l) * 16;
        BlockWeights b;
        b.attn_norm.assign(size_t(d), 1.0f);
        b.ffn_norm.assign(size_t(d), 1.0f);
        b.wq = random_tensor(size_t(qd * d), s + 1, 0.02f);
        b.wk = random_tensor(size_t(kvd * d), s + 2, 0.02f);
        b.wv = random_tensor(size_t(kvd * d), s + 3, 0.02f);
        b.wo = random_tensor(size_t(d * qd), s + 4, 0.02f);
        b.w_gate = random_tensor(size_t(f * d), s + 5, 0.02f);
        b.w_up = random_tensor(size_t(f * d), s + 6, 0.02f);
        b.w_down = random_tensor(size_t(d * f), s + 7, 0.02f);
        return b;
    }
    std::vector<ModelTensorSummary> tensor_summaries() const override { return {}; }
};

double peak_rss_gib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) / 1048576.0;
}

}  // namespace

int main(int argc, char** argv) {
    keep_freed_host_memory();  // as the lowbit binary
    std::string shape = "smollm2", method = "gptq", features = "f1,f2,f3", format = "int4", search = "minmax";
    std::string calib_precision = "bf16", json_path, commit = "unknown", value_products = "auto";
    int64_t layers = 0, group = 0, samples = 128, length = 2048, batch = 4;
    bool true_sequential = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--shape") shape = next();
        else if (a == "--layers") layers = std::atoll(next().c_str());
        else if (a == "--method") method = next();
        else if (a == "--features") features = next();
        else if (a == "--format") format = next();
        else if (a == "--group") group = std::atoll(next().c_str());
        else if (a == "--grid-search") search = next();
        else if (a == "--calib-samples") samples = std::atoll(next().c_str());
        else if (a == "--calib-len") length = std::atoll(next().c_str());
        else if (a == "--calib-precision") calib_precision = next();
        else if (a == "--batch") batch = std::atoll(next().c_str());
        else if (a == "--true-sequential") true_sequential = true;
        else if (a == "--value-products") value_products = next();
        else if (a == "--json") json_path = next();
        else if (a == "--commit") commit = next();
        else {
            std::fprintf(stderr, "bench_ptq: unknown option %s (see the header of bench/bench_ptq.cpp)\n", a.c_str());
            return 2;
        }
    }
    try {
        LlamaConfig c = shape_config(shape);
        const int64_t full_layers = c.n_layers;
        if (layers > 0 && layers < full_layers) c.n_layers = layers;
        const SyntheticReader reader(c);

        PtqOptions o;
        o.method = parse_ptq_method(method);
        if (o.method == PtqMethod::turboboa) {
            o.f1 = features.find("f1") != std::string::npos;
            o.f2 = features.find("f2") != std::string::npos;
            o.f3 = features.find("f3") != std::string::npos;
        }
        GridSearch gs;
        if (!parse_grid_search(search, &gs)) throw std::runtime_error("--grid-search " + search);
        o.grid = parse_grid(format, group, false, gs);
        o.calibration.samples = samples;
        o.calibration.length = length;
        o.batch = batch;
        o.true_sequential = true_sequential;
        o.stream_blocks = true;  // as lowbit quantize (since f503f4f; the runs before held the whole model)
        CudaSolverDevice dev;
        o.solver_device = &dev;
        const CudaPrecision precision = parse_cuda_precision(calib_precision);
        const ValueProducts vp = value_products == "by-head"    ? ValueProducts::by_head
                                 : value_products == "by-group" ? ValueProducts::by_group
                                                                : ValueProducts::automatic;
        if (value_products != "auto" && vp == ValueProducts::automatic)
            throw std::runtime_error("--value-products " + value_products + " (auto, by-head or by-group)");
        o.calibration_paths = [precision, vp](const LlamaConfig& cc, int64_t b) {
            return cuda_calibration_paths(cc, b, precision, {}, vp);
        };
        std::vector<int32_t> windows(size_t(samples * length));
        for (size_t i = 0; i < windows.size(); ++i) windows[i] = int32_t((i * 2654435761ull + 12345) % uint64_t(c.vocab_size));

        std::printf("bench_ptq: %s, %lld of %lld blocks, %s %s%s%s, %s, calibration %lldx%lld (%s forward%s), GPU %s, %s\n",
                    c.name.c_str(), (long long)c.n_layers, (long long)full_layers, method.c_str(),
                    o.grid.describe().c_str(), o.method == PtqMethod::turboboa ? " " : "", o.describe_features().c_str(),
                    search.c_str(), (long long)samples, (long long)length, calib_precision.c_str(),
                    true_sequential ? ", true-sequential" : "", cuda_device_description().c_str(), blas_kernels().c_str());
        ptq_reset_peak_device_bytes();
        const auto t0 = std::chrono::steady_clock::now();
        PtqReport rep;
        const QuantizedModel q = quantize_model(reader, windows, o, &rep);
        const double total = seconds_since(t0);
        double solve = 0;
        for (const LayerReport& l : rep.layers) solve += l.seconds;
        // The per-block part of the run: everything inside quantize_model's loop (statistics, solves, propagation);
        // outside it: loading, the embedding of the windows, the export-free rest.
        double in_blocks = 0;
        for (double b : rep.block_seconds) in_blocks += b;
        const double per_block = in_blocks / double(c.n_layers);
        const double outside = total - in_blocks;
        const double estimate = outside + per_block * double(full_layers);
        const double peak_gpu = double(ptq_peak_device_bytes()) / 1073741824.0;
        const int64_t d = c.hidden_size, f = c.ffn_size, qd = c.q_dim(), kvd = c.kv_dim(), T = samples * length;
        const double p_block = double(d * (qd + 2 * kvd) + qd * d + 3 * d * f);
        const double flop_fwd = 2.0 * 2.0 * double(T) * p_block;
        const double flop_hess = double(T) * double(2 * d * d + qd * qd + f * f);
        const double flop_sweep = double(qd + 2 * kvd) * d * double(d) + double(d) * qd * qd + 2.0 * f * d * double(d) +
                                  double(d) * f * double(f);
        const double flop_chol = 4.0 / 3.0 * (5.0 * double(d) * d * d + double(qd) * qd * qd + double(f) * f * f);
        std::printf("  total %.1f s for %lld blocks (calibration %.1f s, solves %.1f s, outside the loop %.1f s); peak GPU "
                    "%.2f GiB, peak host RSS %.1f GiB\n",
                    total, (long long)c.n_layers, rep.calibration_seconds, solve, outside, peak_gpu, peak_rss_gib());
        double factor = 0, sweep = 0, refine = 0, objective = 0;
        for (const LayerReport& l : rep.layers) {
            factor += l.factor_seconds;
            sweep += l.sweep_seconds;
            refine += l.refine_seconds;
            objective += l.objective_seconds;
        }
        const CalibrationPhases& cp = rep.calibration_phases;
        std::printf("  calibration: forwards %.1f s, statistics products %.1f s, statistics to the host %.1f s (of which "
                    "finishing on the host %.1f s), rest %.1f s (the embedding, weight uploads); blocks:",
                    cp.forwards, cp.products, cp.transfers, cp.finishing,
                    rep.calibration_seconds - cp.forwards - cp.products - cp.transfers);
        for (double b : rep.block_seconds) std::printf(" %.2f", b);
        std::printf(" s (the rest of each block: the device's copies of the statistics)\n");
        std::printf("  solves: factorizations %.1f s, sweeps %.1f s, F3b %.1f s, report objectives %.1f s, rest %.1f s\n",
                    factor, sweep, refine, objective, solve - factor - sweep - refine - objective);
        std::printf("  per block %.2f s → whole model (%lld blocks) %s %.1f s = %.2f min\n", per_block,
                    (long long)full_layers, c.n_layers < full_layers ? "extrapolated" : "measured", estimate, estimate / 60.0);
        std::printf("  floors per block: forwards %.3g FLOP (%.2f s at 60 TFLOP/s FP32, %.2f s at 700 BF16), Hessians %.3g "
                    "(%.2f s FP32), sweeps %.3g (%.2f s FP32), factorizations %.3g FP64 (%.2f s at 60 TFLOP/s)\n",
                    flop_fwd, flop_fwd / 60e12, flop_fwd / 700e12, flop_hess, flop_hess / 60e12, flop_sweep,
                    flop_sweep / 60e12, flop_chol, flop_chol / 60e12);
        if (!json_path.empty()) {
            nlohmann::json j;
            j["bench"] = "bench_ptq";
            j["commit"] = commit;
            j["gpu"] = cuda_device_description();
            j["blas"] = blas_kernels();
            j["shape"] = shape;
            j["model"] = c.name;
            j["blocks_run"] = c.n_layers;
            j["blocks_full"] = full_layers;
            j["method"] = method;
            j["features"] = o.describe_features();
            j["grid"] = o.grid.describe();
            j["grid_search"] = search;
            j["true_sequential"] = true_sequential;
            j["value_products"] = value_products;
            j["calibration"] = {{"samples", samples}, {"length", length}, {"precision", calib_precision}};
            j["seconds"] = total;
            j["calibration_seconds"] = rep.calibration_seconds;
            j["calibration_parts_seconds"] = {{"forwards", cp.forwards}, {"products", cp.products},
                                              {"transfers", cp.transfers}, {"transfers_finishing", cp.finishing}};
            j["solve_seconds"] = solve;
            j["solve_parts_seconds"] = {{"factorizations", factor}, {"sweeps", sweep}, {"refine", refine},
                                        {"objectives", objective}};
            for (const LayerReport& l : rep.layers)
                j["layers"].push_back({{"name", l.name}, {"seconds", l.seconds}, {"factor", l.factor_seconds},
                                       {"sweep", l.sweep_seconds}, {"refine", l.refine_seconds},
                                       {"objectives", l.objective_seconds}});
            j["per_block_seconds"] = per_block;
            j["block_seconds"] = rep.block_seconds;
            j["whole_model_seconds"] = estimate;
            j["extrapolated"] = c.n_layers < full_layers;
            j["peak_gpu_bytes"] = ptq_peak_device_bytes();
            j["peak_rss_gib"] = peak_rss_gib();
            j["floors_flop_per_block"] = {{"forwards", flop_fwd}, {"hessians", flop_hess}, {"sweeps", flop_sweep},
                                          {"factorizations_fp64", flop_chol}};
            const std::string text = j.dump(1);
            write_file_atomic(json_path, text.data(), text.size());
        }
        (void)q;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_ptq: %s\n", e.what());
        return 1;
    }
    return 0;
}
