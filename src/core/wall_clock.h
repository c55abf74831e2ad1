// wall_clock.h — seconds elapsed since a steady-clock time point: the one helper behind the phase and run timings
// of the reports (quantize, solvers, calibration, training runs, evaluation, the CLI's commands).
#pragma once

#include <chrono>

namespace lowbit {

using WallClock = std::chrono::steady_clock;

inline double seconds_since(WallClock::time_point t) {
    return std::chrono::duration<double>(WallClock::now() - t).count();
}

}  // namespace lowbit
