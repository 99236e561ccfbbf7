"""Fields of Spark struct columns as lineage locations, against a reference.

Each case is a row-preserving projection of a frame with a nested struct column; the reference
says, per output leaf field (a lineage column named by its path), which input leaf fields it is
made of. The captured relation must be exactly ``(r, out leaf) <- (r, in leaf)`` for those, on
every row, and the values must equal plain PySpark's (one capture per case). A two-step
pipeline stored in a ``DSLog``, and a Dagster materialization through ``DSLogIOManager``, are
then queried from a field back to the input field it came from.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.core.api import DSLog
from dslog_dagster.spark import ROW_ID, capture_frames
from dslog_dagster.spark.resource import SparkSessionResource

SCHEMA = "id long, s struct<a:string,b:int,c:struct<d:double,e:string>>, arr array<struct<p:int>>"
ROWS = [
    (0, ("x", 1, (0.5, "q")), [(1,), (2,)]),
    (1, ("yy", -2, (1.5, "r")), [(3,)]),
    (2, ("", 3, (2.5, "s")), [(5,), (6,)]),
]
IN_COLS = ["id", "s.a", "s.b", "s.c.d", "s.c.e", "arr"]
S_LEAVES = ["s.a", "s.b", "s.c.d", "s.c.e"]


def _udf_struct() -> Any:
    return F.udf(lambda s: (s["a"], s["b"]), "struct<x:string,y:int>")


# case -> (projection, {output leaf: input leaves it is made of})
def cases() -> dict[str, tuple[Any, dict[str, list[str]]]]:
    return {
        "field reads": (
            lambda x: x.select(
                "id", F.col("s.a"), F.col("s").getField("c").getField("d").alias("dd")
            ),
            {"id": ["id"], "a": ["s.a"], "dd": ["s.c.d"]},
        ),
        "star": (
            lambda x: x.select("s.*"),
            {"a": ["s.a"], "b": ["s.b"], "c.d": ["s.c.d"], "c.e": ["s.c.e"]},
        ),
        "pass-through": (
            lambda x: x.select("s"),
            {leaf: [leaf] for leaf in S_LEAVES},
        ),
        "struct()": (
            lambda x: x.select(F.struct("id", F.col("s.a").alias("z"), "s.c").alias("t")),
            {"t.id": ["id"], "t.z": ["s.a"], "t.c.d": ["s.c.d"], "t.c.e": ["s.c.e"]},
        ),
        "withField/dropFields": (
            lambda x: x.select(
                F.col("s")
                .withField("a", F.col("id").cast("string"))
                .withField("c.d", F.col("s.b").cast("double"))
                .dropFields("b")
                .alias("u")
            ),
            {"u.a": ["id"], "u.c.d": ["s.b"], "u.c.e": ["s.c.e"]},
        ),
        "function of a field": (
            lambda x: x.select(F.upper("s.a").alias("up"), (F.col("s.b") + F.col("id")).alias("n")),
            {"up": ["s.a"], "n": ["s.b", "id"]},
        ),
        "withColumn keeps the others": (
            lambda x: x.drop("arr").withColumn("s", F.col("s").withField("b", F.lit(7))),
            {"id": ["id"], "s.a": ["s.a"], "s.b": [], "s.c.d": ["s.c.d"], "s.c.e": ["s.c.e"]},
        ),
        # no field rule: a UDF's struct, and a struct from an array of structs, are whole-cell
        "udf on a struct": (
            lambda x: x.select(_udf_struct()(F.col("s")).alias("w")),
            {"w.x": S_LEAVES, "w.y": S_LEAVES},
        ),
        "array of structs": (
            lambda x: x.select(F.col("arr").getItem(0).alias("e0")),
            {"e0.p": ["arr"]},
        ),
    }


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    return spark.createDataFrame(ROWS, SCHEMA).withColumn(ROW_ID, F.col("id"))


@pytest.mark.parametrize("case", list(cases()))
def test_field_lineage_against_reference(frame: Any, case: str) -> None:
    fn, spec = cases()[case]
    cap = capture_frames(fn, [frame], input_rows=[len(ROWS)])
    assert list(cap.columns) == list(spec)
    assert list(cap.inputs[0].columns) == IN_COLS
    got_values = sorted(map(str, cap.frame.collect()))
    assert got_values == sorted(map(str, fn(frame.drop(ROW_ID)).collect()))
    pairs = [tuple(p) for p in cap.relation(0).pairs().tolist()]
    # a row-preserving projection: every output row comes from one input row, a bijection
    rows = {o: {i for o2, _, i, _ in pairs if o2 == o} for o, _, _, _ in pairs}
    assert all(len(v) == 1 for v in rows.values())
    m = {o: next(iter(v)) for o, v in rows.items()}
    assert len(set(m.values())) == len(m)
    want = {
        (o, j, m[o], IN_COLS.index(src))
        for o in m
        for j, out in enumerate(spec)
        for src in spec[out]
    }
    assert set(pairs) == want, case
    assert len(m) == len(ROWS) or not any(spec.values())
    assert sorted(cap.column_lineage) == sorted(spec)
    for out, srcs in spec.items():
        assert cap.column_lineage[out].get("input0", []) == sorted(srcs), out


def test_filter_on_a_field_is_considered_only_for_that_field(frame: Any) -> None:
    cap = capture_frames(
        lambda x: x.filter(F.col("s.b") > 0).select(F.col("s.a").alias("a")),
        [frame],
        input_rows=[len(ROWS)],
    )
    kept = sorted(r[ROW_ID] for r in cap.frame_with_row_id.collect())
    assert len(kept) == 2
    contrib = {(c, i) for _, c, _, i in cap.relation(0).pairs().tolist()}
    consid = {(c, i) for _, c, _, i in cap.relation(0, considered=True).pairs().tolist()}
    assert contrib == {(0, IN_COLS.index("s.a"))}
    assert consid == {(0, IN_COLS.index("s.a")), (0, IN_COLS.index("s.b"))}


def test_stored_fields_are_columns_and_queries_name_them(frame: Any, tmp_path: Path) -> None:
    log = DSLog(tmp_path / "store")
    packed = capture_frames(
        lambda x: x.select(F.struct(F.col("s.a").alias("z"), "id").alias("t")),
        [frame],
        input_rows=[len(ROWS)],
    )
    packed.register(log, "packed", ["raw"])
    stored = packed.frame_with_row_id
    unpacked = capture_frames(
        lambda x: x.select(F.col("t.z").alias("z")), [stored], input_rows=[len(ROWS)]
    )
    unpacked.register(log, "unpacked", ["packed"])
    assert log.store.get_array("raw").shape == (len(ROWS), len(IN_COLS))
    packed_rec = log.store.get_array("packed")
    assert packed_rec.columns == (("t.z", "string"), ("t.id", "bigint"))
    # the field z of output row 1 is the field s.a of the raw row holding that value
    z = {r[ROW_ID]: r["z"] for r in unpacked.frame_with_row_id.collect()}[1]
    (raw_row,) = [i for i, (a, _, _), _ in ROWS if a == z]
    cells = log.prov_query(["unpacked", "packed", "raw"], [(1, 0)])
    assert sorted(cells.to_indices().tolist()) == [[raw_row, IN_COLS.index("s.a")]]


# ------------------------------------------------------------------ through Dagster


@tracked_asset
def people(spark: SparkSessionResource) -> DataFrame:
    rows = [(0, ("ann", 31)), (1, ("bob", 42))]
    return spark.get_session().createDataFrame(rows, "id long, p struct<name:string,age:int>")


@tracked_asset
def ages(people: DataFrame) -> DataFrame:
    return people.select("id", F.col("p.age").alias("age"))


@pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
def test_dagster_steps_store_fields_as_columns(spark: Any, tmp_path: Path) -> None:
    resources = {
        "io_manager": DSLogIOManager(base_dir=str(tmp_path), store_dir=str(tmp_path / ".dslog")),
        "spark": SparkSessionResource(master="local[2]"),
    }
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    with dg.instance_for_test() as inst:
        res = dg.materialize([people, ages], instance=inst, resources=resources, run_config=quiet)
        assert res.success
    log = DSLog(tmp_path / ".dslog")
    assert log.store.get_array("people").column_names == ["id", "p.name", "p.age"]
    cells = log.prov_query(["ages", "people"], np.s_[:, 1])  # every age
    assert set(cells.to_indices()[:, 1].tolist()) == {2}  # <- p.age only, not p.name
    assert cells.count() == 2
