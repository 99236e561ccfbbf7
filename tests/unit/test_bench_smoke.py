"""``bench/compression.py --quick`` runs end to end and prints its table (about 10 s)."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compression.py"


def test_compression_bench_quick_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| Workload | pairs |" in proc.stdout
    for name in ("Negative", "Mat·Mat", "SortBin4"):
        assert f"| {name} |" in proc.stdout
    assert "PASS" in proc.stdout or "FAIL" in proc.stdout
