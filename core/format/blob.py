"""Table blobs: the self-describing bytes of one lineage table inside a segment file.

A segment (:mod:`~dslog_dagster.core.format.segment`) stores one blob per lineage table. Each
blob is compressed on its own when that pays, so a table costs the same bytes whatever it is
packed with (no cross-table sharing flatters small tables) and one table can be decoded
without touching the others.

Blob layout (all integers unsigned LEB128 varints):
  flags (bit 0: payload zstd-compressed; bit 1: columnar encoding; bit 2: default
         transforms — every ``hi`` column a width of its ``lo``, every other column raw)
  l, out_shape..., m, in_shape..., rows, n_pairs
  with default transforms: the byte widths of the columns, two per byte (low nibble first);
  else per column one byte ``transform << 4 | nbytes`` (transform 0 raw, 1 delta, 2 width of
  the previous column, 3 width of column ``partner``, then followed by varint partner)
  [varint uncompressed length if compressed] payload

A factored table (:func:`dslog_dagster.core.combine.factored_table`: a frame's cell lineage
as row table × column table) has flags bit 3 set and, after ``rows, n_pairs``, the byte
0xFF (which a reader without factored tables rejects as an unknown column code instead of
misreading the rest), ``k`` and per part the varint length and blob of its row table, then
of its column table.

A columnar table whose pairs Parquet-zstd stores in fewer bytes (random relations of short
axes, where the byte planes leave zstd little to find) has flags bit 4 set (with bit 1) and,
after ``rows, n_pairs``, a Parquet file (pyarrow's defaults, zstd) of its raw columns, outputs
first: so a table is never stored larger than Parquet-zstd of its pairs plus this header.
A reader of format 2-2 before this sees the file's first byte (``P``) as an unknown column
code and refuses the blob as damaged; it never misreads it.

A structured operation's table is one row, whose columns always get the default transforms:
its blob is a few dozen bytes.
"""

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from dslog_dagster.core.combine import factored_table
from dslog_dagster.core.format.codec import zstd_level
from dslog_dagster.core.format.columns import columns_of, default_specs, table_from_columns
from dslog_dagster.core.format.encoding import ColumnSpec, decode, encode
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import InvalidRelationError, LineageCorruptError

_BLOB_ZSTD = 1
_BLOB_COLUMNAR = 2
_BLOB_DEFAULT_TRANSFORMS = 4
_BLOB_FACTORED = 8
_BLOB_PARQUET = 16
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


_BLOB = "segment-blob"
_DIGEST = "segment-blob-digest"


def table_to_blob(table: LineageTable) -> bytes:
    """The self-describing blob of ``table`` inside a segment file.

    Cached on the table (like :func:`~dslog_dagster.core.format.table_file.table_to_bytes`):
    a served reuse view hands the store the same table objects on every hit, and encoding them
    again cost more than the step.
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
    cols, transforms = columns_of(table)
    payload, specs = encode(cols, transforms)
    flags = _BLOB_COLUMNAR if table.encoding == "columnar" else 0
    body: bytes = payload
    if len(payload) >= _MIN_COMPRESS:
        level = zstd_level(len(payload))
        packed = bytes(pa.Codec("zstd", compression_level=level).compress(payload, asbytes=True))
        if len(packed) + 4 < len(payload):
            flags |= _BLOB_ZSTD
            body = packed
    head = _head(flags, table)
    nbytes = [spec.nbytes for spec in specs]
    l, m = table.out_rank, table.in_rank
    if specs == default_specs(table.encoding == "columnar", l, m, nbytes):
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
    blob = bytes(head) + body
    if table.encoding == "columnar" and table.rows and len(table.raw):
        parquet = _parquet_blob(table)
        if len(parquet) < len(blob):
            return parquet
    return blob


def stored_as_parquet(blob: bytes) -> bool:
    """Whether ``blob`` holds a columnar table as a Parquet-zstd file of its pairs."""
    return bool(blob) and not blob[0] & _BLOB_FACTORED and bool(blob[0] & _BLOB_PARQUET)


def int64_array(values: np.ndarray) -> pa.Array:
    """An Arrow int64 array over a NumPy column, made from its buffer: ``pa.array`` first asks
    whether the column is a pandas object, which imports pandas (over a second, in every
    process that stores or reads a columnar table; the core never needs pandas)."""
    col = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(col), [None, pa.py_buffer(col)])


def _parquet_blob(table: LineageTable) -> bytes:
    """The blob of a columnar table as a Parquet-zstd file of its raw columns."""
    cols = {f"c{i}": int64_array(c) for i, c in enumerate(table.raw)}
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf, compression="zstd")
    return bytes(_head(_BLOB_COLUMNAR | _BLOB_PARQUET, table)) + buf.getvalue()


def _columns_from_parquet(data: bytes, ncols: int, rows: int) -> list[np.ndarray]:
    t = pq.read_table(pa.BufferReader(data))
    if t.num_columns != ncols or t.num_rows != rows:
        msg = f"its Parquet columns are {t.num_columns} x {t.num_rows}, not {ncols} x {rows}"
        raise ValueError(msg)
    if any(c.type != pa.int64() or c.null_count for c in t.columns):
        msg = "its Parquet columns are not int64 without nulls"
        raise ValueError(msg)
    return [np.ascontiguousarray(c.to_numpy(), dtype=np.int64) for c in t.columns]


def table_from_blob(blob: bytes, source: str = "<memory>") -> LineageTable:
    """Inverse of :func:`table_to_blob`.

    Raises:
        LineageCorruptError: the blob is damaged.
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
        if flags & _BLOB_PARQUET:
            if not columnar:
                msg = "a Parquet payload for a ProvRC table"
                raise ValueError(msg)
            cols = _columns_from_parquet(blob[pos:], ncols, rows)
            return table_from_columns(shapes[0], shapes[1], "columnar", rows, n_pairs, cols)
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
            specs = default_specs(columnar, l, m, widths)
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
        return table_from_columns(
            shapes[0], shapes[1], "columnar" if columnar else "provrc", rows, n_pairs, cols
        )
    except (IndexError, ValueError, TypeError, InvalidRelationError, pa.ArrowException) as e:
        msg = (
            f"A lineage table in `{source}` is damaged: {e}. Run `dslog fsck STORE "
            "--quarantine` to move damaged files aside."
        )
        raise LineageCorruptError(msg, source) from e


def _factored_from_blob(
    blob: bytes, pos: int, shapes: list[tuple[int, ...]], rows: int, n_pairs: int, source: str
) -> LineageTable:
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
