"""The lineage rules of steps that combine two tracked frames: joins and unions.

A join keeps both sides' slots (an output row ← the left row and the right row; an outer
join's optional side holds null slots where it did not match), a semi join collects the
matching right rows' slots per left row, and a union keeps each side's slots (null on the
other side's rows). A frame joined or unioned with itself gets new slot ids on one side
(:meth:`~dslog_dagster.spark.state.FrameState.fresh`), so the two sides' rows stay apart.
"""

import dataclasses
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dslog_dagster.spark.plan import (
    Base,
    ColumnLineage,
    Info,
    PlanWalker,
    analyzed,
    quoted,
    row_considered,
    slot_name,
)
from dslog_dagster.spark.state import FrameState

__all__ = ["join", "union"]

_UID = "__dslog_uid"
_TMP = "__dslog_c"


def _col(name: str) -> Column:
    return F.col(quoted(name))


def join(left: FrameState, right: FrameState, on: Any, how: str | None) -> FrameState:
    """``left.join(right, on, how)`` with both sides' row lineage.

    Raises:
        NeedLists: a semi join over a frame with range slots.
    """
    how_n = (how or "inner").lower().replace("_", "")
    sources = left.sources | right.sources
    if left.all_to_all or right.all_to_all:
        return FrameState.all_to_all_of(
            left.context, left.visible_df().join(right.visible_df(), on, how), sources
        )
    right = left.fresh(right)
    bases = [left.base(), right.base()]
    arrays = left.arrays | right.arrays
    ranges = left.ranges | right.ranges
    unique = left.unique and right.unique
    if how_n in ("semi", "leftsemi"):
        left.need_lists(right)
        with_uid = left.df.withColumn(_UID, F.monotonically_increasing_id())
        aggs = []
        for s in right.slots:
            c = F.collect_list(_col(slot_name(s)))
            aggs.append((F.flatten(c) if s in right.arrays else c).alias(slot_name(s)))
        inner = with_uid.join(right.df, on, "inner")
        matches = inner.groupBy(_UID).agg(*aggs)
        res = with_uid.join(matches, _UID, "inner").drop(_UID)
        names = _using_names(on)
        if names:  # Spark puts a USING join's keys first
            res = res.select(*names, *[c for c in res.columns if c not in names])
        lbase = Base(analyzed(with_uid), [*left.infos, ColumnLineage()])
        # the join keys of the row and of its matches decided that the row is kept
        on_refs = row_considered(_by_id(PlanWalker([lbase, right.base()], "join(semi)"), inner))
        state = left.finish(
            res, "join(semi)", [lbase, right.base()], None, arrays | set(right.slots), sources
        )
        return _considering(state, on_refs)
    if how_n in ("anti", "leftanti"):
        return _anti(left, right, on, sources)
    res = left.df.join(right.df, on, how) if how is not None else left.df.join(right.df, on)
    # an outer join's optional side holds null slots on the rows it did not match
    keep_left = how_n not in ("right", "rightouter", "full", "outer", "fullouter")
    keep_right = how_n not in ("left", "leftouter", "full", "outer", "fullouter")
    dense = (left.dense if keep_left else frozenset()) | (
        right.dense if keep_right else frozenset()
    )
    state = left.finish(
        res, f"join({how_n})", bases, None, arrays, sources, ranges, unique, dense=dense
    )
    names = _using_names(on)
    if names:
        state = _using_keys(state, left, right, names)
    return state


def _using_names(on: Any) -> list[str]:
    """The key names of a USING join (``on`` a name or a list of names), else none."""
    names = [on] if isinstance(on, str) else on
    if isinstance(names, list | tuple) and names and all(isinstance(n, str) for n in names):
        return list(names)
    return []


def _using_keys(
    state: FrameState, left: FrameState, right: FrameState, names: list[str]
) -> FrameState:
    """A USING join's key columns (``join(other, "k")``): Spark keeps one column, the left
    key (the right one for a right join, either for a full join); its cells are contributed by
    both matched key cells (an unmatched side holds null slots, so it adds nothing)."""

    def key_lin(side: FrameState, name: str) -> ColumnLineage:
        info = side.infos[side.df.columns.index(name)]
        assert isinstance(info, ColumnLineage)
        return info

    infos = list(state.infos)
    cols = state.df.columns
    for n in names:
        at = cols.index(n)
        info = infos[at]
        assert isinstance(info, ColumnLineage)
        infos[at] = info | key_lin(left, n) | key_lin(right, n)
    return dataclasses.replace(state, infos=tuple(infos))


def _anti(left: FrameState, right: FrameState, on: Any, sources: frozenset[int]) -> FrameState:
    """``left.join(right, on, "anti")``: a kept row was decided by every right row's key
    cells (none matched it), so each output row considers the join keys of all right rows,
    carried as one list of right ids per slot (its size is the right side's row count)."""
    left.need_lists(right)
    ctx = left.context
    inner = left.df.join(right.df, on, "inner")
    on_refs = row_considered(_by_id(PlanWalker([left.base(), right.base()], "join(anti)"), inner))
    res = left.df.join(right.df, on, "anti")
    mapping = {s: ctx.new_slot(ctx.slot_input[s]) for s in right.slots}
    aggs = []
    for s, n in mapping.items():
        c = F.collect_list(_col(slot_name(s)))
        aggs.append((F.flatten(c) if s in right.arrays else c).alias(slot_name(n)))
    everyone = right.df.agg(*aggs) if aggs else None
    state = left.finish(res, "join(anti)", [left.base(), right.base()], None, None, sources)
    if everyone is None:
        return state
    out = state.df.crossJoin(F.broadcast(everyone))
    right_refs = frozenset((mapping[s], c) for s, c in on_refs if s in mapping)
    infos: list[Info] = [
        i if isinstance(i, str) else i.considering(right_refs) for i in state.infos
    ]
    infos += [slot_name(n) for n in mapping.values()]
    return state.derive(out, infos, state.arrays | set(mapping.values()), sources)


def _by_id(walker: PlanWalker, df: DataFrame) -> dict[int, Info]:
    """``walker``'s infos of ``df``'s output attributes, by position."""
    return dict(enumerate(walker.resolve(analyzed(df))))


def _considering(state: FrameState, refs: frozenset[tuple[int, int]]) -> FrameState:
    """``state`` with every user column considering ``refs`` (slots it still has)."""
    present = set(state.slots)
    keep = frozenset(r for r in refs if r[0] in present)
    infos = tuple(i if isinstance(i, str) else i.considering(keep) for i in state.infos)
    return dataclasses.replace(state, infos=infos)


def union(top: FrameState, bottom: FrameState) -> FrameState:
    """``top.union(bottom)`` (by position) with each side's row lineage.

    Raises:
        ValueError: the frames have different numbers of columns.
    """
    sources = top.sources | bottom.sources
    if top.all_to_all or bottom.all_to_all:
        return FrameState.all_to_all_of(
            top.context, top.visible_df().union(bottom.visible_df()), sources
        )
    bottom = top.fresh(bottom)
    a_pos, b_pos = top.user_positions(), bottom.user_positions()
    if len(a_pos) != len(b_pos):
        msg = f"union of frames with {len(a_pos)} and {len(b_pos)} columns."
        raise ValueError(msg)
    a_slots, b_slots = top.slots, bottom.slots
    types = {**top.slot_types(), **bottom.slot_types()}
    ranges = top.ranges | bottom.ranges
    unique = top.unique and bottom.unique

    def side(t: FrameState, pos: list[int], own: list[int]) -> DataFrame:
        tmp = [f"{_TMP}{p}" for p in range(len(t.infos))]
        d = t.df.toDF(*tmp)
        cols = [_col(tmp[p]).alias(f"{_TMP}u{i}") for i, p in enumerate(pos)]
        for s in [*a_slots, *b_slots]:
            if s in own:
                cols.append(_col(tmp[t.infos.index(slot_name(s))]).alias(slot_name(s)))
            else:
                cols.append(F.lit(None).cast(types[s]).alias(slot_name(s)))
        return d.select(*cols)

    res = side(top, a_pos, a_slots).union(side(bottom, b_pos, b_slots))
    names = top.columns
    res = res.toDF(*names, *[slot_name(s) for s in [*a_slots, *b_slots]])
    infos: list[Info] = [
        top.infos[p] | bottom.infos[q]  # type: ignore[operator]
        for p, q in zip(a_pos, b_pos, strict=True)
    ]
    infos += [slot_name(s) for s in [*a_slots, *b_slots]]
    # each side's slots are null on the other side's rows
    return top.derive(res, infos, top.arrays | bottom.arrays, sources, ranges, unique, dense=())
