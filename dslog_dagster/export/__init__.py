"""Lineage in other systems' formats: W3C PROV documents (:mod:`.prov_document`).

Nothing here runs during capture; exports read the store. The ``prov`` package is the
``[export]`` extra.
"""

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
    "TableKey",
    "asset_document",
    "lineage_tables",
    "query_document",
    "to_text",
]
