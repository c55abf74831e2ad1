// gguf_blocks.cpp — the GGUF block codecs, mirroring ggml's `*_ref` quantizers and dequantize_row_* step by
// step in FP32 (interop.md §3.4–3.7), and the F32/F16/BF16 element codecs of GGUF tensors.
#include "formats/gguf_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/bits.h"
#include "formats/element_codec.h"
#include "formats/iq4nl.h"

namespace lowbit {

namespace {

constexpr int kQk = 32;  // elements of the 32-element blocks (ggml's QK4_0, QK8_0, QK_MXFP4, ...)

uint16_t to_fp16(float x) { return gguf_fp16_from_float(x); }
float from_fp16(uint16_t h) { return gguf_fp16_to_float(h); }

// C's float → int conversion as x86-64 executes it (cvttss2si): truncation toward zero, and INT_MIN for
// NaN and values outside int's range — where ggml's `(int8_t)(x + 16.5f)`-style casts would otherwise be
// undefined behaviour in C++.
int trunc_to_int(float x) {
    return x > -2147483904.0f && x < 2147483648.0f ? int(x) : std::numeric_limits<int>::min();
}

// ggml_e8m0_to_fp32_half: 2^(e−128) (e = 0 and 1 are subnormal/min-normal halves).
float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
    return bits_float(bits);
}

uint32_t load_u32_le(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Runs `codec(src_block, dst_block)` over n consecutive blocks of the packed type Block.
template <typename Block, int kElements = kQk, typename Codec>
void each_encoded_block(const float* x, int64_t n_blocks, uint8_t* out, Codec codec) {
    for (int64_t b = 0; b < n_blocks; ++b)
        codec(x + b * kElements, reinterpret_cast<Block*>(out + b * int64_t(sizeof(Block))));
}
template <typename Block, int kElements = kQk, typename Codec>
void each_decoded_block(const uint8_t* blocks, int64_t n_blocks, float* out, Codec codec) {
    for (int64_t b = 0; b < n_blocks; ++b)
        codec(*reinterpret_cast<const Block*>(blocks + b * int64_t(sizeof(Block))), out + b * kElements);
}

void quantize_q4_0(const float* x, BlockQ4_0* y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQk; ++j)
        if (amax < std::fabs(x[j])) {  // first element of largest |x| wins (signed value kept)
            amax = std::fabs(x[j]);
            max = x[j];
        }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    for (int j = 0; j < 16; ++j) {
        const float x0 = x[j] * id, x1 = x[16 + j] * id;
        const uint8_t q0 = uint8_t(std::min(15, int(int8_t(trunc_to_int(x0 + 8.5f)))));
        const uint8_t q1 = uint8_t(std::min(15, int(int8_t(trunc_to_int(x1 + 8.5f)))));
        y->qs[j] = uint8_t(q0 | q1 << 4);
    }
}

void quantize_q4_1(const float* x, BlockQ4_1* y) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQk; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    y->m = to_fp16(min);
    for (int j = 0; j < 16; ++j) {
        const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
        const uint8_t q0 = uint8_t(std::min(15, int(int8_t(trunc_to_int(x0 + 0.5f)))));
        const uint8_t q1 = uint8_t(std::min(15, int(int8_t(trunc_to_int(x1 + 0.5f)))));
        y->qs[j] = uint8_t(q0 | q1 << 4);
    }
}

void quantize_q8_0(const float* x, BlockQ8_0* y) {
    float amax = 0.0f;
    for (int j = 0; j < kQk; ++j) {
        const float a = std::fabs(x[j]);
        amax = amax > a ? amax : a;  // ggml's MAX(amax, a): a NaN stays only until the next element
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    for (int j = 0; j < kQk; ++j) y->qs[j] = int8_t(trunc_to_int(std::round(x[j] * id)));  // half away from zero
}

// The nearest entry of the doubled E2M1 table times d (ggml's best_index_mxfp4: ties keep the first).
uint8_t nearest_e2m1_doubled(float x, float d) {
    int best = 0;
    float best_err = std::fabs(d * float(kMxfp4Doubled[0]) - x);
    for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(d * float(kMxfp4Doubled[k]) - x);
        if (err < best_err) {
            best_err = err;
            best = k;
        }
    }
    return uint8_t(best);
}

void quantize_mxfp4(const float* x, BlockMxfp4* y) {
    float amax = 0.0f;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    // ggml: floorf(log2f(amax)) − 2 + 127 (note: log2f can round up just below a power of two; that is
    // ggml's definition and we keep it).
    // Below 2^-125 ggml's cast to uint8 is undefined; we clamp the byte to 0 there.
    const int e_int = amax > 0.0f ? int(std::floor(std::log2(amax))) - 2 + 127 : 0;
    const uint8_t e = uint8_t(e_int < 0 ? 0 : e_int);
    const float d = e8m0_half(e);
    y->e = e;
    uint8_t q[kQk];
    for (int j = 0; j < kQk; ++j) q[j] = nearest_e2m1_doubled(x[j], d);
    gguf_pack_nibbles32(q, y->qs);
}

// ggml's quantize_row_nvfp4_ref: per 16-element sub-block, the UE4M3 code of amax/6, then nearest codes.
void quantize_nvfp4(const float* x, BlockNvfp4* y) {
    for (int s = 0; s < 4; ++s) {
        const float* xb = x + 16 * s;
        float amax = 0.0f;
        for (int j = 0; j < 16; ++j)
            if (amax < std::fabs(xb[j])) amax = std::fabs(xb[j]);
        y->d[s] = gguf_ue4m3_from_float(amax / 6.0f);
        const float d = gguf_ue4m3_half(y->d[s]);
        for (int j = 0; j < 8; ++j)
            y->qs[8 * s + j] = uint8_t(nearest_e2m1_doubled(xb[j], d) | nearest_e2m1_doubled(xb[8 + j], d) << 4);
    }
}

void quantize_q5_0(const float* x, BlockQ5_0* y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQk; ++j)
        if (amax < std::fabs(x[j])) {  // first element of largest |x| wins (signed value kept)
            amax = std::fabs(x[j]);
            max = x[j];
        }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    uint8_t q[kQk];
    for (int j = 0; j < kQk; ++j) q[j] = uint8_t(std::min(31, int(int8_t(trunc_to_int(x[j] * id + 16.5f)))));
    gguf_pack_q5_codes(q, y->qh, y->qs);
}

void quantize_q5_1(const float* x, BlockQ5_1* y) {
    float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
    for (int j = 0; j < kQk; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = to_fp16(d);
    y->m = to_fp16(min);
    uint8_t q[kQk];
    for (int j = 0; j < kQk; ++j) q[j] = uint8_t(trunc_to_int((x[j] - min) * id + 0.5f));  // no clamp, as ggml
    gguf_pack_q5_codes(q, y->qh, y->qs);
}

// ggml's best_index_int8 over kIq4nlValues: the nearest entry by bisection; ties go to the upper entry.
int iq4nl_nearest(float x) {
    const int8_t* v = kIq4nlValues;
    if (x <= float(v[0])) return 0;
    if (x >= float(v[15])) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < float(v[mid])) hi = mid;
        else lo = mid;
    }
    return x - float(v[hi - 1]) < float(v[hi]) - x ? hi - 1 : hi;
}

// The sums Σw·q·x and Σw·q² of the codes nearest to id·x.
void iq4nl_sums(const float* x, const float* w, float id, float* sumqx, float* sumq2) {
    *sumqx = *sumq2 = 0.0f;
    for (int j = 0; j < kIq4nlBlock; ++j) {
        const float q = float(kIq4nlValues[iq4nl_nearest(id * x[j])]);
        *sumqx += w[j] * q * x[j];
        *sumq2 += w[j] * q * q;
    }
}

// The 5-bit codes of a Q5 block: low nibbles from qs, the 5th bit from the qh mask.
void q5_codes(const uint8_t* qh_bytes, const uint8_t* qs, int q[kQk]) {
    const uint32_t qh = load_u32_le(qh_bytes);
    for (int j = 0; j < 16; ++j) {
        q[j] = int(qs[j] & 0xF) | int((qh >> j) & 1u) << 4;
        q[j + 16] = int(qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
    }
}

void quantize_iq4_nl(const float* x, BlockIq4Nl* y) {
    const Iq4nlBlock b = iq4nl_fit(x, nullptr);
    iq4nl_pack(b, reinterpret_cast<uint8_t*>(y));
}

// F16/BF16 by the element codec: round to nearest even, Inf/NaN kept (Overflow::special).
void encode_16bit(ElementType t, const float* x, int64_t n, uint8_t* out) {
    const ElementSpec spec = element_spec(t);
    for (int64_t k = 0; k < n; ++k) {
        const uint16_t h = uint16_t(encode_element(spec, x[k], Rounding::nearest_even, Overflow::special));
        std::memcpy(out + 2 * k, &h, 2);
    }
}

}  // namespace

uint16_t gguf_fp16_from_float(float x) {
    return uint16_t(encode_element(element_spec(ElementType::fp16), x, Rounding::nearest_even, Overflow::special));
}
float gguf_fp16_to_float(uint16_t h) { return decode_element(element_spec(ElementType::fp16), h); }

float gguf_ue4m3_half(uint8_t code) {
    if (code == 0 || code == 0x7F) return 0.0f;
    const int exp = (code >> 3) & 0xF, man = code & 0x7;
    const float raw = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
    return raw * 0.5f;
}

uint8_t gguf_ue4m3_from_float(float x) {
    if (!(x > 0.0f)) return 0;
    x = std::min(x, 448.0f);
    const uint32_t bits = float_bits(x);
    const int exp = int((bits >> 23) & 0xFF) - 127 + 7;
    if (exp <= 0) {  // subnormal: m·2^-9, m = ⌊x·512 + 0.5⌋ in 1..7
        const int man = std::min(7, int(x * 512.0f + 0.5f));
        return man < 1 ? 0 : uint8_t(man);
    }
    if (exp >= 15) return 0x7E;
    int e = exp, man = int((bits >> 20) & 0x7) + int((bits >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++e >= 15) return 0x7E;
    }
    return uint8_t(e << 3 | man);
}

void gguf_pack_nibbles32(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
}

void gguf_pack_q5_codes(const uint8_t* q, uint8_t* qh, uint8_t* qs) {
    gguf_pack_nibbles32(q, qs);
    uint32_t bits = 0;
    for (int j = 0; j < kQk; ++j) bits |= uint32_t(q[j] >> 4 & 1) << j;
    for (int i = 0; i < 4; ++i) qh[i] = uint8_t(bits >> (8 * i));
}

// quantize_row_iq4_nl_impl with one block per super-block and ntry = 7 (quantize_iq4_nl).
Iq4nlBlock iq4nl_fit(const float* x, const float* weights) {
    constexpr int kTries = 7;
    float sigma2 = 0.0f;
    for (int j = 0; j < kIq4nlBlock; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.0f / float(kIq4nlBlock);
    float w[kIq4nlBlock];
    for (int j = 0; j < kIq4nlBlock; ++j) w[j] = weights ? weights[j] * std::sqrt(sigma2 + x[j] * x[j]) : x[j] * x[j];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kIq4nlBlock; ++j)
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    float d = 0.0f;
    if (amax >= 1e-15f) {  // ggml's GROUP_MAX_EPS; below it the block is all zero
        float sumqx, sumq2;
        iq4nl_sums(x, w, 1.0f / (-max / float(kIq4nlValues[0])), &sumqx, &sumq2);
        d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
        float best = d * sumqx;
        for (int t = -kTries; t <= kTries; ++t) {
            iq4nl_sums(x, w, float(t + kIq4nlValues[0]) / max, &sumqx, &sumq2);
            if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
    }
    Iq4nlBlock b;
    b.d = to_fp16(d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;  // the codes are re-picked with the unrounded scale
    for (int j = 0; j < kIq4nlBlock; ++j) b.q[j] = uint8_t(iq4nl_nearest(id * x[j]));
    return b;
}

float iq4nl_value(uint16_t d, int q) { return from_fp16(d) * float(kIq4nlValues[q]); }

void iq4nl_pack(const Iq4nlBlock& b, uint8_t* out) {
    std::memcpy(out, &b.d, 2);
    gguf_pack_nibbles32(b.q, out + 2);
}

void gguf_encode_q4_0(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ4_0>(x, n_blocks, out, quantize_q4_0);
}
void gguf_encode_q4_1(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ4_1>(x, n_blocks, out, quantize_q4_1);
}
void gguf_encode_q8_0(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ8_0>(x, n_blocks, out, quantize_q8_0);
}
void gguf_encode_q5_0(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ5_0>(x, n_blocks, out, quantize_q5_0);
}
void gguf_encode_q5_1(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockQ5_1>(x, n_blocks, out, quantize_q5_1);
}
void gguf_encode_mxfp4(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockMxfp4>(x, n_blocks, out, quantize_mxfp4);
}
void gguf_encode_nvfp4(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockNvfp4, 64>(x, n_blocks, out, quantize_nvfp4);
}
void gguf_encode_iq4_nl(const float* x, int64_t n_blocks, uint8_t* out) {
    each_encoded_block<BlockIq4Nl>(x, n_blocks, out, quantize_iq4_nl);
}

void gguf_decode_q4_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ4_0>(blocks, n_blocks, out, [](const BlockQ4_0& b, float* y) {
        const float d = from_fp16(b.d);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(int(b.qs[j] & 0xF) - 8) * d;
            y[j + 16] = float(int(b.qs[j] >> 4) - 8) * d;
        }
    });
}

void gguf_decode_q4_1(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ4_1>(blocks, n_blocks, out, [](const BlockQ4_1& b, float* y) {
        const float d = from_fp16(b.d), m = from_fp16(b.m);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(b.qs[j] & 0xF) * d + m;
            y[j + 16] = float(b.qs[j] >> 4) * d + m;
        }
    });
}

void gguf_decode_q5_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ5_0>(blocks, n_blocks, out, [](const BlockQ5_0& b, float* y) {
        const float d = from_fp16(b.d);
        int q[kQk];
        q5_codes(b.qh, b.qs, q);
        for (int j = 0; j < kQk; ++j) y[j] = d * float(q[j] - 16);
    });
}

void gguf_decode_q5_1(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ5_1>(blocks, n_blocks, out, [](const BlockQ5_1& b, float* y) {
        const float d = from_fp16(b.d), m = from_fp16(b.m);
        int q[kQk];
        q5_codes(b.qh, b.qs, q);
        for (int j = 0; j < kQk; ++j) y[j] = d * float(q[j]) + m;
    });
}

void gguf_decode_q8_0(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockQ8_0>(blocks, n_blocks, out, [](const BlockQ8_0& b, float* y) {
        const float d = from_fp16(b.d);
        for (int j = 0; j < kQk; ++j) y[j] = float(b.qs[j]) * d;
    });
}


void gguf_decode_mxfp4(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockMxfp4>(blocks, n_blocks, out, [](const BlockMxfp4& b, float* y) {
        const float d = e8m0_half(b.e);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(kMxfp4Doubled[b.qs[j] & 0xF]) * d;
            y[j + 16] = float(kMxfp4Doubled[b.qs[j] >> 4]) * d;
        }
    });
}

void gguf_decode_nvfp4(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockNvfp4, 64>(blocks, n_blocks, out, [](const BlockNvfp4& b, float* y) {
        for (int s = 0; s < 4; ++s) {
            const float d = gguf_ue4m3_half(b.d[s]);
            for (int j = 0; j < 8; ++j) {
                y[16 * s + j] = float(kMxfp4Doubled[b.qs[8 * s + j] & 0xF]) * d;
                y[16 * s + 8 + j] = float(kMxfp4Doubled[b.qs[8 * s + j] >> 4]) * d;
            }
        }
    });
}

void gguf_decode_iq4_nl(const uint8_t* blocks, int64_t n_blocks, float* out) {
    each_decoded_block<BlockIq4Nl>(blocks, n_blocks, out, [](const BlockIq4Nl& b, float* y) {
        for (int j = 0; j < 16; ++j) {
            y[j] = iq4nl_value(b.d, b.qs[j] & 0xF);
            y[j + 16] = iq4nl_value(b.d, b.qs[j] >> 4);
        }
    });
}

void gguf_encode_f32(const float* x, int64_t n, uint8_t* out) { std::memcpy(out, x, size_t(n) * 4); }
void gguf_decode_f32(const uint8_t* bytes, int64_t n, float* out) { std::memcpy(out, bytes, size_t(n) * 4); }

void gguf_encode_f16(const float* x, int64_t n, uint8_t* out) { encode_16bit(ElementType::fp16, x, n, out); }
void gguf_encode_bf16(const float* x, int64_t n, uint8_t* out) { encode_16bit(ElementType::bf16, x, n, out); }

void gguf_decode_f16(const uint8_t* bytes, int64_t n, float* out) {
    const ElementSpec fp16 = element_spec(ElementType::fp16);
    for (int64_t k = 0; k < n; ++k) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * k, 2);
        out[k] = decode_element(fp16, h);
    }
}

void gguf_decode_bf16(const uint8_t* bytes, int64_t n, float* out) {
    for (int64_t k = 0; k < n; ++k) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * k, 2);
        out[k] = bits_float(uint32_t(h) << 16);  // BF16 is the top half of an FP32: every bit kept
    }
}

}  // namespace lowbit
