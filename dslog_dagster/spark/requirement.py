"""Refuse to load Spark support without PySpark, naming the extra that installs it.

Imported first by :mod:`dslog_dagster.spark` (every Spark module is under it), so a NumPy-only
install that reaches a Spark feature gets a :class:`~dslog_dagster.errors.MissingExtraError`
saying ``pip install 'dslog-dagster[spark]'`` rather than a ``ModuleNotFoundError``.
"""

from dslog_dagster.extras import require

require("pyspark.sql", "Spark support (dslog_dagster.spark: Spark steps, frames, queries)")
