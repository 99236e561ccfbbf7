"""Range summaries recorded where the aggregation finishes its groups (spark.summaries).

With the id tap in the session, a tapped aggregation keeps only ``lo`` and its keys in the
rows; ``hi``, ``ok`` and ``n`` are recorded per group and looked up by key when the capture
reads its output back. These tests check that the carried columns are really gone, that the
lineage equals the one with the summaries carried, with lists and with the reference, and
that every doubt (a missing file, a truncated one, two summaries for one key) makes the
capture run again carrying the summaries instead of guessing.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from frame_reference import assert_lineage
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from tap_files import summary_chunk, summary_rows

import dslog_dagster.spark.capture as capture_module
import dslog_dagster.spark.idtap as idtap
import dslog_dagster.spark.lineage as lineage_module
from dslog_dagster.spark import ROW_ID, capture_frames
from dslog_dagster.spark.plan import SLOT_PREFIX
from dslog_dagster.spark.summaries import (
    KeyIndex,
    SummariesMissing,
    read_summaries,
    read_summary_file,
    summary_chunks,
)

RNG = np.random.default_rng(11)
# 80 rows: keys 0..11, half of them clustered by id (exact ranges), half scattered, and a
# null key
KEYS = [
    None if i % 17 == 5 else (i // 8 if i < 40 else int(RNG.integers(5, 12))) for i in range(80)
]
ROWS = [(i, KEYS[i], float(i)) for i in range(80)]


@pytest.fixture(scope="module")
def facts(spark: Any) -> Any:
    df = spark.createDataFrame(ROWS, "id long, k long, v double").repartition(3, "id")
    return df.withColumn(ROW_ID, F.col("id"))


def by_key(x: Any) -> Any:
    return x.groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n")).orderBy("k")


def check_reference(cap: Any) -> None:
    want: dict[Any, list[int]] = {}
    for i, k, _ in ROWS:
        want.setdefault(k, []).append(i)
    # count(*) has no contributing cells (the semantics table: considered only)
    src: dict[str, list[str]] = {"k": ["k"], "s": ["v"], "n": []}
    assert_lineage(cap, 0, lambda r, c: [(i, f) for i in want[r["k"]] for f in src[c]])


def same_lineage(a: Any, b: Any) -> None:
    for considered in (False, True):
        assert a.relation(0, considered=considered) == b.relation(0, considered=considered)


def hidden_columns(cap: Any) -> list[str]:
    assert cap._staged is not None
    schema = pq.read_schema(
        next(
            os.path.join(cap._staged.path, n)
            for n in os.listdir(cap._staged.path)
            if n.endswith(".parquet")
        )
    )
    return [n for n in schema.names if n.startswith(SLOT_PREFIX)]


def test_only_lo_and_the_key_travel_with_the_rows(
    facts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = capture_frames(by_key, [facts])
    assert "retried_carrying_summaries" not in cap.timings
    assert cap.timings["tapped_rows"] > 0  # the scattered groups came from the tap
    # the range slot's lo and the group key: hi, ok and n were recorded, not written
    assert len(hidden_columns(cap)) == 2
    check_reference(cap)
    same_lineage(cap, capture_frames(by_key, [facts], aggregate="lists"))
    # without the tap (no recorder) they are carried: lo, hi, ok, n and the key
    monkeypatch.setattr(capture_module, "tap_ready", lambda spark: False)
    carried = capture_frames(by_key, [facts])
    assert len(hidden_columns(carried)) == 5
    same_lineage(cap, carried)


def test_summaries_spill_in_chunks_and_read_back(spark: Any, facts: Any) -> None:
    seen: list[int] = []
    real = lineage_module.read_summaries

    def chunks(directory: str) -> Any:
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            seen.extend(c for _, c, _ in summary_chunks(np.fromfile(path, np.uint8), path))
        return real(directory)

    spark.sparkContext.setLocalProperty(f"{idtap.PROPERTY}chunk", "2")
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(lineage_module, "read_summaries", chunks)
            cap = capture_frames(by_key, [facts])
    finally:
        spark.sparkContext.setLocalProperty(f"{idtap.PROPERTY}chunk", None)
    assert "retried_carrying_summaries" not in cap.timings
    assert max(seen) == 2
    # every group once, whatever stage ran it (the orderBy samples the aggregation)
    assert sum(seen) == len(set(KEYS))
    check_reference(cap)


@pytest.mark.parametrize("damage", ["remove_a_file", "truncate", "two_summaries"])
def test_doubtful_summaries_make_the_capture_carry_them(
    facts: Any, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    real = lineage_module.read_summaries

    def damaged(directory: str) -> Any:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".bin"))
        path = os.path.join(directory, names[-1])
        if damage == "remove_a_file":  # its groups have no summary
            os.remove(path)
        elif damage == "truncate":
            Path(path).write_bytes(Path(path).read_bytes()[:-8])
        else:  # another group recorded under a key present (as two colliding hashes would)
            cols = read_summary_file(path)
            cols[2][0] += 1  # one group's hi, as a second record of the key
            Path(path).write_bytes(Path(path).read_bytes() + summary_chunk(cols))
        return real(directory)

    monkeypatch.setattr(lineage_module, "read_summaries", damaged)
    cap = capture_frames(by_key, [facts])
    assert cap.timings["retried_carrying_summaries"] == 1.0
    check_reference(cap)


def test_an_aggregation_unioned_and_joined_with_itself(facts: Any) -> None:
    def step(x: Any) -> Any:
        g = x.groupBy("k").agg(F.sum("v").alias("s"))
        both = g.unionByName(x.select("k", F.col("v").alias("s")))
        return both.join(g.withColumnRenamed("s", "t"), "k", "left")

    cap = capture_frames(step, [facts])
    assert "retried_carrying_summaries" not in cap.timings
    same_lineage(cap, capture_frames(step, [facts], aggregate="lists"))


def write_summaries(path: Path, rows: list[tuple[int | None, int, int, bool, int]]) -> None:
    """A summary file of one chunk: (key, lo, hi, ok, n) per group."""
    path.write_bytes(summary_rows(rows))


def test_read_summaries_on_hand_made_files(tmp_path: Path) -> None:
    write_summaries(tmp_path / "sum-3-0.bin", [(7, 0, 4, True, 5), (None, 9, 9, True, 2)])
    write_summaries(tmp_path / "sum-3-1.bin", [(-2, 5, 8, False, 3), (2**40, 1, 1, True, 1)])
    # the same group again from a stage that ran twice
    write_summaries(tmp_path / "sum-5-1.bin", [(-2, 5, 8, False, 3)])
    s = read_summaries(str(tmp_path))
    assert s.keys.size == 4  # the group recorded twice is kept once
    at = s.lookup(np.array([7, 0, -2, 7]), np.array([False, True, False, False]))
    assert s.hi[at].tolist() == [4, 9, 8, 4]
    assert s.ok[at].tolist() == [True, True, False, True]
    assert s.n[at].tolist() == [5, 2, 3, 5]
    with pytest.raises(SummariesMissing, match="no recorded summary"):
        s.lookup(np.array([3]), np.array([False]))
    # one key, two different summaries: two groups whose keys hash alike
    write_summaries(tmp_path / "sum-5-0.bin", [(7, 0, 3, True, 4)])
    with pytest.raises(SummariesMissing, match="hash alike"):
        read_summaries(str(tmp_path))
    (tmp_path / "sum-5-0.bin").unlink()
    # the null-key group with two different summaries, likewise
    write_summaries(tmp_path / "sum-6-0.bin", [(None, 9, 10, True, 2)])
    with pytest.raises(SummariesMissing, match="hash alike"):
        read_summaries(str(tmp_path))
    (tmp_path / "sum-6-0.bin").unlink()
    whole = (tmp_path / "sum-3-0.bin").read_bytes()
    for cut in (8, 24, len(whole) - 16):  # the values, or the header, cut short
        (tmp_path / "sum-3-0.bin").write_bytes(whole[:-cut])
        with pytest.raises(SummariesMissing, match="truncated"):
            read_summaries(str(tmp_path))
    (tmp_path / "sum-3-0.bin").write_bytes(whole[:-3])
    with pytest.raises(SummariesMissing, match="not whole 8-byte values"):
        read_summaries(str(tmp_path))
    bad = bytearray(whole)
    bad[16:24] = np.asarray([5], "<i8").tobytes()  # a width the recorder never writes
    (tmp_path / "sum-3-0.bin").write_bytes(bytes(bad))
    with pytest.raises(SummariesMissing, match="header"):
        read_summaries(str(tmp_path))


def test_tapped_summaries_read_back_without_flags(tmp_path: Path) -> None:
    # where the tap runs, lo, hi and the flags are 0 in every chunk (0 bytes): no null key,
    # no range ok; a stage run twice records a group again
    write_summaries(tmp_path / "sum-3-0.bin", [(7, 0, 0, False, 5), (3, 0, 0, False, 2)])
    write_summaries(tmp_path / "sum-3-1.bin", [(2**40, 0, 0, False, 1)])
    s = read_summaries(str(tmp_path))
    assert sorted(s.keys.tolist()) == [3, 7, 2**40]
    at = s.lookup(np.array([2**40, 3, 7]), np.zeros(3, bool))
    assert s.n[at].tolist() == [1, 2, 5]
    assert not s.ok.any()
    assert not s.hi.any()
    assert s.null_row == -1
    write_summaries(tmp_path / "sum-4-0.bin", [(3, 0, 0, False, 2)])
    again = read_summaries(str(tmp_path))
    assert again.keys.size == 3
    assert again.n[again.lookup(np.array([3]), np.zeros(1, bool))].tolist() == [2]
    write_summaries(tmp_path / "sum-4-1.bin", [(7, 0, 0, False, 4)])  # another count: refused
    with pytest.raises(SummariesMissing, match="hash alike"):
        read_summaries(str(tmp_path))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=40), st.sampled_from([0, 1, 10**6, 2**40]))
def test_key_index_counts_its_distinct_keys(keys: list[int], spread: int) -> None:
    # dense keys are indexed by a direct table, sparse ones by a search over them sorted
    k = np.asarray(keys, np.int64) * max(1, spread)
    index = KeyIndex(k)
    assert index.distinct == np.unique(k).size
    if spread <= 1 and k.size:
        assert index.table is not None or index.consecutive
    if spread == 2**40 and np.unique(k).size > 1:  # too sparse for a table
        assert index.table is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(*[st.integers(-(2**40), 2**40)] * 5), min_size=1, max_size=20),
    st.lists(st.sampled_from([None, 8]), min_size=5, max_size=5),
    st.booleans(),
)
def test_any_summary_chunk_encoding_reads_back(
    groups: list[tuple[int, ...]], forced: list[int | None], zero_lo: bool
) -> None:
    cols = [list(c) for c in zip(*groups, strict=True)]
    if zero_lo:  # a column of zeros takes no bytes
        cols[1] = [0] * len(groups)
    natural = [0 if not any(c) else 4 if all(-(2**31) <= v < 2**31 for v in c) else 8 for c in cols]
    widths = [f or w for f, w in zip(forced, natural, strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sum-1-0.bin"
        path.write_bytes(summary_chunk(cols, widths) + summary_chunk(cols))
        got = read_summary_file(str(path))
    assert [c.tolist() for c in got] == [c + c for c in cols]


def test_a_missing_null_group_is_refused(tmp_path: Path) -> None:
    write_summaries(tmp_path / "sum-1-0.bin", [(4, 0, 0, True, 1)])
    s = read_summaries(str(tmp_path))
    with pytest.raises(SummariesMissing, match="null group key"):
        s.lookup(np.array([0]), np.array([True]))
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(SummariesMissing):
        read_summaries(str(empty)).lookup(np.array([4]), np.array([False]))


def aggregate_text(
    step: Any, frames: list[Any], plan: str = "analyzed", **kw: Any
) -> tuple[Any, str]:
    """The capture of ``step`` and the ``analyzed`` (or ``executed``) plan of its tracked
    output."""
    seen: list[Any] = []

    def run(*xs: Any) -> Any:
        out = step(*xs)
        seen.append(out)
        return out

    cap = capture_frames(run, frames, **kw)
    qe = seen[-1].lineage_state.df._jdf.queryExecution()
    return cap, str((qe.analyzed() if plan == "analyzed" else qe.executedPlan()).toString())


def test_ids_without_nulls_are_counted_once(
    spark: Any, facts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # without the tap (ranges, as on a cluster): ids dslog numbered (no ROW_ID) or stored
    # (input_rows given) are never null: one count(1)
    monkeypatch.setattr(capture_module, "tap_ready", lambda spark: False)
    # numbered by the capture in its order (groups of consecutive rows)
    rows = [(i, i // 8, float(i)) for i in range(80)]
    plain = spark.createDataFrame(rows, "id long, k long, v double").coalesce(1)
    cap, text = aggregate_text(by_key, [plain])
    assert "retried_with_lists" not in cap.timings
    assert f"count({SLOT_PREFIX}" not in text
    same_lineage(cap, capture_frames(by_key, [plain], aggregate="lists"))
    cap, text = aggregate_text(by_key, [facts], input_rows=[len(ROWS)])
    assert "retried_with_lists" not in cap.timings
    assert f"count({SLOT_PREFIX}" not in text
    check_reference(cap)
    # a frame's own ROW_ID, not vouched for, is counted as it is
    cap, text = aggregate_text(by_key, [facts])
    assert "retried_with_lists" not in cap.timings
    assert f"count({SLOT_PREFIX}" in text


def test_tapped_ids_without_nulls_are_counted_once(spark: Any, facts: Any) -> None:
    # with the tap, the count reads the slots' columns (an unread column would be pruned
    # with its tap): one count over all of them when none can be null, else one per slot
    dims = spark.createDataFrame([(k, 2.0 * k) for k in range(12)], "k long, w double")
    dims = dims.withColumn(ROW_ID, F.col("k"))

    def step(x: Any, d: Any) -> Any:
        return by_key(x.join(d, "k").withColumn("v", F.col("v") * F.col("w")))

    frames = [facts, dims]

    def functions(text: str) -> list[str]:
        """Each physical aggregation's functions (Spark evaluates an aggregate used twice
        once)."""
        return [
            line.split("functions=[", 1)[1] for line in text.splitlines() if "functions=[" in line
        ]

    vouched, text = aggregate_text(step, frames, input_rows=[len(ROWS), 12], plan="executed")
    aggs = functions(text)
    assert aggs
    assert all(f.count("count(greatest(") == 1 and f"count({SLOT_PREFIX}" not in f for f in aggs)
    own, text = aggregate_text(step, frames, plan="executed")
    aggs = functions(text)
    assert aggs
    assert all("greatest(" not in f and f.count(f"count({SLOT_PREFIX}") == 2 for f in aggs)
    lists = capture_frames(step, frames, aggregate="lists")
    for cap in (vouched, own):
        assert cap.timings["tapped_rows"] == 2 * cap.n_rows  # every group, both slots
        assert "retried_carrying_summaries" not in cap.timings
        for i in (0, 1):
            for considered in (False, True):
                assert cap.relation(i, considered=considered) == lists.relation(
                    i, considered=considered
                )


DIMS = [(k, f"d{k}") for k in range(0, 12, 2)]


@pytest.mark.parametrize("how", ["left", "right", "full", "union"])
def test_slots_an_outer_join_or_a_union_may_leave_null_are_counted(
    spark: Any, facts: Any, how: str
) -> None:
    dims = spark.createDataFrame(DIMS, "k long, name string").withColumn(ROW_ID, F.col("k") / 2)
    dims = dims.withColumn(ROW_ID, F.col(ROW_ID).cast("long"))

    def step(x: Any, d: Any) -> Any:
        if how == "union":
            both = x.select("k", F.col("v").cast("string").alias("name")).unionByName(d)
        else:
            both = x.join(d, "k", how)
        return both.groupBy("k").agg(F.count("name").alias("c")).orderBy("k")

    frames = [facts, dims]
    rows = [len(ROWS), len(DIMS)]
    cap, text = aggregate_text(step, frames, input_rows=rows)
    assert "retried_with_lists" not in cap.timings
    # the optional side's slots (both sides' for full joins and unions) count their ids
    assert f"count({SLOT_PREFIX}" in text
    lists = capture_frames(step, frames, input_rows=rows, aggregate="lists")
    for i in (0, 1):
        for considered in (False, True):
            assert cap.relation(i, considered=considered) == lists.relation(
                i, considered=considered
            )


def test_a_numbered_input_keeps_its_scattered_groups_in_ranges(spark: Any) -> None:
    # a frame without ids is numbered by the capture; its plan is a scan of the kept rows,
    # deterministic, so scattered groups come from the tap instead of a rerun with lists
    from dslog_dagster.spark.rowid import with_row_id

    rows = [(i, KEYS[i], float(i)) for i in range(80)]
    plain = spark.createDataFrame(rows, "id long, k long, v double").repartition(3, "id")
    plain = plain.sortWithinPartitions("id")  # one numbering for both captures
    cap = capture_frames(by_key, [plain])
    assert "retried_with_lists" not in cap.timings
    assert cap.timings["tapped_rows"] > 0
    same_lineage(cap, capture_frames(by_key, [plain], aggregate="lists"))
    # the kept rows are released
    sc = spark.sparkContext._jsc.sc()
    before = len(sc.getRDDStorageInfo())
    ids = with_row_id(plain)
    assert ids.frame._jdf.queryExecution().analyzed().deterministic()
    assert len(sc.getRDDStorageInfo()) == before + 1
    ids.release()
    assert len(sc.getRDDStorageInfo()) == before


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.booleans()), min_size=1, max_size=40),
    st.booleans(),
)
def test_the_taps_summaries_fail_every_row_as_the_general_lookup_does(
    rows: list[tuple[int, bool]], null_lo: bool
) -> None:
    # counts-only summaries (the tap's: lo = hi = 0, never ok) take a path without masks
    # and gathers; it gives what the general lookup gives on the same summaries
    import dataclasses

    import pyarrow as pa

    from dslog_dagster.spark.lineage import MID, RangeColumns, recorded_fields

    keys = sorted({k for k, _ in rows})
    with tempfile.TemporaryDirectory() as tmp:
        write_summaries(Path(tmp) / "sum-1-0.bin", [(k, 0, 0, False, 3 * k + 1) for k in keys])
        s = read_summaries(tmp)
    assert s.counts_only
    has = [h or not null_lo for _, h in rows]  # without null_lo every row has ids
    t = pa.table(
        {
            MID: pa.array(np.arange(len(rows)) * 5 + 7, pa.int64()),
            "lo": pa.array([0 if h else None for h in has], pa.int64()),
            "k": pa.array([k for k, _ in rows], pa.int64()),
        }
    )
    slot = RangeColumns("lo", None, None, None, ("k",), None, "unused")
    fast = recorded_fields(t, slot, s)
    slow = recorded_fields(t, slot, dataclasses.replace(s, counts_only=False))
    assert fast[0].equals(slow[0])
    assert fast[1].equals(slow[1])
    for f in ("mid", "key", "null", "n"):
        assert getattr(fast[2], f).tolist() == getattr(slow[2], f).tolist()
    assert fast[2].n.tolist() == [3 * k + 1 for (k, _), h in zip(rows, has, strict=True) if h]
    bad = t.set_column(1, "lo", pa.array([1] * len(rows), pa.int64()))
    with pytest.raises(SummariesMissing, match="lo differs"):
        recorded_fields(bad, slot, s)
