"""Spark DataFrames through the Dagster plugin: ``@tracked_asset``/``@tracked_multi_asset`` on
frames, ``DSLogIOManager`` storing them with row ids and their lineage beside the asset
version, ``as_array`` crossing into NumPy, partitions, policies and failures.

One small pipeline is materialized once per module (``base``) and reused: later tests select
single steps, so their upstream frames come from that earlier run (cross-run versions).
"""

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from recorded import recorded

from dslog_dagster import (
    DSLogIOManager,
    DSLogResource,
    tracked_asset,
    tracked_multi_asset,
    tracked_op,
    with_lineage,
)
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.testing.baselines import naive_join
from dslog_dagster.errors import LineageStorageError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark import ROW_ID, as_array
from dslog_dagster.spark.resource import SparkSessionResource

# Dagster 1.13.27 itself calls the deprecated `InitResourceContext.dagster_run` when it builds
# resources of some runs; not our call (same filter as test_dagster_frames.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

# ------------------------------------------------------------------ the pipeline


@tracked_asset
def people(spark: SparkSessionResource) -> DataFrame:
    rows = [(i, "ab"[i % 2], float(i)) for i in range(8)]
    return spark.get_session().createDataFrame(rows, "id long, g string, v double")


@tracked_asset
def cities(spark: SparkSessionResource) -> DataFrame:
    rows = [("a", "Rome"), ("b", "Oslo")]
    return spark.get_session().createDataFrame(rows, "g string, city string")


@tracked_asset(code_version="1")
def joined(people: DataFrame, cities: DataFrame) -> DataFrame:
    assert ROW_ID not in people.columns  # user code never sees the row ids
    return people.join(cities, "g").filter(F.col("v") > 1.5).withColumn("v2", F.col("v") * 2)


@tracked_asset
def matrix(joined: DataFrame) -> np.ndarray:
    return as_array(joined, ["v", "v2"])  # type: ignore[return-value]


@tracked_asset
def colsums(matrix: np.ndarray) -> np.ndarray:
    return matrix.sum(axis=0)


@tracked_multi_asset(outs={"low": dg.AssetOut(), "high": dg.AssetOut()})
def split(joined: DataFrame) -> tuple[DataFrame, DataFrame]:
    return (
        joined.filter(F.col("v") < 5).select("id", "v2"),
        joined.filter(F.col("v") >= 5).select("id", "city"),
    )


PIPELINE = [people, cities, joined, matrix, colsums, split]


def _md(res: dg.ExecuteInProcessResult, node: str, key: str | None = None) -> dict[str, Any]:
    mats = res.asset_materializations_for_node(node)
    if key is not None:
        mats = [x for x in mats if x.asset_key.to_user_string() == key]
    return {k: v.value for k, v in mats[0].metadata.items()}


def _cells(log: DSLog, path: list[str], cells: object) -> set[tuple[int, ...]]:
    return {tuple(r) for r in log.prov_query(path, cells).to_indices().tolist()}


def _stored(spark: Any, path: Path) -> list[Any]:
    """Rows of a stored frame in row-id order."""
    return sorted(read_frame(spark, path, row_id=True).collect(), key=lambda r: r[ROW_ID])


@pytest.fixture(scope="module")
def base(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, dg.DagsterInstance, dg.ExecuteInProcessResult]]:
    root = tmp_path_factory.mktemp("frames")
    with dg.instance_for_test() as inst:
        res = dg.materialize(PIPELINE, instance=inst, resources=_resources(root), run_config=QUIET)
        assert res.success
        yield root, inst, res


def _resources(root: Path, **io: Any) -> dict[str, Any]:
    return {
        "io_manager": DSLogIOManager(base_dir=str(root), store_dir=str(root / ".dslog"), **io),
        "spark": SparkSessionResource(master="local[2]"),
    }


# ------------------------------------------------------------------ materialize


def test_frames_stored_with_ids_and_lineage_metadata(spark: Any, base: Any) -> None:
    root, _inst, res = base
    md = _md(res, "joined")
    assert md[m.OBTAINED] == "captured"
    assert md["dslog/shape"] == "(6, 5)"
    assert md["dagster/row_count"] == 6
    assert recorded(root / ".dslog", md)["inputs"] == {"people": res.run_id, "cities": res.run_id}
    # lean: at most five dslog/* entries, no signature row without a reuse signature
    assert len([k for k in md if k.startswith("dslog/")]) <= 5
    figures = m.record_figures(md[m.RECORD])
    # every cell <- one input cell, but the USING key `g` <- both matched key cells
    assert figures["lineage pairs"].startswith(f"{6 * 6} (")
    assert "reuse signature" not in figures
    assert "none" not in md[m.RECORD]
    assert "data:image/png;base64," in md[m.LINEAGE]
    assert "sampled cells of `joined`" in md[m.LINEAGE]  # a frame's values stay in Spark
    assert [c.name for c in md[m.COLUMN_SCHEMA].columns] == ["g", "id", "v", "city", "v2"]
    lineage = {
        col: sorted((d.asset_key.to_user_string(), d.column_name) for d in deps)
        for col, deps in md[m.COLUMN_LINEAGE].deps_by_column.items()
    }
    assert lineage == {
        "g": [("cities", "g"), ("people", "g")],
        "id": [("people", "id")],
        "v": [("people", "v")],
        "city": [("cities", "city")],
        "v2": [("people", "v")],
    }
    assert _md(res, "people")[m.OBTAINED] == "source"
    # the stored frame has dense ids, and they are the rows the lineage names
    rows = _stored(spark, root / "joined.parquet")
    assert [r[ROW_ID] for r in rows] == list(range(6))
    log = DSLog(root / ".dslog")
    ppl = {r["id"]: r[ROW_ID] for r in _stored(spark, root / "people.parquet")}
    for r in rows:
        assert _cells(log, ["joined", "people"], [(r[ROW_ID], 4)]) == {(ppl[r["id"]], 2)}


def test_query_across_spark_and_numpy_equals_brute_force(spark: Any, base: Any) -> None:
    root, _inst, res = base
    log = DSLog(root / ".dslog")
    ppl = _stored(spark, root / "people.parquet")
    # colsums[1] = sum of v2 = 2 v over the kept rows: the v cells (column 2) of rows v > 1.5
    want = {(r[ROW_ID], 2) for r in ppl if r["v"] > 1.5}
    got = _cells(log, ["colsums", "matrix", "joined", "people"], [1])
    assert got == want
    store = log.store

    def rel(out: str, inp: str) -> Any:
        op = next(o for o in store.operations() if any(a.name == out for a in o.outputs))
        return store.read_lineage(op, out, inp).decompress()

    hops = [
        (rel("colsums", "matrix"), "backward"),
        (rel("matrix", "joined"), "backward"),
        (rel("joined", "people"), "backward"),
    ]
    assert {tuple(c) for c in naive_join(hops, [(1,)]).tolist()} == want
    # forward: a v cell reaches both sums (v and v2 = 2 v); an id cell reaches no sum
    kept = next(r for r in ppl if r["v"] > 1.5)
    assert _cells(log, ["people", "joined", "matrix", "colsums"], [(kept[ROW_ID], 2)]) == {
        (0,),
        (1,),
    }
    assert _cells(log, ["people", "joined", "matrix", "colsums"], [(kept[ROW_ID], 0)]) == set()
    assert np.array_equal(
        res.output_for_node("colsums"),
        [sum(r["v"] for r in ppl if r["v"] > 1.5), sum(2 * r["v"] for r in ppl if r["v"] > 1.5)],
    )


def test_multi_asset_outputs_each_get_their_lineage(spark: Any, base: Any) -> None:
    root, _inst, res = base
    assert recorded(root / ".dslog", _md(res, "split", "high"))["op_name"] == "high"
    log = DSLog(root / ".dslog")
    jrows = _stored(spark, root / "joined.parquet")
    high = _stored(spark, root / "high.parquet")
    assert sorted(r["id"] for r in high) == sorted(r["id"] for r in jrows if r["v"] >= 5)
    jid = {r["id"]: r[ROW_ID] for r in jrows}
    for r in high:  # high.city <- joined.city (column 3) of the same title
        assert _cells(log, ["high", "joined"], [(r[ROW_ID], 1)]) == {(jid[r["id"]], 3)}
    low = _md(res, "split", "low")
    assert {
        c: [d.column_name for d in ds] for c, ds in low[m.COLUMN_LINEAGE].deps_by_column.items()
    } == {
        "id": ["id"],
        "v2": ["v2"],
    }


def test_second_run_reads_upstream_versions_of_the_first(spark: Any, base: Any) -> None:
    root, inst, first = base
    res = dg.materialize(
        PIPELINE,
        instance=inst,
        resources=_resources(root),
        selection=[joined, matrix],
        run_config=QUIET,
    )
    assert res.success
    md = _md(res, "joined")
    rec = recorded(root / ".dslog", md)
    assert rec["version"] == res.run_id
    assert rec["inputs"]["people"] == first.run_id  # materialized by the first run
    store = DSLog(root / ".dslog").store
    versions = {a.version for a in store.arrays() if a.name == "joined"}
    assert {first.run_id, res.run_id} <= versions
    assert store.get_array("joined", res.run_id).shape == (6, 5)


# ------------------------------------------------------------------ partitions

PARTS = dg.StaticPartitionsDefinition(["p1", "p2"])


@tracked_asset(partitions_def=PARTS)
def events(context: dg.AssetExecutionContext, spark: SparkSessionResource) -> DataFrame:
    k = int(context.partition_key[1:])
    return spark.get_session().range(0, 5 * k).withColumn("x", F.col("id") * k)


@tracked_asset(partitions_def=PARTS)
def big_events(events: DataFrame) -> DataFrame:
    return events.filter("x >= 4").select("x")


def test_partitions_are_arrays_of_their_own(spark: Any, tmp_path: Path) -> None:
    log = DSLog(tmp_path / ".dslog")
    with dg.instance_for_test() as inst:
        runs = {}
        for pk in ("p1", "p2"):
            res = dg.materialize(
                [events, big_events],
                instance=inst,
                resources=_resources(tmp_path),
                partition_key=pk,
                run_config=QUIET,
            )
            assert res.success
            runs[pk] = res
    md = _md(runs["p2"], "big_events")
    rec = recorded(tmp_path / ".dslog", md)
    assert rec["array"] == "big_events[p2]"
    assert rec["inputs"] == {"events[p2]": runs["p2"].run_id}
    for pk in ("p1", "p2"):
        ev = _stored(spark, tmp_path / "events" / f"{pk}.parquet")
        big = _stored(spark, tmp_path / "big_events" / f"{pk}.parquet")
        assert len(big) == sum(r["x"] >= 4 for r in ev)
        got = _cells(log, [f"big_events[{pk}]", f"events[{pk}]"], np.s_[:, 0])
        assert got == {(r[ROW_ID], 1) for r in ev if r["x"] >= 4}


# ------------------------------------------------------------------ failures and policies


@tracked_asset
def broken(people: DataFrame) -> DataFrame:
    msg = "user code failed"
    raise ValueError(msg)


def test_user_code_failure_writes_no_lineage(base: Any) -> None:
    root, inst, _ = base
    res = dg.materialize(
        [people, broken],
        instance=inst,
        resources=_resources(root),
        selection=[broken],
        raise_on_error=False,
        run_config=QUIET,
    )
    assert not res.success
    assert "user code failed" in str(res.get_step_failure_events()[0].step_failure_data.error)
    assert DSLog(root / ".dslog").store.operations("broken") == []
    assert not (root / "broken.parquet").exists()


def test_lineage_write_failure_fails_the_step(
    base: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, inst, _ = base
    for name in ("people", "cities"):
        shutil.copytree(root / f"{name}.parquet", tmp_path / f"{name}.parquet")

    def boom(*_a: Any, **_k: Any) -> Any:
        msg = "disk full while writing lineage"
        raise LineageStorageError(msg)

    monkeypatch.setattr(LineageStore, "prepare_operation", boom)
    res = dg.materialize(
        PIPELINE,
        instance=inst,
        resources=_resources(tmp_path),
        selection=[joined],
        raise_on_error=False,
        run_config=QUIET,
    )
    assert not res.success
    err = res.get_step_failure_events()[0].step_failure_data.error
    assert "disk full while writing lineage" in str(err) + str(err.cause)
    assert res.get_asset_materialization_events() == []


@tracked_asset(policy="off")
def joined_off(people: DataFrame, cities: DataFrame) -> DataFrame:
    assert isinstance(people, DataFrame)
    assert ROW_ID not in people.columns
    return people.join(cities, "g")


@tracked_asset(policy="off")
def v_off(people: DataFrame) -> np.ndarray:
    return as_array(people, "v")  # type: ignore[return-value]


@tracked_asset(policy="all_to_all")
def sampled(people: DataFrame) -> DataFrame:
    return people.sample(fraction=0.5, seed=3)  # no lineage rule: flagged all-to-all


@tracked_asset
def sampled_strict(people: DataFrame) -> DataFrame:
    return people.sample(fraction=0.5, seed=3)


@tracked_asset(mode="considered")
def kept_considered(people: DataFrame) -> DataFrame:
    return people.filter(F.col("v") > 1.5).select("id")


@tracked_asset(policy="reuse_only")
def joined_reuse(people: DataFrame, cities: DataFrame) -> DataFrame:
    return people.join(cities, "g")


def test_policies_off_all_to_all_reuse_only_and_strict(spark: Any, base: Any) -> None:
    root, inst, _ = base
    res = dg.materialize(
        [people, cities, joined_off, v_off, sampled, kept_considered, joined_reuse],
        instance=inst,
        resources=_resources(root),
        selection=[joined_off, v_off, sampled, kept_considered, joined_reuse],
        run_config=QUIET,
    )
    assert res.success
    assert _md(res, "joined_off")[m.OBTAINED] == "off"
    assert _md(res, "joined_off")["dagster/row_count"] == 8
    assert _md(res, "v_off")[m.OBTAINED] == "off"
    # untracked: the rows in the frame's own order (no row ids to order by)
    assert sorted(res.output_for_node("v_off").tolist()) == [[float(i)] for i in range(8)]
    # considered (PROVision): each kept id cell <- its id cell and the v cell the filter read
    considered = _md(res, "kept_considered")
    assert m.record_figures(considered[m.RECORD])["policy, mode"].endswith("`considered`")
    ppl = _stored(spark, root / "people.parquet")
    log = DSLog(root / ".dslog")
    want = {(r[ROW_ID], c) for r in ppl if r["v"] > 1.5 for c in (0, 2)}
    assert _cells(log, ["kept_considered", "people"], np.s_[:, 0]) == want
    assert m.record_figures(considered[m.RECORD])["lineage pairs"].startswith(f"{len(want):,} (")
    reuse = _md(res, "joined_reuse")
    assert reuse[m.OBTAINED] == "none"
    assert "Spark" in reuse[m.RECORD]
    flagged = _md(res, "sampled")
    assert flagged[m.OBTAINED] == m.ALL_TO_ALL
    assert "sample" in flagged[m.RECORD]
    n = int(flagged["dagster/row_count"])
    pairs = m.record_figures(flagged[m.RECORD])["lineage pairs"]
    assert pairs.startswith(f"{n * 3 * 8 * 3:,} (")  # every output cell <- every input cell
    strict = dg.materialize(
        [people, sampled_strict],
        instance=inst,
        resources=_resources(root),
        selection=[sampled_strict],
        raise_on_error=False,
        run_config=QUIET,
    )
    assert not strict.success
    err = str(strict.get_step_failure_events()[0].step_failure_data.error)
    assert "UnsupportedFrameOperationError" in err
    assert "sample" in err


# ------------------------------------------------------------------ ops in a graph


@tracked_op
def make_frame(spark: SparkSessionResource) -> DataFrame:
    return spark.get_session().range(0, 6).withColumn("y", F.col("id") * 10)


@tracked_op
def keep_odd(df: DataFrame) -> DataFrame:
    return df.filter("id % 2 = 1").select("y")


@dg.job(executor_def=dg.in_process_executor)
def frame_job() -> None:
    keep_odd(make_frame())


def test_ops_in_a_graph_store_frames_and_lineage(spark: Any, tmp_path: Path) -> None:
    with dg.instance_for_test() as inst:
        res = frame_job.execute_in_process(
            instance=inst, resources=_resources(tmp_path), run_config=QUIET
        )
    assert res.success
    src = _stored(spark, tmp_path / "runs" / res.run_id / "make_frame" / "result.parquet")
    out = _stored(spark, tmp_path / "runs" / res.run_id / "keep_odd" / "result.parquet")
    assert sorted(r["y"] for r in out) == [10, 30, 50]  # row order: Spark's read order
    log = DSLog(tmp_path / ".dslog")
    sid = {r["y"]: r[ROW_ID] for r in src}
    for r in out:  # keep_odd.y <- make_frame.y (column 1) of the same row
        got = _cells(log, ["keep_odd:result", "make_frame:result"], [(r[ROW_ID], 0)])
        assert got == {(sid[r["y"]], 1)}


class ShuffledParquetIO(dg.ConfigurableIOManager):
    """Another team's IO manager: DataFrames as plain Parquet, written in a shuffled row order
    (so lineage cannot rely on the order rows come back in)."""

    base_dir: str

    def _path(self, key: dg.AssetKey) -> str:
        return str(Path(self.base_dir, *key.path)) + ".pq"

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        path = self._path(context.asset_key)
        if isinstance(obj, np.ndarray):
            np.save(path + ".npy", obj)
            return
        obj.orderBy(F.rand(seed=3)).write.mode("overwrite").parquet(path)

    def load_input(self, context: dg.InputContext) -> Any:
        path = self._path(context.asset_key)
        if Path(path + ".npy").exists():
            return np.load(path + ".npy")
        return SparkSessionResource().get_session().read.parquet(path)


def test_with_lineage_adds_frame_lineage_to_another_io_manager(spark: Any, tmp_path: Path) -> None:
    inner = ShuffledParquetIO(base_dir=str(tmp_path / "data"))
    io = with_lineage(inner, DSLogResource(store_dir=str(tmp_path / "lineage")))
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            [people, cities, joined, matrix, colsums],
            instance=inst,
            resources={"io_manager": io, "spark": SparkSessionResource(master="local[2]")},
            run_config=QUIET,
        )
    assert res.success  # `joined` itself asserts that user code never sees the row ids
    md = _md(res, "joined")
    assert md[m.OBTAINED] == "captured"
    assert md["dslog/shape"] == "(6, 5)"
    assert md["dagster/row_count"] == 6
    assert [c.name for c in md[m.COLUMN_SCHEMA].columns] == ["g", "id", "v", "city", "v2"]
    assert set(md[m.COLUMN_LINEAGE].deps_by_column) == {"g", "id", "v", "city", "v2"}
    assert _md(res, "people")[m.OBTAINED] == "source"
    # the inner manager stored the ids as a column; lineage names rows by them, not by order
    ppl = {r["id"]: r[ROW_ID] for r in spark.read.parquet(inner._path(people.key)).collect()}
    assert sorted(ppl.values()) == list(range(8))
    jrows = spark.read.parquet(inner._path(joined.key)).collect()
    assert sorted(r[ROW_ID] for r in jrows) == list(range(6))
    log = DSLog(tmp_path / "lineage")
    for r in jrows:  # joined.v2 (column 4) <- people.v (column 2) of the same person
        assert _cells(log, ["joined", "people"], [(r[ROW_ID], 4)]) == {(ppl[r["id"]], 2)}
    want = {(ppl[r["id"]], 2) for r in jrows}  # colsums[1] = sum of v2 over joined
    assert _cells(log, ["colsums", "matrix", "joined", "people"], [1]) == want


def test_with_lineage_passes_untracked_frames_unchanged(spark: Any, tmp_path: Path) -> None:
    @dg.asset
    def plain_people(spark: SparkSessionResource) -> DataFrame:
        return spark.get_session().range(0, 4)

    @tracked_asset
    def doubled(plain_people: DataFrame) -> DataFrame:
        return plain_people.withColumn("x", F.col("id") * 2)

    inner = ShuffledParquetIO(base_dir=str(tmp_path / "data"))
    io = with_lineage(inner, DSLogResource(store_dir=str(tmp_path / "lineage")))
    resources = {"io_manager": io, "spark": SparkSessionResource(master="local[2]")}
    with dg.instance_for_test() as inst:
        res = dg.materialize([plain_people], instance=inst, resources=resources, run_config=QUIET)
        assert res.success
        stored = spark.read.parquet(inner._path(plain_people.key))
        assert stored.columns == ["id"]  # an untracked output is stored exactly as returned
        res = dg.materialize(
            [plain_people, doubled],
            instance=inst,
            resources=resources,
            selection=[doubled],
            raise_on_error=False,
            run_config=QUIET,
        )
    assert not res.success  # its rows have no ids to name: a clear error, not a guess
    err = str(res.get_step_failure_events()[0].step_failure_data.error)
    assert "stored without row ids" in err
    assert "with_lineage" in err
