"""Explain a change between two versions of an array (PROVision §VII, version inconsistency).

"Why did this asset's numbers change since yesterday?" Two materializations of the same array
differ in some cells. Each version has its own lineage in the store (its operation, that
operation's inputs at the versions it read, and so on upstream). :func:`explain_change`:

1. compares the two values and finds the **changed output cells**;
2. traces them **backward through each version's lineage** to every upstream array (the
   union over all paths, per version), giving the cells of each upstream array that could
   have caused the change (``traced``);
3. loads each upstream array at the two versions the two traces reached and keeps the traced
   cells whose **values differ** (``changed``) — a value that cannot be loaded (not stored,
   expired by retention) is reported as unknown, never guessed equal;
4. marks where each change **starts**: an array whose traced cells differ while every traced
   input cell of the operation that produced it is equal (or that has no producer in the
   store: a source). There either the source data changed, or the step itself computed
   differently (code, config, a non-deterministic step).

Cells are compared with NaN equal to NaN. When the two versions of an array have different
shapes, every cell of it counts as changed (``shape_changed``) and its trace covers both.
"""

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.query import CellSet
from dslog_dagster.core.store import ArrayRecord, LineageStore
from dslog_dagster.core.trace import Trace, trace
from dslog_dagster.errors import LineageNotFoundError, QueryError

__all__ = ["ArrayChange", "ChangeExplanation", "ValueLoader", "changed_cells", "explain_change"]

ValueLoader = Callable[[ArrayRecord], "npt.NDArray[Any] | None"]
"""Gives the stored value of an array version, or ``None`` when it has none (an intermediate
array that is not stored, a value removed by retention)."""


@dataclass(frozen=True, slots=True)
class ArrayChange:
    """One array of the explanation: what was traced to it and which of those cells differ.

    Attributes:
        name: the array's name in the store (an asset key path, ``[partition]`` appended).
        version_a / version_b: its versions in the two traces (``None``: not reached by that
            version's trace, or the default version).
        shape: its shape (in version b when both exist).
        hops: operations between it and the explained array (0 for that array).
        traced: the cells that could have caused the change (union of both traces).
        changed: the traced cells whose values differ; ``None`` when the values could not be
            compared (one of them is not stored).
        shape_changed: the two versions' shapes differ (every cell counts as changed).
        origin: the change starts here: its traced cells differ while the traced cells of
            every input of the operation that produced it are equal (or it is a source).
        producer: the name of the operation that produced version b (``None``: a source).
    """

    name: str
    version_a: str | None
    version_b: str | None
    shape: tuple[int, ...]
    hops: int
    traced: CellSet
    changed: CellSet | None
    shape_changed: bool = False
    origin: bool = False
    producer: str | None = None

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def percent_traced(self) -> float:
        return 100.0 * self.traced.count() / max(self.n_cells, 1)

    @property
    def percent_changed(self) -> float | None:
        if self.changed is None:
            return None
        return 100.0 * self.changed.count() / max(self.n_cells, 1)


@dataclass(frozen=True, slots=True)
class ChangeExplanation:
    """The answer of :func:`explain_change`: the explained array first, then every upstream
    array either trace reached, nearest first."""

    arrays: tuple[ArrayChange, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def target(self) -> ArrayChange:
        return self.arrays[0]

    @property
    def origins(self) -> tuple[ArrayChange, ...]:
        """The arrays where a change starts (see :class:`ArrayChange`)."""
        return tuple(a for a in self.arrays if a.origin)

    def rows(self) -> list[dict[str, Any]]:
        """One plain row per array (for tables, JSON and Dagster metadata)."""
        out = []
        for a in self.arrays:
            pc = a.percent_changed
            out.append(
                {
                    "array": a.name,
                    "hops": a.hops,
                    "version_a": a.version_a,
                    "version_b": a.version_b,
                    "shape": "×".join(map(str, a.shape)),
                    "traced_cells": a.traced.count(),
                    "traced_pct": round(a.percent_traced, 3),
                    "changed_cells": None if a.changed is None else a.changed.count(),
                    "changed_pct": None if pc is None else round(pc, 3),
                    "changed_boxes": "" if a.changed is None else str(a.changed),
                    "origin": a.origin,
                    "producer": a.producer,
                }
            )
        return out

    def summary(self) -> str:
        """A few lines a person reads first."""
        t = self.target
        changed = t.changed.count() if t.changed is not None else 0
        lines = [
            f"{t.name}: {changed:,} of {t.n_cells:,} cells changed "
            f"({t.percent_changed or 0.0:.2f} %) between {t.version_a} and {t.version_b}."
        ]
        for a in self.arrays[1:]:
            if a.changed is None:
                what = "values not stored: cannot compare"
            else:
                what = f"{a.changed.count():,} of them differ"
            lines.append(
                f"  {a.name} ({a.hops} hop(s) up): {a.traced.count():,} traced cells "
                f"({a.percent_traced:.2f} %), {what}"
            )
        for o in self.origins:
            where = (
                "a source: its data changed"
                if o.producer is None
                else f"its inputs' traced cells are equal, so step `{o.producer}` computed "
                "differently (code, config, or a non-deterministic step)"
            )
            lines.append(f"change starts at {o.name}: {where}")
        lines.extend(self.notes)
        return "\n".join(lines)


def changed_cells(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> CellSet:
    """The cells where ``a`` and ``b`` (same shape) differ, NaN equal to NaN.

    Raises:
        QueryError: the shapes differ.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        msg = f"Cannot compare values of shapes {a.shape} and {b.shape} cell by cell."
        raise QueryError(msg)
    differ = a != b
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        differ &= ~(np.isnan(a) & np.isnan(b))
    return CellSet.from_mask(np.asarray(differ, dtype=bool), a.shape)


def explain_change(
    store: LineageStore,
    name: str,
    version_a: str,
    version_b: str,
    load: ValueLoader,
) -> ChangeExplanation:
    """Explain how version ``version_b`` of array ``name`` differs from ``version_a``.

    Args:
        store: the lineage store holding both versions' lineage.
        name: the array (an asset's key path, ``name[partition]`` for a partition).
        version_a, version_b: its two versions (the run ids that materialized them).
        load: gives an array version's stored value (see :data:`ValueLoader`).

    Raises:
        LineageNotFoundError: a version is not in the store, or its value cannot be loaded.
    """
    rec_a, rec_b = store.get_array(name, version_a), store.get_array(name, version_b)
    val_a, val_b = load(rec_a), load(rec_b)
    if val_a is None or val_b is None:
        which = version_a if val_a is None else version_b
        msg = (
            f"No stored value of `{name}` version `{which}`: both values are needed to see which "
            "cells changed (was it removed by retention? raise keep_last / keep_for_hours)."
        )
        raise LineageNotFoundError(msg)
    notes: list[str] = []
    if val_a.shape == val_b.shape:
        diff = changed_cells(val_a, val_b)
        start_a, start_b = diff, diff
        shape_changed = False
    else:
        shape_changed = True
        start_a, start_b = CellSet.full(val_a.shape), CellSet.full(val_b.shape)
        diff = start_b
        notes.append(
            f"{name} changed shape from {val_a.shape} to {val_b.shape}: every cell is traced."
        )
    ta = trace(store, rec_a, start_a, "backward")
    tb = trace(store, rec_b, start_b, "backward")
    names_a, names_b = ta.by_name(), tb.by_name()
    order = sorted(
        set(names_a) | set(names_b),
        key=lambda n: (
            min(
                tb.hops.get(names_b.get(n, ""), 1 << 30),
                ta.hops.get(names_a.get(n, ""), 1 << 30),
            ),
            n,
        ),
    )
    changes: dict[str, ArrayChange] = {}
    for n in order:
        # the explained array's values are compared above already: not loaded again
        known = (diff, shape_changed) if n == name else None
        changes[n] = _array_change(n, names_a.get(n), names_b.get(n), ta, tb, load, known)
    marked = _mark_origins(changes, tb, ta, names_b, names_a)
    return ChangeExplanation(tuple(marked[n] for n in order), tuple(notes))


def _array_change(
    name: str,
    aid_a: str | None,
    aid_b: str | None,
    ta: Trace,
    tb: Trace,
    load: ValueLoader,
    known: tuple[CellSet, bool] | None = None,
) -> ArrayChange:
    """``name``'s entry: its traced cells from both traces and, unless ``known`` gives them
    (the changed cells and whether the shape changed), the traced cells whose values differ."""
    ra = ta.records[aid_a] if aid_a else None
    rb = tb.records[aid_b] if aid_b else None
    ref = rb or ra
    assert ref is not None
    hops = min(
        tb.hops.get(aid_b or "", 1 << 30),
        ta.hops.get(aid_a or "", 1 << 30),
    )
    op = tb.producers.get(aid_b or "") or ta.producers.get(aid_a or "")
    producer = op.op_name if op is not None else None
    if known is not None:
        changed, reshaped = known
        # the changed cells are where both traces start (all of version b's when reshaped)
        traced = changed if reshaped else _union([ta.cells[aid_a or ""], tb.cells[aid_b or ""]])
        assert ra is not None
        assert rb is not None
        return ArrayChange(
            name, ra.version, rb.version, ref.shape, hops, traced, changed, reshaped,
            producer=producer,
        )  # fmt: skip
    if ra is not None and rb is not None and ra.shape != rb.shape:
        full = CellSet.full(rb.shape)
        return ArrayChange(
            name, ra.version, rb.version, rb.shape, hops, full, full, True, producer=producer
        )
    traced = _union(
        [c for c in (ta.cells.get(aid_a or ""), tb.cells.get(aid_b or "")) if c is not None]
    )
    if ra is None or rb is None:
        # reached by one version's trace only: the other version's lineage does not use it
        return ArrayChange(
            name,
            ra.version if ra else None,
            rb.version if rb else None,
            ref.shape,
            hops,
            traced,
            None,
            producer=producer,
        )
    if ra.array_id == rb.array_id:  # both versions read the very same array version
        same = CellSet.empty(ref.shape)
        return ArrayChange(
            name, ra.version, rb.version, ref.shape, hops, traced, same, producer=producer
        )
    va, vb = load(ra), load(rb)
    if va is None or vb is None or va.shape != vb.shape:
        return ArrayChange(
            name, ra.version, rb.version, ref.shape, hops, traced, None, producer=producer
        )
    differ = changed_cells(va, vb)
    changed = CellSet.from_mask(differ.to_mask() & traced.to_mask(), ref.shape)
    return ArrayChange(
        name, ra.version, rb.version, ref.shape, hops, traced, changed, producer=producer
    )


def _union(sets: Iterable[CellSet]) -> CellSet:
    items = list(sets)
    out = items[0]
    for s in items[1:]:
        out = out | s
    return out


def _mark_origins(
    changes: dict[str, ArrayChange],
    tb: Trace,
    ta: Trace,
    names_b: dict[str, str],
    names_a: dict[str, str],
) -> dict[str, ArrayChange]:
    """Mark the arrays where a change starts: changed cells, and no input of its producer
    (in either version) with changed or unknown traced cells."""
    out = dict(changes)
    for n, c in changes.items():
        if c.changed is None or c.changed.is_empty():
            continue
        op = tb.producers.get(names_b.get(n, "")) or ta.producers.get(names_a.get(n, ""))
        if op is None:
            out[n] = dataclasses.replace(c, origin=True)
            continue
        linked = {t.input for t in op.tables if t.output == n}
        inputs = [changes.get(i) for i in linked]
        # an input no trace reached cannot explain the change; one whose values could not
        # be compared might, so it keeps the change from being placed here
        quiet = all(i is None or (i.changed is not None and i.changed.is_empty()) for i in inputs)
        if quiet:
            out[n] = dataclasses.replace(c, origin=True)
    return out
