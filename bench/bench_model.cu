// bench_model.cu — eval throughput of the Llama forward on the GPU (FP32 and BF16) next to the CPU measured in
// the same run, on a random model shaped like SmolLM2-135M (30 layers, d 576, ffn 1536, 9 heads of 64 with 3
// key/value heads, vocabulary 49152, tied embeddings) at n_ctx 512, llama.cpp's perplexity protocol (logits
// of the second half of each window). Rows, in tokens/s of whole windows (what `lowbit eval` reports):
//   forward (device)   CudaLlama::forward_logits_device, logits left on the GPU
//   forward (to host)  forward_logits into host memory (the evaluator's provider call)
//   eval               evaluate_perplexity end to end (forward + host log-softmax of 256·49152 logits/window)
//   eval (device scoring)  the same with cuda_window_nll: log-softmax on the GPU, 12 B per position back;
//                      its ln PPL is printed next to the host-scored one (contract: |Δ| ≤ 1e-6)
// Before timing, each GPU precision checks its logits of the first window against the CPU's (max|Δ|/max|logit|).
// Napkin math: ~130 GFLOP per window (forward_cpu.h); 50 MB of logits per window cross to the host.
// The CPU baseline is the same OpenBLAS-backed reference on every machine (static OpenBLAS in the h200
// preset's binaries), so its tokens/s are the host CPU's real speed.
//
//   bench_model [--json PATH] [--commit HASH] [--ctx N] [--windows N] [--batch N] [--cpu-windows N] [--layers N]
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/thread_pool.h"
#include "model/cuda/forward_cuda.cuh"
#include "model/eval.h"
#include "model/forward_cpu.h"
#include "model/weights.h"

using namespace lowbit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

LlamaConfig smollm2_135m_shape(int64_t layers) {
    LlamaConfig c = smollm2_135m_config(layers);
    c.name = "random SmolLM2-135M-shaped";
    return c;
}

struct Row {
    std::string device, precision, what;
    double tokens_per_second = 0;
};

}  // namespace

int main(int argc, char** argv) {
    std::string json_path, commit = "unknown";
    int64_t ctx = 512, windows = 32, batch = 8, cpu_windows = 2, layers = 30;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--json") json_path = next();
        else if (a == "--commit") commit = next();
        else if (a == "--ctx") ctx = std::atoll(next());
        else if (a == "--windows") windows = std::atoll(next());
        else if (a == "--batch") batch = std::atoll(next());
        else if (a == "--cpu-windows") cpu_windows = std::atoll(next());
        else if (a == "--layers") layers = std::atoll(next());
        else {
            std::fprintf(stderr, "usage: bench_model [--json PATH] [--commit HASH] [--ctx N] [--windows N] [--batch N] "
                                 "[--cpu-windows N] [--layers N]\n");
            return 2;
        }
    }
    if (ctx < 4 || windows < 1 || batch < 1 || cpu_windows < 1 || layers < 1) {
        std::fprintf(stderr, "bench_model: --ctx >= 4, --windows, --batch, --cpu-windows, --layers >= 1\n");
        return 2;
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_model: no CUDA device\n");
        return 1;
    }
    try {
        const std::string device = cuda_device_description();
        LlamaModel m;
        m.config = smollm2_135m_shape(layers);
        m.weights = random_llama_weights(m.config, 1);
        const int64_t V = m.config.vocab_size, first = ctx / 2, keep = ctx - first;
        const int64_t n_text = std::max(windows, int64_t(2)) * ctx;  // the protocol wants >= 2 windows of text
        std::vector<int32_t> tokens(static_cast<size_t>(n_text));
        for (int64_t i = 0; i < n_text; ++i) tokens[size_t(i)] = int32_t(counter_random24(5, uint64_t(i)) % uint32_t(V));
        std::printf("bench_model on %s, commit %s\n", device.c_str(), commit.c_str());
        std::printf("model: random SmolLM2-135M shape, %lld layers, %.1f M params; ctx %lld, GPU %lld windows in batches "
                    "of %lld, CPU %lld window(s) on %d threads\n",
                    (long long)layers, double(m.config.total_params()) / 1e6, (long long)ctx, (long long)windows,
                    (long long)batch, (long long)cpu_windows, thread_count());

        PerplexityOptions opt;
        opt.n_ctx = ctx;
        opt.progress = false;
        std::vector<Row> rows;

        // CPU: the evaluator with the CPU provider; keep the first window's logits for the GPU self-check.
        std::vector<float> cpu_first;
        WindowLogitsFn cpu_fn = [&, inner = cpu_window_logits(m)](const int32_t* t, BatchShape s, int64_t f, float* out) {
            inner(t, s, f, out);
            if (cpu_first.empty()) cpu_first.assign(out, out + keep * V);
        };
        opt.max_chunks = cpu_windows;
        opt.seqs_per_batch = 1;
        const PerplexityResult cpu = evaluate_perplexity(tokens, V, opt, cpu_fn);
        rows.push_back({"cpu", "fp32", "eval", cpu.tokens_per_second});
        const double cpu_tps = cpu.tokens_per_second;
        double max_logit = 0;
        for (float x : cpu_first) max_logit = std::max(max_logit, double(std::fabs(x)));

        std::vector<std::pair<std::string, double>> checks, scoring_checks;
        for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::bf16}) {
            const std::string pn = cuda_precision_name(p);
            CudaLlama gpu(m, {p, CudaResidency::resident});
            // Self-check (and warm-up): window 0 against the CPU.
            const std::vector<float> g = gpu.forward_logits(tokens.data(), {1, ctx}, first);
            double err = 0;
            for (size_t i = 0; i < g.size(); ++i) err = std::max(err, double(std::fabs(g[i] - cpu_first[i])));
            checks.push_back({pn, err / max_logit});
            std::printf("self-check %s: max|logit - cpu|/max|logit| = %.3e over window 0 (%s)\n", pn.c_str(), err / max_logit,
                        p == CudaPrecision::fp32 ? "contract 1e-3" : "BF16 rounding, expect ~1e-2");

            auto t0 = std::chrono::steady_clock::now();
            for (int64_t c0 = 0; c0 < windows; c0 += batch)
                gpu.forward_logits_device(tokens.data() + c0 * ctx, {std::min(batch, windows - c0), ctx}, first);
            gpu.blas().synchronize();
            rows.push_back({"cuda", pn, "forward (device)", double(windows * ctx) / seconds_since(t0)});

            std::vector<float> host(static_cast<size_t>(batch * keep * V));
            t0 = std::chrono::steady_clock::now();
            for (int64_t c0 = 0; c0 < windows; c0 += batch)
                gpu.forward_logits(tokens.data() + c0 * ctx, {std::min(batch, windows - c0), ctx}, first, host.data());
            rows.push_back({"cuda", pn, "forward (to host)", double(windows * ctx) / seconds_since(t0)});

            opt.max_chunks = windows;
            opt.seqs_per_batch = batch;
            const PerplexityResult r = evaluate_perplexity(tokens, V, opt, cuda_window_logits(gpu));
            rows.push_back({"cuda", pn, "eval", r.tokens_per_second});
            const PerplexityResult rd = evaluate_perplexity(tokens, V, opt, cuda_window_logits(gpu), cuda_window_nll(gpu));
            rows.push_back({"cuda", pn, "eval (device scoring)", rd.tokens_per_second});
            scoring_checks.push_back({pn, std::fabs(rd.mean_nll - r.mean_nll)});
            std::printf("device scoring %s: ln PPL %.9f vs host-scored %.9f, |d| = %.3e (contract 1e-6)%s\n", pn.c_str(),
                        rd.mean_nll, r.mean_nll, std::fabs(rd.mean_nll - r.mean_nll),
                        rd.scored_by_provider && rd.n_scored == r.n_scored ? "" : " -- NOT SCORED ON THE DEVICE");
            std::printf("weights on the GPU (%s): %.1f MiB\n", pn.c_str(), double(gpu.weight_bytes()) / (1024.0 * 1024.0));
        }

        std::printf("%-6s %-6s %-22s %14s %10s\n", "device", "prec", "what", "tokens/s", "vs CPU");
        for (const auto& r : rows)
            std::printf("%-6s %-6s %-22s %14.1f %9.1fx\n", r.device.c_str(), r.precision.c_str(), r.what.c_str(),
                        r.tokens_per_second, r.tokens_per_second / cpu_tps);
        if (!json_path.empty()) {
            FILE* f = std::fopen(json_path.c_str(), "w");
            if (!f) throw Error(ErrorKind::input, json_path + ": cannot open for writing");
            const std::time_t now = std::time(nullptr);
            char date[32];
            std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
            std::fprintf(f,
                         "{\n  \"benchmark\": \"bench_model\",\n  \"device\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n"
                         "  \"model\": \"random SmolLM2-135M shape\",\n  \"layers\": %lld,\n  \"ctx\": %lld,\n  \"windows\": %lld,\n"
                         "  \"batch\": %lld,\n  \"cpu_windows\": %lld,\n  \"cpu_threads\": %d,\n",
                         device.c_str(), commit.c_str(), date, (long long)layers, (long long)ctx, (long long)windows,
                         (long long)batch, (long long)cpu_windows, thread_count());
            std::fprintf(f, "  \"self_check_max_rel_logit_error\": {\"fp32\": %.4e, \"bf16\": %.4e},\n",
                         checks[0].second, checks[1].second);
            std::fprintf(f, "  \"device_scoring_abs_d_ln_ppl\": {\"fp32\": %.4e, \"bf16\": %.4e},\n  \"rows\": [\n",
                         scoring_checks[0].second, scoring_checks[1].second);
            for (size_t i = 0; i < rows.size(); ++i)
                std::fprintf(f, "    {\"device\": \"%s\", \"precision\": \"%s\", \"what\": \"%s\", \"tokens_per_second\": %.2f, "
                                "\"vs_cpu\": %.3f}%s\n",
                             rows[i].device.c_str(), rows[i].precision.c_str(), rows[i].what.c_str(), rows[i].tokens_per_second,
                             rows[i].tokens_per_second / cpu_tps, i + 1 < rows.size() ? "," : "");
            std::fprintf(f, "  ]\n}\n");
            std::fclose(f);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_model: %s\n", e.what());
        return 1;
    }
    return 0;
}
