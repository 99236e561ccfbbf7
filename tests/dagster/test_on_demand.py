"""policy="on_demand" (issue 27, PROVision): the step runs untracked, a query reconstructs its
lineage by re-running it on the recorded inputs, and refuses when that cannot be exact."""

import json
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets import lineage_checks, saved_lineage_query
from dslog_dagster.cli import main
from dslog_dagster.core import on_demand
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import DeferredLineageError, ReconstructionError

CALLS = {"scaled": 0}


@tracked_asset
def raw() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset(policy="on_demand")
def scaled(raw: np.ndarray) -> np.ndarray:
    CALLS["scaled"] += 1
    return np.flipud(raw) * 2.0


@tracked_asset
def col_sums(scaled: np.ndarray) -> np.ndarray:
    return scaled.sum(axis=0)


@tracked_asset(name="scaled")
def scaled_captured(raw: np.ndarray) -> np.ndarray:
    return np.flipud(raw) * 2.0


def _materialize(tmp_path: Path, assets: list[dg.AssetsDefinition]) -> tuple[DSLog, DSLogIOManager]:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))
    checks = lineage_checks(assets)
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [*assets, *checks], resources={"dslog": dslog, "io_manager": io}, instance=instance
        )
    assert res.success
    # every lineage check is green, the on-demand step's included (nothing stored to check)
    evaluations = res.get_asset_check_evaluations()
    assert evaluations
    assert all(e.passed for e in evaluations), [e.description for e in evaluations]
    return dslog.session(), io


PATH = ["col_sums", "scaled", "raw"]


def test_on_demand_equals_captured_and_runs_the_step_once(tmp_path: Path) -> None:
    CALLS["scaled"] = 0
    log, io = _materialize(tmp_path / "a", [raw, scaled, col_sums])
    assert CALLS["scaled"] == 1  # the run itself: untracked, once
    (op,) = log.store.operations("scaled")
    assert op.capture_method == on_demand.DEFERRED
    assert op.tables == ()
    with pytest.raises(DeferredLineageError, match='policy="on_demand"'):
        log.prov_query(PATH, np.s_[1])
    answer, done = on_demand.trace(log, PATH, np.s_[1], io.value_loader())
    assert [r.deferred.op_id for r in done] == [op.op_id]
    assert CALLS["scaled"] == 2  # re-run once, under capture
    # the same pipeline fully captured gives the same cells
    ref_log, _ = _materialize(tmp_path / "b", [raw, scaled_captured, col_sums])
    assert answer == ref_log.prov_query(PATH, np.s_[1])
    assert answer.to_indices().tolist() == [[0, 1], [1, 1], [2, 1]]
    # kept: the next query needs no re-run
    again = DSLog(log.store.root)
    assert again.prov_query(PATH, np.s_[1]) == answer
    _, more = on_demand.trace(again, PATH, np.s_[1], io.value_loader())
    assert more == []
    assert CALLS["scaled"] == 2


def test_changed_code_and_expired_values_are_refused(tmp_path: Path) -> None:
    log, io = _materialize(tmp_path, [raw, scaled, col_sums])
    (op,) = log.store.operations("scaled")
    key = op.args["on_demand"]["function"]
    original = on_demand.step_function(key)
    assert original is not None

    def changed(raw: np.ndarray) -> np.ndarray:
        return raw * 3.0

    on_demand._FUNCTIONS[key] = changed
    try:
        with pytest.raises(ReconstructionError, match=r"code of .* changed"):
            on_demand.reconstruct(log.store, op, io.value_loader())
    finally:
        on_demand._FUNCTIONS[key] = original
    with pytest.raises(ReconstructionError, match="not stored"):
        on_demand.reconstruct(log.store, op, lambda rec: None)

    # a stored output that re-running does not give back
    def tampered(rec):  # type: ignore[no-untyped-def]
        value = io.value_loader()(rec)
        return value + 1.0 if rec.name == "scaled" else value

    with pytest.raises(ReconstructionError, match="not deterministic"):
        on_demand.reconstruct(log.store, op, tampered)


class Factor(dg.Config):
    k: float = 2.0


@tracked_asset(policy="on_demand")
def configured(config: Factor, raw: np.ndarray) -> np.ndarray:
    return np.roll(raw, 1, axis=1) * config.k


@tracked_asset(policy="on_demand")
def with_context(context: dg.AssetExecutionContext, raw: np.ndarray) -> np.ndarray:
    return raw * 2.0


def test_a_step_with_config_is_rerun_with_its_recorded_config(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))
    resources = {"dslog": dslog, "io_manager": io}
    run_config = {"ops": {"configured": {"config": {"k": 5.0}}}}
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [raw, configured], resources=resources, instance=instance, run_config=run_config
        )
        assert res.success
        # k = 5 recorded: the re-run reproduces the stored value (k = 2 would not)
        log = dslog.session()
        got, done = on_demand.trace(log, ["configured", "raw"], np.s_[0, 0], io.value_loader())
        assert len(done) == 1
        assert got.to_indices().tolist() == [[0, 3]]  # roll by one column: column 3 → 0
        failed = dg.materialize(
            [raw, with_context], resources=resources, instance=instance, raise_on_error=False
        )
    assert not failed.success
    (failure,) = failed.get_step_failure_events()
    assert 'cannot use policy="on_demand"' in str(failure.event_specific_data)


def test_dslog_trace_reconstructs_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = _materialize(tmp_path, [raw, scaled, col_sums])
    values = str(tmp_path / "values")
    args = ["trace", str(log.store.root), *PATH, "--cells", "1", "--values", values]
    assert main([*args, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "reconstructed scaled" in out.err
    boxes = [(r["start_0"], r["stop_0"], r["start_1"], r["stop_1"]) for r in json.loads(out.out)]
    assert boxes == [(0, 3, 1, 2)]
    assert main([*args, "--import", "no_such_module_here"]) == 2
    assert "Cannot import `no_such_module_here`" in capsys.readouterr().err


def test_a_saved_query_with_on_demand_reconstructs_and_one_without_says_why(
    tmp_path: Path,
) -> None:
    lazy = saved_lineage_query(
        "origin", source="col_sums", target="raw", cells=["1"], on_demand=True
    )
    strict = saved_lineage_query("origin_strict", source="col_sums", target="raw", cells=["1"])
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))
    resources = {"dslog": dslog, "io_manager": io}
    with dg.instance_for_test() as instance:
        assert dg.materialize(
            [raw, scaled, col_sums], resources=resources, instance=instance
        ).success
        failed = dg.materialize(
            [raw, scaled, col_sums, strict],
            selection=[strict],
            resources=resources,
            instance=instance,
            raise_on_error=False,
        )
        assert not failed.success
        (failure,) = failed.get_step_failure_events()
        assert 'policy="on_demand"' in str(failure.event_specific_data)
        res = dg.materialize(
            [raw, scaled, col_sums, lazy], selection=[lazy], resources=resources, instance=instance
        )
    assert res.success
    (mat,) = res.asset_materializations_for_node("origin")
    assert mat.metadata["dslog/reconstructed"].value == 1
    assert mat.metadata["dslog/result_cells"].value == 3
