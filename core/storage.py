"""Lineage tables on disk: one immutable Parquet file per table, written atomically.

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
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dslog_dagster.core.encoding import ColumnSpec, choose_transform, decode, encode
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import LineageStorageError, SchemaVersionError

SCHEMA_VERSION = "1-0-0"
Codec = Literal["zstd", "gzip", "snappy", "none"]

_PROVRC_FIELDS = ("in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")


def _columns_of(table: LineageTable) -> tuple[list[np.ndarray], list[tuple[str, int]]]:
    cols: list[np.ndarray] = []
    transforms: list[tuple[str, int]] = []
    if table.encoding == "columnar":
        for c in table.raw:
            cols.append(c)
            transforms.append((choose_transform(c), -1))
        return cols, transforms
    for j in range(table.out_rank):
        cols.append(table.out_lo[j])
        transforms.append((choose_transform(table.out_lo[j]), -1))
        cols.append(table.out_hi[j])
        transforms.append(("width", len(cols) - 2))
    for k in range(table.in_rank):
        base = len(cols)
        for name in _PROVRC_FIELDS:
            cols.append(getattr(table, name)[k])
        for i, name in enumerate(_PROVRC_FIELDS):
            if name == "in_hi":
                transforms.append(("width", base + 4))
            elif name == "in_lo":
                transforms.append((choose_transform(cols[base + i]), -1))
            else:
                transforms.append(("raw", -1))
    return cols, transforms


def _zstd_level(payload_bytes: int) -> int:
    # Small payloads get the strong (near-entropy) level; big ones a fast level so that
    # compression keeps up with a plain Parquet-zstd write of the raw relation.
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


def table_from_arrow(arrow: pa.Table, source: str = "<memory>") -> LineageTable:
    """Decode a lineage table from the Arrow form read from a lineage file."""
    meta = arrow.schema.metadata or {}
    version = meta.get(b"dslog.schema_version", b"").decode()
    if not version:
        msg = f"`{source}` is not a dslog lineage file (no `dslog.schema_version` metadata)."
        raise SchemaVersionError(msg)
    if version.split("-")[0] != SCHEMA_VERSION.split("-")[0]:
        msg = (
            f"`{source}` was written with lineage format {version}; this dslog reads "
            f"{SCHEMA_VERSION.split('-')[0]}-x-x. Upgrade dslog-dagster to read it."
        )
        raise SchemaVersionError(msg)
    try:
        info = json.loads(meta[b"dslog.table"])
        payload = arrow.column("payload")[0].as_py()
        specs = [ColumnSpec.from_token(c) for c in info["columns"].split(",") if c]
        rows = int(info["rows"])
        cols = decode(payload, specs, rows)
    except (KeyError, ValueError, TypeError) as e:
        msg = f"`{source}` is a damaged dslog lineage file: {e}"
        raise LineageStorageError(msg) from e
    out_shape = tuple(int(d) for d in info["out_shape"])
    in_shape = tuple(int(d) for d in info["in_shape"])
    l, m = len(out_shape), len(in_shape)
    if info["encoding"] == "columnar":
        raw = np.stack(cols) if cols else np.zeros((0, rows), np.int64)
        return LineageTable(out_shape, in_shape, "columnar", rows, int(info["n_pairs"]), raw=raw)
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
        int(info["n_pairs"]),
        np.stack(out[0]) if l else empty,
        np.stack(out[1]) if l else empty,
        **fields,
    )


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
