"""ProvRC is lossless: decompress(compress(R)) == dedupe(R), in both orientations.

Relations are built from the structures ProvRC is meant to find (all-to-all boxes, relative,
mirrored, strided and pooling attributes) mixed with random noise and duplicates, over ranks
0–4 on both sides, so every merge path of the compressor (and the columnar fallback) runs.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import relations

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.storage import (
    table_from_blob,
    table_from_bytes,
    table_to_blob,
    table_to_bytes,
)

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(rel=relations())
def test_compress_is_lossless_backward(rel: LineageRelation) -> None:
    table = compress(rel)
    assert table.decompress() == rel
    assert table.n_pairs == rel.unique().n


@SETTINGS
@given(rel=relations(), fallback=st.sampled_from(["never", "always", "auto"]))
def test_stored_table_roundtrips(rel: LineageRelation, fallback: str) -> None:
    table = compress(rel, fallback=fallback)  # type: ignore[arg-type]
    for back in (table_from_bytes(table_to_bytes(table)), table_from_blob(table_to_blob(table))):
        assert back.encoding == table.encoding
        assert back.rows == table.rows
        assert back.n_pairs == table.n_pairs
        assert back.decompress() == rel


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rel=relations())
def test_forward_orientation_is_the_same_relation(rel: LineageRelation) -> None:
    table = compress(rel, fallback="never")
    fwd = table.forward()
    # the hulls bound every input cell of the relation
    assert fwd.expand() == rel


@SETTINGS
@given(rel=relations(), relative=st.booleans(), mirrored=st.booleans(), progression=st.booleans())
def test_every_candidate_set_is_lossless(
    rel: LineageRelation, relative: bool, mirrored: bool, progression: bool
) -> None:
    table = compress(
        rel, relative=relative, mirrored=mirrored, progression=progression, fallback="never"
    )
    assert table.decompress() == rel


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 2, 3, 2)])
def test_identity_of_any_rank_is_one_row(shape: tuple[int, ...]) -> None:
    idx = np.indices(shape).reshape(len(shape), -1)
    rel = LineageRelation.from_columns(shape, shape, list(idx), list(idx))
    table = compress(rel, fallback="never")
    assert table.rows == 1
    assert table.forward().expand() == rel
