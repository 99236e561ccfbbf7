"""A Spark driver shared by the processes of one machine: steps attach instead of starting a JVM.

Classic PySpark runs its driver in a JVM the Python process starts (``spark-submit``, ~35 s
on a busy 2-core machine with a cluster master, most of it the JVM compiling Spark's code).
Dagster's default multiprocess executor runs each step in a process of its own, so every
tracked Spark step paid that start. A cluster does not help: the driver is still per process.

PySpark can attach to a running driver: a ``SparkContext`` built from an existing py4j gateway
(port and secret) and the JVM's existing ``JavaSparkContext``. This module runs one such
driver per (master, conf, app name, interpreter) on a machine as a small **service process**
(:mod:`dslog_dagster.spark.driver_service`) that starts the JVM with
:func:`~dslog_dagster.spark.session.get_session` and publishes the gateway's port and secret
in a 0600 file. :func:`shared_session` (what ``get_session(..., shared=True)`` calls) starts
the service when none runs (under a file lock, so concurrent steps start one), then attaches:
a few py4j calls, well under a second.

What is shared and what is not:

* **One SparkContext per JVM.** Every attached process gets a Python ``SparkContext``
  wrapping the service's JVM context, and its own ``SparkSession`` (``newSession()``: SQL conf,
  temporary views and UDFs per process; cached data and the catalog shared).
* **Per-process Python-side servers** stay per process: each attached ``SparkContext`` starts
  its own accumulator server and registers its own ``PythonAccumulatorV2``, and its own
  PySpark temporary directory (broadcast files). The service and the steps must share a
  machine (the gateway listens on 127.0.0.1 and the JVM reads these files).
* **Concurrent steps** submit jobs to one context from different JVM threads (py4j pins one
  per Python thread), as a Thrift server's sessions do; the service's scheduler is FAIR (unless
  the conf says otherwise) and each process's main thread submits to a pool of its own, so
  one long step does not starve another.
* **Stopping.** ``stop()`` of an attached context detaches this process only (the shared
  JVM context keeps running for the other steps). Ctrl-C in a step cancels the jobs of that
  process (its job tag), not every job of the context.
* **Lifetime.** Each attached process holds a lease (a file named by its pid and start time).
  The service stops its JVM and exits once no lease has been live for ``idle_timeout``
  seconds, so it outlives one run (the next run attaches at once) but not a deployment that
  went quiet. :func:`stop_shared_driver` stops the drivers of a master at once.

A step on another host cannot attach (loopback gateway, shared files); such deployments need
a driver per host (this module, per host) or Spark Connect, which the capture does not support.
"""

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dslog_dagster.errors import SparkUnavailableError

__all__ = [
    "DEFAULT_IDLE_S",
    "INFO_FILE",
    "POLL_S",
    "driver_dir",
    "live_leases",
    "locked",
    "read_info",
    "shared_session",
    "start_time",
    "stop_shared_driver",
]

DEFAULT_IDLE_S = 300.0
"""Seconds the service waits with no attached process before it stops its JVM."""
START_TIMEOUT_S = 600.0
"""Seconds an attaching process waits for a new service's JVM (a cold start on a busy machine
takes one to two minutes)."""
POLL_S = 0.5
INFO_FILE = "driver.json"


def driver_dir(master: str, conf: Mapping[str, str], app_name: str) -> Path:
    """The service folder of a driver: per user, and per master, conf, app name and
    interpreter (a step asking for other settings gets another driver)."""
    spec = json.dumps([master, sorted(conf.items()), app_name, sys.executable])
    key = hashlib.sha256(spec.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"dslog-spark-{os.getuid()}" / key


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (folder / "lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (so a reused pid is not taken for the
    process that left the lease), or ``None`` when it does not run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return ""
        return ""  # no /proc: alive, start time unknown
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str) -> bool:
    now = start_time(pid)
    return now is not None and (now == started or "" in (now, started))


def read_info(folder: Path) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = json.loads((folder / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _running(folder: Path) -> dict[str, Any] | None:
    """The published gateway of a live service in ``folder``, else ``None``."""
    info = read_info(folder)
    if info is None or not _alive(int(info["pid"]), str(info["started"])):
        return None
    return info if _listening(int(info["port"])) else None


def live_leases(folder: Path) -> int:
    """Remove the leases of processes that ended; the number still live."""
    live = 0
    for lease in (folder / "leases").glob("*"):
        pid, _, started = lease.name.partition("-")
        if pid.isdigit() and _alive(int(pid), started):
            live += 1
        else:
            lease.unlink(missing_ok=True)
    return live


def _spawn(folder: Path) -> None:
    """Start the service of ``folder`` (its spec is in ``spec.json``), detached from this
    process (its own session: a step's Ctrl-C does not reach it)."""
    log = (folder / "driver.log").open("w")
    with log:
        subprocess.Popen(
            [sys.executable, "-m", "dslog_dagster.spark.driver_service", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def _await_service(folder: Path) -> dict[str, Any]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = _running(folder)
        if info is not None:
            return info
        failed = folder / "failed"
        if failed.exists():
            msg = f"The shared Spark driver did not start: {failed.read_text().strip()}"
            raise SparkUnavailableError(msg)
        time.sleep(POLL_S)
    log = (folder / "driver.log").read_text()[-2000:] if (folder / "driver.log").exists() else ""
    msg = (
        f"The shared Spark driver did not start within {START_TIMEOUT_S:.0f} s (its folder "
        f"`{folder}`). Its log ends:\n{log}"
    )
    raise SparkUnavailableError(msg)


def _lease(folder: Path) -> Path:
    pid = os.getpid()
    lease = folder / "leases" / f"{pid}-{start_time(pid) or ''}"
    lease.parent.mkdir(exist_ok=True, mode=0o700)
    lease.touch()
    return lease


_attached: dict[str, Any] = {}
_attach_lock = threading.Lock()


def shared_session(
    master: str,
    conf: Mapping[str, str],
    app_name: str,
    *,
    idle_timeout: float = DEFAULT_IDLE_S,
) -> Any:
    """This process's SparkSession on the machine's shared driver for these settings,
    starting the driver when none runs.

    ``conf`` is the full conf of the driver (the caller merges its defaults); its
    ``spark.sql.*`` keys are also set on this process's session.

    Raises:
        SparkUnavailableError: the service could not start its JVM (the message carries its
            error or the end of its log), or a SparkContext of another kind already runs in
            this process.
    """
    from dslog_dagster.spark.jvm_bridge import process_context

    conf = {"spark.scheduler.mode": "FAIR", **conf}
    folder = driver_dir(master, conf, app_name)
    with _attach_lock:
        if "session" in _attached:
            return _attached["session"]
        if process_context() is not None:
            msg = (
                "A SparkContext already runs in this process, so it cannot attach to the shared "
                "driver. Ask for the shared driver before anything starts Spark here (or use "
                "the running session: get_session(shared=False))."
            )
            raise SparkUnavailableError(msg)
        with locked(folder):
            info = _running(folder)
            if info is None:
                (folder / "failed").unlink(missing_ok=True)
                spec = {"master": master, "conf": conf, "app_name": app_name}
                (folder / "spec.json").write_text(json.dumps({**spec, "idle": idle_timeout}))
                _spawn(folder)
                info = _await_service(folder)
            lease = _lease(folder)
        session = _attach(info, master, app_name, conf)
        _attached.update(session=session, lease=lease)
        atexit.register(lease.unlink, missing_ok=True)
        return session


def _gateway(port: int, secret: str) -> Any:
    """A py4j gateway to the service's JVM, as PySpark's ``launch_gateway`` makes one for a
    ``PYSPARK_GATEWAY_PORT`` it is given (thread pinning as the service's)."""
    from pyspark.java_gateway import launch_gateway

    saved = {k: os.environ.get(k) for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"] = str(port), secret
    try:
        return launch_gateway()  # type: ignore[no-untyped-call]
    finally:  # not inherited by this process's children (they would attach too)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _attached_context_class() -> Any:
    from pyspark import SparkContext

    from dslog_dagster.spark.jvm_bridge import detach_context

    class AttachedSparkContext(SparkContext):
        """A Python SparkContext on the shared driver's JVM context: ``stop()`` detaches
        this process (the JVM context serves the other steps)."""

        def stop(self) -> None:
            detach_context(self)
            lease = _attached.pop("lease", None)
            _attached.pop("session", None)
            if lease is not None:
                lease.unlink(missing_ok=True)

    return AttachedSparkContext


def _attach(info: Mapping[str, Any], master: str, app_name: str, conf: Mapping[str, str]) -> Any:
    from pyspark.sql import SparkSession

    gateway = _gateway(int(info["port"]), str(info["secret"]))
    jvm = gateway.jvm
    # the service's default session (public API; SparkContext.getActive is not, and
    # getOrCreate would start a new context were the service's stopped)
    default = jvm.org.apache.spark.sql.classic.SparkSession.getDefaultSession()
    if default.isEmpty() or default.get().sparkContext().isStopped():
        msg = "The shared Spark driver runs but its SparkContext stopped; retry to start another."
        raise SparkUnavailableError(msg)
    jsc = jvm.org.apache.spark.api.java.JavaSparkContext(default.get().sparkContext())
    sc = _attached_context_class()(master=master, appName=app_name, gateway=gateway, jsc=jsc)
    jsession = default.get().newSession()
    session = SparkSession(sc, jsparkSession=jsession)
    for k, v in conf.items():
        if k.startswith("spark.sql."):
            session.conf.set(k, v)
    tag = f"dslog-step-{os.getpid()}"
    sc.addJobTag(tag)
    # FAIR across processes: a pool per process (Spark creates it on first use)
    sc.setLocalProperty("spark.scheduler.pool", tag)
    if threading.current_thread() is threading.main_thread():

        def cancel_mine(signum: int, frame: Any) -> None:  # this process's jobs only
            with contextlib.suppress(Exception):
                sc.cancelJobsWithTag(tag)
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, cancel_mine)
    return session


def stop_shared_driver(master: str) -> int:
    """Stop now every shared driver of this user on ``master`` (whatever its conf); processes
    attached to one lose their context. The number of drivers stopped."""
    stopped = 0
    for spec_file in sorted(driver_dir(master, {}, "").parent.glob("*/spec.json")):
        folder = spec_file.parent
        try:
            if json.loads(spec_file.read_text())["master"] != master:
                continue
        except (OSError, ValueError, KeyError):
            continue
        with locked(folder):
            info = _running(folder)
        if info is None:
            continue
        pid, started = int(info["pid"]), str(info["started"])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while _alive(pid, started) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        stopped += 1
    return stopped
