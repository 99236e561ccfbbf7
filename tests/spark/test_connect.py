"""Spark Connect: the capture refuses at once, the Spark query engine answers as natively.

A Spark Connect server is started by the module's fixture on 127.0.0.1 (PySpark's own
``SparkConnectServer`` class through ``spark-submit``, a free port, ``local[2]``), with its
Python workers on this interpreter, and stopped at the end.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from spark.servers import ServerStartError, connect_server
from strategies import KINDS, relation_between

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.errors import InvalidRelationError
from dslog_dagster.spark import capture_frames
from dslog_dagster.spark.connect import is_connect

pytestmark = [pytest.mark.connect, pytest.mark.integration]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        with connect_server(tmp_path_factory.mktemp("connect")) as url:
            yield url
    except ServerStartError as e:
        pytest.fail(str(e))


CLIENT = r"""
import json, sys
import numpy as np
from pyspark.sql import SparkSession
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import SparkConnectUnsupportedError
from dslog_dagster.spark import capture_frames, get_session
from dslog_dagster.spark.connect import is_connect
from dslog_dagster.spark.query import SparkQueryEngine

url, store = sys.argv[1], sys.argv[2]
remote = SparkSession.builder.remote(url).create()
df = remote.createDataFrame([(1, "a"), (2, "b")], ["x", "y"])
out = {"connect": [is_connect(remote), is_connect(df)], "refusals": [], "calls": 0}

def body(d):
    out["calls"] += 1
    return d.filter(d.x > 1)

for frames in ([df], {"df": df}, df):
    try:
        capture_frames(body, frames)
        out["refusals"].append(None)
    except SparkConnectUnsupportedError as e:
        out["refusals"].append(str(e))
try:
    get_session()
    out["get_session"] = None
except SparkConnectUnsupportedError as e:
    out["get_session"] = str(e)
log = DSLog(store)
engine = SparkQueryEngine(remote, log)
out["answers"] = {
    "back": sorted(engine.prov_query(["a2", "a1", "a0"], np.s_[1:4]).to_flat().tolist()),
    "forward": sorted(engine.prov_query(["a0", "a1", "a2"], np.s_[2, 1:3]).to_flat().tolist()),
    "between": sorted(engine.lineage_between("a2", "a0", np.s_[0:2]).to_flat().tolist()),
}
print(json.dumps(out))
"""


def _store(root: Path) -> DSLog:
    rng = np.random.default_rng(7)
    log = DSLog(root)
    shapes = [(6, 4), (5, 3), (7,)]
    arrays = [Array(f"a{i}", s) for i, s in enumerate(shapes)]
    for i in range(1, len(shapes)):
        rel = relation_between(rng, shapes[i], shapes[i - 1], list(KINDS[:3]))
        log.register_operation(
            f"op{i}", [arrays[i - 1]], [arrays[i]], [Lineage(arrays[i], arrays[i - 1], rel)]
        )
    return log


def test_over_connect_the_capture_refuses_at_once_and_the_spark_engine_answers(
    connect_url: str, tmp_path: Path
) -> None:
    """In a child process: a Connect client makes PySpark's builder remote for the whole
    process (``SPARK_CONNECT_MODE_ENABLED``), which must not leak into the other tests."""
    log = _store(tmp_path / "store")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, connect_url, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["connect"] == [True, True]
    assert out["calls"] == 0  # refused before the body ran: nothing half-done
    for refusal in [*out["refusals"], out["get_session"]]:
        assert refusal is not None
        assert "needs a classic SparkSession" in refusal
        assert "Spark engine" in refusal  # says what works over Connect
    want = {
        "back": log.prov_query(["a2", "a1", "a0"], np.s_[1:4]),
        "forward": log.prov_query(["a0", "a1", "a2"], np.s_[2, 1:3]),
        "between": log.lineage_between("a2", "a0", np.s_[0:2]),
    }
    assert out["answers"] == {k: sorted(v.to_flat().tolist()) for k, v in want.items()}


def test_a_bare_frame_is_refused_with_the_call_to_make(spark: Any) -> None:
    df = spark.createDataFrame([(1,)], ["x"])
    assert not is_connect(spark)
    assert not is_connect(df)
    with pytest.raises(InvalidRelationError, match=r"capture_frames\(func, \[df\]\)"):
        capture_frames(lambda d: d, df)  # type: ignore[arg-type]


def test_the_server_workers_check_names_what_they_lack() -> None:
    from dslog_dagster.errors import SparkUnavailableError
    from dslog_dagster.spark.session import _check_connect_workers

    class Failing:
        session_id = "test-session-without-dslog"

        def range(self, n: int) -> "Failing":
            return self

        def mapInArrow(self, fn: Any, schema: str) -> "Failing":
            return self

        def collect(self) -> list[Any]:
            msg = (
                "An exception was thrown from the Python worker.\n  File worker.py\n"
                "ModuleNotFoundError: No module named 'dslog_dagster'\n SQLSTATE: 38000"
            )
            raise RuntimeError(msg)

    with pytest.raises(SparkUnavailableError, match="No module named 'dslog_dagster'") as err:
        _check_connect_workers(Failing())
    assert "PYSPARK_PYTHON" in str(err.value)
