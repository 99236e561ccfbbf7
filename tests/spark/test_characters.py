"""Character-range lineage of Spark string functions against a brute-force reference.

The reference re-implements each function's placement in plain Python on the collected small
data (Python strings count code points, as Spark's ``length`` and ``substring`` do), and the
capture's character tables, decompressed, must hold exactly those pairs
``(output row, output char) ← (input row, input char)``.
"""

import re
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import functions as F

from dslog_dagster.spark import ROW_ID, capture_frames

LINES = [
    (0, "  Hello World  ", "ab"),
    (1, "x1 y22 z333", None),
    (2, "", "q"),
    (3, None, "z"),
    (4, "café1 naïve22 😀x4", "é😀"),  # code points: é, ï and the emoji are one character each
    (5, "ab ab", "c"),
]

Pairs = set[tuple[int, int, int, int]]
Span = tuple[int, int]  # input characters [start, stop) that make the output value, in order


def _sub(s: str, pos: int, n: int) -> Span:
    start = pos - 1 if pos > 0 else (len(s) + pos if pos < 0 else 0)
    end = start + n
    start = max(start, 0)
    return (start, max(start, min(end, len(s))))


def _tokens(s: str, pattern: str) -> list[Span]:
    spans, at = [], 0
    for m in re.finditer(pattern, s):
        spans.append((at, m.start()))
        at = m.end()
    return [*spans, (at, len(s))]


def _rx(s: str, pattern: str, idx: int) -> Span:
    m = re.search(pattern, s)
    return m.span(idx) if m and m.group(idx) is not None else (0, 0)


# output column -> (Spark expression, placement: input value -> [(output start, column, span)])
Place = Callable[[dict[str, Any]], list[tuple[int, str, Span]]]


def _one(col: str, span: Callable[[str], Span]) -> Place:
    return lambda row: [] if row[col] is None else [(0, col, span(row[col]))]


def _pad(n: int, left: bool) -> Place:
    def place(row: dict[str, Any]) -> list[tuple[int, str, Span]]:
        s = row["line"]
        if s is None:
            return []
        if len(s) >= n:
            return [(0, "line", (0, n))]
        return [(n - len(s) if left else 0, "line", (0, len(s)))]

    return place


def _concat(sep: str | None) -> Place:
    def place(row: dict[str, Any]) -> list[tuple[int, str, Span]]:
        parts = [("line", row["line"]), ("b", row["b"])]
        if sep is None:
            if any(v is None for _, v in parts):
                return []
            return [
                (0, "line", (0, len(parts[0][1]))),
                (len(parts[0][1]) + 1, "b", (0, len(parts[1][1]))),
            ]
        out, at = [], 0
        for name, v in parts:
            if v is None:
                continue
            out.append((at, name, (0, len(v))))
            at += len(v) + len(sep)
        return out

    return place


def functions() -> dict[str, tuple[Any, Place]]:
    """Output column -> (Spark expression, reference placement); Columns need a session."""
    return {
        "sub": (F.substring("line", 2, 3), _one("line", lambda s: _sub(s, 2, 3))),
        "sub_neg": (F.substring("line", -4, 3), _one("line", lambda s: _sub(s, -4, 3))),
        "substr": (F.col("line").substr(5, 100), _one("line", lambda s: _sub(s, 5, 100))),
        "left": (F.left("line", F.lit(4)), _one("line", lambda s: (0, min(4, len(s))))),
        "right": (
            F.right("line", F.lit(3)),
            _one("line", lambda s: (len(s) - min(3, len(s)), len(s))),
        ),
        "trim": (
            F.trim("line"),
            _one(
                "line",
                lambda s: (
                    (len(s) - len(s.lstrip(" ")), len(s.rstrip(" "))) if s.strip(" ") else (0, 0)
                ),
            ),
        ),
        "ltrim": (F.ltrim("line"), _one("line", lambda s: (len(s) - len(s.lstrip(" ")), len(s)))),
        "rtrim": (F.rtrim("line"), _one("line", lambda s: (0, len(s.rstrip(" "))))),
        "lower": (F.lower("line"), _one("line", lambda s: (0, len(s)))),
        "upper": (F.upper("line"), _one("line", lambda s: (0, len(s)))),
        "rx": (
            F.regexp_extract("line", r"([a-z]+)(\d+)", 2),
            _one("line", lambda s: _rx(s, r"([a-z]+)(\d+)", 2)),
        ),
        "tok1": (F.split("line", " ").getItem(0), _one("line", lambda s: _tokens(s, " ")[0])),
        "cc": (F.concat("line", F.lit("-"), "b"), _concat(None)),
        "ws": (F.concat_ws("--", "line", "b"), _concat("--")),
        "lpad": (F.lpad("line", 8, "*"), _pad(8, True)),
        "rpad": (F.rpad("line", 8, "*"), _pad(8, False)),
        "nested": (F.upper(F.substring(F.trim("line"), 2, 4)), _one("line", lambda s: _nested(s))),
    }


def _nested(s: str) -> Span:
    t0 = len(s) - len(s.lstrip(" ")) if s.strip(" ") else 0
    t = s.strip(" ")
    a, b = _sub(t, 2, 4)
    return (t0 + a, t0 + b)


def _expected(rows: list[dict[str, Any]], column: str, place: Place, in_col: str) -> Pairs:
    out: Pairs = set()
    for row in rows:
        for o_start, name, (a, b) in place(row):
            if name != in_col:
                continue
            out |= {(row["o"], o_start + k, row["id"], a + k) for k in range(b - a)}
    return out


def _pairs(cap: Any, column: str, in_col: str) -> Pairs:
    rel = cap.characters.table(column, "input0", in_col).decompress()
    return {tuple(int(v) for v in p) for p in rel.pairs().tolist()}  # type: ignore[misc]


@pytest.fixture(scope="module")
def lines(spark: Any) -> Any:
    df = spark.createDataFrame(LINES, "id long, line string, b string")
    return df.withColumn(ROW_ID, F.col("id"))


@pytest.fixture(scope="module")
def projected(lines: Any) -> Any:
    opaque = F.udf(lambda s: None if s is None else s[:2], "string")

    def f(x: Any) -> Any:
        cols = [e.alias(n) for n, (e, _) in functions().items()]
        return x.select("id", *cols, opaque("line").alias("udf"), F.length("line").alias("n"))

    cap = capture_frames(f, [lines], input_rows=[len(LINES)], characters=True)
    plain = f(lines.drop(ROW_ID)).orderBy("id").collect()
    return cap, plain


def test_each_function_against_reference(projected: Any) -> None:
    cap, plain = projected
    got = cap.frame_with_row_id.collect()
    # values equal plain PySpark
    assert sorted((r.asDict() for r in cap.frame.collect()), key=lambda r: r["id"]) == [
        r.asDict() for r in plain
    ]
    by_id = {t[0]: dict(zip(("id", "line", "b"), t, strict=True)) for t in LINES}
    rows = [{**by_id[r["id"]], "o": r[ROW_ID]} for r in got]
    for name, (_, place) in functions().items():
        in_cols = ["line", "b"] if name in ("cc", "ws") else ["line"]
        for in_col in in_cols:
            assert _pairs(cap, name, in_col) == _expected(rows, name, place, in_col), name
    assert not cap.characters.coarse_cells
    assert "opaque" in cap.characters.whole_cell["udf"]
    assert "n" not in cap.characters.whole_cell  # not a string: no character axis
    assert cap.characters.columns() == sorted(functions())


def test_trace_characters_and_whole_cell_fallback(projected: Any) -> None:
    cap, _ = projected
    got = {r["id"]: r[ROW_ID] for r in cap.frame_with_row_id.collect()}
    o = got[4]  # 'café1 naïve22 😀x4': [a-z]+ then digits first matches 've22'
    (hit,) = cap.trace_characters("rx", o)
    assert (hit.input, hit.column, hit.row, hit.start, hit.stop) == ("input0", "line", 4, 11, 13)
    parts = cap.trace_characters("cc", got[0], 15, 18)  # '-ab' of '  Hello World  -ab'
    assert [(p.column, p.row, p.start, p.stop) for p in parts] == [("b", 0, 0, 2)]
    (whole,) = cap.trace_characters("udf", got[1])
    assert whole.whole
    assert (whole.column, whole.row, whole.stop) == ("line", 1, None)


def test_multi_hop_split_explode_regexp_groupby(lines: Any) -> None:
    pattern = r"([a-zéï]+)\d*"

    def f(x: Any) -> Any:
        toks = x.select(F.explode(F.split("line", " ")).alias("tok"))
        words = toks.select(F.regexp_extract("tok", pattern, 1).alias("w"))
        return words.groupBy("w").agg(F.count("*").alias("k"))

    cap = capture_frames(f, [lines], input_rows=[len(LINES)], characters=True)
    expected: Pairs = set()
    out = {r["w"]: r[ROW_ID] for r in cap.frame_with_row_id.collect()}
    for rid, line, _ in LINES:
        if line is None:
            continue
        for a, b in _tokens(line, " "):
            tok = line[a:b]
            s, e = _rx(tok, pattern, 1)
            w = tok[s:e]
            expected |= {(out[w], k, rid, a + s + k) for k in range(e - s)}
    assert _pairs(cap, "w", "line") == expected
    assert not cap.characters.coarse_cells
    # 'ab ab' makes the word 'ab' twice from row 5: both occurrences, characters 0-1 and 3-4
    spans = [(r.row, r.start, r.stop) for r in cap.trace_characters("w", out["ab"])]
    assert spans == [(5, 0, 2), (5, 3, 5)]
    # code points, not bytes: 'naïve' starts at character 6 of row 4 (byte 7 in UTF-8)
    assert [(r.row, r.start, r.stop) for r in cap.trace_characters("w", out["naïve"])] == [
        (4, 6, 11)
    ]
    # the count is an aggregate's value: whole cells, said so
    assert "k" not in cap.characters.whole_cell  # not a string


def test_fixed_width_substring_is_one_provrc_row(spark: Any) -> None:
    n = 3000
    df = spark.range(n).select(F.col("id"), F.format_string("%08dabc", "id").alias("code"))
    df = df.withColumn(ROW_ID, F.col("id"))

    cap = capture_frames(
        lambda x: x.select(F.substring("code", 3, 4).alias("part")),
        [df],
        input_rows=[n],
        characters=True,
    )
    table = cap.characters.table("part", "input0", "code")
    assert table.n_pairs == 4 * n
    assert table.stored_rows == 1  # (r, k) <- (r', k + 2): relative on both axes
    rel = table.decompress()
    ids = {r[ROW_ID]: r["part"] for r in cap.frame_with_row_id.collect()}
    codes = {int(r["id"]): r["code"] for r in df.collect()}
    for o, oc, r, ic in rel.pairs().tolist()[:50]:
        assert ids[o][oc] == codes[r][ic]
