// safetensors.cpp — safetensors header parsing and validation (nlohmann-json with a duplicate-key and
// depth guard), float conversion, sharded models and the writer.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/bits.h"
#include "core/error.h"
#include "formats/element_codec.h"
#include "io/mapped_file.h"
#include "io/npy.h"

namespace lowbit {

namespace {

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // safetensors' MAX_HEADER_SIZE
constexpr size_t kMaxJsonDepth = 3;               // root → tensor entry → data_offsets/shape

struct DtypeInfo {
    SafetensorsDtype dtype;
    const char* name;
    int bits;
};
constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::BOOL, "BOOL", 8},       {SafetensorsDtype::F4, "F4", 4},
    {SafetensorsDtype::F6_E2M3, "F6_E2M3", 6}, {SafetensorsDtype::F6_E3M2, "F6_E3M2", 6},
    {SafetensorsDtype::U8, "U8", 8},           {SafetensorsDtype::I8, "I8", 8},
    {SafetensorsDtype::F8_E5M2, "F8_E5M2", 8}, {SafetensorsDtype::F8_E4M3, "F8_E4M3", 8},
    {SafetensorsDtype::F8_E8M0, "F8_E8M0", 8}, {SafetensorsDtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {SafetensorsDtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {SafetensorsDtype::I16, "I16", 16},        {SafetensorsDtype::U16, "U16", 16},
    {SafetensorsDtype::F16, "F16", 16},        {SafetensorsDtype::BF16, "BF16", 16},
    {SafetensorsDtype::I32, "I32", 32},        {SafetensorsDtype::U32, "U32", 32},
    {SafetensorsDtype::F32, "F32", 32},        {SafetensorsDtype::C64, "C64", 64},
    {SafetensorsDtype::F64, "F64", 64},        {SafetensorsDtype::I64, "I64", 64},
    {SafetensorsDtype::U64, "U64", 64},
};

const DtypeInfo& dtype_info(SafetensorsDtype t) {
    for (const auto& d : kDtypes)
        if (d.dtype == t) return d;
    return kDtypes[0];
}

// Parses JSON text, refusing duplicate keys (nlohmann would keep the last) and nesting deeper than the
// safetensors schema needs (a deep [[[...]]] must not cost a deep recursion anywhere).
nlohmann::json parse_json_strict(const char* begin, const char* end, const std::string& file, size_t max_depth) {
    std::vector<std::set<std::string>> open;  // keys seen in each open object (empty set for arrays)
    auto guard = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (ev == E::object_start || ev == E::array_start) {
            if (open.size() >= max_depth) fail(ErrorKind::input, "{}: header JSON nests deeper than {} levels", file, max_depth);
            open.emplace_back();
        } else if (ev == E::object_end || ev == E::array_end) {
            if (!open.empty()) open.pop_back();
        } else if (ev == E::key && !open.empty()) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (!open.back().insert(key).second) fail(ErrorKind::input, "{}: duplicate key \"{}\" in the header JSON", file, key);
        }
        return true;
    };
    try {
        return nlohmann::json::parse(begin, end, guard);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: header is not valid JSON: {}", file, e.what());
    }
}

uint64_t json_offset(const nlohmann::json& v, const std::string& file, const std::string& tensor, const char* what) {
    if (!v.is_number_unsigned())
        fail(ErrorKind::input, "{}: tensor '{}': {} must be a non-negative integer, got {}", file, tensor, what, v.dump());
    return v.get<uint64_t>();
}

SafetensorsTensor parse_entry(const std::string& name, const nlohmann::json& e, const std::string& file) {
    SafetensorsTensor t;
    t.name = name;
    if (!e.is_object()) fail(ErrorKind::input, "{}: tensor '{}': entry must be an object, got {}", file, name, e.type_name());
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!e.contains(field)) fail(ErrorKind::input, "{}: tensor '{}' has no \"{}\"", file, name, field);
    const auto& dt = e["dtype"];
    if (!dt.is_string() || !parse_safetensors_dtype(dt.get<std::string>(), &t.dtype))
        fail(ErrorKind::input, "{}: tensor '{}': unknown dtype {}", file, name, dt.dump());
    const auto& shape = e["shape"];
    if (!shape.is_array()) fail(ErrorKind::input, "{}: tensor '{}': shape must be an array", file, name);
    uint64_t n = 1;
    for (const auto& d : shape) {
        const uint64_t dim = json_offset(d, file, name, "a shape dimension");
        if (dim > uint64_t(std::numeric_limits<int64_t>::max()) || (dim != 0 && n > uint64_t(std::numeric_limits<int64_t>::max()) / dim))
            fail(ErrorKind::input, "{}: tensor '{}': shape {} has too many elements", file, name, shape.dump());
        n *= dim;
        t.shape.push_back(int64_t(dim));
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2)
        fail(ErrorKind::input, "{}: tensor '{}': data_offsets must be [BEGIN, END]", file, name);
    t.begin = json_offset(off[0], file, name, "BEGIN");
    t.end = json_offset(off[1], file, name, "END");
    if (t.end < t.begin) fail(ErrorKind::input, "{}: tensor '{}': data_offsets [{}, {}] end before they begin", file, name, t.begin, t.end);
    const uint64_t bits_per = uint64_t(safetensors_dtype_bits(t.dtype));
    if (n > std::numeric_limits<uint64_t>::max() / bits_per)
        fail(ErrorKind::input, "{}: tensor '{}': byte size overflows 64 bits", file, name);
    const uint64_t bits = n * bits_per;
    if (bits % 8 != 0)
        fail(ErrorKind::input, "{}: tensor '{}': {} elements of {} do not fill whole bytes", file, name, n,
             safetensors_dtype_name(t.dtype));
    if (bits / 8 != t.n_bytes())
        fail(ErrorKind::input, "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", file, name,
             shape.dump(), safetensors_dtype_name(t.dtype), bits / 8, t.begin, t.end, t.n_bytes());
    return t;
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype t) { return dtype_info(t).name; }
int safetensors_dtype_bits(SafetensorsDtype t) { return dtype_info(t).bits; }

bool parse_safetensors_dtype(const std::string& s, SafetensorsDtype* out) {
    for (const auto& d : kDtypes)
        if (s == d.name) {
            *out = d.dtype;
            return true;
        }
    return false;
}

int64_t SafetensorsTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// ---------------------------------------------------------------------------------------------------
// one file

SafetensorsFile::SafetensorsFile(MappedFile file, std::string name) : file_(std::move(file)), name_(std::move(name)) {
    parse_all();
}

SafetensorsFile SafetensorsFile::open(const std::string& path) { return SafetensorsFile(MappedFile::map(path), path); }

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, const std::string& name) {
    return SafetensorsFile(MappedFile::from_bytes(std::move(bytes)), name);
}

void SafetensorsFile::parse_all() {
    const uint8_t* data = file_.data();
    const uint64_t size = file_.size();
    if (size < 8) fail(ErrorKind::input, "{}: truncated: {} bytes, too short for the 8-byte header size", name_, size);
    uint64_t n;
    std::memcpy(&n, data, 8);
    if (n > kMaxHeaderSize)
        fail(ErrorKind::input, "{}: header size {} exceeds the safetensors limit of {} bytes", name_, n, kMaxHeaderSize);
    if (n > size - 8)
        fail(ErrorKind::input, "{}: truncated: the header needs {} bytes but the file has {} after the size field", name_, n,
             size - 8);
    if (n < 2 || data[8] != '{')
        fail(ErrorKind::input, "{}: the header must be a JSON object starting with '{{'", name_);
    data_offset_ = 8 + n;
    const char* text = reinterpret_cast<const char*>(data + 8);
    const nlohmann::json header = parse_json_strict(text, text + n, name_, kMaxJsonDepth);
    if (!header.is_object()) fail(ErrorKind::input, "{}: the header must be a JSON object", name_);

    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            if (!value.is_object()) fail(ErrorKind::input, "{}: __metadata__ must be an object of strings", name_);
            for (const auto& [mk, mv] : value.items()) {
                if (!mv.is_string())
                    fail(ErrorKind::input, "{}: __metadata__ value of \"{}\" must be a string, got {}", name_, mk, mv.dump());
                metadata_[mk] = mv.get<std::string>();
            }
            continue;
        }
        tensors_.push_back(parse_entry(key, value, name_));
    }

    // The buffer must be covered exactly: sorted by offset, each tensor starts where the previous ended.
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const uint64_t buffer = size - data_offset_;
    uint64_t expect = 0;
    const SafetensorsTensor* prev = nullptr;
    for (const auto& t : tensors_) {
        if (t.begin < expect)
            fail(ErrorKind::input, "{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", name_, prev->name, t.name,
                 prev->begin, prev->end, t.begin, t.end);
        if (t.begin > expect)
            fail(ErrorKind::input, "{}: hole in the data: bytes [{}, {}) before tensor '{}' belong to no tensor", name_, expect,
                 t.begin, t.name);
        if (t.end > buffer)
            fail(ErrorKind::input, "{}: truncated: tensor '{}' data ends at byte {} but the file has {} bytes", name_, t.name,
                 data_offset_ + t.end, size);
        expect = t.end;
        prev = &t;
    }
    if (expect != buffer)
        fail(ErrorKind::input, "{}: {} bytes after the last tensor's data belong to no tensor", name_, buffer - expect);
    for (size_t k = 0; k < tensors_.size(); ++k) index_.emplace(tensors_[k].name, k);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
    const SafetensorsTensor* t = find(name);
    if (!t) fail(ErrorKind::input, "{}: no tensor named '{}'", name_, name);
    return *t;
}

std::span<const uint8_t> SafetensorsFile::tensor_bytes(const SafetensorsTensor& t) const {
    const uint64_t size = file_.size();
    if (t.end < t.begin || t.end > size - data_offset_)
        fail(ErrorKind::runtime, "{}: tensor '{}' does not belong to this file", name_, t.name);
    return file_.bytes().subspan(size_t(data_offset_ + t.begin), size_t(t.n_bytes()));
}

std::vector<float> SafetensorsFile::tensor_to_f32(const SafetensorsTensor& t) const {
    const std::span<const uint8_t> b = tensor_bytes(t);
    const int64_t n = t.n_elements();
    std::vector<float> out(static_cast<size_t>(n));
    auto load16 = [&](int64_t k) {
        uint16_t h;
        std::memcpy(&h, b.data() + 2 * k, 2);
        return h;
    };
    switch (t.dtype) {
        case SafetensorsDtype::F32:
            if (n) std::memcpy(out.data(), b.data(), size_t(n) * 4);  // an empty tensor may have no data pointer
            break;
        case SafetensorsDtype::F64:
            for (int64_t k = 0; k < n; ++k) {
                double d;
                std::memcpy(&d, b.data() + 8 * k, 8);
                out[size_t(k)] = float(d);
            }
            break;
        case SafetensorsDtype::F16: {
            const ElementSpec fp16 = element_spec(ElementType::fp16);
            for (int64_t k = 0; k < n; ++k) out[size_t(k)] = decode_element(fp16, load16(k));
            break;
        }
        case SafetensorsDtype::BF16:  // the top half of an FP32: the shift keeps every bit
            for (int64_t k = 0; k < n; ++k) out[size_t(k)] = bits_float(uint32_t(load16(k)) << 16);
            break;
        case SafetensorsDtype::F8_E4M3:
        case SafetensorsDtype::F8_E5M2: {
            const ElementSpec s = element_spec(t.dtype == SafetensorsDtype::F8_E4M3 ? ElementType::e4m3 : ElementType::e5m2);
            for (int64_t k = 0; k < n; ++k) out[size_t(k)] = decode_element(s, b[size_t(k)]);
            break;
        }
        default:
            fail(ErrorKind::input, "{}: tensor '{}' has dtype {}, which lowbit does not convert to float (it reads F32, "
                 "F16, BF16, F64, F8_E4M3, F8_E5M2)", name_, t.name, safetensors_dtype_name(t.dtype));
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------
// sharded models

SafetensorsModel SafetensorsModel::open(const std::string& dir_or_file) {
    namespace fs = std::filesystem;
    std::error_code ec;
    SafetensorsModel m;
    m.name_ = dir_or_file;
    fs::path index_path, single_path;
    if (fs::is_directory(dir_or_file, ec)) {
        const fs::path dir(dir_or_file);
        if (fs::exists(dir / "model.safetensors.index.json", ec)) {
            index_path = dir / "model.safetensors.index.json";
        } else if (fs::exists(dir / "model.safetensors", ec)) {
            single_path = dir / "model.safetensors";
        } else {
            fail(ErrorKind::input, "{}: no model.safetensors.index.json or model.safetensors in this directory", dir_or_file);
        }
    } else if (dir_or_file.size() >= 5 && dir_or_file.compare(dir_or_file.size() - 5, 5, ".json") == 0) {
        index_path = dir_or_file;
    } else {
        single_path = dir_or_file;
    }

    if (!single_path.empty()) {
        m.shards_.push_back(SafetensorsFile::open(single_path.string()));
        for (const auto& t : m.shards_[0].tensors()) m.where_.emplace(t.name, 0);
        return m;
    }

    const std::string ip = index_path.string();
    const std::vector<uint8_t> text = read_file(ip);
    const char* begin = reinterpret_cast<const char*>(text.data());
    // The index nests: root → weight_map / metadata → values.
    const nlohmann::json index = parse_json_strict(begin, begin + text.size(), ip, 3);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
        fail(ErrorKind::input, "{}: not a safetensors index: no \"weight_map\" object", ip);
    std::map<std::string, size_t> shard_of_file;
    std::vector<std::pair<std::string, std::string>> entries;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
        if (!file.is_string())
            fail(ErrorKind::input, "{}: weight_map entry of '{}' must be a file name, got {}", ip, tensor, file.dump());
        const std::string f = file.get<std::string>();
        if (f.empty() || fs::path(f).is_absolute() || f.find("..") != std::string::npos)
            fail(ErrorKind::input, "{}: weight_map entry of '{}' is not a file name next to the index: \"{}\"", ip, tensor, f);
        shard_of_file.emplace(f, 0);
        entries.emplace_back(tensor, f);
    }
    const fs::path dir = index_path.parent_path();
    for (auto& [file, shard] : shard_of_file) {  // each shard opened once, in name order
        shard = m.shards_.size();
        m.shards_.push_back(SafetensorsFile::open((dir / file).string()));
    }
    for (const auto& [tensor, file] : entries) {
        const size_t shard = shard_of_file.at(file);
        if (!m.shards_[shard].find(tensor))
            fail(ErrorKind::input, "{}: the index puts tensor '{}' in {}, which has no such tensor", ip, tensor,
                 m.shards_[shard].name());
        m.where_.emplace(tensor, shard);
    }
    return m;
}

std::vector<std::string> SafetensorsModel::tensor_names() const {
    std::vector<std::string> names;
    names.reserve(where_.size());
    for (const auto& [n, s] : where_) names.push_back(n);
    std::sort(names.begin(), names.end());
    return names;
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) fail(ErrorKind::input, "{}: no tensor named '{}'", name_, name);
    return shards_[it->second];
}

const SafetensorsTensor& SafetensorsModel::tensor(const std::string& name) const { return file_of(name).tensor(name); }

std::span<const uint8_t> SafetensorsModel::tensor_bytes(const std::string& name) const {
    const SafetensorsFile& f = file_of(name);
    return f.tensor_bytes(f.tensor(name));
}

std::vector<float> SafetensorsModel::tensor_to_f32(const std::string& name) const { return file_of(name).tensor_to_f32(name); }

// ---------------------------------------------------------------------------------------------------
// writer

SafetensorsWriteTensor safetensors_tensor_from_f32(const std::string& name, const std::vector<int64_t>& shape,
                                                   SafetensorsDtype dtype, const float* data) {
    SafetensorsWriteTensor t{name, dtype, shape, {}};
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) fail(ErrorKind::usage, "safetensors writer: tensor '{}' has a negative dimension {}", name, d);
        n *= d;
    }
    if (dtype == SafetensorsDtype::F32) {
        t.bytes.resize(size_t(n) * 4);
        if (n) std::memcpy(t.bytes.data(), data, t.bytes.size());
    } else if (dtype == SafetensorsDtype::F16 || dtype == SafetensorsDtype::BF16) {
        const ElementSpec s = element_spec(dtype == SafetensorsDtype::F16 ? ElementType::fp16 : ElementType::bf16);
        t.bytes.resize(size_t(n) * 2);
        for (int64_t k = 0; k < n; ++k) {
            const uint16_t h = uint16_t(encode_element(s, data[k], Rounding::nearest_even, Overflow::special));
            std::memcpy(t.bytes.data() + 2 * k, &h, 2);
        }
    } else {
        fail(ErrorKind::usage, "safetensors writer: tensor '{}': floats are written as F32, F16 or BF16, not {}", name,
             safetensors_dtype_name(dtype));
    }
    return t;
}

std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsWriteTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        if (t.name == "__metadata__" || header.contains(t.name))
            fail(ErrorKind::usage, "safetensors writer: tensor name '{}' used twice or reserved", t.name);
        uint64_t n = 1;
        for (int64_t d : t.shape) {
            if (d < 0) fail(ErrorKind::usage, "safetensors writer: tensor '{}' has a negative dimension {}", t.name, d);
            n *= uint64_t(d);
        }
        const uint64_t bits = n * uint64_t(safetensors_dtype_bits(t.dtype));
        if (bits % 8 != 0 || bits / 8 != t.bytes.size())
            fail(ErrorKind::usage, "safetensors writer: tensor '{}': {} elements of {} need {} bits, got {} bytes", t.name, n,
                 safetensors_dtype_name(t.dtype), bits, t.bytes.size());
        header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // 8 + N is then a multiple of 8: aligned data
    std::vector<uint8_t> out(8 + text.size() + offset);
    const uint64_t n = text.size();
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, text.data(), text.size());
    size_t at = 8 + text.size();
    for (const auto& t : tensors) {
        if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
        at += t.bytes.size();
    }
    return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    const std::vector<uint8_t> bytes = serialize_safetensors(tensors, metadata);
    write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace lowbit
