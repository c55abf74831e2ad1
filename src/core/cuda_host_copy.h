// cuda_host_copy.h — copies between pageable host memory and the device at pinned-memory speed. A plain
// cudaMemcpy from pageable memory runs at 7.5 GB/s to the H200 and 11.8 GB/s back, against 55 GB/s from
// pinned memory (dev/kernel_lab/host_copy_lab.cu); post-training quantization moves gigabytes per block
// (weights, statistics, factors). A copy of at least 8 MiB here goes through two pinned 64 MiB halves: our
// threads copy one half on the host while the DMA of the other runs (45 / 37 GB/s measured). Smaller copies,
// or a process where pinned memory cannot be had, take cudaMemcpyAsync.
//
// Both calls are ordered after the work queued on `stream` and return when the data has arrived (the host
// buffer may be reused, the device data is in place for later work on any stream). One staging buffer per
// process, taken under a lock: concurrent callers are serialized.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace lowbit {

void copy_host_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_device_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace lowbit
