"""The id tap: groups whose ids are not a range get them from the tapped map side, exactly.

Each capture is checked against a brute-force reference and against the same capture with
the tap off (the join path), and the tap's own checks are exercised: a file that does not
add up to the groups' counts (in any stage), a truncated file — each makes the capture fall
back to the join with the same lineage — and a map side Spark runs twice (an ``orderBy``
sampling its input) is matched on one complete stage. The file-level functions are checked
on hand-made files.
"""

import itertools
import logging
import os
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from frame_reference import assert_lineage
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from tap_files import tap_chunk, write_tap

import dslog_dagster.spark.capture as capture_module
import dslog_dagster.spark.idtap as idtap
import dslog_dagster.spark.ranges as ranges_module
import dslog_dagster.spark.tapfile as tapfile
from dslog_dagster.core.native import kernels
from dslog_dagster.spark import ROW_ID, capture_frames
from dslog_dagster.spark.lineage import RangeColumns
from dslog_dagster.spark.rowid import MID, PART_BITS
from dslog_dagster.spark.summaries import KeyIndex

RNG = np.random.default_rng(7)
# 60 rows, keys 0..9 scattered over the ids, and a few null keys
KEYS = [None if i % 13 == 0 else int(k) for i, k in enumerate(RNG.integers(0, 10, 60))]
ROWS = [(i, KEYS[i], float(i)) for i in range(60)]


@pytest.fixture(scope="module")
def facts(spark: Any) -> Any:
    df = spark.createDataFrame(ROWS, "id long, k long, v double").repartition(3, "id")
    return df.withColumn(ROW_ID, F.col("id"))


def by_key(x: Any) -> Any:
    return x.groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n")).orderBy("k")


def groups() -> dict[Any, list[int]]:
    g: dict[Any, list[int]] = {}
    for i, k, _ in ROWS:
        g.setdefault(k, []).append(i)
    return g


def spelled_out(t: idtap.TapRecords) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A tap file's rows one by one: keys, ids and whether the key was null (single rows
    first, then each run's rows)."""
    reps = t.run_rows
    within = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
    run_ids = np.repeat(t.run_first, reps) + within * np.repeat(t.run_len > 0, reps)
    keys = np.concatenate([np.repeat(t.seg_keys, t.seg_rows), np.repeat(t.run_keys, reps)])
    ids = np.concatenate([t.ids, run_ids])
    null = np.repeat(t.seg_null, t.seg_rows)
    return keys, ids, np.concatenate([null, np.zeros(run_ids.size, bool)])


def check_reference(cap: Any) -> None:
    want = groups()
    # count(*) has no contributing cells (the semantics table: considered only)
    src: dict[str, list[str]] = {"k": ["k"], "s": ["v"], "n": []}
    assert_lineage(cap, 0, lambda r, c: [(i, f) for i in want[r["k"]] for f in src[c]])


def same_lineage(a: Any, b: Any) -> None:
    for considered in (False, True):
        assert a.relation(0, considered=considered) == b.relation(0, considered=considered)


def test_the_session_has_the_tap(spark: Any) -> None:
    jar = idtap.tap_jar()
    assert jar is not None
    assert jar.exists()
    assert str(jar) in spark.conf.get("spark.jars", "")
    assert idtap.tap_ready(spark)


def test_scattered_groups_come_from_the_tap(facts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tapped = capture_frames(by_key, [facts])
    n_groups = len(groups())
    # every group (the null key one too) failed its range and was matched with the tap
    assert tapped.timings["refetched_rows"] == n_groups
    assert tapped.timings["tapped_rows"] == n_groups
    assert "retried_with_lists" not in tapped.timings
    check_reference(tapped)
    monkeypatch.setattr(capture_module, "tap_ready", lambda spark: False)
    joined = capture_frames(by_key, [facts])
    assert "tapped_rows" not in joined.timings
    assert joined.timings["refetched_rows"] == n_groups
    same_lineage(tapped, joined)
    lists = capture_frames(by_key, [facts], aggregate="lists")
    same_lineage(tapped, lists)


def test_a_task_spills_its_pairs_in_chunks(
    spark: Any, facts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[tuple[int, int, int]] = []  # per chunk: pairs, runs, rows
    real = idtap.tapped_ids

    def chunk_sizes(directory: str, *args: Any, **kwargs: Any) -> Any:
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            raw = np.fromfile(path, np.uint8)
            for c in tapfile.tap_chunks(raw, path):
                at = c.runs_at + 8 + 16 * c.m  # the runs' lengths
                runs = raw[at : at + 8 * c.m].view("<i8")
                sizes.append((c.n, c.m, c.n + int(np.abs(runs).sum())))
        return real(directory, *args, **kwargs)

    monkeypatch.setattr(ranges_module, "tapped_ids", chunk_sizes)
    # chunks of 3 pairs: every task appends several chunks to its file before publishing it
    spark.sparkContext.setLocalProperty(f"{idtap.PROPERTY}chunk", "3")
    try:
        cap = capture_frames(by_key, [facts])
    finally:
        spark.sparkContext.setLocalProperty(f"{idtap.PROPERTY}chunk", None)
    assert cap.timings["tapped_rows"] == len(groups())
    assert sum(rows for *_, rows in sizes) == len(ROWS)
    assert max(max(n, m) for n, m, _ in sizes) == 3
    assert len(sizes) >= len(ROWS) // 6
    check_reference(cap)


def test_the_tap_runs_without_generated_code(spark: Any, facts: Any) -> None:
    # interpreted expressions find record() by reflection: its signature must match
    conf = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        cap = capture_frames(by_key, [facts])
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    assert cap.timings["tapped_rows"] == len(groups())
    check_reference(cap)


def test_a_group_repeated_after_the_aggregation_gets_all_its_rows(spark: Any, facts: Any) -> None:
    twice = spark.createDataFrame([(i, i // 2) for i in range(20)], "rid long, key long")
    twice = twice.withColumn(ROW_ID, F.col("rid"))

    def f(x: Any, t: Any) -> Any:
        g = x.groupBy("k").agg(F.sum("v").alias("s"))
        return g.join(t, g.k == t.key).select("k", "s", "rid").orderBy("rid")

    cap = capture_frames(f, {"x": facts, "t": twice})
    assert cap.timings["tapped_rows"] == 20  # 10 groups, each on two output rows
    want = groups()
    src = {"k": "k", "s": "v"}
    assert_lineage(cap, "x", lambda r, c: [(i, src[c]) for i in want[r["k"]]] if c in src else [])


def test_the_jvm_writes_key_segments_and_wide_ids(
    spark: Any, facts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a sort-merge join hands the aggregation its rows sorted by key: the tap stores the
    # facts' keys as segments; ids past 2^32 take 8 bytes, the dims' small keys 4
    base = 2**32
    wide = facts.withColumn(ROW_ID, F.col(ROW_ID) + base)
    dims = spark.createDataFrame([(k, 10 * k) for k in range(10)], "key long, w long")
    dims = dims.withColumn(ROW_ID, F.col("key"))
    chunks: list[Any] = []
    real = idtap.tapped_ids

    def headers(directory: str, *args: Any, **kwargs: Any) -> Any:
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            chunks.extend(tapfile.tap_chunks(np.fromfile(path, np.uint8), path))
        return real(directory, *args, **kwargs)

    def f(x: Any, d: Any) -> Any:
        return x.join(d, x.k == d.key).groupBy("k").agg(F.sum("v").alias("s"))

    monkeypatch.setattr(ranges_module, "tapped_ids", headers)
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        cap = capture_frames(f, {"x": wide, "d": dims}, input_rows={"x": base + 60, "d": 10})
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    keyed = {k: ids for k, ids in groups().items() if k is not None}
    assert cap.timings["tapped_rows"] == 2 * len(keyed)
    assert any(c.g < c.n and c.iw == 8 and c.kw == 4 for c in chunks)  # the facts' slot
    src = {"k": "k", "s": "v"}
    assert_lineage(cap, "x", lambda r, c: [(base + i, src[c]) for i in keyed[r["k"]]])


def test_a_map_side_run_twice_is_recorded_once(
    spark: Any, facts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a sort-merge join leaves its output partitioned by the key, so the aggregation needs no
    # shuffle of its own and the orderBy's sampling job runs the tapped map side again
    dims = spark.createDataFrame([(k, 10 * k) for k in range(10)], "key long, w long")
    dims = dims.withColumn(ROW_ID, F.col("key"))
    seen: list[set[str]] = []
    real = idtap.tapped_ids

    def stages(directory: str, *args: Any, **kwargs: Any) -> Any:
        seen.append({n.split("-")[1] for n in os.listdir(directory) if n.endswith(".bin")})
        return real(directory, *args, **kwargs)

    def f(x: Any, d: Any) -> Any:
        j = x.join(d, x.k == d.key)
        return j.groupBy("k").agg(F.sum("v").alias("s")).orderBy("k")

    monkeypatch.setattr(ranges_module, "tapped_ids", stages)
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        cap = capture_frames(f, {"x": facts, "d": dims})
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    # the second run finds the first one's files and records nothing again
    assert len(seen[0]) == 1
    keyed = {k: ids for k, ids in groups().items() if k is not None}
    # every group of both slots (x's and d's rows) from the tap
    assert cap.timings["tapped_rows"] == 2 * len(keyed)
    assert_lineage(cap, "x", lambda r, c: [(i, "v" if c == "s" else c) for i in keyed[r["k"]]])


@pytest.mark.parametrize("damage", ["drop_a_row", "two_stages", "truncate"])
def test_a_tap_that_does_not_add_up_falls_back_to_the_join(
    facts: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    real = idtap.tapped_ids

    def damaged(directory: str, *args: Any, **kwargs: Any) -> Any:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".bin"))
        path = os.path.join(directory, names[0])
        if damage == "drop_a_row":  # a row lost: its group's count does not match
            keys, ids, null = spelled_out(idtap.read_tap_records(path))
            kept = [None if z else int(k) for k, z in zip(keys, null, strict=True)][:-1]
            write_tap(Path(path), kept, ids[:-1].tolist())
        elif damage == "two_stages":  # one file in another stage: neither is complete
            os.rename(path, os.path.join(directory, "tap-999999-0.bin"))
        else:
            Path(path).write_bytes(Path(path).read_bytes()[:-8])
        return real(directory, *args, **kwargs)

    monkeypatch.setattr(ranges_module, "tapped_ids", damaged)
    with caplog.at_level(logging.INFO, logger="dslog_dagster.spark"):
        cap = capture_frames(by_key, [facts])
    assert "tapped_rows" not in cap.timings
    assert cap.timings["refetched_rows"] == len(groups())
    assert "joining instead" in caplog.text
    assert ("truncated" if damage == "truncate" else "counts") in caplog.text  # for that reason
    check_reference(cap)


MIXED = [
    (i, None if i % 11 == 3 else f"g{(i * 7) % 4}", None if i % 9 == 2 else i % 2, float(i))
    for i in range(40)
]


def mixed_frame(spark: Any) -> Any:
    x = spark.createDataFrame(MIXED, "id long, g string, h long, v double").repartition(2, "id")
    return x.withColumn(ROW_ID, F.col("id"))


def assert_groups(cap: Any, keys: list[str]) -> None:
    want: dict[Any, list[int]] = {}
    for i, g, h, _ in MIXED:
        want.setdefault(tuple({"g": g, "h": h}[k] for k in keys), []).append(i)
    assert_lineage(
        cap, 0, lambda r, c: [(i, "v" if c == "s" else c) for i in want[tuple(r[k] for k in keys)]]
    )


@pytest.mark.parametrize("keys", [["g"], ["g", "h"], ["h", "g"]])
def test_string_keys_and_two_keys_are_tapped_by_their_hash(spark: Any, keys: list[str]) -> None:
    x = mixed_frame(spark)
    by = lambda x: x.groupBy(*keys).agg(F.sum("v").alias("s")).orderBy(*keys)  # noqa: E731
    cap = capture_frames(by, [x])
    # the groups whose ids are scattered (null keys in some) all came from the tap
    assert cap.timings["tapped_rows"] == cap.timings["refetched_rows"] >= cap.n_rows // 2
    assert_groups(cap, keys)
    same_lineage(cap, capture_frames(by, [x], aggregate="lists"))


@pytest.mark.parametrize("by_name", [True, False])
def test_groups_whose_hashes_collide_fall_back_to_the_join(
    spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, by_name: bool
) -> None:
    # a "hash" with two values: the groups sharing one get each other's tapped rows. Keys
    # by column name are hashed in SQL text, other key expressions as Columns
    monkeypatch.setattr(
        ranges_module,
        "tap_key_sql",
        lambda names, types: (f"length(coalesce(`{names[0]}`, '')) % 2", True),
    )
    monkeypatch.setattr(
        ranges_module,
        "tap_key",
        lambda keys, types: (F.length(F.coalesce(keys[0], F.lit(""))) % 2, True),
    )
    key = "g" if by_name else F.col("g")
    with caplog.at_level(logging.INFO, logger="dslog_dagster.spark"):
        cap = capture_frames(
            lambda x: x.groupBy(key).agg(F.sum("v").alias("s")), [mixed_frame(spark)]
        )
    assert "tapped_rows" not in cap.timings
    assert cap.timings["refetched_rows"] == cap.n_rows
    # (found as groups of one hash with different counts, or counts not adding up)
    assert "joining instead" in caplog.text
    assert_groups(cap, ["g"])


def test_float_keys_are_not_tapped(spark: Any) -> None:
    # -0.0 and 0.0 group together but hash apart: such keys use the join
    rows = [(i, [0.0, -0.0, 1.5][i % 3], float(i)) for i in range(12)]
    x = spark.createDataFrame(rows, "id long, f double, v double").withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(lambda x: x.groupBy("f").agg(F.sum("v").alias("s")), [x])
    assert "tapped_rows" not in cap.timings
    assert cap.timings["refetched_rows"] == 2
    want = {0.0: [i for i in range(12) if i % 3 != 2], 1.5: [i for i in range(12) if i % 3 == 2]}
    assert_lineage(cap, 0, lambda r, c: [(i, "v" if c == "s" else c) for i in want[r["f"]]])


def test_a_global_aggregation_is_tapped(facts: Any) -> None:
    cap = capture_frames(
        lambda x: x.filter(F.col("id") % 3 == 0).agg(F.sum("v").alias("s")), [facts]
    )
    assert cap.timings["tapped_rows"] == 1
    assert_lineage(cap, 0, lambda r, c: [(i, "v") for i in range(0, 60, 3)])


def test_concurrent_captures_keep_their_taps_apart(spark: Any, facts: Any) -> None:
    other = [(i, (i * 5) % 7, float(i)) for i in range(40)]
    y = spark.createDataFrame(other, "id long, k long, v double").repartition(2, "id")
    y = y.withColumn(ROW_ID, F.col("id"))
    got: dict[str, Any] = {}

    def run(name: str, frame: Any) -> None:
        got[name] = capture_frames(by_key, [frame])

    threads = [threading.Thread(target=run, args=a) for a in (("x", facts), ("y", y))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got["x"].timings["tapped_rows"] == len(groups())
    check_reference(got["x"])
    assert got["y"].timings["tapped_rows"] == 7
    want = {k: [i for i, kk, _ in other if kk == k] for k in range(7)}
    src = {"k": ["k"], "s": ["v"], "n": []}  # count(*): no contributing cells
    assert_lineage(got["y"], 0, lambda r, c: [(i, f) for i in want[r["k"]] for f in src[c]])


@pytest.mark.parametrize("exiting", [False, True])
def test_the_tap_directory_is_removed_after_the_capture(
    facts: Any, monkeypatch: pytest.MonkeyPatch, exiting: bool
) -> None:
    # a worker removes it; while the interpreter exits (the pool takes no new tasks), the
    # capture's own thread does
    made: list[str] = []
    real = tempfile.mkdtemp

    def spy(*args: Any, **kwargs: Any) -> str:
        path = real(*args, **kwargs)
        if kwargs.get("prefix") == "dslog-tap-":
            made.append(path)
        return path

    def refused(*args: Any) -> Any:
        msg = "cannot schedule new futures after interpreter shutdown"
        raise RuntimeError(msg)

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    if exiting:  # (the read-back's workers still run: they are other modules')
        monkeypatch.setattr(capture_module, "background", types.SimpleNamespace(submit=refused))
    cap = capture_frames(by_key, [facts])
    assert cap.timings["tapped_rows"] == len(groups())
    assert len(made) == 1
    deadline = time.monotonic() + 30
    while os.path.exists(made[0]) and time.monotonic() < deadline and not exiting:
        time.sleep(0.01)
    assert not os.path.exists(made[0])


# ---------------------------------------------------------------------- file level


SLOT = RangeColumns("s", "s_hi", "s_ok", "s_n", ("s_k0",), "s_h")
"""The summary columns of the range slot ``s`` in the hand-made staged files."""


def write_staged(path: Path, rows: list[tuple[int, int | None, int, bool]]) -> None:
    """Staged output rows: (MID, key, n, ok) of one range slot ``s``."""
    path.mkdir()
    t = pa.table(
        {
            MID: pa.array([m for m, *_ in rows], pa.int64()),
            "s": pa.array([0] * len(rows), pa.int64()),
            "s_hi": pa.array([0] * len(rows), pa.int64()),
            "s_ok": pa.array([ok for *_, ok in rows], pa.bool_()),
            "s_n": pa.array([n for _, _, n, _ in rows], pa.int64()),
            "s_k0": pa.array([k for _, k, _, _ in rows], pa.int64()),
        }
    )
    pq.write_table(t, path / "part-00000.parquet")


def test_tapped_ids_on_hand_made_files(tmp_path: Path) -> None:
    # output: partition 0 has rows 0..1, partition 1 rows 0..2 -> dense rows 0..4
    offsets = [0, 2, 5]
    mid = [0, 1, (1 << PART_BITS) | 0, (1 << PART_BITS) | 1, (1 << PART_BITS) | 2]
    # rows: key 5 (failed, n=3), key 9 (ok), null key (failed, n=1), key 5 again, key 2
    staged = tmp_path / "staged"
    write_staged(
        staged,
        [
            (mid[0], 5, 3, False),
            (mid[1], 9, 2, True),
            (mid[2], None, 1, False),
            (mid[3], 5, 3, False),
            (mid[4], 2, 1, False),
        ],
    )
    taps = tmp_path / "taps"
    taps.mkdir()
    write_tap(taps / "tap-4-0.bin", [5, 9, None, 5], [10, 11, 12, 13])
    write_tap(taps / "tap-4-1.bin", [5, 2, 9], [14, 15, 16])
    table = idtap.tapped_ids(str(taps), str(staged), SLOT, 20, offsets, 4)
    rel = table.decompress()
    got = set(zip(rel.out_cols[0].tolist(), rel.in_cols[0].tolist(), strict=True))
    # key 5 is on dense rows 0 and 3; the null key on row 2; key 2 on row 4; key 9 passed
    want = {(o, r) for o in (0, 3) for r in (10, 13, 14)} | {(2, 12), (4, 15)}
    assert got == want
    # the failed rows counted by the pass must be the staged ones
    with pytest.raises(idtap.TapFailed):
        idtap.tapped_ids(str(taps), str(staged), SLOT, 20, offsets, 3)
    # the same pairs again from a later stage, and a stage that ran on one partition only:
    # the complete stages give the same table; the partial one is never used
    write_tap(taps / "tap-7-0.bin", [5, 9, None, 5], [10, 11, 12, 13])
    write_tap(taps / "tap-7-1.bin", [5, 2, 9], [14, 15, 16])
    write_tap(taps / "tap-9-1.bin", [5, 2, 9], [14, 15, 16])
    again = idtap.tapped_ids(str(taps), str(staged), SLOT, 20, offsets, 4)
    assert again.decompress() == rel
    for name in ("tap-7-0.bin", "tap-7-1.bin"):
        (taps / name).unlink()
    # a group whose tapped rows fall short of its count, in every stage
    write_tap(taps / "tap-4-1.bin", [2, 9], [15, 16])
    with pytest.raises(idtap.TapFailed, match="counts in any of 2 stage"):
        idtap.tapped_ids(str(taps), str(staged), SLOT, 20, offsets, 4)


def test_hashed_keys_match_by_hash_and_a_collision_never_passes(tmp_path: Path) -> None:
    # string groups "a", "b", "c" (ids scattered), recorded by made-up hashes
    def staged(path: Path, hashes: list[int]) -> None:
        t = pa.table(
            {
                MID: pa.array([0, 1, 2], pa.int64()),
                "s": pa.array([0, 0, 0], pa.int64()),
                "s_hi": pa.array([9, 9, 9], pa.int64()),
                "s_ok": pa.array([False] * 3),
                "s_n": pa.array([2, 2, 2], pa.int64()),
                "s_k0": pa.array(list("abc")),
                "s_h": pa.array(hashes, pa.int64()),
            }
        )
        path.mkdir()
        pq.write_table(t, path / "p.parquet")

    taps = tmp_path / "taps"
    taps.mkdir()
    staged(tmp_path / "ok", [-5, 2**62, 77])
    write_tap(taps / "tap-3-0.bin", [-5, 77, 2**62], [0, 4, 1])
    write_tap(taps / "tap-3-1.bin", [77, 2**62, -5], [3, 9, 6])
    rel = idtap.tapped_ids(str(taps), str(tmp_path / "ok"), SLOT, 10, [0, 3], 3, hashed=True)
    pairs = rel.decompress()
    got = set(zip(pairs.out_cols[0].tolist(), pairs.in_cols[0].tolist(), strict=True))
    assert got == {(0, 0), (0, 6), (1, 1), (1, 9), (2, 4), (2, 3)}
    # "a" and "c" share a hash (and a count): each would get the other's rows
    staged(tmp_path / "collide", [-5, 2**62, -5])
    write_tap(taps / "tap-3-0.bin", [-5, -5, 2**62], [0, 4, 1])
    write_tap(taps / "tap-3-1.bin", [-5, 2**62, -5], [3, 9, 6])
    with pytest.raises(idtap.TapFailed, match="counts"):
        idtap.tapped_ids(str(taps), str(tmp_path / "collide"), SLOT, 10, [0, 3], 3, hashed=True)


def test_tap_files_are_read_chunk_by_chunk(tmp_path: Path) -> None:
    path = tmp_path / "tap-1-0.bin"
    # chunk 1: rows (7, 30), (null, 40) and a run of key 4 over ids 60..62; chunk 2: rows
    # (9, 50), (9, 51), (9, 2^40) as one segment of wide ids and a run of key 6 repeating id
    # 70 twice (a negative length); chunk 3: one row per key, wide keys
    chunks = [
        tap_chunk([7, None], [30, 40], [(4, 60, 3)]),
        tap_chunk([9, 9, 9], [50, 51, 2**40], [(6, 70, -2)]),
        tap_chunk([2**50, -3], [5, 6]),
    ]
    path.write_bytes(b"".join(chunks))
    rec = idtap.read_tap_records(str(path))
    assert (rec.seg_keys.tolist(), rec.seg_rows.tolist(), rec.seg_null.tolist()) == (
        [7, 0, 9, 2**50, -3],
        [1, 1, 3, 1, 1],
        [False, True, False, False, False],
    )
    assert rec.ids.tolist() == [30, 40, 50, 51, 2**40, 5, 6]
    assert (rec.run_keys.tolist(), rec.run_first.tolist(), rec.run_len.tolist()) == (
        [4, 6],
        [60, 70],
        [3, -2],
    )
    assert (rec.run_rows.tolist(), rec.run_last.tolist()) == ([3, 2], [62, 70])
    keys, ids, null = spelled_out(rec)  # single rows first, then the runs
    assert keys.tolist() == [7, 0, 9, 9, 9, 2**50, -3, 4, 4, 4, 6, 6]
    assert ids.tolist() == [30, 40, 50, 51, 2**40, 5, 6, 60, 61, 62, 70, 70]
    assert null.tolist() == [False, True] + [False] * 10
    # the layout parsed once sizes the ids' array and is read from as the path is
    layout = tapfile.tap_layout(str(path))
    assert layout.rows == idtap.tap_rows(str(path)) == 7
    assert type(layout.raw) is np.ndarray  # a plain view of the map: cheap to slice
    into = np.full(layout.rows, -1, np.int64)
    again = idtap.read_tap_records(layout, into)
    assert again.ids is into
    assert spelled_out(again)[1].tolist() == ids.tolist()
    whole = b"".join(chunks)
    for cut in (8, 16 + 8 * 3, len(chunks[2]) - 8):  # runs, rows or a header cut short
        path.write_bytes(whole[:-cut])
        with pytest.raises(idtap.TapFailed, match="truncated"):
            idtap.read_tap_records(str(path))
    path.write_bytes(whole[:-3])  # cut inside a value
    with pytest.raises(idtap.TapFailed, match="not whole 8-byte values"):
        idtap.read_tap_records(str(path))
    path.write_bytes(b"")  # a task that tapped nothing
    assert idtap.read_tap_records(str(path)).ids.size == 0
    path.write_bytes(tap_chunk([], [], [(1, 4, 0)]))  # a run of no rows
    with pytest.raises(idtap.TapFailed, match="no rows"):
        idtap.read_tap_records(str(path))
    bad = bytearray(tap_chunk([5, 5, 5, 5], [1, 2, 3, 4]))  # one segment of 4 rows
    bad[32 + 4 : 32 + 8] = np.asarray([3], "<i4").tobytes()  # says 3
    path.write_bytes(bytes(bad))
    with pytest.raises(idtap.TapFailed, match="do not hold"):
        idtap.read_tap_records(str(path))
    bad[16:24] = np.asarray([5], "<i8").tobytes()  # a key width the tap never writes
    path.write_bytes(bytes(bad))
    with pytest.raises(idtap.TapFailed, match="header"):
        idtap.read_tap_records(str(path))
    # a segment whose rows are not all null or all not (the writer splits them)
    mixed = bytearray(tap_chunk([5, 5, 5, 5], [1, 2, 3, 4]))  # one segment, 4-byte ids
    mixed[44:48] = np.asarray([~2], "<i4").tobytes()  # its second row's key made null
    path.write_bytes(bytes(mixed))
    with pytest.raises(idtap.TapFailed, match="null and non-null"):
        idtap.read_tap_records(str(path))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.integers(0, 2**33)), max_size=30
    ),
    st.booleans(),
    st.sampled_from([None, 8]),
    st.sampled_from([None, 8]),
)
def test_any_chunk_encoding_reads_back_the_rows(
    rows: list[tuple[int | None, int]], segmented: bool, key_width: int | None, id_width: int | None
) -> None:
    # rows sorted by key or not, stored as segments or one key per row, in 4 or 8 bytes
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tap-1-0.bin"
        keys, ids = [k for k, _ in rows], [i for _, i in rows]
        path.write_bytes(
            tap_chunk(keys, ids, segmented=segmented, key_width=key_width, id_width=id_width)
        )
        got_keys, got_ids, got_null = spelled_out(idtap.read_tap_records(str(path)))
    assert got_ids.tolist() == ids
    assert got_null.tolist() == [k is None for k in keys]
    assert got_keys.tolist() == [0 if k is None else k for k in keys]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=40, unique=True),
    st.lists(st.integers(-(2**40), 2**40), max_size=60),
    st.sampled_from(["sparse", "dense", "consecutive"]),
    st.booleans(),
)
def test_key_index_finds_exactly_the_keys(
    keys: list[int], probes: list[int], spread: str, ordered: bool
) -> None:
    if spread == "dense":  # the direct table's range
        keys = list(dict.fromkeys(k % 50 for k in keys))
        probes = [p % 70 - 10 for p in probes]
    elif spread == "consecutive":  # lo, lo + 1, ...: positions by subtraction when in order
        lo = keys[0] % 1000 - 500 if keys else 0
        keys = list(range(lo, lo + len(keys)))[::-1]
        probes = [lo + p % (len(keys) + 20) - 10 for p in probes]
    # distinct keys in any order: positions are into the keys as given
    k = np.asarray(sorted(keys) if ordered else keys, np.int64)
    index = KeyIndex(k)
    pos = index(np.asarray(probes, np.int64))
    where = {v: i for i, v in enumerate(k.tolist())}
    assert pos.tolist() == [where.get(p, -1) for p in probes]
    assert index.distinct == len(keys)
    if spread == "consecutive" and k.size > 1:
        assert index.consecutive == ordered


def test_no_jdk_means_no_tap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(idtap, "java_tool", lambda name: None)
    idtap.tap_jar.cache_clear()
    try:
        assert idtap.tap_jar() is None
    finally:
        idtap.tap_jar.cache_clear()


def test_runs_of_consecutive_ids_are_recorded_once_and_read_back(spark: Any) -> None:
    # group 1: ids 0..5 and 12 (a run and a pair), group 2: 6..11 and 13..15 (two runs), so
    # their pairs are spelled out; group 3 (16..19) is one run, given to ProvRC as an interval
    keys = [1] * 6 + [2] * 6 + [1] + [2] * 3 + [3] * 4
    rows = [(i, k, float(i)) for i, k in enumerate(keys)]
    x = spark.createDataFrame(rows, "id long, k long, v double").coalesce(1)
    x = x.withColumn(ROW_ID, F.col("id"))
    cap = capture_frames(lambda f: f.groupBy("k").agg(F.sum("v").alias("s")), [x])
    assert cap.timings["tapped_rows"] == 3  # every group: the aggregation computed no range
    want: dict[int, list[int]] = {}
    for i, k, _ in rows:
        want.setdefault(k, []).append(i)
    assert_lineage(cap, 0, lambda r, c: [(i, "v" if c == "s" else "k") for i in want[r["k"]]])


def test_tapped_runs_become_intervals_or_pairs(tmp_path: Path) -> None:
    # dense rows 0..4 of one partition: key 5 (ids 10..12 as a run and 20 repeated: two
    # intervals, spelled out), key 9 (one run 30..32), key 2 (id 40 repeated 4 times: one
    # interval of one id), key 7 on rows 3 and 4 (one run 50..51, given to both rows)
    staged = tmp_path / "staged"
    write_staged(
        staged,
        [(0, 5, 5, False), (1, 9, 3, False), (2, 2, 4, False), (3, 7, 2, False), (4, 7, 2, False)],
    )
    taps = tmp_path / "taps"
    taps.mkdir()
    write_tap(taps / "tap-2-0.bin", [], [], [(5, 10, 3), (9, 30, 3), (2, 40, -4)])
    write_tap(taps / "tap-2-1.bin", [], [], [(5, 20, -2), (7, 50, 2)])
    table = idtap.tapped_ids(str(taps), str(staged), SLOT, 60, [0, 5], 5)
    rel = table.decompress()
    got = set(zip(rel.out_cols[0].tolist(), rel.in_cols[0].tolist(), strict=True))
    want = {(0, r) for r in (10, 11, 12, 20)} | {(1, r) for r in (30, 31, 32)}
    want |= {(2, 40)} | {(o, r) for o in (3, 4) for r in (50, 51)}
    assert got == want
    assert rel.n == len(want)  # the repeats are united
    # a run that stands for more rows than the group has: the counts do not match
    write_tap(taps / "tap-2-1.bin", [], [], [(5, 20, -3), (7, 50, 2)])
    with pytest.raises(idtap.TapFailed, match="counts"):
        idtap.tapped_ids(str(taps), str(staged), SLOT, 60, [0, 5], 5)


# a group's records: a single row (id), a run of consecutive ids (first, length) or one id
# repeated (id, -times)
RECORD = st.one_of(
    st.tuples(st.integers(0, 40)),
    st.tuples(st.integers(0, 40), st.integers(1, 5)),
    st.tuples(st.integers(0, 40), st.integers(-4, -1)),
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(RECORD, min_size=1, max_size=6), min_size=1, max_size=6),
    st.lists(st.integers(1, 2), min_size=6, max_size=6),
    st.lists(st.integers(0, 2), min_size=40, max_size=40),
    st.booleans(),
    st.booleans(),
)
def test_tapped_ids_equal_the_spelled_out_records(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[list[tuple[int, ...]]],
    rows_per_group: list[int],
    file_of: list[int],
    passed_group: bool,
    singles: bool,
) -> None:
    # groups 0..G-1 (keys 3g + 1; the last one null when it has single rows only), each on
    # one or two output rows, their records spread over up to three files of one stage; a
    # group that passed its range check has records the matching must ignore; ``singles``:
    # no run at all (the matching then decides from the groups' counts alone)
    tmp = tmp_path_factory.mktemp("tap")
    if singles:
        records = [[rec[:1] for rec in recs] for recs in records]
    null = all(len(r) == 1 for r in records[-1])
    key = [None if null and g == len(records) - 1 else 3 * g + 1 for g in range(len(records))]
    want: dict[int, set[int]] = {}
    staged: list[tuple[int, int | None, int, bool]] = []
    files: dict[int, tuple[list[int | None], list[int], list[tuple[int, int, int]]]] = {}
    k = 0
    for g, recs in enumerate(records):
        ids: set[int] = set()
        n = 0
        for rec in recs:
            keys, singles, runs = files.setdefault(file_of[k % 40], ([], [], []))
            k += 1
            if len(rec) == 1:
                keys.append(key[g])
                singles.append(rec[0])
                ids.add(rec[0])
                n += 1
            else:
                first, length = rec
                runs.append((key[g], first, length))
                ids |= set(range(first, first + length)) if length > 0 else {first}
                n += abs(length)
        for _ in range(rows_per_group[g]):
            want[len(staged)] = ids
            staged.append((len(staged), key[g], n, False))
    if passed_group:  # key 2: not failed, yet tapped
        staged.append((len(staged), 2, 2, True))
        files.setdefault(0, ([], [], []))[0].extend([2, 2])
        files[0][1].extend([5, 9])
    write_staged(tmp / "staged", staged)
    (tmp / "taps").mkdir()
    for f, (keys, singles, runs) in files.items():
        write_tap(tmp / "taps" / f"tap-3-{f}.bin", keys, singles, runs)
    failed = sum(1 for *_, ok in staged if not ok)
    n_out = len(staged)
    table = idtap.tapped_ids(str(tmp / "taps"), str(tmp / "staged"), SLOT, 50, [0, n_out], failed)
    rel = table.decompress()
    got = set(zip(rel.out_cols[0].tolist(), rel.in_cols[0].tolist(), strict=True))
    assert got == {(o, i) for o, ids in want.items() for i in ids}
    assert rel.n == len(got)


def test_clustered_rows_and_repeated_joined_rows_are_tapped_as_runs(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # facts sorted by key (ids of a group consecutive); each dims row joins the 4 facts of
    # its key, so its id repeats 4 times in a row under the aggregation
    facts = spark.createDataFrame(
        [(i, i // 4, float(i)) for i in range(40)], "id long, k long, v double"
    )
    facts = facts.coalesce(1).withColumn(ROW_ID, F.col("id"))
    dims = spark.createDataFrame([(k, 2.0 * k) for k in range(10)], "key long, w double")
    dims = dims.withColumn(ROW_ID, F.col("key"))
    files: list[idtap.TapRecords] = []
    real = idtap.tapped_ids

    def keep(directory: str, *args: Any, **kwargs: Any) -> Any:
        for name in sorted(os.listdir(directory)):
            if name.endswith(".bin"):
                files.append(idtap.read_tap_records(os.path.join(directory, name)))
        return real(directory, *args, **kwargs)

    def f(x: Any, d: Any) -> Any:
        j = x.join(d, x.k == d.key).withColumn("x", F.col("v") * F.col("w"))
        return j.groupBy("k").agg(F.sum("x").alias("t")).orderBy("k")

    monkeypatch.setattr(ranges_module, "tapped_ids", keep)
    cap = capture_frames(f, {"x": facts, "d": dims})
    assert cap.timings["tapped_rows"] == 20  # 10 groups, both slots
    # each dims row repeats once per match, consecutively whichever join Spark picks: one
    # run of one id per group; the facts' clustered ids are runs too (one per group when the
    # join streams them in id order), the rest single rows
    lens = np.concatenate([t.run_len for t in files])
    assert sorted(lens[lens < 0].tolist()) == [-4] * 10
    assert sum(t.ids.size for t in files) + int(np.abs(lens).sum()) == 80
    lists = capture_frames(f, {"x": facts, "d": dims}, aggregate="lists")
    for name in ("x", "d"):
        for considered in (False, True):
            assert cap.relation(name, considered=considered) == lists.relation(
                name, considered=considered
            )
    assert_lineage(
        cap,
        "x",
        lambda r, c: (
            [(i, "v") for i in range(4 * r["k"], 4 * r["k"] + 4)]
            if c == "t"
            else [(i, "k") for i in range(4 * r["k"], 4 * r["k"] + 4)]
        ),
    )


def test_covers_knows_the_slices_of_the_array_they_were_read_into() -> None:
    whole = np.arange(20, dtype=np.int64)
    assert idtap.covers([whole[:5], whole[5:5], whole[5:]], whole)
    assert idtap.covers([whole], whole)
    assert not idtap.covers([whole[:5], whole[6:]], whole)  # a gap
    assert not idtap.covers([whole[5:], whole[:5]], whole)  # out of order
    assert not idtap.covers([whole[:5]], whole)  # short of the end
    assert not idtap.covers([whole[:5], whole[5:].copy()], whole)  # a copy
    assert not idtap.covers([whole[::2], whole[10:]], whole)  # strided
    assert idtap.covers([], whole[:0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**40), 2**40), st.integers(1, 5)), max_size=30))
def test_fill_repeated_is_numpys_repeat(segments: list[tuple[int, int]]) -> None:
    values = np.asarray([v for v, _ in segments], np.int64)
    counts = np.asarray([c for _, c in segments], np.int64)
    out = np.full(int(counts.sum()), 7, np.int64)
    idtap.fill_repeated(out, values, counts)
    assert out.tolist() == np.repeat(values, counts).tolist()
    # a slice of a matrix's row is written in place (the read-back's pair matrix)
    pairs = np.full((2, out.size + 2), -1, np.int64)
    idtap.fill_repeated(pairs[0, 1:-1], values, counts)
    assert pairs[0, 1:-1].tolist() == out.tolist()
    assert pairs[0, [0, -1]].tolist() == [-1, -1]
    assert (pairs[1] == -1).all()
    with pytest.raises(ValueError, match="add up"):
        idtap.fill_repeated(np.empty(out.size + 1, np.int64), values, counts)
    if counts.size:  # the kernel's own check, below the Python one
        with pytest.raises(ValueError, match="add up"):
            kernels.repeat_into(np.empty(out.size - 1, np.int64), values, counts)
        bad = counts.copy()
        bad[-1] = 0
        with pytest.raises(ValueError, match="positive"):
            kernels.repeat_into(np.empty(int(bad.sum()), np.int64), values, bad)
    with pytest.raises(TypeError):  # never a converted copy written instead of the array
        kernels.repeat_into(np.zeros(out.size, np.int32), values, counts)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(-5, 40)), max_size=40),
    st.integers(-(2**62), 2**62),
)
def test_group_order_is_the_keys_order_nulls_last(keys: list[int | None], shift: int) -> None:
    # dense keys (the scatter, when no key is null and none repeats) or not (the sort)
    k = np.asarray([0 if x is None else x + shift for x in keys], np.int64)
    null = np.asarray([x is None for x in keys], bool)
    assert idtap._group_order(k, null).tolist() == np.lexsort((k, null)).tolist()


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 30),
    st.sampled_from(["permutation", "gap", "twice", "null"]),
    st.integers(-(2**40), 2**40),
    st.integers(1, 4),
    st.randoms(use_true_random=False),
)
def test_failed_rows_placed_by_key_equal_the_sorted_groups(
    size: int, shape: str, lo: int, n_parts: int, rnd: Any
) -> None:
    # failed rows in parts (one per staged file) whose keys are lo, lo + 1, ... once each are
    # placed by a scatter; any other shape takes the general path; both give the same groups
    from dslog_dagster.spark.lineage import FailedRows

    keys = list(range(lo, lo + size))
    null = [False] * size
    if shape == "gap" and size:
        keys[rnd.randrange(size)] += size + 1  # beyond the others: a gap below it
    elif shape == "twice" and size > 1:
        keys[0] = keys[1]
    elif shape == "null" and size:
        null[rnd.randrange(size)] = True
    order = list(range(size))
    rnd.shuffle(order)
    k = np.asarray([0 if null[i] else keys[i] for i in order], np.int64)
    z = np.asarray([null[i] for i in order], bool)
    n = np.asarray([(0 if null[i] else keys[i]) % 7 + 1 for i in order], np.int64)
    mid = np.asarray(order, np.int64) * 3 + 1
    cuts = sorted(rnd.randrange(size + 1) for _ in range(n_parts - 1))
    bounds = [0, *cuts, size]
    parts = [FailedRows(mid[a:b], k[a:b], z[a:b], n[a:b]) for a, b in itertools.pairwise(bounds)]
    got = idtap._failed_groups("unused", None, rows=parts)  # type: ignore[arg-type]
    placed = idtap._placed_by_key(parts)
    expected = (size == 1 and shape != "null") or (size > 1 and shape == "permutation")
    assert (placed is not None) == expected
    whole = FailedRows.concat(parts)
    rows = np.lexsort((whole.key, whole.null))
    assert got.keys.tolist() == sorted({int(x) for x, y in zip(k, z, strict=True) if not y})
    assert got.has_null == bool(z.any())
    assert got.rows.tolist() == whole.mid[rows].tolist()
    assert got.n.tolist() == [int(whole.n[rows][s]) for s in got.start]
    assert (got.start + got.count)[-1:].tolist() == ([size] if size else [])
