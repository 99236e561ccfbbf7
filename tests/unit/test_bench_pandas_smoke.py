"""``bench/pandas_capture.py --quick`` runs end to end and prints its table (no timing is
asserted; the bench itself checks the captured rows against the raw pairs)."""

from benchrun import run_bench


def test_pandas_bench_quick_run() -> None:
    out = run_bench("pandas_capture.py", "--quick")
    assert "| keys | measure | ours | baseline | ratio | goal |" in out
    for keys in ("sorted", "shuffled"):
        assert f"| {keys} | tracked step (capture + Parquet + store)" in out
        assert f"| {keys} | stored lineage vs raw row pairs" in out
    assert "never larger PASS" in out
    assert "| sorted | peak RSS of one step, MiB" in out
