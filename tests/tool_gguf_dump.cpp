// tool_gguf_dump.cpp — a test helper (not part of the lowbit CLI) through which the Python cross-check
// (tests/crosscheck/check_gguf_file.py) drives our GGUF reader and writer:
//   tool_gguf_dump FILE                          JSON: version, alignment, metadata (typed), tensor infos with
//                                                a position-sensitive checksum of their bytes
//   tool_gguf_dump FILE --npy-dir DIR NAME...    each named tensor dequantized to DIR/<k>.npy (numpy order)
//   tool_gguf_dump --copy IN OUT                 IN read by our reader, written again by our writer (raw)
//   tool_gguf_dump --copy IN OUT --encode        as --copy, but a tensor "X:TYPE" of a type our writer encodes
//                                                (formats/gguf_types.h) is encoded from the floats of "X:F32"
// Floats in the JSON are their IEEE bit patterns (u32 for f32, u64 for f64), so comparisons are exact.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/npy.h"

using namespace lowbit;
using nlohmann::json;

namespace {

json value_json(const GgufValue& v) {
    switch (v.type) {
        case GgufValueType::u64: return uint64_t(v.i);
        case GgufValueType::f32: {
            const float f = float(v.f);
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            return bits;
        }
        case GgufValueType::f64: {
            uint64_t bits;
            std::memcpy(&bits, &v.f, 8);
            return bits;
        }
        case GgufValueType::boolean: return v.i != 0;
        case GgufValueType::string: return v.s;
        case GgufValueType::array: {
            json a = json::array();
            for (const auto& item : v.items) a.push_back(value_json(item));
            return json{{"elem_type", gguf_value_type_name(v.elem_type)}, {"items", a}};
        }
        default: return v.i;
    }
}

// sum_i w_i·(2i+1) mod 2^64 over the little-endian u64 words of the bytes (zero-padded): cheap in NumPy.
uint64_t checksum(std::span<const uint8_t> b) {
    uint64_t sum = 0;
    for (size_t i = 0; i * 8 < b.size(); ++i) {
        uint64_t w = 0;
        std::memcpy(&w, b.data() + i * 8, std::min<size_t>(8, b.size() - i * 8));
        sum += w * (2 * uint64_t(i) + 1);
    }
    return sum;
}

int dump(const std::string& path) {
    GgufFile g = GgufFile::open(path);
    json out;
    out["version"] = g.version();
    out["alignment"] = g.alignment();
    out["data_offset"] = g.data_offset();
    json kv = json::array();
    for (const auto& [key, value] : g.metadata())
        kv.push_back(json{{"key", key}, {"type", gguf_value_type_name(value.type)}, {"value", value_json(value)}});
    out["metadata"] = kv;
    json ts = json::array();
    for (const auto& t : g.tensors())
        ts.push_back(json{{"name", t.name}, {"type", uint32_t(t.type)}, {"type_name", gguf_type_name(t.type)},
                          {"ne", t.ne}, {"offset", t.offset}, {"n_bytes", t.n_bytes},
                          {"checksum", checksum(g.tensor_bytes(t))}});
    out["tensors"] = ts;
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
}

int dequantize_to_npy(const std::string& path, const std::string& dir, const std::vector<std::string>& names) {
    GgufFile g = GgufFile::open(path);
    for (size_t k = 0; k < names.size(); ++k) {
        const GgufTensorInfo& t = g.tensor(names[k]);
        const std::vector<float> f = g.tensor_to_f32(t);
        const std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());  // numpy order: slowest first
        npy_write_f32(dir + "/" + std::to_string(k) + ".npy", shape, f.data());
    }
    return 0;
}

int copy(const std::string& in, const std::string& out, bool encode) {
    GgufFile g = GgufFile::open(in);
    GgufWriter w(uint32_t(g.alignment()));
    for (const auto& [key, value] : g.metadata()) w.set(key, value);
    for (const auto& t : g.tensors()) {
        const auto colon = t.name.rfind(':');
        const GgufTypeInfo* named = colon == std::string::npos ? nullptr : gguf_type_by_name(t.name.substr(colon + 1));
        if (encode && named && named->encode && named->type == t.type) {
            const std::vector<float> src = g.tensor_to_f32(t.name.substr(0, colon) + ":F32");
            w.add_tensor(t.name, t.ne, t.type, src.data());
        } else {
            const auto b = g.tensor_bytes(t);
            w.add_tensor_raw(t.name, t.ne, t.type, std::vector<uint8_t>(b.begin(), b.end()));
        }
    }
    w.write(out);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    try {
        if (args.size() >= 3 && args[0] == "--copy") return copy(args[1], args[2], args.size() > 3 && args[3] == "--encode");
        if (args.size() >= 3 && args[1] == "--npy-dir")
            return dequantize_to_npy(args[0], args[2], std::vector<std::string>(args.begin() + 3, args.end()));
        if (args.size() == 1) return dump(args[0]);
        std::fprintf(stderr, "usage: tool_gguf_dump FILE | FILE --npy-dir DIR NAME... | --copy IN OUT [--encode]\n");
        return int(ErrorKind::usage);
    } catch (const Error& e) {
        std::fprintf(stderr, "tool_gguf_dump: %s\n", e.what());
        return int(e.kind());
    }
}
