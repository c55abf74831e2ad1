// thread_pool.cpp — parallel_for on std::thread; small ranges run inline.
#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lowbit {

namespace {
int g_threads = 0;
}

int thread_count() {
    if (g_threads > 0) return g_threads;
    if (const char* env = std::getenv("LOWBIT_THREADS")) {
        int n = std::atoi(env);
        if (n > 0) return g_threads = n;
    }
    unsigned hc = std::thread::hardware_concurrency();
    return g_threads = hc ? int(hc) : 1;
}

void set_thread_count(int n) { g_threads = std::max(1, n); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t workers = std::min<int64_t>(thread_count(), (n + grain - 1) / grain);
    if (workers <= 1) {
        fn(0, n);
        return;
    }
    int64_t chunk = (n + workers - 1) / workers;
    std::vector<std::thread> threads;
    std::exception_ptr first_error;
    std::mutex error_mutex;
    for (int64_t w = 0; w < workers; ++w) {
        int64_t b = w * chunk, e = std::min(n, b + chunk);
        if (b >= e) break;
        threads.emplace_back([&, b, e] {
            try {
                fn(b, e);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!first_error) first_error = std::current_exception();
            }
        });
    }
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
}

}  // namespace lowbit
