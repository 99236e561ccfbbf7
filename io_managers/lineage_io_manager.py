"""``DSLogIOManager`` (NumPy arrays, Spark DataFrames + lineage) and ``with_lineage``.

Both publish a tracked step's lineage in the lineage store *after* the value is stored: the
output's array version (name :func:`~dslog_dagster.naming.array_name`, version = run id), the
upstream array versions it read, and one operation ``output <- inputs`` with its compressed
tables. The operation's segment is staged and flushed in a worker thread while the value is written
(:meth:`LineageWriter.start`), published once the value is stored, and dropped when storing
the value failed. Any failure writing lineage raises, so the step fails loudly instead of
leaving a gap; with ``durable=True`` the lineage is flushed before the step succeeds.

Array files of :class:`DSLogIOManager` (``base_dir`` defaults to the instance's storage
directory):

* unpartitioned asset ``a/b`` -> ``<base_dir>/a/b.npy``;
* partition ``p`` of ``a/b`` -> ``<base_dir>/a/b/<p, percent-encoded>.npy``;
* op output (not an asset) -> ``<base_dir>/runs/<run_id>/<step_key>/<output>.npy``.

A Spark DataFrame takes the same path with ``.parquet`` instead of ``.npy``: a Parquet directory
with the dense row-id column the lineage names rows by, and a ``_dslog_frame.json`` side-car
(rows, schema), published atomically
(:func:`~dslog_dagster.io_managers.spark_frames.store_frame`). Loading gives user code an
ordinary DataFrame and hands the frame *with* ids to the tracked step
(:class:`~dslog_dagster.tracking.FrameSource`); see :mod:`dslog_dagster.spark.steps`.

``with_lineage(inner)`` leaves storage to another IO manager. A DataFrame output of a tracked
step reaches it *with* its row-id column (``ROW_ID``), since that manager need not keep row
order; loading takes the column off for user code and hands the frame with ids to the tracked
step, as above. Untracked outputs reach it unchanged.

The lineage store defaults to ``<base_dir>/.dslog`` (:class:`~dslog_dagster.DSLogResource`).
"""

import contextlib
import json
import logging
import os
import threading
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import numpy as np
from pydantic import Field, PrivateAttr

from dslog_dagster.core import background as background_tasks
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store import (
    ArrayRecord,
    LineageStore,
    NewArray,
    PreparedOperation,
)
from dslog_dagster.decorators import is_frame, op_array_name
from dslog_dagster.errors import LineageStorageError, UnsupportedArrayError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.naming import array_name
from dslog_dagster.resources import DSLogResource
from dslog_dagster.tracking import (
    FrameSource,
    PendingLineage,
    pop_pending,
    stash_frame_input,
)

__all__ = ["DSLogIOManager", "LineageJob", "LineageWriter", "with_lineage"]

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


class LineageWriter:
    """Writes the pending lineage of an output into the store and returns its metadata."""

    def __init__(self, settings: DSLogResource, base_dir: str | os.PathLike[str] | None) -> None:
        self.settings = settings
        self.base_dir = base_dir

    def store_dir(self) -> Path:
        return self.settings.resolve_store_dir(self.base_dir)

    def write(self, context: dg.OutputContext, value: Any) -> dict[str, Any]:
        """Register the lineage stashed for ``context``'s output; returns ``dslog/...`` metadata.

        Raises:
            LineageStorageError, InvalidRelationError, ...: the lineage could not be stored
                (the step must fail: a silent gap in provenance is a bug).
        """
        pending = pop_pending(context.run_id, context.step_key, context.name)
        arr = np.asarray(value)
        return self.write_pending(context, pending, arr.shape, arr.dtype)

    def write_frame(
        self,
        context: dg.OutputContext,
        pending: PendingLineage | None,
        rows: int,
        schema: Sequence[tuple[str, str]],
    ) -> dict[str, Any]:
        """:meth:`write_pending` for a stored DataFrame of ``rows`` rows and ``schema``
        (visible columns and Spark types), plus the frame metadata Dagster shows: shape, row
        count, column schema and column lineage."""
        shape = (int(rows), len(schema))
        md: dict[str, Any] = {
            "dslog/shape": dg.MetadataValue.text(str(shape)),
            "dagster/row_count": dg.MetadataValue.int(shape[0]),
            m.COLUMN_SCHEMA: dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in schema]),
        }
        md |= self.write_pending(context, pending, shape, "float64")
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
    ) -> dict[str, Any]:
        """Register ``pending`` (already popped) for an output of ``shape`` and ``dtype``.

        A DataFrame output is the array ``(rows, columns)`` (see :mod:`dslog_dagster.spark`).
        """
        return self.start(context, pending, shape, dtype).finish()

    def start(
        self,
        context: dg.OutputContext,
        pending: PendingLineage | None,
        shape: tuple[int, ...],
        dtype: Any,
        *,
        background: bool = False,
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
        job.begin(background)
        return job

    @staticmethod
    def _picture(
        context: dg.OutputContext,
        settings: DSLogResource,
        name: str,
        shape: tuple[int, ...],
        lineage: dict[tuple[str, str], LineageRelation | LineageTable],
    ) -> str | None:
        drawable = all(
            isinstance(rel, LineageTable) or rel.n <= _PICTURE_PAIRS for rel in lineage.values()
        )
        if not (settings.picture and drawable):
            return None
        try:
            return m.lineage_markdown(
                name, shape, [(k[1], rel) for k, rel in lineage.items()], settings.picture_cells
            )
        except Exception as e:  # a picture is a nicety; never fail the step for it
            context.log.warning(f"dslog: could not draw the lineage picture of `{name}`: {e}")
            return None

    @staticmethod
    def _inputs(
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

    def begin(self, background: bool) -> None:
        pending, context = self.pending, self.context
        if pending is None:
            self.done = {
                m.STATUS: dg.MetadataValue.text("Not a tracked step: no lineage recorded.")
            }
            return
        if pending.obtained in ("off", "none"):
            self.done = m.LineageMetadata(
                obtained=pending.obtained,
                policy=pending.policy,
                mode=pending.mode,
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
        ):
            store = writer.settings.store(writer.base_dir)
        self.store = store
        self.out_spec = NewArray(
            self.name, self.shape, self.dtype, asset_key=asset_key, version=self.version
        )
        self.seconds += time.perf_counter() - t0
        if pending.relations is None or not pending.inputs:
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
            in_recs, self.lineage = LineageWriter._inputs(store, pending, self.name)
            method = "all-to-all" if pending.flagged else "annotator"
            if pending.capture_method is not None:
                method = pending.capture_method
            elif pending.obtained not in ("captured",):
                method = f"reuse-{pending.obtained}"
            # the output array is registered with its operation: one flushed file per step
            self.prepared = store.prepare_operation(
                pending.op_name,
                in_recs,
                [spec],
                self.lineage,
                args=pending.op_args,
                capture_method=method,
                timings={"capture_s": pending.capture_s},
            )
        except BaseException as e:  # re-raised by finish() in the step's thread
            self.failure = e
        finally:
            self.seconds += time.perf_counter() - t0

    def _join(self) -> None:
        if self.task is not None:
            task, self.task = self.task, None
            task.result()  # _prepare keeps its own failures in self.failure

    def abort(self) -> None:
        """Storing the value failed: publish nothing."""
        self._join()
        if self.prepared is not None:
            self.prepared.abort()
            self.prepared = None

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
            raise self.failure
        pending = self.pending
        assert pending is not None
        t0 = time.perf_counter()
        store, spec = self.store, self.out_spec
        assert store is not None
        assert spec is not None
        if self.prepared is None:  # a source step: only the array version
            store.register_array(
                spec.name, spec.shape, spec.dtype, asset_key=spec.asset_key, version=spec.version
            )
            write_s = self.seconds + time.perf_counter() - t0
            return m.LineageMetadata(
                obtained=pending.obtained,
                policy=pending.policy,
                mode=pending.mode,
                status=pending.status,
                array=self.name,
                version=self.version,
                store=str(store.root),
                write_s=write_s,
                step_s=time.perf_counter() - pending.started,
            ).to_metadata()
        prepared, self.prepared = self.prepared, None
        # Visible now; its directories are flushed in a worker while the picture and the
        # figures are made, and finish() returns only once they are on disk.
        op = prepared.publish()
        try:
            lineage = self.lineage
            raw_bytes = sum(
                t.n_pairs * (len(rel.out_shape) + len(rel.in_shape)) * 8
                for t, rel in zip(op.tables, lineage.values(), strict=True)
            )
            picture = LineageWriter._picture(
                self.context, self.writer.settings, self.name, self.shape, lineage
            )
            inputs = m.inputs_json(pending.inputs)
        finally:
            prepared.flushed()
        write_s = self.seconds + time.perf_counter() - t0
        return m.LineageMetadata(
            obtained=pending.obtained,
            policy=pending.policy,
            mode=pending.mode,
            signature=pending.signature,
            flagged=pending.flagged,
            flag_reason=pending.reason,
            status=pending.status,
            array=self.name,
            version=self.version,
            op_id=op.op_id,
            op_name=op.op_name,
            store=str(store.root),
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


_PICTURE_PAIRS = 2_000_000
"""An uncompressed relation with more cell pairs than this gets no picture (drawing walks
every pair); compressed tables are drawn by interval queries at any size."""


# ------------------------------------------------------------------ DSLogIOManager

_SETTINGS: dict[tuple[tuple[str, str | None], str], DSLogResource] = {}
_SETTINGS_LOCK = threading.Lock()


def _safe_part(text: str) -> str:
    """A path component that cannot escape its directory (partition keys may hold ``/``)."""
    part = urllib.parse.quote(text, safe="")
    return part.replace(".", "%2E") if set(part) <= {"."} else part


class DSLogIOManager(dg.ConfigurableIOManager):
    """Stores NumPy arrays as ``.npy`` files, Spark DataFrames as Parquet with row ids, and the
    cell-level lineage of tracked steps (``dagster/column_lineage`` too for frames).

    Works with :func:`~dslog_dagster.tracked_asset`, ``tracked_multi_asset`` and ``tracked_op``;
    values of untracked assets are stored without lineage. Partitioned assets store one file
    per partition; a downstream step reading several partitions gets ``{partition: array}``.

    Examples:
        .. code-block:: python

            defs = dg.Definitions(
                assets=[image, smoothed],
                resources={"io_manager": DSLogIOManager(base_dir="data", policy="capture")},
            )
    """

    base_dir: str | None = Field(
        default=None,
        description="Where arrays are stored; default: the instance's storage directory.",
    )
    # The lineage settings are DSLogResource's fields, flat: a nested resource field would make
    # Dagster's resource init call a deprecated API (a DeprecationWarning on every run).
    store_dir: str | None = Field(
        default=None,
        description="Lineage store directory; default $DSLOG_STORE, else <base_dir>/.dslog.",
    )
    policy: Literal["capture", "reuse_only", "off", "all_to_all"] = Field(
        default="capture", description="Capture policy of tracked steps that set none."
    )
    mode: Literal["contributing", "considered"] = Field(
        default="contributing", description="Lineage of picks: contributing or considered."
    )
    picture: bool = Field(default=True, description="Attach a lineage PNG to the metadata.")
    picture_cells: int = Field(default=4, ge=1, le=64, description="Output cells in the PNG.")
    reuse: bool = Field(default=True, description="Serve lineage from confirmed reuse views.")
    confirm_after: int = Field(default=2, ge=1, description="Captures that confirm a view.")
    verify_rate: float = Field(default=0.05, ge=0.0, le=1.0, description="Hits re-verified.")
    durable: bool = Field(default=True, description="fsync lineage files (power-loss safe).")
    spark_master: str = Field(
        default="local[*]",
        description=(
            "Spark master for loading DataFrame assets when no SparkSession runs in the process "
            "yet (one that runs, e.g. from SparkSessionResource, is reused)."
        ),
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="Spark conf for a session this IO manager starts."
    )
    _instance_dir: str | None = PrivateAttr(default=None)
    _settings_cache: dict[tuple[str, str | None], DSLogResource] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_resource(cls, dslog: DSLogResource, base_dir: str | None = None) -> "DSLogIOManager":
        """An IO manager with the settings of ``dslog`` (one source of truth in Definitions)."""
        return cls(base_dir=base_dir, **dslog.settings())

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        if context.instance is not None:
            self._instance_dir = context.instance.storage_directory()

    def _base(self) -> Path:
        if self.base_dir:
            return Path(self.base_dir)
        if self._instance_dir:
            return Path(self._instance_dir)
        return Path.cwd()

    def dslog_settings(self) -> DSLogResource:
        """The lineage settings the tracked decorators read (policy, mode, reuse), with the
        store directory resolved against this IO manager's base directory."""
        # Built once per base directory and $DSLOG_STORE: a resource's pydantic init costs
        # milliseconds, and every tracked step and output asks for these settings.
        key = (str(self._base()), os.environ.get("DSLOG_STORE"))
        cached = self._settings_cache.get(key)
        if cached is None:
            # the resource's fields this IO manager has (a resource field that only concerns
            # queries, not storing, keeps the resource's default)
            fields = {
                k: getattr(self, k)
                for k in DSLogResource.model_fields
                if k in type(self).model_fields
            }
            # Dagster builds a new IO manager object for every run, so the settings are also
            # kept process-wide, keyed by every field: two DSLogResource inits cost ~10 ms.
            shared = (key, json.dumps(fields, sort_keys=True, default=str))
            cached = _SETTINGS.get(shared)
            if cached is None:
                unresolved = DSLogResource(**fields)
                cached = DSLogResource(
                    **{**fields, "store_dir": str(unresolved.resolve_store_dir(self._base()))}
                )
                with _SETTINGS_LOCK:
                    _SETTINGS[shared] = cached
                    while len(_SETTINGS) > 64:
                        _SETTINGS.pop(next(iter(_SETTINGS)))
            self._settings_cache[key] = cached
        return cached

    def _asset_path(self, key: dg.AssetKey, partition: str | None, ext: str = ".npy") -> Path:
        parts = [_safe_part(p) for p in key.path]
        if partition is None:
            return self._base().joinpath(*parts[:-1], parts[-1] + ext)
        return self._base().joinpath(*parts, _safe_part(partition) + ext)

    def _op_path(self, run_id: str, step_key: str, output: str, ext: str = ".npy") -> Path:
        return (
            self._base()
            / "runs"
            / _safe_part(run_id)
            / _safe_part(step_key)
            / (_safe_part(output) + ext)
        )

    def _output_path(self, context: dg.OutputContext, ext: str) -> Path:
        if context.has_asset_key:
            pk = None
            if context.has_asset_partitions:
                keys = context.asset_partition_keys
                pk = keys[0] if len(keys) == 1 else None
                if pk is None:
                    msg = f"DSLogIOManager stores one partition per step, got {len(keys)}."
                    raise UnsupportedArrayError(msg)
            return self._asset_path(context.asset_key, pk, ext)
        return self._op_path(context.run_id, context.step_key, context.name, ext)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if is_frame(obj):
            self._handle_frame(context, obj)
            return
        arr = np.asarray(obj)
        if arr.dtype == object or arr.dtype.kind in "OUSV":
            msg = (
                f"DSLogIOManager stores NumPy arrays; output `{context.name}` of step "
                f"`{context.step_key}` is a `{type(obj).__name__}`. Use with_lineage(<your IO "
                "manager>) for other types."
            )
            raise UnsupportedArrayError(msg)
        path = self._output_path(context, ".npy")
        pending = pop_pending(context.run_id, context.step_key, context.name)
        writer = LineageWriter(self.dslog_settings(), self._base())
        # the lineage's segment is staged and flushed while the value is written; it is
        # published (and its directories flushed) only once the value is stored
        job = writer.start(context, pending, arr.shape, arr.dtype, background=True)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
            try:
                with tmp.open("wb") as f:
                    np.save(f, arr, allow_pickle=False)
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        except BaseException:
            job.abort()
            raise
        md = {
            "path": dg.MetadataValue.path(str(path)),
            "dslog/shape": dg.MetadataValue.text(str(arr.shape)),
        }
        md |= job.finish()
        context.add_output_metadata(md)

    def _handle_frame(self, context: dg.OutputContext, obj: Any) -> None:
        """Store a Spark DataFrame output with its row ids, then its lineage."""
        from dslog_dagster.io_managers.spark_frames import store_frame

        path = self._output_path(context, ".parquet")
        pending = pop_pending(context.run_id, context.step_key, context.name)
        cap = pending.frame if pending is not None else None
        try:
            # a captured output is stored with the capture's row ids: the ones its lineage names
            info = store_frame(cap if cap is not None else obj, path)
            writer = LineageWriter(self.dslog_settings(), self._base())
            md = {"path": dg.MetadataValue.path(str(path))}
            md |= writer.write_frame(context, pending, info.rows, info.schema)
        finally:
            if cap is not None:
                cap.release()
        context.add_output_metadata(md)

    def _load_stored(self, context: dg.InputContext, npy: Path, stash: bool = True) -> Any:
        """The array stored at ``npy`` or the DataFrame beside it (``.parquet``), whichever is
        newer (an asset may change kind between runs)."""
        frame = npy.with_suffix(".parquet")
        if frame.is_dir() and (not npy.exists() or frame.stat().st_mtime >= npy.stat().st_mtime):
            return self._load_frame(context, frame, stash)
        return self._load(npy)

    def _load_frame(self, context: dg.InputContext, path: Path, stash: bool) -> Any:
        """An ordinary DataFrame for user code; the frame with its row ids goes to the tracked
        step's wrapper (:class:`~dslog_dagster.tracking.FrameSource`)."""
        from pyspark.sql import SparkSession

        from dslog_dagster.io_managers.spark_frames import load_frame
        from dslog_dagster.spark.rowid import ROW_ID
        from dslog_dagster.spark.session import get_session

        # the running session (e.g. SparkSessionResource's) as it is: get_session would also
        # re-apply this IO manager's SQL conf to it
        spark = SparkSession.getActiveSession() or get_session(self.spark_master, self.spark_conf)
        with_ids, rows = load_frame(spark, path)
        if stash:
            try:
                step = context.step_context
            except dg.DagsterInvariantViolationError:  # loaded outside a run
                step = None
            if step is not None:
                source = FrameSource(with_ids, rows, str(path))
                stash_frame_input(step.run_id, step.step.key, context.name, source)
        return with_ids.drop(ROW_ID)

    def load_input(self, context: dg.InputContext) -> Any:
        if context.has_asset_key:
            key = context.asset_key
            if context.has_asset_partitions:
                keys = context.asset_partition_keys
                if len(keys) == 1:
                    return self._load_stored(context, self._asset_path(key, keys[0]))
                return {
                    pk: self._load_stored(context, self._asset_path(key, pk), stash=False)
                    for pk in keys
                }
            return self._load_stored(context, self._asset_path(key, None))
        up = context.upstream_output
        if up is None:
            msg = f"DSLogIOManager cannot load input `{context.name}`: it has no upstream output."
            raise LineageStorageError(msg)
        return self._load_stored(context, self._op_path(up.run_id, up.step_key, up.name))

    @staticmethod
    def _load(path: Path) -> np.ndarray:
        try:
            return np.load(path, allow_pickle=False)  # type: ignore[no-any-return]
        except FileNotFoundError as e:
            msg = f"No stored array at `{path}`; materialize the upstream asset first."
            raise LineageStorageError(msg) from e


# ------------------------------------------------------------------ with_lineage


class _LineageIOManager(dg.IOManager):
    """Delegates storage to ``inner`` and adds the lineage of tracked steps."""

    def __init__(self, inner: dg.IOManager, writer: LineageWriter) -> None:
        self.inner = inner
        self.writer = writer

    def dslog_settings(self) -> DSLogResource:
        s = self.writer.settings
        return s.model_copy(update={"store_dir": str(self.writer.store_dir())})

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if is_frame(obj):
            self._handle_frame(context, obj)
            return
        pending = pop_pending(context.run_id, context.step_key, context.name)
        shape: tuple[int, ...] = ()
        dtype: Any = "float64"
        if pending is not None and pending.obtained not in ("off", "none"):
            arr = np.asarray(obj)
            shape, dtype = arr.shape, arr.dtype
        # staged while the inner IO manager stores the value, published once it did
        job = self.writer.start(context, pending, shape, dtype, background=True)
        try:
            self.inner.handle_output(context, obj)
        except BaseException:
            job.abort()
            raise
        context.add_output_metadata(job.finish())

    def _handle_frame(self, context: dg.OutputContext, obj: Any) -> None:
        """Hand the inner IO manager the frame *with* its row-id column, then add lineage.

        Lineage names a frame's rows by id, and another IO manager's storage need not keep row
        order, so the ids travel as an ordinary column (``ROW_ID``) that :meth:`load_input`
        takes off again. An untracked output (``policy="off"`` or a plain Dagster step) is
        handed over unchanged.
        """
        from dslog_dagster.spark.rowid import ROW_ID, with_row_id

        pending = pop_pending(context.run_id, context.step_key, context.name)
        if pending is None or pending.obtained == "off":
            self.inner.handle_output(context, obj)
            md = self.writer.write_pending(context, pending, (0, 0), "float64")
            context.add_output_metadata(md)
            return
        cap = pending.frame
        numbered = None
        try:
            if cap is not None:  # a capture: its own ids are the ones its lineage names
                stored, rows = cap.frame_with_row_id, int(cap.n_rows)
            else:  # a source step: number the rows now
                numbered = with_row_id(obj)
                stored, rows = numbered.frame, int(numbered.n)
            self.inner.handle_output(context, stored)
            schema = [
                (f.name, f.dataType.simpleString())
                for f in stored.schema.fields
                if f.name != ROW_ID
            ]
            md = self.writer.write_frame(context, pending, rows, schema)
        finally:
            if cap is not None:
                cap.release()
            if numbered is not None:
                numbered.release()
        context.add_output_metadata(md)

    def load_input(self, context: dg.InputContext) -> Any:
        value = self.inner.load_input(context)
        if not is_frame(value):
            return value
        from dslog_dagster.spark.rowid import ROW_ID

        if ROW_ID not in value.columns:
            return value  # stored untracked; a tracked step consuming it says so
        try:
            step = context.step_context
        except dg.DagsterInvariantViolationError:  # loaded outside a run
            step = None
        if step is not None:
            source = FrameSource(value, None, f"{type(self.inner).__name__} input {context.name}")
            stash_frame_input(step.run_id, step.step.key, context.name, source)
        return value.drop(ROW_ID)


def with_lineage(
    inner: "dg.ConfigurableIOManagerFactory[Any] | dg.IOManager", dslog: DSLogResource | None = None
) -> dg.IOManagerDefinition:
    """Add cell-level lineage to an existing IO manager.

    The inner IO manager stores the values exactly as before; the lineage of tracked steps goes
    into the store of ``dslog`` (default: ``$DSLOG_STORE``, else ``.dslog`` under the inner IO
    manager's ``base_dir`` or the instance storage directory). A Spark DataFrame output of a
    tracked step is handed to ``inner`` with one extra column, the row ids its lineage names
    (``dslog_dagster.spark.ROW_ID``); ``inner`` must store it like any other column (Parquet,
    Delta and table IO managers do). Loading drops it again before user code sees the frame.

    Args:
        inner: a Pythonic IO manager (``dg.FilesystemIOManager(...)``, any
            ``ConfigurableIOManager``/``ConfigurableIOManagerFactory``) or an ``IOManager``
            object. (Composed at the IOManagerDefinition level: nesting an IO manager factory
            as a pydantic field of another one does not work in Dagster.)
        dslog: lineage settings.

    Examples:
        .. code-block:: python

            resources = {"io_manager": with_lineage(dg.FilesystemIOManager(base_dir="data"))}
    """
    settings = dslog or DSLogResource()

    @dg.io_manager
    def _lineage_io_manager(init_context: dg.InitResourceContext) -> _LineageIOManager:
        if isinstance(inner, dg.ConfigurableIOManagerFactory):
            mgr = inner.create_io_manager(init_context)
        else:
            mgr = inner
        base = getattr(inner, "base_dir", None)
        if not base and init_context.instance is not None:
            base = init_context.instance.storage_directory()
        return _LineageIOManager(mgr, LineageWriter(settings, base))

    return _lineage_io_manager
