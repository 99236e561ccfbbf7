"""Character tables stored with their operation, read back, kept by compaction, checked by
``verify``, and queried across hops (backward and forward) with whole-cell fallback.

The pipeline here is built by hand (no Spark): ``lines`` (one string column) -> ``codes`` =
``substring(line, 3, 4)`` -> ``tags`` = ``lower(code)`` recorded *without* character lineage
(cell lineage only) -> ``short`` = ``left(tag, 2)``. The brute-force reference is the
composition of the three placements.
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.character_trace import trace_character_range
from dslog_dagster.core.characters import CharacterLineage, CharacterTable
from dslog_dagster.core.compression import compress
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store import LineageStore, NewArray, read_characters
from dslog_dagster.errors import InvalidRelationError, LineageCorruptError, QueryError

N = 50
WIDTH = 12  # every line has 12 characters


def _shift(n_rows: int, out_w: int, in_w: int, offset: int) -> LineageRelation:
    """(r, k) <- (r, k + offset) for k < out_w: a fixed-width piece of every row."""
    r, k = np.meshgrid(np.arange(n_rows), np.arange(out_w), indexing="ij")
    r, k = r.ravel(), k.ravel()
    return LineageRelation.from_columns((n_rows, out_w), (n_rows, in_w), [r, k], [r, k + offset])


def _rows(n: int) -> LineageRelation:
    """Row i <- row i, column 0 <- column 0 of a one-column frame."""
    i = np.arange(n)
    return LineageRelation.from_columns((n, 1), (n, 1), [i, 0 * i], [i, 0 * i])


def _build(root: Path) -> LineageStore:
    store = LineageStore(root)
    cols = [("line", "string")]
    store.register_array("lines", (N, 1), "object", columns=cols)
    sub = compress(_shift(N, 4, WIDTH, 2))
    store.register_operation(
        "substring",
        ["lines"],
        [NewArray("codes", (N, 1), "object", columns=[("code", "string")])],
        {("codes", "lines"): _rows(N)},
        characters={"codes": CharacterLineage((CharacterTable("code", "lines", "line", sub),))},
    )
    store.register_operation(  # no character lineage: the query falls back to whole cells
        "lower",
        ["codes"],
        [NewArray("tags", (N, 1), "object", columns=[("tag", "string")])],
        {("tags", "codes"): _rows(N)},
    )
    left = compress(_shift(N, 2, 4, 0))
    store.register_operation(
        "left",
        ["tags"],
        [NewArray("short", (N, 1), "object", columns=[("s", "string")])],
        {("short", "tags"): _rows(N)},
        characters={
            "short": CharacterLineage(
                (CharacterTable("s", "tags", "tag", left),), coarse_cells={"s": 0}
            )
        },
    )
    return store


def test_stored_table_is_one_provrc_row_and_reads_back(tmp_path: Path) -> None:
    store = _build(tmp_path / "s")
    (op,) = [o for o in store.operations() if o.op_name == "substring"]
    assert op.characters is not None
    (rec,) = op.characters.tables
    assert (rec.rows, rec.n_pairs) == (1, 4 * N)  # O(1) rows for a fixed-width substring
    lin = read_characters(store, op, "codes")
    assert lin.table("code", "lines", "line").decompress().pairs().tolist() == sorted(
        _shift(N, 4, WIDTH, 2).pairs().tolist()
    )
    # a fresh handle (the record read from disk) and an operation without characters
    again = LineageStore(tmp_path / "s")
    (op2,) = [o for o in again.operations() if o.op_name == "lower"]
    assert op2.characters is None
    assert read_characters(again, op2, "tags") == CharacterLineage()
    assert "characters" not in op2.to_json()  # old-format records stay as they were


@settings(max_examples=25, deadline=None)
@given(row=st.integers(0, N - 1), start=st.integers(0, 4), width=st.integers(0, 4))
def test_backward_query_exact_then_whole(
    tmp_path_factory: pytest.TempPathFactory, row: int, start: int, width: int
) -> None:
    store = _built(tmp_path_factory)
    stop = min(4, start + width)
    codes = store.get_array("codes")
    got = trace_character_range(store, codes, row, "code", start, stop)
    want = [] if start == stop else [("lines", "line", row, start + 2, stop + 2, False)]
    assert [(r.input, r.column, r.row, r.start, r.stop, r.whole) for r in got.ranges] == want
    assert got.exact
    # through `lower` (no characters): whole cells, said so, even after an exact hop
    short = store.get_array("short")
    got = trace_character_range(store, short, row, "s", 0, 1)
    assert [(r.input, r.row, r.start, r.stop, r.whole) for r in got.ranges] == [
        ("lines", row, 2, 6, True)
    ]
    assert [(f.op_name, f.column) for f in got.fallbacks] == [("lower", "tag")]


_STORES: dict[str, LineageStore] = {}


def _built(factory: pytest.TempPathFactory) -> LineageStore:
    if "s" not in _STORES:
        _STORES["s"] = _build(factory.mktemp("chars"))
    return _STORES["s"]


def test_forward_query(tmp_path: Path) -> None:
    store = _build(tmp_path / "s")
    got = trace_character_range(
        store, store.get_array("lines"), 7, "line", 0, 4, direction="forward"
    )
    # characters 2-3 of the line make characters 0-1 of its code; then `lower` is whole-cell
    # and `left` keeps characters 0-1 of the tag
    assert [(r.input, r.column, r.row, r.start, r.stop, r.whole) for r in got.ranges] == [
        ("short", "s", 7, 0, 2, True)
    ]
    none = trace_character_range(
        store, store.get_array("lines"), 7, "line", 10, 12, direction="forward"
    )
    assert none.ranges == []  # characters no substring kept


def test_compaction_and_verify_keep_them(tmp_path: Path) -> None:
    store = _build(tmp_path / "s")
    before = trace_character_range(store, store.get_array("codes"), 3, "code")
    assert store.compact(max_op_bytes=10**9).operations >= 3
    fresh = LineageStore(tmp_path / "s")
    assert trace_character_range(fresh, fresh.get_array("codes"), 3, "code") == before
    assert fresh.verify().clean


def test_damaged_character_table_is_an_error_naming_the_file(tmp_path: Path) -> None:
    store = _build(tmp_path / "s")
    (op,) = [o for o in store.operations() if o.op_name == "substring"]
    path = tmp_path / "s" / "operations" / f"{op.op_id}.parquet"
    k = len(op.tables)  # the character table follows the cell tables
    blob, _ = store.operation_files.in_segment(op.op_id, lambda seg: seg.blob(op.op_id, k))
    data = bytearray(path.read_bytes())
    at = data.find(blob)  # stored uncompressed: the blob's bytes are in the file as they are
    assert at > 0
    assert data.find(blob, at + 1) < 0
    data[at + len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = LineageStore(tmp_path / "s")
    with pytest.raises(LineageCorruptError, match="lineage table 1 does not match") as e:
        read_characters(fresh, op.op_id, "codes")
    assert str(path) in str(e.value)
    # the cell lineage of the same operation is still read (damage stays local to the table)
    assert fresh.read_lineage(op.op_id, "codes", "lines").n_pairs == N
    report = fresh.verify()
    assert f"operations/{op.op_id}.parquet" in report.damaged


def test_bad_character_lineage_is_refused(tmp_path: Path) -> None:
    store = _build(tmp_path / "s")
    sub = compress(_shift(N, 4, WIDTH, 2))
    bad = {
        "codes2": CharacterLineage((CharacterTable("nope", "lines", "line", sub),)),
    }
    with pytest.raises(InvalidRelationError, match="column `nope`"):
        store.register_operation(
            "substring",
            ["lines"],
            [NewArray("codes2", (N, 1), "object", columns=[("code", "string")])],
            {("codes2", "lines"): _rows(N)},
            characters=bad,
        )
    short = compress(_shift(N - 1, 4, WIDTH, 2))
    with pytest.raises(InvalidRelationError, match="rows"):
        store.register_operation(
            "substring",
            ["lines"],
            [NewArray("codes3", (N, 1), "object", columns=[("code", "string")])],
            {("codes3", "lines"): _rows(N)},
            characters={
                "codes3": CharacterLineage((CharacterTable("code", "lines", "line", short),))
            },
        )
    with pytest.raises(QueryError, match="no column"):
        trace_character_range(store, store.get_array("codes"), 0, "zzz")


def test_cli_query_chars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dslog_dagster.cli import main

    root = str(tmp_path / "s")
    _build(tmp_path / "s")
    assert (
        main(["query", root, "codes", "--cells", "5,code", "--chars", "1:3", "--format", "json"])
        == 0
    )
    out, err = capsys.readouterr()
    assert json.loads(out) == [
        {"array": "lines", "column": "line", "row": 5, "start": 3, "stop": 5, "whole": False}
    ]
    assert "exact" in err
    assert main(["query", root, "short", "--cells", "5,s", "--chars", ":", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["array,column,row,start,stop,whole", "lines,line,5,2,6,True"]
    assert "whole cells: `lower` has no character lineage for `tags.tag`" in err
    assert main(["query", root, "codes", "--cells", "0:2,0", "--chars", "0:1"]) != 0
    assert "exactly one cell" in capsys.readouterr().err
