// matrix_view.h — a non-owning view of a row-major matrix: pointer, shape and row stride in one value, for
// host or device memory alike (the view never dereferences). Used wherever a function takes a matrix
// (gemm_f32, the model's Linear layers) instead of a pointer/rows/cols/stride argument list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace lowbit {

template <typename T>
struct MatrixView {
    T* data = nullptr;
    int64_t rows = 0, cols = 0;
    int64_t ld = 0;  // elements from one row to the next (≥ cols; == cols when dense)

    constexpr MatrixView() = default;
    constexpr MatrixView(T* d, int64_t r, int64_t c) : data(d), rows(r), cols(c), ld(c) {}
    constexpr MatrixView(T* d, int64_t r, int64_t c, int64_t row_stride) : data(d), rows(r), cols(c), ld(row_stride) {}
    // A view of T converts to a view of const T.
    template <typename U, typename = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
    constexpr MatrixView(const MatrixView<U>& o) : data(o.data), rows(o.rows), cols(o.cols), ld(o.ld) {}

    constexpr T* row(int64_t r) const { return data + r * ld; }
    constexpr int64_t size() const { return rows * cols; }
    constexpr bool dense() const { return ld == cols; }
};

using MatF = MatrixView<float>;
using ConstMatF = MatrixView<const float>;

}  // namespace lowbit
