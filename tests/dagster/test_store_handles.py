"""The process-wide store, session and reuse-registry handles follow the directory on disk: a
store deleted and made again at the same path is a new store, not the cached old one."""

import shutil
from pathlib import Path

import pytest

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.errors import LineageNotFoundError
from dslog_dagster.resources import DSLogResource, open_store


def _register(root: Path) -> None:
    log = DSLog(open_store(root))
    x, y = Array("x", (3,)), Array("y", (3,))
    log.register_operation("neg", [x], [y], [Lineage(y, x, [(i, i) for i in range(3)])])


def test_a_recreated_store_directory_gets_new_handles(tmp_path: Path) -> None:
    root = tmp_path / "store"
    res = DSLogResource(store_dir=str(root))
    _register(root)
    store, registry, session = res.store(), res.registry(), res.session()
    assert res.store() is store  # cached while the directory exists
    assert res.registry() is registry
    assert {a.name for a in store.arrays()} == {"x", "y"}
    shutil.rmtree(root)
    root.mkdir()  # made again before anyone asks: same path, another directory
    fresh = res.store()
    assert fresh is not store
    assert fresh.arrays() == []  # the old handle would list the deleted arrays
    with pytest.raises(LineageNotFoundError):
        fresh.get_array("y")
    assert res.registry() is not registry
    assert res.session() is not session
    assert res.session().store is fresh


def test_a_deleted_store_directory_is_made_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = open_store(root)
    shutil.rmtree(root)
    second = open_store(root)
    assert second is not first
    assert root.is_dir()
    _register(root)  # writes go to the new directory
    assert {a.name for a in open_store(root).arrays()} == {"x", "y"}
