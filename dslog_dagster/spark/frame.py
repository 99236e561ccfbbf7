"""``TrackedFrame``: a DataFrame whose rows carry provenance ids through user code.

The relational capture (Titian / Smoke / PROVision-style id propagation) hands user code a
``TrackedFrame`` per input. It has the DataFrame API people use and, hidden from the user,
*slot* columns: slot ``s`` of an output row names the input rows (of one input) that the row
came from — a ``bigint`` while every row has one source, an ``array<bigint>`` after an
aggregation. Every method runs the real PySpark method on the frame with its slots, so values
are exactly what plain PySpark computes, and:

* **row lineage** travels in the slots: projections, filters, sorts and limits keep them;
  joins keep both sides' slots (the row ← the left row and the right row); aggregations,
  ``distinct`` and pivots collect the slots of their group; unions keep each side's slots
  (``null`` on the other side); explode copies them to every generated row; window functions
  add one slot per window frame (``collect_list`` of the slots over the same frame);
* **column lineage** comes from the analyzed plan (:mod:`dslog_dagster.spark.plan`): every
  visible column knows which (slot, input column) pairs contributed its value and which were
  only considered (predicates, join/group keys, window partition and order).

A method that is not part of the supported API raises
:class:`~dslog_dagster.errors.UnsupportedFrameOperationError` naming it; under
``on_unknown="all_to_all"`` it runs on the plain frame and the lineage of everything after it is
a flagged all-to-all relation.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.spark.aggregate import aggregate
from dslog_dagster.spark.combine import join, union
from dslog_dagster.spark.duplicates import drop_duplicates
from dslog_dagster.spark.fills import filled
from dslog_dagster.spark.plan import WindowWithoutRule, analyzed, nodes_above, quoted
from dslog_dagster.spark.state import FrameState
from dslog_dagster.spark.topk import top_k
from dslog_dagster.spark.window import windowed

__all__ = ["TrackedFrame", "TrackedGroupedData"]


def _col(name: str) -> Column:
    return F.col(quoted(name))


def _flatten_args(cols: Sequence[Any]) -> list[Any]:
    if len(cols) == 1 and isinstance(cols[0], list | tuple):
        return list(cols[0])
    return list(cols)


class TrackedFrame:
    """A DataFrame with hidden provenance slots; see the module docstring.

    Only the capture creates these; user code receives them in place of the input DataFrames
    and returns one. The lineage itself is :attr:`lineage_state`, a frozen
    :class:`~dslog_dagster.spark.state.FrameState` that the lineage rules map and the capture
    reads.
    """

    def __init__(self, state: FrameState, sorted_by: bool = False) -> None:
        self._state = state
        # the frame is the direct result of orderBy (a following limit is a top-k)
        self._sorted_by = sorted_by

    # ------------------------------------------------------------------ state

    @property
    def lineage_state(self) -> FrameState:
        """The frame's lineage state: the DataFrame with its slot columns and what each
        column carries (what the capture reads). A user column named ``lineage_state`` is
        reached as ``frame["lineage_state"]``."""
        return self._state

    def _unknown(self, op: str, run: Callable[[DataFrame], Any]) -> Any:
        """An operation without a lineage rule: raise, or run it untracked (flagged)."""
        ctx = self._state.context
        if ctx.on_unknown != "all_to_all":
            msg = (
                f"`DataFrame.{op}` has no lineage rule in dslog's Spark capture, so its lineage "
                "would be a guess. Use the supported operations (docs, Spark guide: "
                "docs/spark.md), or capture with `on_unknown='all_to_all'` to record a flagged "
                "all-to-all relation."
            )
            raise UnsupportedFrameOperationError(msg)
        ctx.flagged_ops.append(op)
        out = run(self._state.visible_df())
        if isinstance(out, DataFrame):
            return TrackedFrame(FrameState.all_to_all_of(ctx, out, self._state.sources))
        return out

    # ------------------------------------------------------------------ read-only API

    @property
    def columns(self) -> list[str]:
        return self._state.columns

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        return self._state.visible_df().dtypes

    @property
    def schema(self) -> Any:
        return self._state.visible_df().schema

    @property
    def sparkSession(self) -> Any:
        return self._state.df.sparkSession

    def printSchema(self) -> None:
        self._state.visible_df().printSchema()

    def count(self) -> int:
        return self._state.df.count()

    def collect(self) -> list[Any]:
        return self._state.visible_df().collect()

    def take(self, n: int) -> list[Any]:
        return self._state.visible_df().take(n)

    def head(self, n: int | None = None) -> Any:
        vis = self._state.visible_df()
        return vis.head() if n is None else vis.head(n)

    def first(self) -> Any:
        return self._state.visible_df().first()

    def isEmpty(self) -> bool:
        return self._state.df.isEmpty()

    def show(self, *args: Any, **kwargs: Any) -> None:
        self._state.visible_df().show(*args, **kwargs)

    def toPandas(self) -> Any:
        return self._state.visible_df().toPandas()

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return self._state.df[item]
        if isinstance(item, int):
            return self._state.df[self.columns[item]]
        if isinstance(item, Column):
            return self.filter(item)
        if isinstance(item, list | tuple):
            return self.select(*item)
        msg = f"TrackedFrame indices are column names, positions, conditions or lists: {item!r}"
        raise TypeError(msg)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        state = self.__dict__.get("_state")
        if state is not None and name in self.columns:
            return state.df[name]
        if isinstance(getattr(DataFrame, name, None), property):
            return self._unknown(name, lambda d: getattr(d, name))
        if hasattr(DataFrame, name):
            return lambda *a, **k: self._unknown(name, lambda d: getattr(d, name)(*a, **k))
        raise AttributeError(name)

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {t}" for n, t in self.dtypes)
        return f"TrackedFrame[{cols}]"

    # ------------------------------------------------------------------ projections

    def _star(self, cols: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for c in cols:
            if isinstance(c, str) and c == "*":
                out += [_col(n) for n in self.columns]
            else:
                out.append(c)
        return out

    def _project(
        self, op: str, fn: Callable[[DataFrame, list[str]], DataFrame]
    ) -> "TrackedFrame | None":
        """Run a projection-like ``fn(frame, slot columns)`` (select, withColumn, ...), with
        window functions; ``None`` when the projection is really a global aggregation."""
        state = self._state
        if state.all_to_all:
            return TrackedFrame(
                FrameState.all_to_all_of(state.context, fn(state.df, []), state.sources)
            )
        # slot columns by quoted name: select() resolves a name string in one JVM call, where
        # each F.col costs several (round trips add up over a pipeline's plan)
        slot_cols = [quoted(n) for n in state.infos if isinstance(n, str)]
        try:
            first = fn(state.df, slot_cols)
        except AnalysisException:
            # e.g. a global aggregate in select(): the slot columns are not grouped
            visible = state.visible_df()
            probe = fn(visible, [])
            if "Aggregate" in nodes_above(analyzed(probe), visible):
                return None  # caller turns it into a global aggregation
            raise
        try:
            return TrackedFrame(state.finish(first, op))
        except WindowWithoutRule:
            pass
        return TrackedFrame(windowed(state, op, fn, first))

    def select(self, *cols: Any) -> "TrackedFrame":
        exprs = self._star(_flatten_args(cols))
        out = self._project("select", lambda d, slots: d.select(*exprs, *slots))
        if out is None:
            return self.groupBy().agg(*exprs)
        return out

    def selectExpr(self, *exprs: str) -> "TrackedFrame":
        cols = [e if e == "*" else F.expr(e) for e in _flatten_args(exprs) if isinstance(e, str)]
        return self.select(*cols)

    def withColumn(self, name: str, col: Column) -> "TrackedFrame":
        out = self._project("withColumn", lambda d, _: d.withColumn(name, col))
        if out is None:
            out = self._unknown("withColumn(aggregate)", lambda d: d.withColumn(name, col))
        return out

    def withColumns(self, *maps: Mapping[str, Column]) -> "TrackedFrame":
        merged: dict[str, Column] = {}
        for m in maps:
            merged.update(m)
        out = self._project("withColumns", lambda d, _: d.withColumns(merged))
        if out is None:
            out = self._unknown("withColumns(aggregate)", lambda d: d.withColumns(merged))
        return out

    def _simple(self, op: str, fn: Callable[[DataFrame], DataFrame]) -> "TrackedFrame":
        state = self._state
        if state.all_to_all:
            return TrackedFrame(
                FrameState.all_to_all_of(state.context, fn(state.df), state.sources)
            )
        return TrackedFrame(state.finish(fn(state.df), op))

    def withColumnRenamed(self, existing: str, new: str) -> "TrackedFrame":
        return self._simple("withColumnRenamed", lambda d: d.withColumnRenamed(existing, new))

    def withColumnsRenamed(self, mapping: Mapping[str, str]) -> "TrackedFrame":
        return self._simple("withColumnsRenamed", lambda d: d.withColumnsRenamed(dict(mapping)))

    def toDF(self, *names: str) -> "TrackedFrame":
        it = iter(names)
        if len(names) != len(self.columns):
            msg = f"toDF got {len(names)} names for {len(self.columns)} columns."
            raise ValueError(msg)
        full = [i if isinstance(i, str) else next(it) for i in self._state.infos]
        a2a = self._state.all_to_all
        return self._simple("toDF", lambda d: d.toDF(*full) if not a2a else d.toDF(*names))

    def drop(self, *cols: Any) -> "TrackedFrame":
        return self._simple("drop", lambda d: d.drop(*cols))

    def alias(self, name: str) -> "TrackedFrame":
        return self._simple("alias", lambda d: d.alias(name))

    # ------------------------------------------------------------------ row filters / order

    def filter(self, condition: Column | str) -> "TrackedFrame":
        cond = F.expr(condition) if isinstance(condition, str) else condition
        return self._simple("filter", lambda d: d.filter(cond))

    where = filter

    def orderBy(self, *cols: Any, **kwargs: Any) -> "TrackedFrame":
        out = self._simple("orderBy", lambda d: d.orderBy(*cols, **kwargs))
        if self._state.all_to_all:
            return out
        return TrackedFrame(out.lineage_state, sorted_by=True)

    sort = orderBy

    def sortWithinPartitions(self, *cols: Any, **kwargs: Any) -> "TrackedFrame":
        return self._simple(
            "sortWithinPartitions", lambda d: d.sortWithinPartitions(*cols, **kwargs)
        )

    def limit(self, num: int) -> "TrackedFrame":
        out = self._simple("limit", lambda d: d.limit(num))
        if not self._sorted_by:
            return out
        return TrackedFrame(top_k(out.lineage_state, self._state))

    def repartition(self, *args: Any, **kwargs: Any) -> "TrackedFrame":
        return self._simple("repartition", lambda d: d.repartition(*args, **kwargs))

    def coalesce(self, n: int) -> "TrackedFrame":
        return self._simple("coalesce", lambda d: d.coalesce(n))

    def cache(self) -> "TrackedFrame":
        self._state = replace(self._state, df=self._state.df.cache())
        return self

    def persist(self, *args: Any) -> "TrackedFrame":
        self._state = replace(self._state, df=self._state.df.persist(*args))
        return self

    def transform(self, func: Callable[..., "TrackedFrame"], *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    # ------------------------------------------------------------------ missing values

    def _filled(self, op: str, fn: Callable[[DataFrame], DataFrame]) -> "TrackedFrame":
        """``fillna``/``replace``: changed cells are not contributed by the old cell."""
        if self._state.all_to_all:
            return self._simple(op, fn)
        return TrackedFrame(filled(self._state, op, fn))

    def fillna(self, value: Any, subset: Any = None) -> "TrackedFrame":
        if isinstance(value, dict):
            return self._filled("fillna", lambda d: d.fillna(value))
        sub = [subset] if isinstance(subset, str) else subset
        sub = list(sub) if sub is not None else self.columns
        return self._filled("fillna", lambda d: d.fillna(value, sub))

    def dropna(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> Any:
        sub = [subset] if isinstance(subset, str) else subset
        sub = list(sub) if sub is not None else self.columns
        return self._simple("dropna", lambda d: d.dropna(how, thresh, sub))

    def replace(self, to_replace: Any, value: Any = None, subset: Any = None) -> Any:
        sub = [subset] if isinstance(subset, str) else subset
        sub = list(sub) if sub is not None else self.columns
        if isinstance(to_replace, dict):
            return self._filled("replace", lambda d: d.replace(to_replace, subset=sub))
        return self._filled("replace", lambda d: d.replace(to_replace, value, sub))

    @property
    def na(self) -> "_NaFunctions":
        return _NaFunctions(self)

    # ------------------------------------------------------------------ duplicates

    def distinct(self) -> "TrackedFrame":
        return self.dropDuplicates()

    def dropDuplicates(self, subset: Sequence[str] | None = None) -> "TrackedFrame":
        return TrackedFrame(drop_duplicates(self._state, subset))

    drop_duplicates = dropDuplicates

    # ------------------------------------------------------------------ joins

    def join(self, other: "TrackedFrame", on: Any = None, how: str | None = None) -> Any:
        if not isinstance(other, TrackedFrame):
            msg = (
                "A tracked frame can only be joined with another tracked frame (an input of "
                f"the capture or a frame derived from one), not `{type(other).__name__}`."
            )
            raise UnsupportedFrameOperationError(msg)
        return TrackedFrame(join(self._state, other.lineage_state, on, how))

    def crossJoin(self, other: "TrackedFrame") -> Any:
        return self.join(other, how="cross")

    # ------------------------------------------------------------------ unions

    def union(self, other: "TrackedFrame") -> "TrackedFrame":
        if not isinstance(other, TrackedFrame):
            msg = f"union needs a tracked frame, not `{type(other).__name__}`."
            raise UnsupportedFrameOperationError(msg)
        return TrackedFrame(union(self._state, other.lineage_state))

    unionAll = union

    def unionByName(
        self,
        other: "TrackedFrame",
        allowMissingColumns: bool = False,
    ) -> "TrackedFrame":
        mine, theirs = self.columns, other.columns
        missing = [c for c in mine if c not in theirs]
        if missing and not allowMissingColumns:
            msg = f"unionByName: columns {missing} are missing on the right."
            raise ValueError(msg)
        extra = [c for c in theirs if c not in mine]
        left = self
        if extra:
            if not allowMissingColumns:
                msg = f"unionByName: columns {extra} are missing on the left."
                raise ValueError(msg)
            types = dict(other.dtypes)
            left = self.select(
                *[_col(c) for c in mine], *[F.lit(None).cast(types[c]).alias(c) for c in extra]
            )
        types_l = dict(left.dtypes)
        right = other.select(
            *[
                _col(c) if c in theirs else F.lit(None).cast(types_l[c]).alias(c)
                for c in left.columns
            ]
        )
        return left.union(right)

    # ------------------------------------------------------------------ aggregation

    def groupBy(self, *cols: Any) -> "TrackedGroupedData":
        return TrackedGroupedData(self, _flatten_args(cols))

    groupby = groupBy

    def agg(self, *exprs: Any) -> "TrackedFrame":
        return self.groupBy().agg(*exprs)


class _NaFunctions:
    def __init__(self, frame: TrackedFrame) -> None:
        self._f = frame

    def fill(self, value: Any, subset: Any = None) -> TrackedFrame:
        return self._f.fillna(value, subset)

    def drop(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> Any:
        return self._f.dropna(how, thresh, subset)

    def replace(self, to_replace: Any, value: Any = None, subset: Any = None) -> Any:
        return self._f.replace(to_replace, value, subset)


class TrackedGroupedData:
    """``frame.groupBy(...)``: aggregations that collect the provenance slots of each group
    (:mod:`~dslog_dagster.spark.aggregate`)."""

    def __init__(self, frame: TrackedFrame, keys: list[Any], pivot: Any = None) -> None:
        self._f = frame
        self._keys = keys
        self._pivot = pivot

    def _exprs(self, exprs: Sequence[Any]) -> list[Column]:
        if len(exprs) == 1 and isinstance(exprs[0], dict):
            return [F.expr(f"{fn}({quoted(c) if c != '*' else '*'})") for c, fn in exprs[0].items()]
        return list(exprs)

    def agg(self, *exprs: Any) -> TrackedFrame:
        cols = self._exprs(exprs)
        return TrackedFrame(aggregate(self._f.lineage_state, self._keys, cols, self._pivot))

    def count(self) -> TrackedFrame:
        return self.agg(F.count(F.lit(1)).alias("count"))

    def _simple(self, fn: Callable[[str], Column], cols: Sequence[str]) -> TrackedFrame:
        if not cols:
            numeric = ("int", "bigint", "double", "float", "smallint", "tinyint", "decimal")
            keys = {k for k in self._keys if isinstance(k, str)}
            cols = [n for n, t in self._f.dtypes if t.startswith(numeric) and n not in keys]
        return self.agg(*[fn(c) for c in cols])

    def sum(self, *cols: str) -> TrackedFrame:
        return self._simple(F.sum, cols)

    def avg(self, *cols: str) -> TrackedFrame:
        return self._simple(F.avg, cols)

    mean = avg

    def min(self, *cols: str) -> TrackedFrame:
        return self._simple(F.min, cols)

    def max(self, *cols: str) -> TrackedFrame:
        return self._simple(F.max, cols)

    def pivot(self, pivot_col: str, values: Sequence[Any] | None = None) -> "TrackedGroupedData":
        if self._pivot is not None:
            msg = "pivot() was already called on this grouping."
            raise ValueError(msg)
        return TrackedGroupedData(self._f, self._keys, (pivot_col, values))
