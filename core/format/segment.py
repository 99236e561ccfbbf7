"""Segments: the files of a lineage store, one row per operation.

A lineage store keeps operations in *segment* files: Parquet files with one row per
operation (its record and all its lineage tables). A registration writes a segment of one
operation; compaction (``LineageStore.compact``) merges many small ones into a pack.

Columns: ``op`` (operation id), ``rec`` (the operation record, JSON) and ``data``
(list<binary>: one self-describing blob per lineage table, in the record's table order; see
:mod:`~dslog_dagster.core.format.blob`). ``op`` and ``rec`` use the file codec; ``data`` is
stored by Parquet *uncompressed*: each blob is compressed on its own when that pays.

A segment of one operation with a small record is written without pyarrow
(:mod:`~dslog_dagster.core.format.parquet_writer`), every other one through pyarrow.
"""

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dslog_dagster.core.format.codec import Codec, zstd_level
from dslog_dagster.core.format.parquet_writer import one_operation_segment
from dslog_dagster.core.format.version import check_version
from dslog_dagster.errors import LineageStorageError

SEGMENT_SCHEMA_VERSION = "2-1-0"
SEGMENT_KIND = "operations"
SEGMENT_ROW_GROUP = 256
"""Operations per Parquet row group: a read decodes one group, not the whole pack."""

_SEGMENT_SCHEMA = pa.schema(
    [
        pa.field("op", pa.string()),
        pa.field("rec", pa.string()),
        pa.field("data", pa.list_(pa.large_binary())),
    ]
)

SMALL_SEGMENT_RECORD = 16 * 1024
"""A one-operation segment whose record is at most this many bytes is written by
:func:`~dslog_dagster.core.format.parquet_writer.one_operation_segment` (uncompressed
columns: zstd would save less than a file-system block)."""


def segment_to_bytes(
    entries: Sequence[tuple[str, str, Sequence[bytes]]],
    codec: Codec = "zstd",
) -> bytes:
    """The bytes of a segment file holding ``entries`` = ``(op_id, record JSON, blobs)``.

    The segment of one operation with a small record (every registration: packs come from
    compaction) is written by
    :func:`~dslog_dagster.core.format.parquet_writer.one_operation_segment`, the same Parquet
    schema without pyarrow's writer, whose set-up cost ~0.5 ms of a tracked step served from
    a reuse view; ``codec`` then does not apply (its columns are stored uncompressed). Other
    segments go through pyarrow with ``codec``.
    """
    if len(entries) == 1:
        op_id, rec, blobs = entries[0]
        rec_b = rec.encode()
        if len(rec_b) <= SMALL_SEGMENT_RECORD:
            meta = {"dslog.schema_version": SEGMENT_SCHEMA_VERSION, "dslog.kind": SEGMENT_KIND}
            return one_operation_segment(op_id.encode(), rec_b, [bytes(b) for b in blobs], meta)
    return _arrow_segment_bytes(entries, codec)


def _arrow_segment_bytes(
    entries: Sequence[tuple[str, str, Sequence[bytes]]], codec: Codec = "zstd"
) -> bytes:
    """:func:`segment_to_bytes` through pyarrow's Parquet writer (any number of entries)."""
    rec_bytes = sum(len(r) for _, r, _ in entries)
    compression = {"op": codec, "rec": codec, "data": "none"}
    kwargs: dict[str, Any] = {
        "compression": compression,
        "use_dictionary": False,
        "write_statistics": False,
        "store_schema": False,
    }
    if codec == "zstd":
        # Records are JSON text: zstd's strong levels gain nothing on them (a 1 KB record is
        # within 2% at level 3) but cost ~150 us per column to set up at level 19, a
        # noticeable share of a step served from a reuse view.
        level = 3 if rec_bytes <= 1 << 16 else zstd_level(rec_bytes)
        kwargs["compression_level"] = {"op": level, "rec": level}
    meta = {"dslog.schema_version": SEGMENT_SCHEMA_VERSION, "dslog.kind": SEGMENT_KIND}
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, _SEGMENT_SCHEMA, **kwargs) as writer:
        for start in range(0, max(len(entries), 1), SEGMENT_ROW_GROUP):
            part = entries[start : start + SEGMENT_ROW_GROUP]
            arrow = pa.Table.from_arrays(
                [
                    pa.array([e[0] for e in part], pa.string()),
                    pa.array([e[1] for e in part], pa.string()),
                    pa.array([list(e[2]) for e in part], pa.list_(pa.large_binary())),
                ],
                schema=_SEGMENT_SCHEMA,
            )
            writer.write_table(arrow)
        writer.add_key_value_metadata(meta)
    return buf.getvalue()


class Segment:
    """An open segment file: its operation ids, and their records and tables on demand.

    Raises ``FileNotFoundError`` (unwrapped) when the file is gone, so that the store can look
    for the operation elsewhere (a compaction may have moved it); any other problem is a
    :class:`LineageStorageError`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._file = pq.ParquetFile(self.path)
        except FileNotFoundError:
            raise
        except (pa.ArrowException, OSError) as e:
            msg = f"`{self.path}` is not a readable lineage segment: {e}"
            raise LineageStorageError(msg) from e
        md = self._file.metadata
        check_version(md.metadata or {}, str(self.path), SEGMENT_SCHEMA_VERSION)
        if (md.metadata or {}).get(b"dslog.kind") != SEGMENT_KIND.encode():
            msg = f"`{self.path}` is a dslog file but not an operations segment."
            raise LineageStorageError(msg)
        self._group_starts = []
        start = 0
        for g in range(md.num_row_groups):
            self._group_starts.append(start)
            start += md.row_group(g).num_rows
        self.op_ids: list[str] = [str(x) for x in self._read(["op"]).column("op").to_pylist()]
        self._rows = {op: i for i, op in enumerate(self.op_ids)}

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Segment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, columns: list[str], group: int | None = None) -> pa.Table:
        try:
            if group is None:
                return self._file.read(columns=columns)
            return self._file.read_row_group(group, columns=columns)
        except (pa.ArrowException, OSError) as e:
            msg = f"`{self.path}` is a damaged lineage segment: {e}"
            raise LineageStorageError(msg) from e

    def _locate(self, op_id: str) -> tuple[int, int]:
        row = self._rows.get(op_id)
        if row is None:
            msg = f"operation `{op_id}` is not in segment `{self.path}`"
            raise KeyError(msg)
        group = max(g for g, s in enumerate(self._group_starts) if s <= row)
        return group, row - self._group_starts[group]

    def records(self) -> list[tuple[str, str]]:
        """``(op_id, record JSON)`` of every operation in the segment."""
        t = self._read(["op", "rec"])
        return list(zip(t.column("op").to_pylist(), t.column("rec").to_pylist(), strict=True))

    def record(self, op_id: str) -> str:
        """The record JSON of ``op_id`` (``KeyError`` when it is not here)."""
        group, i = self._locate(op_id)
        return str(self._read(["rec"], group).column("rec")[i].as_py())

    def blob(self, op_id: str, k: int) -> bytes:
        """The ``k``-th table blob of ``op_id`` (``KeyError`` when it is not here)."""
        group, i = self._locate(op_id)
        blobs = self._read(["data"], group).column("data")[i].as_py()
        if not 0 <= k < len(blobs):
            msg = f"operation `{op_id}` has {len(blobs)} tables in `{self.path}`, not {k + 1}"
            raise KeyError(msg)
        return bytes(blobs[k])

    def entries(self) -> list[tuple[str, str, list[bytes]]]:
        """Every ``(op_id, record JSON, blobs)`` (for compaction)."""
        t = self._read(["op", "rec", "data"])
        return [
            (str(o), str(r), [bytes(b) for b in d])
            for o, r, d in zip(
                t.column("op").to_pylist(),
                t.column("rec").to_pylist(),
                t.column("data").to_pylist(),
                strict=True,
            )
        ]
