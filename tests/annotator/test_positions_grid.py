"""Positional lineage against a slow reference, over shapes, input dtypes and both modes.

The rule (``dslog_dagster.core.positions``, docs "Positions"): an integer naming a position
carries the lineage of the cell it names (contributing) and of the cells compared to choose it
(considered: the lane for ``argmax``/``argmin``/``argsort``/``argpartition``, every tested cell
for ``argwhere``/``nonzero``/``where``/``flatnonzero``, all of the searched array for
``searchsorted``). Indexing with a tracked index passes the indexed cells (contributing) and
adds the index's lineage (considered). The reference below derives every set cell by cell in
plain Python from NumPy's own integer result; the values must be NumPy's, dtype included.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dslog_dagster.core import Capture
from dslog_dagster.core.capture import CaptureResult
from dslog_dagster.errors import LineageLostError

Cell = tuple[int, ...]
Pairs = set[tuple[Cell, Cell]]
MODES = ("contributing", "considered")
SHAPES = [(), (5,), (3, 4), (2, 3, 4), (0,), (0, 3), (3, 0)]
DTYPES = [np.float64, np.float32, np.int64, np.bool_]


def _data(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    """Values with zeros and ties (positions of equal values must be NumPy's too)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(-2, 3, size=shape)
    if dtype == np.bool_:
        return raw > 0
    return raw.astype(dtype)


def _cells(shape: tuple[int, ...]) -> list[Cell]:
    return [tuple(int(i) for i in c) for c in np.ndindex(*shape)]


def _got(r: CaptureResult, o: int, i: int, considered: bool) -> Pairs:
    rel = r.relation(o, i, considered=considered)
    k = len(rel.out_shape)
    return {(tuple(p[:k]), tuple(p[k:])) for p in rel.pairs().tolist()}


def _check(
    r: CaptureResult, want: list[tuple[Pairs, Pairs]], mode: str, inputs: int = 1, src: int = 0
) -> None:
    """Output o's (contributing, considered) pairs against input ``src``: exactly ``want[o]``;
    every other input contributes nothing."""
    for o, (contrib, considered) in enumerate(want):
        assert _got(r, o, src, False) == contrib, f"output {o}: contributing"
        if mode == "considered":
            assert _got(r, o, src, True) == considered | contrib, f"output {o}: considered"
        for i in range(inputs):
            if i != src:
                assert _got(r, o, i, False) == set()


def _same_values(got: Any, want: Any) -> None:
    got_t = got if isinstance(got, tuple) else (got,)
    want_t = want if isinstance(want, tuple) else (want,)
    assert len(got_t) == len(want_t)
    for g, w in zip(got_t, want_t, strict=True):
        assert type(g) is type(w), (type(g), type(w))
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)


# ---- the slow reference: one set per output cell, from NumPy's integer result -----------------
def _ref_nonzero_like(x: np.ndarray, out_cells: list[tuple[Cell, Cell]]) -> tuple[Pairs, Pairs]:
    every = set(_cells(x.shape))
    contrib = {(o, c) for o, c in out_cells}
    considered = {(o, c) for o, _ in out_cells for c in every}
    return contrib, considered


def ref_argwhere(x: np.ndarray, res: np.ndarray) -> list[tuple[Pairs, Pairs]]:
    if x.ndim == 0:
        pairs = [((k, j), ()) for k in range(res.shape[0]) for j in range(res.shape[1])]
        return [_ref_nonzero_like(x, [(o, c) for o, c in pairs])]
    pairs = [
        ((k, j), tuple(int(v) for v in res[k])) for k in range(len(res)) for j in range(x.ndim)
    ]
    return [_ref_nonzero_like(x, pairs)]


def ref_nonzero(x: np.ndarray, res: tuple[np.ndarray, ...]) -> list[tuple[Pairs, Pairs]]:
    coords = list(zip(*[r.tolist() for r in res], strict=True))
    return [
        _ref_nonzero_like(x, [((k,), tuple(int(v) for v in coords[k])) for k in range(len(coords))])
        for _ in res
    ]


def ref_flatnonzero(x: np.ndarray, res: np.ndarray) -> list[tuple[Pairs, Pairs]]:
    shape = x.shape
    cells = [((k,), tuple(int(v) for v in np.unravel_index(f, shape))) for k, f in enumerate(res)]
    return [_ref_nonzero_like(x, cells)]


def _lane(shape: tuple[int, ...], at: Cell, axis: int) -> list[Cell]:
    return [(*at[:axis], j, *at[axis + 1 :]) for j in range(shape[axis])]


def ref_arg_pick(x: np.ndarray, res: Any, axis: int | None) -> list[tuple[Pairs, Pairs]]:
    res = np.asarray(res)
    if axis is None:
        cell = tuple(int(v) for v in np.unravel_index(int(res), x.shape))
        return [({((), cell)}, {((), c) for c in _cells(x.shape)})]
    contrib: Pairs = set()
    considered: Pairs = set()
    for o in _cells(res.shape):
        at = (*o[:axis], int(res[o]), *o[axis:])
        contrib.add((o, at))
        considered |= {(o, c) for c in _lane(x.shape, at, axis)}
    return [(contrib, considered)]


def ref_arrange(x: np.ndarray, res: np.ndarray, axis: int | None) -> list[tuple[Pairs, Pairs]]:
    if axis is None:
        every = _cells(x.shape)
        contrib = {
            ((k,), tuple(int(v) for v in np.unravel_index(f, x.shape))) for k, f in enumerate(res)
        }
        return [(contrib, {((k,), c) for k in range(len(res)) for c in every})]
    contrib = set()
    considered = set()
    for o in _cells(res.shape):
        at = (*o[:axis], int(res[o]), *o[axis + 1 :])
        contrib.add((o, at))
        considered |= {(o, c) for c in _lane(x.shape, at, axis)}
    return [(contrib, considered)]


# ---- the grid ---------------------------------------------------------------------------------
Case = tuple[str, Callable[[Any], Any], Callable[[np.ndarray, Any], list[tuple[Pairs, Pairs]]]]


def _cases(ndim: int) -> list[Case]:
    cases: list[Case] = [
        ("argwhere", np.argwhere, ref_argwhere),
        # the thesis' `where(X > 0.5)`: positions of a comparison's mask name the compared cells
        ("argwhere-mask", lambda a: np.argwhere(a > 0), ref_argwhere),
        ("nonzero-mask", lambda a: np.nonzero(a <= 0), ref_nonzero),
        ("where1-mask", lambda a: np.where(a != 1), ref_nonzero),
        ("where1", lambda a: np.where(a), ref_nonzero),
        ("nonzero", np.nonzero, ref_nonzero),
        ("flatnonzero", np.flatnonzero, ref_flatnonzero),
        ("argmax", np.argmax, lambda x, r: ref_arg_pick(x, r, None)),
        ("argmin", lambda a: a.argmin(), lambda x, r: ref_arg_pick(x, r, None)),
        (
            "argsort-flat",
            lambda a: np.argsort(a, axis=None, kind="stable"),
            lambda x, r: ref_arrange(x, r, None),
        ),
    ]
    for ax in range(ndim):
        cases += [
            (
                f"argmax-{ax}",
                lambda a, ax=ax: np.argmax(a, axis=ax),
                lambda x, r, ax=ax: ref_arg_pick(x, r, ax),
            ),
            (
                f"argmin-{ax}",
                lambda a, ax=ax: a.argmin(axis=ax),
                lambda x, r, ax=ax: ref_arg_pick(x, r, ax),
            ),
            (
                f"argsort-{ax}",
                lambda a, ax=ax: np.argsort(a, axis=ax, kind="stable"),
                lambda x, r, ax=ax: ref_arrange(x, r, ax),
            ),
            (
                f"argsort-quick-{ax}",
                lambda a, ax=ax: a.argsort(axis=ax),
                lambda x, r, ax=ax: ref_arrange(x, r, ax),
            ),
        ]
    return cases


GRID = [
    pytest.param(
        shape, dtype, name, func, ref, mode, id=f"{name}-{shape}-{np.dtype(dtype).name}-{mode}"
    )
    for shape in SHAPES
    for dtype in DTYPES
    for name, func, ref in _cases(len(shape))
    for mode in MODES
]


@pytest.mark.parametrize(("shape", "dtype", "name", "func", "ref", "mode"), GRID)
def test_positions_match_the_reference(
    shape: tuple[int, ...], dtype: Any, name: str, func: Any, ref: Any, mode: str
) -> None:
    x = _data(shape, dtype, seed=len(shape) * 7 + len(name))
    # A capture computes on float64 values (CaptureResult.value: "as func would have returned
    # it on float64 inputs"); an unstable argsort orders ties by the dtype it sorts.
    x64 = x.astype(np.float64)
    try:
        want = func(x64)
    except (ValueError, TypeError) as e:  # NumPy refuses (nonzero of 0-d, argmax of empty)
        with pytest.raises(type(e)):
            Capture(mode=mode).run(func, x)  # type: ignore[arg-type]
        return
    if name.endswith("-mask") and shape == ():
        # a comparison of 0-d arrays is NumPy's bool singleton (np.True_), which can carry no
        # link: its positions have no lineage, and returning them says so
        with pytest.raises(LineageLostError, match="returned a `int64` array"):
            Capture(mode=mode).run(func, x)  # type: ignore[arg-type]
        return
    r = Capture(mode=mode).run(func, x)  # type: ignore[arg-type]
    assert not r.flagged
    _same_values(r.value, want)
    _check(r, ref(x64, want), mode)
    if dtype == np.float64 or not name.startswith("argsort-quick"):
        _same_values(r.value, func(x))  # the input's own dtype gives the same positions


# ---- indexing with positions and with tracked indices -------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(6,), (3, 4), (2, 3, 4)])
def test_take_along_an_argsort_is_the_sorted_cell_plus_the_lane(
    shape: tuple[int, ...], mode: str
) -> None:
    x = _data(shape, np.float64, seed=3)

    def f(a: Any) -> Any:
        return np.take_along_axis(a, np.argsort(a, axis=-1, kind="stable"), axis=-1)

    r = Capture(mode=mode).run(f, x)
    want = f(x)
    _same_values(r.value, want)
    order = np.argsort(x, axis=-1, kind="stable")
    ax = x.ndim - 1
    contrib, considered = set(), set()
    for o in _cells(x.shape):
        at = (*o[:ax], int(order[o]))
        contrib.add((o, at))
        considered |= {(o, c) for c in _lane(x.shape, at, ax)}
    _check(r, [(contrib, considered)], mode)


@pytest.mark.parametrize("mode", MODES)
def test_indexing_with_argwhere_rows_and_cols(mode: str) -> None:
    x = _data((4, 5), np.float64, seed=5)

    def f(a: Any) -> Any:
        hot = np.argwhere(a)
        return a[hot[:, 0], hot[:, 1]] * 2.0

    r = Capture(mode=mode).run(f, x)
    _same_values(r.value, x[x != 0] * 2.0)
    nz = [tuple(int(v) for v in c) for c in np.argwhere(x)]
    every = set(_cells(x.shape))
    _check(
        r,
        [
            (
                {((k,), c) for k, c in enumerate(nz)},
                {((k,), c) for k in range(len(nz)) for c in every},
            )
        ],
        mode,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["getitem", "take", "np.take", "rows-cols"])
def test_a_tracked_index_is_considered(mode: str, how: str) -> None:
    """An index that is itself a captured input (integral float64 values: a position carried
    through an asset) picks exactly as NumPy's integer index; the indexed cells contribute, the
    index cells are considered."""
    x = np.arange(12.0).reshape(3, 4) * 1.5
    idx = np.array([[2.0, 0.0], [1.0, 2.0]])
    ints = idx.astype(np.intp)
    funcs: dict[str, tuple[Callable[..., Any], Any]] = {
        "getitem": (lambda a, i: a[i], x[ints]),
        "take": (lambda a, i: a.take(i, axis=1), x.take(ints, axis=1)),
        "np.take": (lambda a, i: np.take(a, i), np.take(x, ints)),
        "rows-cols": (lambda a, i: a[i[:, 0], i[:, 1]], x[ints[:, 0], ints[:, 1]]),
    }
    func, want = funcs[how]
    r = Capture(mode=mode).run(func, x, idx)
    _same_values(r.value, want)
    out = np.asarray(want)
    contrib, considered = set(), set()
    for o in _cells(out.shape):
        if how == "getitem":
            at, used = (int(ints[o[0], o[1]]), o[2]), [(o[0], o[1])]
        elif how == "take":
            at, used = (o[0], int(ints[o[1], o[2]])), [(o[1], o[2])]
        elif how == "np.take":
            f = int(ints[o])
            at, used = (f // 4, f % 4), [o]
        else:
            at, used = (int(ints[o[0], 0]), int(ints[o[0], 1])), [(o[0], 0), (o[0], 1)]
        contrib.add((o, at))
        considered |= {(o, u) for u in used}
    assert _got(r, 0, 0, False) == contrib
    assert _got(r, 0, 1, False) == set()
    if mode == "considered":
        assert _got(r, 0, 0, True) == contrib
        assert _got(r, 0, 1, True) == considered


@pytest.mark.parametrize("mode", MODES)
def test_searchsorted_names_the_bounding_cells_and_the_needle(mode: str) -> None:
    a = np.array([0.0, 1.0, 1.0, 3.0, 7.0])
    v = np.array([-1.0, 1.0, 2.0, 9.0])
    r = Capture(mode=mode).run(lambda s, n: np.searchsorted(s, n), a, v)
    want = np.searchsorted(a, v)
    _same_values(r.value, want)
    n = len(a)
    contrib = {((j,), (c,)) for j, i in enumerate(want) for c in {max(i - 1, 0), min(i, n - 1)}}
    assert _got(r, 0, 0, False) == contrib
    assert _got(r, 0, 1, False) == {((j,), (j,)) for j in range(len(v))}
    if mode == "considered":
        assert _got(r, 0, 0, True) == {((j,), (c,)) for j in range(len(v)) for c in range(n)}


@pytest.mark.parametrize("mode", MODES)
def test_unravel_index_and_arithmetic_keep_the_named_cell(mode: str) -> None:
    x = _data((3, 4), np.float64, seed=9)

    def f(a: Any) -> Any:
        r, c = np.unravel_index(np.argmax(a), a.shape)
        return r, c + 1, np.stack([r, c])

    r = Capture(mode=mode).run(f, x)
    want = f(x)
    _same_values(r.value, want)
    cell = tuple(int(v) for v in np.unravel_index(np.argmax(x), x.shape))
    every = {(c,) for c in []} | set(_cells(x.shape))
    _check(
        r,
        [({((), cell)}, {((), c) for c in every})] * 2
        + [({((k,), cell) for k in range(2)}, {((k,), c) for k in range(2) for c in every})],
        mode,
    )


def test_an_unmirrored_derivation_is_refused_not_guessed() -> None:
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(LineageLostError, match=r"unknown lineage|cannot be followed"):
        Capture().run(lambda a: np.argwhere(a).view(np.ndarray).view(type(np.argwhere(a)))[0], x)


@pytest.mark.parametrize("mode", MODES)
def test_a_position_as_a_python_int_is_control(mode: str) -> None:
    """A slice bound taken from a position is control (as ``if a.max() > 0`` is): the crop's
    cells contribute, the position is not recorded."""
    x = np.arange(12.0).reshape(3, 4)

    def crop(a: Any) -> Any:
        r, c = np.argwhere(a)[4]
        stop = np.argwhere(a)[5]
        stop += 1  # in place, as NumPy's trim_zeros does
        return a[r : stop[0], c : c + 2]

    got = Capture(mode=mode).run(crop, x)
    _same_values(got.value, crop(x))
    want = {((i, j), (1 + i, 1 + j)) for i in range(1) for j in range(2)}
    assert _got(got, 0, 0, False) == want
    if mode == "considered":
        assert _got(got, 0, 0, True) == want


@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
        elements=st.sampled_from([0.0, -0.0, 1.0, 2.0, -3.5]),
    ),
    mode=st.sampled_from(MODES),
)
def test_argwhere_and_argsort_match_the_reference_on_any_array(x: np.ndarray, mode: str) -> None:
    r = Capture(mode=mode).run(np.argwhere, x)
    _same_values(r.value, np.argwhere(x))
    _check(r, ref_argwhere(x, np.argwhere(x)), mode)
    order = Capture(mode=mode).run(lambda a: np.argsort(a, axis=-1, kind="stable"), x)
    want = np.argsort(x, axis=-1, kind="stable")
    _same_values(order.value, want)
    _check(order, ref_arrange(x, want, x.ndim - 1), mode)


def test_grid_covers_every_position_function() -> None:
    names = {n.split("-")[0] for s in SHAPES for n, _, _ in _cases(len(s))}
    assert names >= {"argwhere", "where1", "nonzero", "flatnonzero", "argmax", "argmin", "argsort"}
    assert list(itertools.product(SHAPES, DTYPES))  # 7 shapes x 4 dtypes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (0, 3)])
def test_a_mask_index_is_its_true_cells_positions(shape: tuple[int, ...], mode: str) -> None:
    """``x[x > t]`` is ``x[(x > t).nonzero()]``: each kept cell contributes, every tested cell
    is considered; with a tracked threshold the threshold cell is considered too."""
    x = _data(shape, np.float64, seed=11)
    t = np.array(0.0)
    r = Capture(mode=mode).run(lambda a, b: a[a > b] + 1.0, x, t)
    _same_values(r.value, x[x > 0.0] + 1.0)
    kept = [tuple(int(v) for v in c) for c in np.argwhere(x > 0.0)]
    every = set(_cells(x.shape))
    contrib = {((k,), c) for k, c in enumerate(kept)}
    considered = {((k,), c) for k in range(len(kept)) for c in every}
    _check(r, [(contrib, considered)], mode, inputs=2)
    if mode == "considered":
        assert _got(r, 0, 1, True) == {((k,), ()) for k in range(len(kept))}


@pytest.mark.parametrize("mode", MODES)
def test_positions_that_went_through_a_float_asset_index_again(mode: str) -> None:
    """A Dagster asset of ``np.argwhere`` coordinates reaches the next step as float64;
    ``astype(np.intp)`` makes them positions again, each carrying its own cell."""
    x = np.arange(12.0).reshape(3, 4) * 1.5
    coords = np.array([[2.0, 1.0], [0.0, 3.0], [2.0, 1.0]])

    def crop(a: Any, c: Any) -> Any:
        ij = c.astype(np.intp)
        return a[ij[:, 0:1] + np.array([0]), ij[:, 1:2] + np.array([0, -1])]

    r = Capture(mode=mode).run(crop, x, coords)
    want = crop(x, coords)
    _same_values(r.value, want)
    ij = coords.astype(np.intp)
    contrib = {
        ((k, j), (int(ij[k, 0]), int(ij[k, 1]) - j)) for k in range(len(ij)) for j in range(2)
    }
    assert _got(r, 0, 0, False) == contrib
    assert _got(r, 0, 1, False) == set()
    if mode == "considered":
        assert _got(r, 0, 1, True) == {
            ((k, j), (k, c)) for k in range(3) for j in range(2) for c in range(2)
        }
    assert Capture().run(lambda c: c.astype(np.intp), coords).value.dtype == np.intp


def test_a_mask_changed_in_place_is_control_again() -> None:
    """NumPy writes ``m1 & m2`` into a large temporary ``m1`` (temporary elision), and
    ``m &= ...`` changes a mask in place: neither is the comparison's result any more, so
    their positions carry no lineage (returning them says so)."""
    x = np.random.default_rng(1).random((400, 400))  # large enough for NumPy's elision
    with pytest.raises(LineageLostError):
        Capture().run(lambda a: np.argwhere((a > 0.5) & (a < 0.9)), x)

    def in_place(a: Any) -> Any:
        m = a > 0.5
        m &= a < 0.9
        return np.argwhere(m)

    with pytest.raises(LineageLostError):
        Capture().run(in_place, x)
