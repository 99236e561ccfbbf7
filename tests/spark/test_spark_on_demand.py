"""policy="on_demand" for Spark steps (issue 27, items 1 and 2): the step runs untracked; a
query re-runs it under the Spark capture on the recorded input versions, matches the
recomputed rows to the stored ones as a multiset, and answers as a captured run would; a
query selecting a few rows re-runs it on the inputs semijoined with the selection.

One materialization per module (``base``); tests that register lineage work on a copy of
its store, so every test sees the step deferred."""

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.cli import main
from dslog_dagster.core import on_demand
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.query import as_cells
from dslog_dagster.core.query.engine import prepare
from dslog_dagster.errors import ConfigurationError, DeferredLineageError, ReconstructionError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.io_managers.spark_frames import load_frame, read_frame
from dslog_dagster.spark import ROW_ID, as_array, capture_frames, rowid
from dslog_dagster.spark import on_demand as spark_on_demand
from dslog_dagster.spark.pushdown import TAG, pushdown_columns
from dslog_dagster.spark.resource import SparkSessionResource

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
CALLS = {"totals": 0}


@tracked_asset
def facts(spark: SparkSessionResource) -> DataFrame:
    # duplicates (rows 0 and 1 are equal), a null key and negative values
    rows = [(i % 37, [3, 3, 1, 2, 5, None][i % 6], float((i * 7) % 11) - 3.0) for i in range(60)]
    rows[1] = rows[0]
    return spark.get_session().createDataFrame(rows, "id long, k long, v double").repartition(3)


@tracked_asset
def dims(spark: SparkSessionResource) -> DataFrame:
    rows = [(1, "one"), (2, "two"), (3, "three"), (4, "four"), (5, "five")]
    return spark.get_session().createDataFrame(rows, "k long, name string")


def _totals(facts: DataFrame, dims: DataFrame) -> DataFrame:
    return (
        facts.join(dims, "k")
        .filter(F.col("v") > -2.5)
        .groupBy("k", "name")
        .agg(F.sum("v").alias("total"), F.count("id").alias("n"))
    )


@tracked_asset(policy="on_demand")
def totals(facts: DataFrame, dims: DataFrame) -> DataFrame:
    CALLS["totals"] += 1
    return _totals(facts, dims)


@tracked_asset
def features(totals: DataFrame) -> np.ndarray:
    return as_array(totals, ["total", "n"])  # type: ignore[return-value]


@tracked_asset
def colsum(features: np.ndarray) -> np.ndarray:
    return features.sum(axis=0)


LAZY = [facts, dims, totals, features, colsum]
OUT_COLS = ["k", "name", "total", "n"]
Ref = dict[tuple[str, tuple[Any, ...], int], set[tuple[int, int]]]


def _materialize(root: Path, assets: list[Any]) -> dg.ExecuteInProcessResult:
    io = DSLogIOManager(base_dir=str(root), store_dir=str(root / ".dslog"))
    spark = SparkSessionResource(master="local[2]")
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            assets, instance=inst, resources={"io_manager": io, "spark": spark}, run_config=QUIET
        )
    assert res.success
    return res


@pytest.fixture(scope="module")
def base(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ref]:
    """The materialized on-demand pipeline, and the reference: the step captured (as a
    captured step is) on the same stored inputs, by ``(input, output row values, output
    column)``."""
    root = tmp_path_factory.mktemp("lazy")
    CALLS["totals"] = 0
    res = _materialize(root, LAZY)
    assert CALLS["totals"] == 1  # the run itself, untracked
    mats = res.asset_materializations_for_node("totals")
    assert mats[0].metadata[m.OBTAINED].value == "on_demand"
    frames = {n: load_frame(spark, root / f"{n}.parquet")[0] for n in ("facts", "dims")}
    cap = capture_frames(_totals, frames)
    try:
        values = {r[ROW_ID]: tuple(r[c] for c in OUT_COLS) for r in cap.frame_with_row_id.collect()}
        ref: Ref = {}
        for name in frames:
            rel = cap.relation(name)
            for (o_row, o_col), (i_row, i_col) in zip(
                rel.out_cols.T.tolist(), rel.in_cols.T.tolist(), strict=True
            ):
                ref.setdefault((name, values[o_row], o_col), set()).add((i_row, i_col))
    finally:
        cap.release()
    return root, ref


def _copy(root: Path, tmp: Path) -> tuple[DSLog, DSLogIOManager]:
    """A DSLog over a copy of ``root``'s store, and an IO manager over ``root``'s values."""
    shutil.copytree(root / ".dslog", tmp / "store")
    io = DSLogIOManager(base_dir=str(root), store_dir=str(tmp / "store"))
    return DSLog(tmp / "store"), io


_ROWS: dict[Path, list[tuple[Any, ...]]] = {}


def _totals_rows(spark: Any, root: Path) -> list[tuple[Any, ...]]:
    """The stored `totals` rows' values, by row id."""
    if root not in _ROWS:
        got = read_frame(spark, root / "totals.parquet", row_id=True).collect()
        _ROWS[root] = [tuple(r[c] for c in OUT_COLS) for r in sorted(got, key=lambda r: r[ROW_ID])]
    return _ROWS[root]


def _want(spark: Any, root: Path, ref: Ref, target: str, cells: Any) -> set[tuple[int, int]]:
    """The reference answer for ``cells`` (row, column) of the stored `totals`."""
    rows = _totals_rows(spark, root)
    want: set[tuple[int, int]] = set()
    for r, c in cells:
        want |= ref.get((target, rows[r], c), set())
    return want


def _answer(log: DSLog, path: list[str], cells: Any, io: DSLogIOManager, **kw: Any) -> Any:
    got, done = on_demand.trace(log, path, cells, io.value_loader(frames=True), **kw)
    return {tuple(c) for c in got.to_indices().tolist()}, done


def test_pushdown_columns_of_a_join_and_group_by(spark: Any) -> None:
    f = spark.createDataFrame([(1, 1, 1.0)], "id long, k long, v double").alias(TAG + "in0")
    d = spark.createDataFrame([(1, "one")], "k long, name string").alias(TAG + "in1")
    assert pushdown_columns(_totals(f, d), ["in0", "in1"]) == {
        "in0": {"k": "k"},  # the join's `k` is the facts side's; `total`, `n` are computed
        "in1": {"name": "name"},
    }
    # a window's rows depend on their whole partition: nothing passes below it
    w = f.withColumn("m", F.max("v").over(Window.partitionBy("k")))
    assert pushdown_columns(w, ["in0"]) == {"in0": {}}
    # a renamed column is followed, a computed one is not
    p = f.select(F.col("k").alias("key"), (F.col("v") + 1).alias("v"))
    assert pushdown_columns(p, ["in0"]) == {"in0": {"key": "k"}}


def test_on_demand_spark_equals_captured(spark: Any, base: Any, tmp_path: Path) -> None:
    root, ref = base
    log, io = _copy(root, tmp_path)
    (op,) = log.store.operations("totals")
    assert op.capture_method == on_demand.DEFERRED
    assert op.tables == ()
    assert op.args["on_demand"]["engine"] == "spark"
    with pytest.raises(DeferredLineageError, match='policy="on_demand"'):
        log.prov_query(["totals", "facts"], [(0, 2)])
    n_out = len(_totals_rows(spark, root))
    assert n_out == 4
    before = CALLS["totals"]
    for target in ("facts", "dims"):
        path = ["totals", target]
        got, done = _answer(log, path, np.s_[0:n_out, :], io, selective=False)
        assert [r.obtained for r in done] == (["re-run"] if target == "facts" else [])
        cells = [(r, c) for r in range(n_out) for c in range(4)]
        assert got == _want(spark, root, ref, target, cells)
        for cell in cells:  # cell for cell: each output cell names the captured input cells
            one = {tuple(c) for c in log.prov_query(path, [cell]).to_indices().tolist()}
            assert one == _want(spark, root, ref, target, [cell])
    assert CALLS["totals"] == before + 1  # re-run once (the second path uses the kept lineage)
    (new,) = [o for o in log.store.operations("totals") if o.op_id != op.op_id]
    assert new.capture_method == on_demand.RECONSTRUCTED


def test_a_path_mixing_captured_numpy_and_spark_with_on_demand_steps(
    spark: Any, base: Any, tmp_path: Path
) -> None:
    root, ref = base
    log, io = _copy(root, tmp_path)
    all_rows = range(len(_totals_rows(spark, root)))
    # colsum (NumPy, captured) <- features (as_array of totals, captured) <- totals (deferred)
    for j, col, target in ((0, "total", "facts"), (1, "n", "facts")):
        path = ["colsum", "features", "totals", target]
        got, done = _answer(log, path, [j], io)
        assert [r.obtained for r in done] == ["selective re-run"]
        cells = [(r, OUT_COLS.index(col)) for r in all_rows]
        assert got == _want(spark, root, ref, target, cells)
        # a count has no contributing cells (the semantics table); the total has
        assert bool(got) == (col != "n")
    assert len(log.store.operations("totals")) == 1  # selective: nothing registered


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_selective_equals_full_and_is_not_registered(
    spark: Any, base: Any, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """The lineage of selected rows from a re-run on the semijoined inputs equals the full
    (captured) lineage of those rows, for both inputs, and is not registered."""
    root, ref = base
    log, io = _copy(root, tmp_path_factory.mktemp("sel"))
    (op,) = log.store.operations("totals")
    n_out = len(_totals_rows(spark, root))
    picked = sorted(data.draw(st.sets(st.integers(0, n_out - 1), min_size=1, max_size=3)))
    # the reduced inputs kept (checkpointed, as big ones are) or semijoined where read
    keep = data.draw(st.sampled_from([0, spark_on_demand.KEEP_ROWS]), label="KEEP_ROWS")
    # with a staging folder every input is read with Arrow and staged; without one, the big
    # ones are kept by a checkpoint and the small ones semijoined in Spark where read
    staged = data.draw(st.booleans(), label="staging folder")
    # the re-run's output rows as its pass collected them, or collected from its frame
    local_rows = data.draw(st.booleans(), label="the pass's rows")
    # the selected rows read with Arrow, or (Arrow refusing) by Spark: by a filter on their
    # ids, or by a semijoin with them; the calls say which way ran
    by = data.draw(st.sampled_from(["arrow", 0, rowid.FILTER_IDS]), label="selected rows")
    read_rows, rows_by_id = spark_on_demand.read_rows, spark_on_demand.rows_by_id
    calls: list[str] = []

    def spark_read(*a: Any) -> Any:
        calls.append("spark")
        return rows_by_id(*a)

    def arrow_read(*a: Any) -> Any:
        calls.append("arrow")
        return read_rows(*a) if by == "arrow" else None

    defaults = spark_on_demand.KEEP_ROWS, rowid.FILTER_IDS
    staging_base = spark_on_demand.staging_base
    pass_rows = spark_on_demand._local_rows
    if not staged:
        spark_on_demand.staging_base = lambda spark: None
    if not local_rows:
        spark_on_demand._local_rows = lambda *a: None
    spark_on_demand.KEEP_ROWS = keep
    rowid.FILTER_IDS = rowid.FILTER_IDS if by == "arrow" else int(by)
    spark_on_demand.read_rows, spark_on_demand.rows_by_id = arrow_read, spark_read
    try:
        tables, r = on_demand.reconstruct_rows(
            log.store, op, io.value_loader(frames=True), 0, picked
        )
    finally:
        spark_on_demand.KEEP_ROWS, rowid.FILTER_IDS = defaults
        spark_on_demand.read_rows, spark_on_demand.rows_by_id = read_rows, rows_by_id
        spark_on_demand.staging_base = staging_base
        spark_on_demand._local_rows = pass_rows
    assert calls == (["arrow"] if by == "arrow" else ["arrow", "spark"])
    assert tables is not None
    assert (r.obtained, r.operation, r.rows) == ("selective re-run", None, len(picked))
    assert len(log.store.operations("totals")) == 1  # nothing registered
    cols = data.draw(st.sets(st.integers(0, 3), min_size=1))
    cells = [(row, c) for row in picked for c in sorted(cols)]
    for rec in op.inputs:
        got = prepare(tables[rec.array_id]).run(as_cells((n_out, 4), cells), "backward")
        want = _want(spark, root, ref, rec.name, cells)
        assert {tuple(c) for c in got.to_indices().tolist()} == want
    # rows not selected have no lineage in it (it covers the selection only)
    others = [(row, c) for row in range(n_out) if row not in picked for c in range(4)]
    for rec in op.inputs:
        if others:
            rest = prepare(tables[rec.array_id]).run(as_cells((n_out, 4), others), "backward")
            assert rest.is_empty()


def test_refusals(spark: Any, base: Any, tmp_path: Path, monkeypatch: Any) -> None:
    root, _ = base
    log, io = _copy(root, tmp_path)
    (op,) = log.store.operations("totals")
    load = io.value_loader(frames=True)

    def tampered(rec: Any) -> Any:
        value = load(rec)
        if rec.name == "facts":
            value = value.withColumn("v", F.when(F.col(ROW_ID) == 3, 100.0).otherwise(F.col("v")))
        return value

    with pytest.raises(ReconstructionError, match="multiset of rows"):
        on_demand.reconstruct(log.store, op, tampered)
    with pytest.raises(ReconstructionError, match="not stored"):
        on_demand.reconstruct(log.store, op, lambda rec: None if rec.name == "dims" else load(rec))
    key = op.args["on_demand"]["function"]
    monkeypatch.setitem(on_demand._FUNCTIONS, key, lambda facts, dims: facts.limit(1))
    with pytest.raises(ReconstructionError, match=r"code of .* changed"):
        on_demand.reconstruct(log.store, op, load)
    assert len(log.store.operations("totals")) == 1


@tracked_asset(policy="on_demand", name="arr")
def as_array_on_demand(facts: DataFrame) -> np.ndarray:
    return as_array(facts, ["v"])  # type: ignore[return-value]


def test_dslog_trace_and_refused_as_array(
    spark: Any, base: Any, tmp_path: Path, capsys: Any
) -> None:
    root, _ = base
    log, _io = _copy(root, tmp_path)
    args = ["trace", str(log.store.root), "totals", "dims", "--cells", "0:1,name"]
    assert main([*args, "--values", str(root), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "reconstructed totals" in out.err
    got = json.loads(out.out)
    assert len(got) == 1
    assert got[0]["start_1"] == 1
    io = DSLogIOManager(base_dir=str(tmp_path / "v"), store_dir=str(tmp_path / "s"))
    spark_res = SparkSessionResource(master="local[2]")
    with dg.instance_for_test() as inst, pytest.raises(ConfigurationError, match="as_array"):
        dg.materialize(
            [facts, as_array_on_demand], instance=inst, run_config=QUIET,
            resources={"io_manager": io, "spark": spark_res},
        )  # fmt: skip


def test_example_on_demand_spark_pipeline(spark: Any, tmp_path: Path) -> None:
    """The example project's ``runtime_by_genre`` (join + groupBy, on demand): a selective
    trace to ``title_basics`` equals the capture of the same step on the stored tables."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "example_project"))
    from hotspots.spark import runtime_by_genre, runtime_per_genre, title_basics, title_episodes

    small = {"config": {"n_titles": 40}}
    io = DSLogIOManager(base_dir=str(tmp_path), store_dir=str(tmp_path / ".dslog"))
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            [title_basics, title_episodes, runtime_by_genre],
            instance=inst,
            resources={"io_manager": io, "spark": SparkSessionResource(master="local[2]")},
            run_config={**QUIET, "ops": {"title_basics": small, "title_episodes": small}},
        )
    assert res.success
    log = DSLog(tmp_path / ".dslog")
    stored = read_frame(spark, tmp_path / "runtime_by_genre.parquet", row_id=True).collect()
    genre_of = {r[ROW_ID]: r["genres"] for r in stored}
    frames = {
        n: load_frame(spark, tmp_path / f"{n}.parquet")[0]
        for n in ("title_basics", "title_episodes")
    }
    cap = capture_frames(
        lambda title_basics, title_episodes: runtime_per_genre(title_basics, title_episodes), frames
    )
    try:
        ids = {r["genres"]: r[ROW_ID] for r in cap.frame_with_row_id.collect()}
        ref = cap.table(0)
        for row in (0,):  # one genre: one selective re-run
            cells = [(row, c) for c in range(3)]
            got, done = _answer(log, ["runtime_by_genre", "title_basics"], cells, io)
            assert [r.obtained for r in done] == ["selective re-run"]
            mine = [(ids[genre_of[row]], c) for c in range(3)]
            want = prepare(ref).run(as_cells(cap.shape, mine), "backward")
            assert got == {tuple(c) for c in want.to_indices().tolist()}
            assert got
    finally:
        cap.release()


def test_kept_rows_are_staged_for_the_capture_then_removed(
    spark: Any, base: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every input kept (KEEP_ROWS 0), the inputs read with Arrow reach the capture as
    files in a staging folder of the trace, and the re-run's output rows are the rows its pass
    collected (no collect of its frame); the answer equals the captured lineage and the
    folder is gone afterwards."""
    root, ref = base
    log, io = _copy(root, tmp_path)
    (op,) = log.store.operations("totals")
    monkeypatch.setattr(spark_on_demand, "KEEP_ROWS", 0)
    made: list[str] = []
    files: list[list[str]] = []
    new_dir, read_subset = spark_on_demand.new_staging_dir, spark_on_demand.read_subset

    def staging_dir(*a: Any) -> str:
        made.append(new_dir(*a))
        return made[-1]

    def subset(*a: Any) -> Any:
        got = read_subset(*a)
        files.append([] if got is None else got.inputFiles())
        return got

    monkeypatch.setattr(spark_on_demand, "new_staging_dir", staging_dir)
    monkeypatch.setattr(spark_on_demand, "read_subset", subset)

    def collected(frame: Any) -> Any:
        msg = "the re-run's rows were collected, not read from its files"
        raise AssertionError(msg)

    monkeypatch.setattr(spark_on_demand, "_collected", collected)
    picked = [0, 2]
    tables, r = on_demand.reconstruct_rows(log.store, op, io.value_loader(frames=True), 0, picked)
    assert tables is not None
    assert r.obtained == "selective re-run"
    (staging,) = made
    assert not Path(staging).exists()
    assert files
    assert all(len(f) == 1 and f"{staging}/subset-" in f[0] for f in files)
    n_out = len(_totals_rows(spark, root))
    cells = [(row, c) for row in picked for c in range(4)]
    for rec in op.inputs:
        got = prepare(tables[rec.array_id]).run(as_cells((n_out, 4), cells), "backward")
        want = _want(spark, root, ref, rec.name, cells)
        assert {tuple(c) for c in got.to_indices().tolist()} == want
