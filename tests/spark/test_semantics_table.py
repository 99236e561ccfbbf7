"""The semantics table (docs/concepts/semantics.md), rule by rule, on Spark.

Each capture checks several rows of the table at once against a hand-derived answer (both
relations): the suite cannot afford a capture per rule. The NumPy and pandas sides of the same
rules are in ``tests/pandas/test_semantics_table.py``.
"""

from typing import Any

import pytest
from frame_reference import assert_lineage
from pyspark.sql import Window
from pyspark.sql import functions as F

from dslog_dagster.spark import ROW_ID, capture_frames

# id, k, v, p: group 0 = {0, 1, 5}, max 5.0 at 1; group 1 = {2, 3}, max 5.0 tied at 2 and 3;
# group 2 = {4}; p is the pivot column (group 2 has no "b")
FACTS = [
    (0, 0, 3.0, "a"),
    (1, 0, 5.0, "b"),
    (2, 1, 5.0, "a"),
    (3, 1, 5.0, "b"),
    (4, 2, 1.0, "a"),
    (5, 0, 1.0, "a"),
]
# j, k, w: keys 0 and 1 match, 3 matches nothing; fact key 2 has no dim
DIMS = [(0, 0, 0.0), (1, 1, 10.0), (2, 3, 30.0)]


def _frame(spark: Any, rows: list[Any], schema: str) -> Any:
    return spark.createDataFrame(rows, schema).withColumn(ROW_ID, F.col(schema.split()[0]))


@pytest.fixture(scope="module")
def frames(spark: Any) -> dict[str, Any]:
    return {
        "f": _frame(spark, FACTS, "id long, k long, v double, p string"),
        "d": _frame(spark, DIMS, "j long, k long, w double"),
    }


def _group(k: int, keep: Any = lambda r: True) -> list[int]:
    return [r[0] for r in FACTS if r[1] == k and keep(r)]


def _cells(rows: list[int], *cols: str) -> list[tuple[int, str]]:
    return [(i, c) for i in rows for c in cols]


def test_aggregates_picks_counts_and_literals(frames: dict[str, Any]) -> None:
    # rows: groupBy sum/mean (contributing: the group's values), max/min (the picked cells,
    # every tied one; considered: the group), count(*) (considered only), a literal column
    # (the row's considered lineage), a filter's predicate cells (considered)
    def fn(f: Any) -> Any:
        g = f.filter(F.col("id") < 5).groupBy("k")
        out = g.agg(
            F.sum("v").alias("s"),
            F.max("v").alias("mx"),
            F.min("v").alias("mn"),
            F.count("*").alias("n"),
        )
        return out.withColumn("one", F.lit(1)).orderBy("k")

    cap = capture_frames(fn, {"f": frames["f"]})
    kept = [r for r in FACTS if r[0] < 5]

    def members(row: dict[str, Any]) -> list[int]:
        return _group(row["k"], lambda r: r[0] < 5)

    def picked(row: dict[str, Any], best: Any) -> list[int]:
        vals = [r[2] for r in kept if r[1] == row["k"]]
        return [r[0] for r in kept if r[1] == row["k"] and r[2] == best(vals)]

    contrib = {
        "k": lambda r: _cells(members(r), "k"),
        "s": lambda r: _cells(members(r), "v"),
        "mx": lambda r: _cells(picked(r, max), "v"),
        "mn": lambda r: _cells(picked(r, min), "v"),
        "n": lambda r: [],
        "one": lambda r: [],
    }
    assert_lineage(cap, "f", lambda r, c: contrib[c](r))
    # considered: every column considers the group's keys and the filter's cells; the
    # aggregates their group's values too (a pick compared them all)
    consid = {c: ("k", "id") if c in ("k", "n", "one") else ("k", "id", "v") for c in contrib}
    assert_lineage(cap, "f", lambda r, c: _cells(members(r), *consid[c]), considered=True)
