"""The DPDS provenance questions as saved assets, on a tracked pipeline, by hand."""

from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.assets import provenance_query_asset
from dslog_dagster.errors import QueryError


@tracked_asset
def table() -> np.ndarray:
    return np.arange(12.0).reshape(4, 3)


@tracked_asset
def kept(table: np.ndarray) -> np.ndarray:
    return table[1::2]  # records 1 and 3


@tracked_asset
def widened(kept: np.ndarray) -> np.ndarray:
    return np.concatenate([kept, (kept[:, 0] + kept[:, 1])[:, None]], axis=1)


def _answer(res: dg.ExecuteInProcessResult, name: str) -> list[dict[str, str]]:
    (mat,) = res.asset_materializations_for_node(name)
    return [dict(r.data) for r in mat.metadata["dslog/answer"].records]


def test_questions_about_a_tracked_pipeline(tmp_path: Path) -> None:
    questions = [
        provenance_query_asset("why_item", "why", "widened", row=1, column=3),
        provenance_query_asset("how_item", "how", "widened", row=1, column=3),
        provenance_query_asset("spread_record", "spread", "table", row=1),
        provenance_query_asset("history_feature", "history", "kept", column=2),
        provenance_query_asset("dropped", "invalidated", "kept"),
    ]
    dslog = DSLogResource(store_dir=str(tmp_path / "store"))
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "v"))
    resources = {"dslog": dslog, "io_manager": io}
    with dg.instance_for_test() as instance:
        assert dg.materialize(
            [table, kept, widened], resources=resources, instance=instance
        ).success
        # the questions run once the pipeline is there (spread and history look downstream)
        res = dg.materialize(
            [*questions, table, kept, widened],
            selection=[q.key for q in questions],
            resources=resources,
            instance=instance,
        )
    assert res.success
    why = _answer(res, "why_item")
    # widened[1, 3] = kept[1, 0] + kept[1, 1] = table[3, 0] + table[3, 1]
    assert [(r["array"], r["boxes"]) for r in why] == [("kept", "1:2, 0:2"), ("table", "3:4, 0:2")]
    how = _answer(res, "how_item")
    assert [(r["operation"], r["input"], r["output"]) for r in how] == [
        ("kept", "table", "kept"),
        ("widened", "kept", "widened"),
    ]
    spread = _answer(res, "spread_record")
    assert [(r["array"], r["boxes"]) for r in spread] == [
        ("kept", "0:1, 0:3"),
        ("widened", "0:1, 0:4"),
    ]
    history = _answer(res, "history_feature")
    assert [(r["array"], r["boxes"]) for r in history] == [
        ("table", "[1:2, 2:3], [3:4, 2:3]"),
        ("kept", "0:2, 2:3"),
        ("widened", "0:2, 2:3"),
    ]
    (dropped,) = _answer(res, "dropped")
    assert dropped["array"] == "table"
    assert dropped["records_dropped"] == "[0, 2]"


def test_bad_questions_are_refused_when_defined() -> None:
    with pytest.raises(QueryError, match="one of why"):
        provenance_query_asset("q", "where", "a")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="give no selection"):
        provenance_query_asset("q", "invalidated", "a", row=1)
