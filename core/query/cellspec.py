"""Compact, text-friendly cell specifications for query configs and the command line.

A Dagster launchpad form or a shell argument cannot hold ``np.s_[0:10, 3]``, so queries that
come from config or argv spell cells as text: one *box* per string in NumPy basic-indexing
notation (``"0:10,3"``, ``":,2"``, ``":"`` for everything), and/or explicit *index lists*
(``[[0, 1], [2, 3]]``). Both forms are turned into one exact :class:`CellSet` here, so the
query assets and ``dslog query`` agree on what a spec means.

A frame's cells are ``(row, column)``; when its column names are known (``columns=``), the
column axis of a box may name a column instead of its position (``"0:10,genres"``), as a
person reads the frame.
"""

import difflib
from collections.abc import Sequence

import numpy as np

from dslog_dagster.core.query.cells import CellSet, as_cells
from dslog_dagster.core.relation import as_shape
from dslog_dagster.errors import QueryError

__all__ = ["cells_from_spec", "column_position", "parse_box"]


def parse_box(text: str, *, names: bool = False) -> tuple[int | slice | str, ...]:
    """``"0:10,3"`` -> ``(slice(0, 10), 3)``: NumPy basic indexing with unit steps.

    Missing trailing axes mean "the whole axis", as in NumPy; ``""`` and ``":"`` select every
    cell. With ``names=True`` an entry that is not a number is kept as a name (a column).

    Raises:
        QueryError: an entry that is neither an int nor an ``a:b`` slice (nor a name).
    """
    if not isinstance(text, str):
        msg = f"A box of cells is text such as `0:10,3`, got `{type(text).__name__}`."
        raise QueryError(msg)
    text = text.strip()
    if not text:
        return (slice(None),)
    parts: list[int | slice | str] = []
    for item in text.split(","):
        item = item.strip()
        if names and item and ":" not in item and not _is_int(item):
            parts.append(item)
            continue
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


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def column_position(columns: Sequence[str], name: str) -> int:
    """The position of column ``name`` in ``columns``.

    Raises:
        QueryError: no such column (the message lists the closest names).
    """
    try:
        return list(columns).index(name)
    except ValueError:
        close = difflib.get_close_matches(name, list(columns), n=3)
        hint = f" Did you mean {', '.join(f'`{c}`' for c in close)}?" if close else ""
        shown = ", ".join(f"`{c}`" for c in list(columns)[:12])
        more = f" (+{len(columns) - 12} more)" if len(columns) > 12 else ""
        msg = f"No column `{name}` in this frame; its columns are {shown}{more}.{hint}"
        raise QueryError(msg) from None


def cells_from_spec(
    shape: Sequence[int] | int,
    boxes: Sequence[str] = (),
    indices: Sequence[Sequence[int]] = (),
    *,
    columns: Sequence[str] | None = None,
) -> CellSet:
    """The cells of an array of ``shape`` named by box strings and index lists (their union).

    An int in a box string is a one-wide box on that axis (``"3"`` is row 3 of a matrix, as
    ``a[3]`` is in NumPy), so a box string never has to spell every axis. With ``columns`` (a
    frame's column names, in order) the second axis may name a column: ``"0:10,genres"``.

    Raises:
        QueryError: a malformed box, a box or index outside the array, a wrong rank, or a
            column name that is not one of ``columns`` (or given for an array without names).
    """
    s = as_shape(shape, "Array")
    result = CellSet.empty(s)
    keys = []
    if isinstance(boxes, str) or not isinstance(boxes, Sequence):
        msg = f'Boxes of cells are a list of texts such as `["0:10,3"]`, got `{boxes!r:.60}`.'
        raise QueryError(msg)
    for text in boxes:
        key: list[int | slice] = []
        for axis, k in enumerate(parse_box(text, names=True)):
            if isinstance(k, str):
                if columns is None or axis != 1:
                    where = "has no column names" if columns is None else "names columns on axis 1"
                    msg = (
                        f"Cannot read `{k}` in cells `{text}`: this array {where}; use ints "
                        "and a:b slices, e.g. 0:10,3."
                    )
                    raise QueryError(msg)
                k = column_position(columns, k)
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
