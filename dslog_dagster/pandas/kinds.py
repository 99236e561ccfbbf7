"""The DPDS operation kinds of the pandas calls a capture ran, and their column effects.

The capture knows which pandas method ran (the rule it dispatched to), so each call's kind
is read from a table (:data:`FRAME`, :data:`SERIES`, ...) rather than from a diff of the
frames: ``fillna``/``replace``/``interpolate`` are imputations, ``merge``/``join`` joins,
``get_dummies`` a space augmentation, a group-by's aggregates instance generation. Calls whose
kind depends on what they did (``assign``, ``frame[...]``, ``loc``/``iloc``, ``reset_index``)
take it from their column effect: a column added is a feature augmentation, one replaced a
value transformation, columns left out a feature selection, rows left out an instance drop.
A row-wise ``apply`` of an opaque function is ``unknown``.

The column effect of each call is the difference between the frame (or series) it was called
on and its result, by column label: *added*, *removed*, *renamed* (``rename``: the labels at
the same positions), *transformed* (same rows, a column whose lineage the call replaced).
Rows: a call that keeps a subset of the rows drops the others; an aggregate's and a join's
rows are *generated*; an append drops and generates none.

Only the outermost call is recorded: ``DataFrame.fillna`` runs ``Series.fillna`` per column,
and that is one step. Series arithmetic and comparisons are not steps of their own (they are
parts of an expression; the ``assign`` or filter that uses them is the step). The wrappers
are installed on the facade classes once (:func:`install`), by
:mod:`~dslog_dagster.pandas.capture`.
"""

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    SPACE_AUGMENTATION,
    SPACE_TRANSFORMATION,
    UNKNOWN,
    VALUE_TRANSFORMATION,
    OperationEffects,
    Step,
    step,
)
from dslog_dagster.pandas.state import ColumnLineage, FrameState, PandasContext

__all__ = ["FRAME", "GROUPBY", "MODULE", "SERIES", "effects_of", "install"]

DERIVED: tuple[str, ...] = ()
"""A call whose kind is read from its column effect."""

FRAME: dict[str, tuple[str, ...]] = {
    "__getitem__": DERIVED,
    "__setitem__": DERIVED,
    "assign": DERIVED,
    "reset_index": DERIVED,
    "drop": (FEATURE_SELECTION,),
    "select_dtypes": (FEATURE_SELECTION,),
    "filter_rows": (INSTANCE_DROP,),
    "query": (INSTANCE_DROP,),
    "dropna": (INSTANCE_DROP,),
    "head": (INSTANCE_DROP,),
    "tail": (INSTANCE_DROP,),
    "nlargest": (INSTANCE_DROP,),
    "nsmallest": (INSTANCE_DROP,),
    "drop_duplicates": (INSTANCE_DROP,),
    "sort_values": (SPACE_TRANSFORMATION,),
    "fillna": (IMPUTATION,),
    "replace": (IMPUTATION,),
    "clip": (VALUE_TRANSFORMATION,),
    "where": (VALUE_TRANSFORMATION,),
    "mask": (VALUE_TRANSFORMATION,),
    "astype": (VALUE_TRANSFORMATION,),
    "isna": (VALUE_TRANSFORMATION,),
    "notna": (VALUE_TRANSFORMATION,),
    "rename": (FEATURE_RENAME,),
    "merge": (JOIN,),
    "join": (JOIN,),
    "explode": (SPACE_TRANSFORMATION,),
    "melt": (SPACE_TRANSFORMATION,),
    "stack": (SPACE_TRANSFORMATION,),
    "pivot_table": (INSTANCE_GENERATION, SPACE_TRANSFORMATION),
    **{m: (VALUE_TRANSFORMATION,) for m in ("cumsum", "cumprod", "cummax", "cummin")},
    **{m: (IMPUTATION,) for m in ("ffill", "bfill", "interpolate")},
    "apply": (UNKNOWN,),
}
"""``TrackedDataFrame`` methods -> their kinds (``DERIVED``: from the column effect)."""

SERIES: dict[str, tuple[str, ...]] = {
    "fillna": (IMPUTATION,),
    "replace": (IMPUTATION,),
    "clip": (VALUE_TRANSFORMATION,),
    "where": (VALUE_TRANSFORMATION,),
    "mask": (VALUE_TRANSFORMATION,),
    "astype": (VALUE_TRANSFORMATION,),
    "round": (VALUE_TRANSFORMATION,),
    "abs": (VALUE_TRANSFORMATION,),
    "map": (VALUE_TRANSFORMATION,),
    "shift": (VALUE_TRANSFORMATION,),
    "diff": (VALUE_TRANSFORMATION,),
    "rename": (FEATURE_RENAME,),
    "explode": (SPACE_TRANSFORMATION,),
    **{m: (VALUE_TRANSFORMATION,) for m in ("cumsum", "cumprod", "cummax", "cummin")},
    **{m: (IMPUTATION,) for m in ("ffill", "bfill", "interpolate")},
}
"""``TrackedSeries`` methods that are steps (arithmetic and comparisons are not)."""

_AGGREGATES = [
    "agg",
    "size",
    "sum",
    "mean",
    "median",
    "min",
    "max",
    "count",
    "first",
    "last",
    "std",
    "var",
    "nunique",
]
GROUPBY: dict[str, tuple[str, ...]] = {
    **{m: (INSTANCE_GENERATION,) for m in _AGGREGATES},
    "transform": (VALUE_TRANSFORMATION,),
}
"""``TrackedGroupBy`` methods."""

ROLLING: dict[str, tuple[str, ...]] = {
    m: (VALUE_TRANSFORMATION,)
    for m in ("sum", "mean", "median", "std", "var", "min", "max", "count")
}
"""``TrackedRolling`` methods (a window's value replaces the row's)."""

MODULE: dict[str, tuple[str, ...]] = {
    "merge": (JOIN,),
    "concat": (APPEND,),  # axis=1 aligns rows on the index: a join (see _module_kinds)
    "get_dummies": (SPACE_AUGMENTATION,),
}
"""pandas module functions (``pd.merge``...)."""


@dataclass(frozen=True, slots=True)
class _Shape:
    labels: tuple[str, ...]
    n_rows: int
    columns: tuple[ColumnLineage, ...]
    space: object


def _state_of(obj: Any) -> FrameState | None:
    from dslog_dagster.pandas.frame import TrackedDataFrame
    from dslog_dagster.pandas.series import TrackedSeries

    if isinstance(obj, TrackedDataFrame):
        return obj.lineage_state
    if isinstance(obj, TrackedSeries):
        return obj.frame_state
    for attr in ("_f", "_s"):  # a group-by, an indexer, a rolling window
        inner = getattr(obj, attr, None)
        if inner is not None:
            return _state_of(inner)
    return None


def _shape(obj: Any) -> _Shape | None:
    from dslog_dagster.pandas.frame import TrackedDataFrame
    from dslog_dagster.pandas.series import TrackedSeries

    if isinstance(obj, TrackedDataFrame):
        st = obj.lineage_state
        labels = tuple(str(c) for c in obj.columns)
        return _Shape(labels, st.n_rows, st.columns, st.space)
    if isinstance(obj, TrackedSeries):
        st = obj.frame_state
        # an unnamed series becomes column 0 in pandas (to_frame, reset_index)
        name = "0" if obj.name is None else str(obj.name)
        return _Shape((name,), len(obj), (obj.lineage,), st.space)
    for attr in ("_f", "_s"):
        inner = getattr(obj, attr, None)
        if inner is not None:
            return _shape(inner)
    return None


def _effect(
    call: str, kinds: tuple[str, ...], before: Sequence[_Shape], after: _Shape
) -> Step | None:
    """The step of ``call``: its column effect from ``before`` (the frames it read) to
    ``after``, its kinds from ``kinds`` or, when ``DERIVED``, from that effect (``None``:
    a derived call that changed nothing, e.g. a copy)."""
    first = before[0]
    have, keep = set(first.labels), set(after.labels)
    added = [c for c in after.labels if c not in have]
    removed = [c for c in first.labels if c not in keep] if len(before) == 1 else []
    renamed: list[tuple[str, str]] = []
    if kinds == (FEATURE_RENAME,) and len(first.labels) == len(after.labels):
        renamed = [(a, b) for a, b in zip(first.labels, after.labels, strict=True) if a != b]
        added = removed = []
    transformed = []
    if after.space is first.space and not renamed:
        was = dict(zip(first.labels, first.columns, strict=True))
        for c, lin in zip(after.labels, after.columns, strict=True):
            if c in was and lin is not was[c]:
                transformed.append(c)
    n_in = sum(b.n_rows for b in before)
    rows_dropped: int | None = None
    rows_generated: int | None = None
    if len(before) == 1 and after.n_rows <= first.n_rows and after.space is not first.space:
        rows_dropped, rows_generated = first.n_rows - after.n_rows, 0
    elif after.space is first.space:
        rows_dropped = rows_generated = 0
    if kinds == DERIVED:
        derived = []
        if added:
            derived.append(FEATURE_AUGMENTATION)
        if removed:
            derived.append(FEATURE_SELECTION)
        if rows_dropped:
            derived.append(INSTANCE_DROP)
        if transformed:
            derived.append(VALUE_TRANSFORMATION)
        kinds = tuple(derived)
        if not kinds:
            return None
    if APPEND in kinds:
        rows_dropped, rows_generated = 0, 0 if after.n_rows == n_in else None
    elif JOIN in kinds or INSTANCE_GENERATION in kinds:
        rows_dropped, rows_generated = None, after.n_rows
    elif SPACE_AUGMENTATION in kinds:
        removed = [c for c in first.labels if c not in keep]
    return step(
        call, kinds, added=added, removed=removed, renamed=renamed, transformed=transformed,
        rows_dropped=rows_dropped, rows_generated=rows_generated,
    )  # fmt: skip


def _record(
    ctx: PandasContext, call: str, kinds: tuple[str, ...], before: list[_Shape], res: Any
) -> None:
    from dslog_dagster.pandas.series import TrackedSeries

    after = _shape(res)
    if after is None or not before:
        return  # not a frame or series (a group-by object, a scalar): no cells changed yet
    if kinds == DERIVED and isinstance(res, TrackedSeries) and not call.startswith("Series"):
        return  # a column read out of a frame (``df["a"]``): part of an expression
    st = _effect(call, kinds, before, after)
    if st is not None:
        ctx.steps.append(st)


def _wrap(call: str, fn: Callable[..., Any], kinds: tuple[str, ...]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = _state_of(self)
        if st is None or st.ctx.depth:
            return fn(self, *args, **kwargs)
        ctx = st.ctx
        if call == "DataFrame.query":  # `@name` reads the variables of query's caller
            caller = inspect.currentframe().f_back  # type: ignore[union-attr]
            assert caller is not None
            kwargs.setdefault("local_dict", caller.f_locals)
            kwargs.setdefault("global_dict", caller.f_globals)
            del caller
        ins = [self]
        if kinds == (JOIN,):  # DataFrame.merge / join: the other frame is read too
            ins.append(args[0] if args else kwargs.get("right", kwargs.get("other")))
        before = [s for s in (_shape(x) for x in ins) if s is not None]
        ctx.depth += 1
        try:
            res = fn(self, *args, **kwargs)
        finally:
            ctx.depth -= 1
        # ``frame[c] = v`` changes the frame in place: the frame after it is the result
        _record(ctx, call, kinds, before, self if call.endswith("__setitem__") else res)
        return res

    recorded.__dslog_kinds__ = kinds  # type: ignore[attr-defined]
    return recorded


def module_call(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (the rule of ``pd.<name>``) recording its step."""

    @functools.wraps(fn)
    def recorded(first: Any, *args: Any, **kwargs: Any) -> Any:
        items = list(first) if isinstance(first, list | tuple) else [first, *args[:1]]
        states = [s for s in (_state_of(x) for x in items) if s is not None]
        if not states or states[0].ctx.depth:
            return fn(first, *args, **kwargs)
        ctx = states[0].ctx
        before = [s for s in (_shape(x) for x in items) if s is not None]
        ctx.depth += 1
        try:
            res = fn(first, *args, **kwargs)
        finally:
            ctx.depth -= 1
        kinds = MODULE[name]
        if name == "concat" and kwargs.get("axis", 0) in (1, "columns"):
            kinds = (JOIN,)
        _record(ctx, f"pandas.{name}", kinds, before, res)
        return res

    return recorded


_INSTALLED: list[bool] = []


def install() -> None:
    """Wrap the facades' methods (once per process)."""
    if _INSTALLED:
        return
    from dslog_dagster.pandas import frame, series
    from dslog_dagster.pandas.aggregate import TrackedGroupBy
    from dslog_dagster.pandas.window import TrackedRolling

    classes: list[tuple[type, str, dict[str, tuple[str, ...]]]] = [
        (frame.TrackedDataFrame, "DataFrame", FRAME),
        (series.TrackedSeries, "Series", SERIES),
        (TrackedGroupBy, "DataFrameGroupBy", GROUPBY),
        (TrackedRolling, "Rolling", ROLLING),
    ]
    for cls, prefix, table in classes:
        for name, kinds in table.items():
            setattr(cls, name, _wrap(f"{prefix}.{name}", getattr(cls, name), kinds))
    ix = frame._Indexer  # noqa: SLF001  (frame.loc / frame.iloc)
    ix.__getitem__ = _wrap("DataFrame.loc", ix.__getitem__, DERIVED)  # type: ignore[method-assign]
    _INSTALLED.append(True)


def effects_of(ctx: PandasContext) -> OperationEffects:
    """The steps the capture recorded (kind ``unknown`` when it recorded none)."""
    return OperationEffects(tuple(ctx.steps) or (Step("pandas", (UNKNOWN,), None, None, (), None),))
