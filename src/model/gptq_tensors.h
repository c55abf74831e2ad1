// gptq_tensors.h — the tensors of one GPTQ-packed linear layer in an HF checkpoint (interop.md §6; the
// layout of GPTQModel's `gptq` / `gptq_v2` checkpoint formats, which transformers and vLLM load), packed
// (ptq/export_safetensors.h writes them) and dequantized (ModelReader loads them): one layout, one place.
//
// K = in_features, N = out_features, G = inputs per group (K for one group per output channel, which
// quantization_config writes as group_size −1), n_groups = ⌈K/G⌉:
//   qweight  int32 [⌈K·bits/32⌉, N]   column n is a little-endian bit stream of the codes q[0..K) of output
//                                     channel n, LSB first: code k at bits [bits·k, bits·k + bits) of the
//                                     stream, word w holding stream bits [32w, 32w + 32). For 2, 4 and 8 bits
//                                     this is "32/bits codes per word"; for 3 bits it is GPTQ's
//                                     32-codes-in-3-words scheme (code 10 straddles words 0 and 1, code 21
//                                     words 1 and 2) — the same stream.
//   qzeros   int32 [n_groups, ⌈N·bits/32⌉]  row g is the same bit stream of the stored zero points of the N
//                                     outputs of group g, packed along the *output* dimension.
//   scales   fp16  [n_groups, N]
//   g_idx    int32 [K]                 the group of input k (k / G when groups are contiguous; act-order
//                                     checkpoints permute it). Optional on load (then k / G).
// Dequantization (FP32): w[n, k] = scale[g, n] · (q[k, n] − z[g, n]), g = g_idx[k].
//
// Zero convention. checkpoint_format "gptq" (v1, the default of GPTQ, AutoGPTQ and GPTQModel) stores z − 1:
// a loader unpacks each field and adds 1 (AutoGPTQ's kernels: `zeros + 1`; GPTQModel's v1→v2 conversion
// adds 0x11111111 for 4 bits to the packed word). A zero point of 0 is therefore not representable in v1:
// its field would hold 2^bits − 1, which the field-wise reading (lowbit's, AutoGPTQ's) turns into 2^bits
// and GPTQModel's word-wise addition carries into the next field. lowbit's exporter refuses it
// (use v2 or a symmetric grid). "gptq_v2" stores z itself (GPTQModel; vLLM's gptq_gemm since PR #26092).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit {

enum class GptqZeroConvention : uint8_t {
    v1,  // checkpoint_format "gptq": qzeros hold z − 1
    v2,  // checkpoint_format "gptq_v2": qzeros hold z
};
const char* gptq_checkpoint_format(GptqZeroConvention z);  // "gptq" | "gptq_v2"
// From quantization_config's checkpoint_format ("" means gptq); false for other formats (marlin, bitblas…).
bool parse_gptq_checkpoint_format(const std::string& s, GptqZeroConvention* out);

bool gptq_bits_supported(int bits);  // 2, 3, 4, 8

// Packs n values (each < 2^bits) as the LSB-first bit stream above: value i = values[i·value_stride], word
// j = words[j·word_stride]; ⌈n·bits/32⌉ words are written (unused high bits of the last one are 0).
void gptq_pack_stream(const uint32_t* values, int64_t value_stride, int64_t n, int bits, int32_t* words,
                      int64_t word_stride);
// Value i of such a stream.
uint32_t gptq_stream_value(const int32_t* words, int64_t word_stride, int64_t i, int bits);

struct GptqLinear {
    int bits = 4;
    int64_t in_features = 0, out_features = 0;  // K, N
    int64_t group_size = 0;                     // G (K: one group per output channel)
    std::vector<int32_t> qweight;               // [qweight_rows(), N]
    std::vector<int32_t> qzeros;                // [n_groups(), qzeros_cols()]
    std::vector<float> scales;                  // [n_groups(), N], FP16 values (written and read as F16)
    std::vector<int32_t> g_idx;                 // [K]

    int64_t n_groups() const { return (in_features + group_size - 1) / group_size; }
    int64_t qweight_rows() const { return (in_features * bits + 31) / 32; }
    int64_t qzeros_cols() const { return (out_features * bits + 31) / 32; }
};

// Packs a linear from its codes [N, K] (row n = output channel, inputs in their original order), zero
// points z [N, n_groups] (0 ≤ z ≤ 2^bits − 1; ≥ 1 for v1) and FP16-representable scales [N, n_groups],
// with g_idx = k / G. Error(usage) for bits GPTQ cannot pack, codes or zeros out of range.
GptqLinear gptq_pack_linear(int bits, int64_t out_features, int64_t in_features, int64_t group_size,
                            const uint8_t* codes, const int32_t* zeros, const float* scales, GptqZeroConvention zc);

// Checks the sizes of every tensor against bits, K, N and G, and g_idx's range; Error(input) naming `what`
// (e.g. "model.layers.3.self_attn.q_proj in DIR") and the tensor.
void check_gptq_linear(const GptqLinear& t, const std::string& what);

// w [N, K] row-major (nn.Linear order), FP32, by the formula above; checks first (check_gptq_linear).
std::vector<float> gptq_dequantize(const GptqLinear& t, GptqZeroConvention zc, const std::string& what);

}  // namespace lowbit
