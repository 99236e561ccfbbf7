// Standalone C++ checks of the ProvRC kernels (run under ASan/UBSan by `make cpp-test`).
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "dslog/provrc.hpp"

namespace {
int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

dslog::RelationView view(std::vector<std::vector<int64_t>>& cols, int l) {
  dslog::RelationView v;
  v.l = l;
  v.m = static_cast<int>(cols.size()) - l;
  v.n = static_cast<int64_t>(cols[0].size());
  for (auto& c : cols) v.cols.push_back(c.data());
  return v;
}

void roundtrip(std::vector<std::vector<int64_t>> cols, int l, int64_t max_rows) {
  auto v = view(cols, l);
  auto res = dslog::compress(v, dslog::CompressOptions{});
  auto back = dslog::decompress(res.table);
  CHECK(back.n == res.sorted.n);
  CHECK(back.materialize() == res.sorted.materialize());
  CHECK(dslog::count_pairs(res.table) == res.sorted.n);
  if (max_rows >= 0) CHECK(res.table.rows <= max_rows);
}
}  // namespace

int main() {
  const int64_t n = 50, m = 7;
  {  // element-wise 2-D: one row
    std::vector<std::vector<int64_t>> c(4);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        c[0].push_back(i); c[1].push_back(j); c[2].push_back(i); c[3].push_back(j);
      }
    roundtrip(c, 2, 1);
  }
  {  // flipud + fliplr: mirrored, one row
    std::vector<std::vector<int64_t>> c(4);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        c[0].push_back(i); c[1].push_back(j); c[2].push_back(n - 1 - i); c[3].push_back(m - 1 - j);
      }
    roundtrip(c, 2, 1);
  }
  {  // repeat(x, 3, axis=1): strided, one row
    std::vector<std::vector<int64_t>> c(4);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < 3 * m; ++j) {
        c[0].push_back(i); c[1].push_back(j); c[2].push_back(i); c[3].push_back(j / 3);
      }
    roundtrip(c, 2, 1);
  }
  {  // random relation, unsorted with duplicates
    std::mt19937_64 rng(7);
    std::vector<std::vector<int64_t>> c(3);
    for (int t = 0; t < 2000; ++t) {
      c[0].push_back(rng() % 20); c[1].push_back(rng() % 30); c[2].push_back(rng() % 25);
    }
    roundtrip(c, 1, -1);
  }
  {  // solve_f agrees with brute force
    std::mt19937_64 rng(11);
    for (int t = 0; t < 2000; ++t) {
      int64_t q = 1 + rng() % 4, r = rng() % q, mult = static_cast<int64_t>(rng() % 7) - 3;
      if (mult == 0) mult = 2;
      int64_t u = static_cast<int64_t>(rng() % 40) - 20, v = u + static_cast<int64_t>(rng() % 10);
      int64_t lo = rng() % 20, hi = lo + rng() % 20;
      int64_t blo = -1, bhi = -2;
      bool ok = dslog::solve_f(q, r, mult, u, v, lo, hi, &blo, &bhi);
      for (int64_t b = lo; b <= hi; ++b) {
        int64_t f = dslog::apply_f(b, q, r, mult);
        bool in = f >= u && f <= v;
        CHECK(in == (ok && b >= blo && b <= bhi));
      }
    }
  }
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("test_provrc: all checks passed\n");
  return 0;
}
