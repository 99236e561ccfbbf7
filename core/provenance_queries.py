"""The canned provenance queries of DPDS, over the stored cell-level lineage.

DPDS (dataframe provenance, slides in the papers folder) asks a fixed set of questions of a
pipeline's provenance graph. Here they run on the compressed lineage of the store, at the
three granularities DPDS names for a 2-D array or frame:

* an **item** — one cell ``(row, column)``;
* a **record** — a row, every column (for an N-d array: one index on axis 0);
* a **feature** — a column, every row (axis 1; a 1-D array has one feature, itself);

or any :func:`~dslog_dagster.core.query.as_cells` selection. The questions:

* :func:`why` — *why-provenance*: the cells of every upstream array the selection was
  computed from (through every path), sources marked;
* :func:`how` — *how-provenance*: the operations that produced the selection, in pipeline
  order, with the cells each one read and wrote on the way and their DPDS kinds; ``kind=``
  keeps the operations of one kind ("which imputations touched this cell");
* :func:`history` — the selection's history: :func:`why` and :func:`spread` together, every
  array before and after it;
* :func:`spread` — how far the selection spreads into later arrays (cells and share of each);
  a whole array's spread is the *dataset* spread;
* :func:`invalidated` — what an operation dropped: the cells of each input that reach no
  output (items), and the records and features of which no cell survived.

Each answer (:class:`ProvenanceAnswer`) names arrays (with versions), operations (name, id,
how the lineage was obtained), cells as half-open boxes, and counts with shares.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dslog_dagster.core.query import CellSet, as_cells, prepare, run_hops
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.core.store.effects import KINDS, UNKNOWN
from dslog_dagster.core.trace import Trace, trace
from dslog_dagster.errors import QueryError

__all__ = [
    "ArrayCells",
    "ProvenanceAnswer",
    "Question",
    "StepCells",
    "dropped_records_and_features",
    "feature",
    "history",
    "how",
    "invalidated",
    "item",
    "record",
    "select",
    "spread",
    "why",
]

Question = Literal["why", "how", "history", "spread", "invalidated"]


@dataclass(frozen=True, slots=True)
class ArrayCells:
    """Cells of one array version in an answer."""

    name: str
    version: str | None
    shape: tuple[int, ...]
    cells: CellSet
    hops: int  # operations between it and the selection (negative: upstream)
    source: bool = False  # nothing in the store produced it

    @property
    def count(self) -> int:
        return self.cells.count()

    @property
    def percent(self) -> float:
        return 100.0 * self.count / max(int(np.prod(self.shape, dtype=np.int64)), 1)


@dataclass(frozen=True, slots=True)
class StepCells:
    """One operation of an answer, with the cells it read and wrote along the selection."""

    op_name: str
    op_id: str
    capture_method: str
    input: ArrayCells
    output: ArrayCells
    kinds: tuple[str, ...] = (UNKNOWN,)
    """The operation's DPDS kinds (``("unknown",)``: its capture recorded none)."""


@dataclass(frozen=True, slots=True)
class ProvenanceAnswer:
    """The answer of a canned provenance query."""

    question: Question
    selection: ArrayCells
    arrays: tuple[ArrayCells, ...]
    steps: tuple[StepCells, ...]

    def rows(self) -> list[dict[str, Any]]:
        """One plain row per array (``why``, ``spread``, ``history``, ``invalidated``) or per
        step (``how``), for tables, JSON and Dagster metadata."""
        if self.question == "how":
            return [
                {
                    "step": k,
                    "operation": s.op_name,
                    "op_id": s.op_id,
                    "obtained": s.capture_method,
                    "kinds": ", ".join(s.kinds),
                    "input": s.input.name,
                    "input_cells": s.input.count,
                    "input_boxes": str(s.input.cells),
                    "output": s.output.name,
                    "output_cells": s.output.count,
                    "output_boxes": str(s.output.cells),
                }
                for k, s in enumerate(self.steps)
            ]
        rows: list[dict[str, Any]] = [
            {
                "array": a.name,
                "version": a.version,
                "hops": a.hops,
                "source": a.source,
                "cells": a.count,
                "pct": round(a.percent, 3),
                "boxes": str(a.cells),
            }
            for a in self.arrays
        ]
        if self.question == "invalidated":
            for r, a in zip(rows, self.arrays, strict=True):
                recs, feats = dropped_records_and_features(a)
                r["records_dropped"] = recs
                r["features_dropped"] = feats
        return rows

    def summary(self) -> str:
        s = self.selection
        head = f"{self.question}: {s.count:,} cell(s) of {s.name} ({s.cells})"
        if self.question == "how":
            body = [
                f"  {k}. {st.op_name} ({st.capture_method}; {', '.join(st.kinds)}): "
                f"{st.input.count:,} cell(s) of "
                f"{st.input.name} -> {st.output.count:,} of {st.output.name}"
                for k, st in enumerate(self.steps, start=1)
            ]
        else:
            body = [
                f"  {a.name} ({a.hops:+d} hop(s){', source' if a.source else ''}): "
                f"{a.count:,} cell(s), {a.percent:.2f} %"
                for a in self.arrays
            ]
        return "\n".join([head, *body])


# ------------------------------------------------------------------ selections


def _box(shape: Sequence[int], fixed: dict[int, int]) -> CellSet:
    """Every cell of ``shape`` whose index on each axis of ``fixed`` is the given one."""
    sh = tuple(int(d) for d in shape)
    start = [fixed.get(k, 0) for k in range(len(sh))]
    stop = [fixed[k] + 1 if k in fixed else d for k, d in enumerate(sh)]
    for k, v in fixed.items():
        if not 0 <= v < sh[k]:
            msg = f"Index {v} is outside axis {k} of an array of shape {sh}."
            raise QueryError(msg)
    return CellSet.from_ranges(sh, [start], [stop])


def item(shape: Sequence[int], row: int, column: int) -> CellSet:
    """DPDS item: the cell ``(row, column)`` of a 2-D array or frame."""
    _need_rank(shape, 2, "an item")
    return _box(shape, {0: row, 1: column})


def record(shape: Sequence[int], row: int) -> CellSet:
    """DPDS record: row ``row``, every column (axis 0 index of an N-d array)."""
    _need_rank(shape, 1, "a record")
    return _box(shape, {0: row})


def feature(shape: Sequence[int], column: int) -> CellSet:
    """DPDS feature: column ``column``, every row (a 1-D array's only feature is itself)."""
    if len(shape) == 1:
        if column != 0:
            msg = f"A 1-D array has one feature (0), not {column}."
            raise QueryError(msg)
        return CellSet.full(tuple(shape))
    _need_rank(shape, 2, "a feature")
    return _box(shape, {1: column})


def _need_rank(shape: Sequence[int], rank: int, what: str) -> None:
    if len(shape) < rank:
        msg = f"An array of shape {tuple(shape)} has no {what} (it needs rank ≥ {rank})."
        raise QueryError(msg)


def select(
    shape: Sequence[int],
    *,
    cells: object = None,
    row: int | None = None,
    column: int | None = None,
) -> CellSet:
    """The cells of a selection: ``row`` and ``column`` → an item; ``row`` → a record;
    ``column`` → a feature; ``cells`` → any :func:`as_cells` form; nothing → every cell."""
    if cells is not None:
        if row is not None or column is not None:
            msg = "Select with cells=, or with row=/column=, not both."
            raise QueryError(msg)
        return as_cells(tuple(shape), cells)
    if row is not None and column is not None:
        return item(shape, row, column)
    if row is not None:
        return record(shape, row)
    if column is not None:
        return feature(shape, column)
    return CellSet.full(tuple(shape))


# ------------------------------------------------------------------ queries


def _array_cells(tr: Trace, aid: str, sign: int) -> ArrayCells:
    rec = tr.records[aid]
    source = tr.direction == "backward" and tr.producers.get(aid, None) is None
    return ArrayCells(
        rec.name, rec.version, tuple(rec.shape), tr.cells[aid], sign * tr.hops[aid], source
    )


def _reached(tr: Trace, sign: int) -> list[ArrayCells]:
    return [
        _array_cells(tr, a.array_id, sign) for a in tr.arrays() if a.array_id != tr.start.array_id
    ]


def _resolve(store: LineageStore, array: str | ArrayRecord, version: str | None) -> ArrayRecord:
    return array if isinstance(array, ArrayRecord) else store.get_array(array, version)


def _selection(rec: ArrayRecord, cells: CellSet) -> ArrayCells:
    return ArrayCells(rec.name, rec.version, tuple(rec.shape), cells, 0)


def why(
    store: LineageStore, array: str | ArrayRecord, cells: CellSet, *, version: str | None = None
) -> ProvenanceAnswer:
    """Why-provenance: the cells of every upstream array ``cells`` were computed from."""
    rec = _resolve(store, array, version)
    tr = trace(store, rec, cells, "backward")
    return ProvenanceAnswer("why", _selection(rec, cells), tuple(_reached(tr, -1)), ())


def how(
    store: LineageStore,
    array: str | ArrayRecord,
    cells: CellSet,
    *,
    version: str | None = None,
    kind: str | None = None,
) -> ProvenanceAnswer:
    """How-provenance: the operations that produced ``cells``, sources first, each with the
    cells of its input it read and of its output it wrote along the selection, and its DPDS
    kinds. ``kind`` (one of :data:`~dslog_dagster.core.store.effects.KINDS`, or
    ``"unknown"``) keeps only the operations of that kind: ``kind="imputation"`` answers
    "which imputations touched these cells". A pandas or Spark step is one operation of
    several kinds (one per call it ran); it is kept when one of its calls has the kind.

    Raises:
        QueryError: ``kind`` is not a kind.
    """
    if kind is not None and kind not in (*KINDS, UNKNOWN):
        msg = f"Unknown operation kind `{kind}`; use one of {', '.join((*KINDS, UNKNOWN))}."
        raise QueryError(msg)
    rec = _resolve(store, array, version)
    tr = trace(store, rec, cells, "backward")
    steps = []
    for c in tr.crossings.values():
        if c.reached.is_empty() or (kind is not None and kind not in c.operation.kinds):
            continue
        out_hops = -tr.hops[c.source.array_id]
        steps.append(
            StepCells(
                c.operation.op_name,
                c.operation.op_id,
                c.operation.capture_method,
                ArrayCells(
                    c.target.name, c.target.version, tuple(c.target.shape), c.reached, out_hops - 1
                ),
                ArrayCells(
                    c.source.name, c.source.version, tuple(c.source.shape), c.carried, out_hops
                ),
                c.operation.kinds,
            )
        )
    steps.sort(key=lambda s: (s.output.hops, s.op_id, s.input.name))
    return ProvenanceAnswer("how", _selection(rec, cells), tuple(_reached(tr, -1)), tuple(steps))


def spread(
    store: LineageStore, array: str | ArrayRecord, cells: CellSet, *, version: str | None = None
) -> ProvenanceAnswer:
    """How far ``cells`` spread: the cells of every later array computed from them."""
    rec = _resolve(store, array, version)
    tr = trace(store, rec, cells, "forward")
    return ProvenanceAnswer("spread", _selection(rec, cells), tuple(_reached(tr, 1)), ())


def history(
    store: LineageStore, array: str | ArrayRecord, cells: CellSet, *, version: str | None = None
) -> ProvenanceAnswer:
    """The history of ``cells``: every earlier array they came from and every later array
    they went into (:func:`why` and :func:`spread` at once), oldest first."""
    rec = _resolve(store, array, version)
    back = trace(store, rec, cells, "backward")
    fwd = trace(store, rec, cells, "forward")
    before = sorted(_reached(back, -1), key=lambda a: (a.hops, a.name))
    after = _reached(fwd, 1)
    return ProvenanceAnswer(
        "history", _selection(rec, cells), (*before, _selection(rec, cells), *after), ()
    )


def invalidated(store: LineageStore, op: str | OperationRecord) -> ProvenanceAnswer:
    """What operation ``op`` dropped: per input, the cells that reach none of its outputs.

    The answer's arrays are the op's inputs with their dropped cells (``hops`` -1); its
    :meth:`~ProvenanceAnswer.rows` also list the records (rows) and features (columns) of
    which no cell reached an output (:func:`dropped_records_and_features`).
    """
    rec = op if isinstance(op, OperationRecord) else store.get_operation(op)
    arrays = []
    for inp in rec.inputs:
        reaching = CellSet.empty(tuple(inp.shape))
        for t in rec.tables:
            if t.input != inp.name:
                continue
            out = next(o for o in rec.outputs if o.name == t.output)
            hop = prepare(store.read_lineage(rec, t.output, t.input))
            reaching = reaching | run_hops([(hop, "backward")], CellSet.full(tuple(out.shape)))
        mask = ~reaching.to_mask()
        arrays.append(
            ArrayCells(inp.name, inp.version, tuple(inp.shape), CellSet.from_mask(mask), -1)
        )
    first = rec.outputs[0] if rec.outputs else rec.inputs[0]
    sel = ArrayCells(first.name, first.version, tuple(first.shape), CellSet.empty(first.shape), 0)
    return ProvenanceAnswer("invalidated", sel, tuple(arrays), ())


def dropped_records_and_features(a: ArrayCells) -> tuple[list[int], list[int]]:
    """The rows and columns of ``a`` (2-D) all of whose cells are in ``a.cells``."""
    if len(a.shape) != 2:
        return [], []
    m = a.cells.to_mask()
    return np.flatnonzero(m.all(axis=1)).tolist(), np.flatnonzero(m.all(axis=0)).tolist()
