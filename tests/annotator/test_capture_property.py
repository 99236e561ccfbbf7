"""Random shapes, arguments and tie-heavy values: the native capture equals the reference.

The grid fixes shapes and draws continuous values; this module lets hypothesis choose ranks
1–3, extents 1–4, axes, broadcasting partners and values from a tiny set (so equal values,
the case where picking rules matter, are common), plus NaNs. Deterministic for CI
(derandomised, no example database).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.capture import Capture
from tests.annotator.reference import MODES, REFERENCE, Mode, reference_capture, to_relations

CI = settings(max_examples=40, deadline=None, derandomize=True, database=None)

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def values(draw: Any, shape: tuple[int, ...], *, ties: bool = True, nans: bool = False) -> Any:
    """Values from {-1, 0, 0.5, 1, 2} (ties everywhere) or continuous, optionally with NaN."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if ties and draw(st.booleans()):
        x = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0], size=shape)
    else:
        x = rng.uniform(-2.0, 2.0, size=shape)
    if nans and draw(st.booleans()):
        x[rng.random(shape) < 0.3] = np.nan
    return x


def check(func: Callable[..., Any], arrays: list[Any], mode: Mode, **kw: Any) -> None:
    """Capture equals plain NumPy (values) and the reference (lineage, both sets)."""
    with np.errstate(all="ignore"):
        want = func(*arrays, **kw)
        got = Capture(mode=mode).run(func, *arrays, **kw)
    wants = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got.outputs, wants, strict=True):
        np.testing.assert_array_equal(g, np.asarray(w, dtype=np.float64))
    shapes_ = [np.shape(a) for a in arrays]
    ref = REFERENCE.get(func, func)
    for which, rels in (("contributing", got.relations), ("considered", got.considered)):
        if rels is None:
            continue
        v, lineage = reference_capture(ref, *arrays, mode=which, **kw)  # type: ignore[arg-type]
        want_rels = to_relations(v, lineage, shapes_)
        assert set(rels) == set(want_rels)
        for key, rel in want_rels.items():
            assert rels[key] == rel, (func, which, key, kw)


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_elementwise_and_broadcasting(data: Any, mode: Mode) -> None:
    out = data.draw(shapes)
    a = tuple(d if data.draw(st.booleans()) else 1 for d in out)
    b = tuple(d if data.draw(st.booleans()) else 1 for d in out)[data.draw(st.integers(0, 2)) :]
    b = b or (1,)
    x = values(data.draw, a, nans=True)
    y = values(data.draw, b, nans=True)
    unary = data.draw(st.sampled_from([np.negative, np.exp, np.sin, np.floor, np.sign]))
    check(unary, [x], mode)
    binary = data.draw(
        st.sampled_from([np.add, np.multiply, np.maximum, np.minimum, np.fmax, np.fmin])
    )
    check(binary, [x, y], mode)


@st.composite
def axis_for(draw: Any, rank: int, *, many: bool = True) -> Any:
    axes = draw(st.sets(st.integers(0, rank - 1)))
    if not axes or len(axes) == rank:
        return None
    if len(axes) == 1 or not many:
        return min(axes)
    return tuple(sorted(axes))


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_reductions_with_ties_and_nans(data: Any, mode: Mode) -> None:
    shape = data.draw(shapes)
    axis = data.draw(axis_for(len(shape)))
    keepdims = data.draw(st.booleans())
    fn = data.draw(st.sampled_from([np.sum, np.prod, np.mean, np.amax, np.amin, np.ptp]))
    x = values(data.draw, shape, nans=fn in (np.amax, np.amin))
    check(fn, [x], mode, axis=axis, keepdims=keepdims)


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_scans_sorts_and_unique_with_ties(data: Any, mode: Mode) -> None:
    shape = data.draw(shapes)
    x = values(data.draw, shape)
    axis = data.draw(st.none() | st.integers(0, len(shape) - 1))
    check(data.draw(st.sampled_from([np.cumsum, np.cumprod])), [x], mode, axis=axis)
    check(np.sort, [x], mode, axis=axis)
    check(np.unique, [x], mode)


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_order_statistics_with_ties_and_nans(data: Any, mode: Mode) -> None:
    """median/quantile in both modes, ties and NaNs included: the partition follows NumPy's
    float64 arrangement, so which of equal cells is picked is NumPy's choice, and the
    considered set is the partitioned lane."""
    shape = data.draw(shapes)
    x = values(data.draw, shape, nans=True)
    axis = data.draw(axis_for(len(shape)))
    check(np.median, [x], mode, axis=axis)
    q = data.draw(st.floats(0.0, 1.0) | st.lists(st.floats(0.0, 1.0), min_size=1, max_size=3))
    check(np.quantile, [x], mode, q=q, axis=axis)


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_clip_with_array_bounds_and_ties(data: Any, mode: Mode) -> None:
    shape = data.draw(shapes)
    x = values(data.draw, shape)
    lo = np.minimum(values(data.draw, shape), 0.5)
    hi = np.maximum(values(data.draw, shape), 0.5)
    check(np.clip, [x, lo, hi], mode)


@CI
@given(data=st.data())
def test_movement_with_random_arguments(data: Any) -> None:
    shape = data.draw(shapes)
    rank = len(shape)
    x = values(data.draw, shape)
    perm = tuple(data.draw(st.permutations(range(rank))))
    check(np.transpose, [x], "contributing", axes=perm)
    check(np.flip, [x], "contributing", axis=data.draw(axis_for(rank)))
    reps = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    check(np.tile, [x], "contributing", reps=reps)
    check(
        np.repeat,
        [x],
        "contributing",
        repeats=data.draw(st.integers(0, 3)),
        axis=data.draw(st.none() | st.integers(0, rank - 1)),
    )
    if rank >= 2:
        p, q = data.draw(st.permutations(range(rank)))[:2]
        check(np.rot90, [x], "contributing", k=data.draw(st.integers(-3, 4)), axes=(p, q))
