"""Per-partition row lineage: local tables shifted to their partition offset and merged are
exactly the relation of the whole frame (no Spark session needed for the algebra)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import KINDS, relation_between

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.combine import merge_tables
from dslog_dagster.spark.lineage import shift_rows


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3),
    n_parts=st.integers(1, 5),
    fallback=st.sampled_from(["auto", "always", "never"]),
)
def test_shifted_partition_tables_merge_to_the_whole_relation(
    seed: int, kinds: list[str], n_parts: int, fallback: str
) -> None:
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, 15)) for _ in range(n_parts)]
    n_out, n_in = sum(sizes), int(rng.integers(1, 40))
    offsets = np.cumsum([0, *sizes])
    whole_o, whole_i, tables = [], [], []
    for p, k in enumerate(sizes):
        local = relation_between(rng, (k,), (n_in,), kinds)
        tables.append(shift_rows(compress(local, fallback=fallback), int(offsets[p]), n_out))
        whole_o.append(local.out_cols[0] + offsets[p])
        whole_i.append(local.in_cols[0])
    want = LineageRelation.from_columns(
        (n_out,), (n_in,), [np.concatenate(whole_o)], [np.concatenate(whole_i)]
    )
    merged = merge_tables(tables)
    assert merged.decompress() == want
    assert merged.n_pairs == want.unique().n


def test_structured_lineage_merges_back_to_one_row_across_partitions() -> None:
    sizes, group = [7, 12, 5], 10
    offsets = np.cumsum([0, *sizes])
    n_out = sum(sizes)
    for pattern in ("identity", "pooled"):
        tables = []
        for p, k in enumerate(sizes):
            b = np.arange(k)
            if pattern == "identity":
                o, i, n_in = b, b + offsets[p], n_out
            else:
                o, i, n_in = (
                    np.repeat(b, group),
                    np.arange(k * group) + group * offsets[p],
                    n_out * group,
                )
            local = LineageRelation.from_columns((k,), (n_in,), [o], [i])
            tables.append(shift_rows(compress(local), int(offsets[p]), n_out))
        merged = merge_tables(tables)
        assert merged.rows == 1, pattern
        assert merged.n_pairs == n_out * (1 if pattern == "identity" else group)
