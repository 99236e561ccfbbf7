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
from semantics_data import DIMS, FACTS

from dslog_dagster.spark import ROW_ID, capture_frames


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
            F.count("v").alias("nv"),
            (F.max("v") + 1).alias("mx1"),
            (F.max("v") - F.min("v")).alias("spread"),
            (F.max("v") + F.sum("id")).alias("mxs"),
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
        # a pick inside an expression still passes only the picked cells; what the
        # expression reads outside it passes its whole group
        "mx1": lambda r: _cells(picked(r, max), "v"),
        "spread": lambda r: sorted({*_cells(picked(r, max), "v"), *_cells(picked(r, min), "v")}),
        "mxs": lambda r: sorted({*_cells(picked(r, max), "v"), *_cells(members(r), "id")}),
        "n": lambda r: [],
        "nv": lambda r: [],
        "one": lambda r: [],
    }
    assert_lineage(cap, "f", lambda r, c: contrib[c](r))
    # considered: every column considers the group's keys and the filter's cells; the
    # aggregates their group's values too (a pick compared them all)
    consid = {c: ("k", "id") if c in ("k", "n", "one") else ("k", "id", "v") for c in contrib}
    assert_lineage(cap, "f", lambda r, c: _cells(members(r), *consid[c]), considered=True)


def test_windows_ranks_and_offsets(frames: dict[str, Any]) -> None:
    # rows: row_number (considered only: the partition and order cells of the rows at or
    # above), lag (the read row's value contributing; the read row's and the current row's
    # partition and order cells considered: a partition's first row reads nothing)
    def fn(f: Any) -> Any:
        w = Window.partitionBy("k").orderBy("id")
        return f.select(
            "id", "k", F.row_number().over(w).alias("rn"), F.lag("v").over(w).alias("prev")
        )

    cap = capture_frames(fn, {"f": frames["f"]})

    def before(row: dict[str, Any]) -> list[int]:
        return [i for i in _group(row["k"]) if i < row["id"]]

    def prev(row: dict[str, Any]) -> list[int]:
        return before(row)[-1:]

    contrib = {
        "id": lambda r: [(r["id"], "id")],
        "k": lambda r: [(r["id"], "k")],
        "rn": lambda r: [],
        "prev": lambda r: _cells(prev(r), "v"),
    }
    assert_lineage(cap, "f", lambda r, c: contrib[c](r))
    here = lambda r: _cells([r["id"]], "k", "id")  # noqa: E731
    consid = {
        **contrib,
        "rn": lambda r: _cells([*before(r), r["id"]], "k", "id"),
        "prev": lambda r: sorted({*here(r), *_cells(prev(r), "v", "k", "id")}),
    }
    assert_lineage(cap, "f", lambda r, c: consid[c](r), considered=True)


def test_joins_keys_and_literals(frames: dict[str, Any]) -> None:
    # rows: a USING / full-outer join key (both matched key cells contributing), a literal
    # column after a filter and a join (the row's considered lineage), join keys considered
    def fn(f: Any, d: Any) -> Any:
        a = f.filter(F.col("v") > 2).select("id", "k")
        return a.join(d, "k", "full").withColumn("flag", F.lit(True)).orderBy("k")

    cap = capture_frames(fn, frames)
    left = {r[0]: r for r in FACTS if r[2] > 2}

    def lrows(row: dict[str, Any]) -> list[int]:
        return [row["id"]] if row["id"] is not None else []

    def rrows(row: dict[str, Any]) -> list[int]:
        return [row["j"]] if row["j"] is not None else []

    def row_f(row: dict[str, Any]) -> list[tuple[int, str]]:  # what decided the row, in f
        return _cells(lrows(row), "k", "v")

    f_contrib = {"k": lambda r: _cells(lrows(r), "k"), "id": lambda r: _cells(lrows(r), "id")}
    assert_lineage(cap, "f", lambda r, c: f_contrib.get(c, lambda r: [])(r))
    d_contrib = {
        "k": lambda r: _cells(rrows(r), "k"),
        "j": lambda r: _cells(rrows(r), "j"),
        "w": lambda r: _cells(rrows(r), "w"),
    }
    assert_lineage(cap, "d", lambda r, c: d_contrib.get(c, lambda r: [])(r))
    # considered: the join keys of both rows (and the left filter's cells) on every column
    assert_lineage(
        cap,
        "f",
        lambda r, c: sorted({*row_f(r), *f_contrib.get(c, lambda r: [])(r)}),
        considered=True,
    )
    assert_lineage(
        cap,
        "d",
        lambda r, c: sorted({*_cells(rrows(r), "k"), *d_contrib.get(c, lambda r: [])(r)}),
        considered=True,
    )
    assert {r["id"] for r in cap.frame_with_row_id.collect()} == {*left, None}


def test_semi_and_anti_joins(frames: dict[str, Any]) -> None:
    # rows: semi join (the row's and its matches' key cells considered), anti join (the key
    # cells of every right row considered), a literal column on each (the row's considered)
    def fn(f: Any, d: Any) -> Any:
        semi = f.join(d, "k", "semi").withColumn("tag", F.lit("semi"))
        anti = f.join(d, "k", "anti").withColumn("tag", F.lit("anti"))
        return semi.union(anti).select("id", "k", "tag").orderBy("id")

    cap = capture_frames(fn, frames)
    dim_rows = {k: [r[0] for r in DIMS if r[1] == k] for k in range(4)}

    def right(row: dict[str, Any]) -> list[int]:
        return dim_rows[row["k"]] if row["tag"] == "semi" else [r[0] for r in DIMS]

    own = {"id": "id", "k": "k"}
    assert_lineage(cap, "f", lambda r, c: _cells([r["id"]], own[c]) if c in own else [])
    assert_lineage(cap, "d", lambda r, c: [])
    assert_lineage(
        cap,
        "f",
        lambda r, c: sorted({(r["id"], "k"), *_cells([r["id"]], own.get(c, "k"))}),
        considered=True,
    )
    assert_lineage(cap, "d", lambda r, c: _cells(right(r), "k"), considered=True)


def test_top_k_and_pivot(frames: dict[str, Any]) -> None:
    # rows: orderBy + limit (a row considers the sort cells of every row ranked at or above
    # it), pivot (a cell from its group's rows with its pivot value; every cell, an empty one
    # too, considers the group's keys and pivot cells)
    def top(f: Any) -> Any:
        return f.orderBy(F.col("v").desc(), "id").limit(3).select("id", "v")

    cap = capture_frames(top, {"f": frames["f"]})
    ranked = [r[0] for r in sorted(FACTS, key=lambda r: (-r[2], r[0]))][:3]
    assert [r["id"] for r in cap.frame_with_row_id.orderBy(ROW_ID).collect()] == ranked
    own = {"id": "id", "v": "v"}
    assert_lineage(cap, "f", lambda r, c: [(r["id"], own[c])])

    def above(row: dict[str, Any]) -> list[int]:
        return ranked[: ranked.index(row["id"]) + 1]

    assert_lineage(
        cap,
        "f",
        lambda r, c: sorted({(r["id"], own[c]), *_cells(above(r), "v", "id")}),
        considered=True,
    )

    def pivot(f: Any) -> Any:
        aggs = (F.sum("v").alias("s"), F.max("v").alias("m"))
        return f.groupBy("k").pivot("p", ["a", "b"]).agg(*aggs).orderBy("k")

    cap = capture_frames(pivot, {"f": frames["f"]})
    rows_of = {c: (lambda r, c=c: _group(r["k"], lambda x: x[3] == c)) for c in ("a", "b")}

    def top_of(row: dict[str, Any], c: str) -> list[int]:
        vals = {r[0]: r[2] for r in FACTS if r[0] in rows_of[c](row)}
        return [i for i, x in vals.items() if x == max(vals.values())] if vals else []

    contrib = {
        "k": lambda r: _cells(_group(r["k"]), "k"),
        **{f"{c}_s": (lambda r, c=c: _cells(rows_of[c](r), "v")) for c in ("a", "b")},
        # a max in a pivot picks among the group's rows with the cell's pivot value
        **{f"{c}_m": (lambda r, c=c: _cells(top_of(r, c), "v")) for c in ("a", "b")},
    }
    assert_lineage(cap, "f", lambda r, c: contrib[c](r))

    def compared(row: dict[str, Any], c: str) -> list[tuple[int, str]]:
        return [] if c == "k" else _cells(rows_of[c[0]](row), "v")

    assert_lineage(
        cap,
        "f",
        lambda r, c: sorted({*compared(r, c), *contrib[c](r), *_cells(_group(r["k"]), "k", "p")}),
        considered=True,
    )
