"""The fast paths of a step served from a reuse view: the XXH3 content hash of base keys, the
segment blob and digest cached on a table, and the lineage picture cached by table digest.

Each cache must give exactly what the slow path gives, and must never answer for different
lineage (or, for the hash, different data).
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.format import blob as blob_module
from dslog_dagster.core.format.blob import table_digest, table_from_blob, table_to_blob
from dslog_dagster.core.reuse.keys import content_hash
from dslog_dagster.io_managers import metadata as m

# ----------------------------------------------------------------------- content hash


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=4096),
    pos=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_content_hash_changes_when_any_byte_changes(data: bytes, pos: int, flip: int) -> None:
    a = np.frombuffer(data, dtype=np.uint8).copy()
    b = a.copy()
    b[pos % a.size] ^= flip
    assert content_hash(a) == content_hash(a.copy())
    assert content_hash(a) != content_hash(b)


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(min_value=1, max_value=40),
    cols=st.integers(min_value=1, max_value=40),
    cell=st.integers(min_value=0),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_content_hash_of_float_frames(rows: int, cols: int, cell: int, seed: int) -> None:
    a = np.random.default_rng(seed).normal(size=(rows, cols))
    b = a.copy()
    b.flat[cell % a.size] = np.nextafter(b.flat[cell % a.size], np.inf)  # one ulp
    assert content_hash(a) != content_hash(b)
    # same bytes read differently are different data
    assert content_hash(a) != content_hash(a.reshape(-1))
    assert content_hash(a) != content_hash(a.view(np.int64))
    # layout is not identity: a transposed copy hashes like its contiguous equal
    assert content_hash(a.T) == content_hash(np.ascontiguousarray(a.T))


def test_content_hash_of_empty_arrays_keeps_shape_and_dtype() -> None:
    assert content_hash(np.zeros((0, 3))) != content_hash(np.zeros((3, 0)))
    assert content_hash(np.zeros(0)) != content_hash(np.zeros(0, dtype=np.float32))


# ----------------------------------------------------------------------- tables


def shifted(shape: tuple[int, int], dy: int) -> LineageRelation:
    """``out[i, j] <- in[i + dy, j]`` where in range."""
    h, w = shape
    out = np.array([(i, j) for i in range(h) for j in range(w) if 0 <= i + dy < h])
    inp = out + np.array([dy, 0])
    return LineageRelation.from_pairs(shape, shape, out, inp)


def test_blob_cache_equals_a_fresh_encoding() -> None:
    table = compress(shifted((6, 5), 1))
    fresh = blob_module._table_to_blob(table)
    assert table_to_blob(table) == fresh
    assert table_to_blob(table) is table_to_blob(table)  # cached on the table
    assert table_from_blob(fresh).decompress() == shifted((6, 5), 1)


def test_digest_tells_tables_apart() -> None:
    a, b = compress(shifted((6, 5), 1)), compress(shifted((6, 5), 1))
    assert a is not b
    assert table_digest(a) == table_digest(b)
    assert table_digest(a) != table_digest(compress(shifted((6, 5), -1)))
    assert table_digest(a) != table_digest(compress(shifted((5, 6), 1)))  # shapes differ


# ----------------------------------------------------------------------- picture cache


@pytest.fixture(autouse=True)
def empty_picture_cache() -> None:
    m.clear_picture_cache()


def test_picture_cache_hit_is_the_fresh_render() -> None:
    rel = shifted((16, 16), 2)
    inputs = [("smoothed", compress(rel))]
    first = m.lineage_markdown("thresholded", (16, 16), inputs, 4)
    assert len(m._pictures) == 1
    # a new table object with the same content (the next served run) hits the cache ...
    again = m.lineage_markdown("thresholded", (16, 16), [("smoothed", compress(rel))], 4)
    assert again is first
    # ... and a hit is exactly what drawing from scratch gives
    assert again == m._render_markdown("thresholded", (16, 16), [("smoothed", rel)], 4, 4)


def test_picture_cache_never_answers_for_other_lineage() -> None:
    base = m.lineage_markdown("out", (16, 16), [("in", compress(shifted((16, 16), 2)))], 4)
    other_rel = shifted((16, 16), -3)
    other = m.lineage_markdown("out", (16, 16), [("in", compress(other_rel))], 4)
    assert other != base
    assert other == m._render_markdown("out", (16, 16), [("in", other_rel)], 4, 4)
    # the output name, sample size and input names are part of what is drawn, and the key
    table = compress(shifted((16, 16), 2))
    renamed = m.lineage_markdown("out2", (16, 16), [("in", table)], 4)
    more_cells = m.lineage_markdown("out", (16, 16), [("in", table)], 9)
    other_input = m.lineage_markdown("out", (16, 16), [("in2", table)], 4)
    assert len({base, other, renamed, more_cells, other_input}) == 5
    assert len(m._pictures) == 5


def test_uncompressed_relations_are_drawn_not_cached() -> None:
    rel = shifted((8, 8), 1)
    md = m.lineage_markdown("out", (8, 8), [("in", rel)], 4)
    assert md == m.lineage_markdown("out", (8, 8), [("in", compress(rel))], 4)
    assert len(m._pictures) == 1  # only the compressed call was cached


# ----------------------------------------------------------------------- settings


def test_lineage_settings_are_shared_only_between_equal_io_managers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dagster builds a new IO manager per run; equal ones share one settings object, and any
    differing field (or base directory) gives its own."""
    from dslog_dagster import DSLogIOManager

    monkeypatch.delenv("DSLOG_STORE", raising=False)
    monkeypatch.chdir(tmp_path)  # outside a run, the resource's default store is the cwd's

    base = str(tmp_path)
    first = DSLogIOManager(base_dir=base, policy="capture").dslog_settings()
    assert DSLogIOManager(base_dir=base, policy="capture").dslog_settings() is first
    off = DSLogIOManager(base_dir=base, policy="off").dslog_settings()
    lazy = DSLogIOManager(base_dir=base, durable=False).dslog_settings()
    other = DSLogIOManager(
        base_dir=str(tmp_path / "other"), store_dir=str(tmp_path / "other" / ".dslog")
    ).dslog_settings()
    assert (off.policy, lazy.durable) == ("off", False)
    assert first.policy == "capture"
    assert first.durable
    assert other.store_dir == str((tmp_path / "other" / ".dslog").absolute())
    assert first.store_dir == str((tmp_path / ".dslog").absolute())
