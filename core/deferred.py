"""Deferred annotation: element-wise chains and sums run on plain NumPy, lineage from shapes.

An annotated run writes a 16-byte cell per input value, and every kernel on tracked cells
moves twice the bytes of its plain twin. For ``-x``, ``x + y`` or ``np.sum(x, axis=0)`` that
alone costs more than the plain run several times over (issue 23), while their lineage
follows from the shapes: an element-wise output cell comes from the cell of each operand that
broadcasting aligns with it, a sum's from the whole reduced axes. So a capture hands ``func``
:class:`DeferredArray` inputs: duck arrays over the plain float64 values that compute those
operations with NumPy itself and carry, per input, a *map* from output axes to input axes
(:data:`Maps`). A result that is still deferred when ``func`` returns gets its tables from its
map (one ProvRC row per input), with no annotation and no extraction.

**The fast path** (what stays deferred):

* a ufunc of :data:`ELEMENTWISE` called on deferred arrays, Python or NumPy real scalars and
  plain real arrays (no ``out``, ``where``, ``dtype`` or other keywords; NumPy's broadcasting),
  giving float64;
* ``np.sum``/``mean``/``var``/``std`` (and their methods) and ``np.add.reduce`` over whole
  axes (``axis``, ``keepdims``, ``ddof`` only): each output cell carries the whole reduced
  axes;
* ``shape``, ``ndim``, ``size``, ``len`` and ``np.shape``/``np.ndim``/``np.size``, which read
  nothing.

An input that two operands reach through different maps stays on it when one map holds the
other (``x - x.mean(axis=0)``: the column holds the cell, so the union is the column's map);
otherwise (``x + x.T``-like shapes) it leaves.

**The switch.** Anything else — indexing, another function or ufunc, a method, ``dtype``,
``np.asarray``, printing — turns the whole capture to tracked arrays, once and for good: every
input is annotated in argument order (as an eager capture annotates them), every deferred
array still alive gets its tracked *twin* (its chain re-run under annotation for the handles,
then its values put back from the plain run with ``_annotator.assign_values``, so what ``func``
computed never changes), and the operation then runs on the twins. From then on every
deferred array forwards everything to its twin, and new results are ordinary tracked arrays.
The user's function runs once either way; values are NumPy's own.

What ``func`` can tell apart: ``type(x)`` and ``isinstance(x, np.ndarray)`` (a deferred array
is not an ndarray until it switches — ``np.asarray(x)`` gives the tracked array); everything
it computes is what the eager capture computes.
"""

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from numpy.lib.array_utils import normalize_axis_tuple
from numpy.lib.mixins import NDArrayOperatorsMixin

from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.errors import CaptureError, StaleLineageError

__all__ = [
    "ELEMENTWISE",
    "DeferredArray",
    "DeferredRun",
    "Maps",
    "map_table",
]

Maps = dict[int, tuple[int, ...]]
"""Per input (by argument index) that a deferred array's cells come from: one entry per input
axis, the output axis whose index it equals (``j >= 0``), or ``-1`` for the whole axis (a
reduced axis, or one broadcasting stretches from length 1)."""

ELEMENTWISE: frozenset[np.ufunc] = frozenset(
    {
        np.negative, np.positive, np.absolute, np.fabs,
        np.sin, np.cos, np.tan, np.arcsin, np.arccos, np.arctan,
        np.sinh, np.cosh, np.tanh, np.arcsinh, np.arccosh, np.arctanh,
        np.degrees, np.radians, np.deg2rad, np.rad2deg,
        np.rint, np.floor, np.ceil, np.trunc,
        np.exp, np.exp2, np.expm1, np.log, np.log2, np.log10, np.log1p,
        np.sqrt, np.cbrt, np.square, np.reciprocal, np.sign,
        np.add, np.subtract, np.multiply, np.true_divide, np.floor_divide,
        np.power, np.float_power, np.fmod, np.remainder, np.hypot, np.arctan2,
        np.logaddexp, np.logaddexp2, np.copysign,
    }
)  # fmt: skip
"""Ufuncs whose output cell carries every operand's aligned cell, in both capture modes (the
tracked kernels' ``U_DELEGATE``/``B_ARITH`` rules; ``maximum``, comparisons and predicates are
not among them)."""

_FORWARDED_DUNDERS = frozenset({"__dlpack__", "__dlpack_device__", "__array_namespace__"})
"""Dunder attributes read from the twin (the DLPack and array-API entry points); any other
dunder name the class does not define is absent, so a protocol probe never switches."""

_SHAPE_FUNCS: dict[Callable[..., Any], str] = {np.shape: "shape", np.ndim: "ndim", np.size: "size"}


class _Node:
    """How a deferred value was made: input ``k`` (``op is None``), or ``op`` applied to
    ``args`` (nodes and constants). Holds no values of its own, so an intermediate the user
    dropped is freed as in a plain run; the switch re-runs the chain from the inputs."""

    __slots__ = ("args", "input", "kwargs", "op")

    def __init__(
        self,
        op: Callable[..., Any] | None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        input: int = -1,
    ) -> None:
        self.op = op
        self.args = args
        self.kwargs = kwargs or {}
        self.input = input


class DeferredRun:
    """One capture's deferred state: its inputs, the deferred arrays alive, and the switch.

    Made by the capture before ``func`` runs (:meth:`inputs`); :meth:`close` when it returns,
    after the outputs were read. A deferred array used after its capture ended, or from
    another thread, raises :class:`~dslog_dagster.errors.StaleLineageError` when it would
    switch, as a tracked array of an ended capture or of another thread's does.
    """

    def __init__(self, inputs: Sequence[npt.NDArray[np.float64]], name: str) -> None:
        self._inputs = list(inputs)
        self._name = name
        self._thread = threading.get_ident()
        self._live: list[weakref.ref[DeferredArray]] = []
        self.switched = False
        self.closed = False
        self.failed = False
        self.tracked: list[np.ndarray[Any, Any]] = []

    def inputs(self) -> list["DeferredArray"]:
        """The deferred inputs ``func`` receives, in argument order."""
        return [
            DeferredArray._make(self, a, _Node(None, input=k), {k: tuple(range(a.ndim))})
            for k, a in enumerate(self._inputs)
        ]

    def close(self) -> None:
        """End the run: nothing may switch any more."""
        self.closed = True
        self._live.clear()

    def _register(self, d: "DeferredArray") -> None:
        if len(self._live) >= 64 and len(self._live) & (len(self._live) - 1) == 0:
            self._live = [r for r in self._live if r() is not None]
        self._live.append(weakref.ref(d))

    def switch(self) -> None:
        """Turn the capture to tracked arrays (see the module docstring); idempotent."""
        if self.switched:
            return
        if self.closed:
            msg = (
                f"A deferred array of the capture of `{self._name}` was used after its capture "
                "ended; its lineage is gone, as a tracked array's is. Keep the arrays a "
                "captured function makes inside that function."
            )
            raise StaleLineageError(msg)
        if threading.get_ident() != self._thread:
            msg = (
                f"A deferred array of the capture of `{self._name}` was used from another "
                "thread; its lineage belongs to the capture running in its own thread, as a "
                "tracked array's does (captures are per thread)."
            )
            raise StaleLineageError(msg)
        if self.failed:
            msg = (
                f"The capture of `{self._name}` could not turn its deferred arrays into "
                "tracked ones (the switch failed above); its arrays cannot be used any more."
            )
            raise CaptureError(msg)
        live = [d for r in self._live if (d := r()) is not None]
        try:
            self.tracked = [_annotator.annotate(a)[0] for a in self._inputs]
            memo: dict[int, Any] = {}
            # the chains re-run for their handles only: their floating-point warnings were
            # already given by the plain run
            with np.errstate(all="ignore"):
                twins = [self._twin_of(d, memo) for d in live]
        except BaseException:
            self.failed = True  # half-annotated: no later use may see a partial switch
            raise
        for d, twin in zip(live, twins, strict=True):
            d._twin, d._value, d._node = twin, None, None
        self._live.clear()
        self.switched = True

    def _replay(self, node: _Node, memo: dict[int, Any]) -> Any:
        got = memo.get(id(node))
        if got is not None:
            return got
        if node.op is None:
            out = self.tracked[node.input]
        else:
            args = [self._replay(a, memo) if isinstance(a, _Node) else a for a in node.args]
            out = node.op(*args, **node.kwargs)
        memo[id(node)] = out
        return out

    def _twin_of(self, d: "DeferredArray", memo: dict[int, Any]) -> Any:
        node = cast("_Node", d._node)
        if node.op is None:
            return self.tracked[node.input]
        got = self._replay(node, memo)
        # a fresh ufunc or sum result is C order, writeable and nobody else's; anything else
        # (a scalar) is copied first
        fresh = (
            isinstance(got, np.ndarray)
            and got.base is None  # owns its memory: never a view of an input's twin
            and got.flags.c_contiguous
            and got.flags.writeable
            and all(got is not t for t in self.tracked)
        )
        arr = got if fresh else np.array(got)
        _annotator.assign_values(arr, np.asarray(d._value, dtype=np.float64))
        return arr[()] if not isinstance(d._value, np.ndarray) else arr


class _Method:
    """A twin's method that takes deferred arguments as their twins (``a.take(i)`` with a
    deferred ``i``: the position hook reads ``i``'s annotations)."""

    __slots__ = ("_bound",)

    def __init__(self, bound: Callable[..., Any]) -> None:
        self._bound = bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._bound(*_unwrap(args), **_unwrap(kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bound, name)


def _unwrap(x: Any) -> Any:
    """``x`` with every deferred array (also inside lists, tuples and dicts) replaced by its
    twin; the run has switched."""
    if isinstance(x, DeferredArray):
        return x.twin()
    if isinstance(x, tuple | list):
        return type(x)(_unwrap(v) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _plain_operand(x: Any) -> bool:
    """A constant the fast path takes: a real Python or NumPy scalar, or a plain real array
    whose dtype leaves a float64 result float64."""
    if isinstance(x, bool | int | float):
        return True
    if type(x) is np.ndarray or isinstance(x, np.bool_ | np.integer | np.floating):
        dt = x.dtype
        return dt.kind in "biu" or (dt.kind == "f" and dt.itemsize <= 8)
    return False


def _aligned(maps: Maps, shape: tuple[int, ...], out: tuple[int, ...]) -> Maps:
    """``maps`` of an operand of ``shape`` broadcast to ``out``."""
    lead = len(out) - len(shape)
    return {
        k: tuple(-1 if j < 0 or (shape[j] == 1 and out[j + lead] != 1) else j + lead for j in m)
        for k, m in maps.items()
    }


def _holds(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Does map ``a`` relate every pair map ``b`` relates? (each axis whole in ``a``, or the
    same in both)."""
    return all(i == -1 or i == j for i, j in zip(a, b, strict=True))


def _reduced(maps: Maps, ndim: int, axes: tuple[int, ...], keepdims: bool) -> Maps:
    """``maps`` after summing ``axes`` of an operand of rank ``ndim``."""
    gone = set(axes)
    renum = {j: j if keepdims else j - sum(1 for a in axes if a < j) for j in range(ndim)}
    return {k: tuple(-1 if j < 0 or j in gone else renum[j] for j in m) for k, m in maps.items()}


class DeferredArray(NDArrayOperatorsMixin):
    """A float64 array of a running capture whose lineage is a map of the inputs' cells.

    See the module docstring: it computes element-wise ufuncs and sums with plain NumPy and
    stays deferred; anything else switches the capture to tracked arrays, after which it
    forwards everything to its tracked twin (``np.asarray(x)`` returns the twin).
    """

    __slots__ = ("__weakref__", "_maps", "_node", "_run", "_twin", "_value")

    __hash__ = None  # type: ignore[assignment]  # unhashable, like an ndarray

    _run: DeferredRun
    _value: Any
    _node: _Node | None
    _maps: Maps
    _twin: Any

    @classmethod
    def _make(cls, run: DeferredRun, value: Any, node: _Node, maps: Maps) -> "DeferredArray":
        d = object.__new__(cls)
        d._run, d._value, d._node, d._maps, d._twin = run, value, node, maps, None
        run._register(d)
        return d

    # --- what the capture reads --------------------------------------------------------------
    @property
    def deferred(self) -> bool:
        """Still deferred (its run has not switched)."""
        return self._twin is None

    def of(self, run: DeferredRun | None) -> bool:
        """Was it made by ``run``?"""
        return self._run is run

    def twin(self) -> Any:
        """The tracked array (or tracked scalar) this stands for: the run switches first."""
        self._run.switch()
        return self._twin

    def plain(self) -> Any:
        """Its values as the plain run computed them (a float64 array or ``np.float64``);
        only while deferred."""
        assert self._twin is None
        return self._value

    def maps(self) -> Maps:
        """Its maps (only while deferred)."""
        return self._maps

    # --- the fast path -------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if not self._run.switched:
            if method == "__call__" and not kwargs and ufunc in ELEMENTWISE:
                got = _elementwise(self._run, ufunc, inputs)
                if got is not None:
                    return got
            elif method == "reduce" and ufunc is np.add and len(inputs) == 1:
                rest = {k: v for k, v in kwargs.items() if k != "axis"}
                # ufunc.reduce's default axis is 0
                got = _reduce(self._run, np.sum, inputs[0], kwargs.get("axis", 0), rest)
                if got is not None:
                    return got
        self._run.switch()
        if "where" in kwargs and "out" not in kwargs:
            # NumPy drops an explicit out=None before the override (and warns about a
            # `where` without `out` only when nobody overrides): keep the twins' call silent
            kwargs["out"] = None
        return getattr(ufunc, method)(*_unwrap(inputs), **_unwrap(kwargs))

    def __array_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if not self._run.switched:
            if func in _REDUCTIONS and len(args) <= 2 and not (len(args) == 2 and "axis" in kwargs):
                rest = dict(kwargs)
                axis = args[1] if len(args) == 2 else rest.pop("axis", None)
                got = _reduce(self._run, func, args[0], axis, rest)
                if got is not None:
                    return got
            attr = _SHAPE_FUNCS.get(func)
            if attr is not None and len(args) == 1 and not kwargs and args[0] is self:
                return getattr(np.asarray(self._value), attr)
        self._run.switch()
        return _installed(func)(*_unwrap(args), **_unwrap(kwargs))

    def _statistic(self, func: Callable[..., Any], axis: Any, args: Any, kwargs: Any) -> Any:
        if not self._run.switched and not args:
            got = _reduce(self._run, func, self, axis, dict(kwargs))
            if got is not None:
                return got
        method = getattr(self.twin(), func.__name__)
        return method(axis, *_unwrap(args), **_unwrap(kwargs))

    def sum(self, axis: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``ndarray.sum``: deferred for ``axis`` and ``keepdims``, else on the twin."""
        return self._statistic(np.sum, axis, args, kwargs)

    def mean(self, axis: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``ndarray.mean``: deferred for ``axis`` and ``keepdims``, else on the twin."""
        return self._statistic(np.mean, axis, args, kwargs)

    def var(self, axis: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``ndarray.var``: deferred for ``axis``, ``keepdims`` and ``ddof``, else on the twin."""
        return self._statistic(np.var, axis, args, kwargs)

    def std(self, axis: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``ndarray.std``: deferred for ``axis``, ``keepdims`` and ``ddof``, else on the twin."""
        return self._statistic(np.std, axis, args, kwargs)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._twin.shape if self._twin is not None else np.shape(self._value)

    @property
    def ndim(self) -> int:
        return self._twin.ndim if self._twin is not None else np.ndim(self._value)

    @property
    def size(self) -> int:
        return self._twin.size if self._twin is not None else np.size(self._value)

    def __len__(self) -> int:
        if self._twin is None and isinstance(self._value, np.ndarray) and self._value.ndim:
            return len(self._value)
        return len(self.twin())

    # --- everything else: on the twin ----------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name not in _FORWARDED_DUNDERS:
            # protocol probes (NumPy's __array_interface__/__array_struct__/__array_priority__,
            # copy's and pickle's hooks): no switch; NumPy then converts through __array__
            raise AttributeError(name)
        if name in DeferredArray.__slots__:
            raise AttributeError(name)
        got = getattr(self.twin(), name)
        if callable(got):  # a method: deferred arguments (an index array) go as their twins
            return _Method(got)
        return got

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        t = self.twin()
        arr = np.asarray(t) if dtype is None else np.asarray(t, dtype=dtype)
        return arr.copy() if copy else arr

    def __getitem__(self, key: Any) -> Any:
        return self.twin()[_unwrap(key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.twin()[_unwrap(key)] = _unwrap(value)

    def __delitem__(self, key: Any) -> None:
        del self.twin()[_unwrap(key)]

    def __iter__(self) -> Any:
        return iter(self.twin())

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self.twin(), ndigits) if ndigits is not None else round(self.twin())

    def __contains__(self, value: Any) -> bool:
        return _unwrap(value) in self.twin()

    def __bool__(self) -> bool:
        return bool(self.twin())

    def __float__(self) -> float:
        return float(self.twin())

    def __int__(self) -> int:
        return int(self.twin())

    def __index__(self) -> int:
        return cast("int", self.twin().__index__())

    def __complex__(self) -> complex:
        return complex(self.twin())

    def __repr__(self) -> str:
        return repr(self.twin())

    def __str__(self) -> str:
        return str(self.twin())

    def __format__(self, spec: str) -> str:
        return format(self.twin(), spec)

    def __copy__(self) -> Any:
        return self.twin().copy()

    def __deepcopy__(self, memo: Any) -> Any:
        return self.twin().copy()

    def __reduce__(self) -> Any:
        return self.twin().__reduce__()


def _installed(func: Callable[..., Any]) -> Callable[..., Any]:
    """What NumPy's namespace holds under ``func``'s name when it wraps ``func``: the capture's
    ``np.argwhere``/``np.where`` (:mod:`~dslog_dagster.core.positions`) hand NumPy's own
    function to the dispatch, which must reach the wrapper again once the run switched."""
    current = getattr(np, getattr(func, "__name__", ""), None)
    return current if getattr(current, "__wrapped__", None) is func else func  # type: ignore[return-value]


def _shape(x: Any) -> tuple[int, ...]:
    return x.shape if isinstance(x, DeferredArray) else np.shape(x)


def _elementwise(run: DeferredRun, ufunc: np.ufunc, inputs: tuple[Any, ...]) -> Any:
    """``ufunc(*inputs)`` deferred, or None when it leaves the fast path."""
    values = []
    for x in inputs:
        if isinstance(x, DeferredArray):
            if x._run is not run:
                return None
            values.append(x._value)
        elif _plain_operand(x):
            values.append(x)
        else:
            return None
    try:
        out_shape = np.broadcast_shapes(*[np.shape(v) for v in values])
    except ValueError:
        return None  # NumPy raises it on the twins, with its own message
    maps: Maps = {}
    for x in inputs:
        if not isinstance(x, DeferredArray):
            continue
        for k, m in _aligned(x._maps, _shape(x), out_shape).items():
            seen = maps.setdefault(k, m)
            if seen != m:
                # one input through two maps: their union is one row when one map holds the
                # other (x - x.mean(0): the column holds the cell), else it leaves the path
                if _holds(m, seen):
                    maps[k] = m
                elif not _holds(seen, m):
                    return None
    value = ufunc(*values)
    if np.asarray(value).dtype != np.float64:
        return None  # the plain run's value is dropped; the twins compute it
    node = _Node(ufunc, tuple(x._node if isinstance(x, DeferredArray) else x for x in inputs))
    return DeferredArray._make(run, value, node, maps)


_REDUCTIONS: dict[Callable[..., Any], frozenset[str]] = {
    np.sum: frozenset({"keepdims"}),
    np.mean: frozenset({"keepdims"}),
    np.var: frozenset({"keepdims", "ddof"}),
    np.std: frozenset({"keepdims", "ddof"}),
}
"""Statistics over whole axes whose output cell carries every cell of the axes it reduces
(a sum's, and so a mean's; a variance's and a standard deviation's through the mean), with the
keywords the fast path takes besides ``axis``."""


def _reduce(
    run: DeferredRun, func: Callable[..., Any], x: Any, axis: Any, kwargs: dict[str, Any]
) -> Any:
    """``func(x, axis=axis, **kwargs)`` (one of :data:`_REDUCTIONS`) deferred, or None when it
    leaves the fast path."""
    if (
        not isinstance(x, DeferredArray)
        or x._run is not run
        or not set(kwargs) <= _REDUCTIONS[func]
    ):
        return None
    keepdims = kwargs.get("keepdims", False)
    ddof = kwargs.get("ddof", 0)
    if not isinstance(keepdims, bool) or not isinstance(ddof, int | float | np.integer):
        return None
    # NumPy first: it raises for an axis that is not one, out of range or repeated, as it
    # would on the twin; the axes are then valid
    value = func(x._value, axis=axis, **kwargs)
    if np.asarray(value).dtype != np.float64:
        return None
    ndim = np.ndim(x._value)
    axes = tuple(range(ndim)) if axis is None else normalize_axis_tuple(axis, ndim)
    maps = _reduced(x._maps, ndim, axes, keepdims)
    node = _Node(func, (x._node,), {"axis": axis, **kwargs})
    return DeferredArray._make(run, value, node, maps)


def map_table(
    maps: Maps, k: int, out_shape: tuple[int, ...], in_shape: tuple[int, ...]
) -> LineageTable:
    """The ProvRC table of input ``k`` of a deferred output of ``out_shape``: one row (none
    when either side is empty or the output does not come from ``k``)."""
    entry = maps.get(k)  # None: no cell of this output comes from input k
    axes = entry or (-1,) * len(in_shape)
    # an input axis of length 1 is absolute (0..0), as the native extraction writes it
    ref = [j if j >= 0 and d != 1 else -1 for j, d in zip(axes, in_shape, strict=True)]
    return LineageTable.box(out_shape, in_shape, ref, empty=entry is None)
