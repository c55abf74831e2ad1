// progress.cpp — ProgressLine implementation.
#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace lowbit {

ProgressLine::ProgressLine(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void ProgressLine::update(int64_t done) {
    const auto now = std::chrono::steady_clock::now();
    const double since_last = std::chrono::duration<double>(now - last_).count();
    if (done < total_ && since_last < (tty_ ? 0.2 : 5.0)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? double(done) / secs : 0.0;
    const double eta = rate > 0 ? double(total_ - done) / rate : 0.0;
    std::fprintf(stderr, "%s%s: %lld/%lld %s  %.2f %s/s  elapsed %.0fs  ETA %.0fs%s", tty_ ? "\r" : "", label_.c_str(),
                 (long long)done, (long long)total_, unit_.c_str(), rate, unit_.c_str(), secs, eta, tty_ ? "   " : "\n");
    std::fflush(stderr);
}

void ProgressLine::finish() {
    if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace lowbit
