"""The DPDS running example end to end through a Dagster job, queried backward by hand.

Three source frames; two left joins on (key1, key2) with duplicate keys and a null key (pandas
matches null keys to each other); ``fillna`` with a value and with a dict; a one-hot encoding
of ``E`` concatenated as columns; ``E`` dropped. The output is stored by DSLogIOManager as
Parquet with its row ids, and the lineage of a few cells is queried back to each source.
"""

import json
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import prov.model as pm
import pytest
from dpds_pipelines import DF_A, DF_B, DF_C, running_pandas

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset, with_lineage
from dslog_dagster.cli import main
from dslog_dagster.core import provenance_queries as pq
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.export import asset_document
from dslog_dagster.io_managers.pandas_frames import ROW_ID

pipeline = running_pandas


@tracked_asset
def df_A() -> pd.DataFrame:
    return DF_A.copy()


@tracked_asset
def df_B() -> pd.DataFrame:
    return DF_B.copy()


@tracked_asset
def df_C() -> pd.DataFrame:
    return DF_C.copy()


@tracked_asset
def prepared(df_A: pd.DataFrame, df_B: pd.DataFrame, df_C: pd.DataFrame) -> pd.DataFrame:
    return pipeline(df_A, df_B, df_C)


@tracked_asset(mode="considered")
def prepared_considered(df_A: pd.DataFrame, df_B: pd.DataFrame, df_C: pd.DataFrame) -> pd.DataFrame:
    return pipeline(df_A, df_B, df_C)


def _cells(
    log: DSLog, path: list[str], cell: tuple[int, int], shape: tuple[int, int]
) -> set[tuple[int, int]]:
    flat = log.prov_query(path, np.s_[cell[0], cell[1]]).to_flat()
    return {(int(r), int(c)) for r, c in zip(*np.unravel_index(flat, shape), strict=True)}


@pytest.mark.parametrize("wrapped", [False, True])
def test_dpds_running_example_end_to_end(
    tmp_path: Path, wrapped: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = (
        with_lineage(dg.FilesystemIOManager(base_dir=str(tmp_path / "fs")), dslog)
        if wrapped
        else DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    )
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [df_A, df_B, df_C, prepared, prepared_considered],
            resources={"io_manager": io, "dslog": dslog},
            instance=instance,
        )
        assert res.success
        value = res.output_for_node("prepared")
        md = res.asset_materializations_for_node("prepared")[0].metadata
    deps = md["dagster/column_lineage"].value.deps_by_column
    assert [(d.asset_key.to_user_string(), d.column_name) for d in deps["F"]] == [("df_C", "F")]
    assert {d.asset_key.to_user_string() for d in deps["key1"]} == {"df_A", "df_B", "df_C"}
    assert [c.name for c in md["dagster/column_schema"].value.columns][:3] == ["key1", "key2", "A"]
    expected = pipeline(DF_A, DF_B, DF_C)
    pd.testing.assert_frame_equal(value, expected)
    assert list(expected.columns) == ["key1", "key2", "A", "C", "F", "E1", "Ex"]
    log = DSLog(str(tmp_path / "store"))
    rec = log.store.get_array("prepared")
    assert rec.shape == (5, 7)
    assert rec.columns is not None
    assert [n for n, _ in rec.columns] == list(expected.columns)
    # rows of the output: A0+B0+C0, A1+B0+C0, A2+B1+C1, A2+B2+C1, A3+B3 (null keys) + no C
    q = lambda path, cell, shape: _cells(log, path, cell, shape)  # noqa: E731
    # F of row 0 is df_C's F of row 0; F of row 3 was imputed ("Fx"): no contributing cell
    assert q(["prepared", "df_C"], (0, 4), (2, 4)) == {(0, 3)}
    assert q(["prepared", "df_C"], (3, 4), (2, 4)) == set()
    # the one-hot cell E1 of row 1 comes from E of df_C row 0
    assert q(["prepared", "df_C"], (1, 5), (2, 4)) == {(0, 2)}
    # key1 of row 3: a coalesced key, contributed by both matched key cells of each join
    assert q(["prepared", "df_C"], (3, 0), (2, 4)) == {(1, 0)}
    assert q(["prepared", "df_A"], (3, 0), (4, 3)) == {(2, 0)}
    assert q(["prepared", "df_B"], (3, 0), (4, 3)) == {(2, 0)}
    # key1 of row 4 was null, matched df_B's null key, then imputed: no contributing cell
    assert q(["prepared", "df_A"], (4, 0), (4, 3)) == set()
    # C of row 4 is df_B's C of row 3, found through the null-key match
    assert q(["prepared", "df_B"], (4, 3), (4, 3)) == {(3, 2)}
    # considered: the imputed F of row 3 considered df_C row 1's null F and its join keys
    qc = lambda path, cell, shape: _cells(log, ["prepared_considered", *path[1:]], cell, shape)  # noqa: E731
    assert qc(["x", "df_C"], (3, 4), (2, 4)) == {(1, 0), (1, 1), (1, 3)}
    # ...and, back in df_A, the keys of A2 (the join that made the row) and A's own F: none
    assert qc(["x", "df_A"], (3, 4), (4, 3)) == {(2, 0), (2, 1)}
    # forward: df_B's C of row 1 (null, imputed) is contributed nowhere, considered by C of row 2
    fwd = log.prov_query(["df_B", "prepared"], np.s_[1, 2]).to_flat()
    assert fwd.size == 0
    fwdc = log.prov_query(["df_B", "prepared_considered"], np.s_[1, 2]).to_flat()
    assert set(np.unravel_index(fwdc, (5, 7))[0].tolist()) == {2}
    # the DPDS kinds of each pandas call of the step, stored with its operation
    (op,) = [o for o in log.store.operations() if o.outputs[0].name == "prepared"]
    assert op.effects is not None
    assert [s.call for s in op.effects.steps] == [
        "pandas.merge", "DataFrame.fillna", "pandas.merge", "DataFrame.fillna",
        "pandas.get_dummies", "pandas.concat", "pandas.concat", "DataFrame.drop",
    ]  # fmt: skip
    assert op.kinds == ("join", "imputation", "space_augmentation", "feature_selection")
    assert op.effects.steps[2].added == ("E", "F")  # df_C's columns, by the second join
    assert op.effects.steps[3].transformed == ("E", "F")  # fillna(value={"E": ..., "F": ...})
    assert op.effects.steps[4].added == ("E1", "Ex")
    assert op.effects.steps[7].removed == ("E",)
    if wrapped:
        return
    # which imputations touched row 3 (its F was imputed): the step, by kind
    store = str(tmp_path / "store")
    assert main(["provenance", store, "how", "prepared", "--row", "3", "--kind", "imputation",
                 "--format", "json"]) == 0  # fmt: skip
    steps = json.loads(capsys.readouterr().out)  # one row per input the step read
    assert sorted(s["input"] for s in steps) == ["df_A", "df_B", "df_C"]
    assert {s["kinds"] for s in steps} == {
        "join, imputation, space_augmentation, feature_selection"
    }
    assert main(["provenance", store, "how", "prepared", "--row", "3", "--kind", "append",
                 "--format", "json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out) == []
    # names: a column by name on the command line, the DPDS questions, and the PROV schema
    assert main(["query", store, "prepared", "df_C", "--cells", "0,F", "--format", "json"]) == 0
    (box,) = json.loads(capsys.readouterr().out)
    assert (box["start_0"], box["stop_0"], box["start_1"], box["stop_1"]) == (0, 1, 3, 4)
    assert box["columns"] == "F"  # df_C's columns: key1, key2, E, F
    assert main(["query", store, "prepared", "df_C", "--cells", "0,G"]) == 2
    assert "No column `G`" in capsys.readouterr().err
    why = pq.why(log.store, "prepared", pq.item((5, 7), 1, 5))
    assert ("df_C", "0:1, 2:3") in [(a.name, str(a.cells)) for a in why.arrays]
    doc = asset_document(log, "prepared", depth=1, cells=False)
    (entity,) = [
        e
        for e in doc.get_records(pm.ProvEntity)
        if "prepared" in str(e.get_attribute("dslog:name"))
    ]
    assert json.loads(entity.get_attribute("dslog:columns").pop())[5][0] == "E1"


def test_stored_frame_keeps_its_row_ids(tmp_path: Path) -> None:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    res = dg.materialize([df_A], resources={"io_manager": io, "dslog": dslog})
    assert res.success
    files = list((tmp_path / "data").rglob("*.parquet"))
    stored = pd.read_parquet(next(f for f in files if f.is_file()))
    assert stored[ROW_ID].tolist() == [0, 1, 2, 3]
    # shuffled on disk, the rows come back in id order
    shuffled = stored.iloc[[2, 0, 3, 1]]
    from dslog_dagster.io_managers.pandas_frames import from_stored

    pd.testing.assert_frame_equal(from_stored(shuffled, "x"), DF_A)


def test_unsupported_operation_fails_the_step_and_stores_nothing(tmp_path: Path) -> None:
    @tracked_asset
    def bad(df_A: pd.DataFrame) -> pd.DataFrame:
        return df_A.pivot_table(index="key1")

    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    with pytest.raises(UnsupportedFrameOperationError, match=r"DataFrame\.pivot_table"):
        dg.materialize([df_A, bad], resources={"io_manager": io, "dslog": dslog})
    log = DSLog(str(tmp_path / "store"))
    with pytest.raises(KeyError):
        log.store.get_array("bad")


def test_a_pandas_step_runs_once_per_materialization(tmp_path: Path) -> None:
    calls = []

    @tracked_asset
    def counted(df_A: pd.DataFrame) -> pd.DataFrame:
        calls.append(1)
        return df_A[df_A.A > 10]

    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    for _ in range(3):
        assert dg.materialize([df_A, counted], resources={"io_manager": io, "dslog": dslog}).success
    assert len(calls) == 3
    log = DSLog(str(tmp_path / "store"))
    assert _cells(log, ["counted", "df_A"], (0, 2), (4, 3)) == {(1, 2)}
