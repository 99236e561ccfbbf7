"""Explaining a change between two versions of a 1M-cell NumPy pipeline, in one process.

Issue 27's goal for the explain-change part: diff + trace of two 1M-cell NumPy versions with
1 % differing cells ≤ 2 s. The pipeline is the example's hotspot shape at 1000×1000:

    raw → smoothed = 3×3 box blur of the edge-padded raw → hot = where(smoothed > t, smoothed, 0)

Version b changes 1 % of the raw cells (random positions). Both versions are captured
(annotated runs, untimed setup) and registered in a fresh store with their values saved as
``.npy`` files, as the IO manager keeps them. The timed call is what a user runs —
:func:`~dslog_dagster.core.change.explain_change` on ``hot`` (load both values from disk, find
the changed cells, trace both versions backward through two steps, load and compare the
upstream values, mark the origins) — best of ``--repeat`` runs, each in a fresh session, beside
the baselines a user would otherwise run by hand:

* **plain diff**: loading the two ``hot`` files and ``np.argwhere(a != b)`` — what any
  comparison pays before tracing anything;
* **re-capture**: one annotated capture of the whole pipeline — what tracing the change by
  re-running with lineage capture (without stored lineage) would cost at the least.

Run: ``.venv/bin/python bench/explain_change.py [--size 1000] [--repeat 3]``. Informational,
not a CI gate (a smoke test runs it at toy size).
"""

import argparse
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from image_steps import above, blur

from dslog_dagster.core import Capture
from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.change import explain_change
from dslog_dagster.core.store import ArrayRecord


def register(log: DSLog, values: Path, v: str, raw: np.ndarray) -> None:
    shape = raw.shape
    cap_s = Capture().run(blur, raw)
    smoothed = np.asarray(cap_s.value)
    cap_h = Capture().run(above, smoothed)
    x, y, z = (Array(n, shape, version=v) for n in ("raw", "smoothed", "hot"))
    log.register_operation("blur", [x], [y], [Lineage(y, x, cap_s.tables[0, 0])])
    log.register_operation("hot", [y], [z], [Lineage(z, y, cap_h.tables[0, 0])])
    for name, val in (("raw", raw), ("smoothed", smoothed), ("hot", np.asarray(cap_h.value))):
        (values / name).mkdir(parents=True, exist_ok=True)
        np.save(values / name / f"{v}.npy", val)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.01)
    args = ap.parse_args()
    n = args.size
    rng = np.random.default_rng(7)
    raw_a = rng.random((n, n))
    raw_b = raw_a.copy()
    k = max(1, int(args.fraction * n * n))
    flat = rng.choice(n * n, size=k, replace=False)
    raw_b.flat[flat] = rng.random(k)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        values = root / "values"
        log = DSLog(root / "store")
        register(log, values, "a", raw_a)
        register(log, values, "b", raw_b)

        def load(rec: ArrayRecord) -> Any:
            path = values / rec.name / f"{rec.version}.npy"
            return np.load(path) if path.exists() else None

        times, diff_times, expl = [], [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            a = np.load(values / "hot" / "a.npy")
            b = np.load(values / "hot" / "b.npy")
            np.argwhere(a != b)
            diff_times.append(time.perf_counter() - t0)
            session = DSLog(root / "store")
            t0 = time.perf_counter()
            expl = explain_change(session.store, "hot", "a", "b", load)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        Capture().run(lambda x: above(blur(x)), raw_b)
        recapture = time.perf_counter() - t0
    assert expl is not None
    best, plain = min(times), min(diff_times)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"pipeline raw → smoothed → hot at {n}×{n}, {k:,} raw cells changed ({args.fraction:.1%})"
    )
    print()
    print("| array | traced cells | traced % | changed cells | changed % | change starts here |")
    print("|---|---|---|---|---|---|")
    for r in expl.rows():
        print(
            f"| {r['array']} | {r['traced_cells']:,} | {r['traced_pct']} | "
            f"{r['changed_cells']:,} | {r['changed_pct']} | {r['origin']} |"
        )
    print()
    print("| measure | seconds | ratio |")
    print("|---|---|---|")
    print(f"| plain diff of the two `hot` values (load + compare) | {plain:.3f} | 1.0x |")
    print(
        f"| explain_change (diff + trace + compare upstream) | {best:.3f} | {best / plain:.1f}x |"
    )
    print(
        f"| re-capture of the pipeline (lower bound without stored lineage) | {recapture:.3f} | "
        f"{recapture / plain:.1f}x |"
    )
    print()
    goal = "PASS" if best <= 2.0 else "FAIL"
    print(
        f"goal: explain_change ≤ 2 s at 1M cells with 1 % changed: {best:.2f} s {goal} "
        f"(peak RSS {peak:.2f} GiB)"
    )


if __name__ == "__main__":
    main()
