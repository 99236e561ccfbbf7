"""Exact in-situ lineage queries over compressed tables (ICDE sec. V, re-derived).

A query carries a set of cells of one array hop by hop to another array. The set is always a
:class:`CellSet`: disjoint boxes in a canonical order, so equal sets compare equal and counts
are exact. One hop is one θ-join between the set and a ProvRC table, run natively
(``native/src/query.cpp``): an interval join on one axis, the exact intersection test on the
others, then de-relativisation of the other side and normalisation of the union.

Derivation (sign convention of :mod:`~dslog_dagster.core.provrc`: ``delta = F(b_j) - a_k``
with ``F(b) = mult·floor((b + r)/q)``):

* **backward** (output cells → input cells). For a query box ``Q`` and a row, let
  ``I = Q ∩ out-box``. A pair ``(b, a)`` of the row needs every ``a_k`` to satisfy its own
  constraint for the *same* ``b``, so the linked inputs factor per output attribute ``b_j``.
  Absolute inputs give ``[lo, hi]``. A single input relative to ``b_j`` gives
  ``⋃_{b ∈ I_j} [F(b) − hi, F(b) − lo]``, one interval when consecutive values of ``F`` are no
  further apart than the delta width (identity, mirrored, strided) and one interval per value
  of ``floor((b + r)/q)`` otherwise (pooling with gaps). Two or more inputs relative to the same
  ``b_j`` (diagonals) are not a box: ``I_j`` is split into the segments over which every ``F``
  is constant and each segment gives a box. Nothing is over-approximated.
* **forward** (input cells → output cells). For a query box ``Q`` the inputs of a pair vary
  independently inside ``Q``, so ``∃ a ∈ Q`` factorises per input: an absolute input needs
  ``Q_k ∩ [lo, hi] ≠ ∅``; a relative one needs ``F(b_j) ∈ [Qlo_k + lo, Qhi_k + hi]`` (the union of
  the shifted delta intervals is contiguous), an interval of ``b_j`` because ``F`` is
  monotone. Every (box, row) pair therefore yields exactly one output box.

The prototype's ``rel_for`` formula had index and sign mistakes and its backward path was wrong
on most inputs; the hypothesis tests in ``tests/property/test_query_exact.py`` compare every
hop and chain with the naive join of the decompressed relations, cell for cell.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dslog_dagster.core.native import kernels
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.query.cells import CellSet, empty_boxes
from dslog_dagster.core.relation import I64, Shape
from dslog_dagster.errors import QueryError

Direction = Literal["forward", "backward"]
QueryEngine = Literal["native", "spark"]
"""Where multi-hop queries run: ``native`` (in-situ C++ here) or ``spark`` (range joins in
Spark SQL, :mod:`dslog_dagster.spark.query`)."""

__all__ = [
    "Direction",
    "PreparedHop",
    "QueryEngine",
    "check_engine",
    "prepare",
    "query_path",
    "run_hops",
]


def check_engine(engine: str) -> QueryEngine:
    """``engine`` as a :data:`QueryEngine`.

    Raises:
        QueryError: it names no engine.
    """
    if engine not in ("native", "spark"):
        msg = f"Unknown query engine {engine!r}; use 'native' or 'spark'."
        raise QueryError(msg)
    return engine  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class PreparedHop:
    """A lineage table ready for repeated queries (input hulls and join order precomputed).

    A factored table (a frame's cell lineage, row table × column table, see
    :func:`~dslog_dagster.core.combine.factored_table`) is prepared as its factors
    (``native`` is None): :func:`run_hops` queries the 1-D factors and multiplies the answers
    as boxes, which is exact because every (row pair, column pair) combination is a pair.
    """

    out_shape: Shape
    in_shape: Shape
    native: kernels.PreparedTable | None
    factors: "tuple[tuple[PreparedHop, PreparedHop], ...]" = ()

    def run(self, cells: CellSet, direction: Direction) -> CellSet:
        """The cells on the other side of the table linked to ``cells``."""
        return run_hops([(self, direction)], cells)


def prepare(table: LineageTable) -> PreparedHop:
    """Prepare a table for queries: input hulls and per-axis row orders, computed once."""
    if table.factors:
        parts = tuple((prepare(r), prepare(c)) for r, c in table.factors)
        return PreparedHop(table.out_shape, table.in_shape, None, parts)
    if table.encoding == "columnar" and table.out_rank + table.in_rank > 0:
        # Rows of single pairs, all absolute: exact, instant, and the scan join handles them
        # by binary search (re-running ProvRC would gain less than 2x: that's why it's columnar).
        l, m, n = table.out_rank, table.in_rank, table.rows
        outs, ins = np.ascontiguousarray(table.raw[:l]), np.ascontiguousarray(table.raw[l:])
        ref = np.full((m, n), -1, dtype=np.int64)
        one, zero = np.ones((m, n), dtype=np.int64), np.zeros((m, n), dtype=np.int64)
        native = kernels.PreparedTable(l, m, n, outs, outs, ref, one, zero, one, ins, ins)
        return PreparedHop(table.out_shape, table.in_shape, native)
    t = table.as_provrc()
    if t.out_rank + t.in_rank == 0:  # 0-d to 0-d: the one pair is there or not
        rows = min(t.rows, 1)
        z = empty_boxes(0, rows)
        return PreparedHop((), (), kernels.PreparedTable(0, 0, rows, z, z, z, z, z, z, z, z))
    return PreparedHop(t.out_shape, t.in_shape, kernels.PreparedTable(*t.native_args()))


def query_path(
    hops: Sequence[tuple[PreparedHop | LineageTable, Direction]], cells: CellSet
) -> CellSet:
    """Carry ``cells`` through ``hops`` (one θ-join per hop) and return the final cell set."""
    prepared = [
        (t if isinstance(t, PreparedHop) else prepare(t), direction) for t, direction in hops
    ]
    return run_hops(prepared, cells)


def run_hops(hops: Sequence[tuple[PreparedHop, Direction]], cells: CellSet) -> CellSet:
    """Carry ``cells`` through prepared hops in one native call (shapes checked up front)."""
    shape = cells.shape
    forwards = []
    for hop, direction in hops:
        if direction not in ("forward", "backward"):
            msg = f"Direction must be 'forward' or 'backward', not {direction!r}."
            raise QueryError(msg)
        fwd = direction == "forward"
        src, dst = (hop.in_shape, hop.out_shape) if fwd else (hop.out_shape, hop.in_shape)
        if src != shape:
            msg = (
                f"A {direction} hop through a table of {hop.out_shape} ← {hop.in_shape} starts "
                f"from an array of shape {src}; the cells so far belong to shape {shape}."
            )
            raise QueryError(msg)
        forwards.append(fwd)
        shape = dst
    if not hops:
        return cells
    lo, hi = cells.lo, cells.hi
    shape = cells.shape
    run: list[tuple[kernels.PreparedTable, bool]] = []  # consecutive native hops, one call
    for (hop, _), fwd in zip(hops, forwards, strict=True):
        if hop.native is not None:
            run.append((hop.native, fwd))
        else:
            if run:
                lo, hi = kernels.run_hops([n for n, _ in run], [f for _, f in run], lo, hi)
                run = []
            lo, hi = _factored_hop(hop, fwd, lo, hi)
        shape = hop.out_shape if fwd else hop.in_shape
    if run:
        lo, hi = kernels.run_hops([n for n, _ in run], [f for _, f in run], lo, hi)
    return CellSet(shape, lo, hi)


def _factored_hop(hop: PreparedHop, forward: bool, lo: I64, hi: I64) -> tuple[I64, I64]:
    """One hop through a factored table: per part, the boxes of cells are grouped by their
    column interval; each group's row intervals go through the row table in one native call,
    the column interval through the column table, and the answer is every (row box, column
    box) pair — exact, since the part holds every combination of a row pair and a column
    pair. Returns normalised boxes of the other side."""
    out_lo: list[I64] = []
    out_hi: list[I64] = []
    for rows, cols in hop.factors:
        if not len(lo):
            break
        # factors are 1-D ProvRC or columnar tables, prepared natively (never factored)
        assert rows.native is not None
        assert cols.native is not None
        col_iv, group = np.unique(
            np.stack([lo[:, 1], hi[:, 1]], axis=1), axis=0, return_inverse=True
        )
        group = group.reshape(-1)
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(len(col_iv) + 1))
        for g, (c0, c1) in enumerate(col_iv):
            sel = order[bounds[g] : bounds[g + 1]]
            c_lo, c_hi = kernels.run_hops(
                [cols.native], [forward], np.array([[c0]], np.int64), np.array([[c1]], np.int64)
            )
            if not len(c_lo):
                continue
            q_lo, q_hi = kernels.normalize_boxes(
                np.ascontiguousarray(lo[sel, :1]), np.ascontiguousarray(hi[sel, :1])
            )
            r_lo, r_hi = kernels.run_hops([rows.native], [forward], q_lo, q_hi)
            if not len(r_lo):
                continue
            nr, nc = len(r_lo), len(c_lo)
            out_lo.append(np.stack([np.repeat(r_lo[:, 0], nc), np.tile(c_lo[:, 0], nr)], axis=1))
            out_hi.append(np.stack([np.repeat(r_hi[:, 0], nc), np.tile(c_hi[:, 0], nr)], axis=1))
    if not out_lo:
        return empty_boxes(0, 2), empty_boxes(0, 2)
    nlo, nhi = kernels.normalize_boxes(np.concatenate(out_lo), np.concatenate(out_hi))
    return nlo, nhi
