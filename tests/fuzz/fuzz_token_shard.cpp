// fuzz_token_shard.cpp — libFuzzer target of the token-shard reader (io/token_shards.h TokenShard::from_bytes, the
// parser behind TokenShard::open). A shard's
// header carries its own checksum, which random bytes almost never match, so the harness writes the input with a
// correct header checksum (bytes 112..119 recomputed over bytes 0..111) to reach the field checks behind it: every
// input must open, or raise lowbit::Error; an opened shard's ids are read (windows at both ends) and, when its payload
// checksum was verified, must lie in its vocabulary (without the check the reader vouches for the header only). Anything else aborts (ASan/UBSan under scripts/fuzz.sh). The payload checksum is verified, so the
// fuzzer also exercises a payload that disagrees with its header.
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/token_shards.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    if (bytes.size() >= 120) {
        const uint64_t h = lowbit::fnv1a64({bytes.data(), 112});
        std::memcpy(bytes.data() + 112, &h, 8);
    }
    for (const bool verify : {true, false}) {
        try {
            const lowbit::TokenShard s = lowbit::TokenShard::from_bytes(bytes, "fuzz.bin", verify);
            const int64_t n = s.size(), vocab = int64_t(s.info().vocab_size);
            std::vector<int32_t> ids(size_t(std::min<int64_t>(n, 16)));
            if (!ids.empty()) {
                s.read(0, int64_t(ids.size()), ids.data());
                s.read(n - int64_t(ids.size()), int64_t(ids.size()), ids.data());
                if (verify)  // a payload that matches its checksum was written by the writer, which checks every id
                    for (int32_t id : ids)
                        if (id < 0 || id >= vocab) std::abort();
            }
        } catch (const lowbit::Error& e) {
            if (std::string(e.what()).empty()) std::abort();
        } catch (...) {
            std::abort();
        }
    }
    return 0;
}
