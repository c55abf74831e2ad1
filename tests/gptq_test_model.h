// gptq_test_model.h — hand-made QuantizedModels for the safetensors export tests (test_ptq_export and
// tool_gptq_export, which crosscheck/check_gptq_safetensors.py drives): a small Llama whose sizes fit every
// GPTQ grid, random codes, grids with FP16-exact scales (or deliberately not), and every projection of the
// model set to its dequantization — independent of the quantizers.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/random_fill.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/weights.h"
#include "ptq/quantized_model.h"

namespace lowbit::test {

// d 64, 4 heads of 16 sharing 2 key/value heads, ffn 128, 2 blocks: every K and N times 2, 3, 4 or 8 bits
// is a multiple of 32, and groups of 32 or 64 divide every K. Adjacent RoPE pairing: q/k rows in the GGUF
// loader's order, which the export un-permutes.
inline LlamaConfig gptq_test_config() {
    LlamaConfig c = tiny_llama_config(false, true);
    c.hidden_size = 64;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.ffn_size = 128;
    c.n_layers = 2;
    c.rope_pairing = RopePairing::adjacent;
    validate_config(c, "gptq test config");
    return c;
}

struct TestGridChoice {
    bool fp16_scales = true;  // scales m·2^−16 with m < 2^11 (FP16-exact); false: every scale off FP16 by ~3e-4
    bool zero_points_of_0 = false;  // asym: every 7th group gets zero point 0 (not representable in GPTQ v1)
};

// Codes uniform over 0..max_code; sym: zero 2^(b−1); asym: zeros in 1..max_code (or 0, see above).
inline QuantizedWeight random_quantized_weight(const GridSpec& spec, int64_t rows, int64_t cols, uint64_t seed,
                                               const TestGridChoice& choice = {}) {
    QuantizedWeight q;
    q.spec = spec;
    q.rows = rows;
    q.cols = cols;
    const uint32_t levels = uint32_t(spec.max_code()) + 1;
    q.codes.resize(size_t(rows * cols));
    for (size_t i = 0; i < q.codes.size(); ++i) q.codes[i] = uint8_t(counter_random24(seed, i) % levels);
    q.grids.resize(size_t(rows * (cols / spec.group_size(cols))));
    for (size_t i = 0; i < q.grids.size(); ++i) {
        const uint32_t r = counter_random24(seed + 1, i);
        GroupGrid& g = q.grids[i];
        g.scale = std::ldexp(float(1024 + r % 1024), -16);
        if (!choice.fp16_scales) g.scale *= 1.0f + 1.0f / 3000.0f;
        g.zero = spec.sym ? float(levels / 2) : float(1 + (r >> 10) % (levels - 1));
        if (!spec.sym && choice.zero_points_of_0 && i % 7 == 0) g.zero = 0.0f;
    }
    return q;
}

// A random model whose 7 projections of every block are quantized on `spec` (their dense weights are the
// dequantized codes); the embeddings and norms stay random FP32.
inline QuantizedModel random_quantized_model(const LlamaConfig& c, const GridSpec& spec, uint64_t seed,
                                             const TestGridChoice& choice = {}) {
    QuantizedModel qm;
    qm.model.config = c;
    qm.model.weights = random_llama_weights(c, seed, 0.1f);
    for (int64_t l = 0; l < c.n_layers; ++l)
        for (Projection p : kProjections) {
            QuantizedWeight q = random_quantized_weight(spec, projection_out_features(c, p), projection_in_features(c, p),
                                                        seed * 100 + uint64_t(l) * 10 + uint64_t(p), choice);
            // The model holds what the codes decode to (QuantizedModel's contract).
            const_cast<std::vector<float>&>(projection_weight(qm.model.weights.blocks[size_t(l)], p)) = q.dequantize();
            qm.linears.emplace(linear_name(l, p), std::move(q));
        }
    qm.record.method = "gptq";
    qm.record.format = spec.describe();
    qm.record.calibration = "hand-made test grids";
    qm.record.rotation = "none";
    return qm;
}

}  // namespace lowbit::test
