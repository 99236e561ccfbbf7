// In-situ lineage queries on ProvRC tables: one θ-join per hop, exact.
//
// A cell set of a rank-d array is a union of boxes. Box k covers, on axis i, the inclusive
// interval [lo[k * d + i], hi[k * d + i]]. A hop maps the cells of one side of a table to the
// linked cells of the other side:
//
//   backward (outputs -> inputs): for each query box Q and each row whose output box meets Q,
//     I = Q ∩ out-box; the inputs linked to I factor by output attribute: absolute inputs give
//     their interval, the inputs relative to b_j give {F(b) - delta : b ∈ I_j}. One relative
//     input gives one interval unless F jumps by more than the delta width (pooling), and two
//     or more inputs relative to the same b_j are not a box in general (diagonals): those are
//     split into the segments of b_j over which every F is constant, so nothing is
//     over-approximated.
//   forward (inputs -> outputs): for each query box Q and each row whose input hull meets Q,
//     the outputs are a box: b_j ∈ out-interval ∩ {b : F_k(b) ∈ [Qlo_k + lo_k, Qhi_k + hi_k]}
//     for every input k relative to b_j (the inputs vary independently inside Q, so the
//     existential over a factorises per input, and F is monotone).
//
// Results are normalised: disjoint boxes in a canonical slab decomposition (equal sets give
// equal box lists), adjacent boxes merged.
#pragma once

#include <cstdint>
#include <vector>

#include "dslog/provrc.hpp"

namespace dslog {

struct Boxes {
  int d = 0;       // rank of the array the boxes live in
  int64_t k = 0;   // number of boxes (needed when d == 0)
  std::vector<int64_t> lo, hi;  // box-major: box b, axis i at [b * d + i]
};

// Union of `in` as disjoint boxes in canonical slab order (see above). Many boxes packed
// densely are painted into a bitmap of their bounding box instead of sorted (same result);
// `allow_dense = false` forces the sort-based path (tests compare the two).
Boxes normalize(const Boxes& in, bool allow_dense = true);

// Row-major strides of an array with extents `ext`.
inline std::vector<int64_t> row_major_strides(const std::vector<int64_t>& ext) {
  std::vector<int64_t> stride(ext.size(), 1);
  for (int a = static_cast<int>(ext.size()) - 2; a >= 0; --a) stride[a] = stride[a + 1] * ext[a + 1];
  return stride;
}

// Walks one box (bounds lo/hi, rank stride.size() >= 1) of an array whose index origin is
// `origin` and calls run(offset, length) for each run of cells along the last axis, with
// `offset` the row-major offset of the run's first cell.
template <class Run>
void for_each_run(const int64_t* lo, const int64_t* hi, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& origin, Run&& run) {
  const int d = static_cast<int>(stride.size());
  std::vector<int64_t> cur(lo, lo + d);
  while (true) {
    int64_t off = lo[d - 1] - origin[d - 1];
    for (int a = 0; a < d - 1; ++a) off += (cur[a] - origin[a]) * stride[a];
    run(off, hi[d - 1] - lo[d - 1] + 1);
    int a = d - 2;
    while (a >= 0 && cur[a] == hi[a]) {
      cur[a] = lo[a];
      --a;
    }
    if (a < 0) return;
    ++cur[a];
  }
}

// Number of cells of a normalised (disjoint) box set.
int64_t count_cells(const Boxes& boxes);

// A table prepared for repeated queries: input hulls and rows sorted along a sweep axis for
// each direction.
class PreparedTable {
 public:
  explicit PreparedTable(ProvRCTable table);
  // Cells of the other side linked to `query` (normalised). `forward` maps input cells to
  // output cells, otherwise output cells to input cells.
  Boxes hop(const Boxes& query, bool forward) const;
  const ProvRCTable& table() const { return t_; }

 private:
  struct Side {
    int d = 0;
    std::vector<int64_t> lo, hi;  // row-major hulls: row i, axis a at [i * d + a]
    // Per axis a: rows sorted by their lower bound on a, those bounds, and the longest
    // extent on a (so the rows meeting [x, y] on a start in [x - maxlen, y]).
    std::vector<std::vector<int64_t>> order, sorted_lo;
    std::vector<int64_t> maxlen;
  };
  void prepare_side(Side& s) const;
  ProvRCTable t_;
  Side out_, in_;
};

}  // namespace dslog
