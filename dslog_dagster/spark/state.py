"""The lineage state of a tracked frame, as one frozen record the rules map and the capture reads.

A :class:`~dslog_dagster.spark.frame.TrackedFrame` is a DataFrame facade over one
:class:`FrameState`: the DataFrame with its hidden slot columns, what each column is (a slot, or
a user column with its :class:`~dslog_dagster.spark.plan.ColumnLineage`) and what the slots hold
(ids, lists of ids, range summaries). The lineage rules of the operator families
(:mod:`~dslog_dagster.spark.window`, :mod:`~dslog_dagster.spark.combine`,
:mod:`~dslog_dagster.spark.duplicates`, :mod:`~dslog_dagster.spark.aggregate`,
:mod:`~dslog_dagster.spark.ranges`) take states and return new ones through
:meth:`FrameState.finish` (column lineage from the result's analyzed plan) or
:meth:`FrameState.derive` (column lineage the rule worked out itself); the capture
(:mod:`~dslog_dagster.spark.capture`) reads the state of the frame user code returned.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame

from dslog_dagster.spark.context import CaptureContext, NeedLists
from dslog_dagster.spark.plan import (
    Base,
    ColumnLineage,
    Info,
    PlanWalker,
    WindowRule,
    analyzed,
    slot_id,
    slot_name,
)

__all__ = ["FrameState"]


@dataclass(frozen=True, eq=False)
class FrameState:
    """What a tracked frame is to the capture.

    Attributes:
        context: the capture's shared state (slot ids, options, range slots' fields).
        df: the DataFrame with the user's columns and the slot columns, in one order.
        infos: per column of ``df``: a slot column's name, or a user column's lineage.
        arrays: slots holding ``array<bigint>`` (after aggregations, windows, pivots).
        sources: the inputs (by index) an all-to-all frame depends on.
        all_to_all: a step without a lineage rule ran (``on_unknown="all_to_all"``): every
            cell depends on every cell of ``sources`` (flagged).
        ranges: range slots: ``lo`` per row, with ``hi``, ``ok`` and ``n`` in slots of their
            own (:class:`~dslog_dagster.spark.context.RangeFields`; ids ``lo..hi``, exact
            where ``ok``), see :mod:`~dslog_dagster.spark.ranges`.
        unique: no two rows carry the same tuple of scalar slot values (true for inputs;
            kept by row-preserving steps, joins and unions; lost by explode).
        dense: scalar slots no row holds null in: input ids dslog numbered or stored (never
            null), kept by steps that keep rows or add columns, lost by outer joins and
            unions. Their id counts are ``count(1)``, one aggregate buffer for all.
    """

    context: CaptureContext
    df: DataFrame
    infos: tuple[Info, ...]
    arrays: frozenset[int] = frozenset()
    sources: frozenset[int] = frozenset()
    all_to_all: bool = False
    ranges: frozenset[int] = frozenset()
    unique: bool = True
    dense: frozenset[int] = frozenset()

    @classmethod
    def of(
        cls,
        context: CaptureContext,
        df: DataFrame,
        infos: Iterable[Info],
        arrays: Iterable[int] = (),
        sources: Iterable[int] = (),
        all_to_all: bool = False,
        ranges: Iterable[int] = (),
        unique: bool = True,
        dense: Iterable[int] = (),
    ) -> "FrameState":
        """A state from any iterables (kept as tuples and frozensets)."""
        return cls(
            context,
            df,
            tuple(infos),
            frozenset(arrays),
            frozenset(sources),
            all_to_all,
            frozenset(ranges),
            unique,
            frozenset(dense),
        )

    @classmethod
    def all_to_all_of(
        cls, context: CaptureContext, df: DataFrame, sources: Iterable[int]
    ) -> "FrameState":
        """A frame whose every cell depends on every cell of every source (flagged)."""
        names = df.columns
        return cls.of(context, df, [ColumnLineage() for _ in names], (), sources, all_to_all=True)

    # ------------------------------------------------------------------ reading

    @property
    def slots(self) -> list[int]:
        """The frame's slot ids, in column order."""
        return [slot_id(i) for i in self.infos if isinstance(i, str)]

    @property
    def columns(self) -> list[str]:
        """The user's columns (the visible ones), in order. Read from the frame's own
        columns: no plan for a projection (an analysis in the JVM, as :meth:`visible_df`
        would cost)."""
        return [
            c for c, i in zip(self.df.columns, self.infos, strict=True) if not isinstance(i, str)
        ]

    def user_positions(self) -> list[int]:
        """Positions of the user's columns among ``df``'s columns."""
        return [p for p, i in enumerate(self.infos) if not isinstance(i, str)]

    def visible_df(self) -> DataFrame:
        """The frame as user code sees it: ``df`` without the slot columns."""
        names = [slot_name(s) for s in self.slots]
        return self.df.drop(*names) if names else self.df

    def base(self, df: DataFrame | None = None, infos: Sequence[Info] | None = None) -> Base:
        """The frame (or ``df`` with ``infos``) as a base plan for a plan walk."""
        d = self.df if df is None else df
        return Base(analyzed(d), list(self.infos if infos is None else infos))

    def slot_types(self) -> dict[int, str]:
        """The SQL type of every slot column."""
        # a range aggregation's slots hold bigints, booleans and its group keys
        types = dict(self.df.dtypes) if self.ranges else {}
        return {
            s: types[slot_name(s)] if types else ("array<bigint>" if s in self.arrays else "bigint")
            for s in self.slots
        }

    def need_lists(self, *others: "FrameState") -> None:
        """Signal the capture to rerun with list slots when a step meets a range slot.

        Raises:
            NeedLists: this frame or one of ``others`` has a range slot.
        """
        if any(f.ranges for f in (self, *others)):
            raise NeedLists

    # ------------------------------------------------------------------ deriving

    def derive(
        self,
        df: DataFrame,
        infos: Sequence[Info],
        arrays: Iterable[int] | None = None,
        sources: Iterable[int] | None = None,
        ranges: Iterable[int] | None = None,
        unique: bool | None = None,
        dense: Iterable[int] | None = None,
    ) -> "FrameState":
        """The state of ``df``, a step's result, whose columns are ``infos``; what is not
        given is kept from this state. Lineage pairs naming slots ``df`` no longer has (the
        right side of an anti join) are dropped."""
        present = {slot_id(i) for i in infos if isinstance(i, str)}
        cleaned: list[Info] = [i if isinstance(i, str) else i.keep_slots(present) for i in infos]
        arr = self.arrays if arrays is None else frozenset(arrays)
        rng = self.ranges if ranges is None else frozenset(ranges)
        return FrameState.of(
            self.context,
            df,
            cleaned,
            arr & present,
            self.sources if sources is None else sources,
            ranges=rng & present,
            unique=self.unique if unique is None else unique,
            dense=(self.dense if dense is None else frozenset(dense)) & present - arr,
        )

    def finish(
        self,
        res: DataFrame,
        op: str,
        bases: Sequence[Base] | None = None,
        window_rule: WindowRule | None = None,
        arrays: Iterable[int] | None = None,
        sources: Iterable[int] | None = None,
        ranges: Iterable[int] | None = None,
        unique: bool | None = None,
        remap: Mapping[int, int] | None = None,
        dense: Iterable[int] | None = None,
    ) -> "FrameState":
        """The state of ``res``, a step's result, with its column lineage read from its
        analyzed plan above ``bases`` (default: this frame); ``remap`` moves the pairs of
        slots the step replaced with new ones (see :mod:`~dslog_dagster.spark.ranges`)."""
        walker = PlanWalker(bases or [self.base()], op, window_rule)
        try:
            infos = walker.resolve(analyzed(res))
        finally:
            self.context.plan_nodes += walker.nodes
            self.context.computed |= walker.computed
        if remap:
            infos = [i if isinstance(i, str) else i.remap(remap) for i in infos]
        keeps = self.unique if unique is None else unique
        return self.derive(
            res, infos, arrays, sources, ranges, keeps and not walker.generated, dense
        )

    def fresh(self, other: "FrameState") -> "FrameState":
        """``other`` with new slot ids where it shares slots with this frame (self-joins)."""
        ctx = self.context
        shared = set(self.slots) & set(other.slots)
        if not shared:
            return other
        ren = {s: ctx.new_slot(ctx.slot_input[s]) for s in shared}
        df = other.df.withColumnsRenamed({slot_name(s): slot_name(n) for s, n in ren.items()})
        infos = [
            slot_name(ren.get(slot_id(i), slot_id(i)))
            if isinstance(i, str)
            else i.remap({s: ren.get(s, s) for s in other.slots})
            for i in other.infos
        ]
        arrays = {ren.get(s, s) for s in other.arrays}
        ranges = {ren.get(s, s) for s in other.ranges}
        for s, n in ren.items():
            if s in ctx.range_src:
                ctx.range_src[n] = ctx.range_src[s]
            if s in ctx.range_fields:
                ctx.range_fields[n] = ctx.range_fields[s].remap(ren)
        dense = {ren.get(s, s) for s in other.dense}
        return FrameState.of(
            ctx,
            df,
            infos,
            arrays,
            other.sources,
            ranges=ranges,
            unique=other.unique,
            dense=dense,
        )

    def with_df(self, df: DataFrame) -> "FrameState":
        """The same state over ``df``, the same rows (``cache``, ``persist``)."""
        return FrameState(
            self.context,
            df,
            self.infos,
            self.arrays,
            self.sources,
            self.all_to_all,
            self.ranges,
            self.unique,
            self.dense,
        )
