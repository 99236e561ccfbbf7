"""``bench/on_demand.py`` runs end to end at toy size and prints its tables."""

from benchrun import run_bench


def test_on_demand_bench_small_run() -> None:
    out = run_bench("on_demand.py", "--size", "32", "--repeat", "1")
    assert "| policy | whole run (s) | ratio | tracked steps (s) | ratio |" in out
    for policy in ("off", "on_demand", "capture"):
        assert f"| {policy} |" in out
    assert "| on demand, first (re-runs 2 steps under capture) |" in out
    assert "goal: on-demand normal run ≤ 1.02× untracked:" in out
