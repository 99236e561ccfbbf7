"""ProvRC is lossless: decompress(compress(R)) == dedupe(R), in both orientations.

Relations are built from the structures ProvRC is meant to find (all-to-all boxes, relative,
mirrored, strided and pooling attributes) mixed with random noise and duplicates, over ranks
0–4 on both sides, so every merge path of the compressor (and the columnar fallback) runs.
"""

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import relations

from dslog_dagster import _native
from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.format.table_file import table_from_bytes, table_to_bytes

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


# ------------------------------------------------------------------------------------------
# The native run-consuming fast paths (consume stretches of single-pair records straight from
# the sorted columns) must give exactly the table of the plain record-by-record cascade.

FIELDS = ("rows", "out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")


@st.composite
def run_relations(draw: Any) -> LineageRelation:
    """Element-wise / reduction-like relations with long single-pair runs, broken by holes,
    stray pairs and slope changes, in output order or in input order."""
    l = draw(st.integers(1, 3))
    m = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    osh = tuple(int(x) for x in rng.integers(1, 40, l))
    cells = np.stack(np.meshgrid(*[np.arange(d) for d in osh], indexing="ij")).reshape(l, -1)
    ins, ish = [], []
    for _ in range(m):
        mode = rng.choice(["rel", "mirror", "const", "other"])
        b = cells[int(rng.integers(0, l))]
        d = int(b.max()) + 1
        a = {"rel": b, "mirror": d - 1 - b, "const": np.full_like(b, int(rng.integers(0, d)))}.get(
            str(mode), rng.integers(0, d, b.size)
        )
        ins.append(a)
        ish.append(d)
    o, i = cells, np.stack(ins)
    if draw(st.booleans()):  # a reduced axis: every output cell reads a whole input lane
        lane = int(rng.integers(2, 6))
        o = np.repeat(o, lane, axis=1)
        i = np.vstack([np.tile(np.arange(lane), cells.shape[1]), np.repeat(i, lane, axis=1)])
        ish = [lane, *ish]
    keep = rng.random(o.shape[1]) >= draw(st.sampled_from([0.0, 0.002, 0.05]))
    o, i = o[:, keep], i[:, keep]
    stray = int(rng.integers(0, 4))
    if stray and o.shape[1]:
        at = rng.integers(0, o.shape[1], stray)
        i = i.copy()
        i[0, at] = rng.integers(0, ish[0], stray)
    extra = int(rng.integers(0, 4))
    if extra and o.shape[1]:  # a few pairs whose last input starts a run of two
        at = rng.integers(0, o.shape[1], extra)
        nxt = i[:, at].copy()
        nxt[-1] += 1
        o, i = np.hstack([o, o[:, at]]), np.hstack([i, nxt])
        ish[-1] += 1
    if draw(st.booleans()):  # input order, as captures produce it
        order = np.lexsort(i[::-1])
        o, i = o[:, order], i[:, order]
    return LineageRelation.from_columns(osh, tuple(ish), list(o), list(i))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rel=st.one_of(relations(), run_relations()),
    relative=st.booleans(),
    mirrored=st.booleans(),
    threads=st.sampled_from([1, 2]),
)
def test_fast_paths_give_the_reference_table(
    rel: LineageRelation, relative: bool, mirrored: bool, threads: int
) -> None:
    if rel.out_rank + rel.in_rank == 0:
        return
    args = (rel.columns(), rel.out_rank, relative, mirrored, True, 0.0, threads, 0)
    fast = _native.compress(*args, fast_paths=True)
    ref = _native.compress(*args, fast_paths=False)
    for name in FIELDS:
        assert np.array_equal(fast[name], ref[name]), name
    assert fast["n_unique"] == ref["n_unique"]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), through=st.sampled_from(["table", "blob", "file"]))
def test_zero_d_relations_with_duplicates_round_trip(n: int, through: str) -> None:
    """A 0-d → 0-d relation of ``n`` (duplicate) pairs: the one cell-to-cell pair when
    ``n > 0``, none otherwise. ``unique()`` shrinks the (empty) columns with the count, so the
    relation equals its own round trip through a table, a segment blob and a table file."""
    rel = LineageRelation.from_columns((), (), out_cols=[], in_cols=[], n=n)
    uniq = rel.unique()
    assert uniq.n == min(n, 1)
    assert uniq.out_cols.shape == (0, uniq.n)
    assert uniq.in_cols.shape == (0, uniq.n)
    assert uniq.pairs().shape == (uniq.n, 0)
    table = compress(rel)
    if through == "blob":
        table = table_from_blob(table_to_blob(table))
    elif through == "file":
        table = table_from_bytes(table_to_bytes(table))
    back = table.decompress()
    assert back == rel
    assert back.n == min(n, 1)
    assert (back == LineageRelation.from_columns((), (), [], [], n=1)) == (n > 0)
