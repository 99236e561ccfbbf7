"""core.progress: phase lines, heartbeat pacing, waits (the catalog lock), number formats."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslog_dagster.core import capture, progress
from dslog_dagster.core.store import LineageStore


class Lines:
    """A sink that keeps what it is given (thread-safe: heartbeats come from a thread)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def info(self, msg: str) -> None:
        with self.lock:
            self.lines.append(msg)


def test_phase_logs_one_end_line_with_details() -> None:
    sink = Lines()
    with progress.report_to(sink), progress.phase("extraction of `b`", "2 inputs") as ph:
        ph.note("3 tables", "")
    assert len(sink.lines) == 1
    assert sink.lines[0].startswith("dslog: extraction of `b`: 2 inputs, 3 tables in ")


def test_quiet_phase_is_silent_unless_long(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_MIN_S", 0.2)
    sink = Lines()
    with progress.phase("write", quiet=True, sink=sink):
        pass
    assert sink.lines == []
    with progress.phase("write", quiet=True, sink=sink):
        time.sleep(0.25)
    assert len(sink.lines) == 1
    assert sink.lines[0].startswith("dslog: write in 0.2")


def test_failed_phase_says_so_only_when_long(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_MIN_S", 0.1)
    sink = Lines()
    with pytest.raises(RuntimeError), progress.phase("quick", sink=sink):
        raise RuntimeError
    assert sink.lines == []

    def slow_failure() -> None:
        with progress.waiting("a lock", sink=sink):
            time.sleep(0.15)
            raise RuntimeError

    with pytest.raises(RuntimeError):
        slow_failure()
    assert sink.lines[-1].startswith("dslog: gave up waiting for a lock: stopped by an error")


def test_heartbeats_are_paced_and_carry_probe_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSLOG_PROGRESS_INTERVAL", "0.1")
    sink = Lines()
    pid = progress.add_probe(lambda: "Spark job 3, stage 7: 1/4 tasks done")
    broken = progress.add_probe(lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    try:
        with progress.phase("capture", sink=sink):
            time.sleep(0.55)
    finally:
        progress.remove_probe(pid)
        progress.remove_probe(broken)
    beats = sink.lines[:-1]
    assert 3 <= len(beats) <= 6, sink.lines
    assert all(b.startswith("dslog: still capture (") for b in beats)
    assert all(b.endswith("; Spark job 3, stage 7: 1/4 tasks done)") for b in beats)
    assert sink.lines[-1].startswith("dslog: capture in 0.5")


def test_a_quiet_phase_does_not_wake_the_heartbeat_thread() -> None:
    sink = Lines()
    with progress.phase("warm-up", sink=sink):  # the thread runs from here on
        pass
    beat = progress._HEARTBEAT
    before = beat.wakeups
    with progress.phase("write", quiet=True, sink=sink):
        pass
    assert beat.wakeups == before  # a served step's write costs no thread switch
    with progress.phase("capture", sink=sink), progress.waiting("a lock", sink=sink):
        pass
    assert beat.wakeups == before + 2


def test_a_quiet_phase_that_runs_long_still_gets_heartbeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSLOG_PROGRESS_INTERVAL", "0.1")
    sink = Lines()
    with progress.phase("write", quiet=True, sink=sink):
        time.sleep(1.6)  # the thread notices it within a second, unwoken
    beats = [x for x in sink.lines if x.startswith("dslog: still write (")]
    assert len(beats) >= 2, sink.lines
    assert sink.lines[-1].startswith("dslog: write in 1.")


def test_silenced_drops_lines() -> None:
    sink = Lines()
    with progress.report_to(sink), progress.silenced(), progress.phase("probe"):
        pass
    assert sink.lines == []


HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("SELECT 1").fetchall()
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


@pytest.mark.integration
def test_catalog_lock_wait_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_MIN_S", 0.3)
    store = LineageStore(tmp_path, lock_timeout=30)
    store.register_array("x", (3,))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store.catalog.path), "1.0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    sink = Lines()
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with progress.report_to(sink):
            assert [a.name for a in store.arrays()] == ["x"]
    finally:
        holder.communicate(timeout=30)
    waited = [x for x in sink.lines if x.startswith("dslog: waited ")]
    assert len(waited) == 1, sink.lines
    assert waited[0].endswith(f"for the lock of the catalog `{store.catalog.path}`")


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_seconds_have_at_most_two_significant_digits_or_whole_seconds(s: float) -> None:
    text = progress.fmt_seconds(s)
    number = text.split()[0].lstrip("<")
    digits = number.replace(".", "").lstrip("0")
    assert len(digits) <= 2 or "." not in number, text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (1_300_000, "1.3 MB"),
        (2 * 10**12, "2000.0 GB"),
    ],
)
def test_bytes_have_units(n: int, text: str) -> None:
    assert progress.fmt_bytes(n) == text


def test_a_capture_does_not_wake_the_heartbeat_thread() -> None:
    # a woken thread takes the GIL: on a loaded machine a third of a 10^6-cell capture
    sink = Lines()
    with progress.phase("warm-up", sink=sink):  # the thread runs from here on
        pass
    beat = progress._HEARTBEAT
    before = beat.wakeups
    with progress.report_to(sink):
        r = capture(np.negative, np.arange(4.0))
    assert beat.wakeups == before
    assert r.value.tolist() == [-0.0, -1.0, -2.0, -3.0]
    lines = [x for x in sink.lines if "annotated run of" in x or "extraction of" in x]
    assert len(lines) == 2, sink.lines  # the end lines are still written
    with progress.phase("unwoken", wake=False, sink=sink):
        pass
    assert beat.wakeups == before
    assert sink.lines[-1].startswith("dslog: unwoken in ")
