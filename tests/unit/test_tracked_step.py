"""The runtime of a tracked step: attached to Dagster's step context, handed over once, gone
with the context (no process-wide stash outlives a step)."""

import gc
import weakref
from types import SimpleNamespace

from dslog_dagster.policy import CapturePolicy, LineageMode
from dslog_dagster.tracked_step import PendingLineage, TrackedStep


class _StepContext:
    """Stands in for Dagster's StepExecutionContext: what TrackedStep.of reads."""

    def __init__(self, run_id: str, key: str) -> None:
        self.run_id = run_id
        self.step = SimpleNamespace(key=key)


def _pending() -> PendingLineage:
    return PendingLineage(op_name="neg", op_args={}, policy="capture", mode="considered")


def test_one_runtime_per_step_context() -> None:
    a, b = _StepContext("run", "a"), _StepContext("run", "b")
    step = TrackedStep.of(a)
    assert TrackedStep.of(a) is step
    assert TrackedStep.find(b) is None
    assert TrackedStep.of(b) is not step
    assert (step.run_id, step.step_key) == ("run", "a")


def test_lineage_is_handed_over_once() -> None:
    step = TrackedStep.of(_StepContext("run", "s"))
    pending = _pending()
    assert (pending.policy, pending.mode) == (CapturePolicy.capture, LineageMode.considered)
    step.hand_over("result", pending)
    assert step.peek("result") is pending
    assert step.take("result") is pending
    assert step.take("result") is None


def test_runtime_dies_with_its_step_context() -> None:
    ctx = _StepContext("run", "s")
    step = TrackedStep.of(ctx)
    step.hand_over("result", _pending())
    gone = weakref.ref(step)
    del ctx, step
    gc.collect()
    assert gone() is None
