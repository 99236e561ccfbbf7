"""``bench/reuse_coverage.py --quick`` runs end to end and prints its tables (a few seconds)."""

from benchrun import run_bench


def test_reuse_bench_quick_run() -> None:
    out = run_bench("reuse_coverage.py", "--quick", timeout=600)
    assert "| Op. | Tot. | ProvRC | % | dim_sig | % | gen_sig | % | Error |" in out
    for row in ("| element |", "| complex |", "| total |"):
        assert row in out
    assert "| sort |" in out
    assert "| views | lookup µs | ratio to 10 views |" in out
    assert "| errors (served view ≠ fresh capture) = 0 | 0 | PASS |" in out
