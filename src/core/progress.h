// progress.h — a one-line progress report on stderr for long work: done/total, rate and ETA, redrawn in
// place on a terminal and printed at most every few seconds otherwise (logs stay short).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace lowbit {

class ProgressLine {
public:
    ProgressLine(std::string label, int64_t total, std::string unit = "steps");
    void update(int64_t done);
    void finish();

private:
    std::string label_, unit_;
    int64_t total_;
    bool tty_;
    std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace lowbit
