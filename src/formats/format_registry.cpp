// format_registry.cpp — the table of formats and the dispatch of quantize→dequantize by name.
#include "formats/format_registry.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/nvfp4.h"

namespace lowbit {

const std::vector<FormatInfo>& all_formats() {
    static const std::vector<FormatInfo> formats = [] {
        std::vector<FormatInfo> f = {
            {"mxfp4", FormatKind::mx, MxElement::e2m1, 0, {}, "OCP MX: E2M1 elements, E8M0 scale per 32"},
            {"mxfp6_e2m3", FormatKind::mx, MxElement::e2m3, 0, {}, "OCP MX: E2M3 elements, E8M0 scale per 32"},
            {"mxfp6_e3m2", FormatKind::mx, MxElement::e3m2, 0, {}, "OCP MX: E3M2 elements, E8M0 scale per 32"},
            {"mxfp8_e4m3", FormatKind::mx, MxElement::e4m3, 0, {}, "OCP MX: E4M3 elements, E8M0 scale per 32"},
            {"mxfp8_e5m2", FormatKind::mx, MxElement::e5m2, 0, {}, "OCP MX: E5M2 elements, E8M0 scale per 32"},
            {"mxint8", FormatKind::mx, MxElement::int8, 0, {}, "OCP MX: INT8 elements (k/64), E8M0 scale per 32"},
            {"nvfp4", FormatKind::nvfp4, {}, 0, {}, "NVIDIA: E2M1 elements, E4M3 scale per 16, FP32 tensor scale"},
            {"int2", FormatKind::int_grid, {}, 2, {}, "GPTQ integer grid, 2 bits, per row or --group G"},
            {"int3", FormatKind::int_grid, {}, 3, {}, "GPTQ integer grid, 3 bits, per row or --group G"},
            {"int4", FormatKind::int_grid, {}, 4, {}, "GPTQ integer grid, 4 bits, per row or --group G"},
            {"int5", FormatKind::int_grid, {}, 5, {}, "GPTQ integer grid, 5 bits, per row or --group G"},
            {"int6", FormatKind::int_grid, {}, 6, {}, "GPTQ integer grid, 6 bits, per row or --group G"},
            {"int7", FormatKind::int_grid, {}, 7, {}, "GPTQ integer grid, 7 bits, per row or --group G"},
            {"int8", FormatKind::int_grid, {}, 8, {}, "GPTQ integer grid, 8 bits, per row or --group G"},
        };
        // The GGUF weight formats lowbit can write, from the type table.
        for (const GgufTypeInfo& t : kGgufTypes)
            if (t.format_name && t.encode) f.push_back({t.format_name, FormatKind::gguf, {}, 0, t.type, t.description});
        return f;
    }();
    return formats;
}

const FormatInfo& find_format(const std::string& name) {
    for (const auto& f : all_formats())
        if (name == f.name) return f;
    std::string names;
    for (const auto& f : all_formats()) names += std::string(names.empty() ? "" : ", ") + f.name;
    fail(ErrorKind::usage, "unknown format '{}'; known formats: {}", name, names);
}

double bits_per_element(const FormatInfo& f, const FormatOptions& opt, int64_t inner) {
    switch (f.kind) {
        case FormatKind::mx: return mx_spec(f.mx_element).bits() + 8.0 / kMxBlock;
        case FormatKind::nvfp4: return 4.0 + 8.0 / kNvfp4Block;
        case FormatKind::int_grid: {
            const double g = double(opt.group > 0 ? opt.group : inner);
            return f.int_bits + (16.0 + (opt.sym ? 0.0 : f.int_bits)) / g;  // fp16 scale + packed zero (GPTQ)
        }
        case FormatKind::gguf: {
            const GgufTypeInfo& t = *gguf_type_info(f.gguf);
            return 8.0 * double(t.block_bytes) / double(t.block_elements);
        }
    }
    return 0;
}

namespace {

void check_gguf_options(const FormatInfo& f, const FormatOptions& opt) {
    if (opt.axis != 1)
        fail(ErrorKind::usage, "{}: GGUF blocks run along rows only (--axis 1); transpose the input instead", f.name);
    if (opt.rounding != Rounding::nearest_even)
        fail(ErrorKind::usage, "{}: GGUF formats use ggml's fixed reference rounding; --rounding does not apply", f.name);
}

void append_f32(std::vector<uint8_t>& out, float v) {
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    out.insert(out.end(), b, b + 4);
}

}  // namespace

std::vector<float> quantize_dequantize(const FormatInfo& f, const float* x, int64_t rows, int64_t cols, const FormatOptions& opt) {
    if (opt.axis != 0 && opt.axis != 1) fail(ErrorKind::usage, "--axis must be 0 or 1, got {}", opt.axis);
    const QuantizeOptions qo{opt.axis, opt.rounding, opt.seed};
    std::vector<float> out(size_t(rows * cols));
    switch (f.kind) {
        case FormatKind::mx: mx_dequantize(mx_quantize(x, rows, cols, f.mx_element, opt.scale_rule, qo), out.data()); break;
        case FormatKind::nvfp4: nvfp4_dequantize(nvfp4_quantize(x, rows, cols, qo), out.data()); break;
        case FormatKind::int_grid:
            int_dequantize(int_quantize(x, rows, cols, IntGridFormat{f.int_bits, opt.group, opt.sym}, qo), out.data());
            break;
        case FormatKind::gguf: {
            check_gguf_options(f, opt);
            auto bytes = gguf_quantize_matrix(f.gguf, x, rows, cols);
            gguf_dequantize_matrix(f.gguf, bytes.data(), rows, cols, out.data());
            break;
        }
    }
    return out;
}

std::vector<uint8_t> quantize_to_bytes(const FormatInfo& f, const float* x, int64_t rows, int64_t cols, const FormatOptions& opt) {
    const QuantizeOptions qo{opt.axis, opt.rounding, opt.seed};
    std::vector<uint8_t> out;
    switch (f.kind) {
        case FormatKind::mx: {
            MxMatrix q = mx_quantize(x, rows, cols, f.mx_element, opt.scale_rule, qo);
            out = f.mx_element == MxElement::e2m1 ? pack_e2m1(q.codes) : q.codes;
            out.insert(out.end(), q.scales.begin(), q.scales.end());
            break;
        }
        case FormatKind::nvfp4: {
            Nvfp4Matrix q = nvfp4_quantize(x, rows, cols, qo);
            out = pack_e2m1(q.codes);
            out.insert(out.end(), q.block_scales.begin(), q.block_scales.end());
            append_f32(out, q.tensor_scale);
            break;
        }
        case FormatKind::int_grid: {
            IntMatrix q = int_quantize(x, rows, cols, IntGridFormat{f.int_bits, opt.group, opt.sym}, qo);
            out = q.q;
            for (const auto& p : q.params) {
                append_f32(out, p.scale);
                append_f32(out, p.zero);
            }
            break;
        }
        case FormatKind::gguf:
            check_gguf_options(f, opt);
            out = gguf_quantize_matrix(f.gguf, x, rows, cols);
            break;
    }
    return out;
}

ErrorStats error_stats(const float* ref, const float* approx, int64_t n) {
    ErrorStats s;
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(approx[i]) && std::isfinite(ref[i])) {
            ++s.nonfinite;
            continue;
        }
        if (!std::isfinite(ref[i])) continue;
        const double d = double(approx[i]) - double(ref[i]);
        err2 += d * d;
        ref2 += double(ref[i]) * double(ref[i]);
        s.max_abs = std::max(s.max_abs, std::fabs(d));
    }
    s.mse = n ? err2 / double(n) : 0;
    s.rmse = std::sqrt(s.mse);
    s.rel_fro = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    s.sqnr_db = err2 > 0 ? 10.0 * std::log10(ref2 / err2) : INFINITY;
    return s;
}

}  // namespace lowbit
