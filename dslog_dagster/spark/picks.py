"""Picks: ``max``/``min`` aggregates pass the picked cell, not the whole group.

The semantics table (docs/concepts/semantics.md) says a value that is one of its group's
cells (``groupBy().max``, ``min``) is *contributed* by that cell — every tied cell when
several hold the extreme — while the whole group is *considered* (its cells were compared).
The rule holds inside an expression too: ``max(x) + 1`` is contributed by the picked cells of
``x``, ``max(x) - min(x)`` by both picks, ``max(x) + sum(y)`` by the picked ``x`` and every
``y`` of the group; and in a pivot, where the pick is over the group's rows with the cell's
pivot value.

The aggregation collects, next to each group's slot list, a *pick slot* per pick: the ids of
the group's rows whose value equals the group's extreme (null values are never picked, as
``max`` skips them; a group of nulls picks nothing). It is computed in the same aggregation,
without a window or a join: the group's (value, ids) pairs are collected and filtered against
their own ``array_max``/``array_min`` of the values, which order values as Spark's
``max``/``min`` do (NaN above every number). A pivot collects only the rows with the cell's
pivot value (``collect_list`` skips the others' nulls).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from dslog_dagster.spark.plan import (
    ColumnLineage,
    Info,
    Ref,
    analyzed,
    output_ids,
    quoted,
    refs_of,
    seq,
    slot_name,
)
from dslog_dagster.spark.state import FrameState

__all__ = ["Pick", "PickedOutput", "Picks", "find_picks", "pick_aggregates", "picked_lineage"]

_FUNCS = {"Max": "max", "Min": "min"}


@dataclass(frozen=True)
class Pick:
    """A picking aggregate (``"max"``/``"min"``) of an argument, as SQL over the aggregated
    frame; ``refs``: the attributes the argument reads."""

    func: str
    arg: str
    refs: tuple[int, ...]


@dataclass(frozen=True)
class PickedOutput:
    """An aggregate expression holding picks: its position among the aggregation's
    expressions, the picks it holds (indexes into :attr:`Picks.picks`), and the attributes it
    reads outside them (other aggregates, grouping columns), which pass their whole group."""

    at: int
    picks: tuple[int, ...]
    rest: tuple[int, ...]


@dataclass(frozen=True)
class Picks:
    """The picks of an aggregation, the outputs holding them, and the lineage of the
    aggregation's input attributes (by expression id)."""

    picks: tuple[Pick, ...]
    outputs: tuple[PickedOutput, ...]
    inputs: Mapping[int, Info]


def find_picks(state: FrameState, keys: Sequence[Any], cols: Sequence[Column]) -> Picks | None:
    """The ``max``/``min`` aggregates inside the expressions of ``groupBy(*keys).agg(*cols)``
    (``max(x)``, ``F.min(a + b).alias("m")``, ``max(x) + 1``; not ``DISTINCT``, not filtered),
    ``None`` when there is none. Reads the aggregation's analyzed plan."""
    if not cols:
        return None
    plan = analyzed(state.df.groupBy(*keys).agg(*cols))
    if plan.nodeName() != "Aggregate":
        return None
    exprs = seq(plan.aggregateExpressions())
    first = len(exprs) - len(cols)
    picks: list[Pick] = []
    outputs = []
    for j, e in enumerate(exprs[first:]):
        found: list[Pick] = []
        rest: list[int] = []
        _collect(e, found, rest)
        if not found:
            continue
        at = []
        for p in found:
            if p not in picks:
                picks.append(p)
            at.append(picks.index(p))
        outputs.append(PickedOutput(j, tuple(at), tuple(dict.fromkeys(rest))))
    if not picks:
        return None
    base = analyzed(state.df)
    inputs = dict(zip(output_ids(base), state.infos, strict=True))
    return Picks(tuple(picks), tuple(outputs), inputs)


def _collect(e: Any, picks: list[Pick], rest: list[int]) -> None:
    """Walk expression ``e``: its picks into ``picks``, the attributes it reads outside them
    into ``rest``."""
    name = str(e.nodeName())
    if name == "AggregateExpression":
        fn = e.aggregateFunction()
        kind = str(fn.getClass().getSimpleName())
        if kind in _FUNCS and not e.isDistinct() and not e.filter().isDefined():
            child = fn.child()
            picks.append(Pick(_FUNCS[kind], str(child.sql()), tuple(refs_of(child))))
            return
        rest += refs_of(e)
        return
    if name == "AttributeReference":
        rest.append(int(e.exprId().id()))
        return
    for c in seq(e.children()):
        _collect(c, picks, rest)


def pick_aggregates(
    state: FrameState, picks: Sequence[Pick], where: Column | None = None
) -> tuple[list[Column], list[dict[int, int]]]:
    """Per pick, a new slot per slot of ``state``: the aggregate columns computing them (to
    add to the aggregation) and the slot mappings (old slot -> pick slot). ``where``: only
    the group's rows where it holds are picked from (a pivot value's rows)."""
    ctx = state.context
    cols: list[Column] = []
    maps: list[dict[int, int]] = []
    for p in picks:
        v = F.expr(p.arg)
        m: dict[int, int] = {}
        for s in state.slots:
            new = ctx.new_slot(ctx.slot_input[s])
            m[s] = new
            # the slot by attribute (its name is also the slot list's alias in the aggregation)
            ids_col = state.df[quoted(slot_name(s))]
            pair = F.struct(v.alias("v"), ids_col.alias("s"))
            pairs = F.collect_list(pair if where is None else F.when(where, pair))
            values = F.transform(pairs, lambda x: x["v"])
            best = F.array_max(values) if p.func == "max" else F.array_min(values)
            ids = F.transform(_equal_to(pairs, best), lambda x: x["s"])
            cols.append((F.flatten(ids) if s in state.arrays else ids).alias(slot_name(new)))
        maps.append(m)
    return cols, maps


def _equal_to(pairs: Column, best: Column) -> Column:
    """The (value, ids) structs of ``pairs`` whose value equals ``best``."""
    return F.filter(pairs, lambda x: x["v"] == best)


def _contrib(found: Picks, refs: Sequence[int]) -> frozenset[Ref]:
    """The contributing pairs of the input attributes ``refs``."""
    out: frozenset[Ref] = frozenset()
    for r in refs:
        info = found.inputs.get(r)
        if isinstance(info, ColumnLineage):
            out |= info.contrib
    return out


def picked_lineage(
    lin: ColumnLineage,
    out: PickedOutput,
    found: Picks,
    maps: Sequence[Mapping[int, int]],
    group: Mapping[int, int] | None = None,
) -> ColumnLineage:
    """The lineage ``lin`` of output ``out`` (its whole group's, slots already moved by
    ``group`` when given: a pivot value's rows) with its contributing pairs rebuilt: each
    pick's from its pick slots (``maps``, one per pick of ``found``), what it reads outside
    them from the group's slots. It still considers everything it did."""
    move = dict(group) if group is not None else None
    contrib = set(_contrib(found, out.rest))
    if move is not None:
        contrib = {(move[s], c) for s, c in contrib if s in move}
    for i in out.picks:
        m = maps[i]
        contrib |= {(m[s], c) for s, c in _contrib(found, found.picks[i].refs) if s in m}
    return ColumnLineage(frozenset(contrib), lin.full())
