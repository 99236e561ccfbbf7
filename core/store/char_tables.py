"""Character tables in and out of an operation's segment.

Registration (``LineageStore.register_operation(..., characters=...)``) checks each
:class:`~dslog_dagster.core.characters.CharacterLineage` against the operation's arrays and
encodes its tables as blobs that follow the cell tables in the operation's segment
(:mod:`~dslog_dagster.core.store.char_records` says why there). :func:`read_characters` reads
them back through the segment's checked reads: a damaged blob raises
:class:`~dslog_dagster.errors.LineageCorruptError` naming the file, as a cell table does.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from dslog_dagster.core.characters import CharacterLineage, CharacterTable
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.store.char_records import CharTableRecord, StoredCharacters
from dslog_dagster.core.store.records import ArrayRecord, OperationRecord
from dslog_dagster.errors import InvalidRelationError, LineageNotFoundError

if TYPE_CHECKING:
    from pathlib import Path

    from dslog_dagster.core.store.operations import OperationFiles


class _Store(Protocol):
    """What :func:`read_characters` uses of a
    :class:`~dslog_dagster.core.store.store.LineageStore` (named structurally: the store
    imports this module to register character tables)."""

    root: "Path"
    operation_files: "OperationFiles"

    def get_operation(self, op_id: str) -> OperationRecord: ...


__all__ = ["CharacterLineage", "encode_characters", "read_characters"]


def _check_column(op_name: str, a: ArrayRecord, column: str, what: str) -> None:
    names = a.column_names
    if names is not None and column not in names:
        msg = (
            f"Operation `{op_name}`: character lineage names column `{column}` of {what} "
            f"`{a.name}`, whose columns are {names}."
        )
        raise InvalidRelationError(msg)


def encode_characters(
    op_name: str,
    characters: Mapping[str, CharacterLineage],
    by_out: Mapping[str, ArrayRecord],
    by_in: Mapping[str, ArrayRecord],
) -> tuple[StoredCharacters | None, list[bytes]]:
    """The record and blobs of ``characters`` (output array name -> its character lineage,
    whose tables' ``input`` name input arrays of the operation), checked.

    Raises:
        InvalidRelationError: an array that is not the operation's, a column it does not
            have, or a table whose row counts are not the arrays' rows.
    """
    if not characters:
        return None, []
    records: list[CharTableRecord] = []
    blobs: list[bytes] = []
    whole: dict[str, dict[str, str]] = {}
    coarse: dict[str, dict[str, int]] = {}
    for out_name, lin in characters.items():
        if out_name not in by_out or not isinstance(lin, CharacterLineage):
            msg = (
                f"Operation `{op_name}`: `characters` maps output names {sorted(by_out)} to "
                f"CharacterLineage; got `{out_name!r}` -> `{type(lin).__name__}`."
            )
            raise InvalidRelationError(msg)
        out = by_out[out_name]
        for t in lin.tables:
            if t.input not in by_in:
                msg = (
                    f"Operation `{op_name}`: character table `{t.column}` ← `{t.input}."
                    f"{t.input_column}` names input `{t.input}`, not among {sorted(by_in)}."
                )
                raise InvalidRelationError(msg)
            inp = by_in[t.input]
            _check_column(op_name, out, t.column, "output")
            _check_column(op_name, inp, t.input_column, "input")
            rows = (t.table.out_shape[0], t.table.in_shape[0])
            if len(t.table.out_shape) != 2 or rows != (out.shape[0], inp.shape[0]):
                msg = (
                    f"Operation `{op_name}`: character table `{t.column}` ← `{t.input}."
                    f"{t.input_column}` is {tuple(t.table.out_shape)} ← "
                    f"{tuple(t.table.in_shape)}; it must be (rows, characters) with "
                    f"{out.shape[0]} ← {inp.shape[0]} rows."
                )
                raise InvalidRelationError(msg)
            blob = table_to_blob(t.table)
            blobs.append(blob)
            records.append(
                CharTableRecord(
                    out_name,
                    t.column,
                    t.input,
                    t.input_column,
                    t.table.stored_encoding,
                    int(t.table.stored_rows),
                    int(t.table.n_pairs),
                    len(blob),
                )
            )
        if lin.whole_cell:
            whole[out_name] = {str(c): str(w) for c, w in lin.whole_cell.items()}
        if lin.coarse_cells:
            coarse[out_name] = {str(c): int(n) for c, n in lin.coarse_cells.items()}
    return StoredCharacters(tuple(records), whole, coarse), blobs


def read_characters(store: _Store, op: "str | OperationRecord", output: str) -> CharacterLineage:
    """The character lineage of ``op``'s output ``output`` as it was registered (tables'
    ``input`` name the input arrays); empty when the operation has none.

    Raises:
        LineageNotFoundError: no such operation, or ``output`` is not one of its outputs.
        LineageCorruptError: a character table is damaged (the message names the file).
    """
    rec = op if isinstance(op, OperationRecord) else store.get_operation(op)
    if output not in {a.name for a in rec.outputs}:
        msg = f"Operation `{rec.op_name}` (`{rec.op_id}`) has no output `{output}`."
        raise LineageNotFoundError(msg)
    chars = rec.characters
    if chars is None:
        return CharacterLineage()
    tables = []
    for i, t in enumerate(chars.tables):
        if t.output != output:
            continue
        k = len(rec.tables) + i

        def read(seg: Any, k: int = k) -> Any:
            return seg.blob(rec.op_id, k)

        try:
            blob, rel = store.operation_files.in_segment(rec.op_id, read)
        except FileNotFoundError as e:
            msg = (
                f"The lineage of operation `{rec.op_id}` is not in the store at `{store.root}` "
                "(its segment was deleted?); `dslog inspect` lists what is there."
            )
            raise LineageNotFoundError(msg) from e
        table = table_from_blob(blob, str(store.root / rel))
        tables.append(CharacterTable(t.column, t.input, t.input_column, table))
    return CharacterLineage(
        tuple(tables),
        dict(chars.whole_cell.get(output, {})),
        dict(chars.coarse_cells.get(output, {})),
    )
