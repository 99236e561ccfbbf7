"""Group commit (``LineageStore(..., group_commit=True)``): every write is published at once
(another process reads it), no fsync runs on the writer's path, and a committer, ``flush()``,
``close()`` or the process's exit flushes every published file and the directories naming it."""

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster import DSLogResource
from dslog_dagster.core import LineageRelation
from dslog_dagster.core.store import LineageStore, NewArray
from dslog_dagster.core.store import group_commit as gc
from dslog_dagster.errors import ConfigurationError, LineageStorageError
from dslog_dagster.resources import open_store


def _ident(n: int) -> LineageRelation:
    i = np.arange(n)
    return LineageRelation.from_columns((n,), (n,), out_cols=[i], in_cols=[i])


class FsyncLog:
    """``os.fsync`` replaced: each call logged as (thread name, device and inode, path)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, int], str]] = []
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        st_ = os.fstat(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.calls.append((threading.current_thread().name, (st_.st_dev, st_.st_ino), path))
        self.real(fd)

    def inodes(self) -> set[tuple[int, int]]:
        return {c[1] for c in self.calls}

    def paths(self) -> set[str]:
        return {c[2] for c in self.calls}


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    log = FsyncLog()
    monkeypatch.setattr(os, "fsync", log)
    return log


def _inode(path: Path) -> tuple[int, int]:
    s = path.stat()
    return s.st_dev, s.st_ino


def _published(store: LineageStore) -> tuple[list[Path], set[Path]]:
    """Every file a reader sees (segments, array records) and the directories holding them."""
    paths = [
        Path(d, n)
        for d, _, names in os.walk(store.root)
        for n in names
        if n.endswith((".parquet", ".json")) and ".staging" not in d
    ]
    return paths, {p.parent for p in paths}


def _write(store: LineageStore, n: int) -> None:
    store.register_array("x", (4,))
    prev = "x"
    for k in range(n):
        name = f"y{k}"
        store.register_operation("copy", [prev], [NewArray(name, (4,))], {(name, prev): _ident(4)})
        prev = name


def test_writes_are_visible_at_once_and_flushed_only_by_the_committer(
    tmp_path: Path, fsyncs: FsyncLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc, "GROUP_COMMIT_DELAY_S", 3600.0)  # only flush() commits
    store = LineageStore(tmp_path / "s", group_commit=True)
    fsyncs.calls.clear()  # the store id, flushed once when the store is made
    _write(store, 3)
    assert fsyncs.calls == []  # nothing flushed on the writer's path
    assert store.committer is not None
    assert store.committer.pending() > 0
    # another process reads the lineage now, before any flush
    code = textwrap.dedent(
        f"""
        from dslog_dagster.core.api import DSLog
        log = DSLog({str(tmp_path / "s")!r})
        print(log.prov_query(["y2", "y1", "y0", "x"], slice(1, 3)).to_indices().tolist())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[[1], [2]]"
    store.flush()
    assert store.committer.pending() == 0
    paths, dirs = _published(store)
    assert {_inode(p) for p in paths} <= fsyncs.inodes()  # every published file's bytes
    assert {str(d) for d in dirs} <= fsyncs.paths()  # and every directory naming one
    assert not any("/.staging/" in p for p in fsyncs.paths())  # no flush before publishing
    fsyncs.calls.clear()
    store.flush()  # nothing new: nothing flushed again
    assert fsyncs.calls == []


def test_the_committer_flushes_in_batches_off_the_writers_thread(
    tmp_path: Path, fsyncs: FsyncLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc, "GROUP_COMMIT_DELAY_S", 0.05)
    store = LineageStore(tmp_path / "s", group_commit=True)
    fsyncs.calls.clear()
    _write(store, 4)
    assert store.committer is not None
    store.committer.close()  # waits for the committer's pass
    paths, dirs = _published(store)
    assert {_inode(p) for p in paths} <= fsyncs.inodes()
    assert {str(d) for d in dirs} <= fsyncs.paths()
    writer = threading.current_thread().name
    # the passes ran in the committer (and its workers), or in close() for what was left
    assert store.committer.passes >= 1
    assert any(name != writer for name, _, _ in fsyncs.calls)
    # one fsync per file and directory per pass: far fewer than 3 per write
    assert len(fsyncs.calls) <= len({_inode(p) for p in paths}) + len(dirs) + 2


def test_a_durable_store_without_group_commit_still_flushes_before_returning(
    tmp_path: Path, fsyncs: FsyncLog
) -> None:
    store = LineageStore(tmp_path / "s")
    assert store.committer is None
    fsyncs.calls.clear()
    _write(store, 1)
    paths, dirs = _published(store)
    assert {_inode(p) for p in paths} <= fsyncs.inodes()
    assert {str(d) for d in dirs} <= fsyncs.paths()
    store.flush()  # a no-op


def test_a_clean_exit_flushes_everything(tmp_path: Path) -> None:
    """The process writes with group commit (committer delay of an hour) and exits: the
    atexit hook flushes every published file and directory."""
    root, log = tmp_path / "s", tmp_path / "fsyncs.txt"
    code = textwrap.dedent(
        f"""
        import atexit, os
        calls = []
        real = os.fsync
        def fsync(fd):
            st = os.fstat(fd)
            calls.append(f"{{st.st_dev}} {{st.st_ino}} {{os.readlink(f'/proc/self/fd/{{fd}}')}}")
            real(fd)
        def dump():  # registered first: runs after the store's hook
            open({str(log)!r}, "w").write("\\n".join(calls))
        atexit.register(dump)
        import numpy as np
        from dslog_dagster.core import LineageRelation
        from dslog_dagster.core.store import LineageStore, NewArray
        from dslog_dagster.core.store import group_commit as gc
        gc.GROUP_COMMIT_DELAY_S = 3600.0
        store = LineageStore({str(root)!r}, group_commit=True)
        os.fsync = fsync
        i = np.arange(4)
        rel = LineageRelation.from_columns((4,), (4,), out_cols=[i], in_cols=[i])
        store.register_array("x", (4,))
        store.register_operation("copy", ["x"], [NewArray("y", (4,))], {{("y", "x"): rel}})
        assert store.committer.pending() > 0
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    lines = [ln.split(" ", 2) for ln in log.read_text().splitlines()]
    inodes = {(int(a), int(b)) for a, b, _ in lines}
    paths = {p for _, _, p in lines}
    store = LineageStore(root)
    published, dirs = _published(store)
    assert published
    assert {_inode(p) for p in published} <= inodes
    assert {str(d) for d in dirs} <= paths


def test_a_failed_flush_is_raised_by_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc, "GROUP_COMMIT_DELAY_S", 3600.0)
    store = LineageStore(tmp_path / "s", group_commit=True)
    _write(store, 1)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(LineageStorageError, match="dslog fsck"):
        store.flush()
    monkeypatch.undo()
    store.flush()  # reported once; the store works on


def test_group_commit_needs_a_durable_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="durable=True"):
        LineageStore(tmp_path / "s", durable=False, group_commit=True)
    with pytest.raises(ValueError, match="durable=true"):
        DSLogResource(durable=False, group_commit=True)
    res = DSLogResource(store_dir=str(tmp_path / "r"), group_commit=True)
    assert res.store().group_commit
    assert res.store() is open_store(tmp_path / "r", group_commit=True)
    assert res.store() is not open_store(tmp_path / "r")  # another handle, durable per write


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.sampled_from(["op", "array", "flush"]), min_size=1, max_size=12),
)
def test_whatever_the_interleaving_flush_leaves_nothing_unflushed(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    """Random sequences of registrations and flushes: after the last flush every published
    file's bytes and directory were fsynced at least once after it was published."""
    root = tmp_path_factory.mktemp("s")
    log = FsyncLog()
    real = os.fsync
    os.fsync = log  # type: ignore[assignment]
    try:
        store = LineageStore(root, group_commit=True)
        assert store.committer is not None
        store.committer.delay_s = 0.01
        store.register_array("a0", (4,))
        k = 0
        for s in steps:
            if s == "op":
                a, b = f"a{k}", f"a{k + 1}"
                store.register_operation("copy", [a], [NewArray(b, (4,))], {(b, a): _ident(4)})
                k += 1
            elif s == "array":
                store.register_array(f"loose{len(log.calls)}_{k}", (2,))
            else:
                store.flush()
        store.close()
    finally:
        os.fsync = real  # type: ignore[assignment]
    published, dirs = _published(store)
    assert {_inode(p) for p in published} <= log.inodes()
    assert {str(d) for d in dirs} <= log.paths()
