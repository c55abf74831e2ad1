// mapped_file.h — a read-only view of a whole file's bytes: memory-mapped with POSIX mmap (RAII, unmapped
// when the object dies) or owned bytes from memory (tests, fuzzing). Movable, not copyable. The GGUF and
// safetensors readers parse straight out of the mapping, so a 100 GB model costs no read time up front.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lowbit {

class MappedFile {
public:
    MappedFile() = default;
    // Maps `path` read-only; Error(input) when it cannot be opened or is not a regular file.
    static MappedFile map(const std::string& path);
    static MappedFile from_bytes(std::vector<uint8_t> bytes);

    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }

private:
    void release();

    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
    void* map_ = nullptr;          // mmap base, or nullptr when the bytes are owned
    std::vector<uint8_t> owned_;
};

}  // namespace lowbit
