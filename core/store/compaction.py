"""Compaction: packing the segments of small operations into shared pack files.

Every registration writes a segment of its own; compaction packs the segments of small
operations (and small packs) into larger packs, so that the per-file overhead (Parquet
footer, file-system block) is paid once per pack instead of once per operation. It publishes
each pack atomically (staging + fsync + rename) *before* it deletes the files it packed, so
every operation is in at least one visible segment at every instant; an operation may
briefly be in two, with identical content. Compactions in one store take an advisory lock,
so they do not duplicate work.
"""

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dslog_dagster.core.format import segment
from dslog_dagster.core.format.blob import table_from_blob
from dslog_dagster.core.store import files
from dslog_dagster.core.store.catalog import LineageCatalog
from dslog_dagster.core.store.failures import storage_error
from dslog_dagster.core.store.layout import StoreLayout
from dslog_dagster.core.store.operations import OperationFiles
from dslog_dagster.core.store.records import now, parse_operation
from dslog_dagster.errors import LineageStorageError

COMPACT_MAX_OP_BYTES = 64 * 1024
"""Operation segments up to this size are packed by :func:`compact`."""
COMPACT_PACK_BYTES = 16 * 1024 * 1024
"""Target size of a pack; packs below half of it are merged again by later compactions."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction (:meth:`LineageStore.compact`) did.

    Attributes:
        operations: operations written into new packs.
        files_removed: segment files (operation segments and old packs) replaced.
        packs: the new packs (root-relative paths).
        bytes_before: total size of the replaced files.
        bytes_after: total size of the new packs.
        skipped: another compaction held the lock for the whole ``lock_timeout``.
        removed: the replaced files (root-relative paths).
    """

    operations: int
    files_removed: int
    packs: tuple[str, ...]
    bytes_before: int
    bytes_after: int
    skipped: bool = False
    removed: tuple[str, ...] = ()


@contextlib.contextmanager
def compaction_lock(path: Path, timeout: float) -> Iterator[bool]:
    """An advisory inter-process lock (``flock``; released by the OS if the holder dies).

    Only keeps two compactions from doing the same work twice: correctness never depends on
    it. Where ``flock`` is unavailable the lock is always granted.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise storage_error(e, f"open the compaction lock `{path}`", path.parent) from e
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.05)
            except OSError:  # file system without flock
                break
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def compact(
    layout: StoreLayout,
    operations: OperationFiles,
    catalog: LineageCatalog,
    *,
    max_op_bytes: int = COMPACT_MAX_OP_BYTES,
    pack_bytes: int = COMPACT_PACK_BYTES,
    lock_timeout: float = 60.0,
    upload: Callable[[str, bytes], None] | None = None,
) -> CompactionResult:
    """Pack the segments of small operations (and small packs) into shared pack files.

    Safe while other processes register, read or compact: each pack is published
    atomically before the files it replaces are deleted, and readers that lose a file
    mid-read find the operation in the pack. Records and tables are copied byte for byte.

    Args:
        layout: the store's directories.
        operations: the store's operations (their index is refreshed).
        catalog: the store's catalog, synced once the packs are published.
        max_op_bytes: operation segments up to this size are packed; larger ones (big
            columnar tables) stay where they are, since one footer is noise next to them.
        pack_bytes: target pack size; packs under half of it are merged again.
        lock_timeout: seconds to wait for another compaction of this store to finish
            before giving up (the result then says ``skipped``).
        upload: called with each pack (root-relative path, bytes) before it is published
            here (a store on object storage creates it there first).

    Returns:
        What was packed (see :class:`CompactionResult`).

    Raises:
        LineageStorageError: a pack could not be written (nothing was deleted).
    """
    with compaction_lock(layout.root / ".compact.lock", lock_timeout) as locked:
        if not locked:
            return CompactionResult(0, 0, (), 0, 0, skipped=True)
        return _compact_locked(layout, operations, catalog, max_op_bytes, pack_bytes, upload)


def _check_legacy(seg: segment.Segment, entries: list[tuple[str, str, list[bytes]]]) -> None:
    """Decode every record and table of a segment written before checksums, so compaction
    never gives damaged bytes a checksum: the pack it writes is verified from then on.

    Raises:
        LineageStorageError: a record or table does not decode.
    """
    for op_id, text, blobs in entries:
        parse_operation(text, seg.path, str(seg.path), op_id)
        for blob in blobs:
            table_from_blob(blob, str(seg.path))


def _compact_locked(
    layout: StoreLayout,
    operations: OperationFiles,
    catalog: LineageCatalog,
    max_op_bytes: int,
    pack_bytes: int,
    upload: Callable[[str, bytes], None] | None = None,
) -> CompactionResult:
    """:func:`compact` under the lock: choose the small segments, write their operations into
    packs of about ``pack_bytes``, publish the packs, then delete the packed files."""
    files.clean_stale_tmp(layout.arrays_dir)
    segs = operations.refresh()
    candidates: list[tuple[str, int]] = []
    for rel in segs:
        try:
            size = (layout.root / rel).stat().st_size
        except FileNotFoundError:
            continue
        limit = max_op_bytes if rel.startswith("operations/") else pack_bytes // 2
        if size <= limit:
            candidates.append((rel, size))
    if len(candidates) < 2:
        return CompactionResult(0, 0, (), 0, 0)
    chosen = {rel for rel, _ in candidates}
    elsewhere = {op for rel, ops in segs.items() if rel not in chosen for op in ops}
    entries: dict[str, tuple[str, str, list[bytes]]] = {}
    packed_files: list[tuple[str, int]] = []
    for rel, size in candidates:
        try:
            with segment.Segment(layout.inside(rel)) as seg:
                got = seg.entries()
                if not seg.verified:
                    _check_legacy(seg, got)
        except FileNotFoundError:
            continue  # another process removed it: not ours to delete
        except LineageStorageError as e:
            operations.damage.note(rel, str(e))
            continue  # damaged: left where it is for `dslog fsck`
        for entry in got:
            if entry[0] not in elsewhere:
                entries.setdefault(entry[0], entry)
        packed_files.append((rel, size))
    ordered = [entries[k] for k in sorted(entries)]
    chunks: list[list[tuple[str, str, list[bytes]]]] = [[]]
    size = 0
    for entry in ordered:
        n = len(entry[1]) + sum(len(b) for b in entry[2])
        if chunks[-1] and size + n > pack_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += n
    packs = []
    bytes_after = 0
    for chunk in chunks:
        if not chunk:
            continue
        ns, _ = now()
        rel = f"packs/{ns:016x}{uuid.uuid4().hex}.parquet"
        data = segment.segment_to_bytes(chunk)
        if upload is not None:
            upload(rel, data)
        files.publish_file(
            layout.staging_dir, layout.root / rel, data, f"pack `{rel}`", layout.root
        )
        packs.append(rel)
        bytes_after += len(data)
    # Every operation of the packed files is now in a published pack: drop the files. One
    # that cannot go (the store turned read-only) leaves its operations in two segments with
    # identical content, which readers accept, as between a publish and its unlinks.
    for rel, _ in packed_files:
        try:
            os.unlink(layout.root / rel)
        except FileNotFoundError:
            continue
        except OSError as e:
            doing = f"remove the packed segment `{rel}` (its pack is published)"
            raise storage_error(e, doing, layout.root) from e
    files.fsync_dir(layout.operations_dir)
    files.fsync_dir(layout.packs_dir)
    operations.refresh()
    catalog.sync_best_effort()
    return CompactionResult(
        len(entries),
        len(packed_files),
        tuple(packs),
        sum(s for _, s in packed_files),
        bytes_after,
        removed=tuple(rel for rel, _ in packed_files),
    )
