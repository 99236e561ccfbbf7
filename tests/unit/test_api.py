"""The DSLog API: Array, Lineage (every capture form), register_operation, prov_query,
lineage_between — over a real store, checked against naive joins of the registered relations."""

import itertools
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core.api import (
    Array,
    DSLog,
    Lineage,
    default_session,
    lineage_between,
    prov_query,
    register_operation,
)
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.testing import analytic
from dslog_dagster.core.testing.baselines import naive_join
from dslog_dagster.errors import InvalidRelationError, LineageNotFoundError, QueryError


def naive(rel: LineageRelation, cells: np.ndarray, direction: str) -> np.ndarray:
    """Flat cells linked to flat ``cells`` by the ground-truth join (``naive_join``)."""
    src, dst = (
        (rel.in_shape, rel.out_shape) if direction == "forward" else (rel.out_shape, rel.in_shape)
    )
    idx = np.stack(np.unravel_index(np.asarray(cells, np.int64), src), axis=1)
    got = naive_join([(rel, direction)], idx)
    return np.ravel_multi_index(tuple(got.T), dst).astype(np.int64)


@pytest.fixture
def log(tmp_path: Any) -> DSLog:
    return DSLog(tmp_path / "store")


def test_every_capture_form_records_the_same_lineage(log: DSLog) -> None:
    x, y = Array("x", (3, 4)), Array("y", (3, 4))
    rel = analytic.flip((3, 4), axis=1)
    pairs = np.vstack([rel.out_cols, rel.in_cols]).T
    forms: list[object] = [
        rel,
        lambda b: [(b[0], 3 - b[1])],
        [(np.s_[i, j], np.s_[i, 3 - j]) for i in range(3) for j in range(4)],
        pairs,
    ]
    for k, capture in enumerate(forms):
        op = log.register_operation(f"flip{k}", [x], [y], [Lineage(y, x, capture)])
        assert log.store.read_lineage(op, "y", "x").decompress() == rel
    # a mapping works as well
    op = log.register_operation("flip-map", [x], [y], {("y", "x"): rel})
    assert log.store.read_lineage(op, "y", "x").decompress() == rel


def test_box_pairs_are_all_to_all(log: DSLog) -> None:
    x, s = Array("x", (3, 4)), Array("s", (3,))
    op = log.register_operation(
        "sum1", [x], [s], [Lineage(s, x, [(np.s_[i], np.s_[i, :]) for i in range(3)])]
    )
    assert log.store.read_lineage(op, "s", "x").decompress() == analytic.sum_axis((3, 4), 1)


def test_forward_backward_and_through_the_other_input(log: DSLog) -> None:
    a, b, y = Array("a", (4, 3)), Array("b", (3, 5)), Array("y", (4, 5))
    ra, rb = analytic.dot((4, 3), (3, 5))
    log.register_operation("matmul", [a, b], [y], [Lineage(y, a, ra), Lineage(y, b, rb)])
    got = log.prov_query([y, a], np.s_[1, 2])
    assert got.to_indices().tolist() == [[1, 0], [1, 1], [1, 2]]
    got = log.prov_query(["a", "y"], [(2, 0)])
    assert got.to_indices().tolist() == [[2, j] for j in range(5)]
    # a -> y -> b: forward through one input, backward through the other
    got = log.prov_query(["a", "y", "b"], [(2, 0)])
    want = naive(rb, naive(ra, np.array([6]), "forward"), "backward")
    assert np.array_equal(got.to_flat(), want)
    assert got.count() == 15
    assert got.to_mask().sum() == 15
    assert "matmul" in str(log.plan(["a", "y", "b"]))


def test_lineage_between_unions_every_path(log: DSLog) -> None:
    # x -> p = flip(x); x -> q = roll-like shift; r = p + q; lineage x -> r over both paths
    n = 8
    x, p, q, r = (Array(nm, (n,)) for nm in "xpqr")
    log.register_operation("flip", [x], [p], [Lineage(p, x, analytic.flip((n,)))])
    shift = LineageRelation.from_columns((n,), (n,), [np.arange(n - 1)], [np.arange(1, n)])
    log.register_operation("shift", [x], [q], [Lineage(q, x, shift)])
    rp, rq = analytic.add((n,), (n,))
    log.register_operation("add", [p, q], [r], [Lineage(r, p, rp), Lineage(r, q, rq)])
    got = log.lineage_between("x", "r", [0])
    via_p = naive(rp, naive(analytic.flip((n,)), np.array([0]), "forward"), "forward")
    via_q = naive(rq, naive(shift, np.array([0]), "forward"), "forward")
    assert got.to_flat().tolist() == sorted(set(via_p) | set(via_q))
    assert got.to_flat().tolist() == [7]  # flip sends 0 to 7; the shift drops cell 0
    back = log.lineage_between("r", "x", [3])
    assert back.to_flat().tolist() == [4]  # via p: 8-1-3 = 4; via q: 3+1 = 4
    # r[2] <- p[2] <- x[5] and r[2] <- q[2] <- x[3]
    assert lineage_between("r", "x", [2], session=log).to_flat().tolist() == [3, 5]
    with pytest.raises(LineageNotFoundError, match="upstream"):
        log.lineage_between("p", "q", [0])


def test_versions_follow_the_newest_consistent_chain(log: DSLog) -> None:
    x1 = Array("x", (4,), version="1")
    y1 = Array("y", (4,), version="1")
    log.register_operation("neg", [x1], [y1], [Lineage(y1, x1, analytic.negative((4,)))])
    x2, y2 = Array("x", (6,), version="2"), Array("y", (6,), version="2")
    log.register_operation("flip", [x2], [y2], [Lineage(y2, x2, analytic.flip((6,)))])
    assert log.prov_query(["y", "x"], [0]).to_flat().tolist() == [5]  # newest: flip of 6
    assert log.prov_query([y1, "x"], [0]).to_flat().tolist() == [0]  # pinned: neg of 4
    with pytest.raises(QueryError, match="outside"):
        log.prov_query([y1, "x"], [5])


def test_other_sessions_see_new_operations(log: DSLog) -> None:
    x, y = Array("x", (4,)), Array("y", (4,))
    log.register_operation("neg", [x], [y], [Lineage(y, x, analytic.negative((4,)))])
    assert log.prov_query(["y", "x"], [1]).to_flat().tolist() == [1]
    other = DSLog(log.store.root)
    z = Array("z", (4,))
    other.register_operation("flip", [y], [z], [Lineage(z, y, analytic.flip((4,)))])
    assert log.prov_query(["z", "y", "x"], [1]).to_flat().tolist() == [2]


def test_operation_without_lineage_for_a_pair_gives_nothing(log: DSLog) -> None:
    a, b, y = Array("a", (3,)), Array("b", (3,)), Array("y", (3,))
    log.register_operation("where", [a, b], [y], [Lineage(y, a, analytic.negative((3,)))])
    assert log.prov_query(["y", "b"], np.s_[:]).is_empty()
    assert log.prov_query(["y", "a"], np.s_[:]).count() == 3


def test_errors_are_clear(log: DSLog) -> None:
    x, y, z = Array("x", (4, 4)), Array("y", (4, 4)), Array("z", (2,))
    log.register_operation("neg", [x], [y], [Lineage(y, x, analytic.negative((4, 4)))])
    log.array(z)
    with pytest.raises(LineageNotFoundError, match="Did you mean `x`"):
        log.prov_query(["y", "xx"], [0])
    with pytest.raises(LineageNotFoundError, match="No registered operation links `y` and `z`"):
        log.prov_query(["x", "y", "z"], [0])
    with pytest.raises(QueryError, match="at least two"):
        log.prov_query(["x"], [0])
    with pytest.raises(QueryError, match="rank 2"):
        log.prov_query(["x", "y"], [(1, 2, 3)])
    with pytest.raises(QueryError, match="outside"):
        log.prov_query(["x", "y"], np.s_[4, 0])
    with pytest.raises(InvalidRelationError, match="does not connect"):
        log.register_operation("bad", [x], [y], [Lineage(x, y, analytic.negative((4, 4)))])
    with pytest.raises(InvalidRelationError, match="shapes"):
        log.register_operation("bad", [x], [y], [Lineage(y, x, analytic.negative((4,)))])
    with pytest.raises(InvalidRelationError, match="capture callable failed"):
        log.register_operation("bad", [x], [y], [Lineage(y, x, lambda b: 1 / 0)])


def test_module_level_api_uses_the_default_store(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("DSLOG_STORE", str(tmp_path / "default"))
    x, y = Array("x", (5,)), Array("y", (5,))
    register_operation("flip", [x], [y], [Lineage(y, x, analytic.flip((5,)))])
    assert prov_query(["x", "y"], [0, 1]).to_flat().tolist() == [3, 4]
    assert default_session().store.root == tmp_path / "default"
    assert lineage_between("y", "x", [0]).to_flat().tolist() == [4]


# ------------------------------------------------------------------ random DAGs (hypothesis)

UNARY = ["negative", "flip", "transpose", "rot90", "repeat", "tile", "sum", "conv"]


def _unary(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[LineageRelation, str]:
    for _ in range(20):
        kind = UNARY[int(rng.integers(0, len(UNARY)))]
        if kind == "negative":
            return analytic.negative(shape), kind
        if kind == "flip":
            return analytic.flip(shape, axis=int(rng.integers(0, len(shape)))), kind
        if kind == "transpose":
            return analytic.transpose(shape), kind
        if kind == "rot90" and len(shape) >= 2:
            return analytic.rot90(shape, k=int(rng.integers(1, 4))), kind
        if kind == "repeat" and np.prod(shape) <= 40:
            return analytic.repeat(
                shape, int(rng.integers(2, 4)), axis=int(rng.integers(0, len(shape)))
            ), kind
        if kind == "tile" and np.prod(shape) <= 40 and len(shape) <= 2:
            return analytic.tile(shape, (2,) * len(shape)), kind
        if kind == "sum" and len(shape) >= 2:
            return analytic.sum_axis(shape, int(rng.integers(0, len(shape)))), kind
        if kind == "conv":
            return analytic.convolve_same(shape, (3,) * len(shape)), kind
    return analytic.negative(shape), "negative"


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(1, 6))
def test_random_pipelines_equal_naive_join(seed: int, n_ops: int) -> None:
    """Random chains of 1–6 analytic operations (some with two inputs) over rank 1–3 arrays,
    queried forward, backward and mixed from random cells; every answer equals the naive join."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as root:
        log = DSLog(root)
        shape = tuple(int(s) for s in rng.integers(1, 6, size=int(rng.integers(1, 4))))
        arrays = [Array("a0", shape)]
        rels: dict[tuple[str, str], LineageRelation] = {}
        for k in range(n_ops):
            src = arrays[-1]
            if rng.random() < 0.3:  # a two-input op: add with a broadcast side input
                side = Array(f"s{k}", src.shape[1:] or (1,))
                ra, rb = analytic.add(src.shape, side.shape)
                out = Array(f"a{k + 1}", ra.out_shape)
                log.register_operation(
                    "add", [src, side], [out], [Lineage(out, src, ra), Lineage(out, side, rb)]
                )
                rels[(out.name, src.name)], rels[(out.name, side.name)] = ra, rb
            else:
                rel, kind = _unary(rng, src.shape)
                out = Array(f"a{k + 1}", rel.out_shape)
                log.register_operation(kind, [src], [out], [Lineage(out, src, rel)])
                rels[(out.name, src.name)] = rel
            arrays.append(out)
        names = [a.name for a in arrays]
        shapes = {a.name: a.shape for a in arrays}
        for _ in range(3):
            # a random path: forward or backward stretches, maybe ending in a side input
            i, j = sorted(int(v) for v in rng.integers(0, len(names), size=2))
            if i == j:
                j = min(i + 1, len(names) - 1)
                i = j - 1
            path = names[i : j + 1]
            if rng.random() < 0.5:
                path = path[::-1]
            side = [o for (o, s) in rels if o == path[-1] and s.startswith("s")]
            if side and rng.random() < 0.5:
                path = [*path, next(s for (o, s) in rels if o == path[-1] and s.startswith("s"))]
            size = int(np.prod(shapes[path[0]]))
            cells = np.unique(rng.integers(0, size, size=int(rng.integers(1, size + 1))))
            got = log.prov_query(path, cells)
            want = cells
            for a, b in itertools.pairwise(path):
                if (b, a) in rels:
                    want = naive(rels[(b, a)], want, "forward")
                else:
                    want = naive(rels[(a, b)], want, "backward")
            assert np.array_equal(got.to_flat(), want), path


def test_cli_query(log: DSLog, capsys: Any) -> None:
    from dslog_dagster.cli import main

    a, b = Array("a", (4, 3)), Array("s", (4,))
    log.register_operation("sum", [a], [b], [Lineage(b, a, analytic.sum_axis((4, 3), 1))])
    root = str(log.store.root)
    assert main(["query", root, "s", "a", "--cells", "1:3"]) == 0
    out = capsys.readouterr()
    assert [line.split() for line in out.out.splitlines()] == [
        ["start_0", "stop_0", "start_1", "stop_1"],
        ["1", "3", "0", "3"],
    ]
    assert "6 cell(s) in 1 box(es)" in out.err
    assert main(["query", root, "a", "s", "--cells", "0,0", "--cells", "3,2", "--count"]) == 0
    assert capsys.readouterr().out.strip() == "2"
    assert main(["query", root, "a", "s", "--cells", "x"]) == 2
    assert "Cannot read `x`" in capsys.readouterr().err
    assert main(["query", root, "a", "nope"]) == 2
