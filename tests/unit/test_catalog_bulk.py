"""The catalog's bulk paths index exactly what its incremental ones do.

A first sync or ``rebuild_catalog`` indexes a whole store at once (Arrow tables, one
statement per table, link records recognised as byte copies of the pack rows read; see
:mod:`~dslog_dagster.core.store.catalog_rows` and :mod:`~dslog_dagster.core.store.link_check`).
Over small random stores (arrays, operations, compactions, retractions) that must give the
rows a catalog synced after every step holds, and on a damaged store the rows and the damage
report of a sync that reads every link record one by one.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, LineageStore, compress
from dslog_dagster.core.store import NewArray, link_check
from dslog_dagster.core.store.catalog_schema import TABLES
from dslog_dagster.core.store.retraction import retract

SOURCES = ("s0", "s1")
OUTPUTS = ("o0", "o1", "o2")

step = st.one_of(
    st.tuples(st.just("array"), st.sampled_from(SOURCES)),
    st.tuples(st.just("op"), st.integers(0, 20), st.sampled_from(OUTPUTS)),
    st.tuples(st.just("compact")),
    st.tuples(st.just("retract"), st.integers(0, 20)),
)


def _table() -> object:
    idx = np.argwhere(np.ones((2, 2), dtype=bool))
    return compress(LineageRelation.from_pairs((2, 2), (2, 2), idx, idx))


def _rows(store: LineageStore) -> dict[str, list[tuple[Any, ...]]]:
    def read(con: Any) -> dict[str, list[tuple[Any, ...]]]:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES}

    return store.catalog.read(read)


def _build(root: Path, steps: list[tuple[Any, ...]], *, sync_each: bool) -> LineageStore:
    """Play ``steps`` on a store at ``root``; its catalog synced after each step when asked."""
    store = LineageStore(root, durable=False)
    table = _table()
    known = [store.register_array("s0", (2, 2), version="v0")]
    ops: list[Any] = []
    for n, s in enumerate(steps):
        if s[0] == "array":
            known.append(store.register_array(s[1], (2, 2), version=f"v{n}"))
        elif s[0] == "op":
            src = known[s[1] % len(known)]
            op = store.register_operation(
                f"step{n % 3}",
                [src],
                [NewArray(s[2], (2, 2), version=f"v{n}")],
                {(s[2], src.name): table},  # type: ignore[dict-item]
                args={"n": n},
            )
            known.append(op.outputs[0])
            ops.append(op)
        elif s[0] == "compact":
            store.compact()
        elif ops:  # retract an operation (as with_lineage does when a value write fails)
            op = ops.pop(s[1] % len(ops))
            retract(store, op.op_id, list(op.outputs))
            known = [k for k in known if k not in op.outputs]
        if sync_each:
            store.sync()
    return store


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=8))
def test_bulk_sync_indexes_what_incremental_syncs_do(steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        incremental = _build(Path(d) / "store", steps, sync_each=True)
        rows = _rows(incremental)
        fresh = LineageStore(Path(d) / "store", durable=False)
        assert fresh.rebuild_catalog() == {}
        assert _rows(fresh) == rows
        os.unlink(fresh.catalog.path)  # a first sync of a store with no catalog
        assert _rows(LineageStore(Path(d) / "store")) == rows


def _damage(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=2, max_size=6),
    which=st.integers(0, 50),
    at=st.integers(0, 10_000),
)
def test_bulk_sync_reports_damage_as_reading_every_link_does(
    steps: list[tuple[Any, ...]], which: int, at: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "store"
        _build(root, [*steps, ("compact",)], sync_each=False)
        files = sorted(p for p in root.rglob("*.parquet")) + sorted(root.rglob("*.json"))
        if files:
            _damage(files[which % len(files)], at)
        bulk = LineageStore(root, durable=False)
        bulk_damage = bulk.rebuild_catalog()
        bulk_rows = _rows(bulk)
        slow = LineageStore(root, durable=False)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(link_check, "recognised", lambda *a, **k: {})
            slow_damage = slow.rebuild_catalog()
            assert _rows(slow) == bulk_rows
        assert slow_damage == bulk_damage
