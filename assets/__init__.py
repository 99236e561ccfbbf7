"""Lineage-query assets, the reuse-signature asset, lineage checks, schedules and sensors.

Installed as ``dslog_dagster.assets``. Everything takes the lineage store from a resource
(``DSLogResource`` under the key ``"dslog"`` by default) and names arrays with
:func:`dslog_dagster.naming.array_name`, so it finds the lineage the IO manager registered.

* :func:`lineage_query_asset` / :class:`LineageQueryConfig` — ad-hoc query from the launchpad.
* :func:`saved_lineage_query` / :class:`SavedLineageQuery` — one stable asset per query.
* :func:`reuse_signatures_asset` — table of reuse views.
* :func:`lineage_checks` — readable / shape / coverage checks per tracked asset.
* :func:`provenance_query_asset` — a DPDS provenance question (why, how, history, spread,
  invalidated) about an asset, as a saved asset.
* :func:`change_checks` / :func:`explain_asset_change` — what changed since the previous
  materialization, traced upstream through both versions' lineage.
* :func:`saved_queries_schedule`, :func:`lineage_query_sensor`,
  :func:`lineage_automation_sensor` and :func:`lineage_definitions` (all of the above at once).
* :class:`LineageQueries` — saved queries declared in YAML (a Dagster Component).
"""

from dslog_dagster.assets.automation import lineage_automation_sensor as lineage_automation_sensor
from dslog_dagster.assets.automation import lineage_definitions as lineage_definitions
from dslog_dagster.assets.automation import lineage_query_sensor as lineage_query_sensor
from dslog_dagster.assets.automation import saved_queries_schedule as saved_queries_schedule
from dslog_dagster.assets.change import change_checks as change_checks
from dslog_dagster.assets.change import explain_asset_change as explain_asset_change
from dslog_dagster.assets.checks import lineage_checks as lineage_checks
from dslog_dagster.assets.components import LineageQueries as LineageQueries
from dslog_dagster.assets.provenance import provenance_query_asset as provenance_query_asset
from dslog_dagster.assets.queries import LineageQueryConfig as LineageQueryConfig
from dslog_dagster.assets.queries import LineageQueryResult as LineageQueryResult
from dslog_dagster.assets.queries import SavedLineageQuery as SavedLineageQuery
from dslog_dagster.assets.queries import lineage_query_asset as lineage_query_asset
from dslog_dagster.assets.queries import run_lineage_query as run_lineage_query
from dslog_dagster.assets.queries import saved_lineage_query as saved_lineage_query
from dslog_dagster.assets.signatures import reuse_signatures_asset as reuse_signatures_asset

__all__ = [
    "LineageQueries",
    "LineageQueryConfig",
    "LineageQueryResult",
    "SavedLineageQuery",
    "change_checks",
    "explain_asset_change",
    "lineage_automation_sensor",
    "lineage_checks",
    "lineage_definitions",
    "lineage_query_asset",
    "lineage_query_sensor",
    "provenance_query_asset",
    "reuse_signatures_asset",
    "run_lineage_query",
    "saved_lineage_query",
    "saved_queries_schedule",
]
