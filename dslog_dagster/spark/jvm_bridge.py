"""The one place dslog reaches into PySpark's private handles on JVM objects.

The capture reads analyzed plans (:mod:`dslog_dagster.spark.plan`), unpersists the RDD of a
local checkpoint (:mod:`dslog_dagster.spark.rowid`) and registers the id tap's function
(:mod:`dslog_dagster.spark.idtap`); the shared driver (:mod:`dslog_dagster.spark.driver`)
publishes its py4j gateway and detaches a process's context from it. PySpark offers none of
these through its public API, only through the py4j handles it keeps in private attributes
(``_jdf``, ``_jsparkSession``, ``_jvm``, ``SparkContext._gateway``, ``_jsc``,
``_active_spark_context``). Each is read by one function here, so a PySpark release that
renames one breaks this module alone (``pyproject.toml`` exempts it from ruff's SLF001 for
that reason).
"""

from typing import Any

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from dslog_dagster.errors import SparkUnavailableError

__all__ = [
    "context_stopped",
    "detach_context",
    "gateway_address",
    "java_frame",
    "java_session",
    "jvm_view",
    "process_context",
]


def java_frame(df: DataFrame) -> Any:
    """The JVM ``Dataset`` behind ``df`` (PySpark's ``DataFrame._jdf``)."""
    return df._jdf


def java_session(spark: SparkSession) -> Any:
    """The JVM ``SparkSession`` behind ``spark`` (PySpark's ``SparkSession._jsparkSession``)."""
    return spark._jsparkSession


def jvm_view(spark: SparkSession) -> Any:
    """The py4j view of the driver JVM's classes (PySpark's ``SparkSession._jvm``)."""
    return spark._jvm


def gateway_address(spark: SparkSession) -> tuple[int, str]:
    """Port and secret of the py4j gateway of ``spark``'s driver JVM (what PySpark passes to
    a process it lets attach, as ``PYSPARK_GATEWAY_PORT``/``PYSPARK_GATEWAY_SECRET``)."""
    gateway = spark.sparkContext._gateway
    if gateway is None:
        msg = "The SparkContext stopped: it has no py4j gateway to publish; start a new one."
        raise SparkUnavailableError(msg)
    params = gateway.gateway_parameters
    return int(params.port), str(params.auth_token)


def context_stopped(spark: SparkSession) -> bool:
    """Has ``spark``'s JVM SparkContext stopped (or its Python side let go of it)?"""
    jsc = spark.sparkContext._jsc
    return jsc is None or bool(jsc.sc().isStopped())


def process_context() -> SparkContext | None:
    """The SparkContext of this Python process, if one runs (PySpark's class attribute)."""
    return SparkContext._active_spark_context


def detach_context(sc: SparkContext) -> None:
    """Let this process's Python SparkContext go without stopping its JVM context: stop its
    accumulator server and clear PySpark's record of it, as ``SparkContext.stop`` does after
    stopping the JVM side."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        server.shutdown()
        sc._accumulatorServer = None  # type: ignore[assignment]
    sc._jsc = None
    with SparkContext._lock:
        SparkContext._active_spark_context = None
