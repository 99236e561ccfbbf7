"""Catalog writes that race another connection are retried, never taken for damage.

A reader's sync and a writer index the same records in separate transactions; the one that
commits second gets DuckDB's "Duplicate key" (INSERT OR IGNORE skips only rows its snapshot
sees). Before the fix, cleaning up the aborted transaction replaced that error with "transaction
is aborted", which was taken for a damaged catalog: the file was deleted and rebuilt, with a
DamagedStoreWarning (an error under the test suite's settings). Seen as a flaky failure of
``tests/unit/test_store_paging.py``.
"""

import contextlib
import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dslog_dagster.core.store.catalog import _is_retryable
from dslog_dagster.core.store.catalog_rows import insert
from dslog_dagster.core.store.catalog_schema import DDL, SCHEMAS


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    insert(con, table, {c: [r[c] for r in rows] for c in SCHEMAS[table].names})


def _rows(n: int) -> list[dict[str, Any]]:
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    rows = [
        {
            "array_id": f"id-{k}",
            "name": "x",
            "version": f"v{k}",
            "shape": [2, 2],
            "ndim": 2,
            "dtype": "float64",
            "asset_key": None,
            "created_at": when,
            "path": "arrays/x",
        }
        for k in range(n)
    ]
    assert set(rows[0]) == set(SCHEMAS["arrays"].names)
    return rows


def _two_connections(tmp_path: Path) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
    """Two connections to a fresh catalog file with the catalog's tables."""
    path = str(tmp_path / "catalog.duckdb")
    setup = duckdb.connect(path)
    for ddl in DDL:
        setup.execute(ddl)
    setup.close()
    return duckdb.connect(path), duckdb.connect(path)


@pytest.mark.parametrize("n", [3, 40])  # the parameterised path and the Arrow path
def test_a_concurrent_commit_of_the_same_records_gives_a_retryable_error(
    tmp_path: Path, n: int
) -> None:
    a, b = _two_connections(tmp_path)
    try:
        a.execute("BEGIN TRANSACTION")
        a.execute("SELECT count(*) FROM arrays").fetchall()  # a's snapshot starts here
        _insert(b, "arrays", _rows(n))  # b commits the same records first (autocommit)
        with pytest.raises(duckdb.Error) as info:
            _insert(a, "arrays", _rows(n))
        # the insert's own error (not the cleanup's "transaction is aborted"), and a retry
        # in a new transaction is what mends it
        assert isinstance(info.value, duckdb.ConstraintException)
        assert _is_retryable(info.value)
        a.execute("ROLLBACK")
        _insert(a, "arrays", _rows(n))  # the retry: skipped as already there
        assert a.execute("SELECT count(*) FROM arrays").fetchone() == (n,)
    finally:
        a.close()
        b.close()


def test_the_same_records_committed_first_elsewhere_fail_our_commit_retryably(
    tmp_path: Path,
) -> None:
    """Both transactions insert the record uncommitted; the second to COMMIT gets a
    TransactionException naming the duplicate key (seen in CI as a DamagedStoreWarning from
    ``test_store_paging``: the catalog was deleted as damaged). A retry skips the record."""
    a, b = _two_connections(tmp_path)
    try:
        a.execute("BEGIN TRANSACTION")
        _insert(a, "arrays", _rows(3))
        b.execute("BEGIN TRANSACTION")
        _insert(b, "arrays", _rows(3))
        a.execute("COMMIT")
        with pytest.raises(duckdb.Error) as info:
            b.execute("COMMIT")
        assert isinstance(info.value, duckdb.TransactionException)
        assert _is_retryable(info.value)
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT ended the transaction
            b.execute("ROLLBACK")
        _insert(b, "arrays", _rows(3))
        assert b.execute("SELECT count(*) FROM arrays").fetchone() == (3,)
    finally:
        a.close()
        b.close()


def test_other_constraint_errors_are_not_retried() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k VARCHAR NOT NULL)")
    with pytest.raises(duckdb.ConstraintException) as info:
        con.execute("INSERT INTO t VALUES (NULL)")
    assert not _is_retryable(info.value)


def test_a_file_handle_conflict_between_threads_is_retryable() -> None:
    """Two threads of one process opening the catalog while DuckDB's instance cache attaches
    or closes it get a Binder error naming the conflict (seen under CI load in the paging
    test): a retry finds it settled, it is not damage. Other binder errors are not retried."""
    conflict = duckdb.BinderException(
        'Binder Error: Unique file handle conflict: Cannot attach "catalog" - the database file '
        '"/s/catalog.duckdb" is already attached by database "catalog"'
    )
    assert _is_retryable(conflict)
    assert not _is_retryable(duckdb.BinderException('Binder Error: Table "x" does not exist'))


def test_a_conflict_that_outlasts_the_retries_is_not_taken_for_damage() -> None:
    from dslog_dagster.core.store.catalog import _is_damage

    assert not _is_damage(
        "TransactionContext Error: Failed to commit: PRIMARY KEY or UNIQUE constraint "
        'violation: duplicate key "a, y, x" (gave up after 40 attempts)'
    )
    assert not _is_damage("TransactionContext Error: Catalog write-write conflict on create")
    assert _is_damage("Serialization Error: Failed to deserialize: field id mismatch")


def test_the_catalog_file_appears_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No connection is ever opened on a catalog path that does not exist yet: DuckDB creates
    the file and only then writes its header, and a process opening it in between took it for
    a damaged catalog (a flaky DamagedStoreWarning in the eight-writer concurrency test). The
    file is built under a temporary name and linked into place; nothing is left behind."""
    from dslog_dagster.core import LineageStore
    from dslog_dagster.core.store import catalog as catalog_module

    opened: list[tuple[str, bool]] = []
    real_connect = duckdb.connect

    def connect(database: str = ":memory:", *args: Any, **kwargs: Any) -> Any:
        opened.append((str(database), Path(str(database)).exists()))
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(catalog_module.duckdb, "connect", connect)
    store = LineageStore(tmp_path / "store")
    store.register_array("x", (2, 2))
    assert [a.name for a in store.arrays()] == ["x"]
    path = str(store.catalog.path)
    assert any(p == path for p, _ in opened)
    assert all(existed for p, existed in opened if p == path)
    assert not list((tmp_path / "store" / ".staging").glob("*catalog*"))
