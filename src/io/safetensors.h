// safetensors.h — the safetensors format (interop.md §4): a validating, memory-mapped reader of one file
// (SafetensorsFile), a model made of one file or of shards listed in model.safetensors.index.json
// (SafetensorsModel), and an atomic writer.
//
// Layout: u64 little-endian header size N, N bytes of UTF-8 JSON ({"name": {"dtype", "shape",
// "data_offsets": [BEGIN, END]}, ..., "__metadata__": {string: string}}) padded with spaces, then the byte
// buffer, which the tensors must cover exactly (no holes, no overlaps, nothing after the last one).
// Malformed files raise Error(input) naming the file (and tensor) and what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/mapped_file.h"

namespace lowbit {

// The dtype strings of safetensors' `enum Dtype` (bit widths: F4 4, F6_* 6, C64 64, the others as named).
enum class SafetensorsDtype : uint8_t {
    BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
    I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
};
const char* safetensors_dtype_name(SafetensorsDtype t);  // "F32", "BF16", ...
bool parse_safetensors_dtype(const std::string& s, SafetensorsDtype* out);
int safetensors_dtype_bits(SafetensorsDtype t);

struct SafetensorsTensor {
    std::string name;
    SafetensorsDtype dtype = SafetensorsDtype::F32;
    std::vector<int64_t> shape;  // C order: the last dimension is the fastest-varying
    uint64_t begin = 0;          // [begin, end) in the byte buffer that follows the header
    uint64_t end = 0;
    uint64_t n_bytes() const { return end - begin; }
    int64_t n_elements() const;
};

class SafetensorsFile {
public:
    static SafetensorsFile open(const std::string& path);  // memory-maps read-only
    static SafetensorsFile parse(std::vector<uint8_t> bytes, const std::string& name);

    SafetensorsFile(SafetensorsFile&&) noexcept = default;
    SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

    const std::string& name() const { return name_; }
    uint64_t data_offset() const { return data_offset_; }  // 8 + header size
    // Tensors in the order of their data in the file.
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
    const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
    const SafetensorsTensor& tensor(const std::string& name) const;  // fails (input) when absent
    std::span<const uint8_t> tensor_bytes(const SafetensorsTensor& t) const;
    // Float32 in C order. Dtypes: F32, F16, BF16, F64, F8_E4M3, F8_E5M2; others fail naming the dtype.
    std::vector<float> tensor_to_f32(const SafetensorsTensor& t) const;
    std::vector<float> tensor_to_f32(const std::string& name) const { return tensor_to_f32(tensor(name)); }

private:
    SafetensorsFile(MappedFile file, std::string name);  // parses and validates
    void parse_all();

    MappedFile file_;
    std::string name_;
    uint64_t data_offset_ = 0;
    std::vector<SafetensorsTensor> tensors_;
    std::unordered_map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// A model stored as one safetensors file or as shards. open() accepts a directory (it reads
// model.safetensors.index.json if present, else model.safetensors), an index .json file, or a single
// .safetensors file. Every tensor the index names must exist in the shard it names.
class SafetensorsModel {
public:
    static SafetensorsModel open(const std::string& dir_or_file);

    const std::string& name() const { return name_; }
    const std::vector<SafetensorsFile>& shards() const { return shards_; }
    std::vector<std::string> tensor_names() const;  // sorted
    bool has(const std::string& name) const { return where_.count(name) != 0; }
    const SafetensorsTensor& tensor(const std::string& name) const;  // fails (input) naming the model
    const SafetensorsFile& file_of(const std::string& name) const;
    std::span<const uint8_t> tensor_bytes(const std::string& name) const;
    std::vector<float> tensor_to_f32(const std::string& name) const;

private:
    std::string name_;
    std::vector<SafetensorsFile> shards_;
    std::unordered_map<std::string, size_t> where_;  // tensor name → shard
};

// One tensor to write: its raw little-endian bytes in C order (size must match shape × dtype).
struct SafetensorsWriteTensor {
    std::string name;
    SafetensorsDtype dtype = SafetensorsDtype::F32;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
// Float data converted to F32, F16 or BF16 (round to nearest even).
SafetensorsWriteTensor safetensors_tensor_from_f32(const std::string& name, const std::vector<int64_t>& shape,
                                                   SafetensorsDtype dtype, const float* data);
// The file image: header JSON (tensors in the given order, "__metadata__" first when non-empty) padded
// with spaces so that the data starts at a multiple of 8, then the data in the given order.
std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsWriteTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});  // atomic

}  // namespace lowbit
