"""The analytic lineage generators agree with a brute-force reference on tiny shapes.

The reference runs the *real* NumPy operation on object arrays of :class:`Tracked` values: each
cell carries the set of input cells it was computed from, and ``+``/``*``/``-`` union those
sets, so whatever NumPy does internally (broadcasting, reductions, ``dot``, copies and views)
the result records the true lineage. Operations NumPy cannot run on objects (convolution,
filters, binning, the stable sort order) use explicit Python loops instead.
"""

import itertools
from typing import Any

import numpy as np
import pytest

from dslog_dagster.core import LineageRelation
from dslog_dagster.core import analytic as an
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError


class Tracked:
    """A value plus the set of ``(input name, cell index)`` it was computed from."""

    __slots__ = ("src", "v")

    def __init__(self, v: float, src: frozenset[tuple[str, tuple[int, ...]]]) -> None:
        self.v = v
        self.src = src

    def __neg__(self) -> "Tracked":
        return Tracked(-self.v, self.src)

    def __add__(self, other: "Tracked") -> "Tracked":
        return Tracked(self.v + other.v, self.src | other.src)

    def __mul__(self, other: "Tracked") -> "Tracked":
        return Tracked(self.v * other.v, self.src | other.src)


def tracked(name: str, shape: tuple[int, ...], values: Any = None) -> np.ndarray:
    arr = np.empty(shape, dtype=object)
    vals = np.zeros(shape) if values is None else np.asarray(values)
    for idx in np.ndindex(*shape):
        arr[idx] = Tracked(float(vals[idx]), frozenset({(name, idx)}))
    return arr


def relation_of(out: Any, name: str, in_shape: tuple[int, ...]) -> LineageRelation:
    """The lineage of ``out`` on input ``name``, read cell by cell."""
    out = np.asarray(out, dtype=object) if isinstance(out, Tracked) else out
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    for b in np.ndindex(*out.shape):
        for src_name, a in out[b].src:
            if src_name == name:
                outs.append(b)
                ins.append(a)
    return pairs_relation(out.shape, in_shape, outs, ins)


def pairs_relation(
    out_shape: Any, in_shape: Any, outs: list[Any], ins: list[Any]
) -> LineageRelation:
    rank_out, rank_in = len(out_shape), len(in_shape)
    oc = np.asarray(outs, dtype=np.int64).reshape(len(outs), rank_out).T
    ic = np.asarray(ins, dtype=np.int64).reshape(len(ins), rank_in).T
    return LineageRelation.from_columns(out_shape, in_shape, list(oc), list(ic), n=len(outs))


SHAPES = [(5,), (3, 4), (2, 3, 4), (1, 4), (4, 1)]


@pytest.mark.parametrize("shape", [*SHAPES, ()])
def test_negative(shape: tuple[int, ...]) -> None:
    x = tracked("x", shape)
    assert an.negative(shape) == relation_of(np.negative(x), "x", shape)


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (3, 4)),
        ((3, 4), (4,)),
        ((3, 1), (1, 4)),
        ((2, 1, 4), (3, 1)),
        ((5,), ()),
        ((1,), (3, 2)),
        ((2, 3, 4), (2, 3, 4)),
    ],
)
def test_add_broadcasting(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = tracked("a", sa), tracked("b", sb)
    out = np.add(a, b)
    ra, rb = an.add(sa, sb)
    assert ra == relation_of(out, "a", sa)
    assert rb == relation_of(out, "b", sb)


def test_broadcast_three_inputs() -> None:
    shapes = [(2, 1, 3), (4, 1), (3,)]
    a, b, c = (tracked(n, s) for n, s in zip("abc", shapes, strict=True))
    out = a + b + c
    for name, s, rel in zip("abc", shapes, an.broadcast(*shapes), strict=True):
        assert rel == relation_of(out, name, s)


def test_add_rejects_incompatible_shapes() -> None:
    with pytest.raises(InvalidRelationError, match="broadcast"):
        an.add((3, 4), (5,))


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_every_axis(shape: tuple[int, ...], keepdims: bool) -> None:
    x = tracked("x", shape)
    axes: list[Any] = [*range(len(shape)), -1, None]
    if len(shape) == 3:
        axes.append((0, 2))
    for axis in axes:
        ref = relation_of(x.sum(axis=axis, keepdims=keepdims), "x", shape)
        got = an.sum_axis(shape, axis, keepdims=keepdims)
        assert got == ref, axis


def test_sum_all_axes_is_0d() -> None:
    rel = an.sum_axis((3, 4))
    assert rel.out_shape == ()
    assert rel.n == 12


@pytest.mark.parametrize(
    ("shape", "reps"),
    [
        ((3,), 2),
        ((2, 3), (2, 2)),
        ((2, 3), (1, 3)),
        ((2, 3), 2),
        ((3,), (2, 2)),
        ((2, 2, 3), (2, 1)),
    ],
)
def test_tile(shape: tuple[int, ...], reps: Any) -> None:
    x = tracked("x", shape)
    assert an.tile(shape, reps) == relation_of(np.tile(x, reps), "x", shape)


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((3, 4), None),
        ((3, 4), (1, 0)),
        ((2, 3, 4), None),
        ((2, 3, 4), (1, 2, 0)),
        ((2, 3, 4), (0, -1, 1)),
        ((5,), None),
    ],
)
def test_transpose(shape: tuple[int, ...], axes: Any) -> None:
    x = tracked("x", shape)
    assert an.transpose(shape, axes) == relation_of(np.transpose(x, axes), "x", shape)


@pytest.mark.parametrize(
    ("sa", "sb"), [((3, 4), (4, 2)), ((3, 4), (4,)), ((4,), (4, 2)), ((4,), (4,)), ((1, 1), (1, 1))]
)
def test_dot(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = tracked("a", sa), tracked("b", sb)
    out = np.dot(a, b)
    ra, rb = an.dot(sa, sb)
    assert ra == relation_of(out, "a", sa)
    assert rb == relation_of(out, "b", sb)
    if len(sa) == 2 and len(sb) == 2:
        mm = np.matmul(a, b)
        assert ra == relation_of(mm, "a", sa)


def test_dot_rejects_bad_operands() -> None:
    with pytest.raises(InvalidRelationError, match="contracted"):
        an.dot((3, 4), (3, 4))
    with pytest.raises(UnsupportedArrayError, match="1-D and 2-D"):
        an.dot((2, 3, 4), (4,))


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_flip(shape: tuple[int, ...]) -> None:
    x = tracked("x", shape)
    axes: list[Any] = [None, *range(len(shape)), -1]
    if len(shape) > 1:
        axes.append((0, len(shape) - 1))
    for axis in axes:
        assert an.flip(shape, axis) == relation_of(np.flip(x, axis), "x", shape), axis


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize(
    ("shape", "axes"),
    [((3, 4), (0, 1)), ((3, 4), (1, 0)), ((2, 3, 4), (0, 2)), ((2, 3, 4), (2, 1))],
)
def test_rot90(shape: tuple[int, ...], axes: tuple[int, int], k: int) -> None:
    x = tracked("x", shape)
    assert an.rot90(shape, k, axes) == relation_of(np.rot90(x, k, axes), "x", shape)


@pytest.mark.parametrize(
    ("shape", "repeats", "axis"),
    [
        ((3, 4), 2, 0),
        ((3, 4), 3, 1),
        ((3, 4), 2, None),
        ((3, 4), [1, 0, 2], 0),
        ((2, 3, 4), 2, -1),
        ((5,), 3, 0),
        ((), 3, None),
    ],
)
def test_repeat(shape: tuple[int, ...], repeats: Any, axis: int | None) -> None:
    x = tracked("x", shape)
    assert an.repeat(shape, repeats, axis) == relation_of(np.repeat(x, repeats, axis), "x", shape)


def _loop_sort(vals: np.ndarray, axis: int | None) -> LineageRelation:
    """Stable sort, cell by cell: each output cell records the cell it came from."""
    shape = vals.shape
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    if axis is None:
        cells = list(np.ndindex(*shape))
        order = sorted(range(len(cells)), key=lambda i: vals[cells[i]])  # sorted() is stable
        for pos, i in enumerate(order):
            outs.append((pos,))
            ins.append(cells[i])
        return pairs_relation((len(cells),), shape, outs, ins)
    ax = axis % vals.ndim
    rest = [range(d) for i, d in enumerate(shape) if i != ax]
    for other in itertools.product(*rest):

        def cell(j: int, other: tuple[int, ...] = other) -> tuple[int, ...]:
            return (*other[:ax], j, *other[ax:])

        order = sorted(range(shape[ax]), key=lambda j: vals[cell(j)])
        for pos, j in enumerate(order):
            outs.append(cell(pos))
            ins.append(cell(j))
    return pairs_relation(shape, shape, outs, ins)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_sort(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    for vals in (rng.random(shape), rng.integers(0, 3, shape)):  # ties must be stable
        for axis in [*range(len(shape)), -1, None]:
            assert an.sort(vals, axis) == _loop_sort(vals, axis), axis


def test_sort_matches_numpy_values() -> None:
    vals = np.random.default_rng(1).random((4, 6))
    rel = an.sort(vals, 1)
    out = np.empty_like(vals)
    out[tuple(rel.out_cols)] = vals[tuple(rel.in_cols)]
    np.testing.assert_array_equal(out, np.sort(vals, axis=1))


@pytest.mark.parametrize(
    ("shape", "kernel"), [((4, 5), (3, 3)), ((1, 1), (3, 3)), ((6,), (5,)), ((3, 4, 2), (3, 1, 3))]
)
def test_convolve_same(shape: tuple[int, ...], kernel: tuple[int, ...]) -> None:
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    for b in np.ndindex(*shape):
        for d in np.ndindex(*kernel):
            a = tuple(bi + di - k // 2 for bi, di, k in zip(b, d, kernel, strict=True))
            if all(0 <= ai < s for ai, s in zip(a, shape, strict=True)):
                outs.append(b)
                ins.append(a)
    assert an.convolve_same(shape, kernel) == pairs_relation(shape, shape, outs, ins)


def test_convolve_same_3x3_pair_count() -> None:
    # Interior cells have 9 neighbours, edges 6, corners 4.
    rel = an.convolve_same((5, 6))
    assert rel.n == 3 * 4 * 9 + 2 * (3 + 4) * 6 + 4 * 4


def test_convolve_rejects_even_kernel() -> None:
    with pytest.raises(InvalidRelationError, match="odd"):
        an.convolve_same((4, 4), (2, 3))


@pytest.mark.parametrize("shape", [(10,), (4, 5)])
def test_filter_mask(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(2).random(shape)
    mask = x < 0.5
    outs = [b for b in np.ndindex(*shape) if x[b] < 0.5]
    assert an.filter_mask(mask) == pairs_relation(shape, shape, outs, outs)


def test_filter_mask_rejects_non_bool() -> None:
    with pytest.raises(UnsupportedArrayError, match="boolean"):
        an.filter_mask(np.zeros(3))


@pytest.mark.parametrize("shape", [(12,), (3, 5)])
def test_binning(shape: tuple[int, ...]) -> None:
    bins = np.random.default_rng(3).integers(-1, 4, shape)
    outs = [(int(bins[a]),) for a in np.ndindex(*shape) if bins[a] >= 0]
    ins = [a for a in np.ndindex(*shape) if bins[a] >= 0]
    assert an.binning(bins, 4) == pairs_relation((4,), shape, outs, ins)
    assert an.binning(bins).out_shape == (int(bins.max()) + 1,)


def test_binning_rejects_out_of_range() -> None:
    with pytest.raises(InvalidRelationError, match="out of range"):
        an.binning(np.array([0, 5]), 3)


def test_large_relation_is_vectorised() -> None:
    # 2·10^6 pairs must be quick (no Python loop over cells).
    ra, rb = an.dot((100, 200), (200, 100))
    assert ra.n == rb.n == 2_000_000
    assert an.convolve_same((500, 500)).n == 9 * 498 * 498 + 6 * 4 * 498 + 4 * 4
