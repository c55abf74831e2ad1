// format_roundtrip_cuda.cu — format_roundtrip_cuda over the MX, NVFP4 and INT-grid launchers.
#include "formats/cuda/format_roundtrip_cuda.cuh"

#include <string>

#include "formats/cuda/int_quantize.cuh"
#include "formats/cuda/mx_quantize.cuh"
#include "formats/cuda/nvfp4_quantize.cuh"

namespace lowbit {

bool format_roundtrip_cuda_supported(const FormatInfo& f) { return f.kind != FormatKind::gguf; }

void format_roundtrip_cuda(const FormatInfo& f, const FormatOptions& opt, const float* x, int64_t rows, int64_t cols,
                           float* out, FormatRoundtripScratch& s, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    const QuantizeOptions qo{opt.axis, opt.rounding, opt.seed};
    switch (f.kind) {
        case FormatKind::mx: {
            uint8_t* codes = s.codes.grow(mx_code_bytes(f.mx_element, rows, cols));
            uint8_t* scales = s.scales.grow(mx_scale_bytes(rows, cols));
            mx_quantize_cuda(x, rows, cols, f.mx_element, opt.scale_rule, qo, codes, scales, stream);
            mx_dequantize_cuda(codes, scales, rows, cols, f.mx_element, opt.axis, out, stream);
            return;
        }
        case FormatKind::nvfp4: {
            uint8_t* codes = s.codes.grow(nvfp4_code_bytes(rows, cols));
            uint8_t* scales = s.scales.grow(nvfp4_scale_bytes(rows, cols));
            float* ts = s.tensor_scale.grow(1);
            nvfp4_quantize_cuda(x, rows, cols, qo, codes, scales, ts, stream);
            nvfp4_dequantize_cuda(codes, scales, ts, rows, cols, opt.axis, out, stream);
            return;
        }
        case FormatKind::int_grid: {
            const IntGridFormat g{f.int_bits, opt.group, opt.sym};
            const int64_t inner = opt.axis == 1 ? cols : rows, outer = opt.axis == 1 ? rows : cols;
            const int64_t groups = outer * (inner / int_group_size(g, inner));
            uint8_t* q = s.codes.grow(rows * cols);
            auto* params = reinterpret_cast<IntGridParams*>(s.scales.grow(groups * int64_t(sizeof(IntGridParams))));
            int_quantize_cuda(x, rows, cols, g, qo, q, params, stream);
            int_dequantize_cuda(q, params, rows, cols, g, opt.axis, out, stream);
            return;
        }
        case FormatKind::gguf: break;
    }
    cuda_usage_error(std::string("format ") + f.name + " has no CUDA quantizer (GGUF block formats are CPU only); " +
                     "quantize activations with an MX, NVFP4 or INT format");
}

}  // namespace lowbit
