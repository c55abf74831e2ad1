// cuda_blas.cu — the per-device shared cuBLAS/cuBLASLt handles behind CudaBlas.
#include "core/cuda_blas.h"

#include <map>
#include <string>
#include <vector>

namespace lowbit {

void cublas_check(cublasStatus_t status, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error(ErrorKind::runtime, std::string("cuBLAS call failed: ") + call + " (status " + std::to_string(int(status)) + ")");
}

namespace {

// cuBLAS's workspace for one stream: 32 MiB, what cuBLAS's documentation recommends for Hopper. One per
// stream, set with the stream, so kernels of one handle on two streams never share scratch memory.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct DeviceHandles {
    cublasHandle_t blas = nullptr;
    cublasLtHandle_t lt = nullptr;
    std::map<cudaStream_t, DeviceBuffer<uint8_t>> workspaces;
};

// This thread's handles of the current device (see the header: created once, never destroyed).
DeviceHandles& current_device_handles() {
    thread_local std::vector<DeviceHandles> per_device;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    if (size_t(device) >= per_device.size()) per_device.resize(size_t(device) + 1);
    DeviceHandles& h = per_device[size_t(device)];
    if (!h.blas) {
        cublas_check(cublasCreate(&h.blas), "cublasCreate");
        cublas_check(cublasLtCreate(&h.lt), "cublasLtCreate");
    }
    return h;
}

}  // namespace

CudaBlas::CudaBlas(cudaStream_t stream) : stream_(stream) {
    DeviceHandles& h = current_device_handles();
    handle_ = h.blas;
    lt_ = h.lt;
    DeviceBuffer<uint8_t>& ws = h.workspaces[stream];
    if (ws.size() == 0) ws.resize(kWorkspaceBytes);
    workspace_ = ws.data();
}

cublasHandle_t CudaBlas::handle() const {
    cublas_check(cublasSetStream(handle_, stream_), "cublasSetStream");  // also resets the workspace: set ours
    cublas_check(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
    return handle_;
}

void CudaBlas::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace lowbit
