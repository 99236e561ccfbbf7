"""Saved queries stay fresh: the sensor fires after upstream materializations and skips
otherwise, the schedule targets the queries, eager queries get a RUNNING automation sensor,
and lineage_definitions wires it all; the reuse-signature asset tables its views."""

from datetime import UTC, datetime

import dagster as dg
import pytest

from dslog_dagster.assets import (
    SavedLineageQuery,
    lineage_definitions,
    lineage_query_sensor,
    reuse_signatures_asset,
    saved_lineage_query,
    saved_queries_schedule,
)
from dslog_dagster.resources import DSLogResource
from tests.dagster.pipeline import COLSUM, PIPELINE, RAW, SMOOTHED

ORIGIN = saved_lineage_query("colsum_origin", source="images/colsum", target="images/raw")
EAGER = saved_lineage_query(
    SavedLineageQuery(
        name="smoothed_origin",
        source="images/smoothed",
        target="images/raw",
        cells=["0,0"],
        eager=True,
    )
)


def _defs(store_dir: str) -> dg.Definitions:
    return dg.Definitions.merge(
        dg.Definitions(assets=PIPELINE),
        lineage_definitions(
            queries=[ORIGIN, EAGER], store_dir=store_dir, cron_schedule="0 3 * * *"
        ),
    )


def _tick(
    defs: dg.Definitions, instance: dg.DagsterInstance
) -> list[dg.RunRequest] | dg.SkipReason:
    sensor = defs.resolve_sensor_def("dslog_rerun_lineage_queries")
    data = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    if data.skip_message:
        return dg.SkipReason(data.skip_message)
    return list(data.run_requests or [])


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, keys: list[dg.AssetKey]) -> str:
    job = defs.resolve_implicit_global_asset_job_def()
    res = job.execute_in_process(instance=instance, asset_selection=keys)
    assert res.success
    return res.run_id


def test_sensor_fires_after_upstream_materialization_and_skips_otherwise(
    instance, store_dir
) -> None:
    defs = _defs(store_dir)
    sensor = defs.resolve_sensor_def("dslog_rerun_lineage_queries")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    # nothing materialized: no lineage to query yet
    assert isinstance(_tick(defs, instance), dg.SkipReason)
    _run(defs, instance, [RAW, SMOOTHED, COLSUM])
    (req,) = _tick(defs, instance)
    assert req.asset_selection == [ORIGIN.key]
    assert req.run_key.startswith("colsum_origin@")
    # the query ran after its upstream: nothing to do
    _run(defs, instance, [ORIGIN.key])
    assert isinstance(_tick(defs, instance), dg.SkipReason)
    # new lineage upstream: fires again, with a new run key
    _run(defs, instance, [RAW, SMOOTHED, COLSUM])
    (again,) = _tick(defs, instance)
    assert again.asset_selection == [ORIGIN.key]
    assert again.run_key != req.run_key


def test_schedule_targets_the_saved_queries(store_dir) -> None:
    defs = _defs(store_dir)
    schedule = defs.resolve_schedule_def("dslog_saved_queries_schedule")
    assert schedule.cron_schedule == "0 3 * * *"
    data = schedule.evaluate_tick(dg.build_schedule_context())
    (req,) = data.run_requests
    job = defs.resolve_job_def(schedule.job_name)
    assert set(job.asset_layer.executable_asset_keys) >= {ORIGIN.key, EAGER.key}
    assert req.run_config == {}
    # without queries there is nothing to schedule
    assert lineage_definitions(store_dir=store_dir, cron_schedule="0 3 * * *").schedules == []


# dg.evaluate_automation_conditions itself calls a beta parameter inside Dagster
@pytest.mark.filterwarnings(
    "ignore:Parameter `include_sources` of function `AssetSelection.all`:dagster.BetaWarning"
)
def test_eager_queries_run_through_a_running_automation_sensor(instance, store_dir) -> None:
    defs = _defs(store_dir)
    auto = defs.resolve_sensor_def("dslog_lineage_automation")
    assert isinstance(auto, dg.AutomationConditionSensorDefinition)
    assert auto.default_status == dg.DefaultSensorStatus.RUNNING
    r1 = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert r1.get_num_requested(EAGER.key) == 0
    _run(defs, instance, [RAW, SMOOTHED])
    r2 = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=r1.cursor)
    assert r2.get_num_requested(EAGER.key) == 1
    # the plain sensor leaves eager queries alone (and colsum_origin lacks its upstream)
    assert isinstance(_tick(defs, instance), dg.SkipReason)


def test_lineage_definitions_include_checks_and_adhoc_query(store_dir) -> None:
    defs = lineage_definitions(
        queries=[SavedLineageQuery(name="q", source="images/hot", target="images/raw")],
        assets=PIPELINE,
        store_dir=store_dir,
    )
    graph = defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    assert {dg.AssetKey("q"), dg.AssetKey("lineage_query"), RAW, SMOOTHED} <= keys
    # images/raw is a source (no upstream asset): it gets no lineage checks
    assert len(list(graph.asset_check_keys)) == 3 * (len(PIPELINE) - 1)
    assert isinstance(defs.resources["dslog"], DSLogResource)


def test_lineage_sensor_needs_queries() -> None:
    with pytest.raises(ValueError, match="at least one query"):
        lineage_query_sensor([])
    with pytest.raises(ValueError, match="at least one query"):
        saved_queries_schedule([])


def test_reuse_signature_asset_renders_the_views_table(instance, store_dir) -> None:
    verified = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

    def fake_views(log):  # the registry lands with the reuse issue; rows are the contract
        assert str(log.store.root) == store_dir
        return [
            {"signature": "sig-a", "kind": "base", "hits": 3, "last_verified": verified},
            {"signature": "sig-b", "kind": "dim", "hits": 7, "last_verified": None},
            {"signature": "sig-c", "kind": "base", "hits": 0, "last_verified": "2026-11-01"},
        ]

    asset = reuse_signatures_asset(fake_views)
    res = dg.materialize(
        [asset], instance=instance, resources={"dslog": DSLogResource(store_dir=store_dir)}
    )
    (mat,) = res.asset_materializations_for_node("dslog_reuse_signatures")
    rows = [r.data for r in mat.metadata["dslog/views"].value.records]
    assert [r["signature"] for r in rows] == ["sig-b", "sig-a", "sig-c"]  # most hits first
    assert rows[1] == {
        "asset": "",  # a row without an `op` names no step
        "step": "",
        "signature": "sig-a",
        "kind": "base",
        "hits": 3,
        "last_verified": "2026-11-20T12:00:00+00:00",
    }
    assert rows[0]["last_verified"] == ""
    assert mat.metadata["dslog/view_count"].value == 3
    assert mat.metadata["dslog/view_hits"].value == 10
    assert mat.metadata["dslog/views_by_kind"].value == {"base": 2, "dim": 1}
    import pyarrow.parquet as pq

    assert pq.read_table(mat.metadata["dslog/result_path"].value).num_rows == 3


def test_reuse_signature_asset_tables_the_stores_registry(instance, store_dir) -> None:
    import numpy as np

    from dslog_dagster.core import ReusePolicy, ViewRegistry

    registry = ViewRegistry(store_dir, ReusePolicy(confirm_after=1, seed=0))
    rng = np.random.default_rng(0)
    results = [registry.capture(np.negative, rng.random((4, 5))) for _ in range(3)]
    registry.flush()
    assert results[-1].obtained != "captured"  # the view was confirmed and served
    res = dg.materialize(
        [reuse_signatures_asset()],
        instance=instance,
        resources={"dslog": DSLogResource(store_dir=store_dir)},
    )
    (mat,) = res.get_asset_materialization_events()
    table = mat.materialization.metadata["dslog/views"].value
    served = {r.data["signature"]: r.data for r in table.records}
    assert results[-1].signature in served
    assert served[results[-1].signature]["hits"] >= 1
