"""Progress of tracked steps in the run log: phase lines with sizes, heartbeats, waits.

A tracked step was silent between "started" and "succeeded"; now its capture phases (annotated
run, extraction, compression and write) each log one line with sizes and seconds through
``context.log``, a long phase logs heartbeats (at most one per interval), and a served step
stays quiet.
"""

import re
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.core import progress


@tracked_asset
def grid() -> np.ndarray:
    return np.arange(64.0).reshape(8, 8)


@tracked_asset
def blurred(grid: np.ndarray) -> np.ndarray:
    return (grid[:-1, :] + grid[1:, :]) / 2


@tracked_asset
def slow(grid: np.ndarray) -> np.ndarray:
    time.sleep(0.5)  # long enough for heartbeats at a 0.1 s interval
    return grid * 2


def _dslog_lines(instance: dg.DagsterInstance, run_id: str, step: str) -> list[str]:
    return [
        r.user_message
        for r in instance.all_logs(run_id)
        if r.step_key == step and r.dagster_event is None and r.user_message.startswith("dslog:")
    ]


def test_captured_step_logs_each_phase_once_with_sizes(tmp_path: Path) -> None:
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [grid, blurred],
            instance=instance,
            resources={"io_manager": DSLogIOManager(base_dir=str(tmp_path))},
        )
        assert res.success
        lines = _dslog_lines(instance, res.run_id, "blurred")
        source = _dslog_lines(instance, res.run_id, "grid")
    run = [x for x in lines if x.startswith("dslog: annotated run of `blurred`")]
    extraction = [x for x in lines if x.startswith("dslog: extraction of `blurred`")]
    write = [x for x in lines if x.startswith("dslog: compression and write of `blurred`")]
    assert len(run) == len(extraction) == len(write) == 1, lines
    assert "1 input, 64 cells (512 B)" in run[0]
    assert re.search(r"cells \(512 B\)(, .* of annotation lists)? in [\d.]+ m?s$", run[0]), run[0]
    # blurred: each of 56 output cells reads two input cells
    assert "1 table(s), 112 pairs -> " in extraction[0]
    assert re.search(r"112 pairs -> \d+ rows, \d+ B, compression .*, encoding .* in ", write[0])
    # the source step captures nothing: no phase lines, and nothing long to report
    assert source == [], source


def test_served_step_logs_no_phase_lines(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"), reuse=True)
    io = DSLogIOManager.from_resource(dslog, base_dir=str(tmp_path / "data"))
    with dg.instance_for_test() as instance:
        served = None
        for _ in range(6):  # reuse confirms a view from observed runs, then serves
            res = dg.materialize(
                [grid, blurred], instance=instance, resources={"io_manager": io, "dslog": dslog}
            )
            assert res.success
            md = res.asset_materializations_for_node("blurred")[0].metadata
            if md["dslog/obtained"].value != "captured":
                served = res.run_id
                break
        assert served is not None, "reuse never served the step"
        lines = _dslog_lines(instance, served, "blurred")
    assert lines == [], lines


def test_long_phase_logs_heartbeats_at_most_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSLOG_PROGRESS_INTERVAL", "0.1")
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [grid, slow],
            instance=instance,
            resources={"io_manager": DSLogIOManager(base_dir=str(tmp_path))},
        )
        assert res.success
        lines = _dslog_lines(instance, res.run_id, "slow")
    beats = [x for x in lines if x.startswith("dslog: still annotated run of `slow`")]
    # 0.5 s at one line per 0.1 s: a few lines, never more than the interval allows
    assert 2 <= len(beats) <= 6, lines
    assert all(re.search(r"\(0\.\d+ s so far\)$", b) for b in beats), beats


def test_outside_dagster_lines_go_to_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    from dslog_dagster.core.capture import capture

    with caplog.at_level("INFO", logger="dslog_dagster"):
        capture(np.cumsum, np.arange(10.0))
    msgs = [r.getMessage() for r in caplog.records if r.name == "dslog_dagster"]
    run = "dslog: annotated run of `numpy.cumsum`: 1 input, 10 cells"
    assert any(x.startswith(run) for x in msgs), msgs
    extraction = "dslog: extraction of `numpy.cumsum`'s lineage: 1 table(s)"
    assert any(x.startswith(extraction) for x in msgs), msgs


def test_wait_is_silent_when_short_and_says_how_long_when_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSLOG_PROGRESS_INTERVAL", "0.1")
    monkeypatch.setattr(progress, "QUIET_MIN_S", 0.3)
    lines: list[str] = []

    class Sink:
        def info(self, msg: str) -> None:
            lines.append(msg)

    with progress.report_to(Sink()), progress.waiting("the catalog lock"):
        pass
    assert lines == []
    with progress.report_to(Sink()), progress.waiting("the catalog lock"):
        time.sleep(0.45)
    assert lines[-1].startswith("dslog: waited 0.4")
    assert lines[-1].endswith("for the catalog lock")
    assert any(x.startswith("dslog: waiting for the catalog lock (") for x in lines[:-1])
