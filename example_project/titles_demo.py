"""`make demo`, part 3: the ICDE relational pipeline on Spark, materialized with lineage.

Runs ``titles_job`` of the project in ``example_project/hotspots`` (two generated tables ->
join -> drop nulls -> add columns -> one-hot -> add constant, all PySpark DataFrames, then a
NumPy matrix and a NumPy reduction) in-process on an embedded instance with one local
SparkSession, then runs the saved lineage queries across it: ``genre_origin`` (backward, from
the NumPy genre totals to cells of the Spark source table) and ``genre_reach`` (forward, from
the source's genre cells to the final frame), and prints their answers.

Usage: python example_project/titles_demo.py [BASE_DIR] [--titles N]
"""

import argparse
import shutil
import sys
from pathlib import Path

import dagster as dg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hotspots.definitions import make_defs
from hotspots.spark import PATH_TO_BASICS

from dslog_dagster.core.api import DSLog
from dslog_dagster.io_managers.metadata import record_figures
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark import ROW_ID, get_session

# Dagster's console logger at WARNING: the demo prints its own summary.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base_dir", nargs="?", default=".dslog-demo/titles")
    parser.add_argument("--titles", type=int, default=300, help="rows of title.basics")
    args = parser.parse_args(argv)
    base = Path(args.base_dir).absolute()
    if base.exists():
        shutil.rmtree(base)
    defs = make_defs(str(base))
    job = defs.resolve_job_def("titles_job")
    config = {"n_titles": args.titles}
    run_config = {**QUIET, "ops": {"title_basics": {"config": config}}}
    run_config["ops"]["title_episodes"] = {"config": config}
    with dg.DagsterInstance.ephemeral() as instance:
        res = job.execute_in_process(instance=instance, run_config=run_config)
        if not res.success:
            print("ERROR: the run failed")
            return 1
        print(f"titles_job ({res.run_id[:8]}): Spark steps, then NumPy steps")
        for ev in res.get_asset_materialization_events():
            md = ev.materialization.metadata
            key = ev.materialization.asset_key.to_user_string()
            line = f"  {key:<15} {md['dslog/shape'].value:<10} lineage {md['dslog/obtained'].value}"
            figures = record_figures(str(md["dslog/record"].value))
            if "lineage pairs" in figures:
                pairs = figures["lineage pairs"].split(" (")[0]
                line += (
                    f" {pairs:>7} pairs -> {figures.get('stored', '')}; "
                    f"{figures.get('seconds', '')}"
                )
            print(line)
        queries = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance,
            asset_selection=[dg.AssetKey("genre_origin"), dg.AssetKey("genre_reach")],
            run_config=QUIET,
        )
        for ev in queries.get_asset_materialization_events():
            qmd = ev.materialization.metadata
            print(
                f"query asset {ev.materialization.asset_key.to_user_string()}: "
                f"{qmd['dslog/result_cells'].value} cells in "
                f"{qmd['dslog/result_boxes'].value} box(es) -> {qmd['dslog/result_path'].value}"
            )
    store = base / ".dslog"
    log = DSLog(store)
    basics = read_frame(get_session(), base / "title_basics.parquet", row_id=True)
    columns = [c for c in basics.columns if c != ROW_ID]
    cells = log.prov_query(PATH_TO_BASICS, [1])  # genre_runtime[1]: the Drama total
    by_column: dict[str, int] = {}
    for _row, col in cells.to_indices().tolist():
        by_column[columns[col]] = by_column.get(columns[col], 0) + 1
    rows = len({r for r, _ in cells.to_indices().tolist()})
    print(
        f"Drama runtime total <- {cells.count()} cells of title_basics in {rows} rows: "
        + ", ".join(f"{n} x {c}" for c, n in sorted(by_column.items()))
    )
    fwd = log.prov_query(list(reversed(PATH_TO_BASICS[2:])), [(r, 5) for r in range(10)])
    print(
        f"genres of title_basics rows 0..9 -> {fwd.count()} cells of titles_final in "
        f"{len({r for r, _ in fwd.to_indices().tolist()})} rows"
    )
    print(f"lineage store: {store}  (inspect: .venv/bin/dslog inspect {store})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
