// token_shards.h — tokenized corpora on disk: shard files of token ids, a directory of shards with a
// manifest (train/validation splits), and the deterministic window sampler the training loader calls.
//
// Shard file (one split's tokens, or a part of them), little-endian, version 1:
//   offset  size  field
//        0     8  magic "LBTOK001"
//        8     4  version (1)
//       12     4  token width in bytes: 2 (uint16 ids, vocabularies up to 65,536) or 4 (uint32 ids)
//       16     4  vocabulary size (every id is below it)
//       20     4  separator id (int32): the token written after every document, -1 when none
//       24     8  token count (separators included)
//       32     8  document count
//       40     8  payload checksum: FNV-1a 64 of the payload bytes exactly as stored
//       48    64  tokenizer id: UTF-8, NUL-padded (at most 63 bytes), e.g. "gpt2/smollm/49152/1a2b3c4d5e6f7a8b"
//      112     8  header checksum: FNV-1a 64 of bytes 0..111
//      120     8  reserved, zero (a reader refuses other values)
//      128        payload: token count ids of the given width; the file ends right after it
// Documents follow each other, each followed by the separator token (the vocabulary's <|endoftext|>, else
// its EOS, else its BOS — see `lowbit tokenize-corpus`), so a window that crosses a document boundary sees
// the separator there. A reader checks magic, version, width, header checksum, vocabulary size (1 … 2^31 − 1) and
// separator (in it), the file size against the token count, and (by default) the payload checksum and every id
// against the vocabulary; every failure is Error(input) naming the file.
//
// Shard set (a directory): train_000.bin, train_001.bin, …, val_000.bin, … and manifest.json:
//   {"format": "lowbit-token-shards", "version": 1, "tokenizer": ID, "vocab_size": V, "separator_id": S,
//    "token_bytes": 2|4, "seed": SEED, "val_fraction": F,
//    "splits": {"train": [{"file": "train_000.bin", "tokens": N, "documents": D, "checksum": "16 hex digits"}, …],
//               "val": […]},
//    "info": {…free-form: inputs, command, counts…}}
// Opening a set checks that every listed shard exists and agrees with the manifest (tokenizer, width,
// counts, checksum).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/mapped_file.h"

namespace lowbit {

inline constexpr uint64_t fnv1a64_offset = 0xcbf29ce484222325ull;
// FNV-1a, 64 bits (Fowler–Noll–Vo), continued from `state` so a stream can be hashed piece by piece.
uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t state = fnv1a64_offset);

inline constexpr size_t token_shard_header_bytes = 128;
inline constexpr size_t token_shard_tokenizer_max = 63;

// What a shard header says (also what a writer is given; the counts and checksum are filled by it).
struct TokenShardInfo {
    uint32_t token_bytes = 2;
    uint32_t vocab_size = 0;
    int32_t separator_id = -1;
    std::string tokenizer;
    int64_t token_count = 0;
    int64_t document_count = 0;
    uint64_t checksum = 0;
};

// The width a vocabulary needs: 2 bytes up to 65,536 ids, else 4.
uint32_t token_bytes_for_vocab(uint64_t vocab_size);

// Streams documents into one shard file: written under a temporary name (path.tmp-<pid>) and renamed by
// finish(); destroyed unfinished (an error on the way), it removes the temporary file.
class TokenShardWriter {
public:
    // Error(usage) for a bad width, an empty vocabulary, a separator outside it, a tokenizer id too long.
    TokenShardWriter(std::string path, TokenShardInfo info);
    TokenShardWriter(TokenShardWriter&&) = delete;
    ~TokenShardWriter();

    // Appends the document's ids, then the separator (when there is one). Error(input) for an id outside
    // the vocabulary.
    void add_document(std::span<const int32_t> tokens);
    int64_t token_count() const { return info_.token_count; }
    // Writes the header, closes and renames; returns the final header.
    const TokenShardInfo& finish();

private:
    void append(int32_t id);
    void flush_buffer();

    std::string path_, tmp_;
    TokenShardInfo info_;
    std::FILE* file_ = nullptr;
    std::vector<uint8_t> buffer_;
    uint64_t checksum_state_ = fnv1a64_offset;
    bool finished_ = false;
};

// A shard, memory-mapped and validated.
class TokenShard {
public:
    // verify_checksum = false skips the payload checksum (the header is always checked).
    static TokenShard open(const std::string& path, bool verify_checksum = true);
    static TokenShard from_bytes(std::vector<uint8_t> bytes, const std::string& name, bool verify_checksum = true);

    const TokenShardInfo& info() const { return info_; }
    int64_t size() const { return info_.token_count; }
    // Tokens [begin, begin + n) as int32; Error(usage) when the range leaves the shard.
    void read(int64_t begin, int64_t n, int32_t* out) const;
    std::vector<int32_t> read(int64_t begin, int64_t n) const;

private:
    static TokenShard parse(MappedFile file, const std::string& name, bool verify_checksum);

    MappedFile file_;
    std::string name_;
    TokenShardInfo info_;
};

// The split a document goes to: a hash of its bytes and the seed, so re-running gives the same split and
// adding documents never moves others. True for "val" with probability val_fraction.
bool document_in_validation(std::string_view document, uint64_t seed, double val_fraction);

struct TokenShardEntry {
    std::string file;
    int64_t tokens = 0, documents = 0;
    uint64_t checksum = 0;
};

struct TokenShardManifest {
    std::string tokenizer;
    uint32_t vocab_size = 0, token_bytes = 2;
    int32_t separator_id = -1;
    uint64_t seed = 0;
    double val_fraction = 0;
    std::map<std::string, std::vector<TokenShardEntry>> splits;  // "train", "val"
    nlohmann::json info = nlohmann::json::object();
};

// manifest.json text ↔ manifest; parse fails with Error(input) naming `name` and the bad key.
TokenShardManifest parse_token_shard_manifest(const std::string& json_text, const std::string& name);
std::string token_shard_manifest_json(const TokenShardManifest& m);

// Writes a shard set: add_document(split, ids) in order; a split's shard is closed and the next one started
// once it holds shard_tokens tokens (documents are never cut). finish() writes manifest.json last;
// destroyed unfinished, it removes every shard it wrote.
class TokenShardSetWriter {
public:
    // Error(usage) when `dir` already holds a manifest.json (a set is never overwritten in place).
    TokenShardSetWriter(std::string dir, TokenShardInfo shard_info, int64_t shard_tokens, uint64_t seed, double val_fraction);
    ~TokenShardSetWriter();

    void add_document(const std::string& split, std::span<const int32_t> tokens);
    const TokenShardManifest& finish(nlohmann::json info);

private:
    void close_shard(const std::string& split);

    std::string dir_;
    TokenShardInfo shard_info_;
    int64_t shard_tokens_;
    TokenShardManifest manifest_;
    std::map<std::string, std::unique_ptr<TokenShardWriter>> open_;
    std::vector<std::string> written_;
    bool finished_ = false;
};

// A shard set opened for reading (what the training loader holds).
class TokenShardSet {
public:
    static TokenShardSet open(const std::string& dir, bool verify_checksums = true);

    const TokenShardManifest& manifest() const { return manifest_; }
    bool has_split(const std::string& split) const { return shards_.count(split) != 0; }
    int64_t token_count(const std::string& split) const;

    // `batch` windows of `window_tokens` tokens (T + 1 for a T-token training step) into out[batch ×
    // window_tokens], each drawn uniformly among all windows that lie inside one shard of the split. Window
    // b of step s depends only on (seed, s × batch + b): the same seed replays the same batches on any
    // machine. Error(usage) when no shard of the split holds a whole window.
    void sample_windows(const std::string& split, uint64_t seed, uint64_t step, int64_t batch, int64_t window_tokens,
                        int32_t* out) const;
    // Non-overlapping windows in order (evaluation): how many there are and the i-th of them.
    int64_t sequential_window_count(const std::string& split, int64_t window_tokens) const;
    void read_sequential_window(const std::string& split, int64_t index, int64_t window_tokens, int32_t* out) const;

private:
    const std::vector<TokenShard>& split_shards(const std::string& split) const;

    TokenShardManifest manifest_;
    std::map<std::string, std::vector<TokenShard>> shards_;
};

}  // namespace lowbit
