"""Dense, stable row ids (0..n-1) for DataFrames, computed without collecting rows.

Lineage names the rows of a DataFrame asset by position, so an asset is stored with a dense
row-id column. :func:`with_row_id` numbers the rows in their current partition order:
``monotonically_increasing_id`` gives ``(partition << 33) + index``; one small job counts the
rows per partition (a few integers reach the driver), and the dense id is the partition's
offset plus the index. The frame is persisted first, so the numbering and every later use of
the frame see the same rows in the same order.
"""

import itertools
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["ROW_ID", "RowIds", "with_row_id"]

ROW_ID = "__dslog_row_id"
"""Name of the row-id column of stored DataFrame assets (bigint, 0..n-1, no gaps)."""

_MID = "__dslog_mid"
_PART_BITS = 33


@dataclass(frozen=True)
class RowIds:
    """A frame with dense row ids, its row count, and the cache that keeps the ids stable."""

    frame: DataFrame
    n: int
    cached: DataFrame

    def release(self) -> None:
        """Drop the cached rows (the ids of a recomputed frame could differ)."""
        self.cached.unpersist()


def with_row_id(df: DataFrame, name: str = ROW_ID) -> RowIds:
    """``df`` with a dense row-id column ``name`` appended, and its row count.

    The rows are cached (memory and disk) so the ids stay stable until :meth:`RowIds.release`.
    """
    marked = df.withColumn(_MID, F.monotonically_increasing_id()).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    part = F.shiftright(F.col(_MID), _PART_BITS)
    counts = dict((int(r[0]), int(r[1])) for r in marked.groupBy(part.alias("p")).count().collect())
    n = sum(counts.values())
    if not counts:
        return RowIds(marked.withColumn(name, F.lit(0).cast("bigint")).drop(_MID), 0, marked)
    top = max(counts)
    offsets = list(itertools.accumulate([counts.get(p, 0) for p in range(top + 1)], initial=0))
    offset = F.element_at(F.array(*[F.lit(o) for o in offsets[:-1]]), (part + 1).cast("int"))
    local = F.col(_MID).bitwiseAND(F.lit((1 << _PART_BITS) - 1))
    out = marked.withColumn(name, (offset + local).cast("bigint")).drop(_MID)
    return RowIds(out, n, marked)
