"""Spark Connect: what runs over it, and what refuses before any work.

A Spark Connect session (``SparkSession.builder.remote("sc://host:port")``) is a thin
client: its DataFrames are plans sent over gRPC, and nothing of the server's JVM is reachable
from Python. Cell-level capture needs exactly that JVM: it reads each output's *analyzed*
plan to find the lineage rule of every operator (:mod:`~dslog_dagster.spark.plan`), and the
id tap records row ids inside the JVM (:mod:`~dslog_dagster.spark.idtap`). Over Connect the
capture would fail half-way, inside some ``_jdf`` access; so every capture entry point asks
:func:`require_classic` first and refuses at once with
:class:`~dslog_dagster.errors.SparkConnectUnsupportedError`, naming what to use instead.

What needs only DataFrames and Python workers runs over Connect unchanged: the Spark query
engine (:class:`~dslog_dagster.spark.query.SparkQueryEngine`: ``createDataFrame`` of the
stored tables and ``mapInArrow`` hops), and the check that the server's Python workers can
import what those hops run (:func:`~dslog_dagster.spark.session.check_workers`).

Recognising a Connect object compares the class's module with ``pyspark.sql.connect``, so this
module never imports the Connect client (which needs grpcio and friends).
"""

from typing import Any

from dslog_dagster.errors import SparkConnectUnsupportedError

__all__ = ["CLASSIC_ONLY", "is_connect", "require_classic"]

CLASSIC_ONLY = (
    "cell-level capture (capture_frames, capture_frame_outputs, @tracked_asset steps on "
    "Spark frames, with_lineage on Spark outputs), which reads analyzed plans and tags row "
    "ids inside the driver's JVM"
)
"""What a classic (py4j) SparkSession is needed for, as the refusal says it."""

_CONNECT_MODULE = "pyspark.sql.connect"


def is_connect(obj: Any) -> bool:
    """Whether ``obj`` (a SparkSession, a DataFrame or a Column) belongs to Spark Connect."""
    return any(
        (getattr(cls, "__module__", "") or "").startswith(_CONNECT_MODULE)
        for cls in type(obj).__mro__
    )


def require_classic(obj: Any, what: str) -> None:
    """Refuse ``what`` at once when ``obj`` is a Spark Connect session or frame.

    Raises:
        SparkConnectUnsupportedError: ``obj`` is a Connect object; the message says which
            features need a classic session and how to make one.
    """
    if not is_connect(obj):
        return
    msg = (
        f"{what} needs a classic SparkSession, and this is a Spark Connect "
        f"{type(obj).__name__}. A classic session is needed for {CLASSIC_ONLY}. Start one "
        "with dslog_dagster.spark.get_session(master) (local, or a cluster's "
        "spark://host:port) or SparkSession.builder.master(...).getOrCreate(), in a process "
        "without SPARK_CONNECT_MODE_ENABLED / SPARK_REMOTE set. Over Spark Connect you can "
        "still query stored lineage with the Spark engine (SparkQueryEngine, "
        "`dslog query --engine spark`)."
    )
    raise SparkConnectUnsupportedError(msg)
