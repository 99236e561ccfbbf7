"""One SparkSession per process, with loopback-only defaults.

Starting the JVM costs about 8 s on a small machine, so the session is created once and reused
by every caller in the process (``getOrCreate``). The defaults keep Spark off the network: no
UI (no Jetty port), driver host and bind address on ``127.0.0.1``, and few shuffle partitions
(twice a local master's cores) because lineage capture runs many small jobs. The default
parallelism is Spark's own (a local master's cores): a fixed larger number made adaptive
execution keep more partitions than cores after a shuffle, so the last stage of a small job
ran in two waves of tasks (at 10^6 rows, ~0.1 s of a ~0.8 s capture), and a fixed smaller
one would idle a bigger machine. Python workers run the interpreter of the driver, so the
executors can import ``dslog_dagster`` (its native ProvRC kernels compress row lineage where
the data is).
"""

import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from dslog_dagster.errors import SparkUnavailableError
from dslog_dagster.spark.java import require_java

__all__ = ["DEFAULT_CONF", "get_session", "shuffle_partitions"]

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}
"""Spark conf every session gets unless the caller overrides a key (and
``spark.sql.shuffle.partitions``, see :func:`shuffle_partitions`)."""


def _cores() -> int:
    """The cores this process may run on (as ``local[*]`` counts them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def shuffle_partitions(master: str) -> int:
    """Shuffle partitions for a new session: twice a local master's cores (``local``: 1,
    ``local[N]``, ``local[N,F]``, ``local[*]``: the machine's), else 4. Few, because
    lineage capture runs many small jobs and adaptive execution only merges partitions;
    scaled with the cores, because a fixed number left a bigger machine's cores idle in
    every shuffle."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return 4
    cores = m.group(1)
    n = _cores() if cores == "*" else int(cores or 1)
    return 2 * max(1, n)


def get_session(
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "dslog-dagster",
    *,
    id_tap: bool = True,
) -> Any:  # a pyspark.sql.SparkSession (pyspark is imported lazily)
    """The process's SparkSession, created on first use with ``master`` and ``conf``.

    A session that already runs in this process is returned as it is (Spark allows one
    active SparkContext per JVM). Runtime SQL options the caller passes in ``conf`` are applied
    to it; :data:`DEFAULT_CONF` is not, so a session the user configured (say with 200 shuffle
    partitions) keeps its settings when a resource with default config attaches to it.

    A new session gets the capture's id tap on its class path (``spark.jars``, after the
    caller's; see :mod:`dslog_dagster.spark.idtap`) unless ``id_tap`` is false or no JDK can
    compile it: aggregations with shuffled keys are then captured with a slower join.

    Raises:
        SparkUnavailableError: Java is missing or the JVM did not start.
    """
    require_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    asked = {str(k): str(v) for k, v in (conf or {}).items()}
    merged = {
        **DEFAULT_CONF,
        "spark.sql.shuffle.partitions": str(shuffle_partitions(master)),
        **asked,
    }
    active = SparkSession.getActiveSession()
    if active is not None:
        for k, v in asked.items():
            if k.startswith("spark.sql."):
                active.conf.set(k, v)
        return active
    if id_tap:
        from dslog_dagster.spark.idtap import tap_jar

        jar = tap_jar()
        if jar is not None:
            merged["spark.jars"] = ",".join(filter(None, [merged.get("spark.jars"), str(jar)]))
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in merged.items():
        builder = builder.config(k, v)
    try:
        return builder.getOrCreate()
    except Exception as e:  # the JVM gateway raises plain Exceptions / RuntimeErrors
        msg = f"Could not start Spark (master `{master}`): {e}"
        raise SparkUnavailableError(msg) from e
