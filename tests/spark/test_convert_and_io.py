"""Row ids, Parquet frame IO, the Spark resource, and conversions that keep lineage — one
query path across a Spark step and a NumPy step."""

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import functions as F

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.capture import capture
from dslog_dagster.core.testing.baselines import naive_join
from dslog_dagster.errors import LineageStorageError
from dslog_dagster.io_managers.spark_frames import read_frame, write_frame
from dslog_dagster.spark import ROW_ID, capture_frames, rowid, with_row_id
from dslog_dagster.spark.convert import from_numpy, to_numpy, to_pandas
from dslog_dagster.spark.resource import SparkSessionResource


def test_row_ids_are_dense_over_many_partitions(spark: Any) -> None:
    df = spark.range(0, 1000, numPartitions=7).filter("id % 3 != 0")
    ids = with_row_id(df)
    got = sorted(r[ROW_ID] for r in ids.frame.select(ROW_ID).collect())
    assert ids.n == 666
    assert got == list(range(666))
    ids.release()


@pytest.mark.parametrize("by", ["filter", "semijoin"])
def test_rows_by_id_keeps_exactly_the_named_rows(
    spark: Any, by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways of finding rows by id (an IN filter, a broadcast semijoin with an Arrow
    frame of the ids) keep every column of exactly the named rows, repeats and unknown ids
    included, and no ids give no rows."""
    if by == "semijoin":
        monkeypatch.setattr(rowid, "FILTER_IDS", 0)
    df = with_row_id(
        spark.range(0, 300, numPartitions=3).selectExpr("id * 2 AS a", "CAST(id AS STRING) AS s")
    )
    want = [5, 5, 0, 299, 77, 1000]
    got = rowid.rows_by_id(df.frame, np.asarray(want))
    assert got.columns == df.frame.columns
    rows = sorted((r[ROW_ID], r["a"], r["s"]) for r in got.collect())
    assert rows == [(i, 2 * i, str(i)) for i in sorted({0, 5, 77, 299})]
    assert rowid.rows_by_id(df.frame, []).count() == 0
    df.release()


def test_write_then_read_frame_keeps_ids(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([(i, float(i) / 2) for i in range(20)], "a long, b double")
    info = write_frame(df.repartition(3), tmp_path / "f.parquet")
    assert info.rows == 20
    assert info.schema == (("a", "bigint"), ("b", "double"))
    plain = read_frame(spark, tmp_path / "f.parquet")
    assert plain.columns == ["a", "b"]
    ided = read_frame(spark, tmp_path / "f.parquet", row_id=True)
    assert sorted(r[ROW_ID] for r in ided.collect()) == list(range(20))
    df.write.parquet(str(tmp_path / "plain.parquet"))
    with pytest.raises(LineageStorageError, match=ROW_ID):
        read_frame(spark, tmp_path / "plain.parquet")


def test_resource_reuses_the_session(spark: Any) -> None:
    res = SparkSessionResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    assert res.get_session() is spark
    assert res.spark_session is spark


def test_a_new_session_keeps_sparks_default_parallelism(spark: Any) -> None:
    # the master's cores: more made the last stage of small jobs run in waves
    master = spark.sparkContext.master  # local[2] here, or local[*] if a test started it
    cores = master[len("local[") : -1]
    want = os.cpu_count() if cores == "*" else int(cores)
    assert spark.sparkContext.defaultParallelism == want


@pytest.mark.parametrize(
    ("master", "want"),
    [("local", 2), ("local[3]", 6), ("local[4, 2]", 8), ("local[*]", None), ("spark://h:7077", 4)],
)
def test_shuffle_partitions_scale_with_a_local_masters_cores(master: str, want: int | None) -> None:
    from dslog_dagster.spark.session import shuffle_partitions

    cores = len(os.sched_getaffinity(0))
    assert shuffle_partitions(master) == (2 * cores if want is None else want)


def test_attaching_to_a_running_session_keeps_its_settings(spark: Any) -> None:
    """A resource with default config must not reset what the session's owner set (our
    defaults apply to sessions we start); options the caller passes explicitly do apply."""
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    try:
        spark.conf.set(key, "7")
        assert SparkSessionResource().get_session() is spark
        assert spark.conf.get(key) == "7"
        SparkSessionResource(conf={key: "3"}).get_session()
        assert spark.conf.get(key) == "3"
    finally:
        spark.conf.set(key, before)


def test_to_numpy_and_back_keep_lineage(spark: Any) -> None:
    df = spark.createDataFrame([(i, i * 10.0, -i) for i in range(6)], "a long, b double, c long")
    cap = capture_frames(lambda x: x.filter("a >= 2").select("c", "b"), [df])
    arr, lin = to_numpy(cap, ["b", "c"])
    assert arr.shape == (4, 2)
    assert arr[:, 0].tolist() == [20.0, 30.0, 40.0, 50.0]
    rel = lin.decompress()
    want = [(i, j, i, {0: 1, 1: 0}[j]) for i in range(4) for j in range(2)]
    assert sorted(map(tuple, rel.pairs().tolist())) == want
    pdf, plin = to_pandas(cap)
    assert list(pdf.columns) == ["c", "b"]
    assert plin.decompress().n == 8
    back, blin = from_numpy(spark, arr, ["x", "y"])
    assert back.columns == ["x", "y", ROW_ID]
    assert blin.decompress() == LineageRelation.from_pairs(
        (4, 2),
        (4, 2),
        [(i, j) for i in range(4) for j in range(2)],
        [(i, j) for i in range(4) for j in range(2)],
    )


def test_one_query_path_crosses_spark_and_numpy_steps(spark: Any, tmp_path: Path) -> None:
    log = DSLog(tmp_path / "store")
    raw = spark.createDataFrame(
        [(i, i % 3, float(i)) for i in range(9)], "id long, g long, v double"
    ).withColumn(ROW_ID, F.col("id"))
    # Spark step: filter + derived column
    cap = capture_frames(
        lambda raw: raw.filter("v > 1").withColumn("v2", F.col("v") * 2).select("g", "v2"),
        {"raw": raw},
    )
    cap.register(log, "frame", {"raw": "raw"}, op_name="spark.clean")
    # conversion step: frame -> matrix
    arr, conv = to_numpy(cap, ["v2", "g"])
    mat, frame_arr = Array("mat", arr.shape), Array("frame", cap.shape)
    log.register_operation("to_numpy", [frame_arr], [mat], [Lineage(mat, frame_arr, conv)])
    # NumPy step: column sums with the annotator
    res = capture(np.sum, arr, axis=0)
    sums = Array("sums", res.value.shape)
    log.register_operation("sum0", [mat], [sums], [Lineage(sums, mat, res.relation(0, 0))])
    # and back to a frame
    _back, back_lin = from_numpy(spark, res.value.reshape(1, -1), ["s_v2", "s_g"])
    out = Array("out_frame", (1, 2))
    log.register_operation(
        "from_numpy", [sums], [out], [Lineage(out, sums, _flat_to_row(back_lin))]
    )

    got = log.prov_query(["out_frame", "sums", "mat", "frame", "raw"], [(0, 0)])
    hops = [
        (_rel(log, "from_numpy", "out_frame", "sums"), "backward"),
        (_rel(log, "sum0", "sums", "mat"), "backward"),
        (_rel(log, "to_numpy", "mat", "frame"), "backward"),
        (_rel(log, "spark.clean", "frame", "raw"), "backward"),
    ]
    want = naive_join(hops, [(0, 0)])
    assert got.to_indices().tolist() == want.tolist()
    # s_v2 <- v2 of every kept row <- v of raw rows 2..8 (v > 1)
    assert sorted(map(tuple, want.tolist())) == [(i, 2) for i in range(2, 9)]
    fwd = log.prov_query(["raw", "frame", "mat", "sums", "out_frame"], [(5, 2)])
    assert fwd.to_indices().tolist() == [[0, 0]]


def _flat_to_row(lin: Any) -> Any:
    """``(1, 2) ← (1, 2)`` frame lineage as ``(1, 2) ← (2,)`` (the sums are a 1-D array)."""
    p = lin.decompress().pairs()
    return LineageRelation.from_pairs((1, 2), (2,), p[:, :2], p[:, 3:])


def _rel(log: DSLog, op_name: str, out: str, inp: str) -> LineageRelation:
    op = next(o for o in log.store.operations() if o.op_name == op_name)
    return log.store.read_lineage(op, out, inp).decompress()


def _schema_inferences(spark: Any, load: Any) -> int:
    """Spark jobs run while ``load()`` builds a frame (schema inference is one). The group is
    new per call: the status tracker keeps a group's jobs for the session's life."""
    import uuid

    sc = spark.sparkContext
    group = f"dslog-load-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "a frame's load")
    try:
        load()
        return len(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setJobGroup("", "")


@pytest.mark.parametrize("captured", [False, True], ids=["numbered", "staged-capture"])
def test_a_stored_frame_loads_with_its_recorded_schema_and_a_wrong_one_is_ignored(
    spark: Any, tmp_path: Path, captured: bool
) -> None:
    """The side-car records the files' schema, so a load runs no inference job; a side-car
    that disagrees with the files' footer (a column renamed, a type changed, a column that is
    not there, which Spark would read as nulls) is ignored and Spark infers, never trusted."""
    import json

    from dslog_dagster.io_managers.spark_frames import SIDECAR, store_frame

    rows = [(i, None if i % 4 == 0 else float(i) / 2, [i, None], f"s{i}") for i in range(20)]
    df = spark.createDataFrame(rows, "a long not null, b double, c array<int>, d string")
    if captured:
        value: Any = capture_frames(lambda f: f.filter(F.col("a") % 3 > 0), [with_row_id(df).frame])
    else:
        value = df.repartition(3)
    path = tmp_path / "f.parquet"
    store_frame(value, path)
    want = sorted(map(tuple, read_frame(spark, path, row_id=True).collect()))
    assert _schema_inferences(spark, lambda: read_frame(spark, path, row_id=True)) == 0
    side = path / SIDECAR
    good = json.loads(side.read_text())
    assert "files_schema" in good
    recorded = json.loads(good["files_schema"])
    for change in ("rename", "type", "missing"):
        bad = json.loads(json.dumps(recorded))
        field = next(f for f in bad["fields"] if f["name"] == "b")
        if change == "rename":
            field["name"] = "b2"
        elif change == "type":
            field["type"] = "float"
        else:
            ghost = {"name": "ghost", "type": "long", "nullable": True, "metadata": {}}
            bad["fields"].append(ghost)
        side.write_text(json.dumps({**good, "files_schema": json.dumps(bad)}))
        assert _schema_inferences(spark, lambda: read_frame(spark, path, row_id=True)) > 0, change
        got = read_frame(spark, path, row_id=True)
        assert "ghost" not in got.columns
        assert "b2" not in got.columns
        assert sorted(map(tuple, got.collect())) == want, change
    if captured:
        value.release()
