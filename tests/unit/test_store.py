"""Unit tests of the lineage store (`dslog_dagster.core.store`) and its catalog."""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dslog_dagster.core import (
    ArrayRecord,
    LineageRelation,
    LineageStore,
    OperationRecord,
    compress,
)
from dslog_dagster.core import store as store_module
from dslog_dagster.core.format.segment import Segment, segment_to_bytes
from dslog_dagster.core.store import files as files_module
from dslog_dagster.errors import (
    DamagedStoreWarning,
    DSLogError,
    InvalidRelationError,
    LineageNotFoundError,
    LineageStorageError,
    QueryError,
    SchemaVersionError,
    UnsupportedArrayError,
)


def identity(shape: tuple[int, ...]) -> LineageRelation:
    idx = np.argwhere(np.ones(shape, dtype=bool))
    return LineageRelation.from_pairs(shape, shape, idx, idx)


def all_to_all(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> LineageRelation:
    o = np.argwhere(np.ones(out_shape, dtype=bool))
    i = np.argwhere(np.ones(in_shape, dtype=bool))
    oo = np.repeat(o, len(i), axis=0)
    ii = np.tile(i, (len(o), 1))
    return LineageRelation.from_pairs(out_shape, in_shape, oo, ii)


def random_relation(rng: np.random.Generator, out_shape, in_shape, n: int) -> LineageRelation:
    o = np.stack([rng.integers(0, d, n) for d in out_shape], axis=1)
    i = np.stack([rng.integers(0, d, n) for d in in_shape], axis=1)
    return LineageRelation.from_pairs(out_shape, in_shape, o, i)


@pytest.fixture
def store(tmp_path: Path) -> LineageStore:
    return LineageStore(tmp_path / "store")


def visible_entries(store: LineageStore) -> tuple[list[str], list[str]]:
    return sorted(os.listdir(store.operations_dir)), sorted(os.listdir(store.staging_dir))


# --------------------------------------------------------------------------- arrays


def test_register_array_returns_record_and_is_idempotent(store: LineageStore) -> None:
    a = store.register_array("x", (3, 4), asset_key=["raw", "x"], version="v1")
    assert isinstance(a, ArrayRecord)
    assert (a.name, a.shape, a.dtype, a.asset_key, a.version) == (
        "x",
        (3, 4),
        "float64",
        "raw/x",
        "v1",
    )
    again = store.register_array("x", [3, 4], version="v1")
    assert again == a
    assert again.created_at == a.created_at
    assert store.get_array("x", "v1") == a


def test_register_array_different_shape_raises(store: LineageStore) -> None:
    store.register_array("x", (3, 4))
    with pytest.raises(InvalidRelationError, match=r"`x`.*already registered with shape \(3, 4\)"):
        store.register_array("x", (4, 4))
    # another version is a different array
    assert store.register_array("x", (4, 4), version="v2").shape == (4, 4)


def test_register_array_first_writer_wins_across_store_instances(tmp_path: Path) -> None:
    s1, s2 = LineageStore(tmp_path), LineageStore(tmp_path)
    a = s1.register_array("shared", (5,), dtype="int32")
    b = s2.register_array("shared", (5,), dtype="float64")
    assert b == a
    assert b.dtype == "int32"
    with pytest.raises(InvalidRelationError):
        s2.register_array("shared", (6,))


def test_get_array_latest_version_when_none(store: LineageStore) -> None:
    store.register_array("x", (2,), version="v1")
    time.sleep(0.002)
    v2 = store.register_array("x", (3,), version="v2")
    assert store.get_array("x") == v2
    assert store.get_array("x", "v1").shape == (2,)


def test_get_array_missing_lists_close_names(store: LineageStore) -> None:
    store.register_array("temperature", (2,))
    store.register_array("pressure", (2,))
    with pytest.raises(LineageNotFoundError, match="Did you mean `temperature`"):
        store.get_array("temperatur")
    with pytest.raises(LineageNotFoundError, match="register_array"):
        store.get_array("zzz")


def test_get_array_missing_version_lists_versions(store: LineageStore) -> None:
    store.register_array("x", (2,), version="v1")
    with pytest.raises(LineageNotFoundError, match=r"no version `v9`.*`v1`"):
        store.get_array("x", "v9")


@pytest.mark.parametrize("bad", ["", "a\x00b", None, 3])
def test_register_array_rejects_bad_names(store: LineageStore, bad: object) -> None:
    with pytest.raises(InvalidRelationError):
        store.register_array(bad, (2,))  # type: ignore[arg-type]
    if bad is not None:  # None is the default version
        with pytest.raises(InvalidRelationError):
            store.register_array("ok", (2,), version=bad)  # type: ignore[arg-type]


def test_register_array_rejects_bad_shape_and_dtype(store: LineageStore) -> None:
    with pytest.raises(InvalidRelationError, match="negative"):
        store.register_array("x", (-1, 2))
    with pytest.raises(UnsupportedArrayError, match="dtype"):
        store.register_array("x", (2,), dtype="not-a-dtype")


HOSTILE_NAMES = [
    "../../etc/passwd",
    "a/b",
    "..",
    ".",
    "/etc/passwd",
    "C:\\Windows\\system32",
    "日本語/データ",
    "ünïcödé ☃",
    "x" * 300,
    "-rf",
    "name\nwith\nnewlines",
    ".hidden",
]


def test_hostile_names_stay_under_root(tmp_path: Path) -> None:
    root = tmp_path / "inner" / "store"
    store = LineageStore(root)
    before = sorted(p.name for p in tmp_path.iterdir())
    for k, name in enumerate(HOSTILE_NAMES):
        out = store.register_array(name, (2, 2), asset_key=name, version=name)
        inp = store.register_array(name + "-in", (2, 2), version=f"../v{k}")
        op = store.register_operation(name, [inp], [out], {(name, name + "-in"): identity((2, 2))})
        assert store.get_array(name, name) == out
        assert store.read_lineage(op, name, name + "-in").decompress() == identity((2, 2))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [*dirnames, *filenames]:
            path = Path(dirpath, entry)
            assert path.resolve().is_relative_to(real_root), path
            assert len(entry) <= 120
    assert {a.name for a in store.arrays()} == {*HOSTILE_NAMES, *(n + "-in" for n in HOSTILE_NAMES)}


# --------------------------------------------------------------------------- operations


def test_register_operation_round_trip(store: LineageStore) -> None:
    rng = np.random.default_rng(0)
    x = store.register_array("x", (4, 5))
    w = store.register_array("w", (5,))
    y = store.register_array("y", (4,), version="v1")
    r_x = random_relation(rng, (4,), (4, 5), 30)
    r_w = all_to_all((4,), (5,))
    op = store.register_operation(
        "matvec",
        [x, "w"],
        ["y"],
        {("y", "x"): r_x, ("y", "w"): compress(r_w)},
        args={"axis": np.int64(1), "scale": 0.5, "names": ("a", "b")},
        capture_method="annotator",
        timings={"capture_s": 0.25},
    )
    assert isinstance(op, OperationRecord)
    assert op.inputs == (x, w)
    assert op.outputs == (y,)
    assert op.args == {"axis": 1, "names": ["a", "b"], "scale": 0.5}
    assert op.capture_method == "annotator"
    assert op.timings["capture_s"] == 0.25
    assert op.timings["compress_s"] > 0
    assert "encode_s" in op.timings
    assert [(t.output, t.input) for t in op.tables] == [("y", "x"), ("y", "w")]
    segment = store.operations_dir / f"{op.op_id}.parquet"
    for t in op.tables:
        assert t.path == f"operations/{op.op_id}.parquet"
        assert 0 < t.stored_bytes < segment.stat().st_size
    assert op.table("y", "w").n_pairs == 20
    assert store.read_lineage(op, "y", "x").decompress() == r_x
    assert store.read_lineage(op.op_id, y, w).decompress() == r_w

    # A fresh instance (another process) reads the same record from the files.
    other = LineageStore(store.root)
    assert other.get_operation(op.op_id) == op
    with Segment(segment) as seg:
        assert seg.op_ids == [op.op_id]
        meta = json.loads(seg.record(op.op_id))
        assert [len(seg.blob(op.op_id, k)) for k in range(2)] == [t.stored_bytes for t in op.tables]
    file_meta = pq.ParquetFile(segment).metadata.metadata
    assert file_meta[b"dslog.schema_version"].decode() == store_module.STORE_SCHEMA_VERSION
    assert meta["schema_version"] == store_module.STORE_SCHEMA_VERSION
    assert meta["inputs"][0]["name"] == "x"
    assert meta["tables"][1]["bytes"] == op.tables[1].stored_bytes


def test_register_operation_user_compress_timing_is_added(store: LineageStore) -> None:
    store.register_array("x", (3,))
    store.register_array("y", (3,))
    op = store.register_operation(
        "f", ["x"], ["y"], {("y", "x"): identity((3,))}, timings={"compress_s": 10.0}
    )
    assert op.timings["compress_s"] > 10.0


def test_op_ids_are_unique_and_time_ordered(store: LineageStore) -> None:
    store.register_array("x", (2,))
    store.register_array("y", (2,))
    ops = [store.register_operation("f", ["x"], ["y"], {}) for _ in range(20)]
    ids = [o.op_id for o in ops]
    assert len(set(ids)) == 20
    assert ids == sorted(ids)
    assert [o.op_id for o in store.operations()] == ids


def _setup_xy(store: LineageStore) -> None:
    store.register_array("x", (3, 3))
    store.register_array("z", (3,))
    store.register_array("y", (3, 3))


@pytest.mark.parametrize(
    ("lineage", "match"),
    [
        ({("nope", "x"): identity((3, 3))}, "output `nope`.*declared outputs"),
        ({("y", "nope"): identity((3, 3))}, "input `nope`.*declared inputs"),
        ({("y", "x"): identity((3, 3)), ("y", "z"): identity((3,))}, r"shapes \(3,\) ← \(3,\)"),
        ({("y", "x"): identity((3, 3)), ("y", "z"): "oops"}, "pass a LineageRelation"),
        ({("y", "x"): identity((3, 3)), "y": identity((3, 3))}, "must be a tuple"),
    ],
)
def test_invalid_lineage_leaves_nothing(store: LineageStore, lineage: dict, match: str) -> None:
    _setup_xy(store)
    with pytest.raises(InvalidRelationError, match=match):
        store.register_operation("op", ["x", "z"], ["y"], lineage)
    assert visible_entries(store) == ([], [])
    assert store.operations() == []


def test_second_relation_invalid_leaves_nothing(store: LineageStore) -> None:
    _setup_xy(store)
    wrong = all_to_all((3, 3), (4,))  # the input `z` has 3 cells, not 4
    with pytest.raises(InvalidRelationError, match=r"`y` ← `z`.*registered as \(3, 3\) ← \(3,\)"):
        store.register_operation(
            "op", ["x", "z"], ["y"], {("y", "x"): identity((3, 3)), ("y", "z"): wrong}
        )
    assert visible_entries(store) == ([], [])
    assert store.tables() == []


def test_other_bad_operation_inputs(store: LineageStore) -> None:
    _setup_xy(store)
    with pytest.raises(LineageNotFoundError, match="register_array"):
        store.register_operation("op", ["x", "unknown"], ["y"], {})
    x = store.get_array("x")
    fake = ArrayRecord("ghost", (3,), "float64", None, None, "0", x.created_at)
    with pytest.raises(LineageNotFoundError, match="not registered"):
        store.register_operation("op", [fake], ["y"], {})
    bad = ArrayRecord("x", (9,), "float64", None, None, x.array_id, x.created_at)
    with pytest.raises(InvalidRelationError, match="has shape"):
        store.register_operation("op", [bad], ["y"], {})
    with pytest.raises(InvalidRelationError, match="more than once"):
        store.register_operation("op", ["x", "x"], ["y"], {})
    with pytest.raises(InvalidRelationError, match="JSON"):
        store.register_operation("op", ["x"], ["y"], {}, args={"f": object()})
    with pytest.raises(InvalidRelationError, match="JSON"):
        store.register_operation("op", ["x"], ["y"], {}, args={"f": float("nan")})
    with pytest.raises(InvalidRelationError, match="finite"):
        store.register_operation("op", ["x"], ["y"], {}, timings={"t": "slow"})
    with pytest.raises(InvalidRelationError, match="sequences"):
        store.register_operation("op", "x", ["y"], {})
    with pytest.raises(InvalidRelationError, match="Operation name"):
        store.register_operation("", ["x"], ["y"], {})
    assert visible_entries(store) == ([], [])


def test_write_failure_leaves_nothing(store: LineageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _setup_xy(store)
    real = files_module.write_synced
    calls = {"n": 0}

    def failing(path: Path, data: bytes, durable: bool = True) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            msg = "No space left on device"
            raise OSError(28, msg)
        real(path, data, durable)

    monkeypatch.setattr(files_module, "write_synced", failing)
    lineage = {("y", "x"): identity((3, 3)), ("y", "z"): all_to_all((3, 3), (3,))}
    with pytest.raises(LineageStorageError, match="No space left"):
        store.register_operation("op", ["x", "z"], ["y"], lineage)
    assert calls["n"] == 1
    assert visible_entries(store) == ([], [])

    def failing_rename(src: str, dst: str) -> None:
        msg = "rename refused"
        raise OSError(msg)

    monkeypatch.setattr(files_module, "write_synced", real)
    monkeypatch.setattr(files_module.os, "rename", failing_rename)
    with pytest.raises(LineageStorageError, match="rename refused"):
        store.register_operation("op", ["x", "z"], ["y"], lineage)
    assert visible_entries(store) == ([], [])
    monkeypatch.undo()
    op = store.register_operation("op", ["x", "z"], ["y"], lineage)
    assert [o.op_id for o in store.operations()] == [op.op_id]


def test_stale_staging_is_cleaned_and_ignored(tmp_path: Path) -> None:
    store = LineageStore(tmp_path)
    old = store.staging_dir / "deadbeef"
    old.mkdir()
    (old / "operation.json").write_text("{}")
    fresh = store.staging_dir / "inflight"
    fresh.mkdir()
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert store.operations() == []
    LineageStore(tmp_path)
    assert sorted(os.listdir(store.staging_dir)) == ["inflight"]


def test_read_lineage_missing(store: LineageStore) -> None:
    _setup_xy(store)
    op = store.register_operation("op", ["x"], ["y"], {("y", "x"): identity((3, 3))})
    with pytest.raises(LineageNotFoundError, match=r"no lineage table.*Its tables: \(`y` ← `x`\)"):
        store.read_lineage(op, "y", "z")
    with pytest.raises(LineageNotFoundError, match="not an operation id"):
        store.read_lineage("../../etc", "y", "x")
    with pytest.raises(LineageNotFoundError, match="No operation"):
        store.read_lineage("0" * 48, "y", "x")
    with pytest.raises(KeyError):  # LineageNotFoundError is a KeyError too
        store.get_operation("0" * 48)


def test_unknown_schema_version_is_refused(store: LineageStore) -> None:
    _setup_xy(store)
    op = store.register_operation("op", ["x"], ["y"], {("y", "x"): identity((3, 3))})
    path = store.operations_dir / f"{op.op_id}.parquet"
    original = path.read_bytes()
    with Segment(path) as seg:
        (entry,) = seg.entries()
    meta = json.loads(entry[1])
    meta["schema_version"] = "9-0-0"
    path.write_bytes(segment_to_bytes([(op.op_id, json.dumps(meta), entry[2])]))
    with pytest.raises(SchemaVersionError, match="Upgrade dslog-dagster"):
        LineageStore(store.root).get_operation(op.op_id)
    # the segment file itself carries the store format version too
    f = pq.ParquetFile(io.BytesIO(original))
    table = f.read().replace_schema_metadata(
        {**f.metadata.metadata, b"dslog.schema_version": b"3-0-0"}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    path.write_bytes(buf.getvalue())
    with pytest.raises(SchemaVersionError, match="3-0-0"):
        LineageStore(store.root).read_lineage(op.op_id, "y", "x")


# --------------------------------------------------------------------------- listing + catalog


def _populate(store: LineageStore) -> list[OperationRecord]:
    store.register_array("a", (4,))
    store.register_array("b", (4,), asset_key="b", version="1")
    store.register_array("c", (2, 2))
    ops = [
        store.register_operation("inc", ["a"], ["b"], {("b", "a"): identity((4,))}),
        store.register_operation(
            "reshape",
            ["b"],
            ["c"],
            {("c", "b"): LineageRelation.from_flat((2, 2), (4,), np.arange(4), np.arange(4))},
        ),
        store.register_operation("inc", ["a"], ["b"], {("b", "a"): all_to_all((4,), (4,))}),
    ]
    return ops


def _listing(store: LineageStore) -> tuple:
    return (
        [o.op_id for o in store.operations()],
        [(a.name, a.version) for a in store.arrays()],
        store.tables(),
        store.sql("SELECT * FROM lineage_tables ORDER BY op_id, path").to_pylist(),
        store.sql("SELECT * EXCLUDE (created_at) FROM arrays ORDER BY array_id").to_pylist(),
    )


def test_listing_and_queries(store: LineageStore) -> None:
    inc1, reshape, inc2 = _populate(store)
    assert store.operations() == [inc1, reshape, inc2]
    assert store.operations("inc") == [inc1, inc2]
    assert store.operations("nothing") == []
    assert [(a.name, a.version) for a in store.arrays()] == [("a", None), ("b", "1"), ("c", None)]
    assert [(t.op_id, t.output, t.input) for t in store.tables()] == [
        (inc1.op_id, "b", "a"),
        (reshape.op_id, "c", "b"),
        (inc2.op_id, "b", "a"),
    ]
    assert store.operations_between("a", "b") == [inc1, inc2]
    assert store.operations_between("b", "c") == [reshape]
    assert store.operations_between("a", "c") == []
    assert store.operations_between(store.get_array("a"), store.get_array("b", "1")) == [inc1, inc2]
    assert store.sync() is True


def test_sql_returns_arrow_and_is_read_only(store: LineageStore) -> None:
    inc1, _, inc2 = _populate(store)
    t = store.sql(
        "SELECT op_id, n_pairs, bytes, output_asset_key, output_version FROM lineage_tables "
        "WHERE op_name = ? ORDER BY op_id",
        ["inc"],
    )
    assert isinstance(t, pa.Table)
    assert t.column("op_id").to_pylist() == [inc1.op_id, inc2.op_id]
    assert t.column("n_pairs").to_pylist() == [4, 16]
    assert t.column("output_asset_key").to_pylist() == ["b", "b"]
    args = store.sql("SELECT args::JSON AS a, timings::JSON->>'compress_s' AS c FROM operations")
    assert args.num_rows == 3
    for bad in (
        "DELETE FROM operations",
        "SELECT 1; DROP TABLE arrays",
        "ATTACH 'x.db'",
        "COPY operations TO 'x.csv'",
    ):
        with pytest.raises(QueryError, match="read-only"):
            store.sql(bad)
    with pytest.raises(QueryError, match="does not parse"):
        store.sql("SELEC nonsense")
    with pytest.raises(QueryError, match="Tables: arrays"):
        store.sql("SELECT * FROM no_such_table")
    assert len(store.operations()) == 3


def test_rebuild_catalog_after_deleting_it(store: LineageStore) -> None:
    _populate(store)
    before = _listing(store)
    store.catalog.path.unlink()
    store.rebuild_catalog()
    assert _listing(store) == before
    # and a missing catalog is re-created by a plain sync too
    store.catalog.path.unlink()
    assert _listing(LineageStore(store.root)) == before


def test_damaged_catalog_is_rebuilt_and_says_so(store: LineageStore) -> None:
    _populate(store)
    before = _listing(store)
    store.catalog.path.write_bytes(b"this is not a duckdb file" * 100)
    with pytest.warns(DamagedStoreWarning, match="catalog.*damaged.*rebuilt"):
        assert _listing(store) == before  # the damaged cache is never trusted
    assert store.catalog.recovered is not None
    assert store.sync() is True
    assert _listing(store) == before
    store.catalog.path.write_bytes(b"this is not a duckdb file" * 100)
    with pytest.warns(DamagedStoreWarning, match="catalog"):
        assert store.sync() is True
    assert store.rebuild_catalog() == {}
    assert _listing(store) == before


def test_sync_indexes_operations_written_without_catalog(
    store: LineageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.catalog, "index_operation", lambda record: False)
    monkeypatch.setattr(store.catalog, "index_array", lambda record, path: False)
    ops = _populate(store)
    ops += [  # enough rows for the bulk (Arrow) insert path
        store.register_operation("inc", ["a"], ["b"], {("b", "a"): identity((4,))})
        for _ in range(8)
    ]
    monkeypatch.undo()
    assert store.operations() == ops
    assert store.sql("SELECT count(*) AS n FROM arrays").column("n").to_pylist() == [3]


def test_core_does_not_import_dagster_or_spark() -> None:
    code = (
        "import sys, dslog_dagster.core.store, dslog_dagster.core.store.catalog; "
        "assert 'dagster' not in sys.modules and 'pyspark' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_errors_are_dslog_errors(store: LineageStore) -> None:
    with pytest.raises(DSLogError):
        store.get_array("missing")
    with pytest.raises(DSLogError):
        store.sql("DROP TABLE arrays")


@pytest.mark.parametrize("durable", [True, False])
def test_durable_controls_fsync_not_atomicity(
    tmp_path: Path, fsync_calls: list[int], durable: bool
) -> None:
    synced = fsync_calls
    store = LineageStore(tmp_path / "s", durable=durable)
    assert len(synced) == (2 if durable else 0)  # the new store's id and its directory
    synced.clear()
    assert len(LineageStore(tmp_path / "s", durable=durable).store_id) == 32
    assert not synced  # an existing id is read, not written
    _setup_xy(store)
    op = store.register_operation("neg", ["x"], ["y"], {("y", "x"): identity((3, 3))})
    # three array records and one operation file, each with its directory
    assert len(synced) == (2 * 4 if durable else 0)
    assert not list(store.staging_dir.iterdir())  # published by rename either way
    fresh = LineageStore(tmp_path / "s")
    assert fresh.read_lineage(fresh.get_operation(op.op_id), "y", "x").decompress() == identity(
        (3, 3)
    )
