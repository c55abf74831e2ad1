// npy.h — reading and writing NumPy .npy files (format versions 1.0–3.0) holding float32/float64/float16/
// int/uint arrays in C or Fortran order. Values are returned as float32 row-major. Malformed or truncated
// files raise Error(input) naming the file and the problem; writes go to a temporary name, then rename.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace lowbit {

struct NpyArray {
    std::vector<int64_t> shape;
    std::vector<float> data;  // row-major (C order)

    int64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
    int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

// Parses an .npy image held in memory; `name` is used in error messages.
NpyArray npy_parse(const std::vector<uint8_t>& bytes, const std::string& name);
NpyArray npy_read(const std::string& path);
// Reads a file that must hold a 2-D array (a 1-D array is taken as one row).
NpyArray npy_read_matrix(const std::string& path);

std::vector<uint8_t> npy_serialize_f32(const std::vector<int64_t>& shape, const float* data);
// Writes float32, atomically (path.tmp-<pid> then rename).
void npy_write_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
// Writes raw bytes atomically (used by every file writer in lowbit).
void write_file_atomic(const std::string& path, const void* data, size_t size);

// A file written in pieces under a temporary name and renamed into place by commit(): readers never see a
// partial file. Destroyed uncommitted (an error on the way), the temporary file is removed.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(const std::string& path);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
    void write(const void* data, size_t size);
    void commit();

private:
    std::string path_, tmp_;
    FILE* f_ = nullptr;
};
std::vector<uint8_t> read_file(const std::string& path);

}  // namespace lowbit
