"""``bench/dagster_overhead.py`` at toy size runs end to end and prints its goal table."""

from benchrun import run_bench


def test_dagster_overhead_bench_toy_run() -> None:
    out = run_bench("dagster_overhead.py", "--size", "32", "--repeat", "1")
    for row in ("| untracked (policy off) |", "| tracked, first run |", "| tracked, reuse run |"):
        assert row in out
    assert "| Goal | measured | result |" in out
    # the registry was taught until a run was served from views, and the table says which
    assert "| steps served from views (" in out
    assert any(kind in out for kind in ("base", "dim", "gen"))
    # both ablations ran (the bench fails when either did not take effect)
    assert "| ablation: metadata only (" in out
    assert "| ablation: lookup only (" in out
    assert "| same steps, group commit |" in out
    assert "| same, group commit |" in out
