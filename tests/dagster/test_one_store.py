"""One lineage store per deployment: the IO managers write where the checks and queries read.

The store is the ``DSLogResource``'s (``store_dir``, ``$DSLOG_STORE``, else ``.dslog`` in the
instance storage directory); an IO manager's ``base_dir`` places values only. These tests wire
the resource the ways the docs show and check that lineage lands in that one store, that
``lineage_definitions`` merges with the project's own resources, and that a check facing
another store than the IO manager's says so.
"""

from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import ConfigurationError, DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets import lineage_checks, lineage_definitions
from dslog_dagster.core.api import DSLog
from dslog_dagster.io_managers import with_lineage
from dslog_dagster.settings import TrackingSettings

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@tracked_asset
def image() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset(code_version="1")
def smoothed(image: np.ndarray) -> np.ndarray:
    return (image[:-1] + image[1:]) / 2


def _checks_of(result: dg.ExecuteInProcessResult) -> dict[str, tuple[bool, str]]:
    return {
        f"{e.asset_key.to_user_string()}:{e.check_name}": (e.passed, e.description or "")
        for e in result.get_asset_check_evaluations()
    }


def _run(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, run_config=QUIET)


@pytest.mark.parametrize("wiring", ["dslog=", "from_resource", "with_lineage"])
def test_io_manager_writes_to_the_resource_store_whatever_its_base_dir(
    tmp_path: Path, wiring: str
) -> None:
    dslog = DSLogResource()  # no store_dir: the instance storage's .dslog
    data = str(tmp_path / "data")
    if wiring == "dslog=":
        io: object = DSLogIOManager(dslog=dslog, base_dir=data)
    elif wiring == "from_resource":
        io = DSLogIOManager.from_resource(dslog, base_dir=data)
    else:
        io = with_lineage(dg.FilesystemIOManager(base_dir=data), dslog)
    mine = dg.Definitions(assets=[image, smoothed], resources={"io_manager": io, "dslog": dslog})
    defs = dg.Definitions.merge(
        mine, lineage_definitions(assets=[image, smoothed], dslog=dslog, adhoc_query=False)
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = _run(defs, instance)
        assert result.success
        checks = _checks_of(result)
        # image is a source: no checks; smoothed's three ran in one step and passed
        assert set(checks) == {
            "smoothed:dslog_lineage_readable",
            "smoothed:dslog_lineage_shape",
            "smoothed:dslog_lineage_coverage",
        }
        assert all(passed for passed, _ in checks.values()), checks
        steps = {e.step_key for e in result.all_events if e.step_key}
        assert [s for s in steps if "check" in s] == ["dslog_lineage_checks__smoothed"]
        store = Path(instance.storage_directory()) / ".dslog"
        cells = DSLog(str(store)).prov_query(["smoothed", "image"], np.s_[0, 1])
        assert cells.to_indices().tolist() == [[0, 1], [1, 1]]
    assert not (tmp_path / "data" / ".dslog").exists()  # the values' folder holds no store


def test_store_dir_of_the_resource_is_the_one_store(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "lineage"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    defs = dg.Definitions(
        assets=[image, smoothed],
        asset_checks=lineage_checks([smoothed]),
        resources={"io_manager": io, "dslog": dslog},
    )
    with dg.instance_for_test() as instance:
        result = _run(defs, instance)
    assert result.success
    assert all(passed for passed, _ in _checks_of(result).values())
    cells = DSLog(str(tmp_path / "lineage")).prov_query(["smoothed", "image"], np.s_[1, 3])
    assert cells.to_indices().tolist() == [[1, 3], [2, 3]]


def test_lineage_definitions_merge_with_the_projects_own_resource(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "s"))
    mine = dg.Definitions(
        assets=[image, smoothed],
        resources={"io_manager": DSLogIOManager(dslog=dslog), "dslog": dslog},
    )
    merged = dg.Definitions.merge(mine, lineage_definitions(assets=[smoothed], dslog=dslog))
    assert merged.resolve_asset_graph().asset_check_keys  # it loads: one `dslog` resource
    with pytest.raises(ConfigurationError, match="both `dslog` and `store_dir`"):
        lineage_definitions(dslog=dslog, store_dir=str(tmp_path / "other"))


def test_settings_live_once_on_the_resource(tmp_path: Path) -> None:
    dslog = DSLogResource(policy="all_to_all")
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path))
    defs = dg.Definitions(assets=[image], resources={"io_manager": io, "dslog": dslog})
    job = defs.resolve_implicit_global_asset_job_def()
    resources = job.run_config_schema.config_type.fields["resources"].config_type.fields
    io_fields = set(resources["io_manager"].config_type.fields["config"].config_type.fields)
    dslog_fields = set(resources["dslog"].config_type.fields["config"].config_type.fields)
    assert not io_fields & set(TrackingSettings.model_fields)
    assert set(TrackingSettings.model_fields) <= dslog_fields
    assert io.dslog_settings().policy == "all_to_all"
    # keywords still make the IO manager's own resource; both ways at once are refused
    assert DSLogIOManager(base_dir=str(tmp_path), policy="off").dslog.policy == "off"
    with pytest.raises(ConfigurationError, match="both `dslog` and lineage settings"):
        DSLogIOManager(dslog=dslog, policy="off")


def test_a_check_reading_another_store_says_which_stores(tmp_path: Path) -> None:
    writes = DSLogResource(store_dir=str(tmp_path / "written"))
    reads = DSLogResource(store_dir=str(tmp_path / "read"))
    defs = dg.Definitions(
        assets=[image, smoothed],
        asset_checks=lineage_checks([smoothed]),
        resources={"io_manager": DSLogIOManager(dslog=writes), "dslog": reads},
    )
    with dg.instance_for_test() as instance:
        result = _run(defs, instance)
    checks = _checks_of(result)
    passed, text = checks["smoothed:dslog_lineage_readable"]
    assert not passed
    assert str(tmp_path / "read") in text
    assert "another store" in text
    assert "DSLogIOManager(dslog=dslog" in text
    assert "register_array" not in text


def test_launchpad_edits_of_the_resource_reach_the_io_manager(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "s"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    defs = dg.Definitions(assets=[image, smoothed], resources={"io_manager": io, "dslog": dslog})
    job = defs.resolve_implicit_global_asset_job_def()
    edited = {**QUIET, "resources": {"dslog": {"config": {"policy": "off"}}}}
    with dg.instance_for_test() as instance:
        for run_config, want in ((edited, "off"), (QUIET, "captured")):
            result = job.execute_in_process(instance=instance, run_config=run_config)
            assert result.success
            (mat,) = result.asset_materializations_for_node("smoothed")
            assert mat.metadata["dslog/obtained"].value == want


def test_a_query_on_a_store_without_the_asset_says_which_store(tmp_path: Path) -> None:
    from dslog_dagster.assets import lineage_query_asset

    empty = tmp_path / "empty"
    config = {"ops": {"lineage_query": {"config": {"source": "smoothed", "target": "image"}}}}
    with pytest.raises(dg.Failure) as failure:
        dg.materialize(
            [lineage_query_asset()],
            resources={"dslog": DSLogResource(store_dir=str(empty))},
            run_config={**QUIET, **config},
        )
    text = str(failure.value.description)
    assert f"`{empty}` (it is empty)" in text
    assert "asset `smoothed`" in text
    assert "DSLogIOManager(dslog=dslog)" in text
    assert "register_array" not in text
