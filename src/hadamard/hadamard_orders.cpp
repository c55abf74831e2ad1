// hadamard_orders.cpp — factorisation of transform sizes, the advice message for unsupported sizes, and
// the base Hadamard matrices of orders 12…172 built from classical constructions:
//   Paley I  (q ≡ 3 mod 4, order q + 1):   12 (q = 11), 20 (19), 60 (59), 108 (107), 140 (139)
//   Paley II (q ≡ 1 mod 4, order 2(q+1)):  28 (q = 13), 36 (17), 52 (q = 25, over GF(25))
//   Williamson array (order 4n):           156 (n = 39), 172 (n = 43); first rows found by our own
//                                          search, dev/hadamard_search/williamson_search.cpp
#include "hadamard/hadamard_orders.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <map>

#include "core/error.h"

namespace lowbit {

namespace {

bool is_prime(int p) {
    if (p < 2) return false;
    for (int d = 2; d * d <= p; ++d)
        if (p % d == 0) return false;
    return true;
}

// GF(q) for q = p or q = p², p an odd prime. Element index x = x0 + p·x1 stands for x0 + x1·α with
// α² = r, r a quadratic non-residue mod p (so t² − r is irreducible).
struct SmallField {
    int p = 0, q = 0, degree = 0, nonresidue = 0;

    explicit SmallField(int order) : q(order) {
        if (is_prime(order)) {
            p = order;
            degree = 1;
        } else {
            for (int c = 2; c * c <= order; ++c)
                if (c * c == order && is_prime(c)) p = c;
            degree = 2;
            if (p == 0) fail(ErrorKind::runtime, "hadamard: internal: {} is not a prime or a prime square", order);
        }
        if (p == 2) fail(ErrorKind::runtime, "hadamard: internal: Paley construction needs an odd q, got {}", order);
        for (int r = 2; r < p && !nonresidue; ++r) {
            bool square = false;
            for (int t = 1; t < p; ++t) square |= (t * t) % p == r;
            if (!square) nonresidue = r;
        }
    }
    int c0(int x) const { return x % p; }
    int c1(int x) const { return degree == 2 ? x / p : 0; }
    int make(int a0, int a1) const { return ((a0 % p + p) % p) + (degree == 2 ? p * ((a1 % p + p) % p) : 0); }
    int sub(int x, int y) const { return make(c0(x) - c0(y), c1(x) - c1(y)); }
    int mul(int x, int y) const {
        int a = c0(x), b = c1(x), c = c0(y), d = c1(y);
        return make(a * c + b * d * nonresidue, a * d + b * c);
    }
    // Quadratic character: 0 for 0, +1 for non-zero squares, −1 otherwise (Euler's criterion).
    int chi(int x) const {
        if (x == 0) return 0;
        int result = make(1, 0), base = x;
        for (int e = (q - 1) / 2; e > 0; e >>= 1) {
            if (e & 1) result = mul(result, base);
            base = mul(base, base);
        }
        return result == make(1, 0) ? 1 : -1;
    }
};

// Jacobsthal matrix Q[i][j] = χ(x_i − x_j), q × q.
std::vector<int> jacobsthal(const SmallField& f) {
    std::vector<int> qm(size_t(f.q) * f.q);
    for (int i = 0; i < f.q; ++i)
        for (int j = 0; j < f.q; ++j) qm[size_t(i) * f.q + j] = f.chi(f.sub(i, j));
    return qm;
}

// Williamson first rows (A, B, C, D; x_j = x_{n−j}) printed by dev/hadamard_search/williamson_search:
//   n = 39: `williamson_search 39` (full search, row sums −9, −5, −5, −5; ~70 s on one core)
//   n = 43: `williamson_search 43 --mult 6` (sequences invariant under j → 6j; row sums −5, 7, 7, 7)
constexpr const char* williamson_39[4] = {
    "+---+---+-++-++----++----++-++-+---+---",
    "++--+++-+--++-+----------+-++--+-+++--+",
    "+-++------++--+-+-++++-+-+--++------++-",
    "+---+--++++----+-+-++-+-+----++++--+---",
};
constexpr const char* williamson_43[4] = {
    "++---++++-+--+--++--------++--+--+-++++---+",
    "++-++++++----+-+--++-++-++--+-+----++++++-+",
    "+---++--++++-+-+++-++--++-+++-+-++++--++---",
    "+++-+-++--+-+-++++-+----+-++++-+-+--++-+-++",
};

struct BaseTable {
    int order;
    std::string construction;
    std::vector<int8_t> matrix;
};

std::vector<BaseTable> build_base_tables() {
    std::vector<BaseTable> t;
    t.push_back({1, "trivial", {1}});
    t.push_back({12, "Paley I, q = 11", hadamard_paley1(11)});
    t.push_back({20, "Paley I, q = 19", hadamard_paley1(19)});
    t.push_back({28, "Paley II, q = 13", hadamard_paley2(13)});
    t.push_back({36, "Paley II, q = 17", hadamard_paley2(17)});
    t.push_back({52, "Paley II, q = 25 (GF(25))", hadamard_paley2(25)});
    t.push_back({60, "Paley I, q = 59", hadamard_paley1(59)});
    t.push_back({76, "Paley II, q = 37", hadamard_paley2(37)});  // Qwen2.5: 4864 = 76·64
    t.push_back({108, "Paley I, q = 107", hadamard_paley1(107)});
    t.push_back({140, "Paley I, q = 139", hadamard_paley1(139)});
    t.push_back({148, "Paley II, q = 73", hadamard_paley2(73)});  // Qwen2.5-7B: 18944 = 148·128
    t.push_back({156, "Williamson array, n = 39",
                 hadamard_williamson(williamson_39[0], williamson_39[1], williamson_39[2], williamson_39[3])});
    t.push_back({172, "Williamson array, n = 43",
                 hadamard_williamson(williamson_43[0], williamson_43[1], williamson_43[2], williamson_43[3])});
    return t;
}

const BaseTable* find_base_table(int m) {
    static const std::vector<BaseTable> tables = build_base_tables();
    for (const auto& t : tables)
        if (t.order == m) return &t;
    return nullptr;
}

}  // namespace

std::vector<int8_t> hadamard_paley1(int q) {
    SmallField f(q);
    if (q % 4 != 3) fail(ErrorKind::runtime, "hadamard: internal: Paley I needs q ≡ 3 (mod 4), got {}", q);
    const std::vector<int> qm = jacobsthal(f);
    // H = I + S, S = [[0, 1ᵀ], [−1, Q]] (skew-symmetric since χ(−1) = −1); H·Hᵀ = I − S² = (q + 1)·I.
    const int m = q + 1;
    std::vector<int8_t> h(size_t(m) * m);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < m; ++j) {
            int s = (i == 0) ? (j == 0 ? 0 : 1) : (j == 0 ? -1 : qm[size_t(i - 1) * q + (j - 1)]);
            h[size_t(i) * m + j] = int8_t(s + (i == j ? 1 : 0));
        }
    return h;
}

std::vector<int8_t> hadamard_paley2(int q) {
    SmallField f(q);
    if (q % 4 != 1) fail(ErrorKind::runtime, "hadamard: internal: Paley II needs q ≡ 1 (mod 4), got {}", q);
    const std::vector<int> qm = jacobsthal(f);
    // Symmetric conference matrix C = [[0, 1ᵀ], [1, Q]] of order q + 1; every entry becomes a 2×2 block:
    // 0 → [[1, −1], [−1, −1]], ±1 → ±[[1, 1], [1, −1]].
    const int c = q + 1, m = 2 * c;
    std::vector<int8_t> h(size_t(m) * m);
    for (int i = 0; i < c; ++i)
        for (int j = 0; j < c; ++j) {
            int e = (i == 0) ? (j == 0 ? 0 : 1) : (j == 0 ? 1 : qm[size_t(i - 1) * q + (j - 1)]);
            std::array<int, 4> blk = e == 0 ? std::array<int, 4>{1, -1, -1, -1}
                                            : std::array<int, 4>{e, e, e, -e};
            for (int u = 0; u < 2; ++u)
                for (int v = 0; v < 2; ++v) h[size_t(2 * i + u) * m + (2 * j + v)] = int8_t(blk[u * 2 + v]);
        }
    return h;
}

std::vector<int8_t> hadamard_williamson(const char* a, const char* b, const char* c, const char* d) {
    const char* rows[4] = {a, b, c, d};
    const int n = int(std::strlen(a));
    for (const char* r : rows)
        if (int(std::strlen(r)) != n) fail(ErrorKind::runtime, "hadamard: internal: Williamson rows differ in length");
    // Circulant X[i][j] = x_{(j − i) mod n}.
    auto entry = [&](int which, int i, int j) -> int {
        char ch = rows[which][((j - i) % n + n) % n];
        return ch == '+' ? 1 : -1;
    };
    // Williamson array: [[A, B, C, D], [−B, A, −D, C], [−C, D, A, −B], [−D, −C, B, A]].
    static const int layout[4][4][2] = {
        {{0, 1}, {1, 1}, {2, 1}, {3, 1}},
        {{1, -1}, {0, 1}, {3, -1}, {2, 1}},
        {{2, -1}, {3, 1}, {0, 1}, {1, -1}},
        {{3, -1}, {2, -1}, {1, 1}, {0, 1}},
    };
    const int m = 4 * n;
    std::vector<int8_t> h(size_t(m) * m);
    for (int bi = 0; bi < 4; ++bi)
        for (int bj = 0; bj < 4; ++bj)
            for (int i = 0; i < n; ++i)
                for (int j = 0; j < n; ++j)
                    h[size_t(bi * n + i) * m + (bj * n + j)] =
                        int8_t(layout[bi][bj][1] * entry(layout[bi][bj][0], i, j));
    return h;
}

HadamardOrder hadamard_factor_order(int64_t n) {
    HadamardOrder o;
    o.n = n;
    if (n <= 0) return o;
    const int t = std::countr_zero(uint64_t(n));
    const int64_t odd = n >> t;
    if (odd == 1) {
        o.base = 1;
        o.log2_pow2 = t;
        o.pow2 = n;
        return o;
    }
    if (t < 2) return o;
    for (int m : hadamard_base_orders)
        if (m == 4 * odd) {
            o.base = m;
            o.log2_pow2 = t - 2;
            o.pow2 = int64_t(1) << (t - 2);
        }
    return o;
}

bool hadamard_order_supported(int64_t n) { return hadamard_factor_order(n).supported(); }

int64_t hadamard_largest_block_dividing(int64_t n) {
    if (n <= 0) return 1;
    int64_t best = int64_t(1) << std::countr_zero(uint64_t(n));
    for (int m : hadamard_base_orders) {
        if (n % m) continue;
        int64_t rest = n / m;
        best = std::max(best, int64_t(m) << std::countr_zero(uint64_t(rest)));
    }
    return best;
}

int64_t hadamard_next_supported_order(int64_t n) {
    int64_t v = std::max<int64_t>(n, 1);
    while (!hadamard_order_supported(v)) ++v;  // ends at the next power of two at the latest
    return v;
}

std::string hadamard_describe_size(int64_t n) {
    HadamardOrder o = hadamard_factor_order(n);
    if (o.supported()) {
        if (o.base == 1) return fmt::format("2^{}", o.log2_pow2);
        return o.pow2 == 1 ? fmt::format("{}", o.base) : fmt::format("{}·{}", o.base, o.pow2);
    }
    if (n <= 0) return fmt::format("{}", n);
    const int t = std::countr_zero(uint64_t(n));
    const int64_t odd = n >> t;
    return t == 0 ? fmt::format("{}", odd) : fmt::format("{}·{}", odd, int64_t(1) << t);
}

std::string hadamard_size_advice(int64_t n) {
    if (n <= 0) return fmt::format("hadamard: size {} is not a valid transform size", n);
    const std::string desc = hadamard_describe_size(n);
    const std::string named = desc == fmt::format("{}", n) ? desc : fmt::format("{} = {}", n, desc);
    if (hadamard_order_supported(n)) return fmt::format("hadamard: size {} is supported", named);
    const int64_t block = hadamard_largest_block_dividing(n);
    const int64_t pad = hadamard_next_supported_order(n);
    const std::string pad_text = fmt::format("pad to {} = {}", pad, hadamard_describe_size(pad));
    if (block >= 2)
        return fmt::format("hadamard: size {} has no Hadamard order lowbit supports; use a block-diagonal "
                           "transform (--block {}) or {}",
                           named, block, pad_text);
    return fmt::format("hadamard: size {} has no Hadamard order lowbit supports and no block size > 1 divides it; {}",
                       named, pad_text);
}

std::span<const int8_t> hadamard_base_matrix(int m) {
    const BaseTable* t = find_base_table(m);
    if (!t) return {};
    return {t->matrix.data(), t->matrix.size()};
}

std::string hadamard_base_construction(int m) {
    const BaseTable* t = find_base_table(m);
    return t ? t->construction : std::string();
}

}  // namespace lowbit
