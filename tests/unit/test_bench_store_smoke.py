"""``bench/store.py --quick`` runs end to end and prints its table (a few seconds)."""

from benchrun import run_bench


def test_store_bench_quick_run() -> None:
    out = run_bench("store.py", "--quick", "--side", "16")
    assert "| durable | what | checked (ms) | digests stubbed (ms) | ratio |" in out
    for durable in ("False", "True"):
        assert f"| {durable} | register (best block) |" in out
        assert f"| {durable} | read (best block) |" in out
