"""`dslog fsck`, `store.verify()`, files of the format before checksums, names the catalog
cannot hold, and the read-only, local catalog SQL."""

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dslog_dagster.cli import EXIT_CODES, main
from dslog_dagster.core import LineageRelation
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.format.segment import Segment
from dslog_dagster.core.store import LineageStore, NewArray
from dslog_dagster.core.store.records import record_json
from dslog_dagster.errors import (
    DamagedStoreWarning,
    InvalidRelationError,
    LineageCorruptError,
    QueryError,
)


def _ident(shape: tuple[int, ...]) -> LineageRelation:
    idx = list(np.indices(shape).reshape(len(shape), -1))
    return LineageRelation.from_columns(shape, shape, out_cols=idx, in_cols=idx)


def _chain(store: LineageStore, prefix: str, n: int = 2) -> list[str]:
    """``n`` operations ``prefix0 -> prefix1 -> ...``; returns their op ids."""
    store.register_array(f"{prefix}0", (3, 2))
    ids = []
    for k in range(n):
        out = NewArray(f"{prefix}{k + 1}", (3, 2)) if k % 2 else f"{prefix}{k + 1}"
        if isinstance(out, str):
            store.register_array(out, (3, 2))
        name = f"{prefix}{k + 1}"
        op = store.register_operation(
            "copy", [f"{prefix}{k}"], [out], {(name, f"{prefix}{k}"): _ident((3, 2))}
        )
        ids.append(op.op_id)
    return ids


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x10
    with open(path, "r+b") as f:
        f.write(data)


def test_fsck_clean_store_exits_0(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    _chain(store, "x")
    store.compact()
    _chain(store, "y")
    rc, out, _ = _cli("fsck", str(store.root))
    assert rc == 0
    assert "no damage found" in out
    report = store.verify()
    assert report.clean
    assert report.unverified == []
    assert report.files >= 6


def test_fsck_finds_damage_quarantines_it_and_the_rest_works(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    x_ops = _chain(store, "x")
    y_ops = _chain(store, "y")
    seg = store.root / "operations" / f"{x_ops[0]}.parquet"
    _flip(seg, seg.stat().st_size // 2)
    rc, out, _ = _cli("fsck", str(store.root))
    assert rc == 3
    assert EXIT_CODES[3].startswith("`dslog fsck` found damaged files")
    assert f"DAMAGED operations/{x_ops[0]}.parquet" in out
    assert x_ops[0] in out  # the operation it held
    assert "--quarantine" in out
    rc, out, _ = _cli("fsck", str(store.root), "--quarantine")
    assert rc == 0
    assert "moved to quarantine/" in out
    assert "after quarantine: clean" in out
    assert not seg.exists()
    assert list((store.root / "quarantine").rglob(f"{x_ops[0]}.parquet"))
    fresh = LineageStore(store.root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing damaged is left to warn about
        assert {op.op_id for op in fresh.operations()} == {x_ops[1], *y_ops}
    log = DSLog(fresh)
    assert log.prov_query(["y2", "y1", "y0"], np.s_[1, 1]).to_flat().tolist() == [3]
    assert log.prov_query(["x2", "x1"], np.s_[0, 0]).to_flat().tolist() == [0]
    assert _cli("fsck", str(store.root))[0] == 0


def test_truncated_pack_is_reported_and_the_rest_listed(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    packed = _chain(store, "p", 4)
    store.compact()
    loose = _chain(store, "q")
    store.operations()
    (pack,) = (store.root / "packs").glob("*.parquet")
    with open(pack, "r+b") as f:
        f.truncate(pack.stat().st_size // 2)
    fresh = LineageStore(store.root)
    with pytest.warns(DamagedStoreWarning, match=pack.name):
        listed = {op.op_id for op in fresh.operations()}
    assert listed == set(loose)
    assert f"packs/{pack.name}" in fresh.damaged()
    with pytest.raises(LineageCorruptError, match=pack.name) as info:
        DSLog(fresh).prov_query(["p2", "p1"], np.s_[0, 0])
    assert "p1" in str(info.value)
    assert DSLog(fresh).prov_query(["q2", "q1", "q0"], np.s_[2, 1]).to_flat().tolist() == [5]
    skipped = fresh.rebuild_catalog()
    assert f"packs/{pack.name}" in skipped
    report = fresh.verify()
    assert set(report.damaged) == {f"packs/{pack.name}"}
    with pytest.warns(DamagedStoreWarning):
        rc, out, err = _cli("rebuild-catalog", str(store.root))
    assert rc == 0
    assert f"skipped damaged packs/{pack.name}" in err
    assert "2 operation(s)" in out
    assert len(packed) == 4


def test_damaged_row_of_a_pack_leaves_the_other_rows(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    ops = _chain(store, "p", 4)
    store.compact()
    (pack,) = (store.root / "packs").glob("*.parquet")
    # rewrite the pack with one row's record changed but its checksums kept
    t = pq.read_table(pack)
    recs = t.column("rec").to_pylist()
    recs[1] = recs[1].replace('"copy"', '"cop!"')
    t = t.set_column(1, "rec", pa.array(recs, pa.string()))
    pq.write_table(t, pack)
    fresh = LineageStore(store.root)
    with pytest.warns(DamagedStoreWarning):
        listed = [op.op_id for op in fresh.operations()]
    assert sorted(listed) == sorted(o for i, o in enumerate(ops) if i != 1)
    report = fresh.verify()
    assert report.operations[f"packs/{pack.name}"] == [ops[1]]


def _to_legacy(root: Path) -> None:
    """Rewrite every file of a store as format 2-1-0 wrote it (no checksums)."""
    for seg in [*root.glob("operations/*.parquet"), *root.glob("packs/*.parquet")]:
        with Segment(seg) as s:
            entries = s.entries()
        schema = pa.schema(
            [("op", pa.string()), ("rec", pa.string()), ("data", pa.list_(pa.large_binary()))]
        )
        table = pa.table(
            [
                pa.array([e[0] for e in entries], pa.string()),
                pa.array([e[1].replace('"2-2-0"', '"2-1-0"') for e in entries], pa.string()),
                pa.array([e[2] for e in entries], pa.list_(pa.large_binary())),
            ],
            schema=schema,
        )
        tmp = seg.with_suffix(".tmp")
        with pq.ParquetWriter(tmp, schema, store_schema=False) as writer:
            writer.write_table(table)
            writer.add_key_value_metadata(
                {"dslog.schema_version": "2-1-0", "dslog.kind": "operations"}
            )
        with open(seg, "r+b") as f:  # in place: linked array records follow
            data = tmp.read_bytes()
            f.write(data)
            f.truncate(len(data))
        tmp.unlink()
    for rec in root.glob("arrays/*/*.json"):
        d = json.loads(rec.read_text())
        del d["checksum"]
        d["schema_version"] = "2-1-0"
        rec.write_text(json.dumps(d))


def test_files_before_checksums_are_read_unverified_and_compaction_migrates_them(
    tmp_path: Path,
) -> None:
    store = LineageStore(tmp_path / "s")
    ops = _chain(store, "x", 3)
    answer = DSLog(store).prov_query(["x3", "x2", "x1"], np.s_[2, :]).to_flat().tolist()
    _to_legacy(store.root)
    fresh = LineageStore(store.root)
    assert [op.op_id for op in fresh.operations()] == ops
    assert DSLog(fresh).prov_query(["x3", "x2", "x1"], np.s_[2, :]).to_flat().tolist() == answer
    report = fresh.verify()
    assert report.clean
    assert {f"operations/{o}.parquet" for o in ops} <= set(report.unverified)
    assert any(u.endswith(".json") for u in report.unverified)
    rc, out, _ = _cli("fsck", str(store.root))
    assert rc == 0
    assert "UNVERIFIED operations/" in out
    compacted = fresh.compact()
    assert compacted.operations == 3
    after = LineageStore(store.root).verify()
    assert not any(u.startswith(("operations/", "packs/")) for u in after.unverified)
    with Segment(next((store.root / "packs").glob("*.parquet"))) as pack:
        assert pack.verified


def test_a_downgraded_version_string_is_damage(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    (op,) = _chain(store, "x", 1)
    seg = store.root / "operations" / f"{op}.parquet"
    data = bytearray(seg.read_bytes())
    at = data.rfind(b"2-2-0")  # the footer's metadata (the record's copy comes first)
    data[at : at + 5] = b"2-1-0"
    seg.write_bytes(bytes(data))
    with pytest.raises(LineageCorruptError, match="checksum"):
        Segment(seg)
    rec = next((store.root / "arrays").glob("x0-*/default.json"))
    d = json.loads(rec.read_text())
    del d["checksum"]
    rec.write_text(json.dumps(d))
    with pytest.raises(LineageCorruptError, match="checksum"):
        LineageStore(store.root).get_array("x0")


def test_names_the_catalog_cannot_hold_are_refused(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    bad = os.fsdecode(b"\xff")
    with pytest.raises(InvalidRelationError, match="lone surrogate"):
        store.register_array(bad, (2,))
    with pytest.raises(InvalidRelationError, match="lone surrogate"):
        store.register_array("ok", (2,), version=bad)
    store.register_array("a", (2,))
    with pytest.raises(InvalidRelationError, match="lone surrogate"):
        store.register_operation(bad, ["a"], [NewArray("b", (2,))], {})


def test_a_store_holding_such_a_name_from_before_still_lists(tmp_path: Path) -> None:
    """Earlier versions stored lone surrogates (JSON escapes them); the catalog escapes them
    too, and every listing keeps working."""
    store = LineageStore(tmp_path / "s")
    store.register_array("a", (2,))
    store.register_array("plain", (2,))
    bad = os.fsdecode(b"\xff")
    rec = next((store.root / "arrays").glob("plain-*/default.json"))
    d = json.loads(rec.read_text())
    d["name"] = bad  # what an older dslog wrote for this name
    rec.write_bytes(record_json({k: v for k, v in d.items() if k != "checksum"}))
    fresh = LineageStore(store.root)
    names = {a.name for a in fresh.arrays()}
    assert "a" in names
    table = fresh.sql("SELECT name FROM arrays ORDER BY name")
    assert table.column("name").to_pylist() == ["\\udcff", "a"]
    assert _cli("inspect", str(store.root), "--format", "json")[0] == 0
    # a terminal that takes strict UTF-8 only still gets the listing (escaped)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    done = subprocess.run(
        [sys.executable, "-m", "dslog_dagster.cli", "inspect", str(store.root)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "\\udcff" in done.stdout


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_parquet('/tmp/anything.parquet')",
        "SELECT * FROM glob('/etc/*')",
        "COPY (SELECT 1) TO '/tmp/dslog-out.csv'",
        "ATTACH '/tmp/dslog-other.duckdb' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
    ],
)
def test_catalog_sql_cannot_reach_files(tmp_path: Path, query: str) -> None:
    store = LineageStore(tmp_path / "s")
    _chain(store, "x")
    with pytest.raises(QueryError):
        store.sql(query)
    # the catalog's own syncs and later queries still work
    _chain(store, "y")
    assert store.sync() is True
    n = store.sql("SELECT count(*) AS n FROM operations").column("n").to_pylist()
    assert n == [4]
    assert len(store.operations()) == 4
    rc, _, err = _cli("sql", str(store.root), query)
    assert rc == 2
    assert "dslog:" in err


def test_catalog_sql_reads_parquet_of_the_store_refused_but_tables_work(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    (op,) = _chain(store, "x", 1)
    seg = store.root / "operations" / f"{op}.parquet"
    with pytest.raises(QueryError, match="catalog tables only"):
        store.sql(f"SELECT * FROM read_parquet('{seg}')")
    got = store.sql(
        "SELECT o.op_id, count(*) AS n FROM operations o JOIN lineage_tables t USING (op_id) "
        "GROUP BY o.op_id"
    )
    assert got.to_pylist() == [{"op_id": op, "n": 1}]
