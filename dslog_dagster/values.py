"""What kind of value a tracked step handles: NumPy arrays it can track, Spark and pandas
DataFrames, and the plain values of a step that ran without capture.

Shared by the decorators (which inputs to track) and the IO managers (how to store an output).
PySpark and pandas are never imported here: a process that never imported them has no frames.
"""

import sys
from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster.core.capture import TRACKED_FLOAT
from dslog_dagster.core.native import annotator

__all__ = ["is_frame", "is_pandas_frame", "is_trackable", "plain", "plain_arrays"]


def plain(x: Any) -> Any:
    """Plain float64 values of a (possibly tracked) array or scalar, dropping its lineage.

    Inside a captured step ``float(x)`` and ``x.astype(float)`` raise ``LineageLostError`` on
    purpose; call ``plain`` where a number is only needed for logging or metadata.
    """
    arr = np.asarray(x)
    if arr.dtype == TRACKED_FLOAT:
        vals = annotator.values(arr)
        return vals if arr.ndim else np.float64(vals[()])
    return x


def is_frame(v: Any) -> bool:
    """A Spark DataFrame? (Checked without importing PySpark: no PySpark, no frames.)"""
    sql = sys.modules.get("pyspark.sql")
    return sql is not None and isinstance(v, sql.DataFrame)


def is_pandas_frame(v: Any) -> bool:
    """A pandas DataFrame? (Checked without importing pandas: no pandas, no frames.)"""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(v, pd.DataFrame)


def is_trackable(v: Any) -> bool:
    """A real numeric (or boolean) NumPy array or scalar, whose cells lineage can name?"""
    if not isinstance(v, np.ndarray | np.generic):
        return False
    dt = np.asarray(v).dtype
    return bool(
        (np.issubdtype(dt, np.number) and not np.issubdtype(dt, np.complexfloating))
        or dt == np.bool_
    )


def plain_arrays(res: Any) -> Any:
    """Turn :func:`~dslog_dagster.spark.as_array` outputs of an untracked run into arrays."""
    steps = sys.modules.get("dslog_dagster.spark.steps")
    if steps is None:  # as_array was never imported, so nothing can be one
        return res

    def conv(v: Any) -> Any:
        if isinstance(v, steps.ArrayFromFrame):
            return steps.plain_array(v)
        if isinstance(v, dg.Output) and isinstance(v.value, steps.ArrayFromFrame):
            return dg.Output(
                steps.plain_array(v.value), output_name=v.output_name, metadata=v.metadata,
                data_version=v.data_version, tags=v.tags,
            )  # fmt: skip
        return v

    if isinstance(res, tuple):
        return tuple(conv(v) for v in res)
    if isinstance(res, list):
        return [conv(v) for v in res]
    return conv(res)
