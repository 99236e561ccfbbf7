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

Steps of other engines (Spark DataFrames) record ``args["on_demand"]["engine"]``; their re-run
is an :data:`Engine` registered by the engine's package (:func:`register_engine`, e.g.
:mod:`dslog_dagster.spark.on_demand`), since this package imports no DataFrame engine. An
engine may also reconstruct *selectively*: only the lineage of a few selected output rows,
from a re-run that reads a fraction of the inputs (PROVision §V-C). pandas steps, re-run here,
do the same through a :data:`Selective` function :mod:`dslog_dagster.pandas.selective`
registers (it re-runs a step whose pandas calls keep rows of different keys apart on the input
rows of the selected keys). :func:`trace` uses either for a deferred hop the query reaches
with few rows; that lineage answers the query but is never registered as the step's lineage
(it covers the selection only), and a step that cannot be re-run selectively is re-run whole,
its :attr:`Reconstruction.note` saying why.

Functions are found in a process-wide registry (:func:`register_step_function`), filled when the
module that defines a step is imported (the Dagster decorators do it), so any process of the
code location can reconstruct.
"""

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dslog_dagster.core.capture import Capture, is_pandas
from dslog_dagster.core.capture import Mode as CaptureMode
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.query import CellSet, as_cells
from dslog_dagster.core.query.engine import prepare
from dslog_dagster.core.reuse.keys import code_identity
from dslog_dagster.core.reuse.recall import recall
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.errors import DeferredLineageError, ReconstructionError

if TYPE_CHECKING:
    from dslog_dagster.core.reuse import ViewRegistry

__all__ = [
    "DEFERRED",
    "RECONSTRUCTED",
    "Engine",
    "Reconstruction",
    "Rerun",
    "Selection",
    "ValueLoader",
    "answering",
    "deferred_args",
    "deferred_error",
    "function_key",
    "is_deferred",
    "reconstruct",
    "reconstruct_rows",
    "register_engine",
    "register_selective",
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
    engine: str | None = None,
    reuse: dict[str, Any] | None = None,
    *,
    defer: bool = True,
) -> dict[str, Any]:
    """What a deferred operation records in ``args["on_demand"]``: the function's key and
    code identity, the step's parameter per input array name, the lineage mode, the engine
    that re-runs it (``None``: NumPy arrays and pandas DataFrames, re-run here),
    (``reuse``) the name, code version and keyword arguments its captures are keyed by in the
    reuse registry, so a confirmed view can answer for it, and ``"defer": False`` when the
    step's NumPy re-run must get annotated ndarrays from the start
    (:attr:`~dslog_dagster.core.capture.Capture.defer`; absent: deferred, the default, so
    records made before the option read the same)."""
    info: dict[str, Any] = {
        "function": function_key(fn),
        "code": code_identity(fn),
        "inputs": dict(inputs),
        "mode": mode,
    }
    if engine is not None:
        info["engine"] = engine
    if reuse is not None:
        info["reuse"] = dict(reuse)
    if not defer:
        info["defer"] = False
    return info


@dataclass(frozen=True, slots=True)
class Rerun:
    """What an :data:`Engine` gets to re-run deferred operation ``op`` under capture.

    Attributes:
        op: the deferred operation.
        call: ``call(*inputs)`` runs the step's function on values for its tracked inputs
            (in ``op``'s recorded input order) with its recorded config.
        inputs: the loaded input values, in that order.
        load_output: ``load_output(k)`` is the stored value of output ``k`` (refuses when gone).
        mode: the lineage mode the step recorded.
        refuse: builds the :class:`~dslog_dagster.errors.ReconstructionError` of a reason.
        records: the input array versions, in the order of ``inputs`` (which is the step's
            parameter order, not necessarily ``op.inputs``'s).
    """

    op: OperationRecord
    call: Callable[..., Any]
    inputs: tuple[Any, ...]
    load_output: Callable[[int], Any]
    mode: CaptureMode
    refuse: Callable[[str], ReconstructionError]
    records: tuple[ArrayRecord, ...] = ()


Engine = Callable[[Rerun, dict[int, np.ndarray] | None], dict[tuple[int, int], LineageTable]]
"""Re-runs a deferred operation of its engine under capture: ``engine(rerun, rows)`` checks
the outputs against the stored ones and returns the lineage table of every ``(output index,
input index)``, naming the stored outputs' rows. ``rows`` (``{output index: stored row
ids}``), when given, asks only for the lineage of those rows of those outputs (a table of
the output's full shape holding theirs alone; other outputs are left out); ``None`` asks for
all of it. Raises :class:`~dslog_dagster.errors.ReconstructionError` through
``rerun.refuse``."""

_ENGINES: dict[str, Engine] = {}


def register_engine(name: str, engine: Engine) -> None:
    """Make deferred operations recorded with ``engine=name`` re-runnable in this process."""
    _ENGINES[name] = engine


def is_deferred(op: OperationRecord) -> bool:
    return op.capture_method == DEFERRED


@dataclass(frozen=True, slots=True)
class Reconstruction:
    """What :func:`reconstruct` did: the new operation, how long it took, and how the lineage
    was obtained: ``"re-run"`` (the step re-ran under capture; registered as ``operation``),
    ``"base view"`` / ``"dim view"`` / ``"gen view"`` (taken from a confirmed reuse view,
    nothing ran), or ``"selective re-run"`` (the lineage of selected rows only, from a re-run
    on a fraction of the inputs, :func:`trace`; ``operation`` is ``None``: nothing is
    registered, and ``rows`` says how many rows were selected). ``note`` says more: for a
    selective re-run, the key and how many input rows it read; for a whole-step re-run that
    :func:`trace` chose because the step could not be re-run selectively, why not."""

    deferred: OperationRecord
    operation: OperationRecord | None
    seconds: float
    obtained: str = "re-run"
    rows: int | None = None
    note: str = ""

    @property
    def how(self) -> str:
        """How the lineage was obtained, in words (``obtained`` and ``note``)."""
        return f"{self.obtained} ({self.note})" if self.note else self.obtained


@dataclass(frozen=True, slots=True)
class Selection:
    """What a :data:`Selective` reconstruction gives: the lineage of the selected rows
    (``{(output index, input index): table}``, as an :data:`Engine` returns it) and how it
    was obtained, or ``tables=None`` and why it could not be."""

    tables: dict[tuple[int, int], LineageTable] | None
    note: str


Selective = Callable[[Rerun, int, np.ndarray], Selection]
"""Reconstructs the lineage of stored rows ``rows`` of output ``output`` of a deferred pandas
step alone: ``selective(rerun, output, rows)`` (:mod:`dslog_dagster.pandas.selective`)."""

_SELECTIVE: list[Selective] = []


def register_selective(fn: Selective) -> None:
    """Make deferred pandas steps reconstructible row by row in this process."""
    _SELECTIVE[:] = [fn]


def _refuse(op: OperationRecord, why: str) -> ReconstructionError:
    return ReconstructionError(
        f"Cannot reconstruct the lineage of `{op.op_name}` (operation `{op.op_id}`, "
        f"on-demand): {why}"
    )


def _prepare(
    store: LineageStore, op: OperationRecord | str, load: ValueLoader
) -> tuple[Rerun, dict[str, Any], list[str]]:
    """Check deferred ``op`` can be re-run here and load its inputs: the engine's request,
    the recorded re-run information and the input array names (in ``op``'s input order)."""
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
    records: list[ArrayRecord] = []
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
        records.append(by_name[name])
    mode: CaptureMode = "considered" if info.get("mode") == "considered" else "contributing"
    rebuild = _EXTRA.get(str(info.get("function")))
    try:
        extra = rebuild(dict(rec.args)) if rebuild is not None else {}
    except Exception as e:  # a recorded config the step's Config class no longer accepts
        raise _refuse(rec, f"its recorded arguments no longer build: {e}") from e

    def call(*values: Any) -> Any:
        return fn(**dict(zip(names, values, strict=True)), **extra)

    def load_output(k: int) -> Any:
        out = rec.outputs[k]
        stored = load(out)
        if stored is None:
            raise _refuse(
                rec, f"the stored value of output `{out.name}` version `{out.version}` is gone."
            )
        return stored

    rerun = Rerun(
        rec, call, tuple(args), load_output, mode, lambda why: _refuse(rec, why), tuple(records)
    )
    return rerun, info, list(params)


def _engine(rec: OperationRecord, info: dict[str, Any]) -> Engine | None:
    name = info.get("engine")
    if name is None:
        return None
    engine = _ENGINES.get(str(name))
    if engine is None:
        raise _refuse(
            rec,
            f"it is a `{name}` step, and no `{name}` engine is loaded in this process; import "
            f"`dslog_dagster.{name}` (it registers the engine) first.",
        )
    return engine


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
    rerun, info, in_names = _prepare(store, op, load)
    rec = rerun.op
    t0 = time.perf_counter()
    engine = _engine(rec, info)
    reuse = info.get("reuse")
    if (
        views is not None
        and engine is None
        and isinstance(reuse, dict)
        and not any(is_pandas(a) for a in rerun.inputs)
    ):
        done = _from_view(store, rec, views, reuse, list(rerun.inputs), rerun.mode, t0)
        if done is not None:
            return done
    by_index = engine(rerun, None) if engine is not None else _rerun_here(rerun)
    seconds = time.perf_counter() - t0
    lineage = {(rec.outputs[o].name, in_names[i]): t for (o, i), t in by_index.items()}
    kept = {k: v for k, v in rec.args.items() if k != "on_demand"}
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


def reconstruct_rows(
    store: LineageStore, op: OperationRecord | str, load: ValueLoader, output: int, rows: Any
) -> tuple[dict[str, LineageTable] | None, Reconstruction]:
    """The lineage of stored rows ``rows`` of output ``output`` of deferred ``op`` alone, from
    a selective re-run (PROVision §V-C), when its engine reconstructs selectively.

    Returns ``(None, ...)`` when it cannot (a NumPy step, a pandas step that is not
    row-selective — :mod:`dslog_dagster.pandas.selective` — or a re-run that could not
    reproduce the selection from a reduced run; :attr:`Reconstruction.note` says why); else
    one table per input array version (by ``array_id``) of the output's full shape holding
    the selected rows' lineage only, and how it was obtained (``"selective re-run"``).
    Nothing is registered.

    Raises:
        ReconstructionError: as :func:`reconstruct`.
    """
    rerun, info, _ = _prepare(store, op, load)
    engine = _engine(rerun.op, info)
    t0 = time.perf_counter()
    picked = np.unique(np.asarray(rows, dtype=np.int64))
    note = ""
    if engine is not None:
        by_index = engine(rerun, {output: picked})
    elif rerun.inputs and all(is_pandas(a) for a in rerun.inputs):
        # the pandas side registers itself when imported (the core never imports pandas)
        importlib.import_module("dslog_dagster.pandas.selective")
        got = _SELECTIVE[0](rerun, output, picked)
        if got.tables is None:
            return None, Reconstruction(rerun.op, None, 0.0, note=got.note)
        by_index, note = got.tables, got.note
    else:
        return None, Reconstruction(rerun.op, None, 0.0)  # NumPy: views or a whole re-run
    seconds = time.perf_counter() - t0
    tables: dict[str, LineageTable] = {}
    for i, rec in enumerate(rerun.records):
        t = by_index.get((output, i))
        if t is None:
            why = note or "the reduced re-run did not give the selected rows"
            return None, Reconstruction(rerun.op, None, seconds, note=why)
        tables.setdefault(rec.array_id, t)
    return tables, Reconstruction(rerun.op, None, seconds, "selective re-run", len(picked), note)


def _rerun_here(rerun: Rerun) -> dict[tuple[int, int], LineageTable]:
    """Re-run a NumPy or pandas step under :class:`Capture` and check its outputs."""
    rec, args = rerun.op, rerun.inputs
    defer = (rec.args.get("on_demand") or {}).get("defer", True) is not False
    result = Capture(mode=rerun.mode, defer=defer).run(rerun.call, *args)
    outputs: list[Any]
    if any(is_pandas(a) for a in args):  # compare the frames themselves (names, dtypes, NaN)
        outputs = list(result.value) if isinstance(result.value, tuple) else [result.value]
    else:
        outputs = list(result.outputs)
    if len(outputs) != len(rec.outputs):
        msg = f"it now returns {len(outputs)} output(s), not {len(rec.outputs)}."
        raise rerun.refuse(msg)
    for k, out in enumerate(rec.outputs):
        if not _same(outputs[k], rerun.load_output(k)):
            msg = (
                f"re-running it does not give the stored `{out.name}` version `{out.version}` "
                "(the step is not deterministic, or it reads something besides its inputs)."
            )
            raise rerun.refuse(msg)
    tables = result.considered_tables if rerun.mode == "considered" else result.tables
    return dict(tables or {})


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
    selective: bool = True,
    max_rows: int = 100_000,
    views: "ViewRegistry | None" = None,
) -> tuple[CellSet, list[Reconstruction]]:
    """A path query (:meth:`DSLog.prov_query`) that first reconstructs every deferred
    operation the path crosses (from ``views`` where a confirmed view knows the lineage, see
    :func:`reconstruct`); returns the answer and what was reconstructed.

    A deferred hop the query crosses backward with at most ``max_rows`` selected rows of a
    Spark step, or of a row-selective pandas step, is answered from the lineage of those rows
    alone (:func:`reconstruct_rows`, ``obtained="selective re-run"``), which is not
    registered; ``selective=False``, or a hop it cannot serve, reconstructs (and registers)
    the step's whole lineage instead, and its :attr:`Reconstruction.note` says why the
    selective re-run was not used."""
    done: list[Reconstruction] = []
    plan = dslog.plan(path)
    if not any(h.prepared is None and is_deferred(h.operation) for h in plan.hops):
        return plan.run(cells), done
    cur = as_cells(plan.source.shape, cells)
    for k in range(len(plan.hops)):
        hop = plan.hops[k]
        if hop.prepared is not None or not is_deferred(hop.operation):
            cur = hop.run(cur)
            continue
        op = hop.operation
        why = ""
        if selective and hop.direction == "backward" and not cur.is_empty():
            rows = _selected_rows(cur, max_rows)
            if rows is not None:
                out_k = [a.array_id for a in op.outputs].index(hop.src.array_id)
                tables, r = reconstruct_rows(dslog.store, op, load, out_k, rows)
                if tables is not None:
                    done.append(r)
                    cur = prepare(tables[hop.dst.array_id]).run(cur, "backward")
                    continue
                why = f"whole step: not selective, {r.note}" if r.note else ""
            else:
                why = f"whole step: more than {max_rows:,} rows selected"
        whole = reconstruct(dslog.store, op, load, views=views)
        done.append(replace(whole, note=why) if why and not whole.note else whole)
        # the reconstructed operation is newer: the path takes it now
        cur = dslog.plan(path).hops[k].run(cur)
    return cur, done


def _selected_rows(cells: CellSet, limit: int) -> np.ndarray | None:
    """The rows (first axis) ``cells`` touch, or ``None`` when more than ``limit``."""
    lo, hi = cells.start[:, 0], cells.stop[:, 0]
    if int((hi - lo).sum()) > limit:
        return None
    return np.unique(np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)]))
