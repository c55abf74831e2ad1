// fuzz_npy.cpp — libFuzzer target of the .npy parser: any byte string must parse or raise lowbit::Error;
// never crash, hang, overflow or leak (run under ASan/UBSan by scripts/fuzz.sh).
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    try {
        lowbit::NpyArray a = lowbit::npy_parse(bytes, "fuzz.npy");
        volatile float sink = a.data.empty() ? 0.0f : a.data[0];
        (void)sink;
    } catch (const lowbit::Error&) {
    }
    return 0;
}
