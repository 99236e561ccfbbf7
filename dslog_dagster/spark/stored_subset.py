"""The part of a stored frame a selection needs, read in this process with Arrow.

A selective re-run (:mod:`~dslog_dagster.spark.on_demand`) semijoins each input with the key
values of the selected output rows (:mod:`~dslog_dagster.spark.pushdown`). In Spark that is a
scan of the whole stored input plus a shuffle to deduplicate the keys: on a 10^7-row input of a
small machine, seconds spent to keep 1 % of the rows. When the input is a stored frame read
as it is (a Parquet scan of local files, nothing on top) and the keys are of types whose
equality Arrow and Spark share, the same rows are found here instead:

* :func:`key_table` — the distinct key tuples of the selected rows, as an Arrow table;
* :func:`read_subset` — the stored rows whose key tuple is among them (Arrow's dataset
  filter, then an exact semijoin for several key columns), handed to Spark as one local
  frame (:func:`local_frame`, which checks that Spark took every row) and kept (a local
  checkpoint), so the capture's passes read the few kept rows.

Anything else answers ``None`` and the caller semijoins in Spark: a null key (Spark's
null-safe equality keeps the input rows with a null there; Arrow's join would not), a
floating-point key (Spark's join treats ``NaN`` as equal to ``NaN`` and ``-0.0`` as ``0.0``),
a timestamp or nested key, a frame with anything on top of its scan, files that are not
local, a stored schema that does not map to the frame's types, or more than
:data:`LOCAL_ROWS` rows to keep.
"""

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from dslog_dagster.spark.jvm_bridge import java_frame

__all__ = ["KEY_TYPES", "LOCAL_ROWS", "key_table", "local_frame", "read_subset"]

LOCAL_ROWS = 2_000_000
"""At most this many stored rows are kept by :func:`read_subset` (they pass through this
process and become one local frame); a selection that keeps more is semijoined in Spark."""

KEY_TYPES: tuple[type[DataType], ...] = (
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    StringType,
    BooleanType,
    DateType,
)
"""Spark types whose equality Arrow's filters and joins share exactly."""

_ARROW: dict[type[DataType], pa.DataType] = {
    ByteType: pa.int8(),
    ShortType: pa.int16(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    StringType: pa.string(),
    BooleanType: pa.bool_(),
    DateType: pa.date32(),
}


def key_table(rows: Sequence[Any], schema: StructType, on: Mapping[str, str]) -> pa.Table | None:
    """The distinct tuples ``(row[c] for c in on)`` of the selected ``rows`` (collected
    ``Row`` objects of a frame with ``schema``), as columns named by the input columns
    ``on[c]``; ``None`` when a key is null or of a type outside :data:`KEY_TYPES`."""
    types = []
    for c in on:
        t = schema[c].dataType if c in schema.fieldNames() else None
        if t is None or type(t) not in KEY_TYPES:
            return None
        types.append(_ARROW[type(t)])
    seen: set[tuple[Any, ...]] = set()
    for r in rows:
        key = tuple(r[c] for c in on)
        if any(v is None for v in key):
            return None
        seen.add(key)
    ordered = sorted(seen)
    cols = {
        col: pa.array([k[j] for k in ordered], type=t)
        for j, (col, t) in enumerate(zip(on.values(), types, strict=True))
    }
    return pa.table(cols)


def _local_files(frame: DataFrame) -> list[str] | None:
    """The local Parquet files ``frame`` scans when it is a plain scan of them (its analyzed
    plan a single relation, every column of the files), else ``None``."""
    plan = java_frame(frame).queryExecution().analyzed()
    if str(plan.getClass().getSimpleName()) != "LogicalRelation":
        return None
    paths = []
    for f in frame.inputFiles():
        u = urlparse(f)
        if u.scheme not in ("", "file"):
            return None
        paths.append(unquote(u.path) if u.scheme else f)
    return paths or None


def _same_types(a: StructType, b: StructType) -> bool:
    return [(f.name, f.dataType) for f in a.fields] == [(f.name, f.dataType) for f in b.fields]


def read_subset(frame: DataFrame, keys: pa.Table) -> DataFrame | None:
    """``frame`` ⋉ ``keys`` (a :func:`key_table`, columns named by ``frame``'s columns)
    read from ``frame``'s files in this process and kept in Spark; ``None`` when this cannot
    give exactly Spark's semijoin or would keep more than :data:`LOCAL_ROWS` rows (see the
    module docstring)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    paths = _local_files(frame)
    if paths is None:
        return None
    try:
        dataset = ds.dataset(paths, format="parquet")
        stored = from_arrow_schema(dataset.schema)
    except (OSError, ValueError, TypeError, NotImplementedError, pa.ArrowException):
        return None
    if [f.name for f in stored.fields] != frame.columns or not _same_types(stored, frame.schema):
        return None
    cols = keys.column_names
    try:
        keys = keys.cast(pa.schema([dataset.schema.field(c) for c in cols]))
    except (ValueError, pa.ArrowException):  # a key outside the column's range: none match
        return None
    cond = None
    for c in cols:
        one = ds.field(c).isin(keys.column(c).combine_chunks())
        cond = one if cond is None else cond & one
    batches = []
    kept = 0
    try:
        for batch in dataset.to_batches(filter=cond):
            kept += batch.num_rows
            if kept > LOCAL_ROWS:
                return None
            batches.append(batch)
    # a file that cannot be read or does not fit the first file's schema: Spark, whose
    # reader the stored frame was made for, reads it (or says what is wrong with it)
    except (OSError, ValueError, TypeError, pa.ArrowException):
        return None
    table = pa.Table.from_batches(batches, schema=dataset.schema)
    if len(cols) > 1:  # the filter kept each column's values; keep the exact tuples
        table = table.join(keys, keys=cols, join_type="left semi")
    local = local_frame(frame.sparkSession, table)
    if local is None or not _same_types(local.schema, frame.schema):
        return None
    return local.localCheckpoint(eager=True)


def local_frame(spark: Any, table: pa.Table) -> DataFrame | None:
    """``table`` as a local Spark frame, or ``None`` when Spark did not take every row.

    The table goes over as one batch: PySpark 4.3's ``createDataFrame(pa.Table)`` drops the
    batches that follow an empty one (a table of batches ``[3], [], [5]`` becomes one row),
    and a filtered dataset scan gives exactly such tables. The frame's row count is then
    checked against the table's (read from the plan, no job), so another such loss refuses
    instead of answering with missing rows."""
    local: DataFrame = spark.createDataFrame(table.combine_chunks())
    plan = java_frame(local).queryExecution().analyzed()
    if str(plan.getClass().getSimpleName()) != "LocalRelation":
        return None
    if int(plan.data().size()) != table.num_rows:
        return None
    return local
