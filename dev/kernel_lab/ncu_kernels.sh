#!/usr/bin/env bash
# ncu_kernels.sh — kernel lab: Nsight Compute sections for the kernels of a CMake-built benchmark or lab program
# whose demangled name matches each regex (one profiled launch each). Run on the GPU host:
#   bash dev/kernel_lab/ncu_kernels.sh BUILD/bench/bench_kernels "mx_cols_kernel<__nv_bfloat16, true, Hadamard32Prologue" ...
set -uo pipefail
BIN=${1:?usage: ncu_kernels.sh BINARY REGEX... (BINARY: a CMake-built benchmark, e.g. build/bench/bench_kernels)}
shift
[ -x "$BIN" ] || { echo "$BIN: not an executable (build it with CMake first)" >&2; exit 1; }
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found" >&2; exit 1; }
for k in "$@"; do
    echo "=================== $k"
    "$NCU" --kernel-name-base demangled --kernel-name "regex:$k" --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
        "$BIN" --reps 2 2>&1 | grep -v "^==PROF==" | grep -E "^  [A-Za-z]|^    [A-Z]|void |OPT|WRN" | grep -v "^    -" | head -120
done
