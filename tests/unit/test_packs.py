"""Operation segments and packs: blobs, segment files, compaction and its safety."""

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dslog_dagster.core import LineageRelation, LineageStore, compress
from dslog_dagster.core.format import segment as segment_module
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.format.segment import SEGMENT_SCHEMA_VERSION, Segment, segment_to_bytes
from dslog_dagster.core.store import compaction as compaction_module
from dslog_dagster.core.store import files as files_module
from dslog_dagster.core.store.operations import OperationFiles
from dslog_dagster.core.testing import analytic as an
from dslog_dagster.errors import LineageCorruptError, LineageStorageError, SchemaVersionError


def _ops(store: LineageStore, n: int, big: int = 0) -> list:
    """``n`` small operations (two tables each) and ``big`` ones with a large columnar table."""
    store.register_array("x", (6, 5))
    store.register_array("v", (5,))
    store.register_array("y", (6,))
    store.register_array("s", (50_000,))
    store.register_array("t", (50_000,))
    ops = []
    for k in range(n):
        lineage = {("y", "x"): an.sum_axis((6, 5), 1), ("y", "v"): an.dot((6, 5), (5,))[1]}
        ops.append(store.register_operation("matvec", ["x", "v"], ["y"], lineage, args={"k": k}))
    rng = np.random.default_rng(0)
    for _ in range(big):
        idx = np.arange(50_000)
        perm = LineageRelation.from_flat((50_000,), (50_000,), idx, rng.permutation(idx))
        ops.append(store.register_operation("shuffle", ["s"], ["t"], {("t", "s"): perm}))
    return ops


def _snapshot(store: LineageStore) -> list:
    return [
        (op.op_id, t.output, t.input, store.read_lineage(op, t.output, t.input).decompress())
        for op in store.operations()
        for t in op.tables
    ]


@pytest.mark.parametrize(
    "relation",
    [
        an.sum_axis((1000, 1000), 0),
        an.negative((10, 1000)),
        an.tile((3, 7), (2, 2)),
        an.flip((4, 5), 1),
        LineageRelation.from_flat((100,), (100,), np.arange(100), np.arange(100)[::-1] * 0 + 7),
    ],
)
def test_blob_round_trip(relation: LineageRelation) -> None:
    for fallback in ("auto", "always"):
        table = compress(relation, fallback=fallback)  # type: ignore[arg-type]
        back = table_from_blob(table_to_blob(table))
        assert back.encoding == table.encoding
        assert back.decompress() == relation


def test_blob_of_structured_table_is_a_few_dozen_bytes() -> None:
    assert len(table_to_blob(compress(an.sum_axis((1000, 1000), 0)))) < 48


def test_damaged_blob_is_a_storage_error() -> None:
    blob = table_to_blob(compress(an.negative((10, 1000))))
    for bad in (blob[:3], blob[:-1], b"\x00\xff"):
        with pytest.raises(LineageStorageError, match=r"damaged|promises"):
            table_from_blob(bad)


def test_segment_round_trip_and_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dslog_dagster.core.format.segment.SEGMENT_ROW_GROUP", 3)
    entries = [(f"{i:048x}", json.dumps({"i": i}), [bytes([i]) * i, b""]) for i in range(10)]
    path = tmp_path / "seg.parquet"
    path.write_bytes(segment_to_bytes(entries))
    assert pq.ParquetFile(path).metadata.num_row_groups == 4
    with Segment(path) as seg:
        assert seg.op_ids == [e[0] for e in entries]
        assert seg.entries() == entries
        assert seg.record(entries[7][0]) == json.dumps({"i": 7})
        assert seg.blob(entries[7][0], 0) == bytes([7]) * 7
        with pytest.raises(KeyError):
            seg.blob(entries[7][0], 2)
        with pytest.raises(KeyError):
            seg.record("f" * 48)


def test_segment_version_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "seg.parquet"
    path.write_bytes(segment_to_bytes([("a" * 48, "{}", [])]))
    meta = pq.ParquetFile(path).metadata.metadata
    assert meta[b"dslog.schema_version"].decode() == SEGMENT_SCHEMA_VERSION
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**meta, b"dslog.schema_version": b"7-0-0"}), path)
    with pytest.raises(SchemaVersionError, match="7-0-0"):
        Segment(path)
    pq.write_table(table.replace_schema_metadata({}), path)
    with pytest.raises(LineageCorruptError, match="dslog metadata") as info:
        Segment(path)
    assert info.value.path == str(path)


def test_compact_packs_small_operations_and_keeps_big_ones(tmp_path: Path) -> None:
    store = LineageStore(tmp_path)
    ops = _ops(store, 12, big=1)
    before = _snapshot(store)
    listing = ([o.op_id for o in store.operations()], store.tables())
    res = store.compact()
    assert (res.operations, res.files_removed, len(res.packs)) == (12, 12, 1)
    assert res.bytes_after < res.bytes_before / 4  # one footer instead of twelve
    big = ops[-1].op_id
    assert sorted(os.listdir(store.operations_dir)) == [f"{big}.parquet"]
    assert _snapshot(store) == before
    # a fresh instance (another process) and a rebuilt catalog see the same thing
    other = LineageStore(tmp_path)
    assert _snapshot(other) == before
    assert [o.op_id for o in other.operations()] == listing[0]
    paths = {t.op_id: t.path for t in other.tables()}
    assert paths[big] == f"operations/{big}.parquet"
    assert {paths[o.op_id] for o in ops[:-1]} == set(res.packs)
    other.catalog.path.unlink()
    other.rebuild_catalog()
    assert other.tables() == LineageStore(tmp_path).tables()
    assert [(t.op_id, t.output, t.input, t.n_pairs) for t in other.tables()] == [
        (t.op_id, t.output, t.input, t.n_pairs) for t in listing[1]
    ]
    # nothing left to do
    assert store.compact().operations == 0


def test_compact_merges_small_packs(tmp_path: Path) -> None:
    store = LineageStore(tmp_path)
    _ops(store, 4)
    first = store.compact()
    assert len(first.packs) == 1
    _ops_more = [
        store.register_operation("matvec", ["x", "v"], ["y"], {("y", "x"): an.sum_axis((6, 5), 1)})
        for _ in range(3)
    ]
    second = store.compact()
    assert (second.operations, second.files_removed) == (7, 4)  # 3 segments + the old pack
    assert os.listdir(store.packs_dir) == [Path(second.packs[0]).name]
    assert len(store.operations()) == 7
    assert len(_ops_more) == 3


def test_compact_splits_packs_at_the_target_size(tmp_path: Path) -> None:
    store = LineageStore(tmp_path)
    _ops(store, 10)
    res = store.compact(pack_bytes=3000)
    assert len(res.packs) > 2
    assert sorted(op for p in res.packs for op in Segment(tmp_path / p).op_ids) == sorted(
        o.op_id for o in store.operations()
    )


def test_reader_finds_operation_after_its_file_moved(tmp_path: Path) -> None:
    # A reader that indexed the store before a compaction (another process) must follow the
    # operation into its pack, both for records it has not loaded and for tables.
    writer = LineageStore(tmp_path)
    ops = _ops(writer, 5)
    reader = LineageStore(tmp_path)
    assert [o.op_id for o in reader.operations()] == [o.op_id for o in ops]
    first = reader.get_operation(ops[0].op_id)
    reader.operation_files.records.clear()  # forget loaded records, keep the stale location index
    writer.compact()
    for op in ops:
        assert reader.get_operation(op.op_id).op_id == op.op_id
    assert reader.read_lineage(first, "y", "x").decompress() == an.sum_axis((6, 5), 1)
    assert reader.tables()[0].path.startswith("packs/")


def test_reader_retries_when_the_file_vanishes_mid_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The segment a reader located is packed and deleted between the lookup and the open.
    store = LineageStore(tmp_path)
    ops = _ops(store, 3)
    compactor = LineageStore(tmp_path)
    real = segment_module.Segment
    calls = {"n": 0}

    def racing(path: Path, op_ids: Sequence[str] | None = None) -> Segment:
        calls["n"] += 1
        if calls["n"] == 1:
            compactor.compact()
        return real(path, op_ids)

    monkeypatch.setattr(segment_module, "Segment", racing)
    assert store.read_lineage(ops[1], "y", "x").decompress() == an.sum_axis((6, 5), 1)
    assert calls["n"] >= 2


def test_operation_in_two_segments_is_listed_once(tmp_path: Path) -> None:
    # A compaction that crashed after publishing its pack leaves every operation in two files.
    store = LineageStore(tmp_path)
    ops = _ops(store, 3)
    entries = []
    for op in ops:
        with Segment(store.operations_dir / f"{op.op_id}.parquet") as seg:
            entries += seg.entries()
    (store.packs_dir / f"{'0' * 47}1.parquet").write_bytes(segment_to_bytes(entries))
    other = LineageStore(tmp_path)
    other.rebuild_catalog()
    assert [o.op_id for o in other.operations()] == [o.op_id for o in ops]
    # with a pack big enough to stay, the leftovers are dropped without being packed again
    res = other.compact(pack_bytes=1000)
    assert (res.operations, res.files_removed) == (0, 3)
    assert os.listdir(store.operations_dir) == []
    # a small pack is merged instead: one copy of each operation survives
    _ops(other, 1)
    res = other.compact()
    assert (res.operations, res.files_removed) == (4, 2)
    assert len(os.listdir(store.packs_dir)) == 1
    assert _snapshot(other) == _snapshot(store)


def test_compaction_waits_for_the_lock(tmp_path: Path) -> None:
    store = LineageStore(tmp_path)
    _ops(store, 2)
    with compaction_module.compaction_lock(tmp_path / ".compact.lock", 1.0) as got:
        assert got
        res = store.compact(lock_timeout=0.2)
    assert res.skipped
    assert store.compact().operations == 2


def test_failed_pack_write_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LineageStore(tmp_path)
    _ops(store, 3)
    before = sorted(os.listdir(store.operations_dir))

    def failing(src: str, dst: str) -> None:
        msg = "rename refused"
        raise OSError(msg)

    monkeypatch.setattr(files_module.os, "rename", failing)
    with pytest.raises(LineageStorageError, match="rename refused"):
        store.compact()
    monkeypatch.undo()
    assert sorted(os.listdir(store.operations_dir)) == before
    assert os.listdir(store.packs_dir) == []
    assert os.listdir(store.staging_dir) == []


def test_a_sync_racing_a_compaction_still_indexes_every_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reader lists `operations/X.parquet`; before it reads X, another process packs X into
    # a pack published after the listing and deletes X. The sync must still index X's op.
    reader = LineageStore(tmp_path / "s")
    ops = _ops(reader, 4)
    real = OperationFiles.records_in
    raced: list[str] = []

    def racing(self: OperationFiles, rel: str) -> list:
        if not raced:
            raced.append(rel)
            LineageStore(self.layout.root).compact()  # another handle: packs and unlinks `rel`
        return real(self, rel)

    monkeypatch.setattr(OperationFiles, "records_in", racing)
    found = {op.op_id for op in reader.operations("matvec")}
    assert raced  # the race was staged
    assert found == {op.op_id for op in ops}
