// test_model_eval.cpp — the evaluator (model/eval.h): both perplexity protocols (llama.cpp's and the HF /
// GPTQ-paper one) against hand-computed NLLs and their window plans, the token score, the scoring-provider
// path (same targets, same result), and the KLD base file (record encoding compatible with llama.cpp's,
// write and read back).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/eval.h"
#include "model_test_util.h"

using namespace lowbit;
using namespace lowbit::test;

TEST(ModelEval, PerplexityProtocolMatchesHandComputedNll) {
    const LlamaModel m = tiny_model(false, true, 3);
    const int64_t V = m.config.vocab_size, n_ctx = 8;
    const std::vector<int32_t> text = random_tokens(27, V, 77);  // 3 windows, 3 tokens dropped
    PerplexityOptions opt = bos_options(n_ctx, 2);  // windows 0-1 together, then 2
    const PerplexityResult r = evaluate_perplexity(text, V, opt, cpu_window_logits(m));
    EXPECT_EQ(r.n_chunks, 3);
    EXPECT_EQ(r.n_scored, 3 * 3);  // n_ctx − 1 − n_ctx/2 = 3 per window

    // By hand: each window alone, BOS first, positions 4, 5, 6 predict tokens 5, 6, 7 (originals).
    std::vector<double> nll;
    for (int64_t c = 0; c < 3; ++c) {
        std::vector<int32_t> w(text.begin() + c * n_ctx, text.begin() + (c + 1) * n_ctx);
        w[0] = 1;
        const auto lg = forward_logits(m, w.data(), {1, n_ctx});
        for (int64_t pos = 4; pos <= 6; ++pos) {
            double mx = -1e300, z = 0;
            for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(lg[pos * V + i]));
            for (int64_t i = 0; i < V; ++i) z += std::exp(double(lg[pos * V + i]) - mx);
            nll.push_back(mx + std::log(z) - double(lg[pos * V + text[c * n_ctx + pos + 1]]));
        }
    }
    double mean = 0, mean2 = 0;
    for (double x : nll) mean += x / double(nll.size()), mean2 += x * x / double(nll.size());
    const double ppl = std::exp(mean), err = ppl * std::sqrt((mean2 - mean * mean) / double(nll.size() - 1));
    EXPECT_NEAR(r.ppl, ppl, 1e-4 * ppl);
    EXPECT_NEAR(r.ppl_err, err, 1e-3 * err);
    EXPECT_NEAR(r.mean_nll, mean, 1e-5);
    ASSERT_EQ(r.chunk_ppl.size(), 3u);
    EXPECT_NEAR(std::log(r.chunk_ppl[1]), (nll[3] + nll[4] + nll[5]) / 3, 1e-5);

    // --chunks limits; too little text is refused (llama.cpp needs 2·n_ctx tokens).
    opt.max_chunks = 1;
    EXPECT_EQ(evaluate_perplexity(text, V, opt, cpu_window_logits(m)).n_chunks, 1);
    const std::vector<int32_t> short_text(text.begin(), text.begin() + 15);
    expect_error_mentions([&] { evaluate_perplexity(short_text, V, opt, cpu_window_logits(m)); }, "at least 16");
}

// The window plans: how many windows, which positions are scored, where BOS goes, and the length rules.
TEST(ModelEval, WindowPlansOfBothProtocols) {
    PerplexityOptions opt = bos_options(8, 1);
    const PerplexityWindows llama = plan_perplexity_windows(27, opt);
    EXPECT_EQ(llama.n_chunks, 3);  // 27 / 8, the remainder dropped
    EXPECT_EQ(llama.first_pos, 4);
    EXPECT_EQ(llama.n_score, 3);   // positions 4, 5, 6 score tokens 5, 6, 7
    EXPECT_TRUE(llama.bos_first);
    expect_error_mentions([&] { plan_perplexity_windows(15, opt); }, "at least 16 (llama.cpp's rule)");

    opt.protocol = PerplexityProtocol::hf;
    const PerplexityWindows hf = plan_perplexity_windows(27, opt);
    EXPECT_EQ(hf.n_chunks, 3);
    EXPECT_EQ(hf.first_pos, 0);
    EXPECT_EQ(hf.n_score, 7);      // positions 0 … 6 score tokens 1 … 7
    EXPECT_FALSE(hf.bos_first);    // add_bos puts BOS at the text's start only (the tokenizer's job)
    EXPECT_EQ(plan_perplexity_windows(8, opt).n_chunks, 1);  // one window is enough
    expect_error_mentions([&] { plan_perplexity_windows(7, opt); }, "at least 8 (the hf protocol's rule)");
    opt.max_chunks = 2;
    EXPECT_EQ(plan_perplexity_windows(27, opt).n_chunks, 2);

    EXPECT_EQ(default_perplexity_ctx(PerplexityProtocol::llama), 512);
    EXPECT_EQ(default_perplexity_ctx(PerplexityProtocol::hf), 2048);
    EXPECT_EQ(parse_perplexity_protocol("hf"), PerplexityProtocol::hf);
    EXPECT_STREQ(perplexity_protocol_name(PerplexityProtocol::llama), "llama");
    expect_error_mentions([] { parse_perplexity_protocol("wikitext"); }, "llama (llama.cpp's");
}

// The hf protocol against the GPTQ repository's llama_eval written out by hand: each window of the text as
// it is, shifted labels, loss·seqlen summed over windows, exp(Σ / (nsamples·seqlen)).
TEST(ModelEval, HfProtocolMatchesTheGptqScriptsPerplexity) {
    const LlamaModel m = tiny_model(false, true, 4);
    const int64_t V = m.config.vocab_size, n_ctx = 9;
    std::vector<int32_t> text = random_tokens(40, V, 79);  // 4 windows, 4 tokens dropped
    text[0] = 1;                                           // the tokenizer's BOS, once
    PerplexityOptions opt = bos_options(n_ctx, 3);         // add_bos is set: hf must still not touch the windows
    opt.protocol = PerplexityProtocol::hf;
    int calls = 0;
    const WindowLogitsFn logits = [&](const int32_t* t, BatchShape shape, int64_t first_pos, float* out) {
        ++calls;
        EXPECT_EQ(first_pos, 0);
        const int64_t c0 = calls == 1 ? 0 : 3;
        for (int64_t i = 0; i < shape.n_seq * shape.n_tok; ++i) EXPECT_EQ(t[i], text[size_t(c0 * n_ctx + i)]) << i;
        forward_logits(m, t, shape, first_pos, out);
    };
    const PerplexityResult r = evaluate_perplexity(text, V, opt, logits);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(r.protocol, PerplexityProtocol::hf);
    EXPECT_EQ(r.first_pos, 0);
    EXPECT_EQ(r.n_chunks, 4);
    EXPECT_EQ(r.n_scored, 4 * 8);

    double nll_sum = 0;  // Σ_windows CrossEntropy(shift_logits, shift_labels) · seqlen
    for (int64_t c = 0; c < 4; ++c) {
        const std::vector<int32_t> w(text.begin() + c * n_ctx, text.begin() + (c + 1) * n_ctx);
        const auto lg = forward_logits(m, w.data(), {1, n_ctx});
        double loss = 0;
        for (int64_t pos = 0; pos + 1 < n_ctx; ++pos) {
            double mx = -1e300, z = 0;
            for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(lg[pos * V + i]));
            for (int64_t i = 0; i < V; ++i) z += std::exp(double(lg[pos * V + i]) - mx);
            loss += mx + std::log(z) - double(lg[pos * V + w[pos + 1]]);
        }
        loss /= double(n_ctx - 1);
        nll_sum += loss * double(n_ctx);
        if (c == 2) {
            EXPECT_NEAR(std::log(r.chunk_ppl[2]), loss, 1e-5);
        }
    }
    const double ppl = std::exp(nll_sum / double(4 * n_ctx));
    EXPECT_NEAR(r.ppl, ppl, 1e-5 * ppl);
    // Not the llama protocol's number on the same text.
    opt.protocol = PerplexityProtocol::llama;
    opt.n_ctx = 8;
    EXPECT_GT(std::abs(evaluate_perplexity(text, V, opt, cpu_window_logits(m)).ppl - ppl), 1e-3 * ppl);
    // KLD base files hold llama-protocol windows only.
    opt.protocol = PerplexityProtocol::hf;
    opt.save_logits = temp_path("hf.kld");
    expect_error_mentions([&] { evaluate_perplexity(text, V, opt, cpu_window_logits(m)); }, "--protocol llama");
    EXPECT_FALSE(std::filesystem::exists(opt.save_logits));
}

// The scoring provider gets the hf protocol's positions and targets (every token after the window's first).
TEST(ModelEval, ScoringProviderGetsTheHfProtocolsTargets) {
    const LlamaModel m = tiny_model(false, true, 3);
    const int64_t V = m.config.vocab_size, n_ctx = 6;
    const std::vector<int32_t> text = random_tokens(13, V, 80);  // 2 windows
    PerplexityOptions opt = bos_options(n_ctx, 2);
    opt.protocol = PerplexityProtocol::hf;
    std::vector<int32_t> seen_targets;
    const WindowNllFn scoring = [&](const int32_t* t, BatchShape shape, int64_t first_pos, int64_t ns,
                                    const int32_t* targets, double* nll, int32_t*) {
        EXPECT_EQ(first_pos, 0);
        EXPECT_EQ(ns, n_ctx - 1);
        EXPECT_EQ(t[n_ctx], text[n_ctx]) << "no BOS in the second window";
        seen_targets.insert(seen_targets.end(), targets, targets + shape.n_seq * ns);
        const auto lg = forward_logits(m, t, shape, first_pos);
        for (int64_t s = 0; s < shape.n_seq; ++s)
            for (int64_t r = 0; r < ns; ++r) nll[s * ns + r] = token_nll(lg.data() + (s * n_ctx + r) * V, V, targets[s * ns + r]);
    };
    const PerplexityResult prov = evaluate_perplexity(text, V, opt, {}, scoring);
    std::vector<int32_t> want;
    for (int64_t c = 0; c < 2; ++c)
        for (int64_t k = 1; k < n_ctx; ++k) want.push_back(text[size_t(c * n_ctx + k)]);
    EXPECT_EQ(seen_targets, want);
    EXPECT_EQ(prov.mean_nll, evaluate_perplexity(text, V, opt, cpu_window_logits(m)).mean_nll);
}

TEST(ModelEval, TokenScoreIsTheFirstMaximumAndTheNll) {
    const float l[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, -INFINITY};
    const TokenScore s = token_score(l, 6, 2);
    EXPECT_EQ(s.argmax, 1);  // the first of two equal maxima
    const double lse = 3.0 + std::log(std::exp(-2.0) + 1 + std::exp(-5.0) + 1 + std::exp(-2.5));  // exp(−Inf) = 0
    EXPECT_NEAR(s.nll, lse + 2.0, 1e-6);
    EXPECT_EQ(s.nll, token_nll(l, 6, 2));
    // Logits far from 0: the max is subtracted first (exp(100) overflows FP32).
    const float big[4] = {-100.0f, 100.0f, 99.0f, -80.0f};
    const TokenScore b = token_score(big, 4, 0);
    EXPECT_EQ(b.argmax, 1);
    EXPECT_NEAR(b.nll, 200.0 + std::log1p(std::exp(-1.0)), 3e-5);  // FP32 result: ulp(200) = 1.5e-5
    EXPECT_NEAR(token_score(big, 4, 1).nll, std::log1p(std::exp(-1.0)), 8e-6);  // (100 + lse) − 100: ulp(100) = 7.6e-6
    const float nan_row[3] = {0.0f, NAN, 1.0f};
    EXPECT_TRUE(std::isnan(token_score(nan_row, 3, 0).nll));
}

// The scoring provider (WindowNllFn): the evaluator hands it the protocol's windows (BOS first) and
// targets; one that scores on the host like the evaluator gives bit-identical results. A run that needs the
// logits on the host (--save-logits, --kld-base) does not use it.
TEST(ModelEval, ScoringProviderGetsTheProtocolsTargetsAndGivesTheSameResult) {
    const LlamaModel m = tiny_model(false, true, 3);
    const int64_t V = m.config.vocab_size, n_ctx = 10, first = 5, n_score = 4;
    const std::vector<int32_t> text = random_tokens(47, V, 78);  // 4 windows, 7 tokens dropped
    PerplexityOptions opt = bos_options(n_ctx, 3);  // windows 0-2 together, then 3
    int calls = 0;
    std::vector<int32_t> seen_targets;
    const WindowNllFn host_scoring = [&](const int32_t* t, BatchShape shape, int64_t first_pos, int64_t ns,
                                         const int32_t* targets, double* nll, int32_t* argmax) {
        ++calls;
        EXPECT_EQ(shape.n_tok, n_ctx);
        EXPECT_EQ(first_pos, first);
        EXPECT_EQ(ns, n_score);
        for (int64_t s = 0; s < shape.n_seq; ++s) EXPECT_EQ(t[s * n_ctx], 1) << "BOS first";
        seen_targets.insert(seen_targets.end(), targets, targets + shape.n_seq * ns);
        const auto lg = forward_logits(m, t, shape, first_pos);
        const int64_t keep = shape.n_tok - first_pos;
        for (int64_t s = 0; s < shape.n_seq; ++s)
            for (int64_t r = 0; r < ns; ++r) {
                const TokenScore sc = token_score(lg.data() + (s * keep + r) * V, V, targets[s * ns + r]);
                nll[s * ns + r] = sc.nll;
                if (argmax) argmax[s * ns + r] = sc.argmax;
            }
    };
    const PerplexityResult host = evaluate_perplexity(text, V, opt, cpu_window_logits(m));
    const PerplexityResult prov = evaluate_perplexity(text, V, opt, cpu_window_logits(m), host_scoring);
    EXPECT_EQ(calls, 2);
    EXPECT_FALSE(host.scored_by_provider);
    EXPECT_TRUE(prov.scored_by_provider);
    std::vector<int32_t> want;  // positions 5 … 8 of each window predict the original tokens 6 … 9
    for (int64_t c = 0; c < 4; ++c)
        for (int64_t r = 0; r < n_score; ++r) want.push_back(text[size_t(c * n_ctx + first + 1 + r)]);
    EXPECT_EQ(seen_targets, want);
    EXPECT_EQ(prov.n_chunks, 4);
    EXPECT_EQ(prov.n_scored, host.n_scored);
    EXPECT_EQ(prov.mean_nll, host.mean_nll);
    EXPECT_EQ(prov.ppl_err, host.ppl_err);
    EXPECT_EQ(prov.chunk_ppl, host.chunk_ppl);
    EXPECT_EQ(evaluate_perplexity(text, V, opt, {}, host_scoring).mean_nll, host.mean_nll);  // no logits provider needed

    // Runs that need the logits on the host score them there.
    calls = 0;
    const std::string path = temp_path("provider.kld");
    opt.save_logits = path;
    const PerplexityResult saved = evaluate_perplexity(text, V, opt, cpu_window_logits(m), host_scoring);
    EXPECT_FALSE(saved.scored_by_provider);
    EXPECT_EQ(saved.mean_nll, host.mean_nll);
    opt.save_logits.clear();
    opt.kld_base = path;
    const PerplexityResult cmp = evaluate_perplexity(text, V, opt, cpu_window_logits(m), host_scoring);
    EXPECT_TRUE(cmp.has_kld);
    EXPECT_FALSE(cmp.scored_by_provider);
    EXPECT_EQ(calls, 0);
    expect_error_mentions([&] { evaluate_perplexity(text, V, opt, {}, host_scoring); }, "need the logits");
    std::remove(path.c_str());

    // A non-finite NLL from the provider is refused like NaN logits, naming the position.
    opt.kld_base.clear();
    const WindowNllFn nan_scoring = [&](const int32_t* t, BatchShape shape, int64_t f, int64_t ns, const int32_t* tg,
                                        double* nll, int32_t* am) {
        host_scoring(t, shape, f, ns, tg, nll, am);
        nll[ns + 2] = NAN;  // window 1, position 7
    };
    expect_error_mentions([&] { evaluate_perplexity(text, V, opt, cpu_window_logits(m), nan_scoring); },
                          "non-finite log-likelihood at window 1, position 7");
}

TEST(ModelEval, KldRecordEncodingIsLlamaCppCompatible) {
    const int64_t V = 5;
    const float logits[V] = {2.0f, -1.0f, 0.5f, -30.0f, 2.0f};
    std::vector<uint16_t> rec(static_cast<size_t>(kld_record_slots(V)));
    EXPECT_EQ(rec.size(), 2u * 3 + 4);  // 2·⌈5/2⌉ + 4
    const double nll = kld_encode_record(logits, V, 2, rec.data());
    float hdr[2];
    std::memcpy(hdr, rec.data(), 8);
    const double lse = std::log(1 + std::exp(-3.0) + std::exp(-1.5) + std::exp(-32.0) + 1);
    EXPECT_NEAR(hdr[0], 16.0 / 65535.0, 1e-9);       // range clamped to max − 16
    EXPECT_NEAR(hdr[1], -16.0 - lse, 1e-5);           // min_log_prob
    EXPECT_NEAR(nll, 1.5 + lse, 1e-5);
    EXPECT_EQ(rec[4 + 0], 65535);                     // the maximum
    EXPECT_EQ(rec[4 + 3], 0);                         // below the window
    EXPECT_EQ(rec[4 + 1], uint16_t(std::nearbyint(13.0 / 16.0 * 65535.0)));
    EXPECT_EQ(rec[4 + 5], 0);                         // padding slot
    // Comparing the logits with their own record: KLD at the 16-bit floor, same top.
    const KldStep s = kld_compare_record(logits, V, rec.data(), 2);
    EXPECT_LT(std::abs(s.kld), 1e-4);
    EXPECT_TRUE(s.same_top);
    EXPECT_NEAR(s.nll_base, s.nll, 1e-3);
}

TEST(ModelEval, KldBaseFileRoundTrip) {
    // Untied: the small random output matrix keeps every log-probability above the file's −16 floor, so
    // the base perplexity read back is the true one.
    const LlamaModel a = tiny_model(false, false, 3);
    LlamaModel b = a;  // a perturbed copy
    for (auto& x : b.weights.blocks[1].w_up) x *= 1.3f;
    const int64_t V = a.config.vocab_size;
    const std::vector<int32_t> text = random_tokens(40, V, 5);
    const std::string path = temp_path("base.kld");
    PerplexityOptions opt = bos_options(10, 1);
    opt.save_logits = path;
    const PerplexityResult ra = evaluate_perplexity(text, V, opt, cpu_window_logits(a));
    EXPECT_EQ(ra.n_chunks, 4);

    const KldBaseHeader h = read_kld_base_header(path);
    EXPECT_EQ(h.n_ctx, 10);
    EXPECT_EQ(h.n_vocab, V);
    EXPECT_EQ(h.n_chunk, 4);
    EXPECT_EQ(h.tokens, std::vector<int32_t>(text.begin(), text.begin() + 40));  // originals, not BOS
    EXPECT_EQ(std::filesystem::file_size(path), uint64_t(20 + 4 * 40 + 4 * 4 * kld_record_slots(V) * 2));

    opt.save_logits.clear();
    opt.kld_base = path;
    const PerplexityResult self = evaluate_perplexity({}, V, opt, cpu_window_logits(a));
    EXPECT_TRUE(self.has_kld);
    EXPECT_LT(std::abs(self.kld_mean), 1e-4);
    EXPECT_DOUBLE_EQ(self.top1_agreement, 1.0);
    EXPECT_NEAR(self.ppl_ratio, 1.0, 1e-3);
    EXPECT_NEAR(self.ppl, ra.ppl, 1e-9 * ra.ppl);

    const PerplexityResult rb = evaluate_perplexity(text, V, opt, cpu_window_logits(b));
    EXPECT_GT(rb.kld_mean, 1e-4);
    // Against KLD computed directly in double from both models' logits.
    double direct = 0;
    for (int64_t c = 0; c < 4; ++c) {
        std::vector<int32_t> w(text.begin() + c * 10, text.begin() + (c + 1) * 10);
        w[0] = 1;
        const auto la = forward_logits(a, w.data(), {1, 10}, 5), lb = forward_logits(b, w.data(), {1, 10}, 5);
        for (int64_t r = 0; r < 4; ++r) {
            auto logp = [&](const std::vector<float>& l) {
                std::vector<double> o(static_cast<size_t>(V));
                double mx = -1e300, z = 0;
                for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(l[r * V + i]));
                for (int64_t i = 0; i < V; ++i) z += std::exp(double(l[r * V + i]) - mx);
                for (int64_t i = 0; i < V; ++i) o[i] = double(l[r * V + i]) - mx - std::log(z);
                return o;
            };
            const auto pa = logp(la), pb = logp(lb);
            for (int64_t i = 0; i < V; ++i)
                if (pa[i] > -16) direct += std::exp(pa[i]) * (pa[i] - pb[i]);
        }
    }
    direct /= 16.0;
    EXPECT_NEAR(rb.kld_mean, direct, 2e-3 * direct + 1e-5);

    // A text that does not match the base file's tokens is refused.
    std::vector<int32_t> other = text;
    other[3] = (other[3] + 1) % int32_t(V);
    expect_error_mentions([&] { evaluate_perplexity(other, V, opt, cpu_window_logits(a)); }, "tokens differ");
    std::remove(path.c_str());
}
