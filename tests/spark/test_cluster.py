"""Capture on a Spark standalone cluster equals capture in local mode.

The module's fixture starts a master and two workers (one core, 1 GiB each) on 127.0.0.1
from PySpark's own launcher (``bin/spark-class org.apache.spark.deploy.master.Master`` /
``…worker.Worker``), and stops them at the end. A child process attaches to the cluster with
:func:`~dslog_dagster.spark.get_session` (a process has one SparkContext; the suite's own is
local) and captures a join + filter + groupBy whose rows are spread over both workers'
executors; its lineage, keyed by the output's group name, must equal the local capture's.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

START_TIMEOUT = 240.0

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
    spark = get_session(sys.argv[1], {"spark.sql.shuffle.partitions": "4"})
    out = lineage(spark)
    out["executors"] = sorted(
        {e.host() for e in spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()}
    )
    out["workers"] = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
    print(json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class(home: Path, cls: str, args: list[str], log: Path, env: dict[str, str]) -> Any:
    with log.open("w") as out:
        return subprocess.Popen(
            [str(home / "bin" / "spark-class"), cls, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture(scope="module")
def master_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import pyspark

    home = Path(pyspark.__file__).parent
    base = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    procs = [
        _spark_class(
            home,
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
            base / "master.log",
            env,
        )
    ]
    try:
        for w in (1, 2):
            work = base / f"worker{w}"
            work.mkdir()
            procs.append(
                _spark_class(
                    home,
                    "org.apache.spark.deploy.worker.Worker",
                    [
                        *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                        *("--webui-port", str(_free_port()), "--work-dir", str(work), url),
                    ],
                    base / f"worker{w}.log",
                    env,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT
        log = base / "master.log"
        while log.read_text().count("Registering worker") < 2:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-1500:] for p in sorted(base.glob("*.log")))
                pytest.fail(f"the standalone cluster did not start:\n{logs}")
            time.sleep(0.5)
        yield url
    finally:
        _stop(procs)


def _local_lineage(spark: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {}
    exec(compile(PIPELINE, "pipeline", "exec"), scope)  # the same code as the child's
    return json.loads(json.dumps(scope["lineage"](spark)))  # tuples -> lists, as from JSON


def test_capture_on_a_two_worker_cluster_equals_local_mode(
    master_url: str, spark: Any, tmp_path: Path
) -> None:
    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    proc = subprocess.run(
        [sys.executable, str(script), master_url],
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
    assert got["applied"] == want["applied"]
    for key in want:
        assert got[key] == want[key], key
    assert len(want["input0 considered=True"]) > len(want["input0 considered=False"]) > 0
