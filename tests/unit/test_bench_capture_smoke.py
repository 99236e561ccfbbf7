"""``bench/capture.py --smoke`` (``--quick`` with one run per figure) runs end to end and
prints its goal tables."""

from benchrun import run_bench


def test_capture_bench_quick_run() -> None:
    out = run_bench("capture.py", "--smoke")
    assert "| cells | workload |" in out
    for name in ("negative", "add", "sum_axis0"):
        assert f"| {name} |" in out
    assert "| Goal | measured | result |" in out
    assert "bytes per annotation" in out
