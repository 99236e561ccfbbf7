"""The Spark query engine selected by configuration: ``DSLogResource(query_engine="spark")``
for the query assets, ``dslog query --engine spark`` on the command line, and the union over
every path (``lineage_between``) equal to the native path on stores with branching graphs."""

from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
from strategies import KINDS, relation_between

from dslog_dagster.assets import LineageQueryConfig, lineage_query_asset, run_lineage_query
from dslog_dagster.cli import main
from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.query import CellSet
from dslog_dagster.errors import QueryError
from dslog_dagster.resources import DSLogResource
from dslog_dagster.spark.query import SparkQueryEngine

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@pytest.fixture
def spark_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the hops the Spark engine answered (so a test sees Spark really ran)."""
    seen: list[str] = []
    run = SparkQueryEngine._hop

    def counted(self: SparkQueryEngine, hop: Any, cells: CellSet) -> CellSet:
        seen.append(f"{hop.src.name}->{hop.dst.name}")
        return run(self, hop, cells)

    monkeypatch.setattr(SparkQueryEngine, "_hop", counted)
    return seen


def _diamond(root: Path, seed: int) -> tuple[DSLog, dict[str, tuple[int, ...]]]:
    """``a -> b -> d`` and ``a -> c -> d`` plus ``d -> e``: two paths whose answers must be
    unioned, random relations of every kind on each edge."""
    rng = np.random.default_rng(seed)
    shapes = {n: tuple(int(x) for x in rng.integers(2, 7, size=2)) for n in "abcde"}
    arrays = {n: Array(n, s) for n, s in shapes.items()}
    log = DSLog(root)

    def rel(out: str, inp: str) -> Any:
        kinds = list(rng.choice(KINDS, size=int(rng.integers(1, 4))))
        return relation_between(rng, shapes[out], shapes[inp], kinds)

    for out, ins in (("b", "a"), ("c", "a"), ("d", "bc"), ("e", "d")):
        log.register_operation(
            f"make_{out}",
            [arrays[i] for i in ins],
            [arrays[out]],
            [Lineage(arrays[out], arrays[i], rel(out, i)) for i in ins],
        )
    return log, shapes


@pytest.mark.parametrize("seed", [0, 1])
def test_lineage_between_on_spark_equals_native(
    spark: Any, tmp_path: Path, seed: int, spark_hops: list[str]
) -> None:
    log, shapes = _diamond(tmp_path / "s", seed)
    engine = SparkQueryEngine(spark, log)
    rng = np.random.default_rng(100 + seed)
    found = 0
    for src, dst in (("a", "e"), ("e", "a"), ("a", "d"), ("d", "a")):
        lo = [int(rng.integers(0, n)) for n in shapes[src]]
        cells = CellSet.from_boxes(shapes[src], [lo], [[n - 1 for n in shapes[src]]])
        want = log.lineage_between(src, dst, cells)
        assert engine.lineage_between(src, dst, cells) == want, (src, dst)
        found += want.count()
    engine.close()
    assert found  # not only empty answers
    assert {"e->d", "d->b", "d->c", "b->a", "c->a"} <= set(spark_hops)


def test_query_asset_runs_on_the_configured_engine(
    spark: Any, tmp_path: Path, spark_hops: list[str]
) -> None:
    store = tmp_path / "s"
    log, _ = _diamond(store, 2)
    cfg = LineageQueryConfig(source="e", target="a")  # every cell of `e`
    want = log.lineage_between("e", "a", np.s_[:, :])
    assert want.count() > 0
    adhoc = lineage_query_asset()
    got: dict[str, Any] = {}
    with dg.instance_for_test() as inst:
        for engine in ("native", "spark"):
            res = dg.materialize(
                [adhoc],
                instance=inst,
                resources={"dslog": DSLogResource(store_dir=str(store), query_engine=engine)},
                run_config=dg.RunConfig(ops={"lineage_query": cfg}, **QUIET),
            )
            (mat,) = res.asset_materializations_for_node("lineage_query")
            table = pq.read_table(mat.metadata["dslog/result_path"].value)
            got[engine] = (mat.metadata["dslog/result_cells"].value, table.to_pylist())
            assert bool(spark_hops) == (engine == "spark")
    assert got["spark"] == got["native"]
    assert got["native"][0] == want.count()
    # the Python entry point takes the engine too, and rejects an unknown one
    assert run_lineage_query(DSLog(store), cfg, engine="spark", spark=spark).cells == want
    with pytest.raises(QueryError, match="Unknown query engine"):
        run_lineage_query(DSLog(store), cfg, engine="gpu")  # type: ignore[arg-type]


def test_cli_engine_spark_prints_the_native_answer(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], spark_hops: list[str]
) -> None:
    store = tmp_path / "s"
    _diamond(store, 2)
    outs = {}
    for extra in ([], ["--engine", "spark"]):
        for path in (["e", "d", "b", "a"], ["e", "a", "--between"]):
            assert main(["query", str(store), *path, *extra]) == 0  # all cells of `e`
            outs[(bool(extra), path[-1])] = capsys.readouterr().out
            assert bool(spark_hops) == bool(extra)
    assert outs[(True, "a")] == outs[(False, "a")]
    assert outs[(True, "--between")] == outs[(False, "--between")]
    assert outs[(False, "--between")].count("\n") > 1  # a header and at least one box
