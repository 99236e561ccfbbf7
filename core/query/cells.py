"""Exact sets of cells: the values that lineage queries carry from array to array.

A query's cells are always a :class:`CellSet`: disjoint boxes in a canonical order, so equal
sets compare equal and counts are exact. :func:`as_cells` reads every spelling a caller may
use (``np.s_`` boxes, index tuples, boolean masks, flat indices) into one.
"""

import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dslog_dagster.core.display import CellsDisplay
from dslog_dagster.core.native import kernels
from dslog_dagster.core.relation import I64, INT64_MAX, Shape, as_shape
from dslog_dagster.errors import QueryError

__all__ = ["CellSet", "as_cells", "empty_boxes", "format_box", "format_slices"]


def empty_boxes(k: int, d: int) -> I64:
    """``k`` empty (all-zero) boxes of ``d`` axes: a ``(k, d)`` int64 matrix."""
    return np.zeros((k, d), dtype=np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class CellSet(CellsDisplay):
    """An exact set of cells of an array, as disjoint boxes in canonical order.

    Every form a person reads or a program exports uses Python's half-open convention:
    ``start`` / ``stop`` (box ``k`` covers ``start[k, i] <= x_i < stop[k, i]``), ``str()`` and
    ``repr()`` (``0:128, 0:128``), :meth:`to_slices`, :meth:`to_arrow` and :meth:`to_pandas`
    (columns ``start_i`` / ``stop_i``), :meth:`from_ranges`. The fields ``lo`` and ``hi`` are
    the kernels' form: ``(K, d)`` int64 arrays of *inclusive* bounds, as the ProvRC tables of
    the papers store intervals (``hi = stop - 1``); :meth:`from_boxes` takes that form.

    Build one with :func:`as_cells` or the ``from_*`` constructors; they normalise, so two cell
    sets are equal exactly when they hold the same cells.
    """

    shape: Shape
    lo: I64
    hi: I64

    # ------------------------------------------------------------- constructors

    @classmethod
    def _normalised(cls, shape: Shape, lo: I64, hi: I64) -> "CellSet":
        nlo, nhi = kernels.normalize_boxes(lo, hi)
        return cls(shape, nlo, nhi)

    @classmethod
    def empty(cls, shape: Sequence[int] | int) -> "CellSet":
        """No cells of an array of ``shape``."""
        s = as_shape(shape, "Array")
        return cls(s, empty_boxes(0, len(s)), empty_boxes(0, len(s)))

    @classmethod
    def full(cls, shape: Sequence[int] | int) -> "CellSet":
        """Every cell of an array of ``shape``."""
        s = as_shape(shape, "Array")
        if any(n == 0 for n in s):
            return cls.empty(s)
        return cls(s, empty_boxes(1, len(s)), np.asarray([s], dtype=np.int64).reshape(1, -1) - 1)

    @classmethod
    def from_ranges(
        cls, shape: Sequence[int] | int, start: npt.ArrayLike, stop: npt.ArrayLike
    ) -> "CellSet":
        """Cells of the union of half-open boxes ``start <= x < stop`` (``(K, d)`` each).

        The inverse of :attr:`start` / :attr:`stop` and of :meth:`to_arrow`'s columns. A box
        with ``stop <= start`` on an axis is empty.

        Raises:
            QueryError: wrong rank, or a box reaches outside the array.
        """
        s = as_shape(shape, "Array")
        stop_a = _int_matrix(stop, len(s), "box stops", s)
        if stop_a.size and int(stop_a.min()) < -INT64_MAX:
            msg = "The box stops must be above the int64 minimum."
            raise QueryError(msg)
        return cls.from_boxes(s, start, stop_a - 1)

    @classmethod
    def from_boxes(
        cls, shape: Sequence[int] | int, lo: npt.ArrayLike, hi: npt.ArrayLike
    ) -> "CellSet":
        """Cells of the union of boxes with *inclusive* bounds ``lo``/``hi`` of shape ``(K, d)``
        (the kernels' form; :meth:`from_ranges` takes Python's half-open ``start``/``stop``).

        Raises:
            QueryError: wrong rank, or a box reaches outside the array.
        """
        s = as_shape(shape, "Array")
        d = len(s)
        lo_a = _int_matrix(lo, d, "box lower bounds", s)
        hi_a = _int_matrix(hi, d, "box upper bounds", s)
        if lo_a.shape != hi_a.shape:
            msg = f"Box bounds have shapes {lo_a.shape} and {hi_a.shape}; they must match."
            raise QueryError(msg)
        keep = np.all(lo_a <= hi_a, axis=1)
        lo_a, hi_a = lo_a[keep], hi_a[keep]
        if lo_a.size and (np.any(lo_a < 0) or np.any(hi_a >= np.asarray(s, dtype=np.int64))):
            bad = int(np.flatnonzero(np.any((lo_a < 0) | (hi_a >= np.asarray(s)), axis=1))[0])
            msg = (
                f"Box {_fmt_box(lo_a[bad], hi_a[bad])} reaches outside the array of shape {s}; "
                "query boxes must lie inside the array."
            )
            raise QueryError(msg)
        return cls._normalised(s, lo_a, hi_a)

    @classmethod
    def from_flat(cls, shape: Sequence[int] | int, flat: npt.ArrayLike) -> "CellSet":
        """Cells given by flat (C-order) indices.

        Raises:
            QueryError: non-integer or out-of-range indices.
        """
        s = as_shape(shape, "Array")
        arr = _array(flat, "flat cell indices")
        if arr.size == 0:
            return cls.empty(s)
        arr = _int64(arr.reshape(-1), "flat cell indices", s)
        size = int(np.prod(s, dtype=np.int64))
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= size:
            bad = lo if lo < 0 else hi
            msg = f"Flat cell index {bad} is outside the array of shape {s} (valid: 0..{size - 1})."
            raise QueryError(msg)
        blo, bhi = kernels.flat_to_boxes(arr, list(s))
        return cls(s, blo, bhi)

    @classmethod
    def from_indices(cls, shape: Sequence[int] | int, indices: npt.ArrayLike) -> "CellSet":
        """Cells given as index tuples: an ``(n, d)`` integer array or a list of tuples.

        Negative indices count from the end, as in NumPy.

        Raises:
            QueryError: wrong rank or out-of-bounds indices.
        """
        s = as_shape(shape, "Array")
        d = len(s)
        idx = _int_matrix(indices, d, "cell indices", s)
        if idx.shape[0] == 0:
            return cls.empty(s)
        ext = np.asarray(s, dtype=np.int64)
        bad = np.any((idx < -ext) | (idx >= ext), axis=1)
        if bad.any():
            cell = tuple(int(x) for x in idx[int(np.flatnonzero(bad)[0])])
            msg = f"Cell {cell} is outside the array of shape {s}."
            raise QueryError(msg)
        idx = np.where(idx < 0, idx + ext, idx)
        if d == 0:
            return cls(s, empty_boxes(1, 0), empty_boxes(1, 0))
        flat = np.ravel_multi_index(tuple(idx.T), s).astype(np.int64)
        blo, bhi = kernels.flat_to_boxes(flat, list(s))
        return cls(s, blo, bhi)

    @classmethod
    def from_mask(cls, mask: npt.ArrayLike, shape: Sequence[int] | int | None = None) -> "CellSet":
        """The ``True`` cells of a boolean mask (of the array's shape when ``shape`` is given)."""
        m = _array(mask, "cell mask")
        if m.dtype != np.bool_:
            msg = f"A cell mask must be boolean, got dtype `{m.dtype}`."
            raise QueryError(msg)
        s = as_shape(m.shape if shape is None else shape, "Array")
        if m.shape != s:
            msg = f"Cell mask has shape {m.shape}; the array has shape {s}."
            raise QueryError(msg)
        return cls.from_flat(s, np.flatnonzero(m))

    # ------------------------------------------------------------- views

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def n_boxes(self) -> int:
        return int(self.lo.shape[0])

    def count(self) -> int:
        """Number of cells (boxes are disjoint, so this is exact)."""
        if self.rank == 0:
            return self.n_boxes
        return int(np.prod(self.hi - self.lo + 1, axis=1, dtype=np.int64).sum())

    def is_empty(self) -> bool:
        return self.n_boxes == 0

    def _listable(self, cells: int, item_bytes: int, what: str) -> None:
        """Refuse to list ``cells`` cells of ``item_bytes`` each as ``what`` when no memory
        could hold them (the boxes themselves always fit)."""
        if cells * item_bytes > INT64_MAX:
            msg = (
                f"The {cells} cells of this set (array of shape {self.shape}) are too many to "
                f"list as {what}; use its boxes (`lo`/`hi`, `to_slices()`, `to_arrow()`) or "
                "`count()`."
            )
            raise QueryError(msg)

    def _out_of_memory(self, e: MemoryError, what: str) -> QueryError:
        msg = (
            f"Not enough memory to list the {self.count()} cells of this set (array of shape "
            f"{self.shape}) as {what} ({e}); use its boxes (`lo`/`hi`, `to_slices()`, "
            "`to_arrow()`) or `count()`."
        )
        return QueryError(msg)

    def to_flat(self) -> I64:
        """Sorted flat (C-order) indices of the cells.

        Raises:
            QueryError: too many cells to hold in memory.
        """
        self._listable(self.count(), 8, "flat indices")
        try:
            out: I64 = kernels.boxes_to_flat(self.lo, self.hi, list(self.shape))
        except MemoryError as e:
            raise self._out_of_memory(e, "flat indices") from e
        return out

    def to_indices(self) -> I64:
        """Cells as a sorted ``(n, d)`` array of index tuples.

        Raises:
            QueryError: too many cells to hold in memory.
        """
        self._listable(self.count(), 8 * max(self.rank, 1), "index tuples")
        flat = self.to_flat()
        if self.rank == 0:
            return empty_boxes(flat.size, 0)
        try:
            return np.stack(np.unravel_index(flat, self.shape), axis=1).astype(np.int64)
        except MemoryError as e:
            raise self._out_of_memory(e, "index tuples") from e

    def to_mask(self) -> npt.NDArray[np.bool_]:
        """A boolean mask over the array, ``True`` on the cells.

        Raises:
            QueryError: the array is too large to hold a mask of it in memory.
        """
        try:
            mask = np.zeros(self.shape, dtype=np.bool_)
        except MemoryError as e:
            raise self._out_of_memory(e, "a mask") from e
        kernels.fill_mask(self.lo, self.hi, mask.view(np.uint8))
        return mask

    def to_slices(self) -> list[tuple[slice, ...]]:
        """The boxes as tuples of slices (``array[box]`` selects a box)."""
        return [
            tuple(slice(int(a), int(b) + 1) for a, b in zip(lo, hi, strict=True))
            for lo, hi in zip(self.lo, self.hi, strict=True)
        ]

    @property
    def start(self) -> I64:
        """``(K, d)`` first cell of each box per axis (half-open form, equal to ``lo``)."""
        return self.lo

    @property
    def stop(self) -> I64:
        """``(K, d)`` one past the last cell of each box per axis (half-open form)."""
        return self.hi + 1

    def to_arrow(self) -> pa.Table:
        """The boxes as an Arrow table: half-open columns ``start_i``/``stop_i`` per axis ``i``.

        Box ``k`` covers ``start_i <= x_i < stop_i`` on every axis, as ``array[start:stop]``
        selects. The array shape is in the schema metadata (``dslog.shape``, with
        ``dslog.bounds = half-open``); a 0-d array has no columns and one row when its cell is
        in the set. :meth:`from_arrow` reads it back.
        """
        cols: dict[str, Any] = {}
        for i in range(self.rank):
            cols[f"start_{i}"] = pa.array(self.lo[:, i], pa.int64())
            cols[f"stop_{i}"] = pa.array(self.hi[:, i] + 1, pa.int64())
        meta = {
            b"dslog.shape": ",".join(map(str, self.shape)).encode(),
            b"dslog.bounds": b"half-open",
        }
        if not cols:
            return pa.table(
                {"cell": pa.array([0] * self.n_boxes, pa.int8())}
            ).replace_schema_metadata(meta)
        return pa.table(cols).replace_schema_metadata(meta)

    @classmethod
    def from_arrow(cls, table: pa.Table) -> "CellSet":
        """The cell set :meth:`to_arrow` wrote (a query asset's Parquet file, read back).

        Raises:
            QueryError: the table has no ``dslog.shape`` metadata or not the columns
                :meth:`to_arrow` writes.
        """
        meta = table.schema.metadata or {}
        raw = meta.get(b"dslog.shape")
        if raw is None:
            msg = (
                "The table has no `dslog.shape` schema metadata; only tables written by "
                "`CellSet.to_arrow()` (or a query asset's Parquet file) can be read back."
            )
            raise QueryError(msg)
        try:
            shape = tuple(int(v) for v in raw.decode().split(",") if v != "")
        except ValueError as e:
            msg = f"The table's `dslog.shape` metadata {raw!r} is not a shape."
            raise QueryError(msg) from e
        if not shape:
            return cls.full(()) if table.num_rows else cls.empty(())
        want = [c for i in range(len(shape)) for c in (f"start_{i}", f"stop_{i}")]
        if table.column_names != want:
            msg = (
                f"The table has columns {table.column_names}; a cell set of rank {len(shape)} "
                f"is written as {want} (half-open bounds)."
            )
            raise QueryError(msg)
        cols = [table.column(c).to_numpy(zero_copy_only=False) for c in want]
        start = np.stack(cols[0::2], axis=1) if table.num_rows else empty_boxes(0, len(shape))
        stop = np.stack(cols[1::2], axis=1) if table.num_rows else empty_boxes(0, len(shape))
        return cls.from_ranges(shape, start, stop)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CellSet):
            return NotImplemented
        return (
            self.shape == other.shape
            and np.array_equal(self.lo, other.lo)
            and np.array_equal(self.hi, other.hi)
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.lo.tobytes(), self.hi.tobytes()))

    def __or__(self, other: "CellSet") -> "CellSet":
        """Union of two cell sets of the same array."""
        if self.shape != other.shape:
            msg = f"Cannot unite cells of arrays of shapes {self.shape} and {other.shape}."
            raise QueryError(msg)
        return CellSet._normalised(
            self.shape, np.vstack([self.lo, other.lo]), np.vstack([self.hi, other.hi])
        )

    def __repr__(self) -> str:
        boxes = ", ".join(_fmt_box(a, b) for a, b in zip(self.lo[:4], self.hi[:4], strict=True))
        more = f", … {self.n_boxes - 4} more" if self.n_boxes > 4 else ""
        return f"CellSet(shape={self.shape}, cells={self.count()}, boxes=[{boxes}{more}])"

    def __str__(self) -> str:
        """The boxes as a person writes them: ``0:128, 0:128`` for one box, ``[0:2, 1:2],
        [5:6, 0:3]`` for several (the first four, then how many more), ``no cells``."""
        if self.n_boxes == 0:
            return "no cells"
        if self.n_boxes == 1:
            return format_box(self.lo[0], self.hi[0] + 1)
        shown = ", ".join(_fmt_box(a, b) for a, b in zip(self.lo[:4], self.hi[:4], strict=True))
        more = f" and {self.n_boxes - 4:,} more boxes" if self.n_boxes > 4 else ""
        return shown + more


def format_box(start: Sequence[int] | npt.ArrayLike, stop: Sequence[int] | npt.ArrayLike) -> str:
    """One box in Python's half-open convention: ``0:128, 0:128`` (a 0-d cell: ``()``).

    The single formatting rule for bounds in messages, previews, pictures and the CLI; an axis
    of one cell is written ``5:6``, as the slice that selects it.
    """
    pairs = [(int(a), int(b)) for a, b in zip(np.ravel(start), np.ravel(stop), strict=True)]
    return ", ".join(f"{a}:{b}" for a, b in pairs) if pairs else "()"


def format_slices(key: Sequence[slice]) -> str:
    """A tuple of slices with set starts and stops (as :meth:`CellSet.to_slices` gives) in the
    half-open form of :func:`format_box`: ``(slice(0, 128), slice(0, 128))`` -> ``0:128, 0:128``.
    """
    return format_box([s.start for s in key], [s.stop for s in key])


def _fmt_box(lo: I64, hi: I64) -> str:
    return "[" + format_box(lo, np.asarray(hi) + 1) + "]"


def _array(x: object, what: str) -> npt.NDArray[Any]:
    try:
        return np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        msg = f"The {what} are not an array of integers ({e})."
        raise QueryError(msg) from e


def _int64(arr: npt.NDArray[Any], what: str, shape: Shape) -> I64:
    """``arr`` (non-empty) as int64, refusing non-integers and values beyond int64 (a uint64
    ``2**64 - 1`` must not become ``-1``, which counts from the end)."""
    if arr.dtype == object:
        try:
            arr = np.asarray(arr.tolist(), dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as e:
            msg = (
                f"The {what} must be integers within the int64 range (every cell index of an "
                f"array of shape {shape} is): {e}."
            )
            raise QueryError(msg) from e
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        msg = f"The {what} must be integers, got dtype `{arr.dtype}`."
        raise QueryError(msg)
    if arr.dtype == np.uint64 and int(arr.max()) > INT64_MAX:
        msg = (
            f"The {what} hold {int(arr.max())}, which is outside the array of shape {shape} "
            "(beyond the int64 range of cell indices)."
        )
        raise QueryError(msg)
    return np.ascontiguousarray(arr, dtype=np.int64)


def _int_matrix(x: npt.ArrayLike, d: int, what: str, shape: Shape = ()) -> I64:
    arr = _array(x, what)
    if arr.size == 0:  # keeps the count of 0-d cells, which have no coordinates
        return empty_boxes(arr.shape[0] if arr.ndim == 2 and arr.shape[1] == d else 0, d)
    if arr.ndim == 1 and d == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] != d:
        msg = f"The {what} have shape {arr.shape}; expected (n, {d}) for an array of rank {d}."
        raise QueryError(msg)
    return _int64(arr, what, shape)


def _box_of(shape: Shape, key: tuple[Any, ...]) -> tuple[list[int], list[int]] | None:
    """Inclusive bounds of a NumPy basic-indexing key of ints and unit-step slices."""
    if len(key) > len(shape):
        msg = f"Box {reprlib.repr(key)} has {len(key)} axes; the array has rank {len(shape)}."
        raise QueryError(msg)
    lo, hi = [], []
    for axis, n in enumerate(shape):
        k = key[axis] if axis < len(key) else slice(None)
        if isinstance(k, slice):
            try:
                start, stop, step = k.indices(n)
            except (TypeError, ValueError) as e:  # slice("a"), slice(0, 4, 0)
                msg = f"Slice {reprlib.repr(k)} on axis {axis} is not a slice of integers: {e}."
                raise QueryError(msg) from e
            if step != 1:
                msg = (
                    f"Slice {reprlib.repr(k)} on axis {axis} has step {step}; boxes need unit "
                    "steps. "
                    "Pass a mask or flat indices for strided cells."
                )
                raise QueryError(msg)
            if start >= stop:
                return None
            lo.append(start)
            hi.append(stop - 1)
        elif isinstance(k, int | np.integer) and not isinstance(k, bool | np.bool_):
            i = int(k)
            if not -n <= i < n:
                msg = f"Index {i} on axis {axis} is outside the array of shape {shape}."
                raise QueryError(msg)
            i = i + n if i < 0 else i
            lo.append(i)
            hi.append(i)
        else:
            msg = f"Box entry {reprlib.repr(k)} on axis {axis} is neither an int nor a slice."
            raise QueryError(msg)
    return lo, hi


def _index_tuples(cells: list[Any], d: int) -> I64:
    if any(len(c) != d for c in cells):
        bad = next(c for c in cells if len(c) != d)
        msg = f"Cell {reprlib.repr(bad)} has {len(bad)} indices; the array has rank {d}."
        raise QueryError(msg)
    try:
        return np.asarray(cells, dtype=np.int64).reshape(len(cells), d)
    except (TypeError, ValueError, OverflowError) as e:
        msg = f"Index tuples must hold integers; got {reprlib.repr(cells[0])}, ..."
        raise QueryError(msg) from e


def _is_box_key(x: object) -> bool:
    return isinstance(x, slice) or (isinstance(x, tuple) and any(isinstance(k, slice) for k in x))


def as_cells(shape: Sequence[int] | int, cells: object) -> CellSet:
    """Interpret a cell specification for an array of ``shape``.

    Accepted forms:

    * a :class:`CellSet` of the same shape;
    * a boolean mask of the array's shape;
    * a box: a slice or a tuple of ints and unit-step slices (``np.s_[0:10, 3]``), or a list
      of such boxes;
    * index tuples: an ``(n, d)`` integer array or a list of int tuples;
    * flat (C-order) indices: a 1-D integer array, a list of ints or one int.

    Raises:
        QueryError: anything else, wrong ranks, or cells outside the array.
    """
    s = as_shape(shape, "Array")
    if isinstance(cells, CellSet):
        if cells.shape != s:
            msg = f"The cells belong to an array of shape {cells.shape}, not {s}."
            raise QueryError(msg)
        return cells
    if _is_box_key(cells):
        key = cells if isinstance(cells, tuple) else (cells,)
        b = _box_of(s, key)  # validated: in bounds, lo <= hi, so already canonical
        if b is None:
            return CellSet.empty(s)
        d = len(s)
        return CellSet(
            s,
            np.array(b[0], dtype=np.int64).reshape(1, d),
            np.array(b[1], dtype=np.int64).reshape(1, d),
        )
    if isinstance(cells, list) and cells and all(isinstance(c, tuple | slice) for c in cells):
        if not any(_is_box_key(c) for c in cells):  # index tuples only: the vectorised path
            return CellSet.from_indices(s, _index_tuples(cells, len(s)))
        bounds = []
        for c in cells:
            key = c if isinstance(c, tuple) else (c,)
            if not _is_box_key(key) and len(key) != len(s):
                msg = (
                    f"Cell {reprlib.repr(key)} has {len(key)} indices; the array has rank {len(s)}."
                )
                raise QueryError(msg)
            if (b := _box_of(s, key)) is not None:
                bounds.append(b)
        if not bounds:
            return CellSet.empty(s)
        return CellSet.from_boxes(s, [b[0] for b in bounds], [b[1] for b in bounds])
    if isinstance(cells, int | np.integer) and not isinstance(cells, bool):
        return CellSet.from_flat(s, [int(cells)])
    if (
        isinstance(cells, tuple)
        and len(s) != 1
        and all(isinstance(c, int | np.integer) for c in cells)
    ):
        return CellSet.from_indices(s, [cells])
    try:
        arr = np.asarray(cells)
    except (TypeError, ValueError, OverflowError) as e:
        msg = f"Cannot interpret {type(cells).__name__} as query cells."
        raise QueryError(msg) from e
    if arr.dtype == np.bool_:
        return CellSet.from_mask(arr, s)
    if arr.ndim == 2:
        return CellSet.from_indices(s, arr)
    if arr.ndim <= 1 and (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        return CellSet.from_flat(s, arr.reshape(-1))
    msg = (
        f"Cannot interpret {type(cells).__name__} of shape {arr.shape} and dtype {arr.dtype} as "
        "query cells; pass a box (np.s_[...]), index tuples, a boolean mask or flat indices."
    )
    raise QueryError(msg)
