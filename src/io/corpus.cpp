// corpus.cpp — text files, the shared data folder search and the SOTU corpus splits (see corpus.h).
#include "io/corpus.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace lowbit {

namespace fs = std::filesystem;

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    LOWBIT_CHECK(in.good(), ErrorKind::input, "{}: cannot open the text file", path);
    std::stringstream ss;
    ss << in.rdbuf();
    LOWBIT_CHECK(!in.bad(), ErrorKind::input, "{}: read failed", path);
    return ss.str();
}

std::string find_shared_data_dir(const std::vector<fs::path>& starts, std::vector<std::string>* tried) {
    std::vector<std::string> seen;
    for (const fs::path& start : starts) {
        if (start.empty()) continue;
        for (fs::path p = start;; p = p.parent_path()) {
            const std::string candidate = (p / "shared" / "data").string();
            if (std::find(seen.begin(), seen.end(), candidate) == seen.end()) {
                seen.push_back(candidate);
                std::error_code ec;
                if (fs::is_directory(candidate, ec)) {
                    if (tried) *tried = seen;
                    return candidate;
                }
            }
            if (p == p.parent_path()) break;
        }
    }
    if (tried) *tried = seen;
    return "";
}

std::string shared_data_dir() {
    if (const char* env = std::getenv("LOWBIT_SHARED_DATA"); env && *env) {
        LOWBIT_CHECK(fs::is_directory(env), ErrorKind::input, "LOWBIT_SHARED_DATA={} is not a directory", env);
        return env;
    }
    std::vector<fs::path> starts;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);  // Linux; skipped where it does not exist
    if (!ec) starts.push_back(exe.parent_path());
    const fs::path cwd = fs::current_path(ec);
    if (!ec) starts.push_back(cwd);
    std::vector<std::string> tried;
    const std::string dir = find_shared_data_dir(starts, &tried);
    LOWBIT_CHECK(!dir.empty(), ErrorKind::input,
                 "shared data folder not found: LOWBIT_SHARED_DATA is not set and none of {} exists; set "
                 "LOWBIT_SHARED_DATA to the folder that holds corpora/ and tokenizers/",
                 fmt::join(tried, ", "));
    return dir;
}

std::vector<std::string> corpus_names() { return {"sotu-test", "sotu-validation", "sotu-train"}; }

std::string read_corpus_text(const std::string& name) {
    int lo = 0, hi = 0;
    bool complement = false;
    if (name == "sotu-test") {
        lo = 2011, hi = 2021;
    } else if (name == "sotu-validation") {
        lo = 2001, hi = 2010;
    } else if (name == "sotu-train") {
        lo = 2001, hi = 2021, complement = true;
    } else {
        fail(ErrorKind::usage, "unknown corpus '{}' (known: {})", name, fmt::join(corpus_names(), ", "));
    }
    const fs::path dir = fs::path(shared_data_dir()) / "corpora" / "sotu";
    LOWBIT_CHECK(fs::is_directory(dir), ErrorKind::input, "{}: the SOTU corpus directory is missing", dir.string());
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string f = e.path().filename().string();
        if (e.path().extension() != ".txt" || f.size() < 5 || f[4] != '_') continue;
        const int year = std::atoi(f.substr(0, 4).c_str());
        if (year <= 0) continue;
        const bool inside = year >= lo && year <= hi;
        if (inside != complement) files.push_back(e.path());
    }
    LOWBIT_CHECK(!files.empty(), ErrorKind::input, "{}: no YEAR_NAME_PARTY.txt files for corpus '{}'", dir.string(),
                 name);
    std::sort(files.begin(), files.end());
    std::string text;
    for (const auto& p : files) {
        std::string t = read_text_file(p.string());
        while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
        if (!text.empty()) text += "\n\n";
        text += t;
    }
    return text;
}

}  // namespace lowbit
