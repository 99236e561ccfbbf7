// Factorised extraction: the annotation handles of one output array straight to ProvRC tables.
//
// The old extraction wrote every (output cell, input cell) pair and compression folded them
// back; standardising a 1000x1000 matrix has 1e9 such pairs for a table of one row. Here the
// handles are read once, in C order, and the lineage is kept factorised the whole way:
//
//  * Small sets (a cell, kCell2, short progressions and lists, small lazy unions) are read
//    cell by cell and tracked as *runs*: pairs (i, c), (i + 1, c + 1), ... with a constant
//    distance c - i (element-wise and stencil lineage is a few such runs per row). A run is
//    cut into pieces along the rows of both arrays, each piece one record (its last input
//    axis relative to the last output axis). Pairs that start no run are kept as pairs and
//    compressed by the ordinary ProvRC pass (their number is bounded by the lineage that
//    does not fold).
//  * Big sets are never expanded per output cell. A big node reachable from an output cell
//    (a list, a long progression, a list holding references) is an *atom*; the output cells
//    that reach an atom form its output group, and the group times the atom's cells is a
//    product of two box sets: O(boxes) records. When one cell reaches several atoms whose
//    cells may overlap, their union is the atom of a union group (keyed by the atom set), so
//    rows stay disjoint. The small cells of an output cell that lie in its atoms are dropped.
//  * All records of one input go through the ProvRC merge passes (merge_records): range
//    encoding of the inputs, relative/mirrored folding along the outputs, strided rows.
//
// Memory: O(handles read + records + atoms' cells), never O(pairs). Exactness: every pair is
// produced exactly once (the run, pair and group parts are disjoint by construction) and the
// merge passes only unite disjoint records, so the table stands for exactly the pairs of the
// old extraction; tests check it cell for cell against that reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "dslog/annotations.hpp"
#include "dslog/provrc.hpp"

namespace dslog {

// A handle that fails validation (stale or forged): the caller names it (set_handle_error).
class BadHandle : public std::runtime_error {
 public:
  explicit BadHandle(Handle h) : std::runtime_error("invalid annotation handle"), handle(h) {}
  Handle handle;
};

// A set reached through other sets holds a cell outside every input (forged bytes).
class ForgedCell : public std::runtime_error {
 public:
  ForgedCell() : std::runtime_error("annotation names a cell outside the inputs") {}
};

struct ExtractStats {
  int64_t cells = 0;       // output cells read
  int64_t runs = 0;        // runs of two or more pairs
  int64_t loose_pairs = 0; // pairs kept as pairs
  int64_t atoms = 0;       // distinct big shared sets
  int64_t groups = 0;      // union groups
  int64_t records = 0;     // records before the merge passes (all inputs)
};

// The ProvRC table of the output (handles at data + i * stride, i < ncell, C order of
// out_shape) against every input (in_shapes, in the arena's order). Contributing sets, or the
// considered ones. Reads the arena only; no Python. Throws BadHandle / ForgedCell.
//
// With `values` (ncell doubles), the float64 value of cell i (at vsrc + i * stride) is
// copied to values[i] in the same pass, block by block just ahead of the handles read: the
// output is read from memory once for its values and its lineage (an element-wise capture
// spends as long reading its output as computing it).
std::vector<ProvRCTable> extract_tables(Arena& ar, const char* data, std::ptrdiff_t stride,
                                        int64_t ncell, const std::vector<int64_t>& out_shape,
                                        const std::vector<std::vector<int64_t>>& in_shapes,
                                        bool considered, ExtractStats* stats,
                                        const char* vsrc = nullptr, double* values = nullptr);

}  // namespace dslog
