// random_fill.h — reproducible synthetic data (Gaussian, Student-t) from the counter-based generator, so
// that demos, tests and benchmarks see the same numbers on every machine and thread count.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/counter_rng.h"
#include "core/thread_pool.h"

namespace lowbit {

// Standard normal number i of stream `seed` (Box–Muller on two counter draws; u1 in (0, 1]).
inline float gaussian_at(uint64_t seed, uint64_t i) {
    const double u1 = (double(counter_random24(seed, 2 * i)) + 1.0) * 0x1p-24;
    const double u2 = double(counter_random24(seed, 2 * i + 1)) * 0x1p-24;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

inline void fill_gaussian(float* x, int64_t n, uint64_t seed) {
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) x[i] = gaussian_at(seed, uint64_t(i));
    });
}

// Student-t with `nu` (integer) degrees of freedom: heavy-tailed data (nu = 3: finite variance, kurtosis ∞).
inline void fill_student_t(float* x, int64_t n, int nu, uint64_t seed) {
    parallel_for(n, 1 << 12, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            double chi2 = 0;
            for (int k = 0; k < nu; ++k) {
                const double z = gaussian_at(seed ^ 0xC0FFEEull, uint64_t(i) * uint64_t(nu) + uint64_t(k));
                chi2 += z * z;
            }
            x[i] = float(gaussian_at(seed, uint64_t(i)) / std::sqrt(chi2 / nu));
        }
    });
}

}  // namespace lowbit
