"""Declared lineage: a per-cell capture callable or (output box, input box) pairs, resolved
into a :class:`~dslog_dagster.core.relation.LineageRelation` against the arrays' shapes.

Kept apart from :mod:`~dslog_dagster.core.api` (which accepts these forms in
:class:`~dslog_dagster.core.api.Lineage`) because checking what user code returned, cell by
cell, is its own concern: every value a capture returns is checked and refused with a clear
error, never truncated (``1.5``) or misread (an int where a list of cells belongs).
"""

import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

import numpy as np

from dslog_dagster.core.query import as_cells
from dslog_dagster.core.relation import I64, LineageRelation, Shape
from dslog_dagster.errors import InvalidRelationError, QueryError

__all__ = ["CellCapture", "from_box_pairs", "from_callable"]

CellCapture: TypeAlias = Callable[[tuple[int, ...]], Iterable[Any]]


def from_callable(
    cap: CellCapture, out_shape: Shape, in_shape: Shape, where: str
) -> LineageRelation:
    """The relation a per-cell capture ``cap`` declares (called once per output cell).

    Raises:
        InvalidRelationError: it failed, or returned something that is not input cells.
    """
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    m = len(in_shape)
    for b in np.ndindex(*out_shape):
        try:
            cells = cap(tuple(int(x) for x in b))
        except Exception as e:
            msg = f"{where}: the capture callable failed on output cell {b}: {e}"
            raise InvalidRelationError(msg) from e
        for a in _returned_cells(cells, b, where):
            cell = _input_cell(a, b, m, where)
            outs.append(tuple(int(x) for x in b))
            ins.append(cell)
    n = len(outs)
    oc = np.asarray(outs, dtype=np.int64).reshape(n, len(out_shape)).T
    ic = np.asarray(ins, dtype=np.int64).reshape(n, m).T
    if not out_shape and not in_shape:
        return LineageRelation.from_columns((), (), [], [], n=min(n, 1))
    return LineageRelation.from_columns(out_shape, in_shape, list(oc), list(ic), n=n)


def _returned_cells(cells: object, b: tuple[int, ...], where: str) -> Iterable[Any]:
    """What a per-cell capture returned for output cell ``b``: an iterable of input cells
    (``None``: no cells).

    Raises:
        InvalidRelationError: anything else (an int is not a list of cells).
    """
    if cells is None:
        return ()
    if isinstance(cells, str | bytes | Mapping) or not isinstance(cells, Iterable):
        msg = (
            f"{where}: capture({b}) returned {reprlib.repr(cells)} "
            f"(`{type(cells).__name__}`); a per-cell "
            "capture returns an iterable of input cells, e.g. `[(i, j)]` or `[i]` for a rank-1 "
            "input (`[]` or None: no cells)."
        )
        raise InvalidRelationError(msg)
    return cells


def _input_cell(a: object, b: tuple[int, ...], m: int, where: str) -> tuple[int, ...]:
    """One input cell ``a`` that a per-cell capture returned for output cell ``b``, as a
    tuple of ``m`` ints.

    Raises:
        InvalidRelationError: not an int (rank 1) or a tuple of ``m`` ints.
    """
    cell: tuple[Any, ...] | None = None
    if isinstance(a, int | np.integer) and not isinstance(a, bool | np.bool_):
        cell = (a,)
    elif isinstance(a, tuple | list) or (isinstance(a, np.ndarray) and a.ndim == 1):
        cell = tuple(a)
    if (
        cell is None
        or len(cell) != m
        or any(isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer) for x in cell)
    ):
        msg = (
            f"{where}: capture({b}) returned the input cell {reprlib.repr(a)}; "
            "input cells are tuples of "
            f"{m} integers" + (" (or one integer)" if m == 1 else "") + "."
        )
        raise InvalidRelationError(msg)
    return tuple(int(x) for x in cell)


def from_box_pairs(
    pairs: list[Any], out_shape: Shape, in_shape: Shape, where: str
) -> LineageRelation:
    """The relation of (output box, input box) pairs: every cell of an output box depends on
    every cell of its input box.

    Raises:
        InvalidRelationError: a pair that is not two boxes of the arrays.
    """
    outs: list[I64] = []
    ins: list[I64] = []
    for p in pairs:
        if not (isinstance(p, tuple | list) and len(p) == 2):
            msg = f"{where}: box captures are (output box, input box) pairs; got {reprlib.repr(p)}."
            raise InvalidRelationError(msg)
        try:
            ob = as_cells(out_shape, p[0] if isinstance(p[0], tuple | slice) else (p[0],))
            ib = as_cells(in_shape, p[1] if isinstance(p[1], tuple | slice) else (p[1],))
        except QueryError as e:
            msg = f"{where}: bad box pair {reprlib.repr(p)}: {e}"
            raise InvalidRelationError(msg) from e
        o, i = ob.to_indices().T, ib.to_indices().T
        no, ni = o.shape[1], i.shape[1]
        outs.append(np.repeat(o, ni, axis=1))
        ins.append(np.tile(i, (1, no)))
    if not out_shape and not in_shape:
        return LineageRelation.from_columns((), (), [], [], n=min(sum(x.shape[1] for x in outs), 1))
    oc = np.hstack(outs) if outs else np.zeros((len(out_shape), 0), np.int64)
    ic = np.hstack(ins) if ins else np.zeros((len(in_shape), 0), np.int64)
    return LineageRelation.from_columns(out_shape, in_shape, list(oc), list(ic), n=oc.shape[1])
