"""The shared Spark driver (:mod:`dslog_dagster.spark.driver`): processes attach to one JVM.

Two step-like child processes ask for the shared driver of a ``local[2]`` master at once: one
service starts (the file lock), both attach to the same Spark application, run jobs with
Python workers concurrently, keep their own SQL conf, and ``stop()`` detaches only. The
service then stops its JVM by itself once no process holds a lease for ``idle_timeout``.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dslog_dagster.errors import SparkUnavailableError
from dslog_dagster.spark import driver

STEP = r"""
import json, sys, time
from dslog_dagster.spark import get_session
from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS as FAST

parts = sys.argv[2]
conf = {"spark.sql.shuffle.partitions": "3", "spark.driver.extraJavaOptions": FAST}
spark = get_session(sys.argv[1], conf, shared=True, idle_timeout=3.0)
spark.conf.set("spark.sql.shuffle.partitions", parts)  # this process's session only
time.sleep(1.0)  # both processes attached before either detaches
rows = spark.sparkContext.parallelize(range(100), 4).map(lambda x: x * x).sum()
groups = spark.range(1000).selectExpr("id % 7 as k").groupBy("k").count().collect()
out = {
    "app": spark.sparkContext.applicationId,
    "sum": rows,
    "groups": sorted((r["k"], r["count"]) for r in groups),
    "parts": spark.conf.get("spark.sql.shuffle.partitions"),
}
spark.stop()  # detaches this process; the other keeps working
print(json.dumps(out))
"""


def test_two_processes_share_one_driver_which_stops_when_idle(tmp_path: Path) -> None:
    master = "local[2]"
    script = tmp_path / "step.py"
    script.write_text(STEP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), master, parts],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for parts in ("5", "9")
    ]
    try:
        outs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    got = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert got[0]["app"] == got[1]["app"]  # one Spark application served both
    for g in got:
        assert g["sum"] == sum(x * x for x in range(100))
        assert g["groups"] == [[k, len(range(k, 1000, 7))] for k in range(7)]
    assert [g["parts"] for g in got] == ["5", "9"]  # SQL conf per process
    services = [
        f
        for f in driver.driver_dir(master, {}, "").parent.glob("*/spec.json")
        if json.loads(f.read_text())["master"] == master
    ]
    assert services
    # no lease left: the service stops its JVM and exits after idle_timeout (3 s)
    deadline = time.monotonic() + 120
    while any((f.parent / "driver.json").exists() for f in services):
        assert time.monotonic() < deadline, "the idle shared driver did not stop"
        time.sleep(0.5)
    assert driver.stop_shared_driver(master) == 0


def test_a_process_with_its_own_context_cannot_attach(spark: Any) -> None:
    with pytest.raises(SparkUnavailableError, match="already runs in this process"):
        driver.shared_session("local[2]", {}, "dslog-tests")


def test_leases_of_ended_processes_are_dropped(tmp_path: Path) -> None:
    leases = tmp_path / "leases"
    leases.mkdir()
    me = os.getpid()
    (leases / f"{me}-{driver.start_time(me)}").touch()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    (leases / f"{int(dead.stdout)}-1").touch()  # ended
    (leases / f"{me}-0").touch()  # this pid, but another start time: a reused pid
    assert driver.live_leases(tmp_path) == 1
    assert [p.name for p in leases.iterdir()] == [f"{me}-{driver.start_time(me)}"]
