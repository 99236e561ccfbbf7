// In-situ lineage queries on ProvRC tables; see dslog/query.hpp for the derivation.
#include "dslog/query.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace dslog {

namespace {

// Boxes over axes s..d-1 of a parent box set (row-major, width d - s).
struct Sub {
  int64_t k = 0;
  std::vector<int64_t> lo, hi;
  bool operator==(const Sub& o) const { return k == o.k && lo == o.lo && hi == o.hi; }
};

// Canonical slab decomposition of the union of boxes `idx` of B restricted to axes s..d-1:
// the distinct box boundaries on axis s cut it into elementary slabs; each slab's
// cross-section is the (recursive) union of the boxes covering it, and consecutive touching
// slabs with equal cross-sections are merged. The result depends only on the point set.
void norm_rec(const Boxes& B, std::vector<int64_t>& idx, int s, Sub& out) {
  const int d = B.d;
  const int w = d - s;
  out.k = 0;
  out.lo.clear();
  out.hi.clear();
  if (idx.empty()) return;
  if (w == 1) {
    std::vector<std::pair<int64_t, int64_t>> iv;
    iv.reserve(idx.size());
    for (int64_t b : idx) iv.emplace_back(B.lo[b * d + s], B.hi[b * d + s]);
    std::sort(iv.begin(), iv.end());
    int64_t cl = iv[0].first, ch = iv[0].second;
    for (size_t i = 1; i < iv.size(); ++i) {
      if (iv[i].first <= ch || iv[i].first - 1 == ch) {
        ch = std::max(ch, iv[i].second);
      } else {
        out.lo.push_back(cl);
        out.hi.push_back(ch);
        ++out.k;
        cl = iv[i].first;
        ch = iv[i].second;
      }
    }
    out.lo.push_back(cl);
    out.hi.push_back(ch);
    ++out.k;
    return;
  }
  std::sort(idx.begin(), idx.end(),
            [&](int64_t a, int64_t b) { return B.lo[a * d + s] < B.lo[b * d + s]; });
  std::vector<int64_t> xs;
  xs.reserve(2 * idx.size());
  for (int64_t b : idx) {
    xs.push_back(B.lo[b * d + s]);
    xs.push_back(B.hi[b * d + s] + 1);
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());

  std::vector<int64_t> active, scratch;
  size_t p = 0;
  Sub prev, cur;
  bool have_prev = false, changed = false;
  int64_t prev_lo = 0, prev_hi = 0;
  auto flush = [&]() {
    if (!have_prev) return;
    for (int64_t i = 0; i < prev.k; ++i) {
      out.lo.push_back(prev_lo);
      out.lo.insert(out.lo.end(), prev.lo.begin() + i * (w - 1), prev.lo.begin() + (i + 1) * (w - 1));
      out.hi.push_back(prev_hi);
      out.hi.insert(out.hi.end(), prev.hi.begin() + i * (w - 1), prev.hi.begin() + (i + 1) * (w - 1));
      ++out.k;
    }
    have_prev = false;
  };
  for (size_t i = 0; i + 1 < xs.size(); ++i) {
    const int64_t x = xs[i], xe = xs[i + 1] - 1;
    while (p < idx.size() && B.lo[idx[p] * d + s] <= x) {
      active.push_back(idx[p++]);
      changed = true;
    }
    for (size_t a = 0; a < active.size();) {
      if (B.hi[active[a] * d + s] < x) {
        active[a] = active.back();
        active.pop_back();
        changed = true;
      } else {
        ++a;
      }
    }
    if (active.empty()) {
      flush();
      continue;
    }
    if (changed) {
      scratch = active;
      norm_rec(B, scratch, s + 1, cur);
      changed = false;
    }
    if (have_prev && prev_hi + 1 == x && cur == prev) {
      prev_hi = xe;
    } else {
      flush();
      prev = cur;
      prev_lo = x;
      prev_hi = xe;
      have_prev = true;
    }
  }
  flush();
}

// Scratch space for building the images of one (query box, row) pair.
struct Scratch {
  std::vector<int64_t> ilo, ihi;       // intersection on the queried side
  std::vector<int64_t> plo, phi;       // partial boxes (P boxes of width m)
  std::vector<int64_t> nlo, nhi;       // next partial boxes
  std::vector<int64_t> alo, ahi;       // alternatives of one group (A x |group|)
  std::vector<int> group;              // input attributes of one group
};

// Canonical form of the cells set in a dense bitmap over [origin, origin + ext) (row-major):
// the same maximal runs of identical cross-sections that norm_rec produces, computed by one
// pass over the bitmap instead of sorting boxes. `base` is the offset of this sub-block.
void canon_bitmap(const std::vector<uint8_t>& bits, const std::vector<int64_t>& ext,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& origin, int s,
                  int64_t base, Sub& out) {
  const int d = static_cast<int>(ext.size());
  const int w = d - s;
  out.k = 0;
  out.lo.clear();
  out.hi.clear();
  if (w == 1) {
    int64_t x = 0;
    const uint8_t* row = bits.data() + base;
    while (x < ext[s]) {
      if (!row[x]) {
        ++x;
        continue;
      }
      int64_t y = x;
      while (y + 1 < ext[s] && row[y + 1]) ++y;
      out.lo.push_back(origin[s] + x);
      out.hi.push_back(origin[s] + y);
      ++out.k;
      x = y + 1;
    }
    return;
  }
  Sub prev, cur;
  bool have_prev = false;
  int64_t prev_lo = 0, prev_hi = 0;
  auto flush = [&]() {
    if (!have_prev) return;
    for (int64_t i = 0; i < prev.k; ++i) {
      out.lo.push_back(origin[s] + prev_lo);
      out.lo.insert(out.lo.end(), prev.lo.begin() + i * (w - 1), prev.lo.begin() + (i + 1) * (w - 1));
      out.hi.push_back(origin[s] + prev_hi);
      out.hi.insert(out.hi.end(), prev.hi.begin() + i * (w - 1), prev.hi.begin() + (i + 1) * (w - 1));
      ++out.k;
    }
    have_prev = false;
  };
  for (int64_t x = 0; x < ext[s]; ++x) {
    canon_bitmap(bits, ext, stride, origin, s + 1, base + x * stride[s], cur);
    if (cur.k == 0) {
      flush();
      continue;
    }
    if (have_prev && prev_hi + 1 == x && cur == prev) {
      prev_hi = x;
    } else {
      flush();
      std::swap(prev, cur);
      prev_lo = prev_hi = x;
      have_prev = true;
    }
  }
  flush();
}

// Dense path of normalize(): paint the boxes into a bitmap of their bounding box. Used when
// that bitmap is not much larger than the painted volume, where it beats sorting boxes.
bool normalize_dense(const Boxes& in, const std::vector<int64_t>& idx, Boxes& res) {
  const int d = in.d;
  std::vector<int64_t> origin(static_cast<size_t>(d), 0), top(static_cast<size_t>(d), 0);
  double painted = 0;
  for (size_t n = 0; n < idx.size(); ++n) {
    const int64_t b = idx[n];
    double vol = 1;
    for (int a = 0; a < d; ++a) {
      const int64_t lo = in.lo[b * d + a], hi = in.hi[b * d + a];
      origin[a] = n == 0 ? lo : std::min(origin[a], lo);
      top[a] = n == 0 ? hi : std::max(top[a], hi);
      vol *= static_cast<double>(hi - lo + 1);
    }
    painted += vol;
  }
  double volume = 1;
  std::vector<int64_t> ext(static_cast<size_t>(d)), stride;
  for (int a = 0; a < d; ++a) {
    ext[a] = top[a] - origin[a] + 1;
    volume *= static_cast<double>(ext[a]);
  }
  // Dense only when the bitmap is not much larger than the painted cells and the boxes do
  // not overlap so much that painting costs more than sorting them.
  if (volume > 4 * painted + 4096 || volume > double(1 << 28) ||
      painted > 4 * volume + 64 * static_cast<double>(idx.size()))
    return false;
  stride = row_major_strides(ext);
  std::vector<uint8_t> bits(static_cast<size_t>(volume), 0);
  for (int64_t b : idx)
    for_each_run(in.lo.data() + b * d, in.hi.data() + b * d, stride, origin,
                 [&](int64_t off, int64_t len) {
                   std::memset(bits.data() + off, 1, static_cast<size_t>(len));
                 });
  Sub sub;
  canon_bitmap(bits, ext, stride, origin, 0, 0, sub);
  res.k = sub.k;
  res.lo = std::move(sub.lo);
  res.hi = std::move(sub.hi);
  return true;
}

}  // namespace

Boxes normalize(const Boxes& in, bool allow_dense) {
  Boxes res;
  res.d = in.d;
  if (in.d == 0) {
    res.k = in.k > 0 ? 1 : 0;
    return res;
  }
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(in.k));
  for (int64_t b = 0; b < in.k; ++b) {
    bool empty = false;
    for (int a = 0; a < in.d; ++a) empty |= in.lo[b * in.d + a] > in.hi[b * in.d + a];
    if (!empty) idx.push_back(b);
  }
  if (allow_dense && idx.size() >= 64 && normalize_dense(in, idx, res)) return res;
  Sub sub;
  norm_rec(in, idx, 0, sub);
  res.k = sub.k;
  res.lo = std::move(sub.lo);
  res.hi = std::move(sub.hi);
  return res;
}

int64_t count_cells(const Boxes& boxes) {
  if (boxes.d == 0) return boxes.k;
  int64_t total = 0;
  for (int64_t b = 0; b < boxes.k; ++b) {
    int64_t v = 1;
    for (int a = 0; a < boxes.d; ++a) v *= boxes.hi[b * boxes.d + a] - boxes.lo[b * boxes.d + a] + 1;
    total += v;
  }
  return total;
}

PreparedTable::PreparedTable(ProvRCTable table) : t_(std::move(table)) {
  const int64_t R = t_.rows;
  out_.d = t_.l;
  in_.d = t_.m;
  out_.lo.resize(static_cast<size_t>(R * t_.l));
  out_.hi.resize(out_.lo.size());
  for (int j = 0; j < t_.l; ++j)
    for (int64_t i = 0; i < R; ++i) {
      out_.lo[i * t_.l + j] = t_.out_lo[j * R + i];
      out_.hi[i * t_.l + j] = t_.out_hi[j * R + i];
    }
  in_.lo.resize(static_cast<size_t>(R * t_.m));
  in_.hi.resize(in_.lo.size());
  for (int k = 0; k < t_.m; ++k)
    for (int64_t i = 0; i < R; ++i) {
      const int64_t c = k * R + i;
      const int64_t ref = t_.in_ref[c];
      int64_t lo = t_.in_lo[c], hi = t_.in_hi[c];
      if (ref >= 0) {
        const int64_t f1 = apply_f(t_.out_lo[ref * R + i], t_.in_q[c], t_.in_r[c], t_.in_mult[c]);
        const int64_t f2 = apply_f(t_.out_hi[ref * R + i], t_.in_q[c], t_.in_r[c], t_.in_mult[c]);
        lo = std::min(f1, f2) - t_.in_hi[c];
        hi = std::max(f1, f2) - t_.in_lo[c];
      }
      in_.lo[i * t_.m + k] = lo;
      in_.hi[i * t_.m + k] = hi;
    }
  prepare_side(out_);
  prepare_side(in_);
}

void PreparedTable::prepare_side(Side& s) const {
  const int64_t R = t_.rows;
  const int d = s.d;
  s.order.assign(static_cast<size_t>(d), std::vector<int64_t>(static_cast<size_t>(R)));
  s.sorted_lo.assign(static_cast<size_t>(d), std::vector<int64_t>(static_cast<size_t>(R)));
  s.maxlen.assign(static_cast<size_t>(d), 0);
  for (int a = 0; a < d; ++a) {
    auto& order = s.order[a];
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return s.lo[x * d + a] < s.lo[y * d + a]; });
    for (int64_t i = 0; i < R; ++i) {
      s.sorted_lo[a][i] = s.lo[order[i] * d + a];
      s.maxlen[a] = std::max(s.maxlen[a], s.hi[i * d + a] - s.lo[i * d + a]);
    }
  }
}

Boxes PreparedTable::hop(const Boxes& q, bool forward) const {
  const Side& s = forward ? in_ : out_;
  if (q.d != s.d) throw std::invalid_argument("query boxes have the wrong rank for this table");
  const int d = s.d, l = t_.l, m = t_.m;
  const int64_t R = t_.rows;
  Boxes res;
  res.d = forward ? l : m;
  Scratch sc;

  auto emit_forward = [&](int64_t qb, int64_t i) {
    const int64_t* qlo = q.lo.data() + qb * d;
    const int64_t* qhi = q.hi.data() + qb * d;
    sc.plo.assign(static_cast<size_t>(l), 0);
    sc.phi.assign(static_cast<size_t>(l), 0);
    for (int j = 0; j < l; ++j) {
      sc.plo[j] = t_.out_lo[j * R + i];
      sc.phi[j] = t_.out_hi[j * R + i];
    }
    for (int k = 0; k < m; ++k) {
      const int64_t c = k * R + i;
      const int64_t ref = t_.in_ref[c];
      if (ref < 0) {
        if (std::max(qlo[k], t_.in_lo[c]) > std::min(qhi[k], t_.in_hi[c])) return;
        continue;
      }
      int64_t nlo, nhi;
      if (!solve_f(t_.in_q[c], t_.in_r[c], t_.in_mult[c], qlo[k] + t_.in_lo[c], qhi[k] + t_.in_hi[c],
                   sc.plo[ref], sc.phi[ref], &nlo, &nhi))
        return;
      sc.plo[ref] = nlo;
      sc.phi[ref] = nhi;
    }
    res.lo.insert(res.lo.end(), sc.plo.begin(), sc.plo.end());
    res.hi.insert(res.hi.end(), sc.phi.begin(), sc.phi.end());
    ++res.k;
  };

  auto emit_backward = [&](int64_t qb, int64_t i) {
    const int64_t* qlo = q.lo.data() + qb * d;
    const int64_t* qhi = q.hi.data() + qb * d;
    sc.ilo.resize(static_cast<size_t>(l));
    sc.ihi.resize(static_cast<size_t>(l));
    for (int j = 0; j < l; ++j) {
      sc.ilo[j] = std::max(qlo[j], t_.out_lo[j * R + i]);
      sc.ihi[j] = std::min(qhi[j], t_.out_hi[j * R + i]);
    }
    // One partial box holding the absolute inputs; relative groups multiply it out.
    sc.plo.assign(static_cast<size_t>(m), 0);
    sc.phi.assign(static_cast<size_t>(m), 0);
    int64_t P = 1;
    for (int k = 0; k < m; ++k) {
      if (t_.in_ref[k * R + i] < 0) {
        sc.plo[k] = t_.in_lo[k * R + i];
        sc.phi[k] = t_.in_hi[k * R + i];
      }
    }
    for (int j = 0; j < l; ++j) {
      sc.group.clear();
      for (int k = 0; k < m; ++k)
        if (t_.in_ref[k * R + i] == j) sc.group.push_back(k);
      if (sc.group.empty()) continue;
      const int G = static_cast<int>(sc.group.size());
      sc.alo.clear();
      sc.ahi.clear();
      const int64_t u = sc.ilo[j], v = sc.ihi[j];
      if (G == 1) {
        const int64_t c = sc.group[0] * R + i;
        const int64_t q_ = t_.in_q[c], r_ = t_.in_r[c], mult = t_.in_mult[c];
        const int64_t dlo = t_.in_lo[c], dhi = t_.in_hi[c];
        const int64_t g1 = floor_div(u + r_, q_), g2 = floor_div(v + r_, q_);
        const int64_t amult = mult < 0 ? -mult : mult;
        if (g1 == g2 || amult <= dhi - dlo + 1) {
          // Consecutive F values are at most the delta width apart: one interval.
          const int64_t f1 = mult * g1, f2 = mult * g2;
          sc.alo.push_back(std::min(f1, f2) - dhi);
          sc.ahi.push_back(std::max(f1, f2) - dlo);
        } else {
          for (int64_t g = g1; g <= g2; ++g) {
            sc.alo.push_back(mult * g - dhi);
            sc.ahi.push_back(mult * g - dlo);
          }
        }
      } else {
        // Several inputs depend on b_j: split b_j into segments where every F is constant.
        int64_t b = u;
        while (b <= v) {
          int64_t next = v + 1;
          for (int gk = 0; gk < G; ++gk) {
            const int64_t c = sc.group[gk] * R + i;
            const int64_t g = floor_div(b + t_.in_r[c], t_.in_q[c]);
            next = std::min(next, (g + 1) * t_.in_q[c] - t_.in_r[c]);
            sc.alo.push_back(t_.in_mult[c] * g - t_.in_hi[c]);
            sc.ahi.push_back(t_.in_mult[c] * g - t_.in_lo[c]);
          }
          b = next;
        }
      }
      const int64_t A = static_cast<int64_t>(sc.alo.size()) / G;
      if (A == 1) {
        for (int64_t p = 0; p < P; ++p)
          for (int gk = 0; gk < G; ++gk) {
            sc.plo[p * m + sc.group[gk]] = sc.alo[gk];
            sc.phi[p * m + sc.group[gk]] = sc.ahi[gk];
          }
        continue;
      }
      sc.nlo.clear();
      sc.nhi.clear();
      for (int64_t p = 0; p < P; ++p)
        for (int64_t a = 0; a < A; ++a) {
          const size_t base = sc.nlo.size();
          sc.nlo.insert(sc.nlo.end(), sc.plo.begin() + p * m, sc.plo.begin() + (p + 1) * m);
          sc.nhi.insert(sc.nhi.end(), sc.phi.begin() + p * m, sc.phi.begin() + (p + 1) * m);
          for (int gk = 0; gk < G; ++gk) {
            sc.nlo[base + sc.group[gk]] = sc.alo[a * G + gk];
            sc.nhi[base + sc.group[gk]] = sc.ahi[a * G + gk];
          }
        }
      std::swap(sc.plo, sc.nlo);
      std::swap(sc.phi, sc.nhi);
      P *= A;
    }
    res.lo.insert(res.lo.end(), sc.plo.begin(), sc.plo.begin() + P * m);
    res.hi.insert(res.hi.end(), sc.phi.begin(), sc.phi.begin() + P * m);
    res.k += P;
  };

  auto visit = [&](int64_t qb, int64_t i) {
    for (int a = 0; a < d; ++a)
      if (std::max(q.lo[qb * d + a], s.lo[i * d + a]) > std::min(q.hi[qb * d + a], s.hi[i * d + a]))
        return;
    if (forward)
      emit_forward(qb, i);
    else
      emit_backward(qb, i);
  };

  if (d == 0) {
    for (int64_t qb = 0; qb < std::min<int64_t>(q.k, 1); ++qb)
      for (int64_t i = 0; i < R; ++i) visit(qb, i);
    return normalize(res);
  }

  // Join strategy, chosen per query from exact counts on the sorted row starts:
  //  * scan: for each box, the rows whose start on axis a lies in [lo - maxlen_a, hi];
  //  * sweep: an interval join on axis a (every row and box once, plus the pairs that meet).
  // The scan wins when the boxes are few or the rows short (e.g. columnar tables).
  const int64_t nq = q.k;
  int best_axis = 0;
  int64_t best_scan = -1;
  for (int a = 0; a < d; ++a) {
    const auto& sl = s.sorted_lo[a];
    int64_t cost = 0;
    for (int64_t qb = 0; qb < nq && (best_scan < 0 || cost < best_scan); ++qb) {
      const int64_t x = q.lo[qb * d + a], y = q.hi[qb * d + a];
      cost += (std::upper_bound(sl.begin(), sl.end(), y) -
               std::lower_bound(sl.begin(), sl.end(), x - s.maxlen[a])) + 1;
    }
    if (best_scan < 0 || cost < best_scan) {
      best_scan = cost;
      best_axis = a;
    }
  }
  const int ax = best_axis;
  const auto& order = s.order[ax];
  const auto& sl = s.sorted_lo[ax];
  if (best_scan <= R + nq) {
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t x = q.lo[qb * d + ax], y = q.hi[qb * d + ax];
      const auto first = std::lower_bound(sl.begin(), sl.end(), x - s.maxlen[ax]) - sl.begin();
      const auto last = std::upper_bound(sl.begin(), sl.end(), y) - sl.begin();
      for (auto i = first; i < last; ++i) visit(qb, order[i]);
    }
    return normalize(res);
  }

  // Interval join on axis ax: whichever of a (row, box) pair starts later meets the other in
  // the active list; entries that ended before the current start are dropped.
  std::vector<int64_t> qorder(static_cast<size_t>(nq));
  std::iota(qorder.begin(), qorder.end(), 0);
  std::sort(qorder.begin(), qorder.end(),
            [&](int64_t x, int64_t y) { return q.lo[x * d + ax] < q.lo[y * d + ax]; });
  std::vector<int64_t> arow, aq;
  size_t ri = 0, qi = 0;
  const size_t nr = order.size(), nqs = qorder.size();
  while (ri < nr || qi < nqs) {
    const bool take_row = qi >= nqs || (ri < nr && sl[ri] <= q.lo[qorder[qi] * d + ax]);
    if (take_row) {
      const int64_t i = order[ri++];
      const int64_t x = s.lo[i * d + ax];
      for (size_t a = 0; a < aq.size();) {
        if (q.hi[aq[a] * d + ax] < x) {
          aq[a] = aq.back();
          aq.pop_back();
        } else {
          visit(aq[a], i);
          ++a;
        }
      }
      if (qi < nqs) arow.push_back(i);  // no box can meet it once all boxes are in
      else if (aq.empty()) break;        // nothing left to meet
    } else {
      const int64_t qb = qorder[qi++];
      const int64_t x = q.lo[qb * d + ax];
      for (size_t a = 0; a < arow.size();) {
        if (s.hi[arow[a] * d + ax] < x) {
          arow[a] = arow.back();
          arow.pop_back();
        } else {
          visit(qb, arow[a]);
          ++a;
        }
      }
      if (ri < nr) aq.push_back(qb);
    }
  }
  return normalize(res);
}

}  // namespace dslog
