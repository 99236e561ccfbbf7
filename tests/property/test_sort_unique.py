"""The native sort + dedupe equals NumPy's row-wise unique, whatever order the pairs come in.

Captured lineage often arrives sorted by its trailing (input) columns, which the native side
exploits with a partial radix sort; this checks every such order against the reference.
"""

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation


@st.composite
def pair_matrices(draw: Any) -> tuple[int, np.ndarray]:
    l = draw(st.integers(1, 3))
    m = draw(st.integers(1, 3))
    n = draw(st.integers(0, 300))
    wide = draw(st.booleans())  # wide ranges force the non-packed fallback
    # wide: each side's columns as wide as an array of at most 2**63 - 1 cells allows
    small = draw(st.integers(1, 12))
    hi = [2 ** (62 // l)] * l + [2 ** (62 // m)] * m if wide else [small] * (l + m)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mat = rng.integers(0, hi, size=(n, l + m))
    if n and draw(st.booleans()):
        mat = np.concatenate([mat, mat[rng.integers(0, n, n // 3)]])  # duplicates
    presort = draw(st.integers(0, l + m))  # sort by the trailing `presort` columns
    if presort and len(mat):
        keys = [mat[:, c] for c in range(l + m - 1, l + m - 1 - presort, -1)]
        mat = mat[np.lexsort(keys)]
    return l, mat


@settings(max_examples=300, deadline=None)
@given(case=pair_matrices())
def test_unique_matches_numpy(case: tuple[int, np.ndarray]) -> None:
    assert_unique_matches_numpy(*case)


def assert_unique_matches_numpy(l: int, mat: np.ndarray) -> None:
    """The native sort + dedupe of ``mat`` (``l`` output columns) equals ``np.unique``."""
    ncols = mat.shape[1]
    shape = tuple(int(mat[:, c].max()) + 1 if len(mat) else 1 for c in range(ncols))
    rel = LineageRelation.from_columns(shape[:l], shape[l:], list(mat[:, :l].T), list(mat[:, l:].T))
    got = rel.unique().pairs()
    want = np.unique(mat, axis=0) if len(mat) else np.zeros((0, ncols), np.int64)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("presorted", [False, True])
@pytest.mark.parametrize("span", [1, 5, 5000, 22000])
@pytest.mark.parametrize(("l", "m"), [(1, 1), (1, 2), (2, 1)])
def test_bucket_sorted_unique_matches_numpy(l: int, m: int, span: int, presorted: bool) -> None:
    """Relations of at least 2**16 rows whose leading (output) column spans fewer values than
    there are rows: the native side bucket-sorts them on that column, then sorts each bucket
    by the other columns (insertion sort up to 16 rows: ``span`` 5000 and 22000; else a full
    sort), or keeps the scattered order when the rest were sorted already (``presorted``).
    With duplicates, shuffled, the leading column offset from 0."""
    n = 2**16 + 1000
    rng = np.random.default_rng(span * 10 + l * 3 + m + presorted)
    lead = 2**40 + rng.integers(0, span, n)
    mat = np.column_stack([lead, rng.integers(0, 1000, size=(n, l + m - 1))])
    mat = np.concatenate([mat, mat[rng.integers(0, n, n // 4)]])
    mat = mat[rng.permutation(len(mat))]
    if presorted:  # sorted by every column but the leading one
        mat = mat[np.lexsort([mat[:, c] for c in range(l + m - 1, 0, -1)])]
    assert_unique_matches_numpy(l, mat)
