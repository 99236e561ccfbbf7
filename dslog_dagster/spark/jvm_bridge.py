"""The one place dslog reaches into PySpark's private handles on JVM objects.

The capture reads analyzed plans (:mod:`dslog_dagster.spark.plan`), unpersists the RDD of a
local checkpoint (:mod:`dslog_dagster.spark.rowid`) and registers the id tap's function
(:mod:`dslog_dagster.spark.idtap`); PySpark offers none of these through its public API, only
through the py4j handles it keeps in private attributes (``_jdf``, ``_jsparkSession``,
``_jvm``). Each is read by one function here, so a PySpark release that renames one breaks
this module alone (``pyproject.toml`` exempts it from ruff's SLF001 for that reason).
"""

from typing import Any

from pyspark.sql import DataFrame, SparkSession

__all__ = ["java_frame", "java_session", "jvm_view"]


def java_frame(df: DataFrame) -> Any:
    """The JVM ``Dataset`` behind ``df`` (PySpark's ``DataFrame._jdf``)."""
    return df._jdf


def java_session(spark: SparkSession) -> Any:
    """The JVM ``SparkSession`` behind ``spark`` (PySpark's ``SparkSession._jsparkSession``)."""
    return spark._jsparkSession


def jvm_view(spark: SparkSession) -> Any:
    """The py4j view of the driver JVM's classes (PySpark's ``SparkSession._jvm``)."""
    return spark._jvm
