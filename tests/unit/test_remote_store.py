"""A store on object storage, on fsspec's in-memory file system (no server needed).

Several handles with caches of their own stand for processes on several machines. Whatever
they do in whatever order — register, compact (retiring at once or after a grace period),
sync — every handle then lists exactly the operations registered, each with its lineage as
registered; damaged retirement markers and foreign objects are handled.
"""

import itertools
from pathlib import Path

import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, LineageStore
from dslog_dagster.core.store.object_backends import is_url
from dslog_dagster.core.store.remote import cache_root, marker_bytes, parse_marker
from dslog_dagster.errors import LineageCorruptError

_ids = itertools.count()

ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "compact", "compact-now", "sync"]),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=8,
)


def _register(store: LineageStore, n: int) -> tuple[str, LineageRelation]:
    x = store.register_array("x", (4,))
    y = store.register_array("y", (4,), version=f"v{n}")
    rel = LineageRelation.from_pairs((4,), (4,), [[n % 4]], [[(n + 1) % 4]])
    op = store.register_operation("f", [x], [y], {("y", "x"): rel}, args={"n": n})
    return op.op_id, rel


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(actions=ACTIONS)
def test_any_interleaving_keeps_every_operation_once(tmp_path: Path, actions: list) -> None:
    url = f"memory://prop{next(_ids)}/store"
    caches = tmp_path / url[9:].replace("/", "-")
    stores = [LineageStore(url, cache_dir=caches / str(i)) for i in range(3)]
    fast = {"retire_after_s": 0.0}
    now = LineageStore(url, cache_dir=caches / "c", storage_options=fast)
    written: dict[str, LineageRelation] = {}
    for n, (action, i) in enumerate(actions):
        if action == "write":
            op_id, rel = _register(stores[i], n)
            written[op_id] = rel
        elif action == "compact":
            stores[i].compact()
        elif action == "compact-now":
            now.compact()
        else:
            stores[i].sync()
    for store in [*stores, now]:
        store.sync()
        ops = store.operations("f")
        assert sorted(o.op_id for o in ops) == sorted(written)
        for op in ops:
            assert store.read_lineage(op, "y", "x").decompress() == written[op.op_id]


def test_marker_round_trip_and_damage() -> None:
    data = marker_bytes(["packs/b.parquet"], ["operations/a.parquet"], 12.5)
    assert parse_marker(data) == (["packs/b.parquet"], ["operations/a.parquet"], 12.5)
    with pytest.raises(ValueError, match="checksum"):
        parse_marker(data.replace(b"a.parquet", b"c.parquet"))


def test_a_damaged_marker_is_refused_naming_its_url(tmp_path: Path) -> None:
    url = f"memory://marker{next(_ids)}/s"
    store = LineageStore(url, cache_dir=tmp_path / "a")
    _register(store, 0)
    _register(store, 1)
    result = store.compact()
    assert result.packs
    fs = fsspec.filesystem("memory")
    key = next(k for k in fs.find(url[9:]) if "/retired/" in k)
    fs.pipe_file(key, fs.cat_file(key).replace(b"packs", b"pucks"))
    with pytest.raises(LineageCorruptError, match="damaged") as info:
        LineageStore(url, cache_dir=tmp_path / "b")
    assert info.value.path.startswith(url + "/retired/")


def test_foreign_objects_under_the_prefix_are_left_alone(tmp_path: Path) -> None:
    url = f"memory://foreign{next(_ids)}/s"
    store = LineageStore(url, cache_dir=tmp_path / "a")
    _register(store, 0)
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{url[9:]}/README.txt", b"not lineage")
    fs.pipe_file(f"{url[9:]}/operations/notes.txt", b"not a segment")
    other = LineageStore(url, cache_dir=tmp_path / "b")
    assert len(other.operations()) == 1
    assert not (other.root / "README.txt").exists()


def test_urls_and_caches() -> None:
    assert is_url("s3://b/p")
    assert is_url("memory://b")
    assert not is_url("file:///tmp/x")
    assert not is_url("relative/path")
    assert not is_url(Path("/tmp/x"))
    a, b = cache_root("s3://b/p", "/c"), cache_root("s3://b/q", "/c")
    assert a != b
    assert a.parent == b.parent == Path("/c")
    assert cache_root("s3://b/p/", "/c") == a  # a trailing slash names the same store


def test_file_url_is_a_local_folder(tmp_path: Path) -> None:
    store = LineageStore(f"file://{tmp_path / 'local'}")
    assert store.remote is None
    assert store.root == tmp_path / "local"
    x = store.register_array("x", (2,))
    assert np.array_equal(store.get_array("x").shape, x.shape)
