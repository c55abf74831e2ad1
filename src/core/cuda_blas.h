// cuda_blas.h — the cuBLAS and cuBLASLt handles of a device, shared by everything that multiplies on it
// (the model's linears, lp_matmul's emulation, the benchmarks' baselines), and CudaBlas: those handles
// together with the stream a caller works on.
//
// One pair of handles per device and host thread, created on first use and kept for the process's
// lifetime (never destroyed: a handle destroyed by a static destructor after the driver has shut down
// fails, and the pair is a few KB). cuBLAS handles must not be used by two threads at once, hence per
// thread; a program with one thread per device — all of lowbit today — has exactly one pair per device.
// CudaBlas binds the shared handle to its stream and to that stream's own workspace before each use (two
// host-side field writes), so objects on different streams can share the handle even while their kernels
// run at the same time.
#pragma once

#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include <cublasLt.h>
#include <cublas_v2.h>

namespace lowbit {

// Throws Error(runtime) naming the call when a cuBLAS call did not succeed.
void cublas_check(cublasStatus_t status, const char* call);

class CudaBlas {
public:
    explicit CudaBlas(cudaStream_t stream = nullptr);
    // The device's shared cuBLAS handle, bound to this object's stream.
    cublasHandle_t handle() const;
    // The device's shared cuBLASLt handle (cuBLASLt takes the stream per call).
    cublasLtHandle_t lt_handle() const { return lt_; }
    cudaStream_t stream() const { return stream_; }
    void synchronize() const;

private:
    cublasHandle_t handle_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    cudaStream_t stream_ = nullptr;
    void* workspace_ = nullptr;  // this stream's cuBLAS workspace (owned by the device's handles)
};

}  // namespace lowbit
