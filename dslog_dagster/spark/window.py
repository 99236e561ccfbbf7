"""The lineage rule of window functions: one list slot per window frame.

A projection with window functions (``row_number().over(w)``, ``sum(x).over(w)``...) is run
by :meth:`~dslog_dagster.spark.frame.TrackedFrame.select` and friends like any projection; when
its plan has ``Window`` nodes, :func:`windowed` runs it again on the frame with, per distinct
window frame, a new slot per slot: ``collect_list`` of the slot over that same frame. The
window's output column then depends on the rows its frame holds (offsets: the value they
read; ranking functions: nothing, they are made by the order), and considers the partition
and order cells of its frame's rows and of the current row.
Keys that are expressions (``partitionBy(F.upper("g"))``) appear in the analyzed plan as
aliases the analyzer made (``_w0``); the frame is rebuilt from the expressions they stand for
(:func:`~dslog_dagster.spark.plan.window_key_defs`).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.spark.plan import (
    Base,
    ColumnLineage,
    analyzed,
    nodes_above,
    quoted,
    refs_of,
    seq,
    slot_name,
    window_key_defs,
)
from dslog_dagster.spark.state import FrameState

__all__ = ["WindowFrame", "window_frame", "windowed"]


_RANKING = {"RowNumber", "Rank", "DenseRank"}
_WHOLE_PARTITION = {"PercentRank", "CumeDist", "NTile"}
_OFFSET = {"Lag", "Lead", "NthValue"}


@dataclass(frozen=True)
class WindowFrame:
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
            # a rank is made by the order of the rows, not from any cell's value: only
            # considered lineage (the partition and order cells of the frame's rows)
            return ColumnLineage(frozenset(), spec_lin)
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


def _key_sql(expr: Any, defs: Mapping[int, str]) -> str:
    """SQL of a window key: the expression an analyzer alias (``_w0``) stands for, else the
    key's own SQL."""
    if defs and expr.nodeName() == "AttributeReference":
        found = defs.get(int(expr.exprId().id()))
        if found is not None:
            return found
    return str(expr.sql())


def window_frame(alias: Any, op: str, defs: Mapping[int, str] | None = None) -> WindowFrame:
    """The window frame of window expression ``alias``, its keys as SQL over the frame's own
    columns (``defs``: :func:`~dslog_dagster.spark.plan.window_key_defs` of its plan, for
    keys that are expressions)."""
    defs = defs or {}
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
    parts = tuple(_key_sql(p, defs) for p in seq(spec.partitionSpec()))
    orders = tuple(
        (
            _key_sql(o.child(), defs),
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
    return WindowFrame(key, fn, spec, kind)


def windowed(
    state: FrameState,
    op: str,
    fn: Callable[[DataFrame, list[str]], DataFrame],
    first: DataFrame,
) -> FrameState:
    """The projection ``fn(frame, slot columns)`` with window functions, whose plain run
    ``first`` has ``Window`` nodes: run again with a list slot per window frame and slot.

    Raises:
        NeedLists: the frame has range slots (a window over an aggregation).
        UnsupportedFrameOperationError: a window function or frame without a rule.
    """
    state.need_lists()
    ctx = state.context
    nodes = nodes_above(analyzed(first), state.df)
    defs = window_key_defs(nodes)
    windows: dict[tuple[Any, ...], WindowFrame] = {}
    for node in nodes.get("Window", []):
        for e in seq(node.windowExpressions()):
            k = window_frame(e, op, defs)
            windows.setdefault(k.key, k)
    df = state.df
    infos = list(state.infos)
    arrays = set(state.arrays)
    mapping: dict[tuple[Any, ...], dict[int, int]] = {}
    extra = []
    for key, wk in windows.items():
        m = {}
        for s in state.slots:
            new = ctx.new_slot(ctx.slot_input[s])
            m[s] = new
            coll = F.collect_list(F.col(quoted(slot_name(s)))).over(wk.window())
            if s in state.arrays:
                coll = F.flatten(coll)
            extra.append(coll.alias(slot_name(new)))
            infos.append(slot_name(new))
            arrays.add(new)
        mapping[key] = m
    if extra:
        df = df.select("*", *extra)
    res = fn(df, [quoted(n) for n in infos if isinstance(n, str)])
    base = Base(analyzed(df), infos)
    # the run with slots has its own analyzer aliases for expression keys (new ids)
    res_defs = window_key_defs(nodes_above(analyzed(res), df)) if defs else {}

    def rule(e: Any, lin_of: Callable[[list[int]], ColumnLineage]) -> ColumnLineage:
        wk = window_frame(e, op, res_defs)
        # the current row's partition and order cells decided which rows are its frame
        # (a lag's first row of a partition reads no row, yet considers its own keys)
        here = lin_of(refs_of(wk.spec)).full()
        return wk.lineage(lin_of).remap(mapping[wk.key]).considering(here)

    return state.finish(res, op, [base], rule, arrays)
