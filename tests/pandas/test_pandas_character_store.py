"""pandas character tables stored with the operation and queried across stored steps,
and the same two steps as ``@tracked_asset(characters=True)`` in a Dagster materialization.

Two pandas steps are captured with ``characters=True`` and registered in one store:
``tokens`` = ``lines`` split on spaces and exploded, then ``words`` = the letters of each token
(``str.extract``) grouped by word. A character query from a word walks both stored operations
back to the characters of ``lines`` (``trace_character_range`` and ``dslog query --chars``);
the brute-force reference finds every occurrence with ``re`` on the raw lines.
"""

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster import DSLogError, DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.cli import main
from dslog_dagster.core.character_trace import trace_character_range
from dslog_dagster.core.store import LineageStore, read_characters
from dslog_dagster.pandas import capture_pandas

PATTERN = r"([a-zé]+)\d*"
LINES = ["ab cd1 ab", "x22 zz", "", "café9 ab7", "cd cd"]


def _tokens(d: Any) -> Any:
    return d.assign(tok=d.line.str.split(" ")).explode("tok", ignore_index=True)


def _words(d: Any) -> Any:
    w = d.assign(w=d.tok.str.extract(PATTERN, expand=False))
    return w.groupby("w", as_index=False).agg(n=("tok", "count"))


def _pipeline(root: Path, lines: list[str]) -> LineageStore:
    store = LineageStore(root)
    df = pd.DataFrame({"line": lines})
    (t,) = capture_pandas(_tokens, [df], characters=True)
    t.register(store, "tokens", ["lines"], op_name="tokens")
    (w,) = capture_pandas(_words, [t.frame], characters=True)
    pd.testing.assert_frame_equal(w.frame, _words(_tokens(df)))
    w.register(store, "words", ["tokens"], op_name="words")
    return store


def _reference(lines: list[str], word: str) -> set[tuple[int, int]]:
    """(line row, character) of every token whose letters are ``word``."""
    out: set[tuple[int, int]] = set()
    for r, line in enumerate(lines):
        at = 0
        for tok in line.split(" "):
            m = re.search(PATTERN, tok)
            if m is not None and m.group(1) == word:
                out |= {(r, at + m.start(1) + k) for k in range(len(word))}
            at += len(tok) + 1
    return out


def _chars(ranges: Any) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    for x in ranges:
        assert (x.input, x.column, x.whole) == ("lines", "line", False)
        assert x.stop is not None
        out |= {(x.row, k) for k in range(x.start, x.stop)}
    return out


def test_stored_tables_read_back(tmp_path: Path) -> None:
    store = _pipeline(tmp_path / "s", LINES)
    ops = {o.op_name: o for o in store.operations()}
    op = ops["words"]
    assert op.characters is not None
    assert {(t.column, t.input, t.input_column) for t in op.characters.tables} == {
        ("w", "tokens", "tok")
    }
    fresh = LineageStore(tmp_path / "s")
    lin = read_characters(fresh, ops["tokens"].op_id, "tokens")
    # every non-space character of a line is in exactly one token
    want = sum(len(s.replace(" ", "")) for s in LINES)
    assert lin.table("tok", "lines", "line").n_pairs == want


def test_two_hop_query_against_reference(tmp_path: Path) -> None:
    store = _pipeline(tmp_path / "s", LINES)
    words = store.get_array("words")
    frame = _words(_tokens(pd.DataFrame({"line": LINES})))
    for row, word in enumerate(frame["w"]):
        got = trace_character_range(store, words, row, "w")
        assert (got.exact, got.hops) == (True, 2)
        assert _chars(got.ranges) == _reference(LINES, word), word
    # a piece of a word: characters 1:2 of 'ab' are the b of every 'ab'
    ab = list(frame["w"]).index("ab")
    got = trace_character_range(store, words, ab, "w", 1, 2)
    assert _chars(got.ranges) == {(0, 1), (0, 8), (3, 7)}
    # forward: the c of line 4's first 'cd' ends in the 'cd' word's first character
    fwd = trace_character_range(
        store, store.get_array("lines"), 4, "line", 0, 1, direction="forward"
    )
    cd = list(frame["w"]).index("cd")
    assert [(x.input, x.column, x.row, x.start, x.stop) for x in fwd.ranges] == [
        ("words", "w", cd, 0, 1)
    ]


def test_cli_query_chars_on_pandas_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    _pipeline(root, LINES)
    frame = _words(_tokens(pd.DataFrame({"line": LINES})))
    cd = list(frame["w"]).index("cd")
    argv = ["query", str(root), "words", "--cells", f"{cd},w", "--chars", ":", "--format", "json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    got = {(r["row"], k) for r in rows for k in range(r["start"], r["stop"])}
    assert got == _reference(LINES, "cd")
    assert "over 2 hop(s), exact" in err


@settings(max_examples=15, deadline=None)
@given(
    lines=st.lists(
        st.lists(st.sampled_from(["ab", "b1", "cab", "ab22", "x", "é", "7"]), max_size=4).map(
            " ".join
        ),
        min_size=1,
        max_size=6,
    )
)
def test_random_lines_against_reference(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    store = _pipeline(tmp_path_factory.mktemp("p"), lines)
    words = store.get_array("words")
    frame = _words(_tokens(pd.DataFrame({"line": lines})))
    for row, word in enumerate(frame["w"]):
        got = trace_character_range(store, words, row, "w")
        assert got.exact
        assert _chars(got.ranges) == _reference(lines, word)


# ------------------------------------------------------------------ through Dagster


@tracked_asset
def lines() -> pd.DataFrame:
    return pd.DataFrame({"line": LINES})


@tracked_asset(characters=True)
def tokens(lines: pd.DataFrame) -> pd.DataFrame:
    return _tokens(lines)  # type: ignore[no-any-return]


@tracked_asset(characters=True)
def words(tokens: pd.DataFrame) -> pd.DataFrame:
    return _words(tokens)  # type: ignore[no-any-return]


@tracked_asset
def words_cells(tokens: pd.DataFrame) -> pd.DataFrame:
    return _words(tokens)  # type: ignore[no-any-return]


def test_dagster_steps_store_characters_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [lines, tokens, words, words_cells],
            resources={"io_manager": io, "dslog": dslog},
            instance=instance,
        )
        assert res.success
        value = res.output_for_node("words")
    expected = _words(_tokens(pd.DataFrame({"line": LINES})))
    pd.testing.assert_frame_equal(value, expected)
    # the Python API on the materialized store
    store = LineageStore(tmp_path / "store")
    for row, word in enumerate(expected["w"]):
        got = trace_character_range(store, store.get_array("words"), row, "w")
        assert (got.exact, got.hops) == (True, 2)
        assert _chars(got.ranges) == _reference(LINES, word), word
    # a step without characters=True stores cells only: the query says it fell back
    cd = list(expected["w"]).index("cd")
    got = trace_character_range(store, store.get_array("words_cells"), cd, "w")
    assert [(f.op_name, f.column) for f in got.fallbacks] == [("words_cells", "w")]
    assert {(x.row, x.whole) for x in got.ranges} == {(0, True), (4, True)}
    # the command line
    argv = ["query", str(tmp_path / "store"), "words", "--cells", f"{cd},w", "--chars", "1:2"]
    assert main([*argv, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    got_cli = {(r["row"], r["start"], r["stop"]) for r in json.loads(out)}
    assert got_cli == {(0, 4, 5), (4, 1, 2), (4, 4, 5)}
    assert "over 2 hop(s), exact" in err


def test_characters_on_a_numpy_step_is_refused(tmp_path: Path) -> None:
    @tracked_asset
    def grid() -> np.ndarray:
        return np.zeros((2, 2))

    @tracked_asset(characters=True)
    def doubled(grid: np.ndarray) -> np.ndarray:
        return grid * 2

    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [grid, doubled],
            resources={"io_manager": io, "dslog": dslog},
            instance=instance,
            raise_on_error=False,
        )
    assert not res.success
    (failure,) = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "characters=True" in str(failure.event_specific_data)
    with pytest.raises(DSLogError, match="declares its lineage"):
        tracked_asset(characters=True, lineage=lambda b: [b])(lambda grid: grid)
