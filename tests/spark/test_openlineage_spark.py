"""OpenLineage events of a Spark asset: a join + group-by with a ``sum`` and a ``max``,
materialized through ``DSLogIOManager`` with the HTTP transport to a loopback receiver. The
events validate against the vendored schemas and the column-lineage facet equals one derived
by hand (the pandas and NumPy assets are in ``tests/export/test_openlineage.py``)."""

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from openlineage_check import events_by_job, facet, receiver, validate
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.spark.resource import SparkSessionResource

# Dagster itself calls the deprecated `InitResourceContext.dagster_run` when it builds the
# resources of some runs; not our call (same filter as test_tracked_frames.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)


@tracked_asset
def sales(spark: SparkSessionResource) -> DataFrame:
    rows = [(i, "ab"[i % 2], float(i)) for i in range(6)]
    return spark.get_session().createDataFrame(rows, "id long, shop string, amount double")


@tracked_asset
def shops(spark: SparkSessionResource) -> DataFrame:
    rows = [("a", "Rome"), ("b", "Oslo")]
    return spark.get_session().createDataFrame(rows, "shop string, city string")


@tracked_asset
def city_totals(sales: DataFrame, shops: DataFrame) -> DataFrame:
    joined = sales.join(shops, "shop")
    return joined.groupBy("city").agg(F.sum("amount").alias("total"), F.max("amount").alias("best"))


def test_spark_asset_events_carry_its_column_lineage(spark: Any, tmp_path: Path) -> None:
    with receiver() as server, dg.instance_for_test() as instance:
        host, port = server.server_address[:2]
        dslog = DSLogResource(
            store_dir=str(tmp_path / "store"),
            openlineage={"transport": "http", "url": f"http://{host}:{port}"},
        )
        res = dg.materialize(
            [sales, shops, city_totals],
            resources={
                "io_manager": DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data")),
                "dslog": dslog,
                "spark": SparkSessionResource(master="local[2]"),
            },
            instance=instance,
        )
        assert res.success
        md = res.asset_materializations_for_node("city_totals")[0].metadata
        events = events_by_job(server)
    assert md[m.OPENLINEAGE].value == "2 events sent"
    assert sorted(events) == ["city_totals", "sales", "shops"]
    for evs in events.values():
        for e in evs:
            validate(e)
    start, complete = events["city_totals"]
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert sorted(d["name"] for d in complete["inputs"]) == ["sales", "shops"]
    assert [f["name"] for f in complete["outputs"][0]["facets"]["schema"]["fields"]] == [
        "city",
        "total",
        "best",
    ]
    # By hand: the city of a group is the city cell of its one shop (IDENTITY: a group key
    # passed through); total sums the group's amounts (AGGREGATION); best is the group's max,
    # contributed by the one picked amount cell but computed by an aggregate (AGGREGATION).
    # The default contributing mode records no INDIRECT field.
    assert facet(complete) == {
        "city": [("shops", "city", "DIRECT", "IDENTITY")],
        "total": [("sales", "amount", "DIRECT", "AGGREGATION")],
        "best": [("sales", "amount", "DIRECT", "AGGREGATION")],
    }
