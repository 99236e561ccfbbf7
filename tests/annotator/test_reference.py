"""The reference annotator is right on its own, before any native code is compared with it.

Three kinds of evidence, none of which uses the native annotator:

* lineage equals the analytic generators of :mod:`dslog_dagster.core.testing.analytic` (each of
  which is itself checked against brute force in ``tests/unit/test_analytic.py``) for
  random shapes and arguments — element-wise, broadcasting add, reductions, dot, tile,
  transpose, flip, rot90, repeat and sort;
* hand-computed cases for every picking rule (maximum and ties, NaN, amax/ptp, median,
  quantiles, clip, where, unique, sinc at 0, nan-functions, unwrap, gradient, interp);
* values equal plain NumPy on the whole coverage grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.testing import analytic
from tests.annotator.grid import CASES, EXTRA_NAMES, ICDE_NAMES, GridCase
from tests.annotator.reference import (
    MODES,
    Mode,
    Ref,
    pick,
    reference_capture,
    to_relations,
)

# Deterministic for CI: the same examples on every run, nothing read from or written to a
# database (the house profile of tests/property plus derandomisation).
CI = settings(max_examples=40, deadline=None, derandomize=True, database=None)

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def relation(func: Any, *arrays: np.ndarray, mode: Mode = "contributing", **kw: Any) -> dict:
    """Reference lineage of ``func(*arrays, **kw)`` as LineageRelations keyed (out, in)."""
    values, lineage = reference_capture(func, *arrays, mode=mode, **kw)
    return to_relations(values, lineage, [a.shape for a in arrays])


def pairs(func: Any, *arrays: Any, mode: Mode = "contributing", **kw: Any) -> dict:
    """Reference lineage as plain sets of (out flat, in flat) pairs, keyed (out, in)."""
    arrs = [np.asarray(a, dtype=np.float64) for a in arrays]
    return reference_capture(func, *arrs, mode=mode, **kw)[1]


def distinct(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Distinct values in random order (ties would make sort lineage a convention)."""
    size = int(np.prod(shape))
    return np.random.default_rng(seed).permutation(size).reshape(shape).astype(np.float64) / 7


# ---------------------------------------------------------------------------------------------
# Against core.testing.analytic
# ---------------------------------------------------------------------------------------------


@CI
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_elementwise_is_identity(shape: tuple[int, ...], seed: int) -> None:
    x = np.random.default_rng(seed).uniform(0.1, 2.0, shape)
    for fn in (np.negative, np.exp, np.sqrt, np.sinc, np.round, np.fix):
        for mode in MODES:
            assert relation(fn, x, mode=mode)[(0, 0)] == analytic.elementwise(shape)


@st.composite
def broadcast_pairs(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    out = draw(shapes)
    a = tuple(d if draw(st.booleans()) else 1 for d in out)
    b = tuple(d if draw(st.booleans()) else 1 for d in out)
    return a[draw(st.integers(0, len(a) - 1)) :], b


@CI
@given(sh=broadcast_pairs(), seed=st.integers(0, 2**16))
def test_add_broadcasts_like_analytic(sh: tuple[tuple[int, ...], ...], seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, sh[0]), rng.uniform(-1, 1, sh[1])
    rels = relation(np.add, a, b)
    want = analytic.add(sh[0], sh[1])
    assert rels[(0, 0)] == want[0]
    assert rels[(0, 1)] == want[1]


@st.composite
def reductions(draw: Any) -> tuple[tuple[int, ...], Any, bool]:
    shape = draw(shapes)
    axes = draw(st.sets(st.integers(0, len(shape) - 1)))
    axis: Any = None if not axes or len(axes) == len(shape) else tuple(sorted(axes))
    if isinstance(axis, tuple) and len(axis) == 1 and draw(st.booleans()):
        axis = axis[0]
    return shape, axis, draw(st.booleans())


@CI
@given(case=reductions(), seed=st.integers(0, 2**16))
def test_reductions_cover_the_lane(case: tuple[tuple[int, ...], Any, bool], seed: int) -> None:
    shape, axis, keepdims = case
    x = np.random.default_rng(seed).uniform(0.5, 2.0, shape)
    want = analytic.sum_axis(shape, axis, keepdims=keepdims)
    for fn in (np.sum, np.prod, np.mean, np.std, np.var, np.nansum):
        assert relation(fn, x, axis=axis, keepdims=keepdims)[(0, 0)] == want
    # Picking reductions consider the whole lane; median/quantile sort it.
    for fn in (np.amax, np.amin, np.ptp, np.median):
        got = relation(fn, x, mode="considered", axis=axis, keepdims=keepdims)[(0, 0)]
        assert got == want


@CI
@given(
    n=st.integers(1, 4),
    k=st.integers(1, 4),
    p=st.integers(1, 4),
    ranks=st.sampled_from([(2, 2), (2, 1), (1, 2), (1, 1)]),
    seed=st.integers(0, 2**16),
)
def test_dot_matches_analytic(n: int, k: int, p: int, ranks: tuple[int, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    ash = (n, k) if ranks[0] == 2 else (k,)
    bsh = (k, p) if ranks[1] == 2 else (k,)
    a, b = rng.uniform(-1, 1, ash), rng.uniform(-1, 1, bsh)
    want = analytic.dot(ash, bsh)
    for fn in (np.dot, np.matmul):
        if fn is np.matmul and ranks == (1, 1):
            continue  # same as dot; matmul of two vectors is covered in the grid
        rels = relation(fn, a, b)
        assert rels[(0, 0)] == want[0]
        assert rels[(0, 1)] == want[1]


@CI
@given(shape=shapes, reps=st.lists(st.integers(1, 3), min_size=1, max_size=3))
def test_tile_matches_analytic(shape: tuple[int, ...], reps: list[int]) -> None:
    x = distinct(shape, 0)
    assert relation(np.tile, x, reps=tuple(reps))[(0, 0)] == analytic.tile(shape, tuple(reps))


@CI
@given(shape=shapes, data=st.data())
def test_transpose_flip_rot90_repeat_match_analytic(shape: tuple[int, ...], data: Any) -> None:
    x = distinct(shape, 1)
    rank = len(shape)
    perm = tuple(data.draw(st.permutations(range(rank))))
    assert relation(np.transpose, x, axes=perm)[(0, 0)] == analytic.transpose(shape, perm)
    fax = data.draw(st.none() | st.integers(0, rank - 1))
    assert relation(np.flip, x, axis=fax)[(0, 0)] == analytic.flip(shape, fax)
    reps = data.draw(st.integers(1, 3) | st.lists(st.integers(0, 2), min_size=1))
    rax = data.draw(st.none() | st.integers(0, rank - 1))
    if isinstance(reps, list):
        reps = reps[0] if rax is None else [reps[i % len(reps)] for i in range(shape[rax])]
    want = analytic.repeat(shape, reps, rax)
    assert relation(np.repeat, x, repeats=reps, axis=rax)[(0, 0)] == want
    if rank >= 2:
        k = data.draw(st.integers(-4, 4))
        p, q = data.draw(st.permutations(range(rank)))[:2]
        got = relation(np.rot90, x, k=k, axes=(p, q))[(0, 0)]
        assert got == analytic.rot90(shape, k, (p, q))


@CI
@given(shape=shapes, data=st.data(), seed=st.integers(0, 2**16))
def test_sort_matches_analytic(shape: tuple[int, ...], data: Any, seed: int) -> None:
    x = distinct(shape, seed)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    assert relation(np.sort, x, axis=axis)[(0, 0)] == analytic.sort(x, axis)
    # considered: every output cell of a lane saw the whole lane
    considered = relation(np.sort, x, mode="considered", axis=axis)[(0, 0)]
    lane_ax = None if axis is None else axis % len(shape)
    flat_out = x.reshape(-1) if axis is None else x
    n_lane = flat_out.size if axis is None else shape[lane_ax]
    assert considered.unique().n == x.size * n_lane


def test_sort_ties_are_stable() -> None:
    x = np.array([[2.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    assert relation(np.sort, x, axis=0)[(0, 0)] == analytic.sort(x, axis=0)
    got = pairs(np.sort, [3.0, 1.0, 3.0, 1.0])[(0, 0)]
    assert got == {(0, 1), (1, 3), (2, 0), (3, 2)}


# ---------------------------------------------------------------------------------------------
# Hand-computed picking rules
# ---------------------------------------------------------------------------------------------


def test_maximum_picks_the_larger_cell_and_considers_both() -> None:
    a, b = [1.0, 5.0, 2.0], [3.0, 4.0, 2.0]
    got = pairs(np.maximum, a, b)
    assert got[(0, 0)] == {(1, 1), (2, 2)}  # 5 > 4, and the tie 2 == 2 passes both cells
    assert got[(0, 1)] == {(0, 0), (2, 2)}
    con = pairs(np.maximum, a, b, mode="considered")
    assert con[(0, 0)] == con[(0, 1)] == {(0, 0), (1, 1), (2, 2)}
    mins = pairs(np.minimum, a, b)
    assert mins[(0, 0)] == {(0, 0), (2, 2)}
    assert mins[(0, 1)] == {(1, 1), (2, 2)}


def test_nan_picking() -> None:
    a, b = [np.nan, 1.0, np.nan], [2.0, np.nan, np.nan]
    mx = pairs(np.maximum, a, b)  # NaN propagates: the NaN operand, the first if both
    assert mx[(0, 0)] == {(0, 0), (2, 2)}
    assert mx[(0, 1)] == {(1, 1)}
    fm = pairs(np.fmax, a, b)  # NaN ignored: the number, the first if both NaN
    assert fm[(0, 0)] == {(1, 1), (2, 2)}
    assert fm[(0, 1)] == {(0, 0)}
    assert pairs(np.amax, [1.0, np.nan, 3.0, np.nan])[(0, 0)] == {(0, 1)}


def test_ties_in_picking_reductions_pass_every_tied_cell() -> None:
    x = [[1.0, 3.0, 3.0], [0.0, -0.0, -1.0]]
    assert pairs(np.amax, x, axis=1)[(0, 0)] == {(0, 1), (0, 2), (1, 3), (1, 4)}  # 0.0 == -0.0
    assert pairs(np.amin, x, axis=1)[(0, 0)] == {(0, 0), (1, 5)}
    assert pairs(np.amax, x)[(0, 0)] == {(0, 1), (0, 2)}
    all_equal = pairs(np.amax, [[2.0, 2.0], [2.0, 2.0]], axis=0)[(0, 0)]
    assert all_equal == {(0, 0), (0, 2), (1, 1), (1, 3)}
    # NaN never ties: the first NaN is the pick (maximum), nanmax/fmax skips NaN and ties
    assert pairs(np.amax, [np.nan, 1.0, np.nan])[(0, 0)] == {(0, 0)}
    assert pairs(np.nanmax, [1.0, np.nan, 1.0, 0.5])[(0, 0)] == {(0, 0), (0, 2)}
    # ptp = max - min: every argmax and every argmin
    assert pairs(np.ptp, x, axis=1)[(0, 0)] == {(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5)}
    assert pairs(np.ptp, x, axis=1, mode="considered")[(0, 0)] == {
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 3),
        (1, 4),
        (1, 5),
    }


def test_signed_zeros_tie_with_numpy_s_value() -> None:
    a = Ref(0.0, frozenset({(0, 0)}))
    b = Ref(-0.0, frozenset({(1, 0)}))
    for ufunc in (np.maximum, np.minimum, np.fmax, np.fmin):
        for x, y in ((a, b), (b, a)):
            got = pick(ufunc, x, y)
            want = ufunc(np.float64(x.v), np.float64(y.v))
            assert np.signbit(got.v) == np.signbit(want)
            assert got.contrib == a.contrib | b.contrib


def test_median_of_even_length_takes_both_middle_cells() -> None:
    x = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 (cell 1), 2 (cell 3), 3 (cell 2), 4 (cell 0)
    assert pairs(np.median, x)[(0, 0)] == {(0, 3), (0, 2)}
    assert pairs(np.median, x, mode="considered")[(0, 0)] == {(0, i) for i in range(4)}
    odd = [5.0, 1.0, 3.0]
    assert pairs(np.median, odd)[(0, 0)] == {(0, 2)}
    vals, _ = reference_capture(np.median, np.array(x))
    assert float(vals) == 2.5


def test_quantile_reads_both_neighbours_even_at_an_exact_index() -> None:
    x = [5.0, 1.0, 3.0]  # sorted: 1 (cell 1), 3 (cell 2), 5 (cell 0)
    # q = 0.5: virtual index 1.0 -> previous = 3, next = 5, gamma = 0: _lerp reads both.
    assert pairs(np.quantile, x, q=0.5)[(0, 0)] == {(0, 2), (0, 0)}
    assert pairs(np.quantile, x, q=0.25)[(0, 0)] == {(0, 1), (0, 2)}
    assert pairs(np.quantile, x, q=1.0)[(0, 0)] == {(0, 0)}  # at the top both are the max
    assert pairs(np.quantile, x, q=0.0)[(0, 0)] == {(0, 1), (0, 2)}
    assert pairs(np.percentile, x, q=[0.0, 100.0])[(0, 0)] == {(0, 1), (0, 2), (1, 0)}


def test_clip_with_constant_bounds() -> None:
    x = [-3.0, 0.2, 3.0]
    got = pairs(np.clip, x, a_min=-1.0, a_max=1.0)
    assert got[(0, 0)] == {(1, 1)}  # the clipped cells took a constant
    con = pairs(np.clip, x, a_min=-1.0, a_max=1.0, mode="considered")
    assert con[(0, 0)] == {(0, 0), (1, 1), (2, 2)}
    lo, hi = [-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]
    arr = pairs(np.clip, x, lo, hi)
    assert arr == {(0, 0): {(1, 1)}, (0, 1): {(0, 0)}, (0, 2): {(2, 2)}}
    # A value equal to a bound is a tie: x and the bound (NumPy's clip macro, each step).
    ties = pairs(np.clip, [-1.0, 1.0, 0.0], lo, hi)
    assert ties == {(0, 0): {(0, 0), (1, 1), (2, 2)}, (0, 1): {(0, 0)}, (0, 2): {(1, 1)}}
    # lo == hi: the max (x or lo) ties hi; x below lo loses the max, so only the bounds
    both = pairs(np.clip, [0.0, 2.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    assert both == {
        (0, 0): {(2, 2)},
        (0, 1): {(0, 0), (2, 2)},
        (0, 2): {(0, 0), (1, 1), (2, 2)},
    }


def test_where_takes_the_selected_cell_only() -> None:
    x, y = np.array([1.0, -1.0, 2.0]), np.array([7.0, 8.0, 9.0])
    got = reference_capture(lambda a, b: np.where(a > 0, a, b), x, y, mode="considered")[1]
    assert got == {(0, 0): {(0, 0), (2, 2)}, (0, 1): {(1, 1)}}
    const = pairs(lambda a: np.where(a > 0, a, 0.0), x)
    assert const[(0, 0)] == {(0, 0), (2, 2)}
    sel = pairs(lambda a: np.take_along_axis(a, np.argmax(a, axis=0, keepdims=True), 0), x)
    assert sel[(0, 0)] == {(0, 2)}


def test_unique_keeps_the_first_equal_cell() -> None:
    x = [2.0, 1.0, 2.0, 1.0, 0.5]
    vals, lin = reference_capture(np.unique, np.array(x))
    assert vals.tolist() == [0.5, 1.0, 2.0]
    assert lin[(0, 0)] == {(0, 4), (1, 1), (2, 0)}
    con = reference_capture(np.unique, np.array(x), mode="considered")[1][(0, 0)]
    assert con == {(o, i) for o in range(3) for i in range(5)}


def test_constants_carry_no_lineage_but_operands_always_do() -> None:
    x = np.array([0.0, 1.5])
    assert pairs(np.sinc, x)[(0, 0)] == {(1, 1)}  # where(x, x, eps) picked eps at 0
    assert pairs(lambda a: a * 0.0, x)[(0, 0)] == {(0, 0), (1, 1)}
    assert pairs(np.sign, x)[(0, 0)] == {(0, 0), (1, 1)}
    assert pairs(np.heaviside, x, [0.5, 0.5]) == {
        (0, 0): {(0, 0), (1, 1)},
        (0, 1): {(0, 0), (1, 1)},
    }
    assert pairs(np.insert, x, obj=1, values=0.0)[(0, 0)] == {(0, 0), (2, 1)}
    assert pairs(np.imag, x)[(0, 0)] == set()


def test_nan_functions_drop_the_nan_cells() -> None:
    x = [1.0, np.nan, 2.0]
    assert pairs(np.nansum, x)[(0, 0)] == {(0, 0), (0, 2)}
    assert pairs(np.nancumprod, x)[(0, 0)] == {(0, 0), (1, 0), (2, 0), (2, 2)}
    assert pairs(np.sum, x)[(0, 0)] == {(0, 0), (0, 1), (0, 2)}


def test_cumulative_diff_gradient_windows() -> None:
    x = [1.0, 4.0, 9.0, 16.0]
    assert pairs(np.cumsum, x)[(0, 0)] == {(o, i) for o in range(4) for i in range(o + 1)}
    assert pairs(np.diff, x, n=2)[(0, 0)] == {(o, i) for o in range(2) for i in (o, o + 1, o + 2)}
    grad = pairs(np.gradient, x)[(0, 0)]
    assert grad == {(0, 0), (0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2), (3, 3)}
    assert pairs(np.gradient, x, edge_order=2)[(0, 0)] >= {(0, 0), (0, 1), (0, 2)}


def test_unwrap_drops_corrections_replaced_by_zero() -> None:
    # dd = [0.1, 3.0, 0.1]. With discont=1.0 the two 0.1 steps have their correction replaced
    # by the constant 0 (copyto(..., 0, where=abs(dd) < discont)); the 3.0 step keeps its
    # correction ddmod - dd (numerically 0, but computed from cells 1 and 2), and the cumsum
    # carries it into every later cell.
    x = [0.0, 0.1, 3.1, 3.2]
    got = pairs(np.unwrap, x, discont=1.0)[(0, 0)]
    assert got == {(0, 0), (1, 1), (2, 2), (2, 1), (3, 3), (3, 1), (3, 2)}
    vals, _ = reference_capture(np.unwrap, np.array(x), discont=1.0)
    np.testing.assert_array_equal(vals, np.unwrap(x, discont=1.0))


def test_interp_lineage() -> None:
    x, xp, fp = [0.5, -1.0, 2.0, 1.0], [0.0, 1.0, 2.0], [10.0, 20.0, 40.0]
    got = pairs(np.interp, x, xp, fp)
    # Only x[0] = 0.5 is interpolated (from xp0, xp1, fp0, fp1). The others pick by
    # comparison: x[1] < xp0 takes fp0, x[2] == xp[-1] takes fp[-1], x[3] == xp1 takes fp1.
    assert got[(0, 0)] == {(0, 0)}
    assert got[(0, 1)] == {(0, 0), (0, 1)}
    assert got[(0, 2)] == {(0, 0), (0, 1), (1, 0), (2, 2), (3, 1)}
    with_left = pairs(np.interp, x, xp, fp, left=-5.0)
    assert (1, 0) not in with_left[(0, 2)]  # the constant `left` was taken
    considered = pairs(np.interp, x, xp, fp, mode="considered")
    assert considered[(0, 0)] == {(i, i) for i in range(4)}


def test_cross_and_kron_cells() -> None:
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    got = pairs(np.cross, a, b)
    assert got[(0, 0)] == {(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)}
    assert got[(0, 1)] == got[(0, 0)]
    k = pairs(np.kron, [1.0, 2.0], [3.0, 4.0, 5.0])
    assert k[(0, 0)] == {(o, o // 3) for o in range(6)}
    assert k[(0, 1)] == {(o, o % 3) for o in range(6)}


# ---------------------------------------------------------------------------------------------
# API shape
# ---------------------------------------------------------------------------------------------


def test_scalar_multiple_outputs_and_modes() -> None:
    vals, lin = reference_capture(np.vdot, np.ones(3), np.arange(3.0))
    assert isinstance(vals, np.ndarray)
    assert vals.shape == ()
    assert float(vals) == 3.0
    assert lin[(0, 0)] == {(0, 0), (0, 1), (0, 2)}
    grads, glin = reference_capture(np.gradient, np.arange(6.0).reshape(2, 3))
    assert isinstance(grads, tuple)
    assert [g.shape for g in grads] == [(2, 3), (2, 3)]
    assert set(glin) == {(0, 0), (1, 0)}
    with pytest.raises(ValueError, match="mode"):
        reference_capture(np.sin, np.ones(2), mode="both")  # type: ignore[arg-type]


def test_relations_convert() -> None:
    rels = relation(np.transpose, np.zeros((2, 3)))
    assert isinstance(rels[(0, 0)], LineageRelation)
    assert rels[(0, 0)].out_shape == (3, 2)
    assert rels[(0, 0)] == analytic.transpose((2, 3))


# ---------------------------------------------------------------------------------------------
# The whole grid
# ---------------------------------------------------------------------------------------------


def test_grid_covers_the_icde_list() -> None:
    names = {c.name for c in CASES}
    assert set(ICDE_NAMES) <= names
    assert names <= set(ICDE_NAMES) | set(EXTRA_NAMES)
    # The 136 plus three spellings kept besides their aliases (degrees, radians,
    # conjugate), see the grid's docstring.
    assert len(set(ICDE_NAMES)) == 139
    assert all(max(len(s) for s in c.shapes) <= 3 for c in CASES)
    assert all(int(np.prod(s)) <= 24 for c in CASES for s in c.shapes)


def assert_values_equal(case: GridCase, got: Any, want: Any) -> None:
    """Values equal plain NumPy: bit for bit, or within summation-order rounding."""
    gots = got if isinstance(got, tuple) else (got,)
    wants = tuple(want) if isinstance(want, tuple | list) else (want,)
    assert len(gots) == len(wants), case.id
    for g, w in zip(gots, wants, strict=True):
        w_arr = np.asarray(w, dtype=np.float64)
        assert g.shape == w_arr.shape, case.id
        if case.exact:
            np.testing.assert_array_equal(g, w_arr, err_msg=case.id)
        else:
            np.testing.assert_allclose(g, w_arr, rtol=1e-12, atol=1e-12, err_msg=case.id)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_reference_values_equal_numpy(case: GridCase) -> None:
    inputs = case.inputs()
    with np.errstate(all="ignore"):
        want = case.func(*inputs)
    got, contributing = reference_capture(case.ref, *inputs)
    assert_values_equal(case, got, want)
    _, considered = reference_capture(case.ref, *inputs, mode="considered")
    assert contributing.keys() == considered.keys()
    for key, cells in contributing.items():
        assert cells <= considered[key], (case.id, key)
