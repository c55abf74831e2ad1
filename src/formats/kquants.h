// kquants.h — ggml's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: super-blocks of 256 weights, interop.md §3.11)
// in an unpacked form that post-training quantization can work with: the super-block scales and the
// sub-block scale/min codes are fitted first (kquant_fit), the solver then picks every weight's code on
// that fixed grid (kquant_sub_grid gives each sub-block's affine map, exactly as the decoder computes
// it), and kquant_pack writes the ggml block bytes. A weight is never re-rounded at export.
//
// Field meaning per type (q = the stored code, value = what ggml's dequantize_row_*_K returns):
//   Q2_K  16 sub-blocks of 16; scale[j], min[j] 4-bit; q 0..3:   value = (d·scale[j])·q − (dmin·min[j])
//   Q3_K  16 sub-blocks of 16; scale[j] 6-bit (value scale−32); q 0..7 (low 2 bits + 4·high bit):
//                                                                value = (d·(scale[j] − 32))·(q − 4)
//   Q4_K   8 sub-blocks of 32; scale[j], min[j] 6-bit; q 0..15:  value = (d·scale[j])·q − (dmin·min[j])
//   Q5_K   8 sub-blocks of 32; as Q4_K with q 0..31
//   Q6_K  16 sub-blocks of 16; scale[j] int8 (stored as its bits); q 0..63: value = (d·int8(scale[j]))·(q − 32)
// d and dmin are FP16 bits (dmin unused by Q3_K and Q6_K; min[] unused there too).
#pragma once

#include <cstdint>

#include "formats/gguf_types.h"

namespace lowbit {

constexpr int64_t kQK_K = 256;

struct KQuantScales {
    uint16_t d = 0, dmin = 0;
    uint8_t scale[16] = {};
    uint8_t min[16] = {};
};

struct KQuantSuperBlock {
    KQuantScales s;
    uint8_t q[kQK_K] = {};
};

bool is_kquant(GgufType t);              // Q2_K … Q6_K
int kquant_sub_blocks(GgufType t);       // 16 or 8
int64_t kquant_sub_size(GgufType t);     // 16 or 32
int kquant_max_code(GgufType t);         // 3, 7, 15, 31, 63

// The affine map of sub-block j: value(q) = scale·(float(q) − zero) + offset, bit-exact with the decoder.
struct KQuantSubGrid {
    float scale = 0, zero = 0, offset = 0;
};
KQuantSubGrid kquant_sub_grid(GgufType t, const KQuantScales& s, int j);

// ggml's reference quantizer of one super-block of 256 floats (quantize_row_q*_K_ref when `weights` is
// null; the importance-weighted search of quantize_q*_K — what `llama-quantize --imatrix` runs — when
// `weights` holds 256 non-negative per-element weights), bit for bit.
KQuantSuperBlock kquant_fit(GgufType t, const float* x, const float* weights);

// ggml block bytes (gguf_type_info(t)->block_bytes) ↔ the unpacked form.
void kquant_pack(GgufType t, const KQuantSuperBlock& b, uint8_t* out);
KQuantSuperBlock kquant_unpack(GgufType t, const uint8_t* block);

}  // namespace lowbit
