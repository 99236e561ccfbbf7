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

A session the user made elsewhere has workers running whatever ``PYSPARK_PYTHON`` said when
its SparkContext started (``python3`` on the PATH by default), which may lack pyarrow or
dslog_dagster: the capture's jobs would then fail half-way with a ``ModuleNotFoundError`` in
a worker. :func:`check_workers` runs before any capture work: when the workers' interpreter
is not the driver's it runs one tiny job that imports what the capture's workers need, and
refuses with :class:`~dslog_dagster.errors.SparkUnavailableError` saying how to fix it.
"""

import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from dslog_dagster.core import progress
from dslog_dagster.errors import SparkUnavailableError
from dslog_dagster.spark.connect import is_connect, require_classic
from dslog_dagster.spark.java import require_java
from dslog_dagster.spark.progress import watch

__all__ = [
    "DEFAULT_CONF",
    "FAST_START_JAVA_OPTIONS",
    "check_workers",
    "get_session",
    "shuffle_partitions",
]

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

FAST_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
"""JVM options for a local session that runs short jobs on small data (pass them as
``conf={"spark.driver.extraJavaOptions": FAST_START_JAVA_OPTIONS}``; the example project
does): only the JIT's quick first tier (C1). Starting Spark and its first jobs is mostly the
JVM compiling its own code, and the optimising tier (C2) spends more CPU compiling than short
jobs ever win back. Measured on a busy 2-core machine: the JVM's CPU for the example's
``titles_job`` fell from ~68 s to ~36 s (docs/spark.md, "Start-up and progress"). Not a
default: long jobs on large data run faster with both tiers (``bench/spark_capture.py`` at
10^6 rows was slower with this option)."""


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
    shared: bool = False,
    idle_timeout: float | None = None,
) -> Any:  # a pyspark.sql.SparkSession (pyspark is imported lazily)
    """The process's SparkSession, created on first use with ``master`` and ``conf``.

    A session that already runs in this process is returned as it is (Spark allows one
    active SparkContext per JVM). Runtime SQL options the caller passes in ``conf`` are applied
    to it; :data:`DEFAULT_CONF` is not, so a session the user configured (say with 200 shuffle
    partitions) keeps its settings when a resource with default config attaches to it.

    A new session gets the capture's id tap on its class path (``spark.jars``, after the
    caller's; see :mod:`dslog_dagster.spark.idtap`) unless ``id_tap`` is false or no JDK can
    compile it: aggregations with shuffled keys are then captured with a slower join.

    ``shared=True`` attaches to the machine's shared driver for these settings instead of
    starting a JVM in this process, starting that driver when none runs (see
    :mod:`dslog_dagster.spark.driver`): what a Dagster step process wants, when every step
    runs in a process of its own. ``idle_timeout`` (seconds) is how long a driver this call
    starts outlives its last attached process (default
    :data:`~dslog_dagster.spark.driver.DEFAULT_IDLE_S`).

    Raises:
        SparkUnavailableError: Java is missing or the JVM did not start.
        SparkConnectUnsupportedError: the process's session is a Spark Connect one
            (``SPARK_REMOTE`` set, or a ``builder.remote(...)`` session already active).
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
        require_classic(active, "dslog's Spark session (get_session)")
        for k, v in asked.items():
            if k.startswith("spark.sql."):
                active.conf.set(k, v)
        watch(active)
        return active
    if id_tap:
        from dslog_dagster.spark.idtap import tap_jar

        jar = tap_jar()
        if jar is not None:
            merged["spark.jars"] = ",".join(filter(None, [merged.get("spark.jars"), str(jar)]))
    if shared:
        from dslog_dagster.spark import driver

        idle = driver.DEFAULT_IDLE_S if idle_timeout is None else idle_timeout
        with progress.waiting(f"the shared Spark driver (master `{master}`)"):
            session = driver.shared_session(master, merged, app_name, idle_timeout=idle)
        watch(session)
        return session
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in merged.items():
        builder = builder.config(k, v)
    try:
        with progress.waiting(f"the Spark session to start (master `{master}`; JVM start)"):
            session = builder.getOrCreate()
    except Exception as e:  # the JVM gateway raises plain Exceptions / RuntimeErrors
        msg = f"Could not start Spark (master `{master}`): {e}"
        raise SparkUnavailableError(msg) from e
    require_classic(session, "dslog's Spark session (get_session)")  # SPARK_REMOTE was set
    watch(session)
    return session


# (application id, worker interpreter) of sessions whose workers were checked
_WORKERS_OK: set[tuple[str, str]] = set()
_workers_lock = threading.Lock()
#: What the capture's Python workers import (row-id compression, Arrow batches).
WORKER_MODULES = ("numpy", "pyarrow", "dslog_dagster.core.compression")


def _worker_imports(_: Any) -> list[str]:
    """In a worker: the modules of :data:`WORKER_MODULES` it cannot import, with why."""
    import importlib

    missing = []
    for name in WORKER_MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # any failure to import is what the check reports
            missing.append(f"{name} ({type(e).__name__}: {e})")
    return missing


def _is_driver_python(exe: str) -> bool:
    """Is ``exe`` (a path or a name on the PATH) this very interpreter? Compared as paths,
    not resolved: a virtual environment's python is a symlink to the system one, whose
    site-packages are another's."""
    path = exe if os.sep in exe else shutil.which(exe)
    return path is not None and os.path.normpath(os.path.abspath(path)) == os.path.normpath(
        sys.executable
    )


def _worker_error(e: BaseException) -> str:
    """The Python error a failed job reports (its last ``...Error: ...`` line), else the
    first line of the exception."""
    found = re.findall(r"\b(\w+(?:Error|Exception): [^\n]+)", str(e))
    return found[-1] if found else str(e).splitlines()[0] if str(e) else type(e).__name__


def _missing_in_worker(batches: Iterator[Any]) -> Iterator[Any]:
    """In a Spark Connect server's Python worker: one row per module it cannot import."""
    import pyarrow as pa

    for _ in batches:
        pass
    missing = _worker_imports(None)
    yield pa.record_batch([pa.array(missing, pa.string())], names=["missing"])


def _check_connect_workers(session: Any) -> None:
    """:func:`check_workers` for a Spark Connect session: the driver's interpreter says
    nothing about the server's, so one tiny ``mapInArrow`` job imports
    :data:`WORKER_MODULES` there (once per session)."""
    key = ("connect", str(getattr(session, "session_id", id(session))))
    with _workers_lock:
        if key in _WORKERS_OK:
            return
    try:
        rows = session.range(1).mapInArrow(_missing_in_worker, "missing string").collect()
        missing = [str(r[0]) for r in rows]
    except Exception as e:  # the server reports a worker's failure in its own exception
        missing = [f"the server's Python workers did not run ({_worker_error(e)})"]
    if missing:
        msg = (
            "The Spark Connect server's Python workers cannot run dslog's query hops: "
            f"{'; '.join(missing)}. Start the server with PYSPARK_PYTHON set to an "
            "interpreter that has numpy, pyarrow and dslog-dagster installed (the versions "
            f"of this driver, `{sys.executable}`)."
        )
        raise SparkUnavailableError(msg)
    with _workers_lock:
        _WORKERS_OK.add(key)


def check_workers(session: Any) -> None:
    """Make sure ``session``'s Python workers can run the capture, before it does anything.

    The workers run ``SparkContext.pythonExec`` (``PYSPARK_PYTHON`` when the context
    started, else ``python3`` on the PATH). When that is this interpreter nothing runs;
    otherwise one tiny job imports :data:`WORKER_MODULES` in a worker. The answer is kept per
    application and interpreter, so the job runs once.

    Raises:
        SparkUnavailableError: the workers cannot import what the capture needs (or do not
            start); the message names their interpreter and the fix.
    """
    if is_connect(session):  # no SparkContext over Connect: ask the server's workers
        _check_connect_workers(session)
        return
    sc = session.sparkContext
    exe = str(getattr(sc, "pythonExec", None) or "python3")
    key = (str(sc.applicationId), exe)
    with _workers_lock:
        if key in _WORKERS_OK:
            return
    if not _is_driver_python(exe):
        try:
            missing = sc.parallelize([0], 1).map(_worker_imports).collect()[0]
        except Exception as e:  # py4j wraps the worker's failure in a Py4JJavaError
            missing = [f"the workers did not run ({_worker_error(e)})"]
        if missing:
            msg = (
                f"Spark's Python workers run `{exe}` (PYSPARK_PYTHON when this session's "
                f"SparkContext started), not this driver's `{sys.executable}`, and cannot run "
                f"dslog's capture: {'; '.join(missing)}. Start the session with "
                f"PYSPARK_PYTHON={sys.executable} in the environment (before the SparkContext "
                "starts; dslog_dagster.spark.get_session and SparkSessionResource do this), or "
                "install numpy, pyarrow and dslog-dagster into that interpreter."
            )
            raise SparkUnavailableError(msg)
    with _workers_lock:
        _WORKERS_OK.add(key)
