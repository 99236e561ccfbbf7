"""Cell sets: every accepted cell specification, the canonical box form and the outputs."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.query import CellSet, as_cells, format_box, format_slices
from dslog_dagster.errors import DSLogError, QueryError


@st.composite
def box_sets(draw):  # type: ignore[no-untyped-def]
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))
    n = draw(st.integers(0, 12))
    lo, hi = [], []
    for _ in range(n):
        a = [draw(st.integers(0, s - 1)) for s in shape]
        lo.append(a)
        hi.append([draw(st.integers(x, s - 1)) for x, s in zip(a, shape, strict=True)])
    return shape, lo, hi


def _painted(shape, lo, hi):  # type: ignore[no-untyped-def]
    mask = np.zeros(shape, dtype=bool)
    for a, b in zip(lo, hi, strict=True):
        mask[tuple(slice(x, y + 1) for x, y in zip(a, b, strict=True))] = True
    return mask


@settings(max_examples=300, deadline=None)
@given(box_sets(), st.randoms(use_true_random=False))
def test_boxes_normalise_to_a_canonical_disjoint_cover(case, rnd) -> None:  # type: ignore[no-untyped-def]
    shape, lo, hi = case
    cells = CellSet.from_boxes(
        shape,
        np.asarray(lo, np.int64).reshape(-1, len(shape)),
        np.asarray(hi, np.int64).reshape(-1, len(shape)),
    )
    want = _painted(shape, lo, hi)
    assert np.array_equal(cells.to_mask(), want)
    assert cells.count() == int(want.sum())  # disjoint: volumes add up
    assert np.array_equal(cells.to_flat(), np.flatnonzero(want))
    order = list(range(len(lo)))
    rnd.shuffle(order)
    shuffled = CellSet.from_boxes(
        shape,
        np.asarray([lo[i] for i in order], np.int64).reshape(-1, len(shape)),
        np.asarray([hi[i] for i in order], np.int64).reshape(-1, len(shape)),
    )
    assert shuffled == cells
    assert CellSet.from_mask(want) == cells
    assert CellSet.from_indices(shape, np.argwhere(want)) == cells


def test_adjacent_boxes_merge() -> None:
    cells = CellSet.from_boxes((10, 10), [[0, 0], [5, 0], [0, 5]], [[4, 4], [9, 4], [4, 9]])
    assert cells.n_boxes == 2
    cells = cells | CellSet.from_boxes((10, 10), [[5, 5]], [[9, 9]])
    assert cells.n_boxes == 1
    assert cells == CellSet.full((10, 10))


@pytest.mark.parametrize(
    ("spec", "flat"),
    [
        (np.s_[1:3, 2], [6, 10]),
        (np.s_[-1, :], [12, 13, 14, 15]),
        ([np.s_[0, 0:2], np.s_[3, 3]], [0, 1, 15]),
        ([(0, 1), (2, 3), (0, 1)], [1, 11]),
        (np.array([[3, 0], [0, 0]]), [0, 12]),
        (np.array([5, 1, 5]), [1, 5]),
        ([7, 2], [2, 7]),
        (4, [4]),
        ((1, 1), [5]),
        (np.eye(4, dtype=bool), [0, 5, 10, 15]),
        (np.s_[2:2, :], []),
        ([], []),
    ],
)
def test_every_cell_form_is_understood(spec, flat) -> None:  # type: ignore[no-untyped-def]
    assert as_cells((4, 4), spec).to_flat().tolist() == flat


def test_zero_d_and_rank_one() -> None:
    assert as_cells((), np.ones((), bool)).count() == 1
    assert as_cells((), [()]).count() == 1
    assert as_cells((), CellSet.full(())).to_flat().tolist() == [0]
    assert as_cells((5,), np.s_[1:4]).to_flat().tolist() == [1, 2, 3]
    assert as_cells((5,), [(4,), (0,)]).to_flat().tolist() == [0, 4]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (np.s_[0:4:2, 0], "step"),
        (np.s_[9, 0], "outside"),
        ([(0, 4)], "outside"),
        ([(0, 1, 2)], "rank 2"),
        (np.array([16]), "outside"),
        (np.array([-1]), "outside"),
        (np.zeros((3, 3), bool), "shape"),
        (np.array([0.5]), "Cannot interpret"),
        ("cells", "Cannot interpret"),
        (np.s_[0, 0, 0], "rank 2"),
    ],
)
def test_bad_cells_raise_clear_errors(spec, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(QueryError, match=message) as info:
        as_cells((4, 4), spec)
    assert isinstance(info.value, DSLogError)


def test_outputs() -> None:
    cells = as_cells((3, 4), [np.s_[0, 1:3], np.s_[2, :]])
    table = cells.to_arrow()
    assert table.column_names == ["start_0", "stop_0", "start_1", "stop_1"]
    assert table.schema.metadata[b"dslog.shape"] == b"3,4"
    assert table.schema.metadata[b"dslog.bounds"] == b"half-open"
    assert sorted(zip(*[table[c].to_pylist() for c in table.column_names], strict=True)) == [
        (0, 1, 1, 3),
        (2, 3, 0, 4),
    ]
    assert CellSet.from_arrow(table) == cells
    assert str(cells) == "[0:1, 1:3], [2:3, 0:4]"
    assert cells.to_indices().tolist() == [[0, 1], [0, 2], [2, 0], [2, 1], [2, 2], [2, 3]]
    assert cells.count() == 6
    a = np.arange(12).reshape(3, 4)
    assert sorted(int(x) for s in cells.to_slices() for x in a[s].ravel()) == [1, 2, 8, 9, 10, 11]
    assert "cells=6" in repr(cells)
    with pytest.raises(QueryError, match="shapes"):
        cells | CellSet.full((4, 3))


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(1, 12), min_size=1, max_size=3).map(tuple),
    n=st.integers(64, 300),
    seed=st.integers(0, 2**32 - 1),
    big=st.booleans(),
)
def test_dense_and_sorted_normalisation_agree(shape, n, seed, big) -> None:  # type: ignore[no-untyped-def]
    """Many boxes take the bitmap path; it must give exactly the sort-based canonical form."""
    from dslog_dagster import _native

    rng = np.random.default_rng(seed)
    d = len(shape)
    ext = np.asarray(shape)
    lo = rng.integers(0, ext, size=(n, d))
    width = rng.integers(0, np.maximum(ext // (2 if big else 6), 1) + 1, size=(n, d))
    hi = np.minimum(lo + width, ext - 1)
    a = _native.normalize_boxes(lo.astype(np.int64), hi.astype(np.int64), True)
    b = _native.normalize_boxes(lo.astype(np.int64), hi.astype(np.int64), False)
    assert np.array_equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])
    assert np.array_equal(CellSet(shape, *a).to_mask(), _painted(shape, lo, hi))


@given(box_sets())
def test_half_open_forms_round_trip_and_select_the_same_cells(case) -> None:  # type: ignore[no-untyped-def]
    """start/stop, from_ranges, to_arrow/from_arrow, to_pandas, to_slices and str() all use
    Python's half-open convention and describe exactly the set's cells."""
    shape, lo, hi = case
    cells = CellSet.from_boxes(shape, lo, hi) if lo else CellSet.empty(shape)
    assert CellSet.from_ranges(shape, cells.start, cells.stop) == cells
    assert CellSet.from_arrow(cells.to_arrow()) == cells
    frame = cells.to_pandas()
    assert list(frame.columns) == [
        c for i in range(len(shape)) for c in (f"start_{i}", f"stop_{i}")
    ]
    mask = np.zeros(shape, dtype=bool)
    for row, key in zip(frame.itertuples(index=False), cells.to_slices(), strict=True):
        bounds = tuple(slice(row[2 * i], row[2 * i + 1]) for i in range(len(shape)))
        assert bounds == key
        mask[bounds] = True
    assert np.array_equal(mask, cells.to_mask())
    if cells.n_boxes == 1:
        assert str(cells) == format_slices(cells.to_slices()[0])
    elif cells.n_boxes == 0:
        assert str(cells) == "no cells"


def test_half_open_helpers_and_bad_tables() -> None:
    assert format_box([0, 5], [128, 6]) == "0:128, 5:6"
    assert format_slices((slice(0, 128), slice(0, 128))) == "0:128, 0:128"
    assert str(CellSet.full((128, 128))) == "0:128, 0:128"
    assert CellSet.from_ranges((4, 4), [[1, 1]], [[1, 3]]).is_empty()  # stop <= start: empty
    with pytest.raises(QueryError, match="outside the array"):
        CellSet.from_ranges((4, 4), [[0, 0]], [[5, 1]])
    with pytest.raises(QueryError, match=r"dslog\.shape"):
        CellSet.from_arrow(pa.table({"start_0": [0], "stop_0": [1]}))
    old = pa.table({"lo_0": [0], "hi_0": [1]}).replace_schema_metadata({b"dslog.shape": b"4"})
    with pytest.raises(QueryError, match="half-open"):
        CellSet.from_arrow(old)
    zero_d = CellSet.full(())
    assert CellSet.from_arrow(zero_d.to_arrow()) == zero_d
    assert CellSet.from_arrow(CellSet.empty(()).to_arrow()) == CellSet.empty(())
