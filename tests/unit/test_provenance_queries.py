"""The DPDS canned provenance queries (why, how, history, spread, invalidated) against a
brute-force closure over the raw pairs, and by hand on a small frame pipeline."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.cli import main
from dslog_dagster.core import provenance_queries as pq
from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.query import CellSet
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import QueryError

SHAPES = {"a": (3, 3), "b": (2, 3), "c": (3, 2), "d": (4,)}
TABLES = [("op1", "b", "a"), ("op2", "c", "a"), ("op2", "c", "b"), ("op3", "d", "c")]
Cell = tuple[int, ...]


def _cells(shape: tuple[int, ...]) -> list[Cell]:
    return list(itertools.product(*(range(d) for d in shape)))


@st.composite
def _pipelines(draw: st.DrawFn) -> dict[tuple[str, str], set[tuple[Cell, Cell]]]:
    out = {}
    for _, o, i in TABLES:
        every = list(itertools.product(_cells(SHAPES[o]), _cells(SHAPES[i])))
        picks = draw(st.sets(st.integers(0, len(every) - 1), max_size=12))
        out[o, i] = {every[k] for k in picks}
    return out


def _register(log: DSLog, pairs: dict[tuple[str, str], set[tuple[Cell, Cell]]], tag: str) -> None:
    arr = {n: Array(f"{n}{tag}", s) for n, s in SHAPES.items()}
    for op in ("op1", "op2", "op3"):
        tabs = [(o, i) for name, o, i in TABLES if name == op]
        lins = []
        for o, i in tabs:
            ps = sorted(pairs[o, i])
            rel = LineageRelation.from_pairs(
                SHAPES[o],
                SHAPES[i],
                np.array([p[0] for p in ps], dtype=np.int64).reshape(-1, len(SHAPES[o])),
                np.array([p[1] for p in ps], dtype=np.int64).reshape(-1, len(SHAPES[i])),
            )
            lins.append(Lineage(arr[o], arr[i], rel))
        ins = sorted({i for _, i in tabs})
        log.register_operation(op, [arr[i] for i in ins], [arr[tabs[0][0]]], lins)


def _closure(
    pairs: dict[tuple[str, str], set[tuple[Cell, Cell]]], start: str, cells: set[Cell], back: bool
) -> dict[str, set[Cell]]:
    reached: dict[str, set[Cell]] = {start: set(cells)}
    changed = True
    while changed:
        changed = False
        for (o, i), ps in pairs.items():
            src, dst = (o, i) if back else (i, o)
            if src not in reached:
                continue
            got = {p[1] if back else p[0] for p in ps if (p[0] if back else p[1]) in reached[src]}
            before = reached.setdefault(dst, set())
            if not got <= before:
                before |= got
                changed = True
    return reached


def _as_set(cells: CellSet) -> set[Cell]:
    return {tuple(int(v) for v in c) for c in cells.to_indices()}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> DSLog:
    return DSLog(tmp_path_factory.mktemp("pq"))


_EXAMPLE = itertools.count()


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pairs=_pipelines(), data=st.data())
def test_why_spread_how_and_invalidated_equal_the_brute_force_closure(
    shared: DSLog, pairs: dict[tuple[str, str], set[tuple[Cell, Cell]]], data: st.DataObject
) -> None:
    tag = f"_{next(_EXAMPLE)}"
    _register(shared, pairs, tag)
    store = shared.store
    # why / how from cells of d; spread from cells of a
    d_sel = set(data.draw(st.sets(st.sampled_from(_cells(SHAPES["d"])), min_size=1)))
    sel = CellSet.from_indices(SHAPES["d"], np.array(sorted(d_sel)))
    want = _closure(pairs, "d", d_sel, back=True)
    ans = pq.why(store, f"d{tag}", sel)
    got = {a.name.removesuffix(tag): _as_set(a.cells) for a in ans.arrays}
    assert got == {n: c for n, c in want.items() if n != "d" and c}
    assert all(a.source == (a.name == f"a{tag}") for a in ans.arrays)
    steps = pq.how(store, f"d{tag}", sel).steps
    for s in steps:
        o, i = s.output.name.removesuffix(tag), s.input.name.removesuffix(tag)
        assert _as_set(s.output.cells) <= want[o]
        assert _as_set(s.input.cells) == {
            p[1] for p in pairs[o, i] if p[0] in _as_set(s.output.cells)
        }
    assert {(s.output.name, s.input.name) for s in steps} == {
        (f"{o}{tag}", f"{i}{tag}")
        for _, o, i in TABLES
        if o in want and any(p[0] in want[o] for p in pairs[o, i])
    }
    a_sel = set(data.draw(st.sets(st.sampled_from(_cells(SHAPES["a"])), min_size=1)))
    fwd = _closure(pairs, "a", a_sel, back=False)
    sp = pq.spread(store, f"a{tag}", CellSet.from_indices(SHAPES["a"], np.array(sorted(a_sel))))
    assert {a.name.removesuffix(tag): _as_set(a.cells) for a in sp.arrays} == {
        n: c for n, c in fwd.items() if n != "a" and c
    }
    (op2,) = [op for op in store.operations("op2") if op.outputs[0].name == f"c{tag}"]
    inv = {a.name.removesuffix(tag): _as_set(a.cells) for a in pq.invalidated(store, op2).arrays}
    for i in ("a", "b"):
        assert inv[i] == set(_cells(SHAPES[i])) - {p[1] for p in pairs["c", i]}


def _frames(root: Path) -> DSLog:
    """a (4×3) --filter rows 1, 3--> b (2×3) --assign col 3 = col 0 + col 1--> c (2×4)."""
    log = DSLog(root)
    a, b, c = Array("a", (4, 3)), Array("b", (2, 3)), Array("c", (2, 4))
    keep = [1, 3]
    log.register_operation("filter", [a], [b], [Lineage(b, a, lambda o: [(keep[o[0]], o[1])])])
    log.register_operation(
        "assign",
        [b],
        [c],
        [Lineage(c, b, lambda o: [tuple(o)] if o[1] < 3 else [(o[0], 0), (o[0], 1)])],
    )
    return log


def test_by_hand_on_a_filter_and_an_assign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _frames(tmp_path / "s")
    s = log.store
    why = pq.why(s, "c", pq.item((2, 4), 1, 3))
    assert [(a.name, str(a.cells), a.source) for a in why.arrays] == [
        ("b", "1:2, 0:2", False),
        ("a", "3:4, 0:2", True),
    ]
    how = pq.how(s, "c", pq.item((2, 4), 1, 3))
    assert [(st.op_name, st.input.name, st.output.name) for st in how.steps] == [
        ("filter", "a", "b"),
        ("assign", "b", "c"),
    ]
    spread = pq.spread(s, "a", pq.record((4, 3), 1))
    assert [(a.name, str(a.cells)) for a in spread.arrays] == [("b", "0:1, 0:3"), ("c", "0:1, 0:4")]
    assert pq.spread(s, "a", pq.record((4, 3), 0)).arrays == ()
    hist = pq.history(s, "b", pq.feature((2, 3), 2))
    assert [(a.name, a.hops, str(a.cells)) for a in hist.arrays] == [
        ("a", -1, "[1:2, 2:3], [3:4, 2:3]"),
        ("b", 0, "0:2, 2:3"),
        ("c", 1, "0:2, 2:3"),
    ]
    (filt,) = s.operations("filter")
    (row,) = pq.invalidated(s, filt.op_id).rows()
    assert row["records_dropped"] == [0, 2]
    assert row["features_dropped"] == []
    with pytest.raises(QueryError):
        pq.item((4,), 0, 0)
    with pytest.raises(QueryError, match="outside axis 0"):
        pq.record((4, 3), 4)
    # the command line
    assert main(["provenance", str(tmp_path / "s"), "why", "c", "--row", "1", "--column", "3"]) == 0
    assert "3:4, 0:2" in capsys.readouterr().out
    assert (
        main(["provenance", str(tmp_path / "s"), "invalidated", filt.op_id, "--format", "json"])
        == 0
    )
    assert '"records_dropped"' in capsys.readouterr().out
