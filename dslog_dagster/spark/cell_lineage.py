"""Cell lineage as row lineage × column lineage: what the pass must compute, and the product.

The output's columns know, from the plan, which (slot, input column) pairs they depend on
(:class:`~dslog_dagster.spark.plan.ColumnLineage`); the slots carry the rows. Before the
capture's pass, :func:`plan_slots` groups the pairs by the slots that carry them, per input and
mode (contributing, considered), so the pass computes one row table per slot. After it,
:func:`cell_tables` pairs each group's row table with its column table and keeps the product
factored (:func:`~dslog_dagster.core.combine.factored_table`): stored as its row and column
tables and queried on them, so neither a cell pair nor a product row is formed unless a reader
asks for the table's ProvRC rows.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dslog_dagster.core.combine import factored_table
from dslog_dagster.core.compression import column_table
from dslog_dagster.core.constant_tables import empty_table, flagged_table, full_table
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.spark.frame_capture import FrameInput
from dslog_dagster.spark.plan import ColumnLineage
from dslog_dagster.spark.state import FrameState

__all__ = [
    "SlotPlan",
    "cell_tables",
    "column_lineage",
    "empty_table",
    "full_table",
    "plan_slots",
]

ColumnPairs = list[tuple[tuple[int, ...], list[tuple[int, int]]]]
"""Per set of slots, the (output column, input column) pairs whose rows they carry."""


@dataclass(frozen=True)
class SlotPlan:
    """What the capture's pass computes row tables for.

    Attributes:
        pairs: per ``(input name, "contrib" | "consid")``, the column pairs each set of slots
            carries (sorted by slots).
        needed: every set of slots some pairs need, with the input its slots belong to.
        slot_input: every slot of those sets with its input: the pass computes one row table
            per slot, and a cell whose rows come from several slots of one input (a
            self-join, a frame joined with its own aggregate) gets the exact union of their
            tables, so every range slot can be refetched on its own.
    """

    pairs: dict[tuple[str, str], ColumnPairs]
    needed: dict[tuple[int, ...], int]
    slot_input: dict[int, int]

    @property
    def groups(self) -> list[tuple[int, ...]]:
        """One group per slot, in slot order: the pass's row tables."""
        return [(sl,) for sl in sorted(self.slot_input)]


def plan_slots(
    state: FrameState, inputs: Sequence[FrameInput], lins: Sequence[ColumnLineage]
) -> SlotPlan:
    """Which (output column, input column) pairs each set of slots carries, per input and
    mode, for the output frame ``state`` whose lineage columns are ``lins``
    (:func:`~dslog_dagster.spark.fields.lineage_columns`)."""
    ctx = state.context
    pairs_by: dict[tuple[str, str], ColumnPairs] = {}
    needed: dict[tuple[int, ...], int] = {}
    for i, inp in enumerate(inputs):
        if state.all_to_all:
            continue
        for which in ("contrib", "consid"):
            pairs: dict[tuple[int, int], set[int]] = {}
            for j, lin in enumerate(lins):
                for s, c in lin.contrib if which == "contrib" else lin.full():
                    if ctx.slot_input[s] == i:
                        pairs.setdefault((j, c), set()).add(s)
            by_slots: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for col_pair, ss in pairs.items():
                by_slots.setdefault(tuple(sorted(ss)), []).append(col_pair)
            pairs_by[(inp.name, which)] = sorted(by_slots.items())
            for key in by_slots:
                needed.setdefault(key, i)
    slot_input: dict[int, int] = {}
    for k, i in needed.items():
        for sl in k:
            slot_input.setdefault(sl, i)
    return SlotPlan(pairs_by, needed, slot_input)


def cell_tables(
    state: FrameState,
    inputs: Sequence[FrameInput],
    plan: SlotPlan,
    row_table: Mapping[tuple[int, ...], LineageTable],
    n_out: int,
    n_columns: int,
) -> tuple[dict[str, LineageTable], dict[str, LineageTable]]:
    """The contributing and considered tables of every input: each set of slots' row table
    (``row_table``) × its column pairs, kept factored, for an output of ``n_columns``
    lineage columns."""
    contributing: dict[str, LineageTable] = {}
    considered: dict[str, LineageTable] = {}
    out_shape = (n_out, n_columns)
    for i, inp in enumerate(inputs):
        if state.all_to_all:
            t = flagged_table(out_shape, inp.shape, source=i in state.sources)
            contributing[inp.name] = considered[inp.name] = t
            continue
        for which, dest in (("contrib", contributing), ("consid", considered)):
            parts = []
            for key, jcs in plan.pairs[(inp.name, which)]:
                col_table = column_table(jcs, n_columns, len(inp.columns))
                parts.append((row_table[key], col_table))
            # kept factored: the product of a million-row table by a few column rows would
            # be formed, stored and queried as millions of rows per column row
            dest[inp.name] = factored_table(parts) if parts else empty_table(out_shape, inp.shape)
    return contributing, considered


def column_lineage(
    state: FrameState,
    inputs: Sequence[FrameInput],
    columns: Sequence[str],
    lins: Sequence[ColumnLineage],
) -> dict[str, dict[str, list[str]]]:
    """``{output column: {input name: [input columns]}}`` (contributing), per lineage column
    (``columns``, ``lins``)."""
    ctx = state.context
    out: dict[str, dict[str, list[str]]] = {}
    for j, lin in enumerate(lins):
        deps: dict[str, set[str]] = {}
        for s, c in lin.contrib:
            inp = inputs[ctx.slot_input[s]]
            deps.setdefault(inp.name, set()).add(inp.columns[c])
        if state.all_to_all:
            deps = {inputs[i].name: set(inputs[i].columns) for i in state.sources}
        out[columns[j]] = {k: sorted(v) for k, v in deps.items()}
    return out
