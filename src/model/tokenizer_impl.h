// tokenizer_impl.h — inside the tokenizer (not part of its public API): the shared, immutable state of a
// Tokenizer and the pairwise merge loop both BPE engines use. tokenizer.cpp builds what both models share
// (checks, token lookup, special tokens) and cuts the text at special tokens; each engine builds its own
// tables and encodes the text between them: tokenizer_bpe.cpp (byte-level BPE, model "gpt2") and
// tokenizer_spm.cpp (SentencePiece BPE, model "llama").
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"
#include "model/tokenizer_pretokenize.h"

namespace lowbit {

namespace tokenizer_detail {

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Pairwise merging over a doubly linked list of symbols (spans of the text), shared by both BPE flavours:
// the candidate pair of highest priority (leftmost on ties) merges, then its new neighbours become
// candidates. A binary heap with lazy deletion (a candidate is stale when either side has since changed
// size) makes this O(n log n) instead of rescanning every pair after each merge.
struct MergeSymbol {
    int32_t id, prev, next;  // id: the symbol's token/merge id (byte-level BPE only)
    uint32_t start, len;     // len 0: merged into its left neighbour
};
struct MergeCandidate {
    double priority;  // -rank (byte-level BPE) or the token score (SentencePiece)
    int32_t left, right, result;
    uint32_t size;
};

// `pair_of(l, r, c)` says whether adjacent symbols l, r may merge, filling c.priority and c.result.
template <typename PairOf>
void merge_symbols(std::vector<MergeSymbol>& syms, std::vector<MergeCandidate>& heap, PairOf pair_of) {
    const auto lower = [](const MergeCandidate& x, const MergeCandidate& y) {
        return x.priority < y.priority || (x.priority == y.priority && x.left > y.left);
    };
    const auto try_pair = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        MergeCandidate c{0.0, l, r, -1, syms[size_t(l)].len + syms[size_t(r)].len};
        if (!pair_of(syms[size_t(l)], syms[size_t(r)], c)) return;
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), lower);
    };
    heap.clear();
    for (size_t i = 1; i < syms.size(); ++i) try_pair(int32_t(i) - 1, int32_t(i));
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), lower);
        const MergeCandidate c = heap.back();
        heap.pop_back();
        MergeSymbol& l = syms[size_t(c.left)];
        MergeSymbol& r = syms[size_t(c.right)];
        if (l.len == 0 || r.len == 0 || l.len + r.len != c.size) continue;  // stale
        l.id = c.result;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) syms[size_t(r.next)].prev = c.left;
        try_pair(l.prev, c.left);
        try_pair(c.left, l.next);
    }
}

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
    TokenizerVocab v;
    bool spm = false;  // "llama" model
    int32_t n_vocab = 0;
    tokenizer_detail::StringIdMap token_to_id;
    std::vector<int32_t> special_tokens;  // control, user-defined and unknown tokens, longest first

    // byte-level BPE (tokenizer_bpe.cpp): symbols are token ids, or ids >= n_vocab for merge parts that
    // are not tokens
    tokenizer_detail::PreTokenizer pre = tokenizer_detail::PreTokenizer::gpt2;
    bool ignore_merges = false;  // llama-bpe: a pre-token that is a whole token skips the merges
    std::vector<tokenizer_detail::SplitPass> passes;
    std::array<uint32_t, 256> byte_to_cp{};
    std::array<std::string, 256> byte_to_text{};  // UTF-8 of byte_to_cp
    std::unordered_map<uint32_t, uint8_t> cp_to_byte;
    std::array<int32_t, 256> byte_symbol{};  // symbol of each single byte, -1 when none
    tokenizer_detail::StringIdMap extra_symbols;  // merge parts and results that are not tokens
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    std::unordered_map<uint64_t, Merge> merges;

    // SentencePiece (tokenizer_spm.cpp): the token of each byte for byte fallback (<0xXX>, else the byte
    // itself), -1 if none
    std::array<int32_t, 256> byte_token{};

    int32_t type_of(int32_t id) const { return v.token_types[size_t(id)]; }
    int32_t find(std::string_view s) const {
        auto it = token_to_id.find(s);
        return it == token_to_id.end() ? -1 : it->second;
    }

    // tokenizer.cpp: validates the vocabulary, builds what both models share, then the engine's tables.
    void build(TokenizerVocab vocab);
    // The bytes of a token (see Tokenizer::token_piece).
    std::string piece(int32_t id) const;

    // tokenizer_bpe.cpp
    void build_bpe();
    void encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const;
    void encode_bpe_word(std::string_view bytes, std::vector<int32_t>& out) const;
    std::string bpe_piece(const std::string& text) const;  // mapped characters → bytes
    int32_t symbol_of(std::string_view s) const;
    int32_t intern(const std::string& s);

    // tokenizer_spm.cpp
    void build_spm();
    // One stretch of text between special tokens: spaces → U+2581 (and the space prefix when
    // `space_prefix`), then the merges.
    void encode_spm_fragment(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
    void encode_spm_text(std::string_view escaped, std::vector<int32_t>& out) const;
    std::string spm_piece(const std::string& text) const;  // U+2581 → space
};

}  // namespace lowbit
