"""``with_lineage(inner)`` under failure: the lineage is committed before the inner IO manager
stores the value, so a failed lineage write changes nothing downstream reads, and a failed
value write removes the lineage committed for it (no orphan version a query would follow)."""

import os
import pickle
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogResource, tracked_asset, with_lineage
from dslog_dagster.core.api import Array, DSLog
from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.store import files as files_module
from dslog_dagster.errors import LineageStorageError

ROUND = {"n": 1}
FAIL: set[str] = set()  # assets whose value the inner IO manager refuses to store


@tracked_asset
def a() -> np.ndarray:
    return np.arange(12.0).reshape(4, 3) + 100.0 * ROUND["n"]


@tracked_asset
def b(a: np.ndarray) -> np.ndarray:
    return a[::-1] if ROUND["n"] > 1 else a[:]


@tracked_asset
def c(b: np.ndarray) -> np.ndarray:
    return b * 2.0


class PickleIO(dg.IOManager):
    """A plain IO manager (one pickle file per asset) that can refuse to store."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        name = context.asset_key.path[-1]
        if name in FAIL:
            raise OSError(28, "No space left on device")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(pickle.dumps(obj))

    def load_input(self, context: dg.InputContext) -> Any:
        return pickle.loads((self.root / context.asset_key.path[-1]).read_bytes())


def _values(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def _run(instance: dg.DagsterInstance, io: Any, *only: Any, ok: bool = True) -> Any:
    res = dg.materialize(
        [a, b, c],
        selection=list(only) or None,
        instance=instance,
        resources={"io_manager": io},
        raise_on_error=False,
    )
    assert res.success is ok
    return res


def _setup(tmp_path: Path) -> tuple[Path, Path, Any]:
    values, store = tmp_path / "values", tmp_path / "lineage"
    io = with_lineage(PickleIO(values), DSLogResource(store_dir=str(store)))
    FAIL.clear()
    return values, store, io


def test_failed_lineage_write_leaves_downstream_reading_the_previous_value(
    instance: dg.DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values, store, io = _setup(tmp_path)
    ROUND["n"] = 1
    first = _run(instance, io).run_id
    b_v1 = pickle.loads((values / "b").read_bytes())
    ROUND["n"] = 2
    _run(instance, io, a)
    before = _values(values)

    real_write = files_module.write_synced

    def read_only(path: Path, data: bytes, durable: bool = True) -> None:
        if "/.staging/" in str(path):
            msg = "[Errno 30] Read-only file system"
            raise OSError(msg)
        real_write(path, data, durable)

    monkeypatch.setattr(files_module, "write_synced", read_only)
    failed = _run(instance, io, b, ok=False)
    monkeypatch.setattr(files_module, "write_synced", real_write)
    err = str(failed.get_step_failure_events()[0].step_failure_data.error)
    assert LineageStorageError.__name__ in err
    assert _values(values) == before  # the inner manager was never handed b's new value

    third = _run(instance, io, c)
    c_new = pickle.loads((values / "c").read_bytes())
    np.testing.assert_array_equal(c_new, 2.0 * b_v1)
    log = DSLog(str(store))
    (op,) = [o for o in log.store.operations() if o.outputs[0].version == third.run_id]
    assert [(i.name, i.version) for i in op.inputs] == [("b", first)]


def test_failed_value_write_leaves_no_lineage_a_query_follows(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    values, store, io = _setup(tmp_path)
    ROUND["n"] = 1
    first = _run(instance, io).run_id
    ROUND["n"] = 2
    second_a = _run(instance, io, a).run_id
    before = _values(values)

    FAIL.add("b")  # b's lineage commits, then its value cannot be stored
    failed = _run(instance, io, b, ok=False)
    FAIL.clear()
    err = str(failed.get_step_failure_events()[0].step_failure_data.error)
    assert "No space left on device" in err
    assert _values(values) == before

    # nothing of the failed step is left: no operation, no array version, no catalog row
    fresh = LineageStore(store)
    assert all(failed.run_id not in (o.outputs[0].version or "") for o in fresh.operations())
    assert [r.version for r in fresh.arrays() if r.name == "b"] == [first]
    assert fresh.sql("SELECT * FROM arrays WHERE version = ?", [failed.run_id]).num_rows == 0
    rows = fresh.sql("SELECT * FROM operation_arrays WHERE version = ?", [failed.run_id])
    assert rows.num_rows == 0
    assert not any(failed.run_id in f for f in os.listdir(fresh.layout.array_dir("b")))
    assert fresh.get_array("b").version == first  # the newest version is the stored one

    # a query by name follows b's stored version, whose lineage matches the stored values
    log = DSLog(str(store))
    a_v1 = np.arange(12.0).reshape(4, 3) + 100.0
    found = log.prov_query(["b", Array("a", (4, 3), version=first)], [(1, 2)])
    assert found.to_indices().tolist() == [[1, 2]]  # round 1's b kept the rows in order
    third = _run(instance, io, c)
    c_new = pickle.loads((values / "c").read_bytes())
    np.testing.assert_array_equal(c_new, 2.0 * a_v1)
    assert second_a != first
    (op,) = [o for o in log.store.operations() if o.outputs[0].version == third.run_id]
    assert [(i.name, i.version) for i in op.inputs] == [("b", first)]
