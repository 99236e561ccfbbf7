"""No garbage handles: cells NumPy leaves unwritten never carry lineage, and outputs that skip
the zero-fill are exactly the ones every cell of which is written.

A tracked_float cell is a value plus an 8-byte handle into the capture's arena. Memory freed
by an earlier tracked array still holds real handles of this very capture, so a cell that
NumPy leaves uninitialised (``np.empty``, ``empty_like``, ``np.ndarray(shape, dtype)``, the
cells a ``where=`` mask skips; ``out=None`` there only silences NumPy's warning about them)
would silently name input cells it never came from (or, from an earlier capture, raise). The
dtype therefore has NPY_NEEDS_INIT: every new tracked array is zero-filled (0.0, no lineage).
Only plain element-wise calls on large C-contiguous tracked arrays skip that zero-fill
(``native/src/tracked_float.cpp``, "Uninitialised outputs"), and there the inner loop writes
every output cell.

Each test first frees large tracked arrays full of this capture's handles (same byte size as
the arrays made next), so that the allocator hands the dirty blocks back, and repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dslog_dagster.core.capture import TRACKED_FLOAT, Capture
from dslog_dagster.errors import StaleLineageError
from tests.annotator.reference import reference_capture, to_relations

# the tracked kernels' zero-fill is the subject: annotated from the start (no deferred inputs)
capture = Capture(defer=False).run

N = 20_000  # cells: above the 16,384 at which element-wise outputs skip the zero-fill
REPS = 8
NPY_NEEDS_INIT = 0x08  # numpy/ndarraytypes.h; np.dtype.flags exposes the descriptor's flags


def _diag(cells: np.ndarray) -> np.ndarray:
    """Pairs (out i, in i) of a 1-d element-wise relation restricted to `cells`."""
    idx = np.flatnonzero(cells) if cells.dtype == bool else cells
    return np.stack([idx, idx], axis=1).astype(np.int64)


def _no_pairs() -> np.ndarray:
    return np.zeros((0, 2), dtype=np.int64)


def _dirty(a: Any, b: Any) -> None:
    """Allocate and free tracked arrays of N cells full of handles naming a's and b's cells."""
    for _ in range(3):
        t = a + b
        u = np.negative(t)
        v = np.multiply(u, a)
        del t, u, v


# Ways to get a tracked array of N cells whose cells NumPy does not write.
UNWRITTEN: dict[str, Callable[[Any], Any]] = {
    "empty": lambda a: np.empty(a.shape, dtype=a.dtype),
    "empty_fortran_2d": lambda a: np.empty((100, N // 100), dtype=a.dtype, order="F").ravel("F"),
    "empty_like": lambda a: np.empty_like(a),
    "empty_like_of_an_elementwise_output": lambda a: np.empty_like(np.negative(a)),
    "ndarray_constructor": lambda a: np.ndarray(a.shape, dtype=a.dtype),
    "ndarray_constructor_dtype_of_output": lambda a: np.ndarray(a.shape, np.negative(a).dtype),
    "negative_where_nothing": lambda a: np.negative(
        a, out=None, where=np.zeros(a.shape, dtype=bool)
    ),
    "add_where_nothing": lambda a: np.add(a, a, out=None, where=np.zeros(a.shape, dtype=bool)),
}


@pytest.mark.parametrize("make", sorted(UNWRITTEN))
def test_unwritten_cells_carry_no_lineage_inside_a_capture(make: str) -> None:
    rng = np.random.default_rng(10)
    x, y = rng.random(N), rng.random(N)

    def f(a: Any, b: Any) -> Any:
        _dirty(a, b)
        e = UNWRITTEN[make](a)
        assert e.dtype == TRACKED_FLOAT
        return e + a

    for _ in range(REPS):
        r = capture(f, x, y)
        np.testing.assert_array_equal(r.outputs[0], x)  # unwritten cells hold 0.0
        np.testing.assert_array_equal(r.relation(0, 0).pairs(), _diag(np.arange(N)))
        np.testing.assert_array_equal(r.relation(0, 1).pairs(), _no_pairs())


@pytest.mark.parametrize("make", sorted(UNWRITTEN))
def test_unwritten_cells_made_outside_a_capture_carry_no_lineage(make: str) -> None:
    rng = np.random.default_rng(11)
    x, y = rng.random(N), rng.random(N)
    for _ in range(REPS):
        # The previous capture freed arrays full of its (now stale) handles.
        capture(lambda a, b: (_dirty(a, b), a + b)[1], x, y)
        e = UNWRITTEN[make](np.zeros(N, dtype=TRACKED_FLOAT))
        r = capture(lambda a, e=e: a + e, x)
        np.testing.assert_array_equal(r.outputs[0], x)
        np.testing.assert_array_equal(r.relation(0, 0).pairs(), _diag(np.arange(N)))


WHERE: dict[str, Callable[[Any, Any, np.ndarray], Any]] = {
    "negative": lambda a, b, m: np.negative(a, out=None, where=m),
    "sqrt": lambda a, b, m: np.sqrt(a, out=None, where=m),
    "add": lambda a, b, m: np.add(a, b, out=None, where=m),
    "multiply_by_a_constant": lambda a, b, m: np.multiply(a, 2.0, out=None, where=m),
    "maximum": lambda a, b, m: np.maximum(a, b, out=None, where=m),
    "add_into_empty": lambda a, b, m: np.add(a, b, out=np.empty_like(a), where=m),
}


@pytest.mark.parametrize("name", sorted(WHERE))
def test_where_leaves_the_masked_cells_without_lineage(name: str) -> None:
    rng = np.random.default_rng(12)
    x, y = rng.random(N) + 0.5, rng.random(N) + 0.5
    mask = rng.random(N) < 0.5
    mask[-100:] = False  # a masked-off tail: nothing after the last written cell

    def f(a: Any, b: Any) -> Any:
        _dirty(a, b)
        return WHERE[name](a, b, mask)

    want = np.where(mask, WHERE[name](x, y, mask), 0.0)
    for _ in range(REPS):
        r = capture(f, x, y)
        np.testing.assert_array_equal(r.outputs[0], want)
        np.testing.assert_array_equal(
            r.relation(0, 0).pairs()[:, :1].ravel(),
            np.flatnonzero(mask if name != "maximum" else mask & (x >= y)),
        )
        uses_b = name in ("add", "add_into_empty", "maximum")
        want_b = (mask & ~(x >= y)) if name == "maximum" else mask if uses_b else mask & False
        np.testing.assert_array_equal(r.relation(0, 1).pairs(), _diag(want_b))


def test_where_into_an_existing_output_keeps_its_cells_and_their_lineage() -> None:
    """The masked-off cells of a given out= keep their values and sets (from b here)."""
    rng = np.random.default_rng(13)
    x, y = rng.random(N), rng.random(N)
    mask = rng.random(N) < 0.3

    def f(a: Any, b: Any) -> Any:
        prev = np.negative(b)  # an element-wise output (the no-zero-fill path)
        return np.negative(a, out=prev, where=mask)

    r = capture(f, x, y)
    np.testing.assert_array_equal(r.outputs[0], np.where(mask, -x, -y))
    np.testing.assert_array_equal(r.relation(0, 0).pairs(), _diag(mask))
    np.testing.assert_array_equal(r.relation(0, 1).pairs(), _diag(~mask))


# Element-wise calls: the ones that skip the zero-fill and the ones that do not must agree
# with NumPy's values and the reference lineage.
ELEMENTWISE: dict[str, Callable[[Any, Any], Any]] = {
    "negative": lambda a, b: np.negative(a),
    "absolute_of_difference": lambda a, b: np.absolute(a - b),
    "sqrt": lambda a, b: np.sqrt(a),
    "add": lambda a, b: a + b,
    "subtract_operator_chain": lambda a, b: a - b - a,
    "multiply_by_python_float": lambda a, b: a * 2.5,
    "python_int_minus": lambda a, b: 3 - b,
    "divide": lambda a, b: np.divide(a, b),
    "power": lambda a, b: np.power(a, b),
    "maximum": np.maximum,  # itself: the reference's pick (ties: both cells), not the object loop
    "arctan2": lambda a, b: np.arctan2(a, b),
    # not taken by the no-zero-fill path (layout, broadcasting, plain operand, keywords):
    "fortran_2d": lambda a, b: np.add(
        np.asfortranarray(a.reshape(100, -1)), np.asfortranarray(b.reshape(100, -1))
    ),
    "strided": lambda a, b: np.negative(a[::2]),
    "broadcast_row": lambda a, b: a.reshape(100, -1) + b.reshape(100, -1)[0],
    "plain_float64_operand": lambda a, b: a + np.arange(N, dtype=np.float64),
    "casting_keyword": lambda a, b: np.add(a, b, casting="same_kind"),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_large_elementwise_outputs_match_numpy_and_the_reference(name: str) -> None:
    func = ELEMENTWISE[name]
    rng = np.random.default_rng(14)
    x, y = rng.random(N) + 0.5, rng.random(N) + 0.5
    y[7] = x[7]  # a tie for maximum

    def f(a: Any, b: Any) -> Any:
        _dirty(a, b)
        out = func(a, b)
        assert type(out) is np.ndarray
        assert out.dtype == TRACKED_FLOAT
        return out

    got = capture(f, x, y)
    np.testing.assert_array_equal(got.outputs[0], np.asarray(func(x, y), dtype=np.float64))
    v, lineage = reference_capture(func, x, y)
    want = to_relations(v, lineage, [x.shape, y.shape])
    for key, rel in want.items():
        assert got.relations[key] == rel, key


def test_elementwise_outputs_are_fresh_owned_c_arrays() -> None:
    def f(a: Any, b: Any) -> Any:
        r1, r2 = np.negative(a), np.negative(a)
        assert r1 is not r2
        assert r1.flags.owndata
        assert r1.flags.c_contiguous
        assert r1.shape == a.shape
        assert np.negative(a[:5]).shape == (5,)
        s = np.add(a[0], b[0])  # 0-d operands: still a scalar, as in NumPy
        assert isinstance(s, TRACKED_FLOAT.type)
        return r1 + r2

    r = capture(f, np.ones(N), np.ones(N))
    np.testing.assert_array_equal(r.outputs[0], np.full(N, -2.0))
    assert TRACKED_FLOAT.flags & NPY_NEEDS_INIT


def test_a_failing_elementwise_call_leaks_nothing_and_keeps_the_zero_fill() -> None:
    """Stale handles and floating-point errors abort calls on the no-zero-fill path; the
    half-written output is dropped and every later empty array is still zeroed."""
    x = np.random.default_rng(15).random(N)
    stale: list[Any] = []
    capture(lambda a: (stale.append(a + 1.0), a)[1], x)

    def f(a: Any) -> Any:
        with pytest.raises(StaleLineageError):
            np.add(a, stale[0])
        with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
            np.divide(a, np.zeros(N, dtype=TRACKED_FLOAT))
        assert TRACKED_FLOAT.flags & NPY_NEEDS_INIT
        return np.empty_like(a) + a

    for _ in range(REPS):
        r = capture(f, x)
        np.testing.assert_array_equal(r.outputs[0], x)
        np.testing.assert_array_equal(r.relation(0, 0).pairs(), _diag(np.arange(N)))
