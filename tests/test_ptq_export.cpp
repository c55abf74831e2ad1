// test_ptq_export.cpp — HF safetensors exports of a QuantizedModel (ptq/export_safetensors.h) and the GPTQ
// layout (model/gptq_tensors.h): the bit streams against hand-computed words (2/3/4/8 bits, v1 zeros),
// GPTQ exports of hand-made grids read back by ModelReader bit for bit equal to QuantizedWeight::dequantize()
// (q/k rows un-permuted with their codes, scales and zeros), config.json's quantization_config, the FP16
// scale report, Marlin flags, refusals, the reader's errors for inconsistent tensors, and the fake-quant export.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/element_codec.h"
#include "gptq_test_model.h"
#include "io/safetensors.h"
#include "model/gptq_tensors.h"
#include "model_test_util.h"
#include "ptq/export_safetensors.h"

using namespace lowbit;
using namespace lowbit::test;
namespace fs = std::filesystem;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

// What the file must decode to for a projection of block l: the codes' dequantization, in HF row order;
// with `fp16_scales` the formula scale·(q − zero) on FP16-rounded scales instead of dequantize().
std::vector<float> expected_hf_weight(const QuantizedModel& qm, int64_t l, Projection p, bool round_scales = false) {
    const LlamaConfig& c = qm.model.config;
    QuantizedWeight q = qm.linears.at(linear_name(l, p));
    if (round_scales)
        for (GroupGrid& g : q.grids) g.scale = decode_element(element_spec(ElementType::fp16),
                                                              encode_element(element_spec(ElementType::fp16), g.scale,
                                                                             Rounding::nearest_even, Overflow::special));
    const std::vector<float> w = q.dequantize();
    if (p == Projection::q) return permute_qk_rows_to_hf(w, c.n_heads, c.head_dim, c.hidden_size);
    if (p == Projection::k) return permute_qk_rows_to_hf(w, c.n_kv_heads, c.head_dim, c.hidden_size);
    return w;
}

void expect_read_back_exactly(const QuantizedModel& qm, const std::string& dir, bool round_scales = false) {
    const auto reader = ModelReader::open(dir);
    EXPECT_EQ(reader->config().rope_pairing, RopePairing::halves);
    for (int64_t l = 0; l < qm.model.config.n_layers; ++l) {
        const BlockWeights b = reader->block(l);
        for (Projection p : kProjections)
            EXPECT_TRUE(same_bits(projection_weight(b, p), expected_hf_weight(qm, l, p, round_scales)))
                << dir << " " << linear_name(l, p);
    }
}

}  // namespace

// --- the bit streams ---

TEST(GptqTensors, StreamsPackLsbFirstAcrossWords) {
    // 4 bits: eight codes per word, code j at bits 4j.
    const uint32_t nibbles[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t w4 = 0;
    gptq_pack_stream(nibbles, 1, 8, 4, &w4, 1);
    EXPECT_EQ(uint32_t(w4), 0x76543210u);
    // 2 and 8 bits.
    const uint32_t crumbs[16] = {3, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    int32_t w2 = 0;
    gptq_pack_stream(crumbs, 1, 16, 2, &w2, 1);
    EXPECT_EQ(uint32_t(w2), 0x40000093u);  // 3 | 1<<4 | 2<<6 | 1<<30
    const uint32_t bytes[4] = {0x11, 0xFF, 0x80, 0x7F};
    int32_t w8 = 0;
    gptq_pack_stream(bytes, 1, 4, 8, &w8, 1);
    EXPECT_EQ(uint32_t(w8), 0x7F80FF11u);
    // 3 bits: 32 codes in 3 words; code 10 straddles words 0/1 (2 + 1 bits), code 21 words 1/2 (1 + 2 bits).
    uint32_t triples[32] = {};
    triples[10] = 0b101;
    triples[21] = 0b011;
    triples[31] = 0b111;
    int32_t w3[3];
    gptq_pack_stream(triples, 1, 32, 3, w3, 1);
    EXPECT_EQ(uint32_t(w3[0]), 0x40000000u);         // bit 30 = low bit of code 10 (0b01), bit 31 = 0
    EXPECT_EQ(uint32_t(w3[1]), 0x80000001u);         // bit 0 = top bit of code 10, bit 31 = low bit of code 21
    EXPECT_EQ(uint32_t(w3[2]), 0xE0000001u);         // bits 0-1 = top bits of code 21 (0b01), code 31 at bits 29-31
    for (int bits : {2, 3, 4, 8}) {
        std::vector<uint32_t> v(96);
        for (size_t i = 0; i < v.size(); ++i) v[i] = counter_random24(uint64_t(bits), i) % (1u << bits);
        std::vector<int32_t> words(size_t(2 * (96 * bits / 32)));  // every other word: a stride
        gptq_pack_stream(v.data(), 1, 96, bits, words.data(), 2);
        for (int64_t i = 0; i < 96; ++i) EXPECT_EQ(gptq_stream_value(words.data(), 2, i, bits), v[size_t(i)]) << bits;
    }
}

TEST(GptqTensors, PackedLinearHoldsV1ZerosAndDequantizes) {
    // N = 8 outputs, K = 16 inputs, groups of 8, 4 bits; symmetric zero 8 is stored as 7 in v1.
    const int64_t N = 8, K = 16, G = 8;
    std::vector<uint8_t> codes(size_t(N * K));
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i % 16);
    std::vector<int32_t> zeros(size_t(N * 2), 8);
    zeros[1] = 3;  // output 0, group 1
    std::vector<float> scales(size_t(N * 2), 0.5f);
    scales[2] = 0.25f;  // output 1, group 0
    const GptqLinear t = gptq_pack_linear(4, N, K, G, codes.data(), zeros.data(), scales.data(), GptqZeroConvention::v1);
    EXPECT_EQ(t.qweight.size(), size_t(2 * N));
    EXPECT_EQ(uint32_t(t.qweight[0]), 0x76543210u);  // output 0, inputs 0..7
    EXPECT_EQ(uint32_t(t.qweight[N]), 0xFEDCBA98u);  // output 0, inputs 8..15
    EXPECT_EQ(uint32_t(t.qzeros[0]), 0x77777777u);   // group 0: 8 − 1 everywhere
    EXPECT_EQ(uint32_t(t.qzeros[1]), 0x77777772u);   // group 1: output 0 holds 3 − 1
    EXPECT_EQ(t.g_idx, std::vector<int32_t>({0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(t.scales[size_t(0 * N + 1)], 0.25f);   // scales are [group, output]
    const std::vector<float> w = gptq_dequantize(t, GptqZeroConvention::v1, "test");
    EXPECT_EQ(w[0 * K + 9], 0.5f * (9.0f - 3.0f));
    EXPECT_EQ(w[1 * K + 2], 0.25f * ((16 + 2) % 16 - 8.0f));
    // v2 stores the zero itself; reading it as v1 shifts every weight by one step.
    const GptqLinear t2 = gptq_pack_linear(4, N, K, G, codes.data(), zeros.data(), scales.data(), GptqZeroConvention::v2);
    EXPECT_EQ(uint32_t(t2.qzeros[0]), 0x88888888u);
    EXPECT_EQ(gptq_dequantize(t2, GptqZeroConvention::v2, "test"), w);
    EXPECT_NE(gptq_dequantize(t2, GptqZeroConvention::v1, "test"), w);
    // v1 cannot hold a zero point of 0; v2 can.
    zeros[5] = 0;
    expect_error_mentions([&] { gptq_pack_linear(4, N, K, G, codes.data(), zeros.data(), scales.data(), GptqZeroConvention::v1); },
                          "stores zero − 1");
    EXPECT_NO_THROW(gptq_pack_linear(4, N, K, G, codes.data(), zeros.data(), scales.data(), GptqZeroConvention::v2));
    // Inconsistent tensors are named.
    GptqLinear bad = t;
    bad.qzeros.pop_back();
    expect_error_mentions([&] { gptq_dequantize(bad, GptqZeroConvention::v1, "layer X"); }, "layer X: qzeros has 1 values");
    bad = t;
    bad.g_idx[3] = 2;
    expect_error_mentions([&] { gptq_dequantize(bad, GptqZeroConvention::v1, "layer X"); }, "g_idx[3] = 2 is outside the 2 groups");
}

// --- GPTQ exports read back ---

TEST(PtqExport, GptqExportsReadBackBitForBit) {
    const LlamaConfig c = gptq_test_config();
    struct Case {
        const char* name;
        int64_t group;
        bool sym;
        int64_t written_group;
        bool marlin;
    };
    for (const Case& k : {Case{"int4", 32, true, 32, true}, Case{"int4", 32, false, 32, false},
                          Case{"int3", 64, false, 64, false}, Case{"int8", 0, true, -1, true},
                          Case{"int2", 32, false, 32, false}}) {
        const GridSpec spec = parse_grid(k.name, k.group, k.sym, GridSearch::minmax);
        SCOPED_TRACE(spec.describe());
        const QuantizedModel qm = random_quantized_model(c, spec, 11);
        const std::string dir = temp_path("gptq_" + spec.name() + (k.sym ? "s" : "a"));
        const QuantizedExportReport rep = export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq);
        EXPECT_EQ(rep.quantized_linears, 14);
        EXPECT_EQ(rep.bits, spec.bits);
        EXPECT_EQ(rep.group_size, k.written_group);
        EXPECT_EQ(rep.scales_not_fp16, 0);
        EXPECT_EQ(rep.rows_not_fp16, 0);
        EXPECT_EQ(rep.max_scale_rel_change, 0.0);
        EXPECT_TRUE(rep.hf.unpermuted_qk);
        EXPECT_EQ(rep.marlin_compatible, k.marlin);
        EXPECT_FALSE(rep.marlin_tile_shapes);  // q_proj is [64, 64]: K is not a multiple of 128
        EXPECT_NE(rep.marlin_note.find(k.marlin ? "N % 64" : "Marlin takes sym 4/8-bit"), std::string::npos) << rep.marlin_note;

        const nlohmann::json q = read_json((fs::path(dir) / "config.json").string())["quantization_config"];
        EXPECT_EQ(q["quant_method"], "gptq");
        EXPECT_EQ(q["bits"], spec.bits);
        EXPECT_EQ(q["group_size"], k.written_group);
        EXPECT_EQ(q["sym"], k.sym);
        EXPECT_EQ(q["desc_act"], false);
        EXPECT_EQ(q["checkpoint_format"], "gptq");
        EXPECT_EQ(q["lowbit"]["method"], "gptq");
        EXPECT_EQ(read_json((fs::path(dir) / "config.json").string())["torch_dtype"], "float16");

        // The tensors as GPTQModel lays them out.
        const SafetensorsModel st = SafetensorsModel::open(dir);
        const std::string p = "model.layers.1.mlp.down_proj";  // K = 128, N = 64
        EXPECT_FALSE(st.has(p + ".weight"));
        const int64_t G = k.group ? k.group : 128;
        EXPECT_EQ(st.tensor(p + ".qweight").shape, std::vector<int64_t>({128 * spec.bits / 32, 64}));
        EXPECT_EQ(st.tensor(p + ".qweight").dtype, SafetensorsDtype::I32);
        EXPECT_EQ(st.tensor(p + ".qzeros").shape, std::vector<int64_t>({128 / G, 64 * spec.bits / 32}));
        EXPECT_EQ(st.tensor(p + ".scales").shape, std::vector<int64_t>({128 / G, 64}));
        EXPECT_EQ(st.tensor(p + ".scales").dtype, SafetensorsDtype::F16);
        EXPECT_EQ(st.tensor(p + ".g_idx").shape, std::vector<int64_t>({128}));
        EXPECT_EQ(st.tensor("model.embed_tokens.weight").dtype, SafetensorsDtype::F16);

        expect_read_back_exactly(qm, dir);
        const auto reader = ModelReader::open(dir);
        EXPECT_NE(reader->format().find("GPTQ"), std::string::npos) << reader->format();
        // The unquantized tensors went through FP16.
        std::vector<float> norm16(qm.model.weights.output_norm.size());
        for (size_t i = 0; i < norm16.size(); ++i)
            norm16[i] = decode_element(element_spec(ElementType::fp16),
                                       encode_element(element_spec(ElementType::fp16), qm.model.weights.output_norm[i],
                                                      Rounding::nearest_even, Overflow::special));
        EXPECT_EQ(reader->output_norm(), norm16);
        fs::remove_all(dir);
    }
}

// With FP32 for the unquantized tensors the file is the quantized model itself: the same logits (up to the
// RoPE pairing's arithmetic: the model in memory rotates adjacent pairs, the file's halves).
TEST(PtqExport, GptqExportWithFp32DenseTensorsIsTheModel) {
    const LlamaConfig c = gptq_test_config();
    const QuantizedModel qm = random_quantized_model(c, parse_grid("int4", 64, false, GridSearch::minmax), 12);
    const std::string dir = temp_path("gptq_f32");
    SafetensorsExportOptions opt;
    opt.gptq_dense_dtype = SafetensorsDtype::F32;
    opt.max_shard_bytes = 20000;  // sharded: the packed tensors find their shards through the index
    const QuantizedExportReport rep = export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq, opt);
    EXPECT_GT(rep.hf.files.size(), 2u);
    const LlamaModel back = load_llama_model(dir);
    EXPECT_EQ(back.weights.token_embd, qm.model.weights.token_embd);
    expect_read_back_exactly(qm, dir);
    const std::vector<int32_t> tok = random_tokens(7, c.vocab_size, 3);
    EXPECT_LT(max_abs_diff(forward_logits(back, tok.data(), {1, 7}), forward_logits(qm.model, tok.data(), {1, 7})), 1e-4);
    fs::remove_all(dir);
}

TEST(PtqExport, ScalesThatAreNotFp16AreReported) {
    const LlamaConfig c = gptq_test_config();
    TestGridChoice off;
    off.fp16_scales = false;
    const QuantizedModel qm = random_quantized_model(c, parse_grid("int4", 32, true, GridSearch::minmax), 13, off);
    const std::string dir = temp_path("gptq_not16");
    const QuantizedExportReport rep = export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq);
    // Every group is off: 2 blocks × Σ N·K/32 over the projections.
    int64_t groups = 0, rows = 0;
    for (Projection p : kProjections) {
        groups += 2 * projection_out_features(c, p) * projection_in_features(c, p) / 32;
        rows += 2 * projection_out_features(c, p);
    }
    EXPECT_EQ(rep.groups, groups);
    EXPECT_EQ(rep.scales_not_fp16, groups);
    EXPECT_EQ(rep.rows_not_fp16, rows);
    EXPECT_GT(rep.max_scale_rel_change, 1e-4);
    EXPECT_LE(rep.max_scale_rel_change, 1.0 / 2048);  // half an FP16 ulp at most
    EXPECT_EQ(rep.to_json()["scales_not_fp16"], groups);
    // The file decodes with the FP16 scales — reported, and exactly that.
    expect_read_back_exactly(qm, dir, /*round_scales=*/true);
    const auto reader = ModelReader::open(dir);
    EXPECT_FALSE(same_bits(reader->block(0).w_up, qm.model.weights.blocks[0].w_up));
    fs::remove_all(dir);
}

TEST(PtqExport, ZeroPointsOfZeroNeedGptqV2) {
    const LlamaConfig c = gptq_test_config();
    TestGridChoice zeros;
    zeros.zero_points_of_0 = true;
    const QuantizedModel qm = random_quantized_model(c, parse_grid("int4", 32, false, GridSearch::minmax), 14, zeros);
    const std::string dir = temp_path("gptq_v2");
    expect_error_mentions([&] { export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq); },
                          "has zero point 0, which checkpoint_format gptq (v1, stores zero − 1) cannot hold");
    EXPECT_FALSE(fs::exists(dir));  // refused before anything is written
    SafetensorsExportOptions opt;
    opt.gptq_zeros = GptqZeroConvention::v2;
    const QuantizedExportReport rep = export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq, opt);
    EXPECT_EQ(rep.checkpoint_format, "gptq_v2");
    EXPECT_EQ(read_json((fs::path(dir) / "config.json").string())["quantization_config"]["checkpoint_format"], "gptq_v2");
    expect_read_back_exactly(qm, dir);
    EXPECT_NE(ModelReader::open(dir)->format().find("gptq_v2"), std::string::npos);
    fs::remove_all(dir);
}

TEST(PtqExport, GridsGptqCannotHoldAreRefused) {
    const LlamaConfig c = gptq_test_config();
    const std::string dir = temp_path("gptq_refused");
    auto refused = [&](const QuantizedModel& qm, const std::string& needle) {
        expect_error_mentions([&] { export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq); }, needle);
        EXPECT_FALSE(fs::exists(dir)) << needle;
    };
    refused(random_quantized_model(c, parse_grid("q4_0", 0, false, GridSearch::minmax), 1), "a GGUF grid");
    refused(random_quantized_model(c, parse_grid("int5", 32, false, GridSearch::minmax), 1), "2, 3, 4 or 8 bits");
    refused(random_quantized_model(c, parse_grid("int6", 0, true, GridSearch::minmax), 1), "2, 3, 4 or 8 bits");
    // int3 per channel on the tiny model: k_proj has 16 outputs, 48 bits are not whole words.
    LlamaConfig small = tiny_llama_config(false, true);
    refused(random_quantized_model(small, parse_grid("int3", 0, false, GridSearch::minmax), 1), "multiples of 32");
    QuantizedModel mixed = random_quantized_model(c, parse_grid("int4", 32, true, GridSearch::minmax), 2);
    mixed.linears.at("blk.1.ffn_up") = random_quantized_weight(parse_grid("int4", 64, true, GridSearch::minmax), 128, 64, 5);
    refused(mixed, "one quantization_config needs one grid");
    QuantizedModel partial = random_quantized_model(c, parse_grid("int4", 32, true, GridSearch::minmax), 2);
    partial.linears.erase("blk.0.attn_v");
    refused(partial, "blk.0.attn_v is not quantized");
    QuantizedModel stale = random_quantized_model(c, parse_grid("int4", 32, true, GridSearch::minmax), 2);
    stale.model.weights.blocks[1].wo[5] += 1.0f;
    refused(stale, "blk.1.attn_output: 1 of 4096 dense weights differ");
    // The fake-quant export takes any of them.
    const QuantizedExportReport rep = export_quantized_safetensors(mixed, dir, SafetensorsPacking::fake_quant);
    EXPECT_EQ(rep.quantized_linears, 14);
    fs::remove_all(dir);
}

// The fake-quant export: the dequantized model in FP32, q/k un-permuted, the record in config.json.
TEST(PtqExport, FakeQuantExportIsTheDequantizedModel) {
    const LlamaConfig c = gptq_test_config();
    QuantizedModel qm = random_quantized_model(c, parse_grid("int5", 32, false, GridSearch::minmax), 15);
    qm.record.method = "turboboa";
    qm.record.features = "f1,f2";
    const std::string dir = temp_path("fake_quant");
    const QuantizedExportReport rep = export_quantized_safetensors(qm, dir, SafetensorsPacking::fake_quant);
    EXPECT_EQ(rep.to_json()["packing"], "fake_quant");
    const nlohmann::json config = read_json((fs::path(dir) / "config.json").string());
    EXPECT_FALSE(config.contains("quantization_config"));
    EXPECT_EQ(config["lowbit_quantization"]["method"], "turboboa");
    EXPECT_EQ(config["lowbit_quantization"]["features"], "f1,f2");
    EXPECT_EQ(config["lowbit_quantization"]["format"], "int5 g32 asym");
    EXPECT_EQ(config["torch_dtype"], "float32");
    const auto reader = ModelReader::open(dir);
    EXPECT_EQ(reader->format(), "safetensors");
    expect_read_back_exactly(qm, dir);
    EXPECT_EQ(reader->output_norm(), qm.model.weights.output_norm);
    fs::remove_all(dir);
}

// The reader's errors for GPTQ checkpoints that do not add up, naming the tensor.
TEST(PtqExport, InconsistentGptqCheckpointsAreRefusedClearly) {
    const LlamaConfig c = gptq_test_config();
    const QuantizedModel qm = random_quantized_model(c, parse_grid("int4", 32, true, GridSearch::minmax), 16);
    const std::string dir = temp_path("gptq_bad");
    export_quantized_safetensors(qm, dir, SafetensorsPacking::gptq);
    const std::string file = (fs::path(dir) / "model.safetensors").string();
    const std::string config_path = (fs::path(dir) / "config.json").string();
    const nlohmann::json config = read_json(config_path);
    auto with_config = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
        nlohmann::json j = config;
        edit(j);
        std::ofstream(config_path) << j.dump(2);
        expect_error_mentions([&] { load_llama_model(dir); }, needle);
        std::ofstream(config_path) << config.dump(2);
    };
    with_config([](nlohmann::json& j) { j["quantization_config"]["quant_method"] = "awq"; }, "quant_method 'awq' is not supported");
    with_config([](nlohmann::json& j) { j["quantization_config"]["checkpoint_format"] = "marlin"; },
                "checkpoint_format 'marlin' is not supported");
    with_config([](nlohmann::json& j) { j["quantization_config"]["bits"] = 5; }, "'bits' must be 2, 3, 4 or 8");
    // Groups of 64 while the tensors hold groups of 32: qzeros has the wrong number of rows.
    with_config([](nlohmann::json& j) { j["quantization_config"]["group_size"] = 64; },
                "tensor 'model.layers.0.self_attn.q_proj.qzeros' has shape [2, 8], but 4-bit GPTQ of this config needs [1, 8]");

    // A tensor rewritten: g_idx pointing past the groups.
    const SafetensorsFile f = SafetensorsFile::open(file);
    std::vector<SafetensorsWriteTensor> tensors;
    for (const SafetensorsTensor& t : f.tensors()) {
        const std::span<const uint8_t> b = f.tensor_bytes(t);
        tensors.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(b.begin(), b.end())});
        if (t.name == "model.layers.1.mlp.up_proj.g_idx") {
            const int32_t two = 2;
            std::memcpy(tensors.back().bytes.data() + 4 * 7, &two, 4);
        }
    }
    write_safetensors(file, tensors);
    expect_error_mentions([&] { load_llama_model(dir); }, "model.layers.1.mlp.up_proj: g_idx[7] = 2 is outside the 2 groups");
    fs::remove_all(dir);
}
