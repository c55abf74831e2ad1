// test_gguf_file.cpp — the GGUF reader/writer (io/gguf_file.h): a hand-written golden file, writer → reader
// round trips of every metadata type and every tensor type we encode or decode, the typed getters and
// their messages, refusal of malformed files (magic, version, alignment, type ids, bools, duplicates,
// placement), every truncation of a small file, and a deterministic mutation fuzz of the parser.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "formats/element_codec.h"
#include "io/gguf_file.h"
#include "io/npy.h"
#include "io/model_registry.h"
#include "error_test_util.h"

using namespace lowbit;

namespace {

// Emits GGUF bytes field by field, for fixtures the writer would refuse to produce.
struct RawGguf {
    std::vector<uint8_t> b;
    template <typename T>
    RawGguf& put(T v) {
        const size_t at = b.size();
        b.resize(at + sizeof(T));
        std::memcpy(b.data() + at, &v, sizeof(T));
        return *this;
    }
    RawGguf& str(const std::string& s) {
        put<uint64_t>(s.size());
        for (char c : s) b.push_back(uint8_t(c));
        return *this;
    }
    RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        for (char c : std::string("GGUF")) b.push_back(uint8_t(c));
        return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
    }
    RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).put<uint32_t>(4).put<uint32_t>(v); }
    RawGguf& tensor_info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
        str(name).put<uint32_t>(uint32_t(ne.size()));
        for (uint64_t d : ne) put<uint64_t>(d);
        return put<uint32_t>(type).put<uint64_t>(offset);
    }
    RawGguf& pad(size_t alignment = 32) {
        b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
        return *this;
    }
    RawGguf& zeros(size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
};

void expect_input_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
    try {
        GgufFile::parse(bytes, "bad.gguf");
        ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
        const std::string what = e.what();
        EXPECT_NE(what.find("bad.gguf"), std::string::npos) << what;
        EXPECT_NE(what.find(needle), std::string::npos) << "expected '" << needle << "' in: " << what;
    }
}

std::vector<float> ramp(int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) v[size_t(k)] = scale * std::sin(0.37f * float(k)) + 0.01f * float(k % 7);
    return v;
}

// A small valid file: a few metadata types, two tensors (F32 and Q8_0).
std::vector<uint8_t> small_file() {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_bool("flag", true);
    w.set_string_array("tokenizer.ggml.tokens", {"a", "bc", ""});
    const auto x = ramp(64, 1.0f);
    w.add_tensor("w.f32", {4, 2}, GgufType::F32, x.data());
    w.add_tensor("w.q8", {32, 2}, GgufType::Q8_0, x.data());
    return w.serialize();
}

}  // namespace

TEST(GgufFile, GoldenBytesOfATinyFile) {
    // Written by hand from interop.md §2.1: header, one u32 KV, one F32 tensor info, padding to 32, the data
    // (1.0, -2.0) and padding of the last tensor to 32.
    const std::vector<uint8_t> golden = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0,                 // magic, version 3
        1, 0, 0, 0, 0, 0, 0, 0,                         // tensor count
        1, 0, 0, 0, 0, 0, 0, 0,                         // KV count
        1, 0, 0, 0, 0, 0, 0, 0, 'a',                    // key "a"
        4, 0, 0, 0, 7, 0, 0, 0,                         // u32 7
        1, 0, 0, 0, 0, 0, 0, 0, 't',                    // tensor name "t"
        1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,             // n_dims 1, ne[0] = 2
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,             // type F32, offset 0
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // 74 → 96
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0,  // 1.0f, -2.0f
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // 104 → 128
    };
    ASSERT_EQ(golden.size(), 128u);
    GgufWriter w;
    w.set_u32("a", 7);
    const float data[2] = {1.0f, -2.0f};
    w.add_tensor("t", {2}, GgufType::F32, data);
    EXPECT_EQ(w.serialize(), golden);

    GgufFile g = GgufFile::parse(golden, "golden.gguf");
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.alignment(), 32u);
    EXPECT_EQ(g.data_offset(), 96u);
    EXPECT_EQ(g.get_int("a"), 7);
    ASSERT_EQ(g.tensors().size(), 1u);
    const GgufTensorInfo& t = g.tensors()[0];
    EXPECT_EQ(t.name, "t");
    EXPECT_EQ(t.ne, (std::vector<int64_t>{2}));
    EXPECT_EQ(t.type, GgufType::F32);
    EXPECT_EQ(t.offset, 0u);
    EXPECT_EQ(t.n_bytes, 8u);
    EXPECT_EQ(g.tensor_to_f32(t), (std::vector<float>{1.0f, -2.0f}));
}

TEST(GgufFile, RoundTripsEveryValueType) {
    GgufWriter w;
    std::vector<std::pair<std::string, GgufValue>> kv = {
        {"v.u8", GgufValue::of_u8(255)},
        {"v.i8", GgufValue::of_i8(-128)},
        {"v.u16", GgufValue::of_u16(65535)},
        {"v.i16", GgufValue::of_i16(-32768)},
        {"v.u32", GgufValue::of_u32(4294967295u)},
        {"v.i32", GgufValue::of_i32(std::numeric_limits<int32_t>::min())},
        {"v.u64", GgufValue::of_u64(std::numeric_limits<uint64_t>::max())},
        {"v.i64", GgufValue::of_i64(std::numeric_limits<int64_t>::min())},
        {"v.f32", GgufValue::of_f32(-1.5e-7f)},
        {"v.f64", GgufValue::of_f64(3.141592653589793)},
        {"v.bool", GgufValue::of_bool(true)},
        {"v.false", GgufValue::of_bool(false)},
        {"v.string", GgufValue::of_string("h\xc3\xa9llo \"w\"\n")},
        {"v.empty_string", GgufValue::of_string("")},
        {"v.strings", GgufValue::of_string_array({"<s>", "", "\xe2\x96\x81the"})},
        {"v.floats", GgufValue::of_f32_array({0.0f, -0.0f, 1e30f, std::numeric_limits<float>::infinity()})},
        {"v.ints", GgufValue::of_i32_array({-1, 0, 2147483647})},
        {"v.bools", GgufValue::of_array(GgufValueType::boolean, {GgufValue::of_bool(false), GgufValue::of_bool(true)})},
        {"v.u64s", GgufValue::of_array(GgufValueType::u64, {GgufValue::of_u64(1), GgufValue::of_u64(1ull << 40)})},
        {"v.empty_array", GgufValue::of_array(GgufValueType::f64, {})},
        {"v.nested", GgufValue::of_array(GgufValueType::array,
                                         {GgufValue::of_i32_array({1, 2}), GgufValue::of_string_array({"x"}),
                                          GgufValue::of_array(GgufValueType::u8, {})})},
    };
    for (const auto& [k, v] : kv) w.set(k, v);
    GgufFile g = GgufFile::parse(w.serialize(), "values.gguf");
    ASSERT_EQ(g.metadata().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(g.metadata()[i].first, kv[i].first);
        EXPECT_TRUE(g.metadata()[i].second == kv[i].second) << kv[i].first << ": " << g.metadata()[i].second.to_string();
    }
    // Typed getters.
    EXPECT_EQ(g.get_int("v.u8"), 255);
    EXPECT_EQ(g.get_int("v.i8"), -128);
    EXPECT_EQ(g.get_int("v.u32"), 4294967295ll);
    EXPECT_EQ(g.get_int("v.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(g.get_float("v.f32"), double(-1.5e-7f));
    EXPECT_EQ(g.get_float("v.f64"), 3.141592653589793);
    EXPECT_EQ(g.get_float("v.i16"), -32768.0);
    EXPECT_TRUE(g.get_bool("v.bool"));
    EXPECT_FALSE(g.get_bool("v.false"));
    EXPECT_EQ(g.get_string("v.string"), "h\xc3\xa9llo \"w\"\n");
    EXPECT_EQ(g.get_string_array("v.strings"), (std::vector<std::string>{"<s>", "", "\xe2\x96\x81the"}));
    const auto floats = g.get_float_array("v.floats");
    ASSERT_EQ(floats.size(), 4u);
    EXPECT_TRUE(std::signbit(floats[1]));
    EXPECT_EQ(floats[3], std::numeric_limits<float>::infinity());
    EXPECT_EQ(g.get_int_array("v.ints"), (std::vector<int32_t>{-1, 0, 2147483647}));
    EXPECT_EQ(g.get_float_array("v.u64s"), (std::vector<float>{1.0f, 1099511627776.0f}));
    EXPECT_THROW(g.get_int_array("v.u64s"), Error);  // 2^40 does not fit int32
    EXPECT_EQ(g.get_float_array("v.ints"), (std::vector<float>{-1.0f, 0.0f, 2147483648.0f}));
    // Optional keys.
    EXPECT_EQ(g.get_int_or("missing", 42), 42);
    EXPECT_EQ(g.get_int_or("v.u16", 42), 65535);
    EXPECT_EQ(g.get_float_or("missing", 0.5), 0.5);
    EXPECT_EQ(g.get_string_or("missing", "dflt"), "dflt");
    EXPECT_TRUE(g.get_bool_or("missing", true));
    EXPECT_TRUE(g.get_string_array_or("missing", {}).empty());
    EXPECT_EQ(g.get_int_array_or("missing", {3}), (std::vector<int32_t>{3}));
    EXPECT_EQ(g.get_float_array_or("missing", {1.0f}), (std::vector<float>{1.0f}));
    EXPECT_TRUE(g.has("v.nested"));
    EXPECT_FALSE(g.has("v.nope"));
    EXPECT_EQ(g.find("v.nope"), nullptr);
    EXPECT_EQ(g.get("v.nested").items[1].items[0].s, "x");
    EXPECT_EQ(g.get("v.strings").to_string(2), "[\"<s>\", \"\", ... (3 items)]");
}

TEST(GgufFile, GettersNameFileKeyAndTypes) {
    GgufWriter w;
    w.set_u32("n", 3);
    w.set_string("s", "x");
    w.set("big", GgufValue::of_u64(std::numeric_limits<uint64_t>::max()));
    w.set("u32s", GgufValue::of_array(GgufValueType::u32, {GgufValue::of_u32(4000000000u)}));
    w.set_string_array("strs", {"a"});
    GgufFile g = GgufFile::parse(w.serialize(), "m.gguf");
    expect_error_with([&] { g.get_string("n"); }, ErrorKind::input, {"m.gguf", "'n'", "u32", "expected string"});
    expect_error_with([&] { g.get_int("s"); }, ErrorKind::input, {"m.gguf", "'s'", "string", "integer"});
    expect_error_with([&] { g.get_bool("n"); }, ErrorKind::input, {"'n'", "expected bool"});
    expect_error_with([&] { g.get_float("strs"); }, ErrorKind::input, {"array of string"});
    expect_error_with([&] { g.get_int("big"); }, ErrorKind::input, {"'big'", "18446744073709551615"});
    expect_error_with([&] { g.get_int_array("u32s"); }, ErrorKind::input, {"'u32s' item 0", "4000000000"});
    expect_error_with([&] { g.get_int_array("strs"); }, ErrorKind::input, {"array of string", "array of i32"});
    expect_error_with([&] { g.get_float_array("strs"); }, ErrorKind::input, {"array of string"});
    expect_error_with([&] { g.get_string_array("n"); }, ErrorKind::input, {"expected array of string"});
    expect_error_with([&] { g.get("nope"); }, ErrorKind::input, {"m.gguf", "missing metadata key 'nope'"});
    expect_error_with([&] { g.get_string_or("n", ""); }, ErrorKind::input, {"expected string"});
    expect_error_with([&] { g.tensor("w"); }, ErrorKind::input, {"m.gguf", "no tensor named 'w'"});
}

TEST(GgufFile, RoundTripsTensorsOfEverySupportedType) {
    GgufWriter w(64);
    const int64_t cols = 64, rows = 3;
    const auto x = ramp(cols * rows, 2.0f);
    // Exactly representable in F16 and BF16, so those round trips are exact too.
    std::vector<float> exact(static_cast<size_t>(cols * rows));
    for (size_t k = 0; k < exact.size(); ++k) exact[k] = float(int(k % 37) - 18) * 0.125f;
    w.add_tensor("f32", {cols, rows}, GgufType::F32, x.data());
    w.add_tensor("f16", {cols, rows}, GgufType::F16, exact.data());
    w.add_tensor("bf16", {cols, rows}, GgufType::BF16, exact.data());
    w.add_tensor("bf16_rounded", {cols, rows}, GgufType::BF16, x.data());
    const GgufType block_types[] = {GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0, GgufType::MXFP4};
    for (int k = 0; k < 4; ++k) w.add_tensor(gguf_type_name(block_types[k]), {cols, rows}, block_types[k], x.data());
    w.add_tensor("scalar", {}, GgufType::F32, x.data());
    w.add_tensor("four_d", {32, 1, 2, 3}, GgufType::Q8_0, x.data());
    const auto bytes = w.serialize();
    GgufFile g = GgufFile::parse(bytes, "tensors.gguf");
    EXPECT_EQ(g.alignment(), 64u);
    EXPECT_EQ(g.get_int("general.alignment"), 64);
    EXPECT_EQ(g.data_offset() % 64, 0u);
    for (const auto& t : g.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;

    EXPECT_EQ(g.tensor_to_f32("f32"), x);
    EXPECT_EQ(g.tensor_to_f32("f16"), exact);
    EXPECT_EQ(g.tensor_to_f32("bf16"), exact);
    const auto bf = g.tensor_to_f32("bf16_rounded");
    const ElementSpec bf16 = element_spec(ElementType::bf16);
    for (size_t k = 0; k < bf.size(); ++k)
        EXPECT_EQ(bf[k], decode_element(bf16, encode_element(bf16, x[k], Rounding::nearest_even, Overflow::special)));
    for (int k = 0; k < 4; ++k) {
        const GgufTensorInfo& t = g.tensor(gguf_type_name(block_types[k]));
        EXPECT_EQ(t.type, block_types[k]);
        EXPECT_EQ(t.n_bytes, uint64_t(rows * cols / 32 * gguf_type_info(block_types[k])->block_bytes));
        const auto packed = gguf_quantize_matrix(block_types[k], x.data(), rows, cols);
        const auto span = g.tensor_bytes(t);
        EXPECT_EQ(std::vector<uint8_t>(span.begin(), span.end()), packed) << t.name;
        std::vector<float> want(static_cast<size_t>(rows * cols));
        gguf_dequantize_matrix(block_types[k], packed.data(), rows, cols, want.data());
        EXPECT_EQ(g.tensor_to_f32(t), want) << t.name;
    }
    EXPECT_EQ(g.tensor("scalar").ne.size(), 0u);
    EXPECT_EQ(g.tensor_to_f32("scalar"), (std::vector<float>{x[0]}));
    EXPECT_EQ(g.tensor("four_d").rows(), 6);
    EXPECT_EQ(g.tensor_to_f32("four_d").size(), 192u);
}

TEST(GgufFile, DecodesQ5AndQ6KFromTheirByteLayout) {
    // Blocks packed here from chosen codes, per ggml-common.h; decoding must give d·(q − 16), q·d + m and
    // d·scale·(q − 32).
    const uint16_t d_half = 0x3400;  // fp16 0.25
    const uint16_t m_half = 0xBC00;  // fp16 -1.0
    std::vector<uint8_t> q5_0(22, 0), q5_1(24, 0), q6k(210, 0);
    std::memcpy(q5_0.data(), &d_half, 2);
    std::memcpy(q5_1.data(), &d_half, 2);
    std::memcpy(q5_1.data() + 2, &m_half, 2);
    std::vector<int> code5(32), code6(256);
    for (int j = 0; j < 32; ++j) code5[size_t(j)] = (j * 7 + 3) % 32;
    for (int j = 0; j < 32; ++j) {
        const int q = code5[size_t(j)];
        for (auto* blk : {&q5_0, &q5_1}) {
            uint8_t* qh = blk->data() + (blk == &q5_0 ? 2 : 4);
            uint8_t* qs = qh + 4;
            qs[j % 16] |= uint8_t((q & 0xF) << (j < 16 ? 0 : 4));
            qh[j / 8] |= uint8_t((q >> 4) << (j % 8));
        }
    }
    for (int e = 0; e < 256; ++e) {
        const int q = (e * 13 + 5) % 64;
        code6[size_t(e)] = q;
        const int h = e / 128, i = e % 128;
        q6k[size_t(64 * h + i % 64)] |= uint8_t((q & 0xF) << (4 * (i / 64)));
        q6k[size_t(128 + 32 * h + i % 32)] |= uint8_t((q >> 4) << (2 * (i / 32)));
    }
    for (int s = 0; s < 16; ++s) q6k[size_t(192 + s)] = uint8_t(int8_t(s - 8));
    std::memcpy(q6k.data() + 208, &d_half, 2);

    GgufWriter w;
    w.add_tensor_raw("q5_0", {32}, GgufType::Q5_0, q5_0);
    w.add_tensor_raw("q5_1", {32}, GgufType::Q5_1, q5_1);
    w.add_tensor_raw("q6_k", {256}, GgufType::Q6_K, q6k);
    GgufFile g = GgufFile::parse(w.serialize(), "q56.gguf");
    const auto a = g.tensor_to_f32("q5_0"), b = g.tensor_to_f32("q5_1"), c = g.tensor_to_f32("q6_k");
    for (int j = 0; j < 32; ++j) {
        EXPECT_EQ(a[size_t(j)], 0.25f * float(code5[size_t(j)] - 16)) << j;
        EXPECT_EQ(b[size_t(j)], 0.25f * float(code5[size_t(j)]) - 1.0f) << j;
    }
    for (int e = 0; e < 256; ++e) EXPECT_EQ(c[size_t(e)], 0.25f * float(e / 16 - 8) * float(code6[size_t(e)] - 32)) << e;
}

TEST(GgufFile, UnknownTensorTypesAreToleratedUntilDequantized) {
    GgufWriter w;
    const float one = 1.0f;
    w.add_tensor_raw("future", {5}, GgufType(77), std::vector<uint8_t>(40, 0xAB));
    w.add_tensor("after", {1}, GgufType::F32, &one);
    w.add_tensor_raw("iq4", {256}, GgufType::IQ4_XS, std::vector<uint8_t>(136, 0));
    GgufFile g = GgufFile::parse(w.serialize(), "future.gguf");
    const GgufTensorInfo& t = g.tensor("future");
    EXPECT_EQ(uint32_t(t.type), 77u);
    EXPECT_STREQ(gguf_type_name(t.type), "unknown");
    EXPECT_EQ(t.n_bytes, 64u);  // up to the next tensor (40 bytes padded to 32)
    EXPECT_EQ(g.tensor_bytes(t)[39], 0xAB);
    EXPECT_EQ(g.tensor_to_f32("after"), (std::vector<float>{1.0f}));
    expect_error_with([&] { g.tensor_to_f32("future"); }, ErrorKind::input,
                      {"future.gguf", "'future'", "unknown type id 77", "cannot dequantize"});
    expect_error_with([&] { g.tensor_to_f32("iq4"); }, ErrorKind::input, {"'iq4'", "IQ4_XS"});
}

TEST(GgufFile, WriterRefusesBadInput) {
    GgufWriter w;
    w.set_u32("k", 1);
    const float x[256] = {};
    expect_error_with([&] { w.set_u32("k", 2); }, ErrorKind::usage, {"'k' set twice"});
    expect_error_with([&] { w.set("", GgufValue::of_u8(1)); }, ErrorKind::usage, {"empty"});
    expect_error_with([&] { w.set("general.alignment", GgufValue::of_u32(64)); }, ErrorKind::usage, {"general.alignment"});
    expect_error_with([] { GgufWriter bad(12); }, ErrorKind::usage, {"alignment 12"});
    expect_error_with([&] { w.add_tensor("q", {16}, GgufType::Q4_0, x); }, ErrorKind::usage, {"'q'", "multiple"});
    expect_error_with([&] { w.add_tensor("q", {2, 0}, GgufType::F32, x); }, ErrorKind::usage, {"'q'", "dimension 0"});
    expect_error_with([&] { w.add_tensor("q", {1, 1, 1, 1, 1}, GgufType::F32, x); }, ErrorKind::usage, {"5 dimensions"});
    expect_error_with([&] { w.add_tensor("q", {256}, GgufType::IQ4_XS, x); }, ErrorKind::usage, {"cannot encode"});
    expect_error_with([&] { w.add_tensor_raw("q", {32}, GgufType::Q8_0, {1, 2}); }, ErrorKind::usage, {"34 bytes"});
    expect_error_with([&] { w.add_tensor(std::string(64, 'n'), {1}, GgufType::F32, x); }, ErrorKind::usage, {"1 to 63"});
    w.add_tensor("q", {1}, GgufType::F32, x);
    expect_error_with([&] { w.add_tensor("q", {1}, GgufType::F32, x); }, ErrorKind::usage, {"'q' added twice"});
    expect_error_with(
        [] { GgufValue::of_array(GgufValueType::u8, {GgufValue::of_string("s")}); }, ErrorKind::usage, {"array of u8"});
}

TEST(GgufFile, RefusesMalformedHeaders) {
    expect_input_error({}, "not a GGUF file");
    expect_input_error({'G', 'G', 'M', 'L', 3, 0, 0, 0}, "magic");
    expect_input_error(RawGguf().header(0, 0, 1).b, "version 1 is not supported");
    expect_input_error(RawGguf().header(0, 0, 4).b, "unsupported GGUF version 4");
    expect_input_error(RawGguf().header(0, 0, 0x03000000).b, "big-endian");
    expect_input_error(RawGguf().header(0, 1000000).b, "metadata pairs cannot fit");
    expect_input_error(RawGguf().header(1ull << 60, 0).b, "tensor infos cannot fit");
    // Version 2 is read like version 3.
    EXPECT_EQ(GgufFile::parse(RawGguf().header(0, 1, 2).kv_u32("k", 5).b, "v2.gguf").get_int("k"), 5);
    // A file with no tensors may end right after its metadata.
    EXPECT_EQ(GgufFile::parse(RawGguf().header(0, 0).b, "empty.gguf").tensors().size(), 0u);
}

TEST(GgufFile, RefusesMalformedMetadata) {
    expect_input_error(RawGguf().header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0).b, "unknown value type 13");
    expect_input_error(RawGguf().header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).b, "bool value is byte 2");
    expect_input_error(RawGguf().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, "duplicate metadata key 'k'");
    expect_input_error(RawGguf().header(0, 1).str("").put<uint32_t>(4).put<uint32_t>(0).b, "empty key");
    expect_input_error(RawGguf().header(0, 1).put<uint64_t>(1ull << 40).zeros(8).b, "truncated");
    expect_input_error(RawGguf().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(99).put<uint64_t>(0).b,
                       "unknown array element type 99");
    expect_input_error(RawGguf().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 62).b,
                       "cannot fit");
    // Arrays of bools are checked item by item.
    expect_input_error(
        RawGguf().header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(7).put<uint64_t>(2).put<uint8_t>(1).put<uint8_t>(9).b,
        "bool value is byte 9");
    // Nested arrays deeper than 16 levels.
    RawGguf deep;
    deep.header(0, 1).str("k").put<uint32_t>(9);
    for (int k = 0; k < 20; ++k) deep.put<uint32_t>(9).put<uint64_t>(1);
    deep.put<uint32_t>(4).put<uint64_t>(0);
    expect_input_error(deep.b, "nested deeper than 16");
    // general.alignment: must be a u32, positive multiple of 8.
    expect_input_error(RawGguf().header(0, 1).kv_u32("general.alignment", 12).b, "general.alignment is 12");
    expect_input_error(RawGguf().header(0, 1).kv_u32("general.alignment", 0).b, "general.alignment is 0");
    expect_input_error(RawGguf().header(0, 1).str("general.alignment").put<uint32_t>(10).put<uint64_t>(64).b,
                       "general.alignment has type u64");
    EXPECT_EQ(GgufFile::parse(RawGguf().header(0, 1).kv_u32("general.alignment", 8).b, "a8").alignment(), 8u);
}

TEST(GgufFile, RefusesMalformedTensorInfos) {
    auto one_tensor = [](const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset,
                         size_t data_bytes) {
        RawGguf r;
        r.header(1, 0).tensor_info(name, ne, type, offset).pad().zeros(data_bytes);
        return r.b;
    };
    EXPECT_NO_THROW(GgufFile::parse(one_tensor("t", {8}, 0, 0, 32), "ok"));
    expect_input_error(one_tensor("t", {1, 1, 1, 1, 1}, 0, 0, 32), "'t' has 5 dimensions");
    expect_input_error(one_tensor("t", {8, 0}, 0, 0, 32), "dimension 1 is 0");
    expect_input_error(one_tensor("t", {1ull << 63}, 0, 0, 32), "dimension 0 is 9223372036854775808");
    expect_input_error(one_tensor("t", {1ull << 32, 1ull << 32}, 0, 0, 32), "overflows");
    expect_input_error(one_tensor("t", {1ull << 61}, 0, 0, 32), "truncated: tensor 't' data ends at byte");
    expect_input_error(one_tensor("t", {16}, 2, 0, 32), "not a multiple of the Q4_0 block size 32");
    expect_input_error(one_tensor("t", {8}, 0, 16, 64), "offset 16 is not a multiple of the alignment 32");
    expect_input_error(one_tensor("t", {8}, 0, 1ull << 40, 64), "truncated: tensor 't' data starts at offset");
    expect_input_error(one_tensor("t", {16}, 0, 0, 32), "truncated: tensor 't' data ends at byte 128 but the file has 96");
    expect_input_error(one_tensor("", {8}, 0, 0, 32), "empty name");
    expect_input_error(one_tensor(std::string(65, 'x'), {8}, 0, 0, 32), "name of 65 bytes");
    EXPECT_NO_THROW(GgufFile::parse(one_tensor(std::string(64, 'x'), {8}, 0, 0, 32), "ok"));

    RawGguf dup;
    dup.header(2, 0).tensor_info("t", {8}, 0, 0).tensor_info("t", {8}, 0, 32).pad().zeros(64);
    expect_input_error(dup.b, "duplicate tensor name 't'");
    RawGguf overlap;
    overlap.header(2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {8}, 0, 32).pad().zeros(96);
    expect_input_error(overlap.b, "tensors 'a' and 'b' overlap");
    RawGguf unaligned;
    unaligned.header(1, 1).kv_u32("general.alignment", 64).tensor_info("t", {8}, 0, 32).pad(64).zeros(128);
    expect_input_error(unaligned.b, "not a multiple of the alignment 64");
}

TEST(GgufFile, EveryTruncationIsAnInputError) {
    const auto full = small_file();
    const GgufFile ok = GgufFile::parse(full, "small.gguf");
    uint64_t data_end = 0;
    for (const auto& t : ok.tensors()) data_end = std::max(data_end, ok.data_offset() + t.offset + t.n_bytes);
    for (size_t len = 0; len < full.size(); ++len) {
        const std::vector<uint8_t> cut(full.begin(), full.begin() + long(len));
        if (len >= data_end) {  // only trailing padding is missing: still a complete file
            EXPECT_NO_THROW(GgufFile::parse(cut, "small.gguf")) << len;
            continue;
        }
        try {
            GgufFile::parse(cut, "small.gguf");
            ADD_FAILURE() << "length " << len << " parsed";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::input);
            const std::string what = e.what();
            EXPECT_EQ(what.rfind("small.gguf: ", 0), 0u) << what;
            if (len >= 4) {
                EXPECT_NE(what.find("truncated"), std::string::npos) << len << ": " << what;
            }
        }
    }
}

TEST(GgufFile, WritesAtomicallyAndMapsFiles) {
    const std::string path = testing::TempDir() + "/lowbit_gguf_file_test.gguf";
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    const auto x = ramp(96, 1.0f);
    w.add_tensor("x", {32, 3}, GgufType::F32, x.data());
    w.write(path);
    GgufFile g = GgufFile::open(path);
    EXPECT_EQ(g.name(), path);
    EXPECT_EQ(g.file_size(), w.serialize().size());
    GgufFile moved = std::move(g);  // the mapping moves with the object
    EXPECT_EQ(moved.tensor_to_f32("x"), x);
    EXPECT_EQ(moved.get_string("general.architecture"), "llama");
    std::remove(path.c_str());
    expect_error_with([] { GgufFile::open("/nonexistent/dir/m.gguf"); }, ErrorKind::input,
                      {"/nonexistent/dir/m.gguf", "cannot open"});
    expect_error_with([] { GgufFile::open("/tmp"); }, ErrorKind::input, {"/tmp", "not a regular file"});
}

// Lazy tensors: made only when the file is written, byte-identical to the same tensors added eagerly, in both
// serialize() and the streamed write(); a producer that makes the wrong size is an error and leaves no file.
TEST(GgufFile, LazyTensorsAreWrittenAsTheyAreMade) {
    const std::string path = testing::TempDir() + "/lowbit_gguf_lazy.gguf", path2 = path + ".2";
    const auto x = ramp(64, 0.5f), y = ramp(96, -1.0f);
    const std::vector<uint8_t> xq = gguf_quantize_matrix(GgufType::Q8_0, x.data(), 2, 32);
    GgufWriter eager, lazy;
    for (GgufWriter* w : {&eager, &lazy}) w->set_string("general.architecture", "llama");
    eager.add_tensor_raw("x", {32, 2}, GgufType::Q8_0, xq);
    eager.add_tensor("y", {32, 3}, GgufType::F32, y.data());
    int made = 0;
    lazy.add_tensor_lazy("x", {32, 2}, GgufType::Q8_0, [&] { ++made; return xq; });
    lazy.add_tensor("y", {32, 3}, GgufType::F32, y.data());
    EXPECT_EQ(made, 0);
    EXPECT_EQ(lazy.serialize(), eager.serialize());
    lazy.write(path);
    eager.write(path2);
    EXPECT_EQ(made, 2);
    EXPECT_EQ(read_file(path), read_file(path2));
    EXPECT_EQ(GgufFile::open(path).tensor_to_f32("y"), y);
    GgufWriter bad;
    bad.add_tensor_lazy("x", {32, 2}, GgufType::Q8_0, [&] { return std::vector<uint8_t>(3); });
    const std::string path3 = path + ".3";
    expect_error_with([&] { bad.write(path3); }, ErrorKind::runtime, {"'x'", "3 bytes"});
    EXPECT_FALSE(std::filesystem::exists(path3));
    for (const auto& e : std::filesystem::directory_iterator(testing::TempDir()))
        EXPECT_EQ(e.path().string().find(path3 + ".tmp"), std::string::npos) << "temporary file left: " << e.path();
    std::remove(path.c_str());
    std::remove(path2.c_str());
}

TEST(GgufFile, MutationFuzzNeverCrashes) {
    // Deterministic mutations of a valid file: each must parse (and dequantize) or raise lowbit::Error.
    const auto base = small_file();
    int parsed = 0, rejected = 0;
    for (uint64_t it = 0; it < 20000; ++it) {
        auto b = base;
        const int n_mut = 1 + int(counter_random24(11, it) % 4);
        for (int m = 0; m < n_mut; ++m) {
            const uint32_t r = counter_random24(12, it * 8 + uint64_t(m));
            const size_t pos = r % b.size();
            switch ((r >> 16) % 4) {
                case 0: b[pos] = uint8_t(counter_random24(13, it * 8 + uint64_t(m))); break;
                case 1: b.resize(pos); break;
                case 2: b.insert(b.begin() + long(pos), uint8_t(r >> 8)); break;
                default: b[pos] ^= uint8_t(1u << ((r >> 8) % 8)); break;
            }
            if (b.empty()) break;
        }
        try {
            GgufFile g = GgufFile::parse(b, "fuzz");
            for (const auto& t : g.tensors())
                if (gguf_type_can_dequantize(t.type)) g.tensor_to_f32(t);
            ++parsed;
        } catch (const Error&) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 1000);
    EXPECT_GT(parsed, 100);
}

TEST(GgufFile, RealSmolLM2IfFetched) {
    std::string path;
    try {
        path = resolve_model_path("smollm2-135m");
    } catch (const Error&) {
        GTEST_SKIP() << "SmolLM2 not in the cache (scripts/fetch_model.sh)";
    }
    GgufFile g = GgufFile::open(path);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("llama.block_count"), 30);
    EXPECT_EQ(g.get_int("llama.embedding_length"), 576);
    EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
    EXPECT_EQ(g.get_int_array("tokenizer.ggml.token_type").size(), 49152u);
    EXPECT_EQ(g.tensors().size(), 272u);
    const GgufTensorInfo& emb = g.tensor("token_embd.weight");
    EXPECT_EQ(emb.type, GgufType::Q8_0);
    EXPECT_EQ(emb.ne, (std::vector<int64_t>{576, 49152}));
    const auto q = g.tensor_to_f32("blk.0.attn_q.weight");
    EXPECT_EQ(q.size(), 576u * 576u);
    for (float v : q) ASSERT_TRUE(std::isfinite(v));
}
