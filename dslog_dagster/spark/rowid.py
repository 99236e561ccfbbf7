"""Dense, stable row ids (0..n-1) for DataFrames, computed without collecting rows.

Lineage names the rows of a DataFrame asset by position, so an asset is stored with a dense
row-id column. :func:`with_row_id` numbers the rows in their current partition order:
``monotonically_increasing_id`` gives ``(partition << 33) + index``; one small job counts the
rows per partition (a few integers reach the driver), and the dense id is the partition's
offset plus the index. The numbered rows are kept first (a local checkpoint, memory and
disk), so the numbering and every later use of the frame see the same rows in the same
order; and the frame's plan is a scan of them, which Spark counts as deterministic (a
persisted frame keeps ``monotonically_increasing_id`` in its plan, and the capture finds an
aggregation's scattered groups again only over deterministic plans).
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dslog_dagster.spark.jvm_bridge import java_frame

__all__ = ["FILTER_IDS", "ROW_ID", "RowIds", "rows_by_id", "with_row_id"]

ROW_ID = "__dslog_row_id"
"""Name of the row-id column of stored DataFrame assets (bigint, 0..n-1, no gaps)."""

MID = "__dslog_mid"
PART_BITS = 33


@dataclass(frozen=True)
class RowIds:
    """A frame with dense row ids, its row count, and the kept rows that keep the ids stable
    (persisted, or ``checkpointed``)."""

    frame: DataFrame
    n: int
    cached: DataFrame
    checkpointed: bool = False

    def release(self) -> None:
        """Drop the kept rows (the ids of a recomputed frame could differ)."""
        if self.checkpointed:
            # a local checkpoint is not in the cache manager: its blocks belong to its RDD
            java_frame(self.cached).queryExecution().analyzed().rdd().unpersist(False)
        else:
            self.cached.unpersist()


def _numbered(df: DataFrame) -> DataFrame:
    """``df`` with ``monotonically_increasing_id`` in column ``MID`` (``(partition << 33) +
    index in partition``)."""
    return df.withColumn(MID, F.monotonically_increasing_id())


def mark(df: DataFrame) -> DataFrame:
    """``df`` persisted with ``monotonically_increasing_id`` in column ``MID``."""
    return _numbered(df).persist(StorageLevel.MEMORY_AND_DISK)


def partition_offsets(counts: dict[int, int]) -> list[int]:
    """First dense id of every partition ``0..max`` from rows per partition."""
    top = max(counts, default=-1)
    return list(itertools.accumulate([counts.get(p, 0) for p in range(top + 1)], initial=0))


def dense_id(offsets: list[int]) -> Column:
    """The dense id ``offsets[partition] + index`` of a row of a :func:`mark` ed frame (one SQL
    expression: one call into the JVM, where building it from Columns costs one per literal)."""
    if len(offsets) <= 1:
        return F.lit(0).cast("bigint")
    table = ", ".join(f"CAST({o} AS BIGINT)" for o in offsets[:-1])
    mid = f"`{MID}`"
    return F.expr(
        f"CAST(element_at(array({table}), CAST(shiftright({mid}, {PART_BITS}) + 1 AS INT))"
        f" + ({mid} & {(1 << PART_BITS) - 1}) AS BIGINT)"
    )


def dense_ids(marked: DataFrame, offsets: list[int], name: str = ROW_ID) -> DataFrame:
    """``marked`` (see :func:`mark`) with dense ids ``offsets[partition] + index``."""
    return marked.withColumn(name, dense_id(offsets)).drop(MID)


def with_row_id(df: DataFrame, name: str = ROW_ID) -> RowIds:
    """``df`` with a dense row-id column ``name`` appended, and its row count.

    The rows are kept (a local checkpoint, memory and disk) so the ids stay stable until
    :meth:`RowIds.release`, and the frame's plan is deterministic (a scan of them).
    """
    marked = _numbered(df).localCheckpoint(eager=True)
    part = F.shiftright(F.col(MID), PART_BITS)
    counts = {int(r[0]): int(r[1]) for r in marked.groupBy(part.alias("p")).count().collect()}
    offsets = partition_offsets(counts)
    return RowIds(dense_ids(marked, offsets, name), offsets[-1], marked, checkpointed=True)


FILTER_IDS = 10_000
"""Up to this many ids, :func:`rows_by_id` finds the rows by an ``IN`` filter on their ids
(the ids in the plan); more, by a broadcast semijoin with a local frame of the ids."""


def rows_by_id(stored: DataFrame, ids: Sequence[int] | np.ndarray) -> DataFrame:
    """The rows of ``stored`` (a frame with :data:`ROW_ID`) whose id is in ``ids``, computed
    once and kept (a local checkpoint): what an on-demand re-run or a parameter search reads
    many times without scanning the stored frame again.

    Why not ``Column.isin`` and ``createDataFrame(list)``: the first crosses py4j once per id
    (a second per thousand ids), the second makes a Python-RDD frame whose first job starts
    Spark's Python workers (seconds on a small machine). Here the ids reach the JVM as one SQL
    expression or one Arrow table (a local relation), and the kept rows are a JVM-side frame.
    """
    picked = np.unique(np.asarray(ids, dtype=np.int64))
    if len(picked) <= FILTER_IDS:
        listed = ", ".join(str(int(r)) for r in picked) or "NULL"
        chosen = stored.filter(F.expr(f"`{ROW_ID}` IN ({listed})"))
    else:
        spark = stored.sparkSession
        keys = spark.createDataFrame(pa.table({ROW_ID: pa.array(picked, pa.int64())}))
        chosen = stored.join(F.broadcast(keys), on=ROW_ID, how="left_semi")
    return chosen.select(*[F.col(f"`{c}`") for c in stored.columns]).localCheckpoint(eager=True)
