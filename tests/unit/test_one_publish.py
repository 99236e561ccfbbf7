"""One flushed file per step: an operation registering its new output arrays (``NewArray``).

The operation's segment is fsynced once, hard-linked into each new output's array directory
as its record (``<version>.op.parquet``) and renamed into ``operations/``. These tests check
that every reader (``get_array``, listings, the catalog, a fresh process's store, compaction)
sees such arrays exactly like JSON records, that a crash at any point leaves nothing torn, and
that races with JSON records resolve to one record.
"""

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from dslog_dagster.core import LineageRelation, LineageStore, NewArray
from dslog_dagster.core.format import segment as segment_module
from dslog_dagster.core.store import files as files_module
from dslog_dagster.core.store import layout as layout_module
from dslog_dagster.core.store import records as records_module
from dslog_dagster.errors import InvalidRelationError, LineageNotFoundError, LineageStorageError


def identity(shape: tuple[int, ...]) -> LineageRelation:
    idx = np.argwhere(np.ones(shape, dtype=bool))
    return LineageRelation.from_pairs(shape, shape, idx, idx)


def register_step(store: LineageStore, version: str = "run1", shape=(3, 3)):
    """A tracked step as the IO manager writes it: input registered, output with the op."""
    store.register_array("x", shape, version="run0")
    x = store.get_array("x", "run0")
    return store.register_operation(
        "neg", [x], [NewArray("y", shape, asset_key="y", version=version)],
        {("y", "x"): identity(shape)},
    )  # fmt: skip


def array_files(store: LineageStore, name: str) -> list[str]:
    return sorted(os.listdir(store.arrays_dir / layout_module.array_dir_name(name)))


@pytest.mark.parametrize("durable", [True, False])
def test_new_output_is_one_file_linked_as_the_array_record(tmp_path: Path, durable: bool) -> None:
    store = LineageStore(tmp_path / "s", durable=durable)
    op = register_step(store)
    [link] = array_files(store, "y")
    assert link.endswith(".op.parquet")
    seg = store.operations_dir / f"{op.op_id}.parquet"
    link_path = store.arrays_dir / layout_module.array_dir_name("y") / link
    assert os.path.samefile(seg, link_path)  # one inode: one flushed file
    assert not list(store.staging_dir.iterdir())
    # a fresh handle (another process) reads the array from the segment's record
    fresh = LineageStore(tmp_path / "s")
    rec = fresh.get_array("y", "run1")
    assert rec == op.outputs[0]
    assert (rec.shape, rec.asset_key, rec.version) == ((3, 3), "y", "run1")
    assert fresh.get_array("y") == rec
    assert [a.name for a in fresh.arrays()] == ["x", "y"]
    got = fresh.read_lineage(fresh.get_operation(op.op_id), "y", "x").decompress()
    assert got == identity((3, 3))
    # idempotent: registering the same version again returns the linked record
    assert fresh.register_array("y", (3, 3), version="run1") == rec
    with pytest.raises(InvalidRelationError, match="already registered with shape"):
        fresh.register_array("y", (4, 4), version="run1")


def test_durable_publish_flushes_one_file_and_its_directories(
    tmp_path: Path, fsync_calls: list[int]
) -> None:
    store = LineageStore(tmp_path / "s")
    store.register_array("x", (3, 3), version="run0")
    synced = fsync_calls
    synced.clear()  # count the step's registration only
    store.register_operation(
        "neg", ["x"], [NewArray("y", (3, 3), version="r")], {("y", "x"): identity((3, 3))}
    )
    # the segment, the array directory and operations/ (was: two files and two directories)
    assert len(synced) == 3


def test_catalog_and_sql_list_linked_arrays(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    register_step(store)
    fresh = LineageStore(tmp_path / "s")
    names = fresh.sql("SELECT name, version FROM arrays ORDER BY name").to_pylist()
    assert names == [{"name": "x", "version": "run0"}, {"name": "y", "version": "run1"}]
    ops = fresh.sql("SELECT role, name FROM operation_arrays ORDER BY role").to_pylist()
    assert ops == [{"role": "input", "name": "x"}, {"role": "output", "name": "y"}]


def test_crash_after_link_before_rename_leaves_a_valid_array_and_no_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")

    class Crash(BaseException):
        """The process dies here (not an Exception: nothing may catch it)."""

    def crash(src: str, dst: str) -> None:
        raise Crash

    monkeypatch.setattr(files_module.os, "rename", crash)
    with pytest.raises(Crash):
        register_step(store)
    monkeypatch.undo()
    fresh = LineageStore(tmp_path / "s")
    assert fresh.operations() == []  # the operation never became visible
    # the array record that did appear is whole (its bytes were flushed before the link)
    assert fresh.get_array("y", "run1").shape == (3, 3)
    # running the step again registers the operation against that record
    op = register_step(fresh)
    assert [o.op_id for o in LineageStore(tmp_path / "s").operations()] == [op.op_id]
    assert array_files(fresh, "y") == array_files(store, "y")


def test_crash_before_link_leaves_nothing_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")

    class Crash(BaseException):
        pass

    def crash(src: str, dst: str) -> None:
        raise Crash

    store.register_array("x", (3, 3), version="run0")
    monkeypatch.setattr(files_module.os, "link", crash)
    with pytest.raises(Crash):
        register_step(store)
    monkeypatch.undo()
    fresh = LineageStore(tmp_path / "s")
    assert fresh.operations() == []
    with pytest.raises(LineageNotFoundError):
        fresh.get_array("y", "run1")
    # (a real crash leaves the flushed staging file, which clean_staging removes later)
    assert not list(fresh.staging_dir.iterdir())


def test_write_failure_is_loud_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")

    def full(path: Path, data: bytes, durable: bool = True) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    store.register_array("x", (3, 3), version="run0")
    monkeypatch.setattr(files_module, "write_synced", full)
    with pytest.raises(LineageStorageError, match="No space left"):
        store.register_operation(
            "neg", ["x"], [NewArray("y", (3, 3), version="r")], {("y", "x"): identity((3, 3))}
        )
    monkeypatch.undo()
    assert store.operations() == []
    with pytest.raises(LineageNotFoundError):
        store.get_array("y", "r")


def test_existing_json_record_is_used(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    json_rec = store.register_array("y", (3, 3), version="run1")
    op = register_step(store)
    assert op.outputs[0] == json_rec
    assert array_files(store, "y") == [layout_module.version_file_name("run1")]
    with pytest.raises(InvalidRelationError, match="already registered with shape"):
        store.register_operation(
            "neg", ["x"], [NewArray("y", (4, 4), version="run1")], {("y", "x"): identity((3, 3))}
        )


def test_race_with_a_json_writer_falls_back_to_one_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")
    other = LineageStore(tmp_path / "s")  # another process
    real = store.array_files.existing

    def late(record):  # the other writer registers between our check and our link
        found = real(record)
        if found is None and record.name == "y":
            other.register_array("y", record.shape, version=record.version)
        return found

    monkeypatch.setattr(store.array_files, "existing", late)
    op = register_step(store)
    monkeypatch.undo()
    fresh = LineageStore(tmp_path / "s")
    assert array_files(fresh, "y") == [layout_module.version_file_name("run1")]
    assert fresh.get_array("y", "run1") == op.outputs[0]
    assert [o.op_id for o in fresh.operations()] == [op.op_id]


def test_json_record_wins_when_both_exist(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    register_step(store)
    # a JSON record of the same version published beside the link (the race the other way)
    other = LineageStore(tmp_path / "s")
    rec = records_module.array_record(NewArray("y", (3, 3), version="run1"))
    data = records_module.record_json(rec.to_json())
    directory = store.arrays_dir / layout_module.array_dir_name("y")
    assert files_module.publish_once(
        directory / layout_module.version_file_name("run1"), data, other.durable
    )
    assert len(array_files(store, "y")) == 2
    fresh = LineageStore(tmp_path / "s")
    assert [a.version for a in fresh.arrays() if a.name == "y"] == ["run1"]
    assert fresh.get_array("y", "run1").created_at == rec.created_at  # the JSON one


def test_no_hard_links_falls_back_to_two_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")

    def refuse(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(files_module.os, "link", refuse)
    op = register_step(store)
    monkeypatch.undo()
    assert array_files(store, "y") == [layout_module.version_file_name("run1")]
    fresh = LineageStore(tmp_path / "s")
    assert fresh.get_array("y", "run1") == op.outputs[0]
    assert [o.op_id for o in fresh.operations()] == [op.op_id]


def test_compaction_keeps_linked_arrays_readable(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    ops = [register_step(store, version=f"run{k}") for k in range(1, 4)]
    result = store.compact()
    assert result.operations == 3
    assert list(store.operations_dir.iterdir()) == []
    fresh = LineageStore(tmp_path / "s")
    for k, op in enumerate(ops, start=1):
        assert fresh.get_array("y", f"run{k}") == op.outputs[0]
        got = fresh.read_lineage(fresh.get_operation(op.op_id), "y", "x").decompress()
        assert got == identity((3, 3))
    # the links are array records only: no operation is listed twice
    assert sorted(o.op_id for o in fresh.operations()) == sorted(o.op_id for o in ops)


def test_several_new_outputs_share_the_one_file(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    store.register_array("x", (4,), version="v0")
    op = store.register_operation(
        "split",
        ["x"],
        [NewArray("lo", (2,), version="r"), NewArray("hi", (2,), version="r")],
        {
            ("lo", "x"): LineageRelation.from_pairs((2,), (4,), [[0], [1]], [[0], [1]]),
            ("hi", "x"): LineageRelation.from_pairs((2,), (4,), [[0], [1]], [[2], [3]]),
        },
    )
    seg = store.operations_dir / f"{op.op_id}.parquet"
    fresh = LineageStore(tmp_path / "s")
    for name in ("lo", "hi"):
        [link] = array_files(fresh, name)
        assert os.path.samefile(seg, store.arrays_dir / layout_module.array_dir_name(name) / link)
        assert fresh.get_array(name, "r") == next(o for o in op.outputs if o.name == name)
    hi = fresh.read_lineage(fresh.get_operation(op.op_id), "hi", "x").decompress()
    assert hi == LineageRelation.from_pairs((2,), (4,), [[0], [1]], [[2], [3]])


def test_known_arrays_are_registered_again_without_reading_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracked step registers (and resolves) its inputs on every run; once a (name, version)
    is known to a store handle (written, linked or read), registering or getting it again
    touches no file, and a different shape still fails."""
    store = LineageStore(tmp_path / "s")
    op = register_step(store)  # x@run0 written as JSON, y@run1 linked to the segment
    fresh = LineageStore(tmp_path / "s")
    read = fresh.register_array("x", (3, 3), version="run0")  # read from its file once

    def no_files(*_: object) -> None:
        msg = "a known array was looked up on disk"
        raise AssertionError(msg)

    for handle in (store, fresh):
        monkeypatch.setattr(handle.array_files, "load", no_files)
    assert store.register_array("x", (3, 3), version="run0") == read
    assert store.register_array("y", (3, 3), version="run1") == op.outputs[0]
    assert fresh.register_array("x", (3, 3), version="run0") == read
    assert store.get_array("y", "run1") == op.outputs[0]
    assert fresh.get_array("x", "run0") == read
    for handle in (store, fresh):
        with pytest.raises(InvalidRelationError, match="already registered with shape"):
            handle.register_array("x", (4, 3), version="run0")


def test_a_new_output_is_looked_up_without_opening_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registering a step's new output first looks for an existing record of its version; a
    missing one must not cost a Parquet open (pyarrow's is ~0.2 ms of a served step)."""
    store = LineageStore(tmp_path / "s")
    register_step(store, version="run1")
    opened: list[str] = []
    real = segment_module.Segment

    def counting(path: object) -> object:
        opened.append(str(path))
        return real(path)

    monkeypatch.setattr(segment_module, "Segment", counting)
    op = register_step(store, version="run2")
    assert op.outputs[0].version == "run2"
    assert opened == []
    fresh = LineageStore(tmp_path / "s")  # an existing link record is still read
    assert fresh.get_array("y", "run2") == op.outputs[0]
    assert len(opened) == 1


def test_an_array_directory_removed_between_steps_is_made_again(tmp_path: Path) -> None:
    """The handle remembers the array directories it linked into (no mkdir per served step);
    a directory removed behind its back is made again, and nothing is left in staging."""
    store = LineageStore(tmp_path / "s")
    register_step(store, version="run1")
    ydir = store.arrays_dir / layout_module.array_dir_name("y")
    for f in os.listdir(ydir):
        os.unlink(ydir / f)
    ydir.rmdir()
    op = store.register_operation(
        "neg", [store.get_array("x", "run0")], [NewArray("y", (3, 3), version="run2")],
        {("y", "x"): identity((3, 3))},
    )  # fmt: skip
    assert array_files(store, "y") == [layout_module.link_file_name("run2")]
    assert LineageStore(tmp_path / "s").get_array("y", "run2") == op.outputs[0]
    assert not list(store.staging_dir.iterdir())
