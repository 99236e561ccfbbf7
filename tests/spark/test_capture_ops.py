"""Every supported DataFrame operation against a brute-force, hand-propagated reference."""

from typing import Any

import pytest
from frame_reference import assert_lineage, output_rows
from pyspark.sql import Window
from pyspark.sql import functions as F

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.spark import ROW_ID, capture_frames

PEOPLE = [
    (0, "a", 1.0, 10),
    (1, "a", 2.0, None),
    (2, "b", None, 30),
    (3, "c", 4.0, 40),
    (4, "b", 5.0, 50),
    (5, "a", 6.0, 60),
]
CITIES = [(0, "a", "Rome"), (1, "b", "Oslo"), (2, "a", "Lima"), (3, "d", "Kiev")]


@pytest.fixture(scope="module")
def people(spark: Any) -> Any:
    df = spark.createDataFrame(PEOPLE, "id long, g string, v double, w long")
    return df.withColumn(ROW_ID, F.col("id"))


@pytest.fixture(scope="module")
def cities(spark: Any) -> Any:
    df = spark.createDataFrame(CITIES, "cid long, g string, city string")
    return df.withColumn(ROW_ID, F.col("cid"))


def own(cols: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    """Rule: output cell (row, col) <- the input row ``row['id']``, columns ``cols[col]``."""
    return lambda row, col: [(row["id"], c) for c in cols.get(col, [])]


def test_projection_ops_keep_rows_and_map_columns(people: Any) -> None:
    def f(p: Any) -> Any:
        x = p.select("id", "g", (F.col("v") * 2).alias("v2"), F.col("w"))
        x = x.withColumn("s", F.col("v2") + F.col("w")).withColumnRenamed("g", "grp")
        x = x.selectExpr("id", "grp", "s", "w + 1 AS w1").drop("w1")
        return x.withColumns({"k": F.lit(7), "g2": F.upper("grp")})

    cap = capture_frames(f, [people])
    assert cap.columns == ("id", "grp", "s", "k", "g2")
    rule = own({"id": ["id"], "grp": ["g"], "s": ["v", "w"], "g2": ["g"]})
    assert_lineage(cap, 0, rule)
    assert_lineage(cap, 0, rule, considered=True)
    assert cap.column_lineage["s"] == {"input0": ["v", "w"]}
    assert cap.frame.columns == list(cap.columns)  # no hidden columns for the user


@pytest.mark.parametrize("odd", ["x#3, y", "n#12L", "a, b", "(c)"])
def test_column_names_that_look_like_printed_attributes(people: Any, odd: str) -> None:
    # the plan walk reads attribute names and ids from their printed list; a name that
    # prints like an attribute (or a list separator) must not shift them
    def f(p: Any) -> Any:
        x = p.withColumnRenamed("g", odd).withColumn("vw", F.col("v") + F.col("w"))
        x = x.select("id", odd, "vw", (F.col("w") * 2).alias(odd + "2"))
        return x.groupBy(odd).agg(F.sum("vw").alias(odd + "s"), F.max(odd + "2").alias("m"))

    cap = capture_frames(f, [people])
    assert cap.columns == (odd, odd + "s", "m")
    groups: dict[str, list[int]] = {}
    for i, g, *_ in PEOPLE:
        groups.setdefault(g, []).append(i)
    src = {odd: ["g"], odd + "s": ["v", "w"], "m": ["w"]}
    w_of = {x[0]: x[3] for x in PEOPLE}

    def rule(r: dict[str, Any], c: str) -> list[tuple[int, str]]:
        rows = groups[r[odd]]
        if c == "m":  # a max passes the picked cells (the semantics table); nulls never
            best = max(w_of[j] for j in rows if w_of[j] is not None)
            rows = [i for i in rows if w_of[i] == best]
        return [(i, x) for i in rows for x in src[c]]

    assert_lineage(cap, 0, rule)


def test_filter_records_predicate_columns_as_considered(people: Any) -> None:
    cap = capture_frames(lambda p: p.filter(F.col("w") > 15).where("v IS NOT NULL"), [people])
    assert sorted(r["id"] for r in output_rows(cap)) == [3, 4, 5]
    assert_lineage(cap, 0, own({c: [c] for c in ("id", "g", "v", "w")}))
    assert_lineage(
        cap, 0, lambda r, c: [(r["id"], c), (r["id"], "w"), (r["id"], "v")], considered=True
    )


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "cross"])
def test_join_keeps_both_sides(people: Any, cities: Any, how: str) -> None:
    def f(p: Any, c: Any) -> Any:
        if how == "cross":
            return p.select("id", "v").crossJoin(c.select("cid", "city"))
        return p.join(c, "g", how)

    cap = capture_frames(f, {"p": people, "c": cities})
    p_cols = {"id", "v", "w"} | ({"g"} if how != "cross" else set())

    def rule_p(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        if row["id"] is None:
            return []
        if col == "g":  # the using-join key: both matched key cells (semantics table)
            return [(row["id"], "g")]
        return [(row["id"], col)] if col in p_cols else []

    def rule_c(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        if row["cid"] is None:
            return []
        if col == "g":
            return [(row["cid"], "g")]
        return [(row["cid"], col)] if col in {"cid", "city"} else []

    assert_lineage(cap, "p", rule_p)
    assert_lineage(cap, "c", rule_c)
    if how != "cross":

        def cons_c(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
            base = rule_c(row, col)
            return base + ([(row["cid"], "g")] if row["cid"] is not None else [])

        assert_lineage(cap, "c", cons_c, considered=True)
    expected = {"inner": 8, "left": 9, "right": 9, "full": 10, "cross": 24}[how]
    assert cap.n_rows == expected


def test_semi_join_considers_matched_rows_and_anti_join_keeps_left(
    people: Any, cities: Any
) -> None:
    cap = capture_frames(lambda p, c: p.join(c, "g", "left_semi"), {"p": people, "c": cities})
    assert sorted(r["id"] for r in output_rows(cap)) == [0, 1, 2, 4, 5]
    assert_lineage(cap, "p", own({c: [c] for c in ("id", "g", "v", "w")}))
    assert_lineage(cap, "c", lambda r, c: [])
    match = {"a": [0, 2], "b": [1]}
    assert_lineage(cap, "c", lambda r, c: [(m, "g") for m in match[r["g"]]], considered=True)
    anti = capture_frames(lambda p, c: p.join(c, "g", "left_anti"), {"p": people, "c": cities})
    assert [r["id"] for r in output_rows(anti)] == [3]
    assert_lineage(anti, "p", own({c: [c] for c in ("id", "g", "v", "w")}))


def test_self_join_keeps_sides_apart(people: Any) -> None:
    def f(p: Any) -> Any:
        right = p.select(F.col("g"), F.col("id").alias("id2"), F.col("w").alias("w2"))
        return p.select("id", "g", "v").join(right, "g")

    cap = capture_frames(f, [people])
    assert cap.n_rows == 3 * 3 + 2 * 2 + 1

    def rule(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        left = {"id": "id", "v": "v"}
        right = {"id2": "id", "w2": "w"}
        if col in left:
            return [(row["id"], left[col])]
        if col in right:
            return [(row["id2"], right[col])]
        return [(row["id"], "g"), (row["id2"], "g")]  # using-join key: both matched cells

    assert_lineage(cap, 0, rule)


def test_aliased_self_join_keeps_sides_apart(people: Any) -> None:
    """``p.alias("a").join(p.alias("b"), ...)``: the right side's slots are renamed, and the
    plan walk must not take the renamed side for the left base (both compute the same
    result); it did, and both sides' rows ended in one slot name (a duplicate column)."""

    def f(p: Any) -> Any:
        j = p.alias("a").join(p.alias("b"), F.col("a.g") == F.col("b.g"))
        return j.select(F.col("a.id"), F.col("b.id").alias("id2"), F.col("b.v").alias("v2"))

    for mode in ("auto", "lists"):
        cap = capture_frames(f, [people], aggregate=mode)
        assert cap.n_rows == 3 * 3 + 2 * 2 + 1
        cols = {"id": ("id", "id"), "id2": ("id2", "id"), "v2": ("id2", "v")}

        def rule(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
            side, source = cols[col]  # noqa: B023
            return [(row[side], source)]

        assert_lineage(cap, 0, rule)

        def considered(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
            return [*rule(row, col), (row["id"], "g"), (row["id2"], "g")]

        assert_lineage(cap, 0, considered, considered=True)


def test_groupby_agg_collects_the_group(people: Any) -> None:
    def f(p: Any) -> Any:
        return p.groupBy("g").agg(
            F.sum("v").alias("sv"),
            F.count("*").alias("n"),
            F.avg("w").alias("aw"),
            F.min("v").alias("mn"),
            F.max("w").alias("mx"),
            F.collect_list("id").alias("ids"),
        )

    cap = capture_frames(f, [people])
    groups = {"a": [0, 1, 5], "b": [2, 4], "c": [3]}
    src = {"g": ["g"], "sv": ["v"], "n": [], "aw": ["w"], "mn": ["v"], "mx": ["w"]}
    src["ids"] = ["id"]
    val = {x[0]: {"v": x[2], "w": x[3]} for x in PEOPLE}

    def rule(r: dict[str, Any], c: str) -> list[tuple[int, str]]:
        rows = groups[r["g"]]
        if c in ("mn", "mx"):  # picks: the cells equal to the result, every tied one
            col, best = {"mn": ("v", min), "mx": ("w", max)}[c]
            vals = [val[i][col] for i in rows if val[i][col] is not None]
            rows = [i for i in rows if vals and val[i][col] == best(vals)]
        return [(i, s) for i in rows for s in src[c]]

    assert_lineage(cap, 0, rule)
    assert_lineage(
        cap,
        0,
        lambda r, c: [(i, s) for i in groups[r["g"]] for s in {*src[c], "g"}],
        considered=True,
    )


@pytest.mark.parametrize("key", ["g", "G", "s.g", "`g`"])
def test_group_keys_named_every_way(people: Any, key: str) -> None:
    # a plain column name takes its type from the frame; a name in another case, a struct
    # field and a quoted name are resolved by Spark (a probe plan). Group "a" holds rows
    # 0, 1, 5: not a range, so its ids are found again by those keys
    def f(p: Any) -> Any:
        p = p.withColumn("s", F.struct(F.col("g").alias("g")))
        return p.groupBy(key).agg(F.sum("v").alias("sv"))

    cap = capture_frames(f, [people])
    groups = {"a": [0, 1, 5], "b": [2, 4], "c": [3]}
    name = cap.columns[0]
    assert_lineage(cap, 0, lambda r, c: [(i, "v" if c == "sv" else "g") for i in groups[r[name]]])


def test_global_aggregate_and_shortcuts(people: Any) -> None:
    cap = capture_frames(
        lambda p: p.select(F.sum("w").alias("t"), F.count("*").alias("n")), [people]
    )
    assert cap.n_rows == 1
    every = ["id", "g", "v", "w"]
    # count(*) has no contributing cell; without group keys it considers every cell
    assert_lineage(cap, 0, lambda r, c: [(i, "w") for i in range(6)] if c == "t" else [])
    assert_lineage(
        cap,
        0,
        lambda r, c: (
            [(i, "w") for i in range(6)] if c == "t" else [(i, x) for i in range(6) for x in every]
        ),
        considered=True,
    )
    cnt = capture_frames(lambda p: p.groupBy("g").count(), [people])
    groups = {"a": [0, 1, 5], "b": [2, 4], "c": [3]}
    assert_lineage(cnt, 0, lambda r, c: [(i, "g") for i in groups[r["g"]]] if c == "g" else [])
    assert_lineage(cnt, 0, lambda r, c: [(i, "g") for i in groups[r["g"]]], considered=True)


def test_union_distinct_and_drop_duplicates(people: Any, cities: Any) -> None:
    def f(p: Any, c: Any) -> Any:
        return p.select("g").union(c.select("g")).distinct()

    cap = capture_frames(f, {"p": people, "c": cities})
    assert sorted(r["g"] for r in output_rows(cap)) == ["a", "b", "c", "d"]
    assert_lineage(cap, "p", lambda r, c: [(x[0], "g") for x in PEOPLE if x[1] == r["g"]])
    assert_lineage(cap, "c", lambda r, c: [(x[0], "g") for x in CITIES if x[1] == r["g"]])

    by_name = capture_frames(
        lambda p, c: p.select("g", "id").unionByName(c.select(F.col("cid").alias("id"), "g")),
        {"p": people, "c": cities},
    )
    assert by_name.n_rows == 10
    assert by_name.columns == ("g", "id")

    dd = capture_frames(lambda p: p.dropDuplicates(["g"]), [people])
    groups = {"a": [0, 1, 5], "b": [2, 4], "c": [3]}
    assert_lineage(
        dd, 0, lambda r, c: [(i, "g") for i in groups[r["g"]]] if c == "g" else [(r["id"], c)]
    )


def test_order_by_and_limit(people: Any) -> None:
    cap = capture_frames(lambda p: p.orderBy(F.col("id").desc()).limit(3), [people])
    rows = output_rows(cap)
    assert [r["id"] for r in rows] == [5, 4, 3]  # row ids follow the sort order
    assert_lineage(cap, 0, own({c: [c] for c in ("id", "g", "v", "w")}))


def test_missing_value_ops(people: Any) -> None:
    def f(p: Any) -> Any:
        x = p.fillna({"v": 0.0}).na.fill(-1, subset=["w"]).replace("c", "z", subset=["g"])
        return x.dropna(subset=["v"]).na.drop(how="all")

    cap = capture_frames(f, [people])
    assert cap.n_rows == 6
    assert [r["w"] for r in output_rows(cap)][1] == -1
    # a filled or replaced cell is set to a literal: no contributing cell (its old cell is
    # considered); the other cells are contributed by themselves
    changed = {(1, "w"), (2, "v"), (3, "g")}
    assert_lineage(cap, 0, lambda r, c: [] if (r["id"], c) in changed else [(r["id"], c)])
    # na.drop(how="all") checked every cell of the row
    every = ("id", "g", "v", "w")
    assert_lineage(cap, 0, lambda r, c: [(r["id"], x) for x in every], considered=True)


def test_pivot(people: Any) -> None:
    cap = capture_frames(
        lambda p: p.groupBy("g").pivot("w", [10, 30, 60]).agg(F.sum("v")), [people]
    )
    assert cap.columns == ("g", "10", "30", "60")
    groups = {"a": [0, 1, 5], "b": [2, 4], "c": [3]}
    w_of = {x[0]: x[3] for x in PEOPLE}

    def rule(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        if col == "g":
            return [(i, "g") for i in groups[row["g"]]]
        return [(i, "v") for i in groups[row["g"]] if w_of[i] == int(col)]

    assert_lineage(cap, 0, rule)


def test_explode(people: Any) -> None:
    cap = capture_frames(
        lambda p: p.select("id", F.explode(F.array("v", F.col("w").cast("double"))).alias("x")),
        [people],
    )
    assert cap.n_rows == 12
    assert_lineage(cap, 0, own({"id": ["id"], "x": ["v", "w"]}))


def test_window_functions(people: Any) -> None:
    w = Window.partitionBy("g").orderBy("id")

    def f(p: Any) -> Any:
        return p.select(
            "id",
            F.row_number().over(w).alias("rn"),
            F.lag("v", 1).over(w).alias("lag"),
            F.lead("w", 1).over(w).alias("lead"),
            F.sum("v").over(w.rowsBetween(-1, 0)).alias("roll"),
        )

    cap = capture_frames(f, [people])
    order = {"a": [0, 1, 5], "b": [2, 4], "c": [3]}
    g_of = {x[0]: x[1] for x in PEOPLE}

    def rule(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        i = row["id"]
        part = order[g_of[i]]
        k = part.index(i)
        if col == "id":
            return [(i, "id")]
        if col == "rn":  # a rank has no contributing cell (considered: checked below)
            return []
        if col == "lag":
            return [(part[k - 1], "v")] if k >= 1 else []
        if col == "lead":
            return [(part[k + 1], "w")] if k + 1 < len(part) else []
        return [(j, "v") for j in part[max(0, k - 1) : k + 1]]

    assert_lineage(cap, 0, rule)

    def considered(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        i = row["id"]
        part = order[g_of[i]]
        k = part.index(i)
        read = {
            "id": [],
            "rn": part[: k + 1],
            "lag": part[k - 1 : k] if k >= 1 else [],
            "lead": part[k + 1 : k + 2],
            "roll": part[max(0, k - 1) : k + 1],
        }[col]
        # the rows read (their partition and order cells) and the current row's keys
        keys = [(j, x) for j in {*read, i} for x in ("g", "id")] if col != "id" else []
        return sorted({*rule(row, col), *keys})

    assert_lineage(cap, 0, considered, considered=True)


def test_unknown_operation_raises_or_is_flagged(people: Any) -> None:
    with pytest.raises(UnsupportedFrameOperationError, match="sample"):
        capture_frames(lambda p: p.sample(0.5, seed=1), [people])
    with pytest.raises(UnsupportedFrameOperationError, match="rdd"):
        capture_frames(lambda p: p.rdd, [people])
    with pytest.raises(UnsupportedFrameOperationError, match="returned a `list`"):
        capture_frames(lambda p: p.collect(), [people])
    cap = capture_frames(lambda p: p.sample(0.5, seed=1), [people], on_unknown="all_to_all")
    assert cap.flagged
    assert cap.flagged_ops == ("sample",)
    rel = cap.relation(0)
    assert rel.n == cap.n_rows * len(cap.columns) * 6 * 4


def test_inputs_without_row_ids_are_numbered(spark: Any) -> None:
    df = spark.createDataFrame([(i, i * 2) for i in range(7)], "a long, b long")
    cap = capture_frames(lambda x: x.filter("a % 2 = 0").select("b"), [df])
    assert cap.n_rows == 4
    assert [r[ROW_ID] for r in output_rows(cap)] == [0, 1, 2, 3]
    rel = cap.relation(0)
    assert sorted(rel.pairs()[:, 2].tolist()) == [0, 2, 4, 6]
    cap.release()


MIXED = [(0, "a", 3.0), (1, "A", 1.0), (2, "b", 2.0), (3, "a", 5.0), (4, "B", 4.0), (5, "c", 2.5)]


@pytest.mark.parametrize(
    "window",
    [
        pytest.param(
            lambda: Window.partitionBy(F.upper("g")).orderBy(F.col("score") * -1), id="both"
        ),
        pytest.param(lambda: Window.partitionBy(F.upper("g")).orderBy(F.desc("score")), id="part"),
        pytest.param(lambda: Window.partitionBy(F.lower("g")).orderBy(-F.col("score")), id="neg"),
    ],
)
def test_window_keys_that_are_expressions_equal_plain_spark(spark: Any, window: Any) -> None:
    """Issue 24: expression keys are aliased ``_w0``/``_w1`` by Spark's analyzer; the capture
    rebuilds the frame from the expressions (values as plain Spark, lineage by hand)."""
    df = spark.createDataFrame(MIXED, "id long, g string, score double")
    w = window()

    def f(p: Any) -> Any:
        return p.select(
            "id",
            F.row_number().over(w).alias("rn"),
            F.lag("score", 1).over(w).alias("prev"),
        )

    plain = sorted(tuple(r) for r in f(df).collect())
    cap = capture_frames(f, [df.withColumn(ROW_ID, F.col("id"))])
    assert sorted(tuple(r) for r in cap.frame.collect()) == plain
    # partitions by upper-/lower-cased group, each ordered by score descending
    order = {"A": [3, 0, 1], "B": [4, 2], "C": [5]}
    part_of = {i: order[g.upper()] for i, g, _ in MIXED}

    def rule(row: dict[str, Any], col: str) -> list[tuple[int, str]]:
        i = row["id"]
        part = part_of[i]
        k = part.index(i)
        if col == "id":
            return [(i, "id")]
        if col == "rn":  # a rank has no contributing cell, only considered ones
            return []
        return [(part[k - 1], "score")] if k >= 1 else []

    assert_lineage(cap, 0, rule)
    cap.release()
