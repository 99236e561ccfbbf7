"""The runtime of one tracked step: what the decorator starts and the IO manager finishes.

A materialization of a tracked step has two halves that run in the same process, in-process and
multiprocess executors alike: the step's compute (the decorators' wrapper) and its IO manager
(``load_input`` before, ``handle_output`` after). Dagster gives both halves the same
``StepExecutionContext`` object — the op context's ``get_step_execution_context()`` and the IO
manager contexts' ``step_context`` — so the :class:`TrackedStep` of a step is attached to that
object (:meth:`TrackedStep.of`) and both halves reach it through their own Dagster context:

* the IO manager offers the Spark frames it loaded *with* their row ids
  (:meth:`TrackedStep.offer_frame_input`); the wrapper takes them before running user code;
* the wrapper hands one :class:`PendingLineage` per output over after user code succeeded
  (:meth:`TrackedStep.hand_over`); ``handle_output`` takes it, stores the value, and only then
  registers the operation in the store.

So a failure in user code hands nothing over and writes no lineage, and a failure writing
lineage raises inside ``handle_output`` and fails the step. The attachment is a weak mapping
keyed by the step context: the runtime lives exactly as long as Dagster's step context, and
nothing of a step outlives it (no attribute is set on Dagster's object).

This module does not import Dagster, so the hand-off can be unit-tested and reused by other
front ends.
"""

import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from dslog_dagster.core.characters import CharacterLineage
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.policy import CapturePolicy, LineageMode

__all__ = ["FrameSource", "InputRef", "PendingLineage", "TrackedStep", "peek_pending"]


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
    of opening it again (opening re-reads the store's id file). ``policy`` and ``mode`` accept
    their plain strings too.
    """

    op_name: str
    op_args: dict[str, Any]
    policy: CapturePolicy
    mode: LineageMode
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
    input_shapes: tuple[tuple[int, ...], ...] | None = None
    """The tracked inputs' shapes when no relations describe them (an on-demand step)."""
    characters: CharacterLineage | None = None
    """The output's character-range lineage (``characters=True`` on a Spark or pandas step);
    its tables' ``input`` name the step's parameters (``InputRef.arg``)."""
    effects: OperationEffects | None = None
    """The operation's DPDS kinds and column effects from a pandas or Spark capture (a NumPy
    step's are read off its lineage when stored, :mod:`~dslog_dagster.core.op_kinds`)."""
    contributing: tuple[LineageRelation | LineageTable, ...] | None = None
    """A pandas step in considered mode: the contributing relations too (``relations`` holds
    the considered ones), for the OpenLineage facet's ``DIRECT`` subtypes; not stored."""

    def __post_init__(self) -> None:
        self.policy = CapturePolicy(self.policy)
        self.mode = LineageMode(self.mode)


@dataclass(frozen=True, slots=True)
class FrameSource:
    """A DataFrame input as the IO manager loaded it, for a tracked Spark step.

    User code gets the frame without its row ids; the step's capture needs the ids (lineage
    names rows by them), so the IO manager offers the frame *with* ids to the step's
    :class:`TrackedStep`, and the decorator's wrapper takes it.

    Attributes:
        frame: the stored frame including the row-id column.
        rows: its row count when known (saves a counting job), else ``None``.
        path: where it was read from.
    """

    frame: Any
    rows: int | None
    path: str


class TrackedStep:
    """The runtime of one tracked step, attached to Dagster's step execution context.

    Args:
        run_id: the run's id.
        step_key: the step's key.
    """

    def __init__(self, run_id: str, step_key: str) -> None:
        self.run_id = run_id
        self.step_key = step_key
        self._lock = threading.Lock()
        self._outputs: dict[str, PendingLineage] = {}
        self._frames: dict[str, FrameSource] = {}

    # ------------------------------------------------------------ attachment

    @classmethod
    def of(cls, step_context: Any) -> "TrackedStep":
        """The runtime attached to ``step_context`` (a Dagster ``StepExecutionContext``),
        attached now when there is none yet."""
        with _attached_lock:
            step = _attached.get(step_context)
            if step is None:
                step = cls(step_context.run_id, step_context.step.key)
                _attached[step_context] = step
            return step

    @classmethod
    def find(cls, step_context: Any) -> "TrackedStep | None":
        """The runtime attached to ``step_context``, ``None`` when none is."""
        with _attached_lock:
            return _attached.get(step_context)

    # ------------------------------------------------------------ outputs (wrapper -> IO manager)

    def hand_over(self, output_name: str, pending: PendingLineage) -> None:
        """Hand ``pending`` to the IO manager that will handle output ``output_name``."""
        with self._lock:
            self._outputs[output_name] = pending

    def take(self, output_name: str) -> PendingLineage | None:
        """Take the lineage handed over for ``output_name`` (``None``: nothing was)."""
        with self._lock:
            return self._outputs.pop(output_name, None)

    def peek(self, output_name: str) -> PendingLineage | None:
        """The lineage handed over for ``output_name``, without taking it (diagnostics)."""
        with self._lock:
            return self._outputs.get(output_name)

    # ------------------------------------------------------------ inputs (IO manager -> wrapper)

    def offer_frame_input(self, input_name: str, source: FrameSource) -> None:
        """Offer the loaded frame ``source`` of input ``input_name`` to the step's wrapper."""
        with self._lock:
            self._frames[input_name] = source

    def take_frame_input(self, input_name: str) -> FrameSource | None:
        """The frame (with row ids) the IO manager loaded for this input, if it did."""
        with self._lock:
            return self._frames.pop(input_name, None)

    def discard(self) -> None:
        """Drop everything handed over or offered (the step's user code failed)."""
        with self._lock:
            self._outputs.clear()
            self._frames.clear()


# Weak keys: an entry dies with Dagster's step context, so no step outlives its own.
_attached: "weakref.WeakKeyDictionary[Any, TrackedStep]" = weakref.WeakKeyDictionary()
_attached_lock = threading.Lock()


def peek_pending(run_id: str, step_key: str, output_name: str) -> PendingLineage | None:
    """The lineage handed over for an output of any live step, without taking it (tests,
    diagnostics: a failed or finished step has none)."""
    with _attached_lock:
        steps = list(_attached.values())
    for step in steps:
        if step.run_id == run_id and step.step_key == step_key:
            pending = step.peek(output_name)
            if pending is not None:
                return pending
    return None
