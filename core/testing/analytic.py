"""Exact lineage relations of common NumPy operations, generated analytically.

Each generator returns the lineage relation (:class:`~dslog_dagster.core.LineageRelation`)
that an exact cell-level capture of the named NumPy operation would record: pair
``output[b] ← input[a]`` for every input cell ``a`` that contributed to output cell ``b``.
Multi-input operations return one relation per input, in argument order.

Why this module exists: the compressor, the storage format and the query engine need ground
truth lineage at sizes (10^6–10^8 pairs) where running the annotator would dominate a
benchmark, and tests need a reference that does not depend on the annotator being right. The
relations are built with vectorised index arithmetic (``np.indices``, broadcasting,
``np.repeat``) — no Python loop over cells — and each is checked against a brute-force loop on
small shapes in ``tests/unit/test_analytic.py``.

All index columns are 0-based int64. Shapes are NumPy shapes; ``()`` is a 0-d array. This module
imports neither Dagster nor Spark.
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.relation import I64, LineageRelation, Shape, as_shape
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError

__all__ = [
    "add",
    "atleast_1d",
    "atleast_2d",
    "binning",
    "broadcast",
    "convolve_same",
    "cumulative",
    "delete",
    "diff",
    "dot",
    "ediff1d",
    "elementwise",
    "filter_mask",
    "flip",
    "gradient",
    "insert",
    "median",
    "moveaxis",
    "negative",
    "partition",
    "percentile",
    "quantile",
    "ravel",
    "repeat",
    "reshape",
    "roll",
    "rot90",
    "sort",
    "sum_axis",
    "swapaxes",
    "tile",
    "transpose",
    "trapezoid",
    "unique",
    "unwrap",
]


def _cells(shape: Shape) -> I64:
    """Every cell of ``shape`` in C order, as a ``(rank, size)`` int64 matrix."""
    if not shape:
        return np.zeros((0, 1), dtype=np.int64)
    return np.indices(shape, dtype=np.int64).reshape(len(shape), -1)


def _unravel(flat: I64, shape: Shape) -> I64:
    """Flat C-order indices as a ``(rank, n)`` int64 matrix (``(0, n)`` for a 0-d shape)."""
    if not shape:
        return np.zeros((0, flat.size), dtype=np.int64)
    return np.stack(np.unravel_index(flat, shape)).astype(np.int64, copy=False)


def _relation(
    out_shape: Shape,
    in_shape: Shape,
    out_cols: I64 | Sequence[I64],
    in_cols: I64 | Sequence[I64],
    n: int | None = None,
) -> LineageRelation:
    """Build a relation from ``(rank, n)`` matrices or lists of columns (``n`` if both empty)."""
    if n is None:
        n = out_cols.shape[1] if isinstance(out_cols, np.ndarray) else len(out_cols[0])
    return LineageRelation.from_columns(out_shape, in_shape, list(out_cols), list(in_cols), n=n)


def _axes(axis: int | Sequence[int] | None, rank: int, what: str) -> tuple[int, ...]:
    """Normalise an ``axis`` argument (``None`` = all axes) to sorted non-negative ints."""
    if axis is None:
        return tuple(range(rank))
    raw = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out: list[int] = []
    for ax in raw:
        a = int(ax)
        if not -rank <= a < rank:
            msg = f"{what}: axis {a} is out of range for an array of rank {rank}."
            raise InvalidRelationError(msg)
        out.append(a % rank)
    if len(set(out)) != len(out):
        msg = f"{what}: repeated axis in {raw}."
        raise InvalidRelationError(msg)
    return tuple(sorted(out))


# ---------------------------------------------------------------------------------------------
# Element-wise and broadcasting
# ---------------------------------------------------------------------------------------------


def elementwise(shape: Sequence[int] | int) -> LineageRelation:
    """Lineage of a unary element-wise operation (``np.negative``, ``np.exp``, ...).

    Every output cell comes from the input cell at the same index: the identity relation.

    Args:
        shape: shape of the input (and output) array, any rank.

    Returns:
        The identity relation over ``shape``.
    """
    sh = as_shape(shape, "Input")
    cells = _cells(sh)
    return _relation(sh, sh, cells, cells.copy())


def negative(shape: Sequence[int] | int) -> LineageRelation:
    """Lineage of ``np.negative(x)`` (and ``-x``): the identity, see :func:`elementwise`."""
    return elementwise(shape)


def broadcast(*shapes: Sequence[int] | int) -> tuple[LineageRelation, ...]:
    """Lineage of an n-ary element-wise operation whose inputs broadcast NumPy-style.

    The output has shape ``np.broadcast_shapes(*shapes)``. An input of rank ``m`` is aligned
    with the trailing ``m`` output axes; along an axis where the input has extent 1 (stretched)
    every output index reads input index 0, elsewhere the index is copied. Output axes the
    input lacks are free. So each output cell has exactly one lineage cell in each input.

    Args:
        *shapes: the input shapes, in argument order.

    Returns:
        One relation per input, in argument order.

    Raises:
        InvalidRelationError: the shapes do not broadcast together.
    """
    shs = [as_shape(s, "Input") for s in shapes]
    try:
        out_shape: Shape = tuple(int(d) for d in np.broadcast_shapes(*shs))
    except ValueError as e:
        msg = f"Shapes {shs} do not broadcast together: {e}"
        raise InvalidRelationError(msg) from e
    out = _cells(out_shape)
    rank = len(out_shape)
    rels = []
    for sh in shs:
        offset = rank - len(sh)
        ins = np.empty((len(sh), out.shape[1]), dtype=np.int64)
        for k, extent in enumerate(sh):
            if extent == 1:
                ins[k] = 0
            else:
                ins[k] = out[offset + k]
        rels.append(_relation(out_shape, sh, out, ins))
    return tuple(rels)


def add(
    a_shape: Sequence[int] | int, b_shape: Sequence[int] | int
) -> tuple[LineageRelation, LineageRelation]:
    """Lineage of ``a + b`` with NumPy broadcasting, one relation per input.

    Args:
        a_shape: shape of the first operand.
        b_shape: shape of the second operand.

    Returns:
        ``(R_a, R_b)``; see :func:`broadcast` for the rule.
    """
    ra, rb = broadcast(a_shape, b_shape)
    return ra, rb


# ---------------------------------------------------------------------------------------------
# Reductions and matrix products
# ---------------------------------------------------------------------------------------------


def sum_axis(
    shape: Sequence[int] | int,
    axis: int | Sequence[int] | None = None,
    *,
    keepdims: bool = False,
) -> LineageRelation:
    """Lineage of ``x.sum(axis, keepdims=keepdims)`` (any reduction: mean, max, prod, ...).

    Each output cell depends on every input cell that agrees with it on the kept axes, so the
    relation has exactly one pair per input cell: its output index is the input index with the
    reduced axes dropped (or set to 0 with ``keepdims``). ``axis=None`` reduces everything to a
    0-d output (shape ``()``, or all ones with ``keepdims``).

    Args:
        shape: input shape.
        axis: axis or axes to reduce, negative allowed; ``None`` for all.
        keepdims: keep reduced axes as extent-1 axes, like NumPy.

    Returns:
        The relation (input size pairs).
    """
    sh = as_shape(shape, "Input")
    axes = _axes(axis, len(sh), "sum_axis")
    ins = _cells(sh)
    if keepdims:
        out_shape = tuple(1 if k in axes else d for k, d in enumerate(sh))
        outs = ins.copy()
        outs[list(axes)] = 0
    else:
        out_shape = tuple(d for k, d in enumerate(sh) if k not in axes)
        keep = [k for k in range(len(sh)) if k not in axes]
        outs = ins[keep]
    return _relation(out_shape, sh, outs, ins)


def dot(
    a_shape: Sequence[int] | int, b_shape: Sequence[int] | int
) -> tuple[LineageRelation, LineageRelation]:
    """Lineage of ``np.dot(a, b)`` / ``a @ b`` for 1-D and 2-D operands.

    ``out[i, j] = Σ_k a[i, k] · b[k, j]``, so ``out[i, j]`` depends on the whole row ``a[i, :]``
    and the whole column ``b[:, j]``. A 1-D ``b`` is a column vector (``out[i] ← a[i, k], b[k]``),
    a 1-D ``a`` a row vector; two 1-D operands give a 0-d output. Each relation has
    ``out.size · K`` pairs (``n³`` for square matrices — mind the memory).

    Args:
        a_shape: shape of ``a`` (rank 1 or 2).
        b_shape: shape of ``b`` (rank 1 or 2).

    Returns:
        ``(R_a, R_b)``.

    Raises:
        UnsupportedArrayError: an operand of rank other than 1 or 2.
        InvalidRelationError: the contracted extents differ.
    """
    ash = as_shape(a_shape, "First operand")
    bsh = as_shape(b_shape, "Second operand")
    if len(ash) not in (1, 2) or len(bsh) not in (1, 2):
        msg = f"dot() lineage supports 1-D and 2-D operands, got shapes {ash} and {bsh}."
        raise UnsupportedArrayError(msg)
    ka = ash[-1]
    kb = bsh[0]
    if ka != kb:
        msg = f"dot(): contracted extents differ ({ash} · {bsh})."
        raise InvalidRelationError(msg)
    n = ash[0] if len(ash) == 2 else 1
    p = bsh[1] if len(bsh) == 2 else 1
    i, j, k = np.indices((n, p, ka), dtype=np.int64).reshape(3, -1)
    # Row views of one index grid: from_columns stacks them once, no intermediate copies.
    outs = ([i] if len(ash) == 2 else []) + ([j] if len(bsh) == 2 else [])
    out_shape = tuple(d for d, keep in ((n, len(ash) == 2), (p, len(bsh) == 2)) if keep)
    a_in = [i, k] if len(ash) == 2 else [k]
    b_in = [k, j] if len(bsh) == 2 else [k]
    return _relation(out_shape, ash, outs, a_in, k.size), _relation(
        out_shape, bsh, outs, b_in, k.size
    )


# ---------------------------------------------------------------------------------------------
# Reshuffles: tile, transpose, flip, rot90, repeat
# ---------------------------------------------------------------------------------------------


def tile(shape: Sequence[int] | int, reps: int | Sequence[int]) -> LineageRelation:
    """Lineage of ``np.tile(x, reps)``.

    As in NumPy, the shorter of ``shape`` and ``reps`` is padded with leading ones. Output cell
    ``b`` comes from ``a_k = b_{k+d} mod shape_k`` (``d`` = number of axes NumPy prepended).

    Args:
        shape: input shape.
        reps: repetitions per axis (an int repeats the last axis).

    Returns:
        The relation (one pair per output cell).
    """
    sh = as_shape(shape, "Input")
    rp = as_shape(reps, "Repetitions")
    rank = max(len(sh), len(rp))
    padded = (1,) * (rank - len(sh)) + sh
    rp = (1,) * (rank - len(rp)) + rp
    out_shape = tuple(s * r for s, r in zip(padded, rp, strict=True))
    outs = _cells(out_shape)
    d = rank - len(sh)
    ins = np.empty((len(sh), outs.shape[1]), dtype=np.int64)
    for k, extent in enumerate(sh):
        ins[k] = outs[d + k] % extent if extent else 0
    return _relation(out_shape, sh, outs, ins)


def transpose(shape: Sequence[int] | int, axes: Sequence[int] | None = None) -> LineageRelation:
    """Lineage of ``np.transpose(x, axes)``: ``out[b] ← x[a]`` with ``b_j = a_{axes[j]}``.

    Args:
        shape: input shape.
        axes: permutation of the axes; ``None`` reverses them, as in NumPy.

    Returns:
        The relation (one pair per cell).
    """
    sh = as_shape(shape, "Input")
    perm = tuple(reversed(range(len(sh)))) if axes is None else tuple(int(a) for a in axes)
    if sorted(a % len(sh) for a in perm) != list(range(len(sh))) or len(perm) != len(sh):
        msg = f"transpose(): `{axes}` is not a permutation of the axes of shape {sh}."
        raise InvalidRelationError(msg)
    perm = tuple(a % len(sh) for a in perm)
    ins = _cells(sh)
    return _relation(tuple(sh[a] for a in perm), sh, ins[list(perm)], ins)


def flip(shape: Sequence[int] | int, axis: int | Sequence[int] | None = None) -> LineageRelation:
    """Lineage of ``np.flip(x, axis)``: ``a_k = shape_k - 1 - b_k`` on flipped axes.

    Args:
        shape: input shape.
        axis: axis or axes to reverse; ``None`` for all.

    Returns:
        The relation (one pair per cell).
    """
    sh = as_shape(shape, "Input")
    axes = _axes(axis, len(sh), "flip")
    outs = _cells(sh)
    ins = outs.copy()
    for k in axes:
        ins[k] = sh[k] - 1 - outs[k]
    return _relation(sh, sh, outs, ins)


def rot90(
    shape: Sequence[int] | int, k: int = 1, axes: tuple[int, int] = (0, 1)
) -> LineageRelation:
    """Lineage of ``np.rot90(x, k, axes)`` (rotation from ``axes[0]`` towards ``axes[1]``).

    With ``p, q = axes`` and ``S = shape``:

    * ``k ≡ 1``: output swaps extents ``p, q``; ``a_p = b_q``, ``a_q = S_q - 1 - b_p``;
    * ``k ≡ 2``: ``a_p = S_p - 1 - b_p``, ``a_q = S_q - 1 - b_q``;
    * ``k ≡ 3``: output swaps extents; ``a_p = S_p - 1 - b_q``, ``a_q = b_p``;
    * ``k ≡ 0``: identity.

    Other axes are copied. (Derived from NumPy's own definition in terms of flip and
    transpose, and checked against ``np.rot90`` in the tests.)

    Args:
        shape: input shape, rank ≥ 2.
        k: number of quarter turns (any int, taken mod 4).
        axes: the two axes of the rotation plane.

    Returns:
        The relation (one pair per cell).
    """
    sh = as_shape(shape, "Input")
    rank = len(sh)
    if rank < 2 or len(axes) != 2:
        msg = f"rot90() needs an array of rank ≥ 2 and two axes, got shape {sh}, axes {axes}."
        raise InvalidRelationError(msg)
    p, q = (_axes(a, rank, "rot90")[0] for a in axes)
    if p == q:
        msg = f"rot90(): axes {axes} must be different."
        raise InvalidRelationError(msg)
    k %= 4
    out_shape = list(sh)
    if k % 2:
        out_shape[p], out_shape[q] = sh[q], sh[p]
    outs = _cells(tuple(out_shape))
    ins = outs.copy()
    if k == 1:
        ins[p] = outs[q]
        ins[q] = sh[q] - 1 - outs[p]
    elif k == 2:
        ins[p] = sh[p] - 1 - outs[p]
        ins[q] = sh[q] - 1 - outs[q]
    elif k == 3:
        ins[p] = sh[p] - 1 - outs[q]
        ins[q] = outs[p]
    return _relation(tuple(out_shape), sh, outs, ins)


def repeat(
    shape: Sequence[int] | int, repeats: int | Sequence[int], axis: int | None = None
) -> LineageRelation:
    """Lineage of ``np.repeat(x, repeats, axis)``.

    Along ``axis`` output index ``b`` comes from input index ``src[b]`` where
    ``src = np.repeat(arange(S_axis), repeats)`` (``b // repeats`` for an int); other axes are
    copied. ``axis=None`` repeats the flattened (C-order) input into a 1-D output.

    Args:
        shape: input shape.
        repeats: repetitions, an int or one count per element along ``axis``.
        axis: the axis to repeat along; ``None`` flattens first.

    Returns:
        The relation (one pair per output cell).
    """
    sh = as_shape(shape, "Input")
    if axis is None:
        size = int(np.prod(sh, dtype=np.int64))
        src = np.repeat(np.arange(size, dtype=np.int64), repeats)
        out_shape: Shape = (src.size,)
        outs = np.arange(src.size, dtype=np.int64)[None]
        return _relation(out_shape, sh, outs, _unravel(src, sh))
    ax = _axes(axis, len(sh), "repeat")[0]
    src = np.repeat(np.arange(sh[ax], dtype=np.int64), repeats)
    out_shape = (*sh[:ax], src.size, *sh[ax + 1 :])
    outs = _cells(out_shape)
    ins = outs.copy()
    ins[ax] = src[outs[ax]]
    return _relation(out_shape, sh, outs, ins)


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


def _flat_or_axis(
    shape: Sequence[int] | int, axis: int | None, what: str
) -> tuple[Shape, Shape, int]:
    """``(original shape, working shape, axis)``: ``axis=None`` works on the flattened array."""
    sh = as_shape(shape, "Input")
    if axis is None:
        return sh, (int(np.prod(sh, dtype=np.int64)),), 0
    return sh, sh, _axes(axis, len(sh), what)[0]


def _from_flat_input(rel: LineageRelation, orig: Shape) -> LineageRelation:
    """Re-express a relation on a flattened input (shape ``(size,)``) over the original shape."""
    if rel.in_shape == orig:
        return rel
    return _relation(rel.out_shape, orig, rel.out_cols, _unravel(rel.in_cols[0], orig), rel.n)


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


# ---------------------------------------------------------------------------------------------
# Axis permutations and reshapes: moveaxis, swapaxes, reshape, ravel, atleast_1d/2d
# ---------------------------------------------------------------------------------------------


def moveaxis(
    shape: Sequence[int] | int,
    source: int | Sequence[int],
    destination: int | Sequence[int],
) -> LineageRelation:
    """Lineage of ``np.moveaxis(x, source, destination)``: a :func:`transpose`.

    The permutation is built exactly as NumPy builds it (the other axes keep their order, the
    moved ones are inserted at their destinations in increasing destination order).
    """
    sh = as_shape(shape, "Input")
    rank = len(sh)
    src = [source] if isinstance(source, int | np.integer) else list(source)
    dst = [destination] if isinstance(destination, int | np.integer) else list(destination)
    if len(src) != len(dst):
        msg = f"moveaxis(): {len(src)} source axes but {len(dst)} destinations."
        raise InvalidRelationError(msg)
    s = [_axes(int(a), rank, "moveaxis")[0] for a in src]
    d = [_axes(int(a), rank, "moveaxis")[0] for a in dst]
    if len(set(s)) != len(s) or len(set(d)) != len(d):
        msg = f"moveaxis(): repeated axis in {source!r} or {destination!r}."
        raise InvalidRelationError(msg)
    order = [a for a in range(rank) if a not in s]
    for dd, ss in sorted(zip(d, s, strict=True)):
        order.insert(dd, ss)
    return transpose(sh, order)


def swapaxes(shape: Sequence[int] | int, axis1: int, axis2: int) -> LineageRelation:
    """Lineage of ``np.swapaxes(x, axis1, axis2)``: the transposition of two axes."""
    sh = as_shape(shape, "Input")
    a, b = (_axes(int(x), len(sh), "swapaxes")[0] for x in (axis1, axis2))
    perm = list(range(len(sh)))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(sh, perm)


def reshape(shape: Sequence[int] | int, newshape: Sequence[int] | int) -> LineageRelation:
    """Lineage of ``np.reshape(x, newshape)`` (C order): flat index ``k`` maps to flat index ``k``.

    One ``-1`` in ``newshape`` is inferred, as in NumPy.

    Raises:
        InvalidRelationError: the sizes differ or ``-1`` cannot be inferred.
    """
    sh = as_shape(shape, "Input")
    raw = (newshape,) if isinstance(newshape, int | np.integer) else tuple(newshape)
    size = int(np.prod(sh, dtype=np.int64))
    known = [int(d) for d in raw if int(d) != -1]
    unknown = len(raw) - len(known)
    prod = int(np.prod(known, dtype=np.int64))
    if unknown > 1 or any(d < -1 for d in (int(x) for x in raw)):
        msg = f"reshape(): invalid new shape {raw}."
        raise InvalidRelationError(msg)
    if unknown:
        if prod == 0 or size % prod:
            msg = f"reshape(): cannot infer -1 in {raw} for {size} cells."
            raise InvalidRelationError(msg)
        new: Shape = tuple(size // prod if int(d) == -1 else int(d) for d in raw)
    else:
        new = tuple(known)
    if int(np.prod(new, dtype=np.int64)) != size:
        msg = f"reshape(): cannot reshape {sh} ({size} cells) into {new}."
        raise InvalidRelationError(msg)
    flat = np.arange(size, dtype=np.int64)
    return _relation(new, sh, _unravel(flat, new), _unravel(flat, sh), size)


def ravel(shape: Sequence[int] | int) -> LineageRelation:
    """Lineage of ``np.ravel(x)`` / ``x.flatten()``: :func:`reshape` to 1-D."""
    return reshape(shape, -1)


def atleast_1d(shape: Sequence[int] | int) -> LineageRelation:
    """Lineage of ``np.atleast_1d(x)``: a 0-d array becomes ``(1,)``, others are unchanged."""
    sh = as_shape(shape, "Input")
    return reshape(sh, sh or (1,))


def atleast_2d(shape: Sequence[int] | int) -> LineageRelation:
    """Lineage of ``np.atleast_2d(x)``: ``() → (1, 1)``, ``(N,) → (1, N)``, others unchanged."""
    sh = as_shape(shape, "Input")
    return reshape(sh, (1,) * max(2 - len(sh), 0) + sh)


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
