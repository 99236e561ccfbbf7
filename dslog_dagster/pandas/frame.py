"""``TrackedDataFrame``: a pandas DataFrame whose cells carry lineage through user code.

The capture (:mod:`dslog_dagster.pandas.capture`) hands user code one per input. Each method
runs the real pandas method, so values are exactly what plain pandas computes, and maps the
frame's :class:`~dslog_dagster.pandas.state.FrameState` by the operation's rule:

* column operations (selection, ``drop``, ``rename``, ``astype``, ``assign``, ``fillna``,
  ``replace``, ``where``/``mask``/``clip``) keep the rows and map columns;
* row operations (boolean filters, ``query``, ``dropna``, ``loc``/``iloc``, ``head``/``tail``,
  ``sort_values``/``nlargest``/``nsmallest``, ``drop_duplicates``) find the rows pandas kept by
  running the same method on the frame with a ``RangeIndex`` (row positions as labels) and map
  every slot with :meth:`~dslog_dagster.pandas.rows.RowMap.take`; the cells that decided which
  rows remain (predicates, compared subsets, top-k sort keys) join the rows' considered lineage;
* ``merge``/``join``/``concat`` (:mod:`dslog_dagster.pandas.combine`), ``groupby``
  (:mod:`dslog_dagster.pandas.aggregate`) and ``get_dummies`` / row-wise ``apply``
  (:mod:`dslog_dagster.pandas.reshape`) have modules of their own.

Anything else raises :class:`~dslog_dagster.errors.UnsupportedFrameOperationError` naming the
method — never a guess.
"""

import ast
import inspect
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.pandas.arrays import bridge_of, is_tracked_array
from dslog_dagster.pandas.rows import ranges
from dslog_dagster.pandas.rules import register, rule
from dslog_dagster.pandas.series import TrackedSeries, _same_text, refuse
from dslog_dagster.pandas.state import NO_LINEAGE, ColumnLineage, FrameState

__all__ = ["TrackedDataFrame", "check_labels"]


def check_labels(df: pd.DataFrame, op: str) -> None:
    """Refuse frames the cell space cannot name: repeated or multi-level column labels."""
    if isinstance(df.columns, pd.MultiIndex):
        refuse(op, "multi-level column labels (flatten them first)")
    if not df.columns.is_unique:
        refuse(
            op, f"repeated column labels {sorted(map(str, df.columns[df.columns.duplicated()]))}"
        )


def _positions_of(df: pd.DataFrame, run: Callable[[pd.DataFrame], Any]) -> tuple[Any, np.ndarray]:
    """Run a row-selecting method on ``df`` with row positions as its index: the result with
    ``df``'s own labels restored, and the positions of its rows."""
    pos_df = df.set_axis(pd.RangeIndex(len(df)), axis=0)
    res = run(pos_df)
    positions = np.asarray(res.index.to_numpy(), np.int64)
    res = res.set_axis(df.index.take(positions), axis=0)
    return res, positions


class TrackedDataFrame:
    """A pandas DataFrame with cell lineage; see the module docstring."""

    def __init__(self, df: pd.DataFrame, state: FrameState) -> None:
        check_labels(df, "DataFrame")
        if len(state.columns) != df.shape[1] or state.n_rows != len(df):
            msg = f"lineage state {state.n_rows}x{len(state.columns)} for a frame {df.shape}"
            raise AssertionError(msg)
        self._df = df
        self._state = state

    # ------------------------------------------------------------------ plumbing

    @property
    def lineage_state(self) -> FrameState:
        """The frame's lineage (what the capture reads)."""
        return self._state

    @property
    def plain(self) -> pd.DataFrame:
        """The plain pandas frame (values only)."""
        return self._df

    def _pos(self, label: Hashable) -> int:
        loc = self._df.columns.get_loc(label)
        assert isinstance(loc, int)
        return loc

    def _lin(self, label: Hashable) -> ColumnLineage:
        return self._state.columns[self._pos(label)]

    def columns_like(self, df: pd.DataFrame, state: FrameState, op: str) -> "TrackedDataFrame":
        """``df`` (same rows as ``state``) whose columns are some of this frame's, by label."""
        check_labels(df, op)
        cols = []
        for c in df.columns:
            if c not in self._df.columns:
                refuse(op, f"it made a column `{c}` of unknown origin")
            cols.append(state.columns[self._pos(c)])
        return TrackedDataFrame(df, state.with_columns(cols))

    def _rows(
        self, run: Callable[[pd.DataFrame], Any], op: str, *, keep_rank: bool = False
    ) -> "tuple[pd.DataFrame, FrameState, np.ndarray]":
        res, positions = _positions_of(self._df, run)
        if not isinstance(res, pd.DataFrame) or list(res.columns) != list(self._df.columns):
            refuse(op, "it changed the columns")
        return res, self._state.rows_taken(positions, keep_rank=keep_rank), positions

    def series(self, label: Hashable) -> TrackedSeries:
        return TrackedSeries(self._df[label], self._lin(label), self._state)

    # ------------------------------------------------------------------ read-only

    @property
    def columns(self) -> pd.Index:
        return self._df.columns

    @property
    def index(self) -> pd.Index:
        return self._df.index

    @property
    def dtypes(self) -> pd.Series:
        return self._df.dtypes

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self._df.shape[0]), int(self._df.shape[1]))

    @property
    def empty(self) -> bool:
        return bool(self._df.empty)

    def __len__(self) -> int:
        return len(self._df)

    def __repr__(self) -> str:
        return repr(self._df)

    def __contains__(self, label: Hashable) -> bool:
        return label in self._df.columns

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        df = self.__dict__.get("_df")
        if df is not None and name in df.columns:
            return self.series(name)
        refuse(f"DataFrame.{name}")

    def to_numpy(self, dtype: Any = None, copy: bool = False) -> Any:
        """A ``tracked_float`` array of the (float64) cells, for NumPy code whose result comes
        back as a column (:mod:`~dslog_dagster.pandas.arrays`)."""
        if dtype not in (None, np.float64, "float64", float):
            refuse("DataFrame.to_numpy", f"dtype={dtype!r} (float64 cells only)")
        bridge = bridge_of(self._state.ctx)
        values = self._df.to_numpy(copy=copy)
        return bridge.to_numpy(values, self._state, list(self._state.columns), "DataFrame.to_numpy")

    def __array__(self, *a: Any, **k: Any) -> Any:
        refuse("DataFrame.__array__", "the array would carry no lineage")

    def __iter__(self) -> Any:
        return iter(self._df.columns)

    # ------------------------------------------------------------------ columns

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, TrackedSeries):
            return self.filter_rows(key, "DataFrame.__getitem__")
        if isinstance(key, list | pd.Index):
            return self.columns_like(self._df[key], self._state, "DataFrame.__getitem__")
        if isinstance(key, slice | np.ndarray | pd.Series):
            refuse("DataFrame.__getitem__", "filter with a tracked boolean series")
        return self.series(key)

    def __setitem__(self, key: Hashable, value: Any) -> None:
        new = self.assign(**{str(key): value}) if isinstance(key, str) else None
        if new is None:
            refuse("DataFrame.__setitem__", "only string column labels")
        self._df, self._state = new.plain, new.lineage_state

    def drop(
        self, labels: Any = None, *, columns: Any = None, axis: Any = 0, **kw: Any
    ) -> "TrackedDataFrame":
        if kw.get("index") is not None or (labels is not None and axis in (0, "index")):
            refuse("DataFrame.drop", "dropping rows by label (filter instead)")
        cols = columns if columns is not None else labels
        res = self._df.drop(columns=cols, errors=kw.get("errors", "raise"))
        return self.columns_like(res, self._state, "DataFrame.drop")

    def select_dtypes(self, include: Any = None, exclude: Any = None) -> "TrackedDataFrame":
        """The columns of some dtypes (a column selection)."""
        res = self._df.select_dtypes(include=include, exclude=exclude)
        return self.columns_like(res, self._state, "DataFrame.select_dtypes")

    def _cells(self) -> FrameState:
        """The same lineage without character lineage (values that are no longer strings)."""
        return self._state.with_columns([c.cells() for c in self._state.columns])

    def isna(self) -> "TrackedDataFrame":
        """Each cell from the same cell."""
        return TrackedDataFrame(self._df.isna(), self._cells())

    def notna(self) -> "TrackedDataFrame":
        return TrackedDataFrame(self._df.notna(), self._cells())

    isnull = isna
    notnull = notna

    def rename(
        self, mapper: Any = None, *, columns: Any = None, axis: Any = None, **kw: Any
    ) -> "TrackedDataFrame":
        if kw.get("index") is not None or (mapper is not None and axis not in (1, "columns")):
            refuse("DataFrame.rename", "renaming index labels (rename columns=...)")
        res = self._df.rename(
            columns=columns if columns is not None else mapper, errors=kw.get("errors", "ignore")
        )
        check_labels(res, "DataFrame.rename")
        return TrackedDataFrame(res, self._state)

    def astype(self, dtype: Any, **kw: Any) -> "TrackedDataFrame":
        """Each cell from the same cell; characters are kept where strings stay strings."""
        res = self._df.astype(dtype, **kw)
        cols = [
            c if _same_text(self._df.iloc[:, j], res.iloc[:, j]) else c.cells()
            for j, c in enumerate(self._state.columns)
        ]
        return TrackedDataFrame(res, self._state.with_columns(cols))

    def copy(self, deep: bool = True) -> "TrackedDataFrame":
        return TrackedDataFrame(self._df.copy(deep=deep), self._state)

    def reset_index(self, drop: bool = False) -> "TrackedDataFrame":
        """The index back as columns (a group-by's keys keep their lineage; labels that are
        not cells become literal columns), or dropped."""
        st = self._state
        if drop:
            return TrackedDataFrame(self._df.reset_index(drop=True), replace(st, index=()))
        res = self._df.reset_index()
        check_labels(res, "DataFrame.reset_index")
        levels = res.shape[1] - self._df.shape[1]
        index = list(st.index) if st.index else [NO_LINEAGE] * levels
        if len(index) != levels:
            refuse("DataFrame.reset_index", "an index whose levels dslog lost track of")
        return TrackedDataFrame(res, replace(st, columns=(*index, *st.columns), index=()))

    def assign(self, **kwargs: Any) -> "TrackedDataFrame":
        """New or replaced columns: a tracked series of the same rows keeps its lineage; a
        literal (scalar or untracked array) has none of its own and inherits the rows'
        considered lineage. A callable gets the frame (tracked), as in pandas."""
        df, state = self._df, self._state
        cols = list(state.columns)
        for name, value in kwargs.items():
            if callable(value):
                value = value(TrackedDataFrame(df, state.with_columns(cols)))
            if isinstance(value, TrackedSeries):
                if value.frame_state.space is not state.space:
                    refuse("DataFrame.assign", f"`{name}` comes from a frame with other rows")
                plain, lin = value.plain, value.lineage
            elif isinstance(value, pd.Series | pd.DataFrame | TrackedDataFrame):
                refuse("DataFrame.assign", f"`{name}` is an untracked pandas object")
            elif is_tracked_array(value):  # back from NumPy (to_numpy), lineage composed
                plain, lin = bridge_of(state.ctx).column(
                    value, state.ctx, state.n_rows, "DataFrame.assign"
                )
            else:
                plain, lin = value, NO_LINEAGE
            df = df.assign(**{name: plain})
            if name in self._df.columns or len(cols) == df.shape[1]:
                cols[df.columns.get_loc(name)] = lin
            else:
                cols.append(lin)
        return TrackedDataFrame(df, state.with_columns(cols))

    def _per_column(
        self, op: str, run: Callable[[TrackedSeries, Any], TrackedSeries], arg: Any
    ) -> "TrackedDataFrame":
        """Apply a series rule to each column (``arg`` per column when a dict)."""
        cols, out = list(self._state.columns), {}
        for j, c in enumerate(self._df.columns):
            if isinstance(arg, dict):
                if c not in arg:
                    out[c] = self._df[c]
                    continue
                a = arg[c]
            else:
                a = arg
            s = run(self.series(c), a)
            out[c], cols[j] = s.plain, s.lineage
        if isinstance(arg, dict) and set(arg) - set(self._df.columns):
            refuse(op, f"unknown columns {sorted(map(str, set(arg) - set(self._df.columns)))}")
        df = pd.DataFrame(out, index=self._df.index, columns=self._df.columns)
        return TrackedDataFrame(df, self._state.with_columns(cols))

    def fillna(self, value: Any = None, **kw: Any) -> "TrackedDataFrame":
        """``fillna(value)`` or ``fillna({column: value})``; see :meth:`TrackedSeries.fillna`."""
        if kw:
            refuse("DataFrame.fillna", f"options {sorted(kw)}")
        res = self._per_column("DataFrame.fillna", lambda s, v: s.fillna(v), value)
        return TrackedDataFrame(self._df.fillna(value), res.lineage_state)

    def replace(self, to_replace: Any = None, value: Any = None, **kw: Any) -> "TrackedDataFrame":
        if kw:
            refuse("DataFrame.replace", f"options {sorted(kw)}")
        nested = isinstance(to_replace, dict) and any(
            isinstance(v, dict) for v in to_replace.values()
        )
        if nested:  # {column: {old: new}}: each named column with its own mapping
            if value is not None or not all(isinstance(v, dict) for v in to_replace.values()):
                refuse("DataFrame.replace", "a mix of per-column mappings and values")
            res = self._per_column("DataFrame.replace", lambda s, m: s.replace(m), to_replace)
            return TrackedDataFrame(self._df.replace(to_replace), res.lineage_state)
        res = self._per_column("DataFrame.replace", lambda s, _: s.replace(to_replace, value), None)
        return TrackedDataFrame(self._df.replace(to_replace, value), res.lineage_state)

    def clip(self, lower: Any = None, upper: Any = None) -> "TrackedDataFrame":
        res = self._per_column("DataFrame.clip", lambda s, _: s.clip(lower, upper), None)
        return TrackedDataFrame(self._df.clip(lower, upper), res.lineage_state)

    def where(self, cond: Any, other: Any = np.nan) -> "TrackedDataFrame":
        if not isinstance(cond, TrackedSeries):
            refuse("DataFrame.where", "the condition must be a tracked boolean series")
        res = self._per_column("DataFrame.where", lambda s, _: s.where(cond, other), None)
        return TrackedDataFrame(self._df.where(cond.plain, other, axis=0), res.lineage_state)

    def mask(self, cond: Any, other: Any = np.nan) -> "TrackedDataFrame":
        if not isinstance(cond, TrackedSeries):
            refuse("DataFrame.mask", "the condition must be a tracked boolean series")
        res = self._per_column("DataFrame.mask", lambda s, _: s.mask(cond, other), None)
        return TrackedDataFrame(self._df.mask(cond.plain, other, axis=0), res.lineage_state)

    def _in_row_order(self, name: str, *args: Any, **kw: Any) -> "TrackedDataFrame":
        """``cumsum``/``ffill``/``interpolate``... column by column: the series rule per
        column (:mod:`dslog_dagster.pandas.sequence`), values from pandas' own frame method."""
        op = f"DataFrame.{name}"
        if args or (kw and name != "interpolate"):
            refuse(op, f"arguments {list(args) + sorted(kw)}")
        res = self._per_column(op, lambda s, _: getattr(s, name)(**kw), None)
        return TrackedDataFrame(getattr(self._df, name)(**kw), res.lineage_state)

    def cumsum(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("cumsum", *args, **kw)

    def cumprod(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("cumprod", *args, **kw)

    def cummax(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("cummax", *args, **kw)

    def cummin(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("cummin", *args, **kw)

    def ffill(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("ffill", *args, **kw)

    def bfill(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("bfill", *args, **kw)

    def interpolate(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return self._in_row_order("interpolate", *args, **kw)

    # ------------------------------------------------------------------ rows

    def filter_rows(self, mask: TrackedSeries, op: str) -> "TrackedDataFrame":
        if mask.frame_state.space is not self._state.space:
            refuse(op, "the mask comes from a frame with other rows")
        keep = np.asarray(mask.plain.to_numpy(), dtype=object)
        if mask.plain.dtype != bool:
            refuse(op, "the mask is not a boolean series")
        positions = np.flatnonzero(keep.astype(bool)).astype(np.int64)
        res = self._df[mask.plain]
        state = self._state.considering(mask.lineage.full()).rows_taken(positions)
        return TrackedDataFrame(res, state)

    def query(self, expr: str, **kw: Any) -> "TrackedDataFrame":
        """Rows where ``expr`` holds; the cells of the columns it names are considered.
        ``@name`` reads the caller's variables, as in pandas."""
        extra = set(kw) - {"local_dict", "global_dict"}
        if extra:
            refuse("DataFrame.query", f"options {sorted(extra)}")
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        assert caller is not None
        scope = {
            "local_dict": kw.get("local_dict", caller.f_locals),
            "global_dict": kw.get("global_dict", caller.f_globals),
        }
        del caller
        res, positions = _positions_of(self._df, lambda d: d.query(expr, **scope))
        names = _query_names(expr)
        used = [c for c in self._df.columns if str(c) in names]
        pairs = frozenset().union(*(self._lin(c).full() for c in used)) if used else frozenset()
        state = self._state.considering(pairs).rows_taken(positions)
        return TrackedDataFrame(res, state)

    def dropna(
        self, *, how: str = "any", subset: Sequence[Hashable] | None = None, **kw: Any
    ) -> "TrackedDataFrame":
        """Rows without nulls (in ``subset``); the checked cells are considered."""
        if kw:
            refuse("DataFrame.dropna", f"options {sorted(kw)} (rows only)")
        cols = list(subset) if subset is not None else list(self._df.columns)
        res, positions = _positions_of(self._df, lambda d: d.dropna(how=how, subset=subset))
        state = self._state.considering(self._pairs(cols)).rows_taken(positions)
        return TrackedDataFrame(res, state)

    def _pairs(self, labels: Sequence[Hashable]) -> frozenset[tuple[int, int]]:
        """Every pair (contributing and considered) of the columns ``labels``."""
        out: frozenset[tuple[int, int]] = frozenset()
        for c in labels:
            out |= self._lin(c).full()
        return out

    def head(self, n: int = 5) -> "TrackedDataFrame":
        """The first ``n`` rows; after ``sort_values`` a top-k: row ``k`` considered the sort
        keys of rows ``0..k``."""
        res, state, positions = self._rows(lambda d: d.head(n), "DataFrame.head")
        ranked = self._state.ranked
        if ranked is not None:
            state = _top_k(self._state, state, positions, ranked.full())
        return TrackedDataFrame(res, state)

    def tail(self, n: int = 5) -> "TrackedDataFrame":
        res, state, _ = self._rows(lambda d: d.tail(n), "DataFrame.tail")
        return TrackedDataFrame(res, state)

    def sort_values(self, by: Any, **kw: Any) -> "TrackedDataFrame":
        """Rows in another order; the sort keys are remembered for a following ``head``."""
        if kw.get("inplace") or kw.get("axis", 0) not in (0, "index") or kw.get("key") is not None:
            refuse("DataFrame.sort_values", "inplace, axis=1 or key= sorts")
        ignore = kw.pop("ignore_index", False)
        keys = [by] if not isinstance(by, list) else by
        res, state, _ = self._rows(lambda d: d.sort_values(by, **kw), "DataFrame.sort_values")
        if ignore:
            res = res.reset_index(drop=True)
        moved: frozenset[tuple[int, int]] = frozenset()
        for c in keys:
            moved |= state.columns[self._pos(c)].full()
        return TrackedDataFrame(res, replace(state, ranked=ColumnLineage(frozenset(), moved)))

    def nlargest(self, n: int, columns: Any, keep: str = "first") -> "TrackedDataFrame":
        """The top ``n`` rows by ``columns``: row ``k`` considered the keys of rows
        ``0..k``."""
        return self._top("nlargest", n, columns, keep)

    def nsmallest(self, n: int, columns: Any, keep: str = "first") -> "TrackedDataFrame":
        return self._top("nsmallest", n, columns, keep)

    def _top(self, op: str, n: int, columns: Any, keep: str) -> "TrackedDataFrame":
        if keep not in ("first", "last"):
            refuse(f"DataFrame.{op}", "keep='all' (ties beyond n rows)")
        keys = [columns] if not isinstance(columns, list) else columns
        res, state, positions = self._rows(
            lambda d: getattr(d, op)(n, columns, keep=keep), f"DataFrame.{op}"
        )
        return TrackedDataFrame(res, _top_k(self._state, state, positions, self._pairs(keys)))

    def drop_duplicates(
        self, subset: Any = None, *, keep: Any = "first", ignore_index: bool = False
    ) -> "TrackedDataFrame":
        return rule("drop_duplicates")(self, subset, keep, ignore_index)  # type: ignore[no-any-return]

    @property
    def iloc(self) -> "_Indexer":
        return _Indexer(self, positional=True)

    @property
    def loc(self) -> "_Indexer":
        return _Indexer(self, positional=False)

    # ------------------------------------------------------------------ other modules

    def merge(self, right: "TrackedDataFrame", **kw: Any) -> "TrackedDataFrame":
        return rule("merge")(self, right, **kw)  # type: ignore[no-any-return]

    def join(self, other: "TrackedDataFrame", **kw: Any) -> "TrackedDataFrame":
        return rule("join")(self, other, **kw)  # type: ignore[no-any-return]

    def explode(self, column: Any, ignore_index: bool = False) -> "TrackedDataFrame":
        """One row per list element (:mod:`~dslog_dagster.pandas.reshape`)."""
        return rule("explode")(self, column, ignore_index)  # type: ignore[no-any-return]

    def melt(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        return rule("melt")(self, *args, **kw)  # type: ignore[no-any-return]

    def stack(self, *args: Any, **kw: Any) -> TrackedSeries:
        """One entry per cell, row by row (:mod:`~dslog_dagster.pandas.reshape`)."""
        return rule("stack")(self, *args, **kw)  # type: ignore[no-any-return]

    def pivot_table(self, *args: Any, **kw: Any) -> "TrackedDataFrame":
        """Group by index keys and one column key (:mod:`~dslog_dagster.pandas.pivot`)."""
        return rule("pivot_table")(self, *args, **kw)  # type: ignore[no-any-return]

    def groupby(self, by: Any, **kw: Any) -> Any:
        return rule("groupby")(self, by, **kw)

    def apply(self, func: Callable[..., Any], axis: Any = 0, **kw: Any) -> Any:
        if axis not in (1, "columns"):
            refuse("DataFrame.apply", "only row-wise apply (axis=1) has a rule")
        return rule("apply_rows")(self, func, **kw)


def _top_k(
    before: FrameState,
    after: FrameState,
    positions: np.ndarray,
    keys: frozenset[tuple[int, int]],
) -> FrameState:
    """``after`` (rows ``positions`` of ``before``, in rank order) whose row ``k`` also
    considered ``keys`` (pairs in ``before``'s slots) of the rows ranked ``0..k``."""
    if not keys:
        return after
    k = int(positions.size)
    sizes = np.arange(1, k + 1, dtype=np.int64)
    out = np.repeat(np.arange(k, dtype=np.int64), sizes)
    prefix = ranges(np.zeros(k, np.int64), sizes)
    rows = np.asarray(positions, np.int64)[prefix]
    move = before.ctx.remap(lambda m: m.gather(out, rows, k))
    return after.considering((move(s), c) for s, c in keys)


class _Indexer:
    """``frame.loc[...]`` / ``frame.iloc[...]``: rows by position or label, columns by label
    or position, through the real indexer."""

    def __init__(self, frame: TrackedDataFrame, *, positional: bool) -> None:
        self._f = frame
        self._positional = positional

    def __getitem__(self, key: Any) -> Any:
        f = self._f
        op = "DataFrame.iloc" if self._positional else "DataFrame.loc"
        rows, cols = key if isinstance(key, tuple) and len(key) == 2 else (key, slice(None))
        frame = f
        if isinstance(rows, TrackedSeries):
            frame = f.filter_rows(rows, op)
        elif not (isinstance(rows, slice) and rows == slice(None)):
            if isinstance(rows, pd.Series | pd.DataFrame):
                refuse(op, "an untracked pandas row selector")
            pos = pd.Series(np.arange(len(f), dtype=np.int64), index=f.index)
            sel = pos.iloc[rows] if self._positional else pos.loc[rows]
            if not isinstance(sel, pd.Series):
                refuse(op, "selecting a single row (use a list or a slice)")
            positions = np.asarray(sel.to_numpy(), np.int64)
            res = f.plain.iloc[positions]
            frame = TrackedDataFrame(res, f.lineage_state.rows_taken(positions))
        if isinstance(cols, slice) and cols == slice(None):
            return frame
        if not isinstance(cols, list | slice):
            refuse(op, "selecting a single column (use frame[column] or a list)")
        sub = frame.plain.iloc[:, cols] if self._positional else frame.plain.loc[:, cols]
        return frame.columns_like(sub, frame.lineage_state, op)


def _query_names(expr: str) -> set[str]:
    """The names a ``query`` expression reads (backtick-quoted ones included)."""
    quoted: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        key = f"__dslog_q{len(quoted)}"
        quoted[key] = m.group(1)
        return key

    text = re.sub(r"`([^`]*)`", sub, expr).replace("@", "")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        refuse("DataFrame.query", f"an expression dslog cannot read ({e.msg})")
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return {quoted.get(n, n) for n in names}


register("frame", TrackedDataFrame)
