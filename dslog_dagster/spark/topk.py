"""Top-k: ``orderBy(...).limit(n)`` records which rows' sort cells ranked a row in.

A row kept by a top-k is there because no more than ``n`` rows sort before it: the sort cells
of every kept row ranked at or above it (ties included) decided that, so the semantics table
(docs/concepts/semantics.md) makes them part of every cell's *considered* lineage. After the
limit, a new list slot per slot collects the ids of the rows at or above each row
(``collect_list`` over a window ordered as the sort, ``RANGE UNBOUNDED PRECEDING .. CURRENT
ROW``, so peers are included); the limit leaves at most ``n`` rows, so the window is over the
small result. Rows beyond the limit are not part of any output row's lineage (the limit's
cut-off row is not known without ranking the whole frame again).
"""

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
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

__all__ = ["sort_refs", "top_k"]


def _order_column(o: Any) -> Column:
    """A Catalyst ``SortOrder`` as a window ordering column."""
    c = F.expr(str(o.child().sql()))
    asc = str(o.direction().sql()).upper() == "ASC"
    first = "FIRST" in str(o.nullOrdering().sql()).upper()
    if asc:
        return c.asc_nulls_first() if first else c.asc_nulls_last()
    return c.desc_nulls_first() if first else c.desc_nulls_last()


def sort_refs(
    sorted_df: DataFrame, infos: Sequence[Info]
) -> tuple[list[Column], frozenset[Ref]] | None:
    """The orderings of ``sorted_df`` (a frame whose analyzed plan is a global ``Sort``) and
    the lineage pairs of its sort cells (``infos``: what each of its columns is); ``None`` when
    the plan is not such a sort or a key reads more than its output columns."""
    plan = analyzed(sorted_df)
    if plan.nodeName() != "Sort" or not getattr(plan, "global")():
        return None
    by_id = dict(zip(output_ids(plan), infos, strict=True))
    orders: list[Column] = []
    refs: set[Ref] = set()
    for o in seq(plan.order()):
        for r in refs_of(o.child()):
            info = by_id.get(r)
            if info is None:
                return None
            if isinstance(info, ColumnLineage):
                refs |= info.full()
        orders.append(_order_column(o))
    return orders, frozenset(refs)


def top_k(limited: FrameState, before: FrameState) -> FrameState:
    """``limited`` (the state after ``limit``) with each row considering the sort cells of
    the rows at or above it; ``before`` is the sorted frame (unchanged when it is not the
    direct result of a global sort).

    Raises:
        NeedLists: the frame has range slots.
    """
    got = sort_refs(before.df, before.infos)
    if got is None:
        return limited
    limited.need_lists()
    ctx = limited.context
    orders, refs = got
    w = Window.orderBy(*orders).rangeBetween(Window.unboundedPreceding, Window.currentRow)
    mapping: dict[int, int] = {}
    extra = []
    for s in limited.slots:
        new = ctx.new_slot(ctx.slot_input[s])
        mapping[s] = new
        c = F.collect_list(F.col(quoted(slot_name(s)))).over(w)
        extra.append((F.flatten(c) if s in limited.arrays else c).alias(slot_name(new)))
    if not extra:
        return limited
    df = limited.df.select("*", *extra)
    above = frozenset((mapping[s], c) for s, c in refs if s in mapping)
    infos: list[Info] = [i if isinstance(i, str) else i.considering(above) for i in limited.infos]
    infos += [slot_name(n) for n in mapping.values()]
    return limited.derive(df, infos, limited.arrays | set(mapping.values()))
