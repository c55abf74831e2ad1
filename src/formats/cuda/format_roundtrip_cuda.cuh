// format_roundtrip_cuda.cuh — quantize → dequantize of a row-major FP32 matrix on the GPU in any block
// format that has CUDA quantizers (MX elements, NVFP4, INT grids), bit-identical to the CPU's
// quantize_dequantize (formats/format_registry.h) because each step is (the launchers are tested bit for
// bit against their CPU references). Used for activation quantization in the model's fake-quant linears.
// GGUF block formats have no CUDA quantizer: asking for one is Error(usage).
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cstdint>

#include "formats/format_registry.h"

namespace lowbit {

// Whether format_roundtrip_cuda supports `f`.
bool format_roundtrip_cuda_supported(const FormatInfo& f);

// Device scratch for the codes and scales, grown on demand; one per stream.
struct FormatRoundtripScratch {
    DeviceBuffer<uint8_t> codes, scales;
    DeviceBuffer<float> tensor_scale;  // NVFP4
};

// out [rows, cols] = dequantize(quantize(x)) on `stream`; out may alias x. x and out: device, 16-byte aligned.
void format_roundtrip_cuda(const FormatInfo& f, const FormatOptions& opt, const float* x, int64_t rows, int64_t cols,
                           float* out, FormatRoundtripScratch& scratch, cudaStream_t stream);

}  // namespace lowbit
