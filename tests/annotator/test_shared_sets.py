"""Big shared sets stay shared: statistics of a whole array cost O(cells), and lineage is exact.

``x - x.mean()`` gives every output cell the set {i} ∪ M, with M the set of all cells. The
arena keeps M by reference (a lazy union node per cell, one reference per accumulator), so a
step like the example project's threshold (mean + k·std, then a pick) is linear in the cells;
copying M per cell would cost cells² annotations. These tests check both halves of that: the
memory bound at a size where cells² would be gigabytes, and that flattening the references
gives exactly the reference annotator's lineage (duplicates removed) on smaller arrays.

The element-wise kernels have vector and streaming paths above a few thousand / 65,536 cells;
the last tests run arrays that large, with a break in the cell sequence in the middle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dslog_dagster.core.capture import Capture, capture
from tests.annotator.reference import MODES, Mode, reference_capture, to_relations

N = 256  # 65,536 cells: a cells² arena would hold 4.3e9 annotations (> 34 GB)


def _all_cells_pairs(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> np.ndarray:
    """Every output cell depends on every input cell: the (out..., in...) pairs, sorted."""
    outs = np.argwhere(np.ones(out_shape, dtype=bool)) if out_shape else np.zeros((1, 0), int)
    ins = np.argwhere(np.ones(in_shape, dtype=bool))
    return np.concatenate(
        [np.repeat(outs, len(ins), axis=0), np.tile(ins, (len(outs), 1))], axis=1
    ).astype(np.int64)


def _threshold(s: Any) -> Any:
    level = s.mean() + 2.5 * s.std()
    return np.where(s > level, s, 0.0)


# Small outputs whose every cell depends on every input cell (through the statistics).
WHOLE_ARRAY_STATS: dict[str, Callable[[Any], Any]] = {
    "sum_of_squared_deviations": lambda s: ((s - s.mean()) ** 2).sum(),
    "variance_then_std": lambda s: np.sqrt(((s - s.mean()) ** 2).mean()),
    "largest_share": lambda s: (s / s.sum()).max(),
    "top_zscores": lambda s: np.sort(((s - s.mean()) / s.std()).ravel())[-3:],
    "column_sums_of_deviations": lambda s: (s - s.mean()).sum(axis=0)[:2],
}


@pytest.mark.parametrize("name", sorted(WHOLE_ARRAY_STATS))
def test_whole_array_statistics_are_linear_and_exact(name: str) -> None:
    func = WHOLE_ARRAY_STATS[name]
    x = np.random.default_rng(1).random((N, N))
    r = capture(func, x)
    np.testing.assert_array_equal(r.outputs[0], np.asarray(func(x), dtype=np.float64))
    # A few 16-byte union nodes and 8-byte accumulator entries per cell and step; copying M
    # per cell would be 8 * cells = 512 KB per cell.
    assert r.annotation_bytes < 128 * x.size, r.annotation_bytes / x.size
    rel = r.relation(0, 0)
    want = _all_cells_pairs(r.outputs[0].shape, x.shape)
    np.testing.assert_array_equal(rel.pairs(), want)


def test_threshold_step_is_linear_and_keeps_only_the_picked_cells() -> None:
    x = np.random.default_rng(2).random((N, N))
    hot = [(3, 4), (100, 200), (255, 0)]
    for c in hot:
        x[c] = 40.0
    r = capture(_threshold, x)
    assert r.annotation_bytes < 64 * x.size
    assert r.relation(0, 0).pairs().tolist() == [[*c, *c] for c in hot]


COMPOSED: dict[str, Callable[[Any], Any]] = {
    "subtract_mean": lambda s: s - s.mean(),
    "divide_by_sum": lambda s: s / s.sum(),
    "zscore": lambda s: (s - s.mean()) / s.std(),
    "twice_the_same_mean": lambda s: (s - s.mean()) - s.mean(),
    "column_sums_of_deviations": lambda s: (s - s.mean()).sum(axis=0),
    "row_sums_against_column_means": lambda s: (s - s.mean(axis=0)).sum(axis=1),
    "prefix_sums": lambda s: np.cumsum(s),
    "sum_of_prefix_sums": lambda s: np.cumsum(s).sum(),
    "threshold": lambda s: np.where(s > s.mean() + s.std(), s, 0.0),
    "centred_product": lambda s: (s - s.mean()) @ s.T,
    "sorted_deviations": lambda s: np.sort(s - s.mean(), axis=None),
    # Considered sorts give every element of a lane the lane's set, built by reference.
    "row_sorted_deviations": lambda s: np.sort(s - s.mean(), axis=1),
    "sorted_twice": lambda s: np.sort(np.sort(s - s.mean(), axis=1), axis=0),
    "sorted_then_summed": lambda s: np.sort(s / s.sum(), axis=1).sum(axis=1),
    "row_maxima_of_shares": lambda s: (s / s.sum()).max(axis=1),
    "add_total_in_place": lambda s: np.add(s, s.sum(), out=s.copy()),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_shared_sets_flatten_to_the_reference_lineage(name: str, mode: Mode) -> None:
    """12 x 11 cells: unions above the materialisation limit (64 cells) become references."""
    func = COMPOSED[name]
    x = np.random.default_rng(3).random((12, 11))
    got = Capture(mode=mode).run(func, x)
    np.testing.assert_array_equal(got.outputs[0], np.asarray(func(x), dtype=np.float64))
    for which, rels in (("contributing", got.relations), ("considered", got.considered)):
        if rels is None:
            continue
        v, lineage = reference_capture(func, x, mode=which)  # type: ignore[arg-type]
        want = to_relations(v, lineage, [x.shape])
        assert set(rels) == set(want)
        for key, rel in want.items():
            assert rels[key] == rel, (name, which, key)


def _elementwise_pairs(n: int, broken: int, source: int) -> tuple[np.ndarray, np.ndarray]:
    """out i <- a i and b i, except out `broken` <- b `source` (1-d flat pairs per input)."""
    a = np.stack([np.arange(n), np.arange(n)], axis=1)
    b_in = np.arange(n)
    b_in[broken] = source
    b = np.stack([np.arange(n), b_in], axis=1)
    return a, b


@pytest.mark.parametrize("op", [np.add, np.subtract, np.multiply, np.divide])
def test_large_elementwise_kernels_follow_breaks_in_the_cell_sequence(op: Any) -> None:
    """70,001 cells (vector kernel, streamed output): a copied cell in the middle of b ends
    the fast run; the rest is still exact."""
    n, broken, source = 70_001, 40_000, 5
    rng = np.random.default_rng(4)
    x, y = rng.random(n) + 0.5, rng.random(n) + 0.5

    def f(a: Any, b: Any) -> Any:
        b = b.copy()
        b[broken] = b[source]
        return op(a, b)

    r = capture(f, x, y)
    np.testing.assert_array_equal(r.outputs[0], f(x, y))
    want_a, want_b = _elementwise_pairs(n, broken, source)
    np.testing.assert_array_equal(r.relation(0, 0).pairs(), want_a)
    np.testing.assert_array_equal(r.relation(0, 1).pairs(), want_b)


def test_large_negative_and_in_place_add_are_exact() -> None:
    n = 70_000
    rng = np.random.default_rng(5)
    x, y = rng.random(n), rng.random(n)

    def f(a: Any, b: Any) -> Any:
        out = np.negative(a)
        out += b
        return out

    r = capture(f, x, y)
    np.testing.assert_array_equal(r.outputs[0], -x + y)
    diag = np.stack([np.arange(n), np.arange(n)], axis=1)
    np.testing.assert_array_equal(r.relation(0, 0).pairs(), diag)
    np.testing.assert_array_equal(r.relation(0, 1).pairs(), diag)


@pytest.mark.parametrize("axis", [0, 1])
def test_considered_sort_of_deviations_records_each_lane_by_reference(axis: int) -> None:
    """np.sort(s - s.mean(axis), axis) in considered mode: every element carries its own cell
    and its whole lane (a shared set of more than 64 cells, so a reference), and the sort gives
    every element of a lane that lane as its considered set. The lane's set is built as an
    accumulator of references (linear in the lane), so both relations are exactly the lane."""
    shape = (100, 3) if axis == 0 else (3, 100)
    x = np.random.default_rng(6).random(shape)
    func = lambda s: np.sort(s - s.mean(axis=axis, keepdims=True), axis=axis)  # noqa: E731
    r = Capture(mode="considered").run(func, x)
    np.testing.assert_array_equal(r.outputs[0], func(x))
    out = np.argwhere(np.ones(shape, dtype=bool))
    lane = np.arange(shape[axis])
    want = []
    for o in out:
        for k in lane:
            i = o.copy()
            i[axis] = k
            want.append([*o, *i])
    want_pairs = np.array(sorted(map(tuple, want)), dtype=np.int64)
    assert r.considered is not None
    np.testing.assert_array_equal(r.considered[(0, 0)].pairs(), want_pairs)
    np.testing.assert_array_equal(r.relation(0, 0).pairs(), want_pairs)
