"""Query assets answer exactly what the core query API answers, and show it in metadata."""

import base64
import json
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest

from dslog_dagster.assets import (
    LineageQueryConfig,
    SavedLineageQuery,
    lineage_query_asset,
    saved_lineage_query,
)
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.query import CellSet
from dslog_dagster.resources import DSLogResource
from tests.dagster.pipeline import PIPELINE, SHAPE, box3

ADHOC = lineage_query_asset()


def png_of(md: str) -> bytes:
    return base64.b64decode(md.split("data:image/png;base64,")[1].split(")")[0])


def _materialize(
    instance: dg.DagsterInstance, store_dir: str, assets: list[dg.AssetsDefinition], **kw: object
) -> dg.ExecuteInProcessResult:
    res = dg.materialize(
        assets, instance=instance, resources={"dslog": DSLogResource(store_dir=store_dir)}, **kw
    )
    assert res.success
    return res


def _query_run(instance: dg.DagsterInstance, store_dir: str, cfg: LineageQueryConfig) -> dict:
    res = _materialize(
        instance,
        store_dir,
        [*PIPELINE, ADHOC],
        selection=[ADHOC.key],
        run_config=dg.RunConfig(ops={"lineage_query": cfg}),
    )
    (mat,) = res.asset_materializations_for_node("lineage_query")
    return dict(mat.metadata)


def _expected_backward_hot_to_raw(cells: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """hot ← raw directly (same cell) and through smoothed (3×3 box of the same cell)."""
    out = set()
    for c in cells:
        out.add(c)
        out.update(box3(c))
    return out


def test_adhoc_backward_query_unions_every_path(materialized) -> None:
    instance, store_dir = materialized
    cfg = LineageQueryConfig(source="images/hot", target="images/raw", cells=["0", "5,7"])
    meta = _query_run(instance, store_dir, cfg)

    picked = [(0, j) for j in range(SHAPE[1])] + [(5, 7)]
    want = _expected_backward_hot_to_raw(picked)
    got = DSLog(store_dir).lineage_between("images/hot", "images/raw", np.s_[0:1, :])
    got = got | DSLog(store_dir).lineage_between("images/hot", "images/raw", [(5, 7)])
    assert {tuple(c) for c in got.to_indices().tolist()} == want
    assert meta["dslog/result_cells"].value == len(want)
    assert meta["dslog/result_boxes"].value == got.n_boxes
    query = meta["dslog/query"].value
    assert query["resolved_direction"] == "backward"
    assert query["source_array"] == "images/hot"
    assert query["source_cells"] == len(picked)
    # the Parquet file holds exactly the answer
    table = pq.read_table(meta["dslog/result_path"].value)
    assert Path(meta["dslog/result_path"].value).parent == Path(
        store_dir, "queries", "lineage_query"
    )
    assert table.drop_columns([]).equals(
        got.to_arrow().replace_schema_metadata(table.schema.metadata)
    )
    assert json.loads(table.schema.metadata[b"dslog.query"])["target_array"] == "images/raw"
    rebuilt = CellSet.from_ranges(
        SHAPE,
        np.stack([table["start_0"].to_numpy(), table["start_1"].to_numpy()], axis=1),
        np.stack([table["stop_0"].to_numpy(), table["stop_1"].to_numpy()], axis=1),
    )
    assert rebuilt == got == CellSet.from_arrow(table)
    # preview and picture
    preview = meta["dslog/result_preview"].value
    assert preview.records[0].data["start_0"] == int(got.lo[0, 0])
    assert preview.records[0].data["stop_0"] == int(got.hi[0, 0]) + 1
    assert sum(r.data["cells"] for r in preview.records) == len(want)
    for key, title in [
        ("dslog/result_picture", "linked cells of images/raw"),
        ("dslog/source_picture", "query cells of images/hot"),
    ]:
        md = meta[key].value
        assert md.startswith(f"**{title}**")
        assert len(md) < 1000  # shown inline by the OSS UI
        png = base64.b64decode(md.split("data:image/png;base64,")[1].split(")")[0])
        assert png.startswith(b"\x89PNG")
    # the picture is the answer: red where the result is, over the whole target
    from io import BytesIO

    from PIL import Image

    img = Image.open(BytesIO(png_of(meta["dslog/result_picture"].value)))
    scale = img.width // SHAPE[1]
    lit = np.array(img)[scale // 2 :: scale, scale // 2 :: scale] == 1
    assert (lit == got.to_mask()).all()


def test_adhoc_forward_query_equals_prov_query(materialized) -> None:
    instance, store_dir = materialized
    cfg = LineageQueryConfig(
        source="images/raw", target="images/colsum", indices=[[2, 3]], direction="forward"
    )
    meta = _query_run(instance, store_dir, cfg)
    want = DSLog(store_dir).prov_query(["images/raw", "images/smoothed", "images/colsum"], [(2, 3)])
    # raw (2,3) feeds smoothed columns 2..4, each feeding one column sum
    assert want.to_flat().tolist() == [2, 3, 4]
    assert meta["dslog/result_cells"].value == 3
    assert meta["dslog/query"].value["resolved_direction"] == "forward"


def test_query_uses_the_newest_materialization(instance, store_dir) -> None:
    _materialize(instance, store_dir, PIPELINE)
    second = _materialize(instance, store_dir, PIPELINE)
    meta = _query_run(
        instance, store_dir, LineageQueryConfig(source="images/colsum", target="images/raw")
    )
    assert meta["dslog/query"].value["source_version"] == second.run_id
    assert meta["dslog/query"].value["target_version"] == second.run_id
    assert meta["dslog/result_cells"].value == SHAPE[0] * SHAPE[1]


def test_wrong_direction_fails_with_a_clear_message(materialized) -> None:
    instance, store_dir = materialized
    cfg = LineageQueryConfig(source="images/hot", target="images/raw", direction="forward")
    with pytest.raises(dg.Failure, match="not downstream of `images/hot`"):
        dg.materialize(
            [*PIPELINE, ADHOC],
            instance=instance,
            resources={"dslog": DSLogResource(store_dir=store_dir)},
            selection=[ADHOC.key],
            run_config=dg.RunConfig(ops={"lineage_query": cfg}),
        )


def test_bad_cells_fail_before_querying(materialized) -> None:
    instance, store_dir = materialized
    cfg = LineageQueryConfig(source="images/hot", target="images/raw", cells=["9,0"])
    with pytest.raises(dg.Failure, match="outside axis 0"):
        dg.materialize(
            [*PIPELINE, ADHOC],
            instance=instance,
            resources={"dslog": DSLogResource(store_dir=store_dir)},
            selection=[ADHOC.key],
            run_config=dg.RunConfig(ops={"lineage_query": cfg}),
        )


def test_saved_query_asset_depends_on_its_assets_and_answers(materialized) -> None:
    instance, store_dir = materialized
    q = saved_lineage_query(
        "hot_corner_origin", source="images/hot", target="images/raw", cells=["0:2,0:2"]
    )
    eager = saved_lineage_query(
        SavedLineageQuery(
            name="colsum_origin",
            source="images/colsum",
            target="images/raw",
            cells=["0"],
            eager=True,
        )
    )
    assert q.key == dg.AssetKey("hot_corner_origin")
    spec = next(iter(q.specs))
    assert {d.asset_key for d in spec.deps} == {
        dg.AssetKey(["images", "hot"]),
        dg.AssetKey(["images", "raw"]),
    }
    assert spec.automation_condition is None
    assert next(iter(eager.specs)).automation_condition is not None
    res = _materialize(instance, store_dir, [*PIPELINE, q, eager], selection=[q.key, eager.key])
    (mat,) = res.asset_materializations_for_node("hot_corner_origin")
    want = _expected_backward_hot_to_raw([(i, j) for i in range(2) for j in range(2)])
    assert mat.metadata["dslog/result_cells"].value == len(want)
    (mat2,) = res.asset_materializations_for_node("colsum_origin")
    assert mat2.metadata["dslog/result_cells"].value == SHAPE[0] * 2  # column 0 ← columns 0, 1
