// gguf_types.cpp — lookups over the GGUF type table and the matrix codecs that dispatch through it.
#include "formats/gguf_types.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/iq4nl.h"
#include "formats/kquants.h"
#include "formats/mx_block.h"

namespace lowbit {

namespace {

// "F32, F16, ..." of the types whose `codec` member is set.
template <typename Codec>
std::string names_with(Codec GgufTypeInfo::*codec) {
    std::string out;
    for (const GgufTypeInfo& info : kGgufTypes)
        if (info.*codec) out += std::string(out.empty() ? "" : ", ") + info.name;
    return out;
}

}  // namespace

const GgufTypeInfo* gguf_type_by_name(std::string_view name) {
    for (const GgufTypeInfo& info : kGgufTypes)
        if (name == info.name) return &info;
    return nullptr;
}

const char* gguf_type_name(GgufType t) {
    const GgufTypeInfo* info = gguf_type_info(t);
    return info ? info->name : "unknown";
}

std::string gguf_type_label(GgufType t) {
    const GgufTypeInfo* info = gguf_type_info(t);
    return info ? std::string(info->name) : fmt::format("unknown type id {}", uint32_t(t));
}

bool gguf_type_can_dequantize(GgufType t) {
    const GgufTypeInfo* info = gguf_type_info(t);
    return info && info->decode;
}

uint64_t gguf_type_bytes_for(GgufType t, uint64_t n_elements) {
    const GgufTypeInfo* info = gguf_type_info(t);
    return info ? n_elements / uint64_t(info->block_elements) * uint64_t(info->block_bytes) : 0;
}

std::string gguf_type_support() {
    return fmt::format("lowbit decodes {}; encodes {}", names_with(&GgufTypeInfo::decode),
                       names_with(&GgufTypeInfo::encode));
}

std::vector<uint8_t> gguf_quantize_matrix(GgufType t, const float* x, int64_t rows, int64_t cols) {
    const GgufTypeInfo* info = gguf_type_info(t);
    if (!info || !info->encode)
        fail(ErrorKind::usage, "cannot encode floats as GGUF {} ({})", gguf_type_label(t), gguf_type_support());
    check_block_divisible(cols, info->block_elements, "columns", info->name);
    const int64_t blocks_per_row = cols / info->block_elements, row_bytes = blocks_per_row * info->block_bytes;
    std::vector<uint8_t> out(size_t(rows * row_bytes));
    // Rows are contiguous in both layouts, so a range of rows is one run of blocks.
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        info->encode(x + r0 * cols, (r1 - r0) * blocks_per_row, out.data() + r0 * row_bytes);
    });
    return out;
}

void gguf_dequantize_matrix(GgufType t, const uint8_t* blocks, int64_t rows, int64_t cols, float* out) {
    const GgufTypeInfo* info = gguf_type_info(t);
    if (!info || !info->decode)
        fail(ErrorKind::input, "cannot dequantize GGUF {} ({})", gguf_type_label(t), gguf_type_support());
    check_block_divisible(cols, info->block_elements, "columns", info->name);
    const int64_t blocks_per_row = cols / info->block_elements, row_bytes = blocks_per_row * info->block_bytes;
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        info->decode(blocks + r0 * row_bytes, (r1 - r0) * blocks_per_row, out + r0 * cols);
    });
}

std::vector<uint8_t> gguf_quantize_matrix_imatrix(GgufType t, const float* x, int64_t rows, int64_t cols,
                                                  const float* imatrix) {
    const GgufTypeInfo* info = gguf_type_info(t);
    if (!info || !(is_kquant(t) || t == GgufType::IQ4_NL))
        fail(ErrorKind::usage, "lowbit has no importance-matrix quantizer for GGUF {} (it has them for Q2_K, Q3_K, "
             "Q4_K, Q5_K, Q6_K and IQ4_NL)", gguf_type_label(t));
    check_block_divisible(cols, info->block_elements, "columns", info->name);
    const int64_t be = info->block_elements, blocks_per_row = cols / be, bb = info->block_bytes;
    std::vector<uint8_t> out(size_t(rows * blocks_per_row * bb));
    parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t b = 0; b < blocks_per_row; ++b) {
                const float* xb = x + r * cols + b * be;
                uint8_t* dst = out.data() + (r * blocks_per_row + b) * bb;
                if (t == GgufType::IQ4_NL) iq4nl_pack(iq4nl_fit(xb, imatrix + b * be), dst);
                else kquant_pack(t, kquant_fit(t, xb, imatrix + b * be), dst);
            }
    });
    return out;
}

}  // namespace lowbit
