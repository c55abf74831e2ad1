// token_shards.cpp — shard files (writer, validating reader), the document split, manifest.json and the
// shard set with its window sampler. Format: token_shards.h.
#include "io/token_shards.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "core/counter_rng.h"
#include "core/error.h"
#include "io/corpus.h"
#include "io/npy.h"

namespace lowbit {

static_assert(std::endian::native == std::endian::little, "token shards are read and written as little-endian");

namespace {

constexpr char shard_magic[8] = {'L', 'B', 'T', 'O', 'K', '0', '0', '1'};
constexpr uint32_t shard_version = 1;
constexpr size_t header_checksum_offset = 112;
constexpr size_t write_buffer_bytes = 1 << 20;

// The on-disk header (layout in token_shards.h).
struct ShardHeader {
    char magic[8];
    uint32_t version;
    uint32_t token_bytes;
    uint32_t vocab_size;
    int32_t separator_id;
    uint64_t token_count;
    uint64_t document_count;
    uint64_t payload_checksum;
    char tokenizer[64];
    uint64_t header_checksum;
    uint8_t reserved[8];
};
static_assert(sizeof(ShardHeader) == token_shard_header_bytes);
static_assert(offsetof(ShardHeader, header_checksum) == header_checksum_offset);

uint64_t header_checksum(const ShardHeader& h) {
    return fnv1a64({reinterpret_cast<const uint8_t*>(&h), header_checksum_offset});
}

void check_info(const TokenShardInfo& info, const std::string& name) {
    LOWBIT_CHECK(info.token_bytes == 2 || info.token_bytes == 4, ErrorKind::usage,
                 "{}: token width must be 2 or 4 bytes, not {}", name, info.token_bytes);
    LOWBIT_CHECK(info.vocab_size > 0, ErrorKind::usage, "{}: the vocabulary size must be positive", name);
    LOWBIT_CHECK(info.token_bytes == 4 || info.vocab_size <= 65536, ErrorKind::usage,
                 "{}: a vocabulary of {} tokens needs 4-byte ids", name, info.vocab_size);
    LOWBIT_CHECK(info.separator_id >= -1 && info.separator_id < int64_t(info.vocab_size), ErrorKind::usage,
                 "{}: separator id {} is outside the vocabulary of {}", name, info.separator_id, info.vocab_size);
    LOWBIT_CHECK(info.tokenizer.size() <= token_shard_tokenizer_max && info.tokenizer.find('\0') == std::string::npos,
                 ErrorKind::usage, "{}: the tokenizer id '{}' is longer than {} bytes", name, info.tokenizer,
                 token_shard_tokenizer_max);
}

std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t state) {
    for (uint8_t b : bytes) state = (state ^ b) * 0x100000001b3ull;
    return state;
}

uint32_t token_bytes_for_vocab(uint64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// --- writer ---

TokenShardWriter::TokenShardWriter(std::string path, TokenShardInfo info)
    : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(::getpid())), info_(std::move(info)) {
    check_info(info_, path_);
    info_.token_count = info_.document_count = 0;
    file_ = std::fopen(tmp_.c_str(), "wb");
    LOWBIT_CHECK(file_ != nullptr, ErrorKind::input, "{}: cannot open for writing", path_);
    buffer_.reserve(write_buffer_bytes);
    buffer_.resize(token_shard_header_bytes, 0);  // the header is written again by finish()
    flush_buffer();
}

TokenShardWriter::~TokenShardWriter() {
    if (finished_) return;
    if (file_) std::fclose(file_);
    std::remove(tmp_.c_str());
}

void TokenShardWriter::flush_buffer() {
    const bool ok = buffer_.empty() || std::fwrite(buffer_.data(), 1, buffer_.size(), file_) == buffer_.size();
    LOWBIT_CHECK(ok, ErrorKind::input, "{}: write failed (disk full or no permission?)", path_);
    buffer_.clear();
}

void TokenShardWriter::append(int32_t id) {
    LOWBIT_CHECK(id >= 0 && uint32_t(id) < info_.vocab_size, ErrorKind::input,
                 "{}: token id {} is outside the vocabulary of {}", path_, id, info_.vocab_size);
    uint8_t bytes[4];
    const uint32_t v = uint32_t(id);
    std::memcpy(bytes, &v, 4);  // little-endian: the low bytes first
    buffer_.insert(buffer_.end(), bytes, bytes + info_.token_bytes);
    checksum_state_ = fnv1a64({bytes, info_.token_bytes}, checksum_state_);
    ++info_.token_count;
    if (buffer_.size() + 4 > write_buffer_bytes) flush_buffer();
}

void TokenShardWriter::add_document(std::span<const int32_t> tokens) {
    LOWBIT_CHECK(!finished_, ErrorKind::usage, "{}: add_document after finish", path_);
    for (int32_t id : tokens) append(id);
    if (info_.separator_id >= 0) append(info_.separator_id);
    ++info_.document_count;
}

const TokenShardInfo& TokenShardWriter::finish() {
    LOWBIT_CHECK(!finished_, ErrorKind::usage, "{}: finished twice", path_);
    flush_buffer();
    info_.checksum = checksum_state_;
    ShardHeader h{};
    std::memcpy(h.magic, shard_magic, 8);
    h.version = shard_version;
    h.token_bytes = info_.token_bytes;
    h.vocab_size = info_.vocab_size;
    h.separator_id = info_.separator_id;
    h.token_count = uint64_t(info_.token_count);
    h.document_count = uint64_t(info_.document_count);
    h.payload_checksum = info_.checksum;
    std::memcpy(h.tokenizer, info_.tokenizer.data(), info_.tokenizer.size());
    h.header_checksum = header_checksum(h);
    bool ok = std::fflush(file_) == 0 && std::fseek(file_, 0, SEEK_SET) == 0 &&
              std::fwrite(&h, sizeof h, 1, file_) == 1 && std::fflush(file_) == 0;
    ok = std::fclose(file_) == 0 && ok;
    file_ = nullptr;
    LOWBIT_CHECK(ok && std::rename(tmp_.c_str(), path_.c_str()) == 0, ErrorKind::input,
                 "{}: write failed (disk full or no permission?)", path_);
    finished_ = true;
    return info_;
}

// --- reader ---

TokenShard TokenShard::open(const std::string& path, bool verify_checksum) {
    return parse(MappedFile::map(path), path, verify_checksum);
}

TokenShard TokenShard::from_bytes(std::vector<uint8_t> bytes, const std::string& name, bool verify_checksum) {
    return parse(MappedFile::from_bytes(std::move(bytes)), name, verify_checksum);
}

TokenShard TokenShard::parse(MappedFile file, const std::string& name, bool verify_checksum) {
    LOWBIT_CHECK(file.size() >= token_shard_header_bytes, ErrorKind::input,
                 "{}: truncated token shard: {} bytes, the header alone is {}", name, file.size(), token_shard_header_bytes);
    ShardHeader h;
    std::memcpy(&h, file.data(), sizeof h);
    LOWBIT_CHECK(std::memcmp(h.magic, shard_magic, 8) == 0, ErrorKind::input,
                 "{}: not a lowbit token shard (the magic is not LBTOK001)", name);
    LOWBIT_CHECK(h.version == shard_version, ErrorKind::input, "{}: token shard version {} is not supported (this lowbit reads {})",
                 name, h.version, shard_version);
    LOWBIT_CHECK(h.header_checksum == header_checksum(h), ErrorKind::input, "{}: corrupt token shard header (checksum mismatch)", name);
    LOWBIT_CHECK(h.token_bytes == 2 || h.token_bytes == 4, ErrorKind::input, "{}: token width {} is not 2 or 4", name, h.token_bytes);
    LOWBIT_CHECK(h.tokenizer[63] == '\0', ErrorKind::input, "{}: the tokenizer id is not NUL-terminated", name);
    LOWBIT_CHECK(std::all_of(std::begin(h.reserved), std::end(h.reserved), [](uint8_t b) { return b == 0; }),
                 ErrorKind::input, "{}: the reserved header bytes are not zero (a newer or corrupt shard)", name);
    LOWBIT_CHECK(h.vocab_size >= 1 && h.vocab_size <= uint32_t(INT32_MAX), ErrorKind::input,
                 "{}: vocabulary size {} in the token shard header is not between 1 and 2^31 - 1", name, h.vocab_size);
    LOWBIT_CHECK(h.separator_id == -1 || (h.separator_id >= 0 && uint32_t(h.separator_id) < h.vocab_size), ErrorKind::input,
                 "{}: separator id {} is outside the shard's vocabulary of {}", name, h.separator_id, h.vocab_size);
    const uint64_t payload = file.size() - token_shard_header_bytes;
    LOWBIT_CHECK(h.token_count <= payload / h.token_bytes && payload == h.token_count * h.token_bytes, ErrorKind::input,
                 "{}: {} token shard: the header says {} tokens of {} bytes ({} payload bytes) but the file has {}", name,
                 payload < h.token_count * h.token_bytes ? "truncated" : "oversized", h.token_count, h.token_bytes,
                 h.token_count * h.token_bytes, payload);
    if (verify_checksum) {
        const uint64_t sum = fnv1a64({file.data() + token_shard_header_bytes, size_t(payload)});
        LOWBIT_CHECK(sum == h.payload_checksum, ErrorKind::input,
                     "{}: corrupt token shard: payload checksum {} but the header says {}", name, hex16(sum), hex16(h.payload_checksum));
        // The writer checks every id; a payload that matches its checksum and still leaves the vocabulary was written
        // against another header.
        const uint8_t* p = file.data() + token_shard_header_bytes;
        uint32_t top = 0;
        if (h.token_bytes == 2)
            for (uint64_t i = 0; i < h.token_count; ++i) top = std::max(top, uint32_t(p[2 * i]) | uint32_t(p[2 * i + 1]) << 8);
        else
            for (uint64_t i = 0; i < h.token_count; ++i) {
                uint32_t v;
                std::memcpy(&v, p + 4 * i, 4);
                top = std::max(top, v);
            }
        LOWBIT_CHECK(h.token_count == 0 || top < h.vocab_size, ErrorKind::input,
                     "{}: token id {} is outside the shard's vocabulary of {}", name, top, h.vocab_size);
    }
    TokenShard s;
    s.info_ = {h.token_bytes, h.vocab_size, h.separator_id, std::string(h.tokenizer), int64_t(h.token_count),
               int64_t(h.document_count), h.payload_checksum};
    s.file_ = std::move(file);
    s.name_ = name;
    return s;
}

void TokenShard::read(int64_t begin, int64_t n, int32_t* out) const {
    LOWBIT_CHECK(begin >= 0 && n >= 0 && begin + n <= info_.token_count, ErrorKind::usage,
                 "{}: tokens [{}, {}) are outside the shard's {}", name_, begin, begin + n, info_.token_count);
    const uint8_t* p = file_.data() + token_shard_header_bytes + begin * info_.token_bytes;
    if (info_.token_bytes == 2) {
        for (int64_t i = 0; i < n; ++i) out[i] = int32_t(uint32_t(p[2 * i]) | uint32_t(p[2 * i + 1]) << 8);
    } else {
        std::memcpy(out, p, size_t(n) * 4);
    }
}

std::vector<int32_t> TokenShard::read(int64_t begin, int64_t n) const {
    std::vector<int32_t> out(size_t(std::max<int64_t>(n, 0)));
    read(begin, n, out.data());
    return out;
}

// --- split ---

bool document_in_validation(std::string_view document, uint64_t seed, double val_fraction) {
    const uint64_t h = fnv1a64({reinterpret_cast<const uint8_t*>(document.data()), document.size()});
    const uint64_t x = mix64(h ^ mix64(seed + 0x9E3779B97F4A7C15ull));
    return double(x >> 11) * 0x1p-53 < val_fraction;
}

// --- manifest ---

TokenShardManifest parse_token_shard_manifest(const std::string& json_text, const std::string& name) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::input, "{}: not valid JSON: {}", name, e.what());
    }
    const auto need = [&](const nlohmann::json& obj, const char* key, bool (nlohmann::json::*is)() const noexcept,
                          const char* what) -> const nlohmann::json& {
        LOWBIT_CHECK(obj.is_object() && obj.contains(key) && (obj.at(key).*is)(), ErrorKind::input,
                     "{}: manifest key '{}' is missing or not {}", name, key, what);
        return obj.at(key);
    };
    // A count: an unsigned integer no larger than `max` (JSON allows any size; a silent narrowing would not do).
    const auto need_count = [&](const nlohmann::json& obj, const char* key, uint64_t max) {
        const uint64_t v = need(obj, key, &nlohmann::json::is_number_unsigned, "a count").get<uint64_t>();
        LOWBIT_CHECK(v <= max, ErrorKind::input, "{}: manifest key '{}' is {}, above its limit {}", name, key, v, max);
        return v;
    };
    LOWBIT_CHECK(j.is_object() && j.contains("format") && j["format"].is_string() &&
                     j["format"].get<std::string>() == "lowbit-token-shards",
                 ErrorKind::input,
                 "{}: not a lowbit token-shard manifest (\"format\" is not \"lowbit-token-shards\")", name);
    LOWBIT_CHECK(need(j, "version", &nlohmann::json::is_number_integer, "an integer").get<int64_t>() == int64_t(shard_version),
                 ErrorKind::input, "{}: manifest version {} is not supported", name, j.at("version").dump());
    TokenShardManifest m;
    m.tokenizer = need(j, "tokenizer", &nlohmann::json::is_string, "a string").get<std::string>();
    m.vocab_size = uint32_t(need_count(j, "vocab_size", uint64_t(INT32_MAX)));
    m.token_bytes = uint32_t(need_count(j, "token_bytes", 4));
    const int64_t separator = need(j, "separator_id", &nlohmann::json::is_number_integer, "an integer").get<int64_t>();
    LOWBIT_CHECK(separator >= -1 && separator <= int64_t(INT32_MAX), ErrorKind::input,
                 "{}: manifest separator_id {} is neither -1 nor a token id", name, separator);
    m.separator_id = int32_t(separator);
    m.seed = need_count(j, "seed", UINT64_MAX);
    m.val_fraction = need(j, "val_fraction", &nlohmann::json::is_number, "a number").get<double>();
    for (const auto& [split, list] : need(j, "splits", &nlohmann::json::is_object, "an object").items()) {
        LOWBIT_CHECK(list.is_array(), ErrorKind::input, "{}: split '{}' is not a list of shards", name, split);
        auto& entries = m.splits[split];
        for (const auto& e : list) {
            TokenShardEntry s;
            s.file = need(e, "file", &nlohmann::json::is_string, "a string").get<std::string>();
            LOWBIT_CHECK(!s.file.empty() && s.file.find('/') == std::string::npos && s.file != "..", ErrorKind::input,
                         "{}: shard file '{}' must be a plain file name in the set's directory", name, s.file);
            s.tokens = int64_t(need_count(e, "tokens", uint64_t(INT64_MAX)));
            s.documents = int64_t(need_count(e, "documents", uint64_t(INT64_MAX)));
            const std::string sum = need(e, "checksum", &nlohmann::json::is_string, "a string").get<std::string>();
            LOWBIT_CHECK(sum.size() == 16 && sum.find_first_not_of("0123456789abcdef") == std::string::npos, ErrorKind::input,
                         "{}: checksum '{}' of {} is not 16 lowercase hex digits", name, sum, s.file);
            s.checksum = std::stoull(sum, nullptr, 16);
            entries.push_back(std::move(s));
        }
    }
    if (j.contains("info")) m.info = j.at("info");
    return m;
}

std::string token_shard_manifest_json(const TokenShardManifest& m) {
    nlohmann::json splits = nlohmann::json::object();
    for (const auto& [split, entries] : m.splits) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& e : entries)
            list.push_back({{"file", e.file}, {"tokens", e.tokens}, {"documents", e.documents}, {"checksum", hex16(e.checksum)}});
        splits[split] = list;
    }
    const nlohmann::json j = {{"format", "lowbit-token-shards"}, {"version", shard_version}, {"tokenizer", m.tokenizer},
                              {"vocab_size", m.vocab_size},     {"separator_id", m.separator_id},
                              {"token_bytes", m.token_bytes},   {"seed", m.seed},
                              {"val_fraction", m.val_fraction}, {"splits", splits},
                              {"info", m.info}};
    return j.dump(2) + "\n";
}

// --- set writer ---

TokenShardSetWriter::TokenShardSetWriter(std::string dir, TokenShardInfo shard_info, int64_t shard_tokens, uint64_t seed,
                                         double val_fraction)
    : dir_(std::move(dir)), shard_info_(std::move(shard_info)), shard_tokens_(shard_tokens) {
    namespace fs = std::filesystem;
    check_info(shard_info_, dir_);
    LOWBIT_CHECK(shard_tokens_ > 0, ErrorKind::usage, "the shard size must be positive, not {}", shard_tokens_);
    LOWBIT_CHECK(!fs::exists(fs::path(dir_) / "manifest.json"), ErrorKind::usage,
                 "{} already holds a token-shard set (manifest.json); remove it or choose another --out", dir_);
    std::error_code ec;
    fs::create_directories(dir_, ec);
    LOWBIT_CHECK(!ec && fs::is_directory(dir_), ErrorKind::input, "{}: cannot create the directory: {}", dir_, ec.message());
    manifest_.tokenizer = shard_info_.tokenizer;
    manifest_.vocab_size = shard_info_.vocab_size;
    manifest_.token_bytes = shard_info_.token_bytes;
    manifest_.separator_id = shard_info_.separator_id;
    manifest_.seed = seed;
    manifest_.val_fraction = val_fraction;
}

TokenShardSetWriter::~TokenShardSetWriter() {
    if (finished_) return;
    open_.clear();  // removes the temporary files of open shards
    for (const auto& path : written_) std::remove(path.c_str());
}

void TokenShardSetWriter::close_shard(const std::string& split) {
    auto it = open_.find(split);
    const TokenShardInfo& info = it->second->finish();
    auto& entries = manifest_.splits[split];
    entries.push_back({fmt::format("{}_{:03d}.bin", split, entries.size()), info.token_count, info.document_count, info.checksum});
    written_.push_back((std::filesystem::path(dir_) / entries.back().file).string());
    open_.erase(it);
}

void TokenShardSetWriter::add_document(const std::string& split, std::span<const int32_t> tokens) {
    LOWBIT_CHECK(!finished_, ErrorKind::usage, "{}: add_document after finish", dir_);
    auto it = open_.find(split);
    if (it == open_.end()) {
        const std::string file = fmt::format("{}_{:03d}.bin", split, manifest_.splits[split].size());
        it = open_.emplace(split, std::make_unique<TokenShardWriter>((std::filesystem::path(dir_) / file).string(), shard_info_)).first;
    }
    it->second->add_document(tokens);
    if (it->second->token_count() >= shard_tokens_) close_shard(split);
}

const TokenShardManifest& TokenShardSetWriter::finish(nlohmann::json info) {
    while (!open_.empty()) close_shard(open_.begin()->first);
    manifest_.info = std::move(info);
    const std::string text = token_shard_manifest_json(manifest_);
    write_file_atomic((std::filesystem::path(dir_) / "manifest.json").string(), text.data(), text.size());
    finished_ = true;
    return manifest_;
}

// --- set reader ---

TokenShardSet TokenShardSet::open(const std::string& dir, bool verify_checksums) {
    const std::string manifest_path = (std::filesystem::path(dir) / "manifest.json").string();
    LOWBIT_CHECK(std::filesystem::exists(manifest_path), ErrorKind::input, "{}: no manifest.json (not a token-shard set)", dir);
    TokenShardSet set;
    set.manifest_ = parse_token_shard_manifest(read_text_file(manifest_path), manifest_path);
    for (const auto& [split, entries] : set.manifest_.splits) {
        auto& shards = set.shards_[split];
        for (const auto& e : entries) {
            const std::string path = (std::filesystem::path(dir) / e.file).string();
            TokenShard s = TokenShard::open(path, verify_checksums);
            const TokenShardInfo& i = s.info();
            LOWBIT_CHECK(i.tokenizer == set.manifest_.tokenizer && i.token_bytes == set.manifest_.token_bytes &&
                             i.vocab_size == set.manifest_.vocab_size && i.separator_id == set.manifest_.separator_id,
                         ErrorKind::input, "{}: header (tokenizer '{}', {}-byte ids, vocabulary {}, separator {}) disagrees with {}",
                         path, i.tokenizer, i.token_bytes, i.vocab_size, i.separator_id, manifest_path);
            LOWBIT_CHECK(i.token_count == e.tokens && i.document_count == e.documents && i.checksum == e.checksum,
                         ErrorKind::input, "{}: {} tokens, {} documents, checksum {} but {} lists {}, {}, {}", path, i.token_count,
                         i.document_count, hex16(i.checksum), manifest_path, e.tokens, e.documents, hex16(e.checksum));
            shards.push_back(std::move(s));
        }
    }
    return set;
}

const std::vector<TokenShard>& TokenShardSet::split_shards(const std::string& split) const {
    auto it = shards_.find(split);
    LOWBIT_CHECK(it != shards_.end(), ErrorKind::usage, "the token-shard set has no split '{}'", split);
    return it->second;
}

int64_t TokenShardSet::token_count(const std::string& split) const {
    int64_t n = 0;
    for (const auto& s : split_shards(split)) n += s.size();
    return n;
}

void TokenShardSet::sample_windows(const std::string& split, uint64_t seed, uint64_t step, int64_t batch,
                                   int64_t window_tokens, int32_t* out) const {
    LOWBIT_CHECK(window_tokens > 0 && batch >= 0, ErrorKind::usage, "window of {} tokens, batch {}", window_tokens, batch);
    const auto& shards = split_shards(split);
    // starts_end[i]: the number of window starts in shards 0..i (shard i has size − window + 1 of them).
    std::vector<uint64_t> starts_end;
    uint64_t total = 0;
    for (const auto& s : shards) starts_end.push_back(total += uint64_t(std::max<int64_t>(0, s.size() - window_tokens + 1)));
    LOWBIT_CHECK(total > 0, ErrorKind::usage, "split '{}' has no shard of at least {} tokens", split, window_tokens);
    const uint64_t stream = mix64(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    for (int64_t b = 0; b < batch; ++b) {
        // 64 random bits reduced modulo the count: the bias is below total / 2^64, negligible for any corpus.
        const uint64_t r = mix64(stream ^ ((step * uint64_t(batch) + uint64_t(b)) * 0xD1B54A32D192ED03ull)) % total;
        const size_t shard = size_t(std::upper_bound(starts_end.begin(), starts_end.end(), r) - starts_end.begin());
        const uint64_t start = r - (shard ? starts_end[shard - 1] : 0);
        shards[shard].read(int64_t(start), window_tokens, out + b * window_tokens);
    }
}

int64_t TokenShardSet::sequential_window_count(const std::string& split, int64_t window_tokens) const {
    LOWBIT_CHECK(window_tokens > 0, ErrorKind::usage, "window of {} tokens", window_tokens);
    int64_t n = 0;
    for (const auto& s : split_shards(split)) n += s.size() / window_tokens;
    return n;
}

void TokenShardSet::read_sequential_window(const std::string& split, int64_t index, int64_t window_tokens, int32_t* out) const {
    LOWBIT_CHECK(index >= 0 && index < sequential_window_count(split, window_tokens), ErrorKind::usage,
                 "window {} of split '{}' does not exist ({} windows of {} tokens)", index, split,
                 sequential_window_count(split, window_tokens), window_tokens);
    for (const auto& s : split_shards(split)) {
        const int64_t here = s.size() / window_tokens;
        if (index < here) return s.read(index * window_tokens, window_tokens, out);
        index -= here;
    }
}

}  // namespace lowbit
