"""Lineage tables on disk: standalone table files, and the segments of a lineage store.

**Segments** (format ``2-1-0``, used by :class:`~dslog_dagster.core.store.LineageStore`) hold
the records and tables of one or many operations; see the section "segments" below.

**Table files** (below; what :func:`write_table` writes) hold one table each, written atomically.

File layout (format version ``1-0-0``): a Parquet file with a single ``large_binary`` column
``payload`` holding one value, the byte-plane encoding of the table's columns (see
:mod:`dslog_dagster.core.encoding`), compressed by Parquet's codec (zstd by default). The
schema metadata carries

* ``dslog.schema_version`` — checked on read; an unknown major version is refused;
* ``dslog.table`` — JSON: shapes, encoding (``provrc``/``columnar``), row and pair counts and
  the per-column transforms.

One column keeps Parquet's per-column metadata out of the way: a structured operation's table
is a few hundred bytes in total.
"""

import io
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from dslog_dagster.core.encoding import ColumnSpec, decode, encode
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import InvalidRelationError, LineageStorageError, SchemaVersionError

SCHEMA_VERSION = "1-0-0"
Codec = Literal["zstd", "gzip", "snappy", "none"]

_PROVRC_FIELDS = ("in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")


def _columns_of(table: LineageTable) -> tuple[list[np.ndarray], list[tuple[str, int]]]:
    cols: list[np.ndarray] = []
    transforms: list[tuple[str, int]] = []
    if table.encoding == "columnar":
        for c in table.raw:
            cols.append(c)
            transforms.append(("auto", -1))
        return cols, transforms
    for j in range(table.out_rank):
        cols.append(table.out_lo[j])
        transforms.append(("auto", -1))
        cols.append(table.out_hi[j])
        transforms.append(("width", len(cols) - 2))
    for k in range(table.in_rank):
        base = len(cols)
        for name in _PROVRC_FIELDS:
            cols.append(getattr(table, name)[k])
        for name in _PROVRC_FIELDS:
            if name == "in_hi":
                transforms.append(("width", base + 4))
            elif name == "in_lo":
                transforms.append(("auto", -1))
            else:
                transforms.append(("raw", -1))
    return cols, transforms


def _zstd_level(payload_bytes: int) -> int:
    # Small payloads get the strong (near-entropy) level; big ones a fast level so that
    # compression keeps up with a plain Parquet-zstd write of the raw relation. (Level 1 is
    # faster still but loses the long matches of sorted filters: 2x larger on CorrFilter.)
    if payload_bytes <= 1 << 16:
        return 19
    if payload_bytes <= 1 << 20:
        return 9
    return 3


def _encode_table(table: LineageTable) -> tuple[bytes, dict[str, str]]:
    """The payload and the key-value metadata of the lineage file for ``table``."""
    cols, transforms = _columns_of(table)
    payload, specs = encode(cols, transforms)
    info = {
        "out_shape": list(table.out_shape),
        "in_shape": list(table.in_shape),
        "encoding": table.encoding,
        "rows": table.rows,
        "n_pairs": table.n_pairs,
        "columns": ",".join(s.to_token() for s in specs),
    }
    meta = {
        "dslog.schema_version": SCHEMA_VERSION,
        "dslog.table": json.dumps(info, separators=(",", ":")),
    }
    return payload, meta


def _write_parquet(payload: bytes, meta: dict[str, str], sink: Any, codec: Codec) -> None:
    kwargs: dict[str, Any] = {
        "compression": None if codec == "none" else codec,
        "use_dictionary": False,
        "write_statistics": False,
        # The Arrow schema would repeat our metadata base64-encoded; the key-value metadata
        # below is all a reader needs.
        "store_schema": False,
    }
    if codec == "zstd":
        kwargs["compression_level"] = _zstd_level(len(payload))
    schema = pa.schema([pa.field("payload", pa.large_binary())])
    arrow = pa.Table.from_arrays([pa.array([payload], pa.large_binary())], schema=schema)
    with pq.ParquetWriter(sink, schema, **kwargs) as writer:
        writer.write_table(arrow)
        writer.add_key_value_metadata(meta)


def table_to_bytes(table: LineageTable, codec: Codec = "zstd") -> bytes:
    """The bytes of the lineage file for ``table`` (what :func:`write_table` stores).

    Cached on the table: :func:`~dslog_dagster.core.provrc.compress` sizes its candidates
    with this, and the store then writes the winner without encoding it again.
    """
    cached: bytes | None = table.encoded.get(codec)
    if cached is not None:
        return cached
    buf = io.BytesIO()
    _write_parquet(*_encode_table(table), buf, codec)
    data = buf.getvalue()
    table.encoded[codec] = data
    return data


def encoded_size(table: LineageTable, codec: Codec = "zstd") -> int:
    """Size in bytes of ``table`` as stored."""
    return len(table_to_bytes(table, codec))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory, fsync and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_table(path: str | os.PathLike[str], table: LineageTable, codec: Codec = "zstd") -> int:
    """Write ``table`` to ``path`` atomically; returns the number of bytes written.

    Raises:
        LineageStorageError: the file could not be written (nothing is left behind).
    """
    data = table_to_bytes(table, codec)
    try:
        atomic_write_bytes(Path(path), data)
    except OSError as e:
        msg = f"Could not write lineage table to `{path}`: {e}"
        raise LineageStorageError(msg) from e
    return len(data)


def _check_version(meta: dict[bytes, bytes], source: str, current: str) -> None:
    version = meta.get(b"dslog.schema_version", b"").decode()
    if not version:
        msg = f"`{source}` is not a dslog lineage file (no `dslog.schema_version` metadata)."
        raise SchemaVersionError(msg)
    if version.split("-")[0] != current.split("-")[0]:
        msg = (
            f"`{source}` was written with lineage format {version}; this dslog reads "
            f"{current.split('-')[0]}-x-x here. Upgrade dslog-dagster to read it."
        )
        raise SchemaVersionError(msg)


def _table_from_columns(
    out_shape: tuple[int, ...],
    in_shape: tuple[int, ...],
    encoding: str,
    rows: int,
    n_pairs: int,
    cols: list[np.ndarray],
) -> LineageTable:
    l, m = len(out_shape), len(in_shape)
    if encoding == "columnar":
        raw = np.stack(cols) if cols else np.zeros((0, rows), np.int64)
        return LineageTable(out_shape, in_shape, "columnar", rows, n_pairs, raw=raw)
    if encoding != "provrc":
        msg = f"unknown table encoding `{encoding}`"
        raise ValueError(msg)
    if len(cols) != 2 * l + 6 * m:
        msg = f"{len(cols)} columns for a rank {l} <- rank {m} ProvRC table"
        raise ValueError(msg)
    out = [cols[2 * j] for j in range(l)], [cols[2 * j + 1] for j in range(l)]
    fields: dict[str, np.ndarray] = {}
    for i, name in enumerate(_PROVRC_FIELDS):
        vals = [cols[2 * l + 6 * k + i] for k in range(m)]
        fields[name] = np.stack(vals) if vals else np.zeros((0, rows), np.int64)
    empty = np.zeros((0, rows), np.int64)
    return LineageTable(
        out_shape,
        in_shape,
        "provrc",
        rows,
        n_pairs,
        np.stack(out[0]) if l else empty,
        np.stack(out[1]) if l else empty,
        **fields,
    )


def table_from_arrow(arrow: pa.Table, source: str = "<memory>") -> LineageTable:
    """Decode a lineage table from the Arrow form read from a lineage file."""
    meta = arrow.schema.metadata or {}
    _check_version(meta, source, SCHEMA_VERSION)
    try:
        info = json.loads(meta[b"dslog.table"])
        payload = arrow.column("payload")[0].as_py()
        specs = [ColumnSpec.from_token(c) for c in info["columns"].split(",") if c]
        rows = int(info["rows"])
        cols = decode(payload, specs, rows)
        return _table_from_columns(
            tuple(int(d) for d in info["out_shape"]),
            tuple(int(d) for d in info["in_shape"]),
            str(info["encoding"]),
            rows,
            int(info["n_pairs"]),
            cols,
        )
    except (KeyError, ValueError, TypeError) as e:
        msg = f"`{source}` is a damaged dslog lineage file: {e}"
        raise LineageStorageError(msg) from e


def table_from_bytes(data: bytes, source: str = "<memory>") -> LineageTable:
    """Inverse of :func:`table_to_bytes`."""
    try:
        arrow = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as e:
        msg = f"`{source}` is not a readable Parquet lineage file: {e}"
        raise LineageStorageError(msg) from e
    return table_from_arrow(arrow, source)


def read_table(path: str | os.PathLike[str]) -> LineageTable:
    """Read a lineage table written by :func:`write_table`.

    Raises:
        LineageStorageError: missing or damaged file.
        SchemaVersionError: written by an incompatible format version.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        msg = f"Could not read lineage table `{path}`: {e}"
        raise LineageStorageError(msg) from e
    return table_from_bytes(data, str(path))


# --------------------------------------------------------------------------- segments
#
# A lineage store keeps operations in *segment* files: Parquet files with one row per
# operation (its record and all its lineage tables). A registration writes a segment of one
# operation; compaction (``LineageStore.compact``) merges many small ones into a pack.
#
# Columns: ``op`` (operation id), ``rec`` (the operation record, JSON) and ``data``
# (list<binary>: one self-describing blob per lineage table, in the record's table order).
# ``op`` and ``rec`` use the file codec; ``data`` is stored by Parquet *uncompressed*: each blob
# is compressed on its own when that pays, so a table costs the same bytes whatever it is
# packed with (no cross-table sharing flatters small tables) and one table can be decoded
# without touching the others.
#
# Blob layout (all integers unsigned LEB128 varints):
#   flags (bit 0: payload zstd-compressed; bit 1: columnar encoding; bit 2: default
#          transforms — every ``hi`` column a width of its ``lo``, every other column raw)
#   l, out_shape..., m, in_shape..., rows, n_pairs
#   with default transforms: the byte widths of the columns, two per byte (low nibble first);
#   else per column one byte ``transform << 4 | nbytes`` (transform 0 raw, 1 delta, 2 width of
#   the previous column, 3 width of column ``partner``, then followed by varint partner)
#   [varint uncompressed length if compressed] payload
#
# A factored table (:func:`dslog_dagster.core.combine.factored_table`: a frame's cell lineage
# as row table × column table) has flags bit 3 set and, after ``rows, n_pairs``, the byte
# 0xFF (which a reader without factored tables rejects as an unknown column code instead of
# misreading the rest), ``k`` and per part the varint length and blob of its row table, then
# of its column table.
#
# A structured operation's table is one row, whose columns always get the default transforms:
# its blob is a few dozen bytes.

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
_BLOB_ZSTD = 1
_BLOB_COLUMNAR = 2
_BLOB_DEFAULT_TRANSFORMS = 4
_BLOB_FACTORED = 8
_FACTORED_MARK = 0xFF
_MIN_COMPRESS = 64  # payloads below this are stored raw: a zstd frame costs ~10 bytes


def _varint(out: bytearray, v: int) -> None:
    if v < 0:
        msg = f"cannot store negative value {v} as a varint"
        raise ValueError(msg)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(buf):
            msg = "truncated table blob"
            raise ValueError(msg)
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 70:
            msg = "malformed varint in table blob"
            raise ValueError(msg)


def _default_specs(columnar: bool, l: int, m: int, nbytes: Sequence[int]) -> list[ColumnSpec]:
    """Column specs with the default transforms (see the blob layout above)."""
    width = (
        set() if columnar else {2 * j + 1 for j in range(l)} | {2 * l + 6 * k + 5 for k in range(m)}
    )
    return [
        ColumnSpec("width", i - 1, nb) if i in width else ColumnSpec("raw", -1, nb)
        for i, nb in enumerate(nbytes)
    ]


_BLOB = "segment-blob"
_DIGEST = "segment-blob-digest"


def table_to_blob(table: LineageTable) -> bytes:
    """The self-describing blob of ``table`` inside a segment file.

    Cached on the table (like :func:`table_to_bytes`): a served reuse view hands the store the
    same table objects on every hit, and encoding them again cost more than the step.
    """
    cached: bytes | None = table.encoded.get(_BLOB)
    if cached is not None:
        return cached
    blob = _table_to_blob(table)
    table.encoded[_BLOB] = blob
    return blob


def table_digest(table: LineageTable) -> bytes:
    """A 128-bit digest of ``table``'s content (XXH3 of its blob), cached on the table.

    The blob encodes the table losslessly (:func:`table_from_blob` inverts it), shapes
    included, so equal digests mean equal lineage (barring a 2^-128 accident): a key for
    caches of anything derived from a table, such as the metadata picture.
    """
    cached: bytes | None = table.encoded.get(_DIGEST)
    if cached is not None:
        return cached
    digest = xxhash.xxh3_128_digest(table_to_blob(table))
    table.encoded[_DIGEST] = digest
    return digest


def _head(flags: int, table: LineageTable) -> bytearray:
    head = bytearray([flags])
    for shape in (table.out_shape, table.in_shape):
        _varint(head, len(shape))
        for d in shape:
            _varint(head, int(d))
    _varint(head, int(table.rows))
    _varint(head, int(table.n_pairs))
    return head


def _factored_blob(table: LineageTable) -> bytes:
    """The blob of a factored table: its parts' blobs, never its multiplied-out rows."""
    head = _head(_BLOB_FACTORED, table)
    head.append(_FACTORED_MARK)
    _varint(head, len(table.factors))
    for part in table.factors:
        for t in part:
            b = table_to_blob(t)
            _varint(head, len(b))
            head += b
    return bytes(head)


def _table_to_blob(table: LineageTable) -> bytes:
    if table.factors:
        return _factored_blob(table)
    cols, transforms = _columns_of(table)
    payload, specs = encode(cols, transforms)
    flags = _BLOB_COLUMNAR if table.encoding == "columnar" else 0
    body: bytes = payload
    if len(payload) >= _MIN_COMPRESS:
        level = _zstd_level(len(payload))
        packed = bytes(pa.Codec("zstd", compression_level=level).compress(payload, asbytes=True))
        if len(packed) + 4 < len(payload):
            flags |= _BLOB_ZSTD
            body = packed
    head = _head(flags, table)
    nbytes = [spec.nbytes for spec in specs]
    l, m = table.out_rank, table.in_rank
    if specs == _default_specs(table.encoding == "columnar", l, m, nbytes):
        head[0] |= _BLOB_DEFAULT_TRANSFORMS
        for i in range(0, len(nbytes), 2):
            head.append(nbytes[i] | (nbytes[i + 1] << 4 if i + 1 < len(nbytes) else 0))
    else:
        for i, spec in enumerate(specs):
            code = {"raw": 0, "delta": 1, "width": 2 if spec.partner == i - 1 else 3}[
                spec.transform
            ]
            head.append(code << 4 | spec.nbytes)
            if code == 3:
                _varint(head, spec.partner)
    if flags & _BLOB_ZSTD:
        _varint(head, len(payload))
    return bytes(head) + body


def table_from_blob(blob: bytes, source: str = "<memory>") -> LineageTable:
    """Inverse of :func:`table_to_blob`.

    Raises:
        LineageStorageError: the blob is damaged.
    """
    try:
        flags = blob[0]
        pos = 1
        shapes = []
        for _ in range(2):
            rank, pos = _read_varint(blob, pos)
            dims = []
            for _ in range(rank):
                d, pos = _read_varint(blob, pos)
                dims.append(d)
            shapes.append(tuple(dims))
        rows, pos = _read_varint(blob, pos)
        n_pairs, pos = _read_varint(blob, pos)
        if flags & _BLOB_FACTORED:
            return _factored_from_blob(blob, pos, shapes, rows, n_pairs, source)
        l, m = len(shapes[0]), len(shapes[1])
        columnar = bool(flags & _BLOB_COLUMNAR)
        ncols = l + m if columnar else 2 * l + 6 * m
        specs = []
        if flags & _BLOB_DEFAULT_TRANSFORMS:
            packed = blob[pos : pos + (ncols + 1) // 2]
            if len(packed) != (ncols + 1) // 2:
                msg = "truncated column widths"
                raise ValueError(msg)
            pos += len(packed)
            widths = [(packed[i // 2] >> (4 * (i % 2))) & 0x0F for i in range(ncols)]
            if max(widths, default=0) > 8:
                msg = "column width over 8 bytes"
                raise ValueError(msg)
            specs = _default_specs(columnar, l, m, widths)
        for i in range(0 if flags & _BLOB_DEFAULT_TRANSFORMS else ncols):
            byte = blob[pos]
            pos += 1
            code, nbytes = byte >> 4, byte & 0x0F
            if code > 3 or nbytes > 8:
                msg = f"unknown column code {byte:#x}"
                raise ValueError(msg)
            partner = -1
            if code == 2:
                partner = i - 1
            elif code == 3:
                partner, pos = _read_varint(blob, pos)
            specs.append(ColumnSpec(("raw", "delta", "width", "width")[code], partner, nbytes))
        if flags & _BLOB_ZSTD:
            size, pos = _read_varint(blob, pos)
            payload = pa.decompress(blob[pos:], decompressed_size=size, codec="zstd", asbytes=True)
        else:
            payload = blob[pos:]
        cols = decode(payload, specs, rows)
        return _table_from_columns(
            shapes[0], shapes[1], "columnar" if columnar else "provrc", rows, n_pairs, cols
        )
    except (IndexError, ValueError, TypeError, InvalidRelationError, pa.ArrowException) as e:
        msg = f"A lineage table in `{source}` is damaged: {e}"
        raise LineageStorageError(msg) from e


def _factored_from_blob(
    blob: bytes, pos: int, shapes: list[tuple[int, ...]], rows: int, n_pairs: int, source: str
) -> LineageTable:
    from dslog_dagster.core.combine import factored_table

    if blob[pos] != _FACTORED_MARK:
        msg = "factored table without its mark"
        raise ValueError(msg)
    k, pos = _read_varint(blob, pos + 1)
    parts = []
    for _ in range(k):
        pair = []
        for _ in range(2):
            n, pos = _read_varint(blob, pos)
            if pos + n > len(blob):
                msg = "truncated factor"
                raise ValueError(msg)
            pair.append(table_from_blob(blob[pos : pos + n], source))
            pos += n
        parts.append((pair[0], pair[1]))
    if pos != len(blob):
        msg = "trailing bytes after the factors"
        raise ValueError(msg)
    table = factored_table(parts)
    if (table.out_shape, table.in_shape, table.rows, table.n_pairs) != (
        shapes[0],
        shapes[1],
        rows,
        n_pairs,
    ):
        msg = "factors disagree with the table's shapes or counts"
        raise ValueError(msg)
    return table


SMALL_SEGMENT_RECORD = 16 * 1024
"""A one-operation segment whose record is at most this many bytes is written by
:func:`_small_segment_bytes` (uncompressed columns: zstd would save less than a file-system
block)."""


def segment_to_bytes(
    entries: Sequence[tuple[str, str, Sequence[bytes]]],
    codec: Codec = "zstd",
) -> bytes:
    """The bytes of a segment file holding ``entries`` = ``(op_id, record JSON, blobs)``.

    The segment of one operation with a small record (every registration: packs come from
    compaction) is written by :func:`_small_segment_bytes`, the same Parquet schema without
    pyarrow's writer, whose set-up cost ~0.5 ms of a tracked step served from a reuse view;
    ``codec`` then does not apply (its columns are stored uncompressed). Other segments go
    through pyarrow with ``codec``.
    """
    if len(entries) == 1:
        op_id, rec, blobs = entries[0]
        rec_b = rec.encode()
        if len(rec_b) <= SMALL_SEGMENT_RECORD:
            return _small_segment_bytes(op_id.encode(), rec_b, [bytes(b) for b in blobs])
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
        level = 3 if rec_bytes <= 1 << 16 else _zstd_level(rec_bytes)
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


# ----------------------------------------------------------------- one-operation segments
#
# A Parquet file (format 2.6, data page v1, PLAIN values, RLE levels, no compression, no
# statistics) with exactly the schema pyarrow writes for _SEGMENT_SCHEMA with
# ``store_schema=False``; thrift structures in the compact protocol. Field ids and enum values
# are those of parquet.thrift. Checked against pyarrow's reader (tests/unit/test_storage.py).

_T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 5, 6, 8, 9, 12
_BYTE_ARRAY, _OPTIONAL, _REQUIRED, _REPEATED = 6, 1, 0, 2
_UTF8, _LIST = 0, 3
_PLAIN, _RLE = 0, 3


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zz(n: int) -> bytes:
    """A thrift compact i32/i64: zigzag varint."""
    return _uvarint((n << 1) ^ (n >> 63))


class _Thrift:
    """A thrift compact-protocol struct, fields added in increasing id order."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.last = 0

    def _field(self, fid: int, ttype: int) -> None:
        delta = fid - self.last
        assert 0 < delta <= 15  # ids always increase by at most 15 here
        self.buf.append(delta << 4 | ttype)
        self.last = fid

    def num(self, fid: int, value: int, ttype: int = _T_I32) -> "_Thrift":
        self._field(fid, ttype)
        self.buf += _zz(value)
        return self

    def binary(self, fid: int, value: bytes) -> "_Thrift":
        self._field(fid, _T_BINARY)
        self.buf += _uvarint(len(value)) + value
        return self

    def struct(self, fid: int, value: "_Thrift") -> "_Thrift":
        self._field(fid, _T_STRUCT)
        self.buf += value.end()
        return self

    def list(self, fid: int, etype: int, items: Sequence[bytes]) -> "_Thrift":
        """``items`` already encoded (structs ended, varints, length-prefixed binaries)."""
        self._field(fid, _T_LIST)
        n = len(items)
        self.buf += bytes([n << 4 | etype]) if n < 15 else bytes([0xF0 | etype]) + _uvarint(n)
        for item in items:
            self.buf += item
        return self

    def end(self) -> bytes:
        return bytes(self.buf) + b"\x00"


def _levels(runs: Sequence[tuple[int, int]]) -> bytes:
    """RLE-encoded levels (runs of ``(count, level)``, levels < 256) with their length."""
    body = b"".join(_uvarint(count << 1) + bytes([level]) for count, level in runs if count)
    return len(body).to_bytes(4, "little") + body


def _plain(values: Sequence[bytes]) -> bytes:
    return b"".join(len(v).to_bytes(4, "little") + v for v in values)


def _schema_element(
    name: bytes,
    *,
    ptype: int | None = None,
    rep: int,
    children: int | None = None,
    converted: int | None = None,
    logical: int | None = None,
) -> bytes:
    el = _Thrift()
    if ptype is not None:
        el.num(1, ptype)
    el.num(3, rep).binary(4, name)
    if children is not None:
        el.num(5, children)
    if converted is not None:
        el.num(6, converted)
    if logical is not None:  # LogicalType union: the member ``logical`` (an empty struct)
        el.struct(10, _Thrift().struct(logical, _Thrift()))
    return el.end()


_SMALL_SCHEMA = [
    _schema_element(b"schema", rep=_REQUIRED, children=3),
    _schema_element(b"op", ptype=_BYTE_ARRAY, rep=_OPTIONAL, converted=_UTF8, logical=1),
    _schema_element(b"rec", ptype=_BYTE_ARRAY, rep=_OPTIONAL, converted=_UTF8, logical=1),
    _schema_element(b"data", rep=_OPTIONAL, children=1, converted=_LIST, logical=3),
    _schema_element(b"list", rep=_REPEATED, children=1),
    _schema_element(b"element", ptype=_BYTE_ARRAY, rep=_OPTIONAL),
]
_SMALL_PATHS = [[b"op"], [b"rec"], [b"data", b"list", b"element"]]


def _small_segment_bytes(op_id: bytes, rec: bytes, blobs: Sequence[bytes]) -> bytes:
    """A segment of one operation: what ``segment_to_bytes`` writes through pyarrow (with
    ``codec="none"``), without pyarrow (see :func:`segment_to_bytes`)."""
    n = len(blobs)
    pages = [
        # (page data, number of level entries)
        (_levels([(1, 1)]) + _plain([op_id]), 1),
        (_levels([(1, 1)]) + _plain([rec]), 1),
        # data: repetition levels (0 starts the row), then definition levels (3: an element,
        # 1: an empty list), then the elements
        (_levels([(1, 0), (n - 1, 1)]) + _levels([(n, 3)]) + _plain(blobs), n)
        if n
        else (_levels([(1, 0)]) + _levels([(1, 1)]), 1),
    ]
    out = bytearray(b"PAR1")
    chunks = []
    for path, (data, count) in zip(_SMALL_PATHS, pages, strict=True):
        header = (
            _Thrift()
            .num(1, 0)  # DATA_PAGE
            .num(2, len(data))
            .num(3, len(data))
            .struct(
                5,
                _Thrift().num(1, count).num(2, _PLAIN).num(3, _RLE).num(4, _RLE),
            )
            .end()
        )
        offset = len(out)
        out += header + data
        size = len(header) + len(data)
        meta = (
            _Thrift()
            .num(1, _BYTE_ARRAY)
            .list(2, _T_I32, [_zz(_RLE), _zz(_PLAIN)])
            .list(3, _T_BINARY, [_uvarint(len(p)) + p for p in path])
            .num(4, 0)  # UNCOMPRESSED
            .num(5, count, _T_I64)
            .num(6, size, _T_I64)
            .num(7, size, _T_I64)
            .num(9, offset, _T_I64)
        )
        chunks.append(_Thrift().num(2, 0, _T_I64).struct(3, meta).end())
    total = len(out) - 4
    row_group = _Thrift().list(1, _T_STRUCT, chunks).num(2, total, _T_I64).num(3, 1, _T_I64)
    kv = [
        _Thrift().binary(1, k.encode()).binary(2, v.encode()).end()
        for k, v in (
            ("dslog.schema_version", SEGMENT_SCHEMA_VERSION),
            ("dslog.kind", SEGMENT_KIND),
        )
    ]
    footer = (
        _Thrift()
        .num(1, 2)
        .list(2, _T_STRUCT, _SMALL_SCHEMA)
        .num(3, 1, _T_I64)
        .list(4, _T_STRUCT, [row_group.end()])
        .list(5, _T_STRUCT, kv)
        .binary(6, b"dslog-dagster segment writer")
        .end()
    )
    out += footer + len(footer).to_bytes(4, "little") + b"PAR1"
    return bytes(out)


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
        _check_version(md.metadata or {}, str(self.path), SEGMENT_SCHEMA_VERSION)
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
