"""Shared fixtures of the Dagster tests: a test instance, an array directory and its store,
and the fixture pipeline of the query tests.

The suite runs with ``--import-mode=importlib``; the fixture pipeline is imported as
``tests.dagster.pipeline`` (repo root on ``sys.path``), like ``tests.annotator.*``.
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from dslog_dagster import DSLogIOManager

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def io(tmp_path: Path) -> DSLogIOManager:
    """Arrays under ``tmp_path/data``, lineage in ``tmp_path/data/.dslog`` (its resource's
    ``store_dir``: a test's instance storage ends with the test)."""
    return DSLogIOManager(
        base_dir=str(tmp_path / "data"), store_dir=str(tmp_path / "data" / ".dslog")
    )


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    """The store of :func:`io` (``tmp_path/data/.dslog``)."""
    return str(tmp_path / "data" / ".dslog")


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
