"""``with_lineage(inner)``: cell-level lineage for any existing IO manager.

The inner IO manager stores the values; this wrapper publishes the lineage of tracked steps
(:mod:`~dslog_dagster.io_managers.writer`). A DataFrame output of a tracked step reaches the
inner manager *with* its row-id column (``ROW_ID``), since that manager need not keep row
order; loading takes the column off for user code and offers the frame with ids to the tracked
step (:class:`~dslog_dagster.tracked_step.FrameSource`). Untracked outputs reach it unchanged.

**Lineage first.** The inner manager's storage is not ours to version: whatever it stores is
what downstream steps load. So the lineage is committed (published and flushed) *before* the
inner manager is handed the value:

* the lineage write fails: the step fails and the inner manager is never called, so nothing
  downstream reads changed (a later run reads the previous value, and its lineage names the
  version the latest materialization names, which is still the previous one);
* the inner write fails: the step fails, and the operation and output array version just
  committed are *removed* (:func:`~dslog_dagster.core.store.retraction.retract`), since they
  describe a value that was never stored and a query by name would follow that version as
  the newest. Removing rather than marking keeps every reader (catalog, queries, other
  processes' fresh handles) right without each learning a new kind of record. When the
  removal itself fails, the step's error says so and names the operation, never silently.
"""

import logging
from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster.io_managers.writer import (
    LineageJob,
    LineageWriter,
    take_pending,
    tracked_step_of,
)
from dslog_dagster.resources import DSLogResource
from dslog_dagster.tracked_step import FrameSource
from dslog_dagster.values import is_frame, is_pandas_frame

__all__ = ["with_lineage"]

_log = logging.getLogger(__name__)


class _LineageIOManager(dg.IOManager):
    """Delegates storage to ``inner`` and adds the lineage of tracked steps."""

    def __init__(self, inner: dg.IOManager, writer: LineageWriter) -> None:
        self.inner = inner
        self.writer = writer

    def dslog_settings(self) -> DSLogResource:
        s = self.writer.settings
        return s.model_copy(update={"store_dir": str(self.writer.store_dir())})

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if is_frame(obj):
            self._handle_frame(context, obj)
            return
        if is_pandas_frame(obj):
            self._handle_pandas(context, obj)
            return
        pending = take_pending(context)
        shape: tuple[int, ...] = ()
        dtype: Any = "float64"
        arr = None
        if pending is not None and pending.obtained not in ("off", "none"):
            arr = np.asarray(obj)
            shape, dtype = arr.shape, arr.dtype
        # lineage first (see the module docstring): a failure here stores nothing
        job = self.writer.start(context, pending, shape, dtype, values=arr)
        md = job.finish()
        self._store(context, obj, [job])
        context.add_output_metadata(md)

    def _store(self, context: dg.OutputContext, obj: Any, jobs: "list[LineageJob]") -> None:
        """Hand ``obj`` to the inner manager; when that fails, retract the lineage ``jobs``
        committed for it (the inner manager's error is the one raised)."""
        try:
            self.inner.handle_output(context, obj)
        except BaseException as e:
            for job in jobs:
                try:
                    job.retract()
                except Exception as err:  # never hides the inner manager's error
                    op_id = job.published[0] if job.published else None
                    note = (
                        f"dslog: the lineage committed for this output (operation `{op_id}`, "
                        f"version `{job.version}`) describes a value that was not stored, and "
                        f"removing it failed: {err}. A query by name may follow that version; "
                        "query the version the latest materialization names instead."
                    )
                    _log.error(note)
                    e.add_note(note)
            raise

    def _handle_frame(self, context: dg.OutputContext, obj: Any) -> None:
        """Hand the inner IO manager the frame *with* its row-id column, then add lineage.

        Lineage names a frame's rows by id, and another IO manager's storage need not keep row
        order, so the ids travel as an ordinary column (``ROW_ID``) that :meth:`load_input`
        takes off again. An untracked output (``policy="off"`` or a plain Dagster step) is
        handed over unchanged.
        """
        from dslog_dagster.spark.fields import leaf_schema
        from dslog_dagster.spark.rowid import ROW_ID, with_row_id

        pending = take_pending(context)
        jobs: list[LineageJob] = []
        if pending is None or pending.obtained == "off":
            md = self.writer.write_pending(context, pending, (0, 0), "float64", keep=jobs)
            self._store(context, obj, jobs)
            context.add_output_metadata(md)
            return
        cap = pending.frame
        numbered = None
        try:
            if cap is not None:  # a capture: its own ids are the ones its lineage names
                stored, rows = cap.frame_with_row_id, int(cap.n_rows)
            else:  # a source step: number the rows now
                numbered = with_row_id(obj)
                stored, rows = numbered.frame, int(numbered.n)
            # the lineage columns: a struct's leaf fields are columns of their own
            schema = leaf_schema([f for f in stored.schema.fields if f.name != ROW_ID])
            md = self.writer.write_frame(context, pending, rows, schema, keep=jobs)
            self._store(context, stored, jobs)
        finally:
            if cap is not None:
                cap.release()
            if numbered is not None:
                numbered.release()
        context.add_output_metadata(md)

    def _handle_pandas(self, context: dg.OutputContext, obj: Any) -> None:
        """Hand the inner IO manager the pandas frame with its row ids (``ROW_ID``, the row
        positions its lineage names), then add lineage; :meth:`load_input` sorts by the ids
        and drops them. An untracked output is handed over unchanged."""
        from dslog_dagster.io_managers.pandas_frames import schema_of, with_row_ids

        pending = take_pending(context)
        jobs: list[LineageJob] = []
        if pending is None or pending.obtained == "off":
            md = self.writer.write_pending(context, pending, (0, 0), "float64", keep=jobs)
            self._store(context, obj, jobs)
        else:
            md = self.writer.write_frame(context, pending, len(obj), schema_of(obj), keep=jobs)
            self._store(context, with_row_ids(obj), jobs)
        context.add_output_metadata(md)

    def load_input(self, context: dg.InputContext) -> Any:
        value = self.inner.load_input(context)
        if is_pandas_frame(value):
            from dslog_dagster.io_managers.pandas_frames import ROW_ID, from_stored

            if ROW_ID not in value.columns:
                return value  # stored untracked: its rows are named by their positions
            return from_stored(value, f"{type(self.inner).__name__} input {context.name}")
        if not is_frame(value):
            return value
        from dslog_dagster.spark.rowid import ROW_ID

        if ROW_ID not in value.columns:
            return value  # stored untracked; a tracked step consuming it says so
        step = tracked_step_of(context, attach=True)
        if step is not None:  # None: loaded outside a run
            source = FrameSource(value, None, f"{type(self.inner).__name__} input {context.name}")
            step.offer_frame_input(context.name, source)
        return value.drop(ROW_ID)


def with_lineage(
    inner: "dg.ConfigurableIOManagerFactory[Any] | dg.IOManager", dslog: DSLogResource | None = None
) -> dg.IOManagerDefinition:
    """Add cell-level lineage to an existing IO manager.

    The inner IO manager stores the values exactly as before, once the step's lineage is
    committed: a failed lineage write leaves the stored values untouched, and a failed value
    write removes the lineage committed for it (see the module docstring). The lineage of
    tracked steps goes into the store of ``dslog`` (its ``store_dir``, else ``$DSLOG_STORE``,
    else ``.dslog`` in the instance storage directory: the store the query assets and checks
    of the same resource read). Pass the ``DSLogResource`` the Definitions bind under
    ``"dslog"``.

    A Spark DataFrame output of a tracked step is handed to ``inner`` with one extra column,
    the row ids its lineage names (``dslog_dagster.spark.ROW_ID``); ``inner`` must store it
    like any other column (Parquet, Delta and table IO managers do). Loading drops it again
    before user code sees the frame.

    Args:
        inner: a Pythonic IO manager (``dg.FilesystemIOManager(...)``, any
            ``ConfigurableIOManager``/``ConfigurableIOManagerFactory``) or an ``IOManager``
            object. (Composed at the IOManagerDefinition level: nesting an IO manager factory
            as a pydantic field of another one does not work in Dagster.)
        dslog: lineage settings.

    Examples:
        .. code-block:: python

            resources = {"io_manager": with_lineage(dg.FilesystemIOManager(base_dir="data"))}
    """
    settings = dslog or DSLogResource()

    @dg.io_manager
    def _lineage_io_manager(init_context: dg.InitResourceContext) -> _LineageIOManager:
        if isinstance(inner, dg.ConfigurableIOManagerFactory):
            mgr = inner.create_io_manager(init_context)
        else:
            mgr = inner
        # the store's default base is the instance's storage (never the inner base_dir), so
        # it is the store the resource's query assets and checks read
        base = None
        if init_context.instance is not None:
            base = init_context.instance.storage_directory()
        return _LineageIOManager(mgr, LineageWriter(settings, base))

    return _lineage_io_manager
