"""policy="on_demand" for Spark steps (issue 27, items 1 and 2): the step runs untracked; a
query re-runs it under the Spark capture on the recorded input versions, matches the
recomputed rows to the stored ones as a multiset, and answers as a captured run would; a
query selecting a few rows re-runs it on the inputs semijoined with the selection.

One materialization per module (``base``); tests that register lineage work on a copy of
its store, so every test sees the step deferred."""

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.cli import main
from dslog_dagster.core import on_demand
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import ConfigurationError, DeferredLineageError, ReconstructionError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark import ROW_ID, as_array
from dslog_dagster.spark.pushdown import TAG, pushdown_columns
from dslog_dagster.spark.resource import SparkSessionResource

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
CALLS = {"totals": 0}


@tracked_asset
def facts(spark: SparkSessionResource) -> DataFrame:
    # duplicates (rows 0 and 1 are equal), a null key and negative values
    rows = [(i % 37, [3, 3, 1, 2, 5, None][i % 6], float((i * 7) % 11) - 3.0) for i in range(60)]
    rows[1] = rows[0]
    return spark.get_session().createDataFrame(rows, "id long, k long, v double").repartition(3)


@tracked_asset
def dims(spark: SparkSessionResource) -> DataFrame:
    rows = [(1, "one"), (2, "two"), (3, "three"), (4, "four"), (5, "five")]
    return spark.get_session().createDataFrame(rows, "k long, name string")


def _totals(facts: DataFrame, dims: DataFrame) -> DataFrame:
    return (
        facts.join(dims, "k")
        .filter(F.col("v") > -2.5)
        .groupBy("k", "name")
        .agg(F.sum("v").alias("total"), F.count("id").alias("n"))
    )


@tracked_asset(policy="on_demand")
def totals(facts: DataFrame, dims: DataFrame) -> DataFrame:
    CALLS["totals"] += 1
    return _totals(facts, dims)


@tracked_asset
def features(totals: DataFrame) -> np.ndarray:
    return as_array(totals, ["total", "n"])  # type: ignore[return-value]


@tracked_asset
def colsum(features: np.ndarray) -> np.ndarray:
    return features.sum(axis=0)


@tracked_asset(name="totals")
def totals_captured(facts: DataFrame, dims: DataFrame) -> DataFrame:
    return _totals(facts, dims)


LAZY = [facts, dims, totals, features, colsum]
EAGER = [facts, dims, totals_captured, features, colsum]


def _materialize(root: Path, assets: list[Any]) -> dg.ExecuteInProcessResult:
    io = DSLogIOManager(base_dir=str(root), store_dir=str(root / ".dslog"))
    spark = SparkSessionResource(master="local[2]")
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            assets, instance=inst, resources={"io_manager": io, "spark": spark}, run_config=QUIET
        )
    assert res.success
    return res


@pytest.fixture(scope="module")
def base(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    lazy, eager = tmp_path_factory.mktemp("lazy"), tmp_path_factory.mktemp("eager")
    CALLS["totals"] = 0
    res = _materialize(lazy, LAZY)
    assert CALLS["totals"] == 1  # the run itself, untracked
    mats = res.asset_materializations_for_node("totals")
    assert mats[0].metadata[m.OBTAINED].value == "on_demand"
    _materialize(eager, EAGER)
    return lazy, eager


def _copy(root: Path, tmp: Path) -> tuple[DSLog, DSLogIOManager]:
    """A DSLog over a copy of ``root``'s store, and an IO manager over ``root``'s values."""
    shutil.copytree(root / ".dslog", tmp / "store")
    io = DSLogIOManager(base_dir=str(root), store_dir=str(tmp / "store"))
    return DSLog(tmp / "store"), io


_ROWS: dict[tuple[Path, str], list[dict[str, Any]]] = {}


def _rows(spark: Any, root: Path, name: str) -> list[dict[str, Any]]:
    """A stored frame's rows by row id."""
    if (root, name) not in _ROWS:
        got = read_frame(spark, root / f"{name}.parquet", row_id=True).collect()
        _ROWS[root, name] = [r.asDict() for r in sorted(got, key=lambda r: r[ROW_ID])]
    return _ROWS[root, name]


def _named(
    spark: Any, root: Path, path: list[str], cells: set[tuple[int, ...]]
) -> set[tuple[Any, ...]]:
    """Cells of the path's last frame named by values (row ids differ between runs): the
    input row as a tuple of its values, and the column name."""
    rows = _rows(spark, root, path[-1])
    cols = [c for c in rows[0] if c != ROW_ID]
    return {(tuple(v for c, v in rows[r].items() if c != ROW_ID), cols[c]) for r, c in cells}


def _keys_of(spark: Any, root: Path, name: str, key: list[str]) -> dict[tuple[Any, ...], int]:
    return {tuple(r[c] for c in key): r[ROW_ID] for r in _rows(spark, root, name)}


def _answer(log: DSLog, path: list[str], cells: Any, io: DSLogIOManager, **kw: Any) -> Any:
    got, done = on_demand.trace(log, path, cells, io.value_loader(frames=True), **kw)
    return {tuple(c) for c in got.to_indices().tolist()}, done


def test_pushdown_columns_of_a_join_and_group_by(spark: Any) -> None:
    f = spark.createDataFrame([(1, 1, 1.0)], "id long, k long, v double").alias(TAG + "in0")
    d = spark.createDataFrame([(1, "one")], "k long, name string").alias(TAG + "in1")
    assert pushdown_columns(_totals(f, d), ["in0", "in1"]) == {
        "in0": {"k": "k"},  # the join's `k` is the facts side's; `total`, `n` are computed
        "in1": {"name": "name"},
    }
    # a window's rows depend on their whole partition: nothing passes below it
    w = f.withColumn("m", F.max("v").over(Window.partitionBy("k")))
    assert pushdown_columns(w, ["in0"]) == {"in0": {}}
    # a renamed column is followed, a computed one is not
    p = f.select(F.col("k").alias("key"), (F.col("v") + 1).alias("v"))
    assert pushdown_columns(p, ["in0"]) == {"in0": {"key": "k"}}


def test_on_demand_spark_equals_captured(spark: Any, base: Any, tmp_path: Path) -> None:
    lazy, eager = base
    log, io = _copy(lazy, tmp_path)
    ref = DSLog(eager / ".dslog")
    (op,) = log.store.operations("totals")
    assert op.capture_method == on_demand.DEFERRED
    assert op.tables == ()
    assert op.args["on_demand"]["engine"] == "spark"
    with pytest.raises(DeferredLineageError, match='policy="on_demand"'):
        log.prov_query(["totals", "facts"], [(0, 2)])
    n_out = len(_rows(spark, lazy, "totals"))
    all_cells = np.s_[0:n_out, :]
    before = CALLS["totals"]
    for target in ("facts", "dims"):
        path = ["totals", target]
        got, _done = _answer(log, path, all_cells, io, selective=False)
        want = {tuple(c) for c in ref.prov_query(path, all_cells).to_indices().tolist()}
        assert _named(spark, lazy, path, got) == _named(spark, eager, path, want)
        assert len(got) > 0
        # row by row too: the lineage of each group names the same input cells
        eager_ids = _keys_of(spark, eager, "totals", ["k"])
        for k, r in _keys_of(spark, lazy, "totals", ["k"]).items():
            a = {tuple(c) for c in log.prov_query(path, np.s_[r, :]).to_indices().tolist()}
            b = {
                tuple(c) for c in ref.prov_query(path, np.s_[eager_ids[k], :]).to_indices().tolist()
            }
            assert _named(spark, lazy, path, a) == _named(spark, eager, path, b)
    assert CALLS["totals"] == before + 1  # re-run once (the second path uses the kept lineage)
    (new,) = [o for o in log.store.operations("totals") if o.op_id != op.op_id]
    assert new.capture_method == on_demand.RECONSTRUCTED


def test_a_path_mixing_captured_numpy_and_spark_with_on_demand_steps(
    spark: Any, base: Any, tmp_path: Path
) -> None:
    lazy, eager = base
    log, io = _copy(lazy, tmp_path)
    ref = DSLog(eager / ".dslog")
    for path, cells in (
        (["colsum", "features", "totals", "facts"], [1]),  # NumPy <- as_array <- deferred
        (["colsum", "features", "totals", "dims"], [0]),
    ):
        got, done = _answer(log, path, cells, io)
        assert [r.deferred.op_name for r in done] == [path[-2]]
        want = {tuple(c) for c in ref.prov_query(path, cells).to_indices().tolist()}
        assert len(got) > 0
        assert _named(spark, lazy, path, got) == _named(spark, eager, path, want)


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_selective_equals_full_and_is_not_registered(
    spark: Any, base: Any, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    lazy, _ = base
    tmp = tmp_path_factory.mktemp("sel")
    log, io = _copy(lazy, tmp)
    n_out = len(_rows(spark, lazy, "totals"))
    picked = data.draw(st.sets(st.integers(0, n_out - 1), min_size=1, max_size=3))
    cells = [(r, c) for r in sorted(picked) for c in range(4)]
    for target in ("facts", "dims"):
        got, done = _answer(log, ["totals", target], cells, io)
        assert [(r.obtained, r.operation, r.rows) for r in done] == [
            ("on_demand_selective", None, len(picked))
        ]
        assert len(log.store.operations("totals")) == 1  # nothing registered
        full = DSLog(tmp / "full")
        shutil.copytree(tmp / "store", tmp / "full", dirs_exist_ok=True)
        want, _ = _answer(full, ["totals", target], cells, io, selective=False)
        assert got == want
        shutil.rmtree(tmp / "full")


def test_refusals(spark: Any, base: Any, tmp_path: Path, monkeypatch: Any) -> None:
    lazy, _ = base
    log, io = _copy(lazy, tmp_path)
    (op,) = log.store.operations("totals")
    load = io.value_loader(frames=True)

    def tampered(rec: Any) -> Any:
        value = load(rec)
        if rec.name == "facts":
            value = value.withColumn("v", F.when(F.col(ROW_ID) == 3, 100.0).otherwise(F.col("v")))
        return value

    with pytest.raises(ReconstructionError, match="multiset of rows"):
        on_demand.reconstruct(log.store, op, tampered)
    with pytest.raises(ReconstructionError, match="not stored"):
        on_demand.reconstruct(log.store, op, lambda rec: None if rec.name == "dims" else load(rec))
    key = op.args["on_demand"]["function"]
    monkeypatch.setitem(on_demand._FUNCTIONS, key, lambda facts, dims: facts.limit(1))
    with pytest.raises(ReconstructionError, match=r"code of .* changed"):
        on_demand.reconstruct(log.store, op, load)
    assert len(log.store.operations("totals")) == 1


@tracked_asset(policy="on_demand", name="arr")
def as_array_on_demand(facts: DataFrame) -> np.ndarray:
    return as_array(facts, ["v"])  # type: ignore[return-value]


def test_dslog_trace_and_refused_as_array(
    spark: Any, base: Any, tmp_path: Path, capsys: Any
) -> None:
    lazy, _ = base
    log, _io = _copy(lazy, tmp_path)
    args = ["trace", str(log.store.root), "totals", "dims", "--cells", "0:1,name"]
    assert main([*args, "--values", str(lazy), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "reconstructed totals" in out.err
    got = json.loads(out.out)
    assert len(got) == 1
    assert got[0]["start_1"] == 1
    io = DSLogIOManager(base_dir=str(tmp_path / "v"), store_dir=str(tmp_path / "s"))
    spark_res = SparkSessionResource(master="local[2]")
    with dg.instance_for_test() as inst, pytest.raises(ConfigurationError, match="as_array"):
        dg.materialize(
            [facts, as_array_on_demand], instance=inst, run_config=QUIET,
            resources={"io_manager": io, "spark": spark_res},
        )  # fmt: skip
