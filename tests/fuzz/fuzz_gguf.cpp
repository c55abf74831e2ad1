// fuzz_gguf.cpp — libFuzzer target of the GGUF reader: any byte string must parse or raise lowbit::Error;
// never crash, hang, overflow or leak (run under ASan/UBSan by scripts/fuzz.sh). A file that parses is
// also walked: every metadata value rendered, every getter tried, every tensor's bytes touched and the
// decodable ones dequantized.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    try {
        lowbit::GgufFile g = lowbit::GgufFile::parse(std::move(bytes), "fuzz.gguf");
        volatile size_t sink = 0;
        for (const auto& [key, value] : g.metadata()) {
            sink = sink + value.to_string().size();
            // Each getter either returns or raises Error(input) for a type mismatch.
            try { sink = sink + size_t(g.get_int(key)); } catch (const lowbit::Error&) {}
            try { sink = sink + size_t(g.get_float(key) != 0.0); } catch (const lowbit::Error&) {}
            try { sink = sink + g.get_string_array(key).size(); } catch (const lowbit::Error&) {}
            try { sink = sink + g.get_float_array(key).size(); } catch (const lowbit::Error&) {}
            try { sink = sink + g.get_int_array(key).size(); } catch (const lowbit::Error&) {}
        }
        for (const auto& t : g.tensors()) {
            auto span = g.tensor_bytes(t);
            if (!span.empty()) sink = sink + span[span.size() - 1];
            if (lowbit::gguf_type_can_dequantize(t.type) && t.n_bytes <= (1u << 20)) {
                std::vector<float> f = g.tensor_to_f32(t);
                if (!f.empty()) sink = sink + size_t(f.back() != 0.0f);
            }
        }
        (void)sink;
    } catch (const lowbit::Error&) {
    }
    return 0;
}
