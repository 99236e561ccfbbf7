"""Run a ``bench/`` script in a subprocess for the smoke tests (they keep benches from rotting;
no timing is ever asserted)."""

import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def run_bench(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``bench/<script> *args``; fail with its stderr unless it exits 0; return stdout."""
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout
