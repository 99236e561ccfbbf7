"""The store's worker pool (:mod:`dslog_dagster.core.background`): results and errors come
back through the future, and a forked child gets working threads of its own (the parent's
do not exist in the child, so reusing its pool would hang the first flush)."""

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from dslog_dagster.core import background
from dslog_dagster.core.store import files as files_module


def test_result_and_error_come_back() -> None:
    assert background.submit(lambda a, b: a + b, 2, 3).result() == 5
    seen: list[str] = []
    background.submit(lambda: seen.append(threading.current_thread().name)).result()
    assert seen[0].startswith("dslog-io")  # ran in a worker, not the caller's thread

    def boom() -> None:
        msg = "disk on fire"
        raise OSError(msg)

    with pytest.raises(OSError, match="disk on fire"):
        background.submit(boom).result()


def _child(conn: "multiprocessing.connection.Connection") -> None:
    conn.send(background.submit(os.getpid).result(timeout=30))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
# Python 3.12+ warns on fork() in a process with threads (this test makes them on purpose,
# as Dagster's multiprocess executor may); nothing else is filtered
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_gets_its_own_workers() -> None:
    background.submit(os.getpid).result()  # the parent's pool exists before the fork
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child,))
    proc.start()
    assert parent.poll(60), "the child's submitted task never ran"
    assert parent.recv() == proc.pid
    proc.join(30)
    assert proc.exitcode == 0
    assert background.submit(os.getpid).result() == os.getpid()  # the parent's still works


def test_directory_flushes_from_a_worker_never_wait_on_the_pool(
    tmp_path: "os.PathLike[str]",
) -> None:
    """``_fsync_dirs`` hands extra directories to the pool, except from a worker: with every
    other worker busy, waiting on the pool there would never end."""
    assert not background.in_worker()
    assert background.submit(background.in_worker).result(timeout=30)
    release = threading.Event()
    busy = [background.submit(release.wait, 60) for _ in range(background.WORKERS - 1)]
    dirs = [Path(tmp_path) / n for n in "abc"]
    for d in dirs:
        d.mkdir()
    try:
        background.submit(files_module.fsync_dirs, dirs).result(timeout=30)
    finally:
        release.set()
    for b in busy:
        assert b.result(timeout=30)
    files_module.fsync_dirs(dirs)  # from outside the pool: the extra ones go to workers


def test_map_all_keeps_order_and_waits_for_every_call_before_raising() -> None:
    assert background.map_all(lambda x: x * x, range(7)) == [x * x for x in range(7)]
    assert background.map_all(lambda x: x, []) == []
    # the first item in the calling thread (it would only wait), the others in workers
    names = background.map_all(lambda _: threading.current_thread().name, range(3))
    assert names[0] == threading.current_thread().name
    assert all(n.startswith("dslog-io") for n in names[1:])
    finished: list[int] = []
    slow = threading.Event()

    def work(x: int) -> int:
        if x == 0:
            msg = "first item failed"
            raise ValueError(msg)
        slow.wait(0.2)  # still running when the first item has failed
        finished.append(x)
        return x

    with pytest.raises(ValueError, match="first item failed"):
        background.map_all(work, [0, 1, 2])
    assert sorted(finished) == [1, 2]  # nothing left running on the caller's data


def test_map_all_from_a_worker_runs_inline() -> None:
    # every worker busy: a worker waiting on the pool for its own items would never return
    release = threading.Event()
    busy = [background.submit(release.wait, 60) for _ in range(background.WORKERS - 1)]
    try:
        got = background.submit(
            background.map_all, lambda _: threading.current_thread().name, [1, 2, 3]
        ).result(timeout=30)
    finally:
        release.set()
    assert len(set(got)) == 1  # one thread ran all three
    assert got[0].startswith("dslog-io")
    for b in busy:
        assert b.result(timeout=30)
