"""Spark servers the cluster and Connect tests start on 127.0.0.1, and stop.

* :func:`standalone_cluster` — a master and two workers (one core, 1 GiB each by default)
  from PySpark's own launcher (``bin/spark-class org.apache.spark.deploy.master.Master`` /
  ``…worker.Worker``), yielding the ``spark://`` URL once both workers registered;
* :func:`connect_server` — a Spark Connect server (``SparkConnectServer`` through
  ``spark-submit``, ``local[2]``), yielding its ``sc://`` URL once it listens;
* :func:`s3_server` — an S3-compatible server (moto's standalone server, a process of its
  own), with the environment that points every S3 client of this process and its children
  at it, yielding its endpoint.

Every server listens on loopback only, runs its Python workers on this interpreter, and is
stopped (its whole process group) when the context ends. Starting is mostly JVM start-up
(a minute or more on a busy 2-core machine): a test module starts one and shares it.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

START_TIMEOUT = 240.0


class ServerStartError(RuntimeError):
    """A server did not come up; the message carries the end of its logs."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Does something accept connections on 127.0.0.1:``port``?"""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spark_home() -> Path:
    """PySpark's own Spark distribution (its ``bin/`` launchers and jars)."""
    import pyspark

    return Path(pyspark.__file__).parent


def server_env() -> dict[str, str]:
    """The environment of a server: loopback, this interpreter for Python workers, no
    ``SPARK_REMOTE`` (a classic server)."""
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    env.pop("SPARK_REMOTE", None)
    return env


def _popen(cmd: list[str], log: Path, env: dict[str, str]) -> Any:
    with log.open("w") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def stop(procs: list[Any]) -> None:
    """Stop the servers' process groups: SIGTERM, then SIGKILL after 30 s."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _logs(base: Path) -> str:
    return "\n".join(p.read_text()[-1500:] for p in sorted(base.glob("*.log")))


@contextlib.contextmanager
def standalone_cluster(
    base: Path, workers: int = 2, cores: int = 1, memory: str = "1g", *, fast_start: bool = False
) -> Iterator[str]:
    """A standalone master and ``workers`` workers on 127.0.0.1 (logs and work folders under
    ``base``); yields the master URL once every worker registered. ``fast_start`` runs the
    master's and workers' JVMs with the JIT's first tier only (``FAST_START_JAVA_OPTIONS``:
    the tests' short jobs); an application sets its executors' options itself
    (``spark.executor.extraJavaOptions``).

    Raises:
        ServerStartError: a process died or the cluster was not up within
            :data:`START_TIMEOUT` seconds.
    """
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = server_env()
    if fast_start:
        from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS

        env["SPARK_DAEMON_JAVA_OPTS"] = FAST_START_JAVA_OPTIONS
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())]
    procs = [
        _popen(
            [spark_class, "org.apache.spark.deploy.master.Master", *master],
            base / "master.log",
            env,
        )
    ]
    try:
        for w in range(1, workers + 1):
            work = base / f"worker{w}"
            work.mkdir()
            args = ["--host", "127.0.0.1", "--cores", str(cores), "--memory", memory]
            args += ["--webui-port", str(free_port()), "--work-dir", str(work), url]
            procs.append(
                _popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", *args],
                    base / f"worker{w}.log",
                    env,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT
        while (base / "master.log").read_text().count("Registering worker") < workers:
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                msg = f"the standalone cluster did not start:\n{_logs(base)}"
                raise ServerStartError(msg)
            time.sleep(0.5)
        yield url
    finally:
        stop(procs)


@contextlib.contextmanager
def connect_server(base: Path) -> Iterator[str]:
    """A Spark Connect server (``local[2]``) on a free loopback port; yields its URL.

    Raises:
        ServerStartError: the server died or did not listen within :data:`START_TIMEOUT`.
    """
    from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS  # not for s3_server users

    port = free_port()
    log = base / "server.log"
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTIONS,  # short jobs, small data
    }
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer"),
        *("--master", "local[2]"),
    ]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    server = _popen(cmd, log, server_env())
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                msg = f"Spark Connect server did not start:\n{log.read_text()[-3000:]}"
                raise ServerStartError(msg)
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop([server])


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server on a free loopback port; yields its endpoint URL. While it runs,
    ``os.environ`` points S3 clients at it (``AWS_ENDPOINT_URL`` and test credentials), so
    child processes (Dagster step processes, writers) find it too; restored afterwards.

    Raises:
        ServerStartError: the server died or did not listen within 30 s.
    """
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    env = {"AWS_ENDPOINT_URL": endpoint, **S3_ENV}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        deadline = time.monotonic() + 30
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                msg = "moto S3 server did not start"
                raise ServerStartError(msg)
            time.sleep(0.1)
        yield endpoint
    finally:
        stop([proc])
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
