"""The shared Spark driver's service process: it owns the driver JVM the steps attach to.

Started by :func:`dslog_dagster.spark.driver.shared_session` (``python -m
dslog_dagster.spark.driver_service <folder>``) when no live service serves the folder's
settings. Kept apart from the attaching side because it is a program of its own: it starts
the JVM with :func:`~dslog_dagster.spark.session.get_session` (which itself calls the
attaching side for ``shared=True``), publishes the gateway, watches the leases, and stops the
JVM when idle or on SIGTERM, always under the folder's lock so that no process attaches to a
context that is stopping.
"""

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from dslog_dagster.spark.driver import (
    INFO_FILE,
    POLL_S,
    live_leases,
    locked,
    read_info,
    start_time,
)

__all__ = ["serve"]


def serve(folder: Path) -> None:
    """The service: start the driver JVM, publish its gateway, stop when idle or told to."""
    from dslog_dagster.spark.jvm_bridge import context_stopped, gateway_address
    from dslog_dagster.spark.session import get_session

    spec = json.loads((folder / "spec.json").read_text())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        session = get_session(spec["master"], spec["conf"], spec["app_name"])
    except Exception as e:  # reported to the attaching process, which raises it
        (folder / "failed").write_text(f"{type(e).__name__}: {e}")
        raise
    session.range(1).count()  # the first job's class loading, once for every step
    port, secret = gateway_address(session)
    app_id = session.sparkContext.applicationId
    pid = os.getpid()
    info = {"pid": pid, "started": start_time(pid) or "", "port": port, "secret": secret}
    tmp = folder / f"{INFO_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, folder / INFO_FILE)
    sys.stdout.write(f"shared driver {app_id} on 127.0.0.1:{port}\n")
    sys.stdout.flush()
    idle_since = time.monotonic()

    def retire() -> None:  # under the lock: no process attaches while the context stops
        if (read_info(folder) or {}).get("pid") == pid:
            (folder / INFO_FILE).unlink(missing_ok=True)
        with contextlib.suppress(Exception):  # a JVM that died cannot be stopped
            session.stop()

    retired = False
    try:
        while not retired:
            stopping = stop.wait(POLL_S)
            with locked(folder):
                if live_leases(folder):
                    idle_since = time.monotonic()
                idle = time.monotonic() - idle_since > float(spec["idle"])
                if stopping or idle or context_stopped(session):
                    retire()
                    retired = True
    finally:
        if not retired:
            with locked(folder):
                retire()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
