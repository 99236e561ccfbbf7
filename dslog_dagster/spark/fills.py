"""``fillna`` / ``replace``: a filled or replaced cell is not contributed by the cell it replaced.

Spark runs ``fillna`` as ``coalesce(x, literal)`` and ``replace`` as a ``CASE``, so the plan
says the output column comes from ``x`` on every row. The semantics table
(docs/concepts/semantics.md) says otherwise per row: a kept cell is contributed by itself, a
cell set to a literal by nothing, and the replaced cell is only *considered*. The rule is per
row, and slots are per row: each changed column gets, per slot it reads, a *kept slot* — the
slot's ids where the cell kept its value (compared null-safely with a copy of the column taken
before the step), null where the step changed it. The column is then contributed through its
kept slots and considers its old slots.
"""

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster.spark.plan import ColumnLineage, PlanWalker, analyzed, quoted, slot_name
from dslog_dagster.spark.state import FrameState

__all__ = ["filled"]

_COPY = "__dslog_f"


def filled(state: FrameState, op: str, fn: Callable[[DataFrame], DataFrame]) -> FrameState:
    """The state of ``fn(frame)``, a ``fillna``/``replace`` that changes values in place.

    Raises:
        NeedLists: a changed column reads a range slot.
    """
    plain = fn(state.df)
    walker = PlanWalker([state.base()], op)
    walker.resolve(analyzed(plain))
    changed = [
        (c, info)
        for c, info in zip(state.df.columns, state.infos, strict=True)
        if isinstance(info, ColumnLineage) and c in walker.computed and info.contrib
    ]
    if not changed:
        return state.finish(plain, op)
    if any(s in state.ranges for _, info in changed for s, _ in info.contrib):
        state.need_lists()
    ctx = state.context
    copies = [F.col(quoted(c)).alias(f"{_COPY}{i}") for i, (c, _) in enumerate(changed)]
    res = fn(state.df.select("*", *copies))
    kept: list[Any] = []
    maps: dict[str, dict[int, int]] = {}
    arrays = set(state.arrays)
    for i, (c, info) in enumerate(changed):
        same = F.col(quoted(c)).eqNullSafe(F.col(f"{_COPY}{i}"))
        m: dict[int, int] = {}
        for s in sorted({s for s, _ in info.contrib}):
            new = ctx.new_slot(ctx.slot_input[s])
            m[s] = new
            kept.append(F.when(same, F.col(quoted(slot_name(s)))).alias(slot_name(new)))
            if s in state.arrays:
                arrays.add(new)
        maps[c] = m
    out = res.select(*[quoted(n) for n in state.df.columns], *kept)
    done = state.finish(out, op, arrays=arrays)
    infos = list(done.infos)
    for at, name in enumerate(done.df.columns):
        lin = infos[at]
        if name in maps and isinstance(lin, ColumnLineage):
            m = maps[name]
            contrib = frozenset((m[s], col) for s, col in lin.contrib if s in m)
            infos[at] = ColumnLineage(contrib, lin.full())
    return done.derive(done.df, infos)
