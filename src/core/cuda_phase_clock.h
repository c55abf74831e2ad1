// cuda_phase_clock.h — wall-clock phases of work queued on one CUDA stream, timed by CUDA events at the
// phase boundaries (no synchronization until collect()). Used by the training engine's profile and by the
// GPU calibration paths of post-training quantization.
#pragma once

#include "core/cuda_device.h"

#include <map>
#include <string>
#include <vector>

namespace lowbit {

// CUDA events at phase boundaries on one stream: mark(p) charges the time since the previous mark to phase p;
// collect() (after the stream synchronized) adds the intervals to the totals. Off: mark() returns at once.
class PhaseClock {
public:
    PhaseClock() = default;
    PhaseClock(const PhaseClock&) = delete;
    PhaseClock& operator=(const PhaseClock&) = delete;
    ~PhaseClock() {
        for (cudaEvent_t e : pool_) cudaEventDestroy(e);
    }
    void enable(bool on) { on_ = on; }
    bool enabled() const { return on_; }
    void mark(cudaStream_t stream, const char* phase) {
        if (!on_) return;
        if (used_ == pool_.size()) {
            cudaEvent_t e = nullptr;
            CUDA_CHECK(cudaEventCreate(&e));
            pool_.push_back(e);
        }
        CUDA_CHECK(cudaEventRecord(pool_[used_], stream));
        phases_.push_back(phase);
        ++used_;
    }
    void collect() {
        for (size_t i = 1; i < used_; ++i) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[i - 1], pool_[i]));
            totals_[phases_[i]] += 1e-3 * double(ms);
        }
        used_ = 0;
        phases_.clear();
    }
    void drop() {  // forget the marks since the last collect (an evaluation forward)
        used_ = 0;
        phases_.clear();
    }
    const std::map<std::string, double>& totals() const { return totals_; }

private:
    bool on_ = false;
    std::vector<cudaEvent_t> pool_;
    std::vector<const char*> phases_;  // phases_[i]: the phase that ends at event i
    size_t used_ = 0;
    std::map<std::string, double> totals_;
};

}  // namespace lowbit
