"""Many processes writing to, compacting and reading one lineage store at the same time.

Dagster runs every run in its own process, so the store must take concurrent registrations
without lost or torn lineage, and DuckDB's single-writer lock must never surface as an error.
Compactions (two processes, so one also waits for the other's lock) repack the operations
while they are written and read, with packs small enough that packs get merged again.
"""

import hashlib
import inspect
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dslog_dagster.core import LineageRelation, LineageStore
from dslog_dagster.core.format.segment import Segment

N_WORKERS = 8
N_OPS = 10
N_COMPACTORS = 2
PACK_BYTES = 8192
OUT_SHAPE = (6, 5)
AUX_SHAPE = (4,)


def relation_hash(rel: LineageRelation) -> str:
    """Hash of the canonical (sorted, duplicate-free) pair set; shipped to the workers too."""
    pairs = np.unique(rel.pairs(), axis=0) if rel.n else rel.pairs()
    h = hashlib.sha256(repr((rel.out_shape, rel.in_shape)).encode())
    h.update(np.ascontiguousarray(pairs, dtype=np.int64).tobytes())
    return h.hexdigest()


WORKER = (
    """
import hashlib, json, os, sys, time
from pathlib import Path

import numpy as np

from dslog_dagster.core import LineageRelation, LineageStore

"""
    + inspect.getsource(relation_hash)
    + """
root, worker, n_ops, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
store = LineageStore(root)
rng = np.random.default_rng(1000 + worker)
shared = store.register_array("shared", (6, 5))  # every worker registers the same array
aux = store.register_array(f"worker-{worker}/aux", (4,), asset_key=["aux", str(worker)])
Path(f"{go}.ready-{worker}").touch()
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
op_ids = []
for k in range(n_ops):
    out = store.register_array(f"worker-{worker}/out", (6, 5), version=f"v{k}")
    lineage, hashes = {}, {}
    for arr in (shared, aux):
        n = int(rng.integers(1, 60))
        rel = LineageRelation.from_pairs(
            out.shape, arr.shape,
            rng.integers(0, out.shape, (n, len(out.shape))),
            rng.integers(0, arr.shape, (n, len(arr.shape))),
        )
        lineage[(out.name, arr.name)] = rel
        hashes[arr.name] = relation_hash(rel)
    op = store.register_operation(
        "mix", [shared, aux], [out], lineage,
        args={"worker": worker, "k": k, "hashes": hashes}, capture_method="test",
    )
    op_ids.append(op.op_id)
    if k % 3 == 0:
        assert any(o.op_id == op.op_id for o in store.operations("mix"))
    elif k % 3 == 1:
        store.sync()
    else:
        store.sql("SELECT count(*) FROM lineage_tables")
print(json.dumps(op_ids))
"""
)


COMPACTOR = (
    """
import hashlib, json, sys, time
from pathlib import Path

import numpy as np

from dslog_dagster.core import LineageRelation, LineageStore

"""
    + inspect.getsource(relation_hash)
    + """
root, go, stop, pack_bytes = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
store = LineageStore(root)
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
rng = np.random.default_rng()
stats = {"compactions": 0, "skipped": 0, "packed": 0, "tables_read": 0}
last = False
while not last:
    last = stop.exists()  # one more round after the writers are done
    res = store.compact(pack_bytes=pack_bytes)
    stats["compactions"] += 1
    stats["skipped"] += res.skipped
    stats["packed"] += res.operations
    # every operation listed reads back complete while files move under it
    ops = store.operations()
    for op in [ops[i] for i in rng.permutation(len(ops))[:24]]:
        for t in op.tables:
            rel = store.read_lineage(op, t.output, t.input).decompress()
            assert relation_hash(rel) == op.args["hashes"][t.input], (op.op_id, t)
            stats["tables_read"] += 1
    time.sleep(0.2)  # compaction is periodic work, not a busy loop
print(json.dumps(stats))
"""
)


def _popen(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start_workers(root: Path, go: Path) -> list[subprocess.Popen[str]]:
    return [_popen(WORKER, str(root), str(w), str(N_OPS), str(go)) for w in range(N_WORKERS)]


@pytest.mark.integration
def test_concurrent_registrations_are_complete_and_lock_free(tmp_path: Path) -> None:
    # Import the extension here first: an editable install rebuilds it on import, and eight
    # processes must not race to rebuild it.
    import dslog_dagster._native  # noqa: F401

    root = tmp_path / "store"
    LineageStore(root)
    go = tmp_path / "go"
    stop = tmp_path / "stop"
    procs = _start_workers(root, go)
    compactors = [
        _popen(COMPACTOR, str(root), str(go), str(stop), str(PACK_BYTES))
        for _ in range(N_COMPACTORS)
    ]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready = sum(Path(f"{go}.ready-{w}").exists() for w in range(N_WORKERS))
            if ready == N_WORKERS or any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        go.touch()
        results = [p.communicate(timeout=180) for p in procs]
        stop.touch()
        compacted = [p.communicate(timeout=180) for p in compactors]
    finally:
        for p in procs + compactors:
            if p.poll() is None:
                p.kill()
    everyone = zip(procs + compactors, results + compacted, strict=True)
    for w, (p, (_out, err)) in enumerate(everyone):
        assert p.returncode == 0, f"process {w} failed:\n{err}"
        for bad in ("Traceback", "Error", "lock", "Exception"):
            assert bad not in err, f"process {w} wrote to stderr:\n{err}"
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in compacted]
    assert sum(s["packed"] for s in stats) > 0
    assert all(s["tables_read"] > 0 for s in stats)
    written = [json.loads(out.strip().splitlines()[-1]) for out, _ in results]
    all_ids = sorted(i for ids in written for i in ids)
    assert len(all_ids) == len(set(all_ids)) == N_WORKERS * N_OPS

    store = LineageStore(root)
    ops = store.operations()
    assert [o.op_id for o in ops] == all_ids
    # the last compaction round ran after every write: everything is packed, nothing is lost
    assert list(store.operations_dir.iterdir()) == []
    packed = [op for pack in store.packs_dir.iterdir() for op in Segment(pack).op_ids]
    assert sorted(packed) == all_ids
    assert list(store.staging_dir.iterdir()) == []
    for op in ops:
        assert op.op_id in written[op.args["worker"]]
        assert len(op.tables) == 2
        for t in op.tables:
            rel = store.read_lineage(op, t.output, t.input).decompress()
            assert relation_hash(rel) == op.args["hashes"][t.input], (op.op_id, t)
            assert rel.n == t.n_pairs

    # the catalog agrees with the files
    assert store.sync() is True
    from_files = sorted(
        (t.op_id, t.output, t.input, t.encoding, t.rows, t.n_pairs, t.stored_bytes, t.path)
        for op in ops
        for t in op.tables
    )
    catalog = store.sql(
        "SELECT op_id, output, input, encoding, rows, n_pairs, bytes, path FROM lineage_tables"
    ).to_pylist()
    assert sorted(tuple(r.values()) for r in catalog) == from_files
    counts = store.sql(
        "SELECT (SELECT count(*) FROM operations) AS ops, (SELECT count(*) FROM arrays) AS arrs,"
        " (SELECT count(*) FROM operation_arrays) AS members"
    ).to_pylist()[0]
    assert counts == {
        "ops": N_WORKERS * N_OPS,
        "arrs": 1 + N_WORKERS + N_WORKERS * N_OPS,
        "members": 3 * N_WORKERS * N_OPS,
    }
    assert len(store.operations_between("shared", "worker-3/out")) == N_OPS
    before = [o.op_id for o in store.operations()], store.tables()
    store.catalog.path.unlink()
    store.rebuild_catalog()
    assert ([o.op_id for o in store.operations()], store.tables()) == before


HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("SELECT 1").fetchall()
print("locked", flush=True)
sys.stdin.read()
con.close()
"""


@pytest.mark.integration
def test_catalog_locked_by_another_process_falls_back(tmp_path: Path) -> None:
    store = LineageStore(tmp_path, lock_timeout=0.3, index_timeout=0.1)
    store.register_array("x", (3,))
    store.register_array("y", (3,))
    idx = np.arange(3)
    rel = LineageRelation.from_flat((3,), (3,), idx, idx)
    first = store.register_operation("copy", ["x"], ["y"], {("y", "x"): rel})

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store.catalog.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        second = store.register_operation("copy", ["x"], ["y"], {("y", "x"): rel})
        store.register_array("z", (3,))
        assert store.sync() is False
        assert [o.op_id for o in store.operations()] == [first.op_id, second.op_id]
        assert [a.name for a in store.arrays()] == ["x", "y", "z"]
        n = store.sql("SELECT count(*) AS n FROM lineage_tables").column("n").to_pylist()
        assert n == [2]
        assert store.read_lineage(second, "y", "x").decompress() == rel
    finally:
        holder.communicate("", timeout=30)
    assert holder.returncode == 0
    assert store.sync() is True
    assert [o.op_id for o in store.operations()] == [first.op_id, second.op_id]
