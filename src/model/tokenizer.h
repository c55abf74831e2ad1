// tokenizer.h — the tokenizer of lowbit's LLM runtime, matching llama.cpp token for token:
//   * byte-level BPE ("gpt2" model: GPT-2, Llama 3, Qwen2, SmolLM): text → pre-tokens (a hand-written
//     scanner per pre-tokenizer id, tokenizer_pretokenize.cpp) → bytes mapped by GPT-2's bytes_to_unicode
//     → merges by rank (lowest first, leftmost on ties) — tokenizer_bpe.cpp;
//   * SentencePiece-style BPE ("llama" model: Llama 2): spaces → U+2581 with a space prefix, merges by
//     token score (highest first, leftmost on ties), <0xXX> byte fallback, unknown token last —
//     tokenizer_spm.cpp.
// The loaders (GGUF, tokenizer.json, GPT-2's files, and load_tokenizer for a model path) are in
// tokenizer_loaders.cpp; tokenizer.cpp holds what both models share.
// Special tokens: the text is first cut at user-defined tokens (token type 4) — and, when parse_special is
// on, at control (3) and unknown (2) tokens too — longest token first, as llama.cpp's
// tokenizer_st_partition does; llama.cpp's test vectors are made with parse_special = false.
// A Tokenizer is immutable after construction, cheap to copy (shared state) and safe to use from several
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

class GgufFile;

// GGUF token types (tokenizer.ggml.token_type; llama.cpp's LLAMA_TOKEN_TYPE_*).
enum TokenType : int32_t {
    token_type_undefined = 0,
    token_type_normal = 1,
    token_type_unknown = 2,
    token_type_control = 3,
    token_type_user_defined = 4,
    token_type_unused = 5,
    token_type_byte = 6,
};

// Everything a tokenizer needs, filled from GGUF metadata or tokenizer.json (or by hand in tests).
struct TokenizerVocab {
    std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
    // Pre-tokenizer id of a byte-level BPE: "gpt2" (also "gpt-2"), "llama-bpe" (also "llama3", "llama-v3"),
    // "qwen2", "smollm", "default" (llama.cpp's fallback for GGUF files without tokenizer.ggml.pre);
    // empty means "gpt2". Ignored by the "llama" model.
    std::string pre;
    std::vector<std::string> tokens;
    std::vector<float> scores;        // "llama" model: merge priority of each token; may be empty for "gpt2"
    std::vector<int32_t> token_types; // TokenType per token; empty = all normal
    std::vector<std::string> merges;  // "gpt2" model: "a b", highest priority first
    int32_t bos_id = -1, eos_id = -1, unk_id = -1;
    bool add_bos = false, add_space_prefix = false;
};

class Tokenizer {
public:
    // Validates the vocabulary (sizes agree, ids in range, no duplicate tokens, a supported model and
    // pre-tokenizer); fails with Error(input) saying what is wrong.
    explicit Tokenizer(TokenizerVocab vocab);

    // From the tokenizer.ggml.* keys of a GGUF file (interop.md §2.4). Without tokenizer.ggml.pre a
    // byte-level BPE gets llama.cpp's "default" pre-tokenizer, as llama.cpp does.
    static Tokenizer from_gguf(const GgufFile& file);
    // From a Hugging Face tokenizer.json (byte-level BPE; merges as "a b" strings or [a, b] pairs). BOS/EOS
    // come from the post-processor template or from a tokenizer_config.json next to the file.
    static Tokenizer from_hf_json(const std::string& path);
    // From GPT-2's original files: encoder.json (token → id) and vocab.bpe (merges, "#version" line first).
    static Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);

    // Token ids of `text` (UTF-8; invalid bytes are kept as bytes). add_bos prepends the BOS token (fails
    // when the vocabulary has none); callers normally pass add_bos(). No EOS is ever appended.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;
    // The bytes the ids stand for. Control and unknown tokens are written as their text when
    // render_special is true (Hugging Face's default and llama.cpp's common_detokenize default), else
    // dropped. For the "llama" model the space prefix that encode adds at the start and after each special
    // token is removed again, so decode(encode(x)) == x. No clean-up of spaces before punctuation.
    std::string decode(const std::vector<int32_t>& ids, bool render_special = true) const;

    // The token's string as stored in the vocabulary (e.g. "Ġthe", "▁the", "<0x0A>").
    std::string token_text(int32_t id) const;
    // The bytes the single token decodes to (" the", "\n"); control tokens give their text.
    std::string token_piece(int32_t id) const;
    // The id of a vocabulary string, -1 when absent.
    int32_t token_id(std::string_view text) const;
    int32_t token_type(int32_t id) const;

    int32_t bos_id() const;
    int32_t eos_id() const;
    int32_t unk_id() const;
    bool add_bos() const;
    size_t vocab_size() const;
    const std::string& model() const;
    const std::string& pre() const;  // normalized id: "gpt2", "llama-bpe", "qwen2", "smollm" or "default"
    const TokenizerVocab& vocab() const;

    // The pre-tokens of a byte-level BPE (the words merges run inside), as UTF-8 strings, for tests and
    // debugging; special tokens are not split out here.
    std::vector<std::string> pre_tokenize(std::string_view text) const;

    // "gpt2 (gpt-2), llama-bpe (llama3, llama-v3), qwen2, smollm, default" — for error messages.
    static std::string supported_pre_tokenizers();

    struct Impl;

private:
    std::shared_ptr<const Impl> impl_;
};

// The tokenizer of a model path (a .gguf file, an HF checkpoint directory or its config.json): the GGUF's
// own vocabulary or the checkpoint's tokenizer.json. `override_path` (a .gguf, a tokenizer.json or a known
// model name), when not empty, is used instead.
Tokenizer load_tokenizer(const std::string& model_path, const std::string& override_path = "");

// Whether to prepend BOS for a BOS mode: "on", "off", or "auto" (the vocabulary's add_bos()). Fails
// (usage) on any other mode.
bool should_add_bos(std::string_view mode, const Tokenizer& tok);

}  // namespace lowbit
