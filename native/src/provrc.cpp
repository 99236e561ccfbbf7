// ProvRC compression and decompression. See dslog/provrc.hpp for the table semantics.
//
// Working representation: records of W = 2l + 7m int64 fields (array-of-structs, cache
// friendly for the linear merge passes):
//   [b_0.lo, b_0.hi, ..., b_{l-1}.lo, b_{l-1}.hi,
//    per input k: ref, q, r, mult, lo, hi, live]
// `live` is the bitmask of representations of a_k that are still valid for the whole record
// (Algorithm 1's "non-empty subset of a_i, a_i b_1, .., a_i b_l that are equal"):
//   bit 0            absolute
//   bit 1 + 2j       relative to b_j,  delta = b_j - a
//   bit 2 + 2j       mirrored to b_j,  delta = -b_j - a
// Invariant: if the absolute bit is live the stored (canonical) encoding is absolute;
// otherwise the stored encoding is the unique surviving relative one.
#include "dslog/provrc.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

namespace dslog {
namespace {

constexpr int kRecInput = 7;  // ref, q, r, mult, lo, hi, live
enum { F_REF = 0, F_Q = 1, F_R = 2, F_MULT = 3, F_LO = 4, F_HI = 5, F_LIVE = 6 };

struct Layout {
  int l, m, w;
  int max_rel;  // relative candidates exist for b_0 .. b_{max_rel-1}
  explicit Layout(int l_, int m_) : l(l_), m(m_), w(2 * l_ + kRecInput * m_) {
    max_rel = std::min(l_, 31);
  }
  int in(int k) const { return 2 * l + kRecInput * k; }
};

// ---------------------------------------------------------------- sorting / dedupe

bool lex_less_cols(const RelationView& rel, int64_t i, int64_t j) {
  for (int c = 0; c < rel.l + rel.m; ++c) {
    int64_t x = rel.cols[c][i], y = rel.cols[c][j];
    if (x != y) return x < y;
  }
  return false;
}

// Stable LSD radix sort of keys on bits [first_bit, first_bit + bits).
void radix_sort_u64(std::vector<uint64_t>& keys, int bits, int first_bit = 0) {
  if (bits <= 0 || keys.size() < 2) return;
  std::vector<uint64_t> tmp(keys.size());
  constexpr int kDigit = 11;
  constexpr size_t kBuckets = size_t{1} << kDigit;
  std::vector<size_t> count(kBuckets);
  for (int shift = first_bit; shift < first_bit + bits; shift += kDigit) {
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t k : keys) ++count[(k >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (auto& c : count) {
      size_t t = c;
      c = sum;
      sum += t;
    }
    for (uint64_t k : keys) tmp[count[(k >> shift) & (kBuckets - 1)]++] = k;
    keys.swap(tmp);
  }
}

// Drop rows equal to their predecessor from the sorted column-major block `out` (n rows),
// re-laying the columns out for the new row count.
void dedupe_sorted(Relation& out) {
  const int ncols = out.l + out.m;
  const int64_t n = out.n;
  if (n < 2) return;
  int64_t* base = out.data.data();
  std::vector<uint8_t> keep(n, 1);
  int64_t kept = 1;
  for (int64_t i = 1; i < n; ++i) {
    bool same = true;
    for (int c = 0; c < ncols && same; ++c) same = base[c * n + i] == base[c * n + i - 1];
    keep[i] = !same;
    kept += !same;
  }
  if (kept == n) return;
  // Columns only move towards the front (c * kept <= c * n, t' <= t), so in place is safe.
  for (int c = 0; c < ncols; ++c) {
    const int64_t* src = base + c * n;
    int64_t* dst = base + c * kept;
    int64_t t = 0;
    for (int64_t i = 0; i < n; ++i)
      if (keep[i]) dst[t++] = src[i];
  }
  out.n = kept;
  out.data.resize(static_cast<size_t>(ncols) * kept);
}

void set_ptrs(Relation& out) {
  out.ptrs.clear();
  for (int c = 0; c < out.l + out.m; ++c)
    out.ptrs.push_back(out.data.data() + static_cast<size_t>(c) * out.n);
}

// Rows of `rel` in the given (sorted) order, dropping duplicates when there may be any.
Relation gather_unique(const RelationView& rel, const std::vector<int64_t>& order, bool dups) {
  const int ncols = rel.l + rel.m;
  Relation out;
  out.l = rel.l;
  out.m = rel.m;
  out.n = static_cast<int64_t>(order.size());
  out.data.resize(static_cast<size_t>(ncols) * out.n);
  for (int c = 0; c < ncols; ++c) {
    int64_t* dst = out.data.data() + static_cast<size_t>(c) * out.n;
    const int64_t* src = rel.cols[c];
    for (int64_t t = 0; t < out.n; ++t) dst[t] = src[order[t]];
  }
  if (dups) dedupe_sorted(out);
  set_ptrs(out);
  return out;
}

// For every suffix of columns [c, ncols): bad[c] = 1 if some adjacent rows are out of order
// by it, dup[c] = 1 if some adjacent rows are equal on it. NC > 0 fixes the column count (the
// flags then live in registers).
template <int NC>
void suffix_order(const int64_t* const* cols, int64_t n, uint8_t* bad, uint8_t* dup) {
  uint8_t b[NC] = {0}, d[NC] = {0};
  for (int64_t i = 1; i < n; ++i) {
    int s = 0;
#pragma GCC unroll 8
    for (int c = NC - 1; c >= 0; --c) {
      const int64_t x = cols[c][i - 1], y = cols[c][i];
      const int sg = (x > y) - (x < y);
      s = sg ? sg : s;
      b[c] |= static_cast<uint8_t>(s > 0);
      d[c] |= static_cast<uint8_t>(s == 0);
    }
  }
  for (int c = 0; c < NC; ++c) {
    bad[c] = b[c];
    dup[c] = d[c];
  }
}

void suffix_order_any(const int64_t* const* cols, int64_t n, uint8_t* bad, uint8_t* dup,
                      int ncols) {
  for (int64_t i = 1; i < n; ++i) {
    int s = 0;
    for (int c = ncols - 1; c >= 0; --c) {
      const int64_t x = cols[c][i - 1], y = cols[c][i];
      const int sg = (x > y) - (x < y);
      s = sg ? sg : s;
      bad[c] |= static_cast<uint8_t>(s > 0);
      dup[c] |= static_cast<uint8_t>(s == 0);
    }
  }
}

// Relations of at least this many rows whose leading column spans fewer values than there are
// rows (output cells of lineage usually do) are sorted by bucket_sort_unique.
constexpr int64_t kBucketMinRows = int64_t{1} << 16;

// Sorts the rows of `rel` (unsorted by its leading column; sorted by the columns [c0, ncols))
// by a bucket sort on the leading column, whose values lie in [lo, hi] with hi - lo < n: one
// histogram pass, one pass writing every other column's values to their bucket's next free
// slots (stable), the leading column filled bucket by bucket, then each bucket sorted by the
// remaining columns (typically a few rows: the input cells of one output cell) unless c0 == 1
// left them sorted. Idx counts rows (32 bits when they fit: half the histogram's cache lines).
// Where the packed keys of a 10^8-pair relation took a 51-bit LSD radix sort (five scatter
// passes over the keys, ~8 s), this is one scatter pass plus short sorts in cache.
template <class Idx>
Relation bucket_sort_unique(const RelationView& rel, int64_t lo, int64_t hi, int c0, bool dups) {
  const int ncols = rel.l + rel.m;
  const int64_t n = rel.n;
  const size_t buckets = static_cast<size_t>(hi - lo) + 1;
  const int64_t* col0 = rel.cols[0];
  // start[b] = where bucket b begins; after the scatter, where it ends (= where b + 1 begins)
  std::vector<Idx> start(buckets + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[static_cast<size_t>(col0[i] - lo) + 1];
  for (size_t b = 0; b < buckets; ++b) start[b + 1] += start[b];
  Relation out;
  out.l = rel.l;
  out.m = rel.m;
  out.n = n;
  out.data.resize(static_cast<size_t>(ncols) * n);
  int64_t* data = out.data.data();
  if (ncols == 2) {
    const int64_t* src = rel.cols[1];
    int64_t* dst = data + n;
    for (int64_t i = 0; i < n; ++i) dst[start[static_cast<size_t>(col0[i] - lo)]++] = src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const size_t p = start[static_cast<size_t>(col0[i] - lo)]++;
      for (int c = 1; c < ncols; ++c) data[static_cast<size_t>(c) * n + p] = rel.cols[c][i];
    }
  }
  std::vector<int64_t> idx, tmp;
  for (size_t b = 0; b < buckets; ++b) {
    const int64_t s = b == 0 ? 0 : static_cast<int64_t>(start[b - 1]);
    const int64_t e = static_cast<int64_t>(start[b]);
    std::fill(data + s, data + e, lo + static_cast<int64_t>(b));
    if (c0 == 1 || e - s < 2) continue;  // c0 == 1: the stable scatter kept the order
    if (ncols == 2) {
      int64_t* v = data + n;
      if (e - s <= 16) {  // insertion sort: most buckets hold a few rows
        for (int64_t k = s + 1; k < e; ++k) {
          const int64_t x = v[k];
          int64_t j = k;
          for (; j > s && v[j - 1] > x; --j) v[j] = v[j - 1];
          v[j] = x;
        }
      } else {
        std::sort(v + s, v + e);
      }
      continue;
    }
    const int64_t len = e - s;
    idx.resize(static_cast<size_t>(len));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    std::sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) {
      for (int c = 1; c < ncols; ++c) {
        const int64_t* col = data + static_cast<size_t>(c) * n + s;
        if (col[x] != col[y]) return col[x] < col[y];
      }
      return false;
    });
    tmp.resize(static_cast<size_t>(len));
    for (int c = 1; c < ncols; ++c) {
      int64_t* col = data + static_cast<size_t>(c) * n + s;
      for (int64_t k = 0; k < len; ++k)
        tmp[static_cast<size_t>(k)] = col[idx[static_cast<size_t>(k)]];
      std::copy(tmp.begin(), tmp.end(), col);
    }
  }
  if (dups) dedupe_sorted(out);
  set_ptrs(out);
  return out;
}

int bits_for(uint64_t range) {
  int b = 0;
  while (b < 64 && (range >> b) != 0) ++b;
  return b;
}

}  // namespace

std::vector<bool> constant_columns(const RelationView& rel) {
  std::vector<bool> out(rel.l + rel.m, false);
  if (rel.n == 0) return out;
  for (int c = 0; c < rel.l + rel.m; ++c) {
    const int64_t* col = rel.cols[c];
    const int64_t v = col[0];
    int64_t i = 1;
    while (i < rel.n && col[i] == v) ++i;
    out[c] = i == rel.n;
  }
  return out;
}

int64_t repeat_into(int64_t* out, int64_t n, const int64_t* values, const int64_t* counts,
                    int64_t g) {
  int64_t at = 0;
  for (int64_t j = 0; j < g; ++j) {
    const int64_t c = counts[j];
    if (c <= 0 || c > n - at) return -1;
    std::fill(out + at, out + at + c, values[j]);
    at += c;
  }
  return at == n ? 0 : -1;
}

int64_t sort_runs_unique(int64_t* out, int64_t* in, int64_t n) {
  for (int64_t i = 1; i < n; ++i) {
    if (out[i] < out[i - 1]) return -1;
  }
  int64_t kept = 0;
  for (int64_t a = 0; a < n;) {
    int64_t b = a + 1;
    while (b < n && out[b] == out[a]) ++b;
    int64_t* run = in + a;
    const int64_t len = b - a;
    if (len <= 16) {
      for (int64_t i = 1; i < len; ++i) {
        const int64_t v = run[i];
        int64_t j = i;
        for (; j > 0 && run[j - 1] > v; --j) run[j] = run[j - 1];
        run[j] = v;
      }
    } else {
      std::sort(run, run + len);
    }
    // kept <= a: the pairs kept so far never overwrite the run being read
    for (int64_t i = 0; i < len; ++i) {
      if (i > 0 && run[i] == run[i - 1]) continue;
      out[kept] = out[a];
      in[kept] = run[i];
      ++kept;
    }
    a = b;
  }
  return kept;
}

Relation sort_unique(const RelationView& rel) {
  const int ncols = rel.l + rel.m;
  const int64_t n = rel.n;
  Relation out;
  out.l = rel.l;
  out.m = rel.m;
  if (ncols == 0) {  // 0-d output of a 0-d input: the relation is {()} or {}
    out.n = n > 0 ? 1 : 0;
    return out;
  }
  // One pass over adjacent rows answers, for every suffix of columns [c, ncols): is the
  // relation sorted by it (bad[c] == 0), and does it repeat a suffix tuple (dup[c] != 0)?
  // Captured lineage often arrives sorted by its trailing (input) columns; then a stable
  // sort on the leading columns alone finishes the job. (Sortedness of a suffix does not
  // imply that of a shorter one, hence all suffixes at once.)
  {  // Fast path first: already sorted and duplicate-free (typical for captures).
    const int64_t* const* cols = rel.cols.data();
    bool sorted_unique = true;
    for (int64_t i = 1; i < n && sorted_unique; ++i) {
      int c = 0;
      while (c < ncols && cols[c][i] == cols[c][i - 1]) ++c;
      sorted_unique = c < ncols && cols[c][i] > cols[c][i - 1];
    }
    if (sorted_unique) {
      out.n = n;
      out.ptrs = rel.cols;
      return out;
    }
  }
  std::vector<uint8_t> bad(ncols, 0), dup(ncols, 0);
  switch (ncols) {  // fixed column counts keep the flags in registers
    case 1: suffix_order<1>(rel.cols.data(), n, bad.data(), dup.data()); break;
    case 2: suffix_order<2>(rel.cols.data(), n, bad.data(), dup.data()); break;
    case 3: suffix_order<3>(rel.cols.data(), n, bad.data(), dup.data()); break;
    case 4: suffix_order<4>(rel.cols.data(), n, bad.data(), dup.data()); break;
    case 5: suffix_order<5>(rel.cols.data(), n, bad.data(), dup.data()); break;
    case 6: suffix_order<6>(rel.cols.data(), n, bad.data(), dup.data()); break;
    default: suffix_order_any(rel.cols.data(), n, bad.data(), dup.data(), ncols);
  }
  if (!bad[0]) {  // sorted with duplicates: copy and drop them
    out.n = n;
    out.data.resize(static_cast<size_t>(ncols) * n);
    for (int c = 0; c < ncols; ++c)
      std::copy(rel.cols[c], rel.cols[c] + n, out.data.begin() + static_cast<size_t>(c) * n);
    dedupe_sorted(out);
    set_ptrs(out);
    return out;
  }
  int c0 = ncols;  // rows are sorted by columns [c0, ncols)
  for (int c = 1; c < ncols; ++c) {
    if (!bad[c]) {
      c0 = c;
      break;
    }
  }
  std::vector<int64_t> mins(ncols), maxs(ncols);
  std::vector<int> bits(ncols);
  auto range_of = [&](int c) {
    const int64_t* col = rel.cols[c];
    int64_t mn = col[0], mx = col[0];
    for (int64_t i = 1; i < n; ++i) {
      mn = std::min(mn, col[i]);
      mx = std::max(mx, col[i]);
    }
    mins[c] = mn;
    maxs[c] = mx;
    bits[c] = bits_for(static_cast<uint64_t>(maxs[c] - mins[c]));
  };
  int prefix_bits = 0;
  for (int c = 0; c < c0; ++c) {
    range_of(c);
    prefix_bits += bits[c];
  }
  const bool dups_possible = c0 == ncols || dup[c0];
  auto prefix_key = [&](int64_t i) {
    uint64_t k = 0;
    for (int c = 0; c < c0; ++c)
      if (bits[c] > 0) k = (k << bits[c]) | static_cast<uint64_t>(rel.cols[c][i] - mins[c]);
    return k;
  };
  if (c0 < ncols && prefix_bits <= 16) {
    // Stable counting sort on the leading columns: one histogram pass, one pass placing row
    // indices (32-bit when they fit), then every column gathered in sorted order (sequential
    // writes; the reads stay within a few lines per bucket, which the cache holds).
    const size_t buckets = size_t{1} << prefix_bits;
    std::vector<int64_t> start(buckets + 1, 0);
    out.n = n;
    out.data.resize(static_cast<size_t>(ncols) * n);
    auto counting_sort = [&](auto* order) {
      using Idx = std::remove_pointer_t<decltype(order)>;
      // The first output column's buffer holds the keys meanwhile (it is written last).
      int64_t* keys = out.data.data();
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t k = prefix_key(i);
        keys[i] = static_cast<int64_t>(k);
        ++start[k + 1];
      }
      for (size_t b = 0; b < buckets; ++b) start[b + 1] += start[b];
      for (int64_t i = 0; i < n; ++i) order[start[keys[i]]++] = static_cast<Idx>(i);
      for (int c = ncols - 1; c >= 0; --c) {
        int64_t* dst = out.data.data() + static_cast<size_t>(c) * n;
        const int64_t* src = rel.cols[c];
        for (int64_t t = 0; t < n; ++t) dst[t] = src[order[t]];
      }
    };
    if (n <= (int64_t{1} << 32)) {
      std::vector<uint32_t> order(n);
      counting_sort(order.data());
    } else {
      std::vector<int64_t> order(n);
      counting_sort(order.data());
    }
    if (dups_possible) dedupe_sorted(out);
    set_ptrs(out);
    return out;
  }
  if (n >= kBucketMinRows && static_cast<uint64_t>(maxs[0] - mins[0]) < static_cast<uint64_t>(n)) {
    if (n < (int64_t{1} << 32))
      return bucket_sort_unique<uint32_t>(rel, mins[0], maxs[0], c0, dups_possible);
    return bucket_sort_unique<uint64_t>(rel, mins[0], maxs[0], c0, dups_possible);
  }
  const int idx_bits = bits_for(static_cast<uint64_t>(n > 0 ? n - 1 : 0));
  if (c0 < ncols && prefix_bits + idx_bits <= 64) {
    std::vector<uint64_t> keys(n);
    for (int64_t i = 0; i < n; ++i)
      keys[i] = (idx_bits == 0 ? 0 : (prefix_key(i) << idx_bits)) | static_cast<uint64_t>(i);
    radix_sort_u64(keys, prefix_bits, idx_bits);
    const uint64_t mask = idx_bits == 0 ? 0 : ((uint64_t{1} << idx_bits) - 1);
    std::vector<int64_t> order(n);
    for (int64_t t = 0; t < n; ++t) order[t] = static_cast<int64_t>(keys[t] & mask);
    return gather_unique(rel, order, dups_possible);
  }
  int total_bits = prefix_bits;
  for (int c = c0; c < ncols; ++c) {
    range_of(c);
    total_bits += bits[c];
  }
  if (total_bits <= 64) {
    std::vector<uint64_t> keys(n);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t k = 0;
      for (int c = 0; c < ncols; ++c) {
        if (bits[c] == 0) continue;
        k = (bits[c] == 64 ? 0 : (k << bits[c])) |
            static_cast<uint64_t>(rel.cols[c][i] - mins[c]);
      }
      keys[i] = k;
    }
    radix_sort_u64(keys, total_bits);
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    out.n = static_cast<int64_t>(keys.size());
    out.data.resize(static_cast<size_t>(ncols) * out.n);
    for (int64_t i = 0; i < out.n; ++i) {
      uint64_t k = keys[i];
      for (int c = ncols - 1; c >= 0; --c) {
        uint64_t v = 0;
        if (bits[c] > 0) {
          v = bits[c] == 64 ? k : (k & ((uint64_t{1} << bits[c]) - 1));
          k = bits[c] == 64 ? 0 : (k >> bits[c]);
        }
        out.data[static_cast<size_t>(c) * out.n + i] = mins[c] + static_cast<int64_t>(v);
      }
    }
    set_ptrs(out);
    return out;
  }
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int64_t i, int64_t j) { return lex_less_cols(rel, i, j); });
  return gather_unique(rel, idx, true);
}

void Relation::copy_to(int64_t* dst) const {
  for (int c = 0; c < l + m; ++c)
    if (n) std::memcpy(dst + static_cast<size_t>(c) * n, ptrs[c], sizeof(int64_t) * n);
}

std::vector<int64_t> Relation::materialize() const {
  std::vector<int64_t> out(static_cast<size_t>(l + m) * n);
  for (int c = 0; c < l + m; ++c)
    if (n) std::memcpy(out.data() + static_cast<size_t>(c) * n, ptrs[c], sizeof(int64_t) * n);
  return out;
}

namespace {

// ---------------------------------------------------------------- record helpers

using Rec = int64_t*;
using CRec = const int64_t*;

struct Records {
  Layout lay;
  std::vector<int64_t> buf;
  int64_t limit = -1;  // > 0: stop accepting records beyond this many (abort signal)
  int64_t size() const { return lay.w == 0 ? 0 : static_cast<int64_t>(buf.size()) / lay.w; }
  Rec at(int64_t i) { return buf.data() + i * lay.w; }
  CRec at(int64_t i) const { return buf.data() + i * lay.w; }
  void push(CRec r) { buf.insert(buf.end(), r, r + lay.w); }
  bool over_limit() const { return limit > 0 && size() > limit; }
  explicit Records(const Layout& l) : lay(l) {}
};

// Value of candidate representation `c` of input k in record `rec`; false when it cannot be
// expressed (then the candidate is not live).
bool cand_value(const Layout& lay, CRec rec, int k, int c, int64_t* lo, int64_t* hi) {
  const CRec in = rec + lay.in(k);
  if (c == 0) {
    if (in[F_REF] != -1) return false;
    *lo = in[F_LO];
    *hi = in[F_HI];
    return true;
  }
  const int j = (c - 1) / 2;
  const int64_t mult = ((c - 1) % 2 == 0) ? 1 : -1;
  if (in[F_REF] == j && in[F_Q] == 1 && in[F_R] == 0 && in[F_MULT] == mult) {
    *lo = in[F_LO];
    *hi = in[F_HI];
    return true;
  }
  if (in[F_REF] == -1 && rec[2 * j] == rec[2 * j + 1]) {
    const int64_t bv = mult * rec[2 * j];
    *lo = bv - in[F_HI];
    *hi = bv - in[F_LO];
    return true;
  }
  return false;
}

// Merge step along input attribute a_k (phase 1): the records must agree on everything else.
bool input_extend(const Layout& lay, int64_t* run, CRec r, int k) {
  for (int f = 0; f < 2 * lay.l; ++f)
    if (run[f] != r[f]) return false;
  for (int kk = 0; kk < lay.m; ++kk) {
    if (kk == k) continue;
    if (run[lay.in(kk) + F_LO] != r[lay.in(kk) + F_LO] ||
        run[lay.in(kk) + F_HI] != r[lay.in(kk) + F_HI])
      return false;
  }
  if (r[lay.in(k) + F_LO] != run[lay.in(k) + F_HI] + 1) return false;
  run[lay.in(k) + F_HI] = r[lay.in(k) + F_HI];
  return true;
}

// Merge step along output attribute b_j (phase 2): relative transform + range encoding.
// Keeps, per input, the candidate representations that are equal on both sides.
bool output_extend(const Layout& lay, int64_t* run, CRec r, int j) {
  if (r[2 * j] != run[2 * j + 1] + 1) return false;
  for (int jj = 0; jj < lay.l; ++jj) {
    if (jj == j) continue;
    if (run[2 * jj] != r[2 * jj] || run[2 * jj + 1] != r[2 * jj + 1]) return false;
  }
  uint64_t newmask[64];
  uint64_t* nm = lay.m <= 64 ? newmask : new uint64_t[lay.m];
  bool ok = true;
  for (int k = 0; k < lay.m && ok; ++k) {
    uint64_t mask = static_cast<uint64_t>(run[lay.in(k) + F_LIVE]) &
                    static_cast<uint64_t>(r[lay.in(k) + F_LIVE]);
    uint64_t keep = 0;
    while (mask) {
      int c = __builtin_ctzll(mask);
      mask &= mask - 1;
      int64_t alo, ahi, blo, bhi;
      if (cand_value(lay, run, k, c, &alo, &ahi) && cand_value(lay, r, k, c, &blo, &bhi) &&
          alo == blo && ahi == bhi)
        keep |= uint64_t{1} << c;
    }
    nm[k] = keep;
    ok = keep != 0;
  }
  if (ok) {
    for (int k = 0; k < lay.m; ++k) {
      int64_t* in = run + lay.in(k);
      if (!(nm[k] & 1) && in[F_REF] == -1) {
        int c = __builtin_ctzll(nm[k]);
        int64_t lo = 0, hi = 0;
        cand_value(lay, run, k, c, &lo, &hi);  // run still has a single-valued b_j here
        in[F_REF] = (c - 1) / 2;
        in[F_Q] = 1;
        in[F_R] = 0;
        in[F_MULT] = ((c - 1) % 2 == 0) ? 1 : -1;
        in[F_LO] = lo;
        in[F_HI] = hi;
      }
      in[F_LIVE] = static_cast<int64_t>(nm[k]);
    }
    run[2 * j + 1] = r[2 * j + 1];
  }
  if (nm != newmask) delete[] nm;
  return ok;
}

// Streaming cascade of merge stages over records that arrive in lexicographic order: phase 1
// (a_{m-1} .. a_1) and the first output merge (b_l) never need a re-sort, so they run without
// materialising intermediate tables.
class Cascade {
 public:
  struct Stage {
    bool output;  // false: merge along input k, true: along output j
    int idx;
    std::vector<int64_t> run;
    bool has = false;
  };
  Cascade(const Layout& lay, Records& sink) : lay_(lay), sink_(sink) {}
  void add_stage(bool output, int idx) {
    stages_.push_back(Stage{output, idx, std::vector<int64_t>(lay_.w), false});
  }
  void push(CRec rec) { push_at(0, rec); }
  void flush() { flush_first(stages_.size()); }
  // Push the runs held by the first `count` stages down the cascade, in stage order. Once the
  // outputs b change, no held input-stage run can merge with any later record (input merges
  // need equal outputs), so flushing the input stages early yields the same records.
  void flush_first(size_t count) {
    for (size_t s = 0; s < count && s < stages_.size(); ++s) {
      if (!stages_[s].has) continue;
      stages_[s].has = false;
      push_at(s + 1, stages_[s].run.data());
    }
  }
  size_t stages() const { return stages_.size(); }
  // The run held by stage s, or nullptr.
  int64_t* held(size_t s) { return stages_[s].has ? stages_[s].run.data() : nullptr; }

 private:
  void push_at(size_t s, CRec rec) {
    if (s == stages_.size()) {
      sink_.push(rec);
      return;
    }
    Stage& st = stages_[s];
    if (st.has) {
      bool ext = st.output ? output_extend(lay_, st.run.data(), rec, st.idx)
                           : input_extend(lay_, st.run.data(), rec, st.idx);
      if (ext) return;
      push_at(s + 1, st.run.data());
    }
    std::copy(rec, rec + lay_.w, st.run.begin());
    st.has = true;
  }
  const Layout& lay_;
  Records& sink_;
  std::vector<Stage> stages_;
};

// Phase 1 (multi-attribute range encoding over a_m .. a_1) and the first output merge.
//
// With `fast` set, two run-consuming shortcuts skip building one record per pair where the
// outcome of the cascade is already known (the records it produces are the same):
//  * output runs: the run held by the output stage (b_l) spans >= 2 values of b_l and every
//    input is a single value for each b. Then all its live candidate representations are the
//    same line in b_l (slope 0 or +-1: two such lines that agree on two points are one), so
//    a single pair extends it iff its inputs lie on that line, and extending changes nothing
//    but b_l's upper end (live masks and the stored encoding stay as they are). Pairs whose
//    b differs from both neighbours reach that stage as single-pair records, so a stretch of
//    them that stays on the line is consumed by comparing columns.
//  * input runs: the run held by the first input stage (a_{m-1}) has single values
//    everywhere but a_{m-1}; a stretch of pairs with the same b and other inputs, a_{m-1}
//    counting up by one, and each pair a single-pair record (no a_m run), only moves its
//    upper end.
Records encode_stream(const Relation& rel, const Layout& lay, uint64_t init_live,
                      int64_t limit, bool fast) {
  Records recs(lay);
  recs.limit = limit;
  recs.buf.reserve(static_cast<size_t>(lay.w) * std::min<int64_t>(rel.n, int64_t{1} << 16));
  const int l = lay.l, m = lay.m;
  const int64_t n = rel.n;
  Cascade cascade(lay, recs);
  for (int k = m - 2; k >= 0; --k) cascade.add_stage(false, k);
  if (l > 0) cascade.add_stage(true, l - 1);
  std::vector<int64_t> cur(lay.w);
  auto start_rec = [&](int64_t i) {
    for (int j = 0; j < l; ++j) cur[2 * j] = cur[2 * j + 1] = rel.col(j)[i];
    for (int k = 0; k < m; ++k) {
      int64_t* in = cur.data() + lay.in(k);
      in[F_REF] = -1;
      in[F_Q] = 1;
      in[F_R] = 0;
      in[F_MULT] = 1;
      in[F_LO] = in[F_HI] = rel.col(l + k)[i];
      in[F_LIVE] = static_cast<int64_t>(init_live);
    }
  };
  auto same_b = [&](int64_t x, int64_t y) {
    for (int j = l - 1; j >= 0; --j)
      if (rel.col(j)[x] != rel.col(j)[y]) return false;
    return true;
  };
  std::vector<int64_t> expect(m), slope(m);
  // Output runs (see above): consumes pairs [i, e) into the output stage's run, returns e.
  auto output_run = [&](int64_t i) -> int64_t {
    int64_t* R = cascade.held(cascade.stages() - 1);
    if (R == nullptr) return i;
    const int j = l - 1;
    if (R[2 * j + 1] <= R[2 * j]) return i;
    for (int jj = 0; jj < j; ++jj)
      if (R[2 * jj] != R[2 * jj + 1]) return i;
    const int64_t bn0 = R[2 * j + 1] + 1;
    for (int k = 0; k < m; ++k) {
      const int64_t* in = R + lay.in(k);
      if (in[F_LO] != in[F_HI] || in[F_Q] != 1 || in[F_R] != 0) return i;
      const int64_t ref = in[F_REF], mult = in[F_MULT];
      if (ref == -1) {
        slope[k] = 0;
        expect[k] = in[F_LO];
      } else if (ref == j && (mult == 1 || mult == -1)) {
        slope[k] = mult;
        expect[k] = mult * bn0 - in[F_LO];
      } else {
        return i;
      }
    }
    const int64_t* bj = rel.col(j);
    int64_t e = i, bn = bn0;
    while (e < n && bj[e] == bn) {
      bool ok = true;
      for (int jj = 0; jj < j && ok; ++jj) ok = rel.col(jj)[e] == R[2 * jj];
      for (int k = 0; k < m && ok; ++k) ok = rel.col(l + k)[e] == expect[k];
      if (!ok || (e + 1 < n && same_b(e, e + 1))) break;
      ++e;
      ++bn;
      for (int k = 0; k < m; ++k) expect[k] += slope[k];
    }
    R[2 * j + 1] = bn - 1;
    return e;
  };
  // Input runs (see above), for the stage merging along a_{m-1} (0-based k0 = m - 2).
  auto input_run = [&](int64_t i) -> int64_t {
    int64_t* X = cascade.held(0);
    if (X == nullptr) return i;
    const int k0 = m - 2, km = m - 1;
    for (int j = 0; j < l; ++j)
      if (X[2 * j] != X[2 * j + 1]) return i;
    for (int k = 0; k < m; ++k)
      if (k != k0 && X[lay.in(k) + F_LO] != X[lay.in(k) + F_HI]) return i;
    const int64_t* ak0 = rel.col(l + k0);
    const int64_t* akm = rel.col(l + km);
    const int64_t vkm = X[lay.in(km) + F_LO];
    int64_t e = i, an = X[lay.in(k0) + F_HI] + 1;
    while (e < n && ak0[e] == an && akm[e] == vkm) {
      bool ok = true;
      for (int j = 0; j < l && ok; ++j) ok = rel.col(j)[e] == X[2 * j];
      for (int k = 0; k < k0 && ok; ++k) ok = rel.col(l + k)[e] == X[lay.in(k) + F_LO];
      if (!ok) break;
      if (e + 1 < n && akm[e + 1] == vkm + 1) {  // pair e must not start an a_m run
        bool prefix = true;
        for (int c = 0; c < l + m - 1 && prefix; ++c) prefix = rel.col(c)[e + 1] == rel.col(c)[e];
        if (prefix) break;
      }
      ++e;
      ++an;
    }
    X[lay.in(k0) + F_HI] = an - 1;
    return e;
  };
  if (n == 0) return recs;
  start_rec(0);
  bool have_cur = true;
  for (int64_t i = 1; i < n; ++i) {  // a_m runs, streamed from the sorted columns
    if (recs.over_limit()) return recs;  // ProvRC cannot pay any more: let the caller abort
    bool extend = m > 0;
    if (extend) {
      for (int c = 0; c < l + m - 1 && extend; ++c) extend = rel.col(c)[i] == rel.col(c)[i - 1];
      extend = extend && rel.col(l + m - 1)[i] == cur[lay.in(m - 1) + F_HI] + 1;
    }
    if (extend) {
      cur[lay.in(m - 1) + F_HI] += 1;
      continue;
    }
    cascade.push(cur.data());
    if (fast) {
      int64_t e = i;
      if (l > 0 && !same_b(i, i - 1)) {
        cascade.flush_first(cascade.stages() - 1);
        e = output_run(i);
      } else if (m >= 2) {
        e = input_run(i);
      }
      if (e == n) {
        have_cur = false;
        break;
      }
      i = e;  // pair e starts a new a_m run (its b or a_{m-1} breaks the consumed stretch)
    }
    start_rec(i);
  }
  if (have_cur) cascade.push(cur.data());
  cascade.flush();
  return recs;
}

// Stable re-sort so that records mergeable along b_j become adjacent: key = the other output
// intervals, then b_j. Skipped when the current order already is such an order.
void order_for_output_merge(Records& recs, int j) {
  const Layout& lay = recs.lay;
  const int64_t n = recs.size();
  // One pass: is the order lexicographic on (b_0 .. b_j) with one record per prefix?
  bool adjacent = true;
  for (int64_t i = 1; i < n && adjacent; ++i) {
    int cmp = 0;
    for (int jj = 0; jj <= j && cmp == 0; ++jj) {
      CRec x = recs.at(i - 1), y = recs.at(i);
      if (x[2 * jj] != y[2 * jj]) cmp = x[2 * jj] < y[2 * jj] ? -1 : 1;
      else if (x[2 * jj + 1] != y[2 * jj + 1]) cmp = x[2 * jj + 1] < y[2 * jj + 1] ? -1 : 1;
    }
    adjacent = cmp < 0;
  }
  if (adjacent) return;
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    CRec x = recs.at(a), y = recs.at(b);
    for (int jj = 0; jj < lay.l; ++jj) {
      if (jj == j) continue;
      if (x[2 * jj] != y[2 * jj]) return x[2 * jj] < y[2 * jj];
      if (x[2 * jj + 1] != y[2 * jj + 1]) return x[2 * jj + 1] < y[2 * jj + 1];
    }
    return x[2 * j] < y[2 * j];
  });
  std::vector<int64_t> buf(recs.buf.size());
  for (int64_t i = 0; i < n; ++i)
    std::copy(recs.at(idx[i]), recs.at(idx[i]) + lay.w, buf.begin() + i * lay.w);
  recs.buf.swap(buf);
}

// Phase 2 step along output attribute b_j (after a re-sort when needed).
Records output_merge(Records& recs, int j) {
  const Layout& lay = recs.lay;
  Records next(lay);
  if (recs.size() == 0) return next;
  order_for_output_merge(recs, j);
  std::vector<int64_t> run(recs.at(0), recs.at(0) + lay.w);
  for (int64_t i = 1; i < recs.size(); ++i) {
    CRec r = recs.at(i);
    if (!output_extend(lay, run.data(), r, j)) {
      next.push(run.data());
      std::copy(r, r + lay.w, run.begin());
    }
  }
  next.push(run.data());
  return next;
}

// Phase 3 step: merge arithmetic progressions of records along b_j into strided constraints.
// A chain of records whose b_j intervals tile [B0, B0 + T*w - 1] with width w, whose other
// fields are equal and whose absolute input intervals move by a constant step s_k per record
// becomes one record with a_k relative to b_j: delta = s_k * floor((b_j + r) / w) - a_k.
Records progression_merge(Records& recs, int j) {
  const Layout& lay = recs.lay;
  const int64_t n = recs.size();
  Records next(lay);
  if (n < 2) {
    next.buf = recs.buf;
    return next;
  }
  auto key_less = [&](CRec x, CRec y) -> int {
    for (int jj = 0; jj < lay.l; ++jj) {
      if (jj == j) continue;
      for (int f = 0; f < 2; ++f)
        if (x[2 * jj + f] != y[2 * jj + f]) return x[2 * jj + f] < y[2 * jj + f] ? -1 : 1;
    }
    int64_t wx = x[2 * j + 1] - x[2 * j], wy = y[2 * j + 1] - y[2 * j];
    if (wx != wy) return wx < wy ? -1 : 1;
    for (int k = 0; k < lay.m; ++k) {
      CRec a = x + lay.in(k), b = y + lay.in(k);
      if (a[F_REF] != b[F_REF]) return a[F_REF] < b[F_REF] ? -1 : 1;
      if (a[F_REF] == -1) {
        int64_t wa = a[F_HI] - a[F_LO], wb = b[F_HI] - b[F_LO];
        if (wa != wb) return wa < wb ? -1 : 1;
      } else {
        for (int f = F_Q; f <= F_HI; ++f)
          if (a[f] != b[f]) return a[f] < b[f] ? -1 : 1;
      }
    }
    return 0;
  };
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    int c = key_less(recs.at(a), recs.at(b));
    if (c != 0) return c < 0;
    return recs.at(a)[2 * j] < recs.at(b)[2 * j];
  });
  std::vector<int64_t> steps(lay.m);
  int64_t s = 0;
  while (s < n) {
    CRec first = recs.at(idx[s]);
    const int64_t w = first[2 * j + 1] - first[2 * j] + 1;
    int64_t e = s + 1;  // chain is idx[s .. e)
    for (; e < n; ++e) {
      CRec prev = recs.at(idx[e - 1]), cur = recs.at(idx[e]);
      if (key_less(prev, cur) != 0 || cur[2 * j] != prev[2 * j + 1] + 1) break;
      bool ok = true;
      for (int k = 0; k < lay.m && ok; ++k) {
        if (prev[lay.in(k) + F_REF] != -1) continue;
        int64_t st = cur[lay.in(k) + F_LO] - prev[lay.in(k) + F_LO];
        if (e == s + 1)
          steps[k] = st;
        else
          ok = steps[k] == st;
      }
      if (!ok) break;
    }
    if (e - s < 2) {
      next.push(first);
      ++s;
      continue;
    }
    std::vector<int64_t> rec(first, first + lay.w);
    const int64_t b0 = first[2 * j];
    rec[2 * j + 1] = b0 + (e - s) * w - 1;
    const int64_t r = ((-b0) % w + w) % w;
    const int64_t c = (b0 + r) / w;
    for (int k = 0; k < lay.m; ++k) {
      int64_t* in = rec.data() + lay.in(k);
      if (in[F_REF] != -1 || steps[k] == 0) continue;
      const int64_t lo0 = in[F_LO], hi0 = in[F_HI];
      in[F_REF] = j;
      in[F_Q] = w;
      in[F_R] = r;
      in[F_MULT] = steps[k];
      in[F_LO] = steps[k] * c - hi0;
      in[F_HI] = steps[k] * c - lo0;
    }
    for (int k = 0; k < lay.m; ++k) rec[lay.in(k) + F_LIVE] = 0;
    next.push(rec.data());
    s = e;
  }
  return next;
}

ProvRCTable to_table(const Records& recs) {
  const Layout& lay = recs.lay;
  ProvRCTable t;
  t.l = lay.l;
  t.m = lay.m;
  t.rows = recs.size();
  const int64_t n = t.rows;
  t.out_lo.resize(static_cast<size_t>(lay.l) * n);
  t.out_hi.resize(static_cast<size_t>(lay.l) * n);
  for (auto* v : {&t.in_ref, &t.in_q, &t.in_r, &t.in_mult, &t.in_lo, &t.in_hi})
    v->resize(static_cast<size_t>(lay.m) * n);
  for (int64_t i = 0; i < n; ++i) {
    CRec r = recs.at(i);
    for (int j = 0; j < lay.l; ++j) {
      t.out_lo[j * n + i] = r[2 * j];
      t.out_hi[j * n + i] = r[2 * j + 1];
    }
    for (int k = 0; k < lay.m; ++k) {
      CRec in = r + lay.in(k);
      t.in_ref[k * n + i] = in[F_REF];
      t.in_q[k * n + i] = in[F_Q];
      t.in_r[k * n + i] = in[F_R];
      t.in_mult[k * n + i] = in[F_MULT];
      t.in_lo[k * n + i] = in[F_LO];
      t.in_hi[k * n + i] = in[F_HI];
    }
  }
  return t;
}

// Phase 1 + first output merge on up to `threads` chunks of the sorted relation at once.
// When the caller passes a give-up limit, a chunk over its share of it makes the whole call
// give up (the returned records then only signal that).
// Chunks are cut where b_1 changes: every phase-1 merge needs equal outputs and the merge along
// b_l needs equal b_1 .. b_{l-1}, so no merge can cross a cut except, for rank-1 outputs, the
// merge along b_1 itself, which is redone at the seams.
Records encode_parallel(const Relation& rel, const Layout& lay, uint64_t live, int64_t limit,
                        int threads, bool fast) {
  const int64_t n = rel.n;
  if (threads <= 1 || lay.l == 0 || n < (int64_t{1} << 17)) return encode_stream(rel, lay, live, limit, fast);
  std::vector<int64_t> cuts{0};
  const int64_t* b0 = rel.col(0);
  for (int t = 1; t < threads; ++t) {
    int64_t pos = std::max(cuts.back() + 1, n * t / threads);
    while (pos < n && b0[pos] == b0[pos - 1]) ++pos;
    if (pos < n) cuts.push_back(pos);
  }
  cuts.push_back(n);
  const size_t chunks = cuts.size() - 1;
  if (chunks == 1) return encode_stream(rel, lay, live, limit, fast);
  std::vector<Relation> parts(chunks);
  std::vector<Records> out(chunks, Records(lay));
  for (size_t c = 0; c < chunks; ++c) {
    parts[c].l = rel.l;
    parts[c].m = rel.m;
    parts[c].n = cuts[c + 1] - cuts[c];
    for (int col = 0; col < rel.l + rel.m; ++col) parts[c].ptrs.push_back(rel.col(col) + cuts[c]);
  }
  // Each chunk gives up against its own share of the limit, so a hopeless relation stops
  // early on every thread. (Only the give-up decision can differ from one thread: a table
  // that is produced is the same.)
  auto share = [&](size_t c) {
    return limit > 0 ? std::max<int64_t>(1, limit * parts[c].n / n) : int64_t{-1};
  };
  std::vector<std::thread> pool;
  for (size_t c = 1; c < chunks; ++c)
    pool.emplace_back([&, c] { out[c] = encode_stream(parts[c], lay, live, share(c), fast); });
  out[0] = encode_stream(parts[0], lay, live, share(0), fast);
  for (auto& th : pool) th.join();
  Records recs(lay);
  for (size_t c = 0; c < chunks; ++c) {
    if (out[c].over_limit()) {  // propagate the give-up to the caller
      recs.buf.assign(static_cast<size_t>(lay.w) * (limit + 1), 0);
      return recs;
    }
  }
  size_t total = 0;
  for (auto& o : out) total += o.buf.size();
  recs.buf.reserve(total);
  for (size_t c = 0; c < chunks; ++c) {
    int64_t start = 0;
    if (c > 0 && recs.size() > 0 && out[c].size() > 0 &&
        output_extend(lay, recs.at(recs.size() - 1), out[c].at(0), lay.l - 1))
      start = 1;
    recs.buf.insert(recs.buf.end(), out[c].buf.begin() + start * lay.w, out[c].buf.end());
  }
  return recs;
}

}  // namespace

CompressResult compress(const RelationView& rel, const CompressOptions& opts) {
  CompressResult res;
  res.sorted = sort_unique(rel);
  const Relation& s = res.sorted;
  Layout lay(rel.l, rel.m);
  if (rel.l + rel.m == 0) {  // 0-d to 0-d: a single empty tuple or nothing
    res.table.l = res.table.m = 0;
    res.table.rows = s.n;
    return res;
  }
  uint64_t live = 1;
  for (int j = 0; j < lay.max_rel; ++j) {
    if (opts.relative) live |= uint64_t{1} << (1 + 2 * j);
    if (opts.mirrored) live |= uint64_t{1} << (2 + 2 * j);
  }
  // Rows only ever get fewer after the first output merge, so once that merge has produced
  // more than abort_ratio * n rows the outcome is decided and the stream stops early.
  const int64_t limit = (lay.l > 0 && opts.abort_ratio > 0)
                            ? static_cast<int64_t>(opts.abort_ratio * static_cast<double>(s.n))
                            : -1;
  if (limit > 0 && opts.sample_windows > 0 && s.n >= kSampleMinRows) {
    // Probe: the streaming phase is local in sorted order, so a window's row count is what the
    // full pass spends on that stretch (up to one record per window edge).
    bool hopeless = true;
    const int64_t k = opts.sample_windows;
    for (int64_t w = 0; w < k && hopeless; ++w) {
      const int64_t start = (s.n - kSampleWindow) * (2 * w + 1) / (2 * k);
      Relation part;
      part.l = s.l;
      part.m = s.m;
      part.n = kSampleWindow;
      for (int c = 0; c < s.l + s.m; ++c) part.ptrs.push_back(s.col(c) + start);
      Records probe = encode_stream(part, lay, live, -1, opts.fast_paths);
      hopeless = static_cast<double>(probe.size()) > 1.2 * opts.abort_ratio * kSampleWindow;
    }
    if (hopeless) {
      res.aborted = true;
      return res;
    }
  }
  Records recs = encode_parallel(s, lay, live, limit, opts.threads, opts.fast_paths);
  if (limit > 0 && recs.size() > limit) {
    res.aborted = true;
    return res;
  }
  for (int j = lay.l - 2; j >= 0; --j) recs = output_merge(recs, j);
  if (opts.progression) {
    for (int j = lay.l - 1; j >= 0; --j) recs = progression_merge(recs, j);
  }
  res.table = to_table(recs);
  return res;
}

namespace {

// Stable sort of records by `less` (on record pointers).
template <class Less>
void sort_records(Records& recs, Less less) {
  const int64_t n = recs.size();
  const int w = recs.lay.w;
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  bool sorted = true;
  for (int64_t i = 1; i < n && sorted; ++i) sorted = !less(recs.at(i), recs.at(i - 1));
  if (sorted) return;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return less(recs.at(a), recs.at(b)); });
  std::vector<int64_t> buf(recs.buf.size());
  for (int64_t i = 0; i < n; ++i)
    std::copy(recs.at(idx[i]), recs.at(idx[i]) + w, buf.begin() + i * w);
  recs.buf.swap(buf);
}

// Merge along input attribute a_k: records equal in every field but a_k's interval (and
// live masks), with a_k in one representation and adjacent intervals, become one. Sound for
// any representation: for a fixed b the two records' a_k are the adjacent intervals.
Records input_merge(Records& recs, int k) {
  const Layout& lay = recs.lay;
  Records next(lay);
  if (recs.size() == 0) return next;
  const int kk0 = lay.in(k);
  auto cmp_except = [&](CRec x, CRec y) -> int {
    for (int f = 0; f < lay.w; ++f) {
      if (f >= kk0 && f < kk0 + kRecInput) continue;
      const int ff = (f - 2 * lay.l) % kRecInput;
      if (f >= 2 * lay.l && ff == F_LIVE) continue;
      if (x[f] != y[f]) return x[f] < y[f] ? -1 : 1;
    }
    for (int f = F_REF; f <= F_MULT; ++f)
      if (x[kk0 + f] != y[kk0 + f]) return x[kk0 + f] < y[kk0 + f] ? -1 : 1;
    return 0;
  };
  sort_records(recs, [&](CRec x, CRec y) {
    const int c = cmp_except(x, y);
    if (c != 0) return c < 0;
    return x[kk0 + F_LO] < y[kk0 + F_LO];
  });
  std::vector<int64_t> run(recs.at(0), recs.at(0) + lay.w);
  for (int64_t i = 1; i < recs.size(); ++i) {
    CRec r = recs.at(i);
    if (cmp_except(run.data(), r) == 0 && r[kk0 + F_LO] == run[kk0 + F_HI] + 1) {
      run[kk0 + F_HI] = r[kk0 + F_HI];
      for (int q = 0; q < lay.m; ++q) run[lay.in(q) + F_LIVE] &= r[lay.in(q) + F_LIVE];
      continue;
    }
    next.push(run.data());
    std::copy(r, r + lay.w, run.begin());
  }
  next.push(run.data());
  return next;
}

}  // namespace

uint64_t record_live_all(int l) {
  uint64_t live = 1;
  for (int j = 0; j < std::min(l, 31); ++j) live |= (uint64_t{1} << (1 + 2 * j)) | (uint64_t{1} << (2 + 2 * j));
  return live;
}

ProvRCTable merge_records(int l, int m, std::vector<int64_t> buf, bool progression) {
  Layout lay(l, m);
  Records recs(lay);
  recs.buf.swap(buf);
  for (int k = m - 1; k >= 0; --k) recs = input_merge(recs, k);
  for (int j = l - 1; j >= 0; --j) recs = output_merge(recs, j);
  for (int k = m - 1; k >= 0; --k) recs = input_merge(recs, k);
  for (int j = l - 1; j >= 0; --j) recs = output_merge(recs, j);
  if (progression) {
    for (int j = l - 1; j >= 0; --j) recs = progression_merge(recs, j);
  }
  return to_table(recs);
}

void append_table_records(const ProvRCTable& t, std::vector<int64_t>& out) {
  const Layout lay(t.l, t.m);
  const int64_t n = t.rows;
  const uint64_t all = record_live_all(t.l);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < t.l; ++j) {
      out.push_back(t.out_lo[j * n + i]);
      out.push_back(t.out_hi[j * n + i]);
    }
    for (int k = 0; k < t.m; ++k) {
      const int64_t ref = t.in_ref[k * n + i], q = t.in_q[k * n + i], r = t.in_r[k * n + i],
                    mult = t.in_mult[k * n + i];
      uint64_t live = 0;
      if (ref == -1)
        live = all;
      else if (q == 1 && r == 0 && (mult == 1 || mult == -1) && ref < 31)
        live = uint64_t{1} << (mult == 1 ? 1 + 2 * ref : 2 + 2 * ref);
      out.insert(out.end(), {ref, q, r, mult, t.in_lo[k * n + i], t.in_hi[k * n + i],
                             static_cast<int64_t>(live)});
    }
  }
}

bool solve_f(int64_t q, int64_t r, int64_t mult, int64_t u, int64_t v, int64_t lo, int64_t hi,
             int64_t* out_lo, int64_t* out_hi) {
  if (u > v || lo > hi) return false;
  // g(b) = floor((b + r) / q) must lie in [gu, gv]
  int64_t gu, gv;
  if (mult > 0) {
    gu = ceil_div(u, mult);
    gv = floor_div(v, mult);
  } else {
    gu = ceil_div(-v, -mult);
    gv = floor_div(-u, -mult);
  }
  if (gu > gv) return false;
  // g(b) >= gu  <=>  b >= gu*q - r ;  g(b) <= gv  <=>  b <= (gv+1)*q - r - 1
  int64_t blo = std::max(lo, gu * q - r);
  int64_t bhi = std::min(hi, (gv + 1) * q - r - 1);
  if (blo > bhi) return false;
  *out_lo = blo;
  *out_hi = bhi;
  return true;
}

int64_t count_pairs(const ProvRCTable& t) {
  if (t.l + t.m == 0) return t.rows;
  int64_t total = 0;
  for (int64_t i = 0; i < t.rows; ++i) {
    int64_t c = 1;
    for (int j = 0; j < t.l; ++j) c *= t.out_hi[j * t.rows + i] - t.out_lo[j * t.rows + i] + 1;
    for (int k = 0; k < t.m; ++k) c *= t.in_hi[k * t.rows + i] - t.in_lo[k * t.rows + i] + 1;
    total += c;
  }
  return total;
}

Relation decompress(const ProvRCTable& t) {
  const int l = t.l, m = t.m, ncols = l + m;
  Relation raw;
  raw.l = l;
  raw.m = m;
  if (ncols == 0) {
    raw.n = t.rows > 0 ? 1 : 0;
    return raw;
  }
  const int64_t total = count_pairs(t);
  std::vector<std::vector<int64_t>> cols(ncols);
  for (auto& c : cols) c.reserve(total);
  std::vector<int64_t> b(l), alo(m), ahi(m), a(m);
  const int64_t n = t.rows;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < l; ++j) b[j] = t.out_lo[j * n + i];
    while (true) {
      for (int k = 0; k < m; ++k) {
        const int64_t ref = t.in_ref[k * n + i];
        if (ref < 0) {
          alo[k] = t.in_lo[k * n + i];
          ahi[k] = t.in_hi[k * n + i];
        } else {
          int64_t f = apply_f(b[ref], t.in_q[k * n + i], t.in_r[k * n + i], t.in_mult[k * n + i]);
          alo[k] = f - t.in_hi[k * n + i];
          ahi[k] = f - t.in_lo[k * n + i];
        }
        a[k] = alo[k];
      }
      while (true) {
        for (int j = 0; j < l; ++j) cols[j].push_back(b[j]);
        for (int k = 0; k < m; ++k) cols[l + k].push_back(a[k]);
        int k = m - 1;
        while (k >= 0 && a[k] == ahi[k]) {
          a[k] = alo[k];
          --k;
        }
        if (k < 0) break;
        ++a[k];
      }
      int j = l - 1;
      while (j >= 0 && b[j] == t.out_hi[j * n + i]) {
        b[j] = t.out_lo[j * n + i];
        --j;
      }
      if (j < 0) break;
      ++b[j];
    }
  }
  RelationView view;
  view.l = l;
  view.m = m;
  view.n = static_cast<int64_t>(cols.empty() ? 0 : cols[0].size());
  for (auto& c : cols) view.cols.push_back(c.data());
  Relation out = sort_unique(view);
  if (out.data.empty() && out.n > 0) {  // fast path pointed into `cols`, which die here
    out.data.resize(static_cast<size_t>(ncols) * out.n);
    out.copy_to(out.data.data());
    for (int c = 0; c < ncols; ++c) out.ptrs[c] = out.data.data() + static_cast<size_t>(c) * out.n;
  }
  return out;
}

}  // namespace dslog
