"""Compact, text-friendly cell specifications for query configs and the command line.

A Dagster launchpad form or a shell argument cannot hold ``np.s_[0:10, 3]``, so queries that
come from config or argv spell cells as text: one *box* per string in NumPy basic-indexing
notation (``"0:10,3"``, ``":,2"``, ``":"`` for everything), and/or explicit *index lists*
(``[[0, 1], [2, 3]]``). Both forms are turned into one exact :class:`CellSet` here, so the
query assets and ``dslog query`` agree on what a spec means.
"""

from collections.abc import Sequence

import numpy as np

from dslog_dagster.core.query.cells import CellSet, as_cells
from dslog_dagster.core.relation import as_shape
from dslog_dagster.errors import QueryError

__all__ = ["cells_from_spec", "parse_box"]


def parse_box(text: str) -> tuple[int | slice, ...]:
    """``"0:10,3"`` -> ``(slice(0, 10), 3)``: NumPy basic indexing with unit steps.

    Missing trailing axes mean "the whole axis", as in NumPy; ``""`` and ``":"`` select every
    cell.

    Raises:
        QueryError: an entry that is neither an int nor an ``a:b`` slice.
    """
    if not isinstance(text, str):
        msg = f"A box of cells is text such as `0:10,3`, got `{type(text).__name__}`."
        raise QueryError(msg)
    text = text.strip()
    if not text:
        return (slice(None),)
    parts: list[int | slice] = []
    for item in text.split(","):
        item = item.strip()
        if item.count(":") > 1:
            msg = f"Slice `{item}` in cells `{text}` has a step; boxes need unit steps."
            raise QueryError(msg)
        try:
            if ":" in item:
                a, _, b = item.partition(":")
                parts.append(slice(int(a) if a.strip() else None, int(b) if b.strip() else None))
            else:
                parts.append(int(item))
        except ValueError as e:
            msg = f"Cannot read `{item}` in cells `{text}`; use ints and a:b slices, e.g. 0:10,3."
            raise QueryError(msg) from e
    return tuple(parts)


def cells_from_spec(
    shape: Sequence[int] | int,
    boxes: Sequence[str] = (),
    indices: Sequence[Sequence[int]] = (),
) -> CellSet:
    """The cells of an array of ``shape`` named by box strings and index lists (their union).

    An int in a box string is a one-wide box on that axis (``"3"`` is row 3 of a matrix, as
    ``a[3]`` is in NumPy), so a box string never has to spell every axis.

    Raises:
        QueryError: a malformed box, a box or index outside the array, or a wrong rank.
    """
    s = as_shape(shape, "Array")
    result = CellSet.empty(s)
    keys = []
    if isinstance(boxes, str) or not isinstance(boxes, Sequence):
        msg = f'Boxes of cells are a list of texts such as `["0:10,3"]`, got `{boxes!r:.60}`.'
        raise QueryError(msg)
    for text in boxes:
        key: list[int | slice] = []
        for axis, k in enumerate(parse_box(text)):
            if isinstance(k, int) and axis < len(s):
                # an int is a one-wide box; check it as NumPy would instead of yielding nothing
                if not -s[axis] <= k < s[axis]:
                    msg = f"Index {k} in cells `{text}` is outside axis {axis} of shape {s}."
                    raise QueryError(msg)
                k = k % s[axis]
                key.append(slice(k, k + 1))
            else:
                key.append(k)
        keys.append(tuple(key))
    if keys:
        result = result | as_cells(s, keys)
    if isinstance(indices, str | bytes) or not isinstance(indices, Sequence | np.ndarray):
        msg = f"Index lists must be a list of index lists, got `{type(indices).__name__}`."
        raise QueryError(msg)
    if len(indices):
        try:
            idx = np.asarray([list(c) for c in indices], dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as e:
            msg = f"Index lists must be lists of integers within int64, one per axis ({e})."
            raise QueryError(msg) from e
        if idx.ndim != 2 or idx.shape[1] != len(s):
            msg = (
                f"Index lists must each have {len(s)} entries (one per axis of an array of "
                f"shape {s}); got {[list(c) for c in indices][:3]}."
            )
            raise QueryError(msg)
        result = result | CellSet.from_indices(s, idx)
    return result
