"""Analytic lineage of structured operations: element-wise, broadcasting, reductions, matrix
products, reshuffles (tile, transpose, flip, rot90, repeat) and reshapes.

Their lineage does not depend on the data, so a generator needs only the shapes and
arguments; ProvRC compresses each to O(1) rows (``tests/unit/test_row_counts.py``).
"""

from collections.abc import Sequence

import numpy as np

from dslog_dagster.core.relation import LineageRelation, Shape, as_shape
from dslog_dagster.core.testing.analytic.indexing import axes as _axes
from dslog_dagster.core.testing.analytic.indexing import cells as _cells
from dslog_dagster.core.testing.analytic.indexing import relation as _relation
from dslog_dagster.core.testing.analytic.indexing import unravel as _unravel
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError

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
