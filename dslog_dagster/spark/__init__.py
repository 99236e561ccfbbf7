"""Spark (PySpark) support: relational lineage capture, stable row ids, Spark-side queries.

Imports PySpark; ``dslog_dagster.core`` never imports this package.

* :func:`capture_frames` / :class:`FrameCapture` — run PySpark code, get cell lineage
  (:func:`capture_frame_outputs`: every output of a function returning several frames).
* :func:`get_session` — the process's SparkSession with loopback-only defaults.
* :func:`with_row_id` / :data:`ROW_ID` — dense, stable row ids.
* :func:`as_array` — a tracked Spark step's output as a NumPy array, keeping its lineage.
"""

# first: without PySpark, refuse naming the `[spark]` extra
import dslog_dagster.spark.requirement
from dslog_dagster.spark.capture import capture_frame_outputs as capture_frame_outputs
from dslog_dagster.spark.capture import capture_frames as capture_frames
from dslog_dagster.spark.frame import TrackedFrame as TrackedFrame
from dslog_dagster.spark.frame_capture import FrameCapture as FrameCapture
from dslog_dagster.spark.frame_capture import FrameInput as FrameInput
from dslog_dagster.spark.rowid import ROW_ID as ROW_ID
from dslog_dagster.spark.rowid import with_row_id as with_row_id
from dslog_dagster.spark.session import get_session as get_session
from dslog_dagster.spark.steps import as_array as as_array

# registers the "spark" engine of on-demand lineage (dslog_dagster.core.on_demand)
import dslog_dagster.spark.on_demand  # noqa: F401  # isort: skip

__all__ = [
    "ROW_ID",
    "FrameCapture",
    "FrameInput",
    "TrackedFrame",
    "as_array",
    "capture_frame_outputs",
    "capture_frames",
    "get_session",
    "with_row_id",
]
