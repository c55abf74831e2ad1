// rotate.cpp — the weight-fused rotations of rotate.h: RMSNorm fusion, R1 on the residual stream, R2 per
// attention head.
//
// Every rotation is hadamard_transform (hadamard.h) run along the rows (readers of a d-vector, axis 1) or
// the columns (writers, axis 0) of the row-major matrices, never a dense d×d GEMM: both apply the same
// M to each d-indexed vector, the transform is the one definition of the rotation lowbit already has
// (and tests), and it needs no d×d buffer. A dense Q would be as cheap at these sizes (d ≤ 8192) but
// would be a second definition to keep consistent. Napkin math (SmolLM2-135M): 135 M weights, each
// touched by one or two transforms of ~log2(16) + 36 add/sub (576 = 36·16) ≈ 40 flops → ~6 GFLOP;
// measured 1.5 s for fusion + R1 + R2 on 2 shared cores, a third of it the 28 M-entry embedding and head.
#include "ptq/rotate.h"

#include <algorithm>

#include "core/error.h"
#include "hadamard/hadamard.h"
#include "hadamard/hadamard_orders.h"

namespace lowbit {

namespace {

constexpr uint64_t head_seed_salt = 0x52324844ull;  // "R2HD"

// The transform of a site along `axis`: axis 1 rotates each row (a vector that is read), axis 0 each
// column (a vector that is written); both apply the same M, and Q = Mᵀ in the row-vector convention.
HadamardOptions site_transform(const RotationOptions& opt, RotationSite site, int axis) {
    HadamardOptions h;
    h.axis = axis;
    h.block = site == RotationSite::residual ? opt.residual_block : 0;
    h.randomized = opt.randomized;
    h.seed = site == RotationSite::residual ? opt.seed : rotation_head_seed(opt.seed);
    return h;
}

// W[:, j] *= g[j] for a row-major matrix with g.size() columns.
void scale_columns(std::vector<float>& w, const std::vector<float>& g) {
    const size_t cols = g.size();
    for (size_t r = 0; r < w.size(); r += cols)
        for (size_t j = 0; j < cols; ++j) w[r + j] *= g[j];
}

void fuse_norm(std::vector<float>& norm, std::initializer_list<std::vector<float>*> readers) {
    for (std::vector<float>* w : readers) scale_columns(*w, norm);
    std::fill(norm.begin(), norm.end(), 1.0f);
}

// R1 as W ← W·Q on a reader (each row of length d transformed) or W ← Qᵀ·W on a writer (each column).
// Needs unit norm weights (fuse_rms_norms) so that RMSNorm commutes with Q.
void rotate_reader(std::vector<float>& w, int64_t d, const RotationOptions& opt) {
    hadamard_transform(w.data(), int64_t(w.size()) / d, d, site_transform(opt, RotationSite::residual, 1));
}
void rotate_writer(std::vector<float>& w, int64_t d, const RotationOptions& opt) {
    hadamard_transform(w.data(), d, int64_t(w.size()) / d, site_transform(opt, RotationSite::residual, 0));
}

// R2. Each kv head's block is transformed on its own with positions 0…head_dim−1, so every head gets the
// same H (the randomized signs depend on the position along the transformed axis): a block-diagonal
// transform over the whole kv_dim axis would give each kv head different signs, which the query heads
// of a GQA group could not all match in wo.
void rotate_block_heads(const LlamaConfig& c, BlockWeights& b, const RotationOptions& opt) {
    const int64_t d = c.hidden_size, hd = c.head_dim;
    const HadamardOptions column_t = site_transform(opt, RotationSite::head, 0);
    const HadamardOptions row_t = site_transform(opt, RotationSite::head, 1);
    // wv rows of kv head g, [hd, d]: v_g ← Hᵀ·v_g (column-vector form), i.e. v' = v·H.
    for (int64_t g = 0; g < c.n_kv_heads; ++g) hadamard_transform(b.wv.data() + g * hd * d, hd, d, column_t);
    if (!b.bv.empty()) hadamard_transform(b.bv.data(), c.n_kv_heads, hd, row_t);
    // wo [d, n_heads·hd] viewed as [d·n_heads, hd]: every query head's columns ← wo_h·H.
    hadamard_transform(b.wo.data(), d * c.n_heads, hd, row_t);
}

void fuse_block_norms(BlockWeights& b) {
    fuse_norm(b.attn_norm, {&b.wq, &b.wk, &b.wv});
    fuse_norm(b.ffn_norm, {&b.w_gate, &b.w_up});
}

// The head's part of step 1: tied embeddings untied, output_norm moved into the head.
void fuse_head_norm(LlamaModel& m) {
    LlamaWeights& w = m.weights;
    if (m.config.tied_embeddings) {  // the head gets output_norm (and later R1) but the embedding does not
        w.output = w.token_embd;
        m.config.tied_embeddings = false;
    }
    fuse_norm(w.output_norm, {&w.output});
}

void check_site_size(int64_t n, const char* what, const std::string& remedy) {
    LOWBIT_CHECK(hadamard_order_supported(n), ErrorKind::usage, "rotate: {} {} cannot be rotated: {}{}", what, n,
                 hadamard_size_advice(n), remedy);
}

}  // namespace

uint64_t rotation_head_seed(uint64_t seed) { return seed ^ head_seed_salt; }

void check_rotation_supported(const LlamaConfig& c, const RotationOptions& opt) {
    if (opt.residual) {
        const int64_t d = c.hidden_size, block = opt.residual_block;
        if (block == 0) {
            const int64_t fit = hadamard_largest_block_dividing(d);
            check_site_size(d, "hidden size (R1)",
                            fit >= 2 ? fmt::format("; a block-diagonal R1 (residual_block {}) fits", fit) : "");
        } else {
            LOWBIT_CHECK(block > 0 && hadamard_order_supported(block) && d % block == 0, ErrorKind::usage,
                         "rotate: residual_block {} must be a supported Hadamard order that divides the hidden size "
                         "{} (largest such: {})",
                         block, d, hadamard_largest_block_dividing(d));
        }
    }
    if (opt.head) check_site_size(c.head_dim, "head_dim (R2)", "; rotate without R2 (head = false)");
}

void fuse_rms_norms(LlamaModel& m) {
    check_weight_shapes(m.config, m.weights, "fuse_rms_norms");
    for (BlockWeights& b : m.weights.blocks) fuse_block_norms(b);
    fuse_head_norm(m);
}

void rotate_head(LlamaModel& m, const RotationOptions& opt) {
    check_rotation_supported(m.config, opt);
    if (!opt.residual) return;
    fuse_head_norm(m);
    const int64_t d = m.config.hidden_size;
    rotate_reader(m.weights.token_embd, d, opt);  // embedding rows e·Q: the residual stream starts rotated
    if (!m.weights.output.empty()) rotate_reader(m.weights.output, d, opt);
}

void rotate_block(const LlamaConfig& c, BlockWeights& b, const RotationOptions& opt) {
    check_rotation_supported(c, opt);
    if (opt.residual) {
        fuse_block_norms(b);
        for (std::vector<float>* r : {&b.wq, &b.wk, &b.wv, &b.w_gate, &b.w_up}) rotate_reader(*r, c.hidden_size, opt);
        rotate_writer(b.wo, c.hidden_size, opt);
        rotate_writer(b.w_down, c.hidden_size, opt);
    }
    if (opt.head) rotate_block_heads(c, b, opt);
}

void rotate_model(LlamaModel& m, const RotationOptions& opt) {
    check_weight_shapes(m.config, m.weights, "rotate");
    check_rotation_supported(m.config, opt);
    for (BlockWeights& b : m.weights.blocks) rotate_block(m.config, b, opt);
    rotate_head(m, opt);
}

std::vector<float> rotation_matrix(const RotationOptions& opt, RotationSite site, int64_t n) {
    // Row i of the result is M·e_i = column i of M, so the result is Mᵀ = Q (or H).
    std::vector<float> q(size_t(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i) q[size_t(i * n + i)] = 1.0f;
    hadamard_transform(q.data(), n, n, site_transform(opt, site, 1));
    return q;
}

std::string describe(const RotationOptions& opt) {
    if (!opt.residual && !opt.head) return "none";
    std::string s = "hadamard ";
    if (opt.residual) s += "r1";
    if (opt.head) s += opt.residual ? "+r2" : "r2";
    if (opt.residual && opt.residual_block > 0) s += fmt::format(" block {}", opt.residual_block);
    s += opt.randomized ? fmt::format(" seed {}", opt.seed) : std::string(" unrandomized");
    return s;
}

}  // namespace lowbit
