"""``bench/reuse_coverage.py --quick`` runs end to end and prints its tables (a few seconds)."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reuse_coverage.py"


def test_reuse_bench_quick_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "| Op. | Tot. | ProvRC | % | dim_sig | % | gen_sig | % | Error |" in out
    for row in ("| element |", "| complex |", "| total |"):
        assert row in out
    assert "| sort |" in out
    assert "| views | lookup µs | ratio to 10 views |" in out
    assert "| errors (served view ≠ fresh capture) = 0 | 0 | PASS |" in out
