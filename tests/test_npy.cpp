// test_npy.cpp — the .npy reader/writer (io/npy.h): golden header bytes, dtype and order conversions,
// clear errors on malformed/truncated files, and a deterministic mutation fuzz of the parser.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "io/npy.h"

using namespace lowbit;

namespace {
std::vector<uint8_t> npy_image(const std::string& dict, const std::vector<uint8_t>& payload) {
    std::string header = dict;
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::vector<uint8_t> b(10 + header.size() + payload.size());
    std::memcpy(b.data(), "\x93NUMPY\x01\x00", 8);
    b[8] = uint8_t(header.size() & 0xFF);
    b[9] = uint8_t(header.size() >> 8);
    std::memcpy(b.data() + 10, header.data(), header.size());
    if (!payload.empty()) std::memcpy(b.data() + 10 + header.size(), payload.data(), payload.size());
    return b;
}
template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}
}  // namespace

TEST(Npy, GoldenHeaderOfTheWriter) {
    float d[6] = {1, 2, 3, 4, 5, 6};
    auto b = npy_serialize_f32({2, 3}, d);
    ASSERT_EQ(b.size(), 128u + 24u);  // 10-byte preamble + dict + newline padded to 128 bytes
    std::string h(b.begin() + 10, b.begin() + 128);
    EXPECT_EQ(h.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u);
    EXPECT_EQ(b[127], '\n');
    NpyArray a = npy_parse(b, "mem");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.data[5], 6.0f);
}

TEST(Npy, ConvertsDtypesAndFortranOrder) {
    auto f64 = npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", bytes_of(std::vector<double>{1.5, -2.25}));
    EXPECT_EQ(npy_parse(f64, "f64").data, (std::vector<float>{1.5f, -2.25f}));
    auto f16 = npy_image("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", bytes_of(std::vector<uint16_t>{0x3C00, 0xC000}));
    EXPECT_EQ(npy_parse(f16, "f16").data, (std::vector<float>{1.0f, -2.0f}));
    auto i32 = npy_image("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", bytes_of(std::vector<int32_t>{-7, 0, 9}));
    EXPECT_EQ(npy_parse(i32, "i32").data, (std::vector<float>{-7, 0, 9}));
    // Fortran order 2x3: memory holds columns
    auto fo = npy_image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", bytes_of(std::vector<float>{1, 4, 2, 5, 3, 6}));
    EXPECT_EQ(npy_parse(fo, "fo").data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
    auto be = npy_image("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", {0x3F, 0x80, 0x00, 0x00});
    EXPECT_EQ(npy_parse(be, "be").data, (std::vector<float>{1.0f}));
}

TEST(Npy, ClearErrors) {
    auto expect_error = [](const std::vector<uint8_t>& b, const std::string& needle) {
        try {
            npy_parse(b, "x.npy");
            FAIL() << "no error for " << needle;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::input);
            EXPECT_NE(std::string(e.what()).find("x.npy"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error({'n', 'o', 'p', 'e'}, "magic");
    auto ok = npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", bytes_of(std::vector<float>{1, 2, 3, 4}));
    expect_error(std::vector<uint8_t>(ok.begin(), ok.end() - 1), "truncated data");
    expect_error(std::vector<uint8_t>(ok.begin(), ok.begin() + 20), "truncated header");
    expect_error(npy_image("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", {}), "unsupported dtype");
    expect_error(npy_image("{'fortran_order': False, 'shape': (1,), }", {}), "descr");
    expect_error(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999,), }", {}), "shape");
}

TEST(Npy, MissingFileAndMatrixShape) {
    EXPECT_THROW(npy_read("/nonexistent/dir/file.npy"), Error);
    std::string path = testing::TempDir() + "/lowbit_npy_3d.npy";
    float d[8] = {};
    npy_write_f32(path, {2, 2, 2}, d);
    EXPECT_THROW(npy_read_matrix(path), Error);
    std::remove(path.c_str());
}

TEST(Npy, MutationFuzzNeverCrashes) {
    // Deterministic mutations of a valid file: each must parse or raise lowbit::Error, nothing else.
    float d[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const auto base = npy_serialize_f32({3, 4}, d);
    int parsed = 0, rejected = 0;
    for (uint64_t it = 0; it < 20000; ++it) {
        auto b = base;
        const int n_mut = 1 + int(counter_random24(1, it) % 4);
        for (int m = 0; m < n_mut; ++m) {
            const uint32_t r = counter_random24(2, it * 8 + uint64_t(m));
            const size_t pos = r % b.size();
            switch ((r >> 16) % 3) {
                case 0: b[pos] = uint8_t(counter_random24(3, it * 8 + uint64_t(m))); break;
                case 1: b.resize(pos); break;
                default: b.insert(b.begin() + long(pos), uint8_t(r >> 8)); break;
            }
            if (b.empty()) break;
        }
        try {
            npy_parse(b, "fuzz");
            ++parsed;
        } catch (const Error&) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 1000);
    EXPECT_GT(parsed, 100);
}
