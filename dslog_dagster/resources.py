"""Dagster resources of the plugin.

MINIMAL STAND-IN (branch issue-queryui): the query assets, checks and sensors in
``dslog_dagster.assets`` need only ``DSLogResource.dslog() -> DSLog``. The materialization
branch defines the full resource (capture/reuse policy, Spark settings); at merge its version
replaces this file, and it must keep ``store_dir`` and ``dslog()``.
"""

import dagster as dg
from pydantic import Field, PrivateAttr

from dslog_dagster.core.api import DSLog

__all__ = ["DSLogResource"]


class DSLogResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where the lineage store lives; hands out a :class:`DSLog` session over it.

    Examples:
        >>> dg.Definitions(assets=[...], resources={"dslog": DSLogResource(store_dir=".dslog")})
        ... # doctest: +SKIP
    """

    store_dir: str = Field(description="Directory of the lineage store (created when missing).")
    _log: DSLog | None = PrivateAttr(default=None)

    def dslog(self) -> DSLog:
        """A session over the store, created once per resource instance (it caches the
        operation graph and prepared tables across the queries of one step)."""
        if self._log is None:
            self._log = DSLog(self.store_dir)
        return self._log
