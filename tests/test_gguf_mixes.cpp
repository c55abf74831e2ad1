// test_gguf_mixes.cpp — llama.cpp's per-tensor type choice (formats/gguf_mixes.h) on SmolLM2-135M's shapes
// (rows of 576 that no K-quant block divides) and on Llama-shaped models (every width a multiple of 256),
// with the expected types written out from a reading of src/llama-quant.cpp (llama-cpp-python 0.3.36).
// tests/peer/check_kquants_ggml.py compares the same choice with llama-quantize's real output.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "error_test_util.h"
#include "formats/gguf_mixes.h"

using namespace lowbit;

namespace {

using T = GgufType;

// A Llama-family model's tensors (GGUF names, ggml shapes), norms F32.
std::vector<MixTensor> llama_tensors(int layers, int64_t d, int64_t ffn, int64_t kv_dim, int64_t vocab, bool tied) {
    std::vector<MixTensor> t;
    t.push_back({"token_embd.weight", {d, vocab}});
    t.push_back({"output_norm.weight", {d}});
    if (!tied) t.push_back({"output.weight", {d, vocab}});
    for (int l = 0; l < layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        t.push_back({p + "attn_norm.weight", {d}});
        t.push_back({p + "attn_q.weight", {d, d}});
        t.push_back({p + "attn_k.weight", {d, kv_dim}});
        t.push_back({p + "attn_v.weight", {d, kv_dim}});
        t.push_back({p + "attn_output.weight", {d, d}});
        t.push_back({p + "ffn_norm.weight", {d}});
        t.push_back({p + "ffn_gate.weight", {d, ffn}});
        t.push_back({p + "ffn_up.weight", {d, ffn}});
        t.push_back({p + "ffn_down.weight", {ffn, d}});
    }
    return t;
}

std::map<std::string, T> types_by_name(const char* mix, const MixModel& m, const std::vector<MixTensor>& t) {
    const std::vector<T> types = gguf_mix_types(gguf_mix_by_name(mix), m, t);
    std::map<std::string, T> out;
    for (size_t i = 0; i < t.size(); ++i) out[t[i].name] = types[i];
    return out;
}

// The expected type of each per-layer tensor: `rule(kind, layer)`; the global tensors given explicitly.
struct Expect {
    T token_embd, output = T::F32;  // output: only checked when the model has one
    std::function<T(const std::string& kind, int layer)> rule;
};

void check(const char* mix, const MixModel& m, const std::vector<MixTensor>& tensors, const Expect& e) {
    const auto got = types_by_name(mix, m, tensors);
    EXPECT_EQ(got.at("token_embd.weight"), e.token_embd) << mix;
    EXPECT_EQ(got.at("output_norm.weight"), T::F32) << mix;
    if (got.count("output.weight")) {
        EXPECT_EQ(got.at("output.weight"), e.output) << mix;
    }
    const char* kinds[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                           "ffn_down"};
    for (int l = 0; l < m.n_layers; ++l)
        for (const std::string kind : kinds) {
            const std::string name = "blk." + std::to_string(l) + "." + kind + ".weight";
            const T want = kind.find("norm") != std::string::npos ? T::F32 : e.rule(kind, l);
            EXPECT_EQ(got.at(name), want) << mix << " " << name << ": " << gguf_type_name(got.at(name)) << " vs "
                                          << gguf_type_name(want);
        }
}

// use_more_bits(i, n): i < n/8, i ≥ 7n/8, or (i − n/8) % 3 == 2 — written out for the layer counts used.
const std::set<int> kMoreBits30 = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
const std::set<int> kMoreBits16 = {0, 1, 4, 7, 10, 13, 14, 15};

const MixModel kSmol{30, 9, 3};
const std::vector<MixTensor> kSmolTensors = llama_tensors(30, 576, 1536, 192, 49152, true);

}  // namespace

TEST(GgufMixes, TableAndNames) {
    EXPECT_EQ(uint32_t(gguf_mix_by_name("Q4_K_M").ftype), 15u);
    EXPECT_EQ(gguf_mix_by_name("q4_k_m").base, T::Q4_K);
    EXPECT_EQ(uint32_t(gguf_mix_by_name("Q8_0").ftype), 7u);
    EXPECT_EQ(uint32_t(gguf_mix_by_name("Q5_0").ftype), 8u);
    EXPECT_EQ(uint32_t(gguf_mix_by_name("Q2_K").ftype), 10u);
    EXPECT_EQ(uint32_t(gguf_mix_by_name("Q6_K").ftype), 18u);
    EXPECT_EQ(std::size(kGgufMixes), 14u);
    expect_error_with([] { gguf_mix_by_name("IQ2_XXS"); }, ErrorKind::usage, {"IQ2_XXS", "Q4_K_M"});
}

// The case: on SmolLM2-135M every 576-column tensor falls back (Q4_K → Q5_0, Q6_K → Q8_0) and only
// ffn_down (1536 columns) keeps K-quants; the tied token embedding takes the output rule (576 % 256 ≠ 0 → Q8_0).
TEST(GgufMixes, SmolLm2Q4_K_M) {
    check("Q4_K_M", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string& k, int l) {
              const bool more = kMoreBits30.count(l) > 0;
              if (k == "attn_v") return more ? T::Q8_0 : T::Q5_0;
              if (k == "ffn_down") return more ? T::Q6_K : T::Q4_K;
              return T::Q5_0;
          }});
}

TEST(GgufMixes, SmolLm2OtherMixes) {
    // Q2_K: n_gqa 3 < 4 → attn_v Q3_K, which like every 576-column Q2_K/Q3_K falls back to Q4_0.
    check("Q2_K", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string& k, int) {
              return k == "ffn_down" ? T::Q3_K : T::Q4_0;
          }});
    // Q3_K_M: the first two attn_v Q5_K → Q5_1, the rest Q4_K → Q5_0; ffn_down Q5_K below 30/16 = 1 layer.
    check("Q3_K_M", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string& k, int l) {
              if (k == "attn_v") return l < 2 ? T::Q5_1 : T::Q5_0;
              if (k == "ffn_down") return l < 1 ? T::Q5_K : T::Q4_K;
              if (k == "attn_output") return T::Q5_0;
              return T::Q4_0;
          }});
    // Q4_0: token_embd gets Q6_K (576 % 32 = 0), which falls back to Q8_0.
    check("Q4_0", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string&, int) { return T::Q4_0; }});
    // With an imatrix Q4_0 lifts ffn_down of the first 30/8 = 3 layers to Q4_1.
    MixModel with_imatrix = kSmol;
    with_imatrix.has_imatrix = true;
    check("Q4_0", with_imatrix, kSmolTensors, {T::Q8_0, T::F32, [](const std::string& k, int l) {
              return k == "ffn_down" && l < 3 ? T::Q4_1 : T::Q4_0;
          }});
    check("Q8_0", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string&, int) { return T::Q8_0; }});
    check("Q6_K", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string& k, int) {
              return k == "ffn_down" ? T::Q6_K : T::Q8_0;
          }});
    check("Q5_K_S", kSmol, kSmolTensors, {T::Q8_0, T::F32, [](const std::string& k, int) {
              return k == "ffn_down" ? T::Q5_K : T::Q5_1;
          }});
}

namespace {
// Llama-shaped: 16 layers, d 1024, ffn 2816 (11·256), 16 heads, 4 kv heads (n_gqa 4), untied output.
const MixModel kLlama{16, 16, 4};
const std::vector<MixTensor> kLlamaTensors = llama_tensors(16, 1024, 2816, 256, 32000, false);
}  // namespace

TEST(GgufMixes, LlamaShapedKQuantMixes) {
    check("Q4_K_M", kLlama, kLlamaTensors, {T::Q4_K, T::Q6_K, [](const std::string& k, int l) {
              if (k == "attn_v" || k == "ffn_down") return kMoreBits16.count(l) ? T::Q6_K : T::Q4_K;
              return T::Q4_K;
          }});
    check("Q5_K_M", kLlama, kLlamaTensors, {T::Q5_K, T::Q6_K, [](const std::string& k, int l) {
              if (k == "attn_v" || k == "ffn_down") return kMoreBits16.count(l) ? T::Q6_K : T::Q5_K;
              return T::Q5_K;
          }});
    check("Q4_K_S", kLlama, kLlamaTensors, {T::Q4_K, T::Q6_K, [](const std::string& k, int l) {
              if (k == "attn_v") return l < 4 ? T::Q5_K : T::Q4_K;
              if (k == "ffn_down") return l < 2 ? T::Q5_K : T::Q4_K;
              return T::Q4_K;
          }});
    check("Q3_K_S", kLlama, kLlamaTensors, {T::Q3_K, T::Q6_K, [](const std::string&, int) { return T::Q3_K; }});
    check("Q3_K_M", kLlama, kLlamaTensors, {T::Q3_K, T::Q6_K, [](const std::string& k, int l) {
              if (k == "attn_v") return l < 2 ? T::Q5_K : T::Q4_K;
              if (k == "ffn_down") return l < 1 ? T::Q5_K : T::Q4_K;
              if (k == "attn_output") return T::Q4_K;
              return T::Q3_K;
          }});
    check("Q3_K_L", kLlama, kLlamaTensors, {T::Q3_K, T::Q6_K, [](const std::string& k, int) {
              return k == "attn_v" || k == "ffn_down" || k == "attn_output" ? T::Q5_K : T::Q3_K;
          }});
    check("Q2_K", kLlama, kLlamaTensors, {T::Q2_K, T::Q6_K, [](const std::string& k, int) {
              if (k == "attn_v") return T::Q4_K;  // n_gqa 4
              if (k == "ffn_down" || k == "attn_output") return T::Q3_K;
              return T::Q2_K;
          }});
    check("Q6_K", kLlama, kLlamaTensors, {T::Q6_K, T::Q6_K, [](const std::string&, int) { return T::Q6_K; }});
    check("Q8_0", kLlama, kLlamaTensors, {T::Q8_0, T::Q8_0, [](const std::string&, int) { return T::Q8_0; }});
    check("Q5_1", kLlama, kLlamaTensors, {T::Q5_1, T::Q6_K, [](const std::string&, int) { return T::Q5_1; }});
    MixModel with_imatrix = kLlama;
    with_imatrix.has_imatrix = true;
    check("Q5_0", with_imatrix, kLlamaTensors, {T::Q5_0, T::Q6_K, [](const std::string& k, int l) {
              return k == "ffn_down" && l < 2 ? T::Q5_1 : T::Q5_0;
          }});
}

TEST(GgufMixes, SeventyBLiftsAttnV) {
    // llama.cpp's LLM_TYPE_70B (arch llama, 80 layers, n_head ≠ n_head_kv): attn_v Q3_K/Q4_K become Q5_K.
    const MixModel m{80, 64, 8};
    const auto tensors = llama_tensors(80, 1024, 2816, 128, 512, false);
    check("Q3_K_S", m, tensors, {T::Q3_K, T::Q6_K, [](const std::string& k, int) {
              return k == "attn_v" ? T::Q5_K : T::Q3_K;
          }});
    const std::set<int> more = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  12, 15, 18, 21, 24, 27, 30, 33, 36,
                                39, 42, 45, 48, 51, 54, 57, 60, 63, 66, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79};
    check("Q4_K_M", m, tensors, {T::Q4_K, T::Q6_K, [&](const std::string& k, int l) {
              if (k == "attn_v") return more.count(l) ? T::Q6_K : T::Q5_K;
              if (k == "ffn_down") return more.count(l) ? T::Q6_K : T::Q4_K;
              return T::Q4_K;
          }});
    // Without grouped-query attention the same depth is LLaMA-65B: no lift.
    check("Q3_K_S", MixModel{80, 64, 64}, tensors, {T::Q3_K, T::Q6_K, [](const std::string&, int) { return T::Q3_K; }});
}

TEST(GgufMixes, ExpertModels) {
    // 8 experts: attn_v and attn_k Q8_0, attn_output Q5_K; the FFN layer comes from the name.
    const MixModel m{4, 8, 2, 8};
    std::vector<MixTensor> t = {{"token_embd.weight", {512, 1000}}, {"output.weight", {512, 1000}}};
    for (int l = 0; l < 4; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        t.push_back({p + "attn_v.weight", {512, 128}});
        t.push_back({p + "attn_k.weight", {512, 128}});
        t.push_back({p + "attn_output.weight", {512, 512}});
        t.push_back({p + "ffn_gate_inp.weight", {512, 8}});
        t.push_back({p + "ffn_down_exps.weight", {1024, 512, 8}});
    }
    const auto got = types_by_name("Q4_K_M", m, t);
    EXPECT_EQ(got.at("blk.2.attn_v.weight"), T::Q8_0);
    EXPECT_EQ(got.at("blk.2.attn_k.weight"), T::Q8_0);
    EXPECT_EQ(got.at("blk.2.attn_output.weight"), T::Q5_K);
    EXPECT_EQ(got.at("blk.2.ffn_gate_inp.weight"), T::F32);  // the router is never quantized
    // use_more_bits(l, 4): l < 0 no, l ≥ 3, (l − 0) % 3 == 2 → layers 2 and 3.
    EXPECT_EQ(got.at("blk.0.ffn_down_exps.weight"), T::Q4_K);
    EXPECT_EQ(got.at("blk.2.ffn_down_exps.weight"), T::Q6_K);
    EXPECT_EQ(got.at("blk.3.ffn_down_exps.weight"), T::Q6_K);
    t.push_back({"shared.ffn_down_exps.weight", {1024, 512, 8}});
    expect_error_with([&] { gguf_mix_types(gguf_mix_by_name("Q4_K_M"), m, t); }, ErrorKind::input,
                      {"shared.ffn_down_exps.weight", "layer"});
}

TEST(GgufMixes, OrderShapesAndSourceTypes) {
    // The counters run in llama.cpp's order (layer number, then name) whatever order the file lists them:
    // Q3_K_M gives Q5_K to the attn_v of layers 0 and 1 even when layer 10 comes first (and "blk.10" sorts
    // before "blk.2" as a string).
    std::vector<MixTensor> t = kLlamaTensors;
    std::mt19937 rng(1);
    std::shuffle(t.begin(), t.end(), rng);
    const auto shuffled = types_by_name("Q3_K_M", kLlama, t);
    const auto ordered = types_by_name("Q3_K_M", kLlama, kLlamaTensors);
    EXPECT_EQ(shuffled, ordered);
    EXPECT_EQ(ordered.at("blk.1.attn_v.weight"), T::Q5_K);
    EXPECT_EQ(ordered.at("blk.10.attn_v.weight"), T::Q4_K);
    // Tensors llama.cpp does not quantize keep their source type: 1-D (and [n, 1]) tensors, norms, names
    // not ending in "weight"; a row length no fallback block divides becomes F16.
    const std::vector<MixTensor> odd = {{"token_embd.weight", {1024, 100}},
                                        {"blk.0.attn_norm.weight", {1024}, T::F16},
                                        {"blk.0.attn_q.bias", {1024, 4}},
                                        {"blk.0.attn_q.weight", {1000, 1024}},
                                        {"blk.0.ffn_up.weight", {1024, 1}, T::BF16},
                                        {"blk.0.ffn_gate.weight", {1056, 64}}};
    const auto types = gguf_mix_types(gguf_mix_by_name("Q4_K_M"), MixModel{1, 8, 8}, odd);
    EXPECT_EQ(types[0], T::Q6_K);  // tied embedding: output rule
    EXPECT_EQ(types[1], T::F16);
    EXPECT_EQ(types[2], T::F32);
    EXPECT_EQ(types[3], T::F16);   // 1000 % 256 ≠ 0 and 1000 % 32 ≠ 0
    EXPECT_EQ(types[4], T::BF16);  // ggml_n_dims = 1
    EXPECT_EQ(types[5], T::Q5_0);  // 1056 = 33·32: Q4_K → Q5_0
}
