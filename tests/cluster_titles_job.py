"""The example project's ``titles_job`` with a process per step, on the Spark master that
``DSLOG_TITLES_MASTER`` names, every step attaching to the shared driver.

Importable by module name (``tests/`` is on the path): Dagster's multiprocess executor
reconstructs the job in every step process. Data and lineage go under ``DSLOG_TITLES_BASE``;
the step processes inherit both variables. ``DSLOG_TITLES_SHARED=0`` turns the shared driver
off (a JVM per step, the "before" of ``bench/cluster_steps.py``); ``DSLOG_TITLES_SHARED_DIR``
names a folder the cluster's executors share with the steps (``spark.dslog.sharedDir``).
"""

import os
import sys
from pathlib import Path

import dagster as dg

from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS

EXAMPLE = Path(__file__).resolve().parents[1] / "example_project"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))

from hotspots.definitions import make_defs  # noqa: E402


def titles_job() -> dg.JobDefinition:
    """``titles_job`` with the multiprocess executor (and the shared driver); the executors
    run the JIT's first tier only, as the project's driver does (short jobs, small data)."""
    conf = {"spark.executor.extraJavaOptions": FAST_START_JAVA_OPTIONS}
    if os.environ.get("DSLOG_TITLES_SHARED_DIR"):
        conf["spark.dslog.sharedDir"] = os.environ["DSLOG_TITLES_SHARED_DIR"]
    defs = make_defs(
        os.environ["DSLOG_TITLES_BASE"],
        spark_master=os.environ["DSLOG_TITLES_MASTER"],
        shared_driver=os.environ.get("DSLOG_TITLES_SHARED", "1") != "0",
        spark_conf=conf,
        executor=dg.multiprocess_executor,
    )
    return defs.resolve_job_def("titles_job")
