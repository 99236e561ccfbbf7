"""Dagster IO managers that store assets together with their cell-level lineage.

Installed as ``dslog_dagster.io_managers``. Depends on ``dslog_dagster.core``, the plugin's
tracked-step runtime (``dslog_dagster.tracked_step``) and Dagster's public API.

* :class:`DSLogIOManager` (:mod:`~dslog_dagster.io_managers.lineage_io_manager`) — NumPy arrays
  as ``.npy`` files, Spark DataFrames as Parquet, one immutable version per materialization,
  plus lineage in the store.
* :func:`with_lineage` (:mod:`~dslog_dagster.io_managers.lineage_wrapper`) — lineage for any
  existing IO manager.
* :class:`LineageWriter` (:mod:`~dslog_dagster.io_managers.writer`) — publishes a tracked
  step's lineage after its value is stored (shared by both).
* :mod:`~dslog_dagster.io_managers.value_versions` — asset values stored per version
  (published after their lineage commits), retention and leases.
* :mod:`~dslog_dagster.io_managers.metadata` — every ``dslog/...`` metadata key.
"""

from dslog_dagster.io_managers.lineage_io_manager import DSLogIOManager as DSLogIOManager
from dslog_dagster.io_managers.lineage_wrapper import with_lineage as with_lineage
from dslog_dagster.io_managers.writer import LineageWriter as LineageWriter

__all__ = ["DSLogIOManager", "LineageWriter", "with_lineage"]
