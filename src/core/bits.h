// bits.h — float <-> integer bit views and exact power-of-two helpers shared by CPU and GPU code.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace lowbit {

LOWBIT_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
#endif
}

LOWBIT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
#endif
}

LOWBIT_HD bool is_nan_or_inf(float x) { return (float_bits(x) & 0x7F800000u) == 0x7F800000u; }
LOWBIT_HD bool is_nan(float x) { return (float_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }

// floor(log2(|x|)) for finite non-zero x, exact (also for float subnormals).
LOWBIT_HD int floor_log2(float x) {
    uint32_t u = float_bits(x) & 0x7FFFFFFFu;
    int e = int(u >> 23);
    if (e != 0) return e - 127;
    // subnormal: value = mantissa * 2^-149, find the highest set bit
    int hb = 31;
    while (((u >> hb) & 1u) == 0) --hb;
    return hb - 149;
}

// x * 2^n, exact whenever the result is a normal float (two steps keep 2^n itself representable).
LOWBIT_HD float scale_pow2(float x, int n) {
    while (n > 127) { x *= bits_float(0x7F000000u); n -= 127; }        // * 2^127
    while (n < -126) { x *= bits_float(0x00800000u); n += 126; }       // * 2^-126
    return x * bits_float(uint32_t(n + 127) << 23);
}

// 2^n as a float for -149 <= n <= 127 (subnormal powers included).
LOWBIT_HD float pow2f(int n) {
    if (n >= -126) return bits_float(uint32_t(n + 127) << 23);
    return bits_float(1u << (n + 149));
}

}  // namespace lowbit
