"""The process-wide store, session and reuse-registry handles follow the directory on disk: a
store deleted and made again at the same path is a new store, not the cached old one."""

import os
import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import LineageNotFoundError
from dslog_dagster.io_managers.writer import LineageWriter
from dslog_dagster.resources import DSLogResource, open_store
from dslog_dagster.tracked_step import InputRef, PendingLineage


def _register(root: Path) -> None:
    log = DSLog(open_store(root))
    x, y = Array("x", (3,)), Array("y", (3,))
    log.register_operation("neg", [x], [y], [Lineage(y, x, [(i, i) for i in range(3)])])


def test_a_recreated_store_directory_gets_new_handles(tmp_path: Path) -> None:
    root = tmp_path / "store"
    res = DSLogResource(store_dir=str(root))
    _register(root)
    store, registry, session = res.store(), res.registry(), res.session()
    assert res.store() is store  # cached while the directory exists
    assert res.registry() is registry
    assert {a.name for a in store.arrays()} == {"x", "y"}
    shutil.rmtree(root)
    root.mkdir()  # made again before anyone asks: same path, another directory
    fresh = res.store()
    assert fresh is not store
    assert fresh.arrays() == []  # the old handle would list the deleted arrays
    with pytest.raises(LineageNotFoundError):
        fresh.get_array("y")
    assert res.registry() is not registry
    assert res.session() is not session
    assert res.session().store is fresh


def test_a_deleted_store_directory_is_made_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = open_store(root)
    shutil.rmtree(root)
    second = open_store(root)
    assert second is not first
    assert root.is_dir()
    _register(root)  # writes go to the new directory
    assert {a.name for a in open_store(root).arrays()} == {"x", "y"}


def test_the_writer_takes_the_steps_store_handle_only_for_its_own_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracked step hands its store handle to the IO manager (no second open, which re-reads
    the id file); a handle of another directory or durability is never written to."""
    idx = np.arange(3).reshape(-1, 1)
    rel = LineageRelation.from_pairs((3,), (3,), idx, idx)

    def write(writer: LineageWriter, run_id: str, handle: object) -> str:
        ctx = dg.build_output_context(asset_key=dg.AssetKey("y"), run_id=run_id, name="result")
        pending = PendingLineage(
            "neg", {}, "capture", "contributing",
            inputs=(InputRef("x", "x", "r0", "x"),), relations=(rel,), store=handle,
        )  # fmt: skip
        md = writer.write_pending(ctx, pending, (3,), "float64")
        return str(md["dslog/op_id"].value)

    mine = DSLogResource(store_dir=str(tmp_path / "mine"))
    writer = LineageWriter(mine, None)
    other = open_store(tmp_path / "other")
    op_id = write(writer, "r1", other)
    assert open_store(tmp_path / "mine").get_operation(op_id).op_name == "neg"
    assert other.operations() == []
    # a durable=False handle of the same directory: the writer's durable one flushes instead
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    write(writer, "r2", open_store(tmp_path / "mine", durable=False))
    assert synced
    monkeypatch.setattr(os, "fsync", real_fsync)
    handle = mine.store()

    def no_open(*_: object, **__: object) -> None:
        msg = "the step's own handle was not taken"
        raise AssertionError(msg)

    monkeypatch.setattr(DSLogResource, "store", no_open)
    op_id = write(writer, "r3", handle)
    assert handle.get_operation(op_id).outputs[0].version == "r3"


def test_durable_and_lazy_handles_of_one_store_share_its_reuse_registry(tmp_path: Path) -> None:
    """Views belong to the store, not to a handle: alternating IO managers with and without
    fsync (the overhead bench does) must not rebuild the registry and its caches each time."""
    root = tmp_path / "store"
    durable = DSLogResource(store_dir=str(root))
    lazy = DSLogResource(store_dir=str(root), durable=False)
    assert durable.store() is not lazy.store()  # two handles: one fsyncs, one does not
    registry = durable.registry()
    assert lazy.registry() is registry
    assert durable.registry() is registry
    shutil.rmtree(root)
    root.mkdir()  # another store at the same path learns afresh
    assert lazy.registry() is not registry
