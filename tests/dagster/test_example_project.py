"""The hotspot example project loads as Dagster definitions and runs under each policy."""

import sys
from pathlib import Path

import dagster as dg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "example_project"))

from hotspots.definitions import defs, make_defs

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
SMALL = {"config": {"size": 32, "seed": 3, "blobs": 2}}


def test_defs_load_with_job_and_resources() -> None:
    d = defs.get_repository_def()
    assert d.get_job("hotspot_job") is not None
    keys = {k.to_user_string() for k in d.asset_graph.get_all_asset_keys()}
    assert {"raw_frame", "smoothed", "hotspots", "top_hotspots", "peak_stats"} <= keys


def test_tracked_values_equal_untracked(tmp_path: Path) -> None:
    outputs = {}
    for policy in ("capture", "off"):
        job = make_defs(str(tmp_path / policy), policy=policy).resolve_job_def("hotspot_job")
        with dg.instance_for_test() as instance:
            res = job.execute_in_process(
                instance=instance,
                run_config={**QUIET, "ops": {"raw_frame": SMALL, "dark_frame": SMALL}},
            )
        assert res.success
        outputs[policy] = [
            res.output_for_node(node, out)
            for node, out in [("smoothed", "result"), ("hotspots", "result"),
                              ("summary", "top_hotspots"), ("summary", "peak_stats")]
        ]  # fmt: skip
        obtained = {
            ev.materialization.asset_key.to_user_string(): ev.materialization.metadata[
                "dslog/obtained"
            ].value
            for ev in res.get_asset_materialization_events()
        }
        if policy == "capture":
            assert obtained["smoothed"] == "captured"
            assert obtained["raw_frame"] == "source"
        else:
            assert set(obtained.values()) == {"off"}
    for tracked, untracked in zip(outputs["capture"], outputs["off"], strict=True):
        assert np.array_equal(tracked, untracked)  # NumPy's own float64 values, bit for bit
