"""Scale by simulation (issue 30): a store of 10^6 operations, and a capture on a cluster.

**Store.** A synthetic store built the way a long-lived deployment makes one, at 10^4, 10^5
and 10^6 operations (``--ops``): ``pipelines = ops / 200`` pipelines, each materialized ten
times (a new version of every array per run). A run of pipeline ``p`` is a **chain**
``p<k>/a0 -> a1 -> ... -> a10`` (ten elementwise steps over 1000×1000 arrays) and a **fan**
of ten column sums ``p<k>/f0 ... f9`` that all read ``a10``: 20 operations, each with
10^6 raw (output cell, input cell) pairs, so the 10^6-operation store stands for about 10^12
raw pairs (each stored as one compressed ProvRC row). Compactions pack the operations as
they come. The store is generated, never committed: it is cached under the system's temp
folder (``dslog-bench/scale-<ops>``) and reused by the next run (building 10^6 operations
takes about an hour on a small machine; ``--build-only`` builds and exits).

Each store is then measured in **fresh processes** (nothing cached, as a new Dagster run or
``dslog`` call):

* **open** — ``DSLog(root)`` (the handle and its catalog);
* **list** — a page of ``operations(limit=100)``;
* **10-hop native** — ``prov_query([f0, a10, a9, ..., a1], cell)`` of the newest versions of
  a pipeline in the middle of the store (the first query of the process);
* **10-hop Spark** — the same query on :class:`~dslog_dagster.spark.query.SparkQueryEngine`
  (``--store-master``, ``local[2]`` by default; the session's start is not counted, the
  first query is); its answer must equal the native one.

**Capture.** A join + groupBy (facts ``rows`` × a dimension table of ``rows / 10`` keys,
sum per key) at 10^6, 10^7, 10^8 rows (``--rows``) on a Spark master (``--capture-master``:
a standalone cluster's ``spark://`` URL, or ``cluster`` to start a master and two workers on
127.0.0.1 here, as the tests do; ``local[2]`` otherwise): ``capture_frames`` + writing the
output with row ids, vs the same PySpark function writing its output. The inputs are
generated on the executors and stored as Parquet first (once per size, cached), so both read
scans. On a cluster started here the capture has ``spark.dslog.sharedDir`` (``--shared-dir``,
a folder under the cache: the cluster runs on this host), so it stages its output and taps
ids as in local mode; ``--shared-dir none`` measures a cluster without a shared folder.

The table gives every figure per size, the growth ratio per 10× (the slope), the peak RSS of
each measuring process, the 1-minute load average during each run (the machine may be
shared), and PASS/FAIL against the goals: 10-hop ≤ 1 s native and ≤ 10 s on Spark at 10^6
operations, open ≤ 1 s, capture ≤ 1.5× untracked at the largest row count.

Run: ``.venv/bin/python bench/scale.py [--ops 10000 100000 1000000] [--rows 1000000 ...]
[--capture-master cluster]``. ``--quick`` is a smoke test (tiny stores in a temporary
folder, 5000 rows on ``local[2]``; it asserts nothing about time).
"""

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.store import LineageStore, NewArray

GENERATION = "1"
"""Bumped when the generated store changes, so a stale cache is rebuilt."""
SIDE = 1000
CHAIN = 10
FAN = 10
RUNS = 10
OPS_PER_RUN = CHAIN + FAN
PAGE = 100
COMPACT_EVERY = 25_000
GOALS = {"open": 1.0, "native": 1.0, "spark": 10.0, "capture": 1.5}


def pipelines_for(n_ops: int) -> int:
    """Pipelines of a store of ``n_ops`` operations (each materialized :data:`RUNS` times)."""
    return max(1, n_ops // (OPS_PER_RUN * RUNS))


def _tables(side: int) -> tuple[Any, Any]:
    """The chain's elementwise table and the fan's column-sum table (side² pairs each)."""
    i, j = np.indices((side, side)).reshape(2, -1)
    shape = (side, side)
    ew = compress(LineageRelation.from_columns(shape, shape, [i, j], [i, j]))
    col = compress(LineageRelation.from_columns((side,), shape, [j], [i, j]))
    return ew, col


def build(root: Path, n_ops: int, side: int = SIDE) -> None:
    """Generate the store at ``root``: ``n_ops`` operations in chains and fans."""
    if root.exists():
        shutil.rmtree(root)
    store = LineageStore(root, durable=False)
    ew, col = _tables(side)
    shape = (side, side)
    pipelines = pipelines_for(n_ops)
    done = 0
    t0 = time.perf_counter()
    for run in range(-(-n_ops // (pipelines * OPS_PER_RUN))):
        version = f"r{run}"
        for p in range(pipelines):
            if done >= n_ops:
                break
            src = store.register_array(f"p{p}/a0", shape, version=version)
            steps = [(f"p{p}/a{k}", shape, ew, True) for k in range(1, CHAIN + 1)]
            steps += [(f"p{p}/f{k}", (side,), col, False) for k in range(FAN)]
            for name, out_shape, table, chained in steps:
                if done >= n_ops:
                    break
                op = store.register_operation(
                    f"step_{name.rsplit('/', 1)[1]}",
                    [src],
                    [NewArray(name, out_shape, version=version)],
                    {(name, src.name): table},
                    capture_method="view",
                )
                if chained:
                    src = op.outputs[0]
                done += 1
                if done % COMPACT_EVERY == 0:
                    store.compact()
                    print(f"  {done} operations ({time.perf_counter() - t0:.0f} s)", flush=True)
    store.compact()
    store.sync()
    store.close()
    (root / ".bench-complete").write_text(json.dumps({"ops": n_ops, "gen": GENERATION}))


def store_root(cache: Path, n_ops: int) -> Path:
    """The cached store of ``n_ops`` operations, built when missing or stale."""
    root = cache / f"scale-{n_ops}"
    marker = root / ".bench-complete"
    want = {"ops": n_ops, "gen": GENERATION}
    if not marker.exists() or json.loads(marker.read_text()) != want:
        print(f"building a store of {n_ops} operations at {root} ...", flush=True)
        t0 = time.perf_counter()
        build(root, n_ops)
        print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    return root


def query_path(n_ops: int) -> list[str]:
    """The 10-hop path of the pipeline in the middle of the store: ``f0`` back to ``a1``."""
    p = f"p{pipelines_for(n_ops) // 2}"
    return [f"{p}/f0", *(f"{p}/a{k}" for k in range(CHAIN, 0, -1))]


def _reset_peak() -> None:
    """Forget the peak RSS this process inherited: on Linux ``ru_maxrss`` keeps the parent's
    high-water mark across ``fork`` + ``exec`` (a child of the process that built a store would
    report the builder's peak); ``/proc/self/clear_refs`` resets ``VmHWM``, which
    :func:`_rss` reads."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _rss() -> float:
    """This process's peak RSS in bytes (``VmHWM`` where /proc has it, else ``ru_maxrss``)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def store_child(root: Path, n_ops: int) -> dict[str, Any]:
    """A fresh process's open, list page and first 10-hop native query."""
    from dslog_dagster.core.api import DSLog

    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    log = DSLog(root)
    out["open"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    page = log.store.operations(limit=PAGE)
    out["list"] = time.perf_counter() - t0
    assert len(page) == min(PAGE, n_ops), len(page)
    t0 = time.perf_counter()
    cells = log.prov_query(query_path(n_ops), np.s_[7])
    out["native"] = time.perf_counter() - t0
    out["answer"] = sorted(map(list, cells.to_indices().tolist()))
    out["rss"] = _rss()
    return out


def spark_child(root: Path, n_ops: int, master: str) -> dict[str, Any]:
    """A fresh process's first 10-hop query on the Spark engine (session start not counted)."""
    from dslog_dagster.core.api import DSLog
    from dslog_dagster.spark import get_session
    from dslog_dagster.spark.query import SparkQueryEngine

    spark = get_session(master)
    spark.range(1).count()  # the session up (not counted)
    t0 = time.perf_counter()
    engine = SparkQueryEngine(spark, DSLog(root))
    cells = engine.prov_query(query_path(n_ops), np.s_[7])
    out: dict[str, Any] = {"spark": time.perf_counter() - t0}
    out["answer"] = sorted(map(list, cells.to_indices().tolist()))
    out["rss"] = _rss()
    return out


def _load() -> float:
    return os.getloadavg()[0]


def _child(args: list[str]) -> dict[str, Any]:
    """Run this script with ``args`` in a fresh process; its JSON answer plus the load."""
    load0 = _load()
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["load"] = max(load0, _load())
    return out


def pipeline(facts: Any, dims: Any) -> Any:
    """The captured job: join the facts to their key's weight, sum ``val * weight`` per key."""
    from pyspark.sql import functions as F

    j = facts.join(dims, "key")
    return j.groupBy("key").agg(F.sum(F.col("val") * F.col("weight")).alias("total"))


def capture_inputs(spark: Any, rows: int, folder: Path) -> tuple[Any, Any]:
    """Facts (``rows``, ten per key) and dims (``rows / 10`` keys) with their row ids, stored
    as Parquet under ``folder`` on first use (generated on the executors) and read back."""
    from pyspark.sql import functions as F

    from dslog_dagster.spark import ROW_ID

    marker = folder / ".complete"
    if not marker.exists():
        f = spark.range(0, rows, 1, max(2, rows // 2_000_000)).select(
            F.col("id"),
            (F.col("id") % max(1, rows // 10)).alias("key"),
            (F.abs(F.hash("id")) % 1000 / 1000.0).alias("val"),
        )
        f.withColumn(ROW_ID, F.col("id")).write.mode("overwrite").parquet(str(folder / "facts"))
        d = spark.range(max(1, rows // 10)).select(
            F.col("id").alias("key"), (F.col("id") % 7 + 0.5).alias("weight")
        )
        d.withColumn(ROW_ID, F.col("key")).write.mode("overwrite").parquet(str(folder / "dims"))
        marker.write_text(str(rows))
    return spark.read.parquet(str(folder / "facts")), spark.read.parquet(str(folder / "dims"))


def capture_run(spark: Any, rows: int, cache: Path, reps: int) -> dict[str, Any]:
    """Tracked vs untracked times (best of ``reps``, alternating) of :func:`pipeline` at
    ``rows`` fact rows on ``spark``'s master."""
    from dslog_dagster.io_managers.spark_frames import write_frame
    from dslog_dagster.spark import ROW_ID, capture_frames

    folder = cache / f"scale-rows-{rows}"
    facts, dims = capture_inputs(spark, rows, folder)
    sizes = {"facts": rows, "dims": max(1, rows // 10)}
    plain_f, plain_d = facts.drop(ROW_ID), dims.drop(ROW_ID)
    untracked = tracked = float("inf")
    groups = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        pipeline(plain_f, plain_d).write.mode("overwrite").parquet(str(folder / "plain"))
        untracked = min(untracked, time.perf_counter() - t0)
        t0 = time.perf_counter()
        cap = capture_frames(pipeline, {"facts": facts, "dims": dims}, input_rows=sizes)
        write_frame(cap, folder / "tracked")
        tracked = min(tracked, time.perf_counter() - t0)
        groups = cap.n_rows
        cap.release()
    if groups != sizes["dims"]:
        msg = f"the capture's output has {groups} groups, not {sizes['dims']}"
        raise AssertionError(msg)
    return {"untracked": untracked, "tracked": tracked}


def capture_child(
    master: str,
    rows: int,
    cache: Path,
    reps: int,
    shared_dir: str | None = None,
    executor_memory: str | None = None,
) -> dict[str, Any]:
    """A fresh driver process's :func:`capture_run` (peak RSS is the driver's), with
    ``spark.dslog.sharedDir`` set to ``shared_dir`` and ``spark.executor.memory`` to
    ``executor_memory`` when given."""
    from dslog_dagster.spark import get_session

    conf = {"spark.dslog.sharedDir": shared_dir} if shared_dir else {}
    if executor_memory:
        conf["spark.executor.memory"] = executor_memory
    spark = get_session(master, conf or None)
    out = capture_run(spark, rows, cache, reps)
    out["rss"] = _rss()
    out["executor_memory"] = spark.conf.get("spark.executor.memory", "1g (default)")
    return out


def _slope(values: list[float], sizes: list[int]) -> str:
    """Growth per 10× of size, from the smallest to the largest size measured."""
    if len(values) < 2 or values[0] <= 0:
        return "-"
    decades = np.log10(sizes[-1] / sizes[0])
    return f"{(values[-1] / values[0]) ** (1 / decades):.2f}x"


def _fmt_size(n: int) -> str:
    e = len(str(n)) - 1
    return f"10^{e}" if 10**e == n else f"{n:,}"


def _print_store(rows: dict[int, dict[str, Any]]) -> None:
    sizes = sorted(rows)
    print("\nstore (fresh processes; seconds)\n")
    print("| measure | " + " | ".join(f"{_fmt_size(n)} ops" for n in sizes) + " | per 10× |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for what, key in (
        ("open", "open"),
        ("list (operations, limit 100)", "list"),
        ("10-hop query, native", "native"),
        ("10-hop query, Spark engine", "spark"),
    ):
        vals = [rows[n][key] for n in sizes]
        cells = " | ".join(f"{v:.3f}" for v in vals)
        print(f"| {what} | {cells} | {_slope(vals, sizes)} |")
    for what, key in (("peak RSS, native child", "rss"), ("peak RSS, Spark child", "spark_rss")):
        cells = " | ".join(f"{rows[n][key] / 2**20:.0f} MiB" for n in sizes)
        print(f"| {what} | {cells} | |")
    print("| load (1 min) | " + " | ".join(f"{rows[n]['load']:.1f}" for n in sizes) + " | |")


def _print_capture(rows: dict[int, dict[str, Any]], master: str) -> None:
    sizes = sorted(rows)
    memory = sorted({str(r.get("executor_memory", "-")) for r in rows.values()})
    print(
        f"\ncapture, join + groupBy on `{master}` (seconds, best of runs; "
        f"spark.executor.memory {', '.join(memory)})\n"
    )
    print("| rows | untracked | tracked | tracked / untracked | driver RSS | load |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        r = rows[n]
        print(
            f"| {_fmt_size(n)} | {r['untracked']:.2f} | {r['tracked']:.2f} | "
            f"{r['tracked'] / r['untracked']:.2f}x | {r['rss'] / 2**20:.0f} MiB | "
            f"{r['load']:.1f} |"
        )
    for key in ("untracked", "tracked"):
        print(f"| {key} per 10× rows | {_slope([rows[n][key] for n in sizes], sizes)} | | | | |")


def _goals(store: dict[int, dict[str, Any]], capture: dict[int, dict[str, Any]]) -> bool:
    print("\n| goal | measured | result |\n|---|---|---|")
    ok = True

    def line(goal: str, size: int | None, value: float | None, limit: float, unit: str) -> None:
        nonlocal ok
        if size is None or value is None:
            print(f"| {goal} | not measured | FAIL |")
            ok = False
            return
        passed = value <= limit
        ok &= passed
        print(
            f"| {goal} | {value:.3f}{unit} at {_fmt_size(size)} | {'PASS' if passed else 'FAIL'} |"
        )

    top = max(store) if store else None
    get = (lambda k: store[top][k]) if top is not None else (lambda k: None)
    line(
        f"10-hop native ≤ {GOALS['native']:.0f} s (at 10^6 ops)",
        top,
        get("native"),
        GOALS["native"],
        " s",
    )
    line(
        f"10-hop Spark ≤ {GOALS['spark']:.0f} s (at 10^6 ops)",
        top,
        get("spark"),
        GOALS["spark"],
        " s",
    )
    line(f"open ≤ {GOALS['open']:.0f} s (at 10^6 ops)", top, get("open"), GOALS["open"], " s")
    big = max(capture) if capture else None
    ratio = capture[big]["tracked"] / capture[big]["untracked"] if big is not None else None
    line(
        f"capture ≤ {GOALS['capture']}× untracked (at 10^8 rows)", big, ratio, GOALS["capture"], "×"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--rows", type=int, nargs="*", default=[1_000_000, 10_000_000, 100_000_000])
    ap.add_argument("--store-master", default="local[2]", help="master of the Spark engine")
    ap.add_argument(
        "--capture-master",
        default="cluster",
        help="master of the capture: spark://..., local[N], or `cluster` (start one here)",
    )
    ap.add_argument("--worker-memory", default="2g", help="per worker, with `cluster`")
    ap.add_argument(
        "--executor-memory",
        default="worker",
        help=(
            "spark.executor.memory of the capture's session (both runs): `worker` is "
            "--worker-memory with `cluster` (one executor per worker takes it all), Spark's "
            "default (1g) otherwise; `default` leaves Spark's"
        ),
    )
    ap.add_argument("--reps", type=int, default=1, help="capture runs per size (best kept)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "dslog-bench")
    ap.add_argument("--build-only", action="store_true", help="build the stores and exit")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny sizes, in-process")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal fails")
    ap.add_argument(
        "--shared-dir",
        default="auto",
        help=(
            "spark.dslog.sharedDir of the capture (a folder the executors share with the "
            "driver): `auto` is a folder under --cache with `cluster` (one host), none "
            "otherwise; `none` captures without it (no staging, ids by a join)"
        ),
    )
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        _reset_peak()
        kind, a, b = args.child
        if kind == "store":
            out = store_child(Path(a), int(b))
        elif kind == "spark":
            out = spark_child(Path(a), int(b), args.store_master)
        else:
            shared = None if args.shared_dir in ("auto", "none") else args.shared_dir
            memory = None if args.executor_memory in ("worker", "default") else args.executor_memory
            out = capture_child(a, int(b), args.cache, args.reps, shared, memory)
        print(json.dumps(out))
        return 0
    if args.build_only:
        for n in args.ops:
            store_root(args.cache, n)
        return 0
    if args.quick:
        return quick(args.cache)
    store: dict[int, dict[str, Any]] = {}
    for n in args.ops:
        root = store_root(args.cache, n)
        r = _child(["--child", "store", str(root), str(n)])
        s = _child(["--store-master", args.store_master, "--child", "spark", str(root), str(n)])
        if s["answer"] != r["answer"]:
            sys.exit(f"the Spark engine's answer differs from the native one at {n} operations")
        store[n] = {
            **r,
            "spark": s["spark"],
            "spark_rss": s["rss"],
            "load": max(r["load"], s["load"]),
        }
        print(
            f"  {n} operations: {json.dumps({k: v for k, v in store[n].items() if k != 'answer'})}",
            flush=True,
        )
    capture: dict[int, dict[str, Any]] = {}
    if args.rows:
        with _capture_master(args.capture_master, args.cache, args.worker_memory) as master:
            for rows in args.rows:
                cmd = ["--cache", str(args.cache), "--reps", str(args.reps)]
                shared = args.shared_dir
                if shared == "auto" and args.capture_master == "cluster":
                    shared = str(args.cache / "shared")
                    os.makedirs(shared, exist_ok=True)
                if shared not in ("auto", "none"):
                    cmd += ["--shared-dir", shared]
                memory = args.executor_memory
                if memory == "worker" and args.capture_master == "cluster":
                    memory = args.worker_memory
                cmd += ["--executor-memory", memory]
                capture[rows] = _child([*cmd, "--child", "capture", master, str(rows)])
                print(f"  {rows} rows: {json.dumps(capture[rows])}", flush=True)
    if store:
        _print_store(store)
    if capture:
        _print_capture(capture, args.capture_master)
    ok = _goals(store, capture)
    return 1 if args.strict and not ok else 0


@contextlib.contextmanager
def _capture_master(master: str, cache: Path, memory: str) -> Iterator[str]:
    """``master``, or with ``cluster`` a standalone master and two workers started here on
    127.0.0.1 (the tests' launcher, ``tests/spark/servers.py``) for the block."""
    if master != "cluster":
        yield master
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from spark.servers import standalone_cluster

    # SIGTERM (a timeout, a kill) unwinds the block, so the cluster is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    with (
        tempfile.TemporaryDirectory(prefix="dslog-scale-cluster-") as tmp,
        standalone_cluster(Path(tmp), workers=2, cores=1, memory=memory) as url,
    ):
        yield url


def quick(cache: Path) -> int:
    """The smoke test: two tiny stores and a 5000-row capture, in this process (on the
    running SparkSession, else a ``local[2]`` one); nothing about time is asserted."""
    from dslog_dagster.spark import get_session

    with tempfile.TemporaryDirectory(prefix="dslog-scale-quick-") as tmp:
        store: dict[int, dict[str, Any]] = {}
        for n in (20, 200):
            root = Path(tmp) / f"scale-{n}"
            build(root, n, side=50)
            r = store_child(root, n)
            s = spark_child(root, n, "local[2]")
            if s["answer"] != r["answer"]:
                sys.exit(f"the Spark engine's answer differs from the native one at {n} operations")
            store[n] = {**r, "spark": s["spark"], "spark_rss": s["rss"], "load": _load()}
        spark = get_session("local[2]")
        capture = {
            20_000: {**capture_run(spark, 20_000, Path(tmp), 1), "rss": _rss(), "load": _load()}
        }
    _print_store(store)
    _print_capture(capture, "local[2]")
    _goals(store, capture)
    return 0


if __name__ == "__main__":
    sys.exit(main())
