"""Whole-array statistics broadcast against their own cells: exact, and O(1) per output cell.

``x - x.mean()``, ``x - x.mean(0)`` and ``(x - x.mean(0)) / x.std(0)`` give every output cell
the union of its own cell and a statistic whose set is a progression holding that cell. The
annotator keeps the statistic's handle for such a cell (``Arena::covers``, the element-wise
loop's ``StatCache``), treats two progressions of the same cells (the column's mean and std)
as one, a matmul row made of every column statistic in order is one progression, and the
extraction reads a repeated or already analysed shared set once. A picking
reduction in contributing mode looks for its winner first and shares one handle.

The reference annotator (``tests/annotator/reference.py``) is the oracle for the lineage, in
both modes, over shapes with non-contiguous views, negative strides, broadcasting from
either side, 1-element and 0-size arrays; values equal plain NumPy. A forged handle at a
losing position of a picking reduction still raises.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslog_dagster import _annotator
from dslog_dagster.core.capture import Capture
from dslog_dagster.errors import ForgedLineageError
from tests.annotator.reference import MODES, Mode
from tests.annotator.test_capture_property import CI, check, values
from tests.annotator.test_forged_handles import K_PROG, forge, handles, make_handle

# Steps whose output cells hold {own cell} ∪ a statistic of a progression holding it.
STATS: dict[str, Callable[[Any], Any]] = {
    "x - mean": lambda a: a - a.mean(),
    "mean - x": lambda a: np.subtract(a.mean(), a),
    "x - mean0": lambda a: a - a.mean(axis=0),
    "mean0 / x": lambda a: a.mean(axis=0) / (a + 3.0),
    "x - mean1": lambda a: a - a.mean(axis=-1, keepdims=True),
    "standardize": lambda a: (a - a.mean(axis=0)) / (a.std(axis=0) + 1.0),
    "std0 * mean0": lambda a: a.std(axis=0) * a.mean(axis=0) + a,
    "centred twice": lambda a: (a - a.mean()) - a.mean(),
    "sum * x": lambda a: np.multiply(a.sum(), a),
    # a matmul row of every column statistic in order: one progression per row
    "pca": lambda a: (a - a.mean(axis=0)) @ np.linspace(0.5, 1.5, 2 * a.shape[-1]).reshape(-1, 2),
}

# How the input reaches the step: as given, a strided view, reversed, transposed.
VIEWS: dict[str, Callable[[Any], Any]] = {
    "plain": lambda a: a,
    "strided": lambda a: a[::2],
    "reversed": lambda a: a[::-1, ::-1] if a.ndim == 2 else a[::-1],
    "transposed": lambda a: a.T,
}


@CI
@given(
    data=st.data(),
    mode=st.sampled_from(MODES),
    step=st.sampled_from(sorted(STATS)),
    view=st.sampled_from(sorted(VIEWS)),
)
def test_statistics_of_views_equal_the_reference(
    data: Any, mode: Mode, step: str, view: str
) -> None:
    shape = data.draw(st.tuples(st.integers(1, 7), st.integers(1, 7)))
    x = values(data.draw, shape, nans=False)

    def f(a: Any) -> Any:
        return STATS[step](VIEWS[view](a))

    check(f, [x], mode)


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_statistic_of_one_array_broadcast_into_another(data: Any, mode: Mode) -> None:
    """The statistic of x against the cells of y (a different input: never covered), and
    against x's own cells after a broadcast: both stay exact."""
    shape = data.draw(st.tuples(st.integers(1, 6), st.integers(1, 6)))
    x = values(data.draw, shape)
    y = values(data.draw, shape)
    check(lambda a, b: b - a.mean(axis=0), [x, y], mode)
    check(lambda a, b: (a - a.mean()) * b, [x, y], mode)
    check(lambda a, b: a.mean(axis=0) + b.mean(axis=0), [x, y], mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1), (9, 2)])
@pytest.mark.parametrize("step", sorted(STATS))
def test_one_element_and_thin_shapes(shape: tuple[int, ...], step: str, mode: Mode) -> None:
    """1-element arrays and single rows or columns (a reduction of one cell, a progression
    of one or two cells)."""
    x = np.random.default_rng(sum(shape)).uniform(-2.0, 2.0, size=shape)
    check(STATS[step], [x], mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0,)])
@pytest.mark.parametrize("step", sorted(STATS))
def test_zero_size_inputs(shape: tuple[int, ...], step: str, mode: Mode) -> None:
    """0-size inputs: values as NumPy's (NaN means included), and no pair at all."""
    x = np.zeros(shape)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing warns
        want = STATS[step](x)
        got = Capture(mode=mode).run(STATS[step], x)
    np.testing.assert_array_equal(got.value, want)
    for rels in (got.relations, got.considered):
        if rels is not None:
            assert all(r.n == 0 for r in rels.values())


PICKS: dict[str, Callable[[Any], Any]] = {
    "minmax": lambda a: (a - a.min()) / (a.max() - a.min() + 1.0),
    "max0 - x": lambda a: a.max(axis=0) - a,
    "nanmin1": lambda a: np.nanmin(a, axis=1),
    "ptp": lambda a: np.ptp(a),
    "amax strided": lambda a: np.amax(a[::-1, ::2]),
}


@CI
@given(data=st.data(), step=st.sampled_from(sorted(PICKS)))
def test_pick_reductions_contribute_as_in_considered_mode(data: Any, step: str) -> None:
    """Contributing mode scans a picking reduction's lane for its winner; considered mode
    still runs the element loop, whose contributing relation is the same by definition. Tie-
    and NaN-heavy values; both modes' values are NumPy's."""
    shape = data.draw(st.tuples(st.integers(1, 6), st.integers(1, 6)))
    x = values(data.draw, shape, nans=True)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN slice warns
        want = PICKS[step](x)
        fast = Capture().run(PICKS[step], x)
        slow = Capture(mode="considered").run(PICKS[step], x)
    np.testing.assert_array_equal(fast.value, want)
    np.testing.assert_array_equal(slow.value, want)
    assert dict(fast.relations) == dict(slow.relations)


@pytest.mark.parametrize("mode", MODES)
def test_large_statistic_broadcast_writes_every_cell(mode: Mode) -> None:
    """Big enough for the ufunc call that skips the zero-fill (a tracked scalar operand) and
    for long runs of one shared handle: every output cell relates to every input cell (the
    count of pairs, read from the table without expanding it, is the product of the sizes,
    so no pair is missing), and the values are NumPy's."""
    x = np.random.default_rng(5).uniform(-2.0, 2.0, size=(150, 130))
    got = Capture(mode=mode).run(lambda a: a - a.mean(), x)
    np.testing.assert_array_equal(got.value, x - x.mean())
    tables = [got.tables] + ([got.considered_tables] if mode == "considered" else [])
    for t in tables:
        assert t is not None
        assert t[(0, 0)].n_pairs == x.size * x.size
        assert t[(0, 0)].rows == 1


def test_column_statistics_keep_one_handle_per_column() -> None:
    """The point of the fast path: standardize's output holds one handle per column (the
    column's shared set), not a union node per cell."""

    def f(a: Any) -> Any:
        out = (a - a.mean(axis=0)) / a.std(axis=0)
        assert len(np.unique(handles(out))) == a.shape[1]
        centred = a - a.mean()
        assert len(np.unique(handles(centred))) == 1
        projected = (a - a.mean(axis=0)) @ np.ones((a.shape[1], 3))
        assert len(np.unique(handles(projected))) == 1  # every row: all of x, one progression
        return out

    Capture().run(f, np.random.default_rng(3).random((50, 40)))


@pytest.mark.parametrize("op", [np.max, np.min, np.amax, np.nanmax])
def test_forged_handle_losing_a_pick_reduction_raises(op: Callable[..., Any]) -> None:
    """Contributing mode only keeps the winner's set, but every handle of the lane is still
    validated: a forged one at a losing position raises."""

    def f(x: Any) -> Any:
        epoch = int(handles(x)[0]) >> _annotator.handle_layout["epoch_shift"]
        bad = forge([make_handle(epoch, K_PROG, 99_999, 255)], np.array([0.5]))
        lane = np.concatenate([x, bad])  # 0.5 loses to the max (values up to 10) and the min
        return op(lane)

    with pytest.raises(ForgedLineageError):
        Capture().run(f, np.concatenate([np.linspace(-10.0, 10.0, 64)]))
