"""The DPDS operation kind of a NumPy operation, read off its captured lineage.

A NumPy capture runs the user's function on annotated arrays: the annotator sees cells, not
the calls that moved them, so the kind comes from the relation's structure. The rule (also in
docs/concepts/operation-kinds.md), checked in this order on the contributing relations of
one output, ``out <- in_k``:

1. **value transformation** — every input with lineage has the output's shape and each pair
   joins a cell to the cell at the same index (an element-wise ufunc, ``np.where``, a clip);
   every column of a 2-D output is *transformed*.
2. **instance drop** — one input with lineage, the same trailing shape, fewer rows, and each
   output row built from exactly one input row, the same index on every other axis, no input
   row used twice (a boolean filter, ``x[idx]`` with distinct rows): ``rows_dropped`` is the
   difference.
3. **feature selection** — one 2-D input, the same rows, fewer columns, each output column a
   copy of exactly one input column row by row, none used twice: the others are *removed*.
4. **append** — two or more inputs, each with the output's trailing shape, each copied row by
   row to a block of consecutive output rows, the blocks tiling the output in order
   (``np.concatenate`` / ``np.vstack``).
5. **dimensionality reduction** — one 2-D input, a 1-D output or a 2-D output with the same
   rows and fewer columns, every pair inside one row, some output cell from several cells
   (``x.sum(axis=1)``, a row-wise norm).

Anything else — and any relation of more than :data:`PAIRS_MAX` pairs, where the check would
cost more than the capture it describes — is ``unknown``: never guessed. Columns of arrays
are named by position (``"3"``); arrays wider than :data:`COLUMNS_MAX` list none (``None``).
"""

from collections.abc import Mapping, Sequence

import numpy as np

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store.effects import (
    APPEND,
    DIMENSIONALITY_REDUCTION,
    FEATURE_SELECTION,
    INSTANCE_DROP,
    UNKNOWN,
    VALUE_TRANSFORMATION,
    OperationEffects,
    Step,
    step,
)
from dslog_dagster.core.store.records import ArrayRecord

__all__ = ["COLUMNS_MAX", "PAIRS_MAX", "array_effects", "numpy_effects"]

PAIRS_MAX = 1 << 22
"""Relations with more pairs than this are not examined (the kind is ``unknown``)."""
COLUMNS_MAX = 1024
"""Arrays with more columns than this list no column names in their effects."""

CALL = "numpy"


def _cols(n: int | None) -> tuple[str, ...] | None:
    if n is None or n > COLUMNS_MAX:
        return None
    return tuple(str(j) for j in range(n))


def _unknown() -> OperationEffects:
    return OperationEffects((Step(CALL, (UNKNOWN,), None, None, (), None),))


def numpy_effects(
    out_shape: Sequence[int], relations: Sequence[LineageRelation | LineageTable | None]
) -> OperationEffects:
    """The effects of a NumPy operation with one output of ``out_shape`` and the
    contributing ``relations`` ``out <- in_k`` (``None``: that input has no lineage); see the
    module docstring for the rule."""
    out = tuple(int(d) for d in out_shape)
    rels: list[LineageRelation] = []
    for r in relations:
        if r is None:
            continue
        if isinstance(r, LineageTable):
            if r.n_pairs > PAIRS_MAX:
                return _unknown()
            if r.n_pairs == 0:
                continue
            r = r.decompress()
        if r.n > PAIRS_MAX:
            return _unknown()
        if r.n:
            rels.append(r)
    if not rels:
        return _unknown()
    width = out[1] if len(out) == 2 else None
    if all(_diagonal(r, out) for r in rels):
        return OperationEffects((step(CALL, [VALUE_TRANSFORMATION], transformed=_cols(width)),))
    if len(rels) == 1:
        found = _one_input(rels[0], out)
        if found is not None:
            return OperationEffects((found,))
    elif _appended(rels, out):
        return OperationEffects((step(CALL, [APPEND], rows_dropped=0, rows_generated=0),))
    return _unknown()


def _diagonal(r: LineageRelation, out: tuple[int, ...]) -> bool:
    return tuple(r.in_shape) == out and bool(np.array_equal(r.out_cols, r.in_cols))


def _row_function(r: LineageRelation) -> np.ndarray | None:
    """Output row -> its one input row (``-1``: none), when each output row reads one input
    row only; else ``None``."""
    rows = np.full(r.out_shape[0], -1, np.int64)
    o, i = r.out_cols[0], r.in_cols[0]
    rows[o] = i
    return rows if bool(np.all(rows[o] == i)) else None


def _one_input(r: LineageRelation, out: tuple[int, ...]) -> Step | None:
    ins = tuple(r.in_shape)
    if len(ins) != len(out) or not ins:
        return _reduction(r, out, ins)
    if ins[1:] == out[1:] and out[0] < ins[0] and np.array_equal(r.out_cols[1:], r.in_cols[1:]):
        rows = _row_function(r)
        # each output row one input row, none used twice
        if rows is not None and bool((rows >= 0).all()) and np.unique(rows).size == rows.size:
            return step(CALL, [INSTANCE_DROP], rows_dropped=ins[0] - out[0], rows_generated=0)
    same_rows = len(ins) == 2 and out[0] == ins[0] and out[1] < ins[1]
    if same_rows and np.array_equal(r.out_cols[0], r.in_cols[0]):
        cols = np.full(out[1], -1, np.int64)
        cols[r.out_cols[1]] = r.in_cols[1]
        one = bool(np.all(cols[r.out_cols[1]] == r.in_cols[1])) and bool((cols >= 0).all())
        if one and np.unique(cols).size == cols.size:
            gone = sorted(set(range(ins[1])) - {int(c) for c in cols})
            removed = tuple(str(c) for c in gone) if ins[1] <= COLUMNS_MAX else None
            return step(CALL, [FEATURE_SELECTION], removed=removed, rows_dropped=0)
        return _reduction(r, out, ins)
    return None


def _reduction(r: LineageRelation, out: tuple[int, ...], ins: tuple[int, ...]) -> Step | None:
    if len(ins) != 2 or not out or out[0] != ins[0] or (len(out) == 2 and out[1] >= ins[1]):
        return None
    if len(out) > 2 or not np.array_equal(r.out_cols[0], r.in_cols[0]):
        return None
    flat = np.ravel_multi_index(tuple(r.out_cols), out)
    if np.unique(flat).size == flat.size:
        return None  # each output cell from one cell: not a reduction
    return step(
        CALL,
        [DIMENSIONALITY_REDUCTION],
        removed=_cols(ins[1]),
        added=_cols(out[1] if len(out) == 2 else 1),
        rows_dropped=0,
    )


def _appended(rels: Sequence[LineageRelation], out: tuple[int, ...]) -> bool:
    start = 0
    for r in rels:
        ins = tuple(r.in_shape)
        if len(ins) != len(out) or not ins or ins[1:] != out[1:] or r.n != int(np.prod(ins)):
            return False
        if not np.array_equal(r.out_cols[1:], r.in_cols[1:]):
            return False
        if not np.array_equal(r.out_cols[0], r.in_cols[0] + start):
            return False
        start += ins[0]
    return start == out[0]


def array_effects(
    outputs: Sequence[ArrayRecord],
    inputs: Sequence[ArrayRecord],
    lineage: Mapping[tuple[str, str], LineageRelation | LineageTable],
) -> OperationEffects | None:
    """:func:`numpy_effects` of an operation registered with ``lineage`` keyed ``(output
    name, input name)``; ``None`` (unknown) for an operation with several outputs."""
    if len(outputs) != 1:
        return None
    out = outputs[0]
    return numpy_effects(out.shape, [lineage.get((out.name, i.name)) for i in inputs])
