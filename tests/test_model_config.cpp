// test_model_config.cpp — LlamaConfig (model/config.h) from GGUF metadata and from config.json (both RoPE
// formats), and the refusal of architectures lowbit does not run.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf_file.h"
#include "model/config.h"
#include "model_test_util.h"

using namespace lowbit;
using namespace lowbit::test;

TEST(ModelConfig, FromGgufMetadata) {
    const LlamaModel m = tiny_model(false, true);
    const std::string path = temp_path("cfg.gguf");
    write_model_gguf(to_gguf_layout(m), "llama", path);
    const LlamaConfig c = config_from_gguf(GgufFile::open(path));
    EXPECT_EQ(c.architecture, "llama");
    EXPECT_EQ(c.name, "tiny test model");
    EXPECT_EQ(c.vocab_size, 61);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.n_layers, 3);
    EXPECT_EQ(c.n_heads, 4);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.ffn_size, 48);
    EXPECT_EQ(c.context_length, 4096);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.rope_pairing, RopePairing::adjacent);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ(c.bos_token_id, 1);
    std::remove(path.c_str());

    // qwen2: neox pairing, biases found from the tensor list, untied.
    const LlamaModel q = tiny_model(true, false);
    write_model_gguf(q, "qwen2", path);
    const LlamaConfig cq = config_from_gguf(GgufFile::open(path));
    EXPECT_EQ(cq.architecture, "qwen2");
    EXPECT_EQ(cq.rope_pairing, RopePairing::halves);
    EXPECT_TRUE(cq.qkv_bias);
    EXPECT_FALSE(cq.tied_embeddings);
    std::remove(path.c_str());
}

TEST(ModelConfig, UnknownArchitecturesAreRefused) {
    const std::string path = temp_path("gpt2.gguf");
    GgufWriter w;
    w.set_string("general.architecture", "gpt2");
    w.write(path);
    expect_error_mentions([&] { config_from_gguf(GgufFile::open(path)); }, "'gpt2' is not supported");
    std::remove(path.c_str());
    expect_error_mentions([&] { config_from_hf_json(nlohmann::json{{"model_type", "mixtral"}}, "config.json"); },
                          "'mixtral' is not supported");
    expect_error_mentions([&] { config_from_hf_json(nlohmann::json{{"n_embd", 768}}, "config.json"); }, "model_type");
}

TEST(ModelConfig, FromHfConfigJsonBothRopeFormats) {
    // Llama-3.1-style, older form: top-level rope_theta + rope_scaling.
    nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"vocab_size", 128256},
                        {"hidden_size", 4096},
                        {"intermediate_size", 14336},
                        {"num_hidden_layers", 32},
                        {"num_attention_heads", 32},
                        {"num_key_value_heads", 8},
                        {"max_position_embeddings", 131072},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 500000.0},
                        {"rope_scaling",
                         {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}}},
                        {"tie_word_embeddings", false},
                        {"bos_token_id", 128000},
                        {"eos_token_id", {128001, 128008, 128009}},
                        {"hidden_act", "silu"}};
    const LlamaConfig a = config_from_hf_json(j, "config.json");
    EXPECT_EQ(a.head_dim, 128);
    EXPECT_EQ(a.n_kv_heads, 8);
    EXPECT_EQ(a.rope_pairing, RopePairing::halves);
    EXPECT_EQ(a.rope_scaling, RopeScaling::llama3);
    EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
    EXPECT_DOUBLE_EQ(a.rope_factor, 8.0);
    EXPECT_EQ(a.rope_original_context, 8192);
    EXPECT_EQ(a.eos_token_id, 128001);
    EXPECT_FALSE(a.tied_embeddings);
    EXPECT_FALSE(a.qkv_bias);

    // transformers v5: rope_parameters carries theta and the scaling.
    nlohmann::json v5 = j;
    v5.erase("rope_theta");
    v5.erase("rope_scaling");
    v5["rope_parameters"] = {{"rope_type", "llama3"},       {"rope_theta", 500000.0},       {"factor", 8.0},
                             {"low_freq_factor", 1.0},      {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
    const LlamaConfig b = config_from_hf_json(v5, "config.json");
    EXPECT_DOUBLE_EQ(b.rope_theta, 500000.0);
    EXPECT_EQ(rope_inv_freq(a), rope_inv_freq(b));
    nlohmann::json v5_default = j;
    v5_default.erase("rope_scaling");
    v5_default["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100000.0}};
    const LlamaConfig d = config_from_hf_json(v5_default, "config.json");
    EXPECT_EQ(d.rope_scaling, RopeScaling::none);
    EXPECT_DOUBLE_EQ(d.rope_theta, 100000.0);

    // Qwen2: q/k/v biases implied; tied embeddings.
    nlohmann::json q = {{"model_type", "qwen2"},       {"vocab_size", 151936}, {"hidden_size", 896},
                        {"intermediate_size", 4864},   {"num_hidden_layers", 24}, {"num_attention_heads", 14},
                        {"num_key_value_heads", 2},    {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
                        {"tie_word_embeddings", true}, {"use_sliding_window", false}};
    const LlamaConfig cq = config_from_hf_json(q, "config.json");
    EXPECT_TRUE(cq.qkv_bias);
    EXPECT_TRUE(cq.tied_embeddings);
    EXPECT_EQ(cq.head_dim, 64);

    // Mistral: Llama's decoder, run as "llama"; v0.1's sliding window of 4096 becomes the context (lowbit and
    // llama.cpp attend to the whole context, which is the same model up to the window); v0.2+ have none.
    nlohmann::json m = {{"model_type", "mistral"},     {"vocab_size", 32000},   {"hidden_size", 4096},
                        {"intermediate_size", 14336},  {"num_hidden_layers", 32}, {"num_attention_heads", 32},
                        {"num_key_value_heads", 8},    {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},       {"sliding_window", 4096}, {"tie_word_embeddings", false}};
    const LlamaConfig cm = config_from_hf_json(m, "config.json");
    EXPECT_EQ(cm.architecture, "llama");
    EXPECT_FALSE(cm.qkv_bias);
    EXPECT_EQ(cm.head_dim, 128);
    EXPECT_EQ(cm.context_length, 4096);
    m["sliding_window"] = nullptr;
    m["rope_theta"] = 1000000.0;
    EXPECT_EQ(config_from_hf_json(m, "config.json").context_length, 32768);

    // Unsupported variants are refused with the reason.
    nlohmann::json yarn = j;
    yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    expect_error_mentions([&] { config_from_hf_json(yarn, "config.json"); }, "'yarn' is not supported");
    nlohmann::json bias = j;
    bias["attention_bias"] = true;
    expect_error_mentions([&] { config_from_hf_json(bias, "config.json"); }, "attention_bias");

    // Round trip through the exporter's config.json.
    const LlamaConfig r = config_from_hf_json(config_to_hf_json(a), "exported");
    EXPECT_EQ(rope_inv_freq(r), rope_inv_freq(a));
    EXPECT_EQ(r.n_kv_heads, a.n_kv_heads);
    EXPECT_EQ(config_from_hf_json(config_to_hf_json(cq), "exported").qkv_bias, true);
}
