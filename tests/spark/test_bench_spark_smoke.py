"""bench/spark_capture.py runs at toy size (keeps the script from rotting; no timing asserted)."""

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_spark_capture_bench_runs_quick(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(
        "spark_capture", ROOT / "bench" / "spark_capture.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--master", "local[2]"]) == 0
    out = capsys.readouterr().out
    assert "tracked / untracked time" in out
    assert out.count("PASS") + out.count("FAIL") == 6
