"""An on-demand NumPy step whose lineage a confirmed reuse view knows is reconstructed from the
view (issue 27 item 2): nothing re-runs, and the answer says how it was obtained."""

from pathlib import Path

import dagster as dg
import numpy as np

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.core import on_demand
from dslog_dagster.core.reuse import ViewRegistry

CALLS = {"scaled": 0}


def _assets(policy: str) -> list[dg.AssetsDefinition]:
    @tracked_asset(name="raw")
    def raw() -> np.ndarray:
        return np.arange(12.0).reshape(3, 4)

    @tracked_asset(name="scaled", policy=policy)
    def scaled(raw: np.ndarray) -> np.ndarray:
        CALLS["scaled"] += 1
        return np.flipud(raw) * 2.0

    return [raw, scaled]


def _materialize(
    root: Path, policy: str, instance: dg.DagsterInstance
) -> tuple[DSLogResource, DSLogIOManager]:
    dslog = DSLogResource(store_dir=str(root / "store"), reuse=True)
    io = DSLogIOManager(dslog=dslog, base_dir=str(root / "values"))
    res = dg.materialize(
        _assets(policy), resources={"dslog": dslog, "io_manager": io}, instance=instance
    )
    assert res.success
    return dslog, io


PATH = ["scaled", "raw"]
CELLS = np.s_[0:2, 1:3]


def test_reconstruction_from_a_view_runs_nothing_and_equals_a_rerun(tmp_path: Path) -> None:
    with dg.instance_for_test() as instance:
        for _ in range(2):  # captures teach the registry; the view is confirmed on these inputs
            _materialize(tmp_path / "a", "capture", instance)
        dslog, io = _materialize(tmp_path / "a", "on_demand", instance)
        # the same on-demand run in a store without views: reconstruction re-runs the step
        plain, plain_io = _materialize(tmp_path / "b", "on_demand", instance)
    views = ViewRegistry(dslog.session().store)
    before = CALLS["scaled"]
    answer, done = on_demand.trace(dslog.session(), PATH, CELLS, io.value_loader(), views=views)
    assert CALLS["scaled"] == before  # taken from the view: the step did not run
    assert [r.obtained for r in done] == ["base view"]
    assert done[0].operation.args["obtained"] == "base view"
    assert done[0].operation.capture_method == on_demand.RECONSTRUCTED
    rerun, redone = on_demand.trace(plain.session(), PATH, CELLS, plain_io.value_loader())
    assert [r.obtained for r in redone] == ["re-run"]
    assert CALLS["scaled"] == before + 1
    assert answer == rerun
    assert answer.to_indices().tolist() == [[1, 1], [1, 2], [2, 1], [2, 2]]
