// param_layout.h — where every parameter tensor of the trained model lives in ONE flat FP32 buffer. The
// master weights, their gradients and AdamW's two moments are four buffers of the same layout, so the
// optimizer, gradient clipping and checkpoints are one loop over one array, and a tensor is a named view
// (offset, shape) into any of them.
//
// Order (names as in GGUF files, so checkpoints and exports need no table):
//   token_embd.weight [vocab, d]
//   per block l: blk.l.attn_norm.weight [d], blk.l.attn_q/attn_k/attn_v/attn_output.weight,
//                blk.l.ffn_norm.weight [d], blk.l.ffn_gate/ffn_up/ffn_down.weight
//   output_norm.weight [d]
//   output.weight [vocab, d]            (only with untied embeddings; tied: the LM head is token_embd)
// Matrices are row-major [out_features, in_features] like nn.Linear (model/weights.h), so y = x·Wᵀ.
// The trained architecture is Llama's: no biases (LlamaConfig::qkv_bias must be false).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/linear.h"

namespace lowbit {

enum class ParamKind : uint8_t { embedding, norm, projection, lm_head };

struct ParamTensor {
    std::string name;
    ParamKind kind = ParamKind::projection;
    int64_t layer = -1;                        // block index; −1 outside the blocks
    Projection projection = Projection::q;     // meaningful for kind == projection only
    int64_t offset = 0, rows = 0, cols = 1;    // vectors: cols = 1
    int64_t size() const { return rows * cols; }
    // AdamW's decoupled weight decay applies to the matrices (embedding, projections, LM head) and not to
    // the RMSNorm gains (llm.c and nanoGPT's convention: decay every tensor of rank 2; optimizer.h).
    bool weight_decay() const { return kind != ParamKind::norm; }
};

// Pointers to the tensors of one block / the whole model inside one flat buffer (T = float or const float).
template <typename T>
struct BlockTensors {
    T* attn_norm = nullptr;
    T* ffn_norm = nullptr;
    std::array<T*, kProjectionCount> projection{};
    T* operator[](Projection p) const { return projection[size_t(p)]; }
};

template <typename T>
struct ModelTensors {
    T* token_embd = nullptr;
    T* output_norm = nullptr;
    T* output = nullptr;  // the LM head: == token_embd when the embeddings are tied
    std::vector<BlockTensors<T>> blocks;
};

class ParamLayout {
public:
    // Fails (usage) on an invalid config or one with q/k/v biases.
    explicit ParamLayout(const LlamaConfig& c);

    const LlamaConfig& config() const { return config_; }
    const std::vector<ParamTensor>& tensors() const { return tensors_; }
    int64_t total() const { return total_; }  // floats in each flat buffer
    // The tensor called `name`; Error(usage) naming it otherwise.
    const ParamTensor& find(const std::string& name) const;

    template <typename T>
    ModelTensors<T> views(T* base) const {
        ModelTensors<T> m;
        m.token_embd = base + offsets_.token_embd;
        m.output_norm = base + offsets_.output_norm;
        m.output = base + offsets_.output;
        for (const BlockOffsets& b : offsets_.blocks) {
            BlockTensors<T> t;
            t.attn_norm = base + b.attn_norm;
            t.ffn_norm = base + b.ffn_norm;
            for (Projection p : kProjections) t.projection[size_t(p)] = base + b.projection[size_t(p)];
            m.blocks.push_back(t);
        }
        return m;
    }

private:
    struct BlockOffsets {
        int64_t attn_norm = 0, ffn_norm = 0;
        std::array<int64_t, kProjectionCount> projection{};
    };
    struct Offsets {
        int64_t token_embd = 0, output_norm = 0, output = 0;
        std::vector<BlockOffsets> blocks;
    };
    int64_t add(const std::string& name, ParamKind kind, int64_t layer, Projection p, int64_t rows, int64_t cols);

    LlamaConfig config_;
    std::vector<ParamTensor> tensors_;
    Offsets offsets_;
    int64_t total_ = 0;
};

}  // namespace lowbit
