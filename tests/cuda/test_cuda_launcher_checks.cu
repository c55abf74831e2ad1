// test_cuda_launcher_checks.cu — the argument checks of the kernel launchers (MX, NVFP4, INT, block Hadamard,
// fused Hadamard+MXFP4): bad shapes, modes and misaligned pointers throw a clear Error before any launch, so
// these run without a GPU.
#include "cuda_test_util.h"  // first: it includes core/cuda_device.h, which prepares fmt for nvcc

#include <cstdint>

#include "formats/cuda/int_quantize.cuh"
#include "formats/cuda/mx_quantize.cuh"
#include "formats/cuda/nvfp4_quantize.cuh"
#include "hadamard/cuda/block_hadamard.cuh"
#include "hadamard/cuda/hadamard_mxfp4.cuh"

using namespace lowbit;
using namespace lowbit::testing_util;

namespace {

TEST(CudaLaunchers, RejectBadShapesBeforeLaunching) {
    QuantizeOptions opt;
    expect_error(ErrorKind::input, [&] { mx_quantize_cuda((const float*)nullptr, 4, 33, MxElement::e2m1, ScaleRule::floor, opt, nullptr, nullptr); });
    opt.axis = 0;
    expect_error(ErrorKind::input, [&] { mx_quantize_cuda((const float*)nullptr, 33, 64, MxElement::e4m3, ScaleRule::floor, opt, nullptr, nullptr); });
    opt.axis = 2;
    expect_error(ErrorKind::usage, [&] { mx_quantize_cuda((const float*)nullptr, 32, 32, MxElement::e4m3, ScaleRule::floor, opt, nullptr, nullptr); });
    opt.axis = 1;
    expect_error(ErrorKind::input, [&] { nvfp4_quantize_cuda((const float*)nullptr, 4, 24, opt, Nvfp4DeviceOutput{}); });
    IntGridFormat f;
    f.group = 128;
    expect_error(ErrorKind::input, [&] { int_quantize_cuda((const float*)nullptr, 4, 96, f, opt, nullptr, nullptr); });
    f.bits = 9;
    expect_error(ErrorKind::usage, [&] { int_quantize_cuda((const float*)nullptr, 4, 128, f, opt, nullptr, nullptr); });
    expect_error(ErrorKind::usage, [&] { block_hadamard_cuda((const float*)nullptr, nullptr, 4, 96, 48, 1); });
    expect_error(ErrorKind::input, [&] { block_hadamard_cuda((const float*)nullptr, nullptr, 4, 96, 64, 1); });
    HadamardMxfp4Options ho;
    uint8_t dummy = 0;
    expect_error(ErrorKind::input, [&] {
        hadamard_mxfp4_cuda(nullptr, 48, 64, ho, Mxfp4DeviceCodes{}, Mxfp4DeviceCodes{&dummy, &dummy});
    });
    expect_error(ErrorKind::usage, [&] { hadamard_mxfp4_cuda(nullptr, 64, 64, ho, Mxfp4DeviceCodes{}, Mxfp4DeviceCodes{}); });
    // misaligned device pointers are refused with a message (checked before any launch)
    expect_error(ErrorKind::input, [&] {
        hadamard_mxfp4_cuda(reinterpret_cast<const __nv_bfloat16*>(reinterpret_cast<uintptr_t>(&dummy) | 1), 64, 64, ho,
                            Mxfp4DeviceCodes{&dummy, &dummy}, Mxfp4DeviceCodes{});
    });
}

}  // namespace
