// checkpoint.cpp — a run's config.json, and checkpoint files written, found, checked and read (see checkpoint.h).
#include "train/checkpoint.h"

#include <bit>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "io/npy.h"

namespace lowbit {

static_assert(std::endian::native == std::endian::little, "checkpoint files are little-endian; so must the host be");

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'L', 'B', 'C', 'K', 'P', 'T', '0', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kBuffers = 3;

uint64_t fnv1a_of(const void* data, size_t n, uint64_t state = fnv1a64_offset) {
    return fnv1a64({static_cast<const uint8_t*>(data), n}, state);
}

uint64_t fnv1a_of(const std::string& s, uint64_t state) { return fnv1a_of(s.data(), s.size(), state); }

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

fs::path checkpoint_dir(const std::string& run_dir) { return fs::path(run_dir) / "checkpoints"; }

std::string checkpoint_stem(int64_t steps_done) { return fmt::format("step_{:08d}", steps_done); }

// The step of "step_NNNNNNNN.json" / ".bin", or -1 for another name.
int64_t step_of(const fs::path& p) {
    const std::string stem = p.stem().string();
    if (!stem.starts_with("step_") || stem.size() <= 5) return -1;
    for (size_t i = 5; i < stem.size(); ++i)
        if (stem[i] < '0' || stem[i] > '9') return -1;
    return std::stoll(stem.substr(5));
}

nlohmann::json read_json_file(const std::string& path) {
    const std::vector<uint8_t> bytes = read_file(path);
    nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    LOWBIT_CHECK(!j.is_discarded() && j.is_object(), ErrorKind::input,
                 "{}: not a JSON object (a truncated or corrupt checkpoint?)", path);
    return j;
}

}  // namespace

uint64_t shard_set_checksum(const TokenShardManifest& m) {
    uint64_t h = fnv1a_of(fmt::format("{}\n{}\n{}\n", m.tokenizer, m.vocab_size, m.token_bytes), fnv1a64_offset);
    for (const auto& [split, entries] : m.splits)
        for (const TokenShardEntry& e : entries)
            h = fnv1a_of(fmt::format("{}/{} {} {}\n", split, e.file, e.tokens, hex64(e.checksum)), h);
    return h;
}

nlohmann::json run_config_json(const TrainConfig& config, const Recipe& recipe, const std::string& data_dir,
                               uint64_t data_checksum) {
    return {{"format", "lowbit-train-run"},
            {"version", 1},
            {"train_config", train_config_to_json(config)},
            {"recipe", RecipeState(recipe, config.model).to_json().at("recipe")},
            {"data", {{"path", data_dir}, {"checksum", hex64(data_checksum)}}}};
}

void check_same_run(const nlohmann::json& saved, const nlohmann::json& now, const std::string& path) {
    const nlohmann::json a = saved.flatten(), b = now.flatten();
    std::set<std::string> keys;
    for (const auto& item : a.items()) keys.insert(item.key());
    for (const auto& item : b.items()) keys.insert(item.key());
    for (const std::string& k : keys) {
        if (k == "/data/path" || k == "/train_config/grad_accum") continue;  // where the data lies; a memory setting
        const std::string va = a.contains(k) ? a[k].dump() : "(absent)", vb = b.contains(k) ? b[k].dump() : "(absent)";
        LOWBIT_CHECK(va == vb, ErrorKind::usage,
                     "{}: another run's directory: {} is {} in the run and {} now (resume with the run's options, or "
                     "train into another --out)",
                     path, k, va, vb);
    }
}

Recipe run_recipe(const nlohmann::json& run_config, const LlamaConfig& model, const std::string& path) {
    LOWBIT_CHECK(run_config.contains("recipe"), ErrorKind::input, "{}: no \"recipe\"", path);
    return RecipeState::from_json({{"recipe", run_config["recipe"]}}, model, path).recipe();
}

std::string save_checkpoint(const std::string& run_dir, const Checkpoint& c, int keep) {
    const TrainerState& s = c.state;
    const size_t floats = s.params.size();
    LOWBIT_CHECK(s.m.size() == floats && s.v.size() == floats, ErrorKind::usage,
                 "checkpoint: buffers of {}, {} and {} floats differ", s.params.size(), s.m.size(), s.v.size());
    const fs::path dir = checkpoint_dir(run_dir);
    fs::create_directories(dir);

    std::vector<uint8_t> bytes(sizeof(CheckpointFileHeader) + kBuffers * floats * sizeof(float));
    uint8_t* payload = bytes.data() + sizeof(CheckpointFileHeader);
    const size_t buffer_bytes = floats * sizeof(float);
    std::memcpy(payload, s.params.data(), buffer_bytes);
    std::memcpy(payload + buffer_bytes, s.m.data(), buffer_bytes);
    std::memcpy(payload + 2 * buffer_bytes, s.v.data(), buffer_bytes);
    CheckpointFileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.version = kVersion;
    h.buffers = kBuffers;
    h.floats = floats;
    h.steps_done = s.steps_done;
    h.payload_checksum = fnv1a_of(payload, kBuffers * buffer_bytes);
    h.header_checksum = fnv1a_of(&h, offsetof(CheckpointFileHeader, header_checksum));
    std::memcpy(bytes.data(), &h, sizeof(h));

    const std::string stem = checkpoint_stem(s.steps_done);
    write_file_atomic((dir / (stem + ".bin")).string(), bytes.data(), bytes.size());
    const nlohmann::json sidecar = {{"format", "lowbit-train-checkpoint"},
                                    {"version", kVersion},
                                    {"steps_done", s.steps_done},
                                    {"file", stem + ".bin"},
                                    {"floats", floats},
                                    {"payload_checksum", hex64(h.payload_checksum)},
                                    {"metrics_lines", c.metrics_lines},
                                    {"recipe_state", s.recipe_state}};
    const std::string json_path = (dir / (stem + ".json")).string();
    const std::string text = sidecar.dump(1) + "\n";
    write_file_atomic(json_path, text.data(), text.size());

    // Keep the newest `keep` complete checkpoints; remove the rest (and any .bin left without a sidecar).
    std::set<int64_t> complete;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".json" && step_of(e.path()) >= 0) complete.insert(step_of(e.path()));
    std::set<int64_t> kept;
    for (auto it = complete.rbegin(); it != complete.rend() && int(kept.size()) < std::max(keep, 1); ++it) kept.insert(*it);
    for (const auto& e : fs::directory_iterator(dir)) {
        const int64_t step = step_of(e.path());
        const bool ours = e.path().extension() == ".json" || e.path().extension() == ".bin";
        if (ours && step >= 0 && !kept.count(step)) fs::remove(e.path());
    }
    return json_path;
}

Checkpoint load_checkpoint(const std::string& json_path, int64_t floats) {
    const nlohmann::json j = read_json_file(json_path);
    // Every key is type-checked before it is read: a sidecar edited by hand is an input error naming it.
    const auto has = [&](const char* key, bool (nlohmann::json::*is)() const noexcept) {
        return j.is_object() && j.contains(key) && (j[key].*is)();
    };
    const auto string_of = [&](const char* key) {
        return has(key, &nlohmann::json::is_string) ? j[key].get<std::string>() : std::string();
    };
    LOWBIT_CHECK(string_of("format") == "lowbit-train-checkpoint" && has("version", &nlohmann::json::is_number_integer) &&
                     j["version"].get<int64_t>() == int64_t(kVersion),
                 ErrorKind::input, "{}: not a lowbit training checkpoint (format/version)", json_path);
    LOWBIT_CHECK(has("steps_done", &nlohmann::json::is_number_integer) && has("file", &nlohmann::json::is_string) &&
                     has("metrics_lines", &nlohmann::json::is_number_integer),
                 ErrorKind::input, "{}: steps_done, file or metrics_lines missing", json_path);
    const std::string file = j["file"].get<std::string>();
    LOWBIT_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", ErrorKind::input,
                 "{}: its data file '{}' must be a plain file name in the checkpoint's directory", json_path, file);
    const std::string bin = (fs::path(json_path).parent_path() / file).string();
    LOWBIT_CHECK(fs::exists(bin), ErrorKind::input, "{}: its data file {} is missing", json_path, bin);
    const std::vector<uint8_t> bytes = read_file(bin);
    CheckpointFileHeader h{};
    LOWBIT_CHECK(bytes.size() >= sizeof(h), ErrorKind::input, "{}: truncated ({} bytes, the header alone is {})", bin,
                 bytes.size(), sizeof(h));
    std::memcpy(&h, bytes.data(), sizeof(h));
    LOWBIT_CHECK(std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0, ErrorKind::input,
                 "{}: not a lowbit checkpoint (bad magic)", bin);
    LOWBIT_CHECK(h.header_checksum == fnv1a_of(&h, offsetof(CheckpointFileHeader, header_checksum)), ErrorKind::input,
                 "{}: the header is corrupt (checksum mismatch)", bin);
    LOWBIT_CHECK(h.version == kVersion && h.buffers == kBuffers, ErrorKind::input,
                 "{}: version {} with {} buffers; this lowbit reads version {} with {}", bin, h.version, h.buffers,
                 kVersion, kBuffers);
    LOWBIT_CHECK(int64_t(h.floats) == floats, ErrorKind::input,
                 "{}: a checkpoint of a model of {} parameters; this run's model has {}", bin, h.floats, floats);
    const size_t buffer_bytes = size_t(floats) * sizeof(float);
    const size_t want = sizeof(h) + kBuffers * buffer_bytes;
    LOWBIT_CHECK(bytes.size() == want, ErrorKind::input, "{}: {} bytes, expected {} ({})", bin, bytes.size(), want,
                 bytes.size() < want ? "truncated" : "trailing bytes");
    const uint8_t* payload = bytes.data() + sizeof(h);
    const uint64_t checksum = fnv1a_of(payload, kBuffers * buffer_bytes);
    LOWBIT_CHECK(checksum == h.payload_checksum && hex64(checksum) == string_of("payload_checksum"), ErrorKind::input,
                 "{}: the data is corrupt (payload checksum {}, header {}, sidecar {})", bin, hex64(checksum),
                 hex64(h.payload_checksum), has("payload_checksum", &nlohmann::json::is_string) ? string_of("payload_checksum") : "none");
    LOWBIT_CHECK(h.steps_done == j["steps_done"].get<int64_t>(), ErrorKind::input,
                 "{}: {} steps done, but its sidecar {} says {}", bin, h.steps_done, json_path,
                 j["steps_done"].get<int64_t>());
    Checkpoint c;
    c.state.steps_done = h.steps_done;
    c.metrics_lines = j["metrics_lines"].get<int64_t>();
    if (j.contains("recipe_state")) c.state.recipe_state = j["recipe_state"];
    for (std::vector<float>* buffer : {&c.state.params, &c.state.m, &c.state.v}) {
        buffer->resize(size_t(floats));
        std::memcpy(buffer->data(), payload, buffer_bytes);
        payload += buffer_bytes;
    }
    return c;
}

std::optional<std::string> newest_checkpoint(const std::string& run_dir) {
    const fs::path dir = checkpoint_dir(run_dir);
    if (!fs::is_directory(dir)) return std::nullopt;
    int64_t best = -1;
    fs::path best_path;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".json" && step_of(e.path()) > best) {
            best = step_of(e.path());
            best_path = e.path();
        }
    if (best < 0) return std::nullopt;
    return best_path.string();
}

}  // namespace lowbit
