"""Pairs ordered by output row, handed over as one matrix: sorted in place, compressed to the
table :func:`compress` gives the same pairs, and kept without a copy when the columnar
encoding wins (the id tap's spelled-out groups at 10^8 rows)."""

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.compression import compress, compress_grouped
from dslog_dagster.core.native import kernels
from dslog_dagster.errors import InvalidRelationError


@st.composite
def grouped_pairs(draw: Any) -> tuple[int, int, np.ndarray]:
    """(n_out, n_in, pairs): per output row (ascending, some skipped) a few inputs in any
    order, repeats among them."""
    n_out = draw(st.integers(1, 40))
    n_in = draw(st.integers(1, 2**40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    outs, ins = [], []
    for row in range(n_out):
        k = int(rng.integers(0, draw(st.sampled_from([3, 20]))))
        picks = rng.integers(0, min(n_in, 50) if draw(st.booleans()) else n_in, k)
        outs += [row] * k
        ins += picks.tolist()
    return n_out, n_in, np.asarray([outs, ins], np.int64).reshape(2, -1)


def as_set(rel: LineageRelation) -> set[tuple[int, int]]:
    return set(zip(rel.out_cols[0].tolist(), rel.in_cols[0].tolist(), strict=True))


@settings(max_examples=200, deadline=None)
@given(case=grouped_pairs())
def test_runs_sorted_in_place_equal_numpys_unique(case: tuple[int, int, np.ndarray]) -> None:
    _, _, pairs = case
    want = np.unique(pairs.T, axis=0).T if pairs.size else pairs
    mat = pairs.copy()
    n = kernels.sort_runs_unique(mat)
    assert n == want.shape[1]
    assert mat[:, :n].tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(case=grouped_pairs())
def test_grouped_pairs_compress_as_compress_does(case: tuple[int, int, np.ndarray]) -> None:
    n_out, n_in, pairs = case
    rel = LineageRelation.from_columns((n_out,), (n_in,), [pairs[0]], [pairs[1]])
    want = compress(rel, threads=1)
    got = compress_grouped((n_out,), (n_in,), pairs.copy(), threads=1)
    assert got.encoding == want.encoding
    assert got.decompress() == want.decompress()
    assert as_set(got.decompress()) == as_set(rel)


def test_a_columnar_table_keeps_the_matrix_it_was_given() -> None:
    # 10^6 scattered inputs, ten per output row: no structure, the columnar encoding
    rng = np.random.default_rng(3)
    pairs = np.stack([np.repeat(np.arange(100_000), 10), rng.integers(0, 10**9, 10**6)])
    pairs = np.ascontiguousarray(pairs, np.int64)
    rel = LineageRelation.from_columns((100_000,), (10**9,), [pairs[0]], [pairs[1]])
    table = compress_grouped((100_000,), (10**9,), pairs, threads=2)
    assert table.encoding == "columnar"
    assert table.decompress() == compress(rel, threads=2).decompress()
    assert np.shares_memory(table.raw, pairs)  # sorted in place, not copied


def test_pairs_out_of_order_are_sorted_into_a_copy() -> None:
    pairs = np.asarray([[3, 1, 2, 1], [5, 6, 7, 6]], np.int64)
    before = pairs.copy()
    table = compress_grouped((4,), (8,), pairs)
    assert as_set(table.decompress()) == {(3, 5), (1, 6), (2, 7)}
    assert pairs.tolist() == before.tolist()  # left as it was: -1, nothing moved
    assert kernels.sort_runs_unique(pairs) == -1


@pytest.mark.parametrize(
    "pairs",
    [
        np.zeros((3, 4), np.int64),  # not two rows
        np.zeros((2, 4), np.int32),  # not int64
        np.zeros((4, 2), np.int64).T,  # not C-contiguous
        np.asarray([[0, 9], [1, 1]], np.int64),  # an output row outside the shape
    ],
)
def test_anything_but_a_grouped_pair_matrix_is_refused(pairs: np.ndarray) -> None:
    with pytest.raises(InvalidRelationError):
        compress_grouped((4,), (8,), pairs)
