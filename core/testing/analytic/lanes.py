"""Analytic lineage of the along-one-axis operations of the ICDE random pipelines.

Cumulative operations, unwrap, diff, gradient, ediff1d, trapezoid, roll, delete and insert:
each maps output index ``i`` along the axis to a fixed set of input indices along the same
axis, the same in every lane (the other axes are copied).
"""

from collections.abc import Sequence

import numpy as np

from dslog_dagster.core.relation import I64, LineageRelation, Shape, as_shape
from dslog_dagster.core.testing.analytic.indexing import axes as _axes
from dslog_dagster.core.testing.analytic.indexing import cells as _cells
from dslog_dagster.core.testing.analytic.indexing import flat_or_axis as _flat_or_axis
from dslog_dagster.core.testing.analytic.indexing import from_flat_input as _from_flat_input
from dslog_dagster.core.testing.analytic.indexing import relation as _relation
from dslog_dagster.core.testing.analytic.indexing import unravel as _unravel
from dslog_dagster.core.testing.analytic.structured import sum_axis
from dslog_dagster.errors import InvalidRelationError

# ---------------------------------------------------------------------------------------------
# Along-one-axis operations of the ICDE random pipelines: cumulative ops, diff, trapezoid,
# unwrap, roll, delete, insert. Each maps output index ``i`` along the axis to a fixed set of
# input indices along the same axis, the same in every lane (the other axes are copied).
# ---------------------------------------------------------------------------------------------


def _lane_relation(
    in_shape: Shape, ax: int, out_extent: int, out_idx: I64, in_idx: I64
) -> LineageRelation:
    """Relation ``out[.., out_idx[t], ..] ← in[.., in_idx[t], ..]`` repeated in every lane.

    ``out_idx`` / ``in_idx`` are equal-length 1-D int64 arrays of positions along axis ``ax``;
    the output has extent ``out_extent`` there and the input's extents elsewhere.
    """
    rest_shape = in_shape[:ax] + in_shape[ax + 1 :]
    rest = _cells(rest_shape)
    lanes, t = rest.shape[1], out_idx.size
    rest_rep = np.repeat(rest, t, axis=1)
    outs = np.insert(rest_rep, ax, np.tile(out_idx, lanes), axis=0)
    ins = np.insert(rest_rep, ax, np.tile(in_idx, lanes), axis=0)
    out_shape = (*in_shape[:ax], out_extent, *in_shape[ax + 1 :])
    return _relation(out_shape, in_shape, outs, ins)


def cumulative(shape: Sequence[int] | int, axis: int | None = None) -> LineageRelation:
    """Lineage of ``np.cumsum`` / ``cumprod`` / ``nancumsum`` / ``nancumprod`` along ``axis``.

    ``out[i] = in[0] ∘ … ∘ in[i]`` along the axis, so ``out[i] ← in[0..i]`` (the nan-variants
    read the same cells; a NaN counts as the identity but is still read). ``axis=None`` works on
    the C-order flattened input and gives a 1-D output, like NumPy. ``S (S + 1) / 2`` pairs per
    lane of length ``S`` — quadratic, mind the size.

    Args:
        shape: input shape.
        axis: accumulation axis; ``None`` to flatten first.

    Returns:
        The relation.
    """
    orig, sh, ax = _flat_or_axis(shape, axis, "cumulative")
    i, j = np.tril_indices(sh[ax])
    rel = _lane_relation(sh, ax, sh[ax], i.astype(np.int64), j.astype(np.int64))
    return _from_flat_input(rel, orig)


def unwrap(shape: Sequence[int] | int, axis: int = -1) -> LineageRelation:
    """Lineage of ``np.unwrap(p, discont, axis, period=...)``: the prefix, as :func:`cumulative`.

    NumPy computes ``out[i] = p[i] + Σ_{j=1..i} corr(p[j] - p[j-1])`` where ``corr`` is a
    multiple of ``period`` (0 when the jump is below ``discont``). We define the lineage as the
    cells that formula *reads*: ``out[i] ← p[0..i]``, independent of the data, period and
    discont. A value-perturbation capture would find only ``p[i]`` (``corr`` is piecewise
    constant), a NaN-propagating one finds exactly this prefix (checked in the tests); the read
    set is the one that stays right whatever the values are.

    Args:
        shape: input shape.
        axis: the unwrapping axis (NumPy's default is the last).

    Returns:
        The relation.
    """
    return cumulative(shape, axis)


def diff(shape: Sequence[int] | int, n: int = 1, axis: int = -1) -> LineageRelation:
    """Lineage of ``np.diff(x, n, axis)``: ``out[i] ← in[i..i+n]`` along ``axis``.

    The ``n``-th difference is ``Σ_k (-1)^k C(n, k) in[i + n - k]``, so each output reads
    ``n + 1`` consecutive inputs; the output extent is ``max(S - n, 0)`` (empty, no pairs, when
    ``n ≥ S``). ``n = 0`` is the identity, as in NumPy.

    Args:
        shape: input shape (rank ≥ 1).
        n: order of the difference, ≥ 0.
        axis: differencing axis.

    Returns:
        The relation.
    """
    sh = as_shape(shape, "Input")
    if not sh:
        msg = "diff() needs an array of rank ≥ 1, got a 0-d shape."
        raise InvalidRelationError(msg)
    if n < 0:
        msg = f"diff(): order n={n} must be non-negative."
        raise InvalidRelationError(msg)
    ax = _axes(axis, len(sh), "diff")[0]
    m = max(sh[ax] - n, 0)
    out_idx = np.repeat(np.arange(m, dtype=np.int64), n + 1)
    in_idx = out_idx + np.tile(np.arange(n + 1, dtype=np.int64), m)
    return _lane_relation(sh, ax, m, out_idx, in_idx)


def gradient(
    shape: Sequence[int] | int,
    axis: int | Sequence[int] | None = None,
    edge_order: int = 1,
) -> tuple[LineageRelation, ...]:
    """Lineage of ``np.gradient(f, *spacings, axis=axis, edge_order=edge_order)``: one
    relation per differentiated axis (NumPy returns one array per axis).

    Why here: the annotator cannot run ``np.gradient`` (NumPy writes into a float64 output
    array, which would drop lineage, so the capture raises ``LineageLostError``), yet its
    lineage is pure arithmetic and data-independent, so it can be declared exactly. Along
    the axis (length ``S``): interior ``out[i] ← f[i-1], f[i+1]`` (central difference, the
    centre cell is not read); edges ``out[0] ← f[0], f[1]`` and ``out[S-1] ← f[S-2], f[S-1]``
    for ``edge_order=1``, three cells each (``f[0..2]``, ``f[S-3..S-1]``) for
    ``edge_order=2``. Spacings (scalars or coordinate arrays) are constants: they change the
    coefficients, never which cells are read (a zero coefficient still reads its cell, as the
    annotator's arithmetic does).

    Args:
        shape: shape of ``f`` (rank ≥ 1).
        axis: the axes to differentiate (``None``: every axis, in order).
        edge_order: 1 or 2.

    Returns:
        One relation per axis, each with the input's shape as output shape.

    Raises:
        InvalidRelationError: rank 0, a bad ``edge_order``, or an axis shorter than
            ``edge_order + 1`` (NumPy raises ``ValueError`` there).
    """
    sh = as_shape(shape, "Input")
    if not sh:
        msg = "gradient() needs an array of rank ≥ 1, got a 0-d shape."
        raise InvalidRelationError(msg)
    if edge_order not in (1, 2):
        msg = f"gradient(): edge_order must be 1 or 2, got {edge_order}."
        raise InvalidRelationError(msg)
    # NumPy returns the gradients in the order the axes are given, so no sorting here.
    raw = (axis,) if isinstance(axis, int | np.integer) else axis
    axes = (
        tuple(range(len(sh)))
        if raw is None
        else tuple(_axes(a, len(sh), "gradient")[0] for a in raw)
    )
    if len(set(axes)) != len(axes):
        msg = f"gradient(): repeated axis in {axis}."
        raise InvalidRelationError(msg)
    out = []
    for ax in axes:
        s = sh[ax]
        if s < edge_order + 1:
            msg = (
                f"gradient(): axis {ax} has {s} cells; edge_order={edge_order} needs at "
                f"least {edge_order + 1}."
            )
            raise InvalidRelationError(msg)
        inner = np.arange(1, s - 1, dtype=np.int64)
        edge = np.arange(edge_order + 1, dtype=np.int64)
        out_idx = np.concatenate(
            [np.zeros(edge.size, np.int64), np.repeat(inner, 2), np.full(edge.size, s - 1)]
        )
        in_idx = np.concatenate(
            [edge, np.stack([inner - 1, inner + 1], 1).reshape(-1), s - 1 - edge[::-1]]
        )
        out.append(_lane_relation(sh, ax, s, out_idx, in_idx))
    return tuple(out)


def ediff1d(shape: Sequence[int] | int) -> LineageRelation:
    """Lineage of ``np.ediff1d(x)``: ``diff`` of the flattened input, ``out[k] ← flat[k, k+1]``.

    Args:
        shape: input shape (flattened in C order, as NumPy does).

    Returns:
        The relation, 1-D output of ``max(size - 1, 0)`` cells.
    """
    sh = as_shape(shape, "Input")
    rel = diff((int(np.prod(sh, dtype=np.int64)),), 1, 0)
    return _from_flat_input(rel, sh)


def trapezoid(shape: Sequence[int] | int, axis: int = -1) -> LineageRelation:
    """Lineage of ``np.trapezoid(y, dx=..., axis=axis)`` (``np.trapz`` before NumPy 2.0).

    ``Σ_i dx (y[i] + y[i+1]) / 2`` reads every cell along the axis, so this is a reduction
    (:func:`sum_axis`) — except that an axis of extent 1 has no interval: NumPy returns ``0.0``
    computed from no cell at all, so those outputs have no lineage.

    Args:
        shape: input shape (rank ≥ 1).
        axis: integration axis.

    Returns:
        The relation (output shape: ``shape`` without ``axis``).
    """
    sh = as_shape(shape, "Input")
    ax = _axes(axis, len(sh), "trapezoid")[0]
    if sh[ax] >= 2:
        return sum_axis(sh, ax)
    out_shape = sh[:ax] + sh[ax + 1 :]
    none = np.zeros((len(out_shape), 0), dtype=np.int64)
    return _relation(out_shape, sh, none, np.zeros((len(sh), 0), dtype=np.int64), 0)


def roll(
    shape: Sequence[int] | int,
    shift: int | Sequence[int],
    axis: int | Sequence[int] | None = None,
) -> LineageRelation:
    """Lineage of ``np.roll(x, shift, axis)``: ``out[i] ← in[(i - shift) mod S]`` per axis.

    ``axis=None`` rolls the C-order flattened array and keeps the shape, like NumPy. Several
    axes take one shift each (an int shift applies to all of them); a repeated axis adds up its
    shifts, as NumPy does.

    Args:
        shape: input shape.
        shift: number of places to roll (negative rolls backwards).
        axis: axis or axes; ``None`` to roll the flattened array.

    Returns:
        The relation (one pair per cell).
    """
    sh = as_shape(shape, "Input")
    outs = _cells(sh)
    if axis is None:
        size = int(np.prod(sh, dtype=np.int64))
        flat = np.arange(size, dtype=np.int64)
        s = int(np.sum(shift))
        src = (flat - s) % size if size else flat
        return _relation(sh, sh, outs, _unravel(src, sh))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    shifts = np.broadcast_to(np.asarray(shift, dtype=np.int64), (len(axes),))
    ins = outs.copy()
    total: dict[int, int] = {}
    for a, s in zip(axes, shifts, strict=True):
        k = _axes(int(a), len(sh), "roll")[0]
        total[k] = total.get(k, 0) + int(s)
    for k, s in total.items():
        ins[k] = (outs[k] - s) % sh[k] if sh[k] else outs[k]
    return _relation(sh, sh, outs, ins)


def delete(
    shape: Sequence[int] | int, obj: int | slice | Sequence[int], axis: int | None = None
) -> LineageRelation:
    """Lineage of ``np.delete(x, obj, axis)``: the kept cells shift down to close the gap.

    Along ``axis`` output ``i`` comes from ``keep[i]`` where ``keep = np.delete(arange(S), obj)``
    (so ``obj`` accepts whatever NumPy accepts: an index, indices, a slice, a boolean mask).
    ``axis=None`` deletes from the flattened array (1-D output).

    Args:
        shape: input shape.
        obj: what to delete.
        axis: the axis; ``None`` to flatten first.

    Returns:
        The relation (one pair per kept cell).

    Raises:
        InvalidRelationError: ``obj`` is out of bounds for the axis.
    """
    orig, sh, ax = _flat_or_axis(shape, axis, "delete")
    try:
        keep = np.delete(np.arange(sh[ax], dtype=np.int64), obj)
    except IndexError as e:
        msg = f"delete(): {obj!r} is out of bounds for axis {ax} of extent {sh[ax]}: {e}"
        raise InvalidRelationError(msg) from e
    rel = _lane_relation(sh, ax, keep.size, np.arange(keep.size, dtype=np.int64), keep)
    return _from_flat_input(rel, orig)


def insert(
    shape: Sequence[int] | int, obj: int | Sequence[int], axis: int | None = None
) -> tuple[LineageRelation, LineageRelation]:
    """Lineage of ``np.insert(x, obj, values, axis)`` with a scalar (0-d) ``values``.

    The inserted slices come from ``values`` (broadcast: every inserted cell ← ``values[()]``),
    the others from ``x`` shifted up: with ``src = np.insert(arange(S), obj, -1)`` output ``i``
    along the axis comes from ``x[src[i]]`` when ``src[i] ≥ 0``. ``axis=None`` inserts into the
    flattened array (1-D output).

    Args:
        shape: shape of ``x``.
        obj: insertion index or indices (before which to insert), as NumPy accepts them.
        axis: the axis; ``None`` to flatten first.

    Returns:
        ``(R_x, R_values)``; ``R_values`` has input shape ``()``.

    Raises:
        InvalidRelationError: ``obj`` is out of bounds for the axis.
    """
    orig, sh, ax = _flat_or_axis(shape, axis, "insert")
    try:
        src = np.insert(np.arange(sh[ax], dtype=np.int64), obj, -1)
    except IndexError as e:
        msg = f"insert(): {obj!r} is out of bounds for axis {ax} of extent {sh[ax]}: {e}"
        raise InvalidRelationError(msg) from e
    pos = np.arange(src.size, dtype=np.int64)
    from_x = src >= 0
    r_x = _from_flat_input(_lane_relation(sh, ax, src.size, pos[from_x], src[from_x]), orig)
    r_v_full = _lane_relation(sh, ax, src.size, pos[~from_x], np.zeros((~from_x).sum(), np.int64))
    r_v = _relation(r_v_full.out_shape, (), r_v_full.out_cols, [], r_v_full.n)
    return r_x, r_v
