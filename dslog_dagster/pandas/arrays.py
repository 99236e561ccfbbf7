"""The bridge between a pandas capture and the NumPy annotator: ``to_numpy()`` and back.

Data scientists leave pandas for NumPy in the middle of a step (``df[cols].to_numpy() @ w``,
``np.log1p(s.to_numpy())``) and put the result back as a column. Inside
:func:`~dslog_dagster.pandas.capture_pandas` that round trip keeps its cell lineage:

* ``frame.to_numpy()`` / ``series.to_numpy()`` of float64 columns hands out an array of the
  NumPy annotator's ``tracked_float`` dtype (the capture starts an annotation run in its
  thread the first time). Each of its cells is annotated as itself; the bridge remembers
  which frame cells those are (their column lineage, their rows' row maps and row-level
  considered cells). Other dtypes are refused: the annotated values are float64, and an
  integer or text array would compute differently from plain pandas.
* NumPy code runs on it unchanged (the annotator's semantics: arithmetic unions, picks pass
  the picked cell, compared cells are considered).
* ``frame.assign(c=array)`` / ``frame["c"] = array`` of a 1-D tracked array of the frame's
  length takes the values (bit for bit what plain NumPy computes) and a column lineage
  composed of the two: output cell ``k`` ← bridged cell ``(i, j)`` (from the annotator) ←
  the input cells cell ``(i, j)`` came from (from the bridge). A contributing pair through a
  contributing pair stays contributing; any other path is considered; cell ``(i, j)``'s row
  considered cells (filter predicates, join keys) are considered too.

Anything else that would let a tracked array leave the step without lineage (returning it,
mixing it into a series' arithmetic) is refused with the fix.
"""

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dslog_dagster.core.extraction import extract_tables
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.errors import CaptureError, UnsupportedFrameOperationError
from dslog_dagster.pandas.rows import I64
from dslog_dagster.pandas.state import ColumnLineage, FrameState, PandasContext

__all__ = ["ArrayBridge", "bridge_of", "end_bridge", "is_tracked_array"]


def is_tracked_array(value: Any) -> bool:
    """``value`` is an array of the NumPy annotator's ``tracked_float`` dtype."""
    return isinstance(value, np.ndarray) and value.dtype == _annotator.dtype


_BRIDGES: "weakref.WeakKeyDictionary[PandasContext, ArrayBridge]" = weakref.WeakKeyDictionary()
"""Each capture's bridge (by its context), made on first use of ``to_numpy()``."""


def bridge_of(ctx: PandasContext) -> "ArrayBridge":
    """The capture's bridge, made on first use."""
    bridge = _BRIDGES.get(ctx)
    if bridge is None:
        bridge = _BRIDGES[ctx] = ArrayBridge()
    return bridge


def end_bridge(ctx: PandasContext) -> None:
    """End the annotation run of the capture's bridge, if it has one (the capture is over,
    or failed): its tracked arrays are spent."""
    bridge = _BRIDGES.pop(ctx, None)
    if bridge is not None:
        bridge.end()


@dataclass(frozen=True)
class _Block:
    """One ``to_numpy()``: the frame cells behind annotated input ``k`` of the run."""

    shape: tuple[int, ...]
    columns: tuple[ColumnLineage, ...]
    row_consid: frozenset[tuple[int, int]]


@dataclass(eq=False)
class ArrayBridge:
    """The annotation run of one pandas capture and the blocks handed to NumPy."""

    epoch: int | None = None
    blocks: list[_Block] = field(default_factory=list)

    def to_numpy(
        self, values: Any, state: FrameState, columns: list[ColumnLineage], op: str
    ) -> Any:
        """A tracked copy of ``values`` (1-D: one column; 2-D: rows × ``columns``)."""
        arr = np.asarray(values)
        if arr.dtype != np.float64:
            msg = (
                f"`{op}` of {arr.dtype} values has no lineage rule in dslog's pandas capture: "
                "only float64 columns enter NumPy with their lineage (the annotated values are "
                "float64, so other dtypes would compute differently from plain pandas). Cast "
                "first: `.astype('float64')`."
            )
            raise UnsupportedFrameOperationError(msg)
        if self.epoch is None:
            if _annotator.active():
                msg = (
                    f"`{op}` inside a NumPy capture in the same thread: captures do not nest. "
                    "Capture the pandas step on its own."
                )
                raise CaptureError(msg)
            self.epoch = _annotator.begin(1)  # considered sets too: both relations are kept
        tracked, _ = _annotator.annotate(np.ascontiguousarray(arr))
        self.blocks.append(_Block(arr.shape, tuple(columns), state.row_consid))
        return tracked

    def end(self) -> None:
        """End the annotation run (the capture is over, or failed)."""
        if self.epoch is not None:
            _annotator.end(self.epoch)
            self.epoch = None

    def column(
        self, arr: Any, ctx: PandasContext, n_rows: int, op: str
    ) -> tuple[Any, ColumnLineage]:
        """The plain values of 1-D tracked ``arr`` and its column lineage in a frame of
        ``n_rows`` rows (see the module docstring)."""
        if self.epoch is None or arr.ndim != 1 or arr.shape[0] != n_rows:
            msg = (
                f"`{op}`: a tracked NumPy array goes back into a frame as one column of the "
                f"frame's length ({n_rows} rows); got shape {arr.shape}."
            )
            raise CaptureError(msg)
        shapes = [b.shape for b in self.blocks]
        values = np.empty(arr.shape, np.float64)
        contrib_tables = extract_tables(arr, shapes, False, values)
        consid_tables = extract_tables(arr, shapes, True)
        contrib: set[tuple[int, int]] = set()
        consid: set[tuple[int, int]] = set()
        for block, c_table, k_table in zip(self.blocks, contrib_tables, consid_tables, strict=True):
            c_pairs = _pairs(c_table, block.shape)
            k_pairs = _pairs(k_table, block.shape)
            for j, lin in enumerate(block.columns):
                c_out, c_rows = c_pairs.get(j, (_EMPTY, _EMPTY))
                k_out, k_rows = k_pairs.get(j, (_EMPTY, _EMPTY))
                all_out = np.concatenate([c_out, k_out])
                all_rows = np.concatenate([c_rows, k_rows])
                if c_out.size:
                    via = _Via(ctx, c_out, c_rows, n_rows)
                    contrib |= {(via.slot(s), c) for s, c in lin.contrib}
                    consid |= {(via.slot(s), c) for s, c in lin.consid}
                if all_out.size:
                    via = _Via(ctx, all_out, all_rows, n_rows)
                    consid |= {(via.slot(s), c) for s, c in lin.full() | block.row_consid}
        return values, ColumnLineage(frozenset(contrib), frozenset(consid - contrib))


_EMPTY = np.zeros(0, np.int64)


@dataclass(eq=False)
class _Via:
    """New slots for the pairs ``output row out[t] <- bridged row rows[t]``, one per slot of
    the bridged frame (slots sharing a row map share the composed map)."""

    ctx: PandasContext
    out: I64
    rows: I64
    n_rows: int
    made: dict[int, int] = field(default_factory=dict)
    maps: dict[int, Any] = field(default_factory=dict)

    def slot(self, s: int) -> int:
        if s not in self.made:
            inp, rmap = self.ctx.slots[s]
            if id(rmap) not in self.maps:
                self.maps[id(rmap)] = (rmap, rmap.gather(self.out, self.rows, self.n_rows))
            self.made[s] = self.ctx.new_slot(inp, self.maps[id(rmap)][1])
        return self.made[s]


def _pairs(table: Any, shape: tuple[int, ...]) -> dict[int, tuple[I64, I64]]:
    """Bridged column ``j`` -> (output rows, bridged rows) of the pairs of ``table``."""
    rel = table.decompress()
    out = np.asarray(rel.out_cols[0], np.int64)
    ins = [np.asarray(c, np.int64) for c in rel.in_cols]
    rows = ins[0]
    cols = ins[1] if len(shape) == 2 else np.zeros_like(rows)
    found: dict[int, tuple[I64, I64]] = {}
    for j in np.unique(cols).tolist():
        pick = cols == j
        found[int(j)] = (out[pick], rows[pick])
    return found
