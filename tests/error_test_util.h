// error_test_util.h — the check the CPU suites share for "fails with a clear message": the call throws
// lowbit::Error of the given kind whose text contains every needle.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace lowbit {

template <typename F>
void expect_error_with(F&& f, ErrorKind kind, const std::vector<std::string>& needles) {
    try {
        f();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " in: " << e.what();
    }
}

}  // namespace lowbit
