"""Retracting an operation whose value was never stored (``with_lineage``'s failed write).

The store's files are immutable once visible, with one exception, made here: a lineage IO
manager that wraps another IO manager (:func:`~dslog_dagster.io_managers.with_lineage`)
commits the lineage of a step *before* the inner manager stores the value, so that a lineage
write that fails leaves the value downstream reads untouched. When the inner write then fails,
the step's operation and output array version describe a value that does not exist: left in
place, a query by name would follow that version as the newest. :func:`retract` removes them.

* The operation's segment is deleted; when a compaction packed it meanwhile, the pack is
  rewritten without it (published before the old pack is deleted, as a compaction does).
* The output's array record (the link to the segment, or the JSON record of a source step)
  is deleted.
* Both happen under the compaction lock, so no compaction copies the operation while it goes.
* The catalog is synced: a sync drops the rows of segments and array records that vanished.

Readers that read the operation in the short time it was visible saw lineage of a step that
then failed; the step's failure says so. Another process's handle may keep the record in its
cache until it re-reads the files; a new query or process never sees it.
"""

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

from dslog_dagster.core.format import segment
from dslog_dagster.core.store import files
from dslog_dagster.core.store.compaction import compaction_lock
from dslog_dagster.core.store.failures import storage_error
from dslog_dagster.core.store.layout import link_file_name, version_file_name
from dslog_dagster.core.store.records import ArrayRecord, now
from dslog_dagster.errors import CatalogLockedError

if TYPE_CHECKING:
    from dslog_dagster.core.store.store import LineageStore

RETRACT_LOCK_TIMEOUT = 120.0
"""Seconds a retraction waits for a running compaction of the store to finish."""


def retract(store: "LineageStore", op_id: str | None, arrays: "list[ArrayRecord]") -> None:
    """Remove operation ``op_id`` (``None``: none) and the array records of ``arrays`` (the
    versions it or a source step registered) from ``store``.

    Raises:
        CatalogLockedError: a compaction held the store's lock for too long (nothing removed).
        LineageStorageError: a file could not be removed (a subclass says why).
    """
    layout = store.layout
    with compaction_lock(layout.root / ".compact.lock", RETRACT_LOCK_TIMEOUT) as locked:
        if not locked:
            msg = (
                f"A compaction of the store `{layout.root}` held its lock for "
                f"{RETRACT_LOCK_TIMEOUT:.0f} s, so operation `{op_id}` could not be retracted."
            )
            raise CatalogLockedError(msg)
        try:
            if op_id is not None:
                _drop_operation(store, op_id)
            dirs = set()
            for a in arrays:
                directory = layout.array_dir(a.name)
                for name in (link_file_name(a.version), version_file_name(a.version)):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(directory / name)
                        dirs.add(directory)
            if store.durable:
                files.fsync_dirs([layout.operations_dir, layout.packs_dir, *dirs])
        except OSError as e:
            raise storage_error(e, f"retract operation `{op_id}`", layout.root) from e
    store.operation_files.records.pop(op_id or "", None)
    store.array_files.forget()
    store.operation_files.refresh()
    store.catalog.sync_best_effort()


def _drop_operation(store: "LineageStore", op_id: str) -> None:
    """Delete ``op_id``'s segment, or rewrite the pack holding it without it."""
    layout = store.layout
    for _ in range(3):  # a pack can only move under a compaction, which we lock out
        store.operation_files.refresh()
        rel = store.operation_files.where.get(op_id)
        if rel is None:
            return
        if rel.startswith("operations/"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(layout.root / rel)
            continue
        with segment.Segment(layout.inside(rel)) as seg:
            keep = [e for e in seg.entries() if e[0] != op_id]
        if keep:
            ns, _ = now()
            new = f"packs/{ns:016x}{uuid.uuid4().hex}.parquet"
            data = segment.segment_to_bytes(keep)
            what = f"pack `{new}`"
            files.publish_file(layout.staging_dir, layout.root / new, data, what, layout.root)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(layout.root / rel)
