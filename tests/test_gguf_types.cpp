// test_gguf_types.cpp — the GGUF type table (formats/gguf_types.h) is consistent: block sizes match the
// packed structs, ids and names are unique, every encoder round-trips through its decoder and every codec
// stays inside its blocks, the `formats` registry holds exactly the table's encodable weight formats, and
// the reader and writer refuse a type they cannot handle with a message naming the tensor and the type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "core/random_fill.h"
#include "formats/format_registry.h"
#include "formats/gguf_types.h"
#include "formats/kquants.h"
#include "io/gguf_file.h"
#include "error_test_util.h"

using namespace lowbit;

namespace {

constexpr bool block_is(GgufType t, int64_t elements, size_t bytes) {
    return gguf_type_info(t)->block_elements == elements && size_t(gguf_type_info(t)->block_bytes) == bytes;
}
static_assert(block_is(GgufType::Q4_0, 32, sizeof(BlockQ4_0)));
static_assert(block_is(GgufType::Q4_1, 32, sizeof(BlockQ4_1)));
static_assert(block_is(GgufType::Q5_0, 32, sizeof(BlockQ5_0)));
static_assert(block_is(GgufType::Q5_1, 32, sizeof(BlockQ5_1)));
static_assert(block_is(GgufType::Q8_0, 32, sizeof(BlockQ8_0)));
static_assert(block_is(GgufType::Q6_K, 256, sizeof(BlockQ6_K)));
static_assert(block_is(GgufType::MXFP4, 32, sizeof(BlockMxfp4)));
static_assert(block_is(GgufType::NVFP4, 64, sizeof(BlockNvfp4)));
static_assert(block_is(GgufType::F32, 1, sizeof(float)));
static_assert(block_is(GgufType::F16, 1, sizeof(uint16_t)) && block_is(GgufType::BF16, 1, sizeof(uint16_t)));

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(GgufTypes, IdsNamesAndShapesAreWellFormed) {
    std::set<std::string> names, format_names;
    uint32_t previous_id = 0;
    for (const GgufTypeInfo& t : kGgufTypes) {
        SCOPED_TRACE(t.name);
        if (&t != &kGgufTypes[0]) {
            EXPECT_GT(uint32_t(t.type), previous_id) << "sorted by id, ids unique";
        }
        previous_id = uint32_t(t.type);
        EXPECT_TRUE(names.insert(t.name).second) << "duplicate name";
        EXPECT_EQ(gguf_type_info(t.type), &t);
        EXPECT_EQ(gguf_type_by_name(t.name), &t);
        EXPECT_STREQ(gguf_type_name(t.type), t.name);
        EXPECT_GT(t.block_elements, 0);
        EXPECT_GT(t.block_bytes, 0);
        if (t.encode) {
            EXPECT_NE(t.decode, nullptr) << "an encoder without a decoder cannot be checked";
        }
        EXPECT_EQ(t.format_name == nullptr, t.description == nullptr);
        if (t.format_name) {
            EXPECT_TRUE(format_names.insert(t.format_name).second) << "duplicate format name";
        }
    }
    EXPECT_EQ(gguf_type_info(GgufType(77)), nullptr);
    EXPECT_EQ(gguf_type_by_name("Q9_Z"), nullptr);
    EXPECT_STREQ(gguf_type_name(GgufType(77)), "unknown");
    EXPECT_EQ(gguf_type_label(GgufType(77)), "unknown type id 77");
    EXPECT_EQ(gguf_type_bytes_for(GgufType::Q6_K, 512), 420u);
    EXPECT_EQ(gguf_type_bytes_for(GgufType(77), 512), 0u);
}

TEST(GgufTypes, EveryEncoderRoundTripsThroughItsDecoder) {
    // 512 columns: a whole number of blocks for every block size in the table (1, 32, 64, 128, 256).
    const int64_t rows = 3, cols = 512;
    std::vector<float> x(size_t(rows * cols));
    fill_gaussian(x.data(), rows * cols, 7);
    for (const GgufTypeInfo& t : kGgufTypes) {
        if (!t.encode) continue;
        SCOPED_TRACE(t.name);
        const auto bytes = gguf_quantize_matrix(t.type, x.data(), rows, cols);
        ASSERT_EQ(bytes.size(), gguf_type_bytes_for(t.type, uint64_t(rows * cols)));
        std::vector<float> y(x.size()), y2(x.size());
        gguf_dequantize_matrix(t.type, bytes.data(), rows, cols, y.data());
        double err2 = 0, ref2 = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
            ref2 += double(x[i]) * x[i];
        }
        EXPECT_LT(std::sqrt(err2 / ref2), 0.5) << "decoded values far from the input: codec pair mismatched";
        // Decoded values lie on the grid, so encoding them again must give them back bit for bit — except for
        // ggml's searching quantizers (K-quants, IQ4_NL), which are not idempotent in ggml itself either.
        if (is_kquant(t.type) || t.type == GgufType::IQ4_NL) continue;
        const auto again = gguf_quantize_matrix(t.type, y.data(), rows, cols);
        gguf_dequantize_matrix(t.type, again.data(), rows, cols, y2.data());
        EXPECT_TRUE(same_bits(y, y2));
    }
}

TEST(GgufTypes, CodecsStayInsideTheirBlocks) {
    // Two blocks of random bytes (decoders) or floats (encoders), followed by a guard that must survive.
    constexpr int kGuard = 16;
    for (const GgufTypeInfo& t : kGgufTypes) {
        if (!t.decode) continue;
        SCOPED_TRACE(t.name);
        const size_t bb = size_t(t.block_bytes), be = size_t(t.block_elements);
        std::vector<uint8_t> blocks(2 * bb);
        for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(counter_random24(uint64_t(t.type), i));
        std::vector<float> both(2 * be + kGuard, 1234.5f), first(be + kGuard, 1234.5f), second(be + kGuard, 1234.5f);
        t.decode(blocks.data(), 2, both.data());
        t.decode(blocks.data(), 1, first.data());
        t.decode(blocks.data() + bb, 1, second.data());
        for (int g = 0; g < kGuard; ++g) {
            EXPECT_EQ(both[2 * be + size_t(g)], 1234.5f) << "decoder wrote past its blocks";
            EXPECT_EQ(first[be + size_t(g)], 1234.5f) << "decoder wrote past its block";
        }
        EXPECT_EQ(std::memcmp(both.data(), first.data(), be * 4), 0);
        EXPECT_EQ(std::memcmp(both.data() + be, second.data(), be * 4), 0) << "second block decoded from the wrong bytes";
        if (!t.encode) continue;
        std::vector<float> x(2 * be);
        fill_gaussian(x.data(), int64_t(x.size()), 3);
        std::vector<uint8_t> out(2 * bb + kGuard, 0xA5);
        t.encode(x.data(), 2, out.data());
        for (int g = 0; g < kGuard; ++g) EXPECT_EQ(out[2 * bb + size_t(g)], 0xA5) << "encoder wrote past its blocks";
    }
}

TEST(GgufTypes, FormatRegistryHoldsTheEncodableWeightFormats) {
    for (const GgufTypeInfo& t : kGgufTypes) {
        if (!t.format_name || !t.encode) continue;
        const FormatInfo& f = find_format(t.format_name);
        EXPECT_EQ(f.kind, FormatKind::gguf) << t.name;
        EXPECT_EQ(f.gguf, t.type) << t.name;
        EXPECT_STREQ(f.description, t.description);
        EXPECT_DOUBLE_EQ(bits_per_element(f, FormatOptions{}, 4096), 8.0 * double(t.block_bytes) / double(t.block_elements));
    }
    for (const FormatInfo& f : all_formats()) {
        if (f.kind == FormatKind::gguf) {
            EXPECT_NE(gguf_type_info(f.gguf)->encode, nullptr) << f.name;
        }
    }
}

TEST(GgufTypes, ReaderAndWriterNameWhatTheyCannotHandle) {
    GgufWriter w;
    w.add_tensor_raw("future", {5}, GgufType(77), std::vector<uint8_t>(40, 0));
    w.add_tensor_raw("k4", {256}, GgufType::IQ4_XS, std::vector<uint8_t>(136, 0));
    GgufFile g = GgufFile::parse(w.serialize(), "types.gguf");
    expect_error_with([&] { g.tensor_to_f32("future"); }, ErrorKind::input,
                      {"types.gguf", "tensor 'future'", "type id 77", "cannot dequantize", gguf_type_support()});
    expect_error_with([&] { g.tensor_to_f32("k4"); }, ErrorKind::input,
                      {"tensor 'k4'", "type IQ4_XS", "cannot dequantize", "lowbit decodes F32"});
    const std::vector<float> x(256, 0.0f);
    expect_error_with([&] { w.add_tensor("q", {256}, GgufType::IQ4_XS, x.data()); }, ErrorKind::usage,
                      {"tensor 'q'", "cannot encode floats as IQ4_XS", "encodes F32"});
    expect_error_with([&] { w.add_tensor("q", {256}, GgufType(77), x.data()); }, ErrorKind::usage,
                      {"tensor 'q'", "unknown type id 77"});
    expect_error_with([&] { gguf_quantize_matrix(GgufType::IQ4_XS, x.data(), 1, 256); }, ErrorKind::usage, {"IQ4_XS"});
}
