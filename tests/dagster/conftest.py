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


@pytest.fixture(scope="module")
def materialized(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dg.DagsterInstance, str]]:
    """An instance and a store in which the fixture pipeline ran once (shared per module:
    the tests using it only add query runs, which never change the pipeline's lineage)."""
    from dslog_dagster.resources import DSLogResource
    from tests.dagster.pipeline import PIPELINE

    store = str(tmp_path_factory.mktemp("shared") / "store")
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            PIPELINE, instance=inst, resources={"dslog": DSLogResource(store_dir=store)}
        )
        assert res.success
        yield inst, store
