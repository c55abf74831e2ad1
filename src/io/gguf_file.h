// gguf_file.h — the GGUF container (interop.md §2): a validating, memory-mapped reader (GgufFile) and an
// atomic writer (GgufWriter). The reader checks every count, length, type id, alignment and offset
// against the file size before trusting it, so a malformed or truncated file raises Error(input) naming
// the file and what is wrong — never a crash. Tensor types unknown to lowbit are tolerated on read (a
// newer llama.cpp may add some); only dequantizing them is refused. What lowbit knows of each tensor type
// (block shape, decoder, encoder) comes from the table in formats/gguf_types.h.
//
// Layout: magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 KV count, KV pairs, tensor infos,
// zero padding to `general.alignment` (default 32), then the tensor data, each tensor aligned.
#pragma once

#include <cstdint>
#include <span>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/gguf_types.h"
#include "io/mapped_file.h"

namespace lowbit {

// Metadata value types (interop.md §2.2).
enum class GgufValueType : uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
    u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);  // "u32", "string", "array", ...

// One metadata value. Integers and bools live in `i` (u64 as its two's-complement bits), f32/f64 in `f`
// (an f32 is held exactly), strings in `s`, arrays in `items` with element type `elem_type` (arrays
// may nest: elem_type == array).
struct GgufValue {
    GgufValueType type = GgufValueType::u8;
    int64_t i = 0;
    double f = 0.0;
    std::string s;
    GgufValueType elem_type = GgufValueType::u8;
    std::vector<GgufValue> items;

    static GgufValue of_u8(uint8_t v);
    static GgufValue of_i8(int8_t v);
    static GgufValue of_u16(uint16_t v);
    static GgufValue of_i16(int16_t v);
    static GgufValue of_u32(uint32_t v);
    static GgufValue of_i32(int32_t v);
    static GgufValue of_u64(uint64_t v);
    static GgufValue of_i64(int64_t v);
    static GgufValue of_f32(float v);
    static GgufValue of_f64(double v);
    static GgufValue of_bool(bool v);
    static GgufValue of_string(std::string v);
    // Every item must have type elem_type.
    static GgufValue of_array(GgufValueType elem_type, std::vector<GgufValue> items);
    static GgufValue of_string_array(const std::vector<std::string>& v);
    static GgufValue of_f32_array(const std::vector<float>& v);
    static GgufValue of_i32_array(const std::vector<int32_t>& v);

    bool is_integer() const;  // u8..i64
    bool is_float() const { return type == GgufValueType::f32 || type == GgufValueType::f64; }
    // A short human-readable rendering (arrays abbreviated after `max_items`), for `lowbit info`.
    std::string to_string(size_t max_items = 8) const;
    bool operator==(const GgufValue& o) const;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the fastest-varying dimension (row length)
    GgufType type = GgufType::F32;
    uint64_t offset = 0;      // from the start of the tensor-data section (as stored in the file)
    uint64_t n_bytes = 0;     // exact for known types; for unknown ids, the bytes up to the next tensor
                              // (or the end of the file), an upper bound
    int64_t n_elements() const;
    int64_t rows() const;     // product of ne[1..]
};

class GgufFile {
public:
    // Memory-maps `path` read-only and validates the whole header and every tensor's placement.
    static GgufFile open(const std::string& path);
    // The same over bytes held in memory (tests, fuzzing); `name` is used in error messages.
    static GgufFile parse(std::vector<uint8_t> bytes, const std::string& name);

    GgufFile(GgufFile&&) noexcept = default;
    GgufFile& operator=(GgufFile&&) noexcept = default;

    const std::string& name() const { return name_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute start of the tensor-data section
    uint64_t file_size() const;

    // --- metadata ---
    // All key/value pairs in file order (for `lowbit info`).
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    bool has(const std::string& key) const;
    const GgufValue* find(const std::string& key) const;  // nullptr when absent
    const GgufValue& get(const std::string& key) const;   // fails (input) when absent
    // Typed getters fail with Error(input) naming the file, the key, the expected and the actual type.
    std::string get_string(const std::string& key) const;
    int64_t get_int(const std::string& key) const;    // any integer type (u64 must fit in int64)
    double get_float(const std::string& key) const;   // f32, f64 or any integer type
    bool get_bool(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<float> get_float_array(const std::string& key) const;   // f32/f64 (or integer) items
    std::vector<int32_t> get_int_array(const std::string& key) const;   // integer items that fit int32
    // Optional keys: the default when absent; still an error when present with the wrong type.
    std::string get_string_or(const std::string& key, const std::string& def) const;
    int64_t get_int_or(const std::string& key, int64_t def) const;
    double get_float_or(const std::string& key, double def) const;
    bool get_bool_or(const std::string& key, bool def) const;
    std::vector<std::string> get_string_array_or(const std::string& key, std::vector<std::string> def) const;
    std::vector<float> get_float_array_or(const std::string& key, std::vector<float> def) const;
    std::vector<int32_t> get_int_array_or(const std::string& key, std::vector<int32_t> def) const;

    // --- tensors ---
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
    const GgufTensorInfo& tensor(const std::string& name) const;       // fails (input) when absent
    // The tensor's bytes inside the mapping (valid while this GgufFile lives).
    std::span<const uint8_t> tensor_bytes(const GgufTensorInfo& info) const;
    // Dequantizes to float32 in ggml order (ne[0] fastest): every type with a decoder in the type table;
    // others fail with Error(input) naming the file, the tensor, its type (or type id) and what lowbit reads.
    std::vector<float> tensor_to_f32(const GgufTensorInfo& info) const;
    std::vector<float> tensor_to_f32(const std::string& name) const { return tensor_to_f32(tensor(name)); }

private:
    GgufFile(MappedFile file, std::string name);  // parses and validates
    void parse_all();

    MappedFile file_;
    std::string name_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

// Builds a GGUF v3 file in memory and writes it atomically. Keys and tensor names must be unique
// (Error(usage) otherwise). A non-default alignment is recorded as `general.alignment` (u32).
class GgufWriter {
public:
    explicit GgufWriter(uint32_t alignment = 32);

    void set(const std::string& key, GgufValue value);
    void set_string(const std::string& key, const std::string& v) { set(key, GgufValue::of_string(v)); }
    void set_u32(const std::string& key, uint32_t v) { set(key, GgufValue::of_u32(v)); }
    void set_i32(const std::string& key, int32_t v) { set(key, GgufValue::of_i32(v)); }
    void set_f32(const std::string& key, float v) { set(key, GgufValue::of_f32(v)); }
    void set_bool(const std::string& key, bool v) { set(key, GgufValue::of_bool(v)); }
    void set_string_array(const std::string& key, const std::vector<std::string>& v) {
        set(key, GgufValue::of_string_array(v));
    }

    // Float data (ne[0] fastest), stored as `type`: any type with an encoder in the type table (F16 and
    // BF16 round to nearest even; the block formats follow ggml's reference quantizers).
    void add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgufType type, const float* data);
    // Pre-packed bytes of any type; for known types their size must match ne.
    void add_tensor_raw(const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                        std::vector<uint8_t> bytes);
    // Pre-packed bytes of a known type, made by `produce` only when the file is written (one tensor in memory
    // at a time: a quantizer's whole output never has to be packed at once). Their size is checked then.
    void add_tensor_lazy(const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                         std::function<std::vector<uint8_t>()> produce);

    std::vector<uint8_t> serialize() const;
    // Atomic (temporary name, then rename), streamed: the header, then each tensor's bytes as they are made.
    void write(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> ne;
        GgufType type;
        uint64_t size = 0;
        std::vector<uint8_t> bytes;                     // empty when lazy
        std::function<std::vector<uint8_t>()> produce;  // set when lazy
    };
    // Checks a new tensor's name, shape and (known types) row blocking; its byte size for a known type, else
    // `raw_bytes`.
    uint64_t check_new_tensor(const std::string& name, const std::vector<int64_t>& ne, GgufType type,
                              uint64_t raw_bytes) const;
    std::vector<uint8_t> header() const;  // everything before the first tensor's data, padded
    // Calls sink(pointer, size) with each tensor's bytes and padding, in file order.
    void for_each_data(const std::function<void(const uint8_t*, size_t)>& sink) const;
    uint32_t alignment_;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace lowbit
