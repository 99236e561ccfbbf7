"""Annotated execution: run unmodified NumPy code and record cell-level lineage.

``capture(func, *arrays, **kwargs)`` converts each input to the ``tracked_float`` dtype (a
float64 value plus the set of input cells it came from, implemented in C++ in
``native/src/tracked_float.cpp``), calls ``func`` on the tracked arrays, and turns the sets
carried by the output cells into one stored :class:`~dslog_dagster.core.provrc.LineageTable` per
(output, input) pair, straight from the annotations (:mod:`~dslog_dagster.core.extraction`: the
cost follows the compressed lineage, never the raw pairs). The
:class:`~dslog_dagster.core.LineageRelation` of a pair is expanded from its table when read.

Why a dtype and not a wrapper object: NumPy then runs its own code paths (ufunc loops, sorts,
copies, fancy indexing) on the annotated values, so the lineage is the lineage of what NumPy
actually did, at C speed, for any rank and any view.

Semantics (docs: `docs/concepts/capture.md`): arithmetic unions the operands' sets; constants carry
none; a value *picked* by comparison (maximum, sort, median, clip, where, ...) carries only the
picked cell's set, every tied cell's on a tie ("contributing"); ``Capture(mode="considered")``
additionally records every compared cell in a separate set, returned as
:attr:`CaptureResult.considered`.

Every keyword argument of :func:`capture` goes to the function (``np.pad``'s and
``np.convolve``'s ``mode`` included); the capture's own options live on a :class:`Capture`
object, ``Capture(mode=..., on_lost=...).run(func, *arrays, **kwargs)``, as an executor holds
its options apart from the calls it runs.

Lineage is never dropped silently. A cast of ``tracked_float`` to a plain dtype, a NumPy
function that does not support the dtype, ``float()`` of a tracked value, or a function that
returns plain numbers raises :class:`~dslog_dagster.errors.LineageLostError` naming the
function — or, with ``Capture(on_lost="all_to_all")``, records an explicit all-to-all relation
and sets :attr:`CaptureResult.flagged`.

Captures are per thread: each thread has its own annotation arena and ends only its own
capture (by its epoch), so captures in several threads run side by side; a tracked value
carried into another thread's capture is refused as stale. Epochs are issued once per process
and never reused (see ``native/include/dslog/annotations.hpp``).

This module knows nothing of reuse: the view registry (:mod:`dslog_dagster.core.reuse`) wraps
:func:`capture` (``ViewRegistry.capture``) and builds on the public helpers below
(:class:`Capture`, :func:`as_input`, :func:`check_options`, :func:`capture_inputs`,
:func:`split_outputs`, :func:`tracked_output`, :func:`plain_value`, :func:`func_name`).
"""

import importlib
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dslog_dagster.core import correlation as _correlation  # noqa: F401  (installs its wrappers)
from dslog_dagster.core import progress
from dslog_dagster.core.deferred import DeferredArray, DeferredRun, map_table
from dslog_dagster.core.extraction import (
    LazyRelations,
    extract_tables,
    stored_table,
    values_and_tables,
)
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.positions import Positions, carrier_of
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation, Shape
from dslog_dagster.errors import (
    CaptureError,
    DSLogError,
    LineageLostError,
    UnsupportedArrayError,
)

__all__ = [
    "TRACKED_FLOAT",
    "Capture",
    "CaptureResult",
    "Mode",
    "Obtained",
    "OnLost",
    "Relations",
    "as_input",
    "capture",
    "capture_inputs",
    "check_options",
    "func_name",
    "output_values",
    "plain_value",
    "split_outputs",
    "tracked_output",
]

#: The ``tracked_float`` NumPy dtype (``np.dtype``); ``TRACKED_FLOAT.type`` is its scalar type.
TRACKED_FLOAT: np.dtype[Any] = _annotator.dtype

#: Which relations a capture records (see :func:`capture`).
Mode = Literal["contributing", "considered"]
#: What a capture does when lineage would be lost (see :func:`capture`).
OnLost = Literal["raise", "all_to_all"]
#: How the lineage of a call was obtained: annotated execution or a base/dim/gen view.
Obtained = Literal["captured", "base", "dim", "gen"]

F64 = npt.NDArray[np.float64]
#: ``(output index, input index) -> LineageRelation`` of one call.
Relations = Mapping[tuple[int, int], LineageRelation]


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """What a capture produced.

    Attributes:
        value: the real result, as ``func`` would have returned it on float64 inputs: a
            float64 array, an ``np.float64`` scalar, or a tuple of those; positions
            (``np.argwhere``, ``argmax``, ... of tracked arrays,
            :mod:`~dslog_dagster.core.positions`) are NumPy's own integers. A flagged
            all-to-all result keeps the function's own output dtypes (a comparison bool).
        outputs: every output as an array (0-d for scalars), in order: float64, positions'
            integers, or the function's own dtype for a flagged all-to-all result.
        input_shapes: shapes of the captured inputs, in argument order.
        relations: ``(output index, input index) -> LineageRelation`` of the contributing
            cells (sorted, duplicate-free); every pair is present, possibly empty. For a call
            served with ``need="considered"`` a
            :class:`~dslog_dagster.core.reuse.serving.UnservedRelations` that raises
            :class:`~dslog_dagster.errors.CaptureError` when read.
        considered: the same for the considered cells (``mode="considered"`` only, else None).
        mode: ``"contributing"`` or ``"considered"``.
        flagged: True when lineage could not be captured and ``on_lost="all_to_all"`` recorded
            the all-to-all relation instead (an over-approximation, never an omission).
        reason: why the capture was flagged (None otherwise).
        annotation_bytes: bytes the annotation arena held when the function returned.
        obtained: ``"captured"`` (annotated execution) or the kind of view that was served
            (``"base"``, ``"dim"``, ``"gen"``); see :class:`~dslog_dagster.core.ViewRegistry`.
        signature: with a registry, the signature of the served view, or of the dim key
            this capture was recorded under (None without a registry or for unsignable calls).
        verified: True when the served view was checked against a sampled annotated run on
            this very call.
        tables: ``(output, input) -> LineageTable`` of the contributing relations, as the
            store keeps them: for every annotated capture (the factorised extraction produces
            them directly, :mod:`~dslog_dagster.core.extraction`), for a flagged all-to-all
            result (one row per pair) and for a served view (not for one served with
            ``need="considered"``).
        demoted: signatures of views found wrong during this call (a warning was issued and
            the lineage was captured instead).
        considered_tables: the same as ``tables`` for the considered relations
            (``mode="considered"`` captures only).

    ``relations`` and ``considered`` of an annotated capture are expanded from the tables
    when read (:class:`~dslog_dagster.core.extraction.LazyRelations`): the capture itself never
    writes a pair per (output cell, input cell).
    """

    value: Any
    outputs: tuple[npt.NDArray[Any], ...]
    input_shapes: tuple[Shape, ...]
    relations: Relations
    considered: Relations | None
    mode: Mode
    flagged: bool = False
    reason: str | None = None
    annotation_bytes: int = 0
    obtained: Obtained = "captured"
    signature: str | None = None
    verified: bool = False
    tables: Mapping[tuple[int, int], LineageTable] | None = field(default=None, repr=False)
    demoted: tuple[str, ...] = ()
    considered_tables: Mapping[tuple[int, int], LineageTable] | None = field(
        default=None, repr=False
    )

    def relation(
        self, output: int = 0, input: int = 0, *, considered: bool = False
    ) -> LineageRelation:
        """The relation of output ``output`` against input ``input``.

        Raises:
            CaptureError: ``considered=True`` on a capture run in contributing mode.
            KeyError: no such output or input.
        """
        if considered:
            if self.considered is None:
                msg = (
                    'This capture ran in mode="contributing"; capture with '
                    '`Capture(mode="considered").run(...)`.'
                )
                raise CaptureError(msg)
            return self.considered[(output, input)]
        return self.relations[(output, input)]


def func_name(func: Callable[..., Any]) -> str:
    """The name error messages and view records give ``func``: ``module.qualname``."""
    mod = getattr(func, "__module__", None)
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{mod}.{name}" if mod and mod != "builtins" else str(name)


def _numpy_frame(exc: BaseException) -> str | None:
    """The innermost NumPy Python frame of a traceback (the function that gave up)."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if "/numpy/" in frame.filename.replace("\\", "/"):
            found = f"`numpy` function `{frame.name}` ({frame.filename}:{frame.lineno})"
    return found


def is_pandas(a: Any) -> bool:
    """A pandas object (checked without importing pandas)?"""
    return type(a).__module__.split(".")[0] == "pandas"


def as_input(a: Any, k: int) -> F64:
    """Input ``k`` as a C-contiguous float64 array (no copy when it already is one).

    Raises:
        UnsupportedArrayError: not a real numeric array, a tracked array, or a pandas object
            (converting it would lose its names and dtypes: frames go to ``capture``).
    """
    if type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous:
        return a
    if is_pandas(a):
        msg = (
            f"Input {k} is a pandas `{type(a).__name__}`; converting it to an array would lose "
            "its column names and dtypes. Pass DataFrames to `capture(fn, df)` (the pandas "
            "capture; reuse views serve NumPy arrays only), or pass `df.to_numpy()` yourself."
        )
        raise UnsupportedArrayError(msg)
    arr = np.asarray(a)
    if arr.dtype == TRACKED_FLOAT:
        msg = (
            f"Input {k} is already a tracked_float array; pass plain numeric arrays to "
            "`capture` (tracked arrays belong to the capture that created them)."
        )
        raise UnsupportedArrayError(msg)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_) or np.issubdtype(
        arr.dtype, np.complexfloating
    ):
        msg = (
            f"Input {k} has dtype `{arr.dtype}`; capture annotates real numeric arrays only. "
            "Convert with `.astype(np.float64)`."
        )
        raise UnsupportedArrayError(msg)
    return np.asarray(arr, dtype=np.float64, order="C")  # keeps 0-d (ascontiguousarray does not)


def split_outputs(result: Any) -> tuple[list[Any], bool]:
    """Split a function result into its outputs; True if it was a tuple/list."""
    if isinstance(result, tuple | list):
        return list(result), True
    return [result], False


def tracked_output(out: Any, k: int, name: str) -> np.ndarray[Any, Any]:
    """The tracked array of output ``k`` of ``name``, as a ``tracked_float`` array.

    A position array (``np.argwhere`` & co., :mod:`~dslog_dagster.core.positions`) gives its
    lineage carrier; its values are :func:`output_values`.

    Raises:
        LineageLostError: the output carries no lineage (not a ``tracked_float`` value or a
            position array of known lineage).
    """
    if isinstance(out, Positions):
        return carrier_of(out, f"output {k} of `{name}`")
    if isinstance(out, np.ndarray) and out.dtype == TRACKED_FLOAT:
        return out
    if isinstance(out, TRACKED_FLOAT.type):
        return np.asarray(out)
    kind = f"a `{type(out).__name__}`"
    if isinstance(out, np.ndarray | np.generic):
        kind = f"a `{out.dtype}` {'array' if isinstance(out, np.ndarray) else 'scalar'}"
    msg = (
        f"`{name}` returned {kind} as output {k}, not a tracked_float value, so its lineage "
        "was not captured (it was computed outside NumPy, converted to a plain dtype, or is "
        "an index/boolean result that carries no data lineage). Return the NumPy result, "
        "declare the lineage yourself (`Lineage(out, in, capture)` in the core API, "
        "`lineage=` on a tracked Dagster step), or capture with "
        '`Capture(on_lost="all_to_all").run(...)` to record an explicit all-to-all relation.'
    )
    raise LineageLostError(msg)


def output_values(out: Any, arr: np.ndarray[Any, Any]) -> npt.NDArray[Any]:
    """The plain values of output ``out`` whose tracked array is ``arr``: float64 values, or
    a position array's own integers (NumPy's, unchanged)."""
    if isinstance(out, Positions):
        return np.asarray(out).view(np.ndarray).copy()
    return _annotator.values(arr)


def _lost_message(name: str, exc: BaseException) -> str:
    where = _numpy_frame(exc)
    via = f" in {where}" if where else ""
    return (
        f"`{name}` could not run on tracked_float arrays{via}: {exc}. The function converts "
        "to a plain dtype or does not support the dtype, which would drop lineage. See the "
        "coverage table in the docs (docs/concepts/capture.md); rewrite the step with "
        "supported NumPy functions, declare its lineage yourself, or capture with "
        '`Capture(on_lost="all_to_all").run(...)` to record an explicit all-to-all relation '
        "(flagged)."
    )


def _deferred_refusal(name: str, exc: BaseException) -> CaptureError:
    """What to do when ``name`` refused a deferred input (code that checks for an ndarray,
    or a library that rejects other array types). The message names every place the option
    is set: the same refusal reaches a :class:`Capture`, a Dagster step (whose user never
    builds a ``Capture``) and a reuse registry's capture."""
    msg = (
        f"`{name}` refused a deferred input: {exc}. A capture hands the function deferred "
        "arrays (dslog_dagster.core.deferred), which are not ndarrays until the first "
        "operation off the element-wise fast path. Capture with `Capture(defer=False)` (a "
        "Dagster step: `defer=False` on `@tracked_asset`, `@tracked_multi_asset` or "
        "`@tracked_op`; a reuse registry: `with_options(defer=False)`) to get annotated "
        "ndarrays from the start, or convert with `np.asarray(x)` first."
    )
    return CaptureError(msg)


def _is_dtype_rejection(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, TypeError | ValueError) and (
        "tracked_float" in text or "not supported for the input types" in text
    )


def _all_to_all_result(
    plain: list[npt.NDArray[Any]],
    value: Any,
    inputs: Sequence[F64],
    mode: Mode,
    reason: str,
    captured: tuple[dict[tuple[int, int], LineageTable], dict[tuple[int, int], LineageTable] | None]
    | None = None,
) -> CaptureResult:
    """A flagged result: the ``captured`` (contributing, considered) tables of the outputs
    that have them are kept, every other (output, input) pair relates every output cell to
    every input cell (one ProvRC row, whatever the sizes).

    The outputs keep the dtype the function gave them (int64 indices stay int64): the
    fallback records lineage, it never changes the values.
    """
    shapes = tuple(tuple(int(d) for d in a.shape) for a in inputs)
    tables, considered = captured or ({}, {} if mode == "considered" else None)
    for o, out in enumerate(plain):
        for i, shape in enumerate(shapes):
            for target in (tables, considered):
                if target is not None and (o, i) not in target:
                    target[(o, i)] = LineageTable.all_to_all(tuple(out.shape), shape)
    return CaptureResult(
        value=value,
        outputs=tuple(plain),
        input_shapes=shapes,
        relations=LazyRelations(tables),
        considered=None if considered is None else LazyRelations(considered),
        mode=mode,
        flagged=True,
        reason=reason,
        tables=tables,
        considered_tables=considered,
    )


def _plain_output(o: Any, k: int) -> npt.NDArray[Any]:
    """Output ``k`` as the function returned it, as an array of its own dtype.

    Raises:
        UnsupportedArrayError: it is not numeric or boolean.
    """
    arr = np.asarray(o)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        msg = (
            f"Output {k} of the all-to-all fallback has dtype `{arr.dtype}`; lineage is "
            "recorded for numeric and boolean arrays only. Return a numeric array."
        )
        raise UnsupportedArrayError(msg)
    return arr


def _rerun_all_to_all(
    func: Callable[..., Any],
    inputs: list[F64],
    kwargs: Mapping[str, Any],
    mode: Mode,
    reason: str,
) -> CaptureResult:
    """Run ``func`` on plain float64 copies (its annotated run raised) and relate every
    output cell to every input cell. Only for functions that may run twice
    (:func:`may_run_again`)."""
    result = func(*[a.copy() for a in inputs], **kwargs)
    outs, is_tuple = split_outputs(result)
    plain = [_plain_output(o, k) for k, o in enumerate(outs)]
    return _all_to_all_result(plain, plain_value(plain, outs, is_tuple), inputs, mode, reason)


def may_run_again(func: Callable[..., Any], pure: bool) -> bool:
    """Whether a capture may call ``func`` a second time: the caller declared it pure, or it
    is NumPy's own (a ufunc or a function of the ``numpy`` package, which have no side
    effects). Anything else runs exactly once per capture."""
    if pure or isinstance(func, np.ufunc):
        return True
    module = getattr(func, "__module__", None) or ""
    return module == "numpy" or module.startswith("numpy.")


def _once_refusal(name: str, exc: BaseException) -> LineageLostError:
    where = _numpy_frame(exc)
    via = f" in {where}" if where else ""
    return LineageLostError(
        f"`{name}` could not run on tracked_float arrays{via}: {exc}. The all-to-all "
        f"fallback would have to call `{name}` a second time, on plain inputs, and a step runs "
        'once unless it is declared pure: declare it pure (`Capture(on_lost="all_to_all", '
        "pure=True)`, `@tracked_asset(pure=True)`) if calling it twice is harmless, rewrite "
        "it with supported NumPy functions (docs/concepts/capture.md), or declare its "
        "lineage yourself."
    )


def plain_value(plain: list[npt.NDArray[Any]], raw: list[Any], is_tuple: bool) -> Any:
    """The value a capture returns: ``plain`` outputs shaped as ``func`` returned ``raw`` (a
    scalar stays a NumPy scalar of its array's dtype, ``np.float64`` for tracked results; a
    tuple/list becomes a tuple)."""
    vals: list[Any] = []
    for arr, r in zip(plain, raw, strict=True):
        is_scalar = not isinstance(r, np.ndarray) or bool(getattr(r, "scalar", False))
        vals.append(arr[()] if is_scalar and arr.ndim == 0 else arr)
    return tuple(vals) if is_tuple else vals[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Capture:
    """The options of a capture, kept apart from the function's own keyword arguments.

    ``Capture(mode=..., on_lost=...).run(func, *arrays, **kwargs)`` captures
    ``func(*arrays, **kwargs)``; every keyword of ``run`` reaches ``func``, so a function with
    a ``mode`` (``np.pad``, ``np.convolve``), ``on_lost``, ``need`` or ``code_version``
    parameter of its own is called exactly as it would be without capture. The options are
    validated once, when the object is made; it is immutable and may be shared between
    threads and calls. :func:`capture` is ``Capture().run``.

    Attributes:
        mode: ``"contributing"`` (default): a value picked by comparison carries only the
            picked cell. ``"considered"``: also record every compared cell, returned
            separately in :attr:`CaptureResult.considered`.
        on_lost: ``"raise"`` (default) raises :class:`LineageLostError` when lineage would be
            lost; ``"all_to_all"`` records every output cell as depending on every input cell
            and flags the result. When the function returned values without lineage, those
            values are the result (the function ran once). When its annotated run raised
            part-way, the fallback needs a second, plain run: it happens only when ``pure``
            is True or ``func`` is NumPy's own, otherwise :class:`LineageLostError` says so.
        pure: calling ``func`` twice is harmless (no side effects); lets the all-to-all
            fallback re-run it on plain inputs.
        defer: ``True`` (default): ``func`` gets deferred inputs that compute element-wise
            ufuncs and sums with plain NumPy and take their lineage from the shapes; the
            first other operation annotates the inputs and turns every deferred array into
            its tracked array (:mod:`~dslog_dagster.core.deferred`). Values and lineage are
            the eager capture's either way. ``False``: ``func`` gets annotated
            ``tracked_float`` arrays from the start, for code that checks
            ``isinstance(x, np.ndarray)`` on its inputs.

    Raises:
        ValueError: ``mode`` or ``on_lost`` is not one of its values (when made).

    Examples:
        >>> import numpy as np
        >>> edge = Capture(mode="considered")
        >>> r = edge.run(np.pad, np.arange(3.0), pad_width=1, mode="edge")
        >>> r.value
        array([0., 0., 1., 2., 2.])
        >>> r.relation(0, 0).pairs().tolist()  # output cell 0 and 1 come from input cell 0
        [[0, 0], [1, 0], [2, 1], [3, 2], [4, 2]]
    """

    mode: Mode = "contributing"
    on_lost: OnLost = "raise"
    pure: bool = False
    defer: bool = True

    def __post_init__(self) -> None:
        check_options(self.mode, self.on_lost)

    def run(
        self, func: Callable[..., Any], /, *arrays: npt.ArrayLike, **kwargs: Any
    ) -> CaptureResult:
        """Run ``func(*arrays, **kwargs)`` with annotated inputs; see :func:`capture`."""
        if any(is_pandas(a) for a in arrays):
            # pandas frames go to the pandas capture (imported only when one is passed: the
            # core never imports pandas)
            frames = importlib.import_module("dslog_dagster.pandas.capture")
            return frames.as_capture_result(func, arrays, self.mode, kwargs)  # type: ignore[no-any-return]
        inputs = [as_input(a, k) for k, a in enumerate(arrays)]
        return capture_inputs(
            func, inputs, self.mode, self.on_lost, kwargs, pure=self.pure, defer=self.defer
        )


def capture(func: Callable[..., Any], /, *arrays: npt.ArrayLike, **kwargs: Any) -> CaptureResult:
    """Run ``func(*arrays, **kwargs)`` with annotated inputs and return values and lineage.

    Every keyword argument goes to ``func``: ``capture(np.pad, x, pad_width=1, mode="edge")``
    pads with ``mode="edge"``. The capture's own options (``mode``, ``on_lost``) are set on a
    :class:`Capture`: ``Capture(mode="considered").run(func, *arrays, **kwargs)``; this
    function is ``Capture().run`` (contributing mode, lost lineage raises). To serve repeated
    calls from provenance views instead, call
    :meth:`ViewRegistry.capture <dslog_dagster.core.reuse.ViewRegistry.capture>`, which
    takes the same arguments.

    Args:
        func: the operation; called with one array per entry of ``arrays`` (same shapes) and
            ``kwargs`` unchanged: a deferred array
            (:class:`~dslog_dagster.core.deferred.DeferredArray`) that becomes a
            ``tracked_float`` array at the first operation outside the element-wise fast path
            (``Capture(defer=False)``: a ``tracked_float`` array from the start). It may
            return an array, a scalar, or a tuple/list of them. Positional only, so ``func``
            may itself take a ``func`` keyword.
        *arrays: the inputs whose cells are tracked (any real numeric dtype, any rank; they are
            converted to float64). pandas DataFrames go to the pandas capture instead
            (``func`` gets tracked frames; the result's ``value`` is the output frame and its
            relations name cells ``(row, column)``; see ``docs/pandas.md``).
        **kwargs: passed to ``func`` (not tracked), all of them.

    Returns:
        A :class:`CaptureResult` with the float64 result and one relation per (output, input).

    Raises:
        LineageLostError: the function rejected the dtype, converted to a plain dtype, or
            returned values without lineage.
        CaptureError: a capture is already running in this thread (captures do not nest), or
            ``func`` refused a deferred input (a ``TypeError``/``ValueError`` naming
            ``DeferredArray``; ``Capture(defer=False)`` annotates from the start).
        UnsupportedArrayError: an input is not a real numeric array.

    Examples:
        >>> import numpy as np
        >>> r = capture(np.sum, np.arange(6.0).reshape(2, 3), axis=1)
        >>> r.value
        array([ 3., 12.])
        >>> r.relation(0, 0).n
        6
    """
    return _DEFAULT.run(func, *arrays, **kwargs)


def check_options(mode: str, on_lost: str) -> None:
    """Validate the ``mode`` and ``on_lost`` of a capture.

    Raises:
        ValueError: either is not one of its documented values.
    """
    if mode not in ("contributing", "considered"):
        msg = f'`mode` must be "contributing" or "considered", not {mode!r}.'
        raise ValueError(msg)
    if on_lost not in ("raise", "all_to_all"):
        msg = f'`on_lost` must be "raise" or "all_to_all", not {on_lost!r}.'
        raise ValueError(msg)


def capture_inputs(
    func: Callable[..., Any],
    inputs: list[F64],
    mode: Mode,
    on_lost: OnLost,
    kwargs: Mapping[str, Any],
    *,
    pure: bool = False,
    defer: bool = True,
) -> CaptureResult:
    """:func:`capture` on inputs already converted by :func:`as_input` (options unchecked).

    The building block of every annotated run: the view registry captures through it, and
    so do its synthetic-input probes. ``defer``: ``func`` gets
    :class:`~dslog_dagster.core.deferred.DeferredArray` inputs, annotated only when it leaves
    the element-wise fast path (:mod:`~dslog_dagster.core.deferred`); else annotated arrays
    from the start. ``func`` runs once; only the all-to-all fallback of a
    run that raised part-way calls it again, and only when :func:`may_run_again` allows.
    """
    name = func_name(func)
    if _annotator.active():
        msg = (
            f"Cannot capture `{name}`: a capture is already running in this thread (captures "
            "do not nest; captures in other threads are independent)."
        )
        raise CaptureError(msg)
    # This thread's capture, ended below by its epoch only: a path that ends a capture never
    # ends another one (each thread has its own, see native/src/tracked_float.cpp).
    epoch = _annotator.begin(1 if mode == "considered" else 0)
    lost: str | None = None
    run = DeferredRun(inputs, name) if defer else None
    try:
        try:
            label = progress.subject(name)
            # wake=False: no thread switch per capture (see progress._Heartbeat)
            with progress.phase(
                f"annotated run of `{label}`", _input_sizes(inputs), wake=False
            ) as ph:
                if run is not None:
                    result = func(*run.inputs(), **kwargs)
                else:
                    result = func(*[_annotator.annotate(a)[0] for a in inputs], **kwargs)
                used = int(_annotator.stats().get("bytes_used", 0))
                if used:
                    ph.note(f"{progress.fmt_bytes(used)} of annotation lists")
        except LineageLostError as e:
            lost = str(e) if name in str(e) else f"While capturing `{name}`: {e}"
            _fall_back_or_raise(e, lost, on_lost, func, pure, name)
        except DSLogError:
            raise
        except (TypeError, ValueError) as e:
            if run is not None and "DeferredArray" in str(e):
                raise _deferred_refusal(name, e) from e
            if not _is_dtype_rejection(e):
                raise
            lost = _lost_message(name, e)
            _fall_back_or_raise(e, lost, on_lost, func, pure, name)
        if lost is None:
            with progress.phase(
                f"extraction of `{progress.subject(name)}`'s lineage", wake=False
            ) as ph:
                res = _extract(result, inputs, mode, on_lost, name, run)
                tables = list(res.tables.values()) if res.tables else []
                pairs = sum(t.n_pairs for t in tables)
                rows = sum(t.rows for t in tables)
                ph.note(
                    f"{len(tables)} table(s)",
                    f"{progress.fmt_count(pairs)} pairs -> {progress.fmt_count(rows)} rows",
                )
            return res
    finally:
        if run is not None:
            run.close()
        _annotator.end(epoch)
    return _rerun_all_to_all(func, inputs, kwargs, mode, lost)


def _fall_back_or_raise(
    e: BaseException,
    lost: str,
    on_lost: OnLost,
    func: Callable[..., Any],
    pure: bool,
    name: str,
) -> None:
    """After the annotated run of ``func`` raised ``e`` (lineage lost, ``lost`` says how):
    return only when the flagged all-to-all fallback may re-run it on plain inputs; otherwise
    raise the error the user should see (the lost lineage, or the run-once refusal)."""
    if on_lost != "all_to_all":
        if isinstance(e, LineageLostError) and lost == str(e):
            raise e
        raise LineageLostError(lost) from e
    if not may_run_again(func, pure):
        raise _once_refusal(name, e) from e


def _input_sizes(inputs: list[F64]) -> str:
    """``2 inputs, 32,768 cells (262.1 KB)`` for a phase line."""
    cells = sum(int(a.size) for a in inputs)
    nbytes = sum(int(a.nbytes) for a in inputs)
    noun = "input" if len(inputs) == 1 else "inputs"
    return f"{len(inputs)} {noun}, {progress.fmt_count(cells)} cells ({progress.fmt_bytes(nbytes)})"


def _extract(
    result: Any,
    inputs: list[F64],
    mode: Mode,
    on_lost: OnLost,
    name: str,
    run: DeferredRun | None = None,
) -> CaptureResult:
    """The result of a completed annotated run (the capture still running): the stored
    tables of each tracked output; under ``on_lost="all_to_all"`` an output returned without
    lineage keeps the value the function gave and is related to every input (flagged)."""
    outs, is_tuple = split_outputs(result)
    shapes = [tuple(int(d) for d in a.shape) for a in inputs]
    tables: dict[tuple[int, int], LineageTable] = {}
    considered: dict[tuple[int, int], LineageTable] | None = {} if mode == "considered" else None
    plain: list[npt.NDArray[Any]] = []
    lost: list[str] = []
    # a result still deferred carries its lineage as maps; one whose run switched is its twin.
    # Any other output is read by the native extraction, which needs every input annotated
    # (a tracked array made outside the run, or none at all: it is refused as before)
    if run is not None and not all(isinstance(o, DeferredArray) for o in outs):
        run.switch()
    # a deferred array of another capture is stale: twin() raises StaleLineageError
    outs = [
        o.twin() if isinstance(o, DeferredArray) and (not o.deferred or not o.of(run)) else o
        for o in outs
    ]
    for o, out in enumerate(outs):
        if isinstance(out, DeferredArray):
            outs[o] = out.plain()
            plain.append(_deferred_output(out, o, inputs, shapes, tables, considered))
            continue
        try:
            arr = tracked_output(out, o, name)
        except LineageLostError as e:
            if on_lost != "all_to_all":
                raise
            plain.append(_plain_output(out, o))
            lost.append(str(e))
            continue
        if isinstance(out, Positions):
            plain.append(output_values(out, arr))
            contributing = extract_tables(arr, shapes)
        else:  # its values and contributing lineage from one read of the output
            values, contributing = values_and_tables(arr, shapes)
            plain.append(values)
        for i, table in enumerate(contributing):
            tables[(o, i)] = table
        if considered is not None:
            for i, table in enumerate(extract_tables(arr, shapes, True)):
                considered[(o, i)] = table
    value = plain_value(plain, outs, is_tuple)
    if lost:
        return _all_to_all_result(plain, value, inputs, mode, " ".join(lost), (tables, considered))
    return CaptureResult(
        value=value,
        outputs=tuple(plain),
        input_shapes=tuple(shapes),
        relations=LazyRelations(tables),
        considered=None if considered is None else LazyRelations(considered),
        mode=mode,
        annotation_bytes=int(_annotator.stats().get("bytes_used", 0)),
        tables=tables,
        considered_tables=considered,
    )


def _deferred_output(
    out: DeferredArray,
    o: int,
    inputs: Sequence[F64],
    shapes: list[Shape],
    tables: dict[tuple[int, int], LineageTable],
    considered: dict[tuple[int, int], LineageTable] | None,
) -> npt.NDArray[np.float64]:
    """Output ``o`` still deferred: its values as the plain run computed them (a copy when
    they are an input's own array) and its tables from its maps, one row per input; the
    considered cells of the fast path's operations are their contributing ones."""
    value = np.asarray(out.plain(), dtype=np.float64)
    if any(value is a for a in inputs):
        value = value.copy()
    out_shape = tuple(int(d) for d in value.shape)
    for i, shape in enumerate(shapes):
        table = stored_table(map_table(out.maps(), i, out_shape, shape))
        tables[(o, i)] = table
        if considered is not None:
            considered[(o, i)] = table
    return value


_DEFAULT = Capture()
