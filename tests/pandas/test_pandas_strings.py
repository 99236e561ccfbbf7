"""Character-range lineage of pandas string methods against a brute-force reference.

The reference places each method's result in its argument with plain Python on the values
(Python strings count code points, as the capture does): a loop over the rows, ``re`` for the
tokens and groups, Python's own slicing of ``range(len(s))`` for slices. The capture's character
tables, decompressed, must hold exactly those pairs ``(output row, output char) ← (input row,
input char)``, and the values must equal plain pandas.
"""

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.errors import InvalidRelationError
from dslog_dagster.pandas import capture_pandas

Pairs = set[tuple[int, int, int, int]]
# per value: [(output start, input column, input start, length)]
Place = Callable[[dict[str, Any]], list[tuple[int, str, int, int]]]

LINES = ["  Hello World  ", "x1 y22 z333", "", None, "café1 naïve22 😀x4", "ab ab", "-12", np.nan]
BS = ["ab", None, "q", "z", "é😀", "c", "d", "e"]


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"line": LINES, "b": BS}, index=[5, 3, 9, 1, 0, 2, 8, 7])


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _one(span: Callable[[str], tuple[int, int, int]]) -> Place:
    """A piece of ``line``: span(s) -> (output start, input start, length)."""

    def place(row: dict[str, Any]) -> list[tuple[int, str, int, int]]:
        s = row["line"]
        if not _text(s):
            return []
        o, i, n = span(s)
        return [(o, "line", i, n)] if n > 0 else []

    return place


def _by_index(fn: Callable[[list[int]], list[int]]) -> Place:
    """A slice: output char t <- input char fn(range(len(s)))[t] (Python's own slicing)."""

    def place(row: dict[str, Any]) -> list[tuple[int, str, int, int]]:
        s = row["line"]
        if not _text(s):
            return []
        return [(t, "line", i, 1) for t, i in enumerate(fn(list(range(len(s)))))]

    return place


def _strip(s: str, left: bool, right: bool) -> tuple[int, int, int]:
    a = len(s) - len(s.lstrip()) if left else 0
    b = len(s.rstrip()) if right else len(s)
    return (0, a, max(b - a, 0))


def _pad(width: int, side: str) -> Callable[[str], tuple[int, int, int]]:
    def span(s: str) -> tuple[int, int, int]:
        marg = max(width - len(s), 0)
        left = {"left": marg, "right": 0, "both": marg // 2 + (marg & width & 1)}[side]
        return (left, 0, len(s))

    return span


def _zfill(width: int) -> Place:
    def place(row: dict[str, Any]) -> list[tuple[int, str, int, int]]:
        s = row["line"]
        if not _text(s) or not s:
            return []
        marg = max(width - len(s), 0)
        if marg and s[0] in "+-":
            return [(0, "line", 0, 1), (marg + 1, "line", 1, len(s) - 1)]
        return [(marg, "line", 0, len(s))]

    return place


def _tokens(s: str, pattern: str | None) -> list[tuple[int, int]]:
    if pattern is None:
        return [m.span() for m in re.finditer(r"\S+", s)]
    spans, at = [], 0
    for m in re.finditer(re.escape(pattern), s):
        spans.append((at, m.start()))
        at = m.end()
    return [*spans, (at, len(s))]


def _token(k: int, pattern: str | None) -> Place:
    def place(row: dict[str, Any]) -> list[tuple[int, str, int, int]]:
        s = row["line"]
        if not _text(s):
            return []
        toks = _tokens(s, pattern)
        if not -len(toks) <= k < len(toks):
            return []
        a, b = toks[k]
        return [(0, "line", a, b - a)] if b > a else []

    return place


def _group(pattern: str, g: int) -> Place:
    def place(row: dict[str, Any]) -> list[tuple[int, str, int, int]]:
        s = row["line"]
        m = re.search(pattern, s) if _text(s) else None
        if m is None or m.group(g) is None:
            return []
        return [(0, "line", m.start(g), len(m.group(g)))] if m.group(g) else []

    return place


def _cat(sep: str, na_rep: str | None) -> Place:
    def place(row: dict[str, Any]) -> list[tuple[int, str, int, int]]:
        parts = [("line", row["line"]), ("b", row["b"])]
        if na_rep is None and not all(_text(v) for _, v in parts):
            return []
        out, at = [], 0
        for name, v in parts:
            if _text(v):
                if v:
                    out.append((at, name, 0, len(v)))
                at += len(v)
            else:
                at += len(na_rep or "")
            at += len(sep)
        return out

    return place


# output column -> (method on the tracked frame, reference placement)
METHODS: dict[str, tuple[Callable[[Any], Any], Place]] = {
    "sl": (lambda d: d.line.str.slice(1, 4), _by_index(lambda r: r[1:4])),
    "neg": (lambda d: d.line.str[-4:-1], _by_index(lambda r: r[-4:-1])),
    "far": (lambda d: d.line.str[3:100], _by_index(lambda r: r[3:100])),
    "back": (lambda d: d.line.str[::-2], _by_index(lambda r: r[::-2])),
    "step": (lambda d: d.line.str.slice(1, None, 3), _by_index(lambda r: r[1::3])),
    "get": (lambda d: d.line.str.get(-2), _by_index(lambda r: r[-2:-1] if len(r) >= 2 else [])),
    "strip": (lambda d: d.line.str.strip(), _one(lambda s: _strip(s, True, True))),
    "lstrip": (lambda d: d.line.str.lstrip(), _one(lambda s: _strip(s, True, False))),
    "rstrip": (lambda d: d.line.str.rstrip(), _one(lambda s: _strip(s, False, True))),
    "lower": (lambda d: d.line.str.lower(), _one(lambda s: (0, 0, len(s)))),
    "upper": (lambda d: d.line.str.upper(), _one(lambda s: (0, 0, len(s)))),
    "padl": (lambda d: d.line.str.pad(9, fillchar="*"), _one(_pad(9, "left"))),
    "ljust": (lambda d: d.line.str.ljust(9, "."), _one(_pad(9, "right"))),
    "rjust": (lambda d: d.line.str.rjust(4), _one(_pad(4, "left"))),
    "center": (lambda d: d.line.str.center(10, "~"), _one(_pad(10, "both"))),
    "zfill": (lambda d: d.line.str.zfill(6), _zfill(6)),
    "tok1": (lambda d: d.line.str.split(" ").str.get(1), _token(1, " ")),
    "tok_last": (lambda d: d.line.str.split().str[-1], _token(-1, None)),
    "rx": (lambda d: d.line.str.extract(r"([a-z]+)(\d+)")[1], _group(r"([a-z]+)(\d+)", 2)),
    "plus": (lambda d: d.line + d.b, _cat("", None)),
    "plus_lit": (lambda d: d.line + "|" + d.b, lambda r: _shift_b(_cat("", None)(r), r)),
    "cat": (lambda d: d.line.str.cat(d.b, sep="--", na_rep="?"), _cat("--", "?")),
    "nested": (
        lambda d: d.line.str.strip().str.slice(1, 5).str.upper(),
        _one(lambda s: _nested(s)),
    ),
}


def _shift_b(spans: list[tuple[int, str, int, int]], row: dict[str, Any]) -> list[Any]:
    """``line + '|' + b``: b's characters one further right."""
    return [(o + (1 if c == "b" else 0), c, i, n) for o, c, i, n in spans]


def _nested(s: str) -> tuple[int, int, int]:
    _, a, n = _strip(s, True, True)
    t = s[a : a + n][1:5]
    return (0, a + 1, len(t))


def _expected(
    df: pd.DataFrame, place: Place, in_col: str, out_rows: list[int] | None = None
) -> Pairs:
    out: Pairs = set()
    for k, row in enumerate(df.to_dict("records")):
        for o, c, i, n in place(row):
            if c == in_col:
                o_row = k if out_rows is None else out_rows[k]
                out |= {(o_row, o + t, k, i + t) for t in range(n)}
    return out


def _pairs(cap: Any, column: str, in_col: str) -> Pairs:
    rel = cap.characters.table(column, "input0", in_col).decompress()
    return {tuple(int(v) for v in p) for p in rel.pairs().tolist()}  # type: ignore[misc]


def _run(fn: Callable[[Any], Any], df: pd.DataFrame) -> Any:
    (cap,) = capture_pandas(fn, [df], characters=True)
    pd.testing.assert_frame_equal(cap.frame, fn(df))
    return cap


def test_each_method_against_reference() -> None:
    df = _frame()

    def f(d: Any) -> Any:
        return d.assign(**{name: fn(d) for name, (fn, _) in METHODS.items()})

    cap = _run(f, df)
    for name, (_, place) in METHODS.items():
        for in_col in ("line", "b"):
            want = _expected(df, place, in_col)
            if in_col == "b" and name not in ("plus", "plus_lit", "cat"):
                assert want == set()
                continue
            assert _pairs(cap, name, in_col) == want, (name, in_col)
    assert cap.characters.coarse_cells == {}
    assert cap.characters.whole_cell == {}


def test_trace_characters_code_points() -> None:
    cap = _run(lambda d: d.assign(rx=d.line.str.extract(r"([a-z]+)(\d+)")[1]), _frame())
    (hit,) = cap.trace_characters("rx", 4)  # 'café1 naïve22 😀x4': [a-z]+ then digits: 've22'
    assert (hit.input, hit.column, hit.row, hit.start, hit.stop) == ("input0", "line", 4, 11, 13)
    (whole,) = [r for r in cap.trace_characters("b", 0) if r.column == "b"]
    assert (whole.row, whole.start, whole.stop, whole.whole) == (0, 0, 2, False)
    with pytest.raises(InvalidRelationError, match="No output column"):
        cap.trace_characters("nope", 0)


def test_split_expand_and_explode_against_reference() -> None:
    df = _frame()

    def f(d: Any) -> Any:
        return d.line.str.split(" ", expand=True)

    cap = _run(f, df)
    for j in range(cap.frame.shape[1]):
        assert _pairs(cap, str(j), "line") == _expected(df, _token(j, " "), "line"), j

    def g(d: Any) -> Any:
        return d.assign(tok=d.line.str.split(" ")).explode("tok", ignore_index=True)

    cap = _run(g, df)
    expected: Pairs = set()
    o = 0
    for k, s in enumerate(LINES):
        toks = _tokens(s, " ") if _text(s) else [(0, 0)]
        for a, b in toks:
            expected |= {(o, t, k, a + t) for t in range(b - a)}
            o += 1
    assert _pairs(cap, "tok", "line") == expected
    # the series form gives the same tokens
    cap_s = _run(lambda d: d.line.str.split(" ").explode().to_frame(), df)
    assert _pairs(cap_s, "line", "line") == expected


def test_multi_hop_split_explode_extract_groupby() -> None:
    df = _frame()
    pattern = r"([a-zéï]+)\d*"

    def f(d: Any) -> Any:
        toks = d.assign(tok=d.line.str.split(" ")).explode("tok")
        words = toks.assign(w=toks.tok.str.extract(pattern, expand=False))
        return words.groupby("w", as_index=False).agg(k=("b", "count"))

    cap = _run(f, df)
    out = {w: k for k, w in enumerate(cap.frame["w"])}
    expected: Pairs = set()
    for r, line in enumerate(LINES):
        if not _text(line):
            continue
        for a, b in _tokens(line, " "):
            m = re.search(pattern, line[a:b])
            if m is None or not m.group(1):
                continue
            expected |= {
                (out[m.group(1)], t, r, a + m.start(1) + t) for t in range(len(m.group(1)))
            }
    assert _pairs(cap, "w", "line") == expected
    spans = [(x.row, x.start, x.stop) for x in cap.trace_characters("w", out["ab"])]
    assert spans == [(5, 0, 2), (5, 3, 5)]
    assert [(x.row, x.start, x.stop) for x in cap.trace_characters("w", out["naïve"])] == [
        (4, 6, 11)
    ]


def test_extractall_rows_and_groups() -> None:
    df = _frame()
    pattern = r"(?P<w>[a-z])(?P<d>\d+)"
    cap = _run(lambda d: d.line.str.extractall(pattern).reset_index(drop=True), df)
    expected: dict[str, Pairs] = {"w": set(), "d": set()}
    o = 0
    for r, s in enumerate(LINES):
        if not _text(s):
            continue
        for m in re.finditer(pattern, s):
            for g in ("w", "d"):
                expected[g] |= {(o, t, r, m.start(g) + t) for t in range(len(m.group(g)))}
            o += 1
    for g in ("w", "d"):
        assert _pairs(cap, g, "line") == expected[g]


def test_unsupported_method_is_coarse_and_counted() -> None:
    df = _frame()
    cap = _run(lambda d: d.assign(r=d.line.str.replace("a", "bb"), n=d.line.str.len()), df)
    live = [k for k, s in enumerate(LINES) if _text(s) and s.replace("a", "bb")]
    assert cap.characters.coarse_cells == {"r": len(live)}
    expected = {
        (k, oc, k, ic)
        for k in live
        for oc in range(len(LINES[k].replace("a", "bb")))
        for ic in range(len(LINES[k]))
    }
    assert _pairs(cap, "r", "line") == expected
    assert "n" not in cap.characters.whole_cell  # not a string: no character axis


def test_length_changing_case_is_coarse() -> None:
    df = pd.DataFrame({"line": ["straße", "ok"]})
    cap = _run(lambda d: d.assign(u=d.line.str.upper()), df)
    assert cap.characters.coarse_cells == {"u": 1}
    assert _pairs(cap, "u", "line") == {(0, o, 0, i) for o in range(7) for i in range(6)} | {
        (1, t, 1, t) for t in range(2)
    }


def test_column_without_rule_is_whole_cell() -> None:
    df = _frame()
    cap = _run(lambda d: d.assign(m=d.line.map(lambda v: v[::-1] if isinstance(v, str) else v)), df)
    assert "without a character rule" in cap.characters.whole_cell["m"]
    (whole,) = cap.trace_characters("m", 1)
    assert (whole.column, whole.row, whole.stop, whole.whole) == ("line", 1, None, True)


def test_without_characters_the_methods_keep_cell_lineage() -> None:
    df = _frame()
    fn = lambda d: d.assign(s=d.line.str.slice(0, 2), t=d.line.str.split(" ").str.get(0))  # noqa: E731
    (cap,) = capture_pandas(fn, [df])
    pd.testing.assert_frame_equal(cap.frame, fn(df))
    assert cap.characters is None
    assert cap.column_lineage["s"] == {"input0": ["line"]}
    with pytest.raises(InvalidRelationError, match="characters=True"):
        cap.trace_characters("s", 0)


def test_fixed_width_slice_is_one_provrc_row() -> None:
    n = 3000
    df = pd.DataFrame({"code": [f"{k:08d}abc" for k in range(n)]})
    cap = _run(lambda d: d.assign(part=d.code.str[2:6])[["part"]], df)
    table = cap.characters.table("part", "input0", "code")
    assert table.n_pairs == 4 * n
    assert table.stored_rows == 1


TEXT = st.text(alphabet=st.sampled_from("ab -é😀ß1"), max_size=8)
BOUND = st.one_of(st.none(), st.integers(-10, 10))


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), TEXT), min_size=1, max_size=6),
    start=BOUND,
    stop=BOUND,
    step=st.one_of(st.none(), st.integers(-3, 3).filter(lambda s: s != 0)),
    k=st.integers(-6, 6),
)
def test_random_slices_and_items_against_python(values, start, stop, step, k) -> None:
    df = pd.DataFrame({"line": values})
    cap = _run(lambda d: d.assign(s=d.line.str.slice(start, stop, step), g=d.line.str.get(k)), df)
    sl = _by_index(lambda r: r[start:stop:step])
    gt = _by_index(lambda r: [r[k]] if -len(r) <= k < len(r) else [])
    assert _pairs_or_empty(cap, "s") == _expected(df, sl, "line")
    assert _pairs_or_empty(cap, "g") == _expected(df, gt, "line")
    assert cap.characters.coarse_cells == {}


def _pairs_or_empty(cap: Any, column: str) -> Pairs:
    if column not in cap.characters.columns():
        return set()
    return _pairs(cap, column, "line")


def test_a_placement_that_does_not_check_out_is_coarse() -> None:
    """The check against the values: a wrong offset makes the cell coarse (whole input cell),
    never wrong pairs."""
    from dslog_dagster.pandas import char_segments as cs

    segs, slots = cs.Segments(), {}
    values = pd.Series(["abc", "xyz"])
    s0 = cs.input_chars(segs, slots, 0, 0, values)
    assert s0 is not None
    out = pd.Series(["ab", "yz"])
    rows = np.arange(2, dtype=np.int64)
    zero = np.zeros(2, np.int64)
    # row 0 is placed right; row 1 claims 'yz' is characters 0:2 of 'xyz' (it is 1:3)
    slot = cs.compose(segs, slots, s0, rows, rows, zero, zero, np.full(2, 2), 2, np.ones(2, bool))
    lin = cs.character_lineage(
        slots, segs, [("o", slot, {(0, 0)})], [out], ["input0"], [["line"]], {(0, 0): values}
    )
    assert lin.coarse_cells == {"o": 1}
    got = {tuple(int(v) for v in p) for p in lin.table("o", "input0", "line").decompress().pairs()}
    assert got == {(0, 0, 0, 0), (0, 1, 0, 1)} | {(1, o, 1, i) for o in range(2) for i in range(3)}


VALUE = st.one_of(st.none(), st.text(alphabet=st.sampled_from("ab -é😀1+\t"), max_size=9))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(VALUE, VALUE), min_size=1, max_size=6))
def test_random_strings_every_method_against_reference(rows) -> None:
    df = pd.DataFrame({"line": [a for a, _ in rows], "b": [b for _, b in rows]})

    def f(d: Any) -> Any:
        return d.assign(**{name: fn(d) for name, (fn, _) in METHODS.items()})

    cap = _run(f, df)
    assert cap.characters.coarse_cells == {}
    for name, (_, place) in METHODS.items():
        for in_col in ("line", "b"):
            want = _expected(df, place, in_col)
            has = (name, "input0", in_col) in {
                (t.column, t.input, t.input_column) for t in cap.characters.tables
            }
            assert (_pairs(cap, name, in_col) if has else set()) == want, (name, in_col)
