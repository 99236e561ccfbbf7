"""Row maps: which source rows each row of a frame came from, as sorted NumPy pair arrays.

pandas is eager, so the row lineage of every operation is known the moment it runs: a
:class:`RowMap` holds the pairs ``(row of this frame, row of one input)`` as two int64 arrays
sorted by frame row, and every rule is a vectorised map over them (NumPy only, no Python loop
per row): ``take`` for operations that pick, reorder or repeat rows (filters, sorts, joins),
``gather`` for operations that pool rows (group-bys, duplicates, top-k prefixes), ``union``
for cells that come from several places. One map per *slot* is shared by every column whose
cells come from those rows, which keeps a frame's cell lineage factored as row map × column
pairs (see :mod:`dslog_dagster.pandas.state`).
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.int_sets import first_of_runs, sorted_unique

__all__ = ["I64", "RowMap", "ranges"]

I64 = npt.NDArray[np.int64]


def ranges(starts: I64, counts: I64) -> I64:
    """``concatenate([arange(s, s + c) for s, c in zip(starts, counts)])``, vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    offsets = np.repeat(ends - counts, counts)
    return np.repeat(starts, counts) + (np.arange(total, dtype=np.int64) - offsets)


@dataclass(frozen=True, eq=False)
class RowMap:
    """Pairs ``(out[i], src[i])``: row ``out[i]`` of a frame of ``n_out`` rows came from row
    ``src[i]`` of an input of ``n_src`` rows. Sorted by ``(out, src)``, without repeats."""

    out: I64
    src: I64
    n_out: int
    n_src: int
    #: ``out`` is ``arange(n_out)``: every row has exactly one source row (an input as read,
    #: and what filters, sorts and inner joins make of it). ``take`` and ``gather`` are then
    #: a plain gather of ``src``, with no row index to build.
    single: bool = False

    @classmethod
    def identity(cls, n: int) -> "RowMap":
        """Each of ``n`` rows from the same row of the input."""
        a = np.arange(n, dtype=np.int64)
        return cls(a, a.copy(), n, n, single=True)

    @classmethod
    def from_pairs(cls, out: I64, src: I64, n_out: int, n_src: int) -> "RowMap":
        """Pairs in any order, repeats allowed (sorted and made unique here)."""
        out = np.asarray(out, np.int64)
        src = np.asarray(src, np.int64)
        if out.size:
            key = out * max(n_src, 1) + src
            step = key[1:] - key[:-1]
            if bool(np.all(step > 0)):  # already sorted and unique: kept as is
                pass
            elif bool(np.all(step >= 0)):  # sorted with repeats (rows pooled in order)
                keep = first_of_runs(key)
                out, src = out[keep], src[keep]
            else:
                key = sorted_unique(key)
                out, src = key // max(n_src, 1), key % max(n_src, 1)
        return cls(out, src, n_out, n_src)

    @property
    def n_pairs(self) -> int:
        return int(self.out.size)

    def _indptr(self) -> I64:
        """Where each frame row's pairs start in ``out`` (sorted), and the end: a count per
        row and a running sum, O(pairs + rows) (a search per row cost a second per million)."""
        indptr = np.zeros(self.n_out + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.out, minlength=self.n_out), out=indptr[1:])
        return indptr

    def take(self, positions: I64) -> "RowMap":
        """New row ``k`` ← old row ``positions[k]`` (``-1``: a row from nowhere, e.g. the
        missing side of an outer join)."""
        positions = np.asarray(positions, np.int64)
        if self.single:
            valid = positions >= 0
            if bool(valid.all()):
                n = int(positions.size)
                out = np.arange(n, dtype=np.int64)
                return RowMap(out, self.src[positions], n, self.n_src, single=True)
            rows = np.flatnonzero(valid).astype(np.int64)
            return RowMap(rows, self.src[positions[rows]], int(positions.size), self.n_src)
        # one spare entry: a frame of no rows still answers row 0 (with no pairs)
        indptr = np.append(self._indptr(), self.n_pairs)
        valid = positions >= 0
        pos = np.where(valid, positions, 0)
        counts = np.where(valid, indptr[pos + 1] - indptr[pos], 0).astype(np.int64)
        new_out = np.repeat(np.arange(positions.size, dtype=np.int64), counts)
        idx = ranges(indptr[pos], counts)
        return RowMap(new_out, self.src[idx], int(positions.size), self.n_src)

    def restrict(self, keep: npt.NDArray[np.bool_]) -> "RowMap":
        """Only the pairs of the rows where ``keep`` (same rows; the others have none)."""
        mask = np.asarray(keep, bool)[self.out]
        return RowMap(self.out[mask], self.src[mask], self.n_out, self.n_src)

    def gather(self, out: I64, rows: I64, n_out: int) -> "RowMap":
        """New row ``out[i]`` ← old row ``rows[i]`` for every ``i`` (a many-to-many pooling:
        group members, duplicates, a top-k prefix), composed with this map."""
        out = np.asarray(out, np.int64)
        rows = np.asarray(rows, np.int64)
        if self.single:  # one pair per row: the pooled pairs are the rows' own sources
            return RowMap.from_pairs(out, self.src[rows], n_out, self.n_src)
        indptr = self._indptr()
        counts = (indptr[rows + 1] - indptr[rows]).astype(np.int64)
        idx = ranges(indptr[rows], counts)
        return RowMap.from_pairs(np.repeat(out, counts), self.src[idx], n_out, self.n_src)

    def union(self, other: "RowMap") -> "RowMap":
        """Every pair of either map (same frame, same input)."""
        if other is self or (
            other.out.size == self.out.size
            and np.array_equal(other.out, self.out)
            and np.array_equal(other.src, self.src)
        ):
            return self  # the columns of one input mostly carry the same rows
        n_src = max(self.n_src, 1)
        # two sorted runs: a stable sort (a merge of runs) instead of a full sort
        key = np.concatenate([self.out * n_src + self.src, other.out * n_src + other.src])
        key = sorted_unique(key, runs=True)
        return RowMap(key // n_src, key % n_src, self.n_out, self.n_src)

    def shifted(self, offset: int, n_out: int) -> "RowMap":
        """The same pairs with every frame row moved by ``offset`` in a frame of ``n_out``
        rows (one part of a row-wise concat)."""
        return RowMap(self.out + offset, self.src, n_out, self.n_src)
