// Unit tests of the annotation arena (no Python): set semantics of joins, picks and in-place
// accumulation, and the ownership rule that keeps shared sets immutable.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dslog/annotations.hpp"

using dslog::Arena;
using dslog::Handle;
using dslog::Mode;

static int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "%s:%d: CHECK(%s)\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

static std::vector<uint64_t> set_of(Arena& a, Handle h, bool considered = false) {
  std::vector<uint64_t> scratch;
  Handle s = considered ? a.considered(h) : a.contrib(h);
  auto [p, n] = a.cells(s, scratch);
  return std::vector<uint64_t>(p, p + n);
}

static void test_join_dedupes_and_stays_small() {
  Arena a(1, Mode::kContributing);
  a.add_input(100);
  Handle x = a.cell(3), y = a.cell(7);
  Handle u = a.join(x, y);
  CHECK((set_of(a, u) == std::vector<uint64_t>{3, 7}));
  CHECK(a.join(u, 0) == u);
  CHECK(a.join(x, x) == x);
  // Repeated self-unions never blow up: 40 doublings keep two cells.
  Handle z = u;
  for (int i = 0; i < 40; ++i) z = a.join(z, a.join(z, x));
  CHECK((set_of(a, z) == std::vector<uint64_t>{3, 7}));
  // Large unions materialise as sorted lists.
  Handle big = 0;
  for (uint64_t i = 0; i < 50; ++i) big = a.join(big, a.cell(99 - i));
  auto s = set_of(a, big);
  CHECK(s.size() == 50 && s.front() == 50 && s.back() == 99);
}

static void test_accumulator_in_place_and_ownership() {
  Arena a(2, Mode::kContributing);
  a.add_input(1000);
  Handle first = a.cell(0);
  a.begin_call();
  Handle acc = first;  // a no-identity reduction starts from a copy of element 0
  for (uint64_t i = 1; i < 1000; ++i) a.acc_join(acc, a.cell(i), 1000 - i);
  CHECK(set_of(a, acc).size() == 1000);
  CHECK((set_of(a, first) == std::vector<uint64_t>{0}));  // element 0 untouched
  size_t lists = a.n_lists();
  // A new call must not append in place to the previous call's accumulator.
  a.begin_call();
  Handle acc2 = acc;
  a.acc_join(acc2, a.cell(5), 0);
  CHECK(set_of(a, acc).size() == 1000);
  CHECK(a.n_lists() == lists + 1);
  // Out-of-order appends are normalised (sorted, unique) on read.
  a.begin_call();
  Handle acc3 = 0;
  for (uint64_t i = 0; i < 40; ++i) a.acc_join(acc3, a.cell((i * 7) % 20), 40);
  auto s = set_of(a, acc3);
  CHECK(s.size() == 20 && s.front() == 0 && s.back() == 19);
}

static void test_pick_modes() {
  Arena c(3, Mode::kContributing);
  c.add_input(10);
  CHECK(c.pick(c.cell(1), c.cell(2)) == c.cell(1));
  Arena k(4, Mode::kConsidered);
  k.add_input(10);
  Handle p = k.pick(k.cell(1), k.cell(2));
  CHECK((set_of(k, p) == std::vector<uint64_t>{1}));
  CHECK((set_of(k, p, true) == std::vector<uint64_t>{1, 2}));
  Handle s = k.join(p, k.cell(5));
  CHECK((set_of(k, s) == std::vector<uint64_t>{1, 5}));
  CHECK((set_of(k, s, true) == std::vector<uint64_t>{1, 2, 5}));
  k.begin_call();
  Handle acc = k.cell(0);
  for (uint64_t i = 1; i < 10; ++i) k.acc_pick(acc, k.cell(i), i == 4, 10 - i);
  CHECK((set_of(k, acc) == std::vector<uint64_t>{4}));
  CHECK(set_of(k, acc, true).size() == 10);
}

static void test_inputs_and_handles() {
  Arena a(5, Mode::kContributing);
  uint64_t b0 = a.add_input(4), b1 = a.add_input(6);
  CHECK(b0 == 0 && b1 == 4);
  CHECK(a.input_of(3) == 0 && a.input_of(4) == 1 && a.input_of(9) == 1);
  CHECK(a.valid(a.cell(2)) && !a.valid(dslog::hnd::make(6, dslog::hnd::kCell, 1, 2)));
}

static void test_inline_pairs_and_progressions() {
  Arena a(6, Mode::kContributing);
  a.add_input(100000);
  // Two cells: inline (no table entry) while the distance table has room, then a join entry.
  size_t joins = a.n_joins();
  Handle p = a.join(a.cell(9), a.cell(4));
  CHECK((set_of(a, p) == std::vector<uint64_t>{4, 9}));
  CHECK(a.n_joins() == joins);
  for (uint64_t d = 1; d <= 300; ++d) {
    Handle q = a.join(a.cell(1000), a.cell(1000 + d));
    CHECK((set_of(a, q) == std::vector<uint64_t>{1000, 1000 + d}));
  }
  CHECK(a.n_joins() > joins);  // more than 256 distances: the rest became join entries
  // Column-wise accumulation (sum over axis 0): one progression per column, in place.
  const uint64_t rows = 50, colsn = 40;
  a.begin_call();
  std::vector<Handle> acc(colsn);
  for (uint64_t j = 0; j < colsn; ++j) acc[j] = a.cell(j);
  size_t progs = a.n_progs();
  for (uint64_t i = 1; i < rows; ++i)
    for (uint64_t j = 0; j < colsn; ++j) a.acc_join(acc[j], a.cell(i * colsn + j), 0);
  CHECK(a.n_progs() - progs <= colsn);
  for (uint64_t j = 0; j < colsn; ++j) {
    auto s = set_of(a, acc[j]);
    CHECK(s.size() == rows && s.front() == j && s.back() == (rows - 1) * colsn + j);
    std::vector<uint64_t> scratch;
    auto q = a.seq(acc[j], scratch);
    CHECK(q.data == nullptr && q.count == rows && q.stride == colsn);
  }
  // A shared copy stays as it is while the accumulator keeps growing (and leaves the
  // progression when a cell does not fit it).
  Handle frozen = a.join(acc[0], 0);
  a.acc_join(acc[0], a.cell(rows * colsn), 0);
  a.acc_join(acc[0], a.cell(3), 0);
  CHECK(set_of(a, frozen).size() == rows);
  auto s0 = set_of(a, acc[0]);
  CHECK(s0.size() == rows + 2 && s0[1] == 3);
  // A later call does not extend this call's progression in place.
  Handle old = acc[1];
  a.begin_call();
  Handle next = old;
  a.acc_join(next, a.cell(rows * colsn + 1), 0);
  CHECK(set_of(a, old).size() == rows && set_of(a, next).size() == rows + 1);
}

static void test_groups() {
  Arena a(7, Mode::kContributing);
  a.add_input(1000);
  a.begin_call();
  // 10 columns of a (rows of 10) reduction, reversed columns: member j = {90 - j + 10k}.
  Handle first = a.new_group(9, -1, 10, 3, 10);
  CHECK(first != 0);
  CHECK(a.owned_group(first) != nullptr);
  for (uint64_t j = 0; j < 10; ++j) {
    auto s = set_of(a, first + j);
    CHECK((s == std::vector<uint64_t>{9 - j, 19 - j, 29 - j}));
  }
  a.owned_group(first)->count = 4;  // a whole row extended the group
  CHECK(set_of(a, first + 2).size() == 4);
  Handle frozen = a.join(first + 2, 0);  // shared: a copy that no longer grows
  Handle acc = first + 2;
  a.acc_join(acc, a.cell(47), 0);  // one member leaves the group and grows on its own
  CHECK((set_of(a, acc) == std::vector<uint64_t>{7, 17, 27, 37, 47}));
  CHECK(set_of(a, frozen).size() == 4 && set_of(a, first + 3).size() == 4);
  a.begin_call();
  CHECK(a.owned_group(first) == nullptr);  // a later call never extends it in place
}

// x - x.mean() and its reductions: a union with a big shared set is a reference, not a copy.
static void test_big_shared_sets_by_reference() {
  const uint64_t n = 5000;
  Arena a(8, Mode::kContributing);
  a.add_input(n);
  // M: the whole array, accumulated in place (a reduction of one call).
  a.begin_call();
  Handle m = a.cell(0);
  for (uint64_t i = 1; i < n; ++i) a.acc_join(m, a.cell(i), n - i);
  a.begin_call();
  const size_t before = a.bytes_used();
  std::vector<Handle> dev(n);
  for (uint64_t i = 0; i < n; ++i) dev[i] = a.join(a.cell(i), m);  // x - x.mean()
  CHECK(a.bytes_used() - before <= 32 * n);                        // O(1) per cell
  CHECK(set_of(a, dev[17]).size() == n);
  // (x - m) - m is the same set, without a new node.
  CHECK(a.join(dev[3], m) == dev[3]);
  // Sum of squared deviations: one accumulator holding the cells and one reference to M.
  a.begin_call();
  const size_t before_sum = a.bytes_used();
  Handle acc = dev[0];
  for (uint64_t i = 1; i < n; ++i) a.acc_join(acc, dev[i], n - i);
  CHECK(a.bytes_used() - before_sum <= 8 * n + 1024);  // the cells, not n copies of M
  auto s = set_of(a, acc);
  CHECK(s.size() == n && s.front() == 0 && s.back() == n - 1);
  // A second level: z = (x - m) / std(x) with std's accumulator itself holding a reference.
  a.begin_call();
  std::vector<Handle> z(n);
  for (uint64_t i = 0; i < n; ++i) z[i] = a.join(dev[i], acc);
  Handle acc2 = z[0];
  for (uint64_t i = 1; i < n; ++i) a.acc_join(acc2, z[i], n - i);
  auto s2 = set_of(a, acc2);
  CHECK(s2.size() == n && s2.front() == 0 && s2.back() == n - 1);
  // A chain of lazy unions (cumsum) flattens exactly, each shared node once.
  Handle run = a.cell(0);
  std::vector<Handle> prefix;
  for (uint64_t i = 1; i < 200; ++i) {
    run = a.join(run, a.cell(i * 7 % n));
    prefix.push_back(run);
  }
  auto s3 = set_of(a, run);
  std::vector<uint64_t> want;
  for (uint64_t i = 0; i < 200; ++i) want.push_back(i * 7 % n);
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  CHECK(s3 == want);
  a.begin_call();
  Handle total = prefix[0];
  for (size_t i = 1; i < prefix.size(); ++i) a.acc_join(total, prefix[i], 0);
  CHECK(set_of(a, total) == want);
}

// Handles from array memory may be any bytes: check() accepts exactly what the arena issued
// (and 0), and every dereference of anything else throws ForgedHandle, never reads outside a
// table (run under ASan/UBSan by `make cpp-test`).
static void test_forged_handles() {
  namespace hnd = dslog::hnd;
  Arena a(5, Mode::kConsidered);
  a.add_input(10);
  a.add_input(10);
  a.begin_call();
  const Handle list = a.join(a.join(a.cell(0), a.cell(1)), a.join(a.cell(2), a.cell(3)));
  Handle big = 0;
  for (uint64_t i = 0; i < 20; ++i) big = a.join(big, a.cell(i));
  const Handle pair = a.pick(a.cell(4), a.cell(5));
  const Handle c2 = a.join_cells(6, 16);
  Handle prog = a.cell(0);
  a.acc_join(prog, a.cell(5), 0);
  a.acc_join(prog, a.cell(10), 0);
  a.acc_join(prog, a.cell(15), 0);
  const Handle group = a.new_group(0, 1, 2, 3, 2);
  const Handle real[] = {0, a.cell(0), a.cell(19), list, big, pair, c2, prog, group, group + 1};
  for (Handle h : real) CHECK(a.check(h));
  CHECK(hnd::kind(pair) == hnd::kPair && hnd::kind(c2) == hnd::kCell2);
  CHECK(hnd::kind(prog) == hnd::kProg && hnd::kind(group) == hnd::kGroup);

  auto forged = [](uint32_t kind, uint32_t est, uint64_t payload, uint32_t epoch = 5) {
    return (uint64_t(epoch) << hnd::kEpochShift) | (uint64_t(kind) << hnd::kKindShift) |
           (uint64_t(est) << hnd::kEstShift) | payload;
  };
  const Handle bad[] = {
      forged(hnd::kList, 1, 1000),        forged(hnd::kList, 255, hnd::kPayloadMask),
      forged(hnd::kCell, 1, 20),          forged(hnd::kCell, 1, hnd::kPayloadMask),
      forged(hnd::kJoin, 2, 1000),        forged(hnd::kPair, 255, 1000),
      forged(hnd::kCell2, 200, 0),        forged(hnd::kCell2, hnd::field8(c2), 10),
      forged(hnd::kProg, 255, 1000),      forged(hnd::kGroup, 255, uint64_t(9) << 20),
      group + 2,                          forged(7, 1, 0),
      forged(7, 255, 3),                  forged(hnd::kCell, 1, 0, 4),
      forged(hnd::kList, 1, 0, 0),        ~uint64_t(0),
  };
  std::vector<uint64_t> scratch;
  for (Handle h : bad) {
    CHECK(!a.check(h));
    // Every dereferencing entry point throws (or, for a cell id, leaves it to extraction,
    // which checks ids against the inputs: cell handles are not dereferenced).
    int thrown = 0, calls = 0;
    auto expect = [&](auto&& f) {
      ++calls;
      try {
        f();
      } catch (const dslog::ForgedHandle& e) {
        ++thrown;
        CHECK(e.handle != 0);
      }
    };
    expect([&] { a.cells(a.contrib(h), scratch); });
    expect([&] { a.seq(a.considered(h), scratch); });
    expect([&] {
      Arena::Builder b(a);
      b.add(h);
      b.finish();
    });
    expect([&] {
      Handle acc = big;
      a.acc_join(acc, h, 4);
      a.cells(acc, scratch);
    });
    expect([&] { a.cells(a.join(big, h), scratch); });  // stored by reference, then read
    // Cell ids (kCell, and kCell2 with an existing distance) are numbers, not references.
    const bool cell_ids = hnd::kind(h) == hnd::kCell ||
                          (hnd::kind(h) == hnd::kCell2 && hnd::field8(h) == hnd::field8(c2));
    if (!(cell_ids ? thrown == 0 : thrown == calls))
      std::fprintf(stderr, "handle %llx: %d of %d threw\n", (unsigned long long)h, thrown, calls);
    CHECK(cell_ids ? thrown == 0 : thrown == calls);
  }
  // Fast-path probes answer "not mine" instead of reading out of range.
  CHECK(!a.prog_extend(forged(hnd::kProg, 255, 1000), a.cell(1)));
  CHECK(a.owned_prog(forged(hnd::kProg, 255, 1000)) == nullptr);
  CHECK(a.owned_group(forged(hnd::kGroup, 255, uint64_t(9) << 20)) == nullptr);
  CHECK(a.owned_group(group + 2) == nullptr);
}

int main() {
  test_forged_handles();
  test_big_shared_sets_by_reference();
  test_groups();
  test_inline_pairs_and_progressions();
  test_join_dedupes_and_stays_small();
  test_accumulator_in_place_and_ownership();
  test_pick_modes();
  test_inputs_and_handles();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::puts("test_annotations: all checks passed");
  return 0;
}
