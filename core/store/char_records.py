"""The record of an operation's character tables, kept in its operation record.

Character-range lineage (:mod:`dslog_dagster.core.characters`) is one ProvRC table per
(output array, output column, input array, input column) between ``(row, character)`` spaces.
An operation's segment stores them as more blobs after its cell tables (blob
``len(tables) + i`` is character table ``i``), so they are checksummed, verified on read,
copied by compaction and dropped by retraction exactly like the cell tables; the record names
them under the key ``characters``. The key is written only when the operation has character
lineage, so records without it (and readers that predate it) are unchanged.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CharTableRecord", "StoredCharacters"]


@dataclass(frozen=True, slots=True)
class CharTableRecord:
    """One stored character table: characters of ``output``'s column ``column`` ←
    characters of ``input``'s column ``input_column``.

    Attributes:
        encoding, rows, n_pairs, stored_bytes: as for
            :class:`~dslog_dagster.core.store.records.TableRecord` (``rows`` are the stored
            ProvRC rows: one for a fixed-width ``substring`` over a column).
    """

    output: str
    column: str
    input: str
    input_column: str
    encoding: str
    rows: int
    n_pairs: int
    stored_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "column": self.column,
            "input": self.input,
            "input_column": self.input_column,
            "encoding": self.encoding,
            "rows": self.rows,
            "n_pairs": self.n_pairs,
            "bytes": self.stored_bytes,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CharTableRecord":
        return cls(
            str(d["output"]),
            str(d["column"]),
            str(d["input"]),
            str(d["input_column"]),
            str(d["encoding"]),
            int(d["rows"]),
            int(d["n_pairs"]),
            int(d["bytes"]),
        )


@dataclass(frozen=True, slots=True)
class StoredCharacters:
    """An operation's character lineage as its record holds it.

    Attributes:
        tables: the character tables, in blob order (after the cell tables).
        whole_cell: output array -> string column -> why it has no character lineage (its
            characters fall back to whole cells).
        coarse_cells: output array -> column -> cells whose characters could not be placed
            (linked whole cell to whole cell).
    """

    tables: tuple[CharTableRecord, ...] = ()
    whole_cell: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    coarse_cells: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": [t.to_json() for t in self.tables],
            "whole_cell": {o: dict(v) for o, v in self.whole_cell.items()},
            "coarse_cells": {o: dict(v) for o, v in self.coarse_cells.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "StoredCharacters | None":
        """``None`` for a record without character lineage (the key absent)."""
        if d is None:
            return None
        return cls(
            tuple(CharTableRecord.from_json(t) for t in d["tables"]),
            {str(o): {str(c): str(w) for c, w in v.items()} for o, v in d["whole_cell"].items()},
            {str(o): {str(c): int(n) for c, n in v.items()} for o, v in d["coarse_cells"].items()},
        )
