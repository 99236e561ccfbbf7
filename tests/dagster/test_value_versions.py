"""Versioned asset values under failure: a failed lineage write changes nothing downstream
reads, a later downstream-only run reads the previous value and records lineage that matches
it, and retention removes old versions without touching the ones still named or read."""

import os
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.core.api import Array, DSLog
from dslog_dagster.core.store import files as files_module
from dslog_dagster.errors import LineageNotFoundError, LineageStorageError, ValueExpiredError

ROUND = {"n": 1}  # which materialization round the assets are in (set by the tests)


@tracked_asset
def a() -> np.ndarray:
    return np.arange(12.0).reshape(4, 3) + 100.0 * ROUND["n"]


@tracked_asset
def b(a: np.ndarray) -> np.ndarray:
    # round 1 keeps the rows in order, later rounds reverse them: b's lineage changes
    return a[::-1] if ROUND["n"] > 1 else a[:]


@tracked_asset
def c(b: np.ndarray) -> np.ndarray:
    return b * 2.0


ASSETS = [a, b, c]


def _listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the store excluded) with its bytes; links by their target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".dslog"]
        for f in files:
            p = Path(dirpath, f)
            rel = str(p.relative_to(root))
            out[rel] = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
    return out


def _run(instance: dg.DagsterInstance, io: DSLogIOManager, *only: Any, ok: bool = True) -> Any:
    res = dg.materialize(
        ASSETS,
        selection=list(only) or None,
        instance=instance,
        resources={"io_manager": io},
        raise_on_error=False,
    )
    assert res.success is ok
    return res


def test_failed_lineage_write_leaves_downstream_reading_the_previous_value(
    instance: dg.DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    io = DSLogIOManager(base_dir=str(data), store_dir=str(data / ".dslog"))
    ROUND["n"] = 1
    first = _run(instance, io).run_id  # a, b, c version 1
    ROUND["n"] = 2
    second_a = _run(instance, io, a).run_id  # a version 2
    before = _listing(data)

    # the lineage store refuses b's operation: the step fails loudly and stores nothing
    real_write = files_module.write_synced

    def read_only(path: Path, data: bytes, durable: bool = True) -> None:
        if "/.staging/" in str(path):
            msg = "[Errno 30] Read-only file system"
            raise OSError(msg)
        real_write(path, data, durable)

    monkeypatch.setattr(files_module, "write_synced", read_only)
    failed = _run(instance, io, b, ok=False)
    monkeypatch.setattr(files_module, "write_synced", real_write)
    err = str(failed.get_step_failure_events()[0].step_failure_data.error)
    assert LineageStorageError.__name__ in err
    assert "Read-only file system" in err
    assert failed.get_asset_materialization_events() == []
    assert _listing(data) == before  # not one byte a reader can name changed, no leftovers

    # a run of only c reads b's previous value ...
    third = _run(instance, io, c)
    b_v1 = io.load_value("b", first)
    a_v1, a_v2 = io.load_value("a", first), io.load_value("a", second_a)
    c_new = io.load_value("c", third.run_id)
    np.testing.assert_array_equal(c_new, 2.0 * b_v1)
    assert not np.array_equal(c_new, 2.0 * a_v2[::-1])  # the failed round's data
    # ... and its lineage names that version, and leads to cells holding the values it read
    log = DSLog(str(data / ".dslog"))
    (op,) = [o for o in log.store.operations() if o.outputs[0].version == third.run_id]
    assert [(i.name, i.version) for i in op.inputs] == [("b", first)]
    for cell in [(0, 0), (1, 2), (3, 1)]:
        path = [Array("c", (4, 3), version=third.run_id), Array("b", (4, 3), version=first), "a"]
        found = log.prov_query(path, [cell]).to_indices().tolist()
        assert len(found) == 1
        src = tuple(found[0])
        assert c_new[cell] == 2.0 * a_v1[src]
        assert src == cell  # round 1's b kept the rows in order


def test_downstream_in_the_same_run_reads_the_value_just_published(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    io = DSLogIOManager(
        base_dir=str(tmp_path / "data"), store_dir=str(tmp_path / "data" / ".dslog")
    )
    for n in (1, 2):
        ROUND["n"] = n
        res = _run(instance, io)
        b_now = io.load_value("b", res.run_id)
        np.testing.assert_array_equal(io.load_value("c", res.run_id), 2.0 * b_now)
        # the link beside the versions points at the newest value
        assert np.array_equal(np.load(tmp_path / "data" / "b.npy"), b_now)


def test_keep_last_removes_old_versions_and_says_so_when_one_is_read(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    io = DSLogIOManager(
        base_dir=str(tmp_path / "data"), store_dir=str(tmp_path / "data" / ".dslog"), keep_last=2
    )
    runs = []
    for n in (1, 2, 3, 4):
        ROUND["n"] = n
        runs.append(_run(instance, io, a).run_id)
    kept = sorted(p.name for p in (tmp_path / "data" / "a.versions").glob("*.npy"))
    assert kept == sorted(f"{r}.npy" for r in runs[-2:])
    np.testing.assert_array_equal(io.load_value("a", runs[-2]), np.arange(12.0).reshape(4, 3) + 300)
    with pytest.raises(ValueExpiredError, match=r"expired by retention.*keep_last=2.*Raise"):
        io.load_value("a", runs[0])
    with pytest.raises(LineageNotFoundError, match="No stored value"):
        io.load_value("a", "no-such-run")
    # the lineage of the removed versions stays in the store
    versions = {
        r.version for r in DSLog(str(tmp_path / "data" / ".dslog")).store.arrays() if r.name == "a"
    }
    assert set(runs) <= versions


def test_keep_last_one_keeps_the_version_the_latest_materialization_names(
    instance: dg.DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With keep_last=1, publishing a new version keeps the previous one while Dagster's latest
    materialization still names it (it becomes the latest only when handle_output returns)."""
    io = DSLogIOManager(
        base_dir=str(tmp_path / "data"), store_dir=str(tmp_path / "data" / ".dslog"), keep_last=1
    )
    ROUND["n"] = 1
    first = _run(instance, io, a).run_id
    ROUND["n"] = 2
    second = _run(instance, io, a).run_id
    names = sorted(p.stem for p in (tmp_path / "data" / "a.versions").glob("*.npy"))
    assert names == sorted([first, second])  # first was still the latest while publishing
    ROUND["n"] = 3
    third = _run(instance, io, a).run_id
    names = sorted(p.stem for p in (tmp_path / "data" / "a.versions").glob("*.npy"))
    assert names == sorted([second, third])


def test_legacy_unversioned_value_is_read_with_a_log_line(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    """A project stored before versioned values: `b.npy` is a plain file; a run of only c
    reads it (and says so), and the next materialization of b stores a version."""
    data = tmp_path / "data"
    io = DSLogIOManager(base_dir=str(data), store_dir=str(data / ".dslog"))
    ROUND["n"] = 1
    first = _run(instance, io).run_id
    legacy = np.arange(12.0).reshape(4, 3) * 7.0
    (data / "b.npy").unlink()
    shutil.rmtree(data / "b.versions")
    np.save(data / "b.npy", legacy)
    res = _run(instance, io, c)
    np.testing.assert_array_equal(io.load_value("c", res.run_id), 2.0 * legacy)
    logs = "\n".join(str(e.user_message) for e in instance.all_logs(res.run_id))
    assert "before versioned values" in logs
    ROUND["n"] = 2
    second = _run(instance, io, b).run_id
    assert (data / "b.npy").is_symlink()
    assert {p.stem for p in (data / "b.versions").glob("*.npy")} == {second}
    assert first != second
