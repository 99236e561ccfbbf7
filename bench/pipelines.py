"""The ICDE random NumPy pipelines, with exact lineage, as a benchmark and test workload.

The ICDE paper's query benchmark runs random pipelines over a ``1000 × 100`` float input: each
step applies an operation drawn uniformly from a fixed list (76 functions with small argument
grids, see issue 3 and the prototype notes §5.2) to the previous step's output. Here every step
runs the *real* NumPy operation, so shapes and data-dependent lineage (sort, partition,
percentile, unique, ...) are real, and its exact lineage relation comes from
:mod:`dslog_dagster.core.testing.analytic` instead of a capture.

Rules, following the prototype where it was sound:

* the input is ``rng.random(shape)`` (uniform ``[0, 1)``), ``shape = (1000, 100)`` by default;
* per step an operation and then one value per argument are drawn uniformly (``rng``-seeded, so a
  pipeline is a pure function of its seed); ``partition.kth`` and ``delete.obj``/``insert.obj``
  are random in ``[0, min(100, extent))`` — the prototype used ``[0, 100)`` and crashed on short
  axes; ``insert`` inserts a 0-d zero (its lineage from the inserted value is not a hop);
* outputs of rank 0/1 are reshaped to 2-D — ``()`` → ``(1, 1)``, ``(N,)`` → ``(N, 1)`` — and the
  step's relation is expressed over the reshaped output (the prototype re-initialised there);
* a draw is rejected and redrawn when the result is empty, contains NaN/inf (arcsin of values
  > 1, exp overflow, ...: data-dependent lineage of NaN is not modelled and NaN chains make
  every later step meaningless), the arguments are invalid for the current shape, or the
  relation would exceed ``max_pairs`` pairs (e.g. ``cumsum`` along 1000 rows: 5·10⁷ pairs);
* NumPy 2 renamed or removed some of the listed functions: ``trapz`` → ``np.trapezoid``,
  ``round_`` → ``np.round``, ``msort(x)`` → ``np.sort(x, axis=0)`` (its definition).

Query boxes follow the paper (notes §5.3): per size one random box over the input,
``(1,1) (10,1) (100,1) (1000,1) (1000,10) (1000,100)`` = 1 … 10⁵ cells; an extent equal to the
axis length starts at 0, otherwise at a random offset. Boxes are clipped to smaller inputs.

CLI: ``python bench/pipelines.py --quick`` prints one 5-step and one 10-step pipeline (ops,
shapes, pairs per step); without ``--quick`` 20 pipelines of each length.
``--time-baselines`` also times the raw-relation baselines on a 10-step pipeline.
"""

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.testing import analytic as an
from dslog_dagster.core.testing.baselines import (
    DuckDBParquetBaseline,
    DuckDBRawBaseline,
    Hop,
    NumPyBaseline,
)
from dslog_dagster.errors import InvalidRelationError

Shape = tuple[int, ...]
Box = tuple[slice, ...]
Compute = Callable[[np.ndarray, dict[str, Any]], np.ndarray]
Lineage = Callable[[np.ndarray, np.ndarray, dict[str, Any]], LineageRelation]

DEFAULT_SHAPE: Shape = (1000, 100)
DEFAULT_MAX_PAIRS = 20_000_000
BOX_EXTENTS: dict[int, tuple[int, int]] = {
    1: (1, 1),
    10: (10, 1),
    100: (100, 1),
    1_000: (1000, 1),
    10_000: (1000, 10),
    100_000: (1000, 100),
}


@dataclass(frozen=True)
class Op:
    """One operation of the list: argument grid, the NumPy call, its lineage, a size bound.

    ``lineage(x, y, args)`` gets the input data and NumPy's own result (before any reshape), so
    data-dependent generators see the real values. ``pairs(x_shape, y_shape, args)`` bounds the
    relation's size before it is built; ``data_dependent`` marks ops whose lineage depends on
    values (tests check those by value instead of by perturbation).
    """

    name: str
    compute: Compute
    lineage: Lineage
    grid: dict[str, Sequence[Any]] = field(default_factory=dict)
    pairs: Callable[[Shape, Shape, dict[str, Any]], int] | None = None
    data_dependent: bool = False


def _size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _elementwise(name: str, fn: Callable[..., Any], **grid: Sequence[Any]) -> Op:
    return Op(
        name,
        lambda x, a: np.asarray(fn(x, **a)),
        lambda x, y, a: an.elementwise(x.shape),
        dict(grid),
    )


def _prefix_pairs(x: Shape, y: Shape, a: dict[str, Any]) -> int:
    s = x[a["axis"]]
    return _size(x) // s * s * (s + 1) // 2


UNARY = (
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "deg2rad",
    "rad2deg",
    "sinh",
    "cosh",
    "tanh",
    "arcsinh",
    "arccosh",
    "arctanh",
    "rint",
    "fix",
    "floor",
    "ceil",
    "trunc",
    "exp",
    "expm1",
    "exp2",
    "log",
    "log10",
    "log2",
    "log1p",
    "sinc",
    "spacing",
    "reciprocal",
    "positive",
    "negative",
    "real",
    "imag",
    "conj",
    "conjugate",
    "sqrt",
    "cbrt",
    "square",
    "absolute",
    "fabs",
)

AXES = (0, 1)


def _ops() -> dict[str, Op]:
    ops = [_elementwise(n, getattr(np, n)) for n in UNARY]
    ops += [
        _elementwise("around", np.around, decimals=(0, 2, 5)),
        _elementwise("round", np.round, decimals=(0, 2, 5)),
        _elementwise("angle", np.angle, deg=(True, False)),
        _elementwise("real_if_close", np.real_if_close, tol=(100, 1000, 50)),
        Op("ediff1d", lambda x, a: np.ediff1d(x), lambda x, y, a: an.ediff1d(x.shape)),
        Op(
            "unique",
            lambda x, a: np.unique(x),
            lambda x, y, a: an.unique(x),
            data_dependent=True,
        ),
        Op(
            "msort",
            lambda x, a: np.sort(x, axis=0),
            lambda x, y, a: an.sort(x, 0),
            data_dependent=True,
        ),
        Op("ravel", lambda x, a: np.ravel(x), lambda x, y, a: an.ravel(x.shape)),
        Op("atleast_1d", lambda x, a: np.atleast_1d(x), lambda x, y, a: an.atleast_1d(x.shape)),
        Op("atleast_2d", lambda x, a: np.atleast_2d(x), lambda x, y, a: an.atleast_2d(x.shape)),
        Op("fliplr", lambda x, a: np.fliplr(x), lambda x, y, a: an.flip(x.shape, 1)),
        Op("flipud", lambda x, a: np.flipud(x), lambda x, y, a: an.flip(x.shape, 0)),
        Op(
            "unwrap",
            lambda x, a: np.unwrap(x, **a),
            lambda x, y, a: an.unwrap(x.shape, a["axis"]),
            {"period": (1, 2, 3), "discont": (0.4, 1, 0.5), "axis": AXES},
            _prefix_pairs,
        ),
    ]
    for name in ("prod", "sum"):
        ops.append(
            Op(
                name,
                lambda x, a, name=name: getattr(np, name)(x, **a),
                lambda x, y, a: an.sum_axis(x.shape, a["axis"], keepdims=a["keepdims"]),
                {"keepdims": (True, False), "axis": AXES},
            )
        )
    for name in ("cumsum", "cumprod", "nancumsum", "nancumprod"):
        ops.append(
            Op(
                name,
                lambda x, a, name=name: getattr(np, name)(x, **a),
                lambda x, y, a: an.cumulative(x.shape, a["axis"]),
                {"axis": AXES},
                _prefix_pairs,
            )
        )
    ops += [
        Op(
            "diff",
            lambda x, a: np.diff(x, **a),
            lambda x, y, a: an.diff(x.shape, a["n"], a["axis"]),
            {"n": (1, 2, 3), "axis": AXES},
            lambda x, y, a: (a["n"] + 1) * _size(y),
        ),
        Op(
            "trapezoid",
            lambda x, a: np.asarray(np.trapezoid(x, **a)),
            lambda x, y, a: an.trapezoid(x.shape, a["axis"]),
            {"axis": AXES, "dx": (1, 2, 0.5)},
        ),
        Op(
            "amax",
            lambda x, a: np.amax(x, **a),
            lambda x, y, a: an.sum_axis(x.shape, a["axis"]),
            {"axis": AXES},
        ),
        Op(
            "sort",
            lambda x, a: np.sort(x, **a),
            lambda x, y, a: an.sort(x, a["axis"]),
            {"axis": (1, 0)},
            data_dependent=True,
        ),
        Op(
            "partition",
            lambda x, a: np.partition(x, **a),
            lambda x, y, a: an.partition(x, a["kth"], a["axis"]),
            {"axis": (1, 0), "kth": ("random",)},
            data_dependent=True,
        ),
        Op(
            "percentile",
            lambda x, a: np.asarray(np.percentile(x, **a)),
            lambda x, y, a: an.percentile(x, a["q"], a["axis"]),
            {"axis": (1, 0), "q": (10, 20, 40)},
            data_dependent=True,
        ),
        Op(
            "quantile",
            lambda x, a: np.asarray(np.quantile(x, **a)),
            lambda x, y, a: an.quantile(x, a["q"], a["axis"]),
            {"axis": (1, 0), "q": (0.1, 0.2, 0.4)},
            data_dependent=True,
        ),
        Op(
            "median",
            lambda x, a: np.asarray(np.median(x, **a)),
            lambda x, y, a: an.median(x, a["axis"]),
            {"axis": (1, 0)},
            data_dependent=True,
        ),
        Op(
            "mean",
            lambda x, a: np.mean(x, **a),
            lambda x, y, a: an.sum_axis(x.shape, a["axis"]),
            {"axis": (1, 0)},
        ),
        Op(
            "moveaxis",
            lambda x, a: np.moveaxis(x, **a),
            lambda x, y, a: an.moveaxis(x.shape, a["source"], a["destination"]),
            {"source": AXES, "destination": AXES},
        ),
        Op(
            "swapaxes",
            lambda x, a: np.swapaxes(x, **a),
            lambda x, y, a: an.swapaxes(x.shape, a["axis1"], a["axis2"]),
            {"axis1": AXES, "axis2": AXES},
        ),
        Op(
            "tile",
            lambda x, a: np.tile(x, **a),
            lambda x, y, a: an.tile(x.shape, a["reps"]),
            {"reps": ((2, 2), 2, (1, 3))},
        ),
        Op(
            "repeat",
            lambda x, a: np.repeat(x, **a),
            lambda x, y, a: an.repeat(x.shape, a["repeats"], a["axis"]),
            {"repeats": (2, 3), "axis": AXES},
        ),
        Op(
            "delete",
            lambda x, a: np.delete(x, **a),
            lambda x, y, a: an.delete(x.shape, a["obj"], a["axis"]),
            {"axis": AXES, "obj": ("random",)},
        ),
        Op(
            "insert",
            lambda x, a: np.insert(x, values=0.0, **a),
            lambda x, y, a: an.insert(x.shape, a["obj"], a["axis"])[0],
            {"axis": AXES, "obj": ("random",)},
        ),
        Op(
            "flip",
            lambda x, a: np.flip(x, **a),
            lambda x, y, a: an.flip(x.shape, a["axis"]),
            {"axis": AXES},
        ),
        Op(
            "roll",
            lambda x, a: np.roll(x, **a),
            lambda x, y, a: an.roll(x.shape, a["shift"], a["axis"]),
            {"shift": (10, 20), "axis": AXES},
        ),
        Op(
            "rot90",
            lambda x, a: np.rot90(x, **a),
            lambda x, y, a: an.rot90(x.shape, a["k"]),
            {"k": (1, 2, 3)},
        ),
    ]
    return {op.name: op for op in ops}


OPS: dict[str, Op] = _ops()


@dataclass(frozen=True)
class ArraySpec:
    """A tracked array of the pipeline: ``a0`` is the input, ``a{k+1}`` step ``k``'s output."""

    name: str
    shape: Shape


@dataclass(frozen=True)
class Step:
    """One step: ``arrays[k + 1] = op(arrays[k], **args)`` and its exact lineage relation."""

    op: str
    args: dict[str, Any]
    relation: LineageRelation  # out: arrays[k + 1] (2-D), in: arrays[k]


@dataclass
class Pipeline:
    """A generated pipeline: arrays, steps (one relation each) and, optionally, the data."""

    seed: int
    arrays: list[ArraySpec]
    steps: list[Step]
    data: list[np.ndarray] | None = None

    def hops(self, direction: str = "forward") -> list[Hop]:
        """The query path over all steps.

        ``"forward"`` goes from the input ``a0`` to the last output (cells of ``a0`` in);
        ``"backward"`` from the last output back to ``a0``.
        """
        if direction == "forward":
            return [Hop(s.relation, "forward") for s in self.steps]
        if direction == "backward":
            return [Hop(s.relation, "backward") for s in reversed(self.steps)]
        msg = f"direction must be 'forward' or 'backward', got {direction!r}"
        raise ValueError(msg)

    def query_boxes(self, seed: int | None = None, array: int = 0) -> dict[int, Box]:
        """The ICDE query boxes over ``arrays[array]`` (default: the input), keyed by size."""
        rng = np.random.default_rng(self.seed if seed is None else seed)
        return icde_boxes(self.arrays[array].shape, rng)

    def summary(self) -> str:
        """One line per step: op, arguments, shapes, pairs."""
        lines = [f"pipeline seed={self.seed}: input {self.arrays[0].shape}"]
        for k, s in enumerate(self.steps):
            args = ", ".join(f"{a}={v}" for a, v in s.args.items())
            lines.append(
                f"  {k:2d} {s.op}({args}) {self.arrays[k].shape} -> {self.arrays[k + 1].shape}"
                f"  pairs={s.relation.n:,}"
            )
        return "\n".join(lines)


def icde_boxes(shape: Shape, rng: np.random.Generator) -> dict[int, Box]:
    """One random box per ICDE query size over a 2-D array (extents clipped to the shape)."""
    if len(shape) != 2:
        msg = f"ICDE query boxes are defined over 2-D arrays, got shape {shape}"
        raise ValueError(msg)
    boxes: dict[int, Box] = {}
    for size, extents in BOX_EXTENTS.items():
        box = []
        for ext, dim in zip(extents, shape, strict=True):
            e = min(ext, dim)
            start = 0 if e == dim else int(rng.integers(0, dim - e + 1))
            box.append(slice(start, start + e))
        boxes[size] = tuple(box)
    return boxes


def box_cells(box: Box) -> np.ndarray:
    """All cells of a box as an ``(n, rank)`` int64 matrix (C order)."""
    ext = [s.stop - s.start for s in box]
    grid = np.indices(ext, dtype=np.int64).reshape(len(box), -1)
    return np.ascontiguousarray((grid + np.array([s.start for s in box])[:, None]).T)


def to_2d(y: np.ndarray) -> np.ndarray:
    """The prototype's rule: 0-d → ``(1, 1)``, 1-D ``(N,)`` → ``(N, 1)``, else unchanged."""
    if y.ndim == 0:
        return y.reshape(1, 1)
    if y.ndim == 1:
        return y.reshape(-1, 1)
    return y


def _reshaped(rel: LineageRelation, shape: Shape) -> LineageRelation:
    """``rel`` with its output re-indexed for a C-order reshape of the output to ``shape``."""
    if rel.out_shape == shape:
        return rel
    out_flat = (
        np.ravel_multi_index(tuple(rel.out_cols), rel.out_shape)
        if rel.out_shape
        else np.zeros(rel.n, dtype=np.int64)
    )
    in_flat = np.ravel_multi_index(tuple(rel.in_cols), rel.in_shape)
    return LineageRelation.from_flat(shape, rel.in_shape, out_flat, in_flat)


def draw_args(op: Op, shape: Shape, rng: np.random.Generator) -> dict[str, Any]:
    """One value per argument, uniformly; ``"random"`` indices within the current axis."""
    args = {k: v[int(rng.integers(len(v)))] for k, v in op.grid.items()}
    for key in ("kth", "obj"):
        if args.get(key) == "random":
            extent = shape[args["axis"]]
            hi = min(100, extent + 1 if key == "obj" and op.name == "insert" else extent)
            args[key] = int(rng.integers(0, hi))
    return args


def run_op(op: Op, x: np.ndarray, args: dict[str, Any]) -> np.ndarray:
    """NumPy's result of the step (float64, before the 2-D reshape), warnings silenced."""
    with np.errstate(all="ignore"):
        return np.array(op.compute(x, args), dtype=np.float64)


def generate_pipeline(
    seed: int,
    n_steps: int,
    shape: Shape = DEFAULT_SHAPE,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    ops: Sequence[str] | None = None,
    keep_data: bool = False,
    max_draws: int = 10_000,
    input_data: np.ndarray | None = None,
) -> Pipeline:
    """Generate one random pipeline; a pure function of its arguments.

    Args:
        seed: seeds the input data and every draw.
        n_steps: number of steps.
        shape: the input shape (2-D).
        max_pairs: redraw a step whose relation would have more pairs.
        ops: restrict the draw to these operation names (default: the whole list).
        keep_data: keep every intermediate array in ``Pipeline.data``.
        max_draws: give up after this many rejected draws in one step.
        input_data: use this 2-D float array as the input instead of ``rng.random(shape)``
            (e.g. to exercise ``arccosh``, whose domain excludes the default ``[0, 1)``).

    Raises:
        RuntimeError: no acceptable draw within ``max_draws`` tries.
    """
    names = list(OPS) if ops is None else list(ops)
    unknown = set(names) - set(OPS)
    if unknown:
        msg = f"unknown operations {sorted(unknown)}"
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    x = rng.random(shape) if input_data is None else np.array(input_data, dtype=np.float64)
    if x.ndim != 2:
        msg = f"the pipeline input must be 2-D, got shape {x.shape}"
        raise ValueError(msg)
    arrays = [ArraySpec("a0", tuple(x.shape))]
    steps: list[Step] = []
    data = [x] if keep_data else None
    for k in range(n_steps):
        for _ in range(max_draws):
            op = OPS[names[int(rng.integers(len(names)))]]
            step = _try_step(op, x, rng, max_pairs)
            if step is not None:
                break
        else:
            msg = f"step {k}: no acceptable operation in {max_draws} draws from {names}"
            raise RuntimeError(msg)
        y, st = step
        steps.append(st)
        arrays.append(ArraySpec(f"a{k + 1}", tuple(y.shape)))
        if data is not None:
            data.append(y)
        x = y
    return Pipeline(seed, arrays, steps, data)


def _try_step(
    op: Op, x: np.ndarray, rng: np.random.Generator, max_pairs: int
) -> tuple[np.ndarray, Step] | None:
    """One draw of arguments for ``op``; ``None`` if the draw must be rejected."""
    args = draw_args(op, x.shape, rng)
    try:
        raw = run_op(op, x, args)
    except (ValueError, IndexError):
        return None
    if raw.size == 0 or not np.isfinite(raw).all():
        return None
    bound = (op.pairs or (lambda xs, ys, a: 2 * max(_size(xs), _size(ys))))(
        x.shape, raw.shape, args
    )
    if bound > max_pairs:
        return None
    try:
        rel = op.lineage(x, raw, args)
    except InvalidRelationError:
        return None
    if rel.n > max_pairs:
        return None
    y = to_2d(raw)
    return y, Step(op.name, args, _reshaped(rel, tuple(y.shape)))


def _time_baselines(seed: int, reps: int) -> None:
    p = generate_pipeline(seed, 10)
    print(p.summary())
    hops = p.hops("forward")
    box = p.query_boxes()[100_000]
    cells = box_cells(box)
    with tempfile.TemporaryDirectory() as tmp:
        makers = {
            "numpy": lambda: NumPyBaseline(hops),
            "duckdb-raw": lambda: DuckDBRawBaseline(hops),
            "duckdb-parquet": lambda: DuckDBParquetBaseline(hops, tmp),
        }
        for name, make in makers.items():
            t0 = time.perf_counter()
            b = make()
            load = time.perf_counter() - t0
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                res = b.query(cells)
                times.append(time.perf_counter() - t0)
            b.close()
            print(
                f"{name:15s} load {load:7.3f} s  query median {np.median(times) * 1e3:9.1f} ms"
                f"  min {min(times) * 1e3:9.1f} ms  ({len(cells):,} cells -> {len(res):,})"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one 5-step and one 10-step run")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--time-baselines", action="store_true", help="time raw baselines")
    parser.add_argument("--reps", type=int, default=5, help="query repetitions when timing")
    args = parser.parse_args(argv)
    if args.time_baselines:
        _time_baselines(args.seed, args.reps)
        return 0
    count = 1 if args.quick else 20
    for n_steps in (5, 10):
        for i in range(count):
            t0 = time.perf_counter()
            p = generate_pipeline(args.seed + 1000 * n_steps + i, n_steps)
            print(p.summary())
            total = sum(s.relation.n for s in p.steps)
            print(f"  total pairs={total:,}  generated in {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
