"""Row lineage compressed where the data is: ProvRC per Spark partition, merged exactly.

The (output row, input row) pairs of a capture are never collected: each partition of the
pair DataFrame is compressed by the native ProvRC kernel inside ``mapInArrow`` (on the
executors), and only the small per-partition tables travel to the driver, where
:func:`~dslog_dagster.core.combine.merge_tables` unites them. The pairs are produced from a
frame whose partitions hold disjoint, contiguous ranges of output row ids (the dense ids of
:mod:`dslog_dagster.spark.rowid`), so no shuffle is needed and the union is exact.
"""

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from dslog_dagster.core.combine import merge_tables
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.storage import table_from_blob, table_to_blob

__all__ = ["compress_pairs"]

_BLOB_SCHEMA = "blob binary"


def _compressor(n_out: int, n_in: int, out_col: str, in_col: str):  # type: ignore[no-untyped-def]
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dslog_dagster.core.provrc import compress

        outs, ins = [], []
        for b in batches:
            if b.num_rows:
                outs.append(b.column(out_col).to_numpy(zero_copy_only=False))
                ins.append(b.column(in_col).to_numpy(zero_copy_only=False))
        if not outs:
            return
        o = np.concatenate(outs).astype(np.int64, copy=False)
        i = np.concatenate(ins).astype(np.int64, copy=False)
        rel = LineageRelation.from_columns((n_out,), (n_in,), [o], [i])
        blob = table_to_blob(compress(rel, threads=1))
        yield pa.RecordBatch.from_arrays([pa.array([blob], pa.binary())], names=["blob"])

    return run


def compress_pairs(
    pairs: DataFrame, n_out: int, n_in: int, out_col: str = "o", in_col: str = "r"
) -> LineageTable:
    """ProvRC table ``(n_out,) ← (n_in,)`` of the pairs in ``pairs`` (two bigint columns).

    Every partition of ``pairs`` must hold output ids that no other partition holds (true for
    pairs selected straight from a frame with dense row ids); pairs with a null input are
    ignored (a row without a source in this slot).
    """
    clean = pairs.select(out_col, in_col).where(f"`{in_col}` IS NOT NULL")
    blobs = clean.mapInArrow(_compressor(n_out, n_in, out_col, in_col), _BLOB_SCHEMA).collect()
    tables = [table_from_blob(bytes(r["blob"])) for r in blobs]
    if not tables:
        return LineageTable((n_out,), (n_in,), "provrc", 0, 0, *_empty_fields())
    return merge_tables(tables)


def _empty_fields() -> list[np.ndarray]:
    return [np.zeros((1, 0), np.int64) for _ in range(8)]
