"""Unions of a cell's own cells with one small set repeated from cell to cell: exact, and a
few rows.

Min-max scaling gives output cell c the set ``{c, argmin} ∪ {argmax, argmin}``: a lazy union
whose second side is the same handle for every cell. The extraction keeps that small set as
one sink (its output group times its cells) and feeds only the cell's own cells outside it
as runs, so the table is the diagonal plus a product, a few rows instead of two per output
row. Checked against the reference annotator (both modes, strided, reversed and transposed
inputs, thin shapes) and against the pair-by-pair extraction (the native table before the
store's re-compression of small relations: its own rows and pair count).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslog_dagster.core.testing.extraction import pairs_and_tables, same_pairs
from tests.annotator.reference import MODES, Mode
from tests.annotator.test_capture_property import CI, check, values
from tests.annotator.test_statistic_fast_paths import VIEWS

SHARED: dict[str, Callable[[Any], Any]] = {
    "min-max": lambda a: (a - a.min()) / (a.max() - a.min() + 1.0),
    "min-max0": lambda a: (a - a.min(axis=0)) / (a.max(axis=0) - a.min(axis=0) + 1.0),
    "min-max1": lambda a: (a - a.min(axis=1, keepdims=True)) * (a.max() + 2.0),
    "plus first": lambda a: (a + a.flat[0]) * (a.flat[-1] + a.flat[0]),
    "first and last": lambda a: a * a.flat[-1] + (a.flat[0] - a.flat[-1]),
    "minus argmax": lambda a: (a - a.max()) * (a.min() + a.flat[0] + 3.0),
    # a cell with a broadcast scalar's set ({c} ∪ S, one shared entry for the whole array),
    # then reduced, picked, sorted, accumulated, and with a scalar of a few cells as S
    "sum of shifted": lambda a: np.sum(a - a.min(), axis=0) * (a - a.max()).sum(),
    "max of shifted": lambda a: (a - a.min()).max(axis=0) + np.subtract(a.max(), a).min(),
    "sorted shifted": lambda a: np.sort(a - a.min(), axis=-1) / (a.max() + 1.0),
    "cumsum shifted": lambda a: np.cumsum(a - a.min(), axis=-1),
    "minus a block sum": lambda a: (a - a[:2, :2].sum()) * (a.flat[-1] + 1.0),
}


# Contributing mode against the reference annotator: in considered mode the annotator's
# considered set of a whole-array min/max (every cell) differs from the reference's for these
# steps whatever the extraction (the pair-by-pair test below, both modes, checks the
# extraction against the annotator's own sets). No ties either: `a.min()` inside a step runs
# NumPy's object loop on the reference's cells, which returns one operand, not every tied
# cell (the tie rule is checked by the grid's `*_ties` cases, where the reference's own pick
# functions run, and by the pair-by-pair test below, which draws ties).
@CI
@given(
    data=st.data(),
    step=st.sampled_from(sorted(SHARED)),
    view=st.sampled_from(sorted(VIEWS)),
)
def test_shared_side_unions_equal_the_reference(data: Any, step: str, view: str) -> None:
    equals_the_reference(SHARED[step], view, data)


def equals_the_reference(step: Callable[[Any], Any], view: str, data: Any) -> None:
    """``step`` through ``view`` of a drawn array (up to 7×7, no ties) against the reference
    annotator, contributing mode."""
    shape = data.draw(st.tuples(st.integers(1, 7), st.integers(1, 7)))
    x = values(data.draw, shape, ties=False)

    def f(a: Any) -> Any:
        return step(VIEWS[view](a))

    check(f, [x], "contributing")


def equals_the_pair_by_pair_extraction(
    step: Callable[[Any], Any], view: str, mode: Mode, data: Any
) -> None:
    """The native table of ``step`` through ``view`` of a drawn array (8..40 a side, ties
    drawn), before the store's re-compression of small relations, against the pair-by-pair
    extraction: the same pairs, counted the same."""
    shape = data.draw(st.tuples(st.integers(8, 40), st.integers(8, 40)))
    x = values(data.draw, shape, ties=data.draw(st.booleans()))

    def f(a: Any) -> Any:
        return step(VIEWS[view](a))

    for rel, _, native in pairs_and_tables(f, [x], mode).values():
        assert same_pairs(native.decompress(), rel)
        assert native.n_pairs == rel.n


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1), (2, 1)])
@pytest.mark.parametrize("step", sorted(SHARED))
def test_one_element_and_thin_shapes(shape: tuple[int, ...], step: str, mode: Mode) -> None:
    x = np.random.default_rng(sum(shape)).uniform(-2.0, 2.0, size=shape)
    for rel, _, native in pairs_and_tables(SHARED[step], [x], mode).values():
        assert same_pairs(native.decompress(), rel)
    if mode == "contributing":
        check(SHARED[step], [x], mode)


@CI
@given(
    data=st.data(),
    mode=st.sampled_from(MODES),
    step=st.sampled_from(sorted(SHARED)),
    view=st.sampled_from(sorted(VIEWS)),
)
def test_native_tables_equal_the_pair_by_pair_extraction(
    data: Any, mode: Mode, step: str, view: str
) -> None:
    equals_the_pair_by_pair_extraction(SHARED[step], view, mode, data)


def test_min_max_is_a_few_rows() -> None:
    x = np.random.default_rng(0).random((300, 400))
    (rel, stored, native), *_ = pairs_and_tables(SHARED["min-max"], [x]).values()
    assert rel.n == 300 * 400 * 3 - 2  # argmin's and argmax's own cells are in the set
    assert native.rows <= 16, native.rows  # the diagonal around 2 holes, 2 products
    assert stored.rows == native.rows
