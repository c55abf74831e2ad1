// thread_pool.h — parallel_for over an index range with static chunking. Each index is processed exactly
// once and callers write disjoint outputs, so results never depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace lowbit {

// Number of worker threads used by parallel_for (LOWBIT_THREADS overrides hardware_concurrency).
int thread_count();
void set_thread_count(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks have at least `grain` indices.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace lowbit
