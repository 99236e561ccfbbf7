"""Segments: the files of a lineage store, one row per operation.

A lineage store keeps operations in *segment* files: Parquet files with one row per
operation (its record and all its lineage tables). A registration writes a segment of one
operation; compaction (``LineageStore.compact``) merges many small ones into a pack.

Columns: ``op`` (operation id), ``rec`` (the operation record, JSON), ``data``
(list<binary>: one self-describing blob per lineage table, in the record's table order; see
:mod:`~dslog_dagster.core.format.blob`) and ``sums`` (the row's XXH3 digests, see
:mod:`~dslog_dagster.core.format.checksum`). ``op``, ``rec`` and ``sums`` use the file codec;
``data`` is stored by Parquet *uncompressed*: each blob is compressed on its own when that
pays. The key-value metadata holds ``dslog.schema_version``, ``dslog.kind`` and ``dslog.ops``
(the digest of the operation ids).

Every read is checked: a row whose digests do not match, a list of ids that does not match
``dslog.ops``, a file pyarrow cannot decode, all raise
:class:`~dslog_dagster.errors.LineageCorruptError` naming the file (and the operation when
known). Segments of format ``2-0``/``2-1`` (before checksums) are read as *unverified*
(:attr:`Segment.verified` is ``False``); ``LineageStore.verify`` lists them.

A segment of one operation with a small record is written without pyarrow
(:mod:`~dslog_dagster.core.format.parquet_writer`), every other one through pyarrow.
"""

import contextlib
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.parquet as pq

from dslog_dagster.core.format.checksum import (
    DIGEST_BYTES,
    blob_digest,
    ids_digest,
    record_digest,
    row_sums,
)
from dslog_dagster.core.format.codec import Codec, zstd_level
from dslog_dagster.core.format.parquet_writer import one_operation_segment
from dslog_dagster.errors import LineageCorruptError, SchemaVersionError

SEGMENT_SCHEMA_VERSION = "2-2-0"
"""``2-2`` added the checksums (``sums``, ``dslog.ops``); ``2-1`` factored tables."""
SEGMENT_KIND = "operations"
SEGMENT_ROW_GROUP = 256
"""Operations per Parquet row group: a read decodes one group, not the whole pack."""
CHECKED_MINOR = 2
"""The first minor version of the store format with checksums; older files are unverified."""

_SEGMENT_SCHEMA = pa.schema(
    [
        pa.field("op", pa.string()),
        pa.field("rec", pa.string()),
        pa.field("data", pa.list_(pa.large_binary())),
        pa.field("sums", pa.binary()),
    ]
)
_VERSION_RE = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_FIX = (
    "Run `dslog fsck STORE --quarantine` to move damaged files aside (the rest of the store "
    "stays usable) and `dslog rebuild-catalog STORE`."
)

SMALL_SEGMENT_RECORD = 16 * 1024
"""A one-operation segment whose record is at most this many bytes is written by
:func:`~dslog_dagster.core.format.parquet_writer.one_operation_segment` (uncompressed
columns: zstd would save less than a file-system block)."""


def segment_metadata(op_ids: Sequence[str]) -> dict[str, str]:
    """The key-value metadata of a segment holding ``op_ids`` (in file order)."""
    return {
        "dslog.schema_version": SEGMENT_SCHEMA_VERSION,
        "dslog.kind": SEGMENT_KIND,
        "dslog.ops": ids_digest(op_ids),
    }


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
            op_b = op_id.encode()
            data = [bytes(b) for b in blobs]
            return one_operation_segment(
                op_b, rec_b, data, row_sums(op_b, rec_b, data), segment_metadata([op_id])
            )
    return _arrow_segment_bytes(entries, codec)


def _arrow_segment_bytes(
    entries: Sequence[tuple[str, str, Sequence[bytes]]], codec: Codec = "zstd"
) -> bytes:
    """:func:`segment_to_bytes` through pyarrow's Parquet writer (any number of entries)."""
    rec_bytes = sum(len(r) for _, r, _ in entries)
    compression = {"op": codec, "rec": codec, "data": "none", "sums": codec}
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
        kwargs["compression_level"] = {"op": level, "rec": level, "sums": 3}
    meta = segment_metadata([e[0] for e in entries])
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, _SEGMENT_SCHEMA, **kwargs) as writer:
        for start in range(0, max(len(entries), 1), SEGMENT_ROW_GROUP):
            part = entries[start : start + SEGMENT_ROW_GROUP]
            arrow = pa.Table.from_arrays(
                [
                    pa.array([e[0] for e in part], pa.string()),
                    pa.array([e[1] for e in part], pa.string()),
                    pa.array([list(e[2]) for e in part], pa.list_(pa.large_binary())),
                    pa.array(
                        [row_sums(e[0].encode(), e[1].encode(), e[2]) for e in part], pa.binary()
                    ),
                ],
                schema=_SEGMENT_SCHEMA,
            )
            writer.write_table(arrow)
        writer.add_key_value_metadata(meta)
    return buf.getvalue()


class Segment:
    """An open segment file: its operation ids, and their records and tables on demand, each
    checked against its digests when read.

    Raises ``FileNotFoundError`` (unwrapped) when the file is gone, so that the store can look
    for the operation elsewhere (a compaction may have moved it); damage is a
    :class:`~dslog_dagster.errors.LineageCorruptError` naming the file, an unknown major
    format a :class:`~dslog_dagster.errors.SchemaVersionError`.

    Attributes:
        verified: the file carries checksums (format ``2-2`` and later); ``False`` for files
            of earlier formats, read as they are.
        bad_rows: operation id -> what is wrong with its row, for the rows :meth:`records`
            skipped.
    """

    def __init__(self, path: str | os.PathLike[str], op_ids: Sequence[str] | None = None) -> None:
        """Open the segment at ``path``; ``op_ids``: its operation ids as an earlier open of
        this same file read and checked them (segment files are immutable), so a big pack's
        id column is not read and checked again."""
        self.path = Path(path)
        self._known_ids = op_ids
        self.bad_rows: dict[str, str] = {}
        self._groups: dict[tuple[tuple[str, ...], int], pa.Table] = {}
        try:
            self._file = pq.ParquetFile(self.path)
        except FileNotFoundError:
            raise
        except (pa.ArrowException, OSError) as e:
            what = f"not a readable Parquet file ({e})"
            raise self.damage(what) from e
        try:
            self._open()
        except BaseException:
            self._file.close()
            raise

    def damage(self, what: str, op_id: str | None = None) -> LineageCorruptError:
        """The error for damage ``what`` in this file (of operation ``op_id`` when known)."""
        of = f" (operation `{op_id}`)" if op_id else ""
        msg = f"The lineage segment `{self.path}` is damaged{of}: {what}. {_FIX}"
        return LineageCorruptError(msg, self.path)

    def _fail(self, what: str, op_id: str | None = None) -> NoReturn:
        raise self.damage(what, op_id)

    def _open(self) -> None:
        md = self._file.metadata
        meta = md.metadata or {}
        raw = meta.get(b"dslog.schema_version", b"")
        m = _VERSION_RE.match(raw.decode("ascii", "replace"))
        if m is None or meta.get(b"dslog.kind") != SEGMENT_KIND.encode():
            self._fail("its dslog metadata (format version, kind) is missing or garbled")
        major, minor = int(m.group(1)), int(m.group(2))
        if major != int(SEGMENT_SCHEMA_VERSION.split("-")[0]):
            msg = (
                f"`{self.path}` was written with lineage format {raw.decode()}; this dslog "
                f"reads {SEGMENT_SCHEMA_VERSION.split('-')[0]}-x-x here. Upgrade dslog-dagster "
                "to read it."
            )
            raise SchemaVersionError(msg)
        names = self._file.schema_arrow.names
        checked = b"dslog.ops" in meta or "sums" in names
        self.verified = minor >= CHECKED_MINOR
        if checked != self.verified or (self.verified and "sums" not in names):
            self._fail(f"format {raw.decode()} disagrees with its checksum columns")
        if names[:3] != ["op", "rec", "data"]:
            self._fail(f"unexpected columns {names}")
        self._group_starts = []
        start = 0
        for g in range(md.num_row_groups):
            self._group_starts.append(start)
            start += md.row_group(g).num_rows
        if self._known_ids is not None and len(self._known_ids) == md.num_rows:
            self.op_ids: list[str] = list(self._known_ids)
        else:
            self.op_ids = self._ids()
            digest = meta.get(b"dslog.ops", b"").decode("ascii", "replace")
            if self.verified and digest != ids_digest(self.op_ids):
                self._fail("its operation ids do not match their checksum")
        self._rows = {op: i for i, op in enumerate(self.op_ids)}

    def _ids(self) -> list[str]:
        """The ``op`` column as text: decoded by Arrow when it is valid UTF-8 (a pack of
        100,000 ids: a few ms, not ~0.1 s through Python), else value by value so damage is
        reported as such (the ids' digest is checked either way)."""
        t = self._read(["op"])
        col = t.column("op")
        if pa.types.is_string(col.type) and col.null_count == 0:
            with contextlib.suppress(pa.ArrowException, UnicodeDecodeError):
                col.validate(full=True)
                return [str(x) for x in col.to_pylist()]
        return [self._text(x, "an operation id") for x in self._raw("op", t)]

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
        except (pa.ArrowException, OSError, IndexError, ValueError) as e:
            what = f"Parquet cannot decode it ({e})"
            raise self.damage(what) from e

    def _whole(self, columns: list[str]) -> pa.Table:
        t = self._read(columns)
        if t.num_rows != len(self.op_ids):
            self._fail(f"it has {t.num_rows} rows but {len(self.op_ids)} operation ids")
        return t

    def _group(self, columns: list[str], group: int, i: int) -> pa.Table:
        # kept while the file is open: reading a page of records from one pack reads each
        # of its row groups once, not once per record
        key = (tuple(columns), group)
        t = self._groups.get(key)
        if t is None:
            t = self._groups[key] = self._read(columns, group)
        if i >= t.num_rows:
            self._fail(f"row group {group} is shorter than its operation ids")
        return t

    def _raw(self, name: str, t: pa.Table | None = None) -> list[Any]:
        """Column ``name`` (of ``t``, else read whole) as Python values, strings as bytes:
        a damaged string must reach the checksum, not fail in a UTF-8 decoder."""
        if t is None:
            t = self._read([name])
        col = t.column(name)
        if pa.types.is_string(col.type):
            col = col.cast(pa.binary())
        return list(col.to_pylist())

    def _text(self, raw: object, what: str, op_id: str | None = None) -> str:
        if not isinstance(raw, bytes):
            self._fail(f"{what} is missing", op_id)
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            text = f"{what} is not UTF-8 text"
            raise self.damage(text, op_id) from e

    def _columns(self, *names: str) -> list[str]:
        return [*names, "sums"] if self.verified else list(names)

    def _locate(self, op_id: str) -> tuple[int, int]:
        row = self._rows.get(op_id)
        if row is None:
            msg = f"operation `{op_id}` is not in segment `{self.path}`"
            raise KeyError(msg)
        group = max(g for g, s in enumerate(self._group_starts) if s <= row)
        return group, row - self._group_starts[group]

    def _sums(self, t: pa.Table, i: int, op_id: str) -> bytes:
        cell = t.column("sums")[i].as_py()
        if not isinstance(cell, bytes) or not cell or len(cell) % DIGEST_BYTES:
            self._fail("its checksums are missing or truncated", op_id)
        return cell

    def _checked_record(self, op_id: str, rec: object, sums: bytes | None) -> str:
        if not isinstance(rec, bytes):
            self._fail("the operation record is missing", op_id)
        if sums is not None and sums[:DIGEST_BYTES] != record_digest(op_id.encode(), rec):
            self._fail("the operation record does not match its checksum", op_id)
        return self._text(rec, "the operation record", op_id)

    def records(self) -> list[tuple[str, str]]:
        """``(op_id, record JSON)`` of every operation in the segment whose row is intact;
        the others are in :attr:`bad_rows`."""
        t = self._whole(self._columns("rec"))
        recs = self._raw("rec", t)
        out = []
        for i, op_id in enumerate(self.op_ids):
            try:
                sums = self._sums(t, i, op_id) if self.verified else None
                out.append((op_id, self._checked_record(op_id, recs[i], sums)))
            except LineageCorruptError as e:
                self.bad_rows[op_id] = str(e)
        return out

    def record(self, op_id: str) -> str:
        """The record JSON of ``op_id`` (``KeyError`` when it is not here)."""
        group, i = self._locate(op_id)
        t = self._group(self._columns("rec"), group, i)
        sums = self._sums(t, i, op_id) if self.verified else None
        return self._checked_record(op_id, self._raw("rec", t.slice(i, 1))[0], sums)

    def blob(self, op_id: str, k: int) -> bytes:
        """The ``k``-th table blob of ``op_id`` (``KeyError`` when it is not here)."""
        group, i = self._locate(op_id)
        t = self._group(self._columns("data"), group, i)
        blobs = t.column("data")[i].as_py() or []
        if self.verified:
            sums = self._sums(t, i, op_id)
            if len(sums) != DIGEST_BYTES * (1 + len(blobs)):
                self._fail("its number of lineage tables does not match", op_id)
        if not 0 <= k < len(blobs):
            msg = f"operation `{op_id}` has {len(blobs)} tables in `{self.path}`, not {k + 1}"
            raise KeyError(msg)
        blob = blobs[k]
        if not isinstance(blob, bytes):
            self._fail(f"lineage table {k} is missing", op_id)
        if self.verified:
            got = sums[DIGEST_BYTES * (k + 1) : DIGEST_BYTES * (k + 2)]
            if got != blob_digest(blob, k):
                self._fail(f"lineage table {k} does not match its checksum", op_id)
        return blob

    def entries(self) -> list[tuple[str, str, list[bytes]]]:
        """Every ``(op_id, record JSON, blobs)``, each row checked (for compaction).

        Raises:
            LineageCorruptError: a row is damaged (compaction then leaves the file alone).
        """
        t = self._whole(self._columns("rec", "data"))
        recs = self._raw("rec", t)
        datas = t.column("data").to_pylist()
        out = []
        for i, op_id in enumerate(self.op_ids):
            blobs = datas[i]
            if blobs is None or any(not isinstance(b, bytes) for b in blobs):
                self._fail("a lineage table is missing", op_id)
            if self.verified:
                sums = self._sums(t, i, op_id)
                if sums[DIGEST_BYTES:] != b"".join(blob_digest(b, k) for k, b in enumerate(blobs)):
                    self._fail("its lineage tables do not match their checksums", op_id)
                rec = self._checked_record(op_id, recs[i], sums)
            else:
                rec = self._checked_record(op_id, recs[i], None)
            out.append((op_id, rec, [bytes(b) for b in blobs]))
        return out
