"""The lineage state of a tracked pandas frame: slots, column lineage, row-level considered.

A frame of ``n`` rows and ``m`` columns has cells ``(row position, column position)``, the
same 2-D cell space as a NumPy array or a Spark frame. Its lineage to the capture's inputs is
kept factored, as the Spark capture keeps it (:mod:`dslog_dagster.spark.cell_lineage`):

* a **slot** is a :class:`~dslog_dagster.pandas.rows.RowMap` from this frame's rows to the rows
  of one input (the capture's :class:`PandasContext` numbers them);
* each column has a :class:`ColumnLineage`: the ``(slot, input column)`` pairs its cells
  were computed from (*contributing*) and those that only decided its value (*considered*:
  the condition of a ``where``, a cell ``fillna`` replaced) — cell ``(k, j)`` depends on input
  cell ``(r, c)`` for every pair ``(s, c)`` of column ``j`` and every row ``r`` slot ``s`` maps
  row ``k`` to;
* ``row_consid`` holds the pairs every cell of a row considered because they decided which
  rows exist: filter predicates, join keys, group keys, the sort keys of a top-k. A column
  built from literals inherits them too.

Rules map states to states; nothing here knows pandas' API (see
:mod:`dslog_dagster.pandas.frame`).
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from dslog_dagster.pandas.rows import I64, RowMap

if TYPE_CHECKING:
    from dslog_dagster.core.store.effects import Step
    from dslog_dagster.pandas.char_segments import Segments

__all__ = ["NO_LINEAGE", "ColumnLineage", "FrameInput", "FrameState", "Pairs", "PandasContext"]

Pairs = frozenset[tuple[int, int]]
"""``(slot id, input column)`` pairs."""


@dataclass(frozen=True, slots=True)
class FrameInput:
    """One input of a capture: its name, column names and dtypes, and row count."""

    name: str
    columns: tuple[str, ...]
    dtypes: tuple[str, ...]
    n_rows: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, len(self.columns))


@dataclass(frozen=True, slots=True)
class ColumnLineage:
    """Where one column's cells come from (contributing) and what else decided them."""

    contrib: Pairs = frozenset()
    consid: Pairs = frozenset()
    chars: int | None = None
    """The slot of the column's character segments (row -> segment ids, see
    :mod:`~dslog_dagster.pandas.char_segments`) when its characters are known exactly, else
    ``None`` (no character lineage: whole cells)."""

    def full(self) -> Pairs:
        """Contributing and considered pairs together."""
        return self.contrib | self.consid

    def union(self, other: "ColumnLineage") -> "ColumnLineage":
        """A value computed from both columns (arithmetic...); its characters are unknown
        (string rules that know them set :attr:`chars` themselves)."""
        return ColumnLineage(self.contrib | other.contrib, self.consid | other.consid)

    def cells(self) -> "ColumnLineage":
        """The same cell lineage without character lineage (a value that is no longer the
        same string: a cast, a ``map``, a comparison)."""
        return ColumnLineage(self.contrib, self.consid)

    def deciding(self) -> "ColumnLineage":
        """Every pair as considered only (a cell that decided a value it did not make)."""
        return ColumnLineage(frozenset(), self.full())

    def mapped(self, slot_map: Callable[[int], int]) -> "ColumnLineage":
        return ColumnLineage(
            frozenset((slot_map(s), c) for s, c in self.contrib),
            frozenset((slot_map(s), c) for s, c in self.consid),
            None if self.chars is None else slot_map(self.chars),
        )


NO_LINEAGE = ColumnLineage()


@dataclass(eq=False)
class PandasContext:
    """What one capture shares between its frames: the inputs, the slot table and options.

    Attributes:
        inputs: the capture's inputs, in order.
        slots: slot id → (input index, row map); a character slot has input index ``-1``
            and maps rows to segment ids of ``segments``.
        on_unknown: ``"raise"`` or ``"all_to_all"`` (an operation without a rule runs and
            the lineage after it is flagged all-to-all).
        flagged_ops: the operations recorded all-to-all (method names).
        segments: the character segments of the capture (``capture_pandas(...,
            characters=True)``), else ``None``: string methods then keep cell lineage only.
    """

    inputs: tuple[FrameInput, ...]
    slots: dict[int, tuple[int, RowMap]] = field(default_factory=dict)
    on_unknown: str = "raise"
    flagged_ops: list[str] = field(default_factory=list)
    segments: "Segments | None" = None
    steps: list["Step"] = field(default_factory=list)
    """The calls recorded so far, with their DPDS kinds (:mod:`~dslog_dagster.pandas.kinds`)."""
    depth: int = 0
    """Recorded calls running now (a call inside another is not a step of its own)."""

    def new_slot(self, input_index: int, rows: RowMap) -> int:
        sid = len(self.slots)
        self.slots[sid] = (input_index, rows)
        return sid

    def remap(self, rule: Callable[[RowMap], RowMap]) -> Callable[[int], int]:
        """A slot map applying ``rule`` to each slot's row map once (memoised per slot, and
        per map: slots that share a row map object share the result, computed once)."""
        memo: dict[int, int] = {}
        mapped: dict[int, tuple[RowMap, RowMap]] = {}  # id(map) -> (map, rule(map))

        def new(s: int) -> int:
            if s not in memo:
                inp, rows = self.slots[s]
                hit = mapped.get(id(rows))
                if hit is None or hit[0] is not rows:
                    hit = mapped[id(rows)] = (rows, rule(rows))
                memo[s] = self.new_slot(inp, hit[1])
            return memo[s]

        return new


@dataclass(frozen=True, eq=False)
class FrameState:
    """The lineage of a frame's (or a series') cells; see the module docstring.

    Attributes:
        ctx: the capture's context.
        n_rows: rows of the frame.
        columns: per column position, its lineage.
        row_consid: pairs every cell of a row considered (which rows exist).
        space: a token naming the frame's row order: two frames (or series) with the same
            token have the same rows in the same positions, so their cells can be combined
            row by row.
        ranked: after ``sort_values`` / ``nlargest``, the lineage of the sort keys (a
            following ``head`` is a top-k: its rows considered the keys of every row ranked at
            or above them); ``None`` once rows change otherwise.
        all_to_all: an operation without a rule ran: every cell depends on every cell of
            ``sources`` (flagged).
        sources: the inputs an all-to-all frame depends on.
        index: per index level, its lineage when the index holds cells (a group-by's keys,
            until ``reset_index`` makes them columns again); empty for labels that are not
            cells (a ``RangeIndex``, the input's own labels).
    """

    ctx: PandasContext
    n_rows: int
    columns: tuple[ColumnLineage, ...]
    row_consid: Pairs = frozenset()
    space: object = field(default_factory=object)
    ranked: ColumnLineage | None = None
    all_to_all: bool = False
    sources: frozenset[int] = frozenset()
    index: tuple[ColumnLineage, ...] = ()

    @classmethod
    def of_input(cls, ctx: PandasContext, index: int) -> "FrameState":
        """Input ``index`` itself: every cell from the same cell."""
        inp = ctx.inputs[index]
        s = ctx.new_slot(index, RowMap.identity(inp.n_rows))
        cols = tuple(ColumnLineage(frozenset({(s, c)})) for c in range(len(inp.columns)))
        return cls(ctx, inp.n_rows, cols, sources=frozenset({index}))

    def slots_used(self) -> set[int]:
        used = {s for s, _ in self.row_consid}
        for col in (*self.columns, *self.index):
            used |= {s for s, _ in col.full()}
        return used

    def with_columns(self, columns: Sequence[ColumnLineage]) -> "FrameState":
        """The same rows with other columns (selection, assign, rename...)."""
        return replace(self, columns=tuple(columns))

    def rows_taken(self, positions: I64, *, keep_rank: bool = False) -> "FrameState":
        """New row ``k`` is old row ``positions[k]`` (``-1``: none): filters, sorts,
        ``iloc``, one side of a join."""
        positions = np.asarray(positions, np.int64)
        move = self.ctx.remap(lambda rows: rows.take(positions))
        return self._moved(move, int(positions.size), keep_rank=keep_rank)

    def rows_gathered(self, out: I64, rows: I64, n_out: int) -> "FrameState":
        """New row ``out[i]`` pools old row ``rows[i]``: groups, a top-k prefix."""
        move = self.ctx.remap(lambda m: m.gather(out, rows, n_out))
        return self._moved(move, n_out)

    def _moved(
        self, move: Callable[[int], int], n_out: int, *, keep_rank: bool = False
    ) -> "FrameState":
        return FrameState(
            self.ctx,
            n_out,
            tuple(c.mapped(move) for c in self.columns),
            frozenset((move(s), c) for s, c in self.row_consid),
            object(),
            self.ranked.mapped(move) if keep_rank and self.ranked is not None else None,
            self.all_to_all,
            self.sources,
            tuple(c.mapped(move) for c in self.index),
        )

    def restricted(self, lin: ColumnLineage, keep: np.ndarray) -> ColumnLineage:
        """``lin`` for the rows where ``keep`` only (the other rows' cells get none of it)."""
        mask = np.asarray(keep, bool)
        return lin.mapped(self.ctx.remap(lambda rows: rows.restrict(mask)))

    def considering(self, pairs: Iterable[tuple[int, int]]) -> "FrameState":
        """The same frame whose rows also considered ``pairs`` (a predicate, keys)."""
        return replace(self, row_consid=self.row_consid | frozenset(pairs))
