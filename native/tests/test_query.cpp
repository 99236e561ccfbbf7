// Standalone C++ checks of the query kernels (run under ASan/UBSan by `make cpp-test`):
// normalisation against brute-force painting, and hops against the decompressed relation.
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "dslog/provrc.hpp"
#include "dslog/query.hpp"

namespace {
int failures = 0;
#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                    \
    }                                                                                \
  } while (0)

using Cell = std::vector<int64_t>;

std::set<Cell> cells_of(const dslog::Boxes& b) {
  std::set<Cell> out;
  for (int64_t k = 0; k < b.k; ++k) {
    Cell c(b.lo.begin() + k * b.d, b.lo.begin() + (k + 1) * b.d);
    if (b.d == 0) {
      out.insert(c);
      continue;
    }
    while (true) {
      out.insert(c);
      int a = b.d - 1;
      while (a >= 0 && c[a] == b.hi[k * b.d + a]) {
        c[a] = b.lo[k * b.d + a];
        --a;
      }
      if (a < 0) break;
      ++c[a];
    }
  }
  return out;
}

void check_normalize(std::mt19937_64& rng) {
  const int d = 1 + static_cast<int>(rng() % 3);
  dslog::Boxes b;
  b.d = d;
  b.k = static_cast<int64_t>(rng() % 12);
  for (int64_t k = 0; k < b.k; ++k)
    for (int a = 0; a < d; ++a) {
      const int64_t lo = static_cast<int64_t>(rng() % 6);
      b.lo.push_back(lo);
      b.hi.push_back(lo + static_cast<int64_t>(rng() % 4));
    }
  const auto n = dslog::normalize(b);
  const auto want = cells_of(b);
  CHECK(cells_of(n) == want);
  CHECK(dslog::count_cells(n) == static_cast<int64_t>(want.size()));  // disjoint
}

void check_hop(std::mt19937_64& rng) {
  // out[i, j] <- in[i + u, j + v] for small offsets, plus a diagonal in[i, i] and noise.
  std::vector<std::vector<int64_t>> cols(4);
  const int64_t n = 6;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t u = 0; u < 2; ++u) {
        if (i + u >= n) continue;
        cols[0].push_back(i), cols[1].push_back(j), cols[2].push_back(i + u), cols[3].push_back(j);
      }
      cols[0].push_back(i), cols[1].push_back(j), cols[2].push_back(j), cols[3].push_back(j);
    }
  for (int e = 0; e < 5; ++e)
    for (auto& c : cols) c.push_back(static_cast<int64_t>(rng() % n));
  dslog::RelationView v;
  v.l = 2;
  v.m = 2;
  v.n = static_cast<int64_t>(cols[0].size());
  for (auto& c : cols) v.cols.push_back(c.data());
  auto res = dslog::compress(v, dslog::CompressOptions{});
  dslog::PreparedTable table(res.table);
  for (int fwd = 0; fwd < 2; ++fwd) {
    dslog::Boxes q;
    q.d = 2;
    q.k = 2;
    for (int k = 0; k < 2; ++k)
      for (int a = 0; a < 2; ++a) {
        const int64_t lo = static_cast<int64_t>(rng() % n);
        q.lo.push_back(lo);
        q.hi.push_back(std::min<int64_t>(n - 1, lo + static_cast<int64_t>(rng() % 3)));
      }
    const auto qcells = cells_of(q);
    std::set<Cell> want;
    for (int64_t p = 0; p < v.n; ++p) {
      Cell out = {cols[0][p], cols[1][p]}, in = {cols[2][p], cols[3][p]};
      if (qcells.count(fwd ? in : out)) want.insert(fwd ? out : in);
    }
    const auto got = table.hop(q, fwd != 0);
    CHECK(cells_of(got) == want);
    CHECK(dslog::count_cells(got) == static_cast<int64_t>(want.size()));
  }
}
}  // namespace

int main() {
  std::mt19937_64 rng(7);
  for (int t = 0; t < 500; ++t) check_normalize(rng);
  for (int t = 0; t < 200; ++t) check_hop(rng);
  if (failures) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::puts("query: all checks passed");
  return 0;
}
