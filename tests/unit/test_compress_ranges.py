"""``compress_ranges``: the aggregation patterns it must store as compactly as ``compress``,
the sign convention of its relative attribute, and its input validation."""

import numpy as np
import pytest

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.compression import compress_ranges
from dslog_dagster.core.format.blob import table_to_blob
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError


def _spelled_out(
    n_out: int, n_in: int, out_rows: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> LineageTable:
    """What the capture stored before: every pair written out, then ``compress``."""
    lengths = hi - lo + 1
    o = np.repeat(out_rows, lengths)
    a = np.concatenate(
        [np.zeros(0, np.int64)] + [np.arange(x, y + 1) for x, y in zip(lo, hi, strict=True)]
    )
    return compress(LineageRelation.from_columns((n_out,), (n_in,), [o], [a]), threads=1)


def _fields(t: LineageTable) -> list[list[int]]:
    return [
        f.ravel().tolist()
        for f in (t.out_lo, t.out_hi, t.in_ref, t.in_q, t.in_r, t.in_mult, t.in_lo, t.in_hi)
    ]


def test_sorted_groups_of_ten_are_one_row_no_larger_than_compress() -> None:
    # the bench: 10^5 groups of 10 sorted ids each
    rows = np.arange(100_000, dtype=np.int64)
    lo = 10 * rows
    table = compress_ranges((100_000,), (1_000_000,), rows, lo, lo + 9)
    assert table.rows == 1
    assert table.n_pairs == 1_000_000
    # b - a in [-9, 0] with F(b) = 10·b: output row b reads inputs 10b..10b+9
    assert _fields(table) == [[0], [99_999], [0], [1], [0], [10], [-9], [0]]
    old = _spelled_out(100_000, 1_000_000, rows, lo, lo + 9)
    assert len(table_to_blob(table)) <= len(table_to_blob(old))
    assert _fields(table) == _fields(old)


def test_descending_groups_are_one_mirrored_row() -> None:
    # an aggregation ordered by key descending: lo falls by 10 per output row
    rows = np.arange(4, dtype=np.int64)
    lo = np.array([30, 20, 10, 0])
    table = compress_ranges((4,), (40,), rows, lo, lo + 2)
    # mult = -10: F(b) - a = -10·b - a in [-32, -30], so row 0 reads 30..32, row 3 reads 0..2
    assert _fields(table) == [[0], [3], [0], [1], [0], [-10], [-32], [-30]]
    assert table.decompress() == _spelled_out(4, 40, rows, lo, lo + 2).decompress()
    assert table_to_blob(table) == table_to_blob(_spelled_out(4, 40, rows, lo, lo + 2))


def test_rows_sharing_one_interval_are_one_absolute_row() -> None:
    rows = np.arange(50, dtype=np.int64)
    lo = np.full(50, 7)
    table = compress_ranges((50,), (20,), rows, lo, lo + 3)
    assert _fields(table) == [[0], [49], [-1], [1], [0], [1], [7], [10]]
    assert table_to_blob(table) == table_to_blob(_spelled_out(50, 20, rows, lo, lo + 3))


def test_groups_repeated_per_row_are_one_strided_row() -> None:
    # an aggregate joined back to its 10 rows per group: row b reads group b // 10
    rows = np.arange(1000, dtype=np.int64)
    lo = 10 * (rows // 10)
    table = compress_ranges((1000,), (1000,), rows, lo, lo + 9)
    assert _fields(table) == [[0], [999], [0], [10], [0], [10], [-9], [0]]
    assert table.decompress() == _spelled_out(1000, 1000, rows, lo, lo + 9).decompress()


def test_row_order_does_not_change_the_table() -> None:
    rng = np.random.default_rng(3)
    rows = np.arange(200, dtype=np.int64)
    lo = 5 * rows
    order = rng.permutation(200)
    a = compress_ranges((200,), (1000,), rows, lo, lo + 4)
    b = compress_ranges((200,), (1000,), rows[order], lo[order], lo[order] + 4)
    assert table_to_blob(a) == table_to_blob(b)


def test_scattered_intervals_are_stored_as_compress_stores_them() -> None:
    # random lo: no run pays, so auto spells the pairs out and compress decides as before
    rng = np.random.default_rng(0)
    rows = np.arange(2000, dtype=np.int64)
    lo = rng.integers(0, 100_000, 2000)
    hi = lo + rng.integers(0, 21, 2000)
    direct = compress_ranges((2000,), (100_100,), rows, lo, hi, fallback="never")
    assert direct.rows * 16 > direct.n_pairs
    auto = compress_ranges((2000,), (100_100,), rows, lo, hi)
    assert table_to_blob(auto) == table_to_blob(_spelled_out(2000, 100_100, rows, lo, hi))


def test_no_intervals_is_the_empty_table() -> None:
    none = np.zeros(0, np.int64)
    table = compress_ranges((5,), (7,), none, none, none)
    assert table.rows == 0
    assert table.n_pairs == 0
    assert table.decompress().n == 0
    assert table_to_blob(table) == table_to_blob(_spelled_out(5, 7, none, none, none))


@pytest.mark.parametrize(
    ("out_shape", "in_shape", "rows", "lo", "hi", "match"),
    [
        ((4, 2), (10,), [0], [0], [1], "rank-1"),
        ((4,), (), [0], [0], [1], "rank-1"),
        ((4,), (10,), [0, 1], [0], [1], "ragged"),
        ((4,), (10,), [0], [3], [2], "empty"),
        ((4,), (10,), [4], [0], [1], "output shape"),
        ((4,), (10,), [-1], [0], [1], "output shape"),
        ((4,), (10,), [0], [5], [10], "input shape"),
        ((4,), (10,), [0], [-1], [1], "input shape"),
    ],
)
def test_invalid_intervals_are_refused(
    out_shape: tuple[int, ...],
    in_shape: tuple[int, ...],
    rows: list[int],
    lo: list[int],
    hi: list[int],
    match: str,
) -> None:
    with pytest.raises(InvalidRelationError, match=match):
        compress_ranges(out_shape, in_shape, rows, lo, hi)


def test_float_rows_are_refused() -> None:
    with pytest.raises(UnsupportedArrayError, match="out_rows"):
        compress_ranges((4,), (10,), np.array([0.0]), [0], [1])
