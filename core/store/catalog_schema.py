"""The tables of the catalog (:mod:`~dslog_dagster.core.store.catalog`): their DDL and the
Arrow schemas rows are inserted with.

Apart from the catalog's logic so that the column lists (long, and read by anyone writing
SQL against the catalog) are in one place. ``array_dirs`` is internal: the modification time
of each array directory when a sync last listed it (see
:mod:`~dslog_dagster.core.store.array_dirs`); user SQL never sees it.
"""

import pyarrow as pa

TABLES = ("arrays", "operations", "operation_arrays", "lineage_tables", "segments")
"""The tables user SQL can read."""
INTERNAL_TABLES = ("array_dirs",)
"""Tables of the catalog's own bookkeeping (cleared by a rebuild, hidden from user SQL)."""

DDL = (
    """CREATE TABLE IF NOT EXISTS catalog_meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS arrays (
        array_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, version VARCHAR, shape BIGINT[],
        ndim INTEGER, dtype VARCHAR, asset_key VARCHAR, created_at TIMESTAMP, path VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS operations (
        op_id VARCHAR PRIMARY KEY, op_name VARCHAR NOT NULL, capture_method VARCHAR,
        created_at TIMESTAMP, inputs VARCHAR[], outputs VARCHAR[], n_tables INTEGER,
        args VARCHAR, timings VARCHAR, path VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS operation_arrays (
        op_id VARCHAR, role VARCHAR, position INTEGER, name VARCHAR, version VARCHAR,
        array_id VARCHAR, asset_key VARCHAR, shape BIGINT[],
        PRIMARY KEY (op_id, role, position))""",
    """CREATE TABLE IF NOT EXISTS lineage_tables (
        op_id VARCHAR, op_name VARCHAR, output VARCHAR, input VARCHAR, output_version VARCHAR,
        input_version VARCHAR, output_array_id VARCHAR, input_array_id VARCHAR,
        output_asset_key VARCHAR, input_asset_key VARCHAR, encoding VARCHAR, rows BIGINT,
        n_pairs BIGINT, bytes BIGINT, path VARCHAR, created_at TIMESTAMP, position INTEGER,
        PRIMARY KEY (op_id, output, input))""",
    """CREATE TABLE IF NOT EXISTS segments (path VARCHAR PRIMARY KEY)""",
    """CREATE TABLE IF NOT EXISTS array_dirs (dir VARCHAR PRIMARY KEY, mtime_ns BIGINT)""",
)

SHAPE_TYPE = pa.list_(pa.int64())
TS_TYPE = pa.timestamp("us")
SCHEMAS = {
    "arrays": pa.schema(
        [
            ("array_id", pa.string()),
            ("name", pa.string()),
            ("version", pa.string()),
            ("shape", SHAPE_TYPE),
            ("ndim", pa.int32()),
            ("dtype", pa.string()),
            ("asset_key", pa.string()),
            ("created_at", TS_TYPE),
            ("path", pa.string()),
        ]
    ),
    "operations": pa.schema(
        [
            ("op_id", pa.string()),
            ("op_name", pa.string()),
            ("capture_method", pa.string()),
            ("created_at", TS_TYPE),
            ("inputs", pa.list_(pa.string())),
            ("outputs", pa.list_(pa.string())),
            ("n_tables", pa.int32()),
            ("args", pa.string()),
            ("timings", pa.string()),
            ("path", pa.string()),
        ]
    ),
    "operation_arrays": pa.schema(
        [
            ("op_id", pa.string()),
            ("role", pa.string()),
            ("position", pa.int32()),
            ("name", pa.string()),
            ("version", pa.string()),
            ("array_id", pa.string()),
            ("asset_key", pa.string()),
            ("shape", SHAPE_TYPE),
        ]
    ),
    "lineage_tables": pa.schema(
        [
            ("op_id", pa.string()),
            ("op_name", pa.string()),
            ("output", pa.string()),
            ("input", pa.string()),
            ("output_version", pa.string()),
            ("input_version", pa.string()),
            ("output_array_id", pa.string()),
            ("input_array_id", pa.string()),
            ("output_asset_key", pa.string()),
            ("input_asset_key", pa.string()),
            ("encoding", pa.string()),
            ("rows", pa.int64()),
            ("n_pairs", pa.int64()),
            ("bytes", pa.int64()),
            ("path", pa.string()),
            ("created_at", TS_TYPE),
            ("position", pa.int32()),
        ]
    ),
}
