"""In-situ queries are exact: every hop and every chain equals the naive join, cell for cell.

The naive join (:func:`~dslog_dagster.core.testing.baselines.naive_join`, Python sets over the raw
relation) is the ground truth; the in-situ query never expands a table. Relations carry every
structure ProvRC produces (relative, mirrored, strided, pooling, diagonals from several
inputs relative to one output, noise); tables are queried in both orientations, also when
stored columnar.
"""

import itertools
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import KINDS, relation_between, relations

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.query import CellSet, prepare, query_path
from dslog_dagster.core.testing.baselines import naive_join

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _random_cells(rng: np.random.Generator, shape: tuple[int, ...]) -> CellSet:
    """A random cell set: a few boxes plus scattered cells (or everything / nothing)."""
    kind = rng.integers(0, 5)
    if kind == 0:
        return CellSet.full(shape)
    if kind == 1:
        return CellSet.empty(shape)
    size = int(np.prod(shape, dtype=np.int64))
    mask = np.zeros(size, dtype=bool)
    mask[rng.integers(0, size, size=int(rng.integers(1, 4)))] = True
    cells = CellSet.from_mask(mask.reshape(shape), shape)
    for _ in range(int(rng.integers(0, 3))):
        lo = [int(rng.integers(0, n)) for n in shape]
        hi = [int(rng.integers(a, n)) for a, n in zip(lo, shape, strict=True)]
        cells = cells | CellSet.from_boxes(shape, [lo], [hi])
    return cells


@SETTINGS
@given(
    rel=relations(), seed=st.integers(0, 2**32 - 1), fallback=st.sampled_from(["auto", "always"])
)
def test_one_hop_equals_naive_join(rel: LineageRelation, seed: int, fallback: Any) -> None:
    rng = np.random.default_rng(seed)
    hop = prepare(compress(rel, fallback=fallback))
    for direction, src in (("backward", rel.out_shape), ("forward", rel.in_shape)):
        cells = _random_cells(rng, src)
        got = hop.run(cells, direction)
        want = naive_join([(rel, direction)], cells.to_indices())
        assert np.array_equal(got.to_indices(), want), (direction, cells)
        assert got.count() == len(want)
        assert got == CellSet.from_indices(got.shape, want)  # canonical form


@st.composite
def chains(draw: Any) -> tuple[list[tuple[LineageRelation, str]], tuple[int, ...]]:
    """A path of 1–6 arrays with random ranks 1–3, each hop forward or backward."""
    n_hops = draw(st.integers(1, 6))
    shapes = [
        tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))) for _ in range(n_hops + 1)
    ]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    hops = []
    for a, b in itertools.pairwise(shapes):
        direction = draw(st.sampled_from(["forward", "backward"]))
        kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3))
        osh, ish = (b, a) if direction == "forward" else (a, b)
        hops.append((relation_between(rng, osh, ish, kinds), direction))
    return hops, shapes[0]


@SETTINGS
@given(chain=chains(), seed=st.integers(0, 2**32 - 1), columnar=st.booleans())
def test_chains_equal_naive_join(chain: Any, seed: int, columnar: bool) -> None:
    hops, first = chain
    rng = np.random.default_rng(seed)
    cells = _random_cells(rng, first)
    tables = [(compress(r, fallback="always" if columnar else "auto"), d) for r, d in hops]
    got = query_path(tables, cells)
    want = naive_join(hops, cells.to_indices())
    assert np.array_equal(got.to_indices(), want)


def test_diagonal_backward_is_split_not_over_approximated() -> None:
    # out[i] <- in[i, i] and in[i, i + 1]: two input axes relative to the one output axis.
    n = 50
    b = np.arange(n - 1)
    rel = LineageRelation.from_columns(
        (n - 1,),
        (n, n),
        [np.concatenate([b, b])],
        [np.concatenate([b, b]), np.concatenate([b, b + 1])],
    )
    table = compress(rel)
    assert table.rows == 1  # one row with a diagonal: the case the prototype got wrong
    got = prepare(table).run(CellSet.from_boxes((n - 1,), [[3]], [[7]]), "backward")
    want = {(i, i) for i in range(3, 8)} | {(i, i + 1) for i in range(3, 8)}
    assert {tuple(c) for c in got.to_indices()} == want
    # the bounding box would hold 25 cells; the exact answer has 10
    assert got.count() == 10


def test_pooling_gaps_are_kept() -> None:
    # out[i] <- in[3 i]: F jumps by 3 with a delta width of 1.
    n = 20
    b = np.arange(n)
    rel = LineageRelation.from_columns((n,), (3 * n,), [b], [3 * b])
    got = prepare(compress(rel)).run(CellSet.from_boxes((n,), [[2]], [[5]]), "backward")
    assert got.to_flat().tolist() == [6, 9, 12, 15]
    back = prepare(compress(rel)).run(CellSet.from_boxes((3 * n,), [[5]], [[13]]), "forward")
    assert back.to_flat().tolist() == [2, 3, 4]


def test_mirrored_and_strided_both_directions() -> None:
    # flip then repeat-by-3 on a 1-D array: out[i] <- in[n - 1 - floor(i / 3)]
    n = 10
    b = np.arange(3 * n)
    rel = LineageRelation.from_columns((3 * n,), (n,), [b], [n - 1 - b // 3])
    hop = prepare(compress(rel))
    assert hop.run(CellSet.from_boxes((3 * n,), [[4]], [[9]]), "backward").to_flat().tolist() == [
        6,
        7,
        8,
    ]
    fwd = hop.run(CellSet.from_flat((n,), [0, 9]), "forward")
    assert fwd.to_flat().tolist() == [0, 1, 2, 27, 28, 29]
