// tokenizer.cpp — byte-level BPE and SentencePiece-style BPE (see tokenizer.h), written to reproduce
// llama.cpp's src/llama-vocab.cpp and src/unicode.cpp behaviour, which its test vectors pin down.
//
// Regex engine decision: no regex library. The pre-tokenizer regexes are fixed, so each is a hand-written
// scanner over code points that follows the regex's alternation order and greedy matching exactly (the way
// llama.cpp's unicode_regex_split_custom_gpt2/_llama3 do), with classes from a table generated from the
// Unicode Character Database (model/unicode_categories.h; Unicode 15.1, the version of llama.cpp's table).
// This keeps the dependency list short (no PCRE2), makes `\s+(?!\S)` and the case-insensitive
// contractions explicit, and costs nothing per match. The scanners:
//   gpt2:      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   llama-bpe: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//              \s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:     the llama-bpe regex with \p{N} instead of \p{N}{1,3}
//   smollm:    \p{N} (every digit its own piece), then the gpt2 regex inside each piece
//   default:   [\p{P}\$\+<=>\^~\|]+, then gpt2, then \p{N}+, then [0-9][0-9][0-9] (llama.cpp's fallback)
// As in llama.cpp, each regex of a sequence splits the pieces of the previous one (matches and the gaps
// between them both become pieces), and a regex never looks past the end of its piece. Case-insensitive
// contractions fold ASCII only (as llama.cpp's unicode_tolower does for these letters).
//
// Differences from llama.cpp, on purpose: invalid UTF-8 bytes are kept as bytes (llama.cpp turns each
// into U+FFFD), so byte-level decode(encode(x)) == x for any bytes; decode does no clean-up of spaces
// before punctuation. Per-token attributes that llama.cpp sets by model name (lstrip/rstrip) are not kept.
#include "model/tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/unicode_categories.h"

namespace lowbit {

namespace {

// ---------------------------------------------------------------------------------------------------
// Pre-tokenizer ids
// ---------------------------------------------------------------------------------------------------

enum class PreTokenizer { gpt2, llama3, qwen2, smollm, default_ };

bool parse_pre_tokenizer(const std::string& id, PreTokenizer& out, std::string& normalized) {
    struct Alias {
        const char* id;
        PreTokenizer pre;
        const char* name;
    };
    static const Alias aliases[] = {
        {"", PreTokenizer::gpt2, "gpt2"},           {"gpt2", PreTokenizer::gpt2, "gpt2"},
        {"gpt-2", PreTokenizer::gpt2, "gpt2"},      {"llama-bpe", PreTokenizer::llama3, "llama-bpe"},
        {"llama3", PreTokenizer::llama3, "llama-bpe"}, {"llama-v3", PreTokenizer::llama3, "llama-bpe"},
        {"qwen2", PreTokenizer::qwen2, "qwen2"},    {"smollm", PreTokenizer::smollm, "smollm"},
        {"default", PreTokenizer::default_, "default"},
    };
    for (const Alias& a : aliases) {
        if (id == a.id) {
            out = a.pre;
            normalized = a.name;
            return true;
        }
    }
    return false;
}

// ---------------------------------------------------------------------------------------------------
// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 + k
// in byte order, so every byte has a visible, non-space character.
// ---------------------------------------------------------------------------------------------------

std::array<uint32_t, 256> bytes_to_unicode() {
    std::array<uint32_t, 256> map{};
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = printable ? b : next++;
    }
    return map;
}

// ---------------------------------------------------------------------------------------------------
// Text as code points with their classes, and the pre-tokenizer scanners
// ---------------------------------------------------------------------------------------------------

struct CodepointText {
    std::vector<uint32_t> cp;
    std::vector<uint8_t> cls;
    std::vector<uint32_t> byte_offset;  // n + 1 entries: where each code point starts in the UTF-8 text

    void assign(std::string_view s) {
        cp.clear(), cls.clear(), byte_offset.clear();
        cp.reserve(s.size()), cls.reserve(s.size()), byte_offset.reserve(s.size() + 1);
        size_t pos = 0;
        while (pos < s.size()) {
            byte_offset.push_back(uint32_t(pos));
            const uint32_t c = utf8_decode(s, pos);
            cp.push_back(c);
            cls.push_back(uint8_t(codepoint_class(c)));
        }
        byte_offset.push_back(uint32_t(s.size()));
    }
    size_t size() const { return cp.size(); }
};

constexpr uint8_t k_letter = uint8_t(CodepointClass::letter);
constexpr uint8_t k_number = uint8_t(CodepointClass::number);
constexpr uint8_t k_space = uint8_t(CodepointClass::space);
constexpr uint8_t k_punct = uint8_t(CodepointClass::punctuation);
constexpr uint8_t k_none = 0xFF;  // past the end of the piece: matches no class
constexpr uint32_t k_no_cp = 0xFFFFFFFF;

// One piece [b, e) of a CodepointText as the regexes see it: nothing exists outside it.
struct Piece {
    const CodepointText& t;
    size_t b, e;
    uint8_t cls(size_t i) const { return i < e ? t.cls[i] : k_none; }
    uint32_t cp(size_t i) const { return i < e ? t.cp[i] : k_no_cp; }
    // [^\s\p{L}\p{N}]
    bool other(size_t i) const {
        const uint8_t c = cls(i);
        return c != k_none && c != k_letter && c != k_number && c != k_space;
    }
};

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d at pos (optionally ASCII case-insensitive): the match length, 0 for none.
size_t contraction_length(const Piece& p, size_t pos, bool ignore_case) {
    if (p.cp(pos) != '\'' || pos + 1 >= p.e) return 0;
    const auto fold = [&](uint32_t c) { return ignore_case ? ascii_lower(c) : c; };
    const uint32_t c1 = fold(p.cp(pos + 1));
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= p.e) return 0;
    const uint32_t c2 = fold(p.cp(pos + 2));
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S); the piece ends go to `ends`.
void split_gpt2(const Piece& p, std::vector<size_t>& ends) {
    size_t pos = p.b;
    while (pos < p.e) {
        if (size_t n = contraction_length(p, pos, false)) {
            ends.push_back(pos += n);
            continue;
        }
        size_t q = pos + (p.cp(pos) == ' ' ? 1 : 0);
        const uint8_t c = p.cls(q);
        if (c == k_letter || c == k_number) {  // ' ?\p{L}+' and ' ?\p{N}+'
            while (p.cls(q) == c) ++q;
            ends.push_back(pos = q);
            continue;
        }
        if (p.other(q)) {  // ' ?[^\s\p{L}\p{N}]+'
            while (p.other(q)) ++q;
            ends.push_back(pos = q);
            continue;
        }
        size_t n = 0;  // '\s+(?!\S)': a run of spaces followed by a non-space gives back its last space
        while (p.cls(pos + n) == k_space) ++n;
        if (n > 1 && pos + n < p.e) {
            ends.push_back(pos += n - 1);
        } else if (n > 0) {
            ends.push_back(pos += n);
        } else {
            ends.push_back(pos += 1);  // unreachable: every code point is a letter, number, space or other
        }
    }
}

// The llama-bpe regex (max_digits = 3) and qwen2's (max_digits = 1); see the file header.
void split_llama3(const Piece& p, size_t max_digits, std::vector<size_t>& ends) {
    size_t pos = p.b;
    while (pos < p.e) {
        const uint32_t c = p.cp(pos);
        const uint8_t k = p.cls(pos);
        if (size_t n = contraction_length(p, pos, true)) {
            ends.push_back(pos += n);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (c != '\r' && c != '\n' && k != k_number && (k == k_letter || p.cls(pos + 1) == k_letter)) {
            size_t q = pos + 1;
            while (p.cls(q) == k_letter) ++q;
            ends.push_back(pos = q);
            continue;
        }
        if (k == k_number) {  // \p{N}{1,max_digits}
            size_t q = pos + 1;
            while (q < pos + max_digits && p.cls(q) == k_number) ++q;
            ends.push_back(pos = q);
            continue;
        }
        size_t q = pos + (c == ' ' ? 1 : 0);  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        if (p.other(q)) {
            while (p.other(q)) ++q;
            while (p.cp(q) == '\r' || p.cp(q) == '\n') ++q;
            ends.push_back(pos = q);
            continue;
        }
        // \s*[\r\n]+ (ends after the run's last \r or \n), else \s+(?!\S), else \s+
        size_t n = 0, last_newline_end = 0;
        while (p.cls(pos + n) == k_space) {
            if (p.cp(pos + n) == '\r' || p.cp(pos + n) == '\n') last_newline_end = pos + n + 1;
            ++n;
        }
        if (last_newline_end > 0) {
            ends.push_back(pos = last_newline_end);
        } else if (n > 1 && pos + n < p.e) {
            ends.push_back(pos += n - 1);
        } else if (n > 0) {
            ends.push_back(pos += n);
        } else {
            ends.push_back(pos += 1);
        }
    }
}

// A regex that matches single code points or runs of them: each match and each gap is a piece.
template <typename Match>
void split_isolated(const Piece& p, bool runs, Match match, std::vector<size_t>& ends) {
    size_t pos = p.b;
    while (pos < p.e) {
        size_t q = pos;
        if (match(q)) {
            ++q;
            while (runs && q < p.e && match(q)) ++q;
        } else {
            while (q < p.e && !match(q)) ++q;
        }
        ends.push_back(pos = q);
    }
}

// [0-9][0-9][0-9], leftmost non-overlapping matches, gaps as pieces.
void split_three_digits(const Piece& p, std::vector<size_t>& ends) {
    const auto digit = [&](size_t i) { return i < p.e && p.t.cp[i] >= '0' && p.t.cp[i] <= '9'; };
    size_t pos = p.b, gap = p.b;
    while (pos < p.e) {
        if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
            if (pos > gap) ends.push_back(pos);
            ends.push_back(pos += 3);
            gap = pos;
        } else {
            ++pos;
        }
    }
    if (p.e > gap) ends.push_back(p.e);
}

using SplitPass = std::function<void(const Piece&, std::vector<size_t>&)>;

std::vector<SplitPass> passes_for(PreTokenizer pre) {
    const SplitPass gpt2 = [](const Piece& p, std::vector<size_t>& e) { split_gpt2(p, e); };
    const SplitPass digits = [](const Piece& p, std::vector<size_t>& e) {
        split_isolated(p, false, [&](size_t i) { return p.t.cls[i] == k_number; }, e);
    };
    switch (pre) {
        case PreTokenizer::gpt2: return {gpt2};
        case PreTokenizer::llama3: return {[](const Piece& p, std::vector<size_t>& e) { split_llama3(p, 3, e); }};
        case PreTokenizer::qwen2: return {[](const Piece& p, std::vector<size_t>& e) { split_llama3(p, 1, e); }};
        case PreTokenizer::smollm: return {digits, gpt2};
        case PreTokenizer::default_:
            return {
                [](const Piece& p, std::vector<size_t>& e) {  // [\p{P}\$\+<=>\^~\|]+
                    const auto punct = [&](size_t i) {
                        const uint32_t c = p.t.cp[i];
                        return p.t.cls[i] == k_punct || c == '$' || c == '+' || c == '<' || c == '=' ||
                               c == '>' || c == '^' || c == '~' || c == '|';
                    };
                    split_isolated(p, true, punct, e);
                },
                gpt2,
                [](const Piece& p, std::vector<size_t>& e) {  // \p{N}+
                    split_isolated(p, true, [&](size_t i) { return p.t.cls[i] == k_number; }, e);
                },
                [](const Piece& p, std::vector<size_t>& e) { split_three_digits(p, e); },
            };
    }
    return {gpt2};
}

// Pre-token boundaries of the whole text: code-point indices where pieces end.
void pre_tokenize_text(const CodepointText& t, const std::vector<SplitPass>& passes, std::vector<size_t>& ends,
                       std::vector<size_t>& scratch) {
    ends.assign(1, t.size());
    if (t.size() == 0) {
        ends.clear();
        return;
    }
    for (const SplitPass& pass : passes) {
        scratch.clear();
        size_t begin = 0;
        for (size_t end : ends) {
            pass(Piece{t, begin, end}, scratch);
            begin = end;
        }
        std::swap(ends, scratch);
    }
}

// ---------------------------------------------------------------------------------------------------
// Lookup helpers
// ---------------------------------------------------------------------------------------------------

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

const std::string k_spm_space = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

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

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The shared, immutable state
// ---------------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
    TokenizerVocab v;
    bool spm = false;             // "llama" model
    PreTokenizer pre = PreTokenizer::gpt2;
    bool ignore_merges = false;   // llama-bpe: a pre-token that is a whole token skips the merges
    std::vector<SplitPass> passes;
    int32_t n_vocab = 0;
    StringIdMap token_to_id;

    // byte-level BPE: symbols are token ids, or ids >= n_vocab for merge parts that are not tokens
    std::array<uint32_t, 256> byte_to_cp{};
    std::array<std::string, 256> byte_to_text{};  // UTF-8 of byte_to_cp
    std::unordered_map<uint32_t, uint8_t> cp_to_byte;
    std::array<int32_t, 256> byte_symbol{};       // symbol of each single byte, -1 when none
    StringIdMap extra_symbols;                    // merge parts and results that are not tokens
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    std::unordered_map<uint64_t, Merge> merges;

    // SentencePiece: the token of each byte for byte fallback (<0xXX>, else the byte itself), -1 if none
    std::array<int32_t, 256> byte_token{};

    std::vector<int32_t> special_tokens;  // control, user-defined and unknown tokens, longest first

    int32_t type_of(int32_t id) const { return v.token_types[size_t(id)]; }
    int32_t find(std::string_view s) const {
        auto it = token_to_id.find(s);
        return it == token_to_id.end() ? -1 : it->second;
    }
    int32_t symbol_of(std::string_view s) const {
        if (int32_t id = find(s); id >= 0) return id;
        auto it = extra_symbols.find(s);
        return it == extra_symbols.end() ? -1 : it->second;
    }
    int32_t intern(const std::string& s) {
        if (int32_t id = symbol_of(s); id >= 0) return id;
        const int32_t id = n_vocab + int32_t(extra_symbols.size());
        extra_symbols.emplace(s, id);
        return id;
    }

    void build(TokenizerVocab vocab);
    void encode_bpe_word(std::string_view bytes, std::vector<int32_t>& out) const;
    void encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const;
    void encode_spm_text(std::string_view text, std::vector<int32_t>& out) const;
    std::string piece(int32_t id) const;
};

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
        v.pre = "default";
        for (int b = 0; b < 256; ++b) {
            const char hex[] = "0123456789ABCDEF";
            const std::string text = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
            int32_t id = find(text);
            if (id < 0) id = find(std::string(1, char(b)));
            byte_token[size_t(b)] = id;
        }
        return;
    }

    std::string normalized;
    if (!parse_pre_tokenizer(v.pre, pre, normalized)) {
        fail(ErrorKind::input, "tokenizer: pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; supported: {}",
             v.pre, Tokenizer::supported_pre_tokenizers());
    }
    v.pre = normalized;
    ignore_merges = pre == PreTokenizer::llama3;
    passes = passes_for(pre);
    LOWBIT_CHECK(!v.merges.empty(), ErrorKind::input, "tokenizer: a byte-level BPE vocabulary needs merges");

    byte_to_cp = bytes_to_unicode();
    for (int b = 0; b < 256; ++b) {
        utf8_append(byte_to_text[size_t(b)], byte_to_cp[size_t(b)]);
        cp_to_byte[byte_to_cp[size_t(b)]] = uint8_t(b);
    }
    merges.reserve(v.merges.size());
    for (size_t rank = 0; rank < v.merges.size(); ++rank) {
        const std::string& m = v.merges[rank];
        const size_t space = m.find(' ', 1);  // llama.cpp's split: the first space after the first byte
        if (space == std::string::npos) {
            fail(ErrorKind::input, "tokenizer: merge {} '{}' is not of the form 'a b'", rank, m);
        }
        const std::string a = m.substr(0, space), b = m.substr(space + 1);
        const int32_t ia = intern(a), ib = intern(b), ir = intern(a + b);
        merges.emplace(pair_key(ia, ib), Merge{int32_t(rank), ir});  // the first (best) rank wins
    }
    for (int b = 0; b < 256; ++b) byte_symbol[size_t(b)] = symbol_of(byte_to_text[size_t(b)]);
}

// Byte-level BPE of one pre-token: every byte starts as the symbol of its mapped character; the adjacent
// pair of lowest merge rank (leftmost on ties) merges until no pair has a rank.
void Tokenizer::Impl::encode_bpe_word(std::string_view bytes, std::vector<int32_t>& out) const {
    const auto emit_bytes = [&](size_t begin, size_t len) {  // symbols that are not tokens
        for (size_t i = begin; i < begin + len; ++i) {
            const int32_t s = byte_symbol[uint8_t(bytes[i])];
            if (s >= 0 && s < n_vocab) out.push_back(s);
        }
    };
    if (ignore_merges) {
        std::string mapped;
        mapped.reserve(bytes.size() * 2);
        for (char c : bytes) mapped += byte_to_text[uint8_t(c)];
        if (int32_t id = find(mapped); id >= 0) {
            out.push_back(id);
            return;
        }
    }
    const size_t n = bytes.size();
    if (n == 1) {
        emit_bytes(0, 1);
        return;
    }
    thread_local std::vector<MergeSymbol> syms;
    thread_local std::vector<MergeCandidate> heap;
    syms.resize(n);
    for (size_t i = 0; i < n; ++i) {
        syms[i] = {byte_symbol[uint8_t(bytes[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i) + 1 : -1, uint32_t(i), 1};
    }
    merge_symbols(syms, heap, [&](const MergeSymbol& l, const MergeSymbol& r, MergeCandidate& c) {
        if (l.id < 0 || r.id < 0) return false;
        auto it = merges.find(pair_key(l.id, r.id));
        if (it == merges.end()) return false;
        c.priority = -double(it->second.rank);
        c.result = it->second.result;
        return true;
    });
    for (int32_t i = 0; i >= 0; i = syms[size_t(i)].next) {
        const MergeSymbol& s = syms[size_t(i)];
        if (s.id >= 0 && s.id < n_vocab) {
            out.push_back(s.id);
        } else {
            emit_bytes(s.start, s.len);
        }
    }
}

void Tokenizer::Impl::encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const {
    thread_local CodepointText t;
    thread_local std::vector<size_t> ends, scratch;
    t.assign(text);
    pre_tokenize_text(t, passes, ends, scratch);
    size_t begin = 0;
    for (size_t end : ends) {
        const size_t b0 = t.byte_offset[begin], b1 = t.byte_offset[end];
        encode_bpe_word(text.substr(b0, b1 - b0), out);
        begin = end;
    }
    if (t.cp.capacity() > (size_t(1) << 22)) {  // ~9 bytes a character (and 16 a piece): do not hoard them
        t = CodepointText{};
        ends = {};
        scratch = {};
    }
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

std::string Tokenizer::Impl::piece(int32_t id) const {
    const std::string& text = v.tokens[size_t(id)];
    const int32_t type = type_of(id);
    if (type == token_type_control || type == token_type_unknown || type == token_type_user_defined) return text;
    if (type == token_type_byte) {
        const int b = parse_byte_token(text);
        if (b >= 0) return std::string(1, char(b));
    }
    std::string out;
    if (spm) {  // ▁ → space
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
    for (size_t pos = 0; pos < text.size();) {  // mapped characters → bytes
        const size_t start = pos;
        const uint32_t cp = utf8_decode(text, pos);
        auto it = cp_to_byte.find(cp);
        if (it != cp_to_byte.end()) {
            out += char(it->second);
        } else {
            out.append(text, start, pos - start);  // not a byte character: keep it as it is
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(TokenizerVocab vocab) {
    auto impl = std::make_shared<Impl>();
    impl->build(std::move(vocab));
    impl_ = std::move(impl);
}

std::string Tokenizer::supported_pre_tokenizers() {
    return "gpt2 (gpt-2), llama-bpe (llama3, llama-v3), qwen2, smollm, default";
}

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
    std::string escaped;
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
        escaped.clear();
        if (m.v.add_space_prefix && after_special) escaped += k_spm_space;
        for (char c : s) {
            if (c == ' ') {
                escaped += k_spm_space;
            } else {
                escaped += c;
            }
        }
        m.encode_spm_text(escaped, out);
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
    CodepointText t;
    std::vector<size_t> ends, scratch;
    t.assign(text);
    pre_tokenize_text(t, m.passes, ends, scratch);
    size_t begin = 0;
    for (size_t end : ends) {
        words.emplace_back(text.substr(t.byte_offset[begin], t.byte_offset[end] - t.byte_offset[begin]));
        begin = end;
    }
    return words;
}

// ---------------------------------------------------------------------------------------------------
// Loaders
// ---------------------------------------------------------------------------------------------------

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
    const std::string& name = file.name();
    LOWBIT_CHECK(file.has("tokenizer.ggml.model"), ErrorKind::input,
                 "{}: no tokenizer (the key tokenizer.ggml.model is missing)", name);
    TokenizerVocab v;
    v.model = file.get_string("tokenizer.ggml.model");
    LOWBIT_CHECK(v.model == "gpt2" || v.model == "llama", ErrorKind::input,
                 "{}: tokenizer.ggml.model '{}' is not supported; supported: gpt2 (byte-level BPE), llama "
                 "(SentencePiece BPE)", name, v.model);
    const bool spm = v.model == "llama";
    LOWBIT_CHECK(file.has("tokenizer.ggml.tokens"), ErrorKind::input, "{}: tokenizer.ggml.tokens is missing", name);
    v.tokens = file.get_string_array("tokenizer.ggml.tokens");
    v.scores = file.get_float_array_or("tokenizer.ggml.scores", {});
    v.token_types = file.get_int_array_or("tokenizer.ggml.token_type", {});
    if (!spm) {
        LOWBIT_CHECK(file.has("tokenizer.ggml.merges"), ErrorKind::input,
                     "{}: tokenizer.ggml.merges is missing (a byte-level BPE needs its merges)", name);
        v.merges = file.get_string_array("tokenizer.ggml.merges");
        v.pre = file.get_string_or("tokenizer.ggml.pre", "default");
    } else {
        v.pre = "default";
    }
    const int64_t n = int64_t(v.tokens.size());
    // llama.cpp's defaults: SentencePiece BOS 1, EOS 2, unknown 0 (when they exist).
    const auto id_key = [&](const char* key, int64_t def) -> int32_t {
        const int64_t id = file.get_int_or(key, def);
        if (!file.has(key) && id >= n) return -1;
        LOWBIT_CHECK(id >= -1 && id < n, ErrorKind::input, "{}: {} = {} is outside the vocabulary of {} tokens",
                     name, key, id, n);
        return int32_t(id);
    };
    v.bos_id = id_key("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
    v.eos_id = id_key("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
    v.unk_id = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
    std::string pre_id;
    PreTokenizer pre{};
    const bool llama3 = !spm && parse_pre_tokenizer(v.pre, pre, pre_id) && pre == PreTokenizer::llama3;
    v.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", spm || llama3);
    v.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", spm);
    if (v.add_bos && v.bos_id < 0) v.add_bos = false;
    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        fail(e.kind(), "{}: {}", name, e.what());
    }
}

namespace {

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open the file", path);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: not valid JSON ({})", path, e.what());
    }
}

// The pre-tokenizer id of a tokenizer.json "pre_tokenizer" object.
std::string hf_pre_tokenizer(const nlohmann::json& pt, const std::string& path) {
    static const std::string llama3_regex =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const std::string qwen2_regex =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const auto type_of = [](const nlohmann::json& j) { return j.is_object() ? j.value("type", "") : ""; };
    const auto byte_level = [&](const nlohmann::json& j, bool use_regex) {
        return type_of(j) == "ByteLevel" && j.value("use_regex", true) == use_regex &&
               !j.value("add_prefix_space", false);
    };
    if (byte_level(pt, true)) return "gpt2";
    if (type_of(pt) == "Sequence" && pt.contains("pretokenizers") && pt["pretokenizers"].size() == 2) {
        const nlohmann::json& a = pt["pretokenizers"][0];
        const nlohmann::json& b = pt["pretokenizers"][1];
        if (type_of(a) == "Digits" && a.value("individual_digits", false) && byte_level(b, true)) return "smollm";
        if (type_of(a) == "Split" && a.contains("pattern") && a["pattern"].is_object() &&
            a["pattern"].contains("Regex") && a.value("behavior", "") == "Isolated" && byte_level(b, false)) {
            const std::string regex = a["pattern"]["Regex"].get<std::string>();
            if (regex == llama3_regex) return "llama-bpe";
            if (regex == qwen2_regex) return "qwen2";
        }
    }
    fail(ErrorKind::input, "{}: the pre_tokenizer {} is not one lowbit knows; supported: {}", path,
         pt.dump().substr(0, 300), Tokenizer::supported_pre_tokenizers());
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::string& path) {
    const nlohmann::json j = read_json(path);
    try {
        const nlohmann::json& model = j.at("model");
        const std::string type = model.value("type", "");
        LOWBIT_CHECK(type == "BPE", ErrorKind::input, "{}: model type '{}' is not supported (only BPE)", path, type);
        LOWBIT_CHECK(!model.value("byte_fallback", false), ErrorKind::input,
                     "{}: a SentencePiece-style BPE (byte_fallback) tokenizer.json is not supported; load the "
                     "model's GGUF instead", path);
        TokenizerVocab v;
        v.model = "gpt2";
        v.pre = hf_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()), path);
        // Ids: the BPE vocabulary plus added tokens; holes become unused "[PAD<i>]" tokens (as convert_hf_to_gguf).
        int64_t n = 0;
        for (const auto& [tok, id] : model.at("vocab").items()) n = std::max<int64_t>(n, id.get<int64_t>() + 1);
        const nlohmann::json added = j.value("added_tokens", nlohmann::json::array());
        for (const auto& t : added) n = std::max<int64_t>(n, t.at("id").get<int64_t>() + 1);
        LOWBIT_CHECK(n > 0 && n < INT32_MAX / 2, ErrorKind::input, "{}: bad vocabulary size {}", path, n);
        v.tokens.assign(size_t(n), std::string());
        v.token_types.assign(size_t(n), token_type_unused);
        for (const auto& [tok, id] : model.at("vocab").items()) {
            const int64_t i = id.get<int64_t>();
            LOWBIT_CHECK(i >= 0, ErrorKind::input, "{}: token '{}' has a negative id", path, tok);
            v.tokens[size_t(i)] = tok;
            v.token_types[size_t(i)] = token_type_normal;
        }
        for (const auto& t : added) {
            const size_t i = t.at("id").get<size_t>();
            v.tokens[i] = t.at("content").get<std::string>();
            v.token_types[i] = t.value("special", false) ? token_type_control : token_type_user_defined;
        }
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            if (v.tokens[i].empty()) v.tokens[i] = "[PAD" + std::to_string(i) + "]";
        }
        for (const auto& m : model.at("merges")) {
            if (m.is_string()) {
                v.merges.push_back(m.get<std::string>());
            } else {  // transformers >= 4.45 writes [a, b] pairs (interop.md §5.2)
                LOWBIT_CHECK(m.is_array() && m.size() == 2, ErrorKind::input, "{}: merge {} is neither \"a b\" "
                             "nor [a, b]", path, m.dump());
                v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            }
        }
        // BOS: a TemplateProcessing post-processor that starts with a special token adds it.
        const auto id_of = [&](const std::string& s) -> int32_t {
            for (size_t i = 0; i < v.tokens.size(); ++i) {
                if (v.tokens[i] == s) return int32_t(i);
            }
            return -1;
        };
        const nlohmann::json post = j.value("post_processor", nlohmann::json());
        if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") &&
            !post["single"].empty() && post["single"][0].contains("SpecialToken")) {
            v.bos_id = id_of(post["single"][0]["SpecialToken"].value("id", ""));
            v.add_bos = v.bos_id >= 0;
        }
        // tokenizer_config.json next to it names BOS/EOS (and may say add_bos_token).
        const size_t slash = path.find_last_of('/');
        const std::string config_path =
            (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "tokenizer_config.json";
        if (std::ifstream(config_path).good()) {
            const nlohmann::json c = read_json(config_path);
            const auto token_name = [](const nlohmann::json& x) -> std::string {
                if (x.is_string()) return x.get<std::string>();
                if (x.is_object()) return x.value("content", "");
                return "";
            };
            if (c.contains("bos_token")) v.bos_id = id_of(token_name(c["bos_token"]));
            if (c.contains("eos_token")) v.eos_id = id_of(token_name(c["eos_token"]));
            if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) v.add_bos = c["add_bos_token"].get<bool>();
        }
        if (v.add_bos && v.bos_id < 0) v.add_bos = false;
        return Tokenizer(std::move(v));
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: unexpected tokenizer.json layout ({})", path, e.what());
    } catch (const Error& e) {
        if (std::string_view(e.what()).find(path) != std::string_view::npos) throw;
        fail(e.kind(), "{}: {}", path, e.what());
    }
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
    const nlohmann::json enc = read_json(encoder_json);
    LOWBIT_CHECK(enc.is_object() && !enc.empty(), ErrorKind::input, "{}: expected an object token → id",
                 encoder_json);
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = "gpt2";
    int64_t n = 0;
    for (const auto& [tok, id] : enc.items()) {
        LOWBIT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, ErrorKind::input,
                     "{}: token '{}' has no valid id", encoder_json, tok);
        n = std::max<int64_t>(n, id.get<int64_t>() + 1);
    }
    v.tokens.assign(size_t(n), std::string());
    v.token_types.assign(size_t(n), token_type_normal);
    for (const auto& [tok, id] : enc.items()) v.tokens[id.get<size_t>()] = tok;
    std::ifstream in(vocab_bpe, std::ios::binary);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open the file", vocab_bpe);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        v.merges.push_back(line);
    }
    // <|endoftext|> is GPT-2's only special token (a control token in llama.cpp's gpt-2 vocabulary).
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        if (v.tokens[i] == "<|endoftext|>") {
            v.token_types[i] = token_type_control;
            v.bos_id = v.eos_id = int32_t(i);
        }
    }
    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        fail(e.kind(), "{} + {}: {}", encoder_json, vocab_bpe, e.what());
    }
}

}  // namespace lowbit
