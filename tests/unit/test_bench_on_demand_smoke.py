"""``bench/on_demand.py`` runs end to end at toy size and prints its tables."""

import pytest
from benchrun import run_bench


def test_on_demand_bench_small_run() -> None:
    out = run_bench("on_demand.py", "--size", "32", "--repeat", "1", "--discovery-size", "64")
    assert "| policy | whole run (s) | ratio | tracked steps (s) | ratio |" in out
    for policy in ("off", "on_demand", "capture"):
        assert f"| {policy} |" in out
    assert "| on demand, first (re-runs 2 steps under capture) |" in out
    assert "goal: on-demand normal run ≤ 1.02× untracked:" in out
    assert "| local_hot | 3 × 10 | 64 | part | 60 / 1 |" in out
    assert "| global_hot | 30 | 64 | whole input |" in out
    assert "goal: discovery of a 3 × 10 grid on the hotspot step ≥ 10× faster" in out


def test_on_demand_bench_pandas_small_run() -> None:
    out = run_bench("on_demand.py", "--pandas", "--rows", "20000", "--repeat", "1")
    assert "| trace 200 selected output rows → fact (selective re-run, query included) |" in out
    assert "how obtained: selective re-run (key `k`: re-ran on " in out


def test_paired_ratios_pair_each_run_with_the_one_beside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Spark rows' on-demand figure: each on_demand run over the off run of its pair."""
    import importlib.util

    from benchrun import BENCH_DIR

    monkeypatch.syspath_prepend(str(BENCH_DIR))  # its sibling modules
    spec = importlib.util.spec_from_file_location("bench_on_demand", BENCH_DIR / "on_demand.py")
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.paired_ratios([2.0, 4.0, 5.0], [2.2, 4.0, 4.5]) == [1.1, 1.0, 0.9]
    assert bench.paired_ratios([2.0], [2.2]) == []  # one run: no pairs to take a median of
    assert bench.paired_ratios([2.0, 3.0], [2.0]) == []
