// gemm_cpu.cpp — gemm_f32 on OpenBLAS (cblas_sgemm, FP32 accumulation). The same build runs on the dev
// machine, in CI and on the GPU host (static OpenBLAS there), so every CPU reference is one code path.
//
// OpenBLAS's kernels for this CPU. Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels from the CPU
// model and does not know recent Intel ones: on the dev machine's Xeon (family 6, model 207, AVX-512) it falls
// back to its generic Prescott (SSE3) kernels. bench_model_cpu's sgemm there: 66 GFLOP/s with them, 320 with its
// SkylakeX (AVX-512) kernels, on 2 cores (bench/results/cpu_blas_kernels_devbox.md). OpenBLAS reads
// OPENBLAS_CORETYPE only while it loads, before any of our code runs. So when it chose a generic core, the
// variable is unset and the CPU (with the OS) supports AVX-512 F/BW/VL/DQ/CD (SkylakeX kernels) or AVX2 + FMA
// (Haswell kernels), the process sets OPENBLAS_CORETYPE and re-executes itself once, with the same arguments
// and environment (prefer_native_blas_kernels, run before main). A user's OPENBLAS_CORETYPE is left alone, as
// is any non-generic choice; LOWBIT_NATIVE_BLAS=0 turns the re-execution off.
#include "core/gemm_cpu.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__) && defined(__GLIBC__)
#include <unistd.h>
#endif

#include "core/error.h"

namespace lowbit {

namespace {

// The OpenBLAS kernels this CPU supports best, among the two families that matter here; null: neither.
const char* native_blas_core() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return nullptr;
}

// OpenBLAS's generic x86-64 cores, older than both of native_blas_core's choices.
bool generic_blas_core(const char* name) {
    for (const char* g : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge"})
        if (std::strcmp(name, g) == 0) return true;
    return false;
}

#if defined(__linux__) && defined(__GLIBC__)
extern "C" void gotoblas_init(void);  // OpenBLAS's own constructor (exported; it returns at once when it already ran)

// glibc passes (argc, argv, envp) to the functions of .init_array. With a shared OpenBLAS its constructor has run
// before ours; with a static one (the portable binaries) the order is not fixed, so ours runs it first.
__attribute__((constructor)) void prefer_native_blas_kernels(int argc, char** argv, char** envp) {
    (void)argc, (void)envp;
    if (std::getenv("OPENBLAS_CORETYPE")) return;
    if (const char* off = std::getenv("LOWBIT_NATIVE_BLAS"); off && std::strcmp(off, "0") == 0) return;
    gotoblas_init();
    const char* chosen = openblas_get_corename();
    const char* native = native_blas_core();
    if (!chosen || !native || !argv || !argv[0] || !generic_blas_core(chosen)) return;
    if (setenv("OPENBLAS_CORETYPE", native, 0) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");  // exec failed: go on with the generic kernels
}
#endif

}  // namespace

std::string blas_kernels() {
    const char* core = openblas_get_corename();
    return std::string("OpenBLAS ") + (core ? core : "?");
}

void gemm_f32(ConstMatF a, Trans trans_a, ConstMatF b, Trans trans_b, MatF c, float beta) {
    const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
    const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
    const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
    LOWBIT_CHECK(k == kb && c.rows == m && c.cols == n, ErrorKind::usage,
                 "gemm_f32: shapes do not agree: op(A) {}x{}, op(B) {}x{}, C {}x{}", m, k, kb, n, c.rows, c.cols);
    if (m == 0 || n == 0) return;
    if (k == 0) {  // BLAS wants leading dimensions ≥ 1 even for an empty reduction
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) c.row(i)[j] = beta == 0.0f ? 0.0f : beta * c.row(i)[j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0f,
                a.data, int(a.ld), b.data, int(b.ld), beta, c.data, int(c.ld));
}

void gram_f32(ConstMatF a, MatF c, float beta) {
    const int64_t n = a.cols, k = a.rows;
    LOWBIT_CHECK(c.rows == n && c.cols == n, ErrorKind::usage, "gram_f32: A is {}x{}, C {}x{} (want {}x{})", k, n, c.rows,
                 c.cols, n, n);
    if (n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) c.row(i)[j] = beta == 0.0f ? 0.0f : beta * c.row(i)[j];
        return;
    }
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, int(n), int(k), 1.0f, a.data, int(a.ld), beta, c.data, int(c.ld));
    for (int64_t i = 1; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) c.row(i)[j] = c.row(j)[i];
}

}  // namespace lowbit
