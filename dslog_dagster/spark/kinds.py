"""The DPDS operation kinds of the DataFrame calls a Spark capture ran, and their column effects.

A tracked call's kind comes from what the capture knows about it:

* the method, where it says what the call is for: ``fillna`` / ``na.fill`` / ``replace`` are
  imputations, ``dropna`` / ``distinct`` / ``dropDuplicates`` / ``limit`` instance drops,
  ``withColumnRenamed`` / ``toDF`` feature renames, ``union`` appends and ``crossJoin`` a
  cartesian product (the *append* kind), ``join`` a join, ``orderBy`` a space transformation
  (rows rearranged), a group-by's aggregates instance generation (with a pivot, also a space
  transformation);
* otherwise (``select``, ``withColumn``, ``filter``, ``drop``, a global ``agg``...) the nodes
  of the analyzed plan the call added (:class:`~dslog_dagster.spark.plan.PlanWalker` walks
  them anyway): ``Filter`` → instance drop, ``Aggregate`` → instance generation, ``Join`` →
  join, ``Generate`` (explode) → space transformation, and for a ``Project`` (or ``Window``)
  its column effect: a column added → feature augmentation, columns left out → feature
  selection, a column recomputed under its own name → value transformation.

The column effect compares the frame's column names before and after the call; a column is
*transformed* when the call's projection computed it anew (its plan attribute is not the
input's). Row counts are not known without running a Spark job, so ``rows_dropped`` and
``rows_generated`` are ``None`` except for calls that only project (no row changes: 0).

Only the outermost call is a step (``unionByName`` runs ``select`` and ``union``: one step).
"""

import functools
from collections.abc import Callable
from typing import Any

from dslog_dagster.core.store.effects import (
    APPEND,
    FEATURE_AUGMENTATION,
    FEATURE_RENAME,
    FEATURE_SELECTION,
    IMPUTATION,
    INSTANCE_DROP,
    INSTANCE_GENERATION,
    JOIN,
    SPACE_TRANSFORMATION,
    UNKNOWN,
    VALUE_TRANSFORMATION,
    OperationEffects,
    Step,
    step,
)
from dslog_dagster.spark.context import CaptureContext

__all__ = ["FRAME", "GROUPED", "NODES", "effects_of", "install"]

FRAME: dict[str, tuple[str, ...]] = {
    "fillna": (IMPUTATION,),
    "replace": (IMPUTATION,),
    "dropna": (INSTANCE_DROP,),
    "dropDuplicates": (INSTANCE_DROP,),
    "limit": (INSTANCE_DROP,),
    "withColumnRenamed": (FEATURE_RENAME,),
    "withColumnsRenamed": (FEATURE_RENAME,),
    "toDF": (FEATURE_RENAME,),
    "join": (JOIN,),
    "crossJoin": (APPEND,),
    "union": (APPEND,),
    "unionByName": (APPEND,),
    "orderBy": (SPACE_TRANSFORMATION,),
    # from the plan (and the column effect)
    "select": (),
    "selectExpr": (),
    "withColumn": (),
    "withColumns": (),
    "drop": (),
    "filter": (),
    "agg": (),
}
"""``TrackedFrame`` methods -> their kinds (empty: from the plan nodes and column effect)."""

GROUPED: dict[str, tuple[str, ...]] = {
    m: (INSTANCE_GENERATION,) for m in ("agg", "count", "sum", "avg", "min", "max")
}
"""``TrackedGroupedData`` methods (a pivot adds a space transformation)."""

NODES = {
    "Filter": INSTANCE_DROP,
    "Aggregate": INSTANCE_GENERATION,
    "Join": JOIN,
    "Generate": SPACE_TRANSFORMATION,
}
"""Plan nodes whose presence gives a kind of their own."""

ROWS_KEPT = {
    "Project", "Window", "Sort", "SubqueryAlias", "ResolvedHint", "Repartition",
    "RepartitionByExpression", "RebalancePartitions",
}  # fmt: skip
"""Plan nodes that keep every row (a sort only reorders them)."""


def _frame_of(obj: Any) -> Any:
    from dslog_dagster.spark.frame import TrackedFrame

    if isinstance(obj, TrackedFrame):
        return obj
    inner = getattr(obj, "_f", None)  # a grouped frame, ``frame.na``
    return inner if isinstance(inner, TrackedFrame) else None


def _columns(frame: Any) -> list[str]:
    return [str(c) for c in frame.columns]


def call_step(
    call: str,
    kinds: tuple[str, ...],
    before: list[str],
    after: list[str],
    nodes: list[str],
    computed: set[str],
) -> Step | None:
    """The step of ``call`` from the column names ``before`` and ``after`` it and the plan
    ``nodes`` and ``computed`` columns its walks met (``None``: it changed nothing)."""
    added = [c for c in after if c not in before]
    removed = [c for c in before if c not in after]
    renamed: list[tuple[str, str]] = []
    if FEATURE_RENAME in kinds:
        if len(before) == len(after):
            renamed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        added = removed = []
    transformed = [
        c for c in after if c in before and c in computed and FEATURE_RENAME not in kinds
    ]
    found = list(kinds)
    if not found:
        found = [NODES[n] for n in nodes if n in NODES]
        if added and not {JOIN, INSTANCE_GENERATION} & set(found):
            found.append(FEATURE_AUGMENTATION)
        if removed and INSTANCE_GENERATION not in found:
            found.append(FEATURE_SELECTION)
        if transformed and INSTANCE_GENERATION not in found:
            found.append(VALUE_TRANSFORMATION)
    if not found:
        return None  # repartition, cache, alias: no cell changed
    rows = 0 if set(nodes) <= ROWS_KEPT else None
    return step(
        call, list(dict.fromkeys(found)), added=added, removed=removed, renamed=renamed,
        transformed=transformed, rows_dropped=rows, rows_generated=rows,
    )  # fmt: skip


def _wrap(call: str, fn: Callable[..., Any], kinds: tuple[str, ...]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        frame = _frame_of(self)
        if frame is None:
            return fn(self, *args, **kwargs)
        ctx: CaptureContext = frame.lineage_state.context
        if ctx.depth:
            return fn(self, *args, **kwargs)
        before = _columns(frame)
        ctx.plan_nodes, ctx.computed = [], set()
        ctx.depth += 1
        try:
            res = fn(self, *args, **kwargs)
        finally:
            ctx.depth -= 1
        out = _frame_of(res)
        if out is not None and out is not frame:
            own = kinds
            if call.startswith("GroupedData") and getattr(self, "_pivot", None) is not None:
                own = (*kinds, SPACE_TRANSFORMATION)
            st = call_step(call, own, before, _columns(out), ctx.plan_nodes, ctx.computed)
            if st is not None:
                ctx.steps.append(st)
        return res

    return recorded


_INSTALLED: list[bool] = []


def install() -> None:
    """Wrap the tracked frame's methods (once per process)."""
    if _INSTALLED:
        return
    from dslog_dagster.spark import frame

    for cls, prefix, table in (
        (frame.TrackedFrame, "DataFrame", FRAME),
        (frame.TrackedGroupedData, "GroupedData", GROUPED),
    ):
        for name, kinds in table.items():
            setattr(cls, name, _wrap(f"{prefix}.{name}", getattr(cls, name), kinds))
    for name, alias in (("where", "filter"), ("sort", "orderBy"), ("unionAll", "union")):
        setattr(frame.TrackedFrame, name, getattr(frame.TrackedFrame, alias))
    frame.TrackedFrame.drop_duplicates = frame.TrackedFrame.dropDuplicates
    na = frame._NaFunctions  # noqa: SLF001  (frame.na)
    na_kinds = (("fill", (IMPUTATION,)), ("drop", (INSTANCE_DROP,)), ("replace", (IMPUTATION,)))
    for name, kinds in na_kinds:
        setattr(na, name, _wrap(f"DataFrame.na.{name}", getattr(na, name), kinds))
    _INSTALLED.append(True)


def effects_of(ctx: CaptureContext) -> OperationEffects:
    """The steps the capture recorded (kind ``unknown`` when it recorded none)."""
    none = (Step("spark", (UNKNOWN,), None, None, (), None),)
    return OperationEffects(tuple(ctx.steps) or none)
