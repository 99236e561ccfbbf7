"""Definitions the browser test serves: the fixture pipeline plus the lineage side.

The store is read from ``$DSLOG_STORE`` at resource initialisation (``dg.EnvVar``), so the
webserver, its code server and run workers all point at the test's temporary store.
"""

import sys
from pathlib import Path

import dagster as dg

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from dslog_dagster.assets import SavedLineageQuery, lineage_definitions  # noqa: E402
from tests.dagster.pipeline import PIPELINE  # noqa: E402

defs = dg.Definitions.merge(
    # one process per run: a process per step costs seconds each on a 2-core machine
    dg.Definitions(assets=PIPELINE, executor=dg.in_process_executor),
    lineage_definitions(
        queries=[
            SavedLineageQuery(
                name="hot_corner_origin",
                source="images/hot",
                target="images/raw",
                cells=["0:2,0:3"],
            )
        ],
        assets=PIPELINE,
        store_dir=dg.EnvVar("DSLOG_STORE"),
    ),
)
