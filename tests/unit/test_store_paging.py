"""Paged listings of the store (``operations(limit=, after=)``, ``iter_operations``) and the
catalog's incremental sync that keeps them cheap on a big store."""

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, LineageStore, compress
from dslog_dagster.core.store import NewArray
from dslog_dagster.core.store.array_dirs import SETTLE_NS
from dslog_dagster.errors import QueryError

N_OPS = 23


def _table() -> object:
    idx = np.argwhere(np.ones((2, 2), dtype=bool))
    return compress(LineageRelation.from_pairs((2, 2), (2, 2), idx, idx))


def _register(store: LineageStore, k: int, table: object, name: str = "step") -> str:
    return store.register_operation(
        name,
        ["x"],
        [NewArray("y", (2, 2), version=f"v{k}")],
        {("y", "x"): table},  # type: ignore[dict-item]
    ).op_id


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A store of ``N_OPS`` operations (two names), half of them packed."""
    root = tmp_path_factory.mktemp("paging") / "store"
    store = LineageStore(root, durable=False)
    store.register_array("x", (2, 2))
    table = _table()
    ids = [_register(store, k, table, "even" if k % 2 == 0 else "odd") for k in range(N_OPS // 2)]
    store.compact()
    ids += [
        _register(store, k, table, "even" if k % 2 == 0 else "odd")
        for k in range(N_OPS // 2, N_OPS)
    ]
    return root, ids


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(page_size=st.integers(1, N_OPS + 2), op_name=st.sampled_from([None, "even", "odd"]))
def test_pages_list_every_operation_once_in_order(
    populated: tuple[Path, list[str]], page_size: int, op_name: str | None
) -> None:
    root, ids = populated
    store = LineageStore(root)  # a fresh handle, as another process
    everything = store.operations(op_name)
    expected = sorted(op.op_id for op in everything)
    assert [op.op_id for op in everything] == expected
    if op_name is None:
        assert expected == sorted(ids)
    # by hand, with after=
    got: list[str] = []
    after = None
    while True:
        page = store.operations(op_name, limit=page_size, after=after)
        assert len(page) <= page_size
        got += [op.op_id for op in page]
        if len(page) < page_size:
            break
        after = page[-1].op_id
    assert got == expected
    # the iterator, on another fresh handle
    it = [op.op_id for op in LineageStore(root).iter_operations(op_name, page_size=page_size)]
    assert it == expected
    assert all(op.op_name == op_name for op in everything if op_name is not None)


def test_pages_are_exact_while_a_writer_adds_operations(tmp_path: Path) -> None:
    root = tmp_path / "store"
    writer = LineageStore(root, durable=False)
    writer.register_array("x", (2, 2))
    table = _table()
    before = [_register(writer, k, table) for k in range(30)]
    writer.compact()
    stop = threading.Event()
    added: list[str] = []

    def write() -> None:
        k = 30
        other = LineageStore(root, durable=False)
        while not stop.is_set() and k < 200:
            added.append(_register(other, k, table))
            if k % 25 == 0:
                other.compact()  # packs move operations between files under the reader
            k += 1

    t = threading.Thread(target=write)
    t.start()
    try:
        reader = LineageStore(root)
        seen = [op.op_id for op in reader.iter_operations(page_size=4)]
    finally:
        stop.set()
        t.join()
    assert len(seen) == len(set(seen)), "an operation was listed twice"
    assert seen == sorted(seen), "pages are not in op id order"
    assert set(before) <= set(seen), "an operation on disk when the listing began was skipped"
    assert set(seen) <= set(before) | set(added)
    # once the writer stopped, a listing has every operation exactly once
    final = [op.op_id for op in LineageStore(root).iter_operations(page_size=7)]
    assert final == sorted(set(before) | set(added))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": 0}, "positive integer"),
        ({"limit": -3}, "positive integer"),
        ({"limit": True}, "positive integer"),
        ({"limit": 2.5}, "positive integer"),
        ({"after": "nonsense"}, "not an operation id"),
        ({"after": 5}, "not an operation id"),
    ],
)
def test_bad_page_arguments_are_refused(
    populated: tuple[Path, list[str]], kwargs: dict[str, object], match: str
) -> None:
    store = LineageStore(populated[0])
    with pytest.raises(QueryError, match=match):
        store.operations(**kwargs)  # type: ignore[arg-type]


def test_iter_operations_refuses_a_bad_page_size(populated: tuple[Path, list[str]]) -> None:
    with pytest.raises(QueryError, match="page_size"):
        list(LineageStore(populated[0]).iter_operations(page_size=0))


def test_a_sync_lists_only_changed_array_directories(tmp_path: Path) -> None:
    """Array records another handle adds show up, also in a directory whose time the
    catalog noted; a directory is noted only once its time settled."""
    root = tmp_path / "store"
    a = LineageStore(root)
    b = LineageStore(root)
    for k in range(3):
        a.register_array(f"arr{k}", (2,), version="v0")
    d = root / "arrays"
    old = (os.stat(d).st_mtime_ns - 10 * SETTLE_NS) // 10**9
    for sub in d.iterdir():
        os.utime(sub, (old, old))  # settled: the next sync notes their times
    assert {r.name for r in b.arrays()} == {"arr0", "arr1", "arr2"}
    noted = b.catalog.read(lambda con: con.execute("SELECT count(*) FROM array_dirs").fetchone())
    assert noted == (3,)
    a.register_array("arr1", (2,), version="v1")  # changes arr1's directory time
    a.register_array("arr3", (2,), version="v0")  # a new directory
    got = sorted((r.name, r.version) for r in b.arrays())
    assert got == [("arr0", "v0"), ("arr1", "v0"), ("arr1", "v1"), ("arr2", "v0"), ("arr3", "v0")]
    # the directories changed just now are not noted (their times have not settled)
    rows = b.catalog.read(lambda con: con.execute("SELECT dir FROM array_dirs").fetchall())
    assert len(rows) == 2
