// ProvRC: lossless compression of cell-level lineage relations.
//
// A lineage relation R(b_1..b_l, a_1..a_m) lists pairs (output cell b, input cell a).
// A ProvRC table is a list of rows; a row stands for every (b, a) such that
//   * each output attribute b_j lies in the absolute interval [out_lo, out_hi], and
//   * each input attribute a_k satisfies one constraint:
//       ref == -1 (absolute):  a_k in [lo, hi]
//       ref == j  (relative):  delta = mult * floor((b_j + r) / q) - a_k  in [lo, hi]
// Sign convention: delta = F(b_j) - a_k, so the identity case (mult = q = 1, r = 0) is the
// paper's  delta = b_j - a_k.  mult = -1 encodes mirrored lineage (a = C - b: flip, rot90),
// q = k encodes strided lineage (a = floor(b / k): repeat, up-sampling), mult = k pooling.
// Rows are disjoint; decompression yields exactly the deduplicated input relation.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace dslog {

// Number of fields per input attribute in the table (ref, q, r, mult, lo, hi).
constexpr int kInputFields = 6;

struct ProvRCTable {
  int l = 0;          // output rank
  int m = 0;          // input rank
  int64_t rows = 0;
  // out_lo[j * rows + i], out_hi[...]: absolute interval of output attribute j in row i.
  std::vector<int64_t> out_lo, out_hi;
  // per input attribute k (index k * rows + i)
  std::vector<int64_t> in_ref, in_q, in_r, in_mult, in_lo, in_hi;
};

// A relation given as l + m column pointers of n int64 values each (column-major).
struct RelationView {
  int l = 0;
  int m = 0;
  int64_t n = 0;
  std::vector<const int64_t*> cols;  // size l + m: outputs first, then inputs
};

// Allocator that leaves ints uninitialised on resize: the big column buffers below are always
// written in full right after they are sized, so zero-filling them first is wasted bandwidth.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using ColumnBuffer = std::vector<int64_t, DefaultInitAllocator<int64_t>>;

// Sorted, duplicate-free relation in column-major form. Column c is at ptrs[c]; the values
// are owned by `data` unless the input was already sorted and unique, in which case `ptrs`
// point into the caller's columns (no copy) and `data` is empty.
struct Relation {
  int l = 0;
  int m = 0;
  int64_t n = 0;
  ColumnBuffer data;
  std::vector<const int64_t*> ptrs;
  const int64_t* col(int c) const { return ptrs[c]; }
  bool owns() const { return !data.empty() || n == 0; }
  // Copy into one owned (l + m) * n block.
  std::vector<int64_t> materialize() const;
  // Copy into `dst`, which holds (l + m) * n values (column c at dst + c * n).
  void copy_to(int64_t* dst) const;
};

struct CompressOptions {
  bool relative = true;     // relative (identity) candidates, Algorithm 1 step 2
  bool mirrored = true;     // mirrored candidates (mult = -1)
  bool progression = true;  // strided/arithmetic-progression merging (q > 1, |mult| > 1)
  // Give up on ProvRC (return rows = -1 sentinel via aborted flag) when after the first
  // output merge the table still has more than abort_ratio * n rows; 0 disables.
  double abort_ratio = 0.0;
  // Worker threads for the first (streaming) phase; chunks of the sorted relation run in
  // parallel and are stitched at the seams, so a produced table equals the single-thread
  // one. With abort_ratio set, each chunk gives up against its own share of the limit.
  int threads = 1;
  // With abort_ratio set and at least kSampleMinRows pairs: before the full pass, run the
  // streaming phase on this many evenly spaced windows of the sorted relation and give up at
  // once when every window keeps more than 1.2 * abort_ratio of its pairs as rows (a relation
  // that is hopeless everywhere, e.g. random binning). 0 disables the probe. Like the
  // per-chunk limits above, this only decides when to give up; a table that is produced is
  // the same with or without it.
  int sample_windows = 0;
  // Run-consuming fast paths in the streaming phase (stretches of single-pair records that
  // extend the current run are consumed straight from the sorted columns instead of being
  // turned into records one by one). The table is identical either way; `false` keeps the
  // plain record-by-record cascade as a reference for tests.
  bool fast_paths = true;
};

constexpr int64_t kSampleMinRows = int64_t{1} << 18;
constexpr int64_t kSampleWindow = 4096;

struct CompressResult {
  ProvRCTable table;
  Relation sorted;       // the deduplicated, lexicographically sorted relation
  bool aborted = false;  // ProvRC did not pay (see CompressOptions::abort_ratio)
};

// Sort lexicographically by (b_1..b_l, a_1..a_m) and remove duplicates.
Relation sort_unique(const RelationView& rel);

// Pairs (out[i], in[i]) of a rank-1 <- rank-1 relation already ordered by out (each output
// row's inputs in any order), sorted in place: each run of one out value by in, repeats
// dropped, the pairs kept moved to the front. Returns how many are kept, or -1 (nothing
// changed) when out decreases somewhere. No buffer is allocated: a relation of 10^8 pairs
// handed over this way is not copied to be sorted.
int64_t sort_runs_unique(int64_t* out, int64_t* in, int64_t n);

// out[0 .. n) = values[j] repeated counts[j] times, j = 0 .. g - 1, in one pass (NumPy's
// repeat needs a new array; at 10^8 pairs its pages alone cost seconds on a virtual machine).
// Returns 0, or -1 when a count is not positive or they do not add up to n (out then partly
// written).
int64_t repeat_into(int64_t* out, int64_t n, const int64_t* values, const int64_t* counts,
                    int64_t g);

// Columns holding one value in every pair (outputs first, then inputs): for each column,
// whether it is constant; stops reading a column at its first differing value.
std::vector<bool> constant_columns(const RelationView& rel);

// ProvRC (thesis Algorithm 1 + mirrored candidates + progression merging).
CompressResult compress(const RelationView& rel, const CompressOptions& opts);

// Expand a table back into its relation (sorted, duplicate-free).
Relation decompress(const ProvRCTable& table);

// Number of (b, a) pairs a table stands for, without expanding it.
int64_t count_pairs(const ProvRCTable& table);

// ---- merge passes on records (for the factorised extraction, extract.cpp) --------------------
// A record stands for a box-shaped set of pairs: W = 2l + 7m int64 fields
//   [b_0.lo, b_0.hi, ..., b_{l-1}.lo, b_{l-1}.hi, per input k: ref, q, r, mult, lo, hi, live]
// with the row semantics of ProvRCTable and `live` the bitmask of the representations of a_k
// still valid for the whole record (bit 0 absolute, bit 1 + 2j relative to b_j, bit 2 + 2j
// mirrored to b_j; an absolute record of single-valued outputs may keep them all).
constexpr int kRecordInput = 7;
inline int record_width(int l, int m) { return 2 * l + kRecordInput * m; }
// The live mask of an absolute attribute: every candidate (with relative and mirrored ones).
uint64_t record_live_all(int l);
// The live mask of an attribute stored relative to b_j (delta = b_j - a).
inline uint64_t record_live_relative(int j) { return uint64_t{1} << (1 + 2 * j); }

// Merge records that stand for pairwise disjoint sets of pairs into a table of the same pairs:
// range-encode along every input (absolute and relative intervals), merge along every output
// (relative/mirrored folding), again along the inputs, then (with `progression`) strided rows.
ProvRCTable merge_records(int l, int m, std::vector<int64_t> recs, bool progression);

// Append the rows of a table as records (inverse of the table layout).
void append_table_records(const ProvRCTable& t, std::vector<int64_t>& out);

// floor(x / y) for y > 0 and any sign of x.
inline int64_t floor_div(int64_t x, int64_t y) {
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return q;
}
inline int64_t ceil_div(int64_t x, int64_t y) { return -floor_div(-x, y); }

// F(b) = mult * floor((b + r) / q)
inline int64_t apply_f(int64_t b, int64_t q, int64_t r, int64_t mult) {
  return mult * floor_div(b + r, q);
}

// Solve {b in [lo, hi] : F(b) in [u, v]}; returns false when empty. F is monotone in b.
bool solve_f(int64_t q, int64_t r, int64_t mult, int64_t u, int64_t v, int64_t lo, int64_t hi,
             int64_t* out_lo, int64_t* out_hi);

}  // namespace dslog
