"""``bench/capture.py --quick`` runs end to end and prints its goal table (a few seconds)."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "capture.py"


def test_capture_bench_quick_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| cells | workload |" in proc.stdout
    for name in ("negative", "add", "sum_axis0"):
        assert f"| {name} |" in proc.stdout
    assert "| Goal | measured | result |" in proc.stdout
    assert "bytes per annotation" in proc.stdout
