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
    "binning",
    "broadcast",
    "convolve_same",
    "dot",
    "elementwise",
    "filter_mask",
    "flip",
    "negative",
    "repeat",
    "rot90",
    "sort",
    "sum_axis",
    "tile",
    "transpose",
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
