"""Capture never changes what an asset stores: tracked and ``policy="off"`` store the same bytes.

Issue 24: NumPy's NaN-aware paths (mean imputation, median and percentile NaN checks, unique's
NaN collapse) must run on the tracked dtype exactly as on float64, so a ``@tracked_asset``
stores the values the same body stores untracked, bit for bit (NaN positions and the sign of
zeros included).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.io_managers import metadata as m

RAW = np.array(
    [
        [1.0, np.nan, 3.0, -0.0],
        [np.nan, 5.0, -0.0, 0.0],
        [7.0, 8.0, np.nan, -2.5],
        [0.0, np.inf, 2.0, np.nan],
        [-0.0, -np.inf, 5e-324, 4.0],
    ]
)


def impute(raw: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(raw), np.nanmean(raw, axis=0), raw)


def median(raw: np.ndarray) -> np.ndarray:
    return np.median(raw, axis=1)


def unique(raw: np.ndarray) -> np.ndarray:
    return np.unique(raw)


def percentile(raw: np.ndarray) -> np.ndarray:
    return np.percentile(raw, [5.0, 50.0, 95.0], axis=0)


def nan_summary(raw: np.ndarray) -> np.ndarray:
    return np.stack([np.nanmedian(raw, axis=0), np.nanstd(raw, axis=0), np.nansum(raw, axis=0)])


BODIES: list[Callable[[np.ndarray], np.ndarray]] = [impute, median, unique, percentile, nan_summary]


@dg.asset
def raw() -> np.ndarray:
    return RAW.copy()


def _asset(body: Callable[[np.ndarray], np.ndarray], policy: str) -> dg.AssetsDefinition:
    def fn(raw: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return body(raw)

    fn.__name__ = f"{body.__name__}_{policy}"
    return tracked_asset(policy=policy, name=fn.__name__)(fn)


ASSETS = [_asset(b, p) for b in BODIES for p in ("capture", "off")]


def test_tracked_and_untracked_assets_store_identical_values(tmp_path: Path) -> None:
    io = DSLogIOManager(
        base_dir=str(tmp_path / "data"), store_dir=str(tmp_path / "data" / ".dslog")
    )
    with dg.instance_for_test() as instance:
        res = dg.materialize([raw, *ASSETS], instance=instance, resources={"io_manager": io})
    assert res.success
    for body in BODIES:
        stored: dict[str, Any] = {}
        for policy in ("capture", "off"):
            name = f"{body.__name__}_{policy}"
            with (tmp_path / "data" / name).with_suffix(".npy").open("rb") as f:
                stored[policy] = np.load(f)
            md = {
                k: v.value for k, v in res.asset_materializations_for_node(name)[0].metadata.items()
            }
            assert md[m.OBTAINED] == ("captured" if policy == "capture" else "off"), name
        tracked, plain = stored["capture"], stored["off"]
        with np.errstate(all="ignore"):
            want = body(RAW.copy())
        assert tracked.dtype == plain.dtype == want.dtype
        assert tracked.tobytes() == plain.tobytes() == want.tobytes(), body.__name__
