"""The ICDE coverage grid of issue 4 as parametrisation cases.

Each :class:`GridCase` pairs the NumPy call under test (``func``, run on plain float64 arrays
and on ``tracked_float`` arrays alike) with its reference (``ref``, run on object arrays of
:class:`~reference.Ref`), the input shapes, how to draw input values, and whether the values
must match plain NumPy bit for bit.

Naming against NumPy 2.x (checked on the installed 2.4): ``trapz`` is ``np.trapezoid``;
``round_`` is gone (``np.round``/``np.around`` are covered); ``msort`` was removed in 2.0 and was
defined as ``np.sort(a, axis=0)``, so the ``msort`` cases run exactly that; ``row_stack`` is a
deprecated alias of ``vstack`` (a DeprecationWarning, an error under ``filterwarnings=error``),
so it is covered by ``vstack``. ``conjugate`` is listed besides ``conj`` (same ufunc), and
``degrees``/``radians`` (unary float64 ufuncs the ICDE file lists among the binary ones) join
the unary group. ``linalg.multi_dot`` is named ``multi_dot``.

Shapes stay small (≤ 4×3×2, rank 0–3) so the pure-Python reference is fast; values are drawn
from a per-function domain (e.g. ``arccosh`` needs ≥ 1) with a generator seeded from the case
id, so every run sees the same numbers. The sorting family gets distinct values (continuous
draws), so that a sort's lineage does not hinge on its tie rule; ties and NaNs get their own
cases (``*_ties``, ``unique_duplicates``, ``*,nans``) where the picking rules define them.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tests.annotator.reference import REFERENCE, lift, obj_array, select

Shape = tuple[int, ...]
F64 = npt.NDArray[np.float64]
Maker = Callable[[np.random.Generator], list[F64]]

R0: Shape = ()
R1: Shape = (4,)
R2: Shape = (4, 3)
R3: Shape = (4, 3, 2)

# The 136 functions of the ICDE coverage experiment as issue 4 lists them (plus the aliases
# the module docstring explains), in the order.
UNARY_NAMES = [
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "deg2rad",
    "rad2deg",
    "degrees",
    "radians",
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
    "sqrt",
    "cbrt",
    "square",
    "absolute",
    "fabs",
    "reciprocal",
    "positive",
    "negative",
    "sinc",
    "spacing",
    "sign",
    "heaviside",
]
BINARY_NAMES = [
    "hypot",
    "arctan2",
    "logaddexp",
    "logaddexp2",
    "nextafter",
    "copysign",
    "add",
    "subtract",
    "multiply",
    "divide",
    "true_divide",
    "floor_divide",
    "power",
    "float_power",
    "fmod",
    "mod",
    "remainder",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
]
OTHER_NAMES = [
    "unwrap",
    "around",
    "round",
    "prod",
    "sum",
    "nanprod",
    "nansum",
    "amax",
    "amin",
    "ptp",
    "mean",
    "std",
    "var",
    "median",
    "percentile",
    "quantile",
    "cumsum",
    "cumprod",
    "nancumsum",
    "nancumprod",
    "diff",
    "ediff1d",
    "trapezoid",
    "gradient",
    "cross",
    "convolve",
    "correlate",
    "interp",
    "dot",
    "matmul",
    "vdot",
    "inner",
    "outer",
    "kron",
    "multi_dot",
    "sort",
    "msort",
    "partition",
    "unique",
    "ravel",
    "reshape",
    "resize",
    "transpose",
    "moveaxis",
    "swapaxes",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "expand_dims",
    "squeeze",
    "require",
    "asarray",
    "ascontiguousarray",
    "asfortranarray",
    "concatenate",
    "stack",
    "vstack",
    "hstack",
    "column_stack",
    "block",
    "append",
    "insert",
    "delete",
    "tile",
    "repeat",
    "trim_zeros",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "rot90",
    "real",
    "imag",
    "conj",
    "conjugate",
    "angle",
    "real_if_close",
]
ICDE_NAMES: tuple[str, ...] = (*UNARY_NAMES, *BINARY_NAMES, *OTHER_NAMES)

# Cases beyond the ICDE list that pin down the picking semantics of the issue
# (clip, where, argmax-based selection, fancy/boolean indexing, ties).
EXTRA_NAMES: tuple[str, ...] = (
    "clip",
    "where",
    "take_along_axis_argmax",
    "fancy_index",
    "boolean_index",
    "maximum_ties",
    "amax_ties",
    "sort_ties",
    "unique_duplicates",
)


@dataclass(frozen=True)
class GridCase:
    """One parametrisation: a function, its arguments, its inputs and its reference."""

    name: str
    variant: str
    func: Callable[..., Any]
    ref: Callable[..., Any]
    shapes: tuple[Shape, ...]
    domains: tuple[tuple[float, float], ...] = ((-2.0, 2.0),)
    make: Maker | None = None
    exact: bool = True
    notes: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.variant}]"

    def inputs(self) -> list[F64]:
        """The case's input arrays (deterministic: seeded from the case id)."""
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        if self.make is not None:
            return [np.asarray(a, dtype=np.float64) for a in self.make(rng)]
        out = []
        for k, shape in enumerate(self.shapes):
            lo, hi = self.domains[min(k, len(self.domains) - 1)]
            out.append(np.asarray(rng.uniform(lo, hi, size=shape), dtype=np.float64))
        return out


CASES: list[GridCase] = []


def _fmt(v: object) -> str:
    if callable(v):
        return getattr(v, "__name__", "fn")
    return repr(v).replace(" ", "")


def _variant(shapes: Sequence[Shape], kwargs: dict[str, Any], extra: str = "") -> str:
    parts = ["x".join(map(str, s)) if s else "0d" for s in shapes]
    parts += [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
    if extra:
        parts.append(extra)
    return ",".join(parts)


def add_np(
    name: str,
    fn: Callable[..., Any],
    shapes: Sequence[Shape],
    *,
    domains: Sequence[tuple[float, float]] = ((-2.0, 2.0),),
    make: Maker | None = None,
    exact: bool = True,
    extra: str = "",
    **kwargs: Any,
) -> None:
    """A case calling ``fn(*arrays, **kwargs)``; the reference is ``REFERENCE[fn]`` if any."""
    ref_fn = REFERENCE.get(fn, fn)
    CASES.append(
        GridCase(
            name=name,
            variant=_variant(shapes, kwargs, extra),
            func=functools.partial(fn, **kwargs) if kwargs else fn,
            ref=functools.partial(ref_fn, **kwargs) if kwargs else ref_fn,
            shapes=tuple(tuple(s) for s in shapes),
            domains=tuple(domains),
            make=make,
            exact=exact,
        )
    )


def add_custom(
    name: str,
    variant: str,
    func: Callable[..., Any],
    ref: Callable[..., Any],
    shapes: Sequence[Shape],
    *,
    domains: Sequence[tuple[float, float]] = ((-2.0, 2.0),),
    make: Maker | None = None,
    exact: bool = True,
    notes: str = "",
) -> None:
    """A case whose call is a composition (same structure in ``func`` and ``ref``)."""
    CASES.append(
        GridCase(
            name=name,
            variant=variant,
            func=func,
            ref=ref,
            shapes=tuple(tuple(s) for s in shapes),
            domains=tuple(domains),
            make=make,
            exact=exact,
            notes=notes,
        )
    )


def _with_nans(shapes: Sequence[Shape], cells: Sequence[int]) -> Maker:
    """Uniform draws with NaN at the given flat positions of the first input."""

    def make(rng: np.random.Generator) -> list[F64]:
        arrays = [rng.uniform(-2.0, 2.0, size=s) for s in shapes]
        flat = arrays[0].reshape(-1)
        for c in cells:
            flat[c % flat.size] = np.nan
        return arrays

    return make


# ---------------------------------------------------------------------------------------------
# Element-wise ufuncs
# ---------------------------------------------------------------------------------------------

UNARY_DOMAIN = {
    "arcsin": (-0.9, 0.9),
    "arccos": (-0.9, 0.9),
    "arctanh": (-0.9, 0.9),
    "arccosh": (1.1, 3.0),
    "log": (0.1, 3.0),
    "log10": (0.1, 3.0),
    "log2": (0.1, 3.0),
    "sqrt": (0.1, 3.0),
    "log1p": (-0.5, 2.0),
    "rint": (-20.0, 20.0),
    "fix": (-20.0, 20.0),
    "floor": (-20.0, 20.0),
    "ceil": (-20.0, 20.0),
    "trunc": (-20.0, 20.0),
}

for _name in UNARY_NAMES:
    if _name in ("fix", "sinc", "heaviside"):
        continue  # Python functions or binary: below
    _u = getattr(np, _name)
    for _s in (R1, R2, R3):
        add_np(_name, _u, [_s], domains=[UNARY_DOMAIN.get(_name, (-2.0, 2.0))])

for _s in (R1, R2, R3):
    add_np("fix", np.fix, [_s], domains=[UNARY_DOMAIN["fix"]])
    add_np("sinc", np.sinc, [_s])


def _zero_at(shape: Shape, cells: Sequence[int], n_inputs: int = 1) -> Maker:
    def make(rng: np.random.Generator) -> list[F64]:
        arrays = [rng.uniform(-2.0, 2.0, size=shape) for _ in range(n_inputs)]
        flat = arrays[0].reshape(-1)
        for c in cells:
            flat[c] = 0.0
        return arrays

    return make


add_np("sinc", np.sinc, [R2], make=_zero_at(R2, [0, 5]), extra="zeros")
add_np("sign", np.sign, [R2], make=_zero_at(R2, [1]), extra="zeros")


def _heaviside_const(x: Any) -> Any:
    return np.heaviside(x, 0.5)


def _heaviside_const_ref(x: Any) -> Any:
    return REFERENCE[np.heaviside](x, 0.5)


for _s in (R1, R2, R3):
    add_custom(
        "heaviside",
        _variant([_s], {"x2": 0.5}, "zeros"),
        _heaviside_const,
        _heaviside_const_ref,
        [_s],
        make=_zero_at(_s, [0, 2]),
    )
add_np("heaviside", np.heaviside, [R2, R2], make=_zero_at(R2, [0, 4, 7], 2), extra="zeros")

BINARY_SHAPES: list[tuple[Shape, Shape]] = [
    (R1, R1),
    (R2, R2),
    (R3, R3),
    ((4, 3), (3,)),
    ((4, 1, 2), (3, 1)),
]
BINARY_DOMAINS = {
    "power": [(0.1, 2.0), (-2.0, 2.0)],
    "float_power": [(0.1, 2.0), (-2.0, 2.0)],
}

for _name in BINARY_NAMES:
    _u = getattr(np, _name)  # divide is true_divide and mod is remainder: both names run
    _dom = BINARY_DOMAINS.get(_name, [(-2.0, 2.0)])
    for _a, _b in BINARY_SHAPES:
        add_np(_name, _u, [_a, _b], domains=_dom)

    def _const(x: Any, _u: Any = _u) -> Any:
        return _u(x, 0.75)

    def _const_ref(x: Any, _u: Any = _u) -> Any:
        return REFERENCE[_u](x, 0.75)

    _const.__name__ = _const_ref.__name__ = f"{_name}_const"
    add_custom(_name, "4x3,x2=0.75", _const, _const_ref, [R2], domains=_dom[:1])

for _u in (np.maximum, np.minimum, np.fmax, np.fmin):
    add_np(
        _u.__name__,
        _u,
        [R2, R2],
        make=lambda rng: [
            np.where(np.arange(12).reshape(4, 3) % 4 == 0, np.nan, rng.uniform(-2, 2, (4, 3))),
            np.where(np.arange(12).reshape(4, 3) % 3 == 0, np.nan, rng.uniform(-2, 2, (4, 3))),
        ],
        extra="nans",
    )

# ---------------------------------------------------------------------------------------------
# around / round / unwrap
# ---------------------------------------------------------------------------------------------

for _fn, _nm in ((np.around, "around"), (np.round, "round")):
    for _s in (R1, R2, R3):
        add_np(_nm, _fn, [_s], domains=[(-50.0, 50.0)])
    for _d in (2, 5, -1):
        add_np(_nm, _fn, [R2], domains=[(-50.0, 50.0)], decimals=_d)

for _kw in (
    {},
    {"axis": 0},
    {"period": 1.0},
    {"period": 2.0, "axis": 0},
    {"period": 3.0, "discont": 0.4},
    {"discont": 1.0, "axis": -1},
    {"period": 2.0, "discont": 2.5, "axis": 1},
):
    add_np("unwrap", np.unwrap, [R2], domains=[(-8.0, 8.0)], **_kw)
add_np("unwrap", np.unwrap, [R1], domains=[(-8.0, 8.0)])
add_np("unwrap", np.unwrap, [R3], domains=[(-8.0, 8.0)], axis=1)

# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

REDUCTION_AXES: list[tuple[Shape, dict[str, Any]]] = [
    (R1, {}),
    (R1, {"axis": 0, "keepdims": True}),
    (R2, {}),
    (R2, {"axis": 0}),
    (R2, {"axis": 1}),
    (R2, {"axis": -1, "keepdims": True}),
    (R2, {"axis": None, "keepdims": True}),
    (R3, {}),
    (R3, {"axis": 1}),
    (R3, {"axis": (0, 2)}),
    (R3, {"axis": 2, "keepdims": True}),
]
INEXACT_REDUCTIONS = {"sum", "prod", "nansum", "nanprod", "mean", "std", "var"}
REDUCTIONS = {
    "prod": np.prod,
    "sum": np.sum,
    "nanprod": np.nanprod,
    "nansum": np.nansum,
    "amax": np.amax,
    "amin": np.amin,
    "ptp": np.ptp,
    "mean": np.mean,
    "std": np.std,
    "var": np.var,
    "median": np.median,
}
for _nm, _fn in REDUCTIONS.items():
    for _s, _kw in REDUCTION_AXES:
        add_np(_nm, _fn, [_s], exact=_nm not in INEXACT_REDUCTIONS, **_kw)
for _nm in ("nanprod", "nansum", "amax", "amin"):
    add_np(
        _nm,
        REDUCTIONS[_nm],
        [R2],
        make=_with_nans([R2], [1, 4, 5]),
        exact=_nm not in INEXACT_REDUCTIONS,
        extra="nans",
        axis=1,
    )
for _q in (40.0, 50.0, 100.0, [10.0, 20.0, 40.0]):
    for _s, _kw in [(R1, {}), (R2, {"axis": 0}), (R2, {"axis": 1, "keepdims": True}), (R3, {})]:
        add_np("percentile", np.percentile, [_s], q=_q, **_kw)
        _qq = np.asarray(_q) / 100
        add_np("quantile", np.quantile, [_s], q=_qq.tolist(), **_kw)
add_np("median", np.median, [(5, 3)], axis=0, extra="odd")
add_np("quantile", np.quantile, [(5, 3)], q=0.5, axis=0, extra="exact-index")

# ---------------------------------------------------------------------------------------------
# Cumulative, differences, integration
# ---------------------------------------------------------------------------------------------

for _nm, _fn in (
    ("cumsum", np.cumsum),
    ("cumprod", np.cumprod),
    ("nancumsum", np.nancumsum),
    ("nancumprod", np.nancumprod),
):
    for _s, _kw in [
        (R1, {}),
        (R2, {}),
        (R2, {"axis": 0}),
        (R2, {"axis": 1}),
        (R3, {"axis": -1}),
        (R3, {"axis": 1}),
    ]:
        add_np(_nm, _fn, [_s], **_kw)
    if _nm.startswith("nan"):
        add_np(_nm, _fn, [R2], make=_with_nans([R2], [0, 4, 11]), extra="nans", axis=1)

for _s, _kw in [
    (R1, {}),
    (R1, {"n": 2}),
    (R1, {"n": 3}),
    (R2, {"axis": 0}),
    (R2, {"n": 2, "axis": 1}),
    (R2, {"n": 3, "axis": 0}),
    (R3, {"axis": 1}),
    (R3, {"n": 1, "axis": -1}),
]:
    add_np("diff", np.diff, [_s], **_kw)
for _s in (R1, R2, R3):
    add_np("ediff1d", np.ediff1d, [_s])
for _s, _kw in [
    (R1, {}),
    (R1, {"dx": 0.5}),
    (R2, {"axis": 0}),
    (R2, {"axis": 1, "dx": 2.0}),
    (R3, {"axis": 1}),
]:
    add_np("trapezoid", np.trapezoid, [_s], exact=False, **_kw)
for _s, _kw in [
    (R1, {}),
    (R2, {}),
    (R2, {"axis": 0}),
    (R3, {}),
    (R1, {"edge_order": 2}),
    (R2, {"axis": 0, "edge_order": 2}),
]:
    add_np("gradient", np.gradient, [_s], **_kw)

# ---------------------------------------------------------------------------------------------
# cross, convolve/correlate, interp
# ---------------------------------------------------------------------------------------------

add_np("cross", np.cross, [(3,), (3,)])
add_np("cross", np.cross, [(4, 3), (4, 3)])
add_np("cross", np.cross, [(4, 3), (3,)])
add_np("cross", np.cross, [(3, 4), (3, 4)], axisa=0, axisb=0)
add_np("cross", np.cross, [(2, 2, 3), (2, 1, 3)])

for _fn, _nm in ((np.convolve, "convolve"), (np.correlate, "correlate")):
    for _m, _n in ((4, 3), (3, 4), (4, 1), (2, 4), (4, 4)):
        for _mode in ("full", "same", "valid"):
            add_np(_nm, _fn, [(_m,), (_n,)], exact=False, mode=_mode)


def _interp_inputs(x_shape: Shape, n: int = 5, period: bool = False) -> Maker:
    """``x`` partly outside ``xp``'s range, ``xp`` increasing, one ``x`` equal to an ``xp``."""

    def make(rng: np.random.Generator) -> list[F64]:
        xp = np.sort(rng.uniform(-1.0, 1.0, size=n))
        fp = rng.uniform(-2.0, 2.0, size=n)
        x = rng.uniform(-1.5, 1.5, size=x_shape)
        x.reshape(-1)[0] = xp[2]
        if period:
            xp = rng.permutation(rng.uniform(0.0, 1.0, size=n))  # unsorted is allowed here
        return [x, xp, fp]

    return make


add_np("interp", np.interp, [R1, (5,), (5,)], make=_interp_inputs(R1))
add_np("interp", np.interp, [R2, (5,), (5,)], make=_interp_inputs(R2))
add_np("interp", np.interp, [R2, (5,), (5,)], make=_interp_inputs(R2), left=100.0, right=3.0)
add_np("interp", np.interp, [R2, (5,), (5,)], make=_interp_inputs(R2, period=True), period=1.0)

# ---------------------------------------------------------------------------------------------
# Products
# ---------------------------------------------------------------------------------------------

for _a, _b in [((4, 3), (3, 2)), ((3,), (3,)), ((4, 3), (3,)), ((3,), (3, 2)), ((2, 4, 3), (3, 2))]:
    add_np("dot", np.dot, [_a, _b], exact=False)
for _a, _b in [((4, 3), (3, 2)), ((2, 4, 3), (2, 3, 2)), ((3,), (3, 2)), ((4, 3), (3,))]:
    add_np("matmul", np.matmul, [_a, _b], exact=False)
add_np("vdot", np.vdot, [R1, R1], exact=False)
add_np("vdot", np.vdot, [R2, R2], exact=False)
add_np("inner", np.inner, [R1, R1], exact=False)
add_np("inner", np.inner, [(4, 3), (2, 3)], exact=False)
add_np("inner", np.inner, [(2, 2, 3), (3,)], exact=False)
add_np("outer", np.outer, [R1, (3,)])
add_np("outer", np.outer, [(2, 2), (3,)])
add_np("kron", np.kron, [(2, 2), (2, 3)])
add_np("kron", np.kron, [(3,), (2,)])
add_np("kron", np.kron, [(2, 1, 2), (2, 2)])


def _multi_dot(*arrays: Any) -> Any:
    return np.linalg.multi_dot(arrays)


add_custom(
    "multi_dot", "4x3,3x2,2x3", _multi_dot, _multi_dot, [(4, 3), (3, 2), (2, 3)], exact=False
)
add_custom(
    "multi_dot", "3,3x4,4x2,2", _multi_dot, _multi_dot, [(3,), (3, 4), (4, 2), (2,)], exact=False
)

# ---------------------------------------------------------------------------------------------
# Sorting family
# ---------------------------------------------------------------------------------------------

ref_sort = REFERENCE[np.sort]
ref_partition = REFERENCE[np.partition]

for _s, _kw in [(R1, {}), (R2, {}), (R2, {"axis": 0}), (R2, {"axis": None}), (R3, {"axis": 1})]:
    add_np("sort", np.sort, [_s], **_kw)
for _s in (R1, R2, R3):
    add_custom(
        "msort",
        _variant([_s], {"axis": 0}),
        functools.partial(np.sort, axis=0),
        functools.partial(ref_sort, axis=0),
        [_s],
        notes="np.msort was removed in NumPy 2.0; it was defined as np.sort(a, axis=0)",
    )

for _s, _kth, _axis in [(R1, 1, -1), (R2, 0, 0), (R2, [0, 2], 1), (R3, -1, 1)]:

    def _part_sorted(x: Any, _kth: Any = _kth, _axis: int = _axis) -> Any:
        return np.sort(np.partition(x, _kth, axis=_axis), axis=_axis)

    def _part_sorted_ref(x: Any, _kth: Any = _kth, _axis: int = _axis) -> Any:
        return ref_sort(ref_partition(x, _kth, axis=_axis), axis=_axis)

    def _part_kth(x: Any, _kth: Any = _kth, _axis: int = _axis) -> Any:
        return np.take(np.partition(x, _kth, axis=_axis), _kth, axis=_axis)

    def _part_kth_ref(x: Any, _kth: Any = _kth, _axis: int = _axis) -> Any:
        return np.take(ref_partition(x, _kth, axis=_axis), _kth, axis=_axis)

    _note = (
        "np.partition leaves the order of non-kth cells unspecified (introselect for float64), "
        "so the case compares order-independent views: the partition re-sorted, and the kth cells"
    )
    _v = _variant([_s], {"kth": _kth, "axis": _axis})
    add_custom("partition", _v + ",sorted", _part_sorted, _part_sorted_ref, [_s], notes=_note)
    add_custom("partition", _v + ",kth-cells", _part_kth, _part_kth_ref, [_s], notes=_note)

for _s in (R1, R2, R3):
    add_np("unique", np.unique, [_s])

# ---------------------------------------------------------------------------------------------
# Data movement (NumPy's object path is the reference: it moves the very objects)
# ---------------------------------------------------------------------------------------------


def _same_ref(
    name: str, variant: str, fn: Callable[..., Any], shapes: Sequence[Shape], **kw: Any
) -> None:
    add_custom(name, variant, fn, fn, shapes, **kw)


add_np("ravel", np.ravel, [R2])
add_np("ravel", np.ravel, [R3])
add_np("ravel", np.ravel, [R2], order="F")
for _s, _new in [(R2, (-1, 1)), (R2, (1, -1)), (R2, (3, 4)), (R3, (6, 4)), (R3, (2, -1))]:
    _same_ref(
        "reshape",
        _variant([_s], {"shape": _new}),
        functools.partial(np.reshape, shape=_new),
        [_s],
    )
_same_ref("reshape", "4x3,shape=(3,4),order='F'", lambda x: np.reshape(x, (3, 4), order="F"), [R2])
for _s, _new in [(R2, (6, 5)), (R2, (2, 3)), (R1, (3, 3)), (R3, (5,))]:
    add_np("resize", np.resize, [_s], new_shape=_new)
add_np("transpose", np.transpose, [R2])
add_np("transpose", np.transpose, [R3])
add_np("transpose", np.transpose, [R3], axes=(1, 0, 2))
add_np("transpose", np.transpose, [R3], axes=(2, 0, 1))
add_np("moveaxis", np.moveaxis, [R2], source=0, destination=1)
add_np("moveaxis", np.moveaxis, [R3], source=0, destination=-1)
add_np("moveaxis", np.moveaxis, [R3], source=(0, 1), destination=(2, 0))
add_np("swapaxes", np.swapaxes, [R2], axis1=0, axis2=1)
add_np("swapaxes", np.swapaxes, [R3], axis1=0, axis2=2)
for _nm, _fn in (
    ("atleast_1d", np.atleast_1d),
    ("atleast_2d", np.atleast_2d),
    ("atleast_3d", np.atleast_3d),
):
    for _s in (R0, R1, R2, R3):
        add_np(_nm, _fn, [_s])
    add_np(_nm, _fn, [R1, R2], extra="two-arrays")
add_np("broadcast_to", np.broadcast_to, [R1], shape=(3, 4))
add_np("broadcast_to", np.broadcast_to, [(4, 1)], shape=(4, 3))
add_np("broadcast_to", np.broadcast_to, [R2], shape=(2, 4, 3))
add_np("broadcast_to", np.broadcast_to, [R0], shape=(2, 3))
add_np("expand_dims", np.expand_dims, [R1], axis=0)
add_np("expand_dims", np.expand_dims, [R1], axis=1)
add_np("expand_dims", np.expand_dims, [R2], axis=(0, 2))
add_np("expand_dims", np.expand_dims, [R3], axis=-1)
add_np("squeeze", np.squeeze, [(1, 4)])
add_np("squeeze", np.squeeze, [(4, 1, 2)])
add_np("squeeze", np.squeeze, [(1, 3, 1)], axis=0)
add_np("squeeze", np.squeeze, [(1, 1)])
for _req in ("F", "C", "A", "W", "O", "E"):
    add_np("require", np.require, [R2], requirements=_req)
for _nm, _fn in (
    ("asarray", np.asarray),
    ("ascontiguousarray", np.ascontiguousarray),
    ("asfortranarray", np.asfortranarray),
):
    for _s in (R1, R2, R3):
        add_np(_nm, _fn, [_s])
    _same_ref(_nm, "4x3,transposed-view", lambda x, _fn=_fn: _fn(x.T), [R2])
    _same_ref(_nm, "4x3x2,strided-view", lambda x, _fn=_fn: _fn(x[::2, ::-1]), [R3])

_same_ref(
    "concatenate", "4x3,2x3,axis=0", lambda a, b: np.concatenate((a, b), axis=0), [R2, (2, 3)]
)
_same_ref(
    "concatenate", "4x3,4x2,axis=1", lambda a, b: np.concatenate((a, b), axis=1), [R2, (4, 2)]
)
_same_ref(
    "concatenate", "4x3,3,axis=None", lambda a, b: np.concatenate((a, b), axis=None), [R2, (3,)]
)
_same_ref("concatenate", "4,3,2", lambda a, b, c: np.concatenate((a, b, c)), [R1, (3,), (2,)])
_same_ref("stack", "4,4,4,axis=0", lambda a, b, c: np.stack((a, b, c)), [R1, R1, R1])
_same_ref("stack", "4x3,4x3,axis=1", lambda a, b: np.stack((a, b), axis=1), [R2, R2])
_same_ref("stack", "4x3,4x3,axis=-1", lambda a, b: np.stack((a, b), axis=-1), [R2, R2])
_same_ref("vstack", "4,4", lambda a, b: np.vstack((a, b)), [R1, R1])
_same_ref("vstack", "4x3,2x3,3", lambda a, b, c: np.vstack((a, b, c)), [R2, (2, 3), (3,)])
_same_ref("hstack", "4,3", lambda a, b: np.hstack((a, b)), [R1, (3,)])
_same_ref("hstack", "4x3,4x2", lambda a, b: np.hstack((a, b)), [R2, (4, 2)])
_same_ref("column_stack", "4,4", lambda a, b: np.column_stack((a, b)), [R1, R1])
_same_ref("column_stack", "4x3,4", lambda a, b: np.column_stack((a, b)), [R2, R1])
_same_ref(
    "block",
    "[[2x2,2x1],[1x2,1x1]]",
    lambda a, b, c, d: np.block([[a, b], [c, d]]),
    [(2, 2), (2, 1), (1, 2), (1, 1)],
)
_same_ref("block", "[4,3]", lambda a, b: np.block([a, b]), [R1, (3,)])
add_np("append", np.append, [R2, (2, 3)])
add_np("append", np.append, [R2, (2, 3)], axis=0)
add_np("append", np.append, [R2, (4, 2)], axis=1)
add_np("insert", np.insert, [R1], obj=1, values=0.0)
add_np("insert", np.insert, [R2], obj=[0, 2], values=0.0, axis=1)
_same_ref("insert", "4x3,3,obj=1,axis=0", lambda x, v: np.insert(x, 1, v, axis=0), [R2, (3,)])
add_np("delete", np.delete, [R1], obj=1)
add_np("delete", np.delete, [R2], obj=[0, 2], axis=1)
add_np("delete", np.delete, [R2], obj=slice(1, 3), axis=0)
add_np("delete", np.delete, [R3], obj=[1, 5, 7])
for _s, _reps in [(R1, 2), (R2, (2, 2)), (R2, (1, 3)), (R3, (2, 1, 2)), (R1, (2, 2))]:
    add_np("tile", np.tile, [_s], reps=_reps)
add_np("repeat", np.repeat, [R1], repeats=2)
add_np("repeat", np.repeat, [R2], repeats=3, axis=0)
add_np("repeat", np.repeat, [R2], repeats=[1, 0, 2], axis=1)
add_np("repeat", np.repeat, [R3], repeats=2)


def _zero_border(shape: Shape, lead: int, trail: int) -> Maker:
    """Leading/trailing zeros along every axis, the rest non-zero."""

    def make(rng: np.random.Generator) -> list[F64]:
        x = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        inner = tuple(slice(lead, d - trail) for d in shape)
        out = np.zeros(shape)
        out[inner] = x[inner]
        return [out]

    return make


for _trim in ("fb", "f", "b"):
    add_np("trim_zeros", np.trim_zeros, [(6,)], make=_zero_border((6,), 2, 1), trim=_trim)
add_np("trim_zeros", np.trim_zeros, [(4, 4)], make=_zero_border((4, 4), 1, 1))
add_np("flip", np.flip, [R1])
add_np("flip", np.flip, [R2], axis=0)
add_np("flip", np.flip, [R2], axis=None)
add_np("flip", np.flip, [R3], axis=(0, 2))
for _s in (R2, R3):
    add_np("fliplr", np.fliplr, [_s])
for _s in (R1, R2, R3):
    add_np("flipud", np.flipud, [_s])
add_np("roll", np.roll, [R1], shift=1)
add_np("roll", np.roll, [R2], shift=-2, axis=0)
add_np("roll", np.roll, [R2], shift=10)
add_np("roll", np.roll, [R3], shift=(1, 2), axis=(0, 2))
for _k in (1, 2, 3, -1):
    add_np("rot90", np.rot90, [R2], k=_k)
add_np("rot90", np.rot90, [R3], k=1, axes=(1, 2))

# ---------------------------------------------------------------------------------------------
# Complex-number helpers on real input
# ---------------------------------------------------------------------------------------------

for _s in (R1, R2, R3):
    add_np("real", np.real, [_s])
    add_np("imag", np.imag, [_s])
    add_np("conj", np.conj, [_s])
    add_np("conjugate", np.conjugate, [_s])
    add_np("angle", np.angle, [_s])
add_np("angle", np.angle, [R2], deg=True)
add_np("real_if_close", np.real_if_close, [R2])
add_np("real_if_close", np.real_if_close, [R3], tol=1000)

# ---------------------------------------------------------------------------------------------
# Extra cases: the picking semantics of the issue, ties, selection
# ---------------------------------------------------------------------------------------------

add_np("clip", np.clip, [R2], a_min=-0.5, a_max=0.5)
add_np(
    "clip",
    np.clip,
    [R2, R2, R2],
    make=lambda rng: [
        rng.uniform(-2, 2, R2),
        rng.uniform(-2, -0.5, R2),
        rng.uniform(0.5, 2, R2),
    ],
)


def _where_xy(x: Any, y: Any) -> Any:
    return np.where(x > 0, x, y)


def _where_const(x: Any) -> Any:
    return np.where(x > 0, x, 0.0)


def _argmax_take(x: Any) -> Any:
    return np.take_along_axis(x, np.argmax(x, axis=0, keepdims=True), axis=0)


_same_ref("where", "4x3,4x3,x>0", _where_xy, [R2, R2])
_same_ref("where", "4x3,x>0,else=0", _where_const, [R2])


def _argmax_take_ref(x: Any) -> Any:
    """The picked cell of each column; its argmax position brings the column it compared as
    considered (positional lineage, ``dslog_dagster.core.positions``)."""
    vals = np.vectorize(lambda c: lift(c).v, otypes=[np.float64])(x)
    idx = np.argmax(vals, axis=0)
    return obj_array(
        [select(x[int(idx[j]), j], *x[:, j]) for j in range(x.shape[1])], (1, x.shape[1])
    )


add_custom("take_along_axis_argmax", "4x3,axis=0", _argmax_take, _argmax_take_ref, [R2])
_same_ref("fancy_index", "4x3,[2,0,2]", lambda x: x[[2, 0, 2]], [R2])


def _mask_index_ref(x: Any) -> Any:
    """``x[x > 0]`` is ``x[(x > 0).nonzero()]``: each kept cell, plus (considered) every cell
    the comparison tested (positional lineage of the mask's true cells)."""
    vals = np.vectorize(lambda c: lift(c).v, otypes=[np.float64])(x)
    kept = [select(x[i, j], *x.reshape(-1)) for i, j in np.argwhere(vals > 0)]
    return obj_array(kept, (len(kept),))


add_custom("boolean_index", "4x3,x>0", lambda x: x[x > 0], _mask_index_ref, [R2])


def _ties(rng: np.random.Generator) -> list[F64]:
    x = rng.integers(0, 3, size=R2).astype(np.float64)
    y = rng.integers(0, 3, size=R2).astype(np.float64)
    return [x, y]


add_np("maximum_ties", np.maximum, [R2, R2], make=_ties)
add_np("maximum_ties", np.minimum, [R2, R2], make=_ties, extra="minimum")
add_np("amax_ties", np.amax, [R2], make=lambda rng: _ties(rng)[:1], axis=0)
add_np("amax_ties", np.amin, [R2], make=lambda rng: _ties(rng)[:1], axis=None, extra="amin")
add_np("amax_ties", np.ptp, [R2], make=lambda rng: _ties(rng)[:1], axis=1, extra="ptp")
add_np("sort_ties", np.sort, [R2], make=lambda rng: _ties(rng)[:1], axis=0)
add_np("unique_duplicates", np.unique, [R2], make=lambda rng: _ties(rng)[:1])

CASE_BY_ID: dict[str, GridCase] = {c.id: c for c in CASES}
if len(CASE_BY_ID) != len(CASES):  # pragma: no cover - a grid bug, caught at import
    _dups = sorted({c.id for c in CASES if sum(d.id == c.id for d in CASES) > 1})
    _msg = f"duplicate grid case ids: {_dups}"
    raise AssertionError(_msg)
