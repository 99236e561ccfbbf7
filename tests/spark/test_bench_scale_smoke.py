"""bench/scale.py runs at toy size (keeps the script from rotting; no timing asserted): two
tiny chain-and-fan stores measured natively and on the Spark engine (whose answers must agree,
or the script exits), a small capture, and the tables with their slopes and goals."""

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_scale_bench_runs_quick(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "bench" / "scale.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for row in ("| open |", "10-hop query, native", "10-hop query, Spark engine", "per 10×"):
        assert row in out
    assert "tracked / untracked" in out
    assert out.count("PASS") + out.count("FAIL") == 4


def test_the_synthetic_store_has_its_chains_and_fans(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("scale_bench2", ROOT / "bench" / "scale.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from dslog_dagster.core.api import DSLog

    mod.build(tmp_path / "s", 40, side=6)
    log = DSLog(tmp_path / "s")
    assert len(log.store.operation_ids()) == 40
    path = mod.query_path(40)
    assert len(path) == 11  # ten hops
    # f0[j] <- a10[:, j] <- ... <- a1[:, j] (elementwise chain under a column sum)
    cells = log.prov_query(path, [(4,)]).to_indices().tolist()
    assert sorted(map(tuple, cells)) == [(i, 4) for i in range(6)]
    # the fan: every f<k> of the newest run reads the same a10
    fans = {a.name for a in log.store.arrays() if "/f" in a.name}
    assert fans == {f"p0/f{k}" for k in range(10)}
