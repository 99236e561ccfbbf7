"""The catalog's schema is checked by one statement per connection and rebuilt when stale.

Each catalog read checks ``catalog_meta``'s version row before its transaction and runs the
schema's DDL only when the row is missing or names another version. These tests break the
catalog file the ways that path must handle and check every operation is still listed and
queryable from the files.
"""

from pathlib import Path

import duckdb
import numpy as np
import pytest

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.store.catalog import CATALOG_SCHEMA_VERSION


def _store(root: Path) -> LineageStore:
    store = LineageStore(root)
    store.register_array("a", (4,))
    store.register_array("b", (4,))
    idx = np.arange(4)
    store.register_operation(
        "rev",
        ["a"],
        ["b"],
        {("b", "a"): LineageRelation.from_columns((4,), (4,), [idx], [3 - idx])},
    )
    assert len(store.operations()) == 1
    return store


def _edit(root: Path, *sql: str) -> None:
    con = duckdb.connect(str(root / "catalog.duckdb"))
    try:
        for s in sql:
            con.execute(s)
    finally:
        con.close()


@pytest.mark.parametrize(
    "damage",
    [
        # an older layout: its tables are dropped and re-created, the next sync re-indexes
        (
            "UPDATE catalog_meta SET value = 'old' WHERE key = 'schema_version'",
            "DROP TABLE operations",
        ),
        # no version row at all (a catalog from before versions were kept)
        ("DELETE FROM catalog_meta",),
        # a foreign DuckDB file with none of our tables
        ("DROP TABLE catalog_meta", "DROP TABLE operations", "DROP TABLE arrays"),
    ],
)
def test_a_stale_catalog_is_rebuilt_from_the_files(tmp_path: Path, damage: tuple[str, ...]) -> None:
    root = tmp_path / "store"
    op_id = _store(root).operations()[0].op_id
    _edit(root, *damage)
    store = LineageStore(root)
    assert [op.op_id for op in store.operations()] == [op_id]
    assert sorted(DSLog(store).prov_query(["b", "a"], np.s_[0:2]).to_flat().tolist()) == [2, 3]
    con = duckdb.connect(str(root / "catalog.duckdb"), read_only=True)
    try:
        version = con.execute(
            "SELECT value FROM catalog_meta WHERE key = 'schema_version'"
        ).fetchall()
    finally:
        con.close()
    assert version == [(CATALOG_SCHEMA_VERSION,)]
