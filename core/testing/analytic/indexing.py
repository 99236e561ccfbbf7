"""Index arithmetic shared by the analytic generators: cells, flat indices, axes, relations.

Every generator builds its relation from vectorised index matrices (``(rank, n)`` int64); the
helpers here turn shapes and flat indices into such matrices and the matrices into a
:class:`~dslog_dagster.core.relation.LineageRelation`.
"""

from collections.abc import Sequence

import numpy as np

from dslog_dagster.core.relation import I64, LineageRelation, Shape, as_shape
from dslog_dagster.errors import InvalidRelationError


def cells(shape: Shape) -> I64:
    """Every cell of ``shape`` in C order, as a ``(rank, size)`` int64 matrix."""
    if not shape:
        return np.zeros((0, 1), dtype=np.int64)
    return np.indices(shape, dtype=np.int64).reshape(len(shape), -1)


def unravel(flat: I64, shape: Shape) -> I64:
    """Flat C-order indices as a ``(rank, n)`` int64 matrix (``(0, n)`` for a 0-d shape)."""
    if not shape:
        return np.zeros((0, flat.size), dtype=np.int64)
    return np.stack(np.unravel_index(flat, shape)).astype(np.int64, copy=False)


def relation(
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


def axes(axis: int | Sequence[int] | None, rank: int, what: str) -> tuple[int, ...]:
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


def flat_or_axis(
    shape: Sequence[int] | int, axis: int | None, what: str
) -> tuple[Shape, Shape, int]:
    """``(original shape, working shape, axis)``: ``axis=None`` works on the flattened array."""
    sh = as_shape(shape, "Input")
    if axis is None:
        return sh, (int(np.prod(sh, dtype=np.int64)),), 0
    return sh, sh, axes(axis, len(sh), what)[0]


def from_flat_input(rel: LineageRelation, orig: Shape) -> LineageRelation:
    """Re-express a relation on a flattened input (shape ``(size,)``) over the original shape."""
    if rel.in_shape == orig:
        return rel
    return relation(rel.out_shape, orig, rel.out_cols, unravel(rel.in_cols[0], orig), rel.n)
