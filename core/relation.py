"""Lineage relations: which input cells contributed to which output cells.

A relation ``R(b_1..b_l, a_1..a_m)`` between an output array of rank ``l`` and an input array
of rank ``m`` is kept column-major as two int64 matrices, ``out_cols`` (``l × n``) and
``in_cols`` (``m × n``): pair ``i`` says ``output[out_cols[:, i]] ← input[in_cols[:, i]]``.
Indices are 0-based int64, so arrays of any rank and of more than 2**31 cells are fine.
Set semantics: duplicates are allowed on input and removed by :meth:`LineageRelation.unique`.

Validation happens here, once, so the native kernels can trust their input.
"""

import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.native import kernels
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError

Shape = tuple[int, ...]
I64 = npt.NDArray[np.int64]


INT64_MAX = int(np.iinfo(np.int64).max)
"""Largest extent, cell count and flat index: indices are int64 everywhere."""


def _extent(d: object, shape: object, what: str) -> int:
    if isinstance(d, bool | np.bool_) or not isinstance(d, int | np.integer):
        msg = (
            f"{what} shape `{reprlib.repr(shape)}` has extent `{reprlib.repr(d)}` of type "
            f"`{type(d).__name__}`; "
            "extents must be integers (a float such as 3.5 is refused, not truncated)."
        )
        raise UnsupportedArrayError(msg)
    return int(d)


def as_shape(shape: Sequence[int] | int, what: str) -> Shape:
    """Normalise a shape to a tuple of non-negative Python ints whose cell count, and so
    every flat (C-order) index, fits in int64.

    Raises:
        UnsupportedArrayError: not an integer or a sequence of integers (floats, strings
            and booleans are refused, never truncated or converted).
        InvalidRelationError: a negative extent, or more than 2**63 - 1 cells.
    """
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        items: list[object] = [shape]
    else:
        try:
            if isinstance(shape, str | bytes | np.bool_ | bool):
                raise TypeError
            items = list(shape)
        except TypeError as e:
            msg = (
                f"{what} shape `{reprlib.repr(shape)}` is not an integer or a sequence of integers."
            )
            raise UnsupportedArrayError(msg) from e
    out = tuple(_extent(d, shape, what) for d in items)
    if any(d < 0 for d in out):
        msg = f"{what} shape `{out}` has a negative extent."
        raise InvalidRelationError(msg)
    cells = 1
    for d in out:
        cells *= d
    if max(out, default=0) > INT64_MAX or cells > INT64_MAX:
        size = f"{cells} cells" if cells else f"an extent of {max(out)}"
        msg = (
            f"{what} shape `{out}` has {size}, more than 2**63 - 1: its indices would "
            "overflow int64. dslog supports arrays of at most 2**63 - 1 cells."
        )
        raise InvalidRelationError(msg)
    return out


def as_index_column(col: Any, name: str) -> I64:
    """``col`` as a contiguous int64 index column named ``name`` in messages.

    An empty column (``[]``, whose NumPy dtype is float64) is an empty int64 column.

    Raises:
        UnsupportedArrayError: not integers, or not 1-D.
        InvalidRelationError: values beyond the int64 range.
    """
    try:
        arr = np.asarray(col)
    except (TypeError, ValueError, OverflowError) as e:
        msg = f"Index column `{name}` is not an array of integers ({e})."
        raise UnsupportedArrayError(msg) from e
    if arr.ndim == 1 and arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        msg = (
            f"Index column `{name}` has dtype `{arr.dtype}`; lineage indices must be integers. "
            "Convert with `.astype(np.int64)` after checking the values are whole numbers."
        )
        raise UnsupportedArrayError(msg)
    if arr.ndim != 1:
        msg = f"Index column `{name}` has shape {arr.shape}; expected a 1-D column."
        raise UnsupportedArrayError(msg)
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > INT64_MAX:
        msg = (
            f"Index column `{name}` holds {int(arr.max())}, beyond the int64 range of "
            "indices; no array has such a cell."
        )
        raise InvalidRelationError(msg)
    return np.ascontiguousarray(arr, dtype=np.int64)


def _column_list(cols: Any, side: str) -> list[Any]:
    """The ``side`` index columns as a list (one per axis).

    Raises:
        UnsupportedArrayError: not a sequence of columns.
    """
    if isinstance(cols, np.ndarray):
        return list(cols) if cols.ndim >= 1 else [cols]
    if isinstance(cols, str | bytes) or not isinstance(cols, Sequence):
        msg = (
            f"The {side} index columns must be a sequence of columns (one per axis), got "
            f"`{type(cols).__name__}`."
        )
        raise UnsupportedArrayError(msg)
    return list(cols)


def _index_tuples(x: Any, rank: int, side: str) -> npt.NDArray[Any]:
    """``x`` as an ``(n, rank)`` matrix of ``side`` index tuples (for rank 1, a flat
    sequence of ``n`` indices too; an empty sequence is no tuples at all).

    Raises:
        UnsupportedArrayError: not a matrix of that many columns.
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        msg = f"The {side} index tuples are not an array of integers ({e})."
        raise UnsupportedArrayError(msg) from e
    if arr.ndim < 2:
        if arr.ndim == 0 or not (rank == 1 or arr.size == 0):
            msg = (
                f"The {side} index tuples have shape {arr.shape}; expected (n, {rank}) for "
                f"an array of rank {rank}."
            )
            raise UnsupportedArrayError(msg)
        arr = arr.reshape(len(arr), rank)
    if arr.ndim != 2 or arr.shape[1] != rank:
        msg = (
            f"The {side} index tuples have shape {arr.shape}; expected (n, {rank}) for an "
            f"array of rank {rank}."
        )
        raise UnsupportedArrayError(msg)
    return arr


def _stacked(cols: list[I64], count: int, copy: bool) -> I64:
    """The ``(len(cols), count)`` matrix of one side's columns (a view of a lone column when
    ``copy`` is off)."""
    if not cols:
        return np.zeros((0, count), np.int64)
    if len(cols) == 1 and not copy:
        return cols[0].reshape(1, -1)
    return np.stack(cols)


def _check_bounds(cols: I64, shape: Shape, side: str) -> None:
    for d, extent in enumerate(shape):
        col = cols[d]
        if col.size == 0:
            continue
        lo, hi = int(col.min()), int(col.max())
        if lo < 0 or hi >= extent:
            bad = lo if lo < 0 else hi
            msg = (
                f"{side} index {bad} on axis {d} is outside the {side} shape {shape} "
                f"(valid: 0..{extent - 1})."
            )
            raise InvalidRelationError(msg)


@dataclass(frozen=True, slots=True)
class LineageRelation:
    """A validated lineage relation between one output array and one input array."""

    out_shape: Shape
    in_shape: Shape
    out_cols: I64  # (l, n)
    in_cols: I64  # (m, n)
    n: int

    @property
    def out_rank(self) -> int:
        return len(self.out_shape)

    @property
    def in_rank(self) -> int:
        return len(self.in_shape)

    @classmethod
    def from_columns(
        cls,
        out_shape: Sequence[int] | int,
        in_shape: Sequence[int] | int,
        out_cols: Sequence[Any],
        in_cols: Sequence[Any],
        *,
        n: int | None = None,
        copy: bool = True,
    ) -> "LineageRelation":
        """Build from one index column per axis (outputs, then inputs).

        Args:
            out_shape: shape of the output array (``()`` for a 0-d array).
            in_shape: shape of the input array.
            out_cols: ``len(out_shape)`` integer columns of equal length.
            in_cols: ``len(in_shape)`` integer columns of that same length.
            n: number of pairs; only needed when both arrays are 0-d (no columns at all).
            copy: ``False`` lets a side with one contiguous ``int64`` column keep it as a view
                instead of copying it into the relation (for relations of 10^7 pairs and
                more, built to be compressed at once); the caller must not change it after.

        Raises:
            UnsupportedArrayError: non-integer or non-1-D columns.
            InvalidRelationError: wrong number of columns, ragged columns, out-of-shape indices.
        """
        osh = as_shape(out_shape, "Output")
        ish = as_shape(in_shape, "Input")
        out_cols = _column_list(out_cols, "output")
        in_cols = _column_list(in_cols, "input")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int | np.integer)):
            msg = f"`n={reprlib.repr(n)}` must be an integer number of pairs."
            raise InvalidRelationError(msg)
        if len(out_cols) != len(osh):
            msg = (
                f"Got {len(out_cols)} output index column(s) for an output of rank {len(osh)} "
                f"(shape {osh}); pass one column per axis."
            )
            raise InvalidRelationError(msg)
        if len(in_cols) != len(ish):
            msg = (
                f"Got {len(in_cols)} input index column(s) for an input of rank {len(ish)} "
                f"(shape {ish}); pass one column per axis."
            )
            raise InvalidRelationError(msg)
        oc = [as_index_column(c, f"b_{j + 1}") for j, c in enumerate(out_cols)]
        ic = [as_index_column(c, f"a_{k + 1}") for k, c in enumerate(in_cols)]
        lengths = {len(c) for c in oc + ic}
        if len(lengths) > 1:
            msg = f"Index columns are ragged (lengths {sorted(lengths)}); all must be equal."
            raise InvalidRelationError(msg)
        if lengths:
            count = lengths.pop()
            if n is not None and n != count:
                msg = f"`n={n}` disagrees with the column length {count}."
                raise InvalidRelationError(msg)
        else:
            count = int(n or 0)
            if count < 0:
                msg = f"`n={n}` must be non-negative."
                raise InvalidRelationError(msg)
        out_arr = _stacked(oc, count, copy)
        in_arr = _stacked(ic, count, copy)
        _check_bounds(out_arr, osh, "output")
        _check_bounds(in_arr, ish, "input")
        if count and (0 in osh or 0 in ish):
            msg = f"A relation with {count} pairs cannot involve an empty array ({osh}, {ish})."
            raise InvalidRelationError(msg)
        return cls(osh, ish, out_arr, in_arr, count)

    @classmethod
    def from_pairs(
        cls,
        out_shape: Sequence[int] | int,
        in_shape: Sequence[int] | int,
        out_index: Any,
        in_index: Any,
    ) -> "LineageRelation":
        """Build from ``(n, l)`` output index tuples and ``(n, m)`` input index tuples."""
        osh = as_shape(out_shape, "Output")
        ish = as_shape(in_shape, "Input")
        oi = _index_tuples(out_index, len(osh), "output")
        ii = _index_tuples(in_index, len(ish), "input")
        if len(oi) != len(ii):
            msg = f"{len(oi)} output index tuples but {len(ii)} input index tuples."
            raise InvalidRelationError(msg)
        return cls.from_columns(osh, ish, list(oi.T), list(ii.T), n=len(oi))

    @classmethod
    def from_flat(
        cls,
        out_shape: Sequence[int] | int,
        in_shape: Sequence[int] | int,
        out_flat: Any,
        in_flat: Any,
    ) -> "LineageRelation":
        """Build from flat (C-order) cell indices, as a capture records them."""
        osh = as_shape(out_shape, "Output")
        ish = as_shape(in_shape, "Input")
        of = as_index_column(out_flat, "output flat index")
        inf = as_index_column(in_flat, "input flat index")
        if len(of) != len(inf):
            msg = f"{len(of)} output flat indices but {len(inf)} input flat indices."
            raise InvalidRelationError(msg)
        for flat, shape, side in ((of, osh, "output"), (inf, ish, "input")):
            size = int(np.prod(shape, dtype=np.int64))
            if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= size):
                msg = f"{side} flat index outside 0..{size - 1} for shape {shape}."
                raise InvalidRelationError(msg)
        oc = np.unravel_index(of, osh) if osh else ()
        ic = np.unravel_index(inf, ish) if ish else ()
        return cls.from_columns(osh, ish, list(oc), list(ic), n=len(of))

    def matrix(self) -> I64:
        """The ``(l + m, n)`` matrix of the columns, outputs first: the one matrix both
        sides are rows of when the relation was built on one (no copy), else a copy."""
        outs, ins = self.out_cols, self.in_cols
        base = outs.base if outs.base is not None else outs
        if (
            isinstance(base, np.ndarray)
            and base.dtype == np.int64
            and base.ndim == 2
            and base.shape == (self.out_rank + self.in_rank, self.n)
            and base.flags.c_contiguous
            and outs.ctypes.data == base.ctypes.data
            and ins.ctypes.data == base.ctypes.data + 8 * self.out_rank * self.n
            and (outs.base is None or outs.flags.c_contiguous)
            and ins.flags.c_contiguous
        ):
            return base
        return np.vstack([outs, ins])

    def columns(self) -> list[I64]:
        """The ``l + m`` columns, outputs first, as the native kernels take them."""
        return [*self.out_cols, *self.in_cols]

    def unique(self) -> "LineageRelation":
        """Sorted (lexicographically by outputs then inputs), duplicate-free copy."""
        if self.out_rank + self.in_rank == 0:
            # one distinct pair at most (the 0-d cell to the 0-d cell): the (empty) columns
            # keep the pair count, so they shrink with it
            k = min(self.n, 1)
            return LineageRelation(
                self.out_shape, self.in_shape, self.out_cols[:, :k], self.in_cols[:, :k], k
            )
        mat, n = kernels.sort_unique(self.columns(), self.out_rank)
        return LineageRelation(
            self.out_shape, self.in_shape, mat[: self.out_rank], mat[self.out_rank :], int(n)
        )

    def pairs(self) -> I64:
        """``(n, l + m)`` matrix of pairs (handy for set comparisons in tests and baselines)."""
        return np.ascontiguousarray(np.vstack([self.out_cols, self.in_cols]).T)

    def __eq__(self, other: object) -> bool:
        """Set equality of two relations over the same shapes."""
        if not isinstance(other, LineageRelation):
            return NotImplemented
        if (self.out_shape, self.in_shape) != (other.out_shape, other.in_shape):
            return False
        a, b = self.unique(), other.unique()
        return a.n == b.n and np.array_equal(a.pairs(), b.pairs())

    __hash__ = None  # type: ignore[assignment]
