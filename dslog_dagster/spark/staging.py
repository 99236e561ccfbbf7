"""Where a capture's pass writes its output: staging directories and the staged files.

The capture's one pass writes the output's rows (with ``MID`` and the slot columns) to a
staging directory and compresses the row lineage from those files
(:mod:`~dslog_dagster.spark.capture`); storing the capture then moves the files into place
(:func:`~dslog_dagster.io_managers.spark_frames.write_frame`) instead of writing the rows
again. The id tap's files (:mod:`~dslog_dagster.spark.idtap`) go to such a directory too.

Both need a directory the executors write and the driver reads at the same path. With a local
master that is any folder of this machine (the executors run in the driver's JVM). On a
cluster it is :data:`SHARED_DIR_CONF`, which the user sets to a folder mounted at the same
path on the driver and on every executor's host (a shared filesystem, or any folder when the
whole standalone cluster runs on one host). Without it, a cluster capture marks and caches its
output and finds failed groups' ids by a join instead: exact, but slower.

A wrong setting (a folder that is not shared) is never silently wrong: the pass counts the
output's rows on the executors as it writes them (a Spark ``Observation``), and the files
the driver reads must hold exactly those rows (:func:`check_staged_rows`); the tap's files
must account for every failed group's count or the join is used.

This module owns those directories: it makes them, remembers the ones not yet moved or
released and removes those when the process exits.
"""

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from dslog_dagster.errors import CaptureError, ConfigurationError
from dslog_dagster.spark.rowid import MID, PART_BITS, ROW_ID, dense_id

__all__ = [
    "SHARED_DIR_CONF",
    "STAGED_META",
    "CollectedOutput",
    "StagedOutput",
    "check_staged_rows",
    "new_staging_dir",
    "remove_staging_dir",
    "staged_files",
    "staging_base",
    "with_dense_ids",
]

SHARED_DIR_CONF = "spark.dslog.sharedDir"
"""Spark conf naming a folder at the same path on the driver and every executor's host, where
a cluster capture stages its output and the id tap writes (see the module)."""

STAGED_META = "_dslog_row_ids.json"
"""Side file of a frame stored with :data:`~dslog_dagster.spark.rowid.MID` instead of row ids:
the partition offsets that turn ``MID`` into dense ids (Spark skips files named ``_*``)."""

_STAGING: set[str] = set()
"""Staging directories of this process not yet moved or released (removed at exit)."""


@atexit.register
def _remove_staging() -> None:
    for path in list(_STAGING):
        shutil.rmtree(path, ignore_errors=True)
    _STAGING.clear()


def is_local(spark: SparkSession) -> bool:
    """Whether the session's executors run in this process's JVM (a local master)."""
    return str(spark.sparkContext.master).startswith("local")


def staging_base(spark: SparkSession) -> str | None:
    """The folder where executors' files for this process go: :data:`SHARED_DIR_CONF` when
    set, the temp folder with a local master, else None (a cluster without a shared folder).

    Raises:
        ConfigurationError: :data:`SHARED_DIR_CONF` is not an absolute path to a folder this
            process can write.
    """
    shared = spark.conf.get(SHARED_DIR_CONF, None)
    if not shared:
        return tempfile.gettempdir() if is_local(spark) else None
    if not os.path.isabs(shared) or not os.path.isdir(shared) or not os.access(shared, os.W_OK):
        msg = (
            f"Spark conf {SHARED_DIR_CONF}={shared!r} must be an absolute path to a folder this "
            "process can write, mounted at the same path on every executor's host; create it, "
            "or unset it to capture on the cluster without staging (slower)."
        )
        raise ConfigurationError(msg)
    return shared


def new_staging_dir(base: str | None = None) -> str:
    """A new staging directory (under ``base``, else the temp folder), removed at exit unless
    it is removed first."""
    path = tempfile.mkdtemp(prefix="dslog-capture-", dir=base)
    _STAGING.add(path)
    return path


def check_staged_rows(path: str, written: int, read: int) -> None:
    """Refuse staged files that do not hold every row the executors wrote.

    Raises:
        CaptureError: the driver read ``read`` rows from ``path`` where the executors wrote
            ``written``: the folder is not shared with them.
    """
    if written != read:
        msg = (
            f"The executors wrote {written} rows to {path} but this process reads {read}: the "
            f"folder is not the same on the executors' hosts. Set Spark conf "
            f"{SHARED_DIR_CONF} to a folder mounted at the same path on the driver and every "
            "executor's host, or unset it."
        )
        raise CaptureError(msg)


def remove_staging_dir(path: str) -> None:
    """Remove a staging directory (a capture released, or its pass discarded)."""
    shutil.rmtree(path, ignore_errors=True)
    _STAGING.discard(path)


@dataclass(frozen=True)
class StagedOutput:
    """A capture's output as written in its one pass: Parquet files with the user's columns,
    ``MID`` (partition << 33 | index) and the slot columns, plus the partition offsets that
    make ``MID`` dense row ids. :func:`~dslog_dagster.io_managers.spark_frames.write_frame`
    hard-links (or copies) the files to the asset's place instead of writing the rows again."""

    path: str
    offsets: tuple[int, ...]
    columns: tuple[str, ...]
    owned: bool  # a staging directory of the capture (deleted by ``release``)
    schema: Any = None  # the files' StructType (saves reading footers to infer it)

    def frames(self, read: Callable[[], DataFrame]) -> tuple[DataFrame, DataFrame]:
        """The output without and with ``ROW_ID``, from the staged files as ``read()`` gives
        them (the pass reads them at most once, for refetching too)."""
        df = read()
        # drop the few hidden columns rather than select the many user ones: every column
        # named costs JVM round trips
        names = self.schema.names if self.schema is not None else df.columns
        user = set(self.columns)
        hidden = [c for c in names if c not in user]
        with_id = df.withColumn(ROW_ID, dense_id(list(self.offsets)))
        return df.drop(*hidden), with_id.drop(*hidden)

    def visible(self) -> list[tuple[str, str]] | None:
        """The output's columns and their Spark types (``simpleString``), as :meth:`frames`
        gives them, from the recorded schema (no file read, no JVM call); ``None`` without
        one."""
        return None if self.schema is None else _visible(self.schema, self.columns)

    def read_local(self, columns: Sequence[str]) -> pa.Table:
        """``columns`` of every staged row and its dense ``ROW_ID``, read by this process with
        Arrow: the rows :meth:`frames` gives, without a Spark job or a frame to analyse (the
        driver reads these files anyway: the pass compressed the lineage from them).

        The files are named as the pass read them; each row's id is
        ``offsets[MID >> PART_BITS] + (MID & mask)``, as :func:`~dslog_dagster.spark.rowid.
        dense_id` computes it in Spark.

        Raises:
            CaptureError: a staged file holds a ``MID`` of a partition the pass did not count
                (the folder changed since the pass).
        """
        names = staged_files(self.path)
        if not names:
            msg = f"The staged output at {self.path} holds no file; capture the step again."
            raise CaptureError(msg)
        table = pa.concat_tables(
            [pq.read_table(os.path.join(self.path, n), columns=[*columns, MID]) for n in names]
        )
        return with_dense_ids(table, self.offsets, f"The staged output at {self.path}")


def staged_files(path: str) -> list[str]:
    """The names of the Parquet files Spark's writer left in ``path``, sorted (not its
    ``_SUCCESS``, side files or hidden checksum files)."""
    return sorted(
        n for n in os.listdir(path) if n.endswith(".parquet") and not n.startswith((".", "_"))
    )


def _visible(schema: Any, columns: Sequence[str]) -> list[tuple[str, str]]:
    """``schema``'s fields named in ``columns``, in the schema's order, with their Spark types
    (``simpleString``)."""
    user = set(columns)
    return [(f.name, f.dataType.simpleString()) for f in schema.fields if f.name in user]


def with_dense_ids(table: pa.Table, offsets: Sequence[int], what: str) -> pa.Table:
    """``table`` (rows of a marked output, with ``MID``) with ``MID`` replaced by the dense
    ``ROW_ID`` ``offsets[MID >> PART_BITS] + (MID & mask)``, as
    :func:`~dslog_dagster.spark.rowid.dense_id` computes it in Spark.

    Raises:
        CaptureError: a row of a partition the pass did not count (``what`` changed since).
    """
    mid = table.column(MID).to_numpy()
    part = mid >> PART_BITS
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    if len(part) and int(part.max()) >= len(starts):
        msg = (
            f"{what} holds rows of partition {int(part.max())}, but its pass counted "
            f"{len(starts)}: the folder changed; capture the step again."
        )
        raise CaptureError(msg)
    ids = starts[part] + (mid & ((1 << PART_BITS) - 1))
    return table.drop_columns([MID]).append_column(ROW_ID, pa.array(ids, pa.int64()))


@dataclass(frozen=True)
class CollectedOutput:
    """A capture's output collected into this process by its pass instead of staged
    (``capture_frame_outputs(collect=True)``, for outputs known to be small): the rows with
    the user's columns, ``MID`` and the slot columns, and the partition offsets that make
    ``MID`` dense row ids. Spark writes no file and commits nothing, ~0.2 s of a small
    output's pass (the 10^5-row re-run of the on-demand bench)."""

    table: pa.Table
    offsets: tuple[int, ...]
    columns: tuple[str, ...]
    schema: Any  # the collected frame's StructType
    spark: Any  # the session its local frames are made in

    def visible(self) -> list[tuple[str, str]]:
        """The output's columns and their Spark types (``simpleString``), from its schema."""
        return _visible(self.schema, self.columns)

    def read_local(self, columns: Sequence[str]) -> pa.Table:
        """``columns`` of every row and its dense ``ROW_ID`` (as :meth:`StagedOutput.
        read_local`)."""
        return with_dense_ids(
            self.table.select([*columns, MID]), self.offsets, "The collected output"
        )

    def frames(self) -> tuple[DataFrame, DataFrame]:
        """The output without and with ``ROW_ID``, as local frames of the collected rows.

        Raises:
            CaptureError: Spark did not take every row.
        """
        with_id = self._local(self.read_local(list(self.columns)))
        return with_id.drop(ROW_ID), with_id

    def marked(self) -> DataFrame:
        """Every collected column (``MID`` and the slots too) as a local frame."""
        return self._local(self.table)

    def _local(self, table: pa.Table) -> DataFrame:
        from dslog_dagster.spark.stored_subset import local_frame

        frame = local_frame(self.spark, table)
        if frame is None:
            msg = "Spark did not take every collected output row; capture without collect=True."
            raise CaptureError(msg)
        return frame
