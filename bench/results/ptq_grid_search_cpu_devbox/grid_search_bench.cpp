#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>
#include "ptq/grid.h"
using namespace lowbit;
int main(int argc, char** argv) {
    const int64_t rows = argc > 1 ? atol(argv[1]) : 96, n = argc > 2 ? atol(argv[2]) : 1536, T = 2048;
    std::mt19937 rng(1); std::normal_distribution<float> nd;
    std::vector<float> w(rows * n), x(T * n), h(n * n, 0.f);
    for (auto& v : w) v = 0.02f * nd(rng);
    for (auto& v : x) v = nd(rng);
    for (int64_t i = 0; i < n; ++i) for (int64_t j = 0; j < n; ++j) { double s = 0; for (int64_t t = 0; t < 64; ++t) s += x[t*n+i]*x[t*n+j]; h[i*n+j] = float(s/64 + (i==j?0.1:0)); }
    for (int bits : {4, 3}) {
        GridSpec g = parse_grid(bits == 4 ? "int4" : "int3", 0, false, GridSearch::hessian);
        auto t0 = std::chrono::steady_clock::now();
        SpanGrids sg = fit_span_grids(g, w.data(), n, rows, n, h.data(), n);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double cs = 0; for (auto& gg : sg.grids) cs += gg.scale;
        std::printf("int%d: %.3f s for %ld rows of %ld (checksum %.9g)\n", bits, s, rows, n, cs);
    }
}
