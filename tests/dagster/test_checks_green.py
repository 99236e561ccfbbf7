"""The example project is all green on a fresh first run, and check messages say what to do.

``hotspot_job`` runs in-process with the example's own Definitions (``make_defs``) on a fresh
instance and store: every asset check it runs must pass — none sits on the source assets
``raw_frame``/``dark_frame`` — and the checks of one asset run as one step. The thesis
example's steps (``hotspot_coords`` from ``np.argwhere``, the crop, its summary) are checked
too: every cell of theirs has lineage. Then the saved
queries over the NumPy pipeline run and answer. The Spark half (``titles_job``) is covered by
``tests/spark/test_titles_example.py``; it has no lineage checks.
"""

import sys
from pathlib import Path

import dagster as dg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "example_project"))

from hotspots.definitions import make_defs

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets import lineage_checks
from dslog_dagster.io_managers import metadata as m

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
SMALL = {"config": {"size": 32, "seed": 3, "blobs": 2}}


def test_example_first_run_is_all_green(tmp_path: Path) -> None:
    defs = make_defs(str(tmp_path / "data"))
    job = defs.resolve_job_def("hotspot_job")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(
            instance=instance,
            run_config={**QUIET, "ops": {"raw_frame": SMALL, "dark_frame": SMALL}},
        )
        assert result.success
        checks = {
            (e.asset_key.to_user_string(), e.check_name): e
            for e in result.get_asset_check_evaluations()
        }
        # no checks on sources; the thesis example's steps (argwhere, crop, summary) too; the
        # "what changed" checks pass on a first run (nothing earlier to compare with)
        assert {a for a, _ in checks} == {
            "calibrated",
            "smoothed",
            "hotspots",
            "hotspot_coords",
            "hotspot_windows",
            "window_summary",
        }
        assert len(checks) == 18
        red = {k: e.description for k, e in checks.items() if not e.passed}
        assert not red, red
        check_steps = {
            e.step_key for e in result.all_events if e.step_key and "lineage_checks" in e.step_key
        }
        assert check_steps == {
            "dslog_lineage_checks__calibrated",
            "dslog_lineage_checks__smoothed",
            "dslog_lineage_checks__hotspot_coords",
            "dslog_lineage_checks__hotspot_windows",
            "dslog_lineage_checks__window_summary",
        }
        # the saved queries over the NumPy pipeline answer on the same (one) store
        queries = [dg.AssetKey("hotspot_origin"), dg.AssetKey("raw_reach")]
        adhoc = defs.resolve_implicit_global_asset_job_def()
        answered = adhoc.execute_in_process(
            instance=instance, run_config=QUIET, asset_selection=queries
        )
        assert answered.success
        for key in queries:
            event = instance.get_latest_materialization_event(key)
            assert event is not None
            assert event.asset_materialization is not None
            assert event.asset_materialization.metadata[m.RESULT_CELLS].value > 0


@tracked_asset
def base() -> np.ndarray:
    return np.arange(16.0).reshape(4, 4)


@tracked_asset
def bordered(base: np.ndarray) -> np.ndarray:
    # row 0 is a constant: no input cell feeds it
    return np.concatenate([np.zeros((1, 4)), base[1:] * 2])


def test_coverage_names_the_box_and_what_to_do(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "s"))
    resources = {"io_manager": DSLogIOManager(dslog=dslog, base_dir=str(tmp_path)), "dslog": dslog}
    for declared, passed in ((None, False), ({"bordered": ["0,:"]}, True)):
        defs = dg.Definitions(
            assets=[base, bordered],
            asset_checks=lineage_checks([base, bordered], constant_cells=declared),
            resources=resources,
        )
        with dg.instance_for_test() as instance:
            result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
                instance=instance, run_config=QUIET
            )
        coverage = {e.check_name: e for e in result.get_asset_check_evaluations()}[
            "dslog_lineage_coverage"
        ]
        assert coverage.passed is passed
        text = coverage.description or ""
        if not passed:
            assert "first box: 0:1, 0:4" in text
            assert 'constant_cells={"bordered": ["0:1, 0:4"]}' in text
            assert "slice(" not in text
        else:
            assert "declared constant (4)" in text


def test_a_new_raw_frame_is_explained_by_the_change_checks(tmp_path: Path) -> None:
    """The example's "what changed" checks: a second run with another seed changes the raw and
    dark frames (the sources), and the checks trace the changed cells back to them."""
    defs = make_defs(str(tmp_path / "data"))
    job = defs.resolve_job_def("hotspot_job")
    other = {"config": {**SMALL["config"], "seed": 4}}
    with dg.instance_for_test() as instance:
        for frame in (SMALL, other):
            result = job.execute_in_process(
                instance=instance,
                run_config={**QUIET, "ops": {"raw_frame": frame, "dark_frame": frame}},
            )
            assert result.success
    change = {
        e.asset_key.to_user_string(): e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "dslog_explain_change"
    }
    assert set(change) == {"calibrated", "smoothed", "hotspots"}
    smoothed = change["smoothed"]
    assert not smoothed.passed
    assert smoothed.severity == dg.AssetCheckSeverity.WARN
    assert "change starts at raw_frame: a source" in (smoothed.description or "")
    assert "change starts at dark_frame: a source" in (smoothed.description or "")
    assert smoothed.metadata["dslog/changed_cells"].value > 0
