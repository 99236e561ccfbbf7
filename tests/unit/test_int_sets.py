"""core.int_sets: the sort-based set of integers equals np.unique."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dslog_dagster.core.int_sets import sorted_unique


@given(hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-(2**40), 2**40)))
def test_sorted_unique_equals_numpy(a: np.ndarray) -> None:
    got = sorted_unique(a)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.unique(a))
    half = a.size // 2
    runs = np.concatenate([np.sort(a[:half]), np.sort(a[half:])])
    np.testing.assert_array_equal(sorted_unique(runs, runs=True), np.unique(a))


def test_sorted_unique_of_strided_keys() -> None:
    out = np.repeat(np.arange(1000), 3)
    src = np.arange(3000)
    key = np.concatenate([out * 3000 + src, (out * 3000 + src)[::7]])[::-1]
    np.testing.assert_array_equal(sorted_unique(key), np.unique(key))
    assert sorted_unique(np.array([5])).tolist() == [5]
    assert sorted_unique(np.array([], dtype=np.int64)).size == 0
