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
// The run-consuming fast paths must give the table of the plain cascade.
void same_as_reference(std::vector<std::vector<int64_t>> cols, int l) {
  auto v = view(cols, l);
  dslog::CompressOptions fast, ref;
  ref.fast_paths = false;
  auto a = dslog::compress(v, fast).table;
  auto b = dslog::compress(v, ref).table;
  CHECK(a.rows == b.rows);
  CHECK(a.out_lo == b.out_lo && a.out_hi == b.out_hi && a.in_ref == b.in_ref);
  CHECK(a.in_q == b.in_q && a.in_r == b.in_r && a.in_mult == b.in_mult);
  CHECK(a.in_lo == b.in_lo && a.in_hi == b.in_hi);
}
}  // namespace

int main() {
  {  // element-wise and sum over axis 0 with holes and strays (both fast paths)
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<std::vector<int64_t>> ew(4), red(3);
      for (int64_t i = 0; i < 30; ++i)
        for (int64_t j = 0; j < 40; ++j) {
          if (rng() % 50 == 0) continue;
          const int64_t stray = rng() % 97 == 0 ? 1 : 0;
          ew[0].push_back(i); ew[1].push_back(j); ew[2].push_back(i); ew[3].push_back(39 - j + stray);
          red[0].push_back(j); red[1].push_back(i); red[2].push_back(j + stray);
        }
      same_as_reference(ew, 2);
      same_as_reference(red, 1);
    }
  }
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
