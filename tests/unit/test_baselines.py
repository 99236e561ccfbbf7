"""The three raw-relation baselines agree with the set-based ``naive_join`` on random chains.

Chains are 1–6 hops over arrays of rank 0–3; each hop is an analytic lineage generator (in its
natural direction, or read against it) or a random relation with duplicates, possibly empty.
``naive_join`` itself is checked on hand-computed cases first, so the chain test compares three
fast implementations against a reference that is known to be right.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.testing import analytic as an
from dslog_dagster.core.testing.baselines import (
    DuckDBParquetBaseline,
    DuckDBRawBaseline,
    Hop,
    NumPyBaseline,
    as_hops,
    naive_join,
)
from dslog_dagster.errors import QueryError

Shape = tuple[int, ...]


def run_all(hops: list[Any], queries: list[np.ndarray], tmp: Path | None = None) -> None:
    """Every baseline, loaded once, answers every query exactly like ``naive_join``."""
    expected = [naive_join(hops, q) for q in queries]
    with (
        NumPyBaseline(hops) as npb,
        DuckDBRawBaseline(hops, threads=1) as raw,
        DuckDBParquetBaseline(hops, tmp) as par,
    ):
        for q, exp in zip(queries, expected, strict=True):
            for b in (npb, raw, par):
                got = b.query(q)
                assert got.dtype == np.int64, b.name
                assert got.shape == exp.shape, (b.name, got.shape, exp.shape)
                np.testing.assert_array_equal(got, exp, err_msg=b.name)


# ---------------------------------------------------------------------------------------------
# The reference itself
# ---------------------------------------------------------------------------------------------


def test_naive_join_hand_computed_chain() -> None:
    # x (4,) --sum--> s () --broadcast--> y (2, 3): every cell of x reaches every cell of y.
    s = an.sum_axis((4,))
    (b,) = an.broadcast((), (2, 3))[:1]
    hops = [(s, "forward"), (b, "forward")]
    got = naive_join(hops, np.array([[2]]))
    np.testing.assert_array_equal(got, np.array([(i, j) for i in range(2) for j in range(3)]))
    # And back: one cell of y comes from all of x.
    back = naive_join([(b, "backward"), (s, "backward")], np.array([[1, 2]]))
    np.testing.assert_array_equal(back, np.arange(4)[:, None])


def test_naive_join_follows_direction() -> None:
    rel = LineageRelation.from_pairs((3,), (2,), [[0], [2], [2]], [[1], [0], [1]])
    np.testing.assert_array_equal(naive_join([(rel, "backward")], [[2]]), [[0], [1]])
    np.testing.assert_array_equal(naive_join([(rel, "forward")], [[1]]), [[0], [2]])
    assert naive_join([(rel, "backward")], [[1]]).shape == (0, 1)


# ---------------------------------------------------------------------------------------------
# Random chains
# ---------------------------------------------------------------------------------------------

small_shape = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@st.composite
def random_relation(draw: st.DrawFn, src: Shape, forward: bool) -> LineageRelation:
    """Random pairs (duplicates allowed, maybe none) from ``src`` to a random shape."""
    other: Shape = draw(st.one_of(small_shape, st.just(())))
    n = draw(st.integers(0, 25))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    out_shape, in_shape = (other, src) if forward else (src, other)
    oc = [rng.integers(0, d, n) for d in out_shape]
    ic = [rng.integers(0, d, n) for d in in_shape]
    return LineageRelation.from_columns(out_shape, in_shape, oc, ic, n=n)


@st.composite
def forward_generator(draw: st.DrawFn, src: Shape) -> LineageRelation:
    """An analytic relation whose INPUT is ``src`` (so it can be read forward from ``src``)."""
    rank = len(src)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    choices = ["elementwise", "sum", "filter", "binning"]
    if rank:
        choices += ["tile", "transpose", "flip", "repeat", "sort", "convolve", "broadcast"]
    if rank >= 2:
        choices.append("rot90")
    if rank in (1, 2):
        choices.append("dot")
    kind = draw(st.sampled_from(choices))
    axis = draw(st.integers(0, max(rank - 1, 0)))
    if kind == "elementwise":
        return an.elementwise(src)
    if kind == "sum":
        ax = draw(st.sampled_from([None, axis] if rank else [None]))
        return an.sum_axis(src, ax, keepdims=draw(st.booleans()))
    if kind == "filter":
        return an.filter_mask(rng.random(src) < draw(st.sampled_from([0.0, 0.5, 1.0])))
    if kind == "binning":
        return an.binning(rng.integers(-1, 3, src), 3)
    if kind == "tile":
        return an.tile(src, draw(st.sampled_from([2, (2, 1), (1, 2, 1)])))
    if kind == "transpose":
        return an.transpose(src, draw(st.permutations(range(rank))))
    if kind == "flip":
        return an.flip(src, draw(st.sampled_from([None, axis])))
    if kind == "repeat":
        return an.repeat(src, draw(st.integers(1, 3)), draw(st.sampled_from([None, axis])))
    if kind == "sort":
        return an.sort(rng.integers(0, 3, src), draw(st.sampled_from([None, axis])))
    if kind == "convolve":
        return an.convolve_same(src, (3,) * rank)
    if kind == "broadcast":
        return an.broadcast(src, (2, *src))[0]
    if kind == "rot90":
        return an.rot90(src, draw(st.integers(1, 3)), (0, rank - 1))
    # dot: src is the left operand
    return an.dot(src, (src[-1], draw(st.integers(1, 3))))[0]


@st.composite
def backward_generator(draw: st.DrawFn, src: Shape) -> LineageRelation:
    """An analytic relation whose OUTPUT is ``src`` (read backward from ``src``)."""
    rank = len(src)
    choices = ["elementwise"]
    if rank:
        choices += ["flip", "transpose", "broadcast", "reduce_keepdims"]
    kind = draw(st.sampled_from(choices))
    if kind == "elementwise":
        return an.elementwise(src)
    if kind == "flip":
        return an.flip(src, draw(st.integers(0, rank - 1)))
    if kind == "transpose":
        perm = draw(st.permutations(range(rank)))
        inv = tuple(int(a) for a in np.argsort(perm))
        in_shape = tuple(src[a] for a in inv)
        rel = an.transpose(in_shape, perm)
        assert rel.out_shape == src
        return rel
    if kind == "broadcast":
        ones = tuple(1 if draw(st.booleans()) else d for d in src)
        return an.broadcast(ones, src)[0]
    # a keepdims reduction whose output is src: only where src has extent 1
    axes = [k for k, d in enumerate(src) if d == 1]
    if not axes:
        return an.elementwise(src)
    ax = draw(st.sampled_from(axes))
    in_shape = tuple(3 if k == ax else d for k, d in enumerate(src))
    return an.sum_axis(in_shape, ax, keepdims=True)


def swapped(rel: LineageRelation) -> LineageRelation:
    """The converse relation (outputs and inputs exchanged): read in the other direction."""
    return LineageRelation.from_columns(
        rel.in_shape, rel.out_shape, list(rel.in_cols), list(rel.out_cols), n=rel.n
    )


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[Hop], list[np.ndarray]]:
    shape: Shape = draw(st.one_of(small_shape, small_shape, small_shape, st.just(())))
    first = shape
    hops: list[Hop] = []
    for _ in range(draw(st.integers(1, 6))):
        forward = draw(st.booleans())
        source = draw(st.sampled_from(["analytic", "converse", "random"]))
        if source == "random":
            rel = draw(random_relation(shape, forward))
        elif source == "analytic":
            rel = draw((forward_generator if forward else backward_generator)(shape))
        else:  # an analytic relation read against its grain
            rel = swapped(draw((backward_generator if forward else forward_generator)(shape)))
        hop = Hop(rel, "forward" if forward else "backward")
        assert hop.source_shape == shape
        hops.append(hop)
        shape = hop.target_shape
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # A few random cells (duplicates possible), as many as the array has, and none at all.
    sizes = (draw(st.integers(0, 6)), int(np.prod(first)), 0)
    queries = [np.stack([rng.integers(0, d, n) for d in first] or [np.zeros(n)], 1) for n in sizes]
    if not first:
        queries = [np.zeros((n, 0), dtype=np.int64) for n in sizes]
    return hops, queries


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_baselines_equal_naive_join(chain: tuple[list[Hop], list[np.ndarray]]) -> None:
    hops, queries = chain
    run_all(hops, queries)


# ---------------------------------------------------------------------------------------------
# Edge cases and errors
# ---------------------------------------------------------------------------------------------


def test_empty_relation_and_empty_query() -> None:
    none = np.zeros(0, np.int64)
    empty = LineageRelation.from_columns((3, 2), (4,), [none, none], [none], n=0)
    hops = [(an.elementwise((4,)), "forward"), (empty, "forward"), (an.flip((3, 2)), "backward")]
    run_all(hops, [np.array([[1], [3]]), np.zeros((0, 1), np.int64)])
    assert NumPyBaseline(hops).query(np.array([[0]])).shape == (0, 2)
    assert NumPyBaseline(hops).query([]).shape == (0, 2)


def test_zero_d_arrays() -> None:
    # (3, 2) --sum all--> () --tile--> (4,) --backward over the 0-d reduction again--> ...
    s = an.sum_axis((3, 2))
    t = an.tile((), 4)
    assert s.out_shape == ()
    assert t.in_shape == ()
    hops = [(s, "forward"), (t, "forward"), (t, "backward"), (s, "backward")]
    run_all(hops, [np.array([[2, 1]]), np.zeros((0, 2), np.int64)])
    got = DuckDBRawBaseline([(s, "forward")]).query([[0, 0], [1, 1]])
    assert got.shape == (1, 0)
    # A query over a 0-d array: its one cell is the empty tuple.
    run_all([(t, "forward")], [np.zeros((2, 0), np.int64), np.zeros((0, 0), np.int64)])
    assert NumPyBaseline([(t, "forward")]).query(np.zeros((1, 0), np.int64)).tolist() == [
        [0],
        [1],
        [2],
        [3],
    ]


def test_no_duplicate_blowup() -> None:
    # Eight all-to-all hops between 40-cell arrays: without DISTINCT between hops the join
    # would carry 40**8 ≈ 6.6e12 rows; with it each hop is at most 1600 rows.
    i, j = np.indices((40, 40)).reshape(2, -1)
    full = LineageRelation.from_columns((40,), (40,), [i], [j], n=i.size)
    hops = [(full, "forward" if k % 2 else "backward") for k in range(8)]
    run_all(hops, [np.array([[7]])])


def test_queries_reuse_one_load(tmp_path: Path) -> None:
    rel = an.repeat((5, 3), 2, 0)
    hops = [(rel, "forward"), (an.sum_axis((10, 3), 1), "forward")]
    run_all(hops, [np.array([[i, 0]]) for i in range(5)] + [np.array([[0, 0], [0, 0]])], tmp_path)


def test_parquet_files_are_zstd(tmp_path: Path) -> None:
    hops = [(an.elementwise((3, 4)), "forward"), (an.sum_axis((3, 4), 0), "forward")]
    with DuckDBParquetBaseline(hops, tmp_path / "p") as b:
        np.testing.assert_array_equal(b.query([[0, 1]]), [[1]])
    files = sorted((tmp_path / "p").glob("*.parquet"))
    assert [f.name for f in files] == ["hop0.parquet", "hop1.parquet"]
    meta = pq.ParquetFile(files[1]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert pq.read_table(files[1]).column_names == ["o0", "i0", "i1"]


def test_temporary_parquet_directory_is_removed() -> None:
    b = DuckDBParquetBaseline([(an.elementwise((2,)), "forward")])
    d = b.directory
    assert (d / "hop0.parquet").exists()
    b.close()
    assert not d.exists()


def test_path_errors() -> None:
    e = an.elementwise((3,))
    with pytest.raises(QueryError, match="at least one hop"):
        as_hops([])
    with pytest.raises(QueryError, match="direction"):
        as_hops([(e, "sideways")])
    with pytest.raises(QueryError, match="consecutive hops"):
        as_hops([(e, "forward"), (an.elementwise((4,)), "forward")])
    with pytest.raises(QueryError, match="LineageRelation"):
        as_hops([("not a relation", "forward")])
    with pytest.raises(QueryError, match="pair"):
        as_hops([e])


@pytest.mark.parametrize("make", [NumPyBaseline, DuckDBRawBaseline, naive_join])
def test_query_cell_errors(make: Any) -> None:
    hops = [(an.elementwise((3, 2)), "forward")]

    def q(cells: Any) -> Any:
        return naive_join(hops, cells) if make is naive_join else make(hops).query(cells)

    with pytest.raises(QueryError, match="out of bounds"):
        q([[3, 0]])
    with pytest.raises(QueryError, match="out of bounds"):
        q([[0, -1]])
    with pytest.raises(QueryError, match=r"\(n, 2\)"):
        q([[0, 0, 0]])
    with pytest.raises(QueryError, match="integers"):
        q(np.array([[0.5, 1.0]]))


def test_sparse_target_arrays() -> None:
    # Few pairs into a large target array: NumPyBaseline dedupes with np.unique there (a
    # 90 000-cell mask per hop would cost more than the hits), densely elsewhere.
    rng = np.random.default_rng(12)
    n = 40
    to_big = LineageRelation.from_columns(
        (300, 300),
        (5,),
        [rng.integers(0, 300, n), rng.integers(0, 300, n)],
        [rng.integers(0, 5, n)],
    )
    hops = [(to_big, "forward"), (to_big, "backward"), (to_big, "forward")]
    run_all(hops, [np.array([[0], [3]]), np.arange(5)[:, None]])
