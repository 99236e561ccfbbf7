"""Aggregations that summarise each group's row ids as a range, or only count them.

``groupBy().agg`` in ``ranges`` mode (:class:`~dslog_dagster.spark.context.CaptureContext`)
runs :func:`range_aggregate`: each slot of the aggregated frame becomes a *range slot*, ``lo``
(in the slot's own column), ``hi``, ``ok`` and ``n`` (in columns of slots of their own, see
:class:`~dslog_dagster.spark.context.RangeFields`).

``min``/``max``/``count`` are ordinary hash aggregates, where ``collect_list`` forces Spark's
object aggregation and moves every id through the shuffle (about 1.7× the time of the plain
step at 10^6 rows). The summary is exact — the group's ids of slot ``s`` are exactly
``lo..hi`` — when ``ok`` holds:

* the slot has no id in the group (``lo`` is null: no ids), or ``lo == hi`` (one id, however
  often), or
* ``count(s) == hi - lo + 1`` and the ids of ``s`` in the group are distinct. The rows of the
  frame carry distinct tuples of slot values
  (:attr:`~dslog_dagster.spark.state.FrameState.unique`), so they are when every other slot
  holds one value on every row of the group (or none on all).

The fields are flat bigint/boolean columns, not one struct per slot: rows with nested structs
cost the shuffle, the sort and the Parquet writer after the aggregation about 0.05 s more at
10^6 input rows (a tenth of the plain pipeline). Being slots, the columns travel with the rows
through every later step and stay hidden from user code. Where the id tap runs
(``ctx.record_summaries``), there is no range at all: the tap records every id of the group,
the aggregation only counts them (no ``min``/``max`` buffers through the partial
aggregation's shuffle) and the slot's column is a constant (``lo`` = 0, null without ids)
computed through the JVM's summary recorder, which records the group's count by its key where
the aggregation finishes the group, with ``ok`` false, so every group's ids come from the tap
(:mod:`~dslog_dagster.spark.summaries`; ``RangeFields.summary``).

The aggregation also outputs its group keys once (slots ``keys``) and ``n`` is the group's id
count; the context remembers the aggregation's input
(:class:`~dslog_dagster.spark.context.RangeSource`): where ``ok`` fails for some groups (keys
not clustered by row id), the capture finds those groups' ids again. With the id tap in the
session, the slot's ids pass through :func:`~dslog_dagster.spark.idtap.tap_column` under the
aggregation, which records ``(key, id)`` as the map side streams the rows — the one integral
key, or the keys' hash (:func:`~dslog_dagster.spark.idtap.tap_key`; the aggregation then
outputs the groups' hashes too, slot ``hash``) — and the capture matches them with the failed
groups (:func:`~dslog_dagster.spark.idtap.tapped_ids`); otherwise (keys that may hash apart,
or tapped rows that do not add up to ``n``) it joins the input's ``(keys, id)`` with the
failed rows' keys, in one more job that moves ids, not the pipeline
(:func:`~dslog_dagster.spark.lineage.refetch_ids`). Keys Parquet cannot hold (``void``,
intervals) are not output; a failed check there makes the capture rerun with lists
(``aggregate="lists"``). The result is exact either way.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pyspark.sql import Column
from pyspark.sql import functions as F

from dslog_dagster.core.compression import union_tables
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.spark.context import CaptureContext, RangeFields, RangeSource
from dslog_dagster.spark.idtap import (
    TapFailed,
    summary_column,
    summary_sql,
    tap_column,
    tap_key,
    tap_key_sql,
    tap_sql,
    tapped_ids,
)
from dslog_dagster.spark.lineage import RangeColumns, RowTables, refetch_ids
from dslog_dagster.spark.plan import analyzed, quoted, slot_name
from dslog_dagster.spark.state import FrameState

__all__ = ["GroupKeys", "found_again", "group_keys", "range_aggregate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupKeys:
    """An aggregation's group keys as its range slots need them.

    Attributes:
        columns: the keys as columns (a constant for a global aggregation), or None when the
            groups cannot be found again by their keys: some key's type cannot be stored in
            the staged Parquet files (``void``, intervals), or the keys or the frame they
            group are not deterministic (``rand``, ``sample``: computing them again gives
            other rows).
        types: the keys' types (``simpleString``).
        names: the keys' column names when they are all plain column names (they go into
            SQL text then: one JVM call each, where Column expressions cost one per operator).
    """

    columns: list[Column] | None
    types: list[str]
    names: list[str] | None

    def column(self, i: int) -> Column:
        """Key ``i`` as a column expression."""
        assert self.columns is not None
        return F.expr(quoted(self.names[i])) if self.names is not None else self.columns[i]


@dataclass(frozen=True)
class _TapKey:
    """What the id tap records the groups by: the one integral key or the keys' hash
    (``hashed``), as SQL text (keys by name) or a column."""

    sql: str | None
    column: Column | None
    hashed: bool

    def expr(self) -> Column:
        return F.expr(self.sql) if self.sql is not None else cast("Column", self.column)


def group_keys(state: FrameState, keys: Sequence[Any]) -> GroupKeys:
    """The group ``keys`` of ``state``'s frame (names or columns) as :class:`GroupKeys`."""
    columns = [k if isinstance(k, Column) else F.col(k) for k in keys] or [F.lit(0)]
    df = state.df
    known = dict(df.dtypes)
    names: list[str] | None = None
    if keys and all(_plain_name(k, known) for k in keys):
        # columns by name (the usual groupBy("key")): their types are the frame's and
        # they are as deterministic as the frame, so no probe plan is analysed
        names = [cast("str", k) for k in keys]
        types = [known[k] for k in names]
        plan = analyzed(df)
    else:
        probe = df.select(*[k.alias(f"k{i}") for i, k in enumerate(columns)])
        types = [t for _, t in probe.dtypes]
        plan = analyzed(probe)
    if any("void" in t or "interval" in t for t in types):
        return GroupKeys(None, types, None)
    if not plan.deterministic():
        return GroupKeys(None, types, None)
    return GroupKeys(columns, types, names)


def _plain_name(key: Any, known: Mapping[str, str]) -> bool:
    """Whether a group key is a column name that resolves to exactly that column of a frame
    with columns ``known`` (name → type): no dots or backticks (struct fields, quoting), and
    no other column equal to it ignoring case (Spark resolves names case-insensitively)."""
    if not isinstance(key, str) or key not in known or "." in key or "`" in key:
        return False
    low = key.lower()
    return sum(1 for n in known if n.lower() == low) == 1


def _tap_key(ctx: CaptureContext, gk: GroupKeys, slots: Sequence[int]) -> _TapKey | None:
    """What the tap records the groups by, or None when there is no tap, no slot or the
    keys cannot be tapped."""
    if gk.columns is None or ctx.tap_root is None or not slots:
        return None
    if gk.names is not None:
        by_sql = tap_key_sql(gk.names, gk.types)
        return None if by_sql is None else _TapKey(by_sql[0], None, by_sql[1])
    by_col = tap_key(gk.columns, gk.types) if gk.columns else None
    return None if by_col is None else _TapKey(None, by_col[0], by_col[1])


def _id_counts(state: FrameState, record: bool) -> dict[int, str]:
    """Per slot, the SQL aggregate counting the group's ids (with repeats).

    A slot without nulls counts its ids as ``count(1)``: one buffer for all of them (and the
    user's ``count(*)``), and it is constant on a group when ``lo = hi``. Recorded, the count
    must name the slots' columns, which the tap computes: a column no aggregate reads is
    pruned with its tap. ``greatest()`` evaluates all of them (never null: no slot is).
    """
    dense = [f"`{slot_name(s)}`" for s in state.slots if s in state.dense]
    one = "count(1)"
    if record and dense:
        one = f"count(greatest({', '.join(dense)}))" if len(dense) > 1 else f"count({dense[0]})"
    return {s: one if s in state.dense else f"count(`{slot_name(s)}`)" for s in state.slots}


def _key_aggregates(
    ctx: CaptureContext, slots: Sequence[int], gk: GroupKeys, tap: _TapKey | None
) -> tuple[list[Column], tuple[int, ...], int | None]:
    """The aggregates that output the group keys once (and their hash, when the tap records
    it), with the slots they go to."""
    aggs: list[Column] = []
    key_slots: tuple[int, ...] = ()
    hash_slot: int | None = None
    if gk.columns is not None and slots:
        owner = ctx.slot_input[slots[0]]
        key_slots = tuple(ctx.new_slot(owner) for _ in gk.columns)
        for i in range(len(gk.columns)):
            aggs.append(gk.column(i).alias(slot_name(key_slots[i])))
        if tap is not None and tap.hashed:
            hash_slot = ctx.new_slot(owner)
            aggs.append(tap.expr().alias(slot_name(hash_slot)))
    return aggs, key_slots, hash_slot


def _recorded_summary(
    ctx: CaptureContext, n: str, tap: _TapKey, key_slots: tuple[int, ...], hash_slot: int | None
) -> tuple[Column, RangeFields]:
    """A tapped slot's column: its group's id count recorded by the key (no range).

    The tap records every id of the group, so the aggregation only counts them (which the
    tapped rows must add up to): no min/max buffers, which the partial aggregation would
    shuffle for every group. ``lo`` is 0 (null: no ids) and ``ok`` false, so every group's
    ids come from the tap.
    """
    token, summary = ctx.new_tap_dir("s")
    fields = RangeFields(None, None, None, key_slots, hash_slot, summary)
    tap_lo = f"IF({n} = 0, NULL, 0L)"
    if tap.sql is not None:
        rec = F.expr(summary_sql(token, tap.sql, tap_lo, "0L", "false", n))
    else:
        assert tap.column is not None
        rec = summary_column(token, tap.column, tap_lo, "0L", "false", n)
    return rec, fields


def _carried_range(
    ctx: CaptureContext,
    state: FrameState,
    s: int,
    n: Mapping[int, str],
    key_slots: tuple[int, ...],
    hash_slot: int | None,
) -> tuple[list[Column], RangeFields]:
    """Slot ``s``'s range ``lo``, ``hi``, its check ``ok`` and its id count ``n``, as
    aggregates (the first is ``lo``, for the slot's own column) and the fields' slots.

    One aggregation: Spark evaluates each distinct aggregate once and the checks are
    expressions over them, so the plan costs no extra projection. The expressions are SQL
    text: one call into the JVM each, where building them from Column objects costs one per
    operator.
    """
    slots = state.slots
    lo = {t: f"min(`{slot_name(t)}`)" for t in slots}
    hi = {t: f"max(`{slot_name(t)}`)" for t in slots}
    # whether slot t holds one value on every row of the group
    constant = {
        t: f"({lo[t]} = {hi[t]})"
        if t in state.dense
        else f"({n[t]} = 0 OR ({lo[t]} = {hi[t]} AND {n[t]} = count(1)))"
        for t in slots
    }
    others = [constant[t] for t in slots if t != s]
    span = " AND ".join([f"{n[s]} = {hi[s]} - {lo[s]} + 1", *others])
    ok = f"({n[s]} = 0 OR {lo[s]} = {hi[s]} OR ({span}))"
    own = ctx.slot_input[s]
    fields = RangeFields(
        ctx.new_slot(own), ctx.new_slot(own), ctx.new_slot(own), key_slots, hash_slot
    )
    assert fields.hi is not None
    assert fields.ok is not None
    assert fields.n is not None
    # n: the group's ids with repeats, which the id tap's rows must add up to
    aggs = [
        F.expr(lo[s]),
        F.expr(hi[s]).alias(slot_name(fields.hi)),
        F.expr(ok).alias(slot_name(fields.ok)),
        F.expr(n[s]).alias(slot_name(fields.n)),
    ]
    return aggs, fields


def _id_tap(ctx: CaptureContext, s: int, tap: _TapKey) -> tuple[str, Column]:
    """A tap directory for slot ``s`` and the slot's column passing its ids through the tap
    (recording ``(key, id)`` as the aggregation's map side streams the rows)."""
    token, directory = ctx.new_tap_dir("t")
    if tap.sql is not None:
        return directory, F.expr(tap_sql(token, tap.sql, quoted(slot_name(s))))
    assert tap.column is not None
    return directory, tap_column(token, tap.column, F.col(quoted(slot_name(s))))


def range_aggregate(state: FrameState, keys: list[Any], cols: list[Column]) -> FrameState:
    """``groupBy(*keys).agg(*cols)`` with each slot summarised as a range, or recorded by
    the id tap (see the module docstring)."""
    ctx = state.context
    slots = state.slots
    gk = group_keys(state, keys)
    tap = _tap_key(ctx, gk, slots)
    # with the tap, every id of a group is recorded as the map side streams it and the
    # aggregation only counts them (see _recorded_summary)
    record = ctx.record_summaries and tap is not None
    n = _id_counts(state, record)
    aggs, key_slots, hash_slot = _key_aggregates(ctx, slots, gk, tap)
    taps: dict[str, Column] = {}
    # each range is a new slot: the context keeps a range slot's fields and input by its
    # id, and two aggregations of one input (unioned, joined) must not share them
    new = {s: ctx.new_slot(ctx.slot_input[s]) for s in slots}
    for s in slots:
        if record:
            assert tap is not None
            rec, fields = _recorded_summary(ctx, n[s], tap, key_slots, hash_slot)
            aggs.append(rec.alias(slot_name(new[s])))
        else:
            carried, fields = _carried_range(ctx, state, s, n, key_slots, hash_slot)
            aggs += [carried[0].alias(slot_name(new[s])), *carried[1:]]
        ctx.range_fields[new[s]] = fields
        if gk.columns is not None:
            directory = None
            if tap is not None:
                directory, taps[slot_name(s)] = _id_tap(ctx, s, tap)
            hashed = tap is not None and tap.hashed
            ctx.range_src[new[s]] = RangeSource(
                state.df, tuple(gk.columns), slot_name(s), directory, hashed
            )
    df = state.df
    if taps:  # one projection (one analysis) for all of them
        df = df.withColumns(taps)
    res = df.groupBy(*keys).agg(*cols, *aggs)
    return state.finish(
        res,
        "groupBy.agg",
        arrays=(),
        ranges=set(new.values()),
        remap=new,
        dense={new[s] for s in slots if s in state.dense},
    )


def found_again(
    ctx: CaptureContext,
    got: RowTables,
    keys: Sequence[tuple[int, ...]],
    id_columns: list[str | RangeColumns],
    n_ins: list[int],
    offsets: list[int],
    tables: list[LineageTable],
    path: str,
    source: Callable[[], Any],
) -> int:
    """Adds to ``tables`` the ids of the groups whose range check failed: matched with the
    ids the tap recorded, or found by joining their keys with their input. Returns the rows
    the tap served.

    Raises:
        SummariesMissing: a slot with recorded summaries would need the join.
    """
    tapped = 0
    for g, n_failed in enumerate(got.failed):
        if not n_failed:
            continue
        # groups whose ids are not a range: match them with the ids the tap recorded, or
        # join their keys with their input
        src = ctx.range_src[keys[g][0]]
        extra = None
        if src.tap is not None and path:
            try:
                extra = tapped_ids(
                    src.tap,
                    path,
                    cast("RangeColumns", id_columns[g]),
                    n_ins[g],
                    offsets,
                    n_failed,
                    hashed=src.hashed,
                    rows=got.failed_rows[g] if got.failed_rows else None,
                )
                tapped += n_failed
            except TapFailed as e:
                log.info("The id tap of %s is not used (%s); joining instead.", src.slot, e)
        if extra is None:
            extra = refetch_ids(
                source(),
                cast("RangeColumns", id_columns[g]),
                src.frame,
                src.keys,
                src.slot,
                n_ins[g],
                offsets,
                n_failed,
            )
        tables[g] = union_tables([tables[g], extra])  # their rows interleave
    return tapped
