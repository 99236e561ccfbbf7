"""``bench/store_scale.py --quick`` builds a small store, times it in a fresh process and
prints its table (nothing about time is asserted)."""

from benchrun import run_bench


def test_store_scale_bench_quick_run() -> None:
    out = run_bench("store_scale.py", "--quick")
    assert "| measure | dslog (s) | DuckDB table (s) | ratio |" in out
    for row in ("| open |", "| first 3-hop query |", "| operations(limit=100) |", "| peak RSS"):
        assert row in out
