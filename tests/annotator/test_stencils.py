"""Stencils: sums of shifted slices name their cells by offsets from the first.

A 3×3 blur adds nine shifted slices of an edge-padded array. Each output cell's set is its
neighbourhood: the annotator keeps it as the first cell plus an entry of offsets shared by
every cell with the same neighbourhood shape (one for the interior, a few at the edges), never
a lazy union node per addition, and the extraction continues one diagonal run per offset.
Checked here against the reference annotator (contributing mode, no ties: see
test_shared_side) and against the pair-by-pair extraction (both modes, ties drawn), through
strided, reversed and transposed views, thin shapes, neighbourhoods too big for one entry
(more than 17 cells), and what follows a stencil: a broadcast statistic over it, reductions,
picks and sorts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslog_dagster import _annotator
from dslog_dagster.core.testing.extraction import pairs_and_tables, same_pairs
from tests.annotator.reference import MODES, Mode
from tests.annotator.test_capture_property import CI, check
from tests.annotator.test_shared_side import (
    equals_the_pair_by_pair_extraction,
    equals_the_reference,
)
from tests.annotator.test_statistic_fast_paths import VIEWS

KIND_SHIFT = _annotator.handle_layout["kind_shift"]
K_CELLSET = 7


def box(a: Any, k: int = 3) -> Any:
    """k×k box sum of an edge-padded array (the example project's blur, unscaled)."""
    h, w = a.shape
    r = k // 2
    p = np.pad(a, r, mode="edge")
    total = p[0:h, 0:w]
    for dy in range(k):
        for dx in range(k):
            if dy or dx:
                total = total + p[dy : dy + h, dx : dx + w]
    return total


def laplace(a: Any) -> Any:
    """Five-point Laplacian of the interior (no padding: a smaller output)."""
    return a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4.0 * a[1:-1, 1:-1]


STENCILS: dict[str, Callable[[Any], Any]] = {
    "blur 3x3": lambda a: box(a) / 9.0,
    "blur 5x5 (25 cells: too many for one entry)": lambda a: box(a, 5),
    "laplace": laplace,
    "rows shifted": lambda a: a[:, :-1] * a[:, 1:] + a[:, :-1],
    "blur minus its mean": lambda a: box(a) - box(a).mean(),
    "blur, hotspot": lambda a: np.where(box(a) > box(a).mean(), box(a), 0.0),
    "blur minus the minimum": lambda a: (box(a) - a.min()) / (a.max() + 3.0),
    "blur column sums": lambda a: box(a).sum(axis=0),
    "blur row sums": lambda a: box(a).sum(axis=1) + box(a)[1:].sum(),
    "blur maxima": lambda a: box(a).max(axis=1) + box(a).min(),
    "blur sorted": lambda a: np.sort(box(a), axis=-1),
    "blur of a blur": lambda a: box(box(a)),
}


@CI
@given(
    data=st.data(),
    step=st.sampled_from(sorted(STENCILS)),
    view=st.sampled_from(sorted(VIEWS)),
)
def test_stencils_equal_the_reference(data: Any, step: str, view: str) -> None:
    # the Laplacian keeps an interior only: padded, so that thin views have one too
    func = (lambda a: laplace(np.pad(a, 1))) if step == "laplace" else STENCILS[step]
    equals_the_reference(func, view, data)


@CI
@given(
    data=st.data(),
    mode=st.sampled_from(MODES),
    step=st.sampled_from(sorted(STENCILS)),
    view=st.sampled_from(sorted(VIEWS)),
)
def test_native_tables_equal_the_pair_by_pair_extraction(
    data: Any, mode: Mode, step: str, view: str
) -> None:
    equals_the_pair_by_pair_extraction(STENCILS[step], view, mode, data)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1), (2, 2), (3, 3)])
@pytest.mark.parametrize("step", sorted(set(STENCILS) - {"laplace"}))
def test_thin_shapes(shape: tuple[int, ...], step: str, mode: Mode) -> None:
    x = np.random.default_rng(sum(shape)).uniform(-2.0, 2.0, size=shape)
    for rel, _, native in pairs_and_tables(STENCILS[step], [x], mode).values():
        assert same_pairs(native.decompress(), rel)
    if mode == "contributing":
        check(STENCILS[step], [x], mode)


def test_a_blur_is_offsets_not_unions_and_a_few_rows() -> None:
    """The interior of a blur is one entry (kind 7) and the table a few rows: nine diagonals
    cut at the edges, whatever the size."""
    x = np.random.default_rng(0).random((60, 80))
    epoch = _annotator.begin(0)
    try:
        a = _annotator.annotate(x)[0]
        s = box(a)
        h = np.ascontiguousarray(s).view(np.uint64).reshape(-1, 2)[:, 1]
        kinds = (h >> np.uint64(KIND_SHIFT)) & np.uint64(7)
        assert (kinds == K_CELLSET).all()
        assert _annotator.stats()["joins"] == 0
    finally:
        _annotator.end(epoch)
    (rel, stored, native), *_ = pairs_and_tables(box, [x]).values()
    # edge padding repeats the border: 2 distinct rows (columns) at a border, else 3
    assert rel.n == (2 * 2 + 58 * 3) * (2 * 2 + 78 * 3)
    assert native.rows <= 40, native.rows
    assert same_pairs(stored.decompress(), rel)


@pytest.mark.parametrize("rows", [600, 4200])
def test_many_broadcast_sets_use_the_wide_table_then_unions(rows: int) -> None:
    """A row's maximum broadcast over its row (NumPy hands it over through a buffer, not with
    stride 0): a cell further from it than the 256 distances the two-cell table holds is its
    own cell plus the maximum as a shared set, one table entry per row (4096 entries), never a
    lazy union; past the table's end rows fall back to unions. Both give the pairs of the
    pair-by-pair extraction."""
    cols = 520

    def f(a: Any) -> Any:
        return np.exp(a - a.max(axis=1, keepdims=True))

    x = np.random.default_rng(rows).random((rows, cols))
    epoch = _annotator.begin(0)
    try:
        h = np.ascontiguousarray(f(_annotator.annotate(x)[0])).view(np.uint64)[:, 1::2]
        kinds = (h >> np.uint64(KIND_SHIFT)) & np.uint64(7)
        rows_with = int((kinds == K_CELLSET).any(axis=1).sum())
        joins = _annotator.stats()["joins"]
    finally:
        _annotator.end(epoch)
    if rows <= 4096:  # at most a row's first cell, where the buffer has not repeated yet
        assert joins <= rows
        assert rows_with >= 0.9 * rows
    else:  # every row needs an entry: the table's 4096, then unions
        assert rows_with == 4096
        assert joins > rows
    for rel, _, native in pairs_and_tables(f, [x]).values():
        assert same_pairs(native.decompress(), rel)
        assert native.n_pairs == rel.n
