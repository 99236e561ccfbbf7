"""Missing-parameter discovery for a Spark step (issue 27, item 4): a filter threshold in a
Dagster ``Config`` is found by re-running the step on its inputs semijoined with the selected
output rows, and comparing those rows with the stored version.

One materialization per module: an on-demand join + filter + groupBy run with
``threshold=2.0, agg="sum"``; every test searches that stored version."""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.cli import main
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.query import CellSet
from dslog_dagster.discovery import discover_parameters
from dslog_dagster.errors import ConfigurationError, DiscoveryError
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark.discovery import same_rows
from dslog_dagster.spark.resource import SparkSessionResource
from dslog_dagster.spark.rowid import ROW_ID

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
N_FACTS = 252
# readings rows of keys 3 and 7 (a row's key is i % 12, null when i % 13 == 0)
KEPT = sum(1 for i in range(N_FACTS) if i % 12 in (3, 7) and i % 13 != 0)


class BusyConfig(dg.Config):
    threshold: float = 0.0
    agg: str = "sum"


@tracked_asset
def readings(spark: SparkSessionResource) -> DataFrame:
    # 12 keys and nulls; each key has (almost) every value -3.0 .. 7.0 in steps of 0.5, so
    # each threshold drops other rows of every group
    rows = [
        (i, None if i % 13 == 0 else i % 12, float((i // 12) % 21) / 2.0 - 3.0)
        for i in range(N_FACTS)
    ]
    return spark.get_session().createDataFrame(rows, "id long, k long, v double").repartition(3)


@tracked_asset
def sensors(spark: SparkSessionResource) -> DataFrame:
    rows = [(k, f"s{k}") for k in range(12)]
    return spark.get_session().createDataFrame(rows, "k long, name string")


@tracked_asset(policy="on_demand")
def busy(config: BusyConfig, readings: DataFrame, sensors: DataFrame) -> DataFrame:
    if config.agg not in ("sum", "max"):
        msg = f"unknown aggregate {config.agg!r}"
        raise ValueError(msg)
    agg = F.sum if config.agg == "sum" else F.max
    return (
        readings.join(sensors, "k")
        .filter(F.col("v") > config.threshold)
        .groupBy("k", "name")
        .agg(agg("v").alias("total"), F.count("id").alias("n"))
    )


@pytest.fixture(scope="module")
def base(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    root = tmp_path_factory.mktemp("spark_discovery")
    io = DSLogIOManager(base_dir=str(root), store_dir=str(root / ".dslog"))
    config = {
        "ops": {"busy": {"config": {"threshold": 2.0, "agg": "sum"}}},
        "loggers": {"console": {"config": {"log_level": "ERROR"}}},
    }
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            [readings, sensors, busy],
            instance=inst,
            resources={"io_manager": io, "spark": SparkSessionResource(master="local[2]")},
            run_config=config,
        )
    assert res.success
    return root, DSLog(root / ".dslog").store, io.value_loader(frames=True)


def _rows(store: Any, spark: Any, root: Path, keys: set[int]) -> CellSet:
    """The cells of the stored `busy` rows of the given keys."""
    got = read_frame(spark, root / "busy.parquet", row_id=True).collect()
    rec = store.get_array("busy")
    picked = np.array([r["k"] in keys for r in sorted(got, key=lambda r: r[ROW_ID])])
    return CellSet.from_mask(np.repeat(picked[:, None], rec.shape[1], axis=1))


def test_threshold_found_on_the_part(
    spark: Any, base: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """One test over the module's one materialization (the suite's budget): the search on
    the part against every candidate on the whole input, failing candidates, no match, a
    loader that gives no frames, and ``dslog discover``."""
    root, store, load = base
    cells = _rows(store, spark, root, {3, 7})
    space = {"threshold": [1.0, 1.5, 2.0, 2.5]}
    found = discover_parameters(busy, store, load, space, cells=cells)
    assert found.matches == ({"threshold": 2.0},)
    assert found.how == "part"
    # one run per candidate on the part, the one survivor confirmed on the whole input
    assert (found.part_runs, found.whole_runs) == (4, 1)
    # the part is the selected keys' rows, the ones the threshold dropped included
    assert found.kept == {"readings": KEPT, "sensors": 2}
    assert found.selected == 2  # output rows
    # the reference: every candidate on the whole input finds the same
    ref = discover_parameters(busy, store, load, space, cells=cells, exhaustive=True)
    assert ref.matches == found.matches
    assert (ref.part_runs, ref.whole_runs, ref.how) == (0, 4, "exhaustive")

    # a candidate the step raises on is reported, not a crash, and not a match
    space = {"threshold": [2.0], "agg": ["max", "sum", "median"]}
    found = discover_parameters(busy, store, load, space, cells=cells)
    assert found.matches == ({"threshold": 2.0, "agg": "sum"},)
    text = found.summary()
    assert "failed on the selected part (ValueError: unknown aggregate 'median')" in text
    assert "1 candidate(s) raised on the whole input" in text
    with pytest.raises(DiscoveryError, match=r"No candidate of the 2 .* 2 selected output row"):
        discover_parameters(busy, store, load, {"threshold": [1.5, 3.5]}, cells=cells)
    with pytest.raises(ConfigurationError, match="not a Spark DataFrame"):
        discover_parameters(busy, store, lambda rec: 1, {"threshold": [2.0]}, cells=cells)

    args = [
        "discover", str(store.root), "busy", "--import", __name__, "--values", str(root),
        "--space", "threshold=2.0:2.51:0.5", "--cells", "0:2", "--format", "json",
    ]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"threshold": 2.0}]
    assert "1 of 2 candidate(s)" in err


def test_same_rows() -> None:
    nan = float("nan")
    assert same_rows([(1, nan, None), (2, 0.1 + 0.2, "a")], [(2, 0.3, "a"), (1, nan, None)])
    assert not same_rows([(1, 1.0), (1, 1.0)], [(1, 1.0), (2, 1.0)])
    assert not same_rows([(1, 1.0)], [(1, 1.0), (1, 1.0)])
    assert not same_rows([(1, nan)], [(1, 0.0)])
