"""Exact algebra on compressed tables: per-partition merge and row × column products."""

import itertools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import KINDS, relation_between

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.combine import concat_tables, merge_tables, product_table
from dslog_dagster.core.compression import union_tables


def _split_by_output(rel: LineageRelation, cuts: list[int]) -> list[LineageRelation]:
    b = rel.out_cols[0]
    edges = [0, *sorted(set(cuts)), rel.out_shape[0]]
    parts = []
    for lo, hi in itertools.pairwise(edges):
        sel = (b >= lo) & (b < hi)
        parts.append(
            LineageRelation(
                rel.out_shape,
                rel.in_shape,
                rel.out_cols[:, sel],
                rel.in_cols[:, sel],
                int(sel.sum()),
            )
        )
    return parts


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3),
    n_cuts=st.integers(0, 5),
    fallback=st.sampled_from(["auto", "always", "never"]),
)
def test_merge_of_partition_tables_is_exact(
    seed: int, kinds: list[str], n_cuts: int, fallback: Any
) -> None:
    rng = np.random.default_rng(seed)
    osh = (int(rng.integers(1, 40)),)
    ish = (int(rng.integers(1, 40)),)
    rel = relation_between(rng, osh, ish, kinds)
    cuts = [int(c) for c in rng.integers(0, osh[0], size=n_cuts)]
    tables = [compress(p, fallback=fallback) for p in _split_by_output(rel, cuts)]
    merged = merge_tables(tables)
    assert merged.decompress() == rel
    assert merged.n_pairs == rel.unique().n
    assert merged.rows <= sum(t.rows for t in tables)


def test_merge_joins_rows_across_seams() -> None:
    n = 100
    ident = LineageRelation.from_columns((n,), (n,), [np.arange(n)], [np.arange(n)])
    pooled = LineageRelation.from_columns(
        (n,), (10 * n,), [np.repeat(np.arange(n), 10)], [np.arange(10 * n)]
    )
    for rel in (ident, pooled):
        parts = [compress(p) for p in _split_by_output(rel, [13, 50, 77])]
        merged = merge_tables(parts)
        assert merged.rows == 1
        assert merged.decompress() == rel


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=2)
)
def test_product_is_row_lineage_times_column_lineage(seed: int, kinds: list[str]) -> None:
    rng = np.random.default_rng(seed)
    rows = relation_between(rng, (int(rng.integers(1, 12)),), (int(rng.integers(1, 12)),), kinds)
    k_out, k_in = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    m = int(rng.integers(1, k_out * k_in + 1))
    jc = rng.integers(0, [k_out, k_in], size=(m, 2))
    cols = LineageRelation.from_columns((k_out,), (k_in,), [jc[:, 0]], [jc[:, 1]])
    col_table = compress(cols, fallback="never")
    prod = product_table(compress(rows), col_table)
    r, c = rows.unique().pairs(), cols.unique().pairs()
    want = [(o, j, i, k) for o, i in r.tolist() for j, k in c.tolist()]
    arr = np.asarray(want, np.int64).reshape(-1, 4)
    expected = LineageRelation.from_pairs(prod.out_shape, prod.in_shape, arr[:, :2], arr[:, 2:])
    assert prod.decompress() == expected
    assert prod.n_pairs == expected.n
    # a columnar row table (unstructured row lineage) gives the same product
    assert product_table(compress(rows, fallback="always"), col_table).decompress() == expected
    both = concat_tables([prod, prod])
    assert both.rows == 2 * prod.rows


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_pieces=st.integers(1, 4))
def test_union_of_interleaved_tables_is_exact_and_sorted(seed: int, n_pieces: int) -> None:
    """Pieces whose output rows interleave (a refetch's partitions, or ranged and refetched
    groups): the union is exact, and a columnar result is sorted as decompress promises."""
    rng = np.random.default_rng(seed)
    n_out, n_in = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    rel = relation_between(rng, (n_out,), (n_in,), ["noise"]).unique()
    owner = rng.integers(0, n_pieces, rel.n)
    pieces = [
        compress(
            LineageRelation(
                rel.out_shape,
                rel.in_shape,
                rel.out_cols[:, owner == p],
                rel.in_cols[:, owner == p],
                int((owner == p).sum()),
            ),
            fallback="always" if p % 2 == 0 else "auto",
        )
        for p in range(n_pieces)
    ]
    got = union_tables(pieces)
    assert got.decompress() == rel
    if got.encoding == "columnar":
        order = np.lexsort(got.raw[::-1])
        assert np.array_equal(order, np.arange(got.rows))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=2)
)
def test_union_of_tables_sharing_pairs_is_exact(seed: int, kinds: list[str]) -> None:
    """``disjoint=False`` (the slots of a self-join may name the same input row): shared
    pairs are counted once."""
    rng = np.random.default_rng(seed)
    osh, ish = (int(rng.integers(1, 30)),), (int(rng.integers(1, 30)),)
    a = relation_between(rng, osh, ish, kinds).unique()
    b = relation_between(rng, osh, ish, kinds).unique()
    both = LineageRelation(
        osh,
        ish,
        np.concatenate([a.out_cols, b.out_cols], axis=1),
        np.concatenate([a.in_cols, b.in_cols], axis=1),
        a.n + b.n,
    ).unique()
    got = union_tables([compress(a), compress(b), compress(a)], disjoint=False)
    assert got.decompress() == both
    assert got.n_pairs == both.n
