"""The Dagster-facing Spark pieces: a SparkSessionResource and SparkFrameIOManager in a real
``materialize`` (run twice), frames stored with row ids, a captured step's ids kept."""

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import functions as F

from dslog_dagster.io_managers.spark_frames import SparkFrameIOManager, read_frame
from dslog_dagster.spark import ROW_ID, FrameCapture, capture_frames
from dslog_dagster.spark.resource import SparkSessionResource


@dg.asset
def numbers(spark: SparkSessionResource) -> Any:
    return spark.get_session().range(0, 30, numPartitions=3).withColumn("sq", F.col("id") ** 2)


@dg.asset
def evens(numbers: Any) -> FrameCapture:
    assert ROW_ID not in numbers.columns  # user code sees an ordinary DataFrame
    return capture_frames(lambda n: n.filter("id % 2 = 0").orderBy(F.col("id").desc()), [numbers])


# Dagster 1.13.27 itself calls the deprecated `InitResourceContext.dagster_run` when it resolves
# a nested ConfigurableResource (the IO manager's `spark` dependency); not our call.
@pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
def test_materialize_stores_frames_with_row_ids(spark: Any, tmp_path: Path) -> None:
    res = SparkSessionResource(master="local[2]")
    io = SparkFrameIOManager(base_dir=str(tmp_path), spark=res)
    for _ in range(2):
        result = dg.materialize([numbers, evens], resources={"spark": res, "io_manager": io})
        assert result.success
    mats = result.asset_materializations_for_node("evens")
    assert mats[0].metadata["dagster/row_count"].value == 15
    stored = read_frame(spark, tmp_path / "evens.parquet", row_id=True)
    rows = sorted(stored.collect(), key=lambda r: r[ROW_ID])
    assert [r[ROW_ID] for r in rows] == list(range(15))
    assert [r["id"] for r in rows] == list(range(28, -1, -2))  # ids follow the captured order
