"""The lineage rules of aggregations: ``groupBy().agg`` and ``groupBy().pivot().agg``.

An aggregated row ← every row of its group; a ``max``/``min`` value (also inside an
expression, and in a pivot) is contributed by the picked rows only
(:mod:`~dslog_dagster.spark.picks`). In ``lists`` mode each slot collects its
group's ids (``collect_list``); in ``ranges`` mode a frame whose slots are scalar and unique
has them summarised as ranges (:mod:`~dslog_dagster.spark.ranges`; not with picks), and a
frame that already has range slots (an aggregation over an aggregation) makes the capture
rerun with lists. A
pivot's cells come from the rows of their group with their pivot value and consider the keys
and pivot values of the whole group; its keys come from the whole group.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from dslog_dagster.spark.picks import find_picks, pick_aggregates, picked_lineage
from dslog_dagster.spark.plan import ColumnLineage, Info, PlanWalker, analyzed, quoted, slot_name
from dslog_dagster.spark.ranges import range_aggregate
from dslog_dagster.spark.state import FrameState

__all__ = ["aggregate", "pivot_aggregate"]

_TMP = "__dslog_c"


def _col(name: str) -> Column:
    return F.col(quoted(name))


def aggregate(
    state: FrameState, keys: list[Any], cols: list[Column], pivot: Any = None
) -> FrameState:
    """``groupBy(*keys)[.pivot(*pivot)].agg(*cols)`` with each group's row lineage.

    Raises:
        NeedLists: the frame has range slots (the capture reruns with lists).
    """
    if state.all_to_all:
        g = state.df.groupBy(*keys)
        if pivot is not None:
            g = g.pivot(*pivot)
        return FrameState.all_to_all_of(state.context, g.agg(*cols), state.sources)
    if pivot is not None:
        state.need_lists()
        return pivot_aggregate(state, keys, pivot, cols)
    state.need_lists()
    picks = find_picks(state, keys, cols) if state.slots else None
    ranges_ok = state.unique and state.slots and not state.arrays and picks is None
    if state.context.aggregate == "ranges" and ranges_ok:
        return range_aggregate(state, keys, cols)
    slot_aggs = []
    for s in state.slots:
        c = F.collect_list(_col(slot_name(s)))
        slot_aggs.append((F.flatten(c) if s in state.arrays else c).alias(slot_name(s)))
    pick_cols, maps = pick_aggregates(state, picks.picks) if picks else ([], [])
    res = state.df.groupBy(*keys).agg(*cols, *slot_aggs, *pick_cols)
    new = {n for m in maps for n in m.values()}
    out = state.finish(res, "groupBy.agg", arrays=set(state.slots) | new)
    if picks is None:
        return out
    n_keys = len(res.columns) - len(cols) - len(slot_aggs) - len(pick_cols)
    infos = list(out.infos)
    for o in picks.outputs:
        lin = infos[n_keys + o.at]
        assert isinstance(lin, ColumnLineage)
        infos[n_keys + o.at] = picked_lineage(lin, o, picks, maps)
    return dataclasses.replace(out, infos=tuple(infos))


def pivot_aggregate(
    state: FrameState,
    keys: list[Any],
    pivot: tuple[Any, Sequence[Any] | None],
    cols: list[Column],
) -> FrameState:
    """Pivot: the user's result from Spark's own pivot; per pivot value a slot of the rows
    with that value (for the pivoted cells) and a slot of the whole group (for the keys),
    joined back on the group keys."""
    ctx = state.context
    p, values = pivot
    if values is None:
        vis = state.visible_df()
        values = [r[0] for r in vis.select(p).distinct().orderBy(p).collect()]
    values = list(values)
    user = state.df.groupBy(*keys).pivot(p, values).agg(*cols)
    nk = len(user.columns) - len(values) * len(cols)
    # column lineage of each aggregate, from the un-pivoted aggregation's plan
    plain = state.df.groupBy(*keys).agg(*cols)
    plan_infos = PlanWalker([state.base()], "pivot").resolve(analyzed(plain))
    key_infos, agg_infos = plan_infos[:nk], plan_infos[nk:]
    p_lin = PlanWalker([state.base()], "pivot").resolve(analyzed(state.df.select(p)))[0]
    assert isinstance(p_lin, ColumnLineage)
    picks = find_picks(state, keys, cols)
    by_value: list[dict[int, int]] = []
    picked: list[list[dict[int, int]]] = []  # per pivot value, per pick: its slot mapping
    slot_aggs = []
    pcol = p if isinstance(p, Column) else F.col(p)
    for v in values:
        m = {}
        for s in state.slots:
            new = ctx.new_slot(ctx.slot_input[s])
            m[s] = new
            c = F.collect_list(F.when(pcol.eqNullSafe(F.lit(v)), _col(slot_name(s))))
            slot_aggs.append((F.flatten(c) if s in state.arrays else c).alias(slot_name(new)))
        by_value.append(m)
        if picks is not None:
            pick_cols, maps = pick_aggregates(state, picks.picks, pcol.eqNullSafe(F.lit(v)))
            slot_aggs += pick_cols
            picked.append(maps)
    for s in state.slots:
        c = F.collect_list(_col(slot_name(s)))
        slot_aggs.append((F.flatten(c) if s in state.arrays else c).alias(slot_name(s)))
    slots_df = state.df.groupBy(*keys).agg(*slot_aggs)
    ucols = [f"{_TMP}k{i}" for i in range(nk)]
    u = user.toDF(*ucols, *user.columns[nk:])
    sk = [f"{_TMP}j{i}" for i in range(nk)]
    sd = slots_df.toDF(*sk, *slots_df.columns[nk:])
    on = [u[a].eqNullSafe(sd[b]) for a, b in zip(ucols, sk, strict=True)]
    joined = u.join(sd, on, "inner") if on else u.crossJoin(sd)
    out = [_col(a).alias(n) for a, n in zip(ucols, user.columns[:nk], strict=True)]
    out += [_col(n) for n in user.columns[nk:]]
    slot_cols = list(slots_df.columns[nk:])
    out += [_col(n) for n in slot_cols]
    res = joined.select(*out)
    infos: list[Info] = []
    # a pivoted cell is computed from its group's rows with its pivot value; the keys and
    # pivot values of the whole group decided which rows those are (an empty cell has only
    # that considered lineage), and every cell of the row considers them
    decided = p_lin.full().union(*(k.full() for k in key_infos if isinstance(k, ColumnLineage)))
    for ki in key_infos:
        assert isinstance(ki, ColumnLineage)
        infos.append(ki.considering(decided))
    outputs = {o.at: o for o in picks.outputs} if picks is not None else {}
    for i, m in enumerate(by_value):
        for j, ai in enumerate(agg_infos):
            assert isinstance(ai, ColumnLineage)
            lin = ai.remap(m)
            if j in outputs:
                assert picks is not None
                lin = picked_lineage(lin, outputs[j], picks, picked[i], m)
            infos.append(lin.considering(decided))
    infos += slot_cols
    arrays = set(state.slots) | {n for m in by_value for n in m.values()}
    arrays |= {n for maps in picked for m in maps for n in m.values()}
    return state.derive(res, infos, arrays)
