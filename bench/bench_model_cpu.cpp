// bench_model_cpu.cpp — throughput of the FP32 CPU forward (model/forward_cpu.h) on one evaluation window,
// stage by stage, against the sgemm throughput measured in the same run (the ceiling: the forward is
// ~90 % GEMM). Uses a random model of SmolLM2-135M's shape (or any GGUF/HF model given with --model), so
// it needs no download.
//
//   bench_model_cpu [--model PATH|smollm2-135m] [--ctx 512] [--reps 3] [--json OUT.json]
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/gemm_cpu.h"
#include "core/random_fill.h"
#include "core/thread_pool.h"
#include "io/model_registry.h"
#include "io/npy.h"
#include "model/forward_cpu.h"
#include "model/weights.h"

using namespace lowbit;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
    std::string model_path, json_path;
    int64_t T = 512, reps = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "--model") model_path = next();
        else if (a == "--ctx") T = std::stoll(next());
        else if (a == "--reps") reps = std::stoll(next());
        else if (a == "--json") json_path = next();
        else {
            std::fprintf(stderr, "usage: %s [--model PATH] [--ctx 512] [--reps 3] [--json OUT.json]\n", argv[0]);
            return 2;
        }
    }
    LlamaModel m;
    if (model_path.empty()) {
        m.config = smollm2_135m_config();
        m.config.name = "random SmolLM2-135M shape";
        m.weights = random_llama_weights(m.config, 1, 0.05f);
    } else {
        m = load_llama_model(resolve_model_path(model_path));
    }
    const LlamaConfig& c = m.config;
    const int64_t first = T / 2, d = c.hidden_size;
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) tokens[i] = int32_t(counter_random24(3, uint64_t(i)) % uint32_t(c.vocab_size));

    // Baseline: one sgemm of the FFN-up shape (T × ffn × d), the most common GEMM of the forward.
    std::vector<float> a(size_t(T * d)), b(size_t(c.ffn_size * d)), out(size_t(T * c.ffn_size));
    fill_gaussian(a.data(), int64_t(a.size()), 1);
    fill_gaussian(b.data(), int64_t(b.size()), 2);
    gemm_f32(ConstMatF(a.data(), T, d), Trans::no, ConstMatF(b.data(), c.ffn_size, d), Trans::yes, MatF(out.data(), T, c.ffn_size));  // warm-up
    double best_gemm = 1e30;
    for (int r = 0; r < 20; ++r) {
        const double t0 = now_s();
        gemm_f32(ConstMatF(a.data(), T, d), Trans::no, ConstMatF(b.data(), c.ffn_size, d), Trans::yes, MatF(out.data(), T, c.ffn_size));
        best_gemm = std::min(best_gemm, now_s() - t0);
    }
    const double gemm_gflops = 2.0 * double(T) * double(c.ffn_size) * double(d) / best_gemm * 1e-9;

    // FLOPs of one window as implemented (attention: blocks of 128 query rows against all keys up to the
    // block's end, see attention_causal; logits of the scored half).
    const double linear = 2.0 * double(T) * double(c.n_layers) *
                          double(d * c.q_dim() + 2 * d * c.kv_dim() + c.q_dim() * d + 3 * d * c.ffn_size);
    double score_pairs = 0;  // (query, key) products per head
    for (int64_t r0 = 0; r0 < T; r0 += 128) score_pairs += double(std::min<int64_t>(T, r0 + 128) - r0) * double(std::min<int64_t>(T, r0 + 128));
    const double attention = 4.0 * score_pairs * double(c.head_dim) * double(c.n_heads) * double(c.n_layers);
    const double logits = 2.0 * double(T - first) * double(c.vocab_size) * double(d);

    double best_blocks = 1e30, best_attn = 1e30, best_logits = 1e30, best_total = 1e30;
    std::vector<float> lg(size_t((T - first) * c.vocab_size));
    for (int64_t r = 0; r < reps; ++r) {
        const double t0 = now_s();
        std::vector<float> hidden = embed_tokens(c, m.weights.token_embd.data(), tokens.data(), {1, T});
        BlockScratch s;
        double attn = 0;
        for (int64_t l = 0; l < c.n_layers; ++l) {
            block_forward(c, m.weights.blocks[l], l, hidden.data(), {1, T}, s);
            const double ta = now_s();  // attention alone again on the block's own q/k/v
            attention_causal(s.q.data(), s.k.data(), s.v.data(), {1, T}, c.n_heads, c.n_kv_heads, c.head_dim,
                             s.attn_ctx.data());
            attn += now_s() - ta;
        }
        const double t1 = now_s();
        final_norm_and_logits(c, m.weights.output_norm.data(), m.weights.output_matrix(), hidden.data() + first * d,
                              T - first, lg.data());
        const double t2 = now_s();
        best_blocks = std::min(best_blocks, t1 - t0 - attn);  // the re-run attention is not counted
        best_attn = std::min(best_attn, attn);
        best_logits = std::min(best_logits, t2 - t1);
        best_total = std::min(best_total, t2 - t0 - attn);
    }
    const double model_gflops = (linear + attention + logits) / best_total * 1e-9;
    std::printf("model %s: window of %lld tokens, %d threads, %s\n", c.name.c_str(), (long long)T, thread_count(),
                blas_kernels().c_str());
    std::printf("%-22s %10s %10s %12s %10s\n", "stage", "GFLOP", "ms", "GFLOP/s", "vs sgemm");
    std::printf("%-22s %10.2f %10.2f %12.1f %10.2f\n", "baseline sgemm", 2.0 * T * c.ffn_size * d * 1e-9, best_gemm * 1e3,
                gemm_gflops, 1.0);
    auto row = [&](const char* name, double flop, double secs) {
        std::printf("%-22s %10.2f %10.2f %12.1f %10.2f\n", name, flop * 1e-9, secs * 1e3, flop / secs * 1e-9,
                    flop / secs * 1e-9 / gemm_gflops);
    };
    row("blocks (all layers)", linear + attention, best_blocks);
    row("  of which attention", attention, best_attn);
    row("final norm + logits", logits, best_logits);
    row("window total", linear + attention + logits, best_total);
    std::printf("=> %.1f tokens/s of evaluation (every window token through the model)\n", double(T) / best_total);
    if (!json_path.empty()) {
        const nlohmann::json j = {{"model", c.name},           {"n_ctx", T},
                                  {"threads", thread_count()}, {"blas", blas_kernels()}, {"sgemm_gflops", gemm_gflops},
                                  {"window_ms", best_total * 1e3}, {"blocks_ms", best_blocks * 1e3},
                                  {"attention_ms", best_attn * 1e3}, {"logits_ms", best_logits * 1e3},
                                  {"model_gflops", model_gflops}, {"ratio_to_sgemm", model_gflops / gemm_gflops},
                                  {"tokens_per_second", double(T) / best_total}};
        const std::string text = j.dump(2) + "\n";
        write_file_atomic(json_path, text.data(), text.size());
    }
    return 0;
}
