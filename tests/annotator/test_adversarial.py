"""Adversarial inputs: capture never changes the values, and its lineage is NumPy's semantics.

Hypothesis replaces the inputs of every grid case, and of composed pipelines (mean imputation,
standardisation, order statistics, ...), with values from the regimes where floating point code
takes other paths: NaN, ±inf, ±0, ties, subnormals, and (for the pipelines) empty arrays.
For each draw, ``capture`` must give exactly the values plain NumPy gives — equal with NaN equal
to NaN, and the same sign of every zero — except the documented ``dot``/``inner``/``multi_dot``
rounding, raise the same error where NumPy raises, and record, in both modes, exactly the
reference annotator's lineage (``tests/annotator/reference.py``, which follows NumPy's NaN code
paths: a NaN that a nan-function ignores contributes nothing). Deterministic for CI
(derandomised, no example database).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core.capture import Capture
from dslog_dagster.errors import LineageLostError
from tests.annotator.grid import CASES, GridCase
from tests.annotator.reference import (
    MODES,
    REFERENCE,
    Mode,
    lift,
    reference_capture,
    to_relations,
)
from tests.annotator.test_capture_grid import RAISES, ROUNDING_ONLY

CI = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    # drawing a case's cells is slow next to tiny arrays; under a loaded machine hypothesis
    # would call that a failed health check
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SPECIAL = (
    np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    5e-324,
    -5e-324,
    2.5e-310,
    1.0,
    -1.0,
    0.5,
    2.0,
)


@st.composite
def adversarial(draw: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Values of ``shape``: mostly special values (so ties and NaNs are common), some drawn."""
    n = int(np.prod(shape, dtype=np.int64))
    cells = st.sampled_from(SPECIAL) | st.floats(-3.0, 3.0, allow_subnormal=True)
    flat = draw(st.lists(cells, min_size=n, max_size=n))
    return np.array(flat, dtype=np.float64).reshape(shape)


def assert_same_values(got: np.ndarray, want: Any, rounding_only: bool, what: str) -> None:
    w = np.asarray(want, dtype=np.float64)
    assert got.shape == w.shape, what
    if rounding_only:
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=what)
        return
    assert np.array_equal(got, w, equal_nan=True), f"{what}: {got!r} != {w!r}"
    zeros = w == 0
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(w[zeros])), f"{what}: sign of zero"


def check(
    func: Callable[..., Any],
    ref: Callable[..., Any],
    arrays: list[np.ndarray],
    mode: Mode,
    rounding_only: bool = False,
) -> None:
    """``capture(func)`` against plain NumPy (values, errors) and ``ref`` (lineage)."""
    with np.errstate(all="ignore"):
        try:
            want = func(*arrays)
        except Exception as e:  # NumPy refuses the input: so must the capture
            with pytest.raises(type(e)):
                Capture(mode=mode).run(func, *arrays)
            return
        got = Capture(mode=mode).run(func, *arrays)
    assert not got.flagged
    wants = want if isinstance(want, tuple | list) else (want,)
    assert len(got.outputs) == len(wants)
    for k, (g, w) in enumerate(zip(got.outputs, wants, strict=True)):
        assert_same_values(g, w, rounding_only, f"output {k}")
    shapes = [a.shape for a in arrays]
    for which, rels in (("contributing", got.relations), ("considered", got.considered)):
        if rels is None:
            continue
        values, lineage = reference_capture(ref, *arrays, mode=which)  # type: ignore[arg-type]
        want_rels = to_relations(values, lineage, shapes)
        assert set(rels) == set(want_rels)
        for key, rel in want_rels.items():
            assert rels[key] == rel, (which, key)


CAPTURABLE = [c for c in CASES if c.name not in RAISES]


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_every_grid_case_on_adversarial_inputs(data: Any, mode: Mode) -> None:
    case: GridCase = data.draw(st.sampled_from(CAPTURABLE), label="case")
    arrays = [data.draw(adversarial(s), label=f"input {k}") for k, s in enumerate(case.shapes)]
    check(case.func, case.ref, arrays, mode, rounding_only=case.name in ROUNDING_ONLY)


@CI
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_raising_grid_cases_still_raise(data: Any, mode: Mode) -> None:
    case: GridCase = data.draw(st.sampled_from([c for c in CASES if c.name in RAISES]))
    arrays = [data.draw(adversarial(s)) for s in case.shapes]
    with np.errstate(all="ignore"), pytest.raises(LineageLostError):
        Capture(mode=mode).run(case.func, *arrays)


def _r(fn: Any) -> Any:
    return REFERENCE.get(fn, fn)


def impute_mean(np_: Any, a: Any) -> Any:
    return np.where(np_["isnan"](a), np_["nanmean"](a, axis=0), a)


def standardise(np_: Any, a: Any) -> Any:
    return (a - np_["nanmean"](a, axis=0)) / np_["nanstd"](a, axis=0)


def clip_to_percentiles(np_: Any, a: Any) -> Any:
    lo = np_["nanpercentile"](a, 5.0)
    hi = np_["nanpercentile"](a, 95.0)
    return np_["clip"](a, lo, hi)


def median_centred(np_: Any, a: Any) -> Any:
    return a - np_["median"](a, axis=-1, keepdims=True)


def robust_summary(np_: Any, a: Any) -> Any:
    return (
        np_["nanmedian"](a, axis=0),
        np_["nanmax"](a, axis=0),
        np_["nanmin"](a),
        np_["nansum"](a, axis=-1),
    )


def cleaned_order_statistics(np_: Any, a: Any) -> Any:
    clean = np_["nan_to_num"](a, nan=0.0, posinf=1.0, neginf=-1.0)
    return np_["quantile"](clean, [0.25, 0.5, 0.75], axis=0), np_["unique"](a)


def sorted_differences(np_: Any, a: Any) -> Any:
    return np_["diff"](np_["sort"](a, axis=-1)), np_["nancumsum"](a, axis=0)


PIPELINES = [
    impute_mean,
    standardise,
    clip_to_percentiles,
    median_centred,
    robust_summary,
    cleaned_order_statistics,
    sorted_differences,
]
FUNCS = [
    "nanmean",
    "nanstd",
    "nanpercentile",
    "clip",
    "median",
    "nanmedian",
    "nanmax",
    "nanmin",
    "nansum",
    "nan_to_num",
    "quantile",
    "unique",
    "diff",
    "sort",
    "nancumsum",
]
PLAIN = {n: getattr(np, n) for n in FUNCS}
REF = {n: _r(getattr(np, n)) for n in FUNCS}
PLAIN["isnan"] = np.isnan
# A predicate: a plain bool array (no lineage), as the native comparison loops give.
REF["isnan"] = np.vectorize(lambda c: math.isnan(lift(c).v), otypes=[bool])


@CI
@given(
    data=st.data(),
    mode=st.sampled_from(MODES),
    pipeline=st.sampled_from(PIPELINES),
    shape=st.tuples(st.integers(0, 5), st.integers(1, 4)),
)
def test_composed_pipelines_on_adversarial_inputs(
    data: Any, mode: Mode, pipeline: Any, shape: tuple[int, int]
) -> None:
    a = data.draw(adversarial(shape))

    def run(x: Any) -> Any:
        return pipeline(PLAIN, x)

    def ref(x: Any) -> Any:
        return pipeline(REF, x)

    check(run, ref, [a], mode)


LONG_LANE_FUNCS = [
    (np.sort, {}),
    (np.sort, {"kind": "stable"}),
    (np.partition, {"kth": 7}),
    (np.median, {}),
    (np.quantile, {"q": [0.1, 0.5, 0.9]}),
    (np.unique, {}),
    (np.max, {}),  # SIMD reductions return either zero of a (0.0, -0.0) tie
    (np.min, {}),
    (np.nanmax, {}),
    (np.nanmin, {}),
    (np.ptp, {}),
]


@CI
@given(
    data=st.data(),
    mode=st.sampled_from(MODES),
    which=st.integers(0, len(LONG_LANE_FUNCS) - 1),
    n=st.integers(16, 80),
)
def test_long_lanes_of_signed_zeros_and_nans(data: Any, mode: Mode, which: int, n: int) -> None:
    """Lanes long enough for NumPy's SIMD sorts, which may flip the sign of a zero."""
    fn, kw = LONG_LANE_FUNCS[which]
    x = np.array(
        data.draw(st.lists(st.sampled_from([0.0, -0.0, np.nan, 1.0, -1.0]), min_size=n, max_size=n))
    )
    if fn is np.partition:
        kw = {"kth": data.draw(st.integers(0, n - 1))}
    ref = REFERENCE[fn]
    check(lambda a: fn(a, **kw), lambda a: ref(a, **kw), [x], mode)


@CI
@given(
    data=st.data(),
    mode=st.sampled_from(MODES),
    ufunc=st.sampled_from([np.maximum, np.minimum, np.fmax, np.fmin]),
    rows=st.integers(1, 5),
    n=st.integers(1, 40),
    axis=st.sampled_from([None, 0, 1]),
)
def test_picks_of_signed_zeros_take_numpys_zero(
    data: Any, mode: Mode, ufunc: Any, rows: int, n: int, axis: int | None
) -> None:
    """Element-wise picks and their reductions on lanes of 0.0/-0.0 (and some NaN/1.0): the
    values are NumPy's, zero signs included, and the lineage is the cell with that zero."""
    cells = st.sampled_from([0.0, -0.0, 0.0, -0.0, np.nan, 1.0])
    x, y = (
        np.array(data.draw(st.lists(cells, min_size=rows * n, max_size=rows * n))).reshape(rows, n)
        for _ in range(2)
    )
    ref = REFERENCE[ufunc]
    check(ufunc, ref, [x, y], mode)
    check(lambda a: ufunc.reduce(a, axis=axis), lambda a: _reduce_ref(ufunc, a, axis), [x], mode)


def _reduce_ref(ufunc: Any, a: Any, axis: int | None) -> Any:
    by_ufunc = {np.maximum: np.max, np.minimum: np.min, np.fmax: np.nanmax, np.fmin: np.nanmin}
    return REFERENCE[by_ufunc[ufunc]](a, axis=axis)
