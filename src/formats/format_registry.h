// format_registry.h — every block format lowbit knows, by name, behind one quantize→dequantize entry point
// (used by the CLI, the demo table and the cross-checks), plus error statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf_types.h"
#include "formats/int_grid.h"
#include "formats/mx_block.h"

namespace lowbit {

enum class FormatKind : uint8_t { mx, nvfp4, int_grid, gguf };

struct FormatInfo {
    const char* name;
    FormatKind kind;
    MxElement mx_element;   // kind == mx
    int int_bits;           // kind == int_grid
    GgufType gguf;          // kind == gguf
    const char* description;
};

// The default shared-scale rule of MX formats (chosen by measurement: docs/formats.md).
constexpr ScaleRule kDefaultScaleRule = ScaleRule::midmax;

const std::vector<FormatInfo>& all_formats();
// Looks a format up by name; Error(usage) listing the valid names when unknown.
const FormatInfo& find_format(const std::string& name);

struct FormatOptions {
    int axis = 1;
    int64_t group = 0;        // int grids: 0 = per row
    bool sym = false;         // int grids
    ScaleRule scale_rule = kDefaultScaleRule;
    Rounding rounding = Rounding::nearest_even;
    uint64_t seed = 0;
};

// Storage cost in bits per element (payload + scales), for a matrix whose blocked dimension is `inner`.
double bits_per_element(const FormatInfo& f, const FormatOptions& opt, int64_t inner);

// Quantizes the row-major rows × cols matrix x and returns its dequantized values (row-major).
std::vector<float> quantize_dequantize(const FormatInfo& f, const float* x, int64_t rows, int64_t cols, const FormatOptions& opt);

// The packed bytes of a format (for byte-exact comparisons with other implementations):
// gguf: the ggml blocks, row by row; mx/nvfp4: element codes (FP4 packed two per byte) followed by the
// scale bytes (nvfp4: then the 4-byte FP32 tensor scale); int: codes, then (scale, zero) FP32 pairs.
std::vector<uint8_t> quantize_to_bytes(const FormatInfo& f, const float* x, int64_t rows, int64_t cols, const FormatOptions& opt);

struct ErrorStats {
    double mse = 0, rmse = 0, max_abs = 0, rel_fro = 0, sqnr_db = 0;
    int64_t nonfinite = 0;  // outputs that are NaN/Inf where the input was finite
};
ErrorStats error_stats(const float* ref, const float* approx, int64_t n);

}  // namespace lowbit
