"""A full disk, a read-only file system and a read-only folder, met by every kind of store
write (array records, operations, compaction, the catalog): each ends in a clean error that
says why (never a lock, never damage), leaves nothing half-written, and the store works
again once space or permission is back. The faults (real mounts when permitted, else
injected; the injected form always) are in conftest.py."""

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest
from fsfaults import Fault

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import LineageStore, NewArray
from dslog_dagster.core.store import catalog as catalog_module
from dslog_dagster.core.store import failures as failures_module
from dslog_dagster.core.store import files as files_module
from dslog_dagster.errors import (
    LineageStorageError,
    StoreFullError,
    StorePermissionError,
    StoreReadOnlyError,
)

EXPECTED: dict[str, type[LineageStorageError]] = {
    "full_disk": StoreFullError,
    "read_only_fs": StoreReadOnlyError,
    "read_only_dir": StoreReadOnlyError,
}


def _ident(shape: tuple[int, ...]) -> LineageRelation:
    idx = list(np.indices(shape).reshape(len(shape), -1))
    return LineageRelation.from_columns(shape, shape, out_cols=idx, in_cols=idx)


def _chain(store: LineageStore, prefix: str, n: int) -> None:
    """``prefix0 -> prefix1 -> ... -> prefix<n>``, identity lineage over (3, 2)."""
    store.register_array(f"{prefix}0", (3, 2))
    for k in range(n):
        a, b = f"{prefix}{k}", f"{prefix}{k + 1}"
        store.register_operation("copy", [a], [NewArray(b, (3, 2))], {(b, a): _ident((3, 2))})


def _files(root: Path) -> dict[str, int]:
    """Every file under the store except its catalog (a cache DuckDB may rewrite), staging
    (never read) and the compaction lock (an empty file, kept), with its size."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root)
            if rel.startswith((".staging", "catalog.duckdb", ".compact.lock")):
                continue
            out[rel] = os.path.getsize(os.path.join(d, n))
    return out


def _no_tmp(root: Path) -> None:
    left = [p for p in _files(root) if os.path.basename(p).startswith(".tmp-")]
    assert left == [], f"temporary files left behind: {left}"


def _query(root: Path, prefix: str, n: int) -> list[list[int]]:
    log = DSLog(LineageStore(root))
    cells = log.prov_query([f"{prefix}{k}" for k in range(n, -1, -1)], np.s_[1, :])
    out: list[list[int]] = cells.to_indices().tolist()
    return out


def _fails_cleanly(
    fault: Fault, expected: type[LineageStorageError], store: LineageStore, action: object
) -> LineageStorageError:
    """Run ``action`` with the fault on: it raises ``expected`` with a message that says what
    to do, and no file of the store changed."""
    before = _files(store.root)
    with fault.during(), pytest.raises(expected) as info:
        action()  # type: ignore[operator]
    err = info.value
    assert str(err).startswith("Could not ")
    assert "then run again" in str(err)
    assert "locked" not in str(err)
    assert "damaged" not in str(err)
    assert _files(store.root) == before
    _no_tmp(store.root)
    return err


def test_register_array_fails_cleanly_and_works_after(
    fault: tuple[str, Fault],
) -> None:
    kind, f = fault
    expected = EXPECTED[kind]
    store = LineageStore(f.root)
    _chain(store, "a", 2)
    _fails_cleanly(f, expected, store, lambda: store.register_array("late", (4,)))
    assert store.register_array("late", (4,)).shape == (4,)
    assert [a.name for a in LineageStore(f.root).arrays()] == ["a0", "a1", "a2", "late"]


@pytest.mark.parametrize("new_output", [True, False])
def test_register_operation_fails_cleanly_and_works_after(
    fault: tuple[str, Fault], new_output: bool
) -> None:
    kind, f = fault
    expected = EXPECTED[kind]
    store = LineageStore(f.root)
    _chain(store, "a", 2)
    if not new_output:
        store.register_array("a3", (3, 2))
    out = NewArray("a3", (3, 2)) if new_output else "a3"

    def register() -> object:
        return store.register_operation("copy", ["a2"], [out], {("a3", "a2"): _ident((3, 2))})

    _fails_cleanly(f, expected, store, register)
    assert len(LineageStore(f.root).operations()) == 2
    # reading works during the fault (the store is readable, only writes are refused)
    with f.during():
        assert _query(f.root, "a", 2) == [[1, 0], [1, 1]]
    register()
    assert _query(f.root, "a", 3) == [[1, 0], [1, 1]]


def test_compaction_fails_cleanly_and_works_after(
    fault: tuple[str, Fault],
) -> None:
    kind, f = fault
    expected = EXPECTED[kind]
    store = LineageStore(f.root)
    _chain(store, "a", 4)
    _fails_cleanly(f, expected, store, store.compact)
    assert len(LineageStore(f.root).operations()) == 4
    result = store.compact()
    assert result.operations == 4
    assert len(result.packs) == 1
    assert _query(f.root, "a", 4) == [[1, 0], [1, 1]]


def test_catalog_write_fails_cleanly_and_works_after(
    fault: tuple[str, Fault], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, f = fault
    expected = EXPECTED[kind]
    store = LineageStore(f.root)
    _chain(store, "a", 3)
    assert len(store.operations()) == 3  # the catalog exists and is current
    sleeps: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(catalog_module.time, "sleep", lambda s: sleeps.append(s) or real_sleep(s))
    err = _fails_cleanly(f, expected, store, store.rebuild_catalog)
    assert sleeps == [], "a refusal of the file system is not a lock: no retries"
    assert "catalog" in str(err)
    # the catalog was not taken for damaged and deleted: with the fault on, listings still
    # answer (from the files), and after it the catalog is rebuilt (no DamagedStoreWarning:
    # warnings are errors in this suite)
    with f.during():
        assert len(LineageStore(f.root).operations()) == 3
    assert store.rebuild_catalog() == {}
    assert len(LineageStore(f.root).operations()) == 3


def test_new_store_on_a_refusing_file_system_fails_cleanly(
    fault: tuple[str, Fault],
) -> None:
    kind, f = fault
    expected = EXPECTED[kind]
    LineageStore(f.root)
    (f.root / "inner").mkdir()  # an empty folder, made read-only with the rest
    with f.during(), pytest.raises(expected, match="then run again"):
        LineageStore(f.root / "inner")
    assert LineageStore(f.root / "inner").store_id


def test_cleanup_failure_never_hides_the_write_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")
    _chain(store, "a", 1)
    real_write, real_unlink = files_module.write_synced, os.unlink

    def write(path: Path, data: bytes, durable: bool = True) -> None:
        with open(path, "xb") as fh:  # a partial file, then the disk is full
            fh.write(data[:1])
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    def unlink(path: object, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(files_module, "write_synced", write)
    monkeypatch.setattr(failures_module.os, "unlink", unlink)
    with pytest.raises(StoreFullError, match="disk holding it is full"):
        store.register_array("b", (2,))
    with pytest.raises(StoreFullError, match="disk holding it is full"):
        store.register_operation("copy", ["a1"], [NewArray("a2", (3, 2))], {})
    monkeypatch.setattr(failures_module.os, "unlink", real_unlink)
    monkeypatch.setattr(files_module, "write_synced", real_write)
    # what the failed cleanups left is a staging file, never a record
    assert [a.name for a in LineageStore(tmp_path / "s").arrays()] == ["a0", "a1"]
    assert store.register_array("b", (2,)).shape == (2,)


def test_write_synced_removes_its_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files_module.os, "fsync", fsync)
    with pytest.raises(OSError, match="No space"):
        files_module.write_synced(tmp_path / "f", b"data", durable=True)
    assert not (tmp_path / "f").exists()


def test_permission_error_says_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LineageStore(tmp_path / "s")

    def write(path: Path, data: bytes, durable: bool = True) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(files_module, "write_synced", write)
    with pytest.raises(StorePermissionError, match="read and write access") as info:
        store.register_array("b", (2,))
    assert isinstance(info.value, PermissionError)
    assert info.value.errno == errno.EACCES


def test_stale_temporary_records_are_removed_by_compaction(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "s")
    _chain(store, "a", 2)
    folder = next(store.arrays_dir.iterdir())
    old, young = folder / ".tmp-old", folder / ".tmp-young"
    old.write_bytes(b"partial")
    young.write_bytes(b"in flight")  # another writer of an earlier version, still writing
    hour = files_module.STAGING_MAX_AGE_S
    os.utime(old, (time.time() - hour - 60, time.time() - hour - 60))
    store.compact()
    assert not old.exists()
    assert young.exists()
    assert len(store.operations()) == 2


def test_array_records_are_staged_outside_the_array_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LineageStore(tmp_path / "s")
    seen: list[Path] = []
    real = files_module.write_synced

    def write(path: Path, data: bytes, durable: bool = True) -> None:
        seen.append(path)
        real(path, data, durable)

    monkeypatch.setattr(files_module, "write_synced", write)
    store.register_array("x", (2,))
    assert [p.parent for p in seen] == [store.staging_dir]
