// corpus.h — text in: a text file as bytes, the shared data folder, and the named evaluation corpora (the
// SOTU splits). Below the model layer, so a pipeline can go text → tokens → blocks without the evaluator.
//
// Where the shared data folder is (no machine path is compiled in):
//   1. $LOWBIT_SHARED_DATA when it is set (it must then be a directory);
//   2. else the first `shared/data` found in the folder of the running executable (/proc/self/exe) or one
//      of its parents, nearest first — a build in <checkout>/build-x finds <checkout>/shared/data and the
//      usual sibling <checkout>/../shared/data wherever the checkout is, and so do the test binaries one
//      folder deeper;
//   3. else the same search from the current directory (an executable installed elsewhere, run from the
//      checkout).
// When nothing is found the error lists every folder tried and says to set LOWBIT_SHARED_DATA.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace lowbit {

// The whole file as bytes (no newline translation); fails (input) naming the file when it cannot be read.
std::string read_text_file(const std::string& path);

// The shared data folder (see above).
std::string shared_data_dir();
// Step 2/3 of the search on given start folders: the first <start or a parent>/shared/data, in the
// order given, nearest first; empty when none exists. `tried` (if not null) receives every folder looked at.
std::string find_shared_data_dir(const std::vector<std::filesystem::path>& starts,
                                 std::vector<std::string>* tried = nullptr);

// Named corpora: "sotu-test" (years 2011–2021), "sotu-validation" (2001–2010), "sotu-train" (the rest).
// Files are <shared data>/corpora/sotu/YEAR_NAME_PARTY.txt, taken in file-name order (year first), each
// with its trailing whitespace removed, joined with "\n\n".
std::string read_corpus_text(const std::string& name);
std::vector<std::string> corpus_names();

}  // namespace lowbit
