"""``capture_frames``: run PySpark code and record the cell lineage of its output.

A DataFrame is a 2-D array in the lineage model: cell ``(row, column)``, where the row index is
the frame's dense row id (:mod:`dslog_dagster.spark.rowid`) and the column index its position
among the visible columns. For every input the capture returns the relation
``output (row, column) ← input (row, column)`` twice, as ProvRC tables:

* **contributing** — the input cells the output cell's value was computed from;
* **considered** — those plus the cells that only filtered, joined, grouped or ordered the rows
  (PROVision's *considered* inputs), so a query can ask for either.

Cell lineage is row lineage × column lineage. Row lineage is carried by provenance slots
(:mod:`dslog_dagster.spark.frame`) and compressed per partition on the executors
(:mod:`dslog_dagster.spark.lineage`); column lineage (a few pairs) comes from the analyzed plan.
The product is kept factored (:mod:`dslog_dagster.spark.cell_lineage`).

This module runs a capture in its phases: *plan* (input ids, user code building the plan on
tracked frames), *pass* (one Spark pass over the output writing or marking its rows and
compressing the row lineage of every slot), *read-back* (the ids of aggregated groups whose
range check failed, from the id tap or one join job) and *product* (row × column lineage on
the driver); it reruns user code when a phase finds that aggregations must carry their ids
otherwise (as lists, or their summaries as columns).
"""

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, cast

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster.core import background
from dslog_dagster.core.compression import union_tables
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import InvalidRelationError, UnsupportedFrameOperationError
from dslog_dagster.spark import kinds as spark_kinds
from dslog_dagster.spark.cell_lineage import SlotPlan, cell_tables, column_lineage, plan_slots
from dslog_dagster.spark.characters import character_lineage, row_tables_by_pair
from dslog_dagster.spark.connect import require_classic
from dslog_dagster.spark.context import CaptureContext, NeedLists, OnUnknown
from dslog_dagster.spark.fields import leaf_paths, leaf_schema, lineage_columns
from dslog_dagster.spark.frame import TrackedFrame
from dslog_dagster.spark.frame_capture import FrameCapture, FrameInput, KeptRows
from dslog_dagster.spark.idtap import tap_ready, tapping
from dslog_dagster.spark.lineage import (
    RangeColumns,
    RangesNotExact,
    RowTables,
    collected_row_tables,
    row_tables,
    write_with_lineage,
)
from dslog_dagster.spark.plan import ColumnLineage, Info, quoted, slot_name
from dslog_dagster.spark.ranges import found_again
from dslog_dagster.spark.rowid import MID, ROW_ID, RowIds, dense_id, mark, with_row_id
from dslog_dagster.spark.session import check_workers
from dslog_dagster.spark.staging import (
    CollectedOutput,
    StagedOutput,
    is_local,
    new_staging_dir,
    remove_staging_dir,
    staging_base,
)
from dslog_dagster.spark.state import FrameState
from dslog_dagster.spark.stored_subset import VALUE_TYPES
from dslog_dagster.spark.summaries import SummariesMissing

# FrameCapture, FrameInput and OnUnknown are part of this module's API (capture_frames takes
# and returns them), defined where the result and the context live
__all__ = ["FrameCapture", "FrameInput", "OnUnknown", "capture_frame_outputs", "capture_frames"]

log = logging.getLogger(__name__)

Aggregate = Literal["auto", "lists"]
Prepared = tuple[DataFrame, int, bool]
"""An input with dense row ids, its row count and whether its ids are never null."""


class _RangesFailed(Exception):
    """Some group's range summary was not exact; the capture reruns with lists."""


class _SummariesFailed(Exception):
    """Recorded range summaries did not give every row's group one summary (see
    :mod:`~dslog_dagster.spark.summaries`); the capture reruns carrying them as columns."""


def _staging_for(df: DataFrame, columns: Sequence[str]) -> str | None:
    """The folder under which the output is staged in its pass, or None when it cannot be:
    no folder the executors and this process share (:func:`~dslog_dagster.spark.staging.
    staging_base`), or column names Parquet cannot hold."""
    lower = [c.lower() for c in columns]
    if len(set(lower)) != len(lower) or MID in columns:
        return None
    return staging_base(df.sparkSession)


# ---------------------------------------------------------------------- inputs


def _prepare_input(
    df: DataFrame, cached: list[RowIds], n_rows: int | None
) -> tuple[DataFrame, int]:
    """The input with dense row ids (its own ``ROW_ID``, or numbered and cached) and its rows."""
    if ROW_ID in df.columns:
        return df, (df.count() if n_rows is None else int(n_rows))
    ids = with_row_id(df)
    cached.append(ids)
    return ids.frame, ids.n


def _dense_ids(df: DataFrame, n_rows: int | None) -> bool:
    """Whether the input's row ids are never null: ids the capture numbers, or a stored
    frame's (the caller knows its rows, as the IO manager does)."""
    return ROW_ID not in df.columns or n_rows is not None


def _track_input(
    ctx: CaptureContext, index: int, name: str, prepared: Prepared
) -> tuple[TrackedFrame, FrameInput]:
    """Input ``index`` as a tracked frame: its row id column becomes its first slot."""
    ided, n, dense = prepared
    sid = ctx.new_slot(index)
    fields = ided.schema.fields
    # the id column becomes the slot where it stands (one JVM call; a select naming every
    # column costs round trips per column)
    d = ided.withColumnRenamed(ROW_ID, slot_name(sid))
    # the lineage columns are the leaf fields (a struct's fields are columns of their own)
    user: list[str] = []
    infos: list[Info] = []
    for f in fields:
        if f.name == ROW_ID:
            infos.append(slot_name(sid))
            continue
        infos.append(_leaf_lineage(sid, len(user), leaf_paths(f.dataType)))
        user += [c for c, _ in leaf_schema([f])]
    state = FrameState.of(ctx, d, infos, (), (index,), dense=(sid,) if dense else ())
    return TrackedFrame(state), FrameInput(name, tuple(user), n)


def _leaf_lineage(
    sid: int, first: int, paths: Sequence[tuple[tuple[str, ...], str]]
) -> ColumnLineage:
    """An input column whose leaf fields are lineage columns ``first, first + 1, ...``: a
    scalar is its own column; a struct gets each (nested) field's."""

    def build(prefix: tuple[str, ...], at: int) -> tuple[ColumnLineage, int]:
        items: list[tuple[str, ColumnLineage]] = []
        names: list[str] = []
        for p, _ in paths:
            if p[: len(prefix)] == prefix and len(p) > len(prefix) and p[len(prefix)] not in names:
                names.append(p[len(prefix)])
        if not names:
            return ColumnLineage(frozenset({(sid, at)})), at + 1
        for name in names:
            lin, at = build((*prefix, name), at)
            items.append((name, lin))
        return ColumnLineage.of_fields(items), at

    return build((), first)[0]


# ---------------------------------------------------------------------- the capture


def capture_frames(
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    *,
    on_unknown: OnUnknown = "raise",
    input_rows: Mapping[str, int] | Sequence[int] | None = None,
    aggregate: Aggregate = "auto",
    characters: bool = False,
    **kwargs: Any,
) -> FrameCapture:
    """Run ``func`` on tracked versions of ``frames`` and capture the output's cell lineage.

    ``func`` receives one :class:`~dslog_dagster.spark.frame.TrackedFrame` per input (as
    keyword arguments for a mapping, positionally for a sequence, plus ``kwargs``) and must
    return a frame derived from them. A frame with a ``ROW_ID`` column (what
    :func:`~dslog_dagster.io_managers.spark_frames.read_frame` gives with ``row_id=True``) keeps
    those ids; any other input is numbered 0..n-1 in its current order (cached for the
    capture). Nothing is collected to the driver but counts and compressed tables.

    ``input_rows`` (by input name, or in order) gives the row counts of inputs that carry
    ``ROW_ID`` when the caller knows them (the IO manager does: ``FrameInfo.rows``), which
    saves one counting job per input. It also vouches that those ids are never null (as in
    every frame dslog stores), which lets aggregations count ids with one ``count(1)``.

    ``aggregate`` says how ``groupBy().agg`` carries row ids. ``"auto"`` (default) first
    summarises each group's ids as a range ``lo..hi`` with cheap hash aggregates, which is
    exact when a check in the same pass says so (see
    :mod:`~dslog_dagster.spark.ranges`); the ids of groups that
    fail the check (keys not clustered by row id) are found by one join of the aggregation's
    input with those groups' keys (:func:`~dslog_dagster.spark.lineage.refetch_ids`;
    ``timings["refetched_rows"]``). When a later step needs the ids as lists (an aggregation
    or window over an aggregation), or a failed range cannot be refetched (see
    :func:`_capture_once`), it runs ``func`` again with lists and makes one more pass.
    ``"lists"`` collects the ids at once (``collect_list``). ``func`` may be called twice; it
    only builds a plan. The lineage is the same in all cases; ``timings`` has
    ``retried_with_lists`` when the second run happened. With the id tap, an aggregation's
    summaries are recorded rather than carried (:mod:`~dslog_dagster.spark.summaries`); when
    they do not account for every row, ``func`` runs once more carrying them
    (``retried_carrying_summaries``).

    ``characters=True`` also records the character-range lineage of the output's string
    columns (:attr:`FrameCapture.characters`, :mod:`~dslog_dagster.spark.characters`): one
    more Spark job per such column after the pass.

    Raises:
        UnsupportedFrameOperationError: ``func`` used an operation without a lineage rule
            (with ``on_unknown="raise"``), or returned something that is not a tracked frame.
        SparkUnavailableError: the session's Python workers cannot import what the capture
            runs in them (checked first, see :func:`~dslog_dagster.spark.session.check_workers`).
    """
    return _capture_run(
        func, frames, on_unknown, input_rows, aggregate, kwargs, outputs=None, characters=characters
    )[0]


def capture_frame_outputs(
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    *,
    on_unknown: OnUnknown = "raise",
    input_rows: Mapping[str, int] | Sequence[int] | None = None,
    aggregate: Aggregate = "auto",
    characters: bool = False,
    collect: bool = False,
    **kwargs: Any,
) -> list[FrameCapture]:
    """:func:`capture_frames` for a function that returns several frames (a tuple or list of
    frames derived from its tracked inputs): one :class:`FrameCapture` per output, in order.

    ``func`` is called once for all of them (a step with several outputs builds its plans in
    one call), and each output gets its own pass; the inputs' kept rows are released with the
    last capture. The reruns :func:`capture_frames` describes rerun ``func`` as for one output.

    ``collect``: a pass whose output has columns of types Arrow gives as ``collect`` does
    and slots that are columns of ids (no range slot: lists mode, or no aggregation) collects
    it into this process (``toArrow``) instead of staging or caching it, and computes the
    lineage from those rows (:class:`~dslog_dagster.spark.staging.CollectedOutput`): no
    files, no commit, ~0.2 s less for a small output. For outputs known to be small (a
    selective re-run's); the capture's frames are then local frames of the collected rows.

    Raises:
        UnsupportedFrameOperationError: as for :func:`capture_frames`, for any output.
    """
    return _capture_run(
        func,
        frames,
        on_unknown,
        input_rows,
        aggregate,
        kwargs,
        outputs="many",
        characters=characters,
        collect=collect,
    )


def _capture_run(
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    on_unknown: OnUnknown,
    input_rows: Mapping[str, int] | Sequence[int] | None,
    aggregate: Aggregate,
    kwargs: Mapping[str, Any],
    *,
    outputs: Literal["many"] | None,
    characters: bool = False,
    collect: bool = False,
) -> list[FrameCapture]:
    """The captures of ``func``'s output (``outputs=None``: one frame) or outputs
    (``"many"``: a tuple or list of frames), with the reruns :func:`capture_frames` names."""
    if on_unknown not in ("raise", "all_to_all"):
        msg = f"on_unknown must be 'raise' or 'all_to_all', not {on_unknown!r}."
        raise ValueError(msg)
    if aggregate not in ("auto", "lists"):
        msg = f"aggregate must be 'auto' or 'lists', not {aggregate!r}."
        raise ValueError(msg)
    require_classic(frames, "Capturing cell lineage")
    if isinstance(frames, DataFrame):
        msg = (
            "Pass the input frames as a list or a mapping of names to frames "
            "(`capture_frames(func, [df])` or `capture_frames(func, {'df': df})`), not one "
            "bare DataFrame."
        )
        raise InvalidRelationError(msg)
    t0 = time.perf_counter()
    cached: list[RowIds] = []
    named = (
        list(frames.items())
        if isinstance(frames, Mapping)
        else [(f"input{i}", f) for i, f in enumerate(frames)]
    )
    for _, df in named:
        require_classic(df, "Capturing cell lineage")
    prepared: list[tuple[DataFrame, int, bool]] = []
    for i, (name, df) in enumerate(named):
        if not isinstance(df, DataFrame):
            msg = f"Input `{name}` is a `{type(df).__name__}`, not a Spark DataFrame."
            raise InvalidRelationError(msg)
        if i == 0:
            check_workers(df.sparkSession)  # before any capture work (see its docstring)
        known = None
        if input_rows is not None:
            known = input_rows[name] if isinstance(input_rows, Mapping) else input_rows[i]
        prepared.append((*_prepare_input(df, cached, known), _dense_ids(df, known)))
    try:
        mode: Literal["ranges", "lists"] = "ranges" if aggregate == "auto" else "lists"
        record = True  # tapped aggregations record their summaries (spark.summaries)
        retried: list[str] = []
        while True:
            try:
                with _tap_root(mode, prepared) as root:
                    caps = _capture_once(
                        func,
                        frames,
                        named,
                        prepared,
                        cached,
                        on_unknown,
                        mode,
                        kwargs,
                        t0,
                        root,
                        record,
                        outputs,
                        characters,
                        collect,
                    )
            except _SummariesFailed as e:
                if not record:  # pragma: no cover (only recorded summaries signal it)
                    raise
                log.info("Recorded range summaries not used (%s); carrying them instead.", e)
                retried.append(type(e).__name__)
                record = False
                continue
            except (NeedLists, _RangesFailed) as e:
                if mode == "lists":  # pragma: no cover (lists mode never signals)
                    raise
                retried.append(type(e).__name__)
                mode = "lists"
                continue
            for cap in caps:
                if mode == "lists" and retried:
                    cap.timings["retried_with_lists"] = 1.0
                if "_SummariesFailed" in retried:
                    cap.timings["retried_carrying_summaries"] = 1.0
            return caps
    except BaseException:
        for ids in cached:  # nothing is returned: drop the inputs' kept rows
            ids.release()
        raise


@contextlib.contextmanager
def _tap_root(mode: str, prepared: list[tuple[DataFrame, int, bool]]) -> Iterator[str | None]:
    """A directory for the id taps of one run (removed after it), or None: lists mode, or a
    session without the tap."""
    if mode != "ranges" or not prepared or not tap_ready(prepared[0][0].sparkSession):
        yield None
        return
    root = tempfile.mkdtemp(prefix="dslog-tap-", dir=staging_base(prepared[0][0].sparkSession))
    try:
        yield root
    finally:
        # a worker removes the files (unlinking a capture's dozen files took ~4 ms of it);
        # the pool's threads finish their tasks before the interpreter exits, and once it is
        # exiting (no new tasks) they are removed here
        try:
            background.submit(shutil.rmtree, root, True)
        except RuntimeError:
            shutil.rmtree(root, ignore_errors=True)


def _capture_once(
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    named: list[tuple[str, DataFrame]],
    prepared: list[Prepared],
    cached: list[RowIds],
    on_unknown: OnUnknown,
    mode: Literal["ranges", "lists"],
    kwargs: Mapping[str, Any],
    t0: float,
    tap_root: str | None,
    record: bool = True,
    outputs: Literal["many"] | None = None,
    characters: bool = False,
    collect: bool = False,
) -> list[FrameCapture]:
    """One run of ``func`` and one pass over each of its outputs (see :func:`capture_frames`),
    in the phases the module docstring names; aggregations record their ids under
    ``tap_root`` (:mod:`~dslog_dagster.spark.idtap`; None: no tap). ``collect``: see
    :func:`capture_frame_outputs`."""
    spark_kinds.install()
    ctx = CaptureContext(
        on_unknown=on_unknown,
        aggregate=mode,
        tap_root=tap_root,
        record_summaries=record,
        collect=collect,
    )
    states, inputs = _plan(ctx, func, frames, named, prepared, kwargs, outputs)
    done: list[FrameCapture] = []
    try:
        for k, state in enumerate(states):
            if k:
                _clear_taps(ctx)
                t0 = time.perf_counter()
            cap = _capture_output(ctx, state, inputs, t0)
            done.append(cap)
            if characters:
                frames_ided = [p[0] for p in prepared]
                cap.characters = character_lineage(
                    state, inputs, frames_ided, cap.frame_with_row_id, cap.n_rows,
                    cap.row_tables, cap.columns,
                )  # fmt: skip
    except BaseException:
        for cap in done:  # their own staged/marked rows; the inputs' stay for the rerun
            cap.release()
        raise
    kept = KeptRows(cached, holders=len(done))
    for cap in done:
        cap.share_inputs(kept)
    return done


def _clear_taps(ctx: CaptureContext) -> None:
    """Empty the tap directories between two outputs' passes: the next pass recomputes any
    aggregation it shares with the last one and records it afresh."""
    for d in ctx.tap_dirs:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))


def _capture_output(
    ctx: CaptureContext, state: FrameState, inputs: list[FrameInput], t0: float
) -> FrameCapture:
    """The pass, read-back and product phases for one output of the plan."""
    t1 = time.perf_counter()
    columns, lins, schema = lineage_columns(state)
    slots = plan_slots(state, inputs, lins)
    spec = _pass_spec(ctx, state, inputs, slots)
    out = _pass(ctx, state, spec)
    t_lineage = time.perf_counter()
    tables, tapped = _read_back(ctx, spec, out)
    per_slot = dict(zip(spec.groups, tables, strict=True))
    row_table = {
        k: union_tables([per_slot[(sl,)] for sl in k], disjoint=False) for k in slots.needed
    }
    t_pass = time.perf_counter()
    n_out = out.got.offsets[-1]
    own: list[RowIds] = []
    staged, make_frames, made = _output_frames(out, spec, own)
    contributing, considered = cell_tables(state, inputs, slots, row_table, n_out, len(lins))
    col_lineage = column_lineage(state, inputs, columns, lins)
    t2 = time.perf_counter()
    got = out.got
    return FrameCapture(
        columns=tuple(columns),
        schema=tuple(schema),
        n_rows=n_out,
        inputs=tuple(inputs),
        contributing=contributing,
        considered=considered,
        column_lineage=col_lineage,
        flagged=bool(ctx.flagged_ops),
        flagged_ops=tuple(ctx.flagged_ops),
        effects=spark_kinds.effects_of(ctx),
        timings={
            "plan_s": t1 - t0,
            "pass_s": t_pass - t1,
            "write_s": out.t_write - t1,
            "lineage_s": t_lineage - out.t_write,
            "refetch_s": t_pass - t_lineage,
            **({"refetched_rows": float(sum(got.failed))} if any(got.failed) else {}),
            **({"tapped_rows": float(tapped)} if tapped else {}),
            "product_s": t2 - t_pass,
        },
        row_tables=row_tables_by_pair(slots, row_table),
        _cached=list(own),
        _staged=staged,
        _collected=out.collected,
        _frames=make_frames,
        _made=made,
    )


def _plan(
    ctx: CaptureContext,
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    named: list[tuple[str, DataFrame]],
    prepared: list[Prepared],
    kwargs: Mapping[str, Any],
    outputs: Literal["many"] | None = None,
) -> tuple[list[FrameState], list[FrameInput]]:
    """The *plan* phase: ``func`` run on the tracked inputs; the state of the frame it
    returned (``outputs="many"``: of each frame of the tuple or list it returned), and the
    inputs.

    Raises:
        UnsupportedFrameOperationError: ``func`` returned something that is not a frame
            derived from its tracked inputs.
    """
    tracked: list[TrackedFrame] = []
    inputs: list[FrameInput] = []
    for i, ((name, _), prep) in enumerate(zip(named, prepared, strict=True)):
        t, info = _track_input(ctx, i, name, prep)
        tracked.append(t)
        inputs.append(info)
    if isinstance(frames, Mapping):
        result = func(**{n: t for (n, _), t in zip(named, tracked, strict=True)}, **kwargs)
    else:
        result = func(*tracked, **kwargs)
    many = outputs == "many" and isinstance(result, tuple | list)
    results = list(result) if many else [result]
    for k, r in enumerate(results):
        if not isinstance(r, TrackedFrame):
            which = f"output {k} of " if many else ""
            msg = (
                f"The captured function returned a `{type(r).__name__}` as {which}its result, "
                "not a frame derived from its tracked inputs; build the output from the frames "
                "it receives (a frame made with spark.sql/createDataFrame has no lineage to "
                "them)."
            )
            raise UnsupportedFrameOperationError(msg)
    return [cast("TrackedFrame", r).lineage_state for r in results], inputs


@dataclass(frozen=True)
class _PassSpec:
    """What the pass computes: per group (one slot each, see
    :attr:`~dslog_dagster.spark.cell_lineage.SlotPlan.groups`), how its slot holds ids
    (``kinds``), its input's rows (``n_ins``) and its columns (``id_columns``); the ``ok``
    columns of range slots that must pass their check on every row, and the output's user
    columns."""

    groups: list[tuple[int, ...]]
    kinds: list[str]
    n_ins: list[int]
    id_columns: list[str | RangeColumns]
    ok_names: list[str]
    user_names: list[str]


def _pass_spec(
    ctx: CaptureContext, state: FrameState, inputs: Sequence[FrameInput], slots: SlotPlan
) -> _PassSpec:
    groups = slots.groups
    # range slots whose failed rows cannot be refetched (no RangeSource) must pass their
    # check on every row, else the capture reruns
    checked = sorted(s for s in state.ranges if s in slots.slot_input and s not in ctx.range_src)
    kinds = [_slot_kind(k[0], state.arrays, state.ranges) for k in groups]
    n_ins = [inputs[slots.slot_input[k[0]]].n_rows for k in groups]
    # per group: the slot's column, or a range slot's summary columns
    id_columns: list[str | RangeColumns] = [
        _range_columns(ctx, k[0]) if kind == "range" else slot_name(k[0])
        for k, kind in zip(groups, kinds, strict=True)
    ]
    ok_names = [cast("str", _range_columns(ctx, s).ok) for s in checked]
    slot_names = [i for i in state.infos if isinstance(i, str)]
    user_names = [c for c in state.df.columns if c not in slot_names]
    return _PassSpec(groups, kinds, n_ins, id_columns, ok_names, user_names)


@dataclass(frozen=True)
class _PassOutput:
    """What the pass left: the row tables, the staging directory (``""``: the rows were
    marked and cached instead, ``marked``), the output as read back on first use, the staged
    files' schema and when the rows were written."""

    got: RowTables
    path: str
    source: Callable[[], Any]
    schema: Any
    marked: DataFrame | None
    t_write: float
    collected: CollectedOutput | None = None


def _pass(ctx: CaptureContext, state: FrameState, spec: _PassSpec) -> _PassOutput:
    """The *pass* phase: one Spark pass over the output that writes (or marks) its rows and
    compresses the row lineage of every group.

    Raises:
        _RangesFailed: a range slot that cannot be refetched failed its check.
        _SummariesFailed: recorded summaries cannot be used (the output is not staged).
    """
    path = ""
    teed: RowTables | None = None
    source: Callable[[], Any] | None = None
    schema: Any = None
    marked: DataFrame | None = None
    try:
        if _collectable(ctx, state, spec):
            # a small output collected here: the lineage from its rows, no files written
            out = state.df.withColumn(MID, F.monotonically_increasing_id())
            table = out.toArrow()
            got = collected_row_tables(
                table, [cast("str", c) for c in spec.id_columns], spec.kinds, spec.n_ins
            )
            kept = CollectedOutput(
                table, tuple(got.offsets), tuple(spec.user_names), out.schema, out.sparkSession
            )
            return _PassOutput(
                got, "", _Once(kept.marked), out.schema, None, time.perf_counter(), kept
            )
        base = _staging_for(state.df, spec.user_names)
        if base is not None:
            # the pass writes the output once (rows, MID, slots) with Spark's writer and
            # compresses the row lineage of every slot from those files; write_frame moves
            # them into place
            path = new_staging_dir(base)
            out = state.df.withColumn(MID, F.monotonically_increasing_id())
            with tapping(out.sparkSession, ctx.tap_dirs):
                teed = write_with_lineage(
                    out,
                    path,
                    spec.id_columns,
                    spec.kinds,
                    spec.n_ins,
                    spec.ok_names,
                    count_rows=not is_local(out.sparkSession),  # a shared folder: check it
                )
            schema = out.schema
            # read back only when needed (refetching by a join, the capture's frames): a file
            # listing and an analysis the usual store-and-go use does not pay
            source = _Once(partial(out.sparkSession.read.schema(schema).parquet, path))
        else:
            if any(isinstance(c, RangeColumns) and c.summary is not None for c in spec.id_columns):
                # the executors compress from columns: the summaries must be carried
                msg = "the output is not staged (column names Parquet cannot hold)"
                raise SummariesMissing(msg)
            marked = mark(state.df)
            source = _Once(lambda: marked)
        t_write = time.perf_counter()
        if teed is not None:
            got = teed
        else:
            groups = [
                (_slot_column(c, kind), kind, n)
                for c, kind, n in zip(spec.id_columns, spec.kinds, spec.n_ins, strict=True)
            ]
            got = row_tables(source(), groups, [F.col(quoted(o)) for o in spec.ok_names])
    except RangesNotExact:
        _discard(path, source)
        raise _RangesFailed from None
    except SummariesMissing as e:
        _discard(path, source)
        raise _SummariesFailed(str(e)) from None
    return _PassOutput(got, path, source, schema, marked, t_write)


def _collectable(ctx: CaptureContext, state: FrameState, spec: _PassSpec) -> bool:
    """Whether the pass collects the output (see :func:`capture_frame_outputs`): asked for,
    slots that are columns of ids (no range slot, nothing to check), and user columns of
    types whose values Arrow gives as ``collect`` does (their local frames keep their
    types)."""
    if not ctx.collect or spec.ok_names or any(k == "range" for k in spec.kinds):
        return False
    types = {f.name: type(f.dataType) for f in state.df.schema.fields}
    return all(types.get(c) in VALUE_TYPES for c in spec.user_names)


def _read_back(
    ctx: CaptureContext, spec: _PassSpec, out: _PassOutput
) -> tuple[list[LineageTable], int]:
    """The *read-back* phase: every group's row table, with the ids of the groups whose range
    check failed added (see :func:`~dslog_dagster.spark.ranges.found_again`), and the rows
    the tap served.

    Raises:
        _SummariesFailed: a slot with recorded summaries would need the join.
    """
    tables = list(out.got.tables)
    try:
        tapped = found_again(
            ctx,
            out.got,
            spec.groups,
            spec.id_columns,
            spec.n_ins,
            out.got.offsets,
            tables,
            out.path,
            out.source,
        )
    except SummariesMissing as e:
        _discard(out.path, out.source)
        raise _SummariesFailed(str(e)) from None
    return tables, tapped


def _output_frames(
    out: _PassOutput, spec: _PassSpec, cached: list[RowIds]
) -> tuple[
    StagedOutput | None,
    Callable[[], tuple[DataFrame, DataFrame]] | None,
    tuple[DataFrame, DataFrame] | None,
]:
    """The output as the capture gives it: its staged files (frames made on first use), or
    its marked rows with dense ids (kept cached, released with the capture)."""
    offsets = out.got.offsets
    if out.collected is not None:
        return None, out.collected.frames, None
    if out.path:
        staged = StagedOutput(out.path, tuple(offsets), tuple(spec.user_names), True, out.schema)
        return staged, partial(staged.frames, out.source), None
    assert out.marked is not None
    n_out = offsets[-1]
    user_cols = [quoted(c) for c in spec.user_names]
    with_id = out.marked.select(*user_cols, dense_id(offsets).alias(ROW_ID))
    cached.append(RowIds(with_id, n_out, out.marked))
    return None, None, (out.marked.select(*user_cols), with_id)


def _discard(path: str, source: Callable[[], Any] | None) -> None:
    """Drops a pass's output before the capture runs again."""
    if path:
        remove_staging_dir(path)
    elif source is not None:
        source().unpersist()


class _Once:
    """A value made on its first call and kept (e.g. the staged output read back)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make: Callable[[], Any] | None = make
        self._value: Any = None

    def __call__(self) -> Any:
        if self._make is not None:
            self._value, self._make = self._make(), None
        return self._value


def _slot_kind(slot: int, arrays: frozenset[int], ranges: frozenset[int]) -> str:
    """How a slot holds its input row ids: a bigint column (``"scalar"``), the
    ``lo`` of a range slot (``"range"``, see :func:`_range_columns`), or an ``array<bigint>`` column
    (``"list"``)."""
    if slot in arrays:
        return "list"
    return "range" if slot in ranges else "scalar"


def _range_columns(ctx: CaptureContext, slot: int) -> RangeColumns:
    """The output columns of range slot ``slot``'s summary (see
    :class:`~dslog_dagster.spark.context.RangeFields`)."""
    f = ctx.range_fields[slot]

    def name(s: int | None) -> str | None:
        return None if s is None else slot_name(s)

    return RangeColumns(
        slot_name(slot),
        name(f.hi),
        name(f.ok),
        name(f.n),
        tuple(slot_name(k) for k in f.keys),
        name(f.hash),
        f.summary,
    )


def _slot_column(slot: str | RangeColumns, kind: str) -> Any:
    """The column of a slot's ids as :func:`~dslog_dagster.spark.lineage.row_tables` reads it
    (a missing list is an empty one; a range as ``struct<lo, hi, ok>``)."""
    if isinstance(slot, RangeColumns):
        assert slot.hi is not None
        assert slot.ok is not None
        return F.struct(
            F.col(quoted(slot.lo)).alias("lo"),
            F.col(quoted(slot.hi)).alias("hi"),
            F.col(quoted(slot.ok)).alias("ok"),
        )
    if kind == "list":
        return F.coalesce(F.col(quoted(slot)), F.array().cast("array<bigint>"))
    return F.col(quoted(slot))
