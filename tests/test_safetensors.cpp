// test_safetensors.cpp — the safetensors reader/writer (io/safetensors.h): a hand-written golden file,
// round trips, the format's rules (header size, '{', dtypes, shape × dtype = bytes, no holes/overlaps,
// string metadata, no duplicate keys), every truncation, a mutation fuzz, and sharded models found
// through model.safetensors.index.json.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "io/safetensors.h"

using namespace lowbit;

namespace {

// A file image from header text (padded with spaces to a multiple of 8 unless told not to) and data.
std::vector<uint8_t> image(std::string header, const std::vector<uint8_t>& data, bool pad = true) {
    if (pad) header.append((8 - header.size() % 8) % 8, ' ');
    std::vector<uint8_t> b(8 + header.size() + data.size());
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
    return b;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

void expect_input_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
    try {
        SafetensorsFile::parse(bytes, "bad.safetensors");
        ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
        const std::string what = e.what();
        EXPECT_NE(what.find("bad.safetensors"), std::string::npos) << what;
        EXPECT_NE(what.find(needle), std::string::npos) << "expected '" << needle << "' in: " << what;
    }
}

std::vector<uint8_t> small_file() {
    const std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 7.0f, -0.125f};
    return serialize_safetensors({safetensors_tensor_from_f32("a", {2, 3}, SafetensorsDtype::F32, a.data()),
                                  safetensors_tensor_from_f32("b", {3}, SafetensorsDtype::BF16, a.data())},
                                 {{"format", "pt"}});
}

std::string temp_dir(const std::string& name) {
    const std::string dir = testing::TempDir() + "/" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

}  // namespace

TEST(Safetensors, GoldenBytesOfATinyFile) {
    const std::string json = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 54 bytes
    ASSERT_EQ(json.size(), 54u);
    std::vector<uint8_t> golden = {56, 0, 0, 0, 0, 0, 0, 0};            // header size 56 = 54 + 2 spaces
    for (char c : json) golden.push_back(uint8_t(c));
    golden.push_back(' ');
    golden.push_back(' ');
    for (uint8_t x : {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0}) golden.push_back(x);  // 1.0f, -2.0f
    const float data[2] = {1.0f, -2.0f};
    EXPECT_EQ(serialize_safetensors({safetensors_tensor_from_f32("t", {2}, SafetensorsDtype::F32, data)}), golden);
    SafetensorsFile f = SafetensorsFile::parse(golden, "golden.safetensors");
    EXPECT_EQ(f.data_offset(), 64u);
    ASSERT_EQ(f.tensors().size(), 1u);
    EXPECT_EQ(f.tensors()[0].shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(f.tensor_to_f32("t"), (std::vector<float>{1.0f, -2.0f}));
}

TEST(Safetensors, RoundTripsDtypesShapesAndMetadata) {
    std::vector<float> x(24);
    for (size_t k = 0; k < x.size(); ++k) x[k] = float(int(k) - 12) * 0.375f;  // exact in F16 and BF16
    std::vector<float> y = {1.0009765625f, 3.0e38f, -1e-8f};                       // rounds in F16/BF16
    const int32_t ints[3] = {-1, 7, 1 << 30};
    SafetensorsWriteTensor raw{"qweight", SafetensorsDtype::I32, {3}, std::vector<uint8_t>(12)};
    std::memcpy(raw.bytes.data(), ints, 12);
    std::vector<SafetensorsWriteTensor> ts = {
        safetensors_tensor_from_f32("model.layers.0.w", {2, 3, 4}, SafetensorsDtype::F32, x.data()),
        safetensors_tensor_from_f32("h", {4, 6}, SafetensorsDtype::F16, x.data()),
        safetensors_tensor_from_f32("b", {24}, SafetensorsDtype::BF16, x.data()),
        safetensors_tensor_from_f32("h_round", {3}, SafetensorsDtype::F16, y.data()),
        safetensors_tensor_from_f32("b_round", {3}, SafetensorsDtype::BF16, y.data()),
        safetensors_tensor_from_f32("scalar", {}, SafetensorsDtype::F32, x.data() + 5),
        safetensors_tensor_from_f32("empty", {0, 4}, SafetensorsDtype::F32, x.data()),
        raw,
    };
    const auto bytes = serialize_safetensors(ts, {{"format", "pt"}, {"lowbit.note", "x\"y"}});
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ((8 + n) % 8, 0u);
    SafetensorsFile f = SafetensorsFile::parse(bytes, "rt.safetensors");
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("lowbit.note"), "x\"y");
    EXPECT_EQ(f.tensors().size(), ts.size());
    EXPECT_EQ(f.tensor_to_f32("model.layers.0.w"), x);
    EXPECT_EQ(f.tensor_to_f32("h"), x);
    EXPECT_EQ(f.tensor_to_f32("b"), x);
    EXPECT_EQ(f.tensor("h").shape, (std::vector<int64_t>{4, 6}));
    EXPECT_EQ(f.tensor_to_f32("h_round"), (std::vector<float>{1.0009765625f, std::numeric_limits<float>::infinity(), -0.0f}));
    const auto br = f.tensor_to_f32("b_round");
    EXPECT_EQ(br[0], 1.0f);
    EXPECT_EQ(br[2], -1.0011717677116394e-08f);  // nearest BF16 of -1e-8
    EXPECT_EQ(f.tensor_to_f32("scalar"), (std::vector<float>{x[5]}));
    EXPECT_TRUE(f.tensor_to_f32("empty").empty());
    EXPECT_EQ(f.tensor("qweight").dtype, SafetensorsDtype::I32);
    const auto qb = f.tensor_bytes(f.tensor("qweight"));
    EXPECT_EQ(std::memcmp(qb.data(), ints, 12), 0);
    try {
        f.tensor_to_f32("qweight");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("dtype I32"), std::string::npos) << e.what();
    }
    EXPECT_EQ(f.find("nope"), nullptr);
    EXPECT_THROW(f.tensor("nope"), Error);
}

TEST(Safetensors, ReadsHandWrittenHeaders) {
    // Keys in any order, whitespace, F8 dtypes, a tensor listed before the one that comes first in the data.
    const std::string h = " {\n \"w\" : {\"data_offsets\": [2, 4], \"shape\": [2], \"dtype\": \"F8_E4M3\"},\n"
                          "  \"v\": {\"dtype\": \"F8_E5M2\", \"shape\": [1, 2], \"data_offsets\": [0, 2]} ,"
                          "\"__metadata__\": {}}";
    expect_input_error(image(h, {0x3C, 0xBC, 0x38, 0xB8}), "starting with '{'");
    auto f = SafetensorsFile::parse(image(h.substr(1), {0x3C, 0xBC, 0x38, 0xB8}), "hand.safetensors");
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.tensors()[0].name, "v");  // ordered by data offset
    EXPECT_EQ(f.tensor_to_f32("v"), (std::vector<float>{1.0f, -1.0f}));  // E5M2 0x3C = 1
    EXPECT_EQ(f.tensor_to_f32("w"), (std::vector<float>{1.0f, -1.0f}));  // E4M3 0x38 = 1
    EXPECT_TRUE(f.metadata().empty());
    // An empty file with no tensors is valid.
    EXPECT_TRUE(SafetensorsFile::parse(image("{}", {}), "e").tensors().empty());
}

TEST(Safetensors, RefusesMalformedFiles) {
    const auto d8 = float_bytes({1.0f, 2.0f});
    const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    EXPECT_NO_THROW(SafetensorsFile::parse(image(ok, d8), "ok"));
    expect_input_error({1, 2, 3}, "truncated");
    {
        std::vector<uint8_t> big(16, 0);
        const uint64_t n = 100'000'001;
        std::memcpy(big.data(), &n, 8);
        expect_input_error(big, "exceeds the safetensors limit");
        const uint64_t m = 9;
        std::memcpy(big.data(), &m, 8);
        expect_input_error(big, "truncated: the header needs 9 bytes");
    }
    expect_input_error(image("[1]", {}), "starting with '{'");
    expect_input_error(image("{\"t\":", {}), "not valid JSON");
    expect_input_error(image("{\"a\":1}\x01", {}), "not valid JSON");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
                       "duplicate key \"t\"");
    expect_input_error(image(R"({"t":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", d8),
                       "duplicate key \"dtype\"");
    expect_input_error(image(R"({"t":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", d8), "unknown dtype \"F99\"");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8),
                       "tensor 't': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8");
    expect_input_error(image(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", {0, 0}), "do not fill whole bytes");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "non-negative integer");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8), "non-negative integer");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d8), "end before they begin");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8), "[BEGIN, END]");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2]}})", d8), "has no \"data_offsets\"");
    expect_input_error(image(R"({"t":[1]})", d8), "entry must be an object");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8),
                       "too many elements");
    expect_input_error(image(R"({"t":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", d8), "overflows");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", float_bytes({1, 2, 3})),
                       "4 bytes after the last tensor");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", float_bytes({1, 2, 3})),
                       "hole in the data: bytes [0, 4)");
    expect_input_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
                       "tensors 'a' and 'b' overlap");
    expect_input_error(image(ok, float_bytes({1.0f})), "truncated: tensor 't' data ends at byte 72");
    expect_input_error(image(R"({"__metadata__":{"format":1}})", {}), "__metadata__ value of \"format\" must be a string");
    expect_input_error(image(R"({"__metadata__":"pt"})", {}), "__metadata__ must be an object");
    expect_input_error(image(R"({"t":{"dtype":"F32","shape":[[[2]]],"data_offsets":[0,8]}})", d8), "nests deeper than 3");
    expect_input_error(image(std::string(R"({"a":)") + std::string(100000, '[') , {}), "nests deeper");
    expect_input_error(image("{\"\xff\":1}", {}), "not valid JSON");  // not UTF-8
}

TEST(Safetensors, EveryTruncationIsAnInputError) {
    const auto full = small_file();
    for (size_t len = 0; len < full.size(); ++len) {
        const std::vector<uint8_t> cut(full.begin(), full.begin() + long(len));
        try {
            SafetensorsFile::parse(cut, "small.safetensors");
            ADD_FAILURE() << "length " << len << " parsed";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::input);
            EXPECT_EQ(std::string(e.what()).rfind("small.safetensors: ", 0), 0u) << e.what();
        }
    }
}

TEST(Safetensors, WriterRefusesBadInput) {
    const float x[4] = {};
    EXPECT_THROW(safetensors_tensor_from_f32("t", {2}, SafetensorsDtype::I32, x), Error);
    EXPECT_THROW(safetensors_tensor_from_f32("t", {-1}, SafetensorsDtype::F32, x), Error);
    const auto t = safetensors_tensor_from_f32("t", {2}, SafetensorsDtype::F32, x);
    EXPECT_THROW(serialize_safetensors({t, t}), Error);
    EXPECT_THROW(serialize_safetensors({SafetensorsWriteTensor{"__metadata__", SafetensorsDtype::U8, {1}, {0}}}), Error);
    EXPECT_THROW(serialize_safetensors({SafetensorsWriteTensor{"u", SafetensorsDtype::U16, {2}, {0, 0}}}), Error);
}

TEST(Safetensors, MutationFuzzNeverCrashes) {
    const auto base = small_file();
    int parsed = 0, rejected = 0;
    for (uint64_t it = 0; it < 20000; ++it) {
        auto b = base;
        const int n_mut = 1 + int(counter_random24(21, it) % 3);
        for (int m = 0; m < n_mut; ++m) {
            const uint32_t r = counter_random24(22, it * 8 + uint64_t(m));
            // Bias towards the header, where the structure is.
            const size_t span = (r & 1) ? b.size() : std::min<size_t>(b.size(), 16);
            const size_t pos = (r >> 1) % span;
            switch ((r >> 16) % 4) {
                case 0: b[pos] = uint8_t(counter_random24(23, it * 8 + uint64_t(m))); break;
                case 1: b.resize(pos); break;
                case 2: b.insert(b.begin() + long(pos), uint8_t(r >> 8)); break;
                default: b[pos] = "{}[]\":, 0123456789eE-."[(r >> 8) % 22]; break;
            }
            if (b.empty()) break;
        }
        try {
            SafetensorsFile f = SafetensorsFile::parse(b, "fuzz");
            for (const auto& t : f.tensors())
                if (t.dtype == SafetensorsDtype::F32 || t.dtype == SafetensorsDtype::BF16) f.tensor_to_f32(t);
            ++parsed;
        } catch (const Error&) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 1000);
    EXPECT_GT(parsed, 100);
}

TEST(Safetensors, ShardedModelsThroughTheIndex) {
    const std::string dir = temp_dir("lowbit_st_sharded");
    const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, c = {7};
    write_safetensors(dir + "/model-00001-of-00002.safetensors",
                      {safetensors_tensor_from_f32("layer.0.w", {2, 2}, SafetensorsDtype::F32, a.data()),
                       safetensors_tensor_from_f32("embed", {2}, SafetensorsDtype::BF16, b.data())},
                      {{"format", "pt"}});
    write_safetensors(dir + "/model-00002-of-00002.safetensors",
                      {safetensors_tensor_from_f32("layer.1.w", {1}, SafetensorsDtype::F16, c.data())});
    write_text(dir + "/model.safetensors.index.json",
               R"({"metadata": {"total_size": 26}, "weight_map": {"layer.0.w": "model-00001-of-00002.safetensors",
                   "embed": "model-00001-of-00002.safetensors", "layer.1.w": "model-00002-of-00002.safetensors"}})");
    for (const std::string& arg : {dir, dir + "/model.safetensors.index.json"}) {
        SafetensorsModel m = SafetensorsModel::open(arg);
        EXPECT_EQ(m.shards().size(), 2u);
        EXPECT_EQ(m.tensor_names(), (std::vector<std::string>{"embed", "layer.0.w", "layer.1.w"}));
        EXPECT_EQ(m.tensor_to_f32("layer.0.w"), a);
        EXPECT_EQ(m.tensor_to_f32("embed"), b);
        EXPECT_EQ(m.tensor_to_f32("layer.1.w"), c);
        EXPECT_EQ(m.tensor("layer.1.w").dtype, SafetensorsDtype::F16);
        EXPECT_EQ(m.tensor_bytes("embed").size(), 4u);
        EXPECT_NE(m.file_of("layer.1.w").name().find("00002"), std::string::npos);
        EXPECT_TRUE(m.has("embed"));
        EXPECT_FALSE(m.has("nope"));
        EXPECT_THROW(m.tensor("nope"), Error);
    }
    // The index names a tensor its shard does not hold.
    write_text(dir + "/model.safetensors.index.json",
               R"({"weight_map": {"ghost": "model-00002-of-00002.safetensors"}})");
    try {
        SafetensorsModel::open(dir);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'ghost'"), std::string::npos) << e.what();
    }
    write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "missing.safetensors"}})");
    EXPECT_THROW(SafetensorsModel::open(dir), Error);
    write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "../escape.safetensors"}})");
    EXPECT_THROW(SafetensorsModel::open(dir), Error);
    write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": 3}})");
    EXPECT_THROW(SafetensorsModel::open(dir), Error);
    write_text(dir + "/model.safetensors.index.json", R"({"no_map": {}})");
    EXPECT_THROW(SafetensorsModel::open(dir), Error);
    std::filesystem::remove_all(dir);
}

TEST(Safetensors, SingleFileModels) {
    const std::string dir = temp_dir("lowbit_st_single");
    const std::vector<float> a = {1, 2};
    write_safetensors(dir + "/model.safetensors", {safetensors_tensor_from_f32("w", {2}, SafetensorsDtype::F32, a.data())});
    EXPECT_EQ(SafetensorsModel::open(dir).tensor_to_f32("w"), a);
    EXPECT_EQ(SafetensorsModel::open(dir + "/model.safetensors").tensor_to_f32("w"), a);
    SafetensorsFile f = SafetensorsFile::open(dir + "/model.safetensors");
    SafetensorsFile moved = std::move(f);
    EXPECT_EQ(moved.tensor_to_f32("w"), a);
    std::filesystem::remove(dir + "/model.safetensors");
    try {
        SafetensorsModel::open(dir);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no model.safetensors.index.json or model.safetensors"), std::string::npos);
    }
    EXPECT_THROW(SafetensorsFile::open(dir + "/missing.safetensors"), Error);
    std::filesystem::remove_all(dir);
}
