"""``bench/compression.py --quick`` runs end to end and prints its table (about 10 s)."""

from benchrun import run_bench


def test_compression_bench_quick_run() -> None:
    out = run_bench("compression.py", "--quick")
    assert "| Workload | pairs |" in out
    for name in ("Negative", "Mat·Mat", "SortBin4"):
        assert f"| {name} |" in out
    assert "PASS" in out or "FAIL" in out
