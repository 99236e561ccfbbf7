"""The fast paths of an element-wise capture keep its lineage and values exact (issue 23).

Two shortcuts make ``capture(lambda x: -x, x)`` cheap at 1M cells:

* the extraction continues an element-wise run by comparing raw handles (``h + 1, h + 2,
  ...``) instead of decoding each one (``follow`` in ``native/src/extract.cpp``);
* while a capture runs, NumPy allocates arrays through a handler that keeps freed blocks of
  at least 1 MiB for the next capture (``memcache`` in ``native/src/tracked_float.cpp``).

The old pair-by-pair extraction is the oracle (as in ``test_factorised_extraction.py``), here
on the shapes where a run starts, breaks or crosses an input's end: non-contiguous views,
broadcasting, negative strides, 0-size and 1-element arrays, outputs whose cells jump
between inputs, in both modes. Block reuse is checked for values (against plain NumPy),
for the handler being the caller's again after the capture, and across threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core.capture import Capture, capture
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.testing.extraction import pairs_and_tables, same_pairs
from tests.annotator.reference import MODES

_get_handler_name = np._core.multiarray.get_handler_name  # type: ignore[attr-defined]


def _check(func: Callable[..., Any], arrays: list[np.ndarray], mode: str) -> None:
    got = pairs_and_tables(func, arrays, mode)
    for key, (rel, stored, native) in got.items():
        assert native.n_pairs == rel.n, key
        assert same_pairs(native.decompress(), rel), f"native table of {key}"
        assert same_pairs(stored.decompress(), rel), f"stored table of {key}"


def _split(a: Any, b: Any, k: int) -> Any:
    """Flat cells 0..k-1 from a, the rest from b: the run of one input ends mid-array."""
    fa, fb = a.reshape(-1), b.reshape(-1)
    return np.concatenate([fa[:k], fb[k:]]).reshape(a.shape)


# Binary element-wise steps on two arrays of one shape (runs of kCell2 handles and their ends).
UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative,
    "neg_rev": lambda a: -a[::-1],
    "neg_T": lambda a: -a.T,
    "neg_step": lambda a: -a[:, ::2],
    "neg_neg_stride": lambda a: -a[::-1, ::-2],
    "roll": lambda a: -np.roll(a, 1),
    "scalar": lambda a: a * 2.0 + 1.0,
    "bcast_row": lambda a: a + a[:1],
    "bcast_col": lambda a: a - a[:, :1],
    "one": lambda a: -a[:1, :1],
    "empty": lambda a: -a[:0],
}
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "add_rev": lambda a, b: a + b[::-1],
    "add_T": lambda a, b: a + b.T if a.shape[0] == a.shape[1] else a + b,
    "mul_flip": lambda a, b: a[::-1, ::-1] * b,
    "self_rev": lambda a, b: a + a[::-1],
    "split": lambda a, b: _split(-a, b + 1.0, a.size // 2),
    "split_start": lambda a, b: _split(a * b, -b, 1),
    "bcast": lambda a, b: a + b[:1, :],
    "sub_empty": lambda a, b: a[:, :0] - b[:, :0],
    # x's last cell and y's first have consecutive handles: the run must stop at x's end
    "cat": lambda a, b: np.concatenate([-a.reshape(-1), -b.reshape(-1)]),
    "cat2": lambda a, b: np.concatenate([(a + b).reshape(-1), (b + a).reshape(-1)]),
}


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    shape=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    unary=st.sampled_from(sorted(UNARY)),
    binary=st.sampled_from(sorted(BINARY)),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**16),
)
def test_element_wise_runs_equal_the_pairs(
    shape: tuple[int, int], unary: str, binary: str, mode: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-2, 2, size=shape), rng.uniform(-2, 2, size=shape)
    _check(UNARY[unary], [x], mode)
    _check(BINARY[binary], [x, y], mode)
    _check(lambda a, b: (UNARY[unary](a), BINARY[binary](a, b)), [x, y], mode)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    n=st.integers(0, 3000),
    k=st.integers(0, 3000),
    mode=st.sampled_from(MODES),
)
def test_long_runs_break_where_the_input_changes(n: int, k: int, mode: str) -> None:
    """One long run per input, cut at an arbitrary cell (1-D, up to 3000 cells, 0-size too)."""
    x, y = np.arange(float(n)), np.arange(float(n)) + 0.5
    _check(lambda a, b: _split(a + b, b - a, min(k, n)), [x, y], mode)
    _check(lambda a, b: _split(-a, -b, min(k, n)), [x, y], mode)
    _check(lambda a, b: np.concatenate([-a[min(k, n) :], -b]), [x, y], mode)


def test_big_capture_values_equal_numpy_and_blocks_are_reused() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((600, 700)), rng.random((600, 700))
    before = _get_handler_name()
    eager = Capture(defer=False)  # annotated from the start: the inputs' blocks are cached
    first = eager.run(np.add, x, y)
    cached = _annotator.cached_bytes()
    assert cached >= x.nbytes  # the annotated inputs (16 B per cell) were freed into the cache
    again = eager.run(np.add, x, y)
    assert _get_handler_name() == before  # the caller's handler is back
    np.testing.assert_array_equal(first.value, x + y)
    np.testing.assert_array_equal(again.value, x + y)
    assert again.tables is not None
    assert first.tables is not None
    for key, table in again.tables.items():
        assert table.rows == first.tables[key].rows == 1
    # a block handed out again by calloc is cleared: a fresh tracked array carries no lineage
    z = capture(lambda a: a * 0.0 + np.zeros_like(a), x)
    np.testing.assert_array_equal(z.value, np.zeros_like(x))
    assert z.relation().n == x.size
    assert _annotator.cached_bytes() <= 256 << 20


def test_arrays_outlive_their_capture_and_threads_share_the_cache() -> None:
    """Arrays allocated during a capture are freed later, in another thread, safely."""
    x = np.random.default_rng(1).random((512, 512))
    kept = [capture(np.negative, x).value for _ in range(3)]
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(4):
                r = capture(lambda a: np.exp(-a) + a, x)
                np.testing.assert_array_equal(r.value, np.exp(-x) + x)
                assert r.tables is not None
                assert r.tables[(0, 0)].rows == 1
            kept.clear()  # freed in this thread, allocated in the main one
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _get_handler_name() == "default_allocator"
