"""Durable, atomic file operations: how a lineage store publishes what it writes.

Files are never modified once visible. A file is written under ``.staging/``, flushed, then
renamed or hard-linked into place, and its directory is flushed too, so readers see either the
whole file or nothing and a crash leaves at most a staging file (removed once it is an hour
old). ``durable=False`` skips the flushes: every publish stays atomic, but a power loss may
lose it. A write that fails (a full disk, a read-only mount) removes its partial file, and
the error says why (:mod:`~dslog_dagster.core.store.failures`).

Every write and directory flush of the store goes through :func:`write_synced` and
:func:`fsync_dir`, looked up in this module when called, so a test can fail or slow them in
one place.
"""

import contextlib
import errno
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dslog_dagster.core import background
from dslog_dagster.core.store.failures import discard, storage_error
from dslog_dagster.core.store.layout import STORE_ID_FILE

if TYPE_CHECKING:
    from concurrent.futures import Future

STAGING_MAX_AGE_S = 3600.0
"""Staging directories older than this are leftovers of crashed writers and are removed."""
TMP_PREFIX = ".tmp-"
"""Prefix of the temporary files :func:`publish_once` writes (in ``.staging/``; earlier
versions wrote them beside the array records, where :func:`clean_stale_tmp` finds them)."""
_NO_LINK = frozenset({errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS})
"""``os.link`` failures that mean "no hard links here", not "no space" or "read-only"."""


def fsync_dir(path: Path) -> None:
    """Flush directory ``path`` (makes a rename durable); a no-op where not supported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_dirs(paths: Sequence[Path]) -> None:
    """fsync several directories concurrently: the first in the calling thread, the others in
    workers (:func:`~dslog_dagster.core.background.map_all`).

    A file system commits concurrent syncs together (ext4's journal groups them into one
    commit, and their cache flushes merge), so a step's two directories cost about one flush
    instead of two: one after the other, the second fsync costs a device flush of its own
    even when the first already committed its change (measured here: about as much as the
    first). From a worker thread they run one after the other (a worker must not wait on
    the pool it belongs to).
    """
    background.map_all(fsync_dir, list(dict.fromkeys(paths)))


def flush_dirs_aside(paths: Sequence[Path]) -> "list[Future[None]]":
    """Start fsyncing ``paths`` in workers, each in its own (see :func:`fsync_dirs`)."""
    return [background.submit(fsync_dir, p) for p in dict.fromkeys(paths)]


def write_synced(path: Path, data: bytes, durable: bool = True) -> None:
    """Create ``path`` (it must not exist) with ``data``, flushed when ``durable``.

    A write or flush that fails (a full disk) removes the partial file before the error
    propagates; a file that already existed is left alone.
    """
    f = open(path, "xb")  # noqa: SIM115 - closed below, before the partial file is removed
    try:
        with f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
    except BaseException:
        discard(path)
        raise


def publish_once(final: Path, data: bytes, durable: bool, staging_dir: Path | None = None) -> bool:
    """Create ``final`` with ``data`` unless it exists; atomic and first-writer-wins.

    The data is written to a temporary file in ``staging_dir`` (the store's ``.staging/``,
    whose stale files are removed when a store opens; beside ``final`` when ``None``) and
    hard-linked into place. The temporary file is removed whatever happens; if even that
    fails, the original error is the one raised.

    Returns:
        ``False`` when ``final`` existed (another writer won).

    Raises:
        OSError: it could not be written (map it with
            :func:`~dslog_dagster.core.store.failures.storage_error`).
    """
    if final.exists():
        return False
    folder = final.parent if staging_dir is None else staging_dir
    tmp = folder / f".tmp-{uuid.uuid4().hex}"
    try:
        if staging_dir is not None:
            staging_dir.mkdir(parents=True, exist_ok=True)
        write_synced(tmp, data, durable)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in _NO_LINK:
                raise
            # Filesystems without hard links: O_EXCL still gives first-writer-wins.
            try:
                write_synced(final, data, durable)
            except FileExistsError:
                return False
            except OSError:
                discard(final)  # never leave a torn record
                raise
        if durable:
            fsync_dir(final.parent)
        return True
    finally:
        discard(tmp)


def publish_staged(tmp: Path, final: Path, what: str, root: Path, durable: bool) -> None:
    """Rename the flushed staging file ``tmp`` to ``final`` and flush the directory.

    Raises:
        LineageStorageError: it could not be published (``what`` in ``root`` names it; a
            subclass says why: a full disk, a read-only store, a permission).
    """
    try:
        os.rename(tmp, final)
        if durable:
            fsync_dir(final.parent)
    except OSError as e:
        raise storage_error(e, f"write {what}", root) from e
    finally:
        discard(tmp)  # gone after the rename


def publish_file(
    staging_dir: Path, final: Path, data: bytes, what: str, root: Path, *, durable: bool = True
) -> None:
    """Write ``data`` to ``final`` atomically: staging file, fsync, rename, fsync dir.

    ``durable=False`` skips both fsyncs: the publish stays atomic (a reader or a crashed
    process never sees a partial file) but a power loss may lose it.

    Raises:
        LineageStorageError: it could not be written (nothing is left behind; a subclass
            says why).
    """
    tmp = staging_dir / f"{uuid.uuid4().hex}.tmp"
    try:
        staging_dir.mkdir(parents=True, exist_ok=True)
        write_synced(tmp, data, durable)
        os.rename(tmp, final)
        if durable:
            fsync_dir(final.parent)
    except OSError as e:
        discard(tmp)
        raise storage_error(e, f"write {what}", root) from e
    except BaseException:
        discard(tmp)
        raise


def clean_staging(staging_dir: Path, max_age_s: float = STAGING_MAX_AGE_S) -> int:
    """Remove staging directories left by crashed writers; returns how many were removed.

    Only directories older than ``max_age_s`` go, so a registration in flight in another
    process is never disturbed.
    """
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(staging_dir))
    except OSError:
        return 0
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < max_age_s:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


def clean_stale_tmp(arrays_dir: Path, max_age_s: float = STAGING_MAX_AGE_S) -> int:
    """Remove temporary record files (``.tmp-*``) older than ``max_age_s`` from the array
    directories under ``arrays_dir``; returns how many were removed.

    Writers now stage them in ``.staging/``; these are leftovers of writers of earlier
    versions that crashed or failed (a full disk) and whose cleanup failed too. Only old ones
    go, so a writer of such a version still in flight is never disturbed.
    """
    removed = 0
    now = time.time()
    try:
        dirs = [e.path for e in os.scandir(arrays_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for d in dirs:
        try:
            entries = [e for e in os.scandir(d) if e.name.startswith(TMP_PREFIX)]
        except OSError:
            continue
        for entry in entries:
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime < max_age_s:
                    continue
                os.unlink(entry.path)
                removed += 1
            except OSError:
                continue
    return removed


def read_store_id(root: str | os.PathLike[str]) -> str | None:
    """The id of the store at ``root``, ``None`` when there is none (yet).

    Read with bare system calls: every tracked step checks it (``open_store``), and a text-mode
    ``Path.read_text`` costs several times more.
    """
    try:
        fd = os.open(os.path.join(root, STORE_ID_FILE), os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").strip() or None


def claim_store_id(root: Path, durable: bool = True) -> str:
    """The store's id, written first by whichever process creates the store (a hard link
    publishes it only if no other process did). ``durable``: flushed with its directory, as
    the store's records are (a crash must not leave an empty id after records it names).
    ``""`` when the file exists but is empty (damaged)."""
    found = read_store_id(root)
    if found:
        return found
    tmp = root / f".store-id.{uuid.uuid4().hex}.tmp"
    try:
        write_synced(tmp, uuid.uuid4().hex.encode(), durable)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, root / STORE_ID_FILE)
            if durable:
                fsync_dir(root)
    except OSError as e:
        raise storage_error(e, "create the store (its `.store-id`)", root) from e
    finally:
        discard(tmp)
    # Empty only when damaged: the store still works (the id only tells a cached handle that
    # its directory was replaced); the caller notes the damage and `dslog fsck --quarantine`
    # writes a new id.
    return read_store_id(root) or ""
