"""Long-lived worker threads for the store's flushes (segment writes, directory fsyncs).

A tracked step served from a reuse view used to start two threads of its own (one staging and
flushing its lineage segment while the value is written, one flushing a second directory
beside the first). ``Thread.start`` waits until the new thread has run, which on a busy
machine (two cores shared by several processes) cost a noticeable part of such a step. Handing
the work to threads that already run costs a queue put instead.

Fork-safe: a forked child (Dagster's multiprocess executor) gets a fresh pool on first use;
the parent's threads do not exist in the child, so its pool object must not be reused.
"""

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["WORKERS", "in_worker", "submit"]

_R = TypeVar("_R")

#: Worker threads per process: one job's staging and another's directory flush can run at
#: once; nothing here submits from a worker and then waits on another task (no deadlock).
WORKERS = 2

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

    Never wait on another submitted task from inside ``fn``: the pool is small and fixed.
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
