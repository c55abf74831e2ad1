// iq4nl.h — ggml's IQ4_NL (blocks of 32, one fp16 scale, 4-bit indices into a fixed non-linear table) in an
// unpacked form a post-training solver can work with: iq4nl_fit gives the scale (and ggml's own codes), the
// solver may then pick every code itself on that grid, iq4nl_value is the decoder's value of a code, and
// iq4nl_pack writes the block bytes. llama.cpp falls back to IQ4_NL for IQ-quant tensors whose rows are not
// a multiple of 256 (formats/gguf_mixes.h).
#pragma once

#include <cstdint>

namespace lowbit {

constexpr int kIq4nlBlock = 32;
// ggml's kvalues_iq4nl.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

struct Iq4nlBlock {
    uint16_t d = 0;              // fp16 bits of the scale
    uint8_t q[kIq4nlBlock] = {};  // indices into kIq4nlValues
};

// ggml's quantize_iq4_nl on one block of 32 — what llama-quantize writes for IQ4_NL, bit for bit: with
// `weights` null the element weights are x², else the 32 importance-matrix columns (quant_weights) scaled by
// sqrt(2·mean(x²) + x²). (quantize_row_iq4_nl_ref is a different, one-shot search that llama-quantize does
// not run; lowbit does not implement it.)
Iq4nlBlock iq4nl_fit(const float* x, const float* weights);

// What dequantize_row_iq4_nl returns for code q under scale bits d: fp16(d)·kIq4nlValues[q], in FP32.
float iq4nl_value(uint16_t d, int q);

// The 18 block bytes (BlockIq4Nl) of an unpacked block; codes must be 0..15.
void iq4nl_pack(const Iq4nlBlock& b, uint8_t* out);

}  // namespace lowbit
