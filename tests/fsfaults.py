"""File-system faults for the tests of tests/faults (its conftest makes them the ``fault``
fixture): a full disk, a read-only file system and a read-only folder, each switched on and
off around one store operation.

Each fault comes in two forms. ``real``: a small tmpfs the test mounts (we may run as root;
the read-only file system is a remount of it, the read-only folder a ``chmod a-w``), when the
system lets this process mount (or, for the folder, when the mode stops this user); otherwise
it falls back to the injected form and says so in the test's report properties. ``injected``:
the store's single write layer (``files.write_synced``) and the catalog's DuckDB connections
fail with the errno the real fault gives, always run, so the injected path is tested on every
machine.
"""

import contextlib
import errno
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from dslog_dagster.core.store import catalog as catalog_module
from dslog_dagster.core.store import files as files_module

_STRERROR = {
    errno.ENOSPC: "No space left on device",
    errno.EROFS: "Read-only file system",
    errno.EACCES: "Permission denied",
}


@dataclass
class Fault:
    """A failure of the store's file system that a test switches on and off.

    Attributes:
        root: where the test puts its store (on the mounted file system when real).
        mode: ``"real"`` or ``"injected"``.
        why: why a real fault fell back to the injected form (``""`` when it did not).
    """

    root: Path
    mode: str
    on: Callable[[], None]
    off: Callable[[], None]
    why: str = ""
    active: list[bool] = field(default_factory=lambda: [False])

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        """The fault is on inside the block (and off after it, whatever happens)."""
        self.on()
        try:
            yield
        finally:
            self.off()


def _run(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))


def _fill(where: Path) -> Path:
    """Write a file under ``where`` until the file system is full; returns it."""
    filler = where / f"filler-{uuid.uuid4().hex}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    block = b"\0" * (1 << 16)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def _inject(monkeypatch: pytest.MonkeyPatch, code: int, active: list[bool]) -> None:
    """While ``active[0]``: every file the store writes, and every catalog connection, fails
    with ``code`` as the real file system would report it."""
    real_write = files_module.write_synced
    real_connect = duckdb.connect

    def write_synced(path: Path, data: bytes, durable: bool = True) -> None:
        if active[0]:
            raise OSError(code, _STRERROR[code], str(path))
        real_write(path, data, durable)

    def connect(database: str = ":memory:", *args: object, **kwargs: object) -> object:
        if active[0] and str(database).endswith(catalog_module.CATALOG_FILE):
            msg = f'IO Error: Could not write file "{database}": {_STRERROR[code]}'
            raise duckdb.IOException(msg)
        return real_connect(database, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(files_module, "write_synced", write_synced)
    monkeypatch.setattr(catalog_module.duckdb, "connect", connect)


def _injected(monkeypatch: pytest.MonkeyPatch, root: Path, code: int, why: str = "") -> Fault:
    active = [False]
    _inject(monkeypatch, code, active)

    def on() -> None:
        active[0] = True

    def off() -> None:
        active[0] = False

    return Fault(root, "injected", on, off, why, active)


@contextlib.contextmanager
def full_disk(
    form: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Fault]:
    """A full disk (``ENOSPC``): a 32 MB tmpfs filled up, or injected."""
    mnt = tmp_path / "mnt"
    if form == "real" and _mount_tmpfs(mnt, "32m"):
        filler: list[Path] = []

        def on() -> None:
            filler.append(_fill(mnt))

        def off() -> None:
            while filler:
                filler.pop().unlink()

        try:
            yield Fault(mnt / "store", "real", on, off)
        finally:
            _run("umount", "-l", str(mnt))
        return
    why = "" if form == "injected" else "this process may not mount a tmpfs"
    request.node.user_properties.append(("fault", f"injected ENOSPC {why}".strip()))
    yield _injected(monkeypatch, tmp_path / "store", errno.ENOSPC, why)


@contextlib.contextmanager
def read_only_fs(
    form: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Fault]:
    """A read-only file system (``EROFS``): a tmpfs remounted read-only, or injected."""
    mnt = tmp_path / "mnt"
    if form == "real" and _mount_tmpfs(mnt, "32m"):

        def on() -> None:
            assert _run("mount", "-o", "remount,ro", str(mnt))

        def off() -> None:
            assert _run("mount", "-o", "remount,rw", str(mnt))

        try:
            yield Fault(mnt / "store", "real", on, off)
        finally:
            _run("umount", "-l", str(mnt))
        return
    why = "" if form == "injected" else "this process may not mount a tmpfs"
    request.node.user_properties.append(("fault", f"injected EROFS {why}".strip()))
    yield _injected(monkeypatch, tmp_path / "store", errno.EROFS, why)


def _chmod_tree(root: Path, writable: bool) -> None:
    for d, _, _ in os.walk(root):
        mode = os.stat(d).st_mode
        w = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        os.chmod(d, (mode | stat.S_IWUSR) if writable else (mode & ~w))


def _mode_stops_us(where: Path) -> bool:
    """Whether a folder without write permission stops this process (not the superuser)."""
    probe = where / "probe"
    probe.mkdir()
    os.chmod(probe, 0o555)
    try:
        (probe / "x").write_bytes(b"")
    except PermissionError:
        return True
    else:
        (probe / "x").unlink()
        return False
    finally:
        os.chmod(probe, 0o755)
        shutil.rmtree(probe)


@contextlib.contextmanager
def read_only_dir(
    form: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Fault]:
    """The store's folders without write permission (``chmod a-w``): real ``EACCES`` for a
    user the mode stops; for the superuser (whom it does not stop) the same folders with
    ``EACCES`` injected on write."""
    root = tmp_path / "store"

    def on_mode() -> None:
        _chmod_tree(root, writable=False)

    def off_mode() -> None:
        _chmod_tree(root, writable=True)

    if form == "real" and _mode_stops_us(tmp_path):
        try:
            yield Fault(root, "real", on_mode, off_mode)
        finally:
            if root.exists():
                _chmod_tree(root, writable=True)
        return
    why = "" if form == "injected" else "the superuser ignores a folder's mode"
    request.node.user_properties.append(("fault", f"injected EACCES {why}".strip()))
    fault = _injected(monkeypatch, root, errno.EACCES, why)
    inject_on, inject_off = fault.on, fault.off

    def on() -> None:
        on_mode()
        inject_on()

    def off() -> None:
        inject_off()
        off_mode()

    fault.on, fault.off = on, off
    try:
        yield fault
    finally:
        if root.exists():
            _chmod_tree(root, writable=True)
