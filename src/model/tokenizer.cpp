// tokenizer.cpp — the Tokenizer (see tokenizer.h): the checks and tables both models share, the cut of the
// text at special tokens (llama.cpp's tokenizer_st_partition), decode and the accessors. The engines are
// tokenizer_bpe.cpp and tokenizer_spm.cpp, the pre-tokenizers tokenizer_pretokenize.cpp, the loaders
// tokenizer_loaders.cpp. Together they reproduce llama.cpp's src/llama-vocab.cpp behaviour, which its test
// vectors pin down.
//
// Differences from llama.cpp, on purpose: invalid UTF-8 bytes are kept as bytes (llama.cpp turns each
// into U+FFFD), so byte-level decode(encode(x)) == x for any bytes; decode does no clean-up of spaces
// before punctuation. Per-token attributes that llama.cpp sets by model name (lstrip/rstrip) are not kept.
#include "model/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "model/tokenizer_impl.h"

namespace lowbit {

namespace {

// "<0xXX>" → XX; -1 when the text is not of that form.
int parse_byte_token(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    const auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    const int hi = hex(text[3]), lo = hex(text[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

}  // namespace

void Tokenizer::Impl::build(TokenizerVocab vocab) {
    v = std::move(vocab);
    const size_t n = v.tokens.size();
    if (v.model == "llama") {
        spm = true;
    } else if (v.model != "gpt2") {
        fail(ErrorKind::input, "tokenizer: model '{}' is not supported; supported: gpt2 (byte-level BPE), "
             "llama (SentencePiece BPE)", v.model);
    }
    LOWBIT_CHECK(n > 0, ErrorKind::input, "tokenizer: the vocabulary has no tokens");
    LOWBIT_CHECK(n < size_t(INT32_MAX / 2), ErrorKind::input, "tokenizer: {} tokens is too many", n);
    n_vocab = int32_t(n);
    if (v.token_types.empty()) v.token_types.assign(n, token_type_normal);
    LOWBIT_CHECK(v.token_types.size() >= n, ErrorKind::input,
                 "tokenizer: {} token types for {} tokens", v.token_types.size(), n);
    v.token_types.resize(n);
    if (v.scores.empty()) v.scores.assign(n, 0.0f);
    LOWBIT_CHECK(v.scores.size() >= n, ErrorKind::input, "tokenizer: {} scores for {} tokens", v.scores.size(), n);
    v.scores.resize(n);
    for (auto [name, id] : {std::pair{"BOS", v.bos_id}, std::pair{"EOS", v.eos_id}, std::pair{"unknown", v.unk_id}}) {
        LOWBIT_CHECK(id >= -1 && id < n_vocab, ErrorKind::input,
                     "tokenizer: the {} token id {} is outside the vocabulary (0..{})", name, id, n - 1);
    }
    LOWBIT_CHECK(!v.add_bos || v.bos_id >= 0, ErrorKind::input,
                 "tokenizer: add_bos is set but the vocabulary has no BOS token id");

    token_to_id.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (v.tokens[i].empty()) continue;  // llama.cpp renames these "[EMPTY_i]"; they can never match
        auto [it, fresh] = token_to_id.emplace(v.tokens[i], int32_t(i));
        LOWBIT_CHECK(fresh, ErrorKind::input, "tokenizer: duplicate token '{}' (ids {} and {})", v.tokens[i],
                     it->second, i);
    }
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = v.token_types[i];
        if ((t == token_type_control || t == token_type_user_defined || t == token_type_unknown) &&
            !v.tokens[i].empty()) {
            special_tokens.push_back(int32_t(i));
        }
    }
    std::stable_sort(special_tokens.begin(), special_tokens.end(), [&](int32_t a, int32_t b) {
        return v.tokens[size_t(a)].size() > v.tokens[size_t(b)].size();
    });

    if (spm) {
        build_spm();
    } else {
        build_bpe();
    }
}

std::string Tokenizer::Impl::piece(int32_t id) const {
    const std::string& text = v.tokens[size_t(id)];
    const int32_t type = type_of(id);
    if (type == token_type_control || type == token_type_unknown || type == token_type_user_defined) return text;
    if (type == token_type_byte) {
        const int b = parse_byte_token(text);
        if (b >= 0) return std::string(1, char(b));
    }
    return spm ? spm_piece(text) : bpe_piece(text);
}

// ---------------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(TokenizerVocab vocab) {
    auto impl = std::make_shared<Impl>();
    impl->build(std::move(vocab));
    impl_ = std::move(impl);
}

std::string Tokenizer::supported_pre_tokenizers() { return tokenizer_detail::supported_pre_tokenizer_list(); }

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    const Impl& m = *impl_;
    // Cut the text at special tokens, longest token first (llama.cpp's tokenizer_st_partition).
    struct Fragment {
        int32_t token;  // -1: text [offset, offset + length)
        size_t offset, length;
    };
    std::vector<Fragment> fragments;
    if (!text.empty()) fragments.push_back({-1, 0, text.size()});
    std::vector<Fragment> next;
    for (int32_t id : m.special_tokens) {
        const int32_t type = m.type_of(id);
        if (!parse_special && type != token_type_user_defined) continue;
        const std::string& s = m.v.tokens[size_t(id)];
        if (text.find(s) == std::string_view::npos) continue;
        next.clear();
        for (const Fragment& f : fragments) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t pos = f.offset;
            const size_t end = f.offset + f.length;
            while (pos < end) {
                const size_t hit = text.substr(0, end).find(s, pos);
                if (hit == std::string_view::npos) break;
                if (hit > pos) next.push_back({-1, pos, hit - pos});
                next.push_back({id, 0, 0});
                pos = hit + s.size();
            }
            if (pos < end) next.push_back({-1, pos, end - pos});
        }
        std::swap(fragments, next);
    }

    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos) {
        LOWBIT_CHECK(m.v.bos_id >= 0, ErrorKind::usage, "tokenizer: BOS requested but the vocabulary has none");
        out.push_back(m.v.bos_id);
    }
    bool after_special = true;  // SentencePiece adds the space prefix at the start and after special tokens
    for (const Fragment& f : fragments) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
            continue;
        }
        const std::string_view s = text.substr(f.offset, f.length);
        if (!m.spm) {
            m.encode_bpe_text(s, out);
            continue;
        }
        m.encode_spm_fragment(s, m.v.add_space_prefix && after_special, out);
        after_special = false;
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
    const Impl& m = *impl_;
    std::string out;
    bool after_special = true;
    for (int32_t id : ids) {
        LOWBIT_CHECK(id >= 0 && id < m.n_vocab, ErrorKind::input, "tokenizer: token id {} is outside the vocabulary "
                     "(0..{})", id, m.n_vocab - 1);
        const int32_t type = m.type_of(id);
        if (type == token_type_control || type == token_type_unknown || type == token_type_user_defined) {
            if (render_special || type == token_type_user_defined) out += m.v.tokens[size_t(id)];
            after_special = true;
            continue;
        }
        std::string p = m.piece(id);
        if (m.spm && m.v.add_space_prefix && after_special && !p.empty() && p[0] == ' ') p.erase(0, 1);
        out += p;
        after_special = false;
    }
    return out;
}

std::string Tokenizer::token_text(int32_t id) const {
    LOWBIT_CHECK(id >= 0 && id < impl_->n_vocab, ErrorKind::input, "tokenizer: token id {} is outside the "
                 "vocabulary (0..{})", id, impl_->n_vocab - 1);
    return impl_->v.tokens[size_t(id)];
}

std::string Tokenizer::token_piece(int32_t id) const {
    LOWBIT_CHECK(id >= 0 && id < impl_->n_vocab, ErrorKind::input, "tokenizer: token id {} is outside the "
                 "vocabulary (0..{})", id, impl_->n_vocab - 1);
    return impl_->piece(id);
}

int32_t Tokenizer::token_id(std::string_view text) const { return impl_->find(text); }
int32_t Tokenizer::token_type(int32_t id) const {
    LOWBIT_CHECK(id >= 0 && id < impl_->n_vocab, ErrorKind::input, "tokenizer: token id {} is outside the "
                 "vocabulary (0..{})", id, impl_->n_vocab - 1);
    return impl_->type_of(id);
}
int32_t Tokenizer::bos_id() const { return impl_->v.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->v.eos_id; }
int32_t Tokenizer::unk_id() const { return impl_->v.unk_id; }
bool Tokenizer::add_bos() const { return impl_->v.add_bos; }
size_t Tokenizer::vocab_size() const { return impl_->v.tokens.size(); }
const std::string& Tokenizer::model() const { return impl_->v.model; }
const std::string& Tokenizer::pre() const { return impl_->v.pre; }
const TokenizerVocab& Tokenizer::vocab() const { return impl_->v; }

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
    const Impl& m = *impl_;
    std::vector<std::string> words;
    if (m.spm) {
        if (!text.empty()) words.emplace_back(text);
        return words;
    }
    tokenizer_detail::CodepointText t;
    std::vector<size_t> ends, scratch;
    t.assign(text);
    tokenizer_detail::pre_tokenize_text(t, m.passes, ends, scratch);
    size_t begin = 0;
    for (size_t end : ends) {
        words.emplace_back(text.substr(t.byte_offset[begin], t.byte_offset[end] - t.byte_offset[begin]));
        begin = end;
    }
    return words;
}

bool should_add_bos(std::string_view mode, const Tokenizer& tok) {
    if (mode == "on") return true;
    if (mode == "off") return false;
    LOWBIT_CHECK(mode == "auto", ErrorKind::usage, "BOS mode '{}': expected auto, on or off", mode);
    return tok.add_bos();
}

}  // namespace lowbit
