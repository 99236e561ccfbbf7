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

// Rows of `rel` in the given (sorted) order, dropping consecutive duplicates.
Relation gather_unique(const RelationView& rel, const std::vector<int64_t>& order) {
  const int ncols = rel.l + rel.m;
  std::vector<int64_t> keep;
  keep.reserve(order.size());
  for (int64_t i : order) {
    if (!keep.empty()) {
      bool same = true;
      for (int c = 0; c < ncols && same; ++c) same = rel.cols[c][i] == rel.cols[c][keep.back()];
      if (same) continue;
    }
    keep.push_back(i);
  }
  Relation out;
  out.l = rel.l;
  out.m = rel.m;
  out.n = static_cast<int64_t>(keep.size());
  out.data.resize(static_cast<size_t>(ncols) * out.n);
  for (int c = 0; c < ncols; ++c) {
    int64_t* dst = out.data.data() + static_cast<size_t>(c) * out.n;
    for (int64_t t = 0; t < out.n; ++t) dst[t] = rel.cols[c][keep[t]];
    out.ptrs.push_back(dst);
  }
  return out;
}

}  // namespace

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
  // Fast path: already sorted and duplicate-free (typical for captured lineage).
  bool sorted_unique = true;
  for (int64_t i = 1; i < n && sorted_unique; ++i) {
    int cmp = 0;
    for (int c = 0; c < ncols && cmp == 0; ++c) {
      int64_t x = rel.cols[c][i - 1], y = rel.cols[c][i];
      cmp = (x < y) ? -1 : (x > y ? 1 : 0);
    }
    if (cmp >= 0) sorted_unique = false;
  }
  if (sorted_unique) {
    out.n = n;
    out.ptrs = rel.cols;
    return out;
  }
  // Mixed-radix packing into one uint64 key when the value ranges allow it.
  std::vector<int64_t> mins(ncols), maxs(ncols);
  std::vector<int> bits(ncols);
  int total_bits = 0;
  for (int c = 0; c < ncols; ++c) {
    auto [mn, mx] = std::minmax_element(rel.cols[c], rel.cols[c] + n);
    mins[c] = *mn;
    maxs[c] = *mx;
    uint64_t range = static_cast<uint64_t>(maxs[c] - mins[c]);
    int b = 0;
    while (b < 64 && (range >> b) != 0) ++b;
    bits[c] = b;
    total_bits += b;
  }
  // Relations often arrive sorted by their trailing columns (e.g. in input-cell order):
  // then a stable sort on the leading columns alone finishes the job. Keys carry the row
  // index in their low bits, and only the leading columns' bits are radix-sorted.
  int c0 = ncols;  // rows are already sorted by columns [c0, ncols)
  for (int c = ncols - 1; c >= 1; --c) {
    bool ok = true;
    for (int64_t i = 1; i < n && ok; ++i) {
      for (int cc = c; cc < ncols; ++cc) {
        int64_t x = rel.cols[cc][i - 1], y = rel.cols[cc][i];
        if (x != y) {
          ok = x < y;
          break;
        }
      }
    }
    if (!ok) break;
    c0 = c;
  }
  int idx_bits = 0;
  while (idx_bits < 63 && (uint64_t{1} << idx_bits) < static_cast<uint64_t>(n)) ++idx_bits;
  int prefix_bits = 0;
  for (int c = 0; c < c0; ++c) prefix_bits += bits[c];
  if (c0 < ncols && prefix_bits + idx_bits <= 64) {
    std::vector<uint64_t> keys(n);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t k = 0;
      for (int c = 0; c < c0; ++c)
        if (bits[c] > 0) k = (k << bits[c]) | static_cast<uint64_t>(rel.cols[c][i] - mins[c]);
      keys[i] = (idx_bits == 0 ? 0 : (k << idx_bits)) | static_cast<uint64_t>(i);
    }
    radix_sort_u64(keys, prefix_bits, idx_bits);
    const uint64_t mask = idx_bits == 0 ? 0 : ((uint64_t{1} << idx_bits) - 1);
    std::vector<int64_t> order(n);
    for (int64_t t = 0; t < n; ++t) order[t] = static_cast<int64_t>(keys[t] & mask);
    return gather_unique(rel, order);
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
    for (int c = 0; c < ncols; ++c) out.ptrs.push_back(out.data.data() + static_cast<size_t>(c) * out.n);
    return out;
  }
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int64_t i, int64_t j) { return lex_less_cols(rel, i, j); });
  return gather_unique(rel, idx);
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
  void flush() {
    for (size_t s = 0; s < stages_.size(); ++s) {
      if (!stages_[s].has) continue;
      stages_[s].has = false;
      push_at(s + 1, stages_[s].run.data());
    }
  }

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
Records encode_stream(const Relation& rel, const Layout& lay, uint64_t init_live,
                      int64_t limit) {
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
  if (n == 0) return recs;
  start_rec(0);
  for (int64_t i = 1; i < n; ++i) {  // a_m runs, streamed from the sorted columns
    if (recs.over_limit()) return recs;  // ProvRC cannot pay any more: let the caller abort
    bool extend = m > 0;
    if (extend) {
      for (int c = 0; c < l + m - 1 && extend; ++c) extend = rel.col(c)[i] == rel.col(c)[i - 1];
      extend = extend && rel.col(l + m - 1)[i] == cur[lay.in(m - 1) + F_HI] + 1;
    }
    if (extend) {
      cur[lay.in(m - 1) + F_HI] += 1;
    } else {
      cascade.push(cur.data());
      start_rec(i);
    }
  }
  cascade.push(cur.data());
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
                        int threads) {
  const int64_t n = rel.n;
  if (threads <= 1 || lay.l == 0 || n < (int64_t{1} << 17)) return encode_stream(rel, lay, live, limit);
  std::vector<int64_t> cuts{0};
  const int64_t* b0 = rel.col(0);
  for (int t = 1; t < threads; ++t) {
    int64_t pos = std::max(cuts.back() + 1, n * t / threads);
    while (pos < n && b0[pos] == b0[pos - 1]) ++pos;
    if (pos < n) cuts.push_back(pos);
  }
  cuts.push_back(n);
  const size_t chunks = cuts.size() - 1;
  if (chunks == 1) return encode_stream(rel, lay, live, limit);
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
    pool.emplace_back([&, c] { out[c] = encode_stream(parts[c], lay, live, share(c)); });
  out[0] = encode_stream(parts[0], lay, live, share(0));
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
      Records probe = encode_stream(part, lay, live, -1);
      hopeless = static_cast<double>(probe.size()) > 1.2 * opts.abort_ratio * kSampleWindow;
    }
    if (hopeless) {
      res.aborted = true;
      return res;
    }
  }
  Records recs = encode_parallel(s, lay, live, limit, opts.threads);
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
    out.data = out.materialize();
    for (int c = 0; c < ncols; ++c) out.ptrs[c] = out.data.data() + static_cast<size_t>(c) * out.n;
  }
  return out;
}

}  // namespace dslog
