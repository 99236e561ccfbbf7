"""What the store's checksums cost: a step's registration and a read, with and without them.

A tracked step served from a reuse view does little besides registering its operation: the
lineage tables come encoded from the view (their blobs are cached), so the store's own work —
the record, the segment bytes, the flushed file, its links — is most of the step. The checksums
add to it the XXH3 digests of the record and of each blob, and of the operation ids. This
measures, in one process and alternating, the registration of such a step (one input, one new
output version, a cached table) and a fresh read of its record and table:

* **checked** — the store as it is;
* **digests stubbed** — the digest functions replaced by constants of the same size (the files
  keep their layout; reads skip the comparisons), so the difference is what hashing and
  checking cost.

Both with ``durable=False`` (no fsync: the least total, so the largest share for the digests)
and ``durable=True``.

Goal (issue 25): a served step's registration ≤ a few percent slower with checksums.

Run: ``.venv/bin/python bench/store.py [--quick]``. Informational, not a CI gate.
"""

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.format import checksum, segment
from dslog_dagster.core.store import LineageStore, NewArray
from dslog_dagster.core.store import records as records_module


@contextlib.contextmanager
def stubbed_digests() -> Iterator[None]:
    """Digest functions replaced by constants of the same size (see the module docstring)."""
    zero = bytes(checksum.DIGEST_BYTES)
    saved = (
        segment.row_sums,
        segment.ids_digest,
        segment.record_digest,
        segment.blob_digest,
        records_module.json_checksum,
    )
    segment.row_sums = lambda op, rec, blobs: zero * (1 + len(blobs))  # type: ignore[assignment]
    segment.ids_digest = lambda ids: "0"  # type: ignore[assignment]
    segment.record_digest = lambda op, rec: zero  # type: ignore[assignment]
    segment.blob_digest = lambda blob, k: zero  # type: ignore[assignment]
    records_module.json_checksum = lambda d: "0"  # type: ignore[assignment]
    try:
        yield
    finally:
        (
            segment.row_sums,
            segment.ids_digest,
            segment.record_digest,
            segment.blob_digest,
            records_module.json_checksum,
        ) = saved


def _table(side: int) -> object:
    i, j = np.indices((side, side)).reshape(2, -1)
    rel = LineageRelation.from_columns((side, side), (side, side), [i, j], [j, i])
    return compress(rel)


def _register_block(store: LineageStore, table: object, side: int, start: int, n: int) -> float:
    """Seconds per registration of ``n`` served-step-like operations."""
    t0 = time.perf_counter()
    for k in range(start, start + n):
        store.register_operation(
            "step",
            ["x"],
            [NewArray("y", (side, side), version=f"v{k}")],
            {("y", "x"): table},  # type: ignore[dict-item]
            capture_method="view",
        )
    return (time.perf_counter() - t0) / n


def _read_block(root: Path, ids: list[str]) -> float:
    """Seconds per fresh read of an operation's record and table."""
    store = LineageStore(root)
    t0 = time.perf_counter()
    for op_id in ids:
        op = store.get_operation(op_id)
        store.read_lineage(op, "y", "x")
    return (time.perf_counter() - t0) / len(ids)


def _measure(
    durable: bool, side: int, blocks: int, per_block: int, work: Path
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, list[float]]] = {
        name: {"register": [], "read": []} for name in ("checked", "stubbed")
    }
    table = _table(side)
    modes: list[tuple[str, Callable[[], contextlib.AbstractContextManager[None]]]] = [
        ("checked", contextlib.nullcontext),
        ("stubbed", stubbed_digests),
    ]
    roots = {}
    for name, ctx in modes:
        root = work / f"{name}-{durable}"
        with ctx():
            store = LineageStore(root, durable=durable)
            store.register_array("x", (side, side))
            _register_block(store, table, side, 0, 3)  # warm-up
        roots[name] = (root, store)
    k = 3
    for b in range(blocks):
        for name, ctx in modes if b % 2 == 0 else modes[::-1]:
            root, store = roots[name]
            with ctx():
                out[name]["register"].append(_register_block(store, table, side, k, per_block))
                ids = store.operation_ids()[-per_block:]
                out[name]["read"].append(_read_block(root, ids))
        k += per_block
    return {
        name: {what: min(v) for what, v in parts.items()}
        | {"median": statistics.median(parts["register"])}
        for name, parts in out.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller blocks")
    parser.add_argument("--side", type=int, default=128, help="array side (cells)")
    args = parser.parse_args(argv)
    blocks, per_block = (6, 20) if args.quick else (12, 50)
    work = Path(tempfile.mkdtemp(prefix="dslog-bench-store-"))
    try:
        print("| durable | what | checked (ms) | digests stubbed (ms) | ratio |")
        print("|---|---|---:|---:|---:|")
        for durable in (False, True):
            r = _measure(durable, args.side, blocks, per_block, work)
            for what in ("register", "read"):
                a, b = r["checked"][what] * 1e3, r["stubbed"][what] * 1e3
                print(f"| {durable} | {what} (best block) | {a:.3f} | {b:.3f} | {a / b:.3f} |")
            a, b = r["checked"]["median"] * 1e3, r["stubbed"]["median"] * 1e3
            print(f"| {durable} | register (median block) | {a:.3f} | {b:.3f} | {a / b:.3f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
