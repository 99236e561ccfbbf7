"""Reading the part of a stored frame a selection needs with Arrow
(:mod:`dslog_dagster.spark.stored_subset`), against Spark's own null-safe semijoin of the same
stored frame with the same selected rows (:func:`dslog_dagster.spark.pushdown.semijoin`), and
the selected rows themselves against :func:`dslog_dagster.spark.rowid.rows_by_id` and a
collect; every case it must leave to Spark answers ``None``."""

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.io_managers.spark_frames import load_frame, write_frame
from dslog_dagster.spark import ROW_ID, rowid
from dslog_dagster.spark import stored_subset as sub
from dslog_dagster.spark.pushdown import semijoin, semijoin_keys

_SCHEMA = "a bigint, b string, c int, d date, x double"


def _stored(spark: Any, path: Path, rows: list[tuple[Any, ...]]) -> Any:
    write_frame(spark.createDataFrame(rows, _SCHEMA).repartition(3), path)
    frame, _ = load_frame(spark, path)
    return frame


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)  # nulls among the values


_COLS = ["a", "b", "c", "d", "x"]
# stored keys may be null (a null key is kept by no non-null selected key, as in Spark's
# null-safe semijoin); selected ones are not (key_table refuses them)
_ROW = st.tuples(
    st.one_of(st.none(), st.integers(0, 5)),
    st.one_of(st.none(), st.sampled_from(["p", "q", "r", "é"])),
    st.one_of(st.none(), st.integers(-3, 3)),
    st.sampled_from([None, *(datetime.date(2026, 1, d) for d in (1, 2, 3))]),
    st.floats(allow_nan=False, width=32),
)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.lists(_ROW, min_size=1, max_size=40),
    picks=st.lists(st.integers(0, 39), max_size=6),
    on=st.sampled_from([("a",), ("b",), ("a", "b"), ("c", "d"), ("d",)]),
    span=st.sampled_from([sub.LOOKUP_SPAN, 0]),
    staged=st.booleans(),
    file_rows=st.sampled_from([sub.FILE_ROWS, 1]),
)
def test_the_arrow_subset_equals_sparks_semijoin(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    data: Any,
    picks: Any,
    on: Any,
    span: int,
    staged: bool,
    file_rows: int,
) -> None:
    """Over random stored frames (null keys among them), selections (repeats, none) and key
    columns of each simple type, alone and in pairs, integers matched by the lookup table or
    by Arrow's hash set (``span``), kept rows handed over as a local frame or staged files
    (one per core when there are ``file_rows`` rows for each): the rows kept are exactly
    Spark's null-safe semijoin's, every column and row id included, and the local key frame
    gives Spark the same rows."""
    monkeypatch.setattr(sub, "LOOKUP_SPAN", span)
    monkeypatch.setattr(sub, "FILE_ROWS", file_rows)
    root = tmp_path_factory.mktemp("subset")
    staging = root / "staging" if staged else None
    if staging is not None:
        staging.mkdir()
    frame = _stored(spark, root / "f.parquet", data)
    chosen = [data[i % len(data)] for i in picks]
    chosen = [r for r in chosen if all(r[_COLS.index(c)] is not None for c in on)]
    selected = (
        spark.createDataFrame(chosen, _SCHEMA) if chosen else spark.createDataFrame([], _SCHEMA)
    )
    rows = selected.collect()
    mapping = {c: c for c in on}
    want = _rows(semijoin(frame, selected, mapping))
    keys = sub.key_table(rows, selected.schema, mapping)
    assert keys is not None
    assert keys.num_rows == len({tuple(r[c] for c in on) for r in rows})
    got = sub.read_subset(frame, keys, None if staging is None else str(staging))
    assert got is not None
    assert got.columns == frame.columns
    assert _rows(got) == want
    if staging is not None:  # read from the files written there
        files = got.inputFiles()
        cores = spark.sparkContext.defaultParallelism
        assert len(files) == max(1, min(cores, len(want) // file_rows))
        assert all(str(staging) in f for f in files)
    assert _rows(semijoin_keys(frame, spark.createDataFrame(keys))) == want


def test_what_arrow_cannot_decide_is_left_to_spark(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Null keys, floating-point keys, a frame with anything on its scan, and a selection
    keeping more than LOCAL_ROWS rows each answer None (the caller semijoins in Spark)."""
    day = datetime.date(2026, 1, 1)
    frame = _stored(spark, tmp_path / "f.parquet", [(i % 3, "p", i, day, 0.5) for i in range(9)])
    nulls = spark.createDataFrame([(None, "p", 1, day, 0.5)], _SCHEMA)
    assert sub.key_table(nulls.collect(), nulls.schema, {"a": "a"}) is None
    floats = spark.createDataFrame([(1, "p", 1, day, 0.5)], _SCHEMA)
    assert sub.key_table(floats.collect(), floats.schema, {"x": "x"}) is None
    keys = sub.key_table(floats.collect(), floats.schema, {"a": "a"})
    assert keys is not None
    assert sub.read_subset(frame.filter("c > 2"), keys) is None
    assert sub.read_subset(frame.drop(ROW_ID), keys) is None
    kept = sub.read_subset(frame, keys)
    assert kept is not None
    assert kept.count() == 3
    monkeypatch.setattr(sub, "LOCAL_ROWS", 2)
    assert sub.read_subset(frame, keys) is None


def test_a_file_arrow_cannot_read_is_left_to_spark(spark: Any, tmp_path: Path) -> None:
    """A stored file damaged after Spark listed it: None (Spark's own read then reports it),
    not a pyarrow error out of the re-run."""
    day = datetime.date(2026, 1, 1)
    frame = _stored(spark, tmp_path / "f.parquet", [(i % 3, "p", i, day, 0.5) for i in range(9)])
    keys = pa.table({"a": pa.array([1], pa.int64())})
    assert sub.read_subset(frame, keys) is not None
    victim = sorted((tmp_path / "f.parquet").glob("part-*.parquet"))[-1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    assert sub.read_subset(frame, keys) is None


def test_a_key_the_stored_column_cannot_hold_is_left_to_spark(spark: Any, tmp_path: Path) -> None:
    """A key value outside the stored column's type (a bigint key for an int column) cannot
    be cast for Arrow's filter: None, not an error and not a wrong subset."""
    frame = _stored(spark, tmp_path / "f.parquet", [(1, "p", 1, datetime.date(2026, 1, 1), 0.5)])
    keys = pa.table({"c": pa.array([2**40], pa.int64())})
    assert sub.read_subset(frame, keys) is None


def test_a_table_with_an_empty_batch_reaches_spark_whole(spark: Any) -> None:
    """PySpark 4.3's createDataFrame(pa.Table) drops the batches after an empty one; a
    filtered scan gives such tables (an empty file's batch between two matches). local_frame
    hands every row over, and checks the count."""
    schema = pa.schema([("a", pa.int64())])
    parts = [[3], [], [5, 6]]
    table = pa.Table.from_batches(
        [pa.record_batch([pa.array(p, pa.int64())], schema=schema) for p in parts], schema=schema
    )
    local = sub.local_frame(spark, table)
    assert local is not None
    assert sorted(r.a for r in local.collect()) == [3, 5, 6]


_WIDE = "a bigint, b string, c int, d date, x double, f float, t tinyint, s smallint, o boolean"
_ANY_FLOAT = st.one_of(
    st.none(), st.sampled_from([float("nan"), -0.0, 0.0, float("inf")]), st.floats(width=32)
)
_WIDE_ROW = st.tuples(
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    st.one_of(st.none(), st.text(max_size=3)),
    st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    st.one_of(st.none(), st.dates()),
    _ANY_FLOAT,
    _ANY_FLOAT,
    st.one_of(st.none(), st.integers(-128, 127)),
    st.one_of(st.none(), st.integers(-(2**15), 2**15 - 1)),
    st.one_of(st.none(), st.booleans()),
)


def _exact(rows: list[Any]) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """Rows by id, each as its field names and its values' types and reprs: NaN equals NaN
    here, and ``-0.0`` does not equal ``0.0`` (both would be lost by ``==``)."""
    ordered = sorted(rows, key=lambda r: r[ROW_ID])
    return [(list(r.asDict()), [(type(v).__name__, repr(v)) for v in r]) for r in ordered]


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.lists(_WIDE_ROW, min_size=1, max_size=30),
    picks=st.lists(st.integers(-2, 40), max_size=8),
)
def test_the_arrow_rows_equal_rows_by_id_collected(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, data: Any, picks: Any
) -> None:
    """Over random stored frames with a column of every VALUE_TYPES type (nulls, NaN,
    ``-0.0``, extreme integers) and random ids (repeats, unknown ids, none): read_rows gives
    the rows rows_by_id keeps, as collect gives them (names, Python types, values), and the
    local frame of its table holds the same rows with the stored types."""
    path = tmp_path_factory.mktemp("rows") / "f.parquet"
    write_frame(spark.createDataFrame(data, _WIDE).repartition(3), path)
    frame, _ = load_frame(spark, path)
    read = sub.read_rows(frame, np.asarray(picks, dtype=np.int64))
    assert read is not None
    table, got = read
    assert table.num_rows == len(got)
    local = sub.local_frame(spark, table)
    assert local is not None
    want = rowid.rows_by_id(frame, picks).collect()
    assert _exact(got) == _exact(want)
    assert [(f.name, f.dataType) for f in local.schema] == [
        (f.name, f.dataType) for f in frame.schema
    ]
    assert _exact(local.collect()) == _exact(want)
    on = {"a": "a", "b": "b"}  # the trace's keys from either rows are the same (or None)
    assert sub.key_table(got, local.schema, on) == sub.key_table(want, frame.schema, on)


def test_rows_arrow_cannot_give_exactly_are_left_to_rows_by_id(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column whose collected values Arrow does not give as Spark does (a timestamp, in
    the session's time zone; a binary value, a bytearray), a frame with anything on its
    scan or without row ids, and more ids than LOCAL_ROWS: None (the caller asks Spark)."""
    day = datetime.date(2026, 1, 1)
    frame = _stored(spark, tmp_path / "f.parquet", [(i % 3, "p", i, day, 0.5) for i in range(9)])
    assert sub.read_rows(frame, [1, 2]) is not None
    assert sub.read_rows(frame.filter("c > 2"), [1, 2]) is None
    assert sub.read_rows(frame.drop(ROW_ID), [1, 2]) is None
    for extra in ("CAST('2026-01-01 10:00:00' AS TIMESTAMP)", "CAST('z' AS BINARY)"):
        path = tmp_path / f"{len(extra)}.parquet"
        write_frame(frame.drop(ROW_ID).selectExpr("*", f"{extra} AS e"), path)
        other, _ = load_frame(spark, path)
        assert sub.read_rows(other, [1, 2]) is None
    monkeypatch.setattr(sub, "LOCAL_ROWS", 1)
    assert sub.read_rows(frame, [1, 2]) is None
    assert sub.read_rows(frame, [1, 1]) is not None  # one id, asked twice


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    picks=st.lists(st.integers(0, 59), max_size=6),
    on=st.sampled_from([("a",), ("b",), ("a", "b")]),
)
def test_row_groups_left_out_by_their_statistics_hold_no_key(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, picks: Any, on: Any
) -> None:
    """Files of many row groups, sorted on ``a`` (so most groups' statistics rule out the
    selected keys and are not read): the subset and the selected rows are still exactly
    Spark's."""
    path = tmp_path_factory.mktemp("groups") / "f.parquet"
    path.mkdir()
    for part in range(2):
        ids = np.arange(part * 30, part * 30 + 30, dtype=np.int64)
        table = pa.table(
            {
                "a": pa.array(ids // 4, pa.int64()),
                "b": pa.array([f"s{i % 7}" for i in ids], pa.string()),
                ROW_ID: pa.array(ids, pa.int64()),
            }
        )
        pq.write_table(table, path / f"part-{part}.parquet", row_group_size=5)
    frame = spark.read.parquet(str(path))
    selected = rowid.rows_by_id(frame, picks)
    rows = selected.collect()
    mapping = {c: c for c in on}
    keys = sub.key_table(rows, selected.schema, mapping)
    assert keys is not None
    got = sub.read_subset(frame, keys)
    assert got is not None
    assert _rows(got) == _rows(semijoin(frame, selected, mapping))
    read = sub.read_rows(frame, picks)
    assert read is not None
    assert _exact(read[1]) == _exact(rows)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64()]),
    data=st.data(),
    span=st.sampled_from([sub.LOOKUP_SPAN, 0]),
)
def test_key_columns_are_matched_as_arrows_is_in(kind: Any, data: Any, span: int) -> None:
    """An integer key column matched by the lookup table (over the keys' range; nulls, the
    type's extremes, an 8-bit column spanning more than its type holds) or by Arrow's hash
    set is ``pc.is_in`` exactly; the same for strings and dates."""
    top = 2 ** (kind.bit_width - 1)
    ints = st.integers(-top, top - 1)
    base = data.draw(ints)
    near = st.integers(max(base - 3, -top), min(base + 12, top - 1))  # a range the table spans
    keys = pa.array(sorted(data.draw(st.sets(st.one_of(near, ints), max_size=6))), kind)
    values = st.one_of(st.none(), near, ints)
    column = pa.array(data.draw(st.lists(values, max_size=40)), kind)
    default = sub.LOOKUP_SPAN
    sub.LOOKUP_SPAN = span
    try:
        got = sub._matcher(keys)(column)
    finally:
        sub.LOOKUP_SPAN = default
    want = pc.is_in(column, value_set=keys).to_numpy(zero_copy_only=False)
    assert got.dtype == np.bool_
    assert got.tolist() == want.tolist()
    text = pa.array(["p", None, "q", "é"])
    assert sub._matcher(pa.array(["é", "q"]))(text).tolist() == [False, False, True, True]
    days = pa.array([datetime.date(2026, 1, d) for d in (1, 2)] + [None], pa.date32())
    assert sub._matcher(days.slice(1, 1))(days).tolist() == [False, True, False]


def test_staged_rows_of_every_value_type_reach_spark_as_they_were(
    spark: Any, tmp_path: Path
) -> None:
    """Kept rows staged as a Parquet file that Spark scans: every VALUE_TYPES column (nulls,
    NaN, ``-0.0``, float32, 8- and 16-bit integers) reads back exactly as Spark's own
    semijoin gives it. A column of another type (binary) is handed over as a local frame,
    nothing staged."""
    day = datetime.date(2026, 1, 1)
    rows = [
        (1, "p", 1, day, float("nan"), -0.0, -128, 32767, True),
        (1, None, None, None, -0.0, float("nan"), None, None, None),
        (2, "é", -(2**31), day, 1.5, 0.1, 127, -(2**15), False),
        (None, "q", 3, day, 0.25, 0.5, 0, 0, True),
    ]
    write_frame(spark.createDataFrame(rows, _WIDE).repartition(2), tmp_path / "f.parquet")
    frame, _ = load_frame(spark, tmp_path / "f.parquet")
    selected = frame.filter("a = 1")
    keys = sub.key_table(selected.collect(), selected.schema, {"a": "a"})
    assert keys is not None
    staging = tmp_path / "staging"
    staging.mkdir()
    got = sub.read_subset(frame, keys, str(staging))
    assert got is not None
    assert len(list(staging.iterdir())) == 1
    want = semijoin(frame, selected, {"a": "a"}).collect()
    assert len(want) == 2
    assert _exact(got.collect()) == _exact(want)
    assert [(f.name, f.dataType) for f in got.schema] == [
        (f.name, f.dataType) for f in frame.schema
    ]
    binary = frame.selectExpr("*", "CAST(b AS BINARY) AS e").drop(ROW_ID)
    write_frame(binary, tmp_path / "g.parquet")
    other, _ = load_frame(spark, tmp_path / "g.parquet")
    empty = tmp_path / "empty"
    empty.mkdir()
    local = sub.read_subset(other, keys, str(empty))
    assert local is not None
    assert local.count() == 2
    assert list(empty.iterdir()) == []


def test_collected_rows_equal_collect_through_arrow_or_not(spark: Any) -> None:
    """The selective re-run's rows for the local matching: through Arrow for simple types,
    through ``collect`` otherwise; either way the tuples ``collect`` gives (NaN, -0.0, nulls,
    dates, bytes, timestamps, structs)."""
    from dslog_dagster.spark.on_demand import _collected

    simple = spark.createDataFrame(
        [
            (1, float("nan"), "a", datetime.date(2024, 2, 29), True, 7),
            (-(2**63), -0.0, None, None, None, 8),
            (None, 1.5, "é", datetime.date(1970, 1, 1), False, 9),
        ],
        f"i long, d double, s string, day date, b boolean, {ROW_ID} long",
    ).selectExpr("*", "cast(d as float) as f", "cast(i % 100 as tinyint) as t")
    nested = spark.createDataFrame(
        [(bytearray(b"x\x00"), datetime.datetime(2024, 1, 2, 3, 4, 5), (1, "z"), 0)],
        f"bin binary, ts timestamp, st struct<a:int,b:string>, {ROW_ID} long",
    )
    for frame, arrow in ((simple, True), (nested, False)):
        calls: list[str] = []
        real = frame.toArrow
        frame.toArrow = lambda real=real, calls=calls: calls.append("arrow") or real()  # type: ignore[method-assign]
        got = _collected(frame)
        want = [tuple(r) for r in frame.collect()]
        assert calls == (["arrow"] if arrow else [])
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert [type(x) for x in g] == [type(x) for x in w]
            assert repr(g) == repr(w)  # NaN and -0.0 compare by their text
