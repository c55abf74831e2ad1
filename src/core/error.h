// error.h — the one exception type of lowbit and the checks that raise it. Messages are for people: they
// name the file/tensor/shape and say what to do. The CLI maps error kinds to exit codes.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace lowbit {

enum class ErrorKind {
    usage = 2,     // bad arguments or options
    input = 3,     // malformed, truncated or unsupported input (file, shape, value)
    runtime = 4,   // CUDA/device or internal failure
};

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
    ErrorKind kind() const { return kind_; }

private:
    ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
    throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace lowbit

#define LOWBIT_CHECK(cond, kind, ...)                  \
    do {                                               \
        if (!(cond)) ::lowbit::fail(kind, __VA_ARGS__); \
    } while (0)
