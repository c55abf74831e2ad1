// blocked_view.h — index arithmetic for a row-major matrix cut into 1-D blocks along one axis, shared by
// every block-format quantizer (CPU references and CUDA kernels).
//   axis 1: blocks run along a row (contiguous);   outer = rows, inner = cols
//   axis 0: blocks run down a column (stride cols); outer = cols, inner = rows
// Quantized outputs use the blocked layout [outer][inner] (codes) and [outer][inner/block] (scales).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace lowbit {

struct BlockedView {
    int64_t rows, cols;
    int axis;
    int64_t block;

    LOWBIT_HD int64_t outer() const { return axis == 1 ? rows : cols; }
    LOWBIT_HD int64_t inner() const { return axis == 1 ? cols : rows; }
    LOWBIT_HD int64_t blocks_per_outer() const { return inner() / block; }
    LOWBIT_HD int64_t stride_inner() const { return axis == 1 ? 1 : cols; }
    LOWBIT_HD int64_t stride_outer() const { return axis == 1 ? cols : 1; }
    // Row-major index of element i of block b of outer line o.
    LOWBIT_HD int64_t source_index(int64_t o, int64_t b, int64_t i) const {
        return o * stride_outer() + (b * block + i) * stride_inner();
    }
    // Index in the blocked layout.
    LOWBIT_HD int64_t blocked_index(int64_t o, int64_t b, int64_t i) const { return o * inner() + b * block + i; }
    LOWBIT_HD int64_t scale_index(int64_t o, int64_t b) const { return o * blocks_per_outer() + b; }
};

}  // namespace lowbit
