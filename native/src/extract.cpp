// Factorised extraction (see dslog/extract.hpp for the design).
#include "dslog/extract.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <utility>

namespace dslog {
namespace {

// Sets of at most this many cells are read cell by cell; bigger ones are atoms.
constexpr uint64_t kSmall = 32;
// Lazy unions are opened down to this many nodes per output cell; deeper ones become atoms.
constexpr int kWalkMax = 64;

// Coordinates of flat index f in `shape` (C order).
void unravel(int64_t f, const std::vector<int64_t>& shape, int64_t* out) {
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = shape[d];
    out[d] = f % n;
    f /= n;
  }
}

// Boxes covering a set of flat indices of `shape`, fed as increasing contiguous intervals.
// Intervals are cut into segments along the last axis, then segments are merged axis by axis
// (greedy, after a sort that makes mergeable boxes adjacent). Boxes are disjoint.
class BoxBuilder {
 public:
  explicit BoxBuilder(const std::vector<int64_t>& shape)
      : shape_(shape), d_(int(shape.size())), co_(shape.size() + 1) {}
  void interval(int64_t lo, int64_t hi) {
    if (d_ == 0) {
      any_ = true;
      return;
    }
    while (lo <= hi) {
      unravel(lo, shape_, co_.data());
      const int64_t room = shape_[size_t(d_ - 1)] - 1 - co_[size_t(d_ - 1)];
      const int64_t e = std::min(hi, lo + room);
      for (int k = 0; k < d_ - 1; ++k) {
        segs_.push_back(co_[size_t(k)]);
        segs_.push_back(co_[size_t(k)]);
      }
      segs_.push_back(co_[size_t(d_ - 1)]);
      segs_.push_back(co_[size_t(d_ - 1)] + (e - lo));
      lo = e + 1;
    }
  }
  // The cells {start + t * stride : t < count}: one box when the stride is the step of one
  // axis and the run stays inside it (a column, a lane of a reduction), else cell by cell.
  void progression(int64_t start, int64_t stride, int64_t count) {
    if (count <= 0) return;
    if (stride == 1 || count == 1 || d_ == 0) {
      interval(start, start + (stride == 1 ? count - 1 : 0));
      return;
    }
    int64_t step = 1;
    for (int k = d_ - 1; k >= 0; --k) {
      if (step == stride) {
        unravel(start, shape_, co_.data());
        if (co_[size_t(k)] + count - 1 < shape_[size_t(k)]) {
          for (int a = 0; a < d_; ++a) {
            segs_.push_back(co_[size_t(a)]);
            segs_.push_back(co_[size_t(a)] + (a == k ? count - 1 : 0));
          }
          return;
        }
        break;
      }
      step *= shape_[size_t(k)];
      if (step > stride) break;
    }
    for (int64_t t = 0; t < count; ++t) interval(start + t * stride, start + t * stride);
  }
  // The boxes, 2 * rank values each ([lo, hi] per axis); rank 0: one empty box if any.
  std::vector<int64_t> finish() {
    if (d_ == 0) return {};
    const int w = 2 * d_;
    for (int k = d_ - 2; k >= 0; --k) merge_axis(k, w);
    return std::move(segs_);
  }
  bool rank0_nonempty() const { return any_; }
  int64_t count() const { return d_ == 0 ? (any_ ? 1 : 0) : int64_t(segs_.size()) / (2 * d_); }

 private:
  void merge_axis(int k, int w) {
    const int64_t n = int64_t(segs_.size()) / w;
    if (n < 2) return;
    auto cmp_other = [&](const int64_t* x, const int64_t* y) -> int {
      for (int f = 0; f < w; ++f) {
        if (f / 2 == k) continue;
        if (x[f] != y[f]) return x[f] < y[f] ? -1 : 1;
      }
      return 0;
    };
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t* b = segs_.data();
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t c) {
      const int r = cmp_other(b + a * w, b + c * w);
      if (r != 0) return r < 0;
      return b[a * w + 2 * k] < b[c * w + 2 * k];
    });
    std::vector<int64_t> out;
    out.reserve(segs_.size());
    std::vector<int64_t> run(b + idx[0] * w, b + idx[0] * w + w);
    for (int64_t t = 1; t < n; ++t) {
      const int64_t* r = b + idx[size_t(t)] * w;
      if (cmp_other(run.data(), r) == 0 && r[2 * k] == run[size_t(2 * k + 1)] + 1) {
        run[size_t(2 * k + 1)] = r[2 * k + 1];
        continue;
      }
      out.insert(out.end(), run.begin(), run.end());
      run.assign(r, r + w);
    }
    out.insert(out.end(), run.begin(), run.end());
    segs_.swap(out);
  }
  const std::vector<int64_t>& shape_;
  int d_;
  std::vector<int64_t> co_;
  std::vector<int64_t> segs_;
  bool any_ = false;
};

// Output cells of a group: arithmetic runs (start, stride, count), appended in C order.
struct OutRuns {
  std::vector<std::array<int64_t, 3>> runs;
  int64_t last = -1;
  void add(int64_t i) {
    if (i == last) return;
    last = i;
    if (!runs.empty()) {
      auto& r = runs.back();
      if (r[2] == 1) {
        r[1] = i - r[0];
        r[2] = 2;
        return;
      }
      if (i == r[0] + r[1] * r[2]) {
        ++r[2];
        return;
      }
    }
    runs.push_back({i, 1, 1});
  }
  // add(i), add(i + 1), ..., add(i + n - 1).
  void add_range(int64_t i, int64_t n) {
    if (n <= 0) return;
    add(i);
    if (n == 1) return;
    auto& r = runs.back();  // its last output cell is i
    if (r[2] == 1) r[1] = 1;
    if (r[1] == 1) {
      r[2] += n - 1;
    } else {
      runs.push_back({i + 1, 1, n - 1});
    }
    last = i + n - 1;
  }
};

// A big set and the output cells that reach it (an atom, or the union of several atoms).
struct Sink {
  bool prog = false;
  uint64_t start = 0, stride = 1, count = 0;  // prog: {start + t * stride : t < count}
  std::vector<uint64_t> cells;                // else: sorted, duplicate-free
  uint64_t lo = 0, hi = 0;                    // hull
  OutRuns outs;
  // A bitmap over the hull, built on the first membership test of a dense enough set (a
  // binary search in a big set costs a cache miss per step, for every output cell).
  mutable std::vector<uint64_t> bits;
  mutable bool bits_tried = false;
  // Cells found on the first membership test to be an arithmetic progression (a column of a
  // union of lanes, e.g. standardize's mean ∪ std of one column): tested by its step, never
  // by a binary search (a cache miss per step, for every output cell).
  mutable uint64_t step = 0;
  bool contains(uint64_t c) const {
    if (c < lo || c > hi) return false;
    if (prog) return stride == 1 || (c - start) % stride == 0;
    if (!bits_tried) {
      bits_tried = true;
      const uint64_t span = hi - lo + 1;
      if (cells.size() >= 64 && span <= 64 * uint64_t(cells.size())) {
        bits.assign(size_t((span + 63) / 64), 0);
        for (uint64_t x : cells) bits[size_t((x - lo) >> 6)] |= uint64_t{1} << ((x - lo) & 63);
      } else if (cells.size() >= 2) {
        const uint64_t d = cells[1] - cells[0];
        bool arith = true;
        for (size_t t = 2; t < cells.size() && arith; ++t) arith = cells[t] - cells[t - 1] == d;
        if (arith) step = d;
      }
    }
    if (!bits.empty()) return (bits[size_t((c - lo) >> 6)] >> ((c - lo) & 63)) & 1;
    if (step != 0) return (c - lo) % step == 0;
    return std::binary_search(cells.begin(), cells.end(), c);
  }
  // The smallest cell of the set at or above c (UINT64_MAX: none).
  uint64_t next_cell(uint64_t c) const {
    if (c > hi) return UINT64_MAX;
    if (c <= lo) return lo;
    if (prog) {
      const uint64_t t = (c - start + stride - 1) / stride;
      return t < count ? start + t * stride : UINT64_MAX;
    }
    auto it = std::lower_bound(cells.begin(), cells.end(), c);
    return it == cells.end() ? UINT64_MAX : *it;
  }
  template <class F>
  void each_interval(F&& f) const {  // contiguous intervals of cells, increasing
    if (prog) {
      if (stride == 1) {
        f(start, start + count - 1);
        return;
      }
      for (uint64_t t = 0; t < count; ++t) f(start + t * stride, start + t * stride);
      return;
    }
    each_run(f);
  }
  template <class F>
  void each_run(F&& f) const {  // the sorted cells as maximal intervals
    size_t i = 0;
    while (i < cells.size()) {
      size_t e = i + 1;
      while (e < cells.size() && cells[e] == cells[e - 1] + 1) ++e;
      f(cells[i], cells[e - 1]);
      i = e;
    }
  }
};

// Open-addressing map uint64 -> uint32 (keys never 0).
class IdMap {
 public:
  uint32_t* find(uint64_t k) {
    if (slots_.empty()) return nullptr;
    size_t m = slots_.size() - 1;
    for (size_t s = hash(k) & m;; s = (s + 1) & m) {
      if (slots_[s].first == 0) return nullptr;
      if (slots_[s].first == k) return &slots_[s].second;
    }
  }
  void put(uint64_t k, uint32_t v) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    size_t m = slots_.size() - 1;
    size_t s = hash(k) & m;
    while (slots_[s].first != 0 && slots_[s].first != k) s = (s + 1) & m;
    if (slots_[s].first == 0) ++used_;
    slots_[s] = {k, v};
  }

 private:
  static size_t hash(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 17); }
  void grow() {
    std::vector<std::pair<uint64_t, uint32_t>> old;
    old.swap(slots_);
    slots_.assign(std::max<size_t>(64, old.size() * 2), {0, 0});
    used_ = 0;
    for (auto& e : old)
      if (e.first != 0) put(e.first, e.second);
  }
  std::vector<std::pair<uint64_t, uint32_t>> slots_;
  size_t used_ = 0;
};

// Pairs (o0 + t, c0 + t * step), t < len: step 1 is a diagonal (element-wise, a shifted
// neighbour), step 0 one input cell for consecutive output cells (a broadcast scalar). A run
// of one pair has no step yet.
struct Run {
  int64_t o0;
  uint64_t c0;
  int64_t len;
  uint64_t end;  // end of the run's input: a run never crosses into the next input
  size_t j;
  int64_t step;
};

class Extractor {
 public:
  Extractor(Arena& ar, const std::vector<int64_t>& out_shape,
            const std::vector<std::vector<int64_t>>& in_shapes, bool considered)
      : ar_(ar),
        out_shape_(out_shape),
        in_shapes_(in_shapes),
        considered_(considered),
        k_(in_shapes.size()),
        l_(int(out_shape.size())),
        recs_(k_),
        loose_o_(k_),
        loose_a_(k_),
        touched_(k_, false) {
    const auto& bases = ar.bases();
    for (size_t j = 0; j < k_; ++j) ends_.push_back(bases[j] + ar.sizes()[j]);
    bases_ = bases;
    ncells_ = ar.n_cells();
    oc_.resize(size_t(l_) + 1);
    ac_.resize(16);
  }

  // Copy the values of the cells the scan reads along with their handles (see
  // extract_tables in dslog/extract.hpp).
  void copy_values_to(const char* vsrc, double* values, std::ptrdiff_t stride) {
    vsrc_ = vsrc;
    vdst_ = values;
    vstride_ = stride;
  }

  void scan(const char* data, std::ptrdiff_t stride, int64_t ncell, ExtractStats* st) {
    Handle prev = 0;
    bool have_prev = false;
    vend_ = vdst_ ? 0 : ncell;
    for (int64_t i = 0; i < ncell; ++i) {
      if (i >= vend_) values_upto(std::min(ncell, i + kValueBlock));
      Handle h;
      std::memcpy(&h, data + i * stride, sizeof(h));
      if (h == 0) {
        retire(i);
        continue;
      }
      if (hnd::kind(h) == hnd::kCell) {
        // The common case (element-wise): one cell extending the one active run.
        const uint64_t c = hnd::payload(h);
        if (hnd::epoch(h) != ar_.epoch() || c >= ncells_) throw BadHandle(h);
        if (active_.size() == 1) {
          Run& r = active_[0];
          if (r.o0 + r.len == i && r.step == 1 && r.c0 + uint64_t(r.len) == c && c < r.end) {
            // h is checked; the next cells continue the run while their handles are h + 1,
            // h + 2, ... (same epoch and kind, the next cell: c + t < r.end <= ncells_ < 2^34
            // never carries out of the payload). A tight compare, no decoding per cell.
            const int64_t more = follow(data, stride, i, ncell, h, r.end - 1 - c);
            r.len += 1 + more;
            i += more;
            continue;
          }
        }
        feed(i, &c, 1);
        continue;
      }
      if (hnd::kind(h) == hnd::kCell2 && active_.size() == 2) {
        // Element-wise binary operations: two cells extending the two active runs.
        const uint64_t c = hnd::payload(h), c2 = c + ar_.cell2_delta(h);
        Run& r0 = active_[0];
        Run& r1 = active_[1];
        if (c2 < ncells_ && r0.o0 + r0.len == i && r1.o0 + r1.len == i && r0.step == 1 &&
            r1.step == 1 && r0.c0 + uint64_t(r0.len) == c && r1.c0 + uint64_t(r1.len) == c2 &&
            c < r0.end && c2 < r1.end) {
          // As for one cell: h + t is {c + t, c2 + t} (the same distance entry).
          const int64_t more =
              follow(data, stride, i, ncell, h, std::min(r0.end - 1 - c, r1.end - 1 - c2));
          r0.len += 1 + more;
          r1.len += 1 + more;
          i += more;
          continue;
        }
      }
      if (hnd::kind(h) == hnd::kGroup && !considered_) {
        // Consecutive members of one group (np.sum(x, axis=0): output column j holds member
        // j, the column's progression): with a column step of one cell, the members j..j+m
        // are `count` diagonal runs, closed here as such, instead of one sink per member.
        const int64_t m = group_members(data, stride, i, ncell, h);
        if (m > 0) {
          i += m - 1;
          have_prev = false;
          continue;
        }
      }
      if (hnd::kind(h) == hnd::kCellSet) {
        // {c} ∪ S with S a shared set of the arena's table (an element-wise operation with a
        // broadcast scalar: min-max scaling): S's sinks once per entry, c fed as a run; a run
        // of consecutive cells with the same S extends with one compare per cell.
        const uint64_t c = hnd::with_cell(h);
        if (!ar_.check(h)) throw BadHandle(h);
        const WithEntry& w = with_entry(h);
        for (uint32_t sk : w.sinks) sinks_[sk].outs.add(i);
        cur2_.assign(w.small.begin(), w.small.end());
        size_t own_fed = 0;
        for (uint64_t off : w.offs) {
          if (covered(w.sinks, c + off)) continue;
          cur2_.push_back(c + off);
          ++own_fed;
        }
        if (!w.small.empty()) {
          std::sort(cur2_.begin(), cur2_.end());
          cur2_.erase(std::unique(cur2_.begin(), cur2_.end()), cur2_.end());
        }
        feed(i, cur2_.data(), cur2_.size());
        have_prev = false;
        if (w.small.empty() && own_fed == w.offs.size() && active_.size() == own_fed) {
          // Every own cell is the tail of its own diagonal run (each active run reached i, by
          // one step or as its first pair): while the next cells hold h + 1, h + 2, ... (the
          // same entry, every cell one further) each run continues by one, up to the end of
          // its input and to the next cell of S (which S's sinks hold: never fed again).
          uint64_t room = UINT64_MAX;
          bool diagonal = true;
          for (const Run& r : active_) {
            if (r.o0 + r.len != i + 1 || (r.len > 1 && r.step != 1)) {
              diagonal = false;
              break;
            }
            room = std::min(room, r.end - 1 - (r.c0 + uint64_t(r.len - 1)));
          }
          if (diagonal && room > 0) {
            for (uint32_t sk : w.sinks)
              for (uint64_t off : w.offs) {
                const uint64_t nx = sinks_[sk].next_cell(c + off + 1);
                if (nx != UINT64_MAX) room = std::min(room, nx - (c + off) - 1);
              }
            const int64_t more = room > 0 ? follow(data, stride, i, ncell, h, room) : 0;
            if (more > 0) {
              for (uint32_t sk : w.sinks) sinks_[sk].outs.add_range(i + 1, more);
              for (Run& r : active_) {
                r.step = 1;
                r.len += more;
              }
              i += more;
            }
          }
        }
        continue;
      }
      if (hnd::kind(h) == hnd::kJoin && shared_side(h)) {
        // {own cells} ∪ the small set the previous cell's union also held (min-max scaling:
        // {c, argmin} ∪ {argmax, argmin}): that set is one sink (its output group times its
        // cells, a few records in all), only the own cells outside it are fed as runs.
        cur_small_.clear();
        if (own_cells(own_, cur_small_)) {
          size_t w = 0;
          for (uint64_t c : cur_small_)
            if (!sinks_[rep_sink_].contains(c)) cur_small_[w++] = c;
          cur_small_.resize(w);
          std::sort(cur_small_.begin(), cur_small_.end());
          cur_small_.erase(std::unique(cur_small_.begin(), cur_small_.end()), cur_small_.end());
          sinks_[rep_sink_].outs.add(i);
        } else {  // own holds more than cells: the general analysis, the shared set an atom
          small_.clear();
          atoms_.clear();
          walk(own_, small_, atoms_, stack_);
          atoms_.push_back(rep_sink_);
          normalise_sets(small_, atoms_);
          sinks_for(atoms_, cur_sinks_);
          for (uint64_t c : small_)
            if (!covered(cur_sinks_, c)) cur_small_.push_back(c);
          for (uint32_t sk : cur_sinks_) sinks_[sk].outs.add(i);
        }
        feed(i, cur_small_.data(), cur_small_.size());
        have_prev = false;
        continue;
      }
      if (hnd::kind(h) == hnd::kJoin && (quick_spine(h) || spine(h))) {
        // {a few cells} ∪ shared sets (x - x.mean(), standardize, softmax): the shared part
        // is analysed once per distinct combination, the cells checked against it.
        const SpineEntry& e = quick_hit_ ? spines_[quick_entry_] : spine_entry();
        if (!quick_hit_ && quick_shape_) {
          quick_other_ = spine_others_[0];
          quick_entry_ = size_t(&e - spines_.data());
        }
        cur2_.clear();
        for (uint64_t c : spine_cells_)
          if (!covered(e.sinks, c)) cur2_.push_back(c);
        cur2_.insert(cur2_.end(), e.small.begin(), e.small.end());
        if (cur2_.size() > 1) {
          std::sort(cur2_.begin(), cur2_.end());
          cur2_.erase(std::unique(cur2_.begin(), cur2_.end()), cur2_.end());
        }
        for (uint32_t sk : e.sinks) sinks_[sk].outs.add(i);
        feed(i, cur2_.data(), cur2_.size());
        have_prev = false;
        continue;
      }
      if (hnd::kind(h) == hnd::kJoin && !quick_hit_ && spine_only_cells_) {
        // A small union of cells: what analyse() would make of it, without a second walk.
        cur2_.assign(spine_cells_.begin(), spine_cells_.end());
        std::sort(cur2_.begin(), cur2_.end());
        cur2_.erase(std::unique(cur2_.begin(), cur2_.end()), cur2_.end());
        feed(i, cur2_.data(), cur2_.size());
        have_prev = false;
        continue;
      }
      if (have_prev && h == prev && cur_small_.empty() && active_.empty()) {
        // One set repeated (x - x.mean(): every output cell holds the mean's set): the run of
        // equal handles joins the same sinks, with nothing to feed.
        int64_t e = i + 1;
        for (const char* p = data + e * stride; e < ncell; ++e, p += stride) {
          Handle g;
          std::memcpy(&g, p, sizeof(g));
          if (g != h) break;
        }
        for (uint32_t s : cur_sinks_)
          for (int64_t t = i; t < e; ++t) sinks_[s].outs.add(t);
        i = e - 1;
        continue;
      }
      if ((!have_prev || h != prev) && hnd::kind(h) != hnd::kPair) {
        // A shared set seen before as an atom (standardize: every row of output cells holds
        // the handles of the column statistics): its sink, without a second analysis. The
        // atom was made from these very bits, so they are valid, and its sink holds exactly
        // the set's cells.
        if (const uint32_t* sk = atom_ids_.find(h)) {
          sinks_[*sk].outs.add(i);
          feed(i, nullptr, 0);
          have_prev = false;
          continue;
        }
      }
      if (!have_prev || h != prev) {
        if (!ar_.check(h)) throw BadHandle(h);
        analyse(considered_ ? ar_.considered(h) : ar_.contrib(h));
        prev = h;
        have_prev = true;
      }
      for (uint32_t s : cur_sinks_) sinks_[s].outs.add(i);
      feed(i, cur_small_.data(), cur_small_.size());
    }
    values_upto(ncell);
    retire(ncell);
    if (st) {
      st->cells += ncell;
      st->atoms += int64_t(n_atoms_);
      st->groups += int64_t(sinks_.size() - n_atoms_);
      st->runs += runs_;
    }
  }

  // The group fast path of scan(): how many output cells from i hold the members h, h + 1,
  // ... of one group (at least 2, a column step of 1, every cell inside one input), with
  // their runs closed; 0 (nothing done) when that does not apply.
  int64_t group_members(const char* data, std::ptrdiff_t stride, int64_t i, int64_t ncell,
                        Handle h) {
    if (!ar_.check(h)) throw BadHandle(h);
    const GroupNode& g = ar_.group_of(h);
    const uint64_t j0 = hnd::payload(h) & hnd::kMemberMask;
    if (g.cstep != 1 || g.count < 2 || g.stride == 0) return 0;
    // members up to the group's last, and (for the values) the copied block
    const int64_t room = int64_t(std::min<uint64_t>(g.ncols - 1 - j0, uint64_t(ncell)));
    // Only for members read once: a group whose members other output cells hold too (the
    // column statistics of `(x - x.mean(0)) / x.std(0)`, repeated on every row) is one sink
    // per member, its output cells a few boxes, not a run per row and member.
    // So: the whole group from its first member, in one stretch, its first member never read
    // before (as an atom of the sink path) and not again right after it.
    const uint64_t gid = (hnd::payload(h) >> hnd::kMemberBits) + 1;
    if (j0 != 0 || groups_run_.find(gid) != nullptr || atom_ids_.find(h) != nullptr) return 0;
    const int64_t more = follow(data, stride, i, ncell, h, uint64_t(room));
    const int64_t m = 1 + more;
    if (m < 2 || uint64_t(m) != g.ncols) return 0;
    if (i + m < ncell) {
      Handle next;
      std::memcpy(&next, data + (i + m) * stride, sizeof next);
      if (next == h) return 0;
    }
    groups_run_.put(gid, 1);
    const uint64_t first = g.start0 + j0;  // member j0's first cell (cstep 1)
    uint64_t last_start;
    if (__builtin_mul_overflow(g.count - 1, g.stride, &last_start) ||
        __builtin_add_overflow(last_start, first, &last_start))
      throw ForgedCell();
    const uint64_t last = last_start + uint64_t(m - 1);  // the largest cell
    if (last >= ncells_) throw ForgedCell();
    const size_t j = k_ == 1 ? 0 : ar_.input_of(first);
    if (j + 1 < k_ && last >= ends_[j]) return 0;  // crosses into the next input
    retire(i);
    for (uint64_t k = 0; k < g.count; ++k)
      close(Run{i, first + k * g.stride, m, ends_[j], j, 1});
    return m;
  }

  // How many cells after output cell i (at most `room`, and not past the last cell) hold the
  // handles h + 1, h + 2, ...: the continuation of an element-wise run.
  // Stops at the end of the block of copied values (the next iteration copies the next
  // block and follows on), so values and handles are read together.
  int64_t follow(const char* data, std::ptrdiff_t stride, int64_t i, int64_t ncell, Handle h,
                 uint64_t room) const {
    const int64_t n = std::min<int64_t>(std::min(ncell, vend_) - i - 1,
                                        int64_t(std::min<uint64_t>(room, uint64_t(ncell))));
    const char* p = data + (i + 1) * stride;
    int64_t t = 0;
    for (Handle want = h + 1; t < n; ++t, ++want, p += stride) {
      Handle g;
      std::memcpy(&g, p, sizeof(g));
      if (g != want) break;
    }
    return t;
  }

  // Values of cells [vend_, upto) (nothing without a value buffer).
  void values_upto(int64_t upto) {
    if (!vdst_) return;
    // Locals: the stores through a double* could alias this object's fields, so a loop over
    // the members would reload all three per cell (half the time of an element-wise scan).
    double* const dst = vdst_;
    const char* const src = vsrc_;
    const std::ptrdiff_t stride = vstride_;
    for (int64_t t = vend_; t < upto; ++t) std::memcpy(dst + t, src + t * stride, 8);
    vend_ = std::max(vend_, upto);
  }

  std::vector<ProvRCTable> finish(ExtractStats* st) {
    for (uint32_t s = 0; s < sinks_.size(); ++s) sink_records(sinks_[s]);
    std::vector<ProvRCTable> out;
    for (size_t j = 0; j < k_; ++j) {
      const int m = int(in_shapes_[j].size());
      if (l_ + m == 0) {
        ProvRCTable t;
        t.rows = touched_[j] ? 1 : 0;
        out.push_back(std::move(t));
        continue;
      }
      loose_records(j, st);
      if (st) st->records += int64_t(recs_[j].size()) / record_width(l_, m);
      out.push_back(merge_records(l_, m, std::move(recs_[j]), true));
    }
    return out;
  }

 private:
  // Split the set h (not a pair) into small cells and atoms; then decide, for this output
  // cell, the sinks it joins and its small cells outside them (cur_sinks_, cur_small_).
  void analyse(Handle h) {
    small_.clear();
    atoms_.clear();
    walk(h, small_, atoms_, stack_);
    normalise_sets(small_, atoms_);
    sinks_for(atoms_, cur_sinks_);
    cur_small_.clear();
    for (uint64_t c : small_)
      if (!covered(cur_sinks_, c)) cur_small_.push_back(c);
  }

  // Cells and atoms of the set `root` (appended, unsorted).
  void walk(Handle root, std::vector<uint64_t>& small, std::vector<uint32_t>& atoms,
            std::vector<Handle>& stack) {
    stack.assign(1, root);
    int visited = 0;
    while (!stack.empty()) {
      const Handle t = stack.back();
      stack.pop_back();
      if (t == 0) continue;
      // The output cell's own set is read cell by cell when small; a set reached through a
      // union or a reference is shared by construction (e.g. a row sum broadcast over the
      // row), so it is an atom whatever its size, and its output cells form a group.
      const bool top = visited++ == 0;
      switch (hnd::kind(t)) {
        case hnd::kCell:
          small.push_back(hnd::payload(t));
          break;
        case hnd::kCell2: {
          const uint64_t c = hnd::payload(t);
          small.push_back(c);
          small.push_back(c + ar_.cell2_delta(t));
          break;
        }
        case hnd::kProg:
        case hnd::kGroup: {
          const ProgNode p = ar_.progression(t);
          if (!top || p.count() > kSmall) {
            atoms.push_back(atom(t));
            break;
          }
          for (uint64_t c = p.start; c < p.next; c += p.stride) small.push_back(c);
          break;
        }
        case hnd::kList: {
          if (ar_.list_has_refs(t)) {
            // A list with references (an accumulator over `x - x.mean()`-like elements: its
            // lane's cells plus shared sets) is decomposed once, its cells that the shared
            // sets hold dropped, and reused by every output cell that reaches it.
            const ListMemo& mm = list_memo(t);
            small.insert(small.end(), mm.small.begin(), mm.small.end());
            atoms.insert(atoms.end(), mm.atoms.begin(), mm.atoms.end());
            break;
          }
          auto [d, n] = ar_.list_entries(t);
          if (!top || n > kSmall) {
            atoms.push_back(atom(t));
            break;
          }
          small.insert(small.end(), d, d + n);
          break;
        }
        case hnd::kJoin: {
          if (visited > kWalkMax) {
            atoms.push_back(atom(t));
            break;
          }
          const auto s = ar_.join_sides(t);
          stack.push_back(s[1]);
          stack.push_back(s[0]);
          break;
        }
        case hnd::kCellSet:  // its cells, and its shared set (an atom unless cells or union)
          ar_.each_own_cell(t, [&](uint64_t c) { small.push_back(c); });
          stack.push_back(ar_.with_node(t).shared);
          break;
        default:  // a pair inside a union: only forged bytes put one there
          throw ForgedHandle(t);
      }
    }
  }

  // The lazy union h (checked) when one side is the small set (at most kSmall cells: big
  // shared sets go through spine()) that a side of the previous cell's union also was: the
  // other side in own_, the set's sink in rep_sink_. The first repetition makes the set the
  // shared one; a union without it forgets it.
  bool shared_side(Handle h) {
    if (!ar_.check(h)) throw BadHandle(h);
    const auto sd = ar_.join_sides(h);
    const Handle last0 = last_sides_[0], last1 = last_sides_[1];
    last_sides_ = sd;
    if (rep_ == 0 || (sd[0] != rep_ && sd[1] != rep_)) {
      rep_ = 0;
      Handle cand = 0;
      if (sd[1] == last1 || sd[1] == last0)
        cand = sd[1];
      else if (sd[0] == last0 || sd[0] == last1)
        cand = sd[0];
      if (cand == 0 || !small_shared(cand)) return false;
      rep_ = cand;
      rep_sink_ = atom(cand);
    }
    own_ = sd[0] == rep_ ? sd[1] : sd[0];
    return true;
  }
  // A set the shared-side path keeps as a sink: a few cells (cells, two cells, a union of
  // such), never a big shared set (spine() and the atoms handle those).
  static bool small_shared(Handle t) {
    switch (hnd::kind(t)) {
      case hnd::kCell:
      case hnd::kCell2:
        return true;
      case hnd::kJoin:
        return hnd::est(t) <= kSmall;
      default:
        return false;
    }
  }
  // The cells of `own` when it is a cell, two cells or a union of two of those (appended);
  // false (nothing appended) otherwise.
  bool own_cells(Handle own, std::vector<uint64_t>& out) {
    auto leaf = [&](Handle t) -> bool {
      if (hnd::kind(t) == hnd::kCell) {
        out.push_back(hnd::payload(t));
        return true;
      }
      if (hnd::kind(t) == hnd::kCell2) {
        const uint64_t c = hnd::payload(t);
        out.push_back(c);
        out.push_back(c + ar_.cell2_delta(t));
        return true;
      }
      return false;
    };
    if (own == 0) return true;
    if (leaf(own)) {
      // a cell's own handle is not validated by its kind: only its id, here
      for (uint64_t c : out)
        if (c >= ncells_) throw ForgedCell();
      return true;
    }
    if (hnd::kind(own) != hnd::kJoin) return false;
    const auto sd = ar_.join_sides(own);
    if (!leaf(sd[0]) || !leaf(sd[1])) {
      out.clear();
      return false;
    }
    for (uint64_t c : out)
      if (c >= ncells_) throw ForgedCell();
    return true;
  }

  // The lazy union h when it is {one cell} ∪ the shared set of the previous such union
  // (x - x.mean(): every output cell's set is its own cell joined with the same mean): the
  // spine without opening it again or looking its shared set up. False otherwise (then
  // spine() decides).
  bool quick_spine(Handle h) {
    quick_hit_ = false;
    if (!ar_.check(h)) throw BadHandle(h);
    if (quick_other_ == 0) return false;
    const auto sd = ar_.join_sides(h);
    const bool first = hnd::kind(sd[0]) == hnd::kCell;
    if (!first && hnd::kind(sd[1]) != hnd::kCell) return false;
    if ((first ? sd[1] : sd[0]) != quick_other_) return false;
    const uint64_t c = hnd::payload(first ? sd[0] : sd[1]);
    if (c >= ncells_) throw ForgedCell();
    spine_cells_.assign(1, c);
    quick_hit_ = true;
    return true;
  }

  // The lazy union h as cells (kCell, kCell2 leaves) and at most kSpineMax other sets,
  // opening at most 8 unions; false when it is not of that shape.
  static constexpr size_t kSpineMax = 4;
  bool spine(Handle h) {
    if (!ar_.check(h)) throw BadHandle(h);
    spine_cells_.clear();
    spine_others_.clear();
    spine_only_cells_ = false;
    Handle st[16];
    int top = 0, opened = 0;
    st[top++] = h;
    while (top > 0) {
      const Handle t = st[--top];
      if (t == 0) continue;
      switch (hnd::kind(t)) {
        case hnd::kCell:
          spine_cells_.push_back(hnd::payload(t));
          break;
        case hnd::kCell2: {
          const uint64_t c = hnd::payload(t);
          spine_cells_.push_back(c);
          spine_cells_.push_back(c + ar_.cell2_delta(t));
          break;
        }
        case hnd::kJoin: {
          if (++opened > 8 || top + 2 > 16) return false;
          const auto sd = ar_.join_sides(t);
          st[top++] = sd[1];
          st[top++] = sd[0];
          break;
        }
        case hnd::kCellSet:
          if (++opened > 8 || top + 1 > 16) return false;
          ar_.each_own_cell(t, [&](uint64_t c) { spine_cells_.push_back(c); });
          st[top++] = ar_.with_node(t).shared;
          break;
        case hnd::kList:
        case hnd::kProg:
        case hnd::kGroup:
          if (spine_others_.size() == kSpineMax) return false;
          spine_others_.push_back(t);
          break;
        default:
          throw ForgedHandle(t);
      }
    }
    if (spine_others_.empty()) {
      // Cells only (min-max scaling: {c, argmin} ∪ {argmax, argmin}): read here, once.
      for (uint64_t c : spine_cells_)
        if (c >= ncells_) throw ForgedCell();
      spine_only_cells_ = true;
      return false;
    }
    quick_shape_ = opened == 1 && spine_cells_.size() == 1 && spine_others_.size() == 1;
    for (uint64_t c : spine_cells_)
      if (c >= ncells_) throw ForgedCell();
    std::sort(spine_others_.begin(), spine_others_.end());
    spine_others_.erase(std::unique(spine_others_.begin(), spine_others_.end()),
                        spine_others_.end());
    return true;
  }

  struct SpineEntry {
    std::vector<Handle> key;
    std::vector<uint32_t> sinks;
    std::vector<uint64_t> small;  // cells of the shared sets outside their sinks
    uint32_t next = UINT32_MAX;
  };

  struct WithEntry {
    std::vector<uint32_t> sinks;
    std::vector<uint64_t> small;  // cells of the shared set outside its sinks
    std::vector<uint64_t> offs;   // the own cells' offsets from the first (0 first)
  };
  // The analysis of the shared set S of kCellSet handle h (checked), once per entry: S is an
  // atom, or a list with references decomposed as walk() does.
  const WithEntry& with_entry(Handle h) {
    const Handle key = hnd::with_entry_bits(h);
    if (uint32_t* v = with_ids_.find(key)) return withs_[*v];
    WithEntry e;
    const WithNode& node = ar_.with_node(h);
    e.offs.push_back(0);
    e.offs.insert(e.offs.end(), node.rel, node.rel + node.nrel);
    std::vector<uint32_t> atoms;
    std::vector<Handle> stack;
    if (node.shared != 0) shared_parts(node.shared, e.small, atoms, stack);
    normalise_sets(e.small, atoms);
    sinks_for(atoms, e.sinks);
    // Entries holding the same few cells share one sink ({m} ∪ d and ({m} ∪ {m}) ∪ d in
    // min-max scaling: the minimum's own cell reaches the same cells by another handle), so
    // their output cells form one group and one box.
    if (e.sinks.size() == 1) e.sinks[0] = same_cells_sink(e.sinks[0]);
    drop_covered(e.small, e.sinks);
    withs_.push_back(std::move(e));
    with_ids_.put(key, uint32_t(withs_.size() - 1));
    return withs_.back();
  }

  // The first sink of with_entry() holding exactly the cells of sink `sk` when it has at most
  // kSmall cells (else sk itself).
  uint32_t same_cells_sink(uint32_t sk) {
    std::vector<uint64_t> cells;
    const Sink& s = sinks_[sk];
    bool small = true;
    s.each_interval([&](uint64_t lo, uint64_t hi) {
      for (uint64_t c = lo; c <= hi && small; ++c) {
        cells.push_back(c);
        small = cells.size() <= kSmall;
      }
    });
    if (!small) return sk;
    for (const auto& [known, id] : small_sinks_)
      if (known == cells) return id;
    small_sinks_.emplace_back(std::move(cells), sk);
    return sk;
  }

  // The analysis of the shared sets spine_others_ (reached through a union: never read as
  // the output cell's own small set), cached by the set of handles.
  const SpineEntry& spine_entry() {
    uint64_t key = 0x2545F4914F6CDD1Dull;
    for (Handle x : spine_others_) key = (key ^ x) * 0x100000001b3ull + 0x9E3779B97F4A7C15ull;
    key |= 1;
    uint32_t* first = spine_ids_.find(key);
    if (first)
      for (uint32_t g = *first; g != UINT32_MAX; g = spines_[g].next)
        if (spines_[g].key == spine_others_) return spines_[g];
    SpineEntry e;
    e.key = spine_others_;
    std::vector<uint32_t> atoms;
    std::vector<Handle> stack;
    for (Handle x : spine_others_) shared_parts(x, e.small, atoms, stack);
    normalise_sets(e.small, atoms);
    sinks_for(atoms, e.sinks);
    drop_covered(e.small, e.sinks);
    e.next = first ? *first : UINT32_MAX;
    spines_.push_back(std::move(e));
    spine_ids_.put(key, uint32_t(spines_.size() - 1));
    return spines_.back();
  }

  struct ListMemo {
    std::vector<uint64_t> small;
    std::vector<uint32_t> atoms;
  };

  const ListMemo& list_memo(Handle t) {
    if (uint32_t* v = memo_ids_.find(t)) return memos_[*v];
    ListMemo mm;
    auto [d, n] = ar_.list_entries(t);
    const size_t direct = size_t(std::lower_bound(d, d + n, kRefMin) - d);
    mm.small.assign(d, d + direct);
    const std::vector<Handle> refs(d + direct, d + n);  // copied: walking may touch lists
    std::vector<Handle> stack;
    for (Handle r : refs) walk(r, mm.small, mm.atoms, stack);
    normalise_sets(mm.small, mm.atoms);
    std::vector<uint32_t> sinks;
    sinks_for(mm.atoms, sinks);
    drop_covered(mm.small, sinks);
    memos_.push_back(std::move(mm));
    memo_ids_.put(t, uint32_t(memos_.size() - 1));
    return memos_.back();
  }

  // A set reached through a union or a table entry (shared by construction): one atom
  // whatever its size, or, for a list with references, its cells and atoms as walk() splits
  // them (appended).
  void shared_parts(Handle x, std::vector<uint64_t>& small, std::vector<uint32_t>& atoms,
                    std::vector<Handle>& stack) {
    if (hnd::kind(x) == hnd::kList && ar_.list_has_refs(x)) {
      walk(x, small, atoms, stack);
      return;
    }
    atoms.push_back(atom(x));
  }

  // Drop the cells of `small` that the sinks hold (they reach the output through the sinks).
  void drop_covered(std::vector<uint64_t>& small, const std::vector<uint32_t>& sinks) const {
    size_t w = 0;
    for (uint64_t c : small)
      if (!covered(sinks, c)) small[w++] = c;
    small.resize(w);
  }

  void normalise_sets(std::vector<uint64_t>& small, std::vector<uint32_t>& atoms) {
    std::sort(small.begin(), small.end());
    small.erase(std::unique(small.begin(), small.end()), small.end());
    if (!small.empty() && small.back() >= ncells_) throw ForgedCell();
    std::sort(atoms.begin(), atoms.end());
    atoms.erase(std::unique(atoms.begin(), atoms.end()), atoms.end());
  }

  // The sinks of a cell reaching the (sorted) atoms: the atoms themselves when their hulls
  // are pairwise disjoint, else the one union sink of them all.
  void sinks_for(const std::vector<uint32_t>& atoms, std::vector<uint32_t>& out) {
    out = atoms;
    if (atoms.size() <= 1) return;
    by_lo_ = atoms;
    std::sort(by_lo_.begin(), by_lo_.end(),
              [&](uint32_t a, uint32_t b) { return sinks_[a].lo < sinks_[b].lo; });
    bool disjoint = true;
    for (size_t t = 1; t < by_lo_.size() && disjoint; ++t)
      disjoint = sinks_[by_lo_[t - 1]].hi < sinks_[by_lo_[t]].lo;
    if (!disjoint) out.assign(1, union_sink(atoms));
  }

  bool covered(const std::vector<uint32_t>& sinks, uint64_t c) const {
    for (uint32_t s : sinks)
      if (sinks_[s].contains(c)) return true;
    return false;
  }

  // The sink of atom h (flattened once).
  uint32_t atom(Handle h) {
    if (uint32_t* v = atom_ids_.find(h)) return *v;
    Sink s;
    const CellSeq q = ar_.seq(h, scratch_);
    if (q.data == nullptr) {
      s.prog = true;
      s.start = q.start;
      s.stride = q.stride;
      s.count = q.count;
      uint64_t last;
      if (q.count == 0 || __builtin_mul_overflow(q.count - 1, q.stride, &last) ||
          __builtin_add_overflow(last, q.start, &last) || last >= ncells_)
        throw ForgedCell();
      s.lo = q.start;
      s.hi = last;
      if (q.stride == 0) throw ForgedCell();
    } else {
      if (q.count == 0) throw ForgedCell();
      s.cells.assign(q.data, q.data + q.count);
      if (s.cells.back() >= ncells_) throw ForgedCell();
      s.lo = s.cells.front();
      s.hi = s.cells.back();
    }
    const uint32_t id = uint32_t(sinks_.size());
    sinks_.push_back(std::move(s));
    atom_ids_.put(h, id);
    ++n_atoms_;
    return id;
  }

  // The union sink of the (sorted) atoms_: one per distinct atom set (hash, then compare).
  uint32_t union_sink(const std::vector<uint32_t>& atoms) {
    uint64_t key = 0x51ed270b27a5f1ull;
    for (uint32_t a : atoms) key = (key ^ a) * 0x100000001b3ull + 0x9E3779B97F4A7C15ull;
    key |= 1;
    uint32_t* first = group_ids_.find(key);
    if (first)
      for (uint32_t g = *first; g != UINT32_MAX; g = group_next_[g])
        if (group_atoms_[g] == atoms) return group_sink_[g];
    Sink s;
    for (uint32_t a : atoms) {
      const Sink& x = sinks_[a];
      x.each_interval([&](uint64_t lo, uint64_t hi) {
        for (uint64_t c = lo; c <= hi; ++c) s.cells.push_back(c);
      });
    }
    std::sort(s.cells.begin(), s.cells.end());
    s.cells.erase(std::unique(s.cells.begin(), s.cells.end()), s.cells.end());
    s.lo = s.cells.front();
    s.hi = s.cells.back();
    const uint32_t id = uint32_t(sinks_.size());
    sinks_.push_back(std::move(s));
    const uint32_t g = uint32_t(group_atoms_.size());
    group_next_.push_back(first ? *first : UINT32_MAX);
    group_atoms_.push_back(atoms);
    group_sink_.push_back(id);
    group_ids_.put(key, g);
    return id;
  }

  // Small cells (sorted) of output cell i: every run that ended at i - 1 claims the cell it
  // continues with (an established run its next cell; a one-pair run the next input cell,
  // else the same one, so diagonals win over repeats); unclaimed cells start runs.
  void feed(int64_t i, const uint64_t* cs, size_t n) {
    if (claimed_.size() < n) claimed_.resize(n);
    std::fill(claimed_.begin(), claimed_.begin() + std::ptrdiff_t(n), 0);
    auto claim = [&](uint64_t c) -> bool {
      const uint64_t* p = std::lower_bound(cs, cs + n, c);
      if (p == cs + n || *p != c || claimed_[size_t(p - cs)]) return false;
      claimed_[size_t(p - cs)] = 1;
      return true;
    };
    for (int pass = 0; pass < 2; ++pass) {
      for (Run& r : active_) {
        if (r.o0 + r.len != i || (r.len == 1) != (pass == 1)) continue;
        if (r.len > 1) {
          const uint64_t c = r.c0 + uint64_t(r.len) * uint64_t(r.step);
          if (c < r.end && claim(c)) ++r.len;
          continue;
        }
        if (r.c0 + 1 < r.end && claim(r.c0 + 1)) {
          r.step = 1;
          ++r.len;
        } else if (claim(r.c0)) {
          r.step = 0;
          ++r.len;
        }
      }
    }
    for (size_t t = 0; t < n; ++t) {
      if (claimed_[t]) continue;
      const uint64_t c = cs[t];
      const size_t j = k_ == 1 ? 0 : ar_.input_of(c);
      active_.push_back(Run{i, c, 1, ends_[j], j, 1});
    }
    retire(i);
  }

  // Close every run that output cell i did not extend (it ends before i).
  void retire(int64_t i) {
    size_t w = 0;
    for (size_t r = 0; r < active_.size(); ++r) {
      if (active_[r].o0 + active_[r].len > i) {
        active_[w++] = active_[r];
        continue;
      }
      close(active_[r]);
    }
    active_.resize(w);
  }

  void close(const Run& r) {
    touched_[r.j] = true;
    if (r.len > 1) ++runs_;
    if (r.len == 1) {
      loose_o_[r.j].push_back(r.o0);
      loose_a_[r.j].push_back(int64_t(r.c0 - bases_[r.j]));
      return;
    }
    // Pieces along the rows of both arrays: one record each, the last input axis relative
    // to the last output axis (a = b - delta).
    const std::vector<int64_t>& ish = in_shapes_[r.j];
    const int m = int(ish.size());
    if (ac_.size() < size_t(m) + 1) ac_.resize(size_t(m) + 1);
    std::vector<int64_t>& rec = recs_[r.j];
    const uint64_t all = record_live_all(l_);
    int64_t o = r.o0, a = int64_t(r.c0 - bases_[r.j]), left = r.len;
    while (left > 0) {
      unravel(o, out_shape_, oc_.data());
      unravel(a, ish, ac_.data());
      if (r.step == 0) {  // one input cell for a stretch of an output row
        const int64_t L = std::min(left, out_shape_[size_t(l_ - 1)] - oc_[size_t(l_ - 1)]);
        for (int d = 0; d < l_; ++d) {
          rec.push_back(oc_[size_t(d)]);
          rec.push_back(oc_[size_t(d)] + (d == l_ - 1 ? L - 1 : 0));
        }
        for (int d = 0; d < m; ++d)
          rec.insert(rec.end(), {-1, 1, 0, 1, ac_[size_t(d)], ac_[size_t(d)], int64_t(all)});
        o += L;
        left -= L;
        continue;
      }
      const int64_t L = std::min({left, out_shape_[size_t(l_ - 1)] - oc_[size_t(l_ - 1)],
                                  ish[size_t(m - 1)] - ac_[size_t(m - 1)]});
      for (int d = 0; d < l_; ++d) {
        rec.push_back(oc_[size_t(d)]);
        rec.push_back(oc_[size_t(d)] + (d == l_ - 1 ? L - 1 : 0));
      }
      for (int d = 0; d < m; ++d) {
        if (d < m - 1 || L == 1) {
          rec.insert(rec.end(), {-1, 1, 0, 1, ac_[size_t(d)], ac_[size_t(d)], int64_t(all)});
        } else {
          const int64_t delta = oc_[size_t(l_ - 1)] - ac_[size_t(d)];
          const int64_t live = l_ - 1 < 31 ? int64_t(record_live_relative(l_ - 1)) : 0;
          rec.insert(rec.end(), {int64_t(l_ - 1), 1, 0, 1, delta, delta, live});
        }
      }
      o += L;
      a += L;
      left -= L;
    }
  }

  // Records of a sink: its output boxes times its input boxes, per input.
  void sink_records(const Sink& s) {
    if (s.outs.runs.empty()) return;
    BoxBuilder ob(out_shape_);
    for (const auto& r : s.outs.runs) ob.progression(r[0], r[1], r[2]);
    const std::vector<int64_t> oboxes = ob.finish();
    const int64_t nob = l_ == 0 ? 1 : int64_t(oboxes.size()) / (2 * l_);
    std::vector<BoxBuilder> ibs;
    ibs.reserve(k_);
    for (size_t j = 0; j < k_; ++j) ibs.emplace_back(in_shapes_[j]);
    std::vector<bool> has(k_, false);
    if (s.prog && s.stride > 1) {
      // A progression (a lane of a reduction): per input, its cells in that input.
      uint64_t t = 0;
      while (t < s.count) {
        const uint64_t c = s.start + t * s.stride;
        const size_t j = k_ == 1 ? 0 : ar_.input_of(c);
        const uint64_t n = std::min(s.count - t, (ends_[j] - 1 - c) / s.stride + 1);
        ibs[j].progression(int64_t(c - bases_[j]), int64_t(s.stride), int64_t(n));
        has[j] = true;
        t += n;
      }
    } else {
      s.each_interval([&](uint64_t lo, uint64_t hi) {
        while (lo <= hi) {
          const size_t j = k_ == 1 ? 0 : ar_.input_of(lo);
          const uint64_t e = std::min(hi, ends_[j] - 1);
          ibs[j].interval(int64_t(lo - bases_[j]), int64_t(e - bases_[j]));
          has[j] = true;
          lo = e + 1;
        }
      });
    }
    const uint64_t all = record_live_all(l_);
    for (size_t j = 0; j < k_; ++j) {
      if (!has[j]) continue;
      touched_[j] = true;
      const int m = int(in_shapes_[j].size());
      const std::vector<int64_t> iboxes = ibs[j].finish();
      const int64_t nib = m == 0 ? 1 : int64_t(iboxes.size()) / (2 * m);
      if (l_ + m == 0) continue;
      std::vector<int64_t>& rec = recs_[j];
      for (int64_t a = 0; a < nob; ++a)
        for (int64_t b = 0; b < nib; ++b) {
          for (int d = 0; d < l_; ++d) {
            rec.push_back(oboxes[size_t(a * 2 * l_ + 2 * d)]);
            rec.push_back(oboxes[size_t(a * 2 * l_ + 2 * d + 1)]);
          }
          for (int d = 0; d < m; ++d)
            rec.insert(rec.end(), {-1, 1, 0, 1, iboxes[size_t(b * 2 * m + 2 * d)],
                                   iboxes[size_t(b * 2 * m + 2 * d + 1)], int64_t(all)});
        }
    }
  }

  // The loose pairs of input j, compressed by the ordinary ProvRC pass, as records.
  void loose_records(size_t j, ExtractStats* st) {
    const std::vector<int64_t>& os = loose_o_[j];
    const std::vector<int64_t>& as = loose_a_[j];
    const int64_t n = int64_t(os.size());
    if (n == 0) return;
    if (st) st->loose_pairs += n;
    const std::vector<int64_t>& ish = in_shapes_[j];
    const int m = int(ish.size());
    std::vector<int64_t> cols(size_t(l_ + m) * size_t(n));
    std::vector<int64_t> co(size_t(std::max(l_, m)) + 1);
    for (int64_t p = 0; p < n; ++p) {
      unravel(os[size_t(p)], out_shape_, co.data());
      for (int d = 0; d < l_; ++d) cols[size_t(d) * size_t(n) + size_t(p)] = co[size_t(d)];
      unravel(as[size_t(p)], ish, co.data());
      for (int d = 0; d < m; ++d) cols[size_t(l_ + d) * size_t(n) + size_t(p)] = co[size_t(d)];
    }
    RelationView view;
    view.l = l_;
    view.m = m;
    view.n = n;
    for (int c = 0; c < l_ + m; ++c) view.cols.push_back(cols.data() + size_t(c) * size_t(n));
    CompressOptions opts;
    opts.threads = 1;
    CompressResult res = compress(view, opts);
    append_table_records(res.table, recs_[j]);
  }

  Arena& ar_;
  const std::vector<int64_t>& out_shape_;
  const std::vector<std::vector<int64_t>>& in_shapes_;
  bool considered_;
  size_t k_;
  int l_;
  std::vector<uint64_t> bases_, ends_;
  uint64_t ncells_ = 0;
  std::vector<std::vector<int64_t>> recs_;
  std::vector<std::vector<int64_t>> loose_o_, loose_a_;
  std::vector<bool> touched_;
  std::vector<Run> active_;
  std::vector<char> claimed_;
  std::vector<Sink> sinks_;
  size_t n_atoms_ = 0;
  int64_t runs_ = 0;
  IdMap atom_ids_, group_ids_;
  std::vector<uint32_t> group_next_, group_sink_;
  std::vector<std::vector<uint32_t>> group_atoms_;
  std::vector<uint64_t> small_, cur_small_, scratch_;
  std::vector<uint32_t> atoms_, cur_sinks_, by_lo_;
  IdMap memo_ids_, spine_ids_;
  std::vector<SpineEntry> spines_;
  IdMap with_ids_;  // kCellSet entry bits -> withs_
  IdMap groups_run_;  // groups (index + 1) whose members group_members() closed as runs
  std::vector<std::pair<std::vector<uint64_t>, uint32_t>> small_sinks_;  // same_cells_sink
  std::vector<WithEntry> withs_;
  std::vector<uint64_t> spine_cells_, cur2_;
  std::vector<Handle> spine_others_;
  // quick_spine(): the shared set of the last {cell} ∪ shared union and its spine entry.
  Handle quick_other_ = 0;
  size_t quick_entry_ = 0;
  bool quick_hit_ = false, quick_shape_ = false;
  bool spine_only_cells_ = false;  // spine(): false because the union holds cells only
  // shared_side(): the sides of the last union read, the repeated small set and its sink,
  // the other side of the current cell's union
  std::array<Handle, 2> last_sides_{0, 0};
  Handle rep_ = 0, own_ = 0;
  uint32_t rep_sink_ = 0;
  std::vector<Handle> stack_;
  std::vector<ListMemo> memos_;
  std::vector<int64_t> oc_, ac_;
  // values copied along the scan: cells [0, vend_) are done
  static constexpr int64_t kValueBlock = 4096;
  const char* vsrc_ = nullptr;
  double* vdst_ = nullptr;
  std::ptrdiff_t vstride_ = 0;
  int64_t vend_ = 0;
};

}  // namespace

std::vector<ProvRCTable> extract_tables(Arena& ar, const char* data, std::ptrdiff_t stride,
                                        int64_t ncell, const std::vector<int64_t>& out_shape,
                                        const std::vector<std::vector<int64_t>>& in_shapes,
                                        bool considered, ExtractStats* stats,
                                        const char* vsrc, double* values) {
  Extractor ex(ar, out_shape, in_shapes, considered);
  if (values != nullptr) ex.copy_values_to(vsrc, values, stride);
  ex.scan(data, stride, ncell, stats);
  return ex.finish(stats);
}

}  // namespace dslog
