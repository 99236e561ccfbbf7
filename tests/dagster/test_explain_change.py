"""Explain a change between two materializations (issue 27, PROVision §VII): the check after
each materialization, and the explanation checked against hand-derived cells."""

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets.change import CHECK_CHANGE, change_checks, explain_asset_change
from dslog_dagster.cli import main

SOURCE = {"raw": np.arange(12.0).reshape(3, 4), "factor": 2.0}


@tracked_asset
def raw() -> np.ndarray:
    return SOURCE["raw"].copy()


@tracked_asset
def scaled(raw: np.ndarray) -> np.ndarray:
    return raw * SOURCE["factor"]


@tracked_asset
def col_sums(scaled: np.ndarray) -> np.ndarray:
    return scaled.sum(axis=0)


def _run(
    tmp_path: Path, instance: dg.DagsterInstance
) -> tuple[dg.ExecuteInProcessResult, DSLogResource, DSLogIOManager]:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))
    res = dg.materialize(
        [raw, scaled, col_sums, *change_checks([raw, scaled, col_sums])],
        resources={"dslog": dslog, "io_manager": io},
        instance=instance,
    )
    assert res.success
    return res, dslog, io


def _check(res: dg.ExecuteInProcessResult, key: str) -> dg.AssetCheckEvaluation:
    (ev,) = [
        e
        for e in res.get_asset_check_evaluations()
        if e.asset_key == dg.AssetKey(key) and e.check_name == CHECK_CHANGE
    ]
    return ev


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def source() -> Iterator[dict[str, object]]:
    saved = dict(SOURCE)
    yield SOURCE
    SOURCE.clear()
    SOURCE.update(saved)


def test_changed_source_cell_is_traced_to_its_column(
    tmp_path: Path,
    source: dict[str, object],
    instance: dg.DagsterInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, _, _ = _run(tmp_path, instance)
    assert _check(first, "col_sums").passed  # nothing earlier to compare with
    assert not [e for e in first.get_asset_check_evaluations() if e.asset_key == dg.AssetKey("raw")]

    changed = SOURCE["raw"].copy()  # type: ignore[union-attr]
    changed[1, 2] = 100.0
    SOURCE["raw"] = changed
    second, dslog, io = _run(tmp_path, instance)
    ev = _check(second, "col_sums")
    assert not ev.passed
    assert ev.severity == dg.AssetCheckSeverity.WARN
    assert ev.metadata["dslog/changed_cells"].value == 1
    assert "change starts at raw: a source" in (ev.description or "")
    # same answer from the API, checked by hand: col_sums[2] ← scaled[:, 2] ← raw[:, 2];
    # of those, only raw[1, 2] (and so scaled[1, 2]) differ
    expl = explain_asset_change(dslog.session(), io, "col_sums", first.run_id, second.run_id)
    by_name = {a.name: a for a in expl.arrays}
    assert by_name["col_sums"].changed is not None
    assert by_name["col_sums"].changed.to_indices().tolist() == [[2]]
    for name in ("scaled", "raw"):
        a = by_name[name]
        assert a.traced.to_indices().tolist() == [[0, 2], [1, 2], [2, 2]]
        assert a.changed is not None
        assert a.changed.to_indices().tolist() == [[1, 2]]
    assert [o.name for o in expl.origins] == ["raw"]
    assert not _check(second, "scaled").passed
    # the command line gives the same rows from the store and the values folder alone
    code = main(
        [
            "diff",
            str(tmp_path / "store"),
            "col_sums",
            first.run_id,
            second.run_id,
            "--values",
            str(tmp_path / "values"),
            "--format",
            "json",
        ]
    )
    assert code == 0
    rows = {r["array"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["raw"]["changed_boxes"] == "1:2, 2:3"
    assert rows["raw"]["origin"] is True
    assert rows["col_sums"]["changed_cells"] == 1


def test_a_step_that_computes_differently_is_where_the_change_starts(
    tmp_path: Path, source: dict[str, object], instance: dg.DagsterInstance
) -> None:
    first, _, _ = _run(tmp_path, instance)
    SOURCE["factor"] = 3.0  # the step's code/config changed; its input did not
    second, dslog, io = _run(tmp_path, instance)
    expl = explain_asset_change(dslog.session(), io, "col_sums", first.run_id, second.run_id)
    assert [o.name for o in expl.origins] == ["scaled"]
    by_name = {a.name: a for a in expl.arrays}
    assert by_name["raw"].changed is not None
    assert by_name["raw"].changed.is_empty()
    assert by_name["col_sums"].percent_changed == pytest.approx(100.0)
    # scaled[0, 0] = 0 · factor stays 0: 11 of 12 scaled cells differ
    assert by_name["scaled"].changed is not None
    assert by_name["scaled"].changed.count() == 11
    ev = _check(second, "col_sums")
    assert "step `scaled` computed differently" in (ev.description or "")


def test_an_unchanged_rerun_passes(
    tmp_path: Path, source: dict[str, object], instance: dg.DagsterInstance
) -> None:
    _run(tmp_path, instance)
    second, _, _ = _run(tmp_path, instance)
    ev = _check(second, "col_sums")
    assert ev.passed
    assert ev.metadata["dslog/changed_cells"].value == 0
