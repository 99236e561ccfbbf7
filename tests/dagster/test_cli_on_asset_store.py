"""`dslog query` / `dslog inspect` work on the store the Dagster assets write, with asset keys
(`images/smoothed`) and partitions (`key[partition]`) as array names."""

import dagster as dg
import pyarrow.parquet as pq

from dslog_dagster.assets import LineageQueryConfig, lineage_query_asset
from dslog_dagster.cli import main
from dslog_dagster.core.api import Array, DSLog
from dslog_dagster.resources import DSLogResource
from tests.dagster.pipeline import PIPELINE, box3


def test_cli_query_matches_the_query_asset(materialized, tmp_path, capsys) -> None:
    instance, store_dir = materialized
    adhoc = lineage_query_asset()
    cfg = LineageQueryConfig(source="images/hot", target="images/raw", cells=["0:2,0:2"])
    resources = {"dslog": DSLogResource(store_dir=store_dir)}
    res = dg.materialize(
        [*PIPELINE, adhoc],
        instance=instance,
        resources=resources,
        selection=[adhoc.key],
        run_config=dg.RunConfig(ops={"lineage_query": cfg}),
    )
    (mat,) = res.asset_materializations_for_node("lineage_query")
    asset_cells = mat.metadata["dslog/result_cells"].value
    want = {c for i in range(2) for j in range(2) for c in [(i, j), *box3((i, j))]}
    assert asset_cells == len(want)

    argv = ["query", store_dir, "images/hot", "images/raw", "--cells", "0:2,0:2", "--between"]
    assert main([*argv, "--count"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(asset_cells)
    assert "union over every path images/hot -> images/raw" in out.err
    # one explicit path only sees the direct edge hot ← raw
    assert (
        main(["query", store_dir, "images/hot", "images/raw", "--cells", "0:2,0:2", "--count"]) == 0
    )
    assert capsys.readouterr().out.strip() == "4"
    # a path through smoothed, by asset keys with `/`
    path = ["images/hot", "images/smoothed", "images/raw"]
    assert main(["query", store_dir, *path, "--cells", "0:2,0:2", "--count"]) == 0
    assert capsys.readouterr().out.strip() == str(
        len({c for i in range(2) for j in range(2) for c in box3((i, j))})
    )
    # results to Parquet, same boxes as the asset wrote
    target = tmp_path / "answer.parquet"
    assert main([*argv, "--output", str(target)]) == 0
    assert pq.read_table(target).equals(pq.read_table(mat.metadata["dslog/result_path"].value))
    # wrong direction is refused with a message
    assert main([*argv, "--direction", "forward"]) == 2
    assert "not downstream" in capsys.readouterr().err
    # inspect lists the asset arrays
    assert main(["inspect", store_dir]) == 0
    assert "fixture.hot(images/raw, images/smoothed) -> images/hot" in capsys.readouterr().out


def test_cli_query_partitions(tmp_path, capsys) -> None:
    log = DSLog(tmp_path)
    day = "2026-11-21"
    src = Array(f"counts[{day}]", (4,), version="run-1")
    dst = Array("totals", (2,), version="run-1")
    log.register_operation(
        "pairs", [src], [dst], {(dst.name, src.name): lambda b: [2 * b[0], 2 * b[0] + 1]}
    )
    assert (
        main(
            [
                "query",
                str(tmp_path),
                "totals",
                "counts",
                "--partition",
                "",
                "--partition",
                day,
                "--cells",
                "1",
                "--count",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == "2"


def test_cli_partition_count_must_match(tmp_path, capsys) -> None:
    DSLog(tmp_path).array(Array("a", (2,)))
    assert (
        main(["query", str(tmp_path), "a", "b", "c", "--partition", "x", "--partition", "y"]) == 2
    )
    assert "one --partition for every array" in capsys.readouterr().err
