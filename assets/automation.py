"""Keeping saved lineage queries fresh: a schedule, sensors, and one Definitions helper.

* :func:`saved_queries_schedule` — re-runs saved queries on a cron schedule; starts
  **running**, like the sensors below.
* :func:`lineage_query_sensor` — starts **running** (``DefaultSensorStatus.RUNNING``): when an
  asset a saved query depends on has a materialization newer than the query's latest one
  (new data means new lineage: each run is a new array version), it requests a run of that
  query. Stateless: it compares event-log storage ids, and the run key
  ``<query>@<newest upstream storage id>`` stops it from requesting the same refresh twice.
* Queries made with ``eager=True`` are left to an ``AutomationConditionSensorDefinition``
  that :func:`lineage_definitions` declares RUNNING, because Dagster's implicit default
  automation sensor starts STOPPED.
* :func:`lineage_definitions` builds all of it (plus checks and the ad-hoc query) into one
  ``dg.Definitions`` to merge with the user's own.

Why everything starts running: a schedule or sensor exists here only because the project asked
for it in code (saved queries, a ``cron_schedule``), and a stopped one would silently leave the
saved answers stale. Pass ``default_status=...STOPPED`` (or stop it in the UI) to opt out.
"""

from collections.abc import Iterable, Sequence

import dagster as dg

from dslog_dagster.assets.checks import AssetRef, lineage_checks
from dslog_dagster.assets.queries import (
    DEFAULT_RESOURCE_KEY,
    SavedLineageQuery,
    lineage_query_asset,
    saved_lineage_query,
)
from dslog_dagster.assets.signatures import ViewSource, reuse_signatures_asset
from dslog_dagster.errors import ConfigurationError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.resources import DSLogResource

__all__ = [
    "lineage_automation_sensor",
    "lineage_definitions",
    "lineage_query_sensor",
    "saved_queries_schedule",
]

SCHEDULE_NAME = "dslog_saved_queries_schedule"
SENSOR_NAME = "dslog_rerun_lineage_queries"
AUTOMATION_SENSOR_NAME = "dslog_lineage_automation"


def _is_eager(asset: dg.AssetsDefinition) -> bool:
    return any(c is not None for c in asset.automation_conditions_by_key.values())


def _upstream(asset: dg.AssetsDefinition) -> dict[dg.AssetKey, list[dg.AssetKey]]:
    return {
        spec.key: [d.asset_key for d in spec.deps if d.asset_key != spec.key]
        for spec in asset.specs
    }


def saved_queries_schedule(
    queries: Sequence[dg.AssetsDefinition],
    cron_schedule: str = "0 3 * * *",
    *,
    name: str = SCHEDULE_NAME,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
    execution_timezone: str | None = None,
) -> dg.ScheduleDefinition:
    """A schedule materializing ``queries`` (e.g. nightly, after the pipeline ran); it starts
    running, like :func:`lineage_query_sensor` (see the module doc for why)."""
    if not queries:
        msg = "saved_queries_schedule needs at least one query asset."
        raise ValueError(msg)
    return dg.ScheduleDefinition(
        name=name,
        cron_schedule=cron_schedule,
        target=dg.AssetSelection.assets(*queries),
        default_status=default_status,
        execution_timezone=execution_timezone,
        description="Re-runs the saved cell-level lineage queries.",
    )


def _latest_storage_id(instance: dg.DagsterInstance, key: dg.AssetKey) -> int | None:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1)
    return records.records[0].storage_id if records.records else None


def lineage_query_sensor(
    queries: Sequence[dg.AssetsDefinition],
    *,
    name: str = SENSOR_NAME,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
) -> dg.SensorDefinition:
    """A sensor re-running each query when an asset it depends on has newer lineage.

    A query whose upstream assets were never all materialized is not requested (there is no
    lineage to query yet).
    """
    if not queries:
        msg = "lineage_query_sensor needs at least one query asset."
        raise ValueError(msg)
    upstream: dict[dg.AssetKey, list[dg.AssetKey]] = {}
    for q in queries:
        upstream.update(_upstream(q))

    @dg.sensor(
        name=name,
        target=dg.AssetSelection.assets(*queries),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Re-runs saved lineage queries when their upstream assets re-materialize.",
    )
    def _rerun_queries(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        requests = []
        for qkey, deps in upstream.items():
            ups = [_latest_storage_id(context.instance, d) for d in deps]
            if not ups or any(u is None for u in ups):
                continue
            newest = max(u for u in ups if u is not None)
            mine = _latest_storage_id(context.instance, qkey)
            if mine is not None and mine > newest:
                continue
            requests.append(
                dg.RunRequest(
                    run_key=f"{qkey.to_user_string()}@{newest}",
                    asset_selection=[qkey],
                    tags={m.UPSTREAM_STORAGE_ID_TAG: str(newest)},
                )
            )
        if not requests:
            return dg.SkipReason("No saved lineage query has newer upstream lineage.")
        return dg.SensorResult(run_requests=requests)

    return _rerun_queries


def lineage_automation_sensor(
    queries: Sequence[dg.AssetsDefinition],
    *,
    name: str = AUTOMATION_SENSOR_NAME,
    minimum_interval_seconds: int = 30,
) -> dg.AutomationConditionSensorDefinition:
    """An automation-condition sensor for eager queries that starts RUNNING (Dagster's
    implicit default one starts STOPPED, so eager queries would silently never run)."""
    return dg.AutomationConditionSensorDefinition(
        name,
        target=dg.AssetSelection.assets(*queries),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=minimum_interval_seconds,
        description="Evaluates the automation conditions of eager lineage queries.",
    )


def lineage_definitions(
    queries: Iterable[SavedLineageQuery | dg.AssetsDefinition] = (),
    assets: Iterable[AssetRef] = (),
    *,
    dslog: DSLogResource | None = None,
    store_dir: str | None = None,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    cron_schedule: str | None = None,
    adhoc_query: bool = True,
    checks: bool = True,
    reuse_views: ViewSource | bool = False,
    constant_cells: dict[str, list[str]] | None = None,
) -> dg.Definitions:
    """Everything lineage-side for a project, to merge with its own Definitions.

    Args:
        queries: saved queries (:class:`SavedLineageQuery` or assets from
            :func:`saved_lineage_query`).
        assets: the user's tracked assets: included (when they are definitions) and checked
            with :func:`lineage_checks`.
        dslog: the project's ``DSLogResource`` — the very object its own Definitions bind
            under ``resource_key`` (and give the IO manager): bound here too, so
            ``dg.Definitions.merge`` sees one resource. Leave it out when the project's
            Definitions bind the resource and these do not need to run alone.
        store_dir: for lineage definitions without a resource of their own elsewhere (e.g. a
            separate code location): binds ``DSLogResource(store_dir=...)`` under
            ``resource_key``. Not together with ``dslog``; a project that binds its own
            resource sets ``store_dir`` on it instead.
        cron_schedule: when given, a schedule for the saved queries.
        adhoc_query: include the launchpad-configured ``lineage_query`` asset.
        checks: add the lineage checks for ``assets``.
        reuse_views: ``True`` (registry) or a :data:`ViewSource` adds the reuse-signature asset.

    Examples:
        >>> import numpy as np
        >>> from dslog_dagster import tracked_asset
        >>> @tracked_asset
        ... def raw() -> np.ndarray:
        ...     return np.ones((4, 4))
        >>> @tracked_asset
        ... def smoothed(raw: np.ndarray) -> np.ndarray:
        ...     return raw * 2
        >>> from dslog_dagster import DSLogIOManager, DSLogResource
        >>> dslog = DSLogResource(store_dir=".dslog")
        >>> mine = dg.Definitions(assets=[raw, smoothed], resources={
        ...     "dslog": dslog, "io_manager": DSLogIOManager(dslog=dslog)})
        >>> defs = dg.Definitions.merge(mine, lineage_definitions(
        ...     queries=[SavedLineageQuery(name="q", source="smoothed", target="raw")],
        ...     assets=[smoothed], dslog=dslog, cron_schedule="0 3 * * *"))
    """
    built = [
        q
        if isinstance(q, dg.AssetsDefinition)
        else saved_lineage_query(q, resource_key=resource_key)
        for q in queries
    ]
    assets = list(assets)
    defs_assets: list[dg.AssetsDefinition | dg.AssetSpec] = [
        a for a in assets if isinstance(a, dg.AssetsDefinition | dg.AssetSpec)
    ]
    defs_assets += built
    if adhoc_query:
        defs_assets.append(lineage_query_asset(resource_key=resource_key))
    if reuse_views:
        source = None if reuse_views is True else reuse_views
        defs_assets.append(reuse_signatures_asset(source, resource_key=resource_key))
    schedules = []
    sensors: list[dg.SensorDefinition] = []
    if built and cron_schedule:
        schedules.append(saved_queries_schedule(built, cron_schedule))
    plain = [q for q in built if not _is_eager(q)]
    eager = [q for q in built if _is_eager(q)]
    if plain:
        sensors.append(lineage_query_sensor(plain))
    if eager:
        sensors.append(lineage_automation_sensor(eager))
    resources: dict[str, DSLogResource] = {}
    if dslog is not None and store_dir is not None:
        msg = (
            "lineage_definitions got both `dslog` and `store_dir`: set store_dir on the "
            "DSLogResource and pass only `dslog`."
        )
        raise ConfigurationError(msg)
    if dslog is not None:
        resources[resource_key] = dslog
    elif store_dir is not None:
        resources[resource_key] = DSLogResource(store_dir=store_dir)
    return dg.Definitions(
        assets=defs_assets,
        asset_checks=lineage_checks(
            assets, resource_key=resource_key, constant_cells=constant_cells
        )
        if checks
        else None,
        schedules=schedules,
        sensors=sensors,
        resources=resources,
    )
