"""Spark's job progress in dslog's heartbeat lines (jobs, stages and tasks done).

A Spark step spends its time in Spark jobs the Python side only waits for; the heartbeat of a
long phase (:mod:`dslog_dagster.core.progress`) asks :func:`status_line` what runs, through
``SparkContext.statusTracker()`` — Spark's public, polling API, which works on any classic
session and needs nothing of ours in the JVM. The heartbeat thread calls it from its own
thread; PySpark gives each Python thread its own JVM connection, so a step blocked in a Spark
call does not block the poll.
"""

import threading
import weakref
from typing import Any

from dslog_dagster.core import progress

__all__ = ["status_line", "watch"]

_watched: "weakref.WeakSet[Any]" = weakref.WeakSet()
_lock = threading.Lock()


def status_line(sc: Any) -> str | None:
    """``Spark job 12, stage 31: 5/8 tasks done, 2 running`` for what runs on ``sc`` now, or
    ``None`` when no job runs (or the context is stopped)."""
    if getattr(sc, "_jsc", None) is None:  # stopped: nothing to ask
        return None
    tracker = sc.statusTracker()
    jobs = sorted(tracker.getActiveJobsIds())
    if not jobs:
        return None
    parts = []
    for sid in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(sid)
        if info is None:
            continue
        parts.append(
            f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks done"
            + (f", {info.numActiveTasks} running" if info.numActiveTasks else "")
            + (f", {info.numFailedTasks} failed" if info.numFailedTasks else "")
        )
    noun = "job" if len(jobs) == 1 else "jobs"
    head = f"Spark {noun} {', '.join(str(j) for j in jobs)}"
    return f"{head}, {'; '.join(parts)}" if parts else f"{head} (no stage running yet)"


def watch(session: Any) -> None:
    """Report ``session``'s Spark jobs in heartbeat lines (once per SparkContext)."""
    sc = session.sparkContext
    with _lock:
        if sc in _watched:
            return
        _watched.add(sc)
    ref = weakref.ref(sc)

    def probe() -> str | None:
        ctx = ref()
        return None if ctx is None else status_line(ctx)

    progress.add_probe(probe)
