"""``bench/capture.py --quick`` runs end to end and prints its goal table (a few seconds)."""

from benchrun import run_bench


def test_capture_bench_quick_run() -> None:
    out = run_bench("capture.py", "--quick")
    assert "| cells | workload |" in out
    for name in ("negative", "add", "sum_axis0"):
        assert f"| {name} |" in out
    assert "| Goal | measured | result |" in out
    assert "bytes per annotation" in out
