"""Synthetic-input probes: data-dependent lineage shows up before a view is confirmed.

Before a view is confirmed it is probed with synthetic inputs of the same shape (ascending and
descending ramps, opposite ramps on different inputs, a sign-crossing ramp, random values,
large positive and negative values, a ramp a million times wider than the data, the unit
interval, values repeated from three levels, a constant, zeros): data-dependent lineage (sort,
filters, picks by comparison, ``where`` on a data mask) differs between them even when the
user's own captures happened to agree. A view whose lineage only differs on NaN inputs is
confirmed as *finite-only* and not served for inputs with NaNs; likewise a view whose lineage
changes only where an input is exactly 0 (``sinc``) is *nonzero-only*.
"""

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core import progress
from dslog_dagster.core.capture import Mode, capture_inputs
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.reuse.views import TableKey, compress_all, only_parts, table_sets_equal

__all__ = ["Prober", "probe_inputs"]

F64 = npt.NDArray[np.float64]


def probe_inputs(inputs: Sequence[F64], rng: np.random.Generator) -> list[tuple[str, list[F64]]]:
    """Synthetic inputs of the same shapes that expose data-dependent lineage."""
    finite = [a[np.isfinite(a)] for a in inputs]
    vals = np.concatenate([f.reshape(-1) for f in finite]) if finite else np.zeros(0)
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (-1.0, 1.0)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    wide = max(abs(lo), abs(hi), 1.0) * 2.0
    levels = np.array([lo, (lo + hi) / 2.0, hi])

    def ramp(a: F64, up: bool, a_lo: float, a_hi: float) -> F64:
        r = np.linspace(a_lo, a_hi, a.size) if a.size else np.zeros(0)
        r = r if up else r[::-1]
        return np.array(r.reshape(a.shape), dtype=np.float64, order="C")  # keeps 0-d

    probes = [
        ("ascending", [ramp(a, True, lo, hi) for a in inputs]),
        ("descending", [ramp(a, False, lo, hi) for a in inputs]),
        ("opposite", [ramp(a, k % 2 == 0, lo, hi) for k, a in enumerate(inputs)]),
        ("opposite-swapped", [ramp(a, k % 2 == 1, lo, hi) for k, a in enumerate(inputs)]),
        ("sign-crossing", [ramp(a, k % 2 == 0, -wide, wide) for k, a in enumerate(inputs)]),
        ("random", [rng.uniform(lo, hi, size=a.shape) for a in inputs]),
        # Thresholds outside the data's range (x > 0.5 on negative data, a single cell):
        # large values of either sign, the unit interval and zeros.
        ("positive", [ramp(a, k % 2 == 0, wide / 2, wide) for k, a in enumerate(inputs)]),
        ("negative", [ramp(a, k % 2 == 1, -wide, -wide / 2) for k, a in enumerate(inputs)]),
        ("unit", [ramp(a, k % 2 == 0, 0.0, 1.0) for k, a in enumerate(inputs)]),
        ("huge", [ramp(a, k % 2 == 0, -1e6 * wide, 1e6 * wide) for k, a in enumerate(inputs)]),
        # Repeated values: picks and sorts resolve ties by position, and the number of
        # distinct values (``unique``) decides the output shape.
        ("ties", [np.asarray(rng.choice(levels, size=a.shape), dtype=np.float64) for a in inputs]),
        ("constant", [np.full(a.shape, hi, dtype=np.float64) for a in inputs]),
    ]
    # Exact zeros are probed separately (lineage that changes only at 0, as sinc's, is
    # served for zero-free inputs only), so the generic probes avoid them.
    tiny = wide * 1e-3
    return [
        (n, [np.where(x == 0.0, tiny, np.asarray(x, dtype=np.float64)) for x in p])
        for n, p in probes
    ]


def _special_probe(inputs: Sequence[F64], rng: np.random.Generator, value: float) -> list[F64]:
    """The inputs with ``value`` (NaN, 0) at their first and at a random cell."""
    out = []
    for a in inputs:
        b = np.array(a, dtype=np.float64, copy=True)
        if b.size:
            flat = b.reshape(-1)
            flat[0] = value
            flat[int(rng.integers(0, b.size))] = value
        out.append(b)
    return out


class Prober:
    """The synthetic-input probes of one captured call, run at most once each.

    One capture may confirm several views (dim and gen; in considered mode also the
    considered-only family, which compares a subset of the relations), so each probe input is
    captured once and its tables are compared with each view's ``expected`` on that view's
    relations. ``defer``: the probes are captured as the call was
    (:attr:`~dslog_dagster.core.capture.Capture.defer`), so a function that refuses deferred
    inputs is probed, not found inconclusive on every probe.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        inputs: Sequence[F64],
        kwargs: Mapping[str, Any],
        mode: Mode,
        rng: np.random.Generator,
        *,
        defer: bool = True,
    ) -> None:
        self.func, self.inputs, self.kwargs, self.mode, self.rng = func, inputs, kwargs, mode, rng
        self.defer = defer
        self._data: dict[str, list[F64]] = {}
        self._tables: dict[str, dict[TableKey, LineageTable] | None] = {}
        self._generic: list[str] | None = None

    def _names(self) -> list[str]:
        if self._generic is None:
            probes = probe_inputs(self.inputs, self.rng)
            self._data.update(probes)
            self._generic = [n for n, _ in probes]
            if any(a.size for a in self.inputs):
                self._data["nan"] = _special_probe(self.inputs, self.rng, np.nan)
                self._data["zero"] = _special_probe(self.inputs, self.rng, 0.0)
                self._data["zeros"] = [np.zeros(a.shape) for a in self.inputs]
        return self._generic

    def _run(self, name: str) -> dict[TableKey, LineageTable] | None:
        if name not in self._tables:
            try:
                # quiet: a probe's phases would repeat the step's own lines in its run log
                with warnings.catch_warnings(), np.errstate(all="ignore"), progress.silenced():
                    warnings.simplefilter("ignore")
                    r = capture_inputs(
                        self.func,
                        self._data[name],
                        self.mode,
                        "raise",
                        self.kwargs,
                        defer=self.defer,
                    )
                self._tables[name] = compress_all(
                    r.relations, r.considered, r.tables, r.considered_tables
                )
            except Exception:
                self._tables[name] = None  # inconclusive: the function rejects this data
        return self._tables[name]

    def check(
        self, expected: Mapping[TableKey, LineageTable], parts: Sequence[int]
    ) -> tuple[bool, bool, bool]:
        """(lineage equal on every generic probe, also with NaNs, also with zeros), compared
        on the relations ``parts`` only."""

        def same(name: str) -> bool | None:
            got = self._run(name)
            if got is None:
                return None
            return bool(table_sets_equal(only_parts(got, parts), expected))

        for name in self._names():
            if same(name) is False:
                return False, False, False
        if not any(a.size for a in self.inputs):
            return True, True, True
        nan_ok = same("nan") is not False
        zero_ok = all(same(n) is not False for n in ("zero", "zeros"))
        return True, nan_ok, zero_ok
