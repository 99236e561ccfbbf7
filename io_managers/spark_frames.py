"""DataFrame assets on disk: Parquet with a dense, stable row-id column.

Lineage names the rows of a DataFrame asset by position, so every stored frame carries the
column :data:`~dslog_dagster.spark.rowid.ROW_ID` (bigint 0..n-1, no gaps). :func:`write_frame`
keeps the ids a frame already has (a :class:`~dslog_dagster.spark.capture.FrameCapture`'s
``frame_with_row_id``, whose lineage uses them) and numbers any other frame in its current
order. :func:`read_frame` gives user code an ordinary DataFrame (ids dropped), or the frame with
ids for a lineage capture. :class:`SparkFrameIOManager` wraps both for Dagster.
"""

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field
from pyspark.sql import functions as F

from dslog_dagster.errors import LineageStorageError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.spark.fields import leaf_schema
from dslog_dagster.spark.resource import SparkSessionResource
from dslog_dagster.spark.rowid import MID, ROW_ID, dense_id, with_row_id
from dslog_dagster.spark.staging import STAGED_META, staged_files

__all__ = [
    "ROW_ID",
    "FrameInfo",
    "SparkFrameIOManager",
    "load_frame",
    "read_frame",
    "stage_frame",
    "store_frame",
    "write_frame",
]

SIDECAR = "_dslog_frame.json"
"""File inside a stored frame's directory with its row count and schema (Spark skips files
starting with ``_``), so a later load knows the rows without a counting job."""


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """What :func:`write_frame` stored: rows, visible columns and their Spark types, and the
    lineage columns (``leaves``: a struct's leaf fields are columns of their own, see
    :mod:`~dslog_dagster.spark.fields`; empty: the visible columns)."""

    path: str
    rows: int
    schema: tuple[tuple[str, str], ...]
    leaves: tuple[tuple[str, str], ...] = ()
    files_schema: str | None = None
    """The Parquet files' whole schema (row ids and lineage columns included) as Spark's
    JSON, recorded in the side-car so that a load needs no schema-inference job."""

    @property
    def lineage_schema(self) -> tuple[tuple[str, str], ...]:
        """``(lineage column, type)``, as the store records the frame's array."""
        return self.leaves or self.schema

    @property
    def shape(self) -> tuple[int, int]:
        """The frame as a lineage array: ``(rows, lineage columns)``."""
        return (self.rows, len(self.lineage_schema))

    @property
    def columns(self) -> tuple[str, ...]:
        """The lineage columns, in order (column ``j`` of the lineage array)."""
        return tuple(n for n, _ in self.lineage_schema)


def write_frame(df: Any, path: str | os.PathLike[str], *, compression: str = "zstd") -> FrameInfo:
    """Store ``df`` (a DataFrame, or a ``FrameCapture``) as Parquet with dense row ids.

    The directory at ``path`` is replaced. Rows are written in row-id order.
    """
    from dslog_dagster.spark.frame_capture import FrameCapture

    if isinstance(df, FrameCapture) and _can_move(df, path, compression):
        return _move_staged(df, os.fspath(path))
    # a capture's rows and numbered frames already follow their ids within each partition
    # (ids are partition offset + position), so only a frame with foreign ids is sorted
    if isinstance(df, FrameCapture):
        frame, n, cached, ordered = df.frame_with_row_id, df.n_rows, None, True
    elif ROW_ID in df.columns:
        frame, n, cached, ordered = df, None, None, False
    else:
        ids = with_row_id(df)
        frame, n, cached, ordered = ids.frame, ids.n, ids, True
    target = os.fspath(path)
    try:
        out = frame if ordered else frame.sortWithinPartitions(ROW_ID)
        out.write.mode("overwrite").option("compression", compression).parquet(target)
    except Exception as e:
        msg = f"Could not write the DataFrame to `{target}`: {e}"
        raise LineageStorageError(msg) from e
    finally:
        if cached is not None:
            cached.release()
    if n is None:
        n = frame.count()
    visible = [f for f in frame.schema.fields if f.name != ROW_ID]
    schema = tuple((f.name, f.dataType.simpleString()) for f in visible)
    return FrameInfo(target, int(n), schema, tuple(leaf_schema(visible)), frame.schema.json())


def _can_move(cap: Any, path: str | os.PathLike[str], compression: str) -> bool:
    """A capture's staged files can become the stored frame: they are local, zstd, and the
    target is a local path."""
    target = os.fspath(path)
    return (
        cap.staged is not None
        and os.path.isdir(cap.staged.path)
        and compression == "zstd"
        and "://" not in target
    )


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # Parquet files are never changed in place: share them
    except OSError:
        shutil.copy2(src, dst)


def _move_staged(cap: Any, target: str) -> FrameInfo:
    """Store a capture by hard-linking (or copying) the files its pass wrote (rows, ``MID``,
    slot columns) into ``target`` with the offsets that make ``MID`` dense row ids: no second
    write of the rows. The capture keeps reading its own staging files (until ``release``),
    so the stored directory may be renamed or replaced freely."""
    staged = cap.staged
    try:
        if os.path.lexists(target):
            shutil.rmtree(target)
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        shutil.copytree(staged.path, target, copy_function=_link_or_copy)
        meta = {"offsets": list(staged.offsets), "columns": list(staged.columns)}
        with open(os.path.join(target, STAGED_META), "w") as fh:
            json.dump(meta, fh)
    except OSError as e:
        msg = f"Could not store the DataFrame at `{target}`: {e}"
        raise LineageStorageError(msg) from e
    # the files' schema (the capture's frames are made only when used)
    user = set(staged.columns)
    fields = staged.schema.fields if staged.schema is not None else cap.frame.schema.fields
    visible = [f for f in fields if f.name in user]
    schema = tuple((f.name, f.dataType.simpleString()) for f in visible)
    files = staged.schema.json() if staged.schema is not None else None
    return FrameInfo(target, int(cap.n_rows), schema, tuple(leaf_schema(visible)), files)


def read_frame(spark: Any, path: str | os.PathLike[str], *, row_id: bool = False) -> Any:
    """Load a frame stored by :func:`write_frame`.

    Args:
        spark: the SparkSession.
        path: the frame's directory.
        row_id: keep the ``ROW_ID`` column (for ``capture_frames``); user code gets the frame
            without it.
    """
    return _read(spark, path, row_id, _side_car(path))


def _side_car(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The stored frame's side-car (:data:`SIDECAR`), or None when it has none or it cannot
    be read as a JSON object."""
    with contextlib.suppress(OSError, ValueError):
        side = json.loads((Path(path) / SIDECAR).read_text())
        if isinstance(side, dict):
            return side
    return None


def _read(
    spark: Any, path: str | os.PathLike[str], row_id: bool, side: dict[str, Any] | None
) -> Any:
    """:func:`read_frame` with the side-car already read (``side``)."""
    known = _files_schema(os.fspath(path), side)
    reader = spark.read if known is None else spark.read.schema(known)
    df = reader.parquet(os.fspath(path))
    meta_path = os.path.join(os.fspath(path), STAGED_META)
    if ROW_ID not in df.columns and MID in df.columns and os.path.exists(meta_path):
        # stored from a capture's pass: dense ids from MID and the partition offsets
        with open(meta_path) as fh:
            meta = json.load(fh)
        user = [F.col("`" + c.replace("`", "``") + "`") for c in meta["columns"]]
        if row_id:
            user.append(dense_id([int(o) for o in meta["offsets"]]).alias(ROW_ID))
        return df.select(*user)
    if ROW_ID not in df.columns:
        msg = (
            f"`{path}` has no `{ROW_ID}` column, so lineage cannot name its rows; store frames "
            "with `write_frame`."
        )
        raise LineageStorageError(msg)
    return df if row_id else df.drop(ROW_ID)


def _nullable(t: Any) -> Any:
    """A Spark type JSON (``StructType.jsonValue``) with every field and element nullable, as
    Spark reads Parquet: a schema claiming non-null must never meet a null."""
    if isinstance(t, dict):
        out = {k: _nullable(v) for k, v in t.items()}
        for flag in ("nullable", "containsNull", "valueContainsNull"):
            if flag in out:
                out[flag] = True
        return out
    if isinstance(t, list):
        return [_nullable(v) for v in t]
    return t


def _files_schema(path: str, side: dict[str, Any] | None) -> Any:
    """The stored files' Spark schema from the side-car ``side``, or None (Spark infers it,
    one job).

    It is used only when it agrees with the schema one file's footer gives (read here,
    converted from Arrow's types): a side-car that names another column (which Spark would
    fill with nulls) or another type is ignored, never trusted."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    if side is None or not isinstance(side.get("files_schema"), str):
        return None
    try:
        recorded = StructType.fromJson(_nullable(json.loads(side["files_schema"])))
        names = staged_files(os.fspath(path))
        if not names:
            return None
        part = os.path.join(path, names[0])
        footer = StructType.fromJson(_nullable(from_arrow_schema(pq.read_schema(part)).jsonValue()))
    # a damaged entry, an unreadable footer (ArrowInvalid is a ValueError), a type Arrow or
    # PySpark cannot map: Spark infers the schema instead
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError):
        return None
    return recorded if recorded == footer else None


def stage_frame(df: Any, path: str | os.PathLike[str]) -> FrameInfo:
    """:func:`write_frame` to a new directory ``path``, plus the side-car of rows and schema.

    The caller publishes it by renaming ``path`` (the versioned values of
    :mod:`~dslog_dagster.io_managers.value_versions`), or removes it.

    Raises:
        LineageStorageError: the frame could not be written.
    """
    info = write_frame(df, path)
    try:
        side: dict[str, Any] = {"rows": info.rows, "schema": [list(c) for c in info.schema]}
        if info.files_schema is not None:
            side["files_schema"] = info.files_schema
        (Path(path) / SIDECAR).write_text(json.dumps(side))
    except OSError as e:
        msg = f"Could not write the DataFrame's side-car in `{path}`: {e}"
        raise LineageStorageError(msg) from e
    return info


def store_frame(df: Any, path: str | os.PathLike[str]) -> FrameInfo:
    """:func:`stage_frame` to a temporary sibling, renamed into place at ``path``.

    A reader never sees a half-written frame and a failed write leaves the previous frame
    intact.

    Raises:
        LineageStorageError: the frame could not be written or published.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    tmp = target.parent / f".{target.name}.{token}.tmp"
    old = target.parent / f".{target.name}.{token}.old"
    try:
        info = stage_frame(df, tmp)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    except OSError as e:
        msg = f"Could not publish the DataFrame at `{target}`: {e}"
        raise LineageStorageError(msg) from e
    finally:
        for leftover in (tmp, old):
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(leftover)
    return FrameInfo(str(target), info.rows, info.schema, info.leaves, info.files_schema)


def load_frame(spark: Any, path: str | os.PathLike[str]) -> tuple[Any, int | None]:
    """A stored frame *with* its row ids, and its row count from the side-car (``None`` when
    it was written without one)."""
    side = _side_car(path)
    df = _read(spark, path, True, side)
    rows = None
    with contextlib.suppress(ValueError, KeyError, TypeError):
        rows = int(side["rows"]) if side is not None else None
    return df, rows


class SparkFrameIOManager(dg.ConfigurableIOManager):
    """Stores Spark DataFrame assets as ``<base_dir>/<asset key path>.parquet`` with row ids.

    Outputs may be DataFrames or ``FrameCapture`` results (whose row ids the lineage uses).
    Inputs load as ordinary DataFrames (``row_id_inputs=True`` keeps the id column, e.g. for
    steps that call ``capture_frames`` themselves).
    """

    base_dir: str = Field(description="Directory of the stored frames.")
    spark: dg.ResourceDependency[SparkSessionResource]
    row_id_inputs: bool = Field(default=False, description="Load inputs with the row-id column.")

    def _path(self, context: Any) -> str:
        key = list(context.asset_key.path)
        if context.has_asset_partitions:
            key[-1] = f"{key[-1]}[{context.asset_partition_key}]"
        root = os.path.abspath(self.base_dir)
        path = os.path.abspath(os.path.join(root, *key) + ".parquet")
        if os.path.commonpath([root, path]) != root:
            msg = f"Asset key {key} would be stored outside `{root}`."
            raise LineageStorageError(msg)
        return path

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        info = write_frame(obj, self._path(context))
        context.add_output_metadata(
            {
                "path": dg.MetadataValue.path(info.path),
                m.ROW_COUNT: info.rows,
                m.COLUMN_SCHEMA: dg.TableSchema(
                    columns=[dg.TableColumn(n, t) for n, t in info.schema]
                ),
            }
        )

    def load_input(self, context: dg.InputContext) -> Any:
        return read_frame(self.spark.get_session(), self._path(context), row_id=self.row_id_inputs)
