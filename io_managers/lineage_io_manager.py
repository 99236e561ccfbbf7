"""``DSLogIOManager``: NumPy arrays and Spark and pandas DataFrames in files, with their lineage.

Every materialization's value is its own immutable version
(:mod:`~dslog_dagster.io_managers.value_versions`), keyed by the run id, which is also the
output array's version in the lineage store. The value's stem (``base_dir`` defaults to the
instance's storage directory):

* unpartitioned asset ``a/b`` -> ``<base_dir>/a/b``;
* partition ``p`` of ``a/b`` -> ``<base_dir>/a/b/<p, percent-encoded>``;
* op output (not an asset) -> ``<base_dir>/runs/<run_id>/<step_key>/<output>``;

holds ``<stem>.versions/<run id>.npy`` per version, and ``<stem>.npy`` links to the newest.
A Spark DataFrame is ``<run id>.parquet`` instead: a Parquet directory with the dense row-id
column the lineage names rows by, and a ``_dslog_frame.json`` side-car (rows, schema)
(:func:`~dslog_dagster.io_managers.spark_frames.stage_frame`). Loading gives user code an
ordinary DataFrame and offers the frame *with* ids to the tracked step
(:class:`~dslog_dagster.tracked_step.FrameSource`); see :mod:`dslog_dagster.spark.steps`.
A pandas DataFrame is ``<run id>.parquet`` as one file, with the row ids as a column that
loading sorts by and drops (:mod:`~dslog_dagster.io_managers.pandas_frames`): row positions are
the rows the lineage names.

A value is staged under a temporary name, its lineage is committed by
:mod:`~dslog_dagster.io_managers.writer`, and only then is the value renamed to its version: a
failed lineage write changes nothing a reader can name. An input loads the version of the
upstream's latest materialization Dagster records (whose lineage committed first), and the
step's lineage names the version it loaded. ``keep_last`` / ``keep_for_hours`` bound how many
versions are kept; :meth:`DSLogIOManager.load_value` reads any kept version. The lineage store
is the one of the IO manager's :class:`~dslog_dagster.DSLogResource` (``dslog``): the same
store the deployment's query assets and checks read, whatever ``base_dir`` is (``base_dir``
places values, never lineage).
"""

import dataclasses
import json
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import numpy as np
from pydantic import Field, PrivateAttr

from dslog_dagster.core import progress
from dslog_dagster.errors import (
    ConfigurationError,
    LineageNotFoundError,
    LineageStorageError,
    UnsupportedArrayError,
)
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.io_managers.value_versions import (
    Retention,
    ValueSlot,
    partition_of,
    safe_part,
)
from dslog_dagster.io_managers.writer import LineageWriter, take_pending, tracked_step_of
from dslog_dagster.resources import DSLogResource, flush_stores
from dslog_dagster.settings import TrackingSettings
from dslog_dagster.tracked_step import FrameSource
from dslog_dagster.values import is_frame, is_pandas_frame

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dslog_dagster.core.store import ArrayRecord

__all__ = ["DSLogIOManager"]

_SETTINGS: dict[tuple[tuple[str, str | None], str], DSLogResource] = {}
_SETTINGS_LOCK = threading.Lock()
_log = logging.getLogger(__name__)


class DSLogIOManager(dg.ConfigurableIOManager):
    """Stores NumPy arrays as .npy files, Spark DataFrames as Parquet with row ids, and the
    cell-level lineage of tracked steps (dagster/column_lineage too for frames).

    The lineage settings and the store come from `dslog`, a DSLogResource: pass the one the
    Definitions bind under "dslog", so the IO manager writes lineage where the query assets
    and checks read it, and the launchpad shows each setting once (under dslog). Without
    `dslog` the IO manager makes its own resource from lineage settings given as keywords
    (policy=, mode=, ...), which finds the store by the same rule (store_dir, $DSLOG_STORE,
    else .dslog in the instance storage directory). `base_dir` places values only.

    Works with tracked_asset, tracked_multi_asset and tracked_op; values of untracked assets
    are stored without lineage. Partitioned assets store one file per partition; a downstream
    step reading several partitions gets {partition: array}. (Plain text: Dagster shows this
    docstring in the launchpad.)

    Examples:
        >>> import dagster as dg
        >>> from dslog_dagster import DSLogResource
        >>> dslog = DSLogResource(policy="capture")
        >>> io_manager = DSLogIOManager(dslog=dslog, base_dir="data")
        >>> defs = dg.Definitions(assets=[], resources={"io_manager": io_manager, "dslog": dslog})
    """

    dslog: DSLogResource
    base_dir: str | None = Field(
        default=None,
        description=(
            "Where asset values are stored; default: the instance's storage directory. The "
            "lineage store is the dslog resource's, wherever the values are."
        ),
    )
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
    spark_shared_driver: bool = Field(
        default=False,
        description=(
            "Attach to the machine's shared Spark driver instead of starting a JVM in the "
            "step's process (as SparkSessionResource(shared_driver=True); use the same master "
            "and conf there)."
        ),
    )
    keep_last: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Value retention: keep the newest N versions of each asset value (None: no count "
            "rule). With keep_for_hours too, a version is kept when either rule keeps it. "
            "Neither set: every version is kept."
        ),
    )
    keep_for_hours: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Value retention: keep versions published less than this many hours ago (None: no "
            "age rule). The newest version, the one the latest materialization names and "
            "versions a running step reads are never removed."
        ),
    )
    resource_key: str = Field(
        default="dslog",
        description=(
            "Key of the DSLogResource this IO manager's dslog is bound under: settings edited "
            "for that resource in the launchpad apply to the IO manager too."
        ),
    )
    _instance_dir: str | None = PrivateAttr(default=None)
    _launched: DSLogResource | None = PrivateAttr(default=None)
    _settings_cache: dict[tuple[str, str | None], DSLogResource] = PrivateAttr(default_factory=dict)
    # (run id, step key, input name) -> the value version load_input read for it
    _reads: dict[tuple[str, str, str], str] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        # The lineage settings may be given as keywords (the IO manager then makes its own
        # DSLogResource from them), or as the resource itself; not both.
        settings = {k: data.pop(k) for k in list(data) if k in TrackingSettings.model_fields}
        if data.get("dslog") is None:
            data["dslog"] = DSLogResource(**settings)
        elif settings:
            msg = (
                f"DSLogIOManager got both `dslog` and lineage settings {sorted(settings)}: set "
                "them on the DSLogResource passed as `dslog`."
            )
            raise ConfigurationError(msg)
        super().__init__(**data)

    @classmethod
    def from_resource(cls, dslog: DSLogResource, base_dir: str | None = None) -> "DSLogIOManager":
        """The IO manager of ``dslog`` (the same as ``DSLogIOManager(dslog=dslog, ...)``)."""
        return cls(dslog=dslog, base_dir=base_dir)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        if context.instance is not None:
            self._instance_dir = context.instance.storage_directory()
        # Settings edited in the launchpad for the `dslog` resource are in the run config only
        # (Dagster builds a nested resource from its defaults): apply them here too, so each
        # setting has one place in the launchpad and it governs capture as well.
        run = context.run
        resources: Any = (run.run_config or {}).get("resources") if run is not None else None
        edits: Any = ((resources or {}).get(self.resource_key) or {}).get("config")
        if edits:
            own = {name: getattr(self.dslog, name) for name in DSLogResource.model_fields}
            self._launched = DSLogResource(**{**own, **edits})

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        flush_stores()  # the run's group-committed lineage on disk before the run ends

    @property
    def _resource(self) -> DSLogResource:
        """The resource's settings, with this run's launchpad edits of it."""
        return self._launched if self._launched is not None else self.dslog

    def _base(self) -> Path:
        if self.base_dir:
            return Path(self.base_dir)
        if self._instance_dir:
            return Path(self._instance_dir)
        return Path.cwd()

    def _store_base(self) -> Path:
        """Where the resource's default store lives: the instance storage directory (what the
        query assets and checks use too), or the working directory outside a run."""
        return Path(self._instance_dir) if self._instance_dir else Path.cwd()

    def tracking_settings(self) -> dict[str, Any]:
        """The lineage settings of this IO manager's resource (as keyword arguments)."""
        return self._resource.tracking_settings()

    def dslog_settings(self) -> DSLogResource:
        """The lineage settings the tracked decorators read (policy, mode, reuse), with the
        store directory resolved (by the resource's rule, against the instance's storage)."""
        # Built once per store base and $DSLOG_STORE: a resource's pydantic init costs
        # milliseconds, and every tracked step and output asks for these settings.
        key = (str(self._store_base()), os.environ.get("DSLOG_STORE"))
        cached = self._settings_cache.get(key)
        if cached is None:
            res = self._resource
            fields = {**res.tracking_settings(), "query_engine": res.query_engine}
            # Dagster builds a new IO manager object for every run, so the settings are also
            # kept process-wide, keyed by every field: two DSLogResource inits cost ~10 ms.
            shared = (key, json.dumps(fields, sort_keys=True, default=str))
            cached = _SETTINGS.get(shared)
            if cached is None:
                cached = DSLogResource(
                    **{**fields, "store_dir": str(res.resolve_store_dir(key[0]))}
                )
                with _SETTINGS_LOCK:
                    _SETTINGS[shared] = cached
                    while len(_SETTINGS) > 64:
                        _SETTINGS.pop(next(iter(_SETTINGS)))
            self._settings_cache[key] = cached
        return cached

    # ------------------------------------------------------------------ where values live
    def retention(self) -> Retention:
        """The value retention of this IO manager (:class:`~.value_versions.Retention`)."""
        hours = self.keep_for_hours
        return Retention(
            keep_last=self.keep_last,
            keep_for_s=None if hours is None else hours * 3600.0,
        )

    def _asset_slot(self, key: dg.AssetKey, partition: str | None) -> ValueSlot:
        parts = [safe_part(p) for p in key.path]
        if partition is None:
            return ValueSlot(self._base().joinpath(*parts))
        return ValueSlot(self._base().joinpath(*parts, safe_part(partition)))

    def _op_slot(self, run_id: str, step_key: str, output: str) -> ValueSlot:
        return ValueSlot(
            self._base() / "runs" / safe_part(run_id) / safe_part(step_key) / safe_part(output)
        )

    def _output_slot(
        self, context: dg.OutputContext
    ) -> tuple[ValueSlot, dg.AssetKey | None, str | None]:
        """The output's slot, asset key and partition key."""
        if context.has_asset_key:
            pk = None
            if context.has_asset_partitions:
                keys = context.asset_partition_keys
                pk = keys[0] if len(keys) == 1 else None
                if pk is None:
                    msg = f"DSLogIOManager stores one partition per step, got {len(keys)}."
                    raise UnsupportedArrayError(msg)
            return self._asset_slot(context.asset_key, pk), context.asset_key, pk
        return self._op_slot(context.run_id, context.step_key, context.name), None, None

    # ------------------------------------------------------------------ storing
    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if is_frame(obj):
            self._handle_frame(context, obj)
            return
        if is_pandas_frame(obj):
            self._handle_pandas(context, obj)
            return
        arr = np.asarray(obj)
        if arr.dtype == object or arr.dtype.kind in "OUSV":
            msg = (
                "DSLogIOManager stores NumPy arrays and DataFrames; output "
                f"`{context.name}` of step "
                f"`{context.step_key}` is a `{type(obj).__name__}`. Use with_lineage(<your IO "
                "manager>) for other types."
            )
            raise UnsupportedArrayError(msg)
        slot, key, pk = self._output_slot(context)
        pending = self._named_reads(context, take_pending(context))
        writer = LineageWriter(self.dslog_settings(), self._store_base())
        # the lineage's segment is staged and flushed while the value is written; it is
        # published (and its directories flushed) only once the value is stored
        job = writer.start(context, pending, arr.shape, arr.dtype, background=True, values=arr)
        tmp = None
        try:
            tmp = slot.staging(".npy")
            with tmp.open("wb") as f:
                np.save(f, arr, allow_pickle=False)
            md = job.finish()  # the lineage commits first; a failure leaves no new version
        except BaseException:
            job.abort()
            if tmp is not None:
                slot.discard(tmp)
            raise
        path = self._publish(context, slot, tmp, ".npy", key, pk)
        md = {
            "path": dg.MetadataValue.path(str(path)),
            m.SHAPE: dg.MetadataValue.text(str(arr.shape)),
        } | md
        context.add_output_metadata(md)

    def _handle_frame(self, context: dg.OutputContext, obj: Any) -> None:
        """Store a Spark DataFrame output with its row ids, then its lineage, then publish."""
        from dslog_dagster.io_managers.spark_frames import stage_frame

        slot, key, pk = self._output_slot(context)
        pending = self._named_reads(context, take_pending(context))
        cap = pending.frame if pending is not None else None
        tmp = None
        try:
            tmp = slot.staging(".parquet")
            # a captured output is stored with the capture's row ids: the ones its lineage names
            what = key.to_user_string() if key is not None else context.name
            with progress.phase(f"storing frame `{what}`", sink=context.log) as ph:
                info = stage_frame(cap if cap is not None else obj, tmp)
                ph.note(f"{info.rows:,} rows, {len(info.schema)} columns")
            writer = LineageWriter(self.dslog_settings(), self._store_base())
            md = writer.write_frame(context, pending, info.rows, info.lineage_schema)
        except BaseException:
            if tmp is not None:
                slot.discard(tmp)
            raise
        finally:
            if cap is not None:
                cap.release()
        path = self._publish(context, slot, tmp, ".parquet", key, pk)
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path))} | md)

    def _handle_pandas(self, context: dg.OutputContext, obj: Any) -> None:
        """Store a pandas DataFrame output as one Parquet file with its row ids, then its
        lineage (with the frame's schema), then publish."""
        from dslog_dagster.io_managers.pandas_frames import schema_of, write_pandas

        slot, key, pk = self._output_slot(context)
        pending = self._named_reads(context, take_pending(context))
        tmp = None
        try:
            tmp = slot.staging(".parquet")
            write_pandas(obj, tmp)
            writer = LineageWriter(self.dslog_settings(), self._store_base())
            md = writer.write_frame(context, pending, len(obj), schema_of(obj))
        except BaseException:
            if tmp is not None:
                slot.discard(tmp)
            raise
        path = self._publish(context, slot, tmp, ".parquet", key, pk)
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path))} | md)

    def _publish(
        self,
        context: dg.OutputContext,
        slot: ValueSlot,
        tmp: Path,
        ext: str,
        key: dg.AssetKey | None,
        pk: str | None,
    ) -> Path:
        """Rename the staged value to this run's version, then apply retention (a retention
        failure is logged: the value and its lineage are stored)."""
        retention = self.retention()
        path = slot.publish(tmp, context.run_id, ext, retention.clock)
        if not retention.keeps_all:
            protect = {context.run_id}
            try:
                if key is not None:
                    latest = _latest_run(context, key, pk)
                    if latest is not None:
                        protect.add(latest)
                slot.apply(retention, protect)
            except Exception as e:  # housekeeping; never fail a stored step for it
                context.log.warning(f"dslog: value retention of `{slot.stem}` failed: {e}")
        return path

    def _named_reads(self, context: dg.OutputContext, pending: Any) -> Any:
        """``pending`` with each input's version set to the value version loaded for it, so
        the lineage names exactly the data the step read."""
        if pending is None or not pending.inputs:
            return pending
        reads = self._reads
        fixed = []
        for ref in pending.inputs:
            read = reads.get((context.run_id, context.step_key, ref.arg))
            fixed.append(ref if read is None else dataclasses.replace(ref, version=read))
        pending.inputs = tuple(fixed)
        return pending

    # ------------------------------------------------------------------ loading
    def load_input(self, context: dg.InputContext) -> Any:
        if context.has_asset_key:
            key = context.asset_key
            if context.has_asset_partitions:
                keys = context.asset_partition_keys
                if len(keys) == 1:
                    return self._load_input_version(context, key, keys[0])
                return {pk: self._load_input_version(context, key, pk, offer=False) for pk in keys}
            return self._load_input_version(context, key, None)
        up = context.upstream_output
        if up is None:
            msg = f"DSLogIOManager cannot load input `{context.name}`: it has no upstream output."
            raise LineageStorageError(msg)
        slot = self._op_slot(up.run_id, up.step_key, up.name)
        return self._load_from(context, slot, up.run_id, offer=True)

    def _load_input_version(
        self, context: dg.InputContext, key: dg.AssetKey, pk: str | None, offer: bool = True
    ) -> Any:
        return self._load_from(
            context, self._asset_slot(key, pk), _latest_run(context, key, pk), offer
        )

    def _load_from(
        self, context: dg.InputContext, slot: ValueSlot, version: str | None, offer: bool
    ) -> Any:
        """Load ``version`` of ``slot`` (``None``: unknown, e.g. loaded outside a run: the newest
        published), or a value file written before versioning."""
        if version is None or slot.find(version) is None:
            published = slot.versions()
            if not published:
                legacy = slot.legacy()
                if legacy is not None:
                    _info(
                        context,
                        f"dslog: `{legacy}` is a value file from before versioned values; "
                        "reading it (the next materialization stores versioned values).",
                    )
                    return self._read(context, legacy, None, offer)
            elif version is None:
                version = max(published, key=lambda v: (v[2], v[0]))[0]
        if version is None:
            msg = f"No stored value at `{slot.stem}`; materialize the upstream asset first."
            raise LineageNotFoundError(msg)
        step = _step_ids(context)
        if offer and step is not None and context.has_input_name:
            with _SETTINGS_LOCK:
                self._reads[(*step, context.name)] = version
        lease = slot.lease(version)
        try:
            path = slot.locate(version)
            return self._read(context, path, lease, offer)
        except BaseException:
            slot.release(lease)
            raise

    def _read(
        self,
        context: dg.InputContext | None,
        path: Path,
        lease: Path | None,
        offer: bool,
        row_ids: bool = False,
    ) -> Any:
        """The value at ``path``; an array's lease ends once it is in memory, a frame's when
        the DataFrame is collected (Spark reads its files lazily)."""
        if path.suffix == ".parquet" and path.is_file():  # pandas: one file; Spark: a directory
            from dslog_dagster.io_managers.pandas_frames import read_pandas

            try:
                return read_pandas(path)
            finally:
                if lease is not None:
                    ValueSlot.release(lease)
        if path.suffix == ".parquet":
            df = self._load_frame(context, path, offer, row_ids)
            if lease is not None:
                weakref.finalize(df, ValueSlot.release, lease)
            return df
        try:
            return self._load(path)
        finally:
            if lease is not None:
                ValueSlot.release(lease)

    def load_value(
        self,
        asset_key: "dg.AssetKey | Sequence[str] | str",
        version: str,
        partition: str | None = None,
        *,
        row_ids: bool = False,
    ) -> Any:
        """The stored value of ``asset_key`` (partition) materialized by run ``version`` (the
        version the lineage store records for it), e.g. to compare two materializations.
        ``row_ids``: a Spark frame keeps its row-id column (what its lineage names).

        Raises:
            ValueExpiredError: retention removed that version (raise ``keep_last`` or
                ``keep_for_hours`` to keep more).
            LineageNotFoundError: that run stored no value here.
        """
        if isinstance(asset_key, str):
            key = dg.AssetKey.from_user_string(asset_key)
        elif isinstance(asset_key, dg.AssetKey):
            key = asset_key
        else:
            key = dg.AssetKey(list(asset_key))
        slot = self._asset_slot(key, partition)
        lease = slot.lease(version)
        try:
            return self._read(None, slot.locate(version), lease, offer=False, row_ids=row_ids)
        except BaseException:
            slot.release(lease)
            raise

    def value_loader(self, *, frames: bool = False) -> "Callable[[ArrayRecord], Any]":
        """The stored NumPy value of an array version of an asset (``None``: an op output, a
        DataFrame, or a version not kept here): what explaining a change and on-demand
        lineage read (:data:`dslog_dagster.core.on_demand.ValueLoader`).

        ``frames``: DataFrames too, what re-running an on-demand step needs: pandas frames,
        and Spark frames *with* their row-id column (read lazily, by the active session).
        """

        def load(rec: "ArrayRecord") -> Any:
            if rec.asset_key is None or rec.version is None:
                return None
            partition = partition_of(rec.asset_key, rec.name)
            try:
                value = self.load_value(rec.asset_key, rec.version, partition, row_ids=frames)
            except LineageNotFoundError:  # not stored here, or expired (a subclass)
                return None
            if isinstance(value, np.ndarray) or (
                frames and (is_pandas_frame(value) or is_frame(value))
            ):
                return value
            return None

        return load

    def _load_frame(
        self, context: dg.InputContext | None, path: Path, offer: bool, row_ids: bool = False
    ) -> Any:
        """An ordinary DataFrame for user code; the frame with its row ids goes to the tracked
        step (:class:`~dslog_dagster.tracked_step.FrameSource`), or is the value (``row_ids``)."""
        from pyspark.sql import SparkSession

        from dslog_dagster.io_managers.spark_frames import load_frame
        from dslog_dagster.spark.rowid import ROW_ID
        from dslog_dagster.spark.session import get_session

        # the running session (e.g. SparkSessionResource's) as it is: get_session would also
        # re-apply this IO manager's SQL conf to it
        spark = SparkSession.getActiveSession() or get_session(
            self.spark_master, self.spark_conf, shared=self.spark_shared_driver
        )
        with_ids, rows = load_frame(spark, path)
        step = tracked_step_of(context, attach=True) if offer and context is not None else None
        if step is not None and context is not None:  # None: loaded outside a run
            step.offer_frame_input(context.name, FrameSource(with_ids, rows, str(path)))
        return with_ids if row_ids else with_ids.drop(ROW_ID)

    @staticmethod
    def _load(path: Path) -> np.ndarray:
        try:
            return np.load(path, allow_pickle=False)  # type: ignore[no-any-return]
        except FileNotFoundError as e:
            msg = f"No stored array at `{path}`; materialize the upstream asset first."
            raise LineageStorageError(msg) from e


def _latest_run(
    context: dg.InputContext | dg.OutputContext, key: dg.AssetKey, pk: str | None
) -> str | None:
    """Run id of the latest materialization Dagster records for ``key`` (partition ``pk``):
    the version whose lineage committed last. ``None`` without an instance or a record.

    Unpartitioned inside a step: the step's cached upstream record (the one the tracked step
    names in its lineage too); otherwise the instance's event log.
    """
    if pk is None and isinstance(context, dg.InputContext):
        try:
            info = context.step_context.maybe_fetch_and_get_input_asset_version_info(key)
        except Exception:  # outside a run, or a private API moved: ask the instance
            info = None
        if info is not None and info.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            return info.run_id
    instance = _instance_of(context)
    if instance is None:
        return None
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[pk] if pk else None), limit=1
    ).records
    return records[0].run_id if records else None


def _instance_of(context: dg.InputContext | dg.OutputContext) -> dg.DagsterInstance | None:
    try:
        return context.step_context.instance
    except dg.DagsterInvariantViolationError:
        pass
    if isinstance(context, dg.InputContext):
        try:
            return context.instance
        except dg.DagsterInvariantViolationError:
            return None
    return None


def _step_ids(context: dg.InputContext) -> tuple[str, str] | None:
    """(run id, step key) of the step loading ``context``'s input; ``None`` outside a run."""
    try:
        step_context = context.step_context
    except dg.DagsterInvariantViolationError:
        return None
    return step_context.run_id, step_context.step.key


def _info(context: dg.InputContext, message: str) -> None:
    try:
        context.log.info(message)
    except dg.DagsterInvariantViolationError:  # loaded outside a run
        _log.info(message)
