"""Programs the object-store tests run in processes of their own (``python this.py MODE ...``).

Each opens its store from the command line (a folder or a URL; the S3 endpoint and the
credentials come from the environment, the cache folder from ``$DSLOG_CACHE_DIR``), so a
writer, a compactor and a reader never share a handle, a cache or an interpreter.
"""

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from dslog_dagster.core import LineageRelation, LineageStore, NewArray, capture
from dslog_dagster.core.api import DSLog

OPS_PER_WRITER = 5


def emit(value: object) -> None:
    """The program's answer: one JSON line on stdout."""
    sys.stdout.write(json.dumps(value) + "\n")


def relation_hash(rel: LineageRelation) -> str:
    """Hash of the canonical (sorted, duplicate-free) pair set."""
    pairs = np.unique(rel.pairs(), axis=0) if rel.n else rel.pairs()
    h = hashlib.sha256(repr((rel.out_shape, rel.in_shape)).encode())
    h.update(np.ascontiguousarray(pairs, dtype=np.int64).tobytes())
    return h.hexdigest()


def pipeline(root: str) -> None:
    """Capture x -> y = cumsum(x) -> z = y.sum(axis=0) and store it at ``root``."""
    store = LineageStore(root)
    x = np.arange(20.0).reshape(4, 5)
    for name, fn, src, shape in (
        ("y", lambda a: np.cumsum(a, axis=1), "x", (4, 5)),
        ("z", lambda a: a.sum(axis=0), "y", (5,)),
    ):
        r = capture(fn, x)
        store.register_array(src, x.shape)
        out = NewArray(name, shape)  # published with its operation, as a tracked step does
        store.register_operation(f"make_{name}", [src], [out], {(name, src): r.relation(0, 0)})
        x = np.asarray(r.outputs[0])


def answers(root: str) -> dict[str, object]:
    """Every query the comparison needs, as JSON-able values."""
    log = DSLog(root)
    out: dict[str, object] = {}
    for k in range(5):
        out[f"z{k}->x"] = log.prov_query(["z", "y", "x"], np.s_[k]).to_indices().tolist()
    for i in range(4):
        out[f"x{i},2->z"] = log.prov_query(["x", "y", "z"], np.s_[i, 2]).to_indices().tolist()
    ops = log.store.operations()
    out["ops"] = sorted(o.op_name for o in ops)
    out["arrays"] = sorted(a.name for a in log.store.arrays())
    return out


def writes(store: LineageStore, worker: int) -> list[tuple[str, str]]:
    """Worker ``worker``'s registrations (the same on any store): ``(op id, table hash)``."""
    rng = np.random.default_rng(1000 + worker)
    shared = store.register_array("shared", (6, 5))  # every writer registers it
    done = []
    for k in range(OPS_PER_WRITER):
        n = int(rng.integers(1, 60))
        rel = LineageRelation.from_pairs(
            (6, 5), (6, 5), rng.integers(0, (6, 5), (n, 2)), rng.integers(0, (6, 5), (n, 2))
        )
        out = NewArray(f"w{worker}/out", (6, 5), version=f"v{k}")
        op = store.register_operation(
            "mix",
            [shared],
            [out],
            {(out.name, "shared"): rel},
            args={"worker": worker, "k": k, "hash": relation_hash(rel)},
        )
        done.append((op.op_id, relation_hash(rel)))
    return done


def writer(root: str, worker: int, go: str) -> None:
    """Register OPS_PER_WRITER operations once ``go`` exists; print their ids."""
    store = LineageStore(root)
    store.register_array("shared", (6, 5))  # every writer registers it
    Path(f"{go}.ready-{worker}").touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    ids = [op_id for op_id, _ in writes(store, worker)]
    emit(ids)


def checked_ops(store: LineageStore) -> dict[str, tuple[int, int, str]]:
    """op id -> (worker, k, hash) for every operation, each table checked against its hash.

    Raises:
        AssertionError: a table differs from what its writer registered.
    """
    out = {}
    for op in store.operations("mix"):
        table = store.read_lineage(op, op.outputs[0].name, "shared")
        got = relation_hash(table.decompress())
        assert got == op.args["hash"], (op.op_id, got, op.args)
        out[op.op_id] = (int(op.args["worker"]), int(op.args["k"]), str(op.args["hash"]))
    return out


def compactor(root: str, stop: str) -> None:
    """Compact (retiring at once) until ``stop`` exists; print how many packs were made."""
    store = LineageStore(root, storage_options={"retire_after_s": 0.0})
    packs = 0
    deadline = time.monotonic() + 60
    while not Path(stop).exists() and time.monotonic() < deadline:
        packs += len(store.compact(pack_bytes=8192).packs)
        time.sleep(0.05)
    packs += len(store.compact(pack_bytes=8192).packs)
    emit(packs)


def reader(root: str, stop: str) -> None:
    """Sync and check every operation until ``stop`` exists; print the last answer."""
    store = LineageStore(root)
    seen: dict[str, tuple[int, int, str]] = {}
    rounds = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = Path(stop).exists()
        store.sync()
        now = checked_ops(store)
        assert set(seen) <= set(now), set(seen) - set(now)  # nothing seen is lost
        seen = now
        rounds += 1
        if done:
            break
        time.sleep(0.05)
    emit({"rounds": rounds, "ops": sorted(seen.values())})


if __name__ == "__main__":
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "pipeline":
        pipeline(root)
    elif mode == "answers":
        emit(answers(root))
    elif mode == "writer":
        writer(root, int(sys.argv[3]), sys.argv[4])
    elif mode == "compactor":
        compactor(root, sys.argv[3])
    elif mode == "reader":
        reader(root, sys.argv[3])
    else:
        msg = f"unknown mode {mode}"
        raise SystemExit(msg)
