// model_registry.h — turns a model argument into a file path: an existing path is used as is; a short name
// of a model lowbit knows (e.g. "smollm2-135m") maps to its file in the lowbit cache,
// ${LOWBIT_CACHE:-$HOME/.cache/lowbit}/models/<name>/<file>, which scripts/fetch_model.sh fills.
#pragma once

#include <string>
#include <vector>

namespace lowbit {

struct KnownModel {
    const char* name;         // short name, e.g. "smollm2-135m"
    const char* file;         // file name inside <cache>/models/<name>/
    const char* description;
};

const std::vector<KnownModel>& known_models();
// ${LOWBIT_CACHE} if set and non-empty, else $HOME/.cache/lowbit.
std::string lowbit_cache_dir();
// Where a known model lives in the cache (whether or not it is there yet); empty for unknown names.
std::string cached_model_path(const std::string& name);
// An existing file or directory is returned unchanged; a known short name gives its cache path when the
// file is there. Otherwise Error(input): a missing known model says to run scripts/fetch_model.sh; an
// unknown name lists the known ones.
std::string resolve_model_path(const std::string& name_or_path);

}  // namespace lowbit
