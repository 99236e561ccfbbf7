"""Picks: ``max``/``min`` aggregates pass the picked cell, not the whole group.

The semantics table (docs/concepts/semantics.md) says a value that is one of its group's
cells (``groupBy().max``, ``min``) is *contributed* by that cell — every tied cell when
several hold the extreme — while the whole group is *considered* (its cells were compared).
The aggregation collects, next to each group's slot list, a *pick slot* per picking
aggregate: the ids of the group's rows whose value equals the group's extreme (null values
are never picked, as ``max`` skips them; a group of nulls picks nothing). It is computed in
the same aggregation, without a window or a join: the group's (value, ids) pairs are
collected and filtered against their own ``array_max``/``array_min`` of the values, which
order values as Spark's ``max``/``min`` do (NaN above every number).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from dslog_dagster.spark.plan import ColumnLineage, Info, analyzed, quoted, seq, slot_name
from dslog_dagster.spark.state import FrameState

__all__ = ["Pick", "find_picks", "pick_aggregates", "pick_lineage"]

_FUNCS = {"Max": "max", "Min": "min"}


@dataclass(frozen=True)
class Pick:
    """A picking aggregate: its position among the aggregation's expressions, its function
    (``"max"``/``"min"``) and its argument as SQL over the aggregated frame."""

    at: int
    func: str
    arg: str


def find_picks(state: FrameState, keys: Sequence[Any], cols: Sequence[Column]) -> list[Pick]:
    """The aggregates of ``groupBy(*keys).agg(*cols)`` that are a plain ``max``/``min`` of an
    expression (``max(x)``, ``F.min(a + b).alias("m")``; not ``max(x) + 1``, not
    ``DISTINCT``, not filtered). Reads the aggregation's analyzed plan."""
    if not cols:
        return []
    plan = analyzed(state.df.groupBy(*keys).agg(*cols))
    if plan.nodeName() != "Aggregate":
        return []
    exprs = seq(plan.aggregateExpressions())
    first = len(exprs) - len(cols)
    out = []
    for j, e in enumerate(exprs[first:]):
        inner = e.child() if e.nodeName() == "Alias" else e
        if inner.nodeName() != "AggregateExpression":
            continue
        fn = inner.aggregateFunction()
        kind = str(fn.getClass().getSimpleName())
        if kind not in _FUNCS or inner.isDistinct() or inner.filter().isDefined():
            continue
        out.append(Pick(j, _FUNCS[kind], str(fn.child().sql())))
    return out


def pick_aggregates(
    state: FrameState, picks: Sequence[Pick]
) -> tuple[list[Column], list[dict[int, int]]]:
    """Per pick, a new slot per slot of ``state``: the aggregate columns computing them (to
    add to the aggregation) and the slot mappings (old slot -> pick slot)."""
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
            pairs = F.collect_list(F.struct(v.alias("v"), ids_col.alias("s")))
            values = F.transform(pairs, lambda x: x["v"])
            best = F.array_max(values) if p.func == "max" else F.array_min(values)
            ids = F.transform(_equal_to(pairs, best), lambda x: x["s"])
            cols.append((F.flatten(ids) if s in state.arrays else ids).alias(slot_name(new)))
        maps.append(m)
    return cols, maps


def _equal_to(pairs: Column, best: Column) -> Column:
    """The (value, ids) structs of ``pairs`` whose value equals ``best``."""
    return F.filter(pairs, lambda x: x["v"] == best)


def pick_lineage(
    infos: Sequence[Info], n_keys: int, picks: Sequence[Pick], maps: Sequence[dict[int, int]]
) -> list[Info]:
    """``infos`` (the aggregation's, ``n_keys`` key columns first) with each pick's column
    contributed by its pick slots and considering its whole group (what it contributed
    before, and what it considered)."""
    out = list(infos)
    for p, m in zip(picks, maps, strict=True):
        lin = out[n_keys + p.at]
        assert isinstance(lin, ColumnLineage)
        contrib = frozenset((m[s], c) for s, c in lin.contrib if s in m)
        out[n_keys + p.at] = ColumnLineage(contrib, lin.full())
    return out
