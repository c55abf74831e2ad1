// host_device.h — LOWBIT_HD marks scalar functions compiled for both the CPU and the GPU, so that a CUDA
// kernel and its CPU reference run the very same arithmetic (the basis of the bit-exact GPU checks).
#pragma once

#if defined(__CUDACC__)
#define LOWBIT_HD __host__ __device__ __forceinline__
#else
#define LOWBIT_HD inline
#endif
