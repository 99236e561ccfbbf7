"""Aggregations carry row ids as checked ranges (``lo..hi``) or as lists: same lineage.

``capture_frames(aggregate="auto")`` summarises each group's ids with hash aggregates and
falls back to lists when the summary is not provably exact; ``aggregate="lists"`` always
collects. Each case checks the ranges path against a brute-force reference (ids propagated
by hand) and against the lists path, and whether the fallback ran — including the traps where
a range would be wrong: a join that repeats rows so a group's ids have duplicates *and* gaps
with ``count == hi - lo + 1``, explode, and aggregations over aggregations.

Where the id tap runs (a local master), a tapped aggregation takes every group's ids from the
tap and computes no ranges (``tests/spark/test_idtap.py``), so the captures here run without
the tap, as on a cluster; :func:`both` also runs each case with the tap and checks that it
gives the same lineage.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from frame_reference import assert_lineage, output_rows, same_lineage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Window
from pyspark.sql import functions as F
from strategies import interval_lineage

import dslog_dagster.spark.capture as capture_module
from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.spark import ROW_ID, capture_frames
from dslog_dagster.spark.lineage import _compress_partition
from dslog_dagster.spark.rowid import MID, PART_BITS

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


_TAP_READY = capture_module.tap_ready


@pytest.fixture(autouse=True)
def no_tap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges, not the tap (see the module docstring)."""
    monkeypatch.setattr(capture_module, "tap_ready", lambda spark: False)


@contextlib.contextmanager
def tap_on() -> Iterator[None]:
    off = capture_module.tap_ready
    capture_module.tap_ready = _TAP_READY
    try:
        yield
    finally:
        capture_module.tap_ready = off


def both(fn: Any, frames: Any) -> tuple[Any, Any]:
    """The capture in auto mode and in lists mode; their relations must be equal, and those
    of the capture with the tap (returned: the one without).

    The runs have different plans, so an output without an order (a join after a shuffle)
    may number its rows differently: distinct rows are matched by their values and the lists
    capture's relations renumbered before comparing."""
    auto = capture_frames(fn, frames)
    with tap_on():
        tapped = capture_frames(fn, frames)
    lists = capture_frames(fn, frames, aggregate="lists")
    same_lineage(auto, lists)
    same_lineage(tapped, lists)
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
    # sorted keys: ranges are exact, one pass; scattered: checked, found inexact, and the
    # failed groups' ids joined from the aggregation's input (no rerun)
    assert "retried_with_lists" not in auto.timings
    assert auto.timings.get("refetched_rows", 0) == (4 if case == "scattered" else 0)
    groups = {k: [i for i, kk, _ in data if kk == k] for k in range(4)}
    # count(*) has no contributing cell; the USING key is contributed by both key cells
    src = {"k": ["k"], "t": ["v"], "n": []}
    assert_lineage(auto, "f", lambda r, c: [(i, s) for i in groups[r["k"]] for s in src[c]])
    assert_lineage(
        auto,
        "d",
        lambda r, c: [(r["k"], s) for s in {"t": ["w"], "n": [], "k": ["key"]}[c]],
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
    # group A fails the check for both slots (a's ids repeat, b's vary with them): refetched
    assert "retried_with_lists" not in cap.timings
    assert cap.timings["refetched_rows"] == 2
    groups = {"A": [0, 2], "B": [1]}
    # count(*) is made by the group's rows: no contributing cell; it considers their key g,
    # and j, which joined them
    src = {"g": ["g"], "count": []}
    assert_lineage(cap, "a", lambda r, c: [(i, s) for i in groups[r["g"]] for s in src[c]])
    assert_lineage(
        cap, "a", lambda r, c: [(i, s) for i in groups[r["g"]] for s in ("g", "j")], considered=True
    )


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
        # (a sum: a max's picks are collected as lists, see test_semantics_table.py)
        g = f.groupBy("k").agg(F.sum("v").alias("m"))
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


# groups 0 and 1 are ranges; 2 = {6, 8, 10} and 3 = {7, 9, 11} have count 3 < span 5
MIXED = [(i, k, float(i)) for i, k in enumerate([0, 0, 0, 1, 1, 1, 2, 3, 2, 3, 2, 3])]


def test_mixed_range_and_scattered_groups(spark: Any, dims: Any) -> None:
    facts = frame(spark, MIXED, "id long, k long, v double")
    cap, _ = both(join_agg, {"f": facts, "d": dims})
    # only the two scattered groups are joined back; the others keep their ranges
    assert "retried_with_lists" not in cap.timings
    assert cap.timings["refetched_rows"] == 2
    groups = {k: [i for i, kk, _ in MIXED if kk == k] for k in range(4)}
    src = {"k": ["k"], "t": ["v"], "n": []}  # count(*): considered only
    assert_lineage(cap, "f", lambda r, c: [(i, s) for i in groups[r["k"]] for s in src[c]])


def test_refetch_with_null_and_composite_keys_and_no_keys(spark: Any) -> None:
    rows = [(i, None if i % 3 == 0 else i % 2, "x" if i < 5 else "y", float(i)) for i in range(10)]
    x = frame(spark, rows, "id long, a long, b string, v double")

    def composite(x: Any) -> Any:  # (a, b) with null a: nulls group together
        return x.groupBy("a", "b").agg(F.sum("v").alias("s")).orderBy("a", "b")

    cap, _ = both(composite, [x])
    assert cap.timings.get("refetched_rows", 0) > 0
    want: dict[Any, list[int]] = {}
    for i, a, b, _ in rows:
        want.setdefault((a, b), []).append(i)
    assert_lineage(
        cap, 0, lambda r, c: [(i, "v" if c == "s" else c) for i in want[(r["a"], r["b"])]]
    )

    def expression_key(x: Any) -> Any:  # a computed key; ids of each parity are scattered
        return x.groupBy((F.col("id") % 2).alias("p")).agg(F.sum("v").alias("m")).orderBy("p")

    cap2, _ = both(expression_key, [x])
    assert cap2.timings["refetched_rows"] == 2
    parity = {p: [i for i, *_ in rows if i % 2 == p] for p in (0, 1)}
    assert_lineage(cap2, 0, lambda r, c: [(i, "id" if c == "p" else "v") for i in parity[r["p"]]])

    def no_keys(x: Any) -> Any:  # one group: the even rows
        return x.filter(F.col("id") % 2 == 0).agg(F.sum("v").alias("s"))

    cap3, _ = both(no_keys, [x])
    assert cap3.timings["refetched_rows"] == 1
    assert_lineage(cap3, 0, lambda r, c: [(i, "v") for i in parity[0]])


def test_refetch_for_rows_repeated_after_the_aggregate_and_without_staging(
    spark: Any, scattered_facts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two rows per key on the right: every group's output row appears twice
    twice = frame(spark, [(i, i // 2) for i in range(8)], "rid long, key long")

    def f(x: Any, t: Any) -> Any:
        g = x.groupBy("k").agg(F.sum("v").alias("s"))
        return g.join(t, g.k == t.key).select("k", "s", "rid").orderBy("rid")

    groups = {k: [i for i, kk, _ in SCATTERED if kk == k] for k in range(4)}
    src = {"k": "k", "s": "v"}
    for staged in (True, False):
        if not staged:  # the pass caches the output and compresses it read back
            import dslog_dagster.spark.capture as capture_module

            monkeypatch.setattr(capture_module, "_staging_for", lambda *a: None)
        cap, lists = both(f, {"x": scattered_facts, "t": twice})
        assert (cap._staged is not None) == staged
        assert cap.timings["refetched_rows"] == 8  # 4 groups, each on two output rows
        assert_lineage(
            cap, "x", lambda r, c: [(i, src[c]) for i in groups[r["k"]]] if c in src else []
        )
        cap.release()
        lists.release()


def test_nondeterministic_keys_are_not_refetched(scattered_facts: Any) -> None:
    # keys computed again would differ: the capture reruns with lists instead of joining
    def f(x: Any) -> Any:
        g = x.withColumn("r", (F.rand(7) * 2).cast("int") + F.col("k") * 0)
        return g.groupBy("r").agg(F.sum("v").alias("s")).orderBy("r")

    cap = capture_frames(f, [scattered_facts])
    assert "refetched_rows" not in cap.timings
    rows = output_rows(cap)
    rel = cap.relation(0)
    # every input row is in exactly one group; each group's lineage names its own rows
    owners: dict[int, set[int]] = {}
    for o, j, r, c in rel.pairs().tolist():
        if cap.columns[j] == "s" and c == 2:  # s ← v (input column 2)
            owners.setdefault(r, set()).add(o)
    assert sorted(owners) == list(range(len(SCATTERED)))
    assert all(len(v) == 1 for v in owners.values())
    assert len(rows) == len({o for v in owners.values() for o in v})


def test_refetch_float_keys_group_like_spark(spark: Any) -> None:
    # -0.0 and 0.0 are one group (keys compared null-safely after Spark's normalisation, not
    # by hash); nulls another
    vals = [0.0, 2.5, -0.0, 1.5, 2.5, 0.0, None, 1.5, None]
    x = frame(spark, [(i, v, float(i)) for i, v in enumerate(vals)], "id long, f double, v double")

    def f(x: Any) -> Any:
        return x.groupBy("f").agg(F.sum("v").alias("s")).orderBy("f")

    cap, _ = both(f, [x])
    assert cap.timings.get("refetched_rows", 0) > 0
    assert len(output_rows(cap)) == 4  # null, 0.0, 1.5, 2.5

    def members(key: Any) -> list[int]:
        return [i for i, v in enumerate(vals) if (v is None) == (key is None) and v == key]

    assert_lineage(cap, 0, lambda r, c: [(i, "v" if c == "s" else "f") for i in members(r["f"])])


def test_ranged_and_refetched_groups_interleave(spark: Any, tmp_path: Any) -> None:
    """Singleton groups pass the range check, scattered groups are refetched, and their output
    rows interleave: the united row table is exact and (columnar) sorted, the cell lineage is
    stored factored, and queries on the store equal queries on the multiplied-out product."""
    import numpy as np

    from dslog_dagster.core.api import DSLog
    from dslog_dagster.core.combine import concat_tables, product_table
    from dslog_dagster.core.query import CellSet, prepare

    rng = np.random.default_rng(3)
    keys = np.empty(60, np.int64)
    keys[:30] = rng.permutation(30) * 2  # one row each: a range lo == hi
    keys[30:] = rng.permutation(np.arange(30) % 6) * 2 + 1  # six keys over scattered rows
    rows = [(i, int(keys[i]), float(i)) for i in range(60)]
    facts = frame(spark, rows, "id long, k long, v double").repartition(3)

    def fn(f: Any) -> Any:
        return f.groupBy("k").agg(F.sum("v").alias("t")).orderBy("k")

    auto, _ = both(fn, {"f": facts})
    assert auto.timings["refetched_rows"] == 6
    groups = {k: [i for i, kk, _ in rows if kk == k] for k in set(keys.tolist())}
    assert_lineage(
        auto,
        "f",
        lambda r, c: [(i, s) for i in groups[r["k"]] for s in {"k": ["k"], "t": ["v"]}[c]],
    )
    table = auto.table("f")
    assert table.stored_encoding == "factored"
    ((row_table, _),) = table.factors
    if row_table.encoding == "columnar":
        assert np.array_equal(np.lexsort(row_table.raw[::-1]), np.arange(row_table.rows))
    log = DSLog(tmp_path / "store")
    op = auto.register(log, "out", op_name="agg")
    stored = log.store.read_lineage(op, "out", "f")
    assert stored.factors
    assert [t.encoding for t in op.tables] == ["factored"]
    product = prepare(concat_tables([product_table(r, c) for r, c in table.factors]))
    for o in range(auto.n_rows):
        for col in range(2):
            cells = CellSet.from_indices(auto.shape, [(o, col)])
            assert log.prov_query(["out", "f"], cells) == product.run(cells, "backward")


def test_frame_joined_with_its_own_scattered_aggregate_is_refetched_not_rerun(
    scattered_facts: Any,
) -> None:
    """``f.join(f.groupBy(k).agg(...), k)`` (normalise by the group total): a cell of the
    joined total reads two slots of ``f`` — its own row and its group. Each slot is its own
    group in the pass, the scattered aggregate's ids are refetched, and the cell gets the
    exact union; the step function is not run again with lists (it was)."""

    def fn(f: Any) -> Any:
        totals = f.groupBy("k").agg(F.sum("v").alias("tot"))
        return f.join(totals, "k").withColumn("share", F.col("v") / F.col("tot"))

    auto, _ = both(fn, {"f": scattered_facts})
    assert "retried_with_lists" not in auto.timings
    assert auto.timings["refetched_rows"] > 0
    groups = {k: [i for i, kk, _ in SCATTERED if kk == k] for k in range(4)}

    def rule(r: dict[str, Any], c: str) -> list[tuple[int, str]]:
        if c == "k":  # the using-join key: both matched key cells (the row's, its group's)
            return [(r["id"], "k"), *[(i, "k") for i in groups[r["k"]]]]
        if c in ("id", "v"):
            return [(r["id"], c)]
        group = [(i, "v") for i in groups[r["k"]]]
        return group if c == "tot" else [(r["id"], "v"), *group]

    assert_lineage(auto, "f", rule)


@pytest.mark.parametrize("combine", ["union", "join"])
def test_two_aggregations_of_one_input_keep_their_own_groups(spark: Any, combine: str) -> None:
    # both aggregations summarise the same input slot; each one's scattered groups must be
    # found again in its own input (the filtered one leaves rows out)
    x = frame(spark, MIXED, "id long, k long, v double")

    def f(x: Any) -> Any:
        a = x.filter("v > 6").groupBy("k").agg(F.sum("v").alias("s"))
        b = x.groupBy("k").agg(F.count("*").alias("s"))
        if combine == "union":
            return a.union(b)
        return a.join(b.withColumnRenamed("s", "t"), "k")

    cap, _ = both(f, [x])
    assert "retried_with_lists" not in cap.timings
    assert cap.timings.get("refetched_rows", 0) > 0
    rows = output_rows(cap)
    kept = {k: [i for i, kk, v in MIXED if kk == k and v > 6] for k in range(4)}
    every = {k: [i for i, kk, _ in MIXED if kk == k] for k in range(4)}
    if combine == "union":
        # rows 0..(len(a) - 1) come from a; the rest from b
        n_a = sum(1 for ids in kept.values() if ids)
        first = {r[ROW_ID]: r[ROW_ID] < n_a for r in rows}

        def rule(r: Any, c: str) -> list[tuple[int, str]]:
            ids = kept[r["k"]] if first[r[ROW_ID]] else every[r["k"]]
            if c == "s" and not first[r[ROW_ID]]:  # count(*): no contributing cell
                return []
            return [(i, "k" if c == "k" else "v") for i in ids]

        assert_lineage(cap, 0, rule)
    else:
        src = {"k": ["k"], "s": ["v"], "t": []}  # t: count(*), considered only

        def rule2(r: Any, c: str) -> list[tuple[int, str]]:
            # the USING key k: both matched key cells (a's group and b's group)
            ids = every[r["k"]] if c == "k" else kept[r["k"]]
            return [(i, s) for i in ids for s in src[c]]

        assert_lineage(cap, 0, rule2)


def test_an_aggregate_joined_with_itself(scattered_facts: Any) -> None:
    # both sides carry the same range slots and summary columns: the right side's are renamed
    # (with their fields) and each side's scattered groups are found again on their own
    def fn(f: Any) -> Any:
        a = f.groupBy("k").agg(F.sum("v").alias("s"))
        b = a.withColumnRenamed("s", "t").withColumn("k2", (F.col("k") + 1) % 4).drop("k")
        return a.join(b, a.k == b.k2)

    auto, _ = both(fn, {"f": scattered_facts})
    assert "retried_with_lists" not in auto.timings
    assert auto.timings["refetched_rows"] > 0
    groups = {k: [i for i, kk, _ in SCATTERED if kk == k] for k in range(4)}

    def rule(r: dict[str, Any], c: str) -> list[tuple[int, str]]:
        if c in ("k", "s"):
            return [(i, "k" if c == "k" else "v") for i in groups[r["k"]]]
        return [(i, "k" if c == "k2" else "v") for i in groups[(r["k2"] - 1) % 4]]

    assert_lineage(auto, "f", rule)


def _range_piece(pid: int, case: Any, rng: np.random.Generator) -> tuple[pa.Table, list[Any]]:
    """Staged rows of one marked partition with a range slot ``g0`` and a scalar slot ``g1``,
    and per row its (local row, lo, hi, ok): rows in the gaps have no ids (null ``lo``), some
    rows' ``ok`` is false (their ids are refetched) or null (counts as true)."""
    _, _, out_rows, lo, hi = case
    n_local = (int(out_rows.max()) + 1 if len(out_rows) else 0) + 1
    lo_all: list[int | None] = [None] * n_local
    hi_all: list[int | None] = [None] * n_local
    for o, a, b in zip(out_rows.tolist(), lo.tolist(), hi.tolist(), strict=True):
        lo_all[o], hi_all[o] = a, b
    ok = [None if x < 0.2 else bool(x > 0.3) for x in rng.random(n_local)]
    order = rng.permutation(n_local)
    table = pa.table(
        {
            MID: pa.array([(pid << PART_BITS) | int(i) for i in order], pa.int64()),
            "g0": pa.StructArray.from_arrays(
                [
                    pa.array([lo_all[i] for i in order], pa.int64()),
                    pa.array([hi_all[i] for i in order], pa.int64()),
                    pa.array([ok[i] for i in order], pa.bool_()),
                ],
                names=["lo", "hi", "ok"],
            ),
            "g1": pa.array([lo_all[i] for i in order], pa.int64()),
        }
    )
    return table, [(i, lo_all[i], hi_all[i], ok[i]) for i in range(n_local)]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cases=st.lists(interval_lineage(), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_partition_range_tables_are_the_spelled_out_pairs(cases: list[Any], seed: int) -> None:
    # a staged file holding pieces of several marked partitions, rows in any order: each
    # piece's range table (built from the intervals) is the pairs the old path wrote out
    # and compressed, and the failed rows are counted as before
    rng = np.random.default_rng(seed)
    n_in = max(c[1] for c in cases)
    pieces = [_range_piece(pid, c, rng) for pid, c in enumerate(cases)]
    whole = pa.concat_tables([t for t, _ in pieces])
    got = _compress_partition(whole, ["range", "scalar"], [n_in, n_in], False).to_pylist()
    for pid, (_, rows) in enumerate(pieces):
        n_local = len(rows)
        header, g0, g1 = (r for r in got if r["pid"] == pid)
        assert (header["g"], header["n"], header["bad"]) == (-1, n_local, 0)
        kept = [(o, a, b) for o, a, b, ok in rows if a is not None and ok is not False]
        pairs = np.asarray([(o, x) for o, a, b in kept for x in range(a, b + 1)], np.int64).reshape(
            -1, 2
        )
        want = LineageRelation.from_columns(
            (n_local,), (n_in,), [pairs[:, 0]], [pairs[:, 1]]
        ).unique()
        table = table_from_blob(g0["blob"])
        assert (g0["g"], g0["n"]) == (0, n_local)
        assert table.decompress() == want
        assert g0["bad"] == sum(a is not None and ok is False for _, a, _, ok in rows)
        if not (table.encoding == "provrc" and table.rows * 16 <= table.n_pairs):
            # where the direct table does not clearly pay, the old path's table is stored
            assert g0["blob"] == table_to_blob(compress(want, threads=1))
        scalar = np.asarray([(o, a) for o, a, _, _ in rows if a is not None], np.int64)
        want1 = LineageRelation.from_columns(
            (n_local,), (n_in,), [scalar.reshape(-1, 2)[:, 0]], [scalar.reshape(-1, 2)[:, 1]]
        )
        assert table_from_blob(g1["blob"]).decompress() == want1.unique()
