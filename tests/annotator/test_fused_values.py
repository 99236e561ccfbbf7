"""The output's values read in the extraction pass (``values_and_tables``) equal the separate
``_annotator.values`` read and plain NumPy, and the tables are the same tables.

The native extraction copies the values block by block (4,096 cells) just ahead of the
handles it reads, and stops an element-wise run at each block's end: sizes below, at and
across block boundaries, runs that cross them, cells with no lineage, strided, reversed and
transposed (non-C-order) outputs, 0-size and 0-d outputs. A bad buffer is refused, and a
forged handle still raises.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster import _annotator
from dslog_dagster.core import capture
from dslog_dagster.core.extraction import extract_tables, values_and_tables
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import ForgedLineageError
from tests.annotator.test_forged_handles import K_JOIN, epoch_of, forge, make_handle

STEPS: dict[str, Callable[[Any], Any]] = {
    "negative": np.negative,
    "add self shifted": lambda a: a[1:] + a[:-1],
    "reversed": lambda a: a[::-1] * 2.0,
    "strided": lambda a: a[::3] + 1.0,
    "where zero": lambda a: np.where(a > 0.5, a, 0.0),
    "x - mean": lambda a: a - a.mean(),
    "cumsum": np.cumsum,
    "sum": np.sum,
    "transposed": lambda a: a.reshape(-1, 2).T if a.size % 2 == 0 else a,
    "constant gaps": lambda a: np.concatenate([a, np.zeros(5), a[:7]]),
}

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)


@FAST
@given(
    n=st.sampled_from([0, 1, 2, 4095, 4096, 4097, 8193]),
    step=st.sampled_from(sorted(STEPS)),
    seed=st.integers(0, 2**16),
)
def test_fused_values_and_tables_equal_the_separate_reads(n: int, step: str, seed: int) -> None:
    x = np.random.default_rng(seed).random(n)
    if step == "cumsum":
        x = x[:300]  # quadratic lineage: kept small
    func = STEPS[step]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty array
        want = np.asarray(func(x), dtype=np.float64)
    epoch = _annotator.begin(0)
    try:
        tracked = _annotator.annotate(x)[0]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            out = np.asarray(func(tracked))
        shapes = [x.shape]
        values, tables = values_and_tables(out, shapes)
        separate = _annotator.values(out)
        reference = extract_tables(out, shapes)
    finally:
        _annotator.end(epoch)
    assert values.shape == want.shape == separate.shape
    np.testing.assert_array_equal(values, want)
    assert values.tobytes() == separate.tobytes()  # bit for bit (signed zeros, NaN payloads)
    assert len(tables) == len(reference) == 1
    assert same_table(tables[0], reference[0])


def same_table(a: LineageTable, b: LineageTable) -> bool:
    """Field for field (both come from the same native pass; no pair expansion)."""
    names = [f.name for f in dataclasses.fields(a) if f.compare]
    return all(
        np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
        for x, y in ((getattr(a, n), getattr(b, n)) for n in names)
    )


def test_capture_values_equal_plain_numpy_across_blocks() -> None:
    x = np.random.default_rng(3).random((7, 1500)) - 0.5
    for func in (np.negative, lambda a: a.T[::-1] + a.T, lambda a: np.maximum(a, 0.0)):
        got = capture(func, x)
        want = func(x)
        assert got.value.tobytes() == np.ascontiguousarray(want).tobytes()
        assert got.relation(0, 0) == capture(func, x).relation(0, 0)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda n: np.empty(n + 1), id="wrong-size"),
        pytest.param(lambda n: np.empty(n, dtype=np.float32), id="float32"),
        pytest.param(lambda n: np.empty(2 * n)[::2], id="strided"),
        pytest.param(lambda n: [0.0] * n, id="list"),
    ],
)
def test_a_bad_values_buffer_is_refused(bad: Callable[[int], Any]) -> None:
    x = np.arange(6.0)
    epoch = _annotator.begin(0)
    try:
        out = -_annotator.annotate(x)[0]
        with pytest.raises(ValueError, match="values"):
            _annotator.extract_tables(out, [[6]], False, bad(6))
    finally:
        _annotator.end(epoch)


def test_a_forged_handle_still_raises_with_fused_values() -> None:
    x = np.arange(5000.0)

    def f(a: Any) -> Any:
        b = -a
        bad = forge([make_handle(epoch_of(a), K_JOIN, 10**6, 2)])
        return np.concatenate([b, bad, b])

    with pytest.raises(ForgedLineageError):
        capture(f, x)
