"""Rules that read a tracked series in row order: cumulative aggregates, forward/backward
fill and linear interpolation.

Each rule runs the real pandas method (values equal plain pandas) and then says, per output
row, which rows of the same series it was computed from. The rows are the series' own row
space, so the lineage is the series' lineage moved along those row pairs
(:meth:`~dslog_dagster.pandas.rows.RowMap.gather`):

* ``cumsum`` / ``cumprod`` (``skipna=True``): row ``k`` is contributed by the non-null cells
  of rows ``0..k`` and considered every cell of rows ``0..k``; a row whose result is null
  (its own cell is null) has no contributing cell. ``cummax`` / ``cummin``: the non-null
  cells of rows ``0..k`` equal to the result (every tied cell). The row pairs grow as
  ``n(n+1)/2``: a series longer than :data:`MAX_PREFIX_ROWS` is refused instead of filling
  memory.
* ``ffill`` / ``bfill``: a filled cell is contributed by the cell it was copied from (the
  last non-null cell before it / the next one after it); the null cell it replaced decided
  the value (considered). A cell that stays null has no lineage.
* ``interpolate()`` (``method="linear"``, pandas' defaults): a filled cell between two
  non-null cells is contributed by both (its value is on the line through them); a trailing
  filled cell (pandas repeats the last value) by the last non-null cell; the replaced null
  cell is considered. Leading nulls stay null. Other methods and options are refused.
"""

from typing import Any

import numpy as np

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.pandas.rows import I64
from dslog_dagster.pandas.rules import register
from dslog_dagster.pandas.series import TrackedSeries, refuse
from dslog_dagster.pandas.state import ColumnLineage, Pairs

__all__ = ["MAX_PREFIX_ROWS", "cumulative", "filled", "interpolated"]

MAX_PREFIX_ROWS = 8192
"""The longest series a cumulative aggregate is captured on: its row lineage has
``n(n+1)/2`` pairs (33.6M at this length, about 0.5 GB of row pairs)."""

_SUMS = {"cumsum", "cumprod"}
_PICKS = {"cummax", "cummin"}


def _moved(
    series: TrackedSeries, contrib: tuple[I64, I64], consid: tuple[I64, I64]
) -> ColumnLineage:
    """The series' lineage where output row ``out[i]`` takes row ``src[i]``'s cells:
    ``contrib`` pairs move contributing and considered lineage alike (a contributing cell is
    also considered); ``consid`` pairs move every pair as considered only."""
    st, lin, n = series.frame_state, series.lineage, len(series.plain)
    move_c = st.ctx.remap(lambda m: m.gather(contrib[0], contrib[1], n))
    move_d = st.ctx.remap(lambda m: m.gather(consid[0], consid[1], n))
    considered: Pairs = frozenset((move_c(s), c) for s, c in lin.consid)
    considered |= frozenset((move_d(s), c) for s, c in lin.full())
    return ColumnLineage(frozenset((move_c(s), c) for s, c in lin.contrib), considered)


def cumulative(series: TrackedSeries, func: str, skipna: bool = True, **kw: Any) -> TrackedSeries:
    """``series.cumsum()`` and its kin; see the module docstring."""
    op = f"Series.{func}"
    if kw or skipna is not True:
        refuse(op, f"options {sorted(kw) or ['skipna=False']}")
    plain = series.plain
    n = len(plain)
    if n > MAX_PREFIX_ROWS:
        msg = (
            f"`{op}` over {n:,} rows would record {n * (n + 1) // 2:,} row pairs (each row is "
            f"computed from every row before it); dslog captures it up to {MAX_PREFIX_ROWS:,} "
            "rows. Aggregate per group first (groupby(...).agg), or run this part in an "
            "untracked step."
        )
        raise UnsupportedFrameOperationError(msg)
    res = getattr(plain, func)()
    out = np.repeat(np.arange(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64))
    src = np.arange(out.size, dtype=np.int64) - np.repeat(
        (np.arange(n, dtype=np.int64) * (np.arange(n, dtype=np.int64) + 1)) // 2,
        np.arange(1, n + 1, dtype=np.int64),
    )
    notnull = ~np.asarray(plain.isna().to_numpy(), bool)
    computed = ~np.asarray(res.isna().to_numpy(), bool)
    keep = notnull[src] & computed[out]
    if func in _PICKS:
        keep &= np.asarray(plain.to_numpy()[src] == res.to_numpy()[out], bool)
    elif func not in _SUMS:
        refuse(op)
    # every cell of the prefix decided the value: considered, the kept ones contributed
    lin = _moved(series, (out[keep], src[keep]), (out, src))
    return TrackedSeries(res, lin, series.frame_state)


def _last_valid(notnull: np.ndarray, reverse: bool = False) -> I64:
    """Per row, the nearest non-null row at or before it (at or after it when ``reverse``);
    ``-1`` where there is none."""
    n = notnull.size
    idx = np.where(notnull, np.arange(n, dtype=np.int64), -1 if not reverse else n)
    if not reverse:
        return np.maximum.accumulate(idx) if n else idx
    nxt = np.minimum.accumulate(idx[::-1])[::-1] if n else idx
    return np.where(nxt >= n, -1, nxt).astype(np.int64)


def filled(series: TrackedSeries, direction: str, **kw: Any) -> TrackedSeries:
    """``series.ffill()`` / ``series.bfill()``; see the module docstring."""
    op = f"Series.{direction}"
    if kw:
        refuse(op, f"options {sorted(kw)}")
    plain = series.plain
    res = getattr(plain, direction)()
    notnull = ~np.asarray(plain.isna().to_numpy(), bool)
    source = _last_valid(notnull, reverse=direction == "bfill")
    rows = np.flatnonzero(source >= 0).astype(np.int64)
    gaps = rows[~notnull[rows]]  # filled: the null cell it replaced decided the value
    lin = _moved(series, (rows, source[rows]), (gaps, gaps))
    return TrackedSeries(res, lin, series.frame_state)


def interpolated(series: TrackedSeries, method: str = "linear", **kw: Any) -> TrackedSeries:
    """``series.interpolate()`` (linear, pandas' defaults); see the module docstring."""
    op = "Series.interpolate"
    if method != "linear" or kw:
        refuse(op, f"method={method!r}" if method != "linear" else f"options {sorted(kw)}")
    plain = series.plain
    res = plain.interpolate()
    notnull = ~np.asarray(plain.isna().to_numpy(), bool)
    computed = ~np.asarray(res.isna().to_numpy(), bool)
    before, after = _last_valid(notnull), _last_valid(notnull, reverse=True)
    n = notnull.size
    own = np.flatnonzero(notnull).astype(np.int64)
    gaps = np.flatnonzero(computed & ~notnull).astype(np.int64)  # filled by pandas
    if bool(np.any(before[gaps] < 0)):  # pandas' default never fills a leading null
        refuse(op, "a filled cell with no value before it (options dslog does not know)")
    inner = gaps[after[gaps] >= 0]
    out = np.concatenate([own, gaps, inner])
    src = np.concatenate([own, before[gaps], after[inner]])
    order = np.argsort(out * max(n, 1) + src, kind="stable")
    lin = _moved(series, (out[order], src[order]), (gaps, gaps))
    return TrackedSeries(res, lin, series.frame_state)


def _entry(kind: str) -> Any:
    """The rule ``TrackedSeries.<kind>`` calls."""

    def run(series: TrackedSeries, *args: Any, **kw: Any) -> TrackedSeries:
        if kind == "interpolate":
            return interpolated(series, *args, **kw)
        if args:
            refuse(f"Series.{kind}", f"positional arguments {args!r}")
        if kind in ("ffill", "bfill"):
            return filled(series, kind, **kw)
        return cumulative(series, kind, **kw)

    return run


for _name in (*sorted(_SUMS | _PICKS), "ffill", "bfill", "interpolate"):
    register(_name, _entry(_name))
