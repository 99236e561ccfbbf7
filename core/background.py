"""Long-lived worker threads for the store's flushes (segment writes, directory fsyncs) and
for the Spark capture's read-back (tap files, staged output files).

A tracked step served from a reuse view used to start two threads of its own (one staging and
flushing its lineage segment while the value is written, one flushing a second directory
beside the first). ``Thread.start`` waits until the new thread has run, which on a busy
machine (two cores shared by several processes) cost a noticeable part of such a step. Handing
the work to threads that already run costs a queue put instead. (The Spark capture started
six threads per capture for its read-back, about 5 ms of a 0.7 s capture.)

Workers pick tasks up in submission order, so a task may wait on tasks submitted *before* it
(they have been picked up, and by the same rule never wait on it), never on later ones; and
a worker never waits on the pool for work it submits itself (:func:`map_all` runs inline
there).

Fork-safe: a forked child (Dagster's multiprocess executor) gets a fresh pool on first use;
the parent's threads do not exist in the child, so its pool object must not be reused.
"""

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

__all__ = ["WORKERS", "in_worker", "map_all", "submit"]

_R = TypeVar("_R")
_T = TypeVar("_T")

#: Worker threads per process (started on demand, then kept): one job's staging and another's
#: directory flush can run at once, and the read-back of a capture uses up to one per core.
WORKERS = max(2, min(8, os.cpu_count() or 2))

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pid = -1
_local = threading.local()


def _mark_worker() -> None:
    _local.worker = True


def in_worker() -> bool:
    """Is the calling thread one of the pool's workers? (Then it must not wait on the pool.)"""
    return bool(getattr(_local, "worker", False))


def _reset_after_fork() -> None:
    global _lock, _pool, _pid
    _lock = threading.Lock()  # the parent's may have been held by a thread that is gone
    _pool = None
    _pid = -1


os.register_at_fork(after_in_child=_reset_after_fork)


def submit(fn: Callable[..., _R], *args: Any) -> "Future[_R]":
    """Run ``fn(*args)`` in this process's worker pool; the future carries its result or error.

    Inside ``fn``, wait only on tasks submitted before this one (module docstring).
    """
    global _pool, _pid
    pool = _pool
    if pool is None or _pid != os.getpid():
        with _lock:
            if _pool is None or _pid != os.getpid():
                _pool = ThreadPoolExecutor(
                    max_workers=WORKERS, thread_name_prefix="dslog-io", initializer=_mark_worker
                )
                _pid = os.getpid()
            pool = _pool
    return pool.submit(fn, *args)


def map_all(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``[fn(x) for x in items]``: the first item in the calling thread (which would otherwise
    only wait), the others in the pool's workers (numpy, pyarrow, the native kernels and
    fsync release the GIL). Returns only once every call has ended, so a failure (re-raised
    here, the first in ``items`` order) never leaves calls running on data the caller is
    about to remove. Called from a worker, which must not wait on the pool, it runs them all
    itself, one after the other."""
    if len(items) <= 1 or in_worker():
        return [fn(x) for x in items]
    futures = [submit(fn, x) for x in items[1:]]
    try:
        first = fn(items[0])
    finally:
        wait(futures)
    return [first, *(f.result() for f in futures)]
