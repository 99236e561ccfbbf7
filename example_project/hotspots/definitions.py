"""Definitions of the hotspot project: ``dagster dev -m hotspots.definitions`` loads ``defs``.

Arrays and lineage live under ``$HOTSPOTS_BASE_DIR`` when set, else in the Dagster instance's
storage directory (``$DAGSTER_HOME/storage``); the lineage store is its ``.dslog`` folder
(or ``$DSLOG_STORE``).

The ``titles`` group is the ICDE relational pipeline on PySpark (``hotspots/spark.py``,
``titles_job``), ending in two NumPy steps so lineage queries cross from Spark into NumPy.

Besides the pipelines, the project carries the lineage side of the plugin
(:func:`dslog_dagster.assets.lineage_definitions`): an ad-hoc ``lineage_query`` asset (set its
config in the launchpad), two saved queries that re-run when their upstream lineage changes
(``hotspot_origin``: which raw-frame cells feed the brightest hotspot; ``raw_reach``: which
hotspot tiles a corner of the raw frame reaches; ``genre_origin``: which ``title_basics``
cells feed the Drama runtime total; ``genre_reach``: which ``titles_final`` cells the genres of
ten basics rows reach), a nightly schedule for them, the lineage
checks of the pipeline steps whose every cell has lineage, and "what changed" checks
(``dslog_explain_change``) on ``calibrated``, ``smoothed`` and ``hotspots``.
"""

import os
from pathlib import Path

import dagster as dg

from dslog_dagster import DSLogIOManager, DSLogResource
from dslog_dagster.assets import SavedLineageQuery, change_checks, lineage_definitions
from hotspots.assets import (
    PIPELINE,
    calibrated,
    hotspot_coords,
    hotspot_windows,
    hotspots,
    smoothed,
    window_summary,
)
from hotspots.spark import (
    SPARK_CONF,
    spark_assets,
    spark_resources,
    titles_job_def,
    titles_on_demand_job,
)

hotspot_job = dg.define_asset_job(
    "hotspot_job",
    selection=dg.AssetSelection.groups("hotspots"),
    executor_def=dg.in_process_executor,
)

SAVED_QUERIES = [
    SavedLineageQuery(
        name="hotspot_origin", source="top_hotspots", target="raw_frame", cells=["0"]
    ),
    SavedLineageQuery(name="raw_reach", source="raw_frame", target="hotspots", cells=["0:32,0:32"]),
    # across the Spark pipeline into NumPy: which title_basics cells feed the Drama total ...
    SavedLineageQuery(
        name="genre_origin", source="genre_runtime", target="title_basics", cells=["1"]
    ),
    # ... and forward: which cells of the final frame the genres of basics rows 0..9 reach
    SavedLineageQuery(
        name="genre_reach", source="title_basics", target="titles_final", cells=["0:10,5"]
    ),
]


def make_defs(
    base_dir: str | None = None,
    policy: str = "capture",
    *,
    durable: bool = True,
    group_commit: bool = False,
    spark_master: str = "local[*]",
    shared_driver: bool = False,
    spark_conf: dict[str, str] | None = None,
    executor: dg.ExecutorDefinition = dg.in_process_executor,
) -> dg.Definitions:
    """The project's definitions with arrays (and lineage) under ``base_dir``.

    The Spark steps run on ``spark_master``; ``shared_driver=True`` makes every step process
    (the Spark resource's and the IO manager's sessions) attach to the machine's shared driver
    instead of starting a JVM each, for ``executor=dg.multiprocess_executor`` (the executor of
    ``titles_job``; ``hotspot_job`` always runs in one process). ``spark_conf`` adds to the
    project's Spark settings (e.g. ``spark.dslog.sharedDir``, a folder a cluster's executors
    share with the steps: the capture then stages its output and taps ids there).

    ``durable=False`` stores lineage without fsync (see ``DSLogResource.durable``);
    ``group_commit=True`` fsyncs it in batches off the steps' path (``DSLogResource.group_commit``).
    """
    conf = {**SPARK_CONF, **(spark_conf or {})}  # the IO manager's and the resource's
    store_dir = None
    if base_dir is not None and not os.environ.get("DSLOG_STORE"):
        # the IO manager keeps the store under its base_dir; the query assets must find it too
        store_dir = str(Path(base_dir).absolute() / ".dslog")
    dslog = DSLogResource(
        policy=policy,  # type: ignore[arg-type]
        store_dir=store_dir,
        durable=durable,
        group_commit=group_commit,
    )
    pipeline = dg.Definitions(
        assets=[*PIPELINE, *spark_assets],
        jobs=[hotspot_job, titles_job_def(executor), titles_on_demand_job],
        # one process per run: a process per step costs seconds each on a small machine
        executor=dg.in_process_executor,
        resources={
            "io_manager": DSLogIOManager(
                dslog=dslog,
                base_dir=base_dir,
                spark_master=spark_master,
                spark_conf=conf,
                spark_shared_driver=shared_driver,
            ),
            "dslog": dslog,
            **spark_resources(spark_master, shared_driver=shared_driver, conf=conf),
        },
    )
    lineage = lineage_definitions(
        queries=SAVED_QUERIES,
        # Lineage checks on the steps where every output cell has lineage (the sources
        # raw_frame and dark_frame have none to check). From `thresholded` on, cells below the
        # threshold are the constant 0.0 (no input cell produced them), so the coverage check
        # would rightly warn there.
        assets=[calibrated, smoothed, hotspot_coords, hotspot_windows, window_summary],
        dslog=dslog,  # the same resource object as above: one store, one resource
        cron_schedule="0 3 * * *",
    )
    # "what changed since the last run, and why": after each materialization of these steps,
    # the changed cells traced back through both runs' lineage (a new raw_frame seed shows it)
    changes = dg.Definitions(asset_checks=change_checks([calibrated, smoothed, hotspots]))
    return dg.Definitions.merge(pipeline, lineage, changes)


defs = make_defs(os.environ.get("HOTSPOTS_BASE_DIR"))
