"""The lineage rule of ``distinct`` / ``dropDuplicates``: a row ← every row it stands for.

The rows are grouped by the compared columns; each slot collects the ids of the whole group
(the kept row's key columns come from all of them), and when some columns are not compared,
their value comes from one row of the group (``first``), so those columns get new slots
holding that row's ids. Every column considers the compared columns.
"""

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from dslog_dagster.spark.plan import ColumnLineage, Info, quoted, slot_name, union_all
from dslog_dagster.spark.state import FrameState

__all__ = ["drop_duplicates"]

_TMP = "__dslog_c"


def _col(name: str) -> Column:
    return F.col(quoted(name))


def drop_duplicates(state: FrameState, subset: Sequence[str] | None = None) -> FrameState:
    """``dropDuplicates(subset)`` (all columns by default) with each row's group as its lineage.

    Raises:
        NeedLists: the frame has range slots.
        ValueError: ``subset`` names columns the frame does not have.
    """
    if state.all_to_all:
        sub_list = list(subset) if subset is not None else None
        return FrameState.all_to_all_of(
            state.context, state.df.dropDuplicates(sub_list), state.sources
        )
    state.need_lists()
    ctx = state.context
    names = state.columns
    sub = list(subset) if subset else names
    missing = [s for s in sub if s not in names]
    if missing:
        msg = f"dropDuplicates: no columns {missing} in {names}."
        raise ValueError(msg)
    pos = state.user_positions()
    tmp = [f"{_TMP}{p}" for p in range(len(state.infos))]
    d = state.df.toDF(*tmp)
    key_pos = [pos[names.index(s)] for s in dict.fromkeys(sub)]
    other_pos = [p for p in pos if p not in key_pos]
    slots = state.slots
    picked: dict[int, int] = {}
    aggs = []
    if other_pos:
        for s in slots:
            picked[s] = ctx.new_slot(ctx.slot_input[s])
        p_slots = [_col(tmp[state.infos.index(slot_name(s))]) for s in slots]
        row = F.struct(
            *[_col(tmp[p]).alias(tmp[p]) for p in other_pos],
            *[c.alias(slot_name(picked[s])) for c, s in zip(p_slots, slots, strict=True)],
        )
        aggs.append(F.first(row).alias("__dslog_first"))
    for s in slots:
        c = F.collect_list(_col(tmp[state.infos.index(slot_name(s))]))
        aggs.append((F.flatten(c) if s in state.arrays else c).alias(slot_name(s)))
    g = d.groupBy(*[_col(tmp[p]) for p in key_pos]).agg(*aggs)
    out_cols = []
    infos: list[Info] = []
    keys_lin = union_all(state.infos[p] for p in key_pos).full()  # type: ignore[misc]
    for p in pos:
        lin = state.infos[p]
        assert isinstance(lin, ColumnLineage)
        if p in key_pos:
            out_cols.append(_col(tmp[p]).alias(names[pos.index(p)]))
            infos.append(lin.considering(keys_lin))  # a struct keeps its fields
        else:
            out_cols.append(F.col(f"__dslog_first.{tmp[p]}").alias(names[pos.index(p)]))
            moved = lin.remap(picked)
            infos.append(moved.considering(keys_lin))
    for s in slots:
        out_cols.append(_col(slot_name(s)))
        infos.append(slot_name(s))
    for s in slots if other_pos else []:
        out_cols.append(F.col(f"__dslog_first.{slot_name(picked[s])}").alias(slot_name(picked[s])))
        infos.append(slot_name(picked[s]))
    arrays = set(slots) | {picked[s] for s in slots if s in state.arrays and other_pos}
    return state.derive(g.select(*out_cols), infos, arrays)
