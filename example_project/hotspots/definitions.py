"""Definitions of the hotspot project: ``dagster dev -m hotspots.definitions`` loads ``defs``.

Arrays and lineage live under ``$HOTSPOTS_BASE_DIR`` when set, else in the Dagster instance's
storage directory (``$DAGSTER_HOME/storage``); the lineage store is its ``.dslog`` folder
(or ``$DSLOG_STORE``).
"""

import os

import dagster as dg

from dslog_dagster import DSLogIOManager, DSLogResource
from hotspots.assets import PIPELINE
from hotspots.spark import spark_assets, spark_resources

hotspot_job = dg.define_asset_job(
    "hotspot_job",
    selection=dg.AssetSelection.groups("hotspots"),
    executor_def=dg.in_process_executor,
)


def make_defs(base_dir: str | None = None, policy: str = "capture") -> dg.Definitions:
    """The project's definitions with arrays (and lineage) under ``base_dir``."""
    dslog = DSLogResource(policy=policy)  # type: ignore[arg-type]
    return dg.Definitions(
        assets=[*PIPELINE, *spark_assets],
        jobs=[hotspot_job],
        resources={
            "io_manager": DSLogIOManager.from_resource(dslog, base_dir=base_dir),
            "dslog": dslog,
            **spark_resources,
        },
    )


defs = make_defs(os.environ.get("HOTSPOTS_BASE_DIR"))
