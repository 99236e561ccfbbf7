"""Python control flow on tracked values runs as on float64: comparisons give NumPy's bools.

``if a.max() > 0``, builtin ``max(a.sum(axis=1))`` and ``sorted(a[0])`` raised inside a
capture, and ``a[0, 0] == 1.0`` was silently False (identity comparison), which changed the
user's run. A comparison carries no data lineage, so a tracked scalar compares as its float64
value and returns what NumPy returns (an ``np.bool_``); a value that builtin ``max``, ``min``
or ``sorted`` picks is the tracked scalar itself, with its own lineage.
"""

import operator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import TRACKED_FLOAT, capture
from tests.annotator.reference import reference_capture, to_relations

OPS = [operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 5e-324, 1e308]
FLOATS = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=True, allow_infinity=True))


def same_as_plain(func: Any, x: np.ndarray) -> Any:
    """Capture ``func`` on ``x``: values equal the plain call, lineage the reference's."""
    got = capture(func, x)
    want = func(x)
    np.testing.assert_array_equal(got.value, want)
    values, lineage = reference_capture(func, x)
    np.testing.assert_array_equal(values, np.asarray(want, dtype=np.float64))
    ref = to_relations(values, lineage, [x.shape])
    assert got.relations[(0, 0)] == ref[(0, 0)]
    return got


def test_if_on_a_reduction() -> None:
    def f(a: Any) -> Any:
        return a * 2.0 if a.max() > 0 else a - 1.0

    x = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
    same_as_plain(f, x)
    same_as_plain(f, -np.abs(x))


def test_builtin_max_min_and_sorted_keep_the_picked_cells() -> None:
    x = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0], [0.5, 0.25, 9.0]])
    top = same_as_plain(lambda a: max(a.sum(axis=1)), x)
    assert top.relation().pairs().tolist() == [[2, 0], [2, 1], [2, 2]]  # row 2's sum
    low = same_as_plain(lambda a: min(a[1]), x)
    assert low.relation().pairs().tolist() == [[1, 2]]  # the cell -6.0 itself
    ordered = same_as_plain(lambda a: np.stack(sorted(a[0])), x)
    assert ordered.relation().pairs().tolist() == [[0, 0, 1], [1, 0, 0], [2, 0, 2]]
    keyed = same_as_plain(lambda a: np.stack(sorted(a[2], key=lambda v: -v)), x)
    assert keyed.relation().pairs().tolist() == [[0, 2, 2], [1, 2, 0], [2, 2, 1]]


def test_equality_with_plain_numbers_was_identity_and_is_now_the_value() -> None:
    x = np.array([[1.0, 2.0], [2.0, np.nan]])
    same_as_plain(lambda a: a if a[0, 0] == 1.0 else -a, x)
    same_as_plain(lambda a: a if a[0, 1] == a[1, 0] else -a, x)
    same_as_plain(lambda a: a if a[1, 1] != a[1, 1] else -a, x)  # NaN is unequal to itself
    same_as_plain(lambda a: a * (1.0 if a[0, 1] in (2, 3) else 0.0), x)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(left=FLOATS, right=FLOATS)
def test_every_comparison_returns_what_numpy_returns(left: float, right: float) -> None:
    """Against floats, ints, np.float64 and tracked scalars, on both sides, NaN and ±0 too."""
    seen: list[tuple[Any, Any]] = []

    def f(a: Any) -> Any:
        s, t = a[0], a[1]
        assert isinstance(s, TRACKED_FLOAT.type)
        others: list[tuple[Any, Any]] = [(t, np.float64(right)), (right, right)]
        others.append((np.float64(right), np.float64(right)))
        if np.isfinite(right) and float(right).is_integer() and abs(right) < 2**62:
            others.append((int(right), int(right)))
        for op in OPS:
            for tracked_other, plain_other in others:
                for got, want in (
                    (op(s, tracked_other), op(np.float64(left), plain_other)),
                    (op(tracked_other, s), op(plain_other, np.float64(left))),
                ):
                    seen.append((got, want))
        return a

    capture(f, np.array([left, right]))
    for got, want in seen:
        assert type(got) is type(want) is np.bool_
        assert got == want


def test_bool_of_tracked_scalars_and_zero_d_arrays() -> None:
    x = np.array([np.nan, 0.0, -0.0, 2.0, -1.0, 5e-324])
    got: list[bool] = []

    def f(a: Any) -> Any:
        for i in range(a.size):
            got.append(bool(a[i]))
            got.append(bool(np.asarray(a[i])))
            got.append(bool(a[i : i + 1].sum()))
        return a

    capture(f, x)
    want = [bool(v) for v in x for _ in range(3)]
    assert got == want


def test_comparison_of_a_scalar_with_a_tracked_array_is_elementwise() -> None:
    x = np.array([1.0, 3.0, 2.0])

    def f(a: Any) -> Any:
        mask = a[2] < a
        assert mask.dtype == np.bool_
        np.testing.assert_array_equal(mask, x[2] < x)
        return np.where(mask, a, 0.0)

    got = capture(f, x)
    np.testing.assert_array_equal(got.value, [0.0, 3.0, 0.0])
    assert got.relation().pairs().tolist() == [[1, 1]]  # the mask itself carries nothing


def test_ordering_against_other_types_fails_as_for_float64() -> None:
    def f(a: Any) -> Any:
        with pytest.raises(TypeError):
            _ = a[0] < "a"
        assert (a[0] == "a") == (np.float64(1.0) == "a")
        assert a[0] != None  # noqa: E711
        return a

    capture(f, np.ones(2))
