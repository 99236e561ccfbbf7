"""Table files: one lineage table in a file of its own (what :func:`write_table` writes).

File layout (format version ``1-0-0``): a Parquet file with a single ``large_binary`` column
``payload`` holding one value, the byte-plane encoding of the table's columns (see
:mod:`~dslog_dagster.core.format.encoding`), compressed by Parquet's codec (zstd by default).
The schema metadata carries

* ``dslog.schema_version`` — checked on read; an unknown major version is refused;
* ``dslog.table`` — JSON: shapes, encoding (``provrc``/``columnar``), row and pair counts and
  the per-column transforms.

One column keeps Parquet's per-column metadata out of the way: a structured operation's table
is a few hundred bytes in total. The size of this file is also what
:func:`~dslog_dagster.core.compression.compress` weighs when it chooses between ProvRC and the
columnar encoding (:func:`encoded_size`).
"""

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dslog_dagster.core.format.codec import Codec, zstd_level
from dslog_dagster.core.format.columns import columns_of, table_from_columns
from dslog_dagster.core.format.encoding import ColumnSpec, decode, encode
from dslog_dagster.core.format.version import check_version
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import LineageStorageError

SCHEMA_VERSION = "1-0-0"


def _encode_table(table: LineageTable) -> tuple[bytes, dict[str, str]]:
    """The payload and the key-value metadata of the lineage file for ``table``."""
    cols, transforms = columns_of(table)
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
        kwargs["compression_level"] = zstd_level(len(payload))
    schema = pa.schema([pa.field("payload", pa.large_binary())])
    arrow = pa.Table.from_arrays([pa.array([payload], pa.large_binary())], schema=schema)
    with pq.ParquetWriter(sink, schema, **kwargs) as writer:
        writer.write_table(arrow)
        writer.add_key_value_metadata(meta)


def table_to_bytes(table: LineageTable, codec: Codec = "zstd") -> bytes:
    """The bytes of the lineage file for ``table`` (what :func:`write_table` stores).

    Cached on the table: :func:`~dslog_dagster.core.compression.compress` sizes its candidates
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
    check_version(meta, source, SCHEMA_VERSION)
    try:
        info = json.loads(meta[b"dslog.table"])
        payload = arrow.column("payload")[0].as_py()
        specs = [ColumnSpec.from_token(c) for c in info["columns"].split(",") if c]
        rows = int(info["rows"])
        cols = decode(payload, specs, rows)
        return table_from_columns(
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
