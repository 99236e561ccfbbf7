"""Lineage in other systems' formats: W3C PROV documents (:mod:`.prov_document`) and
OpenLineage run events with column lineage (:mod:`.openlineage_events`, sent at
materialization by :mod:`.openlineage_emit`).

Nothing here runs during capture; exports read the store or the registered operation. The
``prov`` package is the ``[export]`` extra, ``openlineage-python`` the ``[openlineage]`` extra.
"""

from dslog_dagster.export.openlineage_events import (
    Materialization,
    event_json,
    run_events,
    stored_events,
)
from dslog_dagster.export.prov_document import (
    DSLOG_NS,
    MAX_ROWS,
    TableKey,
    asset_document,
    lineage_tables,
    query_document,
    to_text,
)

__all__ = [
    "DSLOG_NS",
    "MAX_ROWS",
    "Materialization",
    "TableKey",
    "asset_document",
    "event_json",
    "lineage_tables",
    "query_document",
    "run_events",
    "stored_events",
    "to_text",
]
