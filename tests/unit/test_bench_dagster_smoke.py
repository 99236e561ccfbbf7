"""``bench/dagster_overhead.py`` at toy size runs end to end and prints its goal table."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "dagster_overhead.py"


def test_dagster_overhead_bench_toy_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--size", "32", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for row in ("| untracked (policy off) |", "| tracked, first run |", "| tracked, reuse run |"):
        assert row in proc.stdout
    assert "| Goal | measured | result |" in proc.stdout
    # the registry was taught until a run was served from views, and the table says which
    assert "| steps served from views (" in proc.stdout
    assert "dim" in proc.stdout
