// param_layout.cpp — the flat parameter buffer's tensors, offsets and views.
#include "train/param_layout.h"

#include <fmt/format.h>

#include "core/error.h"

namespace lowbit {

int64_t ParamLayout::add(const std::string& name, ParamKind kind, int64_t layer, Projection p, int64_t rows, int64_t cols) {
    ParamTensor t;
    t.name = name;
    t.kind = kind;
    t.layer = layer;
    t.projection = p;
    t.offset = total_;
    t.rows = rows;
    t.cols = cols;
    tensors_.push_back(t);
    total_ += rows * cols;
    return t.offset;
}

ParamLayout::ParamLayout(const LlamaConfig& c) : config_(c) {
    validate_config(c, "training model");
    LOWBIT_CHECK(!c.qkv_bias, ErrorKind::usage,
                 "training model: q/k/v biases (Qwen2-style) are not supported; the trained architecture is Llama's");
    const int64_t d = c.hidden_size;
    offsets_.token_embd = add("token_embd.weight", ParamKind::embedding, -1, Projection::q, c.vocab_size, d);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        BlockOffsets b;
        b.attn_norm = add(fmt::format("blk.{}.attn_norm.weight", l), ParamKind::norm, l, Projection::q, d, 1);
        for (Projection p : kProjections) {
            if (p == Projection::gate)
                b.ffn_norm = add(fmt::format("blk.{}.ffn_norm.weight", l), ParamKind::norm, l, Projection::q, d, 1);
            b.projection[size_t(p)] = add(linear_name(l, p) + ".weight", ParamKind::projection, l, p,
                                          projection_out_features(c, p), projection_in_features(c, p));
        }
        offsets_.blocks.push_back(b);
    }
    offsets_.output_norm = add("output_norm.weight", ParamKind::norm, -1, Projection::q, d, 1);
    offsets_.output = c.tied_embeddings ? offsets_.token_embd
                                        : add("output.weight", ParamKind::lm_head, -1, Projection::q, c.vocab_size, d);
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
    for (const ParamTensor& t : tensors_)
        if (t.name == name) return t;
    fail(ErrorKind::usage, "training model: no parameter tensor '{}' (names follow GGUF: token_embd.weight, "
                           "blk.N.attn_q.weight, …, output_norm.weight, output.weight when untied)",
         name);
}

}  // namespace lowbit
