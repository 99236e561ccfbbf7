"""``series.rolling(window)`` on a tracked series: each row from the cells of its window.

Row ``k``'s window is rows ``k - window + 1 .. k`` (a fixed integer window, trailing, as
pandas' default). The real ``rolling(...).<agg>()`` makes the values; the lineage of row ``k``
follows the group-by rule over its window:

* *considered*: every cell of the window;
* *contributing*: ``sum``/``mean``/``median``/``std``/``var`` — the window's non-null cells;
  ``min``/``max`` — the cells equal to the result (every tied cell); ``count`` — none; a row
  whose result is null (fewer than ``min_periods`` values) — none.

Pairs grow as rows × window.
"""

from typing import Any

import numpy as np

from dslog_dagster.pandas.rules import register
from dslog_dagster.pandas.series import TrackedSeries, refuse
from dslog_dagster.pandas.state import ColumnLineage

__all__ = ["TrackedRolling"]

_NON_NULL = {"sum", "mean", "median", "std", "var"}
_PICK = {"min", "max"}
FUNCS = _NON_NULL | _PICK | {"count"}


class TrackedRolling:
    """``series.rolling(window, min_periods=)`` of a tracked series."""

    def __init__(
        self, series: TrackedSeries, window: Any, min_periods: Any = None, **kw: Any
    ) -> None:
        if kw or not isinstance(window, int) or window < 1:
            refuse("Series.rolling", "only a fixed integer window (no center=, win_type=, on=)")
        self._s, self._w, self._min = series, window, min_periods

    def _agg(self, func: str) -> TrackedSeries:
        plain = self._s.plain
        res = getattr(plain.rolling(self._w, min_periods=self._min), func)()
        n, w = len(plain), self._w
        out = np.repeat(np.arange(n, dtype=np.int64), w)
        src = out - w + 1 + np.tile(np.arange(w, dtype=np.int64), n)
        inside = src >= 0
        out, src = out[inside], src[inside]
        vals = plain.to_numpy()
        result = res.to_numpy()
        notnull = np.asarray(~plain.isna().to_numpy(), bool)
        computed = np.asarray(~res.isna().to_numpy(), bool)
        if func in _NON_NULL:
            keep = notnull[src] & computed[out]
        elif func in _PICK:
            keep = notnull[src] & computed[out] & (vals[src] == result[out])
        else:
            keep = np.zeros(out.size, bool)
        st = self._s.frame_state
        every = st.ctx.remap(lambda m: m.gather(out, src, n))
        picked = st.ctx.remap(lambda m: m.gather(out[keep], src[keep], n))
        lin = self._s.lineage
        new = ColumnLineage(
            frozenset((picked(s), c) for s, c in lin.contrib),
            frozenset((every(s), c) for s, c in lin.full()),
        )
        return TrackedSeries(res, new, st)

    def sum(self) -> TrackedSeries:
        return self._agg("sum")

    def mean(self) -> TrackedSeries:
        return self._agg("mean")

    def median(self) -> TrackedSeries:
        return self._agg("median")

    def std(self) -> TrackedSeries:
        return self._agg("std")

    def var(self) -> TrackedSeries:
        return self._agg("var")

    def min(self) -> TrackedSeries:
        return self._agg("min")

    def max(self) -> TrackedSeries:
        return self._agg("max")

    def count(self) -> TrackedSeries:
        return self._agg("count")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(f"Rolling.{name}")


register("rolling", TrackedRolling)
