"""Dagster IO managers that store assets together with their cell-level lineage.

Installed as ``dslog_dagster.io_managers``. Depends on ``dslog_dagster.core``, the plugin's
hand-off (``dslog_dagster.tracking``) and Dagster's public API.

* :class:`DSLogIOManager` — NumPy arrays as ``.npy`` files plus lineage in the store.
* :func:`with_lineage` — lineage for any existing IO manager.
* :mod:`~dslog_dagster.io_managers.metadata` — the ``dslog/...`` metadata keys.
"""

from dslog_dagster.io_managers.lineage_io_manager import DSLogIOManager as DSLogIOManager
from dslog_dagster.io_managers.lineage_io_manager import LineageWriter as LineageWriter
from dslog_dagster.io_managers.lineage_io_manager import with_lineage as with_lineage

__all__ = ["DSLogIOManager", "LineageWriter", "with_lineage"]
