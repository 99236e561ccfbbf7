"""Issue 24: a SparkSession the user made runs its Python workers on ``PYSPARK_PYTHON`` (or
``python3`` on the PATH); the capture checks them before doing anything and refuses with a
clear error instead of failing half-way with ``ModuleNotFoundError: pyarrow`` in a job."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from dslog_dagster.errors import SparkUnavailableError
from dslog_dagster.spark import ROW_ID, capture_frames
from dslog_dagster.spark import session as spark_session
from dslog_dagster.spark.query import SparkQueryEngine


@pytest.fixture
def worker_python(spark: Any) -> Iterator[Any]:
    """Set the session's worker interpreter (as PYSPARK_PYTHON would have), then restore it."""
    sc = spark.sparkContext
    before = sc.pythonExec

    def use(exe: str) -> None:
        sc.pythonExec = exe

    yield use
    sc.pythonExec = before


def _frame(spark: Any) -> Any:
    return spark.createDataFrame([(0, 1.0), (1, 2.0)], "id long, v double").withColumn(
        ROW_ID, F.col("id")
    )


def test_workers_without_pyarrow_are_refused_before_any_capture_work(
    spark: Any, worker_python: Any, tmp_path: Path
) -> None:
    system = "/usr/bin/python3"  # Debian's interpreter: no pyarrow, no pyspark
    if not os.path.exists(system):
        system = str(tmp_path / "nopython")
    worker_python(system)
    calls = []

    def step(p: Any) -> Any:
        calls.append(1)
        return p.select("id", (F.col("v") * 2).alias("w"))

    with pytest.raises(SparkUnavailableError, match="PYSPARK_PYTHON=") as info:
        capture_frames(step, [_frame(spark)])
    assert system in str(info.value)
    assert sys.executable in str(info.value)
    assert calls == []  # refused before the step's function ran
    with pytest.raises(SparkUnavailableError, match="workers"):
        SparkQueryEngine(spark, str(tmp_path / "store"))


def test_workers_on_another_path_to_a_capable_python_are_checked_once(
    spark: Any, worker_python: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    worker_python(str(wrapper))
    sc = spark.sparkContext
    first, second = _frame(spark), _frame(spark)  # (createDataFrame parallelizes too)
    jobs = []
    parallelize = sc.parallelize

    def counted(*args: Any, **kwargs: Any) -> Any:
        jobs.append(1)
        return parallelize(*args, **kwargs)

    monkeypatch.setattr(sc, "parallelize", counted)
    cap = capture_frames(lambda p: p.select("id", (F.col("v") * 2).alias("w")), [first])
    assert sorted(r["w"] for r in cap.frame.collect()) == [2.0, 4.0]
    cap.release()
    again = capture_frames(lambda p: p.select("id"), [second])
    again.release()
    assert jobs == [1]  # one check job for this interpreter, then remembered
    assert (str(sc.applicationId), str(wrapper)) in spark_session._WORKERS_OK
    assert spark_session._is_driver_python(sys.executable)
    assert not spark_session._is_driver_python(str(wrapper))
