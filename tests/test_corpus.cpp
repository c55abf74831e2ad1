// test_corpus.cpp — text in (io/corpus.h): the SOTU splits (when the shared data is there), the search for
// the shared data folder (on a temporary tree: nearest shared/data first, every folder tried reported),
// $LOWBIT_SHARED_DATA, and text files read byte for byte.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/corpus.h"

using namespace lowbit;
namespace fs = std::filesystem;

namespace {

fs::path temp_tree(const std::string& name) {
    const fs::path root = fs::temp_directory_path() / ("lowbit_test_corpus_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(root);
    fs::create_directories(root);
    return root;
}

// Sets an environment variable for one scope and restores it.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        if (value) {
            ::setenv(name, value, 1);
        } else {
            ::unsetenv(name);
        }
    }
    ~ScopedEnv() {
        if (had_) {
            ::setenv(name_.c_str(), old_.c_str(), 1);
        } else {
            ::unsetenv(name_.c_str());
        }
    }

private:
    std::string name_, old_;
    bool had_ = false;
};

}  // namespace

TEST(Corpus, SotuSplits) {
    std::string text;
    try {
        text = read_corpus_text("sotu-test");
    } catch (const Error& e) {
        GTEST_SKIP() << "SOTU corpus not available: " << e.what();
    }
    EXPECT_EQ(text.rfind("Mr. Speaker", 0), 0u);  // 2011 starts the test split
    EXPECT_GT(text.size(), 300000u);
    EXPECT_EQ(text.find("\n\n\n"), std::string::npos);
    const std::string val = read_corpus_text("sotu-validation");
    EXPECT_GT(val.size(), 100000u);
    try {
        read_corpus_text("wikitext");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::usage);
        EXPECT_NE(std::string(e.what()).find("unknown corpus"), std::string::npos) << e.what();
    }
}

TEST(Corpus, SharedDataIsTheNearestSharedDataAboveTheStart) {
    const fs::path root = temp_tree("search");
    // <root>/shared/data beside a checkout <root>/repo, and a build folder two levels down in it
    fs::create_directories(root / "shared" / "data");
    fs::create_directories(root / "repo" / "build" / "tests");
    std::vector<std::string> tried;
    EXPECT_EQ(find_shared_data_dir({root / "repo" / "build" / "tests"}, &tried), (root / "shared" / "data").string());
    EXPECT_EQ(tried.size(), 4u);  // tests, build, repo, root
    EXPECT_EQ(tried.front(), (root / "repo" / "build" / "tests" / "shared" / "data").string());
    // a shared/data inside the checkout is nearer and wins
    fs::create_directories(root / "repo" / "shared" / "data");
    EXPECT_EQ(find_shared_data_dir({root / "repo" / "build"}), (root / "repo" / "shared" / "data").string());
    // the starts are tried in order; a folder seen from an earlier start is not listed twice
    fs::remove_all(root / "repo" / "shared");
    fs::remove_all(root / "shared");
    const std::string found = find_shared_data_dir({root / "repo" / "build", root / "repo"}, &tried);
    if (found.empty()) {  // nothing above root either: every folder up to / was tried, once
        EXPECT_EQ(tried.front(), (root / "repo" / "build" / "shared" / "data").string());
        EXPECT_EQ(tried.back(), (fs::path("/") / "shared" / "data").string());
        EXPECT_EQ(std::count(tried.begin(), tried.end(), (root / "repo" / "shared" / "data").string()), 1);
    }
    fs::remove_all(root);
}

TEST(Corpus, SharedDataFromTheEnvironment) {
    const fs::path root = temp_tree("env");
    {
        const ScopedEnv env("LOWBIT_SHARED_DATA", root.c_str());
        EXPECT_EQ(shared_data_dir(), root.string());
    }
    {
        const ScopedEnv env("LOWBIT_SHARED_DATA", (root / "missing").c_str());
        try {
            shared_data_dir();
            ADD_FAILURE() << "expected an error";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::input);
            EXPECT_NE(std::string(e.what()).find("LOWBIT_SHARED_DATA=" + (root / "missing").string()), std::string::npos)
                << e.what();
        }
    }
    {
        // Without the variable the search runs; when it finds nothing the error lists the folders tried and
        // says to set the variable.
        const ScopedEnv env("LOWBIT_SHARED_DATA", nullptr);
        try {
            const std::string dir = shared_data_dir();
            EXPECT_TRUE(fs::is_directory(dir)) << dir;
            EXPECT_EQ(fs::path(dir).filename(), "data");
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("shared/data"), std::string::npos) << msg;
            EXPECT_NE(msg.find("set LOWBIT_SHARED_DATA"), std::string::npos) << msg;
        }
    }
    fs::remove_all(root);
}

TEST(Corpus, TextFilesAreReadByteForByte) {
    const fs::path root = temp_tree("text");
    const std::string bytes = std::string("line\r\n\0tail\xFF", 12);
    std::ofstream(root / "t.txt", std::ios::binary) << bytes;
    EXPECT_EQ(read_text_file((root / "t.txt").string()), bytes);
    std::ofstream(root / "empty.txt", std::ios::binary);
    EXPECT_EQ(read_text_file((root / "empty.txt").string()), "");
    try {
        read_text_file((root / "none.txt").string());
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::input);
        EXPECT_NE(std::string(e.what()).find("none.txt"), std::string::npos) << e.what();
    }
    fs::remove_all(root);
}
