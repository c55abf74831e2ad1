// test_model_weights.cpp — loading a model (model/weights.h): a tiny GGUF written here through the full
// path (ModelReader → LlamaModel → logits), and a missing tensor named in the error.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "io/gguf_file.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace lowbit;
using namespace lowbit::test;

TEST(ModelFiles, TinyGgufLoadsThroughTheFullPath) {
    for (bool bias : {false, true}) {
        const LlamaModel hf = tiny_model(bias, !bias, 41);
        const std::string path = temp_path("tiny.gguf");
        // arch llama stores permuted q/k (adjacent pairing); qwen2 stores HF order (halves).
        if (bias)
            write_model_gguf(hf, "qwen2", path);
        else
            write_model_gguf(to_gguf_layout(hf), "llama", path);
        const LlamaModel loaded = load_llama_model(path);
        EXPECT_EQ(loaded.config.rope_pairing, bias ? RopePairing::halves : RopePairing::adjacent);
        const int64_t T = 13;
        const std::vector<int32_t> tok = random_tokens(2 * T, hf.config.vocab_size, 8);
        EXPECT_LT(max_abs_diff(forward_logits(hf, tok.data(), {2, T}), forward_logits(loaded, tok.data(), {2, T})), 1e-4)
            << "bias " << bias;
        // Block-wise reader returns the same block as the full load.
        auto reader = ModelReader::open(path);
        EXPECT_EQ(reader->block(2).w_down, loaded.weights.blocks[2].w_down);
        EXPECT_EQ(reader->format(), "gguf");
        std::remove(path.c_str());
    }
}

TEST(ModelFiles, MissingTensorIsNamed) {
    LlamaModel m = tiny_model();
    const std::string path = temp_path("broken.gguf");
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.embedding_length", 32);
    w.set_u32("llama.block_count", 1);
    w.set_u32("llama.feed_forward_length", 48);
    w.set_u32("llama.attention.head_count", 4);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_tensor("token_embd.weight", {32, 61}, GgufType::F32, m.weights.token_embd.data());
    w.write(path);
    expect_error_mentions([&] { load_llama_model(path); }, "output_norm.weight");
    std::remove(path.c_str());
}
