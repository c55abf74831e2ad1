// gguf_mixes.cpp — llama.cpp's per-tensor type choice under a file-type mix (src/llama-quant.cpp:
// tensor_allows_quantization, tensor_get_category, llama_tensor_get_type_impl, tensor_type_fallback), for
// the mixes of kGgufMixes and arch llama; see gguf_mixes.h for what is and is not covered.
#include "formats/gguf_mixes.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <numeric>

#include "core/error.h"

namespace lowbit {

namespace {

enum class Category { output, token_embd, attn_qkv, attn_kv_b, attn_v, attn_k, attn_q, attn_output, ffn_up, ffn_gate,
                      ffn_down, other };

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

Category category_of(const std::string& name) {
    if (name == "output.weight") return Category::output;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::token_embd;
    if (contains(name, "attn_qkv.weight")) return Category::attn_qkv;
    if (contains(name, "attn_kv_b.weight")) return Category::attn_kv_b;
    if (contains(name, "attn_v.weight")) return Category::attn_v;
    if (contains(name, "attn_k.weight")) return Category::attn_k;
    if (contains(name, "attn_q.weight")) return Category::attn_q;
    if (contains(name, "attn_output.weight")) return Category::attn_output;
    if (contains(name, "ffn_up")) return Category::ffn_up;
    if (contains(name, "ffn_gate")) return Category::ffn_gate;
    if (contains(name, "ffn_down")) return Category::ffn_down;
    return Category::other;
}

// attn_v and the tensors that hold it (fused QKV, MLA's kv_b): llama.cpp gives them one rule and one
// counter. (Its separate rule for attn_qkv further down is therefore never reached; we leave it out.)
bool is_attn_v_like(Category c) { return c == Category::attn_v || c == Category::attn_qkv || c == Category::attn_kv_b; }

// ggml_n_dims: the number of dimensions up to the last one larger than 1.
int n_dims(const std::vector<int64_t>& ne) {
    for (size_t i = ne.size(); i > 1; --i)
        if (ne[i - 1] > 1) return int(i);
    return 1;
}

// Substrings that keep a tensor out of quantization (tensor_allows_quantization, arch-independent part).
constexpr const char* kNeverQuantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
    "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_",
    ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};

bool allows_quantization(const MixTensor& t) {
    if (n_dims(t.ne) < 2) return false;
    const std::string& name = t.name;
    // llama.cpp's "ends with weight" test, size_t arithmetic included.
    if (name.rfind("weight") != name.size() - 6) return false;
    if (name == "position_embd.weight" || name == "token_types.weight") return false;
    for (const char* part : kNeverQuantized)
        if (contains(name, part)) return false;
    return true;
}

// The layer number of "blk.N." names (sscanf "blk.%d."), −1 for others.
int layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    int layer = -1;
    const char* p = name.data() + 4;
    const auto r = std::from_chars(p, name.data() + name.size(), layer);
    return r.ec == std::errc() ? layer : -1;
}

bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

struct MixState {
    const GgufMix& mix;
    const MixModel& model;
    int n_attention_wv = 0, i_attention_wv = 0;
    int i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
    bool tied_embeddings = true;

    bool is(LlamaFtype f) const { return mix.ftype == f; }
    int n_gqa() const { return model.n_kv_heads == 0 ? 0 : model.n_heads / model.n_kv_heads; }
    // llama_quant_model_from_metadata / the llama loader: 80 layers with grouped-query attention.
    bool is_70b() const { return model.n_layers == 80 && model.n_heads != model.n_kv_heads; }

    // (layer, layers) of an FFN tensor: the running counter, or for expert models the number in the name.
    std::pair<int, int> layer_info(int counter, const std::string& name) const {
        if (std::max(1, model.n_experts) == 1) return {counter, model.n_layers};
        const int layer = layer_of(name);
        LOWBIT_CHECK(layer >= 0 && layer < model.n_layers, ErrorKind::input,
                     "tensor '{}': no layer number in [0, {}) for an expert model", name, model.n_layers);
        return {layer, model.n_layers};
    }

    GgufType choose(GgufType t, const MixTensor& tensor, Category c);
};

// llama_tensor_get_type_impl for arch llama and the mixes of kGgufMixes.
GgufType MixState::choose(GgufType t, const MixTensor& tensor, Category c) {
    using F = LlamaFtype;
    if (c == Category::output || (tied_embeddings && c == Category::token_embd)) {
        if (tensor.ne[0] % gguf_type_info(t)->block_elements != 0) return GgufType::Q8_0;
        return t == GgufType::Q8_0 ? t : GgufType::Q6_K;
    }
    if (c == Category::token_embd) return t;  // untied: the base type
    if (is_attn_v_like(c)) {
        if (is(F::Q2_K)) t = n_gqa() >= 4 ? GgufType::Q4_K : GgufType::Q3_K;
        else if (is(F::Q3_K_M)) t = i_attention_wv < 2 ? GgufType::Q5_K : GgufType::Q4_K;
        else if (is(F::Q3_K_L)) t = GgufType::Q5_K;
        else if ((is(F::Q4_K_M) || is(F::Q5_K_M)) && use_more_bits(i_attention_wv, n_attention_wv)) t = GgufType::Q6_K;
        else if (is(F::Q4_K_S) && i_attention_wv < 4) t = GgufType::Q5_K;
        if (is_70b() && (t == GgufType::Q3_K || t == GgufType::Q4_K)) t = GgufType::Q5_K;
        if (model.n_experts == 8) t = GgufType::Q8_0;
        ++i_attention_wv;
        return t;
    }
    if (c == Category::attn_k) return model.n_experts == 8 ? GgufType::Q8_0 : t;
    if (c == Category::ffn_down) {
        const auto [i_layer, n_layer] = layer_info(i_ffn_down, tensor.name);
        if (is(F::Q2_K)) t = GgufType::Q3_K;
        else if (is(F::Q3_K_M)) t = i_layer < n_layer / 16 ? GgufType::Q5_K : GgufType::Q4_K;
        else if (is(F::Q3_K_L)) t = GgufType::Q5_K;
        else if (is(F::Q4_K_M)) t = use_more_bits(i_layer, n_layer) ? GgufType::Q6_K : t;
        else if (is(F::Q5_K_M) && use_more_bits(i_layer, n_layer)) t = GgufType::Q6_K;
        else if (is(F::Q4_K_S) && i_layer < n_layer / 8) t = GgufType::Q5_K;
        else if ((is(F::Q4_0) || is(F::Q5_0)) && model.has_imatrix && i_layer < n_layer / 8)
            t = is(F::Q4_0) ? GgufType::Q4_1 : GgufType::Q5_1;
        ++i_ffn_down;
        return t;
    }
    if (c == Category::attn_output) {
        if (model.n_experts == 8) {
            if (is(F::Q2_K) || is(F::Q3_K_S) || is(F::Q3_K_M) || is(F::Q4_K_S) || is(F::Q4_K_M)) t = GgufType::Q5_K;
        } else if (is(F::Q2_K)) {
            t = GgufType::Q3_K;
        } else if (is(F::Q3_K_M)) {
            t = GgufType::Q4_K;
        } else if (is(F::Q3_K_L)) {
            t = GgufType::Q5_K;
        }
        return t;
    }
    if (c == Category::ffn_gate || c == Category::ffn_up) {  // no rule for these mixes, but the layer check
        int& counter = c == Category::ffn_gate ? i_ffn_gate : i_ffn_up;
        layer_info(counter, tensor.name);
        ++counter;
    }
    return t;
}

// tensor_type_fallback: a type whose block does not divide the row length.
GgufType fallback(GgufType t, int64_t ncols) {
    if (ncols % gguf_type_info(t)->block_elements == 0) return t;
    GgufType f = t;
    switch (t) {
        case GgufType::Q2_K:
        case GgufType::Q3_K: f = GgufType::Q4_0; break;
        case GgufType::Q4_K: f = GgufType::Q5_0; break;
        case GgufType::Q5_K: f = GgufType::Q5_1; break;
        case GgufType::Q6_K: f = GgufType::Q8_0; break;
        default: break;  // the 32-element types: F16 below
    }
    return ncols % gguf_type_info(f)->block_elements == 0 ? f : GgufType::F16;
}

}  // namespace

const GgufMix& gguf_mix_by_name(std::string_view name) {
    const auto same = [&](const char* m) {
        return std::string_view(m).size() == name.size() &&
               std::equal(name.begin(), name.end(), m, [](char a, char b) { return std::toupper(uint8_t(a)) == b; });
    };
    for (const GgufMix& m : kGgufMixes)
        if (same(m.name)) return m;
    std::string names;
    for (const GgufMix& m : kGgufMixes) names += std::string(names.empty() ? "" : ", ") + m.name;
    fail(ErrorKind::usage, "unknown mix '{}'; llama.cpp mixes lowbit writes: {}", name, names);
}

std::vector<GgufType> gguf_mix_types(const GgufMix& mix, const MixModel& model, const std::vector<MixTensor>& tensors) {
    MixState st{mix, model};
    for (const MixTensor& t : tensors) {
        LOWBIT_CHECK(!t.ne.empty() && t.ne[0] > 0, ErrorKind::input, "tensor '{}': empty shape", t.name);
        const Category c = category_of(t.name);
        if (is_attn_v_like(c)) ++st.n_attention_wv;
        if (c == Category::output) st.tied_embeddings = false;
    }
    // llama_model_loader's weights_map order: layer number (−1 first), then name.
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
        return la != lb ? la < lb : tensors[a].name < tensors[b].name;
    });
    std::vector<GgufType> out(tensors.size());
    for (size_t i : order) {
        const MixTensor& t = tensors[i];
        out[i] = allows_quantization(t) ? fallback(st.choose(mix.base, t, category_of(t.name)), t.ne[0]) : t.type;
    }
    return out;
}

}  // namespace lowbit
