"""A Spark step's run log reports Spark's progress while its jobs run long.

The step stores a frame whose rows take a while to compute (a Python UDF that sleeps); with a
0.1 s reporting interval the storing phase logs heartbeats naming the Spark job, stage and
tasks done (``SparkContext.statusTracker()``), and one line with the frame's size at the end.
"""

import re
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.spark.progress import status_line
from dslog_dagster.spark.resource import SparkSessionResource

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)


@tracked_asset
def slow_frame(spark: SparkSessionResource) -> DataFrame:
    # untyped on purpose: PySpark infers a UDF's kind from type hints, and refuses `int`
    slow = F.udf(lambda x: (time.sleep(0.2), x)[1], "long")
    return spark.get_session().range(0, 6, numPartitions=2).withColumn("v", slow("id"))


@tracked_asset
def kept(slow_frame: DataFrame) -> DataFrame:
    return slow_frame.filter(F.col("v") > 1)


def test_slow_spark_step_logs_job_progress(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSLOG_PROGRESS_INTERVAL", "0.1")
    resources = {
        "io_manager": DSLogIOManager(base_dir=str(tmp_path)),
        "spark": SparkSessionResource(master="local[2]"),
    }
    with dg.instance_for_test() as instance:
        res = dg.materialize([slow_frame, kept], instance=instance, resources=resources)
        assert res.success
        logs = [
            (r.step_key, r.user_message)
            for r in instance.all_logs(res.run_id)
            if r.dagster_event is None and r.user_message.startswith("dslog:")
        ]
    source = [msg for step, msg in logs if step == "slow_frame"]
    beats = [x for x in source if x.startswith("dslog: still storing frame `slow_frame` (")]
    assert beats, source
    spark_beats = [x for x in beats if re.search(r"Spark jobs? [\d, ]+, stage \d+: \d+/2 tasks", x)]
    assert spark_beats, beats
    assert any(
        x.startswith("dslog: storing frame `slow_frame`: 6 rows, 2 columns in ") for x in source
    ), source
    captured = [msg for step, msg in logs if step == "kept"]
    assert any(
        x.startswith("dslog: Spark capture of `kept`: `slow_frame` 6 rows") for x in captured
    )
    assert any(x.startswith("dslog: compression and write of `kept`'s lineage") for x in captured)


def test_status_line_is_none_when_idle(spark: Any) -> None:
    assert status_line(spark.sparkContext) is None
