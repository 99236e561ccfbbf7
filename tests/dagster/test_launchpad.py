"""What the launchpad and the catalog show for the example project.

* each lineage setting once (under the ``dslog`` resource; the IO manager takes them from it);
* plain-text descriptions: no reStructuredText markup in config, resource, asset or check
  descriptions (the UI shows it raw);
* the reuse-signature table names the asset and step each view serves;
* the saved-query schedule and sensor start the same way (running);
* a malformed ad-hoc query config is refused when the run is launched, before a run exists.
"""

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "example_project"))

from hotspots.definitions import make_defs

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets import lineage_query_asset, reuse_signatures_asset
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.settings import TrackingSettings

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
RST = re.compile(r"``|:(class|func|meth|mod|data|attr):`|\.\. code-block|\.\. note")


def _resource_fields(job: dg.JobDefinition) -> dict[str, set[str]]:
    resources = job.run_config_schema.config_type.fields["resources"].config_type.fields
    out = {}
    for key, field in resources.items():
        shape = field.config_type.fields.get("config")
        fields = getattr(shape.config_type, "fields", {}) if shape is not None else {}
        out[key] = set(fields)
    return out


def test_each_setting_is_shown_once(tmp_path: Path) -> None:
    job = make_defs(str(tmp_path)).resolve_job_def("hotspot_job")
    fields = _resource_fields(job)
    for name in TrackingSettings.model_fields:
        holders = [key for key, names in fields.items() if name in names]
        assert holders == ["dslog"], (name, holders)
    assert {"base_dir", "keep_last"} <= fields["io_manager"]


def _texts(config_type: object) -> Iterator[tuple[str, str]]:
    for t in config_type.type_iterator():  # type: ignore[attr-defined]
        if t.description:
            yield t.key, t.description
        for name, field in (getattr(t, "fields", None) or {}).items():
            if field.description:
                yield f"{t.key}.{name}", field.description


def test_descriptions_are_plain_text(tmp_path: Path) -> None:
    defs = make_defs(str(tmp_path))
    repo = defs.get_repository_def()
    texts: list[tuple[str, str]] = []
    for job_name in ("hotspot_job", "__ASSET_JOB"):
        texts += _texts(repo.get_job(job_name).run_config_schema.config_type)
    for key, res in repo.get_top_level_resources().items():
        texts.append((f"resource {key}", res.description or ""))
    graph = repo.asset_graph
    for key in graph.get_all_asset_keys():
        texts.append((f"asset {key.to_user_string()}", graph.get(key).description or ""))
    for assets_def in repo.asset_checks_defs_by_key.values():
        for spec in assets_def.check_specs:
            texts.append((f"check {spec.key}", spec.description or ""))
    assert len(texts) > 40
    marked = [(where, text[:120]) for where, text in texts if RST.search(text)]
    assert not marked, marked


@tracked_asset(code_version="1")
def grid() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset(code_version="1")
def doubled(grid: np.ndarray) -> np.ndarray:
    return grid * 2


def test_reuse_signature_table_names_assets_and_steps(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "s"))
    defs = dg.Definitions(
        assets=[grid, doubled, reuse_signatures_asset()],
        resources={
            "io_manager": DSLogIOManager(dslog=dslog, base_dir=str(tmp_path)),
            "dslog": dslog,
        },
    )
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        for _ in range(2):  # a capture teaches the registry a view of `doubled`
            assert job.execute_in_process(
                instance=instance, run_config=QUIET, asset_selection=[doubled.key, grid.key]
            ).success
        assert job.execute_in_process(
            instance=instance,
            run_config=QUIET,
            asset_selection=[dg.AssetKey("dslog_reuse_signatures")],
        ).success
        event = instance.get_latest_materialization_event(dg.AssetKey("dslog_reuse_signatures"))
    assert event is not None
    assert event.asset_materialization is not None
    rows = [r.data for r in event.asset_materialization.metadata[m.VIEWS_TABLE].records]
    assert rows
    assert {r["asset"] for r in rows} == {"doubled"}
    assert {r["step"] for r in rows} == {"doubled@1"}
    assert all(r["signature"] for r in rows)


def test_schedule_and_sensor_start_the_same_way(tmp_path: Path) -> None:
    repo = make_defs(str(tmp_path)).get_repository_def()
    schedules = repo.schedule_defs
    sensors = repo.sensor_defs
    assert schedules
    assert sensors
    states = {s.default_status.value for s in schedules} | {s.default_status.value for s in sensors}
    assert states == {"RUNNING"}


BAD = [
    ({"source": "smoothed", "target": "raw_frame", "cells": ["0:x"]}, "Cannot read `0:x`"),
    ({"source": "a//b", "target": "raw_frame"}, "is not an asset key"),
    ({"source": "", "target": "raw_frame"}, "got an empty value"),
    ({"source": "smoothed", "target": "raw_frame", "direction": "sideways"}, "sideways"),
    ({"source": "smoothed"}, "target"),
]


@pytest.mark.parametrize(("config", "reason"), BAD)
def test_bad_adhoc_query_config_is_refused_at_launch(config: dict, reason: str) -> None:
    dslog = DSLogResource()
    defs = dg.Definitions(assets=[lineage_query_asset()], resources={"dslog": dslog})
    job = defs.resolve_implicit_global_asset_job_def()
    run_config = {"ops": {"lineage_query": {"config": config}}}
    with pytest.raises(dg.DagsterInvalidConfigError, match=re.escape(reason)):
        dg.validate_run_config(job, run_config)
    with dg.instance_for_test() as instance:
        with pytest.raises(dg.DagsterInvalidConfigError):
            job.execute_in_process(instance=instance, run_config=run_config)
        assert instance.get_runs() == []  # refused before a run existed: nothing turns red
    good = {
        "ops": {"lineage_query": {"config": {"source": "a/b", "target": "c", "cells": ["0:2, 3"]}}}
    }
    dg.validate_run_config(job, good)
