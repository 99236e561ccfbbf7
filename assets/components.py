"""Saved lineage queries declared in YAML, as a Dagster Component.

In a ``dg`` project (``defs/`` folder), a ``defs.yaml`` like::

    type: dslog_dagster.assets.components.LineageQueries
    attributes:
      store_dir: .dslog            # optional: binds DSLogResource under "dslog"
      cron_schedule: "0 3 * * *"   # optional: a schedule for these queries
      queries:
        - name: hot_pixels_origin
          source: images/hot
          target: images/raw
          cells: ["0:4"]
        - name: colsum_origin
          source: images/colsum
          target: images/raw
          eager: true

gives one asset per query, the sensor (or automation sensor for ``eager``) that re-runs them
when their upstream lineage changes, and the optional schedule — the same definitions as
:func:`~dslog_dagster.assets.lineage_definitions`, without Python.
"""

import dagster as dg

from dslog_dagster.assets.automation import lineage_definitions
from dslog_dagster.assets.queries import DEFAULT_RESOURCE_KEY, SavedLineageQuery

__all__ = ["LineageQueries"]


class LineageQueries(dg.Component, dg.Model, dg.Resolvable):
    """Saved cell-level lineage queries (one asset each), their sensor and schedule."""

    queries: list[SavedLineageQuery]
    cron_schedule: str | None = None
    store_dir: str | None = None
    resource_key: str = DEFAULT_RESOURCE_KEY

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        defs: dg.Definitions = lineage_definitions(
            queries=self.queries,
            store_dir=self.store_dir,
            resource_key=self.resource_key,
            cron_schedule=self.cron_schedule,
            adhoc_query=False,
            checks=False,
        )
        return defs
