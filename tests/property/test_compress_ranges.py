"""``compress_ranges`` builds the ProvRC table of interval lineage without spelling out pairs.

The oracle is the pair set written out by hand, one interval at a time: the direct table must
decompress to exactly it for runs of every step sign and period, plateaus, random intervals,
gaps and shuffled rows, and ``fallback="auto"`` must either keep the direct table or return
exactly what :func:`compress` gives the pairs.
"""

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from strategies import interval_lineage

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.compression import compress_ranges
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Case = tuple[int, int, np.ndarray, np.ndarray, np.ndarray]


def _pairs(out_rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> set[tuple[int, int]]:
    return {
        (int(o), a)
        for o, a_lo, a_hi in zip(out_rows, lo, hi, strict=True)
        for a in range(int(a_lo), int(a_hi) + 1)
    }


def _as_set(rel: LineageRelation) -> set[tuple[int, int]]:
    return set(zip(rel.out_cols[0].tolist(), rel.in_cols[0].tolist(), strict=True))


def _relation(case: Case) -> LineageRelation:
    n_out, n_in, out_rows, lo, hi = case
    pairs = np.asarray(sorted(_pairs(out_rows, lo, hi)), np.int64).reshape(-1, 2)
    return LineageRelation.from_columns((n_out,), (n_in,), [pairs[:, 0]], [pairs[:, 1]])


@SETTINGS
@given(case=interval_lineage())
@example(case=(1, 1, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)))
@example(case=(1, 5, np.array([0]), np.array([2]), np.array([4])))
@example(  # a mirrored run: lo falls by 10 per row
    case=(4, 40, np.array([0, 1, 2, 3]), np.array([30, 20, 10, 0]), np.array([32, 22, 12, 2]))
)
@example(  # period 2 with partial plateaus at both ends
    case=(6, 40, np.arange(6), np.array([0, 10, 10, 20, 20, 30]), np.array([4, 14, 14, 24, 24, 34]))
)
@example(  # one-link runs of alternating steps, then a long run
    case=(7, 60, np.arange(7), np.array([0, 5, 3, 8, 6, 7, 8]), np.array([1, 6, 4, 9, 7, 8, 9]))
)
def test_direct_table_is_exactly_the_pairs(case: Case) -> None:
    n_out, n_in, out_rows, lo, hi = case
    want = _relation(case)
    table = compress_ranges((n_out,), (n_in,), out_rows, lo, hi, fallback="never")
    assert table.encoding == "provrc"
    assert _as_set(table.decompress()) == _as_set(want)
    assert table.decompress() == want
    assert table.n_pairs == want.n
    assert table.rows <= len(out_rows)
    back = table_from_blob(table_to_blob(table))
    assert back.decompress() == want
    # the forward orientation is derived from the same fields
    assert table.forward().expand() == want


@SETTINGS
@given(case=interval_lineage())
def test_auto_keeps_the_direct_table_only_where_it_clearly_pays(case: Case) -> None:
    n_out, n_in, out_rows, lo, hi = case
    want = _relation(case)
    direct = compress_ranges((n_out,), (n_in,), out_rows, lo, hi, fallback="never")
    auto = compress_ranges((n_out,), (n_in,), out_rows, lo, hi, threads=1)
    assert auto.decompress() == want
    if direct.rows * 16 <= direct.n_pairs:
        assert table_to_blob(auto) == table_to_blob(direct)
    else:
        assert table_to_blob(auto) == table_to_blob(compress(want, threads=1))


@SETTINGS
@given(case=interval_lineage(repeats=True))
def test_repeated_output_rows_are_united(case: Case) -> None:
    n_out, n_in, out_rows, lo, hi = case
    want = _relation(case)
    for fallback in ("auto", "never"):
        table = compress_ranges((n_out,), (n_in,), out_rows, lo, hi, fallback=fallback)
        assert table.decompress() == want
        assert table.n_pairs == want.n
