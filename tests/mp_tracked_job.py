"""A tracked job for the multiprocess-executor test (each step in its own process).

Importable by module name (``tests/`` is on the path), as Dagster's multiprocess executor
reconstructs the job in every step process. The store directory comes from the environment,
which the step processes inherit.
"""

import os

import dagster as dg
import numpy as np

from dslog_dagster import DSLogIOManager, tracked_asset, tracked_multi_asset


@tracked_asset
def mp_raw() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset
def mp_neg(mp_raw: np.ndarray) -> np.ndarray:
    return -mp_raw


@tracked_multi_asset(outs={"mp_twice": dg.AssetOut(), "mp_colsum": dg.AssetOut()})
def mp_pair(mp_neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return mp_neg * 2, mp_neg.sum(axis=0)


def mp_job() -> dg.JobDefinition:
    """The job, with its IO manager on the directory ``DSLOG_MP_BASE`` names."""
    defs = dg.Definitions(
        assets=[mp_raw, mp_neg, mp_pair],
        jobs=[dg.define_asset_job("mp_job", executor_def=dg.multiprocess_executor)],
        resources={
            "io_manager": DSLogIOManager(
                base_dir=os.environ["DSLOG_MP_BASE"],
                store_dir=os.path.join(os.environ["DSLOG_MP_BASE"], ".dslog"),
            )
        },
    )
    return defs.resolve_job_def("mp_job")
