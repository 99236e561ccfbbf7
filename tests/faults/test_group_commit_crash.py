"""Crashes of a writer using group commit (``LineageStore(..., group_commit=True)``).

* ``kill -9`` between publish and fsync: the OS keeps what the process wrote, so the store is
  whole — every operation the writer published reads back exactly, ``verify`` is clean.
* A power loss before the committer's pass, simulated on the files the pass had not flushed
  yet (a published file whose bytes never reached the disk reads back empty, cut or zeroed;
  one whose name never reached it is gone): every query answers as the undamaged store would
  or raises a ``LineageStorageError`` (damage) or ``LineageNotFoundError`` (a lost array or
  operation); never a wrong answer, and ``verify`` names each damaged file.
"""

import contextlib
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import LineageStore
from dslog_dagster.errors import DamagedStoreWarning, LineageNotFoundError, LineageStorageError

N = 4
"""Operations in the chain ``a0 -> a1 -> ... -> a<N>`` (shape (6,), ``a<k+1>[i] = a<k>[i]``
for even ``i``, from ``a<k>[i - 1]`` for odd ``i``)."""

WRITER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from dslog_dagster.core import LineageRelation
    from dslog_dagster.core.store import LineageStore, NewArray
    from dslog_dagster.core.store import group_commit as gc
    gc.GROUP_COMMIT_DELAY_S = 3600.0  # the committer never gets to run its pass
    root, n, durable_first = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    out = np.arange(6)
    rel = LineageRelation.from_columns((6,), (6,), out_cols=[out], in_cols=[out - out % 2])
    if durable_first:  # a0 and the first operation flushed the usual way
        plain = LineageStore(root)
        plain.register_array("a0", (6,))
        plain.register_operation("step", ["a0"], [NewArray("a1", (6,))], {("a1", "a0"): rel})
        start = 1
    else:
        start = 0
    store = LineageStore(root, group_commit=True)
    store.register_array("a0", (6,))
    for k in range(start, n):
        a, b = f"a{k}", f"a{k + 1}"
        store.register_operation("step", [a], [NewArray(b, (6,))], {(b, a): rel})
    print("published", flush=True)
    time.sleep(3600)
    """
)


def _expected(cells: list[int]) -> list[int]:
    """``a0``'s cells behind ``a<N>``'s ``cells`` (each hop maps odd ``i`` to ``i - 1``)."""
    return sorted({c - c % 2 for c in cells})


def _killed_writer(root: Path, durable_first: bool) -> None:
    """Run the writer until it published everything, then ``kill -9`` it (before any pass)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(N), "1" if durable_first else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "published"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def _answer(root: Path) -> list[int]:
    log = DSLog(LineageStore(root))
    cells = log.prov_query([f"a{k}" for k in range(N, -1, -1)], np.s_[1:5])
    return sorted(int(i) for i in cells.to_indices()[:, 0])


def test_kill_9_between_publish_and_fsync_leaves_the_store_whole(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _killed_writer(root, durable_first=False)
    store = LineageStore(root)
    assert store.verify().clean
    assert len(store.operation_ids()) == N
    assert _answer(root) == _expected([1, 2, 3, 4])


def _unflushed(root: Path) -> list[Path]:
    """The files the killed writer published with group commit (all but the durable first
    operation's): each later operation's segment and its output's array record."""
    store = LineageStore(root)
    out: list[Path] = []
    for op in store.operations():
        name = op.outputs[0].name
        if name != "a1":
            out.append(root / "operations" / f"{op.op_id}.parquet")
            out.extend(store.layout.array_dir(name).glob("*.parquet"))
    return sorted(out)


POWER_LOSS = {
    "empty": lambda b: b"",
    "cut": lambda b: b[: len(b) // 2],
    "zeroed": lambda b: b"\0" * len(b),
    "tail zeroed": lambda b: b[: len(b) // 3] + b"\0" * (len(b) - len(b) // 3),
}


@pytest.mark.parametrize("loss", [*POWER_LOSS, "name lost"])
def test_a_power_loss_before_the_pass_is_detected_never_wrong(tmp_path: Path, loss: str) -> None:
    root = tmp_path / "s"
    _killed_writer(root, durable_first=True)
    files = _unflushed(root)
    assert files  # the chain's later operations and their array records
    for p in files[::2]:  # a power loss keeps some files and loses others
        if loss == "name lost":
            p.unlink()
        else:
            data = p.read_bytes()
            p.unlink()  # the link's inode is the operation's: damage each name by itself
            p.write_bytes(POWER_LOSS[loss](data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedStoreWarning)
        answer = None
        # refused (damaged, or a lost array not found): fine; another answer: never
        with contextlib.suppress(LineageStorageError, LineageNotFoundError):
            answer = _answer(root)
        assert answer in (None, _expected([1, 2, 3, 4]))
        store = LineageStore(root)
        report = store.verify()
    if loss != "name lost":
        damaged = set(report.damaged)
        assert damaged, "a damaged file went unnoticed"
        assert all(str(root / d) in {str(p) for p in files} for d in damaged)
    # the chain is broken: the first, durable hop still answers exactly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedStoreWarning)
        first = DSLog(LineageStore(root)).prov_query(["a1", "a0"], np.s_[1:5])
    assert sorted(int(i) for i in first.to_indices()[:, 0]) == _expected([1, 2, 3, 4])
