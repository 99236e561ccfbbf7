"""Group commit: the fsyncs of a store's writes batched by a committer, off the writer's path.

Why: a durable store flushes each step's lineage file and its two directories before the step
succeeds (three device flushes, the largest part of the plugin's cost on a step served from a
reuse view). With ``LineageStore(..., group_commit=True)`` a write is published exactly as
before — staged, then renamed or linked into place, so readers in any process see the whole
file at once and a killed process never leaves a partial one — but its bytes and the names
it made are handed to a :class:`GroupCommitter`, whose thread flushes everything queued in one
pass (the files' fsyncs, then each directory once, concurrently so the file system merges them
into one journal commit) a short delay later. :meth:`GroupCommitter.flush` forces the pass in
the caller: the store calls it from :meth:`LineageStore.flush` and ``close``, the Dagster
resource at the end of each run, and an ``atexit`` hook at every clean process exit.

What a crash can lose (documented in ``docs/limits.md``): a process that is killed loses
nothing (the bytes are in the OS page cache, which survives it). A power loss or an operating
system crash before the pass loses what was published since the last pass: a file may be
missing, or present but empty or torn when its name reached the disk before its bytes. Both are
detected, never taken for good lineage: every segment and array record carries checksums (a
damaged file is noted, left out of listings, and queries that could touch it are refused; ``dslog
fsck --quarantine`` moves it aside), and an array version whose operation is gone fails the
lineage checks ("registered but no operation wrote it").

A failed pass (an fsync error: the disk may not hold what was published) is logged and raised
by the next :meth:`GroupCommitter.flush` as a
:class:`~dslog_dagster.errors.LineageStorageError`, so a run's end or ``store.flush()`` reports it.
"""

import atexit
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from dslog_dagster.core import background
from dslog_dagster.core.store import files
from dslog_dagster.errors import LineageStorageError

__all__ = ["GROUP_COMMIT_DELAY_S", "GroupCommitter", "flush_all"]

_log = logging.getLogger(__name__)

GROUP_COMMIT_DELAY_S = 0.2
"""How long the committer waits after the first write of a batch before flushing it: writes
published meanwhile (a run's next steps) share the pass, and the window a power loss can take
stays well under a second."""

_live: "weakref.WeakSet[GroupCommitter]" = weakref.WeakSet()


def fsync_file(path: Path) -> None:
    """fsync the file at ``path`` (its bytes, whichever of its hard links is named); a file
    removed meanwhile (compacted into a pack, retracted) is skipped: whoever removed it flushed
    what replaced it. ``os.fsync`` is looked up when called, so a test can count or fail it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class GroupCommitter:
    """Flushes the files and directories a store published, in batches, in its own thread.

    Args:
        root: the store's directory (named in errors).
        delay_s: seconds between the first write of a batch and its pass (``None``:
            :data:`GROUP_COMMIT_DELAY_S`, read when the committer is made).
    """

    def __init__(self, root: Path, delay_s: float | None = None) -> None:
        self.root = root
        self.delay_s = float(GROUP_COMMIT_DELAY_S if delay_s is None else delay_s)
        self._cond = threading.Condition()
        self._files: dict[Path, None] = {}  # ordered sets: a path queued twice is synced once
        self._dirs: dict[Path, None] = {}
        self._error: BaseException | None = None
        self._pass = threading.Lock()  # held by whichever thread runs a pass
        self._thread: threading.Thread | None = None
        self._closed = False
        self.passes = 0
        """Passes run so far (for tests and the bench)."""
        _live.add(self)

    def add(self, paths: Sequence[Path], dirs: Sequence[Path]) -> None:
        """Queue published files ``paths`` and the directories ``dirs`` that name them."""
        with self._cond:
            self._files.update(dict.fromkeys(paths))
            self._dirs.update(dict.fromkeys(dirs))
            self._closed = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="dslog-group-commit", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        """Files and directories queued and not yet flushed."""
        with self._cond:
            return len(self._files) + len(self._dirs)

    def flush(self) -> None:
        """Flush everything queued so far, in the calling thread, before returning.

        Raises:
            LineageStorageError: this pass or an earlier one failed (what was published since
                the last good pass may not be on disk; the message says what to do).
        """
        with self._pass:
            self._one_pass()
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            msg = (
                f"Could not flush lineage written with group commit to `{self.root}`: {error}. "
                "Lineage published since the last flush may not be on disk; check the disk "
                "and run `dslog fsck` on the store."
            )
            raise LineageStorageError(msg) from error

    def close(self) -> None:
        """Flush, then stop the thread (it is started again if more is queued)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.flush()

    def reset_after_fork(self) -> None:
        """In a forked child: empty queues, fresh locks, no thread (the parent flushes what
        it queued; the child's copies of its locks may be held by threads that are gone)."""
        self._cond = threading.Condition()
        self._pass = threading.Lock()
        self._files, self._dirs = {}, {}
        self._thread = None
        self._error = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._files or self._dirs or self._closed):
                    self._cond.wait()
                if self._closed and not (self._files or self._dirs):
                    self._closed = False
                    return
                # let the writes of the next moments join this pass
                deadline = time.monotonic() + self.delay_s
                while not self._closed and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
            with self._pass:
                self._one_pass()

    def _one_pass(self) -> None:
        """Take the queue and flush it (callers hold ``_pass``); a failure is kept for
        :meth:`flush` and logged."""
        with self._cond:
            paths, self._files = list(self._files), {}
            dirs, self._dirs = list(self._dirs), {}
        if not paths and not dirs:
            return
        try:
            _concurrently(fsync_file, paths)  # the file system merges concurrent flushes
            _concurrently(files.fsync_dir, dirs)
        except BaseException as e:
            _log.error("Group commit of the lineage store `%s` failed: %s", self.root, e)
            with self._cond:
                self._error = self._error or e
        self.passes += 1


def _concurrently(fn: Callable[[Path], None], items: Sequence[Path]) -> None:
    """``fn`` over ``items`` in the worker pool, or one after the other once the interpreter
    is shutting down (the pool takes no new work then, and the exit hook flushes)."""
    try:
        background.map_all(fn, items)
    except RuntimeError:
        if not sys.is_finalizing() and threading.main_thread().is_alive():
            raise
        for item in items:
            fn(item)


def flush_all() -> None:
    """Flush every live committer of this process (a run's end, the process's exit).

    Raises:
        LineageStorageError: a committer's pass failed (the first such error).
    """
    first: LineageStorageError | None = None
    for committer in list(_live):
        try:
            committer.flush()
        except LineageStorageError as e:
            first = first or e
    if first is not None:
        raise first


def _at_exit() -> None:
    try:
        flush_all()
    except LineageStorageError as e:  # nothing to raise to at exit: say it
        _log.error("%s", e)


def _after_fork_in_child() -> None:
    # The parent flushes what it queued; the child starts with empty queues and no thread.
    for committer in list(_live):
        committer.reset_after_fork()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
