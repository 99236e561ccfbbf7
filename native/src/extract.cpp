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
};

// A big set and the output cells that reach it (an atom, or the union of several atoms).
struct Sink {
  bool prog = false;
  uint64_t start = 0, stride = 1, count = 0;  // prog: {start + t * stride : t < count}
  std::vector<uint64_t> cells;                // else: sorted, duplicate-free
  uint64_t lo = 0, hi = 0;                    // hull
  OutRuns outs;
  bool contains(uint64_t c) const {
    if (c < lo || c > hi) return false;
    if (prog) return (c - start) % stride == 0;
    return std::binary_search(cells.begin(), cells.end(), c);
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

struct Run {
  int64_t o0;
  uint64_t c0;
  int64_t len;
  uint64_t end;  // end of the run's input: a run never crosses into the next input
  size_t j;
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

  void scan(const char* data, std::ptrdiff_t stride, int64_t ncell, ExtractStats* st) {
    Handle prev = 0;
    bool have_prev = false;
    for (int64_t i = 0; i < ncell; ++i) {
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
          if (r.o0 + r.len == i && r.c0 + uint64_t(r.len) == c && c < r.end) {
            ++r.len;
            continue;
          }
        }
        feed(i, &c, 1);
        continue;
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
    retire(ncell);
    if (st) {
      st->cells += ncell;
      st->atoms += int64_t(n_atoms_);
      st->groups += int64_t(sinks_.size() - n_atoms_);
      st->runs += runs_;
    }
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
    stack_.clear();
    stack_.push_back(h);
    int visited = 0;
    while (!stack_.empty()) {
      const Handle t = stack_.back();
      stack_.pop_back();
      if (t == 0) continue;
      ++visited;
      switch (hnd::kind(t)) {
        case hnd::kCell:
          small_.push_back(hnd::payload(t));
          break;
        case hnd::kCell2: {
          const uint64_t c = hnd::payload(t);
          small_.push_back(c);
          small_.push_back(c + ar_.cell2_delta(t));
          break;
        }
        case hnd::kProg:
        case hnd::kGroup: {
          const ProgNode p = ar_.progression(t);
          if (p.count() > kSmall) {
            atoms_.push_back(atom(t));
            break;
          }
          for (uint64_t c = p.start; c < p.next; c += p.stride) small_.push_back(c);
          break;
        }
        case hnd::kList: {
          auto [d, n] = ar_.list_entries(t);
          if (ar_.list_has_refs(t) || n > kSmall) {
            atoms_.push_back(atom(t));
            break;
          }
          small_.insert(small_.end(), d, d + n);
          break;
        }
        case hnd::kJoin: {
          if (visited > kWalkMax) {
            atoms_.push_back(atom(t));
            break;
          }
          const auto s = ar_.join_sides(t);
          stack_.push_back(s[1]);
          stack_.push_back(s[0]);
          break;
        }
        default:  // a pair inside a union, or kind 7: only forged bytes put one there
          throw ForgedHandle(t);
      }
    }
    std::sort(small_.begin(), small_.end());
    small_.erase(std::unique(small_.begin(), small_.end()), small_.end());
    if (!small_.empty() && small_.back() >= ncells_) throw ForgedCell();
    std::sort(atoms_.begin(), atoms_.end());
    atoms_.erase(std::unique(atoms_.begin(), atoms_.end()), atoms_.end());
    cur_sinks_.clear();
    if (atoms_.empty()) {
      cur_small_ = small_;
      return;
    }
    // Atoms with pairwise disjoint hulls are sinks of their own; otherwise their union is.
    std::sort(atoms_.begin(), atoms_.end(),
              [&](uint32_t a, uint32_t b) { return sinks_[a].lo < sinks_[b].lo; });
    bool disjoint = true;
    for (size_t t = 1; t < atoms_.size() && disjoint; ++t)
      disjoint = sinks_[atoms_[t - 1]].hi < sinks_[atoms_[t]].lo;
    if (disjoint) {
      cur_sinks_ = atoms_;
    } else {
      std::sort(atoms_.begin(), atoms_.end());
      cur_sinks_.assign(1, union_sink());
    }
    cur_small_.clear();
    for (uint64_t c : small_) {
      bool covered = false;
      for (uint32_t s : cur_sinks_)
        if ((covered = sinks_[s].contains(c))) break;
      if (!covered) cur_small_.push_back(c);
    }
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
  uint32_t union_sink() {
    uint64_t key = 0x51ed270b27a5f1ull;
    for (uint32_t a : atoms_) key = (key ^ a) * 0x100000001b3ull + 0x9E3779B97F4A7C15ull;
    key |= 1;
    uint32_t* first = group_ids_.find(key);
    if (first)
      for (uint32_t g = *first; g != UINT32_MAX; g = group_next_[g])
        if (group_atoms_[g] == atoms_) return group_sink_[g];
    Sink s;
    for (uint32_t a : atoms_) {
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
    group_atoms_.push_back(atoms_);
    group_sink_.push_back(id);
    group_ids_.put(key, g);
    return id;
  }

  // Small cells of output cell i: extend the runs they continue, start the others.
  void feed(int64_t i, const uint64_t* cs, size_t n) {
    for (size_t t = 0; t < n; ++t) {
      const uint64_t c = cs[t];
      bool done = false;
      auto ext = [&](Run& r) {
        if (r.o0 + r.len == i && r.c0 + uint64_t(r.len) == c && c < r.end) {
          ++r.len;
          return true;
        }
        return false;
      };
      if (t < active_.size() && ext(active_[t])) continue;
      for (Run& r : active_)
        if ((done = ext(r))) break;
      if (done) continue;
      const size_t j = k_ == 1 ? 0 : ar_.input_of(c);
      active_.push_back(Run{i, c, 1, ends_[j], j});
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
    for (const auto& r : s.outs.runs) {
      if (r[1] == 1 || r[2] == 1) {
        ob.interval(r[0], r[0] + r[2] - 1);
        continue;
      }
      for (int64_t t = 0; t < r[2]; ++t) ob.interval(r[0] + t * r[1], r[0] + t * r[1]);
    }
    const std::vector<int64_t> oboxes = ob.finish();
    const int64_t nob = l_ == 0 ? 1 : int64_t(oboxes.size()) / (2 * l_);
    std::vector<BoxBuilder> ibs;
    ibs.reserve(k_);
    for (size_t j = 0; j < k_; ++j) ibs.emplace_back(in_shapes_[j]);
    std::vector<bool> has(k_, false);
    s.each_interval([&](uint64_t lo, uint64_t hi) {
      while (lo <= hi) {
        const size_t j = k_ == 1 ? 0 : ar_.input_of(lo);
        const uint64_t e = std::min(hi, ends_[j] - 1);
        ibs[j].interval(int64_t(lo - bases_[j]), int64_t(e - bases_[j]));
        has[j] = true;
        lo = e + 1;
      }
    });
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
  std::vector<Sink> sinks_;
  size_t n_atoms_ = 0;
  int64_t runs_ = 0;
  IdMap atom_ids_, group_ids_;
  std::vector<uint32_t> group_next_, group_sink_;
  std::vector<std::vector<uint32_t>> group_atoms_;
  std::vector<uint64_t> small_, cur_small_, scratch_;
  std::vector<uint32_t> atoms_, cur_sinks_;
  std::vector<Handle> stack_;
  std::vector<int64_t> oc_, ac_;
};

}  // namespace

std::vector<ProvRCTable> extract_tables(Arena& ar, const char* data, std::ptrdiff_t stride,
                                        int64_t ncell, const std::vector<int64_t>& out_shape,
                                        const std::vector<std::vector<int64_t>>& in_shapes,
                                        bool considered, ExtractStats* stats) {
  Extractor ex(ar, out_shape, in_shapes, considered);
  ex.scan(data, stride, ncell, stats);
  return ex.finish(stats);
}

}  // namespace dslog
