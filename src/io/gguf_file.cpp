// gguf_file.cpp — GGUF parsing with a bounds check before every read, the typed metadata getters,
// dequantization through the formats layer, and the writer (interop.md §2).
#include "io/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "formats/gguf_types.h"
#include "io/mapped_file.h"
#include "io/npy.h"

namespace lowbit {

namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxTensorName = 64;     // interop.md §2.3 (ggml keeps a NUL too: writers stay below)
constexpr int kMaxArrayDepth = 16;          // nested arrays deeper than this are refused (stack safety)
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;           // key length, 1-byte key, type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

bool valid_value_type(uint32_t id) { return id <= uint32_t(GgufValueType::f64); }

// Smallest encoding of one array element of type t (a nested array: its type and count).
uint64_t min_value_bytes(GgufValueType t) {
    switch (t) {
        case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
        case GgufValueType::u16: case GgufValueType::i16: return 2;
        case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
        case GgufValueType::string: return 8;
        case GgufValueType::array: return 12;
        default: return 8;  // u64, i64, f64
    }
}

std::string value_type_label(const GgufValue& v) {
    if (v.type != GgufValueType::array) return gguf_value_type_name(v.type);
    return fmt::format("array of {}", gguf_value_type_name(v.elem_type));
}

uint64_t align_up(uint64_t p, uint64_t a) { return p + (a - p % a) % a; }

// Bounds-checked little-endian reads over the file bytes; `context` names what is being read.
class Reader {
public:
    Reader(const uint8_t* data, uint64_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }
    std::string context = "header";

    void need(uint64_t n, const char* what) const {
        if (remaining() < n)
            fail(ErrorKind::input, "{}: truncated: {}: {} needs {} bytes at byte {} but the file has {} bytes", file_,
                 context, what, n, pos_, size_);
    }
    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string read_string(const char* what) {
        const uint64_t len = read<uint64_t>(what);
        if (len > remaining())
            fail(ErrorKind::input, "{}: truncated: {}: {} of {} bytes at byte {} but the file has {} bytes", file_, context,
                 what, len, pos_, size_);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
        pos_ += len;
        return s;
    }

private:
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& file_;
};

GgufValue read_value(Reader& r, GgufValueType t, int depth, const std::string& file) {
    GgufValue v;
    v.type = t;
    switch (t) {
        case GgufValueType::u8: v.i = r.read<uint8_t>("u8 value"); break;
        case GgufValueType::i8: v.i = r.read<int8_t>("i8 value"); break;
        case GgufValueType::u16: v.i = r.read<uint16_t>("u16 value"); break;
        case GgufValueType::i16: v.i = r.read<int16_t>("i16 value"); break;
        case GgufValueType::u32: v.i = r.read<uint32_t>("u32 value"); break;
        case GgufValueType::i32: v.i = r.read<int32_t>("i32 value"); break;
        case GgufValueType::u64: v.i = int64_t(r.read<uint64_t>("u64 value")); break;
        case GgufValueType::i64: v.i = r.read<int64_t>("i64 value"); break;
        case GgufValueType::f32: v.f = r.read<float>("f32 value"); break;
        case GgufValueType::f64: v.f = r.read<double>("f64 value"); break;
        case GgufValueType::boolean: {
            const uint8_t b = r.read<uint8_t>("bool value");
            if (b > 1)
                fail(ErrorKind::input, "{}: {}: bool value is byte {} at byte {} (must be 0 or 1)", file, r.context, b,
                     r.pos() - 1);
            v.i = b;
            break;
        }
        case GgufValueType::string: v.s = r.read_string("string value"); break;
        case GgufValueType::array: {
            if (depth >= kMaxArrayDepth)
                fail(ErrorKind::input, "{}: {}: arrays nested deeper than {} levels", file, r.context, kMaxArrayDepth);
            const uint32_t et = r.read<uint32_t>("array element type");
            if (!valid_value_type(et))
                fail(ErrorKind::input, "{}: {}: unknown array element type {} at byte {} (valid: 0..12)", file, r.context,
                     et, r.pos() - 4);
            v.elem_type = GgufValueType(et);
            const uint64_t n = r.read<uint64_t>("array length");
            if (n > r.remaining() / min_value_bytes(v.elem_type))
                fail(ErrorKind::input, "{}: truncated: {}: array of {} {} values at byte {} cannot fit in the {} bytes left",
                     file, r.context, n, gguf_value_type_name(v.elem_type), r.pos(), r.remaining());
            v.items.reserve(size_t(n));
            for (uint64_t k = 0; k < n; ++k) v.items.push_back(read_value(r, v.elem_type, depth + 1, file));
            break;
        }
    }
    return v;
}

// --- writing ---

class ByteSink {
public:
    std::vector<uint8_t> out;
    template <typename T>
    void put(T v) {
        put_bytes(&v, sizeof(T));
    }
    // resize + memcpy rather than vector::insert: GCC 12 warns falsely (-Wstringop-overflow) on insert.
    void put_bytes(const void* p, size_t n) {
        const size_t at = out.size();
        out.resize(at + n);
        if (n) std::memcpy(out.data() + at, p, n);
    }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        put_bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) { out.resize(size_t(align_up(out.size(), alignment)), 0); }
};

void write_value(ByteSink& w, const GgufValue& v) {
    switch (v.type) {
        case GgufValueType::u8: w.put<uint8_t>(uint8_t(v.i)); break;
        case GgufValueType::i8: w.put<int8_t>(int8_t(v.i)); break;
        case GgufValueType::u16: w.put<uint16_t>(uint16_t(v.i)); break;
        case GgufValueType::i16: w.put<int16_t>(int16_t(v.i)); break;
        case GgufValueType::u32: w.put<uint32_t>(uint32_t(v.i)); break;
        case GgufValueType::i32: w.put<int32_t>(int32_t(v.i)); break;
        case GgufValueType::u64: w.put<uint64_t>(uint64_t(v.i)); break;
        case GgufValueType::i64: w.put<int64_t>(v.i); break;
        case GgufValueType::f32: w.put<float>(float(v.f)); break;
        case GgufValueType::f64: w.put<double>(v.f); break;
        case GgufValueType::boolean: w.put<uint8_t>(v.i ? 1 : 0); break;
        case GgufValueType::string: w.put_string(v.s); break;
        case GgufValueType::array:
            w.put<uint32_t>(uint32_t(v.elem_type));
            w.put<uint64_t>(v.items.size());
            for (const auto& item : v.items) write_value(w, item);
            break;
    }
}

void check_array_items(const GgufValue& v, const std::string& key) {
    if (v.type != GgufValueType::array) return;
    for (const auto& item : v.items) {
        if (item.type != v.elem_type)
            fail(ErrorKind::usage, "gguf writer: key '{}': array of {} holds a {} item", key,
                 gguf_value_type_name(v.elem_type), gguf_value_type_name(item.type));
        check_array_items(item, key);
    }
}

void check_tensor_shape(const std::string& name, const std::vector<int64_t>& ne) {
    if (ne.size() > kMaxDims) fail(ErrorKind::usage, "gguf writer: tensor '{}' has {} dimensions (at most 4)", name, ne.size());
    int64_t n = 1;
    for (int64_t d : ne) {
        if (d <= 0) fail(ErrorKind::usage, "gguf writer: tensor '{}' has a dimension {} (must be positive)", name, d);
        if (n > std::numeric_limits<int64_t>::max() / d)
            fail(ErrorKind::usage, "gguf writer: tensor '{}': element count overflows", name);
        n *= d;
    }
}

int64_t element_count(const std::vector<int64_t>& ne) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// value types

const char* gguf_value_type_name(GgufValueType t) {
    switch (t) {
        case GgufValueType::u8: return "u8";
        case GgufValueType::i8: return "i8";
        case GgufValueType::u16: return "u16";
        case GgufValueType::i16: return "i16";
        case GgufValueType::u32: return "u32";
        case GgufValueType::i32: return "i32";
        case GgufValueType::f32: return "f32";
        case GgufValueType::boolean: return "bool";
        case GgufValueType::string: return "string";
        case GgufValueType::array: return "array";
        case GgufValueType::u64: return "u64";
        case GgufValueType::i64: return "i64";
        case GgufValueType::f64: return "f64";
    }
    return "unknown";
}

// ---------------------------------------------------------------------------------------------------
// values

namespace {
GgufValue scalar(GgufValueType t, int64_t i, double f) {
    GgufValue v;
    v.type = t;
    v.i = i;
    v.f = f;
    return v;
}
}  // namespace

GgufValue GgufValue::of_u8(uint8_t v) { return scalar(GgufValueType::u8, v, 0); }
GgufValue GgufValue::of_i8(int8_t v) { return scalar(GgufValueType::i8, v, 0); }
GgufValue GgufValue::of_u16(uint16_t v) { return scalar(GgufValueType::u16, v, 0); }
GgufValue GgufValue::of_i16(int16_t v) { return scalar(GgufValueType::i16, v, 0); }
GgufValue GgufValue::of_u32(uint32_t v) { return scalar(GgufValueType::u32, v, 0); }
GgufValue GgufValue::of_i32(int32_t v) { return scalar(GgufValueType::i32, v, 0); }
GgufValue GgufValue::of_u64(uint64_t v) { return scalar(GgufValueType::u64, int64_t(v), 0); }
GgufValue GgufValue::of_i64(int64_t v) { return scalar(GgufValueType::i64, v, 0); }
GgufValue GgufValue::of_f32(float v) { return scalar(GgufValueType::f32, 0, v); }
GgufValue GgufValue::of_f64(double v) { return scalar(GgufValueType::f64, 0, v); }
GgufValue GgufValue::of_bool(bool v) { return scalar(GgufValueType::boolean, v ? 1 : 0, 0); }
GgufValue GgufValue::of_string(std::string v) {
    GgufValue g;
    g.type = GgufValueType::string;
    g.s = std::move(v);
    return g;
}
GgufValue GgufValue::of_array(GgufValueType elem_type, std::vector<GgufValue> items) {
    GgufValue g;
    g.type = GgufValueType::array;
    g.elem_type = elem_type;
    g.items = std::move(items);
    check_array_items(g, "(array)");
    return g;
}
GgufValue GgufValue::of_string_array(const std::vector<std::string>& v) {
    std::vector<GgufValue> items;
    items.reserve(v.size());
    for (const auto& s : v) items.push_back(of_string(s));
    return of_array(GgufValueType::string, std::move(items));
}
GgufValue GgufValue::of_f32_array(const std::vector<float>& v) {
    std::vector<GgufValue> items;
    items.reserve(v.size());
    for (float x : v) items.push_back(of_f32(x));
    return of_array(GgufValueType::f32, std::move(items));
}
GgufValue GgufValue::of_i32_array(const std::vector<int32_t>& v) {
    std::vector<GgufValue> items;
    items.reserve(v.size());
    for (int32_t x : v) items.push_back(of_i32(x));
    return of_array(GgufValueType::i32, std::move(items));
}

bool GgufValue::is_integer() const {
    switch (type) {
        case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::u16: case GgufValueType::i16:
        case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::u64: case GgufValueType::i64:
            return true;
        default:
            return false;
    }
}

std::string GgufValue::to_string(size_t max_items) const {
    switch (type) {
        case GgufValueType::u64: return fmt::format("{}", uint64_t(i));
        case GgufValueType::f32: return fmt::format("{}", float(f));
        case GgufValueType::f64: return fmt::format("{}", f);
        case GgufValueType::boolean: return i ? "true" : "false";
        case GgufValueType::string: {
            constexpr size_t kMaxChars = 80;
            std::string shown = s.size() > kMaxChars ? s.substr(0, kMaxChars) + "..." : s;
            return "\"" + shown + "\"";
        }
        case GgufValueType::array: {
            std::string out = "[";
            for (size_t k = 0; k < items.size() && k < max_items; ++k) {
                if (k) out += ", ";
                out += items[k].to_string(max_items);
            }
            if (items.size() > max_items) out += fmt::format(", ... ({} items)", items.size());
            return out + "]";
        }
        default: return fmt::format("{}", i);
    }
}

bool GgufValue::operator==(const GgufValue& o) const {
    // Floats compare by bit pattern so that NaN == NaN and -0 != +0 (round trips are exact).
    uint64_t fa, fb;
    std::memcpy(&fa, &f, 8);
    std::memcpy(&fb, &o.f, 8);
    if (type != o.type || i != o.i || fa != fb || s != o.s) return false;
    if (type != GgufValueType::array) return true;
    return elem_type == o.elem_type && items == o.items;
}

int64_t GgufTensorInfo::n_elements() const { return element_count(ne); }
int64_t GgufTensorInfo::rows() const { return ne.empty() ? 1 : n_elements() / ne[0]; }

// ---------------------------------------------------------------------------------------------------
// reader

GgufFile::GgufFile(MappedFile file, std::string name) : file_(std::move(file)), name_(std::move(name)) { parse_all(); }

GgufFile GgufFile::open(const std::string& path) { return GgufFile(MappedFile::map(path), path); }

GgufFile GgufFile::parse(std::vector<uint8_t> bytes, const std::string& name) {
    return GgufFile(MappedFile::from_bytes(std::move(bytes)), name);
}

uint64_t GgufFile::file_size() const { return file_.size(); }

void GgufFile::parse_all() {
    const uint8_t* data = file_.data();
    const uint64_t size = file_.size();
    Reader r(data, size, name_);

    if (size < 4) fail(ErrorKind::input, "{}: not a GGUF file: only {} bytes (no magic)", name_, size);
    if (std::memcmp(data, "GGUF", 4) != 0)
        fail(ErrorKind::input, "{}: not a GGUF file: magic bytes are {:02x} {:02x} {:02x} {:02x} (expected 'GGUF')", name_,
             data[0], data[1], data[2], data[3]);
    r.read<uint32_t>("magic");
    version_ = r.read<uint32_t>("version");
    if (version_ == 1)
        fail(ErrorKind::input, "{}: GGUF version 1 is not supported (it used 32-bit counts); re-convert the model with a "
             "current llama.cpp", name_);
    if (version_ == 0x02000000u || version_ == 0x03000000u)
        fail(ErrorKind::input, "{}: big-endian GGUF is not supported (convert it to little-endian first)", name_);
    if (version_ != 2 && version_ != 3)
        fail(ErrorKind::input, "{}: unsupported GGUF version {} (lowbit reads versions 2 and 3)", name_, version_);
    const uint64_t n_tensors = r.read<uint64_t>("tensor count");
    const uint64_t n_kv = r.read<uint64_t>("metadata count");
    if (n_kv > r.remaining() / kMinKvBytes)
        fail(ErrorKind::input, "{}: truncated or corrupt header: {} metadata pairs cannot fit in a file of {} bytes", name_, n_kv, size);
    if (n_tensors > r.remaining() / kMinTensorInfoBytes)
        fail(ErrorKind::input, "{}: truncated or corrupt header: {} tensor infos cannot fit in a file of {} bytes", name_, n_tensors,
             size);

    kv_.reserve(size_t(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
        r.context = fmt::format("metadata pair {}", k);
        std::string key = r.read_string("key");
        if (key.empty()) fail(ErrorKind::input, "{}: metadata pair {} has an empty key", name_, k);
        r.context = "key '" + key + "'";
        const uint32_t t = r.read<uint32_t>("value type");
        if (!valid_value_type(t))
            fail(ErrorKind::input, "{}: key '{}': unknown value type {} at byte {} (valid: 0..12)", name_, key, t,
                 r.pos() - 4);
        GgufValue v = read_value(r, GgufValueType(t), 0, name_);
        if (!kv_index_.emplace(key, kv_.size()).second) fail(ErrorKind::input, "{}: duplicate metadata key '{}'", name_, key);
        kv_.emplace_back(std::move(key), std::move(v));
    }

    alignment_ = kDefaultAlignment;
    if (const GgufValue* a = find("general.alignment")) {
        if (a->type != GgufValueType::u32)
            fail(ErrorKind::input, "{}: general.alignment has type {} (must be u32)", name_, value_type_label(*a));
        if (a->i == 0 || a->i % 8 != 0)
            fail(ErrorKind::input, "{}: general.alignment is {} (must be a positive multiple of 8)", name_, a->i);
        alignment_ = uint64_t(a->i);
    }

    tensors_.reserve(size_t(n_tensors));
    for (uint64_t k = 0; k < n_tensors; ++k) {
        r.context = fmt::format("tensor info {}", k);
        GgufTensorInfo ti;
        ti.name = r.read_string("tensor name");
        if (ti.name.empty()) fail(ErrorKind::input, "{}: tensor info {} has an empty name", name_, k);
        if (ti.name.size() > kMaxTensorName)
            fail(ErrorKind::input, "{}: tensor info {}: name of {} bytes (at most {}): '{}...'", name_, k, ti.name.size(),
                 kMaxTensorName, ti.name.substr(0, kMaxTensorName));
        r.context = "tensor '" + ti.name + "'";
        const uint32_t n_dims = r.read<uint32_t>("dimension count");
        if (n_dims > kMaxDims)
            fail(ErrorKind::input, "{}: tensor '{}' has {} dimensions (at most {})", name_, ti.name, n_dims, kMaxDims);
        int64_t n = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim = r.read<uint64_t>("dimension");
            if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()))
                fail(ErrorKind::input, "{}: tensor '{}': dimension {} is {} (must be positive)", name_, ti.name, d, dim);
            if (n > std::numeric_limits<int64_t>::max() / int64_t(dim))
                fail(ErrorKind::input, "{}: tensor '{}': element count overflows 64 bits", name_, ti.name);
            n *= int64_t(dim);
            ti.ne.push_back(int64_t(dim));
        }
        ti.type = GgufType(r.read<uint32_t>("tensor type"));
        ti.offset = r.read<uint64_t>("tensor offset");
        if (const GgufTypeInfo* tt = gguf_type_info(ti.type)) {
            const int64_t row = ti.ne.empty() ? 1 : ti.ne[0];
            if (row % tt->block_elements != 0)
                fail(ErrorKind::input, "{}: tensor '{}': row length ne[0] = {} is not a multiple of the {} block size {}",
                     name_, ti.name, row, tt->name, tt->block_elements);
            const uint64_t blocks = uint64_t(n / tt->block_elements);
            if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(tt->block_bytes))
                fail(ErrorKind::input, "{}: tensor '{}': byte size overflows 64 bits", name_, ti.name);
            ti.n_bytes = blocks * uint64_t(tt->block_bytes);
        }
        if (ti.offset % alignment_ != 0)
            fail(ErrorKind::input, "{}: tensor '{}': data offset {} is not a multiple of the alignment {}", name_, ti.name,
                 ti.offset, alignment_);
        if (!tensor_index_.emplace(ti.name, tensors_.size()).second)
            fail(ErrorKind::input, "{}: duplicate tensor name '{}'", name_, ti.name);
        tensors_.push_back(std::move(ti));
    }

    data_offset_ = align_up(r.pos(), alignment_);
    if (tensors_.empty()) return;
    if (data_offset_ > size)
        fail(ErrorKind::input, "{}: truncated: the tensor data section starts at byte {} but the file has {} bytes", name_,
             data_offset_, size);
    const uint64_t avail = size - data_offset_;

    // Placement: sorted by offset, every tensor lies inside the file and none overlaps the next. A tensor of
    // unknown type is taken to extend to the next tensor (or the end of the file).
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t k = 0; k < order.size(); ++k) {
        GgufTensorInfo& ti = tensors_[order[k]];
        if (ti.offset > avail)
            fail(ErrorKind::input, "{}: truncated: tensor '{}' data starts at offset {} of the data section (byte {}) but "
                 "the file has {} bytes", name_, ti.name, ti.offset, (unsigned __int128)data_offset_ + ti.offset, size);
        if (!gguf_type_info(ti.type)) {
            uint64_t end = avail;
            for (size_t j = k + 1; j < order.size(); ++j)
                if (tensors_[order[j]].offset > ti.offset) {
                    end = tensors_[order[j]].offset;
                    break;
                }
            ti.n_bytes = end - ti.offset;
        }
        if (ti.n_bytes > avail - ti.offset)
            fail(ErrorKind::input, "{}: truncated: tensor '{}' data ends at byte {} but the file has {} bytes", name_,
                 ti.name, (unsigned __int128)data_offset_ + ti.offset + ti.n_bytes, size);
        if (k + 1 < order.size()) {
            const GgufTensorInfo& next = tensors_[order[k + 1]];
            if (next.offset - ti.offset < ti.n_bytes)
                fail(ErrorKind::input, "{}: tensors '{}' and '{}' overlap in the data section (offsets {} and {}, {} bytes)",
                     name_, ti.name, next.name, ti.offset, next.offset, ti.n_bytes);
        }
    }
}

bool GgufFile::has(const std::string& key) const { return kv_index_.count(key) != 0; }

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) fail(ErrorKind::input, "{}: missing metadata key '{}'", name_, key);
    return *v;
}

namespace {

[[noreturn]] void wrong_type(const std::string& file, const std::string& key, const char* expected, const GgufValue& v) {
    fail(ErrorKind::input, "{}: key '{}' has type {} (expected {})", file, key, value_type_label(v), expected);
}

bool integer_fits(const GgufValue& v, int64_t lo, int64_t hi) {
    if (v.type == GgufValueType::u64 && v.i < 0) return false;  // above INT64_MAX
    return v.i >= lo && v.i <= hi;
}

// One integer value, range-checked; `what` names the key (and item) for the message.
int64_t int_value(const GgufValue& v, int64_t lo, int64_t hi, const std::string& file, const std::string& what) {
    if (!integer_fits(v, lo, hi))
        fail(ErrorKind::input, "{}: {}: value {} does not fit the range {}..{}", file, what, v.to_string(), lo, hi);
    return v.i;
}

double float_value(const GgufValue& v) {
    if (v.is_float()) return v.f;
    return v.type == GgufValueType::u64 ? double(uint64_t(v.i)) : double(v.i);
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
    const GgufValue& v = get(key);
    if (v.type != GgufValueType::string) wrong_type(name_, key, "string", v);
    return v.s;
}

int64_t GgufFile::get_int(const std::string& key) const {
    const GgufValue& v = get(key);
    if (!v.is_integer()) wrong_type(name_, key, "an integer", v);
    return int_value(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), name_,
                     "key '" + key + "'");
}

double GgufFile::get_float(const std::string& key) const {
    const GgufValue& v = get(key);
    if (!v.is_float() && !v.is_integer()) wrong_type(name_, key, "a number (f32, f64 or integer)", v);
    return float_value(v);
}

bool GgufFile::get_bool(const std::string& key) const {
    const GgufValue& v = get(key);
    if (v.type != GgufValueType::boolean) wrong_type(name_, key, "bool", v);
    return v.i != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue& v = get(key);
    if (v.type != GgufValueType::array || v.elem_type != GgufValueType::string) wrong_type(name_, key, "array of string", v);
    std::vector<std::string> out;
    out.reserve(v.items.size());
    for (const auto& item : v.items) out.push_back(item.s);
    return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
    const GgufValue& v = get(key);
    const bool numeric = v.type == GgufValueType::array && v.elem_type != GgufValueType::string &&
                         v.elem_type != GgufValueType::array && v.elem_type != GgufValueType::boolean;
    if (!numeric) wrong_type(name_, key, "array of f32", v);
    std::vector<float> out;
    out.reserve(v.items.size());
    for (const auto& item : v.items) out.push_back(float(float_value(item)));
    return out;
}

std::vector<int32_t> GgufFile::get_int_array(const std::string& key) const {
    const GgufValue& v = get(key);
    GgufValue probe;  // an item of the element type, to ask whether it is an integer type
    probe.type = v.elem_type;
    if (v.type != GgufValueType::array || !probe.is_integer()) wrong_type(name_, key, "array of i32", v);
    std::vector<int32_t> out;
    out.reserve(v.items.size());
    for (size_t k = 0; k < v.items.size(); ++k)
        out.push_back(int32_t(int_value(v.items[k], std::numeric_limits<int32_t>::min(),
                                        std::numeric_limits<int32_t>::max(), name_,
                                        fmt::format("key '{}' item {}", key, k))));
    return out;
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& def) const {
    return has(key) ? get_string(key) : def;
}
int64_t GgufFile::get_int_or(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }
double GgufFile::get_float_or(const std::string& key, double def) const { return has(key) ? get_float(key) : def; }
bool GgufFile::get_bool_or(const std::string& key, bool def) const { return has(key) ? get_bool(key) : def; }
std::vector<std::string> GgufFile::get_string_array_or(const std::string& key, std::vector<std::string> def) const {
    return has(key) ? get_string_array(key) : def;
}
std::vector<float> GgufFile::get_float_array_or(const std::string& key, std::vector<float> def) const {
    return has(key) ? get_float_array(key) : def;
}
std::vector<int32_t> GgufFile::get_int_array_or(const std::string& key, std::vector<int32_t> def) const {
    return has(key) ? get_int_array(key) : def;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
    const GgufTensorInfo* t = find_tensor(name);
    if (!t) fail(ErrorKind::input, "{}: no tensor named '{}'", name_, name);
    return *t;
}

std::span<const uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& info) const {
    const uint64_t size = file_size();
    if (data_offset_ > size || info.offset > size - data_offset_ || info.n_bytes > size - data_offset_ - info.offset)
        fail(ErrorKind::runtime, "{}: tensor '{}' does not belong to this file", name_, info.name);
    return file_.bytes().subspan(size_t(data_offset_ + info.offset), size_t(info.n_bytes));
}

std::vector<float> GgufFile::tensor_to_f32(const GgufTensorInfo& info) const {
    if (!gguf_type_can_dequantize(info.type))
        fail(ErrorKind::input, "{}: tensor '{}' has type {}, which lowbit cannot dequantize ({})", name_, info.name,
             gguf_type_label(info.type), gguf_type_support());
    const std::span<const uint8_t> b = tensor_bytes(info);
    std::vector<float> out(static_cast<size_t>(info.n_elements()));
    gguf_dequantize_matrix(info.type, b.data(), info.rows(), info.ne.empty() ? 1 : info.ne[0], out.data());
    return out;
}

// ---------------------------------------------------------------------------------------------------
// writer

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
    if (alignment == 0 || alignment % 8 != 0 || (alignment & (alignment - 1)) != 0)
        fail(ErrorKind::usage, "gguf writer: alignment {} must be a power of two and a multiple of 8", alignment);
}

void GgufWriter::set(const std::string& key, GgufValue value) {
    if (key.empty()) fail(ErrorKind::usage, "gguf writer: empty metadata key");
    for (const auto& kv : kv_)
        if (kv.first == key) fail(ErrorKind::usage, "gguf writer: metadata key '{}' set twice", key);
    if (key == "general.alignment" && !(value.type == GgufValueType::u32 && value.i == alignment_))
        fail(ErrorKind::usage, "gguf writer: general.alignment must be the u32 {} given to the writer", alignment_);
    check_array_items(value, key);
    kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgufType type, const float* data) {
    check_tensor_shape(name, ne);
    const GgufTypeInfo* info = gguf_type_info(type);
    if (!info || !info->encode)
        fail(ErrorKind::usage, "gguf writer: tensor '{}': cannot encode floats as {} ({}; add_tensor_raw takes "
             "pre-packed bytes)", name, gguf_type_label(type), gguf_type_support());
    const int64_t row = ne.empty() ? 1 : ne[0];
    if (row % info->block_elements != 0)
        fail(ErrorKind::usage, "gguf writer: tensor '{}': row length {} is not a multiple of the {} block size {}", name,
             row, info->name, info->block_elements);
    add_tensor_raw(name, ne, type, gguf_quantize_matrix(type, data, element_count(ne) / row, row));
}

uint64_t GgufWriter::check_new_tensor(const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                                      uint64_t raw_bytes) const {
    if (name.empty() || name.size() >= kMaxTensorName)
        fail(ErrorKind::usage, "gguf writer: tensor name '{}' must have 1 to {} bytes", name, kMaxTensorName - 1);
    for (const auto& t : tensors_)
        if (t.name == name) fail(ErrorKind::usage, "gguf writer: tensor '{}' added twice", name);
    check_tensor_shape(name, ne);
    const GgufTypeInfo* tt = gguf_type_info(type);
    if (!tt) return raw_bytes;
    const int64_t row = ne.empty() ? 1 : ne[0];
    if (row % tt->block_elements != 0)
        fail(ErrorKind::usage, "gguf writer: tensor '{}': row length {} is not a multiple of the {} block size {}", name,
             row, tt->name, tt->block_elements);
    return gguf_type_bytes_for(type, uint64_t(element_count(ne)));
}

void GgufWriter::add_tensor_raw(const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                                std::vector<uint8_t> bytes) {
    const uint64_t want = check_new_tensor(name, ne, type, bytes.size());
    if (bytes.size() != want)
        fail(ErrorKind::usage, "gguf writer: tensor '{}' ({}) needs {} bytes, got {}", name, gguf_type_label(type), want,
             bytes.size());
    tensors_.push_back(Tensor{name, ne, type, want, std::move(bytes), {}});
}

void GgufWriter::add_tensor_lazy(const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                                 std::function<std::vector<uint8_t>()> produce) {
    if (!gguf_type_info(type))
        fail(ErrorKind::usage, "gguf writer: tensor '{}': a lazy tensor needs a known type, not {}", name,
             gguf_type_label(type));
    tensors_.push_back(Tensor{name, ne, type, check_new_tensor(name, ne, type, 0), {}, std::move(produce)});
}

std::vector<uint8_t> GgufWriter::header() const {
    bool has_alignment_key = false;
    for (const auto& kv : kv_) has_alignment_key |= kv.first == "general.alignment";
    const bool add_alignment_key = alignment_ != kDefaultAlignment && !has_alignment_key;

    ByteSink w;
    w.put_bytes("GGUF", 4);
    w.put<uint32_t>(3);
    w.put<uint64_t>(tensors_.size());
    w.put<uint64_t>(kv_.size() + (add_alignment_key ? 1 : 0));
    for (const auto& [key, value] : kv_) {
        w.put_string(key);
        w.put<uint32_t>(uint32_t(value.type));
        write_value(w, value);
    }
    if (add_alignment_key) {
        w.put_string("general.alignment");
        w.put<uint32_t>(uint32_t(GgufValueType::u32));
        w.put<uint32_t>(alignment_);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        w.put_string(t.name);
        w.put<uint32_t>(uint32_t(t.ne.size()));
        for (int64_t d : t.ne) w.put<uint64_t>(uint64_t(d));
        w.put<uint32_t>(uint32_t(t.type));
        w.put<uint64_t>(offset);
        offset = align_up(offset + t.size, alignment_);
    }
    w.pad_to(alignment_);
    return std::move(w.out);
}

void GgufWriter::for_each_data(const std::function<void(const uint8_t*, size_t)>& sink) const {
    const std::vector<uint8_t> zeros(alignment_, 0);
    for (const auto& t : tensors_) {  // every tensor, the last included, is padded to the alignment (as ggml does)
        std::vector<uint8_t> made;
        if (t.produce) {
            made = t.produce();
            if (made.size() != t.size)
                fail(ErrorKind::runtime, "gguf writer: tensor '{}' ({}) was made with {} bytes, not {}", t.name,
                     gguf_type_label(t.type), made.size(), t.size);
        }
        const std::vector<uint8_t>& bytes = t.produce ? made : t.bytes;
        sink(bytes.data(), bytes.size());
        sink(zeros.data(), size_t(align_up(t.size, alignment_) - t.size));
    }
}

std::vector<uint8_t> GgufWriter::serialize() const {
    std::vector<uint8_t> out = header();
    for_each_data([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
    return out;
}

void GgufWriter::write(const std::string& path) const {
    AtomicFileWriter f(path);
    const std::vector<uint8_t> head = header();
    f.write(head.data(), head.size());
    for_each_data([&](const uint8_t* p, size_t n) { f.write(p, n); });
    f.commit();
}

}  // namespace lowbit
