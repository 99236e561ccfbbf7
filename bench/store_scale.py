"""Opening and querying a big store from a fresh process (issue 25: "readers slow down").

Builds a store of ``--ops`` operations (default 100,000) the way a long-lived Dagster
deployment makes one: ``--pipelines`` pipelines of four arrays ``p<k>/a → b → c → d`` (three
small operations each), materialized again and again (a new version of every array per run),
every operation packed by compactions as it goes. The store is generated, never committed:
it is cached under the system's temp folder (``dslog-bench/store_scale-<ops>``) and reused
by the next run.

Then a **fresh subprocess** (nothing cached, as a new Dagster run or ``dslog`` call) times:

* **open** — ``DSLog(root)`` (the store handle and its catalog file);
* **first 3-hop query** — ``prov_query([d, c, b, a], cell)`` of the newest versions of a
  pipeline in the middle of the store;
* **a page of operations()** — ``store.operations(limit=100)`` (records read);
* **rebuild_catalog** — in another fresh process, the catalog re-created from the files
  (the work of the first sync of a store with no catalog), and that process's peak RSS;

against a baseline: a DuckDB file holding the same catalog rows (``operations``,
``operation_arrays``), where open is a ``duckdb.connect``, the 3-hop query three joins that
find the chain's operation ids, and the page a ``SELECT * ... ORDER BY op_id LIMIT 100``.
Also the child's peak RSS.

Goal (issue 25): a fresh process opens a store of 100,000 operations and answers a 3-hop
query in ≤ 1 s; ``operations()`` pages instead of loading everything.

Run: ``.venv/bin/python bench/store_scale.py [--ops N] [--quick]``. ``--quick`` builds a
small store in a temporary folder (a smoke test: it asserts nothing about time).
"""

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import LineageStore, NewArray

GENERATION = "2"
"""Bumped when the generated store changes, so a stale cache is rebuilt."""
CHAIN = ("a", "b", "c", "d")
SIDE = 4
PAGE = 100
COMPACT_EVERY = 25_000
GOAL_S = 1.0


def _table() -> object:
    i, j = np.indices((SIDE, SIDE)).reshape(2, -1)
    rel = LineageRelation.from_columns((SIDE, SIDE), (SIDE, SIDE), [i, j], [j, i])
    return compress(rel)


def build(root: Path, n_ops: int, pipelines: int) -> None:
    """Generate the store at ``root`` (``n_ops`` operations) and its baseline DuckDB file."""
    if root.exists():
        shutil.rmtree(root)
    store = LineageStore(root, durable=False)
    table = _table()
    runs = -(-n_ops // (pipelines * (len(CHAIN) - 1)))
    done = 0
    t0 = time.perf_counter()
    for run in range(runs):
        for p in range(pipelines):
            if done >= n_ops:
                break
            names = [f"p{p}/{c}" for c in CHAIN]
            src = store.register_array(names[0], (SIDE, SIDE), version=f"r{run}")
            for dst in names[1:]:
                if done >= n_ops:
                    break
                # the input as its record (as a tracked step passes it): by name, every
                # registration would look for the newest of the array's versions
                op = store.register_operation(
                    f"step_{dst.rsplit('/', 1)[1]}",
                    [src],
                    [NewArray(dst, (SIDE, SIDE), version=f"r{run}")],
                    {(dst, src.name): table},  # type: ignore[dict-item]
                    capture_method="view",
                )
                src = op.outputs[0]
                done += 1
                if done % COMPACT_EVERY == 0:
                    store.compact()
                    print(f"  {done} operations ({time.perf_counter() - t0:.0f} s)", flush=True)
    store.compact()
    store.sync()
    con = duckdb.connect(str(root.parent / f"{root.name}-baseline.duckdb"))
    try:
        con.execute(f"ATTACH '{root / 'catalog.duckdb'}' AS cat (READ_ONLY)")
        for t in ("operations", "operation_arrays"):
            con.execute(f"CREATE OR REPLACE TABLE {t} AS SELECT * FROM cat.{t}")
        con.execute("DETACH cat")
    finally:
        con.close()
    (root / ".bench-complete").write_text(json.dumps({"ops": n_ops, "gen": GENERATION}))


def child(root: Path, pipelines: int) -> dict[str, float]:
    """The fresh process's timings (seconds) and peak RSS (bytes)."""
    mid = pipelines // 2
    path = [f"p{mid}/{c}" for c in reversed(CHAIN)]
    out: dict[str, float] = {}

    t0 = time.perf_counter()
    log = DSLog(root)
    out["open"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cells = log.prov_query(path, np.s_[1, 2])
    out["query"] = time.perf_counter() - t0
    assert cells.to_indices().tolist() == [[2, 1]], cells.to_indices().tolist()
    t0 = time.perf_counter()
    page = log.store.operations(limit=PAGE)
    out["page"] = time.perf_counter() - t0
    assert len(page) == PAGE or len(page) == len(log.store.operation_ids()), len(page)

    t0 = time.perf_counter()
    con = duckdb.connect(str(root.parent / f"{root.name}-baseline.duckdb"), read_only=True)
    out["base_open"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = con.execute(
        "SELECT o1.op_id, o2.op_id, o3.op_id FROM operation_arrays o1 "
        "JOIN operation_arrays i1 ON i1.op_id = o1.op_id AND i1.role = 'input' "
        "JOIN operation_arrays o2 ON o2.array_id = i1.array_id AND o2.role = 'output' "
        "JOIN operation_arrays i2 ON i2.op_id = o2.op_id AND i2.role = 'input' "
        "JOIN operation_arrays o3 ON o3.array_id = i2.array_id AND o3.role = 'output' "
        "WHERE o1.role = 'output' AND o1.name = ? "
        "ORDER BY o1.op_id DESC LIMIT 1",
        [path[0]],
    ).fetchall()
    out["base_query"] = time.perf_counter() - t0
    assert rows, "baseline found no chain"
    t0 = time.perf_counter()
    con.execute(f"SELECT * FROM operations ORDER BY op_id LIMIT {PAGE}").fetchall()
    out["base_page"] = time.perf_counter() - t0
    con.close()
    out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0
    return out


def rebuild_child(root: Path) -> dict[str, float]:
    """A fresh process's ``rebuild_catalog`` of the store (the work of a first sync: every
    pack and array record indexed in one transaction): seconds and peak RSS (bytes)."""
    t0 = time.perf_counter()
    store = LineageStore(root, durable=False)
    damaged = store.rebuild_catalog()
    out = {"rebuild": time.perf_counter() - t0}
    assert not damaged, damaged
    out["rebuild_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--pipelines", type=int, default=1_000)
    ap.add_argument("--quick", action="store_true", help="a small store in a temp folder")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "dslog-bench")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the goal fails")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--rebuild-child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.pipelines)))
        return
    if args.rebuild_child is not None:
        print(json.dumps(rebuild_child(args.rebuild_child)))
        return
    tmp = tempfile.TemporaryDirectory(prefix="dslog-store-scale-") if args.quick else None
    cache = Path(tmp.name) if tmp is not None else args.cache
    if args.quick:
        args.ops, args.pipelines = 300, 20
    try:
        r = run(cache, args.ops, args.pipelines)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(f"\nfresh process, store of {args.ops} operations ({args.pipelines} pipelines)\n")
    print("| measure | dslog (s) | DuckDB table (s) | ratio |")
    print("|---|---|---|---|")
    for what, key in (
        ("open", "open"),
        ("first 3-hop query", "query"),
        (f"operations(limit={PAGE})", "page"),
    ):
        ours, base = r[key], r[f"base_{key}"]
        print(f"| {what} | {ours:.3f} | {base:.3f} | {ours / base:.1f}x |")
    print(f"| peak RSS (child) | {r['rss'] / 2**20:.0f} MiB | | |")
    print(f"| rebuild_catalog (fresh process) | {r['rebuild']:.1f} | | |")
    print(f"| peak RSS (rebuild) | {r['rebuild_rss'] / 2**20:.0f} MiB | | |")
    total = r["open"] + r["query"]
    ok = total <= GOAL_S
    print("\n| goal | measured | result |\n|---|---|---|")
    verdict = "PASS" if ok else "FAIL"
    print(f"| open + first 3-hop query ≤ {GOAL_S:.0f} s | {total:.3f} s | {verdict} |")
    if args.strict and not ok and not args.quick:
        sys.exit(1)


def run(cache: Path, n_ops: int, pipelines: int) -> dict[str, float]:
    """Build (or reuse) the store under ``cache`` and time it in a fresh subprocess."""
    root = cache / f"store_scale-{n_ops}-{pipelines}"
    marker = root / ".bench-complete"
    want = {"ops": n_ops, "gen": GENERATION}
    if not marker.exists() or json.loads(marker.read_text()) != want:
        print(f"building a store of {n_ops} operations at {root} ...", flush=True)
        t0 = time.perf_counter()
        build(root, n_ops, pipelines)
        print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    result: dict[str, float] = {}
    # the query first (on the catalog the build left), then the rebuild of that catalog
    for flag in ("--child", "--rebuild-child"):
        proc = subprocess.run(
            [sys.executable, __file__, flag, str(root), "--pipelines", str(pipelines)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(proc.stderr[-3000:])
        result |= json.loads(proc.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    main()
