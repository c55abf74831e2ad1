// tokenizer_spm.cpp — the SentencePiece-style BPE engine (model "llama": Llama 2), written to reproduce
// llama.cpp's llm_tokenizer_spm: spaces → U+2581 with a space prefix, merges by token score (highest
// first, leftmost on ties), <0xXX> byte fallback, unknown token last.
#include "model/tokenizer_impl.h"

#include "model/unicode_categories.h"

namespace lowbit {

using namespace tokenizer_detail;

namespace {

const std::string k_spm_space = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

}  // namespace

void Tokenizer::Impl::build_spm() {
    v.pre = "default";
    for (int b = 0; b < 256; ++b) {
        const char hex[] = "0123456789ABCDEF";
        const std::string text = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = find(text);
        if (id < 0) id = find(std::string(1, char(b)));
        byte_token[size_t(b)] = id;
    }
}

void Tokenizer::Impl::encode_spm_fragment(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const {
    std::string escaped;
    escaped.reserve(text.size() + k_spm_space.size());
    if (space_prefix) escaped += k_spm_space;
    for (char c : text) {
        if (c == ' ') {
            escaped += k_spm_space;
        } else {
            escaped += c;
        }
    }
    encode_spm_text(escaped, out);
}

// SentencePiece BPE (llama.cpp's llm_tokenizer_spm): characters (cut by UTF-8 lead byte) merge pairwise,
// the pair whose concatenation is the vocabulary token of highest score first (leftmost on ties); what is
// left and is not a token falls back to byte tokens, then to the unknown token.
void Tokenizer::Impl::encode_spm_text(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<MergeSymbol> syms;
    std::vector<MergeCandidate> heap;
    syms.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        const size_t len = std::min(utf8_sequence_length(uint8_t(text[pos])), text.size() - pos);
        syms.push_back({-1, int32_t(syms.size()) - 1, -1, uint32_t(pos), uint32_t(len)});
        pos += len;
        if (pos < text.size()) syms.back().next = int32_t(syms.size());
    }
    merge_symbols(syms, heap, [&](const MergeSymbol& l, const MergeSymbol& r, MergeCandidate& c) {
        const int32_t id = find(text.substr(l.start, l.len + r.len));
        if (id < 0) return false;
        c.priority = v.scores[size_t(id)];
        c.result = id;
        return true;
    });
    for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[size_t(i)].next) {
        const MergeSymbol& s = syms[size_t(i)];
        const std::string_view piece = text.substr(s.start, s.len);
        if (int32_t id = find(piece); id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char ch : piece) {
            const int32_t id = byte_token[uint8_t(ch)];
            if (id >= 0) {
                out.push_back(id);
            } else if (v.unk_id >= 0) {
                out.push_back(v.unk_id);
            }
        }
    }
}

std::string Tokenizer::Impl::spm_piece(const std::string& text) const {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        if (text.compare(pos, k_spm_space.size(), k_spm_space) == 0) {
            out += ' ';
            pos += k_spm_space.size();
        } else {
            out += text[pos++];
        }
    }
    return out;
}

}  // namespace lowbit
