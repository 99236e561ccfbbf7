"""One SparkSession for the whole Spark suite (starting the JVM costs ~8 s).

Every test under ``tests/spark`` gets the ``spark`` marker. Without Java the fixture fails
with :class:`~dslog_dagster.errors.SparkUnavailableError` saying what to install (CI installs
Java 17, so these tests never skip).
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from dslog_dagster.spark.session import FAST_START_JAVA_OPTIONS, get_session

    session = get_session(
        "local[2]",
        # short jobs on small data: the JIT's first tier only (see FAST_START_JAVA_OPTIONS)
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTIONS,
        },
        "dslog-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
