"""How a tracked step obtains its lineage, and how it hands it to the IO manager.

Two halves of one materialization run in the same process (in-process and multiprocess
executors alike): the step's compute (the decorators' wrapper) and the IO manager's
``handle_output``. The wrapper calls :func:`obtain_lineage` — **the one place that calls
:func:`dslog_dagster.core.capture.capture`** (or ``ViewRegistry.capture``, which wraps it) —
and puts one :class:`PendingLineage` per output into a process-local stash keyed by
``(run_id, step_key, output_name)``; the IO manager pops it with :func:`pop_pending`, stores
the value, and only then registers the operation in the store.
So a failure in user code leaves nothing in the stash and writes no lineage, and a failure
writing lineage raises inside ``handle_output`` and fails the step.

This module does not import Dagster (the decorators and IO managers do), so the hand-off can be
unit-tested and reused by other front ends.
"""

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dslog_dagster.core.capture import CaptureResult, OnLost, as_input, capture
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation

if TYPE_CHECKING:
    from dslog_dagster.core.reuse import Need, ViewRegistry

__all__ = [
    "POLICIES",
    "FrameSource",
    "InputRef",
    "Mode",
    "PendingLineage",
    "Policy",
    "lineage_of",
    "obtain_lineage",
    "peek_pending",
    "pop_frame_input",
    "pop_pending",
    "stash_frame_input",
    "stash_pending",
]

#: Per-asset capture policy.
#:
#: * ``"capture"`` — run the step under the annotator; a step whose lineage would be lost fails
#:   with :class:`~dslog_dagster.errors.LineageLostError`.
#: * ``"all_to_all"`` — like ``"capture"``, but where lineage would be lost record the explicit
#:   all-to-all relation instead (an over-approximation), flagged in the metadata.
#: * ``"reuse_only"`` — never annotate; take lineage from a confirmed reuse view only. Without
#:   one the step runs unchanged and records **no** lineage, and ``dslog/status`` says so.
#: * ``"off"`` — run the step unchanged and record nothing.
Policy = Literal["capture", "reuse_only", "off", "all_to_all"]
POLICIES: tuple[str, ...] = ("capture", "reuse_only", "off", "all_to_all")
Mode = Literal["contributing", "considered"]


@dataclass(frozen=True, slots=True)
class InputRef:
    """One upstream array version a step read.

    Attributes:
        arg: the compute function's parameter name.
        name: the store's array name (:func:`dslog_dagster.naming.array_name` for assets).
        version: the array version (the Dagster run id that produced it), ``None`` if unknown.
        asset_key: the upstream asset key as ``"a/b"`` (``None`` for op outputs).
    """

    arg: str
    name: str
    version: str | None
    asset_key: str | None


@dataclass(slots=True)
class PendingLineage:
    """What a tracked step hands to the IO manager for one output.

    ``relations`` holds, for each tracked input (by position in ``inputs``), the lineage
    ``output <- input``: a :class:`LineageTable` when it is already compressed (a served reuse
    view, or a capture the registry compressed), else the :class:`LineageRelation`. It is
    ``None`` when no lineage was obtained (see ``status``). Spark steps hand tables too, and
    for a DataFrame output the ``frame`` capture whose row ids the lineage names (the IO manager
    must store exactly those rows), its ``column_lineage`` (``{output column: {input arg:
    [input columns]}}``) and the store's ``capture_method``. ``store`` is the
    :class:`~dslog_dagster.core.LineageStore` handle the step opened (for its reuse registry),
    which the IO manager writes with when it is the handle of its own store directory, instead
    of opening it again (opening re-reads the store's id file).
    """

    op_name: str
    op_args: dict[str, Any]
    policy: str
    mode: str
    inputs: tuple[InputRef, ...] = ()
    relations: tuple[LineageRelation | LineageTable, ...] | None = None
    obtained: str = "captured"
    signature: str | None = None
    flagged: bool = False
    reason: str | None = None
    status: str | None = None
    capture_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    annotation_bytes: int = 0
    frame: Any = None
    column_lineage: dict[str, dict[str, list[str]]] | None = None
    capture_method: str | None = None
    store: Any = None


# ------------------------------------------------------------------ obtaining lineage


def obtain_lineage(
    func: Callable[..., Any],
    arrays: Sequence[np.ndarray],
    *,
    policy: Policy,
    mode: Mode,
    code_version: str,
    signature_args: dict[str, Any],
    reuse: "ViewRegistry | None" = None,
) -> tuple[CaptureResult | None, float]:
    """Run ``func(*tracked arrays)`` and obtain its lineage. THE single call to ``capture``.

    With ``reuse`` (a :class:`~dslog_dagster.core.reuse.ViewRegistry`), a confirmed view that
    matches serves the lineage and ``func`` runs on plain float64 arrays; otherwise the step is
    captured and the registry learns from it. ``CaptureResult.obtained`` says which happened
    ("captured", "base", "dim", "gen") and ``.signature`` names the view.

    Args:
        code_version: the step's code identity (op name, asset code version and a hash of the
            user function), so changing the function invalidates its views.
        signature_args: what else decides the lineage besides the arrays' shapes (config,
            partition key, untracked inputs); passed to ``func`` as keyword arguments, which it
            must ignore.

    Returns:
        ``(result, seconds)``; ``result`` is ``None`` only under ``policy="reuse_only"`` when
        no confirmed view matched (nothing ran: the caller runs the step plainly).

    In ``mode="considered"`` the step records the considered relation only, so reuse is
    asked for that relation alone (``need="considered"``): picks and sorts consider a
    shape-determined set of cells, so their views serve even though the picked cells vary.
    """
    on_lost: OnLost = "all_to_all" if policy == "all_to_all" else "raise"
    need: Need = "considered" if mode == "considered" else "all"
    t0 = time.perf_counter()
    result: CaptureResult | None
    if policy == "reuse_only":
        if reuse is None:
            return None, 0.0
        inputs = [as_input(a, k) for k, a in enumerate(arrays)]
        result = reuse.serve(
            func, inputs, mode=mode, code_version=code_version, kwargs=signature_args, need=need
        )
    elif reuse is not None:
        result = reuse.capture(
            func,
            *arrays,
            mode=mode,
            on_lost=on_lost,
            code_version=code_version,
            need=need,
            **signature_args,
        )
    else:
        result = capture(func, *arrays, mode=mode, on_lost=on_lost, **signature_args)
    return result, time.perf_counter() - t0


def lineage_of(
    result: CaptureResult, output: int, input: int, *, considered: bool
) -> LineageRelation | LineageTable:
    """The lineage of ``output <- input`` in the cheapest form the store accepts.

    A served view (and a capture the registry already compressed) carries ProvRC tables: the
    store registers those as they are, so a reuse hit neither expands the relation cell by cell
    nor compresses it again — that round trip used to cost more than the step itself.
    """
    if not considered and result.tables is not None:
        table = result.tables.get((output, input))
        if table is not None:
            return table
    return result.relation(output, input, considered=considered)


# ------------------------------------------------------------------ hand-off stash

_Key = tuple[str, str, str]
_lock = threading.Lock()
_pending: dict[_Key, PendingLineage] = {}
_frames: dict[_Key, "FrameSource"] = {}
# Entries of runs other than the most recent few are dropped, so a tracked step whose IO
# manager never pops (a plain IO manager) cannot grow the stash without bound.
_KEEP_RUNS = 8
_runs: list[str] = []


def stash_pending(run_id: str, step_key: str, output_name: str, pending: PendingLineage) -> None:
    """Hand ``pending`` to the IO manager that will handle ``output_name`` of ``step_key``."""
    with _lock:
        _note_run(run_id)
        _pending[(run_id, step_key, output_name)] = pending


def _note_run(run_id: str) -> None:
    """Remember ``run_id``; drop stashed entries of runs older than the last few (under lock)."""
    if run_id in _runs:
        return
    _runs.append(run_id)
    if len(_runs) > _KEEP_RUNS:
        stale = set(_runs[:-_KEEP_RUNS])
        del _runs[:-_KEEP_RUNS]
        for stash in (_pending, _frames):
            for k in [k for k in stash if k[0] in stale]:
                del stash[k]


def pop_pending(run_id: str, step_key: str, output_name: str) -> PendingLineage | None:
    """Take the lineage stashed for this output (``None`` when the step is not tracked)."""
    with _lock:
        return _pending.pop((run_id, step_key, output_name), None)


def peek_pending(run_id: str, step_key: str, output_name: str) -> PendingLineage | None:
    """The stashed lineage without removing it (tests, diagnostics)."""
    with _lock:
        return _pending.get((run_id, step_key, output_name))


# ------------------------------------------------------------------ frame inputs


@dataclass(frozen=True, slots=True)
class FrameSource:
    """A DataFrame input as the IO manager loaded it, for a tracked Spark step.

    User code gets the frame without its row ids; the step's capture needs the ids (lineage
    names rows by them), so the IO manager hands the frame *with* ids over here, keyed like the
    pending lineage, and the decorator's wrapper pops it.

    Attributes:
        frame: the stored frame including the row-id column.
        rows: its row count when known (saves a counting job), else ``None``.
        path: where it was read from.
    """

    frame: Any
    rows: int | None
    path: str


def stash_frame_input(run_id: str, step_key: str, input_name: str, source: FrameSource) -> None:
    """Hand the loaded frame ``source`` of input ``input_name`` to the step's wrapper."""
    with _lock:
        _note_run(run_id)
        _frames[(run_id, step_key, input_name)] = source


def pop_frame_input(run_id: str, step_key: str, input_name: str) -> FrameSource | None:
    """The frame (with row ids) the IO manager loaded for this input, if it did."""
    with _lock:
        return _frames.pop((run_id, step_key, input_name), None)
