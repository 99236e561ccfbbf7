"""Lineage on demand (PROVision §III, §V): record how to re-run a step, capture only when asked.

A step run with ``policy="on_demand"`` runs exactly as untracked code does. What it leaves in
the store is a *deferred* operation (``capture_method == "on-demand"``): its input and output
array versions and, in ``args["on_demand"]``, what re-running it needs — the function's
registry key and code identity and the step's argument names per input array — but no lineage
tables. The values themselves are kept by version (the Dagster IO manager does that).

When a query needs the lineage of a deferred operation, :func:`reconstruct` re-runs the step
under capture on the recorded input versions (NumPy arrays through the annotator, pandas
DataFrames through :mod:`dslog_dagster.pandas`), checks that the recomputed outputs equal the
stored versions **bit for bit** (refusing when the code changed, a value expired, or the step
is not deterministic), and registers the captured lineage as a new operation over the same
array versions (``capture_method == "on-demand-reconstructed"``, ``args["reconstructs"]``
naming the deferred one). Every later query uses it without re-running anything: paths and
traces take the most recent operation of an array version.

A query that meets a deferred operation without reconstructing it raises
:class:`~dslog_dagster.errors.DeferredLineageError` (never an empty answer);
:func:`trace` is a path query that reconstructs what the path needs first.

Functions are found in a process-wide registry (:func:`register_step_function`), filled when the
module that defines a step is imported (the Dagster decorators do it), so any process of the
code location can reconstruct.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dslog_dagster.core.capture import Capture, is_pandas
from dslog_dagster.core.capture import Mode as CaptureMode
from dslog_dagster.core.query import CellSet
from dslog_dagster.core.reuse.keys import code_identity
from dslog_dagster.core.reuse.recall import recall
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.errors import DeferredLineageError, ReconstructionError

if TYPE_CHECKING:
    from dslog_dagster.core.reuse import ViewRegistry

__all__ = [
    "DEFERRED",
    "RECONSTRUCTED",
    "Reconstruction",
    "ValueLoader",
    "answering",
    "deferred_args",
    "deferred_error",
    "function_key",
    "is_deferred",
    "reconstruct",
    "register_step_function",
    "step_function",
    "trace",
]

DEFERRED = "on-demand"
"""``capture_method`` of an operation whose lineage is reconstructed when asked for."""

RECONSTRUCTED = "on-demand-reconstructed"
"""``capture_method`` of the operation a reconstruction registers."""

ValueLoader = Callable[[ArrayRecord], Any]
"""The stored value of an array version: a NumPy array, or a pandas DataFrame for a frame
(``None``: not stored or expired)."""

_FUNCTIONS: dict[str, Callable[..., Any]] = {}
_EXTRA: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
T = TypeVar("T")


def function_key(fn: Callable[..., Any]) -> str:
    """The registry key of a step function: ``module:qualname``."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def register_step_function(
    fn: Callable[..., Any], extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> str:
    """Make ``fn`` re-runnable by :func:`reconstruct` in this process; returns its key.

    ``extra`` rebuilds the keyword arguments that are not tracked arrays (a step's config)
    from the deferred operation's recorded ``args``.
    """
    key = function_key(fn)
    _FUNCTIONS[key] = fn
    if extra is None:
        _EXTRA.pop(key, None)
    else:
        _EXTRA[key] = extra
    return key


def step_function(key: str) -> Callable[..., Any] | None:
    """The registered function of ``key`` (``None``: its module was not imported here)."""
    return _FUNCTIONS.get(key)


def deferred_args(
    fn: Callable[..., Any],
    inputs: dict[str, str],
    mode: CaptureMode,
    reuse: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a deferred operation records in ``args["on_demand"]``: the function's key and
    code identity, the step's parameter per input array name, the lineage mode, and (``reuse``)
    the name, code version and keyword arguments its captures are keyed by in the reuse
    registry, so a confirmed view can answer for it."""
    info = {
        "function": function_key(fn),
        "code": code_identity(fn),
        "inputs": dict(inputs),
        "mode": mode,
    }
    if reuse is not None:
        info["reuse"] = dict(reuse)
    return info


def is_deferred(op: OperationRecord) -> bool:
    return op.capture_method == DEFERRED


@dataclass(frozen=True, slots=True)
class Reconstruction:
    """What :func:`reconstruct` did: the new operation, how long it took, and how the lineage
    was obtained (``"re-run"``: the step re-ran under capture; ``"base view"``, ``"dim view"``,
    ``"gen view"``: taken from a confirmed reuse view, nothing ran)."""

    deferred: OperationRecord
    operation: OperationRecord
    seconds: float
    obtained: str = "re-run"


def _refuse(op: OperationRecord, why: str) -> ReconstructionError:
    return ReconstructionError(
        f"Cannot reconstruct the lineage of `{op.op_name}` (operation `{op.op_id}`, "
        f"on-demand): {why}"
    )


def reconstruct(
    store: LineageStore,
    op: OperationRecord | str,
    load: ValueLoader,
    *,
    views: "ViewRegistry | None" = None,
) -> Reconstruction:
    """Re-run deferred operation ``op`` under capture and register its lineage.

    With ``views`` (the store's reuse registry), a NumPy step that recorded its reuse key
    takes its lineage from a confirmed view checked on exactly these inputs instead
    (:func:`~dslog_dagster.core.reuse.recall.recall`): nothing re-runs, and
    :attr:`Reconstruction.obtained` names the view's kind.

    Raises:
        ReconstructionError: not a deferred operation; its function is not importable here or
            its code changed; an input or output value is not stored (expired by retention);
            the recomputed output differs from the stored one (not deterministic).
    """
    rec = op if isinstance(op, OperationRecord) else store.get_operation(op)
    if not is_deferred(rec):
        raise _refuse(rec, f"it was recorded as `{rec.capture_method}`, not on demand.")
    info = rec.args.get("on_demand")
    if not isinstance(info, dict):
        raise _refuse(rec, "its record has no re-run information.")
    fn = step_function(str(info.get("function")))
    if fn is None:
        raise _refuse(
            rec,
            f"its function `{info.get('function')}` is not registered in this process; import "
            "the module that defines the step (the code location's definitions) first.",
        )
    if code_identity(fn) != info.get("code"):
        raise _refuse(
            rec,
            f"the code of `{info.get('function')}` changed since the step ran; re-materialize "
            "the asset to record lineage for the new code.",
        )
    params: dict[str, str] = dict(info.get("inputs") or {})
    by_name = {a.name: a for a in rec.inputs}
    args: list[Any] = []
    names: list[str] = []
    for name, param in params.items():
        if name not in by_name:
            raise _refuse(rec, f"its record names input `{name}`, which it did not read.")
        value = load(by_name[name])
        if value is None:
            raise _refuse(
                rec,
                f"the value of input `{name}` version `{by_name[name].version}` is not stored "
                "(expired by retention?); raise keep_last / keep_for_hours to keep the values "
                "on-demand lineage needs.",
            )
        args.append(value)
        names.append(param)
    mode: CaptureMode = "considered" if info.get("mode") == "considered" else "contributing"
    t0 = time.perf_counter()
    kept = {k: v for k, v in rec.args.items() if k != "on_demand"}
    in_names = list(params)
    reuse = info.get("reuse")
    if views is not None and isinstance(reuse, dict) and not any(is_pandas(a) for a in args):
        done = _from_view(store, rec, views, reuse, args, mode, t0)
        if done is not None:
            return done

    rebuild = _EXTRA.get(str(info.get("function")))
    try:
        extra = rebuild(dict(rec.args)) if rebuild is not None else {}
    except Exception as e:  # a recorded config the step's Config class no longer accepts
        raise _refuse(rec, f"its recorded arguments no longer build: {e}") from e

    def call(*arrays: Any) -> Any:
        return fn(**dict(zip(names, arrays, strict=True)), **extra)

    result = Capture(mode=mode).run(call, *args)
    seconds = time.perf_counter() - t0
    outputs: list[Any] = list(result.outputs)
    if any(is_pandas(a) for a in args):  # compare the frames themselves (names, dtypes, NaN)
        outputs = list(result.value) if isinstance(result.value, tuple) else [result.value]
    if len(outputs) != len(rec.outputs):
        raise _refuse(rec, f"it now returns {len(outputs)} output(s), not {len(rec.outputs)}.")
    for k, out in enumerate(rec.outputs):
        stored = load(out)
        if stored is None:
            raise _refuse(
                rec, f"the stored value of output `{out.name}` version `{out.version}` is gone."
            )
        if not _same(outputs[k], stored):
            raise _refuse(
                rec,
                f"re-running it does not give the stored `{out.name}` version `{out.version}` "
                "(the step is not deterministic, or it reads something besides its inputs).",
            )
    tables = result.considered_tables if mode == "considered" else result.tables
    lineage = {(rec.outputs[o].name, in_names[i]): t for (o, i), t in (tables or {}).items()}
    new = store.register_operation(
        rec.op_name,
        list(rec.inputs),
        list(rec.outputs),
        lineage,
        args={"reconstructs": rec.op_id, **kept},
        capture_method=RECONSTRUCTED,
        timings={"capture_s": seconds},
    )
    return Reconstruction(rec, new, seconds)


def _from_view(
    store: LineageStore,
    rec: OperationRecord,
    views: "ViewRegistry",
    reuse: dict[str, Any],
    args: list[Any],
    mode: CaptureMode,
    t0: float,
) -> Reconstruction | None:
    """Register the lineage a confirmed view checked on exactly these inputs gives deferred
    operation ``rec`` (nothing runs); ``None`` when no view does."""
    got = recall(
        views,
        str(reuse.get("name")),
        str(reuse.get("code_version")),
        dict(reuse.get("args") or {}),
        args,
        [o.shape for o in rec.outputs],
        mode,
    )
    if got is None:
        return None
    obtained = f"{got.kind} view"
    in_names = list(rec.args["on_demand"].get("inputs") or {})
    kept = {k: v for k, v in rec.args.items() if k != "on_demand"}
    new = store.register_operation(
        rec.op_name,
        list(rec.inputs),
        list(rec.outputs),
        {(rec.outputs[o].name, in_names[i]): t for (o, i), t in got.tables.items()},
        args={"reconstructs": rec.op_id, "obtained": obtained, "view": got.signature, **kept},
        capture_method=RECONSTRUCTED,
        timings={"capture_s": time.perf_counter() - t0},
    )
    return Reconstruction(rec, new, time.perf_counter() - t0, obtained)


def _same(produced: Any, stored: Any) -> bool:
    """Does a recomputed output equal the stored value, bit for bit (NaN equal to NaN)?

    DataFrames (checked without importing pandas) must have the same column names, dtypes
    and values row by row; the row labels do not count (the stored frame's rows are named by
    position, as its lineage names them)."""
    if is_pandas(produced) or is_pandas(stored):
        if not (is_pandas(produced) and is_pandas(stored)):
            return False
        if list(produced.columns) != list(stored.columns):
            return False
        return bool(produced.reset_index(drop=True).equals(stored.reset_index(drop=True)))
    a, b = np.asarray(produced), np.asarray(stored)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True))
    return bool(np.array_equal(a, b))


def deferred_error(op: OperationRecord) -> DeferredLineageError:
    """The error of a query that met deferred operation ``op``."""
    return DeferredLineageError(
        f"The lineage of `{op.op_name}` (operation `{op.op_id}`) was not captured: the step ran "
        'with policy="on_demand". Reconstruct it first — dslog_dagster.core.on_demand.trace, '
        "`dslog trace`, or a saved lineage query with on_demand=True — then query again.",
        op.op_id,
    )


def answering(
    store: LineageStore,
    query: Callable[[], T],
    load: ValueLoader,
    *,
    limit: int = 1000,
    views: "ViewRegistry | None" = None,
) -> tuple[T, list[Reconstruction]]:
    """Run ``query`` (any lineage query), reconstructing each deferred operation it meets
    and running it again, until it answers; returns the answer and what was reconstructed.

    Raises:
        ReconstructionError: a deferred operation cannot be reconstructed.
    """
    done: list[Reconstruction] = []
    while True:
        try:
            return query(), done
        except DeferredLineageError as e:
            if not e.op_id or len(done) >= limit or e.op_id in {r.deferred.op_id for r in done}:
                raise
            done.append(reconstruct(store, e.op_id, load, views=views))


def trace(
    dslog: Any,
    path: Sequence[Any],
    cells: object,
    load: ValueLoader,
    *,
    views: "ViewRegistry | None" = None,
) -> tuple[CellSet, list[Reconstruction]]:
    """A path query (:meth:`DSLog.prov_query`) that first reconstructs every deferred
    operation the path crosses (from ``views`` where a confirmed view knows the lineage, see
    :func:`reconstruct`); returns the answer and what was reconstructed."""
    done: list[Reconstruction] = []
    plan = dslog.plan(path)
    deferred = [h.operation for h in plan.hops if h.prepared is None and is_deferred(h.operation)]
    for op in deferred:
        done.append(reconstruct(dslog.store, op, load, views=views))
    if deferred:  # the reconstructed operations are newer: the path takes them now
        plan = dslog.plan(path)
    return plan.run(cells), done
