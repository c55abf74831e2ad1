// gptq_tensors.cpp — GPTQ bit streams, packing one linear and dequantizing it (layout in gptq_tensors.h).
#include "model/gptq_tensors.h"

#include "core/error.h"
#include "core/thread_pool.h"

namespace lowbit {

const char* gptq_checkpoint_format(GptqZeroConvention z) { return z == GptqZeroConvention::v2 ? "gptq_v2" : "gptq"; }

bool parse_gptq_checkpoint_format(const std::string& s, GptqZeroConvention* out) {
    if (s.empty() || s == "gptq") *out = GptqZeroConvention::v1;
    else if (s == "gptq_v2") *out = GptqZeroConvention::v2;
    else return false;
    return true;
}

bool gptq_bits_supported(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 8; }

void gptq_pack_stream(const uint32_t* values, int64_t value_stride, int64_t n, int bits, int32_t* words,
                      int64_t word_stride) {
    const int64_t n_words = (n * bits + 31) / 32;
    for (int64_t j = 0; j < n_words; ++j) words[j * word_stride] = 0;
    const uint64_t mask = (uint64_t(1) << bits) - 1;
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t v = uint64_t(values[i * value_stride]) & mask;
        const int64_t bit = i * bits, word = bit / 32, shift = bit % 32;
        // A value straddles two words when shift + bits > 32 (3 bits only).
        const uint64_t placed = v << shift;
        words[word * word_stride] = int32_t(uint32_t(words[word * word_stride]) | uint32_t(placed));
        if (shift + bits > 32)
            words[(word + 1) * word_stride] = int32_t(uint32_t(words[(word + 1) * word_stride]) | uint32_t(placed >> 32));
    }
}

uint32_t gptq_stream_value(const int32_t* words, int64_t word_stride, int64_t i, int bits) {
    const int64_t bit = i * bits, word = bit / 32, shift = bit % 32;
    uint64_t v = uint64_t(uint32_t(words[word * word_stride])) >> shift;
    if (shift + bits > 32) v |= uint64_t(uint32_t(words[(word + 1) * word_stride])) << (32 - shift);
    return uint32_t(v & ((uint64_t(1) << bits) - 1));
}

GptqLinear gptq_pack_linear(int bits, int64_t out_features, int64_t in_features, int64_t group_size,
                            const uint8_t* codes, const int32_t* zeros, const float* scales, GptqZeroConvention zc) {
    LOWBIT_CHECK(gptq_bits_supported(bits), ErrorKind::usage, "GPTQ packing holds 2, 3, 4 or 8 bits, not {}", bits);
    LOWBIT_CHECK(out_features > 0 && in_features > 0 && group_size > 0, ErrorKind::usage,
                 "GPTQ packing: bad shape [{}, {}] with groups of {}", out_features, in_features, group_size);
    GptqLinear t;
    t.bits = bits;
    t.out_features = out_features;
    t.in_features = in_features;
    t.group_size = group_size;
    const int64_t N = out_features, K = in_features, G = t.n_groups();
    const uint32_t max_code = (1u << bits) - 1;
    const int32_t min_zero = zc == GptqZeroConvention::v1 ? 1 : 0;  // v1 stores z − 1 in a field of `bits`

    // qweight: column n is the stream of row n of the codes.
    t.qweight.resize(size_t(t.qweight_rows() * N));
    std::vector<uint32_t> row(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) {
            row[size_t(k)] = codes[n * K + k];
            LOWBIT_CHECK(row[size_t(k)] <= max_code, ErrorKind::usage,
                         "GPTQ packing: code {} at [{}, {}] does not fit {} bits", row[size_t(k)], n, k, bits);
        }
        gptq_pack_stream(row.data(), 1, K, bits, t.qweight.data() + n, N);
    }
    // qzeros: row g is the stream of the N stored zeros of group g; scales [g, n].
    t.qzeros.resize(size_t(G * t.qzeros_cols()));
    t.scales.resize(size_t(G * N));
    std::vector<uint32_t> stored(static_cast<size_t>(N));
    for (int64_t g = 0; g < G; ++g) {
        for (int64_t n = 0; n < N; ++n) {
            const int32_t z = zeros[n * G + g];
            LOWBIT_CHECK(z >= min_zero && uint32_t(z) <= max_code, ErrorKind::usage,
                         "GPTQ packing: zero point {} of output {} group {} is outside {}..{}{}", z, n, g, min_zero,
                         max_code,
                         zc == GptqZeroConvention::v1 ? " (checkpoint_format gptq stores zero − 1, so 0 cannot be held)"
                                                      : "");
            stored[size_t(n)] = uint32_t(z - min_zero);
            t.scales[size_t(g * N + n)] = scales[n * G + g];
        }
        gptq_pack_stream(stored.data(), 1, N, bits, t.qzeros.data() + g * t.qzeros_cols(), 1);
    }
    t.g_idx.resize(size_t(K));
    for (int64_t k = 0; k < K; ++k) t.g_idx[size_t(k)] = int32_t(k / group_size);
    return t;
}

void check_gptq_linear(const GptqLinear& t, const std::string& what) {
    LOWBIT_CHECK(gptq_bits_supported(t.bits), ErrorKind::input, "{}: GPTQ with {} bits is not supported (2, 3, 4, 8)",
                 what, t.bits);
    LOWBIT_CHECK(t.in_features > 0 && t.out_features > 0 && t.group_size > 0, ErrorKind::input,
                 "{}: bad GPTQ shape (in {}, out {}, group {})", what, t.in_features, t.out_features, t.group_size);
    const int64_t N = t.out_features, K = t.in_features, G = t.n_groups();
    auto check = [&](const char* name, size_t have, int64_t rows, int64_t cols) {
        LOWBIT_CHECK(int64_t(have) == rows * cols, ErrorKind::input,
                     "{}: {} has {} values, but {} bits, {} inputs, {} outputs and groups of {} need [{}, {}] = {}", what,
                     name, have, t.bits, K, N, t.group_size, rows, cols, rows * cols);
    };
    check("qweight", t.qweight.size(), t.qweight_rows(), N);
    check("qzeros", t.qzeros.size(), G, t.qzeros_cols());
    check("scales", t.scales.size(), G, N);
    check("g_idx", t.g_idx.size(), 1, K);
    for (int64_t k = 0; k < K; ++k)
        LOWBIT_CHECK(t.g_idx[size_t(k)] >= 0 && t.g_idx[size_t(k)] < G, ErrorKind::input,
                     "{}: g_idx[{}] = {} is outside the {} groups", what, k, t.g_idx[size_t(k)], G);
}

std::vector<float> gptq_dequantize(const GptqLinear& t, GptqZeroConvention zc, const std::string& what) {
    check_gptq_linear(t, what);
    const int64_t N = t.out_features, K = t.in_features, G = t.n_groups(), zc_cols = t.qzeros_cols();
    const float zero_offset = zc == GptqZeroConvention::v1 ? 1.0f : 0.0f;
    std::vector<float> zeros(size_t(G * N));  // [g, n] as floats (exact: at most 2^8)
    for (int64_t g = 0; g < G; ++g)
        for (int64_t n = 0; n < N; ++n)
            zeros[size_t(g * N + n)] = float(gptq_stream_value(t.qzeros.data() + g * zc_cols, 1, n, t.bits)) + zero_offset;
    std::vector<float> w(size_t(N * K));
    parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n)
            for (int64_t k = 0; k < K; ++k) {
                const int64_t g = t.g_idx[size_t(k)];
                const float q = float(gptq_stream_value(t.qweight.data() + n, N, k, t.bits));
                w[size_t(n * K + k)] = t.scales[size_t(g * N + n)] * (q - zeros[size_t(g * N + n)]);
            }
    });
    return w;
}

}  // namespace lowbit
