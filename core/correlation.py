"""``np.correlate`` and ``np.convolve`` under capture give NumPy's own values.

NumPy correlates two float64 arrays in two ways. A kernel of at most 11 values goes through
an unrolled loop (``small_correlate``: a left-to-right sum of products); every other output,
the edges of ``mode="same"``/``"full"`` included, goes through the dtype's dot function, which
is BLAS ``ddot``. A tracked array has no unrolled loop, so every output goes through the
annotator's dot, which runs NumPy's float64 dot (BLAS) on the values. Where BLAS fuses
multiply-adds (OpenBLAS's AVX-512 kernels) the two sums can differ in the last bit.

So the C entry points that ``np.correlate`` and ``np.convolve`` call
(``numpy._core.multiarray.correlate2`` and ``correlate``) are replaced once, at import, by
wrappers. When the result is tracked, a wrapper runs NumPy's function a second time on the
values of the arrays and writes those values into the tracked result
(``_annotator.assign_values``). The lineage is the one from the tracked run. Otherwise it
calls NumPy's function unchanged.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy._core import multiarray

from dslog_dagster.core.native import annotator as _annotator

__all__ = ["install"]

TRACKED: np.dtype[Any] = _annotator.dtype

_ORIGINAL: dict[str, Callable[..., Any]] = {}


def _values(x: Any) -> Any:
    """``x``'s float64 values when it is a tracked array, else ``x``."""
    return _annotator.values(x) if isinstance(x, np.ndarray) and x.dtype == TRACKED else x


def _exact(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` with a tracked result's values replaced by those of NumPy's plain run."""

    @functools.wraps(original)
    def correlate(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if isinstance(out, np.ndarray) and out.dtype == TRACKED:
            plain = original(*[_values(a) for a in args], **kwargs)
            _annotator.assign_values(out, np.asarray(plain, dtype=np.float64))
        return out

    return correlate


def install() -> None:
    """Replace ``multiarray.correlate`` and ``correlate2`` by their wrappers, once."""
    for name in ("correlate", "correlate2"):
        current = getattr(multiarray, name)
        if name in _ORIGINAL and getattr(current, "__wrapped__", None) is _ORIGINAL[name]:
            continue
        _ORIGINAL[name] = current
        setattr(multiarray, name, _exact(current))


install()
