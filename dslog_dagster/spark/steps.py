"""Tracked Spark steps: what ``@tracked_asset`` does when its inputs are DataFrames.

The decorators (:mod:`dslog_dagster.decorators`) hand a step over to :func:`capture_step` when
its tracked inputs are Spark DataFrames. The step runs under
:func:`~dslog_dagster.spark.capture_frames` on the inputs *with* their stored row ids (the IO
manager loads them, see :class:`~dslog_dagster.tracked_step.FrameSource`), so lineage names the
rows exactly as they are stored; user code sees
:class:`~dslog_dagster.spark.TrackedFrame` objects
(the DataFrame API, without the id column). Each output is one of:

* a DataFrame derived from the inputs: the IO manager stores the capture's rows with their ids
  and registers ``frame (row, column) <- input (row, column)``;
* :func:`as_array` ``(frame, columns)``: the frame's columns as a 2-D NumPy array (rows in
  row-id order, via :func:`dslog_dagster.spark.convert.to_numpy`); its lineage is the frame's,
  since the conversion is the identity on ``(row, column)``. This is how a Spark asset feeds a
  NumPy asset, so one lineage query path crosses from Spark steps into NumPy steps.

A step with several outputs (``@tracked_multi_asset``) is called once for all of them
(:func:`~dslog_dagster.spark.capture.capture_frame_outputs`); each output gets its own pass.
This module does not import Dagster.
"""

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster.core import progress
from dslog_dagster.errors import InvalidRelationError, UnsupportedFrameOperationError
from dslog_dagster.spark.capture import FrameCapture, OnUnknown, capture_frame_outputs
from dslog_dagster.spark.convert import to_numpy
from dslog_dagster.spark.frame import TrackedFrame

__all__ = ["ArrayFromFrame", "FrameStepOutput", "as_array", "capture_step"]


@dataclass(frozen=True, slots=True)
class ArrayFromFrame:
    """An output of a tracked Spark step that should become a NumPy array (see
    :func:`as_array`)."""

    frame: Any
    columns: tuple[str, ...] | None
    dtype: Any


def as_array(frame: Any, columns: Any = None, dtype: Any = np.float64) -> ArrayFromFrame:
    """Return this from a tracked Spark step to make the output a 2-D NumPy array.

    The array is ``frame``'s ``columns`` (default: all), one row per frame row in row-id order,
    converted with :func:`dslog_dagster.spark.convert.to_numpy`; its cell ``(i, j)`` has the
    lineage of frame cell ``(i, columns[j])``. Outside a capture (``policy="off"``, direct
    calls) the conversion runs on the plain DataFrame, rows in its own order.

    Examples:
        .. code-block:: python

            @tracked_asset
            def features(final: DataFrame) -> np.ndarray:
                return as_array(final, ["runtimeMinutes", "seasonEpisode"])
    """
    cols = (columns,) if isinstance(columns, str) else columns
    return ArrayFromFrame(frame, tuple(cols) if cols is not None else None, dtype)


def plain_array(value: ArrayFromFrame) -> np.ndarray:
    """The array of ``value`` without lineage (a step that runs untracked)."""
    df = value.frame
    if isinstance(df, TrackedFrame):
        msg = "as_array(...) of a tracked frame outside its capture."
        raise InvalidRelationError(msg)
    cols = list(value.columns) if value.columns is not None else list(df.columns)
    table = df.select(*[f"`{c}`" for c in cols]).toArrow()
    parts = [
        np.asarray(table.column(i).to_numpy(zero_copy_only=False), dtype=value.dtype)
        for i in range(table.num_columns)
    ]
    if not parts:
        return np.zeros((table.num_rows, 0), value.dtype)
    return np.stack(parts, axis=1)


@dataclass
class FrameStepOutput:
    """One captured output of a Spark step.

    Attributes:
        value: what the step returns to Dagster for this output (``capture.frame``, an ordinary
            DataFrame, or the NumPy array of :func:`as_array`).
        capture: the capture (its ``frame_with_row_id`` is what the IO manager stores; its
            tables the lineage); for an array output its cached rows are already released.
        tables: per input name, the table registered (contributing or considered).
        is_array: the output became a NumPy array.
    """

    value: Any
    capture: FrameCapture
    tables: dict[str, Any]
    is_array: bool
    seconds: float = 0.0
    column_lineage: dict[str, dict[str, list[str]]] = field(default_factory=dict)


def capture_step(
    call: Callable[[Mapping[str, Any]], Sequence[Any]],
    frames: Mapping[str, DataFrame],
    rows: Mapping[str, int | None],
    *,
    policy: Literal["capture", "all_to_all"],
    considered: bool,
    pure: bool = False,
    characters: bool = False,
) -> list[FrameStepOutput]:
    """Capture every output of a Spark step from one call of the user function.

    A step not declared pure is captured with its aggregations carrying their ids as lists
    (``aggregate="lists"``), the mode that never reruns the function. A pure step may use the
    cheaper range summaries and the id tap, whose checks may rebuild the plan once more
    (see :func:`~dslog_dagster.spark.capture_frames`); the lineage is the same.

    Args:
        call: ``call(tracked_frames)`` runs the user function on the tracked inputs (by
            parameter name) and returns its output values, in order.
        frames: the inputs with their ``ROW_ID`` column, by parameter name.
        rows: their row counts where known.
        policy: ``"capture"`` raises on an operation without a lineage rule; ``"all_to_all"``
            records a flagged all-to-all relation for what depends on it.
        considered: register the considered tables (PROVision) instead of the contributing.
        pure: the step is declared pure (its function may be called more than once).
        characters: also capture the character-range lineage of the outputs' string columns
            (``FrameCapture.characters``).

    Raises:
        UnsupportedFrameOperationError: an output is not derived from the tracked inputs, or
            an operation has no lineage rule (``policy="capture"``).
    """
    on_unknown: OnUnknown = "all_to_all" if policy == "all_to_all" else "raise"
    known = {n: r for n, r in rows.items() if r is not None}
    arrays: dict[int, ArrayFromFrame] = {}

    def run(**tracked: Any) -> list[Any]:
        arrays.clear()  # a rerun of the capture (see capture_frames) sees the outputs afresh
        return [_as_frame(k, v, arrays) for k, v in enumerate(call(tracked))]

    t0 = time.perf_counter()
    sizes = ", ".join(f"`{n}` {r:,} rows" for n, r in known.items())
    with progress.phase(f"Spark capture of `{progress.subject('step')}`", sizes) as ph:
        caps = capture_frame_outputs(
            run,
            dict(frames),
            on_unknown=on_unknown,
            input_rows=known if known and len(known) == len(frames) else None,
            aggregate="auto" if pure else "lists",
            characters=characters,
        )
        ph.note(f"{len(caps)} output(s)")
    seconds = (time.perf_counter() - t0) / max(len(caps), 1)
    outs: list[FrameStepOutput] = []
    try:
        for k, cap in enumerate(caps):
            outs.append(_step_output(cap, arrays.get(k), considered, seconds))
    except BaseException:
        for cap in caps:
            cap.release()
        raise
    return outs


def _as_frame(k: int, value: Any, arrays: dict[int, ArrayFromFrame]) -> Any:
    """Output ``k`` of the user function as the frame to capture (an :func:`as_array`
    output's columns of its frame, remembered in ``arrays``)."""
    if isinstance(value, ArrayFromFrame):
        arrays[k] = value
        frame = value.frame
        if value.columns is not None and isinstance(frame, TrackedFrame):
            frame = frame.select(*[F.col(f"`{c}`") for c in value.columns])
        return frame
    if isinstance(value, np.ndarray | np.generic):
        msg = (
            "A tracked Spark step returned a NumPy array, whose rows and columns have "
            "no lineage to its DataFrame inputs; return `as_array(frame, columns)` "
            "(dslog_dagster.spark.as_array) instead."
        )
        raise UnsupportedFrameOperationError(msg)
    return value


def _step_output(
    cap: FrameCapture, arr_spec: ArrayFromFrame | None, considered: bool, seconds: float
) -> FrameStepOutput:
    """What the step hands Dagster for one captured output (the NumPy array of an
    :func:`as_array` output, whose cached rows are released here)."""
    tables = dict(cap.considered if considered else cap.contributing)
    value: Any
    if arr_spec is not None:
        try:
            value, conv = to_numpy(cap, list(cap.columns), dtype=arr_spec.dtype)
        finally:
            cap.release()
        # to_numpy orders rows by row id (dense 0..n-1) and keeps the column order, so the
        # conversion is the identity on (row, column): the array has the frame's lineage.
        if conv.n_pairs != cap.n_rows * len(cap.columns):
            msg = "Internal error: the frame-to-array conversion is not the identity."
            raise InvalidRelationError(msg)
    else:
        value = cap.frame
    return FrameStepOutput(value, cap, tables, arr_spec is not None, seconds, cap.column_lineage)
