"""Character-range lineage: a string cell seen as a 1-D array of characters.

Cell lineage says *which* input cells an output cell came from (``token ← line``). Inside a
string cell there is one more axis, the character position, and with it lineage can say
*which characters* (PROVision §IV-B: the substring a regex extracted, the token a split
produced). dslog models it as one more axis and nothing else, so ProvRC, its queries and its
compression need no new machinery:

* **Spaces.** For an output column ``col`` whose characters come from input column ``c`` of
  input ``x``, the *character space* of ``col`` is the 2-D array ``(row, character)`` of
  shape ``(output rows, extent)``, where the extent is the longest value of the column in
  characters (Unicode code points, as Spark's ``length`` and Python's ``len`` count them;
  not bytes, not UTF-16 units). ``x.c`` has its own ``(rows, extent)`` space.
* **Relation.** A :class:`CharacterTable` is an ordinary
  :class:`~dslog_dagster.core.provrc.LineageTable` between those two spaces: output character
  ``(r, k)`` ← input character ``(r', k')``. It is stored *beside* the operation's cell
  lineage, never instead of it: the cell tables (``(row, column)``) are unchanged, and the
  character tables of an operation are one more relation per (output column, input column)
  pair that has one. ``substring(line, 2, 3)`` over rows kept in place is
  ``(r, k) ← (r, k + 1)`` for ``k < 3``: one ProvRC row for any number of rows (relative
  encoding on both axes).
* **Meaning.** The characters of an output cell come from the input characters of its pairs
  (contributing lineage). Characters made by the function itself (a pad, a literal, a
  separator) have no pairs. A null cell and an empty string have no characters.
* **Fallback.** Where an operation has no character table for a column (a UDF, a function
  without a character rule, an aggregate's value), a character query falls back to the whole
  cells of the cell lineage and says so (:attr:`CharacterRange.whole`); a cell whose
  characters could not be placed (e.g. ``lower`` changed the string's length) has every one
  of its characters linked to every character of its input cells, and is counted in
  :attr:`CharacterLineage.coarse_cells`.

The model is engine-neutral: a capture (Spark's in :mod:`dslog_dagster.spark.characters`,
pandas' string methods in :mod:`dslog_dagster.pandas.char_segments`) fills
:class:`CharacterLineage`; :func:`trace_characters` answers "which characters of which input
cell" for a character range of one output cell, and :func:`trace_cell` does it for a capture's
output column, falling back to whole cells.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.query.cells import CellSet
from dslog_dagster.core.query.engine import Direction, query_path
from dslog_dagster.errors import InvalidRelationError, QueryError

__all__ = [
    "CharacterLineage",
    "CharacterRange",
    "CharacterTable",
    "ranges_of",
    "trace_cell",
    "trace_characters",
]


@dataclass(frozen=True)
class CharacterTable:
    """Output column ``column``'s characters ← input ``input``'s column ``input_column``'s
    characters, as a ProvRC table of shape ``(rows, extent) ← (rows, extent)``."""

    column: str
    input: str
    input_column: str
    table: LineageTable


@dataclass(frozen=True)
class CharacterRange:
    """Characters ``start:stop`` (half-open) of cell ``(row, column)`` of input ``input``;
    ``whole`` when the answer fell back to the whole cell (``start == 0``, ``stop is None``)
    because the operation has no character lineage for the queried column."""

    input: str
    column: str
    row: int
    start: int
    stop: int | None
    whole: bool = False


@dataclass(frozen=True)
class CharacterLineage:
    """The character lineage of one operation.

    Attributes:
        tables: one per (output column, input, input column) with character lineage.
        whole_cell: output string columns without character lineage, with the reason (their
            characters fall back to whole cells).
        coarse_cells: per output column, cells whose characters could not be placed and are
            linked whole-cell to whole-cell (every character to every character).
    """

    tables: tuple[CharacterTable, ...] = ()
    whole_cell: Mapping[str, str] = field(default_factory=dict)
    coarse_cells: Mapping[str, int] = field(default_factory=dict)

    def columns(self) -> list[str]:
        """Output columns with character lineage."""
        return sorted({t.column for t in self.tables})

    def table(self, column: str, input: str, input_column: str) -> LineageTable:
        """The character table of ``column`` ← ``input.input_column``.

        Raises:
            QueryError: there is none (the message names the pairs there are).
        """
        for t in self.tables:
            if (t.column, t.input, t.input_column) == (column, input, input_column):
                return t.table
        have = [(t.column, t.input, t.input_column) for t in self.tables]
        why = self.whole_cell.get(column)
        msg = (
            f"No character lineage for `{column}` ← `{input}.{input_column}`"
            + (f": {why}" if why else "")
            + f". The character tables are {have}."
        )
        raise QueryError(msg)


def ranges_of(cells: CellSet, input: str, column: str) -> list[CharacterRange]:
    """A ``(row, character)`` cell set as maximal character ranges per row (sorted)."""
    out: list[CharacterRange] = []
    idx = cells.to_indices()
    for r in np.unique(idx[:, 0]) if len(idx) else []:
        ks = np.sort(idx[idx[:, 0] == r, 1])
        breaks = np.flatnonzero(np.diff(ks) != 1) + 1
        for run in np.split(ks, breaks):
            out.append(CharacterRange(input, column, int(r), int(run[0]), int(run[-1]) + 1))
    return out


def trace_characters(
    table: LineageTable,
    input: str,
    column: str,
    row: int,
    start: int = 0,
    stop: int | None = None,
    direction: Direction = "backward",
) -> list[CharacterRange]:
    """The input characters that output characters ``start:stop`` (default: all) of output
    row ``row`` come from, through one character table, as maximal ranges per input row.
    One backward hop of the ordinary query engine over the ``(row, character)`` spaces.

    ``direction="forward"`` reads the table the other way: ``row`` and ``start:stop`` are then
    characters of the *input*, and the answer the output characters made from them
    (``input``/``column`` name the output in the ranges returned).

    Raises:
        QueryError: the row or the range is outside the table's character space.
    """
    space = table.out_shape if direction == "backward" else table.in_shape
    n_rows, extent = space
    stop = extent if stop is None else stop
    if not (0 <= row < n_rows) or not (0 <= start <= stop <= extent):
        side = "output" if direction == "backward" else "input"
        msg = (
            f"Characters {start}:{stop} of row {row} are outside the {side}'s character "
            f"space of {n_rows} rows × {extent} characters."
        )
        raise QueryError(msg)
    if start == stop:
        return []
    cells = CellSet.from_ranges(space, [[row, start]], [[row + 1, stop]])
    return ranges_of(query_path([(table, direction)], cells), input, column)


def trace_cell(
    lineage: "CharacterLineage | None",
    column: str,
    columns: Sequence[str],
    row: int,
    start: int,
    stop: int | None,
    shape: tuple[int, int],
    contributing: Mapping[str, LineageTable],
    input_columns: Mapping[str, Sequence[str]],
) -> list[CharacterRange]:
    """Characters ``start:stop`` of output cell ``(row, column)`` (of an output of ``shape``
    whose columns are ``columns``) through every character table of the column; a column
    without one falls back to the whole input cells of the cell lineage ``contributing``
    (``{input name: table}``, inputs' column names in ``input_columns``), marked ``whole``.
    What a Spark and a pandas capture's ``trace_characters`` answer.

    Raises:
        InvalidRelationError: ``lineage`` is ``None`` (a capture made without
            ``characters=True``), or ``column`` is not one of ``columns``.
    """
    if lineage is None:
        msg = "This capture has no character lineage; capture with `characters=True`."
        raise InvalidRelationError(msg)
    if column not in columns:
        msg = f"No output column `{column}`; the columns are {list(columns)}."
        raise InvalidRelationError(msg)
    j = list(columns).index(column)
    found = [t for t in lineage.tables if t.column == column]
    if found:
        out: list[CharacterRange] = []
        for t in found:
            out += trace_characters(t.table, t.input, t.input_column, row, start, stop)
        return sorted(out, key=lambda r: (r.input, r.column, r.row, r.start))
    whole: list[CharacterRange] = []
    for name, table in contributing.items():
        cells = CellSet.from_ranges(shape, [[row, j]], [[row + 1, j + 1]])
        for r, c in query_path([(table, "backward")], cells).to_indices():
            whole.append(CharacterRange(name, input_columns[name][c], int(r), 0, None, True))
    return sorted(whole, key=lambda r: (r.input, r.column, r.row))
