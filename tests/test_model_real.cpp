// test_model_real.cpp — the real SmolLM2-135M GGUF end to end (weights, tokenizer, forward, perplexity on
// the SOTU test split); skips when scripts/fetch_model.sh has not been run or the corpus is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/corpus.h"
#include "io/gguf_file.h"
#include "io/model_registry.h"
#include "model/eval.h"
#include "model/tokenizer.h"
#include "model/weights.h"

using namespace lowbit;

TEST(ModelReal, SmolLm2LogitsAreFiniteAndSotuPerplexityIsSane) {
    const std::string path = cached_model_path("smollm2-135m");
    if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "SmolLM2-135M GGUF absent (run scripts/fetch_model.sh)";
    std::string text;
    try {
        text = read_corpus_text("sotu-test");
    } catch (const Error& e) {
        GTEST_SKIP() << "SOTU corpus not available: " << e.what();
    }
    const LlamaModel m = load_llama_model(path);
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
    EXPECT_EQ(m.config.n_layers, 30);
    EXPECT_EQ(m.config.rope_pairing, RopePairing::adjacent);
    EXPECT_TRUE(m.config.tied_embeddings);
    const std::vector<int32_t> tokens = tok.encode(text, tok.add_bos());

    PerplexityOptions opt;
    opt.n_ctx = 256;
    opt.max_chunks = 2;
    opt.add_bos = tok.add_bos();
    opt.bos_id = tok.bos_id();
    opt.progress = false;
    const PerplexityResult r = evaluate_perplexity(tokens, m.config.vocab_size, opt, cpu_window_logits(m));
    std::printf("SmolLM2-135M Q4_1, sotu-test, 2 windows of 256: PPL %.4f +/- %.4f\n", r.ppl, r.ppl_err);
    EXPECT_TRUE(std::isfinite(r.ppl));
    EXPECT_GT(r.ppl, 3.0);   // a 135M model does not know these speeches by heart
    EXPECT_LT(r.ppl, 60.0);  // but it does model English (a broken forward gives hundreds to thousands)

    // Logits are finite everywhere in a window, and the wrong RoPE pairing is much worse (the GGUF's q/k
    // rows really are permuted for adjacent pairs).
    const std::vector<float> lg = forward_logits(m, tokens.data(), {1, 64});
    for (float x : lg) ASSERT_TRUE(std::isfinite(x));
    LlamaModel wrong = m;
    wrong.config.rope_pairing = RopePairing::halves;
    const PerplexityResult rw = evaluate_perplexity(tokens, m.config.vocab_size, opt, cpu_window_logits(wrong));
    EXPECT_GT(rw.ppl, 1.5 * r.ppl) << "halves pairing PPL " << rw.ppl;
}
