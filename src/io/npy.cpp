// npy.cpp — .npy parser/writer (NumPy format spec: magic, version, little-endian header length, a Python
// dict literal with 'descr', 'fortran_order', 'shape', padded with spaces to a 64-byte boundary).
#include "io/npy.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/bits.h"
#include "core/error.h"
#include "formats/element_codec.h"

namespace lowbit {

namespace {

[[noreturn]] void bad(const std::string& name, const std::string& what) {
    fail(ErrorKind::input, "{}: not a valid .npy file: {}", name, what);
}

// Finds the value text that follows 'key': in the header dict.
std::string dict_value(const std::string& header, const std::string& key, const std::string& name) {
    auto k = header.find("'" + key + "'");
    if (k == std::string::npos) bad(name, "header has no '" + key + "' entry");
    auto colon = header.find(':', k);
    if (colon == std::string::npos) bad(name, "header entry '" + key + "' has no value");
    size_t p = colon + 1;
    while (p < header.size() && header[p] == ' ') ++p;
    size_t end = p;
    if (p < header.size() && header[p] == '(') {
        end = header.find(')', p);
        if (end == std::string::npos) bad(name, "unterminated shape tuple");
        return header.substr(p, end - p + 1);
    }
    if (p < header.size() && header[p] == '\'') {
        end = header.find('\'', p + 1);
        if (end == std::string::npos) bad(name, "unterminated string in header");
        return header.substr(p + 1, end - p - 1);
    }
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
    return header.substr(p, end - p);
}

struct Dtype {
    char kind;  // 'f', 'i', 'u'
    int size;
    bool big_endian;
};

Dtype parse_descr(const std::string& d, const std::string& name) {
    if (d.size() < 3) bad(name, "unsupported dtype '" + d + "'");
    char order = d[0];
    if (order != '<' && order != '>' && order != '|' && order != '=') bad(name, "unsupported dtype '" + d + "'");
    Dtype t{d[1], 0, order == '>'};
    try {
        t.size = std::stoi(d.substr(2));
    } catch (...) {
        bad(name, "unsupported dtype '" + d + "'");
    }
    bool ok = (t.kind == 'f' && (t.size == 2 || t.size == 4 || t.size == 8)) ||
              ((t.kind == 'i' || t.kind == 'u') && (t.size == 1 || t.size == 2 || t.size == 4 || t.size == 8));
    if (!ok) bad(name, "unsupported dtype '" + d + "' (use float16/32/64 or an integer type)");
    return t;
}

std::vector<int64_t> parse_shape(const std::string& s, const std::string& name) {
    std::vector<int64_t> shape;
    size_t p = 1;
    while (p < s.size()) {
        while (p < s.size() && (s[p] == ' ' || s[p] == ',')) ++p;
        if (p >= s.size() || s[p] == ')') break;
        size_t q = p;
        while (q < s.size() && s[q] >= '0' && s[q] <= '9') ++q;
        if (q == p) bad(name, "malformed shape " + s);
        if (q - p > 15) bad(name, "dimension too large in shape " + s);
        shape.push_back(std::stoll(s.substr(p, q - p)));
        p = q;
        while (p < s.size() && s[p] == 'L') ++p;
    }
    if (shape.size() > 8) bad(name, "more than 8 dimensions");
    return shape;
}

float load_value(const uint8_t* p, const Dtype& t) {
    uint8_t b[8];
    for (int i = 0; i < t.size; ++i) b[i] = t.big_endian ? p[t.size - 1 - i] : p[i];
    switch (t.kind) {
        case 'f':
            if (t.size == 2) {
                uint16_t h;
                std::memcpy(&h, b, 2);
                return decode_element(element_spec(ElementType::fp16), h);
            } else if (t.size == 4) {
                float f;
                std::memcpy(&f, b, 4);
                return f;
            } else {
                double d;
                std::memcpy(&d, b, 8);
                return float(d);
            }
        case 'i': {
            int64_t v = 0;
            if (t.size == 1) v = int8_t(b[0]);
            if (t.size == 2) { int16_t x; std::memcpy(&x, b, 2); v = x; }
            if (t.size == 4) { int32_t x; std::memcpy(&x, b, 4); v = x; }
            if (t.size == 8) { int64_t x; std::memcpy(&x, b, 8); v = x; }
            return float(v);
        }
        default: {
            uint64_t v = 0;
            std::memcpy(&v, b, size_t(t.size));
            return float(v);
        }
    }
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(ErrorKind::input, "{}: cannot open for reading", path);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

NpyArray npy_parse(const std::vector<uint8_t>& bytes, const std::string& name) {
    if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) bad(name, "missing \\x93NUMPY magic");
    int major = bytes[6];
    size_t header_len, header_start;
    if (major == 1) {
        header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8;
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) bad(name, "truncated header");
        header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8 | size_t(bytes[10]) << 16 | size_t(bytes[11]) << 24;
        header_start = 12;
    } else {
        bad(name, "unsupported format version " + std::to_string(major));
    }
    if (bytes.size() < header_start + header_len) bad(name, "truncated header");
    std::string header(reinterpret_cast<const char*>(bytes.data() + header_start), header_len);
    Dtype t = parse_descr(dict_value(header, "descr", name), name);
    std::string fo = dict_value(header, "fortran_order", name);
    bool fortran = fo.find("True") != std::string::npos;
    if (!fortran && fo.find("False") == std::string::npos) bad(name, "fortran_order is neither True nor False");
    NpyArray a;
    a.shape = parse_shape(dict_value(header, "shape", name), name);
    uint64_t count = 1;
    for (int64_t d : a.shape) {
        if (d != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(d) / 8) bad(name, "shape too large");
        count *= uint64_t(d);
    }
    size_t data_start = header_start + header_len;
    uint64_t need = count * uint64_t(t.size);
    if (bytes.size() - data_start < need)
        bad(name, "truncated data: shape needs " + std::to_string(need) + " bytes, file has " +
                      std::to_string(bytes.size() - data_start));
    a.data.resize(count);
    const uint8_t* p = bytes.data() + data_start;
    if (!fortran || a.shape.size() < 2) {
        for (uint64_t i = 0; i < count; ++i) a.data[i] = load_value(p + i * uint64_t(t.size), t);
    } else {
        // Fortran order: first index fastest. Convert to C order.
        std::vector<int64_t> idx(a.shape.size(), 0);
        for (uint64_t i = 0; i < count; ++i) {
            uint64_t c = 0;
            for (size_t d = 0; d < a.shape.size(); ++d) c = c * uint64_t(a.shape[d]) + uint64_t(idx[d]);
            a.data[c] = load_value(p + i * uint64_t(t.size), t);
            for (size_t d = 0; d < a.shape.size(); ++d) {
                if (++idx[d] < a.shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    return a;
}

NpyArray npy_read(const std::string& path) { return npy_parse(read_file(path), path); }

NpyArray npy_read_matrix(const std::string& path) {
    NpyArray a = npy_read(path);
    if (a.shape.size() == 1) a.shape = {1, a.shape[0]};
    if (a.shape.size() != 2)
        fail(ErrorKind::input, "{}: expected a 2-D array, got {} dimensions", path, a.shape.size());
    return a;
}

std::vector<uint8_t> npy_serialize_f32(const std::vector<int64_t>& shape, const float* data) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    uint64_t count = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        header += std::to_string(shape[i]);
        if (shape.size() == 1 || i + 1 < shape.size()) header += ",";
        if (i + 1 < shape.size()) header += " ";
        count *= uint64_t(shape[i]);
    }
    header += "), }";
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    // Assembled with memcpy: GCC 12 warns falsely (-Wstringop-overflow) on vector::insert here.
    std::vector<uint8_t> out(10 + header.size() + count * 4);
    std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
    out[8] = uint8_t(header.size() & 0xFF);
    out[9] = uint8_t(header.size() >> 8);
    std::memcpy(out.data() + 10, header.data(), header.size());
    if (count) std::memcpy(out.data() + 10 + header.size(), data, count * 4);
    return out;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path), tmp_(path + ".tmp-" + std::to_string(::getpid())) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail(ErrorKind::input, "{}: cannot open for writing", path);
}

AtomicFileWriter::~AtomicFileWriter() {
    if (!f_) return;
    std::fclose(f_);
    std::remove(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t size) {
    if (size && std::fwrite(data, 1, size, f_) != size) {
        std::fclose(f_);
        f_ = nullptr;
        std::remove(tmp_.c_str());
        fail(ErrorKind::input, "{}: write failed (disk full or no permission?)", path_);
    }
}

void AtomicFileWriter::commit() {
    bool ok = std::fflush(f_) == 0;
    ok = (std::fclose(f_) == 0) && ok;
    f_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
        std::remove(tmp_.c_str());
        fail(ErrorKind::input, "{}: write failed (disk full or no permission?)", path_);
    }
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
    AtomicFileWriter w(path);
    w.write(data, size);
    w.commit();
}

void npy_write_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
    auto bytes = npy_serialize_f32(shape, data);
    write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace lowbit
