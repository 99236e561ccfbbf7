"""The lineage file format: round trips, codecs, versioning, damage and atomic writes."""

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, compress, read_table, write_table
from dslog_dagster.core.format import segment
from dslog_dagster.core.format.checksum import row_sums
from dslog_dagster.core.format.encoding import ColumnSpec, decode, encode
from dslog_dagster.core.format.table_file import SCHEMA_VERSION, table_from_bytes, table_to_bytes
from dslog_dagster.errors import LineageStorageError, SchemaVersionError


def _elementwise(n: int = 10, m: int = 1000) -> LineageRelation:
    i, j = np.indices((n, m)).reshape(2, -1)
    return LineageRelation.from_columns((n, m), (n, m), [i, j], [i, j])


@pytest.mark.parametrize("codec", ["zstd", "gzip", "snappy", "none"])
def test_write_read_roundtrip_every_codec(tmp_path: Path, codec: str) -> None:
    rel = _elementwise()
    table = compress(rel)
    nbytes = write_table(tmp_path / "t.parquet", table, codec=codec)  # type: ignore[arg-type]
    assert nbytes == (tmp_path / "t.parquet").stat().st_size
    back = read_table(tmp_path / "t.parquet")
    assert back.decompress() == rel
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temp files left


def test_structured_table_is_tiny() -> None:
    # One ProvRC row for a million pairs: the whole file must stay far below 2 KB.
    assert len(table_to_bytes(compress(_elementwise(10, 100_000)))) < 1024


def test_file_carries_schema_version(tmp_path: Path) -> None:
    write_table(tmp_path / "t.parquet", compress(_elementwise()))
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata.metadata
    assert meta[b"dslog.schema_version"].decode() == SCHEMA_VERSION
    info = json.loads(meta[b"dslog.table"])
    assert info["encoding"] == "provrc"
    assert info["out_shape"] == [10, 1000]


def _rewrite_meta(data: bytes, key: bytes, value: bytes | None) -> bytes:
    f = pq.ParquetFile(io.BytesIO(data))
    meta = dict(f.metadata.metadata)
    if value is None:
        meta.pop(key)
    else:
        meta[key] = value
    t = f.read().replace_schema_metadata(meta)
    out = io.BytesIO()
    pq.write_table(t, out)
    return out.getvalue()


def test_unknown_major_version_is_refused() -> None:
    data = _rewrite_meta(
        table_to_bytes(compress(_elementwise())), b"dslog.schema_version", b"2-0-0"
    )
    with pytest.raises(SchemaVersionError, match="Upgrade dslog-dagster"):
        table_from_bytes(data)


def test_newer_minor_version_is_read() -> None:
    data = _rewrite_meta(
        table_to_bytes(compress(_elementwise())), b"dslog.schema_version", b"1-4-0"
    )
    assert table_from_bytes(data).decompress() == _elementwise()


def test_foreign_parquet_file_is_refused() -> None:
    out = io.BytesIO()
    pq.write_table(pa.table({"x": [1, 2]}), out)
    with pytest.raises(SchemaVersionError, match="not a dslog lineage file"):
        table_from_bytes(out.getvalue())


def test_damaged_files_raise_storage_errors(tmp_path: Path) -> None:
    data = table_to_bytes(compress(_elementwise()))
    with pytest.raises(LineageStorageError):
        table_from_bytes(data[: len(data) // 2])
    bad = _rewrite_meta(data, b"dslog.table", b'{"rows": 3}')
    with pytest.raises(LineageStorageError, match="damaged"):
        table_from_bytes(bad)
    with pytest.raises(LineageStorageError, match="Could not read"):
        read_table(tmp_path / "missing.parquet")


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        msg = "disk full"
        raise OSError(msg)

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(LineageStorageError, match="disk full"):
        write_table(tmp_path / "t.parquet", compress(_elementwise()))
    assert list(tmp_path.iterdir()) == []


def test_byte_plane_encoding_roundtrips_extremes() -> None:
    rng = np.random.default_rng(0)
    lo = np.sort(rng.integers(-(2**62), 2**62, 500))
    cols = [
        lo,
        lo + rng.integers(0, 5, 500),
        rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64),
        np.full(500, 7, np.int64),
    ]
    payload, specs = encode(cols, [("delta", -1), ("width", 0), ("raw", -1), ("raw", -1)])
    assert specs[3].nbytes == 1
    back = decode(payload, [ColumnSpec.from_token(s.to_token()) for s in specs], 500)
    for a, b in zip(cols, back, strict=True):
        assert np.array_equal(a, b)


# ------------------------------------------------------------------ one-operation segments

_segment_entry = st.tuples(
    st.text(min_size=1, max_size=60),
    st.text(max_size=3000),
    st.lists(st.binary(max_size=400), max_size=20),
)


@settings(max_examples=60, deadline=None)
@given(entry=_segment_entry)
def test_one_operation_segments_read_like_pyarrows(entry: tuple[str, str, list[bytes]]) -> None:
    """The hand-written one-operation segment (every registration writes one) is the Parquet
    file pyarrow would write: same schema, values, footer metadata; Segment reads it."""
    ours = segment.segment_to_bytes([entry])
    theirs = segment._arrow_segment_bytes([entry], "none")
    assert ours != theirs  # really the other writer (pyarrow's carries its own created_by)
    mine, ref = (pq.ParquetFile(pa.BufferReader(b)) for b in (ours, theirs))
    assert mine.schema_arrow == ref.schema_arrow
    assert mine.schema.to_arrow_schema() == ref.schema.to_arrow_schema()
    assert mine.metadata.metadata == ref.metadata.metadata
    assert (mine.metadata.num_rows, mine.metadata.num_row_groups) == (1, 1)
    assert mine.read().to_pylist() == ref.read().to_pylist()
    sums = row_sums(entry[0].encode(), entry[1].encode(), entry[2])
    assert mine.read().to_pylist() == [
        {"op": entry[0], "rec": entry[1], "data": entry[2], "sums": sums}
    ]
    for k in range(4):  # column statistics-free chunks of consistent sizes
        col = mine.metadata.row_group(0).column(k)
        assert col.compression == "UNCOMPRESSED"
        assert col.num_values == (max(1, len(entry[2])) if k == 2 else 1)


def test_segment_readers_take_one_operation_segments(tmp_path: Path) -> None:
    """Segment (the store's reader) and a pyarrow pack of several written entries agree."""
    entries = [("a" * 48, '{"op": 1}', [b"x", b""]), ("b" * 48, "{}", [])]
    paths = []
    for k, e in enumerate(entries):
        path = tmp_path / f"{k}.parquet"
        path.write_bytes(segment.segment_to_bytes([e]))
        paths.append(path)
    pack = tmp_path / "pack.parquet"
    pack.write_bytes(segment.segment_to_bytes(entries))  # two entries: pyarrow's writer
    for path, e in zip(paths, entries, strict=True):
        with segment.Segment(path) as seg:
            assert seg.op_ids == [e[0]]
            assert seg.record(e[0]) == e[1]
            assert [seg.blob(e[0], k) for k in range(len(e[2]))] == e[2]
            assert seg.entries() == [(e[0], e[1], e[2])]
    with segment.Segment(pack) as seg:
        assert seg.entries() == [(o, r, list(b)) for o, r, b in entries]


def test_big_records_and_many_operations_go_through_pyarrow() -> None:
    big = ("c" * 48, json.dumps({"k": "v" * segment.SMALL_SEGMENT_RECORD}), [b"t"])
    data = segment.segment_to_bytes([big])
    assert b"parquet-cpp-arrow" in data  # pyarrow's writer, zstd-compressed record
    assert len(data) < segment.SMALL_SEGMENT_RECORD
    assert pq.read_table(pa.BufferReader(data)).to_pylist()[0]["rec"] == big[1]
