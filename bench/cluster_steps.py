"""Per-step cost of Spark steps with a process per step on a standalone cluster (issue 30).

Runs the example project's ``titles_job`` (9 steps, 7 of them Spark) with Dagster's default
multiprocess executor against a master and two workers started here on 127.0.0.1 (the tests'
launcher), twice: **before**, each step process starts its own driver JVM (a new Spark
application per step); **after**, each step process attaches to the shared driver
(:mod:`dslog_dagster.spark.driver`), started by the first step that needs Spark. Prints each
step's wall time (the executor launching its process to the step's success, from Dagster's
events), the median over the Spark steps after the first, the whole run, and the load.

Run: ``.venv/bin/python bench/cluster_steps.py [--titles 40] [--only before|after]``.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from spark.servers import standalone_cluster  # noqa: E402

from dslog_dagster.spark.driver import stop_shared_driver  # noqa: E402

SPARK_STEPS = (
    "title_basics",
    "title_episodes",
    "titles_joined",
    "titles_clean",
    "titles_summed",
    "titles_encoded",
    "titles_final",
    "title_features",
)


def run(master: str, base: Path, shared: bool, titles: int) -> dict[str, float]:
    """One multiprocess run of ``titles_job``; each step's seconds and the run's."""
    os.environ["DSLOG_TITLES_BASE"] = str(base / "data")
    os.environ["DSLOG_TITLES_MASTER"] = master
    os.environ["DSLOG_TITLES_SHARED"] = "1" if shared else "0"
    config = {"config": {"n_titles": titles}}
    run_config = {"ops": {"title_basics": config, "title_episodes": config}}
    home = base / "home"
    home.mkdir(parents=True)
    t0 = time.perf_counter()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        recon = dg.build_reconstructable_job(
            "cluster_titles_job", "titles_job", reconstructor_working_directory=str(ROOT / "tests")
        )
        result = dg.execute_job(recon, instance=instance, run_config=run_config)
        if not result.success:
            sys.exit("the run failed")
        entries = instance.all_logs(result.run_id)
    total = time.perf_counter() - t0
    starting: dict[str, float] = {}
    done: dict[str, float] = {}
    for entry in entries:
        ev = entry.dagster_event
        if ev is None or ev.step_key is None:
            continue
        if ev.event_type_value == "STEP_WORKER_STARTING":
            starting[ev.step_key] = entry.timestamp
        elif ev.is_step_success:
            done[ev.step_key] = entry.timestamp
    out = {str(k): float(done[k] - starting[k]) for k in done if k in starting}
    out["run"] = total
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--titles", type=int, default=40)
    ap.add_argument("--only", choices=("before", "after"))
    args = ap.parse_args()
    results: dict[str, dict[str, float]] = {}
    loads: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dslog-cluster-steps-") as tmp:
        cluster = Path(tmp) / "cluster"
        cluster.mkdir()
        with standalone_cluster(cluster) as master:
            for name, shared in (("before", False), ("after", True)):
                if args.only not in (None, name):
                    continue
                load0 = os.getloadavg()[0]
                try:
                    results[name] = run(master, Path(tmp) / name, shared, args.titles)
                finally:
                    stop_shared_driver(master)
                loads[name] = max(load0, os.getloadavg()[0])
                print(f"  {name}: {results[name]}", flush=True)
    names = list(results)
    print("\n| step (s, process start to success) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    steps = sorted(
        {k for r in results.values() for k in r if k != "run"},
        key=lambda k: min(r.get(k, 1e9) for r in results.values()),
    )
    for k in [*SPARK_STEPS, "genre_runtime"]:
        if k in steps:
            print(
                f"| {k} | "
                + " | ".join(f"{results[n].get(k, float('nan')):.1f}" for n in names)
                + " |"
            )
    med = {
        n: statistics.median(results[n][k] for k in SPARK_STEPS[2:] if k in results[n])
        for n in names
    }
    print(
        "| median Spark step after the sources | "
        + " | ".join(f"{med[n]:.1f}" for n in names)
        + " |"
    )
    print("| whole run | " + " | ".join(f"{results[n]['run']:.0f}" for n in names) + " |")
    print("| load (1 min, max) | " + " | ".join(f"{loads[n]:.1f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
