"""The capture's pass writes its output once; ``write_frame`` links those files into place.

A capture (local master) writes the output rows with ``MID`` and the slot columns in the pass
that computes the lineage; storing it hard-links (or copies) the files and records the
partition offsets, and ``read_frame`` turns ``MID`` into the dense row ids. These tests check
that the stored frame is the captured one (same rows under the same ids, which the lineage
names), that the hidden columns never reach user code, that the stored directory may be
renamed (as the IO manager's atomic publish does), and that ``release`` keeps stored files but
drops staging files.
"""

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from dslog_dagster.errors import InvalidRelationError
from dslog_dagster.io_managers.spark_frames import read_frame, write_frame
from dslog_dagster.spark import ROW_ID, capture_frames


def rows_by_id(df: Any) -> dict[int, tuple[Any, ...]]:
    out = {}
    for r in df.collect():
        d = r.asDict()
        out[d.pop(ROW_ID)] = tuple(d.items())
    return out


def test_store_moves_the_pass_output(spark: Any, tmp_path: Path) -> None:
    # several partitions, so the ids come from several offsets
    src = spark.range(0, 40, numPartitions=3).withColumn("k", F.col("id") % 7)
    src = src.withColumn(ROW_ID, F.col("id"))

    def f(x: Any) -> Any:
        return x.groupBy("k").agg(F.sum("id").alias("s")).orderBy("k")

    cap = capture_frames(f, [src], input_rows=[40])
    assert cap._staged is not None  # local master: the pass staged its output
    staged = cap._staged.path
    before = rows_by_id(cap.frame_with_row_id)
    assert sorted(before) == list(range(7))
    # lineage names those ids: row o holds the group of key k, the ids of that group
    rel = cap.relation(0)
    for o, items in before.items():
        k = dict(items)["k"]
        got = {int(r) for oo, _, r, _ in rel.pairs().tolist() if oo == o}
        assert got == {i for i in range(40) if i % 7 == k}

    info = write_frame(cap, tmp_path / "out.parquet")
    assert info.rows == 7
    assert [n for n, _ in info.schema] == ["k", "s"]
    # renamed after writing (atomic publish): the stored frame and the capture still read
    os.replace(tmp_path / "out.parquet", tmp_path / "final.parquet")
    stored = read_frame(spark, tmp_path / "final.parquet", row_id=True)
    assert stored.columns == ["k", "s", ROW_ID]
    assert rows_by_id(stored) == before
    assert read_frame(spark, tmp_path / "final.parquet").columns == ["k", "s"]
    assert rows_by_id(cap.frame_with_row_id) == before
    assert cap.frame.columns == ["k", "s"]

    # a second store; release drops the staging files and keeps both stored frames
    write_frame(cap, tmp_path / "copy.parquet")
    cap.release()
    assert not os.path.exists(staged)
    assert rows_by_id(read_frame(spark, tmp_path / "copy.parquet", row_id=True)) == before
    assert rows_by_id(read_frame(spark, tmp_path / "final.parquet", row_id=True)) == before


def test_release_drops_staging_and_empty_output(spark: Any, tmp_path: Path) -> None:
    src = spark.range(0, 10).withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(lambda x: x.filter("id < 0"), [src], input_rows=[10])
    assert cap.n_rows == 0
    assert cap.frame.count() == 0
    write_frame(cap, tmp_path / "empty.parquet")
    assert read_frame(spark, tmp_path / "empty.parquet", row_id=True).count() == 0

    cap2 = capture_frames(lambda x: x.filter("id < 5"), [src], input_rows=[10])
    assert cap2._staged is not None
    staged = cap2._staged.path
    assert os.path.isdir(staged)
    cap2.release()
    assert not os.path.exists(staged)


def test_staged_files_keep_every_type(spark: Any, tmp_path: Path) -> None:
    # the pass stages the output's files and the stored frame is those files: values of the
    # common Spark types (nested ones too) must read back exactly as Spark computed them
    src = spark.sql(
        """
        SELECT id, CAST(id AS INT) AS i, CAST(id AS SMALLINT) AS sm, CAST(id AS TINYINT) AS ti,
               id * 1.5D AS d, CAST(id * 0.25 AS FLOAT) AS f, CAST(id AS DECIMAL(20, 3)) AS dec,
               IF(id % 3 = 0, NULL, CONCAT('s', id)) AS s, id % 2 = 0 AS b,
               CAST(CONCAT('b', id) AS BINARY) AS bin,
               DATE_ADD(DATE'2024-02-27', CAST(id AS INT)) AS dt,
               TIMESTAMP'2024-03-31 01:30:00' + MAKE_INTERVAL(0, 0, 0, 0, CAST(id AS INT)) AS ts,
               TIMESTAMP_NTZ'2024-01-01 00:00:00' AS ntz,
               NAMED_STRUCT('a', id, 'b', ARRAY(id, NULL)) AS st, MAP('k', id) AS m
        FROM RANGE(12)
        """
    ).withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(lambda x: x.filter("id != 4"), [src], input_rows=[12])
    assert cap._staged is not None
    want = sorted(
        (tuple(r) for r in src.drop(ROW_ID).filter("id != 4").collect()), key=lambda t: t[0]
    )
    assert sorted((tuple(r) for r in cap.frame.collect()), key=lambda t: t[0]) == want
    # same types (files read back are nullable, whoever wrote them)
    assert cap.frame.schema.simpleString() == src.drop(ROW_ID).schema.simpleString()
    write_frame(cap, tmp_path / "typed.parquet")
    back = read_frame(spark, tmp_path / "typed.parquet", row_id=True)
    assert sorted((tuple(r) for r in back.drop(ROW_ID).collect()), key=lambda t: t[0]) == want


def test_interval_output_is_staged(spark: Any) -> None:
    src = spark.sql("SELECT id, MAKE_DT_INTERVAL(0, 0, 0, id) AS dt FROM RANGE(6)")
    src = src.withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(lambda x: x.filter("id > 1"), [src], input_rows=[6])
    assert cap._staged is not None
    want = sorted(tuple(r) for r in src.drop(ROW_ID).filter("id > 1").collect())
    assert sorted(tuple(r) for r in cap.frame.collect()) == want
    ids = {r[ROW_ID]: r["id"] for r in cap.frame_with_row_id.collect()}
    assert sorted(ids.values()) == [2, 3, 4, 5]
    # each output cell comes from the same cell of the input row with its id
    pairs = {tuple(p) for p in cap.relation(0).pairs().tolist()}
    assert pairs == {(o, j, i, j) for o, i in ids.items() for j in (0, 1)}


def test_frames_are_made_on_first_use_and_gone_after_release(spark: Any, tmp_path: Path) -> None:
    src = spark.range(0, 30, numPartitions=2).withColumn("k", F.col("id") % 4)
    src = src.withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(
        lambda x: x.groupBy("k").agg(F.count("id").alias("n")), [src], input_rows=[30]
    )
    assert cap._made is None  # nothing read back by the capture itself
    # storing needs no frame either: the schema comes from the staged files
    info = write_frame(cap, tmp_path / "out.parquet")
    assert info.schema == (("k", "bigint"), ("n", "bigint"))
    assert cap._made is None
    frame = cap.frame
    assert cap.frame is frame  # made once
    assert cap.frame_with_row_id is cap.frame_with_row_id
    assert sorted(r["n"] for r in frame.collect()) == [7, 7, 8, 8]
    cap.release()
    with pytest.raises(InvalidRelationError, match="released"):
        _ = cap.frame
    # the stored copy is unaffected
    assert read_frame(spark, tmp_path / "out.parquet").count() == 4


def test_far_timestamps_as_group_keys(spark: Any) -> None:
    # timestamp keys beyond pyarrow's nanosecond range (the staged files are Spark's; only
    # their bigint and boolean lineage columns are read back, and the tap records the keys'
    # hash). Ids 0..5 alternate between two keys, so the groups are found again by their keys
    src = spark.sql(
        """
        SELECT id, IF(id % 2 = 0, TIMESTAMP'9999-12-31 23:59:59', TIMESTAMP'1000-01-01 00:00:00')
               AS t, id * 1.0D AS v
        FROM RANGE(6)
        """
    ).withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(lambda x: x.groupBy("t").agg(F.sum("v").alias("s")), [src], input_rows=[6])
    rows = {r[ROW_ID]: r["t"].year for r in cap.frame_with_row_id.collect()}
    groups = {9999: {0, 2, 4}, 1000: {1, 3, 5}}
    got: dict[int, set[int]] = {}
    for o, _, i, _ in cap.relation(0).pairs().tolist():
        got.setdefault(rows[o], set()).add(i)
    assert got == groups


def _grouped(spark: Any) -> tuple[Any, Any]:
    src = spark.range(0, 60, numPartitions=3).withColumn("k", (F.col("id") * 7) % 5)
    src = src.withColumn(ROW_ID, F.col("id"))

    def f(x: Any) -> Any:  # shuffled keys: the groups' ids come from the id tap
        return x.groupBy("k").agg(F.sum("id").alias("s")).orderBy("k")

    return src, f


def test_a_shared_folder_holds_staging_and_taps_and_is_checked(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spark.dslog.sharedDir`` (a cluster's folder shared with the executors): the pass
    stages there and the tap writes there; the rows the executors counted must be in the
    files the driver reads, else an error naming the setting (not a capture of fewer rows)."""
    import dslog_dagster.spark.capture as capture_module
    from dslog_dagster.errors import CaptureError, ConfigurationError
    from dslog_dagster.spark.staging import SHARED_DIR_CONF

    src, f = _grouped(spark)
    want = capture_frames(f, [src], input_rows=[60])
    want_pairs = sorted(want.relation(0).pairs().tolist())
    want.release()
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setattr(capture_module, "is_local", lambda s: False)  # count as on a cluster
    seen: list[str] = []
    real_mkdtemp = capture_module.tempfile.mkdtemp

    def mkdtemp(prefix: str = "", dir: str | None = None) -> str:
        path = real_mkdtemp(prefix=prefix, dir=dir)
        seen.append(path)
        return path

    monkeypatch.setattr(capture_module.tempfile, "mkdtemp", mkdtemp)
    spark.conf.set(SHARED_DIR_CONF, str(shared))
    try:
        cap = capture_frames(f, [src], input_rows=[60])
        assert cap._staged is not None
        assert Path(cap._staged.path).parent == shared
        assert seen
        assert {Path(p).parent for p in seen} == {shared}
        assert cap.timings["tapped_rows"] > 0
        assert sorted(cap.relation(0).pairs().tolist()) == want_pairs
        cap.release()

        # a folder the executors do not share: the driver misses a file they wrote
        real_listdir = os.listdir

        def listdir(path: Any) -> list[str]:
            names = real_listdir(path)
            if Path(path).name.startswith("dslog-capture-"):
                part = [n for n in sorted(names) if n.startswith("part-")]
                names = [n for n in names if n != part[0]]
            return names

        monkeypatch.setattr(os, "listdir", listdir)
        with pytest.raises(CaptureError, match=SHARED_DIR_CONF):
            capture_frames(f, [src], input_rows=[60])
        monkeypatch.setattr(os, "listdir", real_listdir)

        spark.conf.set(SHARED_DIR_CONF, "relative/dir")
        with pytest.raises(ConfigurationError, match="absolute path"):
            capture_frames(f, [src], input_rows=[60])
    finally:
        spark.conf.unset(SHARED_DIR_CONF)


def test_staged_rows_read_locally_equal_the_frame_with_row_ids(spark: Any) -> None:
    """``StagedOutput.read_local`` gives every staged row under the dense id
    ``frame_with_row_id`` gives it (several partitions, so several offsets; an empty
    output too), and ``visible`` the output's columns and types; a staged file holding a
    partition the pass did not count is refused."""
    from dslog_dagster.errors import CaptureError
    from dslog_dagster.spark.rowid import MID, PART_BITS

    src = spark.range(0, 60, numPartitions=3).withColumn("k", F.col("id") % 11)
    src = src.withColumn(ROW_ID, F.col("id"))

    def f(x: Any) -> Any:
        out = x.groupBy("k").agg(F.sum("id").alias("s"), F.count("*").alias("n"))
        return out.repartition(3)

    cap = capture_frames(f, [src], input_rows=[60])
    staged = cap.staged
    assert staged is not None
    try:
        assert len(staged.offsets) > 2  # rows in more than one partition
        assert staged.visible() == [("k", "bigint"), ("s", "bigint"), ("n", "bigint")]
        table = staged.read_local(["k", "s", "n"])
        assert table.column_names == ["k", "s", "n", ROW_ID]
        got = {r[ROW_ID]: (r["k"], r["s"], r["n"]) for r in table.to_pylist()}
        want = {r[ROW_ID]: (r["k"], r["s"], r["n"]) for r in cap.frame_with_row_id.collect()}
        assert got == want
        assert sorted(got) == list(range(11))
        # a file of a partition the pass never counted: the folder changed under it
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = [f for f in os.listdir(staged.path) if f.endswith(".parquet")]
        first = pq.read_table(os.path.join(staged.path, names[0]))
        far = pa.array([len(staged.offsets) << PART_BITS] * first.num_rows, pa.int64())
        at = first.column_names.index(MID)
        forged = first.set_column(at, first.schema.field(at), far)
        pq.write_table(forged, os.path.join(staged.path, "zz-forged.parquet"))
        with pytest.raises(CaptureError, match="folder changed"):
            staged.read_local(["k"])
    finally:
        cap.release()
    empty = capture_frames(lambda x: x.filter(F.col("id") < 0), [src], input_rows=[60])
    try:
        assert empty.staged is not None
        assert empty.staged.read_local(["id", "k"]).num_rows == 0
    finally:
        empty.release()


def test_a_collected_pass_equals_the_staged_one(spark: Any) -> None:
    """``collect=True`` (lists mode, columns Arrow gives as ``collect`` does): the pass
    collects the output into this process instead of staging it, and gives the same lineage
    (both inputs, contributing and considered), the same rows under the same ids (local
    rows and frames) and the same columns; with a timestamp column, or range slots (the
    default aggregation), it stages as before."""
    import pyarrow as pa

    from dslog_dagster.spark import capture_frame_outputs

    facts = spark.range(0, 90, numPartitions=3).select(
        F.col("id").alias(ROW_ID), (F.col("id") % 7).alias("k"), (F.col("id") * 0.5).alias("v")
    )
    dims = spark.range(0, 7).select(F.col("id").alias(ROW_ID), F.col("id").alias("k"))
    dims = dims.withColumn("name", F.concat(F.lit("n"), F.col("k").cast("string")))

    def f(a: Any, b: Any) -> Any:
        j = a.join(b, "k").filter(F.col("v") > 3)
        return j.groupBy("k", "name").agg(F.sum("v").alias("s"), F.count("*").alias("n"))

    def run(g: Any, **kw: Any) -> Any:
        (cap,) = capture_frame_outputs(g, [facts, dims], input_rows=[90, 7], **kw)
        return cap

    def rows(cap: Any) -> dict[int, tuple[Any, ...]]:
        table = cap.local_rows(["k", "name", "s", "n"])
        assert isinstance(table, pa.Table)
        return {r[ROW_ID]: (r["k"], r["name"], r["s"], r["n"]) for r in table.to_pylist()}

    staged = run(f, aggregate="lists")
    collected = run(f, aggregate="lists", collect=True)
    try:
        assert staged.staged is not None
        assert collected.staged is None
        assert collected._collected is not None
        assert collected.visible() == staged.visible()
        assert rows(collected) == rows(staged)
        assert rows_by_id(collected.frame_with_row_id) == rows_by_id(staged.frame_with_row_id)
        assert collected.frame.columns == ["k", "name", "s", "n"]
        for i in (0, 1):
            for considered in (False, True):
                got = collected.relation(i, considered=considered).pairs().tolist()
                want = staged.relation(i, considered=considered).pairs().tolist()
                assert sorted(got) == sorted(want)
                assert got
    finally:
        staged.release()
        collected.release()
    assert collected.local_rows(["k"]) is None  # released: its rows are gone
    # not collectable: a timestamp column; range slots (the default aggregation)
    stamped = run(
        lambda a, b: f(a, b).withColumn("t", F.to_timestamp(F.lit("2026-01-01 10:00:00"))),
        aggregate="lists",
        collect=True,
    )
    ranged = run(f, collect=True)
    try:
        assert stamped.staged is not None
        assert stamped._collected is None
        assert ranged.staged is not None
        assert ranged._collected is None
    finally:
        stamped.release()
        ranged.release()
