"""The catalog rows of operation and array records, written in bulk.

A first sync of a big store (or ``rebuild_catalog``) indexes every operation at once: 100,000
operations are 100,000 ``operations`` rows, twice as many ``operation_arrays`` rows and as
many ``lineage_tables`` rows. So rows are built a *column* at a time into Arrow tables and
inserted with one ``INSERT ... SELECT`` per table (DuckDB reads the Arrow table in place), and
a compaction that moved many operations updates their paths with one ``UPDATE ... FROM``: a
statement per operation scans the table each time, which made a sync after a compaction of
a big store quadratic. A writer indexing its one new operation uses a parameterised
``VALUES`` statement instead (registering an Arrow table costs more than a few rows).

Kept apart from :mod:`~dslog_dagster.core.store.catalog` (locking, syncing, queries) so that
how a record becomes rows is in one place.
"""

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

from dslog_dagster.core.store import sql_text
from dslog_dagster.core.store.catalog_schema import SCHEMAS
from dslog_dagster.core.store.records import ArrayRecord, OperationRecord

SMALL_BATCH = 16
"""Up to this many rows are inserted with one ``VALUES`` statement of literals (no bind, so no
pandas import in the first sync of a process: :mod:`.sql_text`); more through an Arrow table
(pyarrow imports pandas, which a bulk sync can afford)."""


def text(v: Any) -> Any:
    """``v`` as the catalog stores it: a string that is not valid UTF-8 (a lone surrogate in a
    name registered before such names were refused) is escaped, so one odd name cannot stop
    the catalog; the records themselves are read from the files."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return v.encode("utf-8", "backslashreplace").decode("utf-8")
        return v
    if isinstance(v, list):
        return [text(x) for x in v]
    return v


def naive_utc(dt: datetime) -> datetime:
    """``dt`` as the catalog's ``TIMESTAMP`` holds it (naive, UTC)."""
    return dt.astimezone(UTC).replace(tzinfo=None)


def _column(values: list[Any], type_: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type_)
    except UnicodeEncodeError:  # rare: escape the odd strings (see text())
        return pa.array([text(v) for v in values], type_)


def insert(con: duckdb.DuckDBPyConnection, table: str, columns: Mapping[str, list[Any]]) -> None:
    """Insert the rows given as ``columns`` (name -> values, every column of ``table``'s
    schema) into catalog table ``table``; rows whose key is there already are ignored."""
    schema = SCHEMAS[table]
    n = len(columns[schema.names[0]])
    if n == 0:
        return
    cols = ", ".join(schema.names)
    if n <= SMALL_BATCH:
        one = "(" + ", ".join("?" * len(schema.names)) + ")"
        params = [text(columns[c][i]) for i in range(n) for c in schema.names]
        values = ", ".join([one] * n)
        sql_text.execute(con, f"INSERT OR IGNORE INTO {table} ({cols}) VALUES {values}", params)
        return
    data = pa.Table.from_arrays([_column(columns[f.name], f.type) for f in schema], schema=schema)
    view = f"_dslog_new_{table}"
    con.register(view, data)
    try:
        con.execute(f"INSERT OR IGNORE INTO {table} ({cols}) SELECT {cols} FROM {view}")
    finally:
        _unregister(con, view)


def insert_arrays(con: duckdb.DuckDBPyConnection, items: Iterable[tuple[ArrayRecord, str]]) -> None:
    """Index array records ``(record, root-relative path of its file)``."""
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMAS["arrays"].names}
    for a, path in items:
        cols["array_id"].append(a.array_id)
        cols["name"].append(a.name)
        cols["version"].append(a.version)
        cols["shape"].append(list(a.shape))
        cols["ndim"].append(len(a.shape))
        cols["dtype"].append(a.dtype)
        cols["asset_key"].append(a.asset_key)
        cols["created_at"].append(naive_utc(a.created_at))
        cols["path"].append(path)
    insert(con, "arrays", cols)


def insert_operations(
    con: duckdb.DuckDBPyConnection,
    records: Sequence[OperationRecord],
    where: Mapping[str, str],
) -> None:
    """Index operation ``records`` (their ``operations``, ``operation_arrays`` and
    ``lineage_tables`` rows); ``where`` maps each op id to the segment holding it."""
    ops: dict[str, list[Any]] = {name: [] for name in SCHEMAS["operations"].names}
    members: dict[str, list[Any]] = {name: [] for name in SCHEMAS["operation_arrays"].names}
    tables: dict[str, list[Any]] = {name: [] for name in SCHEMAS["lineage_tables"].names}
    for r in records:
        created = naive_utc(r.created_at)
        path = where[r.op_id]
        ops["op_id"].append(r.op_id)
        ops["op_name"].append(r.op_name)
        ops["capture_method"].append(r.capture_method)
        ops["created_at"].append(created)
        ops["inputs"].append([a.name for a in r.inputs])
        ops["outputs"].append([a.name for a in r.outputs])
        ops["n_tables"].append(len(r.tables))
        ops["args"].append(json.dumps(r.args, sort_keys=True))
        ops["timings"].append(json.dumps(r.timings))
        ops["path"].append(path)
        by_name = {}
        for role, arrs in (("input", r.inputs), ("output", r.outputs)):
            for pos, a in enumerate(arrs):
                by_name[role, a.name] = a
                members["op_id"].append(r.op_id)
                members["role"].append(role)
                members["position"].append(pos)
                members["name"].append(a.name)
                members["version"].append(a.version)
                members["array_id"].append(a.array_id)
                members["asset_key"].append(a.asset_key)
                members["shape"].append(list(a.shape))
        for position, t in enumerate(r.tables):
            o, i = by_name["output", t.output], by_name["input", t.input]
            row = (
                r.op_id, r.op_name, t.output, t.input, o.version, i.version, o.array_id,
                i.array_id, o.asset_key, i.asset_key, t.encoding, t.rows, t.n_pairs,
                t.stored_bytes, path, created, position,
            )  # fmt: skip
            for name, value in zip(SCHEMAS["lineage_tables"].names, row, strict=True):
                tables[name].append(value)
    insert(con, "operations", ops)
    insert(con, "operation_arrays", members)
    insert(con, "lineage_tables", tables)


def move_operations(con: duckdb.DuckDBPyConnection, moves: Mapping[str, str]) -> None:
    """Point the operations ``moves`` names (op id -> segment) at their new segments."""
    if not moves:
        return
    data = pa.table(
        {"op_id": list(moves), "path": list(moves.values())},
        schema=pa.schema([("op_id", pa.string()), ("path", pa.string())]),
    )
    con.register("_dslog_moves", data)
    try:
        for table in ("operations", "lineage_tables"):
            con.execute(
                f"UPDATE {table} SET path = m.path FROM _dslog_moves m "
                f"WHERE {table}.op_id = m.op_id"
            )
    finally:
        _unregister(con, "_dslog_moves")


def delete_operations(con: duckdb.DuckDBPyConnection, op_ids: Sequence[str]) -> None:
    """Drop the rows of operations ``op_ids`` (their segments were deleted)."""
    if not op_ids:
        return
    for table in ("operations", "operation_arrays", "lineage_tables"):
        sql_text.execute(
            con, f"DELETE FROM {table} WHERE op_id IN (SELECT unnest(?::VARCHAR[]))", [list(op_ids)]
        )


def _unregister(con: duckdb.DuckDBPyConnection, view: str) -> None:
    # after a failed statement (a write-write conflict the caller retries) the transaction is
    # aborted and so is this: the caller's error is the one to see, and the view goes with
    # the connection anyway
    with contextlib.suppress(duckdb.Error):
        con.unregister(view)
