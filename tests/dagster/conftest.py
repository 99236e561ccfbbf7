"""Fixtures for the in-process Dagster tests: a throwaway instance and array directory."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from dslog_dagster import DSLogIOManager


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def io(tmp_path: Path) -> DSLogIOManager:
    """Arrays under ``tmp_path/data``, lineage in ``tmp_path/data/.dslog``."""
    return DSLogIOManager(base_dir=str(tmp_path / "data"))


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / ".dslog"
