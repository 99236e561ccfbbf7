"""Aggregations carry row ids as checked ranges (``lo..hi``) or as lists: same lineage.

``capture_frames(aggregate="auto")`` summarises each group's ids with hash aggregates and
falls back to lists when the summary is not provably exact; ``aggregate="lists"`` always
collects. Each case checks the ranges path against a brute-force reference (ids propagated
by hand) and against the lists path, and whether the fallback ran — including the traps where
a range would be wrong: a join that repeats rows so a group's ids have duplicates *and* gaps
with ``count == hi - lo + 1``, explode, and aggregations over aggregations.
"""

from typing import Any

import pytest
from frame_reference import assert_lineage, output_rows
from pyspark.sql import Window
from pyspark.sql import functions as F

from dslog_dagster.spark import ROW_ID, capture_frames

# rows sorted by key: every group's ids form one range
SORTED = [(i, i // 3, float(i)) for i in range(10)]  # keys 0,0,0,1,1,1,2,2,2,3
# the same keys scattered over the row ids
SCATTERED = [(i, (i * 7) % 4, float(i)) for i in range(10)]
DIMS = [(k, 10.0 * k) for k in range(4)]


def frame(spark: Any, rows: list[Any], schema: str) -> Any:
    return spark.createDataFrame(rows, schema).withColumn(ROW_ID, F.col(schema.split()[0]))


@pytest.fixture(scope="module")
def sorted_facts(spark: Any) -> Any:
    return frame(spark, SORTED, "id long, k long, v double")


@pytest.fixture(scope="module")
def scattered_facts(spark: Any) -> Any:
    return frame(spark, SCATTERED, "id long, k long, v double")


@pytest.fixture(scope="module")
def dims(spark: Any) -> Any:
    return frame(spark, DIMS, "key long, w double")


def both(fn: Any, frames: Any) -> tuple[Any, Any]:
    """The capture in auto mode and in lists mode; their relations must be equal."""
    auto = capture_frames(fn, frames)
    lists = capture_frames(fn, frames, aggregate="lists")
    assert auto.columns == lists.columns
    assert output_rows(auto) == output_rows(lists)
    for inp in auto.inputs:
        for considered in (False, True):
            assert auto.relation(inp.name, considered=considered) == lists.relation(
                inp.name, considered=considered
            )
    assert "retried_with_lists" not in lists.timings
    return auto, lists


def join_agg(f: Any, d: Any) -> Any:
    """The bench's shape: join on the key, derive a column, sum per key, order by key."""
    j = f.join(d.withColumnRenamed("key", "k"), "k").withColumn("x", F.col("v") * F.col("w"))
    return j.groupBy("k").agg(F.sum("x").alias("t"), F.count("*").alias("n")).orderBy("k")


@pytest.mark.parametrize("case", ["sorted", "scattered"])
def test_join_groupby_matches_reference(case: str, request: Any, dims: Any) -> None:
    facts = request.getfixturevalue(f"{case}_facts")
    data = SORTED if case == "sorted" else SCATTERED
    auto, _ = both(join_agg, {"f": facts, "d": dims})
    # sorted keys: ranges are exact, one pass; scattered: checked, found inexact, rerun
    assert ("retried_with_lists" in auto.timings) == (case == "scattered")
    groups = {k: [i for i, kk, _ in data if kk == k] for k in range(4)}
    src = {"k": ["k"], "t": ["v"], "n": ["k"]}
    assert_lineage(auto, "f", lambda r, c: [(i, s) for i in groups[r["k"]] for s in src[c]])
    assert_lineage(
        auto,
        "d",
        lambda r, c: [(r["k"], s) for s in {"t": ["w"], "n": ["key"], "k": []}[c]],
    )
    assert_lineage(
        auto,
        "f",
        lambda r, c: [(i, s) for i in groups[r["k"]] for s in {*src[c], "k"}],
        considered=True,
    )


def test_repeated_rows_with_count_equal_to_span_fall_back(spark: Any) -> None:
    # left rows 0 and 2 are in group A; row 0 matches two right rows, row 2 one: group A's
    # left ids are {0, 0, 2}: count 3 == 2 - 0 + 1, yet id 1 is not in the group
    left = frame(
        spark, [(0, "x", "A"), (1, "y", "B"), (2, "y", "A")], "id long, j string, g string"
    )
    right = frame(spark, [(0, "x"), (1, "x"), (2, "y")], "rid long, j string")
    cap, _ = both(lambda a, b: a.join(b, "j").groupBy("g").count(), {"a": left, "b": right})
    assert "retried_with_lists" in cap.timings
    groups = {"A": [0, 2], "B": [1]}
    # count(*) is made by the group's rows: their key g, and j, which joined them
    src = {"g": ["g"], "count": ["g", "j"]}
    assert_lineage(cap, "a", lambda r, c: [(i, s) for i in groups[r["g"]] for s in src[c]])


def test_explode_before_groupby_loses_uniqueness(sorted_facts: Any) -> None:
    def f(x: Any) -> Any:
        e = x.select("id", "k", F.explode(F.array("v", F.col("v") + 1)).alias("e"))
        return e.groupBy("k").agg(F.sum("e").alias("s")).orderBy("k")

    cap, _ = both(f, [sorted_facts])
    groups = {k: [i for i, kk, _ in SORTED if kk == k] for k in range(4)}
    assert_lineage(cap, 0, lambda r, c: [(i, "k" if c == "k" else "v") for i in groups[r["k"]]])


def test_steps_after_an_aggregation(sorted_facts: Any, dims: Any) -> None:
    groups = {k: [i for i, kk, _ in SORTED if kk == k] for k in range(4)}

    # row-preserving steps and a join keep the ranges (one pass)
    def after(f: Any, d: Any) -> Any:
        g = f.groupBy("k").agg(F.max("v").alias("m"))
        return g.filter(F.col("m") > 2).join(d, g.k == d.key, "left").select("k", "m", "w")

    cap, _ = both(after, {"f": sorted_facts, "d": dims})
    assert "retried_with_lists" not in cap.timings
    assert_lineage(
        cap,
        "f",
        lambda r, c: [(i, {"k": "k", "m": "v"}[c]) for i in groups[r["k"]]] if c != "w" else [],
    )

    # an aggregation and a window over an aggregation need lists: rerun
    def twice(f: Any) -> Any:
        g = f.groupBy("k").agg(F.sum("v").alias("s"))
        return g.groupBy((F.col("k") % 2).alias("p")).agg(F.sum("s").alias("ss"))

    cap2, _ = both(twice, [sorted_facts])
    assert "retried_with_lists" in cap2.timings
    parity = {p: [i for i, k, _ in SORTED if k % 2 == p] for p in (0, 1)}
    assert_lineage(cap2, 0, lambda r, c: [(i, "k" if c == "p" else "v") for i in parity[r["p"]]])

    def window(f: Any) -> Any:
        g = f.groupBy("k").agg(F.sum("v").alias("s"))
        return g.select("k", F.sum("s").over(Window.orderBy("k")).alias("run"))

    cap3, _ = both(window, [sorted_facts])
    assert "retried_with_lists" in cap3.timings


def test_outer_join_nulls_and_union_of_aggregates(sorted_facts: Any, dims: Any) -> None:
    def f(x: Any, d: Any) -> Any:
        j = d.join(x.filter("k < 2"), d.key == x.k, "left")  # keys 2, 3: no fact rows
        a = j.groupBy("key").agg(F.count("id").alias("n"))
        b = x.groupBy("k").agg(F.count("*").alias("n")).withColumnRenamed("k", "key")
        return a.union(b)

    cap, _ = both(f, {"x": sorted_facts, "d": dims})
    assert "retried_with_lists" not in cap.timings
    rows = output_rows(cap)
    assert len(rows) == 8
