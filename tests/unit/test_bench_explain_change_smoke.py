"""``bench/explain_change.py`` runs end to end at toy size and prints its tables."""

from benchrun import run_bench


def test_explain_change_bench_small_run() -> None:
    out = run_bench("explain_change.py", "--size", "40", "--repeat", "1")
    assert "| array | traced cells | traced % | changed cells | changed % |" in out
    assert "| explain_change (diff + trace + compare upstream) |" in out
    # the changed raw cells are where the change starts
    raw_row = next(line for line in out.splitlines() if line.startswith("| raw |"))
    assert raw_row.rstrip().endswith("| True |")
