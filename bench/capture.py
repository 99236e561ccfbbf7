"""Annotated execution (tracked_float) vs bare NumPy: element-wise, aggregate, initialisation.

Reproduces the capture paper's micro-benchmarks with our annotator, as ratios measured in one
process (never as timed tests):

* element-wise ``np.negative(x)`` and ``x + y`` and the aggregate ``np.sum(x, axis=0)`` on
  ``(cells / 1000, 1000)`` arrays, 1e4 … 1e7 cells (``--quick``: 1e4 … 1e6);
* initialisation (annotating the input cells) and extraction (the factorised extraction
  straight to ProvRC tables) costs;
* bytes per recorded annotation: the output's 8-byte annotation handles (the half of each
  16-byte ``tracked_float`` that is not the value) plus the arena bytes the operation used,
  over the (output cell, input cell) pairs it recorded;
* the pure-Python reference annotator of the tests (``tests/annotator/reference.py``: object
  arrays of Python cells carrying frozensets, the papers' "Python baseline"), execution only
  like the other columns, timed at 1e4 and 1e5 cells; the 1e6 figure is extrapolated from
  1e5 with the growth measured between 1e4 and 1e5 and marked ``~``;
* the 1e8-cell aggregate end to end (annotate + sum + extract) in a child process, for its
  peak memory (``--quick`` skips it).

How (as in the capture paper, sec. 3.2): "annotated" is the execution of the operation on
already annotated arrays; initialisation (annotating the inputs) and extraction (building
the relation columns) are their own columns. Bare and annotated runs are treated alike: best
of several runs, every result released before the next run (so both reuse freed memory
instead of one of them paying for fresh pages); the annotated runs are the first run of each
capture plus ``INNER_REPS`` more on the same annotated inputs.

Goals (issue 4): element-wise ≤ 3× bare NumPy at 1M cells, aggregate ≤ 15×, the 1e8-cell
aggregate within 24 GB and < 20 s overhead, ≤ 16 bytes per annotation.

End to end (issue 23, the last section; ``--e2e`` runs it alone): the whole ``capture(fn, x)``
call — annotate, run, extract and compress to the stored tables — against plain ``fn(x)``,
with the kernel-only figure (the function on annotated arrays) and the eager capture
(``Capture(defer=False)``: annotated from the start, no deferred fast path) beside it, and
each workload's peak RSS (its own child process). ``capture()`` is the default, deferred
capture (core/deferred.py): element-wise chains and sums run on plain NumPy until the first
other operation.
Goals: element-wise (``-x``, ``x + y``, ``np.exp``, 1M cells) ≤ 5×; whole-array statistics
(standardize, min-max scale, softmax rows, ``x - x.mean()``, PCA projection onto 10
components, 1000×1000) ≤ 30× and ≤ 2 GB; 3×3 box blur and the example's hotspot step
(1024×1024) ≤ 15×; matmul 1000²·1000² (2·10⁹ raw pairs) finishes, ≤ 2 GB, ≤ 30×;
``sum(axis=0)`` ≤ 15×. Captures keep freed array blocks (up to 256 MiB) for the next capture
(docs/concepts/capture.md, "Array memory"), so the best of runs is the steady state of a
process that captures repeatedly; its first capture also pays for fresh pages.

Run: ``.venv/bin/python bench/capture.py [--quick] [--e2e] [--reps N]``. Informational, not a
CI gate.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from image_steps import blur

from dslog_dagster import _annotator

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "tests" / "annotator"
WORKLOADS = ("negative", "add", "sum_axis0")
HANDLE_BYTES = 8
"""Bytes of one cell's annotation handle (a tracked_float is a float64 value + a handle)."""
INNER_REPS = 5  # extra timed runs of the operation inside each capture


def best_of(f: Callable[[], Any], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(cells: int, reps: int) -> dict[str, float]:
    """One size: bare and annotated times for the three workloads, init, bytes/annotation."""
    rng = np.random.default_rng(0)
    shape = (max(cells // 1000, 1), 1000)
    x, y = rng.random(shape), rng.random(shape)
    out: dict[str, float] = {"cells": float(x.size)}
    work: dict[str, tuple[Callable[..., Any], int]] = {
        "negative": (np.negative, 1),
        "add": (np.add, 2),
        "sum_axis0": (lambda a: np.sum(a, axis=0), 1),
    }
    for name, (f, arity) in work.items():
        args = (x, y)[:arity]
        out[f"{name}_bare"] = best_of(lambda f=f, args=args: f(*args), reps * (1 + INNER_REPS))
        times, inits, extracts, per_ann = [], [], [], []
        for _ in range(reps):
            epoch = _annotator.begin(0)
            try:
                t0 = time.perf_counter()
                tracked = [_annotator.annotate(a)[0] for a in args]
                t1 = time.perf_counter()
                used0 = _annotator.stats()["bytes_used"]
                res = f(*tracked)
                t2 = time.perf_counter()
                used = _annotator.stats()["bytes_used"] - used0 + HANDLE_BYTES * np.size(res)
                rels, _ = _annotator.extract_tables(res, [list(a.shape) for a in args], False)
                t3 = time.perf_counter()
                n_ann = sum(int(t[1]) for t in rels)  # pairs the tables stand for
                del res, rels  # as in best_of: no result outlives its repetition
                # The operation again on the same annotated inputs, like best_of repeats f.
                times.append(best_of(lambda f=f, tracked=tracked: f(*tracked), INNER_REPS))
                del tracked
            finally:
                _annotator.end(epoch)
            inits.append(t1 - t0)
            times.append(t2 - t1)
            extracts.append(t3 - t2)
            per_ann.append(used / max(n_ann, 1))
        out[f"{name}_annotated"] = min(times)
        out[f"{name}_init"] = min(inits)
        out[f"{name}_extract"] = min(extracts)
        out[f"{name}_bytes_per_ann"] = per_ann[-1]
    return out


def python_reference(cells: int, reps: int) -> dict[str, float]:
    """Execution time of the pure-Python reference annotator (tests/annotator/reference.py)."""
    sys.path.insert(0, str(REFERENCE_DIR))
    import reference as ref  # a test helper, imported only when this bench runs

    rng = np.random.default_rng(0)
    shape = (max(cells // 1000, 1), 1000)
    x, y = rng.random(shape), rng.random(shape)
    rx, ry = ref.to_refs(x, 0), ref.to_refs(y, 1)
    out: dict[str, float] = {}
    for name, run in (
        ("negative", lambda: ref.REFERENCE.get(np.negative, np.negative)(rx)),
        ("add", lambda: ref.REFERENCE.get(np.add, np.add)(rx, ry)),
        ("sum_axis0", lambda: ref.REFERENCE.get(np.sum, np.sum)(rx, axis=0)),
    ):
        with np.errstate(all="ignore"):
            out[name] = best_of(run, reps)
    return out


def big_aggregate(cells: int) -> dict[str, float]:
    """End-to-end 1e8-cell aggregate (run in a child process for a clean peak RSS)."""
    rng = np.random.default_rng(0)
    x = rng.random((cells // 1000, 1000))
    t0 = time.perf_counter()
    np.sum(x, axis=0)
    bare = time.perf_counter() - t0
    epoch = _annotator.begin(0)
    try:
        t0 = time.perf_counter()
        tx = _annotator.annotate(x)[0]
        res = np.sum(tx, axis=0)
        used = _annotator.stats()["bytes_used"] + HANDLE_BYTES * np.size(res)
        rels, _ = _annotator.extract_tables(res, [list(x.shape)], False)
        total = time.perf_counter() - t0
        n_ann = int(rels[0][1])
    finally:
        _annotator.end(epoch)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {
        "bare": bare,
        "total": total,
        "overhead": total - bare,
        "peak_gb": peak_gb,
        "bytes_per_ann": used / max(n_ann, 1),
        "annotations": n_ann,
    }


# ------------------------------------------------------------------ end to end (issue 23)
# What a user pays: the whole ``capture(fn, x)`` call (annotate + run + extract + compress to
# the stored tables) against plain ``fn(x)``, best of runs in one process, each workload in
# its own child process for an honest peak RSS (ru_maxrss of the child: inputs, plain runs,
# kernel-only runs and captures together). "kernel" is the annotated run alone, on inputs
# annotated beforehand (the papers' figure).


def _hotspot(a: Any) -> Any:
    """The example project's hotspot step: blur, ``mean + 2.5·std`` level, ``np.where``."""
    s = blur(a)
    level = s.mean() + 2.5 * s.std()
    return np.where(s > level, s, 0.0)


def _softmax_rows(a: Any) -> Any:
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _e2e_workloads() -> dict[str, tuple[Callable[..., Any], list[np.ndarray], str]]:
    """name -> (function, inputs, goal class)."""
    rng = np.random.default_rng(0)
    x = rng.random((1000, 1000))
    y = rng.random((1000, 1000))
    frame = rng.random((1024, 1024))
    # PCA: 10 components learnt beforehand (plain constants inside the capture)
    comps = np.linalg.svd(x[:200] - x[:200].mean(axis=0), full_matrices=False)[2][:10].T.copy()
    return {
        "neg -x": (np.negative, [x], "elementwise"),
        "x + y": (np.add, [x, y], "elementwise"),
        "np.exp": (np.exp, [x], "elementwise"),
        "standardize": (lambda a: (a - a.mean(axis=0)) / a.std(axis=0), [x], "stats"),
        "min-max scale": (lambda a: (a - a.min()) / (a.max() - a.min()), [x], "stats"),
        "softmax rows": (_softmax_rows, [x], "stats"),
        "x - x.mean()": (lambda a: a - a.mean(), [x], "stats"),
        "PCA projection (10)": (lambda a: (a - a.mean(axis=0)) @ comps, [x], "stats"),
        "3x3 box blur 1024²": (blur, [frame], "stencil"),
        "hotspot step 1024²": (_hotspot, [frame], "stencil"),
        "matmul 1000²·1000²": (np.matmul, [x, y], "matmul"),
        "sum(axis=0)": (lambda a: np.sum(a, axis=0), [x], "aggregate"),
    }


E2E_GOALS = {  # goal class -> (end-to-end ratio, peak RSS GB or None)
    "elementwise": (5.0, None),
    "stats": (30.0, 2.0),
    "stencil": (15.0, None),
    "matmul": (30.0, 2.0),
    "aggregate": (15.0, None),
}


def e2e_child(name: str, reps: int) -> dict[str, Any]:
    """One end-to-end workload, measured in this (child) process."""
    from dslog_dagster.core import Capture, capture

    func, inputs, _ = _e2e_workloads()[name]
    with np.errstate(all="ignore"):
        plain = best_of(lambda: func(*inputs), reps)
        epoch = _annotator.begin(0)
        try:
            tracked = [_annotator.annotate(a)[0] for a in inputs]
            kernel = best_of(lambda: func(*tracked), reps)
        finally:
            _annotator.end(epoch)
        result: list[Any] = []

        def run() -> None:
            result[:] = [None]  # the previous result is freed before the next run
            result[0] = capture(func, *inputs)

        e2e = best_of(run, reps)
        eager_capture = Capture(defer=False)

        def run_eager() -> None:
            result[:] = [None]
            result[0] = eager_capture.run(func, *inputs)

        eager = best_of(run_eager, reps)
        result[:] = [capture(func, *inputs)]
    tables = result[0].tables
    return {
        "plain": plain,
        "kernel": kernel,
        "eager": eager,
        "e2e": e2e,
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "rows": sum(t.rows for t in tables.values()),
        "pairs": sum(t.n_pairs for t in tables.values()),
    }


def end_to_end(reps: int) -> None:
    """The end-to-end table and its goals (issue 23)."""
    print("\n## End to end: capture(fn, x) vs plain NumPy (issue 23)\n")
    print(
        "| step | plain ms | kernel ms | kernel × | eager capture × | capture() ms | capture × "
        "| peak RSS GB | stored rows | raw pairs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    goals: list[tuple[str, str, bool]] = []
    for name, (_, _, cls) in _e2e_workloads().items():
        proc = subprocess.run(
            [sys.executable, __file__, "--e2e-child", name, "--reps", str(reps)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(f"| {name} | — | — | — | — | failed: {tail} | — | — | — | — |")
            goals.append((f"{name}: finishes", "failed", False))
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        ratio, kratio = r["e2e"] / r["plain"], r["kernel"] / r["plain"]
        print(
            f"| {name} | {r['plain'] * 1e3:.2f} | {r['kernel'] * 1e3:.1f} | {kratio:.1f}x | "
            f"{r['eager'] / r['plain']:.1f}x | {r['e2e'] * 1e3:.1f} | {ratio:.1f}x | "
            f"{r['peak_gb']:.2f} | {r['rows']} | {r['pairs']:.2e} |"
        )
        limit, gb = E2E_GOALS[cls]
        goals.append((f"{name}: capture() ≤ {limit:g}× plain", f"{ratio:.1f}x", ratio <= limit))
        if gb is not None:
            goals.append(
                (f"{name}: peak RSS ≤ {gb:g} GB", f"{r['peak_gb']:.2f} GB", r["peak_gb"] <= gb)
            )
    print()
    print("| Goal (issue 23) | measured | result |")
    print("|---|---|---|")
    for goal, measured, ok in goals:
        print(f"| {goal} | {measured} | {'PASS' if ok else 'FAIL'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only, no 1e8 run")
    ap.add_argument(
        "--smoke", action="store_true", help="--quick with one run per figure (the suite's check)"
    )
    ap.add_argument("--big-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--e2e", action="store_true", help="only the end-to-end section")
    ap.add_argument("--e2e-child", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=5, help="runs per end-to-end figure (best of)")
    ns = ap.parse_args()
    if ns.big_child:
        print(json.dumps(big_aggregate(ns.big_child)))
        return
    if ns.e2e_child:
        print(json.dumps(e2e_child(ns.e2e_child, ns.reps)))
        return
    if ns.e2e:
        end_to_end(ns.reps)
        return
    ns.quick = ns.quick or ns.smoke
    sizes = [10**4, 10**5, 10**6] if ns.quick else [10**4, 10**5, 10**6, 10**7]
    if ns.smoke:
        sizes = [10**4, 10**6]
    rows = [measure(n, 1 if ns.smoke else 3 if n <= 10**6 else 1) for n in sizes]
    # Python reference: measured at 1e4 and 1e5 (1e3 and 1e4 with --quick, 1e2 and 1e3 with
    # --smoke), extrapolated beyond with the growth exponent seen between the two.
    ref_sizes = [10**2, 10**3] if ns.smoke else [10**3, 10**4] if ns.quick else [10**4, 10**5]
    ref_times = {n: python_reference(n, 3 if n == ref_sizes[0] else 2) for n in ref_sizes}

    def reference_ms(cells: int, w: str) -> str:
        if cells in ref_times:
            return f"{ref_times[cells][w] * 1e3:.1f}"
        lo, hi = ref_times[ref_sizes[0]][w], ref_times[ref_sizes[1]][w]
        if cells < ref_sizes[1] or lo <= 0:
            return "—"
        # at least linear, at most quadratic (the reference's unions along a lane)
        growth = min(max(np.log10(hi / lo) / np.log10(ref_sizes[1] / ref_sizes[0]), 1.0), 2.0)
        est = hi * (cells / ref_sizes[1]) ** growth
        return f"~{est * 1e3:.0f}"

    print(
        "| cells | workload | bare ms | annotated ms | ratio | init ms | extract ms | B/ann "
        "| Python ref ms | ref / annotated |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for w in WORKLOADS:
            bare, ann = r[f"{w}_bare"], r[f"{w}_annotated"]
            pyref = reference_ms(int(r["cells"]), w)
            speedup = "—"
            if pyref != "—":
                speedup = f"{'~' if pyref.startswith('~') else ''}"
                speedup += f"{float(pyref.lstrip('~')) / (ann * 1e3):.0f}x"
            print(
                f"| {int(r['cells']):.0e} | {w} | {bare * 1e3:.2f} | {ann * 1e3:.2f} | "
                f"{ann / bare:.1f}x | {r[f'{w}_init'] * 1e3:.2f} | "
                f"{r[f'{w}_extract'] * 1e3:.2f} | {r[f'{w}_bytes_per_ann']:.1f} | "
                f"{pyref} | {speedup} |"
            )
    print(
        "\nPython ref: tests/annotator/reference.py (execution only); values marked ~ are "
        f"extrapolated from {ref_sizes[0]:.0e}/{ref_sizes[1]:.0e}, not measured."
    )
    at_1m = next(r for r in rows if int(r["cells"]) == 10**6)
    ew = max(
        at_1m["negative_annotated"] / at_1m["negative_bare"],
        at_1m["add_annotated"] / at_1m["add_bare"],
    )
    agg = at_1m["sum_axis0_annotated"] / at_1m["sum_axis0_bare"]
    bpa = max(r[f"{w}_bytes_per_ann"] for r in rows for w in WORKLOADS)
    goals = [
        ("element-wise ≤ 3× bare NumPy at 1M cells", f"{ew:.1f}x", ew <= 3),
        ("aggregate ≤ 15× bare NumPy at 1M cells", f"{agg:.1f}x", agg <= 15),
        ("≤ 16 bytes per annotation", f"{bpa:.1f} B", bpa <= 16),
    ]
    if not ns.quick:
        proc = subprocess.run(
            [sys.executable, __file__, "--big-child", str(10**8)],
            capture_output=True,
            text=True,
            check=True,
        )
        big = json.loads(proc.stdout.strip().splitlines()[-1])
        goals.append(
            ("1e8-cell aggregate within 24 GB", f"{big['peak_gb']:.1f} GB", big["peak_gb"] <= 24)
        )
        goals.append(
            ("1e8-cell aggregate < 20 s overhead", f"{big['overhead']:.1f} s", big["overhead"] < 20)
        )
    print()
    print("| Goal | measured | result |")
    print("|---|---|---|")
    for goal, measured, ok in goals:
        print(f"| {goal} | {measured} | {'PASS' if ok else 'FAIL'} |")
    neg_1m = at_1m["negative_annotated"] / at_1m["negative_bare"]
    add_1m = at_1m["add_annotated"] / at_1m["add_bare"]
    print(
        f"\nElement-wise at 1M: negative {neg_1m:.1f}x, add {add_1m:.1f}x. "
        "A tracked_float element is 16 "
        "bytes, twice a float64, so at 1M cells the annotated operands (16-48 MB) no longer "
        "fit the cache that still holds bare NumPy's (8-24 MB). (Plain element-wise calls "
        "write their output without NumPy's zero-fill of new tracked_float arrays; see "
        "native/src/tracked_float.cpp, 'Uninitialised outputs'.)"
    )
    big_rows = [r for r in rows if int(r["cells"]) >= 10**7]
    for r in big_rows:
        ratios = ", ".join(
            f"{w} {r[f'{w}_annotated'] / r[f'{w}_bare']:.1f}x" for w in ("negative", "add")
        )
        print(f"Info, not a goal: at {int(r['cells']):.0e} cells (both out of cache): {ratios}.")
    end_to_end(1 if ns.smoke else ns.reps)


if __name__ == "__main__":
    main()
