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
from dslog_dagster.core.testing import analytic as an
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

    def __sub__(self, other: "Tracked") -> "Tracked":
        return Tracked(self.v - other.v, self.src | other.src)

    def __rmul__(self, scalar: float) -> "Tracked":  # a constant factor carries no lineage
        return Tracked(scalar * self.v, self.src)

    def __truediv__(self, scalar: float) -> "Tracked":
        return Tracked(self.v / scalar, self.src)


def tracked(name: str, shape: tuple[int, ...], values: Any = None) -> np.ndarray:
    arr = np.empty(shape, dtype=object)
    vals = np.zeros(shape) if values is None else np.asarray(values)
    for idx in np.ndindex(*shape):
        arr[idx] = Tracked(float(vals[idx]), frozenset({(name, idx)}))
    return arr


def relation_of(out: Any, name: str, in_shape: tuple[int, ...]) -> LineageRelation:
    """The lineage of ``out`` on input ``name``, read cell by cell (plain numbers: none)."""
    out = np.asarray(out, dtype=object) if isinstance(out, Tracked) else out
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    for b in np.ndindex(*out.shape):
        for src_name, a in getattr(out[b], "src", ()):
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


# ---------------------------------------------------------------------------------------------
# Operations of the ICDE random pipelines
# ---------------------------------------------------------------------------------------------


def perturbation_relation(f: Any, x: np.ndarray, poison: float) -> LineageRelation:
    """Which output cells change when one input cell is replaced by ``poison`` (NaN or inf).

    A black-box reference for operations NumPy cannot run on object arrays: NaN/inf propagate
    through every arithmetic operation that reads them, so an output cell changes exactly when
    it reads the poisoned cell (for the operations used here; a cell read only under a zero
    weight would be missed, and none is).
    """
    with np.errstate(all="ignore"):
        y = f(x)
        outs: list[tuple[int, ...]] = []
        ins: list[tuple[int, ...]] = []
        for a in np.ndindex(*x.shape):
            x2 = x.copy()
            x2[a] = poison
            y2 = f(x2)
            assert y2.shape == y.shape
            changed = ~((y2 == y) | (np.isnan(y2) & np.isnan(y)))
            for b in zip(*np.nonzero(changed), strict=True):
                outs.append(tuple(int(i) for i in b))
                ins.append(a)
    return pairs_relation(y.shape, x.shape, outs, ins)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (4, 1)])
def test_cumulative_cumsum_cumprod(shape: tuple[int, ...]) -> None:
    x = tracked("x", shape)
    for axis in [*range(len(shape)), None]:
        assert an.cumulative(shape, axis) == relation_of(np.cumsum(x, axis), "x", shape), axis
        assert an.cumulative(shape, axis) == relation_of(np.cumprod(x, axis), "x", shape), axis


@pytest.mark.parametrize("f", [np.nancumsum, np.nancumprod])
def test_cumulative_nan_variants(f: Any) -> None:
    x = np.random.default_rng(4).uniform(0.5, 1.5, (3, 4))
    for axis in (0, 1, None):
        ref = perturbation_relation(lambda a, axis=axis: f(a, axis=axis), x, np.inf)
        assert an.cumulative(x.shape, axis) == ref, axis


@pytest.mark.parametrize("shape", [(6,), (4, 5), (2, 3, 4)])
def test_unwrap_reads_the_prefix(shape: tuple[int, ...]) -> None:
    # Phases with jumps both below and above `discont`, so corrections happen in some lanes.
    x = np.random.default_rng(5).uniform(-3, 3, shape)
    for axis in range(len(shape)):
        for period, discont in ((1, 0.4), (2, 1.0), (3, 0.5)):

            def f(a: np.ndarray, axis: int = axis, p: float = period, d: float = discont) -> Any:
                return np.unwrap(a, discont=d, axis=axis, period=p)

            assert an.unwrap(shape, axis) == perturbation_relation(f, x, np.nan), axis


@pytest.mark.parametrize("shape", [(6,), (3, 5), (2, 3, 4)])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 6])
def test_diff(shape: tuple[int, ...], n: int) -> None:
    x = tracked("x", shape)
    for axis in [*range(len(shape)), -1]:
        ref = relation_of(np.diff(x, n=n, axis=axis), "x", shape)
        got = an.diff(shape, n, axis)
        assert got == ref, axis
        assert got.out_shape == np.diff(np.zeros(shape), n=n, axis=axis).shape


def test_diff_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidRelationError, match="non-negative"):
        an.diff((3,), -1)
    with pytest.raises(InvalidRelationError, match="rank"):
        an.diff(())


@pytest.mark.parametrize("shape", [(5,), (3, 4), (1,), (2, 1, 3)])
def test_ediff1d(shape: tuple[int, ...]) -> None:
    x = tracked("x", shape)
    assert an.ediff1d(shape) == relation_of(np.ediff1d(x), "x", shape)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (1, 4), (4, 1), (2, 3, 2)])
@pytest.mark.parametrize("dx", [1, 2, 0.5])
def test_trapezoid(shape: tuple[int, ...], dx: float) -> None:
    x = tracked("x", shape)
    for axis in range(len(shape)):
        ref = relation_of(np.asarray(np.trapezoid(x, dx=dx, axis=axis)), "x", shape)
        assert an.trapezoid(shape, axis) == ref, axis


@pytest.mark.parametrize(
    ("shape", "shift", "axis"),
    [
        ((7,), 3, 0),
        ((3, 5), 10, 0),
        ((3, 5), 20, 1),
        ((3, 5), -2, 1),
        ((3, 5), 4, None),
        ((2, 3, 4), (1, 2), (0, 2)),
        ((2, 3, 4), 1, (1, 1)),
    ],
)
def test_roll(shape: tuple[int, ...], shift: Any, axis: Any) -> None:
    x = tracked("x", shape)
    assert an.roll(shape, shift, axis) == relation_of(np.roll(x, shift, axis), "x", shape)


@pytest.mark.parametrize(
    ("shape", "obj", "axis"),
    [
        ((5, 3), 0, 0),
        ((5, 3), 2, 1),
        ((5, 3), -1, 0),
        ((5, 3), [0, 3], 0),
        ((5, 3), slice(1, 4, 2), 0),
        ((5, 3), 7, None),
        ((2, 3, 4), 3, 2),
    ],
)
def test_delete(shape: tuple[int, ...], obj: Any, axis: int | None) -> None:
    x = tracked("x", shape)
    assert an.delete(shape, obj, axis) == relation_of(np.delete(x, obj, axis), "x", shape)


@pytest.mark.parametrize(
    ("shape", "obj", "axis"),
    [((5, 3), 0, 0), ((5, 3), 3, 1), ((5, 3), 5, 0), ((5, 3), -1, 0), ((5, 3), 7, None)],
)
def test_insert(shape: tuple[int, ...], obj: int, axis: int | None) -> None:
    x = tracked("x", shape)
    v = np.empty((), dtype=object)
    v[()] = Tracked(0.0, frozenset({("v", ())}))
    out = np.insert(x, obj, v, axis)
    r_x, r_v = an.insert(shape, obj, axis)
    assert r_x == relation_of(out, "x", shape)
    assert r_v == relation_of(out, "v", ())


def test_delete_insert_out_of_bounds() -> None:
    with pytest.raises(InvalidRelationError, match="out of bounds"):
        an.delete((3, 4), 5, 1)
    with pytest.raises(InvalidRelationError, match="out of bounds"):
        an.insert((3, 4), 5, 1)


@pytest.mark.parametrize(
    ("shape", "source", "dest"),
    [
        ((3, 4), 0, 1),
        ((3, 4), 1, 0),
        ((3, 4), 0, 0),
        ((2, 3, 4), 0, -1),
        ((2, 3, 4), [0, 1], [2, 0]),
    ],
)
def test_moveaxis(shape: tuple[int, ...], source: Any, dest: Any) -> None:
    x = tracked("x", shape)
    assert an.moveaxis(shape, source, dest) == relation_of(np.moveaxis(x, source, dest), "x", shape)


@pytest.mark.parametrize(("shape", "a1", "a2"), [((3, 4), 0, 1), ((3, 4), 1, 1), ((2, 3, 4), 0, 2)])
def test_swapaxes(shape: tuple[int, ...], a1: int, a2: int) -> None:
    x = tracked("x", shape)
    assert an.swapaxes(shape, a1, a2) == relation_of(np.swapaxes(x, a1, a2), "x", shape)


@pytest.mark.parametrize(
    ("shape", "new"), [((3, 4), (12,)), ((3, 4), (2, -1)), ((2, 3, 4), (4, 6)), ((), (1, 1))]
)
def test_reshape(shape: tuple[int, ...], new: Any) -> None:
    x = tracked("x", shape)
    assert an.reshape(shape, new) == relation_of(np.reshape(x, new), "x", shape)


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4)])
def test_ravel_atleast(shape: tuple[int, ...]) -> None:
    x = tracked("x", shape)
    assert an.ravel(shape) == relation_of(np.ravel(x), "x", shape)
    assert an.atleast_1d(shape) == relation_of(np.atleast_1d(x), "x", shape)
    assert an.atleast_2d(shape) == relation_of(np.atleast_2d(x), "x", shape)


def test_reshape_rejects_bad_shapes() -> None:
    with pytest.raises(InvalidRelationError, match="cannot reshape"):
        an.reshape((3, 4), (5,))
    with pytest.raises(InvalidRelationError, match="invalid"):
        an.reshape((3, 4), (-1, -1))


def _by_value(x: np.ndarray, y: np.ndarray, axis: int) -> LineageRelation:
    """Each output cell ← the one input cell of its lane holding the same (distinct) value."""
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    for b in np.ndindex(*y.shape):
        for j in range(x.shape[axis]):
            a = (*b[:axis], j, *b[axis + 1 :])
            if x[a] == y[b]:
                outs.append(b)
                ins.append(a)
    return pairs_relation(y.shape, x.shape, outs, ins)


@pytest.mark.parametrize("shape", [(9,), (6, 5), (3, 4, 5)])
def test_partition_distinct_values(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(6).random(shape)
    for axis in range(len(shape)):
        for kth in (0, shape[axis] // 2, shape[axis] - 1):
            ref = _by_value(x, np.partition(x, kth, axis=axis), axis)
            assert an.partition(x, kth, axis) == ref, (axis, kth)
    flat = np.partition(x, 2, axis=None)
    assert an.partition(x, 2, None) == _from_flat_ref(_by_value(x.reshape(-1), flat, 0), shape)


def _from_flat_ref(rel: LineageRelation, shape: tuple[int, ...]) -> LineageRelation:
    cells = np.stack(np.unravel_index(rel.in_cols[0], shape))
    return LineageRelation.from_columns(rel.out_shape, shape, list(rel.out_cols), list(cells))


def test_partition_with_ties_reproduces_numpy() -> None:
    x = np.random.default_rng(7).integers(0, 3, (5, 8)).astype(float)
    for axis in (0, 1):
        rel = an.partition(x, 2, axis)
        y = np.partition(x, 2, axis=axis)
        np.testing.assert_array_equal(y[tuple(rel.out_cols)], x[tuple(rel.in_cols)])
        assert rel.n == x.size  # a bijection: every output cell has exactly one source ...
        assert len(np.unique(rel.in_cols, axis=1)[0]) == x.size  # ... and sources are distinct


def test_partition_rejects_bad_kth() -> None:
    with pytest.raises(InvalidRelationError, match="kth"):
        an.partition(np.zeros((3, 4)), 5, 0)


def _loop_picked(x: np.ndarray, axis: int, positions: Any) -> LineageRelation:
    """Per lane: stable-sort the lane, take the cells at the given sorted positions."""

    def rule(n: int, lane: np.ndarray) -> list[int]:
        order = sorted(range(n), key=lambda j: lane[j])
        return [order[p] for p in positions(n)]

    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    rest = [range(d) for k, d in enumerate(x.shape) if k != axis]
    for other in itertools.product(*rest):
        lane = np.moveaxis(x, axis, -1)[other]
        for j in rule(x.shape[axis], lane):
            outs.append(other)
            ins.append((*other[:axis], j, *other[axis:]))
    out_shape = x.shape[:axis] + x.shape[axis + 1 :]
    return pairs_relation(out_shape, x.shape, outs, ins)


def _linear_positions(q: float) -> Any:
    def pos(n: int) -> list[int]:
        v = (n - 1) * q
        lo = int(np.floor(v))
        return [n - 1] if v >= n - 1 else [lo, lo + 1]

    return pos


@pytest.mark.parametrize("shape", [(7,), (5, 4), (1, 3), (2, 3, 5)])
def test_quantile_percentile(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(8).random(shape)
    for axis in range(len(shape)):
        for q in (0.0, 0.1, 0.2, 0.4, 0.5, 1.0):
            rel = an.quantile(x, q, axis)
            assert rel == _loop_picked(x, axis, _linear_positions(q)), (axis, q)
            assert an.percentile(x, 100 * q, axis) == rel
            # NumPy's value is the linear interpolation of exactly the picked cells.
            lo = np.min(np.where(_mask(rel, x), x, np.inf), axis=axis)
            hi = np.max(np.where(_mask(rel, x), x, -np.inf), axis=axis)
            val = np.quantile(x, q, axis=axis)
            assert np.all((lo - 1e-12 <= val) & (val <= hi + 1e-12))
    whole = an.quantile(x, 0.4)
    assert whole.out_shape == ()
    assert whole == _from_flat_ref(_loop_picked(x.reshape(-1), 0, _linear_positions(0.4)), shape)


def _mask(rel: LineageRelation, x: np.ndarray) -> np.ndarray:
    m = np.zeros(x.shape, dtype=bool)
    m[tuple(rel.in_cols)] = True
    return m


@pytest.mark.parametrize("shape", [(7,), (6,), (5, 4), (2, 3, 5)])
def test_median(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(9).random(shape)
    for axis in range(len(shape)):

        def pos(n: int) -> list[int]:
            return [n // 2] if n % 2 else [n // 2 - 1, n // 2]

        rel = an.median(x, axis)
        assert rel == _loop_picked(x, axis, pos), axis
        picked_mean = np.where(_mask(rel, x), x, 0).sum(axis=axis) / len(pos(shape[axis]))
        np.testing.assert_allclose(picked_mean, np.median(x, axis=axis))


def test_quantile_rejects_nan_and_bad_q() -> None:
    with pytest.raises(UnsupportedArrayError, match="NaN"):
        an.median(np.array([1.0, np.nan, 2.0]))
    with pytest.raises(InvalidRelationError, match="q="):
        an.quantile(np.zeros(3), 1.5)


@pytest.mark.parametrize("shape", [(8,), (3, 4), (2, 2, 3)])
def test_unique(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(10).integers(0, 4, shape).astype(float)
    x.reshape(-1)[0] = np.nan
    x.reshape(-1)[-1] = np.nan
    u = np.unique(x)
    outs = []
    ins = []
    for k, val in enumerate(u):
        for a in np.ndindex(*shape):
            if x[a] == val or (np.isnan(val) and np.isnan(x[a])):
                outs.append((k,))
                ins.append(a)
    assert an.unique(x) == pairs_relation(u.shape, shape, outs, ins)


# --------------------------------------------------------------------------- gradient


@pytest.mark.parametrize(
    ("shape", "kw"),
    [
        ((2,), {}),
        ((3,), {"edge_order": 2}),
        ((7,), {}),
        ((6,), {"edge_order": 2}),
        ((4, 5), {}),
        ((4, 5), {"axis": 0}),
        ((4, 5), {"axis": -1, "edge_order": 2}),
        ((3, 4, 3), {}),
        ((3, 4, 3), {"axis": (2, 0), "edge_order": 2}),
    ],
)
def test_gradient_equals_the_reference_annotator(shape: tuple[int, ...], kw: Any) -> None:
    """The annotator cannot run ``np.gradient``; the pure-Python reference of its semantics
    (``tests/annotator/reference.py``, which mirrors NumPy's formulas) is the ground truth."""
    from tests.annotator.reference import reference_capture, to_relations

    x = np.random.default_rng(0).random(shape)
    values, lineage = reference_capture(np.gradient, x, **kw)
    want = to_relations(values, lineage, [shape])
    got = an.gradient(shape, **kw)
    assert len(got) == len(values) if isinstance(values, tuple) else len(got) == 1
    for o, rel in enumerate(got):
        assert rel == want[(o, 0)], (shape, kw, o)
    # Values: NumPy's gradient with the same arguments (the reference mirrors it).
    np.testing.assert_allclose(
        np.asarray(np.gradient(x, **kw)).reshape(-1), np.asarray(values).reshape(-1)
    )


def test_gradient_rejects_short_axes_like_numpy() -> None:
    with pytest.raises(InvalidRelationError, match="needs at least 3"):
        an.gradient((4, 2), axis=1, edge_order=2)
    with pytest.raises(ValueError, match="at least"):
        np.gradient(np.ones((4, 2)), axis=1, edge_order=2)
    with pytest.raises(InvalidRelationError, match="rank"):
        an.gradient(())
