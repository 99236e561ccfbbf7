"""A Spark step's body runs once per materialization (issue 24).

``capture_frame_outputs`` captures every output of one call; a Dagster Spark step not declared
pure is captured in the mode that never rebuilds its plan (aggregations carry their ids as
lists), so even an aggregation over an aggregation — which makes the range mode call the
function again — calls the body exactly once. The lineage equals the one-output captures'.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from frame_reference import same_lineage
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset, tracked_multi_asset
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark import ROW_ID, capture_frames
from dslog_dagster.spark.capture import capture_frame_outputs
from dslog_dagster.spark.resource import SparkSessionResource

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
ROWS = [(i, i % 4, float(i)) for i in range(12)]


def _facts(spark: Any) -> Any:
    return spark.createDataFrame(ROWS, "id long, k long, v double").withColumn(ROW_ID, F.col("id"))


def _nested(f: Any) -> Any:
    """An aggregation over an aggregation (range mode needs a second call for it)."""
    g = f.groupBy("k").agg(F.sum("v").alias("s"))
    return g.groupBy((F.col("k") % 2).alias("p")).agg(F.sum("s").alias("ss"))


def _evens(f: Any) -> Any:
    return f.filter(F.col("k") % 2 == 0).select("id", "v")


@pytest.mark.parametrize("aggregate", ["auto", "lists"])
def test_outputs_of_one_call_equal_one_output_captures(spark: Any, aggregate: str) -> None:
    facts = _facts(spark)
    calls: list[int] = []

    def both(f: Any) -> tuple[Any, Any]:
        calls.append(1)
        return _evens(f), _nested(f)

    caps = capture_frame_outputs(both, [facts], aggregate=aggregate)  # type: ignore[arg-type]
    try:
        assert len(caps) == 2
        for cap, single in zip(caps, (_evens, _nested), strict=True):
            alone = capture_frames(single, [facts], aggregate="lists")
            try:
                same_lineage(cap, alone)
            finally:
                alone.release()
        # lists never rebuilds the plan; ranges does for the nested aggregation
        assert len(calls) == (1 if aggregate == "lists" else 2)
    finally:
        for cap in caps:
            cap.release()


def test_a_non_frame_output_is_refused_by_position(spark: Any) -> None:
    with pytest.raises(UnsupportedFrameOperationError, match="output 1 of"):
        capture_frame_outputs(lambda f: (f.select("id"), 3), [_facts(spark)])


CALLS: list[str] = []


@tracked_asset
def facts(spark: SparkSessionResource) -> DataFrame:
    return _facts(spark.get_session()).drop(ROW_ID)


@tracked_multi_asset(outs={"evens": dg.AssetOut(), "parity": dg.AssetOut()})
def split_facts(facts: DataFrame) -> tuple[DataFrame, DataFrame]:
    CALLS.append("split")
    return _evens(facts), _nested(facts)


@tracked_asset
def nested(facts: DataFrame) -> DataFrame:
    CALLS.append("nested")
    return _nested(facts)


def test_spark_steps_run_once_per_materialization(spark: Any, tmp_path: Path) -> None:
    resources = {
        "io_manager": DSLogIOManager(base_dir=str(tmp_path), store_dir=str(tmp_path / ".dslog")),
        "spark": SparkSessionResource(master="local[2]"),
    }
    with dg.instance_for_test() as inst:
        for n in range(1, 3):
            CALLS.clear()
            res = dg.materialize(
                [facts, split_facts, nested], instance=inst, resources=resources, run_config=QUIET
            )
            assert res.success
            assert sorted(CALLS) == ["nested", "split"], f"materialization {n}: {CALLS}"
    log = DSLog(tmp_path / ".dslog")
    # parity p <- every fact row with k % 2 == p (columns k and v)
    for path in (["parity", "facts"], ["nested", "facts"]):
        got = {tuple(c) for c in log.prov_query(path, [(0, 1)]).to_indices().tolist()}
        stored = read_frame(spark, tmp_path / f"{path[0]}.parquet", row_id=True)
        rows = {r[ROW_ID]: r for r in stored.collect()}
        p = rows[0]["p"]
        assert got == {(i, 2) for i, k, _ in ROWS if k % 2 == p}, path
    evens = {tuple(c) for c in log.prov_query(["evens", "facts"], [(0, 1)]).to_indices().tolist()}
    stored = read_frame(spark, tmp_path / "evens.parquet", row_id=True)
    (row0,) = [r for r in stored.collect() if r[ROW_ID] == 0]
    assert row0["id"] % 4 in (0, 2)
    assert evens == {(row0["id"], 2)}  # evens.v <- facts.v of the same row
