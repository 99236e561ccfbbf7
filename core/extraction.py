"""Factorised extraction: the lineage of a tracked output straight to its stored tables.

Why a module of its own: what a capture costs must grow with the compressed lineage, never
with the raw (output cell, input cell) pairs. Standardising a 1000×1000 matrix has 10⁹ such
pairs and a table of one row; writing the pairs and compressing them afterwards is what made
capture fail exactly where users need it. The native side (``native/src/extract.cpp``) reads
the annotation handles once and emits ProvRC rows directly (runs of small sets, groups of
output cells sharing one big input set by reference); this module turns its fields into
:class:`~dslog_dagster.core.provrc.LineageTable` objects, applies the store's choice between
ProvRC and the columnar encoding, and offers the raw relations lazily
(:class:`LazyRelations`), expanded from the tables only when someone reads them.

Every annotated run goes through here: :func:`~dslog_dagster.core.capture.capture`, the view
registry (:mod:`dslog_dagster.core.reuse`), its sampled verification, and the Dagster path.
"""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.compression import compress
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation, Shape

__all__ = [
    "LazyRelations",
    "extract_tables",
    "extraction_stats",
    "stored_table",
    "values_and_tables",
]

# ProvRC pays for itself when a row stands for at least this many pairs; below it the
# columnar encoding may be smaller, and the pairs (fewer than this many per row) are
# expanded to weigh the two exactly as :func:`~dslog_dagster.core.compression.compress` does.
_ROWS_PER_PAIR_CHECK = 16
# Relations of at most this many pairs are stored exactly as :func:`compress` stores them
# (their pairs re-compressed: a bounded cost), so small captures keep the canonical tables
# that view generalisation and table comparisons were built on. Bigger ones keep the rows
# of the factorised extraction, which hold the same pairs.
CANONICAL_MAX_PAIRS = 1 << 16


def stored_table(table: LineageTable) -> LineageTable:
    """``table`` as the store keeps it: the ProvRC table itself; or, when it stands for at
    most :data:`CANONICAL_MAX_PAIRS` pairs or fewer than 16 pairs per row, whatever
    :func:`~dslog_dagster.core.compression.compress` makes of its pairs (ProvRC or the
    columnar encoding). Either case expands a bounded number of pairs per row, so the cost
    stays proportional to the compressed lineage."""
    if table.rows == 0 or table.out_rank + table.in_rank == 0:
        return table
    if table.n_pairs > CANONICAL_MAX_PAIRS and table.rows * _ROWS_PER_PAIR_CHECK <= table.n_pairs:
        return table
    return compress(table.decompress())


def extract_tables(
    arr: Any,
    shapes: Sequence[Shape],
    considered: bool = False,
    values: npt.NDArray[np.float64] | None = None,
) -> list[LineageTable]:
    """The stored tables of tracked output ``arr`` against every input (``shapes``, in
    argument order), from the running capture: contributing sets, or the considered ones.

    ``values``: a C-contiguous float64 array of ``arr``'s size that receives its values (what
    ``_annotator.values(arr)`` returns) in the same native pass, so the output is read from
    memory once for both (see :func:`values_and_tables`).

    Raises:
        ForgedLineageError: the output holds annotation bytes the capture did not produce.
        StaleLineageError: the output holds annotations of an earlier capture.
    """
    fields, _ = _annotator.extract_tables(arr, [list(s) for s in shapes], considered, values)
    out_shape = tuple(int(d) for d in arr.shape)
    tables: list[LineageTable] = []
    for shape, (rows, n_pairs, *provrc) in zip(shapes, fields, strict=True):
        table = LineageTable.from_fields(out_shape, tuple(shape), int(rows), int(n_pairs), provrc)
        tables.append(stored_table(table))
    return tables


def values_and_tables(
    arr: Any, shapes: Sequence[Shape], considered: bool = False
) -> tuple[npt.NDArray[np.float64], list[LineageTable]]:
    """The float64 values of tracked output ``arr`` (its shape, C order) and its stored tables
    (:func:`extract_tables`), from one read of the output."""
    values = np.empty(arr.shape, dtype=np.float64)
    return values, extract_tables(arr, shapes, considered, values)


def extraction_stats(arr: Any, shapes: Sequence[Shape], considered: bool = False) -> dict[str, int]:
    """What the native extraction did for ``arr`` (cells read, runs, loose pairs, atoms,
    union groups, records before merging): for benchmarks and tests."""
    _, stats = _annotator.extract_tables(arr, [list(s) for s in shapes], considered)
    return {str(k): int(v) for k, v in stats.items()}


class LazyRelations(Mapping[tuple[int, int], LineageRelation]):
    """``(output, input) -> LineageRelation`` expanded from tables on first read.

    The capture → store path never reads it (the store takes the tables), so nothing on that
    path expands pairs; code that does read a relation pays for its pairs once (cached).
    """

    def __init__(self, tables: Mapping[tuple[int, int], LineageTable]) -> None:
        self._tables = dict(tables)
        self._cache: dict[tuple[int, int], LineageRelation] = {}

    def __getitem__(self, key: tuple[int, int]) -> LineageRelation:
        rel = self._cache.get(key)
        if rel is None:
            rel = self._tables[key].decompress()
            self._cache[key] = rel
        return rel

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def __repr__(self) -> str:
        return f"LazyRelations({len(self._tables)} tables, {len(self._cache)} expanded)"
