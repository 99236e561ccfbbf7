"""Shared fixtures of the Dagster tests: a test instance, a store, the fixture pipeline.

The suite runs with ``--import-mode=importlib``; the fixture pipeline is imported as
``tests.dagster.pipeline`` (repo root on ``sys.path``), like ``tests.annotator.*``.
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")
