"""Capture on a Spark standalone cluster equals capture in local mode; the example's
``titles_job`` runs a process per step on it, with its lineage store on object storage.

The module's fixture starts a master and two workers (one core, 1 GiB each) on 127.0.0.1
from PySpark's own launcher (``bin/spark-class org.apache.spark.deploy.master.Master`` /
``…worker.Worker``), and stops them at the end. A child process attaches to the cluster with
:func:`~dslog_dagster.spark.get_session` (a process has one SparkContext; the suite's own is
local) and captures a join + filter + groupBy whose rows are spread over both workers'
executors; its lineage, keyed by the output's group name, must equal the local capture's,
both without a folder shared with the executors (the output marked and cached, failed groups
found by a join) and with one (``spark.dslog.sharedDir``: staged and tapped as locally).
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark.servers import ServerStartError, s3_server, standalone_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

PIPELINE = r"""
import json, sys
import numpy as np
from pyspark.sql import functions as F
from dslog_dagster.spark import capture_frames, get_session


def frames(spark):
    rng = np.random.default_rng(0)
    n = 400
    keys, vals = rng.integers(0, 20, n), rng.random(n)
    a = spark.createDataFrame(
        [(i, int(k), float(v)) for i, (k, v) in enumerate(zip(keys, vals))], ["id", "k", "v"]
    )
    b = spark.createDataFrame([(k, f"name{k}") for k in range(20)], ["k", "name"])
    return a, b


def pipeline(a, b):
    j = a.join(b, "k").filter(F.col("v") > 0.2)
    return j.groupBy("name").agg(F.sum("v").alias("s"), F.count("*").alias("c"))


def lineage(spark):
    cap = capture_frames(pipeline, list(frames(spark)))
    names = [r["name"] for r in cap.frame.collect()]
    out = {"applied": sorted(names)}
    # staged in the pass, and the failed groups' ids from the id tap (not a join)
    out["how"] = [cap._staged is not None, cap.timings.get("tapped_rows", 0) > 0]
    for name in ("input0", "input1"):
        for considered in (False, True):
            r = cap.relation(name, considered=considered)
            oc, ic = np.asarray(r.out_cols), np.asarray(r.in_cols)
            out[f"{name} considered={considered}"] = sorted(
                {(names[int(oc[0, i])], int(oc[1, i]), int(ic[0, i]), int(ic[1, i]))
                 for i in range(oc.shape[1])}
            )
    return out


if __name__ == "__main__":
    from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS as fast

    # short jobs on small data: the JIT's first tier in the driver and the executors
    conf = {"spark.driver.extraJavaOptions": fast, "spark.executor.extraJavaOptions": fast}
    spark = get_session(sys.argv[1], {"spark.sql.shuffle.partitions": "4", **conf})
    out = lineage(spark)
    # with a folder the executors share (one host here): staged and tapped as in local mode
    spark.conf.set("spark.dslog.sharedDir", sys.argv[2])
    out["shared"] = lineage(spark)
    out["executors"] = sorted(
        {e.host() for e in spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()}
    )
    out["workers"] = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def master_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        with standalone_cluster(tmp_path_factory.mktemp("cluster"), fast_start=True) as url:
            yield url
    except ServerStartError as e:
        pytest.fail(str(e))


def _local_lineage(spark: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {}
    exec(compile(PIPELINE, "pipeline", "exec"), scope)  # the same code as the child's
    return json.loads(json.dumps(scope["lineage"](spark)))  # tuples -> lists, as from JSON


def test_capture_on_a_two_worker_cluster_equals_local_mode(
    master_url: str, spark: Any, tmp_path: Path
) -> None:
    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    (tmp_path / "shared").mkdir()
    proc = subprocess.run(
        [sys.executable, str(script), master_url, str(tmp_path / "shared")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.pop("workers") == 2  # both workers ran an executor for the application
    got.pop("executors")
    want = _local_lineage(spark)
    assert want.pop("how") == [True, True]  # local mode stages and taps
    # without a shared folder: marked, cached and joined; with one: as in local mode
    assert got.pop("how") == [False, False]
    shared = got.pop("shared")
    assert shared.pop("how") == [True, True]
    assert got["applied"] == want["applied"]
    for key in want:
        assert got[key] == want[key], key
        assert shared[key] == want[key], key
    assert len(want["input0 considered=True"]) > len(want["input0 considered=False"]) > 0


def _titles_answers(spark: Any, base: Path, store: str | None = None) -> dict[str, Any]:
    """The titles pipeline's lineage keyed by content (title ids and column names, not row
    ids, which depend on how Spark partitioned the sources): for each genre total, the
    ``title_basics`` cells it comes from; for the genre cells of ten titles, the
    ``titles_final`` cells they reach."""
    from hotspots.spark import PATH_TO_BASICS
    from relational_pipeline import GENRES

    from dslog_dagster.core.api import DSLog
    from dslog_dagster.io_managers.spark_frames import read_frame
    from dslog_dagster.spark import ROW_ID

    def frame(name: str) -> tuple[dict[int, str], list[str]]:
        rows = read_frame(spark, base / f"{name}.parquet", row_id=True).collect()
        cols = [c for c in rows[0].asDict() if c != ROW_ID]
        return {int(r[ROW_ID]): str(r["tconst"]) for r in rows}, cols

    basics, b_cols = frame("title_basics")
    final, f_cols = frame("titles_final")
    log = DSLog(store or base / ".dslog")
    out: dict[str, Any] = {}
    for g in range(len(GENRES)):
        cells = log.prov_query(PATH_TO_BASICS, [g]).to_indices().tolist()
        out[f"genre {g}"] = sorted((basics[r], b_cols[c]) for r, c in cells)
    chosen = sorted(basics.items(), key=lambda kv: kv[1])[:10]  # ten titles by id
    genres = b_cols.index("genres")
    cells = log.prov_query(list(reversed(PATH_TO_BASICS[2:])), [(r, genres) for r, _ in chosen])
    out["reach"] = sorted((final[r], f_cols[c]) for r, c in cells.to_indices().tolist())
    out["from"] = [t for _, t in chosen]
    return out


def _stop_forkserver() -> None:
    """Stop this process's multiprocessing fork server, so that no later test forks from a
    server started with another test's environment and working directory."""
    import multiprocessing.forkserver

    multiprocessing.forkserver._forkserver._stop()


def test_titles_job_on_the_cluster_with_a_process_per_step_equals_local_mode(
    master_url: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``titles_job`` with Dagster's multiprocess executor against the standalone cluster and
    a lineage store on object storage (an S3 server on 127.0.0.1): every step process attaches
    to one shared driver on the cluster (one Spark application), the lineage of all steps
    lands in the one store, and its answers equal the in-process local run's (local store)."""
    import boto3
    import dagster as dg
    from cluster_titles_job import make_defs

    from dslog_dagster.core.api import DSLog
    from dslog_dagster.spark.driver import stop_shared_driver

    config = {"config": {"n_titles": 40}}
    run_config = {"ops": {"title_basics": config, "title_episodes": config}}
    local = tmp_path / "local"
    job = make_defs(str(local), spark_master="local[2]").resolve_job_def("titles_job")
    (tmp_path / "home-local").mkdir()
    (tmp_path / "home-cluster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home-local")) as instance:
        assert job.execute_in_process(instance=instance, run_config=run_config).success
    want = _titles_answers(spark, local)
    assert sum(len(v) for k, v in want.items() if k.startswith("genre ")) > 0
    assert want["reach"]

    onc = tmp_path / "cluster"
    store = "s3://lineage/titles"
    monkeypatch.setenv("DSLOG_TITLES_BASE", str(onc))
    monkeypatch.setenv("DSLOG_TITLES_MASTER", master_url)
    monkeypatch.setenv("DSLOG_STORE", store)  # every step process's store
    (tmp_path / "shared").mkdir()  # the cluster runs on this host: any folder is shared
    monkeypatch.setenv("DSLOG_TITLES_SHARED_DIR", str(tmp_path / "shared"))
    tests = Path(__file__).resolve().parents[1]
    with s3_server():
        boto3.client("s3").create_bucket(Bucket="lineage")
        try:
            with dg.instance_for_test(temp_dir=str(tmp_path / "home-cluster")) as instance:
                recon = dg.build_reconstructable_job(
                    "cluster_titles_job", "titles_job", reconstructor_working_directory=str(tests)
                )
                # a process per step, forked from a server that imported the job's module
                # once (Dagster's default spawns each: ~6 s of imports per step)
                server = {"forkserver": {"preload_modules": ["cluster_titles_job"]}}
                forked = {"execution": {"config": {"start_method": server}}}
                result = dg.execute_job(
                    recon, instance=instance, run_config={**run_config, **forked}
                )
                assert result.success, [
                    str(e.event_specific_data) for e in result.all_events if e.is_failure
                ]
                steps = {e.step_key for e in result.all_events if e.is_step_success}
                pids = {e.pid for e in result.all_events if e.is_step_start}
            assert len(steps) == 9
            assert len(pids) == 9  # a process per step
        finally:
            _stop_forkserver()  # its environment was this test's
            assert stop_shared_driver(master_url) == 1  # exactly one driver served every step
        assert not (onc / ".dslog").exists()  # nothing went to a local store
        assert _titles_answers(spark, onc, store) == want
        # every step's lineage in the one store: the Spark steps' and the NumPy ones'
        log = DSLog(store)
        names = {a.name for a in log.store.arrays()}
        # Spark-side queries read the same objects, and answer as the native engine does
        from hotspots.spark import PATH_TO_BASICS

        from dslog_dagster.spark.query import SparkQueryEngine

        for g in (0, 1):
            native = log.prov_query(PATH_TO_BASICS, [g]).to_indices().tolist()
            assert (
                SparkQueryEngine(spark, log).prov_query(PATH_TO_BASICS, [g]).to_indices().tolist()
                == native
            )
    assert {"title_basics", "titles_final", "title_features", "genre_runtime"} <= names
