// kquants.cpp — ggml's K-quants (Q2_K … Q6_K, interop.md §3.11): the byte layout of a super-block (bit
// planes of the codes, packed sub-block scales), ggml's reference quantizers and their importance-weighted
// variants (ggml-quants.c: quantize_row_q*_K_ref, quantize_row_q*_K_impl and the searches make_qkx2_quants,
// make_q3_quants, make_qx_quants, make_qp_quants), and the decoders. Every search repeats ggml's FP32
// arithmetic in ggml's operation order (the build has no FMA contraction, as ggml's x86-64 build), so the
// bytes are ggml's bit for bit. Integer conversions that C leaves to the implementation (int → int8/uint8)
// wrap as GCC does; they only matter for degenerate blocks, but they decide those bytes too.
#include "formats/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bits.h"
#include "core/error.h"

namespace lowbit {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group counts as all zero

// ggml's nearest_int: round half to even by adding 1.5·2^23 and reading the mantissa. Exact for
// |x| < 2^22; other inputs (and NaN/Inf) give ggml's values, which the same bit operations reproduce.
int nearest_int(float x) { return int(float_bits(x + 12582912.0f) & 0x007FFFFFu) - 0x00400000; }

int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// One bit plane of the codes: element e keeps `width` bits at byte offset + span·(e / (span·k)) + e % span,
// shifted by width·((e % (span·k)) / span), with k = 8 / width elements per byte. This one rule gives
// every K-quant's interleave (dequantize_row_q*_K): Q2_K qs = {2 bits, span 32}, Q4_K qs = {4, 32},
// Q6_K ql = {4, 64}, Q6_K qh = {2, 32}, the high bits of Q3_K (hmask) and Q5_K (qh) = {1, 32}.
struct BitPlane {
    int offset = -1;  // < 0: no plane
    int width = 0;
    int span = 0;
    int bytes() const { return int(kQK_K) * width / 8; }
    int byte_of(int e) const { return offset + span * (e / (span * (8 / width))) + e % span; }
    int shift_of(int e) const { return width * ((e % (span * (8 / width))) / span); }
};

struct KQuantTraits {
    int sub_blocks, sub_size, max_code;
    bool affine;     // value (d·scale)·q − dmin·min (Q2_K, Q4_K, Q5_K); else (d·s)·(q − code_zero)
    int code_zero;   // Q3_K 4, Q6_K 32
    BitPlane low, high;
    int d_offset, dmin_offset;  // dmin_offset < 0: no dmin
};

const KQuantTraits& traits(GgufType t) {
    static const KQuantTraits q2{16, 16, 3, true, 0, {offsetof(BlockQ2_K, qs), 2, 32}, {}, offsetof(BlockQ2_K, d),
                                 offsetof(BlockQ2_K, dmin)};
    static const KQuantTraits q3{16, 16, 7, false, 4, {offsetof(BlockQ3_K, qs), 2, 32},
                                 {offsetof(BlockQ3_K, hmask), 1, 32}, offsetof(BlockQ3_K, d), -1};
    static const KQuantTraits q4{8, 32, 15, true, 0, {offsetof(BlockQ4_K, qs), 4, 32}, {}, offsetof(BlockQ4_K, d),
                                 offsetof(BlockQ4_K, dmin)};
    static const KQuantTraits q5{8, 32, 31, true, 0, {offsetof(BlockQ5_K, qs), 4, 32}, {offsetof(BlockQ5_K, qh), 1, 32},
                                 offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    static const KQuantTraits q6{16, 16, 63, false, 32, {offsetof(BlockQ6_K, ql), 4, 64},
                                 {offsetof(BlockQ6_K, qh), 2, 32}, offsetof(BlockQ6_K, d), -1};
    switch (t) {
        case GgufType::Q2_K: return q2;
        case GgufType::Q3_K: return q3;
        case GgufType::Q4_K: return q4;
        case GgufType::Q5_K: return q5;
        case GgufType::Q6_K: return q6;
        default: fail(ErrorKind::usage, "{} is not a K-quant", gguf_type_label(t));
    }
}

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The sub-block scale (and min) codes ↔ their bytes, as ggml's quantizers write them and its decoders read
// them. The writer ORs the fields in ggml's order without masking, so a code out of range (which only
// ggml's own wrap-around can produce, see fit_*) spills into its neighbours exactly as in ggml; the
// 12/16 scale bytes and the fields are in one-to-one correspondence, so unpack(pack(s)) is the
// canonical form of whatever ggml wrote.
void pack_scales(GgufType t, const KQuantScales& s, uint8_t* block) {
    switch (t) {
        case GgufType::Q2_K:
            for (int j = 0; j < 16; ++j) block[offsetof(BlockQ2_K, scales) + j] = uint8_t(s.scale[j] | s.min[j] << 4);
            break;
        case GgufType::Q3_K: {  // low nibbles in bytes 0–7 (j < 8) or their high nibbles; top 2 bits in 8–11
            uint8_t* b = block + offsetof(BlockQ3_K, scales);
            std::memset(b, 0, 12);
            for (int j = 0; j < 16; ++j) {
                b[j % 8] |= uint8_t((s.scale[j] & 0xF) << (4 * (j / 8)));
                b[8 + j % 4] |= uint8_t((s.scale[j] >> 4) << (2 * (j / 4)));
            }
            break;
        }
        case GgufType::Q4_K:
        case GgufType::Q5_K: {  // ggml's get_scale_min_k4 layout
            uint8_t* b = block + offsetof(BlockQ4_K, scales);
            for (int j = 0; j < 4; ++j) {
                b[j] = s.scale[j];
                b[j + 4] = s.min[j];
            }
            for (int j = 4; j < 8; ++j) {
                b[j + 4] = uint8_t((s.scale[j] & 0xF) | (s.min[j] & 0xF) << 4);
                b[j - 4] = uint8_t(b[j - 4] | (s.scale[j] >> 4) << 6);
                b[j] = uint8_t(b[j] | (s.min[j] >> 4) << 6);
            }
            break;
        }
        case GgufType::Q6_K: std::memcpy(block + offsetof(BlockQ6_K, scales), s.scale, 16); break;
        default: break;
    }
}

void unpack_scales(GgufType t, const uint8_t* block, KQuantScales& s) {
    switch (t) {
        case GgufType::Q2_K:
            for (int j = 0; j < 16; ++j) {
                const uint8_t b = block[offsetof(BlockQ2_K, scales) + j];
                s.scale[j] = b & 0xF;
                s.min[j] = b >> 4;
            }
            break;
        case GgufType::Q3_K: {
            const uint8_t* b = block + offsetof(BlockQ3_K, scales);
            for (int j = 0; j < 16; ++j)
                s.scale[j] = uint8_t((b[j % 8] >> (4 * (j / 8)) & 0xF) | (b[8 + j % 4] >> (2 * (j / 4)) & 3) << 4);
            break;
        }
        case GgufType::Q4_K:
        case GgufType::Q5_K: {
            const uint8_t* b = block + offsetof(BlockQ4_K, scales);
            for (int j = 0; j < 8; ++j) {
                if (j < 4) {
                    s.scale[j] = b[j] & 63;
                    s.min[j] = b[j + 4] & 63;
                } else {
                    s.scale[j] = uint8_t((b[j + 4] & 0xF) | (b[j - 4] >> 6) << 4);
                    s.min[j] = uint8_t((b[j + 4] >> 4) | (b[j] >> 6) << 4);
                }
            }
            break;
        }
        case GgufType::Q6_K: std::memcpy(s.scale, block + offsetof(BlockQ6_K, scales), 16); break;
        default: break;
    }
}

void write_block(GgufType t, const KQuantSuperBlock& b, uint8_t* out) {
    const KQuantTraits& k = traits(t);
    std::memset(out, 0, size_t(gguf_type_info(t)->block_bytes));
    store_u16(out + k.d_offset, b.s.d);
    if (k.dmin_offset >= 0) store_u16(out + k.dmin_offset, b.s.dmin);
    pack_scales(t, b.s, out);
    for (int e = 0; e < kQK_K; ++e) {
        const int q = b.q[e];
        out[k.low.byte_of(e)] |= uint8_t((q & ((1 << k.low.width) - 1)) << k.low.shift_of(e));
        if (k.high.offset >= 0) out[k.high.byte_of(e)] |= uint8_t((q >> k.low.width) << k.high.shift_of(e));
    }
}

// Scale codes as ggml's quantizer chose them (possibly out of range) → the fields its decoder reads back.
KQuantScales canonical_scales(GgufType t, const KQuantScales& raw) {
    uint8_t block[256] = {};
    pack_scales(t, raw, block);
    KQuantScales s;
    s.d = raw.d;
    s.dmin = raw.dmin;
    unpack_scales(t, block, s);
    return s;
}

// --- ggml's searches ------------------------------------------------------------------------------------

// make_qkx2_quants (identical to make_qkx3_quants when weights are given): an affine fit scale·L + min with
// min ≤ 0 and L in 0..nmax, minimizing Σ w·|err| (use_mad) or Σ w·err² over nstep + 1 trial scales.
// Writes L, returns the scale and sets *neg_min = −min.
float search_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        std::fill(L, L + n, uint8_t(0));
        *neg_min = -min;
        return 0.0f;
    }
    const auto error_of = [&](float scale, float mn, const uint8_t* l) {
        float err = 0;
        for (int i = 0; i < n; ++i) {
            float diff = scale * float(l[i]) + mn - x[i];
            diff = use_mad ? std::fabs(diff) : diff * diff;
            err += w[i] * diff;
        }
        return err;
    };
    float iscale = float(nmax) / (max - min);
    float scale = 1 / iscale;
    for (int i = 0; i < n; ++i) L[i] = uint8_t(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float best_error = error_of(scale, min, L);
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = uint8_t(l);
            sum_l += w[i] * float(l);
            sum_l2 += w[i] * float(l) * float(l);
            sum_xl += w[i] * float(l) * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            const float cur_error = error_of(this_scale, this_min, Laux);
            if (cur_error < best_error) {
                std::copy(Laux, Laux + n, L);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

// make_qx_quants with rmse_type 1: a symmetric fit scale·(L − nmax), L in 0..2·nmax − 1, weights w (x²
// when null), the best of 19 trial scales by Σw·x·l / Σw·l². Writes L, returns the scale.
float search_symmetric(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, uint8_t(0));
        return 0.0f;
    }
    const auto level = [&](float iscale, int i) { return clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1); };
    const auto sums = [&](float iscale, float* sumlx, float* suml2) {
        *sumlx = *suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const float l = float(level(iscale, i));
            const float w = qw ? qw[i] : x[i] * x[i];
            *sumlx += w * x[i] * l;
            *suml2 += w * l * l;
        }
    };
    float iscale = float(-nmax) / max;
    for (int i = 0; i < n; ++i) L[i] = uint8_t(level(iscale, i) + nmax);
    float sumlx, suml2;
    sums(iscale, &sumlx, &suml2);
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(float(nmax) + 0.1f * float(is)) / max;
        sums(iscale, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = uint8_t(level(iscale, i) + nmax);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// make_q3_quants with do_rmse: a symmetric fit with weights x², refined one element at a time (up to 5
// passes) while Σ(w·x·l)²/Σw·l² grows. Writes L in 0..2·nmax − 1, returns the scale.
float search_symmetric_refined(int n, int nmax, const float* x, uint8_t* L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, uint8_t(0));
        return 0.0f;
    }
    const float iscale = float(-nmax) / max;
    int l[32];
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        l[i] = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * float(l[i]);
        suml2 += w * float(l[i]) * float(l[i]);
    }
    for (int pass = 0; pass < 5; ++pass) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * float(l[i]);
            if (slx > 0) {
                float sl2 = suml2 - w * float(l[i]) * float(l[i]);
                const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != l[i]) {
                    slx += w * x[i] * float(new_l);
                    sl2 += w * float(new_l) * float(new_l);
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = uint8_t(l[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// make_qp_quants: codes L in 0..nmax for n non-negative values (the sub-block scales or mins) under one
// scale, weighted by qw: the best of 9 trial scales, then up to 5 passes of one-element refinement.
// L is uint8 as in ggml (a negative level wraps, and the sums then use the wrapped value as ggml does).
float search_positive(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];  // ggml's MAX(max, x[i])
    if (max < kGroupMaxEps) {
        std::fill(L, L + n, uint8_t(0));
        return 0.0f;
    }
    float iscale = float(nmax) / max;
    for (int i = 0; i < n; ++i) L[i] = uint8_t(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * float(L[i]);
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * float(is) + float(nmax)) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * float(l);
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = uint8_t(l);
        sumlx += qw[i] * x[i] * float(l);
        suml2 += qw[i] * float(l) * float(l);
    }
    for (int pass = 0; pass < 5; ++pass) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * float(L[i]);
            float sl2 = suml2 - w * float(L[i]) * float(L[i]);
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != int(L[i])) {
                    slx += w * x[i] * float(new_l);
                    sl2 += w * float(new_l) * float(new_l);
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = uint8_t(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The importance weights of quantize_row_q*_K_impl: quant_weights·sqrt(sigma2 + x²) over one super-block;
// also the sum of each sub-block's weights.
void imatrix_weights(const float* x, const float* qw, float sigma2, int sub_size, float* w, float* sub_sums) {
    for (int j = 0; j < kQK_K / sub_size; ++j) {
        float sum = 0;
        for (int l = 0; l < sub_size; ++l) {
            const int e = j * sub_size + l;
            w[e] = qw[e] * std::sqrt(sigma2 + x[e] * x[e]);
            sum += w[e];
        }
        sub_sums[j] = sum;
    }
}

float sum_squares(const float* x, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}

// --- the quantizers: scale codes as ggml chooses them (KQuantScales, raw), then the codes ---------------

// Every code re-rounded on its sub-block's final grid (the last step of every K-quant quantizer); a
// sub-block whose scale factor is 0 keeps the codes of its search.
void requantize(GgufType t, const float* x, KQuantSuperBlock& b) {
    const KQuantTraits& k = traits(t);
    for (int j = 0; j < k.sub_blocks; ++j) {
        const KQuantSubGrid g = kquant_sub_grid(t, b.s, j);
        if (g.scale == 0.0f) continue;
        for (int l = 0; l < k.sub_size; ++l) {
            const int e = j * k.sub_size + l;
            // (x + dmin·min)/d for the affine types, x/d for the symmetric ones (offset −0 adds nothing).
            const int lvl = nearest_int((x[e] - g.offset) / g.scale) + int(g.zero);
            b.q[e] = uint8_t(clamp_int(lvl, 0, k.max_code));
        }
    }
}

KQuantSuperBlock finish(GgufType t, const float* x, const KQuantScales& raw, KQuantSuperBlock& b) {
    b.s = canonical_scales(t, raw);
    requantize(t, x, b);
    return b;
}

// Q2_K and Q4_K/Q5_K share their shape: affine sub-blocks, scale and min codes under d and dmin.
KQuantSuperBlock fit_affine(GgufType t, const float* x, const float* qw) {
    const KQuantTraits& k = traits(t);
    const int n = k.sub_size, nmax = k.max_code;
    KQuantSuperBlock b;
    KQuantScales raw;
    float scales[16], mins[16], w[kQK_K];
    if (qw) {  // quantize_row_q*_K_impl
        const float sigma2 = t == GgufType::Q2_K ? sum_squares(x, kQK_K) / float(kQK_K)
                                                 : 2 * sum_squares(x, kQK_K) / float(kQK_K);
        float sw[16];
        imatrix_weights(x, qw, sigma2, n, w, sw);
        for (int j = 0; j < k.sub_blocks; ++j)
            scales[j] = search_affine(n, nmax, x + n * j, w + n * j, b.q + n * j, &mins[j], -0.9f, 0.05f, 36, false);
        const int code_max = t == GgufType::Q2_K ? 15 : 63;
        const float d = search_positive(k.sub_blocks, code_max, scales, raw.scale, sw);
        const float m = search_positive(k.sub_blocks, code_max, mins, raw.min, sw);
        if (t == GgufType::Q5_K)  // Q5_K clamps the codes to 63, Q2_K and Q4_K store them as they are
            for (int j = 0; j < k.sub_blocks; ++j) {
                raw.scale[j] = std::min<uint8_t>(63, raw.scale[j]);
                raw.min[j] = std::min<uint8_t>(63, raw.min[j]);
            }
        raw.d = gguf_fp16_from_float(d);
        raw.dmin = gguf_fp16_from_float(m);
        return finish(t, x, raw, b);
    }
    // quantize_row_q*_K_ref
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < k.sub_blocks; ++j) {
        const float* xs = x + n * j;
        float* ws = w + n * j;
        if (t == GgufType::Q2_K) {
            for (int l = 0; l < n; ++l) ws[l] = std::fabs(xs[l]);
            scales[j] = search_affine(n, nmax, xs, ws, b.q + n * j, &mins[j], -0.5f, 0.1f, 15, true);
        } else {
            const float av_x = std::sqrt(sum_squares(xs, n) / float(n));
            for (int l = 0; l < n; ++l) ws[l] = av_x + std::fabs(xs[l]);
            const bool q4 = t == GgufType::Q4_K;
            scales[j] = search_affine(n, nmax, xs, ws, b.q + n * j, &mins[j], q4 ? -1.0f : -0.5f, 0.1f, q4 ? 20 : 15, false);
        }
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (t == GgufType::Q2_K) {
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; ++j) raw.scale[j] = uint8_t(nearest_int(iscale * scales[j]));
            raw.d = gguf_fp16_from_float(max_scale / 15.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; ++j) raw.min[j] = uint8_t(nearest_int(iscale * mins[j]));
            raw.dmin = gguf_fp16_from_float(max_min / 15.0f);
        }
    } else {
        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < 8; ++j) {
            raw.scale[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
            raw.min[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
        }
        raw.d = gguf_fp16_from_float(max_scale / 63.0f);
        raw.dmin = gguf_fp16_from_float(max_min / 63.0f);
    }
    return finish(t, x, raw, b);
}

KQuantSuperBlock fit_q3_k(const float* x, const float* qw) {
    KQuantSuperBlock b;
    KQuantScales raw;
    float scales[16];
    if (qw) {  // quantize_row_q3_K_impl
        const float sigma2 = 2 * sum_squares(x, kQK_K) / float(kQK_K);
        float w[kQK_K], sw[16];
        imatrix_weights(x, qw, sigma2, 16, w, sw);
        for (int j = 0; j < 16; ++j) scales[j] = search_symmetric(16, 4, x + 16 * j, b.q + 16 * j, w + 16 * j);
        raw.d = gguf_fp16_from_float(search_symmetric(16, 32, scales, raw.scale, sw));
        return finish(GgufType::Q3_K, x, raw, b);
    }
    float max_scale = 0, amax = 0;  // quantize_row_q3_K_ref
    for (int j = 0; j < 16; ++j) {
        scales[j] = search_symmetric_refined(16, 4, x + 16 * j, b.q + 16 * j);
        if (std::fabs(scales[j]) > amax) {
            amax = std::fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    if (max_scale != 0) {
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; ++j)
            raw.scale[j] = uint8_t(clamp_int(int8_t(nearest_int(iscale * scales[j])), -32, 31) + 32);
        raw.d = gguf_fp16_from_float(1 / iscale);
    }
    return finish(GgufType::Q3_K, x, raw, b);
}

// quantize_row_q6_K_ref, and quantize_row_q6_K_impl, which only passes quant_weights to the search.
KQuantSuperBlock fit_q6_k(const float* x, const float* qw) {
    KQuantSuperBlock b;
    KQuantScales raw;
    float scales[16], max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
        scales[j] = search_symmetric(16, 32, x + 16 * j, b.q + 16 * j, qw ? qw + 16 * j : nullptr);
        if (std::fabs(scales[j]) > max_abs_scale) {
            max_abs_scale = std::fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    if (max_abs_scale < kGroupMaxEps) return KQuantSuperBlock{};  // ggml writes an all-zero block
    const float iscale = -128.0f / max_scale;
    raw.d = gguf_fp16_from_float(1 / iscale);
    for (int j = 0; j < 16; ++j) raw.scale[j] = uint8_t(int8_t(std::min(127, nearest_int(iscale * scales[j]))));
    return finish(GgufType::Q6_K, x, raw, b);
}

template <GgufType kType>
void encode_blocks(const float* x, int64_t n_blocks, uint8_t* out) {
    const int64_t bytes = gguf_type_info(kType)->block_bytes;
    for (int64_t i = 0; i < n_blocks; ++i) write_block(kType, kquant_fit(kType, x + i * kQK_K, nullptr), out + i * bytes);
}

// dequantize_row_q*_K: the decoder's own expressions — (d·scale)·q − dmin·min, (d·s)·(q − zero) — which
// kquant_sub_grid restates as one affine map (the tests check the two agree bit for bit).
template <GgufType kType>
void decode_blocks(const uint8_t* blocks, int64_t n_blocks, float* out) {
    const KQuantTraits& k = traits(kType);
    const int64_t bytes = gguf_type_info(kType)->block_bytes;
    for (int64_t i = 0; i < n_blocks; ++i) {
        const KQuantSuperBlock b = kquant_unpack(kType, blocks + i * bytes);
        const float d = gguf_fp16_to_float(b.s.d);
        float* y = out + i * kQK_K;
        for (int j = 0; j < k.sub_blocks; ++j) {
            const uint8_t* q = b.q + j * k.sub_size;
            float* yj = y + j * k.sub_size;
            if (k.affine) {
                const float dl = d * float(b.s.scale[j]), ml = gguf_fp16_to_float(b.s.dmin) * float(b.s.min[j]);
                for (int l = 0; l < k.sub_size; ++l) yj[l] = dl * float(q[l]) - ml;
            } else {
                const int s = kType == GgufType::Q3_K ? int(b.s.scale[j]) - 32 : int(int8_t(b.s.scale[j]));
                const float dl = d * float(s);
                for (int l = 0; l < k.sub_size; ++l) yj[l] = dl * float(int(q[l]) - k.code_zero);
            }
        }
    }
}

}  // namespace

bool is_kquant(GgufType t) {
    return t == GgufType::Q2_K || t == GgufType::Q3_K || t == GgufType::Q4_K || t == GgufType::Q5_K ||
           t == GgufType::Q6_K;
}
int kquant_sub_blocks(GgufType t) { return traits(t).sub_blocks; }
int64_t kquant_sub_size(GgufType t) { return traits(t).sub_size; }
int kquant_max_code(GgufType t) { return traits(t).max_code; }

KQuantSubGrid kquant_sub_grid(GgufType t, const KQuantScales& s, int j) {
    const KQuantTraits& k = traits(t);
    const float d = gguf_fp16_to_float(s.d);
    if (k.affine) return {d * float(s.scale[j]), 0.0f, -(gguf_fp16_to_float(s.dmin) * float(s.min[j]))};
    const int sc = t == GgufType::Q3_K ? int(s.scale[j]) - 32 : int(int8_t(s.scale[j]));
    return {d * float(sc), float(k.code_zero), -0.0f};  // x + (−0) = x for every x, −0 included
}

KQuantSuperBlock kquant_fit(GgufType t, const float* x, const float* weights) {
    switch (t) {
        case GgufType::Q3_K: return fit_q3_k(x, weights);
        case GgufType::Q6_K: return fit_q6_k(x, weights);
        default: return fit_affine(t, x, weights);  // traits() rejects a type that is not a K-quant
    }
}

void kquant_pack(GgufType t, const KQuantSuperBlock& b, uint8_t* out) {
    const KQuantTraits& k = traits(t);
    const int scale_max = t == GgufType::Q2_K ? 15 : t == GgufType::Q6_K ? 255 : 63;
    for (int j = 0; j < k.sub_blocks; ++j)
        LOWBIT_CHECK(b.s.scale[j] <= scale_max && (!k.affine || b.s.min[j] <= scale_max), ErrorKind::usage,
                     "{}: sub-block {} scale code {} / min code {} out of range 0..{}", gguf_type_name(t), j,
                     b.s.scale[j], b.s.min[j], scale_max);
    for (int e = 0; e < kQK_K; ++e)
        LOWBIT_CHECK(b.q[e] <= k.max_code, ErrorKind::usage, "{}: code {} of element {} out of range 0..{}",
                     gguf_type_name(t), b.q[e], e, k.max_code);
    write_block(t, b, out);
}

KQuantSuperBlock kquant_unpack(GgufType t, const uint8_t* block) {
    const KQuantTraits& k = traits(t);
    KQuantSuperBlock b;
    b.s.d = load_u16(block + k.d_offset);
    if (k.dmin_offset >= 0) b.s.dmin = load_u16(block + k.dmin_offset);
    unpack_scales(t, block, b.s);
    for (int e = 0; e < kQK_K; ++e) {
        int q = block[k.low.byte_of(e)] >> k.low.shift_of(e) & ((1 << k.low.width) - 1);
        if (k.high.offset >= 0)
            q |= (block[k.high.byte_of(e)] >> k.high.shift_of(e) & ((1 << k.high.width) - 1)) << k.low.width;
        b.q[e] = uint8_t(q);
    }
    return b;
}

void gguf_encode_q2_k(const float* x, int64_t n, uint8_t* out) { encode_blocks<GgufType::Q2_K>(x, n, out); }
void gguf_encode_q3_k(const float* x, int64_t n, uint8_t* out) { encode_blocks<GgufType::Q3_K>(x, n, out); }
void gguf_encode_q4_k(const float* x, int64_t n, uint8_t* out) { encode_blocks<GgufType::Q4_K>(x, n, out); }
void gguf_encode_q5_k(const float* x, int64_t n, uint8_t* out) { encode_blocks<GgufType::Q5_K>(x, n, out); }
void gguf_encode_q6_k(const float* x, int64_t n, uint8_t* out) { encode_blocks<GgufType::Q6_K>(x, n, out); }
void gguf_decode_q2_k(const uint8_t* b, int64_t n, float* out) { decode_blocks<GgufType::Q2_K>(b, n, out); }
void gguf_decode_q3_k(const uint8_t* b, int64_t n, float* out) { decode_blocks<GgufType::Q3_K>(b, n, out); }
void gguf_decode_q4_k(const uint8_t* b, int64_t n, float* out) { decode_blocks<GgufType::Q4_K>(b, n, out); }
void gguf_decode_q5_k(const uint8_t* b, int64_t n, float* out) { decode_blocks<GgufType::Q5_K>(b, n, out); }
void gguf_decode_q6_k(const uint8_t* b, int64_t n, float* out) { decode_blocks<GgufType::Q6_K>(b, n, out); }

}  // namespace lowbit
