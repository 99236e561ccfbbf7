"""Retracting an operation whose value was never stored (``with_lineage``'s failed value
write): it and its output version are gone from the files, the catalog and the queries, in
its own segment or packed with others."""

from pathlib import Path

import numpy as np
import pytest

from dslog_dagster.core import LineageRelation, LineageStore, compress
from dslog_dagster.core.store import NewArray
from dslog_dagster.core.store.retraction import retract
from dslog_dagster.errors import LineageNotFoundError


def _store(root: Path) -> tuple[LineageStore, list[object]]:
    store = LineageStore(root, durable=False)
    store.register_array("x", (2, 2))
    idx = np.argwhere(np.ones((2, 2), dtype=bool))
    table = compress(LineageRelation.from_pairs((2, 2), (2, 2), idx, idx))
    ops = [
        store.register_operation(
            "step", ["x"], [NewArray("y", (2, 2), version=f"v{k}")], {("y", "x"): table}
        )
        for k in range(3)
    ]
    store.sync()
    return store, ops


@pytest.mark.parametrize("packed", [False, True])
def test_retracted_operation_and_version_are_gone_everywhere(tmp_path: Path, packed: bool) -> None:
    store, ops = _store(tmp_path / "s")
    if packed:
        store.compact()
    gone = ops[2]
    retract(store, gone.op_id, list(gone.outputs))  # type: ignore[attr-defined]
    for handle in (store, LineageStore(tmp_path / "s")):  # this handle and a fresh one
        assert [o.op_id for o in handle.operations()] == [o.op_id for o in ops[:2]]  # type: ignore[attr-defined]
        assert [a.version for a in handle.arrays() if a.name == "y"] == ["v0", "v1"]
        assert handle.get_array("y").version == "v1"  # the newest version left
        assert (
            handle.sql("SELECT * FROM lineage_tables WHERE op_id = ?", [gone.op_id]).num_rows == 0
        )  # type: ignore[attr-defined]
        with pytest.raises(LineageNotFoundError):
            handle.get_operation(gone.op_id)  # type: ignore[attr-defined]
        # the operations packed with it are intact
        assert handle.read_lineage(ops[0].op_id, "y", "x").n_pairs == 4  # type: ignore[attr-defined]
    assert LineageStore(tmp_path / "s").verify().clean
