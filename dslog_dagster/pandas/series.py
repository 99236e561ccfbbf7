"""``TrackedSeries``: one column of a tracked pandas frame, with its cells' lineage.

User code gets a series from ``frame["col"]`` and combines it: arithmetic and comparisons
(a cell from the cells of the same row it was computed from), ``fillna`` / ``where`` /
``mask`` / ``clip`` / ``replace`` (a cell that was replaced by a literal is no longer
contributed by the old cell, which only decided the value: considered), ``isna`` /
``isin`` / ``map`` / ``astype`` and the like (same cells). The value is always the one plain
pandas computes: every method runs the real pandas method on the plain series.

Two tracked series combine only when they share a row space (the same frame's rows, in the
same positions): anything else would align on the index, which the lineage does not follow,
and is refused. Reductions to a scalar (``sum``, ``mean``...) are refused with
:class:`~dslog_dagster.errors.UnsupportedFrameOperationError`: a plain number would lose the
lineage of every cell it came from; use ``groupby(...).agg`` or ``transform`` instead.
"""

import operator
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn, cast

import numpy as np
import pandas as pd

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.pandas.arrays import bridge_of, is_tracked_array
from dslog_dagster.pandas.rules import rule
from dslog_dagster.pandas.state import NO_LINEAGE, ColumnLineage, FrameState

__all__ = ["TrackedSeries", "refuse"]


def refuse(op: str, why: str = "") -> NoReturn:
    """Raise the error for an operation without a lineage rule, naming it.

    Raises:
        UnsupportedFrameOperationError: always.
    """
    msg = (
        f"`{op}` has no lineage rule in dslog's pandas capture, so its lineage would be a "
        f"guess{': ' + why if why else ''}. Use the supported operations (docs/pandas.md), "
        "or run this part in an untracked step."
    )
    raise UnsupportedFrameOperationError(msg)


def _same_text(before: pd.Series, after: pd.Series) -> bool:
    """A cast that left every string as it was (``object`` <-> ``string``)."""
    text = ("string", "empty")
    infer = pd.api.types.infer_dtype
    return bool(infer(before, skipna=True) in text and infer(after, skipna=True) in text)


def _null(s: pd.Series) -> np.ndarray:
    return np.asarray(s.isna().to_numpy(), bool)


class TrackedSeries:
    """A pandas Series whose cells carry lineage; see the module docstring."""

    def __init__(self, series: pd.Series, lineage: ColumnLineage, state: FrameState) -> None:
        self._s = series
        self._lin = lineage
        self._state = state

    # ------------------------------------------------------------------ plumbing

    @property
    def lineage(self) -> ColumnLineage:
        """The series' cell lineage (what the capture reads)."""
        return self._lin

    @property
    def plain(self) -> pd.Series:
        """The plain pandas series (values only)."""
        return self._s

    @property
    def frame_state(self) -> FrameState:
        return self._state

    def _same(self, series: Any, lineage: ColumnLineage) -> "TrackedSeries":
        if not isinstance(series, pd.Series):
            refuse("Series method", f"it returned a `{type(series).__name__}`")
        return TrackedSeries(series, lineage, self._state)

    def _other(self, other: Any, op: str) -> tuple[Any, ColumnLineage]:
        """The plain value of an operand and its lineage."""
        if isinstance(other, TrackedSeries):
            if other.frame_state.space is not self._state.space:
                refuse(
                    op,
                    "the two series come from frames with different rows (pandas would align "
                    "them on the index); combine columns of one frame, or merge first",
                )
            return other.plain, other.lineage
        if isinstance(other, pd.Series | pd.DataFrame):
            refuse(op, "an untracked pandas operand aligns on its index")
        frame_class = cast("type", rule("frame"))
        if isinstance(other, frame_class):
            refuse(op, "a series combined with a whole frame")
        if is_tracked_array(other):
            refuse(
                op,
                "a tracked NumPy array operand; put it back as a column first "
                "(`frame.assign(name=array)`) and combine the columns",
            )
        if isinstance(other, np.ndarray) and other.ndim > 0 and other.size != len(self._s):
            refuse(op, "an array operand of another length")
        return other, NO_LINEAGE

    def _binary(self, other: Any, fn: Callable[[Any, Any], Any], op: str) -> "TrackedSeries":
        value, lin = self._other(other, op)
        return self._same(fn(self._s, value), self._lin.union(lin))

    def explode(self, ignore_index: bool = False) -> "TrackedSeries":
        """One row per list element; a ``split``'s tokens keep their characters."""
        frame = self.to_frame("__dslog_explode__")
        res = frame.explode("__dslog_explode__", ignore_index=ignore_index)
        out = res.series("__dslog_explode__")
        return TrackedSeries(out.plain.rename(self._s.name), out.lineage, out.frame_state)

    # ------------------------------------------------------------------ read-only

    @property
    def name(self) -> Any:
        return self._s.name

    @property
    def dtype(self) -> Any:
        return self._s.dtype

    @property
    def index(self) -> pd.Index:
        return self._s.index

    @property
    def shape(self) -> tuple[int]:
        return (len(self._s),)

    @property
    def empty(self) -> bool:
        return bool(self._s.empty)

    def __len__(self) -> int:
        return len(self._s)

    def __repr__(self) -> str:
        return repr(self._s)

    def __bool__(self) -> bool:
        refuse("Series.__bool__", "the truth value of a series is ambiguous")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(f"Series.{name}")

    def to_frame(self, name: Any = None) -> Any:
        """A one-column tracked frame of the same rows."""
        df = self._s.to_frame() if name is None else self._s.to_frame(name)
        return rule("frame")(df, self._state.with_columns([self._lin]))

    def reset_index(self, drop: bool = False, name: Any = None) -> Any:
        """The index back as columns (see :meth:`TrackedDataFrame.reset_index`)."""
        if drop:
            st = replace(self._state, index=())
            return TrackedSeries(self._s.reset_index(drop=True), self._lin, st)
        return self.to_frame(name).reset_index()

    # ------------------------------------------------------------------ element-wise

    def __add__(self, o: Any) -> "TrackedSeries":
        return self._text_sum([self, o], self._binary(o, operator.add, "Series.__add__"))

    def __radd__(self, o: Any) -> "TrackedSeries":
        return self._text_sum([o, self], self._binary(o, lambda a, b: b + a, "Series.__radd__"))

    def _text_sum(self, parts: list[Any], out: "TrackedSeries") -> "TrackedSeries":
        """``+`` of strings is concatenation: its characters are placed
        (:func:`~dslog_dagster.pandas.strings.concat`) when the capture records them."""
        if self._state.ctx.segments is None or out.plain.dtype.kind in "biufcmM":
            return out
        return rule("str_concat")(parts, out.plain, "", None)  # type: ignore[no-any-return]

    def __sub__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.sub, "Series.__sub__")

    def __rsub__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, lambda a, b: b - a, "Series.__rsub__")

    def __mul__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.mul, "Series.__mul__")

    def __rmul__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, lambda a, b: b * a, "Series.__rmul__")

    def __truediv__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.truediv, "Series.__truediv__")

    def __rtruediv__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, lambda a, b: b / a, "Series.__rtruediv__")

    def __floordiv__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.floordiv, "Series.__floordiv__")

    def __mod__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.mod, "Series.__mod__")

    def __pow__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.pow, "Series.__pow__")

    def __eq__(self, o: Any) -> "TrackedSeries":  # type: ignore[override]
        return self._binary(o, operator.eq, "Series.__eq__")

    def __ne__(self, o: Any) -> "TrackedSeries":  # type: ignore[override]
        return self._binary(o, operator.ne, "Series.__ne__")

    def __lt__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.lt, "Series.__lt__")

    def __le__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.le, "Series.__le__")

    def __gt__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.gt, "Series.__gt__")

    def __ge__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.ge, "Series.__ge__")

    def __and__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.and_, "Series.__and__")

    def __or__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.or_, "Series.__or__")

    def __xor__(self, o: Any) -> "TrackedSeries":
        return self._binary(o, operator.xor, "Series.__xor__")

    def __invert__(self) -> "TrackedSeries":
        return self._same(~self._s, self._lin.cells())

    def __neg__(self) -> "TrackedSeries":
        return self._same(-self._s, self._lin.cells())

    def __abs__(self) -> "TrackedSeries":
        return self._same(abs(self._s), self._lin.cells())

    __hash__ = None  # type: ignore[assignment]

    def abs(self) -> "TrackedSeries":
        return self._same(self._s.abs(), self._lin.cells())

    def round(self, decimals: int = 0) -> "TrackedSeries":
        return self._same(self._s.round(decimals), self._lin.cells())

    def astype(self, dtype: Any, **kwargs: Any) -> "TrackedSeries":
        res = self._s.astype(dtype, **kwargs)
        return self._same(res, self._lin if _same_text(self._s, res) else self._lin.cells())

    def rename(self, name: Any) -> "TrackedSeries":
        if callable(name) or isinstance(name, dict):
            refuse("Series.rename", "only a new name is supported")
        return self._same(self._s.rename(name), self._lin)

    def isna(self) -> "TrackedSeries":
        return self._same(self._s.isna(), self._lin.cells())

    def notna(self) -> "TrackedSeries":
        return self._same(self._s.notna(), self._lin.cells())

    isnull = isna
    notnull = notna

    def isin(self, values: Any) -> "TrackedSeries":
        if isinstance(values, TrackedSeries):
            refuse("Series.isin", "membership in a tracked series reads every row")
        return self._same(self._s.isin(values), self._lin.cells())

    def between(self, left: Any, right: Any, inclusive: str = "both") -> "TrackedSeries":
        lv, ll = self._other(left, "Series.between")
        rv, rl = self._other(right, "Series.between")
        res = self._s.between(lv, rv, inclusive=inclusive)
        return self._same(res, self._lin.union(ll).union(rl))

    def map(self, arg: Any, na_action: Any = None) -> "TrackedSeries":
        """Each cell from the same cell (a dict, a Series of values, or a function of one
        value)."""
        if isinstance(arg, TrackedSeries):
            refuse("Series.map", "mapping through a tracked series reads other rows")
        return self._same(self._s.map(arg, na_action=na_action), self._lin.cells())

    # ------------------------------------------------------------------ moving rows

    def _shifted_lineage(self, periods: int) -> ColumnLineage:
        """The lineage of the cell ``periods`` rows earlier, per row (none off the ends)."""
        n = len(self._s)
        src = np.arange(n, dtype=np.int64) - periods
        src[(src < 0) | (src >= n)] = -1
        return self._lin.mapped(self._state.ctx.remap(lambda rows: rows.take(src)))

    def shift(self, periods: int = 1) -> "TrackedSeries":
        """Row ``k`` holds the cell of row ``k - periods`` (none where that is off the end)."""
        if not isinstance(periods, int):
            refuse("Series.shift", "only an integer number of periods (no freq=)")
        return self._same(self._s.shift(periods), self._shifted_lineage(periods))

    def rolling(self, window: Any, min_periods: Any = None, **kw: Any) -> Any:
        """A trailing window of ``window`` rows (:mod:`dslog_dagster.pandas.window`)."""
        return rule("rolling")(self, window, min_periods, **kw)

    def diff(self, periods: int = 1) -> "TrackedSeries":
        """Row ``k`` from the cells of rows ``k`` and ``k - periods``."""
        if not isinstance(periods, int):
            refuse("Series.diff", "only an integer number of periods")
        return self._same(self._s.diff(periods), self._lin.union(self._shifted_lineage(periods)))

    # ------------------------------------------------------------------ in row order

    def cumsum(self, *args: Any, **kw: Any) -> "TrackedSeries":
        """Each row from the rows up to it (:mod:`dslog_dagster.pandas.sequence`)."""
        return rule("cumsum")(self, *args, **kw)  # type: ignore[no-any-return]

    def cumprod(self, *args: Any, **kw: Any) -> "TrackedSeries":
        return rule("cumprod")(self, *args, **kw)  # type: ignore[no-any-return]

    def cummax(self, *args: Any, **kw: Any) -> "TrackedSeries":
        return rule("cummax")(self, *args, **kw)  # type: ignore[no-any-return]

    def cummin(self, *args: Any, **kw: Any) -> "TrackedSeries":
        return rule("cummin")(self, *args, **kw)  # type: ignore[no-any-return]

    def ffill(self, *args: Any, **kw: Any) -> "TrackedSeries":
        """A null cell from the last non-null cell before it."""
        return rule("ffill")(self, *args, **kw)  # type: ignore[no-any-return]

    def bfill(self, *args: Any, **kw: Any) -> "TrackedSeries":
        """A null cell from the next non-null cell after it."""
        return rule("bfill")(self, *args, **kw)  # type: ignore[no-any-return]

    def interpolate(self, *args: Any, **kw: Any) -> "TrackedSeries":
        """A null cell from the non-null cells around it (linear)."""
        return rule("interpolate")(self, *args, **kw)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ choosing values

    def _choose(
        self, keep: np.ndarray, other: ColumnLineage, decided: ColumnLineage
    ) -> ColumnLineage:
        """Lineage of a column whose rows in ``keep`` hold this series' cell and the others
        the value ``other`` gave; ``decided`` (a condition, the old cell) is considered."""
        st = self._state
        kept = st.restricted(self._lin, keep)
        others = st.restricted(other, ~keep)
        chosen = kept.union(others)
        return ColumnLineage(chosen.contrib, chosen.consid | decided.full())

    def fillna(self, value: Any = None, **kwargs: Any) -> "TrackedSeries":
        """A null cell gets ``value`` (a literal: no contributing cell; or the same row of a
        tracked series); the null cell decided it (considered)."""
        if kwargs:
            refuse("Series.fillna", f"options {sorted(kwargs)} (use ffill/bfill rules)")
        if isinstance(value, dict):
            refuse("Series.fillna", "a value per index label")
        v, lin = self._other(value, "Series.fillna")
        null = _null(self._s)
        return self._same(self._s.fillna(v), self._choose(~null, lin, self._lin.deciding()))

    def where(self, cond: Any, other: Any = np.nan) -> "TrackedSeries":
        """Keep the cell where ``cond``, else ``other``; ``cond``'s cells are considered."""
        cv, cl = self._cond(cond, "Series.where")
        ov, ol = self._other(other, "Series.where")
        return self._same(self._s.where(cv, ov), self._choose(cv, ol, cl))

    def mask(self, cond: Any, other: Any = np.nan) -> "TrackedSeries":
        """Replace the cell where ``cond`` by ``other``; ``cond``'s cells are considered."""
        cv, cl = self._cond(cond, "Series.mask")
        ov, ol = self._other(other, "Series.mask")
        return self._same(self._s.mask(cv, ov), self._choose(~cv, ol, cl))

    def _cond(self, cond: Any, op: str) -> tuple[np.ndarray, ColumnLineage]:
        value, lin = self._other(cond, op)
        arr = np.asarray(value.to_numpy() if isinstance(value, pd.Series) else value)
        if arr.dtype != bool or arr.shape != (len(self._s),):
            refuse(op, "the condition must be a boolean series or array of the same rows")
        return arr, lin

    def clip(self, lower: Any = None, upper: Any = None) -> "TrackedSeries":
        """A cell outside the bounds becomes the bound (a literal): the old cell decided it."""
        for b in (lower, upper):
            if not (b is None or np.isscalar(b)):
                refuse("Series.clip", "only scalar bounds are supported")
        res = self._s.clip(lower, upper)
        vals = self._s
        clipped = np.zeros(len(vals), bool)
        if lower is not None:
            clipped |= np.asarray((vals < lower).to_numpy(), bool)
        if upper is not None:
            clipped |= np.asarray((vals > upper).to_numpy(), bool)
        return self._same(res, self._choose(~clipped, NO_LINEAGE, self._lin.deciding()))

    def replace(self, to_replace: Any = None, value: Any = None, **kwargs: Any) -> "TrackedSeries":
        """A matched cell becomes a literal: the old cell decided it (considered)."""
        if kwargs or isinstance(to_replace, TrackedSeries) or isinstance(value, TrackedSeries):
            refuse("Series.replace", "only literal values (no regex, no method)")
        if isinstance(to_replace, dict):
            if value is not None or any(isinstance(v, dict) for v in to_replace.values()):
                refuse("Series.replace", "nested replacement dictionaries")
            keys = list(to_replace)
            res = self._s.replace(to_replace)
        else:
            keys = list(to_replace) if isinstance(to_replace, list | tuple) else [to_replace]
            res = self._s.replace(to_replace, value)
        matched = np.asarray(self._s.isin(keys).to_numpy(), bool)
        return self._same(res, self._choose(~matched, NO_LINEAGE, self._lin.deciding()))

    # ------------------------------------------------------------------ refused

    def _reduction(self, op: str) -> NoReturn:
        refuse(
            f"Series.{op}",
            "a reduction to one plain number would lose the lineage of every cell it came "
            "from; use groupby(...).agg or transform",
        )

    def sum(self, *a: Any, **k: Any) -> Any:
        self._reduction("sum")

    def mean(self, *a: Any, **k: Any) -> Any:
        self._reduction("mean")

    def max(self, *a: Any, **k: Any) -> Any:
        self._reduction("max")

    def min(self, *a: Any, **k: Any) -> Any:
        self._reduction("min")

    def to_numpy(self, dtype: Any = None, copy: bool = False) -> Any:
        """A 1-D ``tracked_float`` array of the (float64) cells, for NumPy code whose result
        comes back as a column (:mod:`~dslog_dagster.pandas.arrays`)."""
        if dtype not in (None, np.float64, "float64", float):
            refuse("Series.to_numpy", f"dtype={dtype!r} (float64 cells only)")
        bridge = bridge_of(self._state.ctx)
        return bridge.to_numpy(
            self._s.to_numpy(copy=copy), self._state, [self._lin], "Series.to_numpy"
        )

    def __array__(self, *a: Any, **k: Any) -> Any:
        refuse("Series.__array__", "the array would carry no lineage")

    def __iter__(self) -> Any:
        refuse("Series.__iter__", "plain values would carry no lineage")

    # last in the class: the name would shadow the builtin in the annotations below it
    @property
    def str(self) -> Any:
        """pandas string methods, with character-range lineage
        (:mod:`~dslog_dagster.pandas.strings`)."""
        return rule("strings")(self)
