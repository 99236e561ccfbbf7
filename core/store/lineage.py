"""An operation's lineage as the store receives it: checked, compressed, encoded, framed.

The first half of a registration (:meth:`LineageStore.prepare_operation`) happens entirely in
memory, so that a failure leaves nothing behind: each ``(output, input)`` entry of the
lineage is checked against the operation's arrays, compressed when it is a relation
(:func:`~dslog_dagster.core.compression.compress`) and encoded as a segment blob; then the
operation record is built around the blobs and the whole is framed as the bytes of one
segment file.
"""

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dslog_dagster.core.compression import compress
from dslog_dagster.core.format import segment
from dslog_dagster.core.format.blob import table_to_blob
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store.char_records import StoredCharacters
from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.core.store.records import (
    TIMING_COMPRESS,
    TIMING_ENCODE,
    ArrayRecord,
    OperationRecord,
    TableRecord,
    now,
)
from dslog_dagster.errors import InvalidRelationError


@dataclass(frozen=True, slots=True)
class EncodedTable:
    """One lineage table of an operation, ready to be stored."""

    output: str
    input: str
    table: LineageTable
    blob: bytes


def encode_lineage(
    op_name: str,
    lineage: Mapping[Any, Any],
    by_out: Mapping[str, ArrayRecord],
    by_in: Mapping[str, ArrayRecord],
    timings: dict[str, float],
) -> list[EncodedTable]:
    """Check, compress and encode every entry of ``lineage`` (``{(output, input): relation or
    table}``) against the operation's outputs ``by_out`` and inputs ``by_in`` (by name).

    The seconds spent compressing and encoding are added to ``timings`` under ``compress_s``
    and ``encode_s``.

    Raises:
        InvalidRelationError: a malformed key, an array that is not among the operation's, a
            value that is neither a relation nor a table, or shapes that do not match.
    """
    t_compress = 0.0
    t_encode = 0.0
    encoded: list[EncodedTable] = []
    for key, value in lineage.items():
        out_name, in_name = _lineage_key(op_name, key, by_out, by_in)
        if isinstance(value, LineageRelation):
            t0 = time.perf_counter()
            table = compress(value)
            t_compress += time.perf_counter() - t0
        elif isinstance(value, LineageTable):
            table = value
        else:
            msg = (
                f"Operation `{op_name}`: lineage for `{out_name}` ← `{in_name}` is a "
                f"`{type(value).__name__}`; pass a LineageRelation or a LineageTable."
            )
            raise InvalidRelationError(msg)
        want_out, want_in = by_out[out_name].shape, by_in[in_name].shape
        if tuple(table.out_shape) != want_out or tuple(table.in_shape) != want_in:
            msg = (
                f"Operation `{op_name}`: lineage for `{out_name}` ← `{in_name}` has shapes "
                f"{tuple(table.out_shape)} ← {tuple(table.in_shape)}, but the arrays are "
                f"registered as {want_out} ← {want_in}. Build the relation with the arrays' "
                "shapes (or register the arrays with the right shapes/versions)."
            )
            raise InvalidRelationError(msg)
        t0 = time.perf_counter()
        data = table_to_blob(table)
        t_encode += time.perf_counter() - t0
        encoded.append(EncodedTable(out_name, in_name, table, data))
    timings[TIMING_COMPRESS] = timings.get(TIMING_COMPRESS, 0.0) + t_compress
    timings[TIMING_ENCODE] = timings.get(TIMING_ENCODE, 0.0) + t_encode
    return encoded


def _lineage_key(
    op_name: str, key: object, by_out: Mapping[str, ArrayRecord], by_in: Mapping[str, ArrayRecord]
) -> tuple[str, str]:
    """The ``(output name, input name)`` of lineage key ``key``, checked."""
    if not (isinstance(key, tuple) and len(key) == 2):
        msg = (
            f"Operation `{op_name}`: lineage key `{key!r}` must be a tuple "
            "(output name, input name)."
        )
        raise InvalidRelationError(msg)
    out_name, in_name = (k.name if isinstance(k, ArrayRecord) else k for k in key)
    if out_name not in by_out:
        msg = (
            f"Operation `{op_name}`: lineage key ({out_name!r}, {in_name!r}) names output "
            f"`{out_name}`, which is not among the declared outputs {sorted(by_out)}."
        )
        raise InvalidRelationError(msg)
    if in_name not in by_in:
        msg = (
            f"Operation `{op_name}`: lineage key ({out_name!r}, {in_name!r}) names input "
            f"`{in_name}`, which is not among the declared inputs {sorted(by_in)}."
        )
        raise InvalidRelationError(msg)
    return out_name, in_name


def operation_segment(
    op_name: str,
    inputs: tuple[ArrayRecord, ...],
    outputs: tuple[ArrayRecord, ...],
    args: dict[str, Any],
    capture_method: str,
    timings: dict[str, float],
    tables: list[EncodedTable],
    characters: tuple[StoredCharacters | None, list[bytes]] = (None, []),
    effects: OperationEffects | None = None,
) -> tuple[OperationRecord, str, bytes]:
    """A new operation: its record (with a fresh op id), its segment's root-relative path
    and the segment's bytes (``characters``: the record and blobs of its character tables,
    stored after the cell tables, see :mod:`~dslog_dagster.core.store.char_records`).

    ``op_id`` starts with a nanosecond timestamp and ends with a random UUID, so ids are
    unique across processes and sort by time.
    """
    ns, created = now()
    op_id = f"{ns:016x}{uuid.uuid4().hex}"
    rel = f"operations/{op_id}.parquet"
    records = tuple(
        TableRecord(
            op_id,
            t.output,
            t.input,
            t.table.stored_encoding,
            int(t.table.stored_rows),
            int(t.table.n_pairs),
            len(t.blob),
            rel,
        )
        for t in tables
    )
    chars, char_blobs = characters
    record = OperationRecord(
        op_id, op_name, inputs, outputs, args, capture_method, timings, created, records, chars,
        effects,
    )  # fmt: skip
    data = segment.segment_to_bytes(
        [(op_id, json.dumps(record.to_json()), [*(t.blob for t in tables), *char_blobs])]
    )
    return record, rel, data
