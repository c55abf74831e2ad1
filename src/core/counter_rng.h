// counter_rng.h — counter-based random bits for stochastic rounding. The bits of element i depend only on
// (seed, i), never on thread count, schedule or device, so results are reproducible on CPU and GPU alike.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace lowbit {

// SplitMix64 finaliser applied to the seed-mixed counter (Steele, Lea, Flood 2014): passes BigCrush as a
// counter-based generator; one 64-bit multiply-xorshift chain per draw.
LOWBIT_HD uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// 24 uniformly distributed random bits for element `index` of the stream `seed`.
LOWBIT_HD uint32_t counter_random24(uint64_t seed, uint64_t index) {
    uint64_t z = mix64(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) ^ (index * 0x9E3779B97F4A7C15ull);
    return uint32_t(mix64(z) >> 40);
}

}  // namespace lowbit
