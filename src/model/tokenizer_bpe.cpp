// tokenizer_bpe.cpp — the byte-level BPE engine (model "gpt2": GPT-2, Llama 3, Qwen2, SmolLM), written to
// reproduce llama.cpp's llm_tokenizer_bpe: text → pre-tokens (tokenizer_pretokenize.h) → bytes mapped by
// GPT-2's bytes_to_unicode → merges by rank (lowest first, leftmost on ties).
#include "core/error.h"
#include "model/tokenizer_impl.h"
#include "model/unicode_categories.h"

namespace lowbit {

using namespace tokenizer_detail;

namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 + k
// in byte order, so every byte has a visible, non-space character.
std::array<uint32_t, 256> bytes_to_unicode() {
    std::array<uint32_t, 256> map{};
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = printable ? b : next++;
    }
    return map;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

int32_t Tokenizer::Impl::symbol_of(std::string_view s) const {
    if (int32_t id = find(s); id >= 0) return id;
    auto it = extra_symbols.find(s);
    return it == extra_symbols.end() ? -1 : it->second;
}

int32_t Tokenizer::Impl::intern(const std::string& s) {
    if (int32_t id = symbol_of(s); id >= 0) return id;
    const int32_t id = n_vocab + int32_t(extra_symbols.size());
    extra_symbols.emplace(s, id);
    return id;
}

void Tokenizer::Impl::build_bpe() {
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

std::string Tokenizer::Impl::bpe_piece(const std::string& text) const {
    std::string out;
    for (size_t pos = 0; pos < text.size();) {
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

}  // namespace lowbit
