"""``DSLogIOManager``: NumPy arrays and Spark DataFrames in files, with their lineage.

Array files (``base_dir`` defaults to the instance's storage directory):

* unpartitioned asset ``a/b`` -> ``<base_dir>/a/b.npy``;
* partition ``p`` of ``a/b`` -> ``<base_dir>/a/b/<p, percent-encoded>.npy``;
* op output (not an asset) -> ``<base_dir>/runs/<run_id>/<step_key>/<output>.npy``.

A Spark DataFrame takes the same path with ``.parquet`` instead of ``.npy``: a Parquet directory
with the dense row-id column the lineage names rows by, and a ``_dslog_frame.json`` side-car
(rows, schema), published atomically
(:func:`~dslog_dagster.io_managers.spark_frames.store_frame`). Loading gives user code an
ordinary DataFrame and offers the frame *with* ids to the tracked step
(:class:`~dslog_dagster.tracked_step.FrameSource`); see :mod:`dslog_dagster.spark.steps`.

The lineage itself is published by :mod:`~dslog_dagster.io_managers.writer` after the value is
stored; the lineage store defaults to ``<base_dir>/.dslog``
(:class:`~dslog_dagster.DSLogResource`).
"""

import contextlib
import json
import os
import threading
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
from pydantic import Field, PrivateAttr

from dslog_dagster.errors import LineageStorageError, UnsupportedArrayError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.io_managers.writer import LineageWriter, take_pending, tracked_step_of
from dslog_dagster.resources import DSLogResource
from dslog_dagster.settings import TrackingSettings
from dslog_dagster.tracked_step import FrameSource
from dslog_dagster.values import is_frame

__all__ = ["DSLogIOManager"]

_SETTINGS: dict[tuple[tuple[str, str | None], str], DSLogResource] = {}
_SETTINGS_LOCK = threading.Lock()


def _safe_part(text: str) -> str:
    """A path component that cannot escape its directory (partition keys may hold ``/``)."""
    part = urllib.parse.quote(text, safe="")
    return part.replace(".", "%2E") if set(part) <= {"."} else part


class DSLogIOManager(dg.ConfigurableIOManager, TrackingSettings):
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
        return cls(base_dir=base_dir, **dslog.tracking_settings())

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
            # the tracking settings (a resource field that only concerns queries, not
            # storing, keeps the resource's default)
            fields = self.tracking_settings()
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
        pending = take_pending(context)
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
            m.SHAPE: dg.MetadataValue.text(str(arr.shape)),
        }
        md |= job.finish()
        context.add_output_metadata(md)

    def _handle_frame(self, context: dg.OutputContext, obj: Any) -> None:
        """Store a Spark DataFrame output with its row ids, then its lineage."""
        from dslog_dagster.io_managers.spark_frames import store_frame

        path = self._output_path(context, ".parquet")
        pending = take_pending(context)
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

    def _load_stored(self, context: dg.InputContext, npy: Path, offer: bool = True) -> Any:
        """The array stored at ``npy`` or the DataFrame beside it (``.parquet``), whichever is
        newer (an asset may change kind between runs)."""
        frame = npy.with_suffix(".parquet")
        if frame.is_dir() and (not npy.exists() or frame.stat().st_mtime >= npy.stat().st_mtime):
            return self._load_frame(context, frame, offer)
        return self._load(npy)

    def _load_frame(self, context: dg.InputContext, path: Path, offer: bool) -> Any:
        """An ordinary DataFrame for user code; the frame with its row ids goes to the tracked
        step (:class:`~dslog_dagster.tracked_step.FrameSource`)."""
        from pyspark.sql import SparkSession

        from dslog_dagster.io_managers.spark_frames import load_frame
        from dslog_dagster.spark.rowid import ROW_ID
        from dslog_dagster.spark.session import get_session

        # the running session (e.g. SparkSessionResource's) as it is: get_session would also
        # re-apply this IO manager's SQL conf to it
        spark = SparkSession.getActiveSession() or get_session(self.spark_master, self.spark_conf)
        with_ids, rows = load_frame(spark, path)
        step = tracked_step_of(context, attach=True) if offer else None
        if step is not None:  # None: loaded outside a run
            step.offer_frame_input(context.name, FrameSource(with_ids, rows, str(path)))
        return with_ids.drop(ROW_ID)

    def load_input(self, context: dg.InputContext) -> Any:
        if context.has_asset_key:
            key = context.asset_key
            if context.has_asset_partitions:
                keys = context.asset_partition_keys
                if len(keys) == 1:
                    return self._load_stored(context, self._asset_path(key, keys[0]))
                return {
                    pk: self._load_stored(context, self._asset_path(key, pk), offer=False)
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
