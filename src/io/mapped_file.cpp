// mapped_file.cpp — mmap/munmap behind MappedFile (read-only, private mapping).
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace lowbit {

MappedFile MappedFile::map(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(ErrorKind::input, "{}: cannot open for reading: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(ErrorKind::input, "{}: not a regular file", path);
    }
    MappedFile m;
    m.size_ = uint64_t(st.st_size);
    if (m.size_ > 0) {
        void* p = ::mmap(nullptr, size_t(m.size_), PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            fail(ErrorKind::input, "{}: cannot memory-map {} bytes: {}", path, m.size_, std::strerror(err));
        }
        m.map_ = p;
        m.data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping stays valid after close
    return m;
}

MappedFile MappedFile::from_bytes(std::vector<uint8_t> bytes) {
    MappedFile m;
    m.owned_ = std::move(bytes);
    m.data_ = m.owned_.data();
    m.size_ = m.owned_.size();
    return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        release();
        // A moved std::vector keeps its buffer, so data_ stays valid for owned bytes.
        owned_ = std::move(o.owned_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        map_ = std::exchange(o.map_, nullptr);
    }
    return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
    if (map_) ::munmap(map_, size_t(size_));
    map_ = nullptr;
    data_ = nullptr;
    size_ = 0;
    owned_.clear();
}

}  // namespace lowbit
