// hadamard_orders.h — which transform sizes lowbit supports and the base Hadamard matrices behind them.
// A supported order is n = m·2^k with m = 1 (Sylvester) or m one of the base orders below; the transform
// is H_m ⊗ H_{2^k} (see hadamard.h). Base matrices are built on first use from classical constructions
// (Paley I / Paley II / Williamson array) and are genuine Hadamard matrices (H·Hᵀ = m·I, tested).
// Unsupported sizes get an advice string naming the nearest workable option (block size or padding).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lowbit {

// Non-power-of-two base orders, ascending. 40·2^k is covered as 20·2^(k+1). Each is 4·(odd), so the
// factorisation of n is unique: m = 4·odd(n) when that is a base order.
inline constexpr int hadamard_base_orders[] = {12, 20, 28, 36, 52, 60, 76, 108, 140, 148, 156, 172};

// n = base · pow2; base = 1 for powers of two; base = 0 when n is not supported.
struct HadamardOrder {
    int64_t n = 0;
    int base = 0;
    int64_t pow2 = 1;
    int log2_pow2 = 0;
    bool supported() const { return base != 0; }
};

// Factorises n with the largest power-of-two factor (so 40·2^k → 20·2^(k+1)). n ≤ 0 is unsupported.
HadamardOrder hadamard_factor_order(int64_t n);
bool hadamard_order_supported(int64_t n);

// One sentence for people, e.g. "hadamard: size 4864 = 19·256 has no Hadamard order lowbit supports;
// use a block-diagonal transform (--block 256) or pad to 4992 = 156·32".
std::string hadamard_size_advice(int64_t n);
// Largest supported order that divides n (1 if only 1 does); smallest supported order ≥ n.
int64_t hadamard_largest_block_dividing(int64_t n);
int64_t hadamard_next_supported_order(int64_t n);
// "19·256", "4096 = 2^12", "172·64": how lowbit writes a size in messages.
std::string hadamard_describe_size(int64_t n);

// The ±1 base matrix of order m (1 or a base order), row-major m×m, or an empty span when m is not a
// base order. Storage is static and built once (thread-safe); CUDA launchers upload it as is.
std::span<const int8_t> hadamard_base_matrix(int m);
// How the base matrix of order m is built, e.g. "Paley I, q = 11" (empty if m is not a base order).
std::string hadamard_base_construction(int m);

// Constructions, exposed for tests and for dev/ programs. All return row-major ±1 matrices.
// Paley I: q ≡ 3 (mod 4) a prime or the square of a prime, order q + 1.
std::vector<int8_t> hadamard_paley1(int q);
// Paley II: q ≡ 1 (mod 4) a prime or the square of a prime, order 2(q + 1).
std::vector<int8_t> hadamard_paley2(int q);
// Williamson array from the first rows (strings of '+'/'-', length n, symmetric) of A, B, C, D; order 4n.
std::vector<int8_t> hadamard_williamson(const char* a, const char* b, const char* c, const char* d);

}  // namespace lowbit
