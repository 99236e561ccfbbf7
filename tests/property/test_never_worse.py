"""The store is never worse than a generic encoding: a stored table (its blob) is at most the
smaller of its ProvRC table and Parquet-zstd of the same raw pairs, plus a small fixed header,
and at most its columnar table plus ProvRC's close call (a ProvRC table that the columnar
encoding beats by less is kept: it answers queries without expanding cells); decoding it is
lossless.

Random relations of rank 3-4 with short axes are where the byte-plane columnar encoding lost
to Parquet-zstd (up to +19 %): the blob then holds the Parquet file itself.
"""

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import relations

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.format.blob import stored_as_parquet, table_from_blob, table_to_blob

HEADER = 48
"""Bytes allowed over the smallest encoding: the blob's header (flags, shapes, counts)."""


def parquet_zstd(table_raw: np.ndarray) -> int:
    """Parquet-zstd (pyarrow's defaults) of the raw pairs, one int64 column per attribute."""
    buf = io.BytesIO()
    pq.write_table(pa.table({f"a{i}": c for i, c in enumerate(table_raw)}), buf, compression="zstd")
    return buf.getbuffer().nbytes


@st.composite
def short_axis_relations(draw: st.DrawFn) -> LineageRelation:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    out_shape = tuple(draw(st.lists(st.integers(2, 5), min_size=3, max_size=4)))
    in_shape = tuple(draw(st.lists(st.integers(2, 5), min_size=3, max_size=4)))
    n = draw(st.integers(1, 3000))
    o = np.stack([rng.integers(0, d, n) for d in out_shape], axis=1)
    i = np.stack([rng.integers(0, d, n) for d in in_shape], axis=1)
    return LineageRelation.from_pairs(out_shape, in_shape, o, i)


def _check(rel: LineageRelation) -> None:
    stored = compress(rel)
    blob = table_to_blob(stored)
    assert table_from_blob(blob).decompress() == rel.unique()
    provrc = len(table_to_blob(compress(rel, fallback="never")))
    columnar = compress(rel, fallback="always")
    generic = [parquet_zstd(columnar.raw)] if columnar.raw.size else []
    # never worse than ProvRC or than the generic encoding, beyond the header
    assert len(blob) <= min([provrc, *generic]) + HEADER, (len(blob), provrc, generic)
    # our own columnar encoding may win by less than ProvRC's close call: ProvRC is kept
    close_call = max(128, provrc // 20)
    assert len(blob) <= len(table_to_blob(columnar)) + HEADER + close_call
    if stored_as_parquet(blob):
        assert stored.encoding == "columnar"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rel=short_axis_relations())
def test_random_short_axis_relations_are_never_worse_than_parquet(rel: LineageRelation) -> None:
    _check(rel)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rel=relations())
def test_structured_relations_are_never_worse_than_parquet(rel: LineageRelation) -> None:
    _check(rel)
