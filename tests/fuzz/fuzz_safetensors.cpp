// fuzz_safetensors.cpp — libFuzzer target of the safetensors reader: any byte string must parse or raise
// lowbit::Error; never crash, hang, overflow or leak (run under ASan/UBSan by scripts/fuzz.sh). A file that
// parses has every tensor's bytes touched and the float ones converted.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    try {
        lowbit::SafetensorsFile f = lowbit::SafetensorsFile::parse(std::move(bytes), "fuzz.safetensors");
        volatile size_t sink = f.metadata().size();
        for (const auto& t : f.tensors()) {
            auto span = f.tensor_bytes(t);
            if (!span.empty()) sink = sink + span[0];
            try {
                std::vector<float> v = f.tensor_to_f32(t);
                if (!v.empty()) sink = sink + size_t(v[0] != 0.0f);
            } catch (const lowbit::Error&) {  // dtypes without a float conversion
            }
        }
        (void)sink;
    } catch (const lowbit::Error&) {
    }
    return 0;
}
