"""Saved queries declared in YAML (the LineageQueries component) build the same definitions as
lineage_definitions and answer like the Python ones."""

import dagster as dg
import pytest
from dagster.components.testing import create_defs_folder_sandbox

from dslog_dagster.assets.components import LineageQueries
from tests.dagster.pipeline import box3

# Dagster's own component loader uses pydantic's deprecated parse_obj_as and beta classes
# (code references, sensor owners); none of it is our code.
pytestmark = [
    pytest.mark.filterwarnings("ignore:`parse_obj_as` is deprecated"),
    pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
]


def test_yaml_queries_build_assets_sensors_schedule_and_answer(materialized) -> None:
    instance, store_dir = materialized
    yaml = {
        "type": "dslog_dagster.assets.components.LineageQueries",
        "attributes": {
            "cron_schedule": "0 3 * * *",
            "store_dir": store_dir,
            "queries": [
                {
                    "name": "q_corner",
                    "source": "images/hot",
                    "target": "images/raw",
                    "cells": ["0:2,0:2"],
                },
                {
                    "name": "q_cols",
                    "source": "images/colsum",
                    "target": "images/raw",
                    "eager": True,
                },
            ],
        },
    }
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(LineageQueries, defs_yaml_contents=yaml)
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, LineageQueries)
            assert [q.name for q in component.queries] == ["q_corner", "q_cols"]
            assert {s.name for s in defs.sensors} == {
                "dslog_rerun_lineage_queries",
                "dslog_lineage_automation",
            }
            (schedule,) = defs.schedules
            assert schedule.cron_schedule == "0 3 * * *"
            q = defs.resolve_assets_def("q_corner")
            assert {d.asset_key for d in next(iter(q.specs)).deps} == {
                dg.AssetKey(["images", "hot"]),
                dg.AssetKey(["images", "raw"]),
            }
            res = defs.resolve_implicit_global_asset_job_def().execute_in_process(
                instance=instance, asset_selection=[dg.AssetKey("q_corner")]
            )
            (mat,) = res.asset_materializations_for_node("q_corner")
    want = {c for i in range(2) for j in range(2) for c in [(i, j), *box3((i, j))]}
    assert mat.metadata["dslog/result_cells"].value == len(want)
