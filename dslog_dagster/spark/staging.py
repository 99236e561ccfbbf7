"""Where a capture's pass writes its output: staging directories and the staged files.

On a local master the capture's one pass writes the output's rows (with ``MID`` and the slot
columns) to a driver-local staging directory and compresses the row lineage from those files
(:mod:`~dslog_dagster.spark.capture`); storing the capture then moves the files into place
(:func:`~dslog_dagster.io_managers.spark_frames.write_frame`) instead of writing the rows
again. This module owns those directories: it makes them, remembers the ones not yet moved or
released and removes those when the process exits.
"""

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from dslog_dagster.spark.rowid import ROW_ID, dense_id

__all__ = ["STAGED_META", "StagedOutput", "new_staging_dir", "remove_staging_dir"]

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


def new_staging_dir() -> str:
    """A new staging directory, removed at exit unless it is removed first."""
    path = tempfile.mkdtemp(prefix="dslog-capture-")
    _STAGING.add(path)
    return path


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
