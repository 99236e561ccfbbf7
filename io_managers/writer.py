"""Publishing a tracked step's lineage: :class:`LineageWriter` and its :class:`LineageJob`.

Every lineage IO manager (:class:`~dslog_dagster.io_managers.DSLogIOManager`,
:func:`~dslog_dagster.io_managers.with_lineage`) takes the output's
:class:`~dslog_dagster.tracked_step.PendingLineage` from the step's
:class:`~dslog_dagster.tracked_step.TrackedStep` (:func:`take_pending`) and writes it here,
after the value is stored (``DSLogIOManager``: it names the value's version only once the
lineage committed) or before (``with_lineage``, which retracts it with
:meth:`LineageJob.retract` when the inner IO manager fails): the output's array version (name
:func:`~dslog_dagster.naming.array_name`, version = run id), the upstream array versions it
read, and one operation ``output <- inputs`` with its compressed tables. The operation's
segment is staged and flushed in a worker thread while the value is written
(:meth:`LineageWriter.start`), published once the value is stored, and dropped when storing the
value failed. Any failure writing lineage raises, so the step fails loudly instead of leaving a
gap; with ``durable=True`` the lineage is flushed before the step succeeds (with
``group_commit=True`` too, in a later batch: see :mod:`~dslog_dagster.core.store.group_commit`).
"""

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import numpy as np

from dslog_dagster.core import background as background_tasks
from dslog_dagster.core import progress
from dslog_dagster.core.on_demand import DEFERRED
from dslog_dagster.core.op_kinds import numpy_effects
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store import (
    ArrayRecord,
    LineageStore,
    NewArray,
    OperationRecord,
    PreparedOperation,
)
from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.core.store.retraction import retract
from dslog_dagster.errors import LineageStorageError, UnsupportedArrayError
from dslog_dagster.export import openlineage_emit
from dslog_dagster.export.openlineage_events import Materialization, run_events
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.naming import array_name, op_array_name
from dslog_dagster.policy import LineageMode
from dslog_dagster.resources import DSLogResource
from dslog_dagster.tracked_step import PendingLineage, TrackedStep

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["LineageJob", "LineageWriter", "take_pending", "tracked_step_of"]

_log = logging.getLogger(__name__)


def _output_array(context: dg.OutputContext) -> tuple[str, str | None]:
    """Store name and asset key (``"a/b"``) of the output being handled."""
    if context.has_asset_key:
        key = context.asset_key
        pk = None
        if context.has_asset_partitions:
            keys = context.asset_partition_keys
            if len(keys) != 1:
                msg = (
                    f"Output `{key.to_user_string()}` covers {len(keys)} partitions in one "
                    "step; lineage is stored per partition, so materialize one partition per "
                    "run for tracked assets (e.g. BackfillPolicy.multi_run(1))."
                )
                raise UnsupportedArrayError(msg)
            pk = keys[0]
        return array_name(key, pk), "/".join(key.path)
    return op_array_name(context.step_key, context.name), None


def _relation(lineage: LineageRelation | LineageTable) -> LineageRelation:
    return lineage.decompress() if isinstance(lineage, LineageTable) else lineage


def tracked_step_of(
    context: dg.InputContext | dg.OutputContext, *, attach: bool = False
) -> TrackedStep | None:
    """The :class:`TrackedStep` of the step ``context`` belongs to (attached now with
    ``attach``); ``None`` outside a run (e.g. ``build_output_context``, ``load_asset_value``)."""
    try:
        step_context = context.step_context
    except dg.DagsterInvariantViolationError:
        return None
    return TrackedStep.of(step_context) if attach else TrackedStep.find(step_context)


def take_pending(context: dg.OutputContext) -> PendingLineage | None:
    """The lineage the tracked step handed over for ``context``'s output (``None``: the step
    is not tracked)."""
    step = tracked_step_of(context)
    return step.take(context.name) if step is not None else None


class LineageWriter:
    """Writes the pending lineage of an output into the store and returns its metadata."""

    def __init__(self, settings: DSLogResource, base_dir: str | os.PathLike[str] | None) -> None:
        self.settings = settings
        self.base_dir = base_dir

    def store_dir(self) -> Path | str:
        return self.settings.resolve_store_dir(self.base_dir)

    def write(self, context: dg.OutputContext, value: Any) -> dict[str, Any]:
        """Register the lineage handed over for ``context``'s output; returns its metadata.

        Raises:
            LineageStorageError, InvalidRelationError, ...: the lineage could not be stored
                (the step must fail: a silent gap in provenance is a bug).
        """
        pending = take_pending(context)
        arr = np.asarray(value)
        return self.write_pending(context, pending, arr.shape, arr.dtype, values=arr)

    def write_frame(
        self,
        context: dg.OutputContext,
        pending: PendingLineage | None,
        rows: int,
        schema: Sequence[tuple[str, str]],
        *,
        keep: "list[LineageJob] | None" = None,
    ) -> dict[str, Any]:
        """:meth:`write_pending` for a stored DataFrame of ``rows`` rows and ``schema``
        (visible columns and Spark types), plus the frame metadata Dagster shows: shape, row
        count, column schema and column lineage. ``keep``: as for :meth:`write_pending`."""
        shape = (int(rows), len(schema))
        md: dict[str, Any] = {
            m.SHAPE: dg.MetadataValue.text(str(shape)),
            m.ROW_COUNT: dg.MetadataValue.int(shape[0]),
            m.COLUMN_SCHEMA: dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in schema]),
        }
        md |= self.write_pending(
            context, pending, shape, "float64", columns=[n for n, _ in schema], keep=keep,
            schema=schema,
        )  # fmt: skip
        if pending is not None and pending.column_lineage is not None:
            md[m.COLUMN_LINEAGE] = m.column_lineage(
                pending.column_lineage, pending.inputs, [n for n, _ in schema]
            )
        return md

    def write_pending(
        self,
        context: dg.OutputContext,
        pending: PendingLineage | None,
        shape: tuple[int, ...],
        dtype: Any,
        *,
        values: np.ndarray | None = None,
        columns: Sequence[str] | None = None,
        keep: "list[LineageJob] | None" = None,
        schema: Sequence[tuple[str, str]] | None = None,
    ) -> dict[str, Any]:
        """Register ``pending`` (already popped) for an output of ``shape`` and ``dtype``.

        A DataFrame output is the array ``(rows, columns)`` (see :mod:`dslog_dagster.spark`).
        ``values`` (the output's data) and ``columns`` (a frame's names) are for the picture.
        ``keep``: a list the job is appended to (to :meth:`LineageJob.retract` it later).
        ``schema``: a frame's ``(column name, dtype)`` pairs, recorded with its array.
        """
        job = self.start(
            context, pending, shape, dtype, values=values, columns=columns, schema=schema
        )
        if keep is not None:
            keep.append(job)
        return job.finish()

    def start(
        self,
        context: dg.OutputContext,
        pending: PendingLineage | None,
        shape: tuple[int, ...],
        dtype: Any,
        *,
        background: bool = False,
        values: np.ndarray | None = None,
        columns: Sequence[str] | None = None,
        schema: Sequence[tuple[str, str]] | None = None,
    ) -> "LineageJob":
        """Begin registering ``pending``; :meth:`LineageJob.finish` completes it.

        With ``background``, the part that makes nothing visible (input array records, the
        operation's segment written and flushed under the store's staging directory) runs in
        a worker thread (:mod:`~dslog_dagster.core.background`) while the caller stores the
        value; ``finish`` then publishes the operation (rename; the directory flushes run in
        the worker while the metadata is built) only after the value is stored, and ``abort``
        drops it when storing failed. The lineage is durable when ``finish`` returns, as
        before: the worker only overlaps the flushes with the value's write and the metadata.
        """
        job = LineageJob(self, context, pending, shape, dtype)
        job.values, job.columns, job.schema = values, columns, schema
        job.begin(background)
        return job


class LineageJob:
    """The registration of one output's lineage, begun by :meth:`LineageWriter.start`.

    ``begin`` resolves everything that needs the Dagster context (array name, version, store)
    in the caller's thread and then prepares the operation (input records, staged segment),
    in a worker thread when asked. ``finish`` publishes it and returns the ``dslog/...`` metadata;
    ``abort`` drops a prepared operation (nothing of it becomes visible).
    """

    def __init__(
        self,
        writer: LineageWriter,
        context: dg.OutputContext,
        pending: PendingLineage | None,
        shape: tuple[int, ...],
        dtype: Any,
    ) -> None:
        self.writer, self.context, self.pending = writer, context, pending
        self.shape, self.dtype = shape, dtype
        self.done: dict[str, Any] | None = None
        self.prepared: PreparedOperation | None = None
        self.failure: BaseException | None = None
        self.task: Future[None] | None = None
        self.seconds = 0.0
        self.name = ""
        self.version: str | None = None
        self.store: LineageStore | None = None
        self.out_spec: NewArray | None = None
        self.lineage: dict[tuple[str, str], LineageRelation | LineageTable] = {}
        self.values: np.ndarray | None = None  # the output's data, for the picture
        self.columns: Sequence[str] | None = None  # a DataFrame's column names
        self.schema: Sequence[tuple[str, str]] | None = None  # a DataFrame's names and dtypes
        self.published: tuple[str | None, list[ArrayRecord]] | None = None
        """What ``finish`` made visible: the op id (``None``: a source step's array version
        only) and the array versions registered with it."""
        #: the step's run log, taken in the caller's thread (``_prepare`` may run in a worker)
        self.sink: progress.Sink = _step_log(context)

    def begin(self, background: bool) -> None:
        pending, context = self.pending, self.context
        if pending is None:
            self.done = {m.RECORD: dg.MetadataValue.md("Not a tracked step: no lineage recorded.")}
            return
        if pending.obtained in ("off", "none"):
            self.done = m.LineageMetadata(
                obtained=pending.obtained,
                policy=pending.policy.value,
                mode=pending.mode.value,
                status=pending.status,
            ).to_metadata()
            return
        t0 = time.perf_counter()
        self.name, asset_key = _output_array(context)
        self.version = context.run_id
        writer = self.writer
        store = pending.store
        if (
            store is None
            or store.root != writer.store_dir()
            or store.durable != writer.settings.durable
            or store.group_commit != writer.settings.group_commit
        ):
            store = writer.settings.store(writer.base_dir)
        self.store = store
        self.out_spec = NewArray(
            self.name, self.shape, self.dtype, asset_key=asset_key, version=self.version,
            columns=self.schema,
        )  # fmt: skip
        self.seconds += time.perf_counter() - t0
        deferred = pending.capture_method == DEFERRED
        if (pending.relations is None and not deferred) or not pending.inputs:
            return  # a source: only its array version, registered in finish
        if background:
            # a worker that already runs: starting a thread per step cost more than the flush
            self.task = background_tasks.submit(self._prepare)
        else:
            self._prepare()

    def _prepare(self) -> None:
        """Input records and the staged segment (nothing visible); touches no Dagster object."""
        t0 = time.perf_counter()
        pending = self.pending
        assert pending is not None
        store, spec = self.store, self.out_spec
        assert store is not None
        assert spec is not None
        try:
            if pending.capture_method == DEFERRED:  # on demand: versions, no lineage yet
                in_recs, self.lineage = _register_deferred_inputs(store, pending), {}
            else:
                in_recs, self.lineage = _register_inputs(store, pending, self.name)
            method = "all-to-all" if pending.flagged else "annotator"
            if pending.capture_method is not None:
                method = pending.capture_method
            elif pending.obtained not in ("captured",):
                method = f"reuse-{pending.obtained}"
            # A served step's write is milliseconds of a budget of milliseconds: its line is
            # logged only when it runs long (a log event costs Dagster about as much).
            with progress.phase(
                f"compression and write of `{self.name}`'s lineage",
                quiet=pending.obtained != "captured",
                sink=self.sink,
            ) as ph:
                # the output array is registered with its operation: one flushed file per step
                self.prepared = store.prepare_operation(
                    pending.op_name,
                    in_recs,
                    [spec],
                    self.lineage,
                    args=pending.op_args,
                    capture_method=method,
                    timings={"capture_s": pending.capture_s},
                    characters=_characters(pending, self.name),
                    effects=self._effects(in_recs),
                )
                ph.note(*_write_sizes(self.prepared.record))
        except BaseException as e:  # re-raised by finish() in the step's thread
            self.failure = e
        finally:
            self.seconds += time.perf_counter() - t0

    def _effects(self, in_recs: Sequence[ArrayRecord]) -> OperationEffects | None:
        """The capture's effects (pandas, Spark), or a NumPy step's read off its lineage;
        ``None`` (unknown) for a flagged or deferred step."""
        pending = self.pending
        assert pending is not None
        if pending.effects is not None or pending.flagged:
            return pending.effects
        if pending.capture_method not in (None, "declared") or not self.lineage:
            return None
        return numpy_effects(self.shape, [self.lineage.get((self.name, r.name)) for r in in_recs])

    def _join(self) -> None:
        if self.task is not None:
            task, self.task = self.task, None
            task.result()  # _prepare keeps its own failures in self.failure

    def abort(self) -> None:
        """Storing the value failed: publish nothing (an OpenLineage ``FAIL`` event says so
        when a transport is configured)."""
        self._join()
        if self.prepared is not None:
            self.prepared.abort()
            self.prepared = None
        if self.done is None and self.out_spec is not None:
            self._openlineage(None, None, "storing the value failed; no lineage was published")

    def retract(self) -> None:
        """Remove what :meth:`finish` published (the value it describes was not stored; see
        :mod:`~dslog_dagster.core.store.retraction`). Nothing published: nothing done.

        Raises:
            LineageStorageError / CatalogLockedError: it could not be removed.
        """
        if self.published is None or self.store is None:
            return
        op_id, arrays = self.published
        retract(self.store, op_id, arrays)
        self.published = None

    def finish(self) -> dict[str, Any]:
        """Publish the operation (durable when this returns) and build its metadata.

        Raises:
            LineageStorageError, InvalidRelationError, ...: the lineage could not be stored
                (the step must fail: a silent gap in provenance is a bug).
        """
        if self.done is not None:
            return self.done
        self._join()
        if self.failure is not None:
            self._openlineage(None, None, f"{type(self.failure).__name__}: {self.failure}")
            raise self.failure
        pending = self.pending
        assert pending is not None
        t0 = time.perf_counter()
        store, spec = self.store, self.out_spec
        assert store is not None
        assert spec is not None
        if self.prepared is None:  # a source step: only the array version
            rec = store.register_array(
                spec.name,
                spec.shape,
                spec.dtype,
                asset_key=spec.asset_key,
                version=spec.version,
                columns=spec.columns,
            )
            self.published = (None, [rec])
            write_s = self.seconds + time.perf_counter() - t0
            return (
                self._openlineage(None, rec)
                | m.LineageMetadata(
                    obtained=pending.obtained,
                    policy=pending.policy.value,
                    mode=pending.mode.value,
                    status=pending.status,
                    array=self.name,
                    version=self.version,
                    store=str(store.root),
                    base_dir=self._base_dir(),
                    write_s=write_s,
                    step_s=time.perf_counter() - pending.started,
                ).to_metadata()
            )
        prepared, self.prepared = self.prepared, None
        # Visible now; its directories are flushed in a worker while the picture and the
        # figures are made, and finish() returns only once they are on disk.
        op = prepared.publish()
        self.published = (op.op_id, list(op.outputs))
        try:
            lineage = self.lineage
            raw_bytes = sum(
                t.n_pairs * (len(rel.out_shape) + len(rel.in_shape)) * 8
                for t, rel in zip(op.tables, lineage.values(), strict=True)
            )
            picture = _picture(
                self.context,
                self.writer.settings,
                self.name,
                self.shape,
                lineage,
                self.values,
                self.columns,
            )
            inputs = m.inputs_json(pending.inputs)
        finally:
            prepared.flushed()
        write_s = self.seconds + time.perf_counter() - t0
        sent = self._openlineage(op, op.outputs[0])
        return (
            sent
            | m.LineageMetadata(
                obtained=pending.obtained,
                policy=pending.policy.value,
                mode=pending.mode.value,
                signature=pending.signature,
                flagged=pending.flagged,
                flag_reason=pending.reason,
                status=pending.status,
                array=self.name,
                version=self.version,
                op_id=op.op_id,
                op_name=op.op_name,
                kinds=_kinds(op),
                store=str(store.root),
                base_dir=self._base_dir(),
                inputs=inputs,
                raw_rows=sum(t.n_pairs for t in op.tables),
                raw_bytes=raw_bytes,
                stored_rows=sum(t.rows for t in op.tables),
                stored_bytes=sum(t.stored_bytes for t in op.tables),
                capture_s=pending.capture_s,
                write_s=write_s,
                step_s=time.perf_counter() - pending.started,
                lineage_md=picture,
            ).to_metadata()
        )

    def _openlineage(
        self, op: OperationRecord | None, out: ArrayRecord | None, error: str | None = None
    ) -> dict[str, Any]:
        """Send the materialization's OpenLineage events when a transport is configured
        (:mod:`~dslog_dagster.export.openlineage_emit`); ``dslog/openlineage`` says how it
        went. Never raises for the export's own failures."""
        cfg = self.writer.settings.openlineage
        pending = self.pending
        if cfg.transport == "off" or pending is None:
            return {}
        now = datetime.now(UTC)
        started = now - timedelta(seconds=time.perf_counter() - pending.started)
        key = self.context.asset_key.to_user_string() if self.context.has_asset_key else self.name
        direct = None
        if pending.column_lineage is not None:
            names = {r.arg: r.name for r in pending.inputs}
            direct = {
                o: {names[a]: cols for a, cols in ins.items() if a in names}
                for o, ins in pending.column_lineage.items()
            }
        mat = Materialization(
            output=out,
            job=key,
            op=op,
            relations=self.lineage,
            considered=pending.mode == LineageMode.considered,
            direct=direct,
            run_key=f"{self.context.run_id}/{key}",
            started=started,
            ended=now,
            error=error,
            contributing=None if pending.contributing is None else {
                (self.name, r.name): rel
                for r, rel in zip(pending.inputs, pending.contributing, strict=True)
            },
        )  # fmt: skip
        report = openlineage_emit.emit(
            cfg,
            lambda: run_events(mat, namespace=cfg.namespace),
            self.context.log.warning,
            f"`{key}`",
        )
        if report is None:
            return {}
        return {m.OPENLINEAGE: dg.MetadataValue.text(report.text())}

    def _base_dir(self) -> str | None:
        base = self.writer.base_dir
        return None if base is None else os.fspath(base)


def _kinds(op: OperationRecord) -> str:
    """The operation's kinds and column effect for ``dslog/record`` (at most 200 characters:
    the record stays short enough for the UI to show it inline)."""
    text = "unknown" if op.effects is None else op.effects.summary()
    return text if len(text) <= 200 else text[:199] + "…"


def _step_log(context: dg.OutputContext) -> progress.Sink:
    """The run log of the step handling ``context`` (else this thread's progress sink)."""
    try:
        log = context.log
    except Exception:  # an output context built without a step has no log
        log = None
    return progress.current_sink() if log is None else log


def _write_sizes(record: Any) -> list[str]:
    """Size details of a prepared operation's line: pairs, stored rows and bytes, and the
    seconds compression and encoding took (the rest of the phase is the write)."""
    tables = record.tables
    pairs = sum(t.n_pairs for t in tables)
    rows = sum(t.rows for t in tables)
    stored = sum(t.stored_bytes for t in tables)
    timings = record.timings
    return [
        f"{progress.fmt_count(pairs)} pairs -> {progress.fmt_count(rows)} rows",
        progress.fmt_bytes(stored),
        f"compression {progress.fmt_seconds(float(timings.get('compress_s', 0.0)))}",
        f"encoding {progress.fmt_seconds(float(timings.get('encode_s', 0.0)))}",
    ]


_PICTURE_PAIRS = 2_000_000
"""An uncompressed relation with more cell pairs than this gets no picture (drawing walks
every pair); compressed tables are drawn by interval queries at any size."""


def _picture(
    context: dg.OutputContext,
    settings: DSLogResource,
    name: str,
    shape: tuple[int, ...],
    lineage: dict[tuple[str, str], LineageRelation | LineageTable],
    values: np.ndarray | None,
    columns: Sequence[str] | None,
) -> str | None:
    drawable = all(
        isinstance(rel, LineageTable) or rel.n <= _PICTURE_PAIRS for rel in lineage.values()
    )
    if not (settings.picture and drawable):
        return None
    try:
        return m.lineage_markdown(
            name,
            shape,
            [(k[1], rel) for k, rel in lineage.items()],
            settings.picture_cells,
            values=values,
            columns=columns,
        )
    except Exception as e:  # a picture is a nicety; never fail the step for it
        context.log.warning(f"dslog: could not draw the lineage picture of `{name}`: {e}")
        return None


def _characters(pending: PendingLineage, out_name: str) -> dict[str, Any] | None:
    """The step's character lineage for ``prepare_operation`` (tables' ``input`` renamed from
    the step's parameters to the store's array names). Characters are contributing lineage,
    so a step stored in ``considered`` mode keeps its cells only (a character query falls
    back to whole cells and says so)."""
    chars = pending.characters
    if chars is None or pending.mode == LineageMode.considered:
        return None
    names = {ref.arg: ref.name for ref in pending.inputs}
    tables = tuple(dataclasses.replace(t, input=names[t.input]) for t in chars.tables)
    return {out_name: dataclasses.replace(chars, tables=tables)}


def _register_deferred_inputs(store: Any, pending: PendingLineage) -> list[ArrayRecord]:
    """The input array versions of an on-demand step (one record per array version)."""
    assert pending.input_shapes is not None
    recs: dict[tuple[str, str | None], ArrayRecord] = {}
    for ref, shape in zip(pending.inputs, pending.input_shapes, strict=True):
        if (ref.name, ref.version) not in recs:
            recs[ref.name, ref.version] = store.register_array(
                ref.name, shape, "float64", asset_key=ref.asset_key, version=ref.version
            )
    return list(recs.values())


def _register_inputs(
    store: Any, pending: PendingLineage, out_name: str
) -> tuple[list[ArrayRecord], dict[tuple[str, str], LineageRelation | LineageTable]]:
    """Register the input array versions; merge inputs that are the same array version."""
    assert pending.relations is not None
    recs: dict[tuple[str, str | None], ArrayRecord] = {}
    rels: dict[tuple[str, str | None], LineageRelation | LineageTable] = {}
    for ref, rel in zip(pending.inputs, pending.relations, strict=True):
        key = (ref.name, ref.version)
        if key not in recs:
            recs[key] = store.register_array(
                ref.name, rel.in_shape, "float64", asset_key=ref.asset_key, version=ref.version
            )
            rels[key] = rel
        else:  # the same upstream array read through two parameters: one relation
            prev = _relation(rels[key])
            rel = _relation(rel)
            rels[key] = LineageRelation.from_columns(
                prev.out_shape,
                prev.in_shape,
                list(np.concatenate([prev.out_cols, rel.out_cols], axis=1)),
                list(np.concatenate([prev.in_cols, rel.in_cols], axis=1)),
                n=prev.n + rel.n,
            ).unique()
    names = [k[0] for k in recs]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        msg = (
            f"Step output `{out_name}` read two versions of {dups} at once; lineage is "
            "keyed by array name, so this cannot be stored."
        )
        raise LineageStorageError(msg)
    lineage = {(out_name, k[0]): rel for k, rel in rels.items()}
    return list(recs.values()), lineage
