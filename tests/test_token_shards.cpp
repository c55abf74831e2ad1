// test_token_shards.cpp — token shards (io/token_shards.h): FNV-1a vectors, the header's bytes, write/read
// round trips at both widths, corrupt, truncated and foreign files (every prefix of a shard included), the
// manifest, the shard-set writer and reader, deterministic window sampling and the document split.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "error_test_util.h"
#include "io/corpus.h"
#include "io/token_shards.h"

using namespace lowbit;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("lowbit_test_token_shards_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::vector<uint8_t> file_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

uint64_t fnv(const std::string& s) { return fnv1a64({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }

template <typename T>
T at(const std::vector<uint8_t>& b, size_t offset) {
    T v;
    std::memcpy(&v, b.data() + offset, sizeof v);
    return v;
}

TokenShardInfo info16() {
    TokenShardInfo i;
    i.token_bytes = 2;
    i.vocab_size = 50000;
    i.separator_id = 7;
    i.tokenizer = "test/unit/50000/0123456789abcdef";
    return i;
}

// A shard of two documents {1, 2, 3} and {40000} with separator 7: 1 2 3 7 40000 7.
fs::path write_small_shard(const fs::path& dir) {
    const fs::path p = dir / "s.bin";
    TokenShardWriter w(p.string(), info16());
    const std::vector<int32_t> a = {1, 2, 3}, b = {40000};
    w.add_document(a);
    w.add_document(b);
    w.finish();
    return p;
}

}  // namespace

TEST(TokenShards, Fnv1a64KnownVectors) {
    EXPECT_EQ(fnv(""), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv("foobar"), 0x85944171f73967e8ull);
    // Streaming continues the state.
    EXPECT_EQ(fnv1a64({reinterpret_cast<const uint8_t*>("bar"), 3}, fnv("foo")), fnv("foobar"));
}

TEST(TokenShards, HeaderBytesAreTheDocumentedLayout) {
    const fs::path d = temp_dir("golden");
    const auto b = file_bytes(write_small_shard(d));
    ASSERT_EQ(b.size(), 128u + 6 * 2);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 8), "LBTOK001");
    EXPECT_EQ(at<uint32_t>(b, 8), 1u);       // version
    EXPECT_EQ(at<uint32_t>(b, 12), 2u);      // token width
    EXPECT_EQ(at<uint32_t>(b, 16), 50000u);  // vocabulary
    EXPECT_EQ(at<int32_t>(b, 20), 7);        // separator
    EXPECT_EQ(at<uint64_t>(b, 24), 6u);      // tokens
    EXPECT_EQ(at<uint64_t>(b, 32), 2u);      // documents
    const std::vector<uint8_t> payload(b.begin() + 128, b.end());
    EXPECT_EQ(at<uint64_t>(b, 40), fnv1a64(payload));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data() + 48)), info16().tokenizer);
    EXPECT_EQ(at<uint64_t>(b, 112), fnv1a64({b.data(), 112}));
    for (size_t i = 120; i < 128; ++i) EXPECT_EQ(b[i], 0) << i;
    // Payload: little-endian uint16, 40000 = 0x9C40.
    const std::vector<uint8_t> expect = {1, 0, 2, 0, 3, 0, 7, 0, 0x40, 0x9C, 7, 0};
    EXPECT_EQ(payload, expect);
    fs::remove_all(d);
}

TEST(TokenShards, RoundTripUint16) {
    const fs::path d = temp_dir("rt16");
    const TokenShard s = TokenShard::open(write_small_shard(d).string());
    EXPECT_EQ(s.size(), 6);
    EXPECT_EQ(s.info().document_count, 2);
    EXPECT_EQ(s.info().tokenizer, info16().tokenizer);
    EXPECT_EQ(s.read(0, 6), (std::vector<int32_t>{1, 2, 3, 7, 40000, 7}));
    EXPECT_EQ(s.read(4, 2), (std::vector<int32_t>{40000, 7}));
    expect_error_with([&] { s.read(5, 2); }, ErrorKind::usage, {"outside"});
    fs::remove_all(d);
}

TEST(TokenShards, RoundTripUint32) {
    const fs::path d = temp_dir("rt32");
    TokenShardInfo i;
    i.token_bytes = 4;
    i.vocab_size = 200000;
    i.separator_id = -1;
    i.tokenizer = "wide";
    std::vector<int32_t> doc(3000);
    for (size_t k = 0; k < doc.size(); ++k) doc[k] = int32_t((k * 7919) % 200000);
    {
        TokenShardWriter w((d / "w.bin").string(), i);
        w.add_document(doc);
        w.add_document(std::vector<int32_t>{199999, 65536});
        EXPECT_EQ(w.finish().token_count, 3002);
    }
    const TokenShard s = TokenShard::open((d / "w.bin").string());
    EXPECT_EQ(s.info().token_bytes, 4u);
    EXPECT_EQ(s.info().separator_id, -1);
    auto all = s.read(0, s.size());
    EXPECT_EQ(std::vector<int32_t>(all.begin(), all.begin() + 3000), doc);
    EXPECT_EQ(all[3000], 199999);
    EXPECT_EQ(all[3001], 65536);
    EXPECT_EQ(token_bytes_for_vocab(65536), 2u);
    EXPECT_EQ(token_bytes_for_vocab(65537), 4u);
    fs::remove_all(d);
}

TEST(TokenShards, WriterRefusesBadInputAndLeavesNothingBehind) {
    const fs::path d = temp_dir("writer");
    const std::string p = (d / "x.bin").string();
    {
        TokenShardWriter w(p, info16());
        expect_error_with([&] { w.add_document(std::vector<int32_t>{50000}); }, ErrorKind::input, {"50000", "outside"});
        expect_error_with([&] { w.add_document(std::vector<int32_t>{-1}); }, ErrorKind::input, {"outside"});
    }  // unfinished: the temporary file goes away
    EXPECT_TRUE(fs::is_empty(d));
    TokenShardInfo bad = info16();
    bad.token_bytes = 3;
    expect_error_with([&] { TokenShardWriter w(p, bad); }, ErrorKind::usage, {"2 or 4"});
    bad = info16();
    bad.vocab_size = 70000;
    expect_error_with([&] { TokenShardWriter w(p, bad); }, ErrorKind::usage, {"4-byte"});
    bad = info16();
    bad.separator_id = 50000;
    expect_error_with([&] { TokenShardWriter w(p, bad); }, ErrorKind::usage, {"separator"});
    bad = info16();
    bad.tokenizer = std::string(64, 'x');
    expect_error_with([&] { TokenShardWriter w(p, bad); }, ErrorKind::usage, {"63"});
    EXPECT_TRUE(fs::is_empty(d));
    fs::remove_all(d);
}

TEST(TokenShards, CorruptFilesAreRefused) {
    const fs::path d = temp_dir("corrupt");
    const auto good = file_bytes(write_small_shard(d));
    auto payload_flip = good;
    payload_flip[130] ^= 1;
    expect_error_with([&] { TokenShard::from_bytes(payload_flip, "f.bin"); }, ErrorKind::input, {"f.bin", "checksum"});
    // Without the payload check it opens (the check is the only thing that catches it).
    EXPECT_EQ(TokenShard::from_bytes(payload_flip, "f.bin", false).read(1, 1)[0], 3);

    auto header_flip = good;
    header_flip[24] ^= 1;  // the token count
    expect_error_with([&] { TokenShard::from_bytes(header_flip, "h.bin"); }, ErrorKind::input, {"header", "checksum"});
    auto magic = good;
    magic[0] = 'X';
    expect_error_with([&] { TokenShard::from_bytes(magic, "m.bin"); }, ErrorKind::input, {"LBTOK001"});
    auto truncated = good;
    truncated.pop_back();
    expect_error_with([&] { TokenShard::from_bytes(truncated, "t.bin"); }, ErrorKind::input, {"truncated", "6 tokens"});
    auto longer = good;
    longer.push_back(0);
    expect_error_with([&] { TokenShard::from_bytes(longer, "l.bin"); }, ErrorKind::input, {"oversized"});
    expect_error_with([&] { TokenShard::open((d / "missing.bin").string()); }, ErrorKind::input, {"missing.bin"});

    // Header fields that disagree with the rest, behind a valid header checksum (found by tests/fuzz/fuzz_token_shard):
    // a vocabulary below an id of the payload, a separator outside the vocabulary, an empty vocabulary.
    const auto with_header = [&](uint32_t vocab, int32_t separator) {
        auto b = good;
        std::memcpy(b.data() + 16, &vocab, 4);
        std::memcpy(b.data() + 20, &separator, 4);
        const uint64_t h = fnv1a64({b.data(), 112});
        std::memcpy(b.data() + 112, &h, 8);
        return b;
    };
    expect_error_with([&] { TokenShard::from_bytes(with_header(40000, 7), "v.bin"); }, ErrorKind::input,
                      {"v.bin", "token id 40000", "vocabulary of 40000"});
    EXPECT_EQ(TokenShard::from_bytes(with_header(40000, 7), "v.bin", false).size(), 6);  // ids are checked with the payload
    expect_error_with([&] { TokenShard::from_bytes(with_header(50000, 50000), "s.bin"); }, ErrorKind::input,
                      {"s.bin", "separator id 50000"});
    expect_error_with([&] { TokenShard::from_bytes(with_header(0, -1), "z.bin"); }, ErrorKind::input, {"z.bin", "vocabulary size 0"});
    EXPECT_EQ(TokenShard::from_bytes(with_header(40001, 7), "ok.bin").read(4, 1)[0], 40000);
    fs::remove_all(d);
}

// Fuzz-style: every proper prefix of a valid shard, and every single-byte change of its header, is refused
// with Error(input) — never a crash, never a silently short shard.
TEST(TokenShards, EveryPrefixAndHeaderByteFlipIsRefused) {
    const fs::path d = temp_dir("prefix");
    const auto good = file_bytes(write_small_shard(d));
    for (size_t n = 0; n < good.size(); ++n) {
        expect_error_with([&] { TokenShard::from_bytes(std::vector<uint8_t>(good.begin(), good.begin() + n), "p.bin"); },
                          ErrorKind::input, {"p.bin"});
    }
    for (size_t i = 0; i < 128; ++i) {
        auto b = good;
        b[i] ^= 0x5A;
        expect_error_with([&] { TokenShard::from_bytes(b, "b.bin"); }, ErrorKind::input, {"b.bin"});
    }
    fs::remove_all(d);
}

TEST(TokenShards, ManifestRoundTripAndErrors) {
    TokenShardManifest m;
    m.tokenizer = "gpt2/smollm/49152/00000000deadbeef";
    m.vocab_size = 49152;
    m.token_bytes = 2;
    m.separator_id = 0;
    m.seed = 42;
    m.val_fraction = 0.01;
    m.splits["train"] = {{"train_000.bin", 100, 3, 0x0123456789abcdefull}, {"train_001.bin", 50, 1, 1}};
    m.splits["val"] = {{"val_000.bin", 10, 1, 2}};
    m.info = {{"files", 3}};
    const std::string text = token_shard_manifest_json(m);
    const TokenShardManifest r = parse_token_shard_manifest(text, "manifest.json");
    EXPECT_EQ(r.tokenizer, m.tokenizer);
    EXPECT_EQ(r.vocab_size, 49152u);
    EXPECT_EQ(r.separator_id, 0);
    EXPECT_EQ(r.seed, 42u);
    EXPECT_DOUBLE_EQ(r.val_fraction, 0.01);
    ASSERT_EQ(r.splits.at("train").size(), 2u);
    EXPECT_EQ(r.splits.at("train")[0].file, "train_000.bin");
    EXPECT_EQ(r.splits.at("train")[0].tokens, 100);
    EXPECT_EQ(r.splits.at("train")[0].checksum, 0x0123456789abcdefull);
    EXPECT_EQ(r.splits.at("val")[0].documents, 1);
    EXPECT_EQ(r.info.at("files"), 3);
    EXPECT_NE(text.find("\"0123456789abcdef\""), std::string::npos);

    const auto edited = [&](const std::string& from, const std::string& to) {
        std::string t = text;
        const size_t at = t.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return t.replace(at, from.size(), to);
    };
    expect_error_with([&] { parse_token_shard_manifest("{", "m.json"); }, ErrorKind::input, {"m.json", "JSON"});
    expect_error_with([&] { parse_token_shard_manifest(edited("lowbit-token-shards", "other"), "m.json"); },
                      ErrorKind::input, {"format"});
    expect_error_with([&] { parse_token_shard_manifest(edited("\"vocab_size\"", "\"vocab\""), "m.json"); },
                      ErrorKind::input, {"vocab_size"});
    expect_error_with([&] { parse_token_shard_manifest(edited("0123456789abcdef", "0123"), "m.json"); },
                      ErrorKind::input, {"checksum", "hex"});
    expect_error_with([&] { parse_token_shard_manifest(edited("train_001.bin", "../x.bin"), "m.json"); },
                      ErrorKind::input, {"plain file name"});
    expect_error_with([&] { parse_token_shard_manifest(edited("\"tokens\": 100", "\"tokens\": -1"), "m.json"); },
                      ErrorKind::input, {"tokens"});
    // Found by tests/fuzz/fuzz_configs: a non-string format escaped as a JSON type error; counts beyond their type
    // were narrowed silently.
    expect_error_with([&] { parse_token_shard_manifest(edited("\"lowbit-token-shards\"", "8888.8"), "m.json"); },
                      ErrorKind::input, {"format"});
    expect_error_with([&] { parse_token_shard_manifest(edited("\"vocab_size\": 49152", "\"vocab_size\": 4294967297"), "m.json"); },
                      ErrorKind::input, {"vocab_size", "4294967297"});
    expect_error_with([&] { parse_token_shard_manifest(edited("\"tokens\": 100", "\"tokens\": 18446744073709551615"), "m.json"); },
                      ErrorKind::input, {"tokens"});
    expect_error_with([&] { parse_token_shard_manifest(edited("\"separator_id\": 0", "\"separator_id\": -5"), "m.json"); },
                      ErrorKind::input, {"separator_id -5"});
}

namespace {

// A set whose train tokens are 0, 1, 2, … in order and whose val tokens count up from 500000 (no
// separator): a window is then a run of consecutive ids, and its first id says where it starts.
fs::path write_counting_set(const std::string& name, int64_t shard_tokens) {
    const fs::path dir = temp_dir(name);
    TokenShardInfo i;
    i.token_bytes = 4;
    i.vocab_size = 1 << 20;
    i.separator_id = -1;
    i.tokenizer = "counting";
    TokenShardSetWriter w(dir.string(), i, shard_tokens, 5, 0.25);
    int32_t next_train = 0, next_val = 500000;
    for (int doc = 0; doc < 40; ++doc) {
        const bool val = doc % 4 == 3;
        int32_t& next = val ? next_val : next_train;
        std::vector<int32_t> ids(size_t(20 + doc % 7));
        std::iota(ids.begin(), ids.end(), next);
        next += int32_t(ids.size());
        w.add_document(val ? "val" : "train", ids);
    }
    w.finish({{"note", "test"}});
    return dir;
}

}  // namespace

TEST(TokenShards, SetWriterRotatesShardsAndOpensBack) {
    const fs::path dir = write_counting_set("set", 60);
    const TokenShardSet set = TokenShardSet::open(dir.string());
    const TokenShardManifest& m = set.manifest();
    EXPECT_EQ(m.tokenizer, "counting");
    EXPECT_EQ(m.seed, 5u);
    EXPECT_EQ(m.info.at("note"), "test");
    ASSERT_GE(m.splits.at("train").size(), 3u);
    int64_t train_docs = 0;
    for (size_t k = 0; k < m.splits.at("train").size(); ++k) {
        const auto& e = m.splits.at("train")[k];
        EXPECT_EQ(e.file, fmt::format("train_{:03d}.bin", k));
        EXPECT_TRUE(fs::exists(dir / e.file));
        // A shard is closed by the document that takes it to 60 tokens or more (documents are 20–26 long).
        if (k + 1 < m.splits.at("train").size()) EXPECT_TRUE(e.tokens >= 60 && e.tokens < 60 + 26) << e.tokens;
        train_docs += e.documents;
    }
    EXPECT_EQ(train_docs, 30);
    EXPECT_EQ(m.splits.at("val").size(), 4u);  // 10 val documents of 228 tokens: 67 | 68 | 69 | 24
    EXPECT_EQ(set.token_count("val"), 228);
    // Every token in order: train ids 0, 1, 2, … across the shards.
    std::vector<int32_t> all;
    for (int64_t i = 0; i < set.sequential_window_count("train", 1); ++i) {
        int32_t t;
        set.read_sequential_window("train", i, 1, &t);
        all.push_back(t);
    }
    std::vector<int32_t> expect(all.size());
    std::iota(expect.begin(), expect.end(), 0);
    EXPECT_EQ(all, expect);
    expect_error_with([&] { set.token_count("test"); }, ErrorKind::usage, {"no split 'test'"});

    // A set is never overwritten in place.
    TokenShardInfo i;
    i.vocab_size = 10;
    expect_error_with([&] { TokenShardSetWriter w(dir.string(), i, 100, 0, 0); }, ErrorKind::usage, {"manifest.json"});

    // A shard that disagrees with the manifest, or is missing, is refused.
    const fs::path moved = dir / "moved.bin";
    fs::rename(dir / "train_001.bin", moved);
    expect_error_with([&] { TokenShardSet::open(dir.string()); }, ErrorKind::input, {"train_001.bin"});
    fs::copy_file(dir / "train_000.bin", dir / "train_001.bin");
    expect_error_with([&] { TokenShardSet::open(dir.string()); }, ErrorKind::input, {"train_001.bin", "lists"});
    fs::remove_all(dir);
}

TEST(TokenShards, UnfinishedSetWriterRemovesItsShards) {
    const fs::path dir = temp_dir("unfinished");
    {
        TokenShardInfo i = info16();
        TokenShardSetWriter w(dir.string(), i, 4, 0, 0.5);
        for (int k = 0; k < 5; ++k) w.add_document("train", std::vector<int32_t>{1, 2, 3, 4});
        EXPECT_FALSE(fs::is_empty(dir));
    }
    EXPECT_TRUE(fs::is_empty(dir));
    fs::remove_all(dir);
}

TEST(TokenShards, WindowSamplingIsDeterministicUniformAndInsideOneShard) {
    const fs::path dir = write_counting_set("windows", 60);
    const TokenShardSet set = TokenShardSet::open(dir.string());
    const auto& shards = set.manifest().splits.at("train");
    const int64_t window = 11, batch = 8;
    // Shard k holds train ids [begin_k, begin_k + tokens_k); a window may start at begin_k … end_k − window.
    std::vector<int64_t> begin;
    int64_t total = 0, starts = 0;
    for (const auto& e : shards) begin.push_back(total), total += e.tokens, starts += e.tokens - window + 1;
    std::vector<int> hits(size_t(total), 0);
    std::vector<int32_t> a(size_t(batch * window)), b(a.size());
    for (uint64_t step = 0; step < 800; ++step) {
        set.sample_windows("train", 123, step, batch, window, a.data());
        set.sample_windows("train", 123, step, batch, window, b.data());
        ASSERT_EQ(a, b) << "step " << step;
        for (int64_t w = 0; w < batch; ++w) {
            const int32_t* t = a.data() + w * window;
            for (int64_t k = 1; k < window; ++k) ASSERT_EQ(t[k], t[0] + k);
            size_t shard = 0;
            while (shard + 1 < begin.size() && begin[shard + 1] <= t[0]) ++shard;
            ASSERT_LE(t[0] + window, begin[shard] + shards[shard].tokens) << "window crosses a shard end";
            ++hits[size_t(t[0])];
        }
    }
    // 6400 draws over ~200 starts: every start is drawn (a miss has probability ~e^-30), no other position.
    int64_t drawn = 0;
    for (size_t s = 0; s < shards.size(); ++s)
        for (int64_t p = begin[s]; p < begin[s] + shards[s].tokens; ++p) {
            const bool can_start = p <= begin[s] + shards[s].tokens - window;
            EXPECT_EQ(hits[size_t(p)] > 0, can_start) << "position " << p;
            drawn += hits[size_t(p)] > 0;
        }
    EXPECT_EQ(drawn, starts);
    // Another step or seed gives other windows.
    set.sample_windows("train", 123, 0, batch, window, a.data());
    set.sample_windows("train", 123, 1, batch, window, b.data());
    EXPECT_NE(a, b);
    set.sample_windows("train", 124, 0, batch, window, b.data());
    EXPECT_NE(a, b);
    expect_error_with([&] { set.sample_windows("train", 0, 0, 1, 1000, a.data()); }, ErrorKind::usage, {"1000 tokens"});
    fs::remove_all(dir);
}

TEST(TokenShards, DocumentSplitIsDeterministicAndHasTheRequestedShare) {
    int val = 0, changed = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        const std::string doc = "document number " + std::to_string(i);
        const bool v = document_in_validation(doc, 7, 0.05);
        EXPECT_EQ(v, document_in_validation(doc, 7, 0.05));
        val += v;
        changed += v != document_in_validation(doc, 8, 0.05);
        EXPECT_FALSE(document_in_validation(doc, 7, 0.0));
        // A larger fraction keeps every document a smaller one put in validation.
        if (v) EXPECT_TRUE(document_in_validation(doc, 7, 0.2));
    }
    EXPECT_GT(val, n * 0.05 * 0.85);
    EXPECT_LT(val, n * 0.05 * 1.15);
    EXPECT_GT(changed, 0);
}
