"""``dslog_dagster.core.capture``: values equal NumPy, lineage equals the analytic generators.

The analytic generators (``core.testing.analytic``) are an independent ground truth built by index
arithmetic; the whole-grid comparison against the pure-Python reference lives in
``tests/annotator/``.
"""

import gc
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslog_dagster import _annotator
from dslog_dagster.core import TRACKED_FLOAT, Capture, LineageRelation, capture
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.testing import analytic
from dslog_dagster.errors import (
    CaptureError,
    DSLogError,
    LineageLostError,
    StaleLineageError,
    UnsupportedArrayError,
)

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.random(shape) + 0.5


def assert_sorted_unique(rel: LineageRelation) -> None:
    """Extraction promises sorted, duplicate-free columns, valid for from_columns."""
    again = LineageRelation.from_columns(
        rel.out_shape, rel.in_shape, list(rel.out_cols), list(rel.in_cols), n=rel.n
    )
    u = again.unique()
    assert u.n == rel.n
    np.testing.assert_array_equal(u.pairs(), rel.pairs())


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4)])
def test_elementwise_values_and_lineage_any_rank(shape: tuple[int, ...]) -> None:
    x = rand(*shape)
    for f in (np.negative, np.sin, np.exp, np.sqrt, np.rint):
        r = capture(f, x)
        np.testing.assert_array_equal(r.value, f(x))
        assert r.relation(0, 0) == analytic.elementwise(shape)
        assert_sorted_unique(r.relation(0, 0))


def test_add_with_broadcasting_matches_analytic() -> None:
    a, b = rand(3, 1, 4), rand(5, 1)
    r = capture(np.add, a, b)
    np.testing.assert_array_equal(r.value, a + b)
    want = analytic.add(a.shape, b.shape)
    assert r.relation(0, 0) == want[0]
    assert r.relation(0, 1) == want[1]


@pytest.mark.parametrize(("shape", "axis"), [((4, 5), 0), ((4, 5), 1), ((2, 3, 4), (0, 2))])
def test_sum_axis_values_and_lineage(shape: tuple[int, ...], axis: int | tuple[int, ...]) -> None:
    x = rand(*shape)
    r = capture(np.sum, x, axis=axis)
    np.testing.assert_array_equal(r.value, np.sum(x, axis=axis))
    assert r.relation() == analytic.sum_axis(shape, axis)


def test_large_sum_uses_numpy_pairwise_summation() -> None:
    x = rand(3, 1000)
    r = capture(np.sum, x, axis=1)
    np.testing.assert_array_equal(r.value, np.sum(x, axis=1))
    r_all = capture(np.sum, x)
    assert r_all.value == np.sum(x)
    assert r_all.relation().n == x.size


def test_dot_lineage_and_values() -> None:
    a, b = rand(3, 4), rand(4, 2)
    r = capture(np.dot, a, b)
    np.testing.assert_allclose(r.value, a @ b, rtol=1e-15)
    want = analytic.dot(a.shape, b.shape)
    assert r.relation(0, 0) == want[0]
    assert r.relation(0, 1) == want[1]
    m = capture(np.matmul, a, b)
    np.testing.assert_array_equal(m.value, np.matmul(a, b))
    assert m.relation(0, 0) == want[0]
    assert m.relation(0, 1) == want[1]


@pytest.mark.parametrize(
    ("func", "want"),
    [
        (lambda x: np.tile(x, (2, 3)), lambda s: analytic.tile(s, (2, 3))),
        (np.transpose, analytic.transpose),
        (np.flip, analytic.flip),
        (lambda x: np.rot90(x, 1), lambda s: analytic.rot90(s, 1)),
        (lambda x: np.repeat(x, 3, axis=1), lambda s: analytic.repeat(s, 3, axis=1)),
    ],
    ids=["tile", "transpose", "flip", "rot90", "repeat"],
)
def test_data_movement_matches_analytic(func, want) -> None:  # type: ignore[no-untyped-def]
    x = rand(3, 4)
    r = capture(func, x)
    np.testing.assert_array_equal(r.value, func(x))
    assert r.relation() == want(x.shape)


def test_sort_moves_the_picked_cells() -> None:
    x = rand(4, 6)
    r = capture(np.sort, x, axis=1)
    np.testing.assert_array_equal(r.value, np.sort(x, axis=1))
    assert r.relation() == analytic.sort(x, axis=1)


def test_picks_carry_only_the_winner_and_considered_records_the_rest() -> None:
    x = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 9.0]])
    r = Capture(mode="considered").run(np.max, x, axis=1)
    np.testing.assert_array_equal(r.value, [5.0, 9.0])
    assert r.relation().pairs().tolist() == [[0, 0, 1], [1, 1, 2]]
    assert r.relation(considered=True) == analytic.sum_axis(x.shape, 1)
    c = capture(np.max, x, axis=1)
    assert c.considered is None
    with pytest.raises(CaptureError, match="considered"):
        c.relation(considered=True)


def test_maximum_ties_pass_both_operands() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 0.0])
    r = capture(np.maximum, a, b)
    assert r.relation(0, 0).pairs().tolist() == [[0, 0], [2, 2]]
    assert r.relation(0, 1).pairs().tolist() == [[0, 0], [1, 1]]


def _pairs(r: Any, o: int = 0, i: int = 0, considered: bool = False) -> set[tuple[int, ...]]:
    return {tuple(p) for p in r.relation(o, i, considered=considered).pairs().tolist()}


def test_ties_pass_every_tied_cell_in_both_modes() -> None:
    """Issue 26, hand-derived: a pick passes every tied cell (0.0 == -0.0 tie, a NaN never
    does); considered stays the whole compared set."""
    x = np.array([[1.0, 3.0, 3.0], [0.0, -0.0, -1.0], [2.0, 2.0, 2.0]])
    for mode in ("contributing", "considered"):
        cap = Capture(mode=mode)
        # along the contiguous axis (whole-lane reductions) and the strided one (in place)
        rows = cap.run(lambda a: a.max(axis=1), x)
        assert _pairs(rows) == {
            (0, 0, 1),
            (0, 0, 2),
            (1, 1, 0),
            (1, 1, 1),
            (2, 2, 0),
            (2, 2, 1),
            (2, 2, 2),
        }
        cols = cap.run(lambda a: a.min(axis=0), x)
        assert _pairs(cols) == {(0, 1, 0), (1, 1, 1), (2, 1, 2)}
        assert _pairs(cap.run(np.max, np.full((2, 2), 7.0))) == {
            (i, j) for i in range(2) for j in range(2)
        }
        nan = np.array([1.0, np.nan, 1.0, np.nan, 0.5])
        assert _pairs(cap.run(np.max, nan)) == {(1,)}  # the first NaN, NaNs never tie
        assert _pairs(cap.run(np.nanmax, nan)) == {(0,), (2,)}
        two = cap.run(np.maximum, np.array([0.0, 1.0, np.nan]), np.array([-0.0, 1.0, np.nan]))
        assert _pairs(two, 0, 0) == {(0, 0), (1, 1), (2, 2)}
        assert _pairs(two, 0, 1) == {(0, 0), (1, 1)}
        acc = cap.run(np.maximum.accumulate, np.array([1.0, 3.0, 3.0, 2.0]))
        assert _pairs(acc) == {(0, 0), (1, 1), (2, 1), (2, 2), (3, 1), (3, 2)}
        clip = cap.run(np.clip, np.array([-1.0, 1.0, 0.0]), np.full(3, -1.0), np.full(3, 1.0))
        assert _pairs(clip, 0, 0) == {(0, 0), (1, 1), (2, 2)}
        assert (_pairs(clip, 0, 1), _pairs(clip, 0, 2)) == ({(0, 0)}, {(1, 1)})
        if mode == "considered":
            assert _pairs(rows, considered=True) == {(i, i, j) for i in range(3) for j in range(3)}
            assert _pairs(clip, 0, 1, considered=True) == {(k, k) for k in range(3)}


def test_constants_carry_no_lineage_and_where_selects() -> None:
    x = np.array([0.2, 0.8, 0.6])
    r = capture(lambda a: np.where(a > 0.5, a, 0.0), x)
    np.testing.assert_array_equal(r.value, [0.0, 0.8, 0.6])
    assert r.relation().pairs().tolist() == [[1, 1], [2, 2]]


def test_scalar_zero_d_and_multiple_outputs() -> None:
    x = rand(3, 2)
    r = capture(lambda a: (np.sum(a), a[0, 1], a * 2), x)
    assert isinstance(r.value, tuple)
    assert len(r.outputs) == 3
    assert isinstance(r.value[0], np.float64)
    assert r.value[0] == np.sum(x)
    assert r.relation(0, 0).out_shape == ()
    assert r.relation(0, 0).n == 6
    assert r.relation(1, 0).pairs().tolist() == [[0, 1]]
    assert r.relation(2, 0) == analytic.elementwise(x.shape)
    z = capture(np.negative, np.array(2.5))
    assert z.relation().out_shape == ()
    assert z.relation().in_shape == ()
    assert z.relation().n == 1


def test_non_contiguous_views_and_fancy_indexing() -> None:
    x = rand(6, 8)
    r = capture(lambda a: np.exp(a[::2, 1::3]) + a[1::2, ::3].T.T, x)
    np.testing.assert_array_equal(r.value, np.exp(x[::2, 1::3]) + x[1::2, ::3])
    pairs = {tuple(p) for p in r.relation().pairs().tolist()}
    want = {(i, j, 2 * i, 3 * j + 1) for i in range(3) for j in range(3)}
    want |= {(i, j, 2 * i + 1, 3 * j) for i in range(3) for j in range(3)}
    assert pairs == want
    t = capture(lambda a: a[[3, 0, 0], [1, 2, 2]], x)
    assert t.relation().pairs().tolist() == [[0, 3, 1], [1, 0, 2], [2, 0, 2]]


def test_cumsum_prefix_lineage() -> None:
    x = rand(5)
    r = capture(np.cumsum, x)
    np.testing.assert_array_equal(r.value, np.cumsum(x))
    assert r.relation().n == 15
    assert r.relation().pairs().tolist()[:3] == [[0, 0], [1, 0], [1, 1]]


def test_two_inputs_and_repeated_operands_dedupe() -> None:
    a, b = rand(4), rand(4)
    r = capture(lambda x, y: (x + y) * (x - y) + x * x, a, b)
    np.testing.assert_array_equal(r.value, (a + b) * (a - b) + a * a)
    assert r.relation(0, 0) == analytic.elementwise(4)
    assert r.relation(0, 1) == analytic.elementwise(4)


def test_cast_to_plain_dtype_raises_naming_the_function() -> None:
    def leaky(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float64) * 2

    with pytest.raises(LineageLostError, match="leaky"):
        capture(leaky, rand(3))
    with pytest.raises(LineageLostError, match="interp"):
        capture(np.interp, rand(3), np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    with pytest.raises(LineageLostError, match="float\\(\\)"):
        capture(lambda a: float(a[0]), rand(3))


def test_non_numpy_result_raises_or_records_flagged_all_to_all() -> None:
    def python_loop(a: np.ndarray) -> np.ndarray:
        out = np.zeros(len(a))  # filled outside NumPy's tracked loops: no lineage
        for i in range(len(a)):
            out[i] = i
        return out

    with pytest.raises(LineageLostError, match="python_loop"):
        capture(python_loop, rand(3))
    xs, xp, fp = np.array([0.5, 1.5]), np.array([0.0, 1.0, 2.0]), rand(3)
    r = Capture(on_lost="all_to_all").run(np.interp, xs, xp, fp)
    assert r.flagged
    assert r.reason
    assert "interp" in r.reason
    np.testing.assert_array_equal(r.value, np.interp(xs, xp, fp))
    assert r.relation(0, 2).n == 2 * 3


def test_errors_are_dslog_errors_and_captures_do_not_nest() -> None:
    assert issubclass(LineageLostError, DSLogError)
    assert issubclass(LineageLostError, TypeError)
    with pytest.raises(CaptureError, match="nest"):
        capture(lambda a: capture(np.negative, np.ones(2)).value, rand(2))
    assert not _annotator.active()
    with pytest.raises(UnsupportedArrayError):
        capture(np.negative, np.array(["a"]))
    with pytest.raises(ValueError, match="mode"):
        Capture(mode="everything")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_lost"):
        Capture(on_lost="ignore")  # type: ignore[arg-type]


def test_tracked_arrays_outliving_their_capture_are_stale() -> None:
    kept: list[np.ndarray] = []

    def keep(a: np.ndarray) -> np.ndarray:
        kept.append(a)
        return a + 1

    Capture(defer=False).run(keep, rand(3))  # annotated from the start: kept is tracked
    assert kept[0].dtype == TRACKED_FLOAT
    with pytest.raises(StaleLineageError):
        capture(lambda b: kept[0] + b, rand(3))
    with pytest.raises(LineageLostError, match="Pickling"):
        pickle.dumps(kept[0][0])


def test_arena_is_freed_and_repeated_captures_do_not_grow_memory() -> None:
    def rss_mb() -> float:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * 4096 / 2**20

    x = rand(400, 500)
    eager = Capture(defer=False)  # annotated from the start: the arena holds the sums' lists
    r = eager.run(lambda a: np.sum(a, axis=0) + np.sum(a * 2.0, axis=0), x)
    assert r.annotation_bytes > 0
    assert not _annotator.active()
    assert _annotator.stats() == {"active": False}
    for _ in range(3):
        eager.run(lambda a: np.sum(a, axis=0) + np.sum(a * 2.0, axis=0), x)
    gc.collect()
    before = rss_mb()
    for _ in range(8):
        eager.run(lambda a: np.sum(a, axis=0) + np.sum(a * 2.0, axis=0), x)
    gc.collect()
    assert rss_mb() - before < 40


def test_bytes_per_annotation_for_aggregates_is_small() -> None:
    x = rand(200, 2000)
    r = capture(np.sum, x, axis=1)
    assert r.relation().n == x.size
    assert r.annotation_bytes / x.size <= 16


def _brute(out_shape: tuple[int, ...], in_shape: tuple[int, ...], pairs: set) -> LineageRelation:
    ordered = sorted(pairs)
    return LineageRelation.from_flat(
        out_shape,
        in_shape,
        np.array([p[0] for p in ordered], dtype=np.int64),
        np.array([p[1] for p in ordered], dtype=np.int64),
    )


def test_compact_set_forms_extract_exactly() -> None:
    # Inline two-cell sets (x + y), their fallback once more than 256 distances occur (a
    # shuffled y), progression accumulators of reductions (also in place, and one running
    # across the boundary between two inputs), and progressions broken by an odd cell.
    a, b = rand(6, 50), rand(6, 50)
    perm = np.random.default_rng(3).permutation(b.size)

    def f(x, y):  # type: ignore[no-untyped-def]
        shuffled = x + y.reshape(-1)[perm].reshape(y.shape)
        both = np.sum(np.concatenate([x, y]).reshape(-1))
        acc = x.copy()
        acc += y
        broken = np.sum(x[:, ::-1], axis=0) + x[0, 0]
        return x + y, shuffled, both, acc, np.sum(x, axis=0), broken

    r = capture(f, a, b)
    n = a.size
    cells = range(n)
    ident = {(i, i) for i in cells}
    want = {
        (0, 0): ident,
        (0, 1): ident,
        (1, 0): ident,
        (1, 1): {(i, int(perm[i])) for i in cells},
        (2, 0): {(0, i) for i in cells},
        (2, 1): {(0, i) for i in cells},
        (3, 0): ident,
        (3, 1): ident,
        (4, 0): {(j, i * 50 + j) for i in range(6) for j in range(50)},
        (4, 1): set(),
        (5, 0): {(j, i * 50 + 49 - j) for i in range(6) for j in range(50)}
        | {(j, 0) for j in range(50)},
        (5, 1): set(),
    }
    for (o, i), pairs in want.items():
        out_shape = r.outputs[o].shape
        rel = r.relation(o, i)
        assert rel == _brute(out_shape, (6, 50), pairs), (o, i)
        assert_sorted_unique(rel)
    np.testing.assert_array_equal(r.value[5], np.sum(a[:, ::-1], axis=0) + a[0, 0])


@pytest.mark.parametrize("mode", ["contributing", "considered"])
def test_row_reductions_with_a_hole_and_a_foreign_row(mode: str) -> None:
    # np.sum(axis=0) turns each row of accumulators into one group; a constant cell (no
    # lineage) and a row from the other input break the group mid-way, the rest must go on.
    a, b = rand(7, 30), rand(7, 30)

    def f(x, y):  # type: ignore[no-untyped-def]
        z = x.copy()
        z[5, 5] = 7.0
        z[6] = y[2]
        return np.sum(z, axis=0), np.prod(x[:, ::-1], axis=0)

    r = Capture(mode=mode).run(f, a, b)  # type: ignore[arg-type]
    want_a = {(j, i * 30 + j) for i in range(6) for j in range(30)} - {(5, 5 * 30 + 5)}
    assert r.relation(0, 0) == _brute((30,), (7, 30), want_a)
    assert r.relation(0, 1) == _brute((30,), (7, 30), {(j, 2 * 30 + j) for j in range(30)})
    want_prod = {(j, i * 30 + 29 - j) for i in range(7) for j in range(30)}
    assert r.relation(1, 0) == _brute((30,), (7, 30), want_prod)
    z = a.copy()
    z[5, 5] = 7.0
    z[6] = b[2]
    np.testing.assert_array_equal(r.value[0], np.sum(z, axis=0))
    np.testing.assert_array_equal(r.value[1], np.prod(a[:, ::-1], axis=0))


def test_statistics_of_the_whole_array_do_not_multiply_annotations() -> None:
    """``x - x.mean()`` gives every cell the set {i} ∪ {all cells}; materialising each union
    costs cells² annotations (a 512 x 512 threshold step then needs > 20 GB). The arena must
    stay linear in the cells: the example project's threshold step is exactly this."""

    def threshold(s: np.ndarray) -> np.ndarray:
        level = s.mean() + 2.5 * s.std()
        return np.where(s > level, s, 0.0)

    x = np.random.default_rng(0).random((64, 64))
    x[10, 20] = 50.0  # one hot cell
    r = capture(threshold, x)
    assert r.relation(0, 0).pairs().tolist() == [[10, 20, 10, 20]]
    assert r.annotation_bytes < 64 * x.size  # linear (~16 B per cell), not quadratic


def test_all_to_all_fallback_keeps_the_functions_output_dtypes() -> None:
    x = np.array([[0.0, 2.0, -1.0], [3.0, 0.0, 5.0]])
    # positions of a combined mask: `&` of two masks is control, so they carry nothing
    # (positions of a tracked array or of one comparison's mask carry positional lineage:
    # tests/annotator/test_positions_grid.py)
    r = Capture(on_lost="all_to_all").run(lambda a: np.argwhere((a != 0) & (a < 9.0)), x)
    assert r.flagged
    assert r.value.dtype == np.int64
    assert r.outputs[0].dtype == np.int64
    np.testing.assert_array_equal(r.value, np.argwhere(x))
    assert r.relation(0, 0).n == np.argwhere(x).size * x.size
    nz = Capture(on_lost="all_to_all").run(lambda a: np.nonzero((a != 0) & (a < 9.0)), x)
    want = np.nonzero(x)
    assert isinstance(nz.value, tuple)
    assert len(nz.value) == 2
    for got, w in zip(nz.value, want, strict=True):
        assert got.dtype == w.dtype
        np.testing.assert_array_equal(got, w)
    flags = Capture(on_lost="all_to_all").run(lambda a: a > 1.0, x)
    assert flags.value.dtype == np.bool_
    count = Capture(on_lost="all_to_all").run(np.count_nonzero, x)
    assert count.value == 4
    assert count.value.dtype == np.int64  # a NumPy scalar of the function's own dtype
    with pytest.raises(UnsupportedArrayError, match="numeric and boolean"):
        Capture(on_lost="all_to_all").run(lambda a: np.array(["a"]), x)


def test_all_to_all_fallback_runs_a_function_once_unless_it_may_run_again() -> None:
    """Issue 24: the fallback never calls user code a second time unless it is pure."""
    x = np.array([[0.0, 2.0, -1.0], [3.0, 0.0, 5.0]])
    calls: list[str] = []

    def indices(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append("indices")
        return a * 2.0, np.argwhere((a > 1.0) & (a < 9.0))  # output 1: no lineage (control)

    r = Capture(on_lost="all_to_all").run(indices, x)
    assert calls == ["indices"]  # the values are those of the one run
    assert r.flagged
    assert r.reason is not None
    assert "output 1" in r.reason
    np.testing.assert_array_equal(r.value[1], np.argwhere(x > 1.0))
    assert r.relation(0, 0) == capture(lambda a: a * 2.0, x).relation(0, 0)  # kept exact
    assert r.relation(1, 0).n == np.argwhere(x > 1.0).size * x.size

    def casts(a: np.ndarray) -> np.ndarray:
        calls.append("casts")
        return a.astype(np.float64) * 2.0  # the annotated run raises part-way

    calls.clear()
    with pytest.raises(LineageLostError, match="pure=True") as info:
        Capture(on_lost="all_to_all").run(casts, x)
    assert "second time" in str(info.value)
    assert calls == ["casts"]
    calls.clear()
    r = Capture(on_lost="all_to_all", pure=True).run(casts, x)
    assert calls == ["casts", "casts"]
    assert r.flagged
    np.testing.assert_array_equal(r.value, x * 2.0)
    # NumPy's own functions have no side effects: they may run again without a declaration
    fft = Capture(on_lost="all_to_all").run(np.fft.fft, x)
    assert fft.flagged
    np.testing.assert_array_equal(fft.value, np.fft.fft(x))


def test_all_to_all_fallback_is_one_row_whatever_the_sizes() -> None:
    """The fallback's tables are one ProvRC row per (output, input): no pair is written, so
    an all-to-all relation of 10^13 pairs costs what a small one does."""
    x = np.random.default_rng(1).random((1500, 1500))
    r = Capture(on_lost="all_to_all").run(lambda a: np.argwhere((a > 0.5) & (a < 0.9)), x)
    assert r.flagged
    assert r.tables is not None
    table = r.tables[(0, 0)]
    assert table.rows == 1
    assert table.n_pairs == r.value.size * x.size
    np.testing.assert_array_equal(r.value, np.argwhere((x > 0.5) & (x < 0.9)))


@given(
    st.lists(st.integers(0, 3), max_size=3),
    st.lists(st.integers(0, 3), max_size=3),
)
def test_all_to_all_table_stands_for_every_pair(out: list[int], inp: list[int]) -> None:
    table = LineageTable.all_to_all(tuple(out), tuple(inp))
    no, ni = int(np.prod(out)), int(np.prod(inp))
    o = np.indices(tuple(out)).reshape(len(out), no)  # 0-d: one cell, no coordinates
    i = np.indices(tuple(inp)).reshape(len(inp), ni)
    want = LineageRelation(
        tuple(out),
        tuple(inp),
        np.repeat(o, ni, axis=1),
        np.tile(i, (1, no)),
        no * ni,
    )
    assert table.decompress() == want
    assert table.n_pairs == no * ni


def test_nan_aware_numpy_paths_give_numpys_values_and_skip_ignored_nans() -> None:
    """Issue 24's examples: NumPy treats tracked_float as a float, so its NaN code paths run."""
    from dslog_dagster.core.capture import TRACKED_FLOAT

    assert np.issubdtype(TRACKED_FLOAT, np.floating)
    assert np.finfo(TRACKED_FLOAT).max == np.finfo(np.float64).max
    x = np.array([[1.0, np.nan], [3.0, 4.0], [np.nan, 8.0]])

    def impute(a: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(a), np.nanmean(a, axis=0), a)

    r = capture(impute, x)
    np.testing.assert_array_equal(r.value, [[1.0, 6.0], [3.0, 4.0], [2.0, 8.0]])
    pairs = {(tuple(p[:2]), tuple(p[2:])) for p in r.relation(0, 0).pairs().tolist()}
    # the imputed cell comes from its column's non-NaN cells; the NaN itself contributes nothing
    assert {i for o, i in pairs if o == (2, 0)} == {(0, 0), (1, 0)}
    assert {i for o, i in pairs if o == (0, 1)} == {(1, 1), (2, 1)}
    with np.errstate(invalid="ignore"):
        med = capture(np.median, np.array([3.0, np.nan, 1.0]))
    assert np.isnan(med.value)
    assert med.relation(0, 0).pairs().tolist() == [[1]]  # the NaN cell NumPy returns
    uniq = capture(np.unique, np.array([np.nan, 1.0, np.nan]))
    np.testing.assert_array_equal(uniq.value, [1.0, np.nan])
    assert uniq.relation(0, 0).pairs().tolist() == [[0, 1], [1, 0]]
    y = np.array([np.nan, np.inf, -np.inf, 2.0])
    np.testing.assert_array_equal(capture(np.nan_to_num, y).value, np.nan_to_num(y))
    assert capture(np.nan_to_num, y).relation(0, 0).pairs().tolist() == [[3, 3]]
    s = capture(np.nansum, y[[0, 3]])
    assert s.value == 2.0
    assert s.relation(0, 0).pairs().tolist() == [[1]]
