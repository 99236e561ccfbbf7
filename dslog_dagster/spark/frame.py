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

import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.spark.idtap import (
    summary_column,
    summary_sql,
    tap_column,
    tap_key,
    tap_key_sql,
    tap_sql,
)
from dslog_dagster.spark.plan import (
    Base,
    ColumnLineage,
    Info,
    PlanWalker,
    WindowWithoutRule,
    refs_of,
    seq,
    slot_id,
    slot_name,
    union_all,
)

__all__ = ["CaptureContext", "TrackedFrame", "TrackedGroupedData"]

OnUnknown = Literal["raise", "all_to_all"]

_UID = "__dslog_uid"
_TMP = "__dslog_c"


@dataclass
class CaptureContext:
    """State shared by the frames of one capture: slot ids and which input each belongs to."""

    on_unknown: OnUnknown = "raise"
    slot_input: dict[int, int] = field(default_factory=dict)
    counter: Iterable[int] = field(default_factory=itertools.count)
    flagged_ops: list[str] = field(default_factory=list)
    aggregate: Literal["ranges", "lists"] = "ranges"
    # range slot -> where its ids come from: the aggregation's input frame, its group keys
    # and the slot's column there (see TrackedGroupedData._range_agg: rows whose range check
    # fails get their ids by joining that frame with their group key, not by a rerun)
    range_src: dict[int, "RangeSource"] = field(default_factory=dict)
    # range slot -> the slots of its hi, ok, n and its aggregation's keys (see _range_agg)
    range_fields: dict[int, "RangeFields"] = field(default_factory=dict)
    # directory under which range slots with tappable keys record their group's ids as
    # the aggregation's map side streams them (see dslog_dagster.spark.idtap); None: no tap
    tap_root: str | None = None
    # the tapped slots' directories; a slot's token is its index (see idtap.tap_column)
    tap_dirs: list[str] = field(default_factory=list)
    # tapped aggregations take every group's ids from the tap and record each group's id
    # count, computing no range (see dslog_dagster.spark.summaries); False: ranges carried as
    # columns (the rerun when the recorded summaries or the tap cannot be used)
    record_summaries: bool = True

    def new_tap_dir(self, kind: str) -> tuple[int, str]:
        """A token and its directory under ``tap_root`` for one JVM recorder (``"t"``: an id
        tap, ``"s"``: range summaries); jobs of the capture's pass name it by the token."""
        assert self.tap_root is not None
        token = len(self.tap_dirs)
        path = os.path.join(self.tap_root, f"{kind}{token}")
        os.makedirs(path)
        self.tap_dirs.append(path)
        return token, path

    def new_slot(self, input_index: int) -> int:
        sid = next(iter(self.counter))
        self.slot_input[sid] = input_index
        return sid


@dataclass(frozen=True)
class RangeFields:
    """Where a range slot's summary lives besides its own column (``lo``): the slots holding
    its ``hi``, ``ok`` and ``n``, and the aggregation's group keys and their hash (shared by
    the slots of one aggregation; none when the keys cannot be stored). With ``summary`` (a
    directory) there are no ``hi``, ``ok`` and ``n`` slots: the aggregation recorded them
    there per group (:mod:`~dslog_dagster.spark.summaries`)."""

    hi: int | None
    ok: int | None
    n: int | None
    keys: tuple[int, ...] = ()
    hash: int | None = None
    summary: str | None = None

    def remap(self, ren: Mapping[int, int]) -> "RangeFields":
        def m(s: int | None) -> int | None:
            return None if s is None else ren.get(s, s)

        return RangeFields(
            m(self.hi),
            m(self.ok),
            m(self.n),
            tuple(ren.get(k, k) for k in self.keys),
            m(self.hash),
            self.summary,
        )


@dataclass(frozen=True)
class RangeSource:
    """How to find the ids of a range slot's group again: the rows of ``frame`` (the
    aggregation's input) whose group keys ``keys`` equal, null-safely, the group keys the
    aggregation output (:attr:`RangeFields.keys`), in column ``slot`` of ``frame``."""

    frame: DataFrame
    keys: tuple[Column, ...]
    slot: str
    tap: str | None = None  # the slot's tap directory (dslog_dagster.spark.idtap), if tapped
    hashed: bool = False  # the tap recorded the keys' hash (RangeFields.hash), not the key


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def analyzed(df: DataFrame) -> Any:
    """The analyzed logical plan of ``df`` (a JVM object), kept on the DataFrame: a frame is
    immutable, and each plan walk asks for its operands' plans (two JVM round trips each)."""
    plan = df.__dict__.get("_dslog_analyzed")
    if plan is None:
        plan = df._jdf.queryExecution().analyzed()
        df.__dict__["_dslog_analyzed"] = plan
    return plan


def _col(name: str) -> Column:
    return F.col(_quote(name))


def _flatten_args(cols: Sequence[Any]) -> list[Any]:
    if len(cols) == 1 and isinstance(cols[0], list | tuple):
        return list(cols[0])
    return list(cols)


class NeedLists(Exception):
    """Raised inside a capture in ``ranges`` mode when a step needs the aggregated slots as
    lists (e.g. an aggregation over an aggregation); the capture reruns in ``lists`` mode."""


class TrackedFrame:
    """A DataFrame with hidden provenance slots; see the module docstring.

    Only the capture creates these; user code receives them in place of the input DataFrames
    and returns one.
    """

    def __init__(
        self,
        ctx: CaptureContext,
        df: DataFrame,
        infos: Sequence[Info],
        arrays: Iterable[int] = (),
        sources: Iterable[int] = (),
        all_to_all: bool = False,
        ranges: Iterable[int] = (),
        unique: bool = True,
        dense: Iterable[int] = (),
    ) -> None:
        self._ctx = ctx
        self._df = df
        self._infos = list(infos)
        self._arrays = frozenset(arrays)
        self._sources = frozenset(sources)
        self._a2a = all_to_all
        # range slots: lo per row, with hi, ok, n in slots of their own (RangeFields; ids
        # lo..hi, exact where ok), see TrackedGroupedData._range_agg
        self._ranges = frozenset(ranges)
        # no two rows carry the same tuple of scalar slot values (true for inputs; kept by
        # row-preserving steps, joins and unions; lost by explode)
        self._unique = unique
        # scalar slots no row holds null in: input ids dslog numbered or stored (never null),
        # kept by steps that keep rows or add columns, lost by outer joins and unions. Their
        # id counts are count(1), one aggregate buffer for all (see _range_agg)
        self._dense = frozenset(dense)

    # ------------------------------------------------------------------ state

    @property
    def _slots(self) -> list[int]:
        return [slot_id(i) for i in self._infos if isinstance(i, str)]

    def _user_positions(self) -> list[int]:
        return [p for p, i in enumerate(self._infos) if not isinstance(i, str)]

    def _visible_df(self) -> DataFrame:
        names = [slot_name(s) for s in self._slots]
        return self._df.drop(*names) if names else self._df

    def _base(self, df: DataFrame | None = None, infos: Sequence[Info] | None = None) -> Base:
        d = self._df if df is None else df
        return Base(analyzed(d), list(self._infos if infos is None else infos))

    def _new(
        self,
        df: DataFrame,
        infos: Sequence[Info],
        arrays: Iterable[int] | None = None,
        sources: Iterable[int] | None = None,
        ranges: Iterable[int] | None = None,
        unique: bool | None = None,
        dense: Iterable[int] | None = None,
    ) -> "TrackedFrame":
        present = {slot_id(i) for i in infos if isinstance(i, str)}
        # pairs naming slots the frame no longer has (e.g. the right side of an anti join)
        cleaned: list[Info] = [
            i
            if isinstance(i, str)
            else ColumnLineage(
                frozenset(r for r in i.contrib if r[0] in present),
                frozenset(r for r in i.consid if r[0] in present),
            )
            for i in infos
        ]
        arr = self._arrays if arrays is None else frozenset(arrays)
        rng = self._ranges if ranges is None else frozenset(ranges)
        return TrackedFrame(
            self._ctx,
            df,
            cleaned,
            arr & present,
            self._sources if sources is None else sources,
            ranges=rng & present,
            unique=self._unique if unique is None else unique,
            dense=(self._dense if dense is None else frozenset(dense)) & present - arr,
        )

    def _finish(
        self,
        res: DataFrame,
        op: str,
        bases: Sequence[Base] | None = None,
        window_rule: Any = None,
        arrays: Iterable[int] | None = None,
        sources: Iterable[int] | None = None,
        ranges: Iterable[int] | None = None,
        unique: bool | None = None,
        remap: Mapping[int, int] | None = None,
        dense: Iterable[int] | None = None,
    ) -> "TrackedFrame":
        walker = PlanWalker(bases or [self._base()], op, window_rule)
        infos = walker.resolve(analyzed(res))
        if remap:  # slots the step replaced with new ones (see TrackedGroupedData._range_agg)
            infos = [i if isinstance(i, str) else i.remap(remap) for i in infos]
        keeps = self._unique if unique is None else unique
        return self._new(res, infos, arrays, sources, ranges, keeps and not walker.generated, dense)

    def _need_lists(self, *frames: "TrackedFrame") -> None:
        """Signal the capture to rerun with list slots when a step meets a range slot."""
        if any(f._ranges for f in (self, *frames)):
            raise NeedLists

    def _unknown(self, op: str, run: Callable[[DataFrame], Any]) -> Any:
        """An operation without a lineage rule: raise, or run it untracked (flagged)."""
        if self._ctx.on_unknown != "all_to_all":
            msg = (
                f"`DataFrame.{op}` has no lineage rule in dslog's Spark capture, so its lineage "
                "would be a guess. Use the supported operations (README, section Spark), or "
                "capture with `on_unknown='all_to_all'` to record a flagged all-to-all relation."
            )
            raise UnsupportedFrameOperationError(msg)
        self._ctx.flagged_ops.append(op)
        out = run(self._visible_df())
        if isinstance(out, DataFrame):
            return _all_to_all(self._ctx, out, self._sources)
        return out

    # ------------------------------------------------------------------ read-only API

    @property
    def columns(self) -> list[str]:
        # the visible positions of the frame's own columns: no plan for a projection (an
        # analysis in the JVM, as _visible_df would cost)
        return [
            c for c, i in zip(self._df.columns, self._infos, strict=True) if not isinstance(i, str)
        ]

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        return self._visible_df().dtypes

    @property
    def schema(self) -> Any:
        return self._visible_df().schema

    @property
    def sparkSession(self) -> Any:
        return self._df.sparkSession

    def printSchema(self) -> None:
        self._visible_df().printSchema()

    def count(self) -> int:
        return self._df.count()

    def collect(self) -> list[Any]:
        return self._visible_df().collect()

    def take(self, n: int) -> list[Any]:
        return self._visible_df().take(n)

    def head(self, n: int | None = None) -> Any:
        return self._visible_df().head() if n is None else self._visible_df().head(n)

    def first(self) -> Any:
        return self._visible_df().first()

    def isEmpty(self) -> bool:
        return self._df.isEmpty()

    def show(self, *args: Any, **kwargs: Any) -> None:
        self._visible_df().show(*args, **kwargs)

    def toPandas(self) -> Any:
        return self._visible_df().toPandas()

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return self._df[item]
        if isinstance(item, int):
            return self._df[self.columns[item]]
        if isinstance(item, Column):
            return self.filter(item)
        if isinstance(item, list | tuple):
            return self.select(*item)
        msg = f"TrackedFrame indices are column names, positions, conditions or lists: {item!r}"
        raise TypeError(msg)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        df = self.__dict__.get("_df")
        if df is not None and name in self.columns:
            return df[name]
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

    def _project(self, op: str, fn: Callable[[DataFrame, list[str]], DataFrame]) -> Any:
        """Run a projection-like ``fn(frame, slot columns)`` (select, withColumn, ...), with
        window functions; ``None`` when the projection is really a global aggregation."""
        if self._a2a:
            return _all_to_all(self._ctx, fn(self._df, []), self._sources)
        # slot columns by quoted name: select() resolves a name string in one JVM call, where
        # each F.col costs several (round trips add up over a pipeline's plan)
        slot_cols = [_quote(n) for n in self._infos if isinstance(n, str)]
        try:
            first = fn(self._df, slot_cols)
        except AnalysisException:
            # e.g. a global aggregate in select(): the slot columns are not grouped
            visible = self._visible_df()
            probe = fn(visible, [])
            if "Aggregate" in _nodes_above(analyzed(probe), visible):
                return None  # caller turns it into a global aggregation
            raise
        try:
            return self._finish(first, op)
        except WindowWithoutRule:
            pass
        self._need_lists()
        nodes = _nodes_above(analyzed(first), self._df)
        windows: dict[tuple[Any, ...], _WindowKey] = {}
        for node in nodes.get("Window", []):
            for e in seq(node.windowExpressions()):
                k = _window_key(e, op)
                windows.setdefault(k.key, k)
        df = self._df
        infos = list(self._infos)
        arrays = set(self._arrays)
        mapping: dict[tuple[Any, ...], dict[int, int]] = {}
        extra = []
        for key, wk in windows.items():
            m = {}
            for s in self._slots:
                new = self._ctx.new_slot(self._ctx.slot_input[s])
                m[s] = new
                coll = F.collect_list(_col(slot_name(s))).over(wk.window())
                if s in self._arrays:
                    coll = F.flatten(coll)
                extra.append(coll.alias(slot_name(new)))
                infos.append(slot_name(new))
                arrays.add(new)
            mapping[key] = m
        if extra:
            df = df.select("*", *extra)
        res = fn(df, [_quote(n) for n in infos if isinstance(n, str)])
        base = Base(analyzed(df), infos)

        def rule(e: Any, lin_of: Callable[[list[int]], ColumnLineage]) -> ColumnLineage:
            wk = _window_key(e, op)
            return wk.lineage(lin_of).remap(mapping[wk.key])

        return self._finish(res, op, [base], rule, arrays)

    def select(self, *cols: Any) -> "TrackedFrame":
        exprs = self._star(_flatten_args(cols))
        out = self._project("select", lambda d, slots: d.select(*exprs, *slots))
        if out is None:
            return self.groupBy().agg(*exprs)
        return out  # type: ignore[no-any-return]

    def selectExpr(self, *exprs: str) -> "TrackedFrame":
        cols = [e if e == "*" else F.expr(e) for e in _flatten_args(exprs) if isinstance(e, str)]
        return self.select(*cols)

    def withColumn(self, name: str, col: Column) -> "TrackedFrame":
        out = self._project("withColumn", lambda d, _: d.withColumn(name, col))
        if out is None:
            out = self._unknown("withColumn(aggregate)", lambda d: d.withColumn(name, col))
        return out  # type: ignore[no-any-return]

    def withColumns(self, *maps: Mapping[str, Column]) -> "TrackedFrame":
        merged: dict[str, Column] = {}
        for m in maps:
            merged.update(m)
        out = self._project("withColumns", lambda d, _: d.withColumns(merged))
        if out is None:
            out = self._unknown("withColumns(aggregate)", lambda d: d.withColumns(merged))
        return out  # type: ignore[no-any-return]

    def _simple(self, op: str, fn: Callable[[DataFrame], DataFrame]) -> "TrackedFrame":
        if self._a2a:
            return _all_to_all(self._ctx, fn(self._df), self._sources)
        return self._finish(fn(self._df), op)

    def withColumnRenamed(self, existing: str, new: str) -> "TrackedFrame":
        return self._simple("withColumnRenamed", lambda d: d.withColumnRenamed(existing, new))

    def withColumnsRenamed(self, mapping: Mapping[str, str]) -> "TrackedFrame":
        return self._simple("withColumnsRenamed", lambda d: d.withColumnsRenamed(dict(mapping)))

    def toDF(self, *names: str) -> "TrackedFrame":
        it = iter(names)
        if len(names) != len(self.columns):
            msg = f"toDF got {len(names)} names for {len(self.columns)} columns."
            raise ValueError(msg)
        full = [i if isinstance(i, str) else next(it) for i in self._infos]
        return self._simple("toDF", lambda d: d.toDF(*full) if not self._a2a else d.toDF(*names))

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
        return self._simple("orderBy", lambda d: d.orderBy(*cols, **kwargs))

    sort = orderBy

    def sortWithinPartitions(self, *cols: Any, **kwargs: Any) -> "TrackedFrame":
        return self._simple(
            "sortWithinPartitions", lambda d: d.sortWithinPartitions(*cols, **kwargs)
        )

    def limit(self, num: int) -> "TrackedFrame":
        return self._simple("limit", lambda d: d.limit(num))

    def repartition(self, *args: Any, **kwargs: Any) -> "TrackedFrame":
        return self._simple("repartition", lambda d: d.repartition(*args, **kwargs))

    def coalesce(self, n: int) -> "TrackedFrame":
        return self._simple("coalesce", lambda d: d.coalesce(n))

    def cache(self) -> "TrackedFrame":
        self._df = self._df.cache()
        return self

    def persist(self, *args: Any) -> "TrackedFrame":
        self._df = self._df.persist(*args)
        return self

    def transform(self, func: Callable[..., "TrackedFrame"], *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    # ------------------------------------------------------------------ missing values

    def fillna(self, value: Any, subset: Any = None) -> "TrackedFrame":
        if isinstance(value, dict):
            return self._simple("fillna", lambda d: d.fillna(value))
        sub = [subset] if isinstance(subset, str) else subset
        sub = list(sub) if sub is not None else self.columns
        return self._simple("fillna", lambda d: d.fillna(value, sub))

    def dropna(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> Any:
        sub = [subset] if isinstance(subset, str) else subset
        sub = list(sub) if sub is not None else self.columns
        return self._simple("dropna", lambda d: d.dropna(how, thresh, sub))

    def replace(self, to_replace: Any, value: Any = None, subset: Any = None) -> Any:
        sub = [subset] if isinstance(subset, str) else subset
        sub = list(sub) if sub is not None else self.columns
        if isinstance(to_replace, dict):
            return self._simple("replace", lambda d: d.replace(to_replace, subset=sub))
        return self._simple("replace", lambda d: d.replace(to_replace, value, sub))

    @property
    def na(self) -> "_NaFunctions":
        return _NaFunctions(self)

    # ------------------------------------------------------------------ duplicates

    def distinct(self) -> "TrackedFrame":
        return self.dropDuplicates()

    def dropDuplicates(self, subset: Sequence[str] | None = None) -> "TrackedFrame":
        if self._a2a:
            sub_list = list(subset) if subset is not None else None
            return _all_to_all(self._ctx, self._df.dropDuplicates(sub_list), self._sources)
        self._need_lists()
        names = self.columns
        sub = list(subset) if subset else names
        missing = [s for s in sub if s not in names]
        if missing:
            msg = f"dropDuplicates: no columns {missing} in {names}."
            raise ValueError(msg)
        pos = self._user_positions()
        tmp = [f"{_TMP}{p}" for p in range(len(self._infos))]
        d = self._df.toDF(*tmp)
        key_pos = [pos[names.index(s)] for s in dict.fromkeys(sub)]
        other_pos = [p for p in pos if p not in key_pos]
        slots = self._slots
        picked: dict[int, int] = {}
        aggs = []
        if other_pos:
            for s in slots:
                picked[s] = self._ctx.new_slot(self._ctx.slot_input[s])
            p_slots = [_col(tmp[self._infos.index(slot_name(s))]) for s in slots]
            row = F.struct(
                *[_col(tmp[p]).alias(tmp[p]) for p in other_pos],
                *[c.alias(slot_name(picked[s])) for c, s in zip(p_slots, slots, strict=True)],
            )
            aggs.append(F.first(row).alias("__dslog_first"))
        for s in slots:
            c = F.collect_list(_col(tmp[self._infos.index(slot_name(s))]))
            aggs.append((F.flatten(c) if s in self._arrays else c).alias(slot_name(s)))
        g = d.groupBy(*[_col(tmp[p]) for p in key_pos]).agg(*aggs)
        out_cols = []
        infos: list[Info] = []
        keys_lin = union_all(self._infos[p] for p in key_pos).full()  # type: ignore[misc]
        for p in pos:
            lin = self._infos[p]
            assert isinstance(lin, ColumnLineage)
            if p in key_pos:
                out_cols.append(_col(tmp[p]).alias(names[pos.index(p)]))
                infos.append(ColumnLineage(lin.contrib, lin.consid | keys_lin))
            else:
                out_cols.append(F.col(f"__dslog_first.{tmp[p]}").alias(names[pos.index(p)]))
                moved = lin.remap(picked)
                infos.append(ColumnLineage(moved.contrib, moved.consid | keys_lin))
        for s in slots:
            out_cols.append(_col(slot_name(s)))
            infos.append(slot_name(s))
        for s in slots if other_pos else []:
            out_cols.append(
                F.col(f"__dslog_first.{slot_name(picked[s])}").alias(slot_name(picked[s]))
            )
            infos.append(slot_name(picked[s]))
        arrays = set(slots) | {picked[s] for s in slots if s in self._arrays and other_pos}
        return self._new(g.select(*out_cols), infos, arrays)

    drop_duplicates = dropDuplicates

    # ------------------------------------------------------------------ joins

    def _fresh(self, other: "TrackedFrame") -> "TrackedFrame":
        """``other`` with new slot ids where it shares slots with ``self`` (self-joins)."""
        shared = set(self._slots) & set(other._slots)
        if not shared:
            return other
        ren = {s: self._ctx.new_slot(self._ctx.slot_input[s]) for s in shared}
        df = other._df.withColumnsRenamed({slot_name(s): slot_name(n) for s, n in ren.items()})
        infos = [
            slot_name(ren.get(slot_id(i), slot_id(i)))
            if isinstance(i, str)
            else i.remap({s: ren.get(s, s) for s in other._slots})
            for i in other._infos
        ]
        arrays = {ren.get(s, s) for s in other._arrays}
        ranges = {ren.get(s, s) for s in other._ranges}
        for s, n in ren.items():
            if s in self._ctx.range_src:
                self._ctx.range_src[n] = self._ctx.range_src[s]
            if s in self._ctx.range_fields:
                self._ctx.range_fields[n] = self._ctx.range_fields[s].remap(ren)
        dense = {ren.get(s, s) for s in other._dense}
        return TrackedFrame(
            self._ctx,
            df,
            infos,
            arrays,
            other._sources,
            ranges=ranges,
            unique=other._unique,
            dense=dense,
        )

    def join(self, other: "TrackedFrame", on: Any = None, how: str | None = None) -> Any:
        if not isinstance(other, TrackedFrame):
            msg = (
                "A tracked frame can only be joined with another tracked frame (an input of "
                f"the capture or a frame derived from one), not `{type(other).__name__}`."
            )
            raise UnsupportedFrameOperationError(msg)
        how_n = (how or "inner").lower().replace("_", "")
        sources = self._sources | other._sources
        if self._a2a or other._a2a:
            return _all_to_all(
                self._ctx, self._visible_df().join(other._visible_df(), on, how), sources
            )
        other = self._fresh(other)
        bases = [self._base(), other._base()]
        arrays = self._arrays | other._arrays
        ranges = self._ranges | other._ranges
        unique = self._unique and other._unique
        if how_n in ("semi", "leftsemi"):
            self._need_lists(other)
            left = self._df.withColumn(_UID, F.monotonically_increasing_id())
            aggs = []
            for s in other._slots:
                c = F.collect_list(_col(slot_name(s)))
                aggs.append((F.flatten(c) if s in other._arrays else c).alias(slot_name(s)))
            matches = left.join(other._df, on, "inner").groupBy(_UID).agg(*aggs)
            res = left.join(matches, _UID, "inner").drop(_UID)
            lbase = Base(analyzed(left), [*self._infos, ColumnLineage()])
            return self._finish(
                res, "join(semi)", [lbase, other._base()], None, arrays | set(other._slots), sources
            )
        res = self._df.join(other._df, on, how) if how is not None else self._df.join(other._df, on)
        # an outer join's optional side holds null slots on the rows it did not match
        keep_left = how_n not in ("right", "rightouter", "full", "outer", "fullouter")
        keep_right = how_n not in ("left", "leftouter", "full", "outer", "fullouter")
        dense = (self._dense if keep_left else frozenset()) | (
            other._dense if keep_right else frozenset()
        )
        return self._finish(
            res, f"join({how_n})", bases, None, arrays, sources, ranges, unique, dense=dense
        )

    def crossJoin(self, other: "TrackedFrame") -> Any:
        return self.join(other, how="cross")

    # ------------------------------------------------------------------ unions

    def union(self, other: "TrackedFrame") -> "TrackedFrame":
        if not isinstance(other, TrackedFrame):
            msg = f"union needs a tracked frame, not `{type(other).__name__}`."
            raise UnsupportedFrameOperationError(msg)
        sources = self._sources | other._sources
        if self._a2a or other._a2a:
            return _all_to_all(self._ctx, self._visible_df().union(other._visible_df()), sources)
        other = self._fresh(other)
        a_pos, b_pos = self._user_positions(), other._user_positions()
        if len(a_pos) != len(b_pos):
            msg = f"union of frames with {len(a_pos)} and {len(b_pos)} columns."
            raise ValueError(msg)
        a_slots, b_slots = self._slots, other._slots
        types = {**_slot_types(self), **_slot_types(other)}
        ranges = self._ranges | other._ranges
        unique = self._unique and other._unique

        def side(t: "TrackedFrame", pos: list[int], own: list[int]) -> DataFrame:
            tmp = [f"{_TMP}{p}" for p in range(len(t._infos))]
            d = t._df.toDF(*tmp)
            cols = [_col(tmp[p]).alias(f"{_TMP}u{i}") for i, p in enumerate(pos)]
            for s in [*a_slots, *b_slots]:
                if s in own:
                    cols.append(_col(tmp[t._infos.index(slot_name(s))]).alias(slot_name(s)))
                else:
                    cols.append(F.lit(None).cast(types[s]).alias(slot_name(s)))
            return d.select(*cols)

        res = side(self, a_pos, a_slots).union(side(other, b_pos, b_slots))
        names = self.columns
        res = res.toDF(*names, *[slot_name(s) for s in [*a_slots, *b_slots]])
        infos: list[Info] = [
            self._infos[p] | other._infos[q]  # type: ignore[operator]
            for p, q in zip(a_pos, b_pos, strict=True)
        ]
        infos += [slot_name(s) for s in [*a_slots, *b_slots]]
        # each side's slots are null on the other side's rows
        return self._new(
            res, infos, self._arrays | other._arrays, sources, ranges, unique, dense=()
        )

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


def _slot_types(t: TrackedFrame) -> dict[int, str]:
    # a range aggregation's slots hold bigints, booleans and its group keys
    types = dict(t._df.dtypes) if t._ranges else {}
    return {
        s: types[slot_name(s)] if types else ("array<bigint>" if s in t._arrays else "bigint")
        for s in t._slots
    }


def _all_to_all(ctx: CaptureContext, df: DataFrame, sources: Iterable[int]) -> TrackedFrame:
    """A frame whose every cell depends on every cell of every source (flagged)."""
    names = df.columns
    return TrackedFrame(ctx, df, [ColumnLineage() for _ in names], (), sources, all_to_all=True)


def _plain_name(key: Any, known: Mapping[str, str]) -> bool:
    """Whether a group key is a column name that resolves to exactly that column of a frame
    with columns ``known`` (name → type): no dots or backticks (struct fields, quoting), and
    no other column equal to it ignoring case (Spark resolves names case-insensitively)."""
    if not isinstance(key, str) or key not in known or "." in key or "`" in key:
        return False
    low = key.lower()
    return sum(1 for n in known if n.lower() == low) == 1


def _nodes_above(plan: Any, base_df: DataFrame) -> dict[str, list[Any]]:
    """Plan nodes between ``plan`` and the plan of ``base_df``, by node name."""
    base = analyzed(base_df)
    for semantic in (False, True):  # cheap object equality first, canonical plans if needed
        out: dict[str, list[Any]] = {}
        met = False
        stack = [plan]
        while stack:
            node = stack.pop()
            if node.equals(base) or (semantic and node.sameResult(base)):
                met = True
                continue
            out.setdefault(node.nodeName(), []).append(node)
            stack += seq(node.children())
        if met:
            return out
    return out


# ---------------------------------------------------------------------- windows


_RANKING = {"RowNumber", "Rank", "DenseRank"}
_WHOLE_PARTITION = {"PercentRank", "CumeDist", "NTile"}
_OFFSET = {"Lag", "Lead", "NthValue"}


@dataclass(frozen=True)
class _WindowKey:
    """A window frame as the capture rebuilds it: the slots of the rows in the frame."""

    key: tuple[Any, ...]
    fn: Any
    spec: Any
    kind: str

    def window(self) -> Any:
        parts, orders, ftype, lo, hi = self.key
        w = Window.partitionBy(*[F.expr(p) for p in parts]) if parts else Window.partitionBy()
        if orders:
            cols = []
            for sql, asc, nulls_first in orders:
                c = F.expr(sql)
                if asc:
                    c = c.asc_nulls_first() if nulls_first else c.asc_nulls_last()
                else:
                    c = c.desc_nulls_first() if nulls_first else c.desc_nulls_last()
                cols.append(c)
            w = w.orderBy(*cols)
        if ftype is None:
            return w
        return w.rowsBetween(lo, hi) if ftype == "ROWS" else w.rangeBetween(lo, hi)

    def lineage(self, lin_of: Callable[[list[int]], ColumnLineage]) -> ColumnLineage:
        spec_lin = lin_of(refs_of(self.spec)).full()
        if self.kind in _RANKING or self.kind in _WHOLE_PARTITION:
            orders = [r for o in seq(self.spec.orderSpec()) for r in refs_of(o)]
            return ColumnLineage(lin_of(orders).full(), spec_lin)
        lin = lin_of(refs_of(self.fn))
        if not lin.contrib:
            return ColumnLineage(spec_lin, spec_lin)
        return lin.considering(spec_lin)


def _ignores_nulls(fn: Any) -> bool:
    try:
        return bool(fn.ignoreNulls())
    except Exception:  # py4j raises a plain Py4JError when the method does not exist
        return False


def _bound(expr: Any, op: str) -> int:
    sql = str(expr.sql()).upper()
    if sql == "UNBOUNDED PRECEDING":
        return Window.unboundedPreceding
    if sql == "UNBOUNDED FOLLOWING":
        return Window.unboundedFollowing
    if sql == "CURRENT ROW":
        return Window.currentRow
    try:
        return int(sql)
    except ValueError:
        msg = f"`{op}`: window frame bound `{sql}` is not an integer offset; not supported."
        raise UnsupportedFrameOperationError(msg) from None


def _window_key(alias: Any, op: str) -> _WindowKey:
    wexpr = alias.child()
    if wexpr.nodeName() != "WindowExpression":
        msg = f"`{op}`: unexpected window expression `{alias.sql()}`."
        raise UnsupportedFrameOperationError(msg)
    fn = wexpr.windowFunction()
    kind = str(fn.getClass().getSimpleName())
    if kind not in _RANKING | _WHOLE_PARTITION | _OFFSET and kind != "AggregateExpression":
        msg = (
            f"`{op}`: window function `{fn.sql()}` ({kind}) has no lineage rule in dslog's "
            "Spark capture."
        )
        raise UnsupportedFrameOperationError(msg)
    if kind in _OFFSET and _ignores_nulls(fn):
        msg = f"`{op}`: `{fn.sql()}` with ignoreNulls is not supported by the capture."
        raise UnsupportedFrameOperationError(msg)
    spec = wexpr.windowSpec()
    parts = tuple(str(p.sql()) for p in seq(spec.partitionSpec()))
    orders = tuple(
        (
            str(o.child().sql()),
            str(o.direction().sql()).upper() == "ASC",
            "FIRST" in str(o.nullOrdering().sql()).upper(),
        )
        for o in seq(spec.orderSpec())
    )
    frame = spec.frameSpecification()
    if kind in _WHOLE_PARTITION:
        key: tuple[Any, ...] = (
            parts,
            orders,
            "ROWS",
            Window.unboundedPreceding,
            Window.unboundedFollowing,
        )
    elif frame.nodeName() == "SpecifiedWindowFrame":
        ftype = "ROWS" if "Row" in str(frame.frameType().toString()) else "RANGE"
        key = (parts, orders, ftype, _bound(frame.lower(), op), _bound(frame.upper(), op))
    else:
        key = (parts, orders, None, None, None)
    return _WindowKey(key, fn, spec, kind)


# ---------------------------------------------------------------------- grouped data


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
    """``frame.groupBy(...)``: aggregations that collect the provenance slots of each group."""

    def __init__(self, frame: TrackedFrame, keys: list[Any], pivot: Any = None) -> None:
        self._f = frame
        self._keys = keys
        self._pivot = pivot

    def _exprs(self, exprs: Sequence[Any]) -> list[Column]:
        if len(exprs) == 1 and isinstance(exprs[0], dict):
            return [F.expr(f"{fn}({_quote(c) if c != '*' else '*'})") for c, fn in exprs[0].items()]
        return list(exprs)

    def agg(self, *exprs: Any) -> TrackedFrame:
        cols = self._exprs(exprs)
        f = self._f
        if f._a2a:
            g = f._df.groupBy(*self._keys)
            if self._pivot is not None:
                g = g.pivot(*self._pivot)
            return _all_to_all(f._ctx, g.agg(*cols), f._sources)
        if self._pivot is not None:
            f._need_lists()
            return self._pivot_agg(cols)
        f._need_lists()
        if f._ctx.aggregate == "ranges" and f._unique and f._slots and not f._arrays:
            return self._range_agg(cols)
        slot_aggs = []
        for s in f._slots:
            c = F.collect_list(_col(slot_name(s)))
            slot_aggs.append((F.flatten(c) if s in f._arrays else c).alias(slot_name(s)))
        res = f._df.groupBy(*self._keys).agg(*cols, *slot_aggs)
        return f._finish(res, "groupBy.agg", arrays=set(f._slots))

    def _range_agg(self, cols: list[Column]) -> TrackedFrame:
        """The aggregation with each slot summarised as a range: ``lo`` (in the slot's own
        column), ``hi``, ``ok`` and ``n`` (in columns of slots of their own, see
        :class:`RangeFields`).

        ``min``/``max``/``count`` are ordinary hash aggregates, where ``collect_list`` forces
        Spark's object aggregation and moves every id through the shuffle (about 1.7× the
        time of the plain step at 10^6 rows). The summary is exact — the group's ids of slot
        ``s`` are exactly ``lo..hi`` — when ``ok`` holds:

        * the slot has no id in the group (``lo`` is null: no ids), or ``lo == hi`` (one id,
          however often), or
        * ``count(s) == hi - lo + 1`` and the ids of ``s`` in the group are distinct. The rows
          of the frame carry distinct tuples of slot values (``_unique``), so they are when
          every other slot holds one value on every row of the group (or none on all).

        The fields are flat bigint/boolean columns, not one struct per slot: rows with nested
        structs cost the shuffle, the sort and the Parquet writer after the aggregation about
        0.05 s more at 10^6 input rows (a tenth of the plain pipeline). Being slots, the
        columns travel with the rows through every later step and stay hidden from user code.
        Where the id tap runs (``ctx.record_summaries``), there is no range at all: the tap
        records every id of the group, the aggregation only counts them (no ``min``/``max``
        buffers through the partial aggregation's shuffle) and the slot's column is a
        constant (``lo`` = 0, null without ids) computed through the JVM's summary recorder,
        which records the group's count by its key where the aggregation finishes the group,
        with ``ok`` false, so every group's ids come from the tap
        (:mod:`~dslog_dagster.spark.summaries`; ``RangeFields.summary``).

        The aggregation also outputs its group keys once (slots ``keys``) and ``n`` is the
        group's id count; the context remembers the aggregation's input
        (:class:`RangeSource`): where ``ok`` fails for some groups (keys not clustered by row
        id), the capture finds those groups' ids again. With the id tap in the session, the
        slot's ids pass through :func:`~dslog_dagster.spark.idtap.tap_column` under the
        aggregation, which records ``(key, id)`` as the map side streams the rows — the one
        integral key, or the keys' hash (:func:`~dslog_dagster.spark.idtap.tap_key`; the
        aggregation then outputs the groups' hashes too, slot ``hash``) — and the capture
        matches them with the failed groups (:func:`~dslog_dagster.spark.idtap.tapped_ids`);
        otherwise (keys that may hash apart, or tapped rows that do not add up to ``n``) it
        joins the input's ``(keys, id)`` with the failed rows' keys, in one more job that
        moves ids, not the pipeline (:func:`~dslog_dagster.spark.lineage.refetch_ids`). Keys
        Parquet cannot hold (``void``, intervals) are not output; a failed check there makes
        the capture rerun with lists (``aggregate="lists"``). The result is exact either way.
        """
        f = self._f
        ctx = f._ctx
        slots = f._slots
        # one aggregation (Spark evaluates each distinct aggregate once; the checks are
        # expressions over them), so the plan costs no extra projection. The expressions are
        # SQL text: one call into the JVM each, where building them from Column objects costs
        # one per operator
        lo = {s: f"min(`{slot_name(s)}`)" for s in slots}
        hi = {s: f"max(`{slot_name(s)}`)" for s in slots}
        # keys that are plain column names (``names``) go into the SQL text too (one JVM call
        # each); other key expressions are Columns
        keys, key_types, names = self._key_columns()
        df = f._df
        tapping = keys is not None and ctx.tap_root is not None and bool(slots)
        tapped = tap_key(keys, key_types) if tapping and names is None and keys else None
        tapped_sql = tap_key_sql(names, key_types) if tapping and names is not None else None
        hashed = (tapped is not None and tapped[1]) or (tapped_sql is not None and tapped_sql[1])
        # with the tap, every id of a group is recorded as the map side streams it and the
        # aggregation only counts them (see ``record`` below)
        record = ctx.record_summaries and (tapped is not None or tapped_sql is not None)
        # a slot without nulls counts its ids as count(1): one buffer for all of them (and
        # the user's count(*)), and it is constant on a group when lo = hi. Tapped, the count
        # must name the slots' columns, which the tap computes: a column no aggregate reads
        # is pruned with its tap. greatest() evaluates all of them (never null: no slot is)
        dense = [f"`{slot_name(s)}`" for s in slots if s in f._dense]
        one = "count(1)"
        if record and dense:
            one = f"count(greatest({', '.join(dense)}))" if len(dense) > 1 else f"count({dense[0]})"
        n = {s: one if s in f._dense else f"count(`{slot_name(s)}`)" for s in slots}
        # (ranges only) whether slot s holds one value on every row of the group
        constant = {
            s: f"({lo[s]} = {hi[s]})"
            if s in f._dense
            else f"({n[s]} = 0 OR ({lo[s]} = {hi[s]} AND {n[s]} = count(1)))"
            for s in slots
            if not record
        }
        aggs: list[Column] = []
        key_slots: tuple[int, ...] = ()
        hash_slot: int | None = None
        if keys is not None and slots:
            owner = ctx.slot_input[slots[0]]
            key_slots = tuple(ctx.new_slot(owner) for _ in keys)
            for i, k in enumerate(keys):
                expr = F.expr(_quote(names[i])) if names is not None else k
                aggs.append(expr.alias(slot_name(key_slots[i])))
            if hashed:
                hash_slot = ctx.new_slot(owner)
                h = F.expr(tapped_sql[0]) if tapped_sql is not None else tapped[0]  # type: ignore[index]
                aggs.append(h.alias(slot_name(hash_slot)))
        taps: dict[str, Column] = {}
        # each range is a new slot: the context keeps a range slot's fields and input by its
        # id, and two aggregations of one input (unioned, joined) must not share them
        new = {s: ctx.new_slot(ctx.slot_input[s]) for s in slots}
        for s in slots:
            if record:
                # the tap records every id of the group, so the aggregation only counts them
                # (which the tapped rows must add up to): no min/max buffers, which the
                # partial aggregation would shuffle for every group. lo is 0 (null: no ids)
                # and ok false, so every group's ids come from the tap
                token, summary = ctx.new_tap_dir("s")
                fields = RangeFields(None, None, None, key_slots, hash_slot, summary)
                tap_lo = f"IF({n[s]} = 0, NULL, 0L)"
                if tapped_sql is not None:
                    rec = F.expr(summary_sql(token, tapped_sql[0], tap_lo, "0L", "false", n[s]))
                else:
                    assert tapped is not None
                    rec = summary_column(token, tapped[0], tap_lo, "0L", "false", n[s])
                aggs.append(rec.alias(slot_name(new[s])))
            else:
                span = " AND ".join(
                    [f"{n[s]} = {hi[s]} - {lo[s]} + 1"] + [constant[t] for t in slots if t != s]
                )
                ok = f"({n[s]} = 0 OR {lo[s]} = {hi[s]} OR ({span}))"
                own = ctx.slot_input[s]
                fields = RangeFields(
                    ctx.new_slot(own), ctx.new_slot(own), ctx.new_slot(own), key_slots, hash_slot
                )
                assert fields.hi is not None
                assert fields.ok is not None
                assert fields.n is not None
                # n: the group's ids with repeats, which the id tap's rows must add up to
                aggs += [
                    F.expr(lo[s]).alias(slot_name(new[s])),
                    F.expr(hi[s]).alias(slot_name(fields.hi)),
                    F.expr(ok).alias(slot_name(fields.ok)),
                    F.expr(n[s]).alias(slot_name(fields.n)),
                ]
            ctx.range_fields[new[s]] = fields
            if keys is not None:
                tap = None
                if tapped is not None or tapped_sql is not None:
                    token, tap = ctx.new_tap_dir("t")
                    if tapped_sql is not None:
                        sql = tap_sql(token, tapped_sql[0], _quote(slot_name(s)))
                        taps[slot_name(s)] = F.expr(sql)
                    else:
                        assert tapped is not None
                        taps[slot_name(s)] = tap_column(token, tapped[0], _col(slot_name(s)))
                ctx.range_src[new[s]] = RangeSource(f._df, tuple(keys), slot_name(s), tap, hashed)
        if taps:  # one projection (one analysis) for all of them
            df = df.withColumns(taps)
        res = df.groupBy(*self._keys).agg(*cols, *aggs)
        return f._finish(
            res,
            "groupBy.agg",
            arrays=(),
            ranges=set(new.values()),
            remap=new,
            dense={new[s] for s in slots if s in f._dense},
        )

    def _key_columns(self) -> tuple[list[Column] | None, list[str], list[str] | None]:
        """The group keys as columns (a constant for a global aggregation), their types and,
        when they are all plain column names, those names; the columns are None when the
        groups cannot be found again by their keys: some key's type cannot be stored in the
        staged Parquet files (``void``, intervals), or the keys or the frame they group are
        not deterministic (``rand``, ``sample``: computing them again gives other rows)."""
        keys = [k if isinstance(k, Column) else F.col(k) for k in self._keys] or [F.lit(0)]
        df = self._f._df
        known = dict(df.dtypes)
        names: list[str] | None = None
        if self._keys and all(_plain_name(k, known) for k in self._keys):
            # columns by name (the usual groupBy("key")): their types are the frame's and
            # they are as deterministic as the frame, so no probe plan is analysed
            names = [cast(str, k) for k in self._keys]
            types = [known[k] for k in names]
            plan = analyzed(df)
        else:
            probe = df.select(*[k.alias(f"k{i}") for i, k in enumerate(keys)])
            types = [t for _, t in probe.dtypes]
            plan = analyzed(probe)
        if any("void" in t or "interval" in t for t in types):
            return None, types, None
        if not plan.deterministic():
            return None, types, None
        return keys, types, names

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

    def _pivot_agg(self, cols: list[Column]) -> TrackedFrame:
        """Pivot: the user's result from Spark's own pivot; per pivot value a slot of the rows
        with that value (for the pivoted cells) and a slot of the whole group (for the keys),
        joined back on the group keys."""
        f = self._f
        p, values = self._pivot
        if values is None:
            vis = f._visible_df()
            values = [r[0] for r in vis.select(p).distinct().orderBy(p).collect()]
        values = list(values)
        user = f._df.groupBy(*self._keys).pivot(p, values).agg(*cols)
        nk = len(user.columns) - len(values) * len(cols)
        # column lineage of each aggregate, from the un-pivoted aggregation's plan
        plain = f._df.groupBy(*self._keys).agg(*cols)
        plan_infos = PlanWalker([f._base()], "pivot").resolve(analyzed(plain))
        key_infos, agg_infos = plan_infos[:nk], plan_infos[nk:]
        p_lin = PlanWalker([f._base()], "pivot").resolve(analyzed(f._df.select(p)))[0]
        assert isinstance(p_lin, ColumnLineage)
        by_value: list[dict[int, int]] = []
        slot_aggs = []
        for i, v in enumerate(values):
            m = {}
            for s in f._slots:
                new = f._ctx.new_slot(f._ctx.slot_input[s])
                m[s] = new
                cond = (
                    F.col(p).eqNullSafe(F.lit(v))
                    if not isinstance(p, Column)
                    else p.eqNullSafe(F.lit(v))
                )
                c = F.collect_list(F.when(cond, _col(slot_name(s))))
                slot_aggs.append((F.flatten(c) if s in f._arrays else c).alias(slot_name(new)))
            by_value.append(m)
            del i
        for s in f._slots:
            c = F.collect_list(_col(slot_name(s)))
            slot_aggs.append((F.flatten(c) if s in f._arrays else c).alias(slot_name(s)))
        slots_df = f._df.groupBy(*self._keys).agg(*slot_aggs)
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
        for ki in key_infos:
            assert isinstance(ki, ColumnLineage)
            infos.append(ki)
        for m in by_value:
            for ai in agg_infos:
                assert isinstance(ai, ColumnLineage)
                infos.append(ai.considering(p_lin.full()).remap({**m}))
        infos += slot_cols
        arrays = set(f._slots) | {n for m in by_value for n in m.values()}
        return f._new(res, infos, arrays)
