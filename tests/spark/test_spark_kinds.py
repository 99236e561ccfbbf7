"""DPDS operation kinds and column effects of Spark captures, one call per kind, each
expected step written by hand from the call (docs/concepts/operation-kinds.md)."""

from typing import Any

import pytest
from pyspark.sql import functions as F

from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.store.effects import Step
from dslog_dagster.spark import ROW_ID, capture_frames

ROWS = [(0, "a", 1.0, 10), (1, "a", None, 20), (2, "b", 3.0, 30), (3, "c", 4.0, None)]
OTHER = [(0, "a", "Rome"), (1, "b", "Oslo")]
COLS = ["id", "g", "v", "w"]


@pytest.fixture(scope="module")
def people(spark: Any) -> Any:
    df = spark.createDataFrame(ROWS, "id long, g string, v double, w long")
    return df.withColumn(ROW_ID, F.col("id"))


@pytest.fixture(scope="module")
def cities(spark: Any) -> Any:
    df = spark.createDataFrame(OTHER, "cid long, g string, city string")
    return df.withColumn(ROW_ID, F.col("cid"))


def steps(f: Any, *frames: Any) -> tuple[Step, ...]:
    cap = capture_frames(f, list(frames))
    assert cap.effects is not None
    return cap.effects.steps


def st(call: str, kinds: list[str], **kw: Any) -> Step:
    from dslog_dagster.core.store.effects import step

    return step(call, kinds, **kw)


ZERO = {"rows_dropped": 0, "rows_generated": 0}


def test_each_call_records_its_kind_and_column_effect(people: Any) -> None:
    # one capture, one call per kind (a capture is ~1 s of Spark jobs: the calls share it)
    def f(p: Any) -> Any:
        p = p.withColumn("z", F.col("v") * 2)  # feature augmentation
        p = p.withColumn("v", F.col("v") * 2)  # value transformation
        p = p.fillna({"v": 0.0})  # imputation
        p = p.na.fill(0, ["w"])  # imputation
        p = p.withColumnRenamed("g", "group")  # feature rename
        p = p.select("id", "group", "v", "w")  # feature selection
        p = p.filter(F.col("w") > 15)  # instance drop
        p = p.orderBy("w").limit(2)  # space transformation (order), instance drop
        p = p.select("id", "group", F.explode(F.array("v", "v")).alias("e"))
        return p.groupBy("group").agg(F.sum("e").alias("s"))  # instance generation

    assert steps(f, people) == (
        st("DataFrame.withColumn", ["feature_augmentation"], added=["z"], **ZERO),
        st("DataFrame.withColumn", ["value_transformation"], transformed=["v"], **ZERO),
        st("DataFrame.fillna", ["imputation"], transformed=["v"], **ZERO),
        st("DataFrame.na.fill", ["imputation"], transformed=["w"], **ZERO),
        st("DataFrame.withColumnRenamed", ["feature_rename"], renamed=[("g", "group")], **ZERO),
        st("DataFrame.select", ["feature_selection"], removed=["z"], **ZERO),
        st("DataFrame.filter", ["instance_drop"]),
        st("DataFrame.orderBy", ["space_transformation"], **ZERO),
        st("DataFrame.limit", ["instance_drop"]),
        st(
            "DataFrame.select",
            ["space_transformation", "feature_augmentation", "feature_selection"],
            added=["e"],
            removed=["v", "w"],
        ),
        st("GroupedData.agg", ["instance_generation"], added=["s"], removed=["id", "e"]),
    )


def test_join_and_cross_join(people: Any, cities: Any) -> None:
    got = steps(lambda p, c: p.join(c, "g", "left"), people, cities)
    assert got == (st("DataFrame.join", ["join"], added=["cid", "city"]),)
    got = steps(lambda p, c: p.select("id").crossJoin(c.select("city")), people, cities)
    # each side's select is a step of its own, then the cartesian product (the append kind)
    assert [s.kinds for s in got] == [("feature_selection",), ("feature_selection",), ("append",)]
    assert got[2].added == ("city",)


def test_nested_calls_are_one_step_and_repartition_is_none(people: Any) -> None:
    # unionByName runs select and union inside; repartition changes no cell
    got = steps(lambda p: p.repartition(2).unionByName(p), people)
    assert got == (st("DataFrame.unionByName", ["append"], **ZERO),)


def test_registered_operation_keeps_them(people: Any, tmp_path: Any) -> None:
    cap = capture_frames(lambda p: p.fillna({"v": 0.0}).filter("w > 15"), [people])
    store = LineageStore(tmp_path / "s")
    op = cap.register(store, "out", ["people"])
    again = LineageStore(tmp_path / "s").get_operation(op.op_id)
    assert again.kinds == ("imputation", "instance_drop")
    assert again.effects == cap.effects
