"""policy="on_demand" for pandas steps (issue 27, item 1): the step runs untracked, a query
reconstructs its lineage by re-running it under the pandas capture on the recorded input
versions, and refuses when that cannot be exact."""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets import saved_lineage_query
from dslog_dagster.cli import main
from dslog_dagster.core import on_demand
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import DeferredLineageError, ReconstructionError

CALLS = {"joined": 0}


@tracked_asset
def people() -> pd.DataFrame:
    return pd.DataFrame(
        {"id": [1, 2, 3, 4, 5], "city": ["a", "b", "a", None, "c"], "age": [31, 25, 47, 52, 19]}
    )


@tracked_asset
def cities() -> pd.DataFrame:
    return pd.DataFrame({"city": ["a", "b", "c"], "pop": [10.5, np.nan, 3.25]})


def _joined(people: pd.DataFrame, cities: pd.DataFrame) -> pd.DataFrame:
    adults = people[people["age"] >= 21]
    return adults.merge(cities, on="city", how="left").assign(w=lambda d: d["pop"] * 2)


@tracked_asset(policy="on_demand")
def joined(people: pd.DataFrame, cities: pd.DataFrame) -> pd.DataFrame:
    CALLS["joined"] += 1
    return _joined(people, cities)


@tracked_asset(name="joined")
def joined_captured(people: pd.DataFrame, cities: pd.DataFrame) -> pd.DataFrame:
    return _joined(people, cities)


@tracked_asset
def by_city(joined: pd.DataFrame) -> pd.DataFrame:
    return joined.groupby("city", as_index=False).agg(n=("id", "count"), w=("w", "sum"))


def _materialize(tmp_path: Path, assets: list[dg.AssetsDefinition]) -> tuple[DSLog, DSLogIOManager]:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            assets, resources={"dslog": dslog, "io_manager": io}, instance=instance
        )
    assert res.success
    return dslog.session(), io


PATH = ["by_city", "joined", "people"]


def test_on_demand_pandas_equals_captured_and_runs_once(tmp_path: Path) -> None:
    CALLS["joined"] = 0
    log, io = _materialize(tmp_path / "a", [people, cities, joined, by_city])
    assert CALLS["joined"] == 1  # the run itself, untracked
    (op,) = log.store.operations("joined")
    assert op.capture_method == on_demand.DEFERRED
    assert op.tables == ()
    cells = np.s_[0:2, 0]  # the group keys of cities a and b
    with pytest.raises(DeferredLineageError, match='policy="on_demand"'):
        log.prov_query(PATH, cells)
    # a few selected rows: a selective re-run on the rows of their `city` keys (one run on a
    # few rows lists the step's pandas calls, one runs on those rows), nothing registered
    answer, done = on_demand.trace(log, PATH, cells, io.value_loader(frames=True))
    assert [(r.obtained, r.operation) for r in done] == [("selective re-run", None)]
    assert done[0].note.startswith(
        "key `city`: re-ran on 5 of 8 input rows"
    )  # people 0-2, cities a, b
    assert CALLS["joined"] == 3
    whole, done = on_demand.trace(log, PATH, cells, io.value_loader(frames=True), selective=False)
    assert whole == answer
    assert [r.deferred.op_id for r in done] == [op.op_id]
    assert CALLS["joined"] == 4  # re-run once more, under capture, and registered
    ref, _ = _materialize(tmp_path / "b", [people, cities, joined_captured, by_city])
    assert answer == ref.prov_query(PATH, cells)
    # by hand: city a <- the `city` cells of adults 1 and 3 (rows 0, 2), b <- adult 2 (row 1)
    assert answer.to_indices().tolist() == [[0, 1], [1, 1], [2, 1]]
    # the `w` sum of a comes from `pop` (column 1) of city a (row 0); b's `pop` is NaN, which
    # `sum` skips, so b's sum comes from no cell
    w_path, w_cells = ["by_city", "joined", "cities"], np.s_[0:2, 2]
    got, more = on_demand.trace(log, w_path, w_cells, io.value_loader(frames=True))
    assert more == []  # kept: no second re-run
    assert got == ref.prov_query(w_path, w_cells)
    assert got.to_indices().tolist() == [[0, 1]]
    assert CALLS["joined"] == 4


def test_on_demand_pandas_refuses_a_changed_value(tmp_path: Path) -> None:
    log, io = _materialize(tmp_path, [people, cities, joined, by_city])
    (op,) = log.store.operations("joined")

    def tampered(rec):  # type: ignore[no-untyped-def]
        value = io.value_loader(frames=True)(rec)
        if rec.name == "cities":
            value = value.assign(pop=value["pop"] + 1.0)
        return value

    with pytest.raises(ReconstructionError, match="not deterministic"):
        on_demand.reconstruct(log.store, op, tampered)
    with pytest.raises(ReconstructionError, match="not stored"):
        on_demand.reconstruct(log.store, op, lambda rec: None)


def test_dslog_trace_reconstructs_a_pandas_step(tmp_path: Path, capsys: Any) -> None:
    log, _ = _materialize(tmp_path, [people, cities, joined, by_city])
    values = str(tmp_path / "values")
    args = ["trace", str(log.store.root), *PATH, "--cells", "0:2,city", "--values", values]
    assert main([*args, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "reconstructed joined" in out.err
    cells = sorted(
        (r["start_0"], r["stop_0"], r["start_1"], r["stop_1"]) for r in json.loads(out.out)
    )
    assert cells == [(0, 3, 1, 2)]  # rows 0..2 of people's `city`


def test_a_saved_query_with_on_demand_reconstructs_a_pandas_step(tmp_path: Path) -> None:
    lazy = saved_lineage_query(
        "origin", source="by_city", target="people", cells=["0:2,city"], on_demand=True
    )
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))
    resources = {"dslog": dslog, "io_manager": io}
    assets = [people, cities, joined, by_city]
    with dg.instance_for_test() as instance:
        assert dg.materialize(assets, resources=resources, instance=instance).success
        res = dg.materialize(
            [*assets, lazy], selection=[lazy], resources=resources, instance=instance
        )
    assert res.success
    (mat,) = res.asset_materializations_for_node("origin")
    assert mat.metadata["dslog/reconstructed"].value == 1
    assert mat.metadata["dslog/result_cells"].value == 3
