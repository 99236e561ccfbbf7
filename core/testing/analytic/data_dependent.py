"""Analytic lineage of data-dependent operations: sort, filter, binning, convolution,
partition, quantiles and unique.

Which input cell feeds which output cell depends on the values here, so a generator takes
the data (or the mask, or the bins) and replays the operation's choice with NumPy.
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.relation import I64, LineageRelation, Shape, as_shape
from dslog_dagster.core.testing.analytic.indexing import axes as _axes
from dslog_dagster.core.testing.analytic.indexing import cells as _cells
from dslog_dagster.core.testing.analytic.indexing import from_flat_input as _from_flat_input
from dslog_dagster.core.testing.analytic.indexing import relation as _relation
from dslog_dagster.core.testing.analytic.indexing import unravel as _unravel
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError

# ---------------------------------------------------------------------------------------------
# Data-dependent operations: sort, filter, binning
# ---------------------------------------------------------------------------------------------


def sort(x: npt.ArrayLike, axis: int | None = -1) -> LineageRelation:
    """Lineage of ``np.sort(x, axis)``: each output cell comes from the cell it was moved from.

    Ties are broken like a stable sort (``np.argsort(kind="stable")``), which is what a
    lineage-tracking sort of equal values records when it keeps the original order.

    Args:
        x: the data being sorted (only its values' order matters).
        axis: axis to sort along; ``None`` sorts the flattened array into a 1-D output.

    Returns:
        The relation (one pair per cell, a permutation).
    """
    arr = np.asarray(x)
    sh: Shape = tuple(int(d) for d in arr.shape)
    if axis is None:
        order = np.argsort(arr.reshape(-1), kind="stable").astype(np.int64)
        outs = np.arange(order.size, dtype=np.int64)[None]
        return _relation((order.size,), sh, outs, _unravel(order, sh))
    ax = _axes(axis, len(sh), "sort")[0]
    order = np.argsort(arr, axis=ax, kind="stable").astype(np.int64)
    outs = _cells(sh)
    ins = outs.copy()
    ins[ax] = order.reshape(-1)
    return _relation(sh, sh, outs, ins)


def filter_mask(mask: npt.ArrayLike) -> LineageRelation:
    """Lineage of ``out[mask] = x[mask]`` (e.g. ``out[x < t] = x[x < t]``) into a fresh array.

    Output cells where ``mask`` is true come from the same input cell; the others were never
    written from ``x`` and have no lineage.

    Args:
        mask: boolean array of the input's (and output's) shape.

    Returns:
        The relation (one pair per true cell).
    """
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        msg = f"filter_mask() takes a boolean mask, got dtype `{m.dtype}`."
        raise UnsupportedArrayError(msg)
    sh: Shape = tuple(int(d) for d in m.shape)
    if not sh:
        return LineageRelation.from_columns((), (), [], [], n=int(m))
    cells = np.stack(np.nonzero(m)).astype(np.int64)
    return _relation(sh, sh, cells, cells.copy())


def binning(bins: npt.ArrayLike, n_bins: int | None = None) -> LineageRelation:
    """Lineage of a histogram-style aggregation ``out[bin] = agg(x[bins == bin])``.

    Output cell ``bin`` (a 1-D array of ``n_bins`` cells) depends on every input cell assigned
    to that bin. Negative bin numbers mean "dropped" (no lineage), like values outside a
    histogram's range.

    Args:
        bins: integer bin assignment, one per input cell (any shape; the input's shape).
        n_bins: number of output cells; defaults to ``bins.max() + 1``.

    Returns:
        The relation (one pair per binned input cell).
    """
    b = np.asarray(bins)
    if not np.issubdtype(b.dtype, np.integer):
        msg = f"binning() takes integer bin numbers, got dtype `{b.dtype}`."
        raise UnsupportedArrayError(msg)
    sh: Shape = tuple(int(d) for d in b.shape)
    if n_bins is None:
        n_bins = int(b.max()) + 1 if b.size else 0
    if b.size and int(b.max()) >= n_bins:
        msg = f"binning(): bin {int(b.max())} is out of range for n_bins={n_bins}."
        raise InvalidRelationError(msg)
    keep = b.reshape(-1) >= 0
    flat = np.flatnonzero(keep)
    outs = b.reshape(-1)[keep].astype(np.int64)[None]
    return _relation((n_bins,), sh, outs, _unravel(flat.astype(np.int64), sh))


def convolve_same(
    shape: Sequence[int] | int, kernel_shape: Sequence[int] | int = (3, 3)
) -> LineageRelation:
    """Lineage of a zero-padded ``'same'`` convolution/correlation with a dense odd kernel.

    ``out[b] ← x[b + d]`` for every offset ``d`` with ``|d_k| ≤ kernel_k // 2`` that stays
    inside the array (zero padding contributes no input cells). Works for any rank; the
    default is the 3×3 filter of the papers' image pipelines.

    Args:
        shape: input (and output) shape.
        kernel_shape: kernel extent per axis; all odd.

    Returns:
        The relation (about ``size · kernel.size`` pairs).
    """
    sh = as_shape(shape, "Input")
    ks = as_shape(kernel_shape, "Kernel")
    if len(ks) != len(sh) or any(k % 2 == 0 for k in ks):
        msg = f"convolve_same(): kernel {ks} must have odd extents and the rank of {sh}."
        raise InvalidRelationError(msg)
    outs = _cells(sh)  # (l, N)
    offs = _cells(ks) - (np.asarray(ks, dtype=np.int64) // 2)[:, None]  # (l, K)
    ins = outs[:, :, None] + offs[:, None, :]  # (l, N, K)
    ok = np.ones(ins.shape[1:], dtype=bool)
    for k, extent in enumerate(sh):
        ok &= (ins[k] >= 0) & (ins[k] < extent)
    o = np.broadcast_to(outs[:, :, None], ins.shape)[:, ok]
    return _relation(sh, sh, np.ascontiguousarray(o), np.ascontiguousarray(ins[:, ok]))


# ---------------------------------------------------------------------------------------------
# Data-dependent selections: partition, quantile/percentile/median, unique
# ---------------------------------------------------------------------------------------------


def _lane_view(x: npt.ArrayLike, axis: int | None, what: str) -> tuple[np.ndarray, Shape, int]:
    """``(data, original shape, axis)``; ``axis=None`` flattens the data (axis 0 of 1-D)."""
    arr = np.asarray(x)
    sh: Shape = tuple(int(d) for d in arr.shape)
    if axis is None:
        return arr.reshape(-1), sh, 0
    if not sh:
        msg = f"{what}: a 0-d array has no axis {axis}."
        raise InvalidRelationError(msg)
    return arr, sh, _axes(axis, len(sh), what)[0]


def _matching_permutation(x: np.ndarray, y: np.ndarray, ax: int, orig: Shape) -> LineageRelation:
    """Lineage of a per-lane rearrangement ``y`` of ``x`` along ``ax``, found by value.

    In every lane the ``r``-th smallest output cell comes from the ``r``-th smallest input
    cell, both ranked by a stable argsort: each output cell gets the input cell holding its
    value, and equal values are matched in index order (the stable-sort convention of
    :func:`sort`). Exact for any rearrangement, whatever selection algorithm produced it.
    """
    xo = np.argsort(x, axis=ax, kind="stable").astype(np.int64)
    yo = np.argsort(y, axis=ax, kind="stable").astype(np.int64)
    sh: Shape = tuple(int(d) for d in x.shape)
    base = _cells(sh)  # same cell enumeration for xo and yo
    outs, ins = base.copy(), base.copy()
    outs[ax] = yo.reshape(-1)
    ins[ax] = xo.reshape(-1)
    rel = _relation(sh, sh, outs, ins)
    return _from_flat_input(rel, orig)


def partition(x: npt.ArrayLike, kth: int | Sequence[int], axis: int | None = -1) -> LineageRelation:
    """Lineage of ``np.partition(x, kth, axis)``.

    The output is a rearrangement of each lane whose exact order is up to NumPy's introselect,
    so the lineage is read off the real result: NumPy's output is computed here and matched to
    the input by value (see :func:`_matching_permutation`; ties are matched in index order).

    Args:
        x: the data.
        kth: element index (or indices) to partition by.
        axis: the axis; ``None`` flattens first (1-D output).

    Returns:
        The relation (a permutation within each lane).
    """
    data, orig, ax = _lane_view(x, axis, "partition")
    try:
        y = np.partition(data, kth, axis=ax)
    except ValueError as e:
        msg = f"partition(): kth={kth!r} is invalid for axis {ax} of {data.shape}: {e}"
        raise InvalidRelationError(msg) from e
    return _matching_permutation(data, y, ax, orig)


def _picked(
    x: npt.ArrayLike, axis: int | None, positions: Sequence[int] | I64, what: str
) -> LineageRelation:
    """``out[lane] ← in[lane, order[p]]`` for each sorted position ``p`` in ``positions``."""
    data, orig, ax = _lane_view(x, axis, what)
    if np.issubdtype(data.dtype, np.inexact) and np.isnan(data).any():
        msg = (
            f"{what}: the data contains NaN; NumPy then returns NaN from the NaN cells, not "
            "from sorted positions, and this generator does not model that."
        )
        raise UnsupportedArrayError(msg)
    order = np.argsort(data, axis=ax, kind="stable").astype(np.int64)
    sh: Shape = tuple(int(d) for d in data.shape)
    out_shape = sh[:ax] + sh[ax + 1 :]
    lanes = _cells(out_shape)  # (l, L)
    pos = np.unique(np.asarray(positions, dtype=np.int64))
    picked = np.take(order, pos, axis=ax)  # lane shape with `len(pos)` on ax
    picked = np.moveaxis(picked, ax, -1).reshape(-1, pos.size)  # (L, P), lanes in C order
    outs = np.repeat(lanes, pos.size, axis=1)
    ins = np.insert(outs, ax, picked.reshape(-1), axis=0)
    rel = _relation(out_shape, sh, outs, ins, picked.size)
    return _from_flat_input(rel, orig)


def quantile(x: npt.ArrayLike, q: float, axis: int | None = None) -> LineageRelation:
    """Lineage of ``np.quantile(x, q, axis)`` with the default ``method="linear"``.

    NumPy sorts each lane (length ``n``), takes the virtual index ``v = (n - 1) q`` and
    interpolates between sorted positions ``⌊v⌋`` and ``⌊v⌋ + 1`` — it reads both even when
    the weight of the second is 0; for ``v ≥ n - 1`` both are the last position. The lineage is
    the input cells at those sorted positions (ranked by a stable argsort: among equal values
    the one with the lower index counts as smaller). Output: ``x``'s shape without ``axis``
    (``()`` for ``axis=None``).

    Args:
        x: the data (NaN-free).
        q: the quantile, a scalar in ``[0, 1]``.
        axis: the axis; ``None`` for the flattened array.

    Raises:
        InvalidRelationError: ``q`` outside ``[0, 1]`` or an empty lane.
        UnsupportedArrayError: NaN in the data.
    """
    qf = float(q)
    if not 0.0 <= qf <= 1.0:
        msg = f"quantile(): q={q!r} must be in [0, 1]."
        raise InvalidRelationError(msg)
    data, _, ax = _lane_view(x, axis, "quantile")
    n = data.shape[ax]
    if n == 0:
        msg = "quantile(): empty lane."
        raise InvalidRelationError(msg)
    v = (n - 1) * np.float64(qf)
    prev = int(np.floor(v))
    positions = [n - 1] if v >= n - 1 else [prev, prev + 1]
    return _picked(x, axis, positions, "quantile")


def percentile(x: npt.ArrayLike, q: float, axis: int | None = None) -> LineageRelation:
    """Lineage of ``np.percentile(x, q, axis)``: :func:`quantile` at ``q / 100``.

    The division is done as NumPy does it (``np.true_divide(q, 100)``), so the virtual index
    and hence the picked cells agree with NumPy bit for bit.
    """
    return quantile(x, float(np.true_divide(q, 100)), axis)


def median(x: npt.ArrayLike, axis: int | None = None) -> LineageRelation:
    """Lineage of ``np.median(x, axis)``: the middle cell, or the two middle cells.

    Unlike ``quantile(x, 0.5)`` NumPy's median averages only ``part[n//2]`` (odd ``n``) or
    ``part[n//2 - 1 : n//2 + 1]`` (even ``n``) of the partitioned lane, so an odd lane has one
    lineage cell. Ranking and tie-breaking as in :func:`quantile`.
    """
    data, _, ax = _lane_view(x, axis, "median")
    n = data.shape[ax]
    if n == 0:
        msg = "median(): empty lane."
        raise InvalidRelationError(msg)
    positions = [n // 2] if n % 2 else [n // 2 - 1, n // 2]
    return _picked(x, axis, positions, "median")


def unique(x: npt.ArrayLike) -> LineageRelation:
    """Lineage of ``np.unique(x)``: output ``k`` ← every input cell equal to ``unique[k]``.

    NumPy flattens, sorts and de-duplicates; each distinct value is computed from all of its
    occurrences (NaNs count as one value, NumPy's default ``equal_nan=True``). The output is
    1-D with one cell per distinct value.

    Args:
        x: the data.

    Returns:
        The relation (one pair per input cell).
    """
    arr = np.asarray(x)
    sh: Shape = tuple(int(d) for d in arr.shape)
    vals, inverse = np.unique(arr.reshape(-1), return_inverse=True)
    flat = np.arange(arr.size, dtype=np.int64)
    return _relation(
        (int(vals.size),), sh, inverse.reshape(-1).astype(np.int64)[None], _unravel(flat, sh)
    )
