// host_memory.h — how the process gets its large host buffers back. Post-training quantization allocates and
// frees gigabytes per block (statistics, factors, weight copies, codes); glibc serves every allocation above
// 32 MiB with a fresh mmap and unmaps it on free, so each block pays the page faults again: on the H200 host a
// fresh 1 GiB vector costs 0.69–0.76 s to fill once (1.4 GB/s), a reused one 0.10 s (10.4 GB/s;
// dev/kernel_lab/host_copy_lab.cu). keep_freed_host_memory() makes glibc serve large blocks from its heap
// and keep freed memory there (no trimming), so later blocks reuse pages that are already mapped. The resident
// size then stays at its high-water mark, which a batch job reaches anyway. A no-op without glibc.
#pragma once

namespace lowbit {

void keep_freed_host_memory();

}  // namespace lowbit
