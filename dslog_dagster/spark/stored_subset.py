"""The part of a stored frame a selection needs, read in this process with Arrow.

A selective re-run (:mod:`~dslog_dagster.spark.on_demand`) semijoins each input with the key
values of the selected output rows (:mod:`~dslog_dagster.spark.pushdown`). In Spark that is a
scan of the whole stored input plus a shuffle to deduplicate the keys: on a 10^7-row input of a
small machine, seconds spent to keep 1 % of the rows. When the input is a stored frame read
as it is (a Parquet scan of local files, nothing on top) and the keys are of types whose
equality Arrow and Spark share, the same rows are found here instead:

* :func:`key_table` — the distinct key tuples of the selected rows, as an Arrow table;
* :func:`read_subset` — the stored rows whose key tuple is among them (the row groups whose
  statistics hold no key skipped, each key column of the others matched by a lookup table,
  then an exact semijoin for several key columns), handed to Spark as Parquet files (one per
  core) in a staging folder, or as one local frame (:func:`local_frame`, which checks that
  Spark took every row) kept by a local checkpoint, so the capture's passes read the few kept
  rows;
* :func:`read_rows` — the selected output rows themselves, by row id, as an Arrow table and
  as collected rows (no Spark job).

Anything else answers ``None`` and the caller semijoins in Spark: a null key (Spark's
null-safe equality keeps the input rows with a null there; Arrow's join would not), a
floating-point key (Spark's join treats ``NaN`` as equal to ``NaN`` and ``-0.0`` as ``0.0``),
a timestamp or nested key, a frame with anything on top of its scan, files that are not
local, a stored schema that does not map to the frame's types, or more than
:data:`LOCAL_ROWS` rows to keep.
"""

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Row
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from dslog_dagster.spark.jvm_bridge import java_frame
from dslog_dagster.spark.rowid import ROW_ID

__all__ = [
    "KEY_TYPES",
    "LOCAL_ROWS",
    "LOOKUP_SPAN",
    "VALUE_TYPES",
    "key_table",
    "local_frame",
    "read_rows",
    "read_subset",
]

LOCAL_ROWS = 2_000_000
"""At most this many stored rows are kept by :func:`read_subset` (they pass through this
process and become one local frame); a selection that keeps more is semijoined in Spark."""

FILE_ROWS = 20_000
"""A staged subset is split into files of at least this many rows, one per core (see
:func:`_staged`); fewer rows stay one file."""

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

VALUE_TYPES: tuple[type[DataType], ...] = (*KEY_TYPES, FloatType, DoubleType)
"""Spark types whose values Arrow gives Python exactly as Spark's ``collect`` does; not so a
timestamp (Spark gives the session's local time), a binary value (Spark gives a
``bytearray``) or a nested one (Spark gives a ``Row``)."""

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


LOOKUP_SPAN = 1 << 22
"""An integral key column is matched with a lookup table over its keys' range when that range
spans at most this many values (a 4 MiB table); a wider one with Arrow's hash set."""


def _matcher(values: pa.Array) -> Callable[[pa.Array], np.ndarray]:
    """A function telling whether each value of a column (of ``values``' type) is among
    ``values`` (distinct, no nulls), as a NumPy mask; a null is in none.

    Why not Arrow's ``is_in`` (what the dataset filter ``ds.field(c).isin(values)`` runs) for
    integers: it probes a hash set per row, on a 10^7-row key column 0.25 s where a lookup
    table over the keys' range takes 0.06 s (the scan's decoding is then most of what is
    left). Not ``np.isin(kind="table")``: it raises when the column's own values span more
    than its type holds (an 8-bit column holding -100 and 100)."""
    if len(values) == 0:
        return lambda column: np.zeros(len(column), dtype=bool)
    if pa.types.is_signed_integer(values.type):
        keys = values.to_numpy().astype(np.int64)
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo < LOOKUP_SPAN:
            table = np.zeros(hi - lo + 1, dtype=bool)
            table[keys - lo] = True

            def lookup(column: pa.Array) -> np.ndarray:
                nulls = column.null_count > 0
                # a null slot's value is arbitrary (and to_numpy refuses nulls): filled, then
                # cleared by the validity
                data = column.fill_null(lo).to_numpy() if nulls else column.to_numpy()
                inside = (data >= lo) & (data <= hi)
                if nulls:
                    inside &= column.is_valid().to_numpy(zero_copy_only=False)
                found = np.zeros(len(column), dtype=bool)
                found[inside] = table[data[inside].astype(np.int64, copy=False) - lo]
                return found

            return lookup

    def probe(column: pa.Array) -> np.ndarray:
        found = pc.is_in(column, value_set=values)  # a null is false: the keys hold none
        return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)

    return probe


def _matching(dataset: ds.Dataset, keys: pa.Table) -> pa.Table | None:
    """The rows of ``dataset`` whose value in each column of ``keys`` is among that column's
    keys (for several columns a superset of the exact tuples); ``None`` when there are more
    than :data:`LOCAL_ROWS`, or Arrow cannot read a file.

    The batches are scanned whole and matched by :func:`_matcher`, not by a dataset filter
    (see there); the row groups whose statistics rule out every key are left out first, as
    the filtered scan left them."""
    cols = keys.column_names
    values = {c: keys.column(c).combine_chunks() for c in cols}
    member = {c: _matcher(values[c]) for c in cols}
    cond = ds.field(cols[0]).isin(values[cols[0]])
    for c in cols[1:]:
        cond = cond & ds.field(c).isin(values[c])
    batches = []
    kept = 0
    try:
        parts = [g for f in dataset.get_fragments() for g in f.split_by_row_group(cond)]
        groups = ds.FileSystemDataset(parts, dataset.schema, dataset.format, dataset.filesystem)
        for batch in groups.to_batches():
            mask = np.ones(batch.num_rows, dtype=bool)
            for c in cols:
                mask &= member[c](batch.column(c))
            rows = np.flatnonzero(mask)
            if len(rows) == 0:
                continue
            kept += len(rows)
            if kept > LOCAL_ROWS:
                return None
            batches.append(batch.take(pa.array(rows)))
    # a file that cannot be read or does not fit the first file's schema: Spark, whose
    # reader the stored frame was made for, reads it (or says what is wrong with it)
    except (OSError, ValueError, TypeError, pa.ArrowException):
        return None
    return pa.Table.from_batches(batches, schema=dataset.schema)


def _stored_dataset(frame: DataFrame) -> ds.Dataset | None:
    """The Arrow dataset of ``frame``'s files when ``frame`` is a plain scan of local files
    whose stored schema maps to ``frame``'s columns and types, else ``None``."""
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
    return dataset


def _as_stored(dataset: ds.Dataset, keys: pa.Table) -> pa.Table | None:
    """``keys`` cast to the types of the stored columns they name; ``None`` when a key is
    outside its column's range (no stored row has it)."""
    try:
        return keys.cast(pa.schema([dataset.schema.field(c) for c in keys.column_names]))
    except (ValueError, pa.ArrowException):
        return None


def read_subset(frame: DataFrame, keys: pa.Table, staging: str | None = None) -> DataFrame | None:
    """``frame`` ⋉ ``keys`` (a :func:`key_table`, columns named by ``frame``'s columns)
    read from ``frame``'s files in this process and kept in Spark; ``None`` when this cannot
    give exactly Spark's semijoin or would keep more than :data:`LOCAL_ROWS` rows (see the
    module docstring).

    ``staging``: a folder the executors read at the same path (see
    :mod:`~dslog_dagster.spark.staging`), owned by the caller, who removes it once the frame
    is no longer read. When given and every column is of :data:`VALUE_TYPES`, the rows kept
    are written there as Parquet files (see :func:`_staged`) that Spark scans; else they become
    a local frame, checkpointed. On the bench's 10^5 kept rows the local frame takes 0.15 s to
    build and its checkpoint (a job) 0.35 s, where the files take 0.03 s to write and the
    capture's passes scan them as fast as they read the checkpoint (without the checkpoint,
    each pass would turn the local rows into a job's tasks again: slower than keeping them)."""
    dataset = _stored_dataset(frame)
    if dataset is None:
        return None
    cols = keys.column_names
    stored_keys = _as_stored(dataset, keys)
    if stored_keys is None:
        return None
    table = _matching(dataset, stored_keys)
    if table is None:
        return None
    if len(cols) > 1:  # each column's values matched; keep the exact tuples
        table = table.join(stored_keys, keys=cols, join_type="left semi")
    if staging is not None and all(type(f.dataType) in VALUE_TYPES for f in frame.schema):
        return _staged(frame, table, staging)
    local = local_frame(frame.sparkSession, table)
    if local is None or not _same_types(local.schema, frame.schema):
        return None
    return local.localCheckpoint(eager=True)


def _staged(frame: DataFrame, table: pa.Table, staging: str) -> DataFrame | None:
    """``table`` (rows of ``frame``'s files, of :data:`VALUE_TYPES`, whose Parquet types
    Spark reads back as they were) written to a new folder under ``staging`` and scanned by
    Spark with ``frame``'s schema (no job infers it); ``None`` when it cannot be written.

    The rows go to one file per core Spark has (at least :data:`FILE_ROWS` rows each): Spark
    scans a small file in one task, so one file would leave all but one core idle in the
    capture's passes (0.4 s of the bench trace's 10^5 kept rows, in one task)."""
    cores = max(1, int(frame.sparkSession.sparkContext.defaultParallelism))
    parts = max(1, min(cores, table.num_rows // FILE_ROWS))
    step = -(-table.num_rows // parts)
    try:
        path = tempfile.mkdtemp(prefix="subset-", dir=staging)
        for k in range(parts):
            part = table.slice(k * step, step)
            pq.write_table(part, os.path.join(path, f"part-{k}.parquet"))
    except (OSError, pa.ArrowException):
        return None
    staged: DataFrame = frame.sparkSession.read.schema(frame.schema).parquet(path)
    return staged


def read_rows(
    frame: DataFrame, ids: Sequence[int] | np.ndarray
) -> tuple[pa.Table, list[Row]] | None:
    """The rows of ``frame`` (a stored frame with :data:`~dslog_dagster.spark.rowid.ROW_ID`)
    whose id is in ``ids``, read from its files in this process: as an Arrow table (for
    :func:`local_frame` when a frame of them is needed) and as ``frame.collect()`` would give
    them; ``None`` when this cannot give exactly Spark's rows (a frame that is not a plain
    local scan, a column of a type outside :data:`VALUE_TYPES`) or more than
    :data:`LOCAL_ROWS` ids are asked for.

    It replaces :func:`~dslog_dagster.spark.rowid.rows_by_id` and a collect for a trace's
    selection (a few thousand rows of a stored frame this process can read): two Spark jobs
    (the checkpoint that scans the stored frame and keeps the rows, the collect) and an
    ``IN`` expression of every id, which Spark takes 0.2 s to parse for 1000 ids."""
    if ROW_ID not in frame.columns:
        return None
    if any(type(f.dataType) not in VALUE_TYPES for f in frame.schema.fields):
        return None
    picked = np.unique(np.asarray(ids, dtype=np.int64))
    if len(picked) > LOCAL_ROWS:
        return None
    dataset = _stored_dataset(frame)
    if dataset is None:
        return None
    keys = _as_stored(dataset, pa.table({ROW_ID: pa.array(picked, type=pa.int64())}))
    table = None if keys is None else _matching(dataset, keys)
    if table is None:
        return None
    make = Row(*table.column_names)
    columns = [table.column(c).to_pylist() for c in table.column_names]
    return table, [make(*values) for values in zip(*columns, strict=True)]


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
