"""Detector frame -> calibrated -> smoothed -> thresholded -> hotspots -> summary, in NumPy.

Beside the tile summary, the DSLog thesis' motivating example (§2.2) literally: smooth ->
threshold -> ``np.argwhere`` -> crop a window around each hotspot -> summary
(``hotspot_coords``, ``hotspot_windows``, ``window_summary``). ``np.argwhere`` returns int64
coordinates that carry positional lineage (row k <- the thresholded cell it names, and so,
through the box blur, a 3 x 3 neighbourhood of the raw frame); the crop indexes the calibrated
frame with those coordinates, so each window cell comes from its calibrated cell and (in
considered mode) the coordinates that placed it.

Every step after the two source frames is plain NumPy run under the annotator by
``@tracked_asset``: the lineage of each output cell is what NumPy actually did (the padding
and shifted sums of the box blur, the cells the threshold kept, the cell each tile maximum
picked, the order the sort produced). Only functions the annotator supports are used (docs,
"NumPy capture").
"""

import dagster as dg
import numpy as np

from dslog_dagster import plain, tracked_asset, tracked_multi_asset

GROUP = "hotspots"
KINDS = {"numpy"}


class FrameConfig(dg.Config):
    """The synthetic detector frame: a noisy background with a few bright blobs."""

    seed: int = 7
    size: int = 128
    blobs: int = 6


class ThresholdConfig(dg.Config):
    """A cell is hot when it exceeds the frame mean by `sigmas` standard deviations."""

    sigmas: float = 2.5


class TileConfig(dg.Config):
    """Hotspots are located per square tile of `tile` x `tile` cells."""

    tile: int = 16


class SummaryConfig(dg.Config):
    """How many of the brightest hotspots the summary keeps."""

    top: int = 5


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def raw_frame(config: FrameConfig) -> np.ndarray:
    """A detector frame (source: lineage starts here)."""
    rng = np.random.default_rng(config.seed)
    n = config.size
    yy, xx = np.mgrid[0:n, 0:n]
    frame = rng.normal(100.0, 4.0, size=(n, n))
    for _ in range(config.blobs):
        cy, cx = rng.uniform(8, n - 8, size=2)
        amp, width = rng.uniform(40.0, 90.0), rng.uniform(1.5, 3.5)
        frame += amp * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width**2))
    return frame


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def dark_frame(config: FrameConfig) -> np.ndarray:
    """The detector's dark current per pixel (source)."""
    rng = np.random.default_rng(config.seed + 1)
    return rng.normal(95.0, 1.0, size=(config.size, config.size))


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def calibrated(raw_frame: np.ndarray, dark_frame: np.ndarray) -> np.ndarray:
    """Dark-frame subtraction: each cell depends on the same cell of both frames."""
    return raw_frame - dark_frame


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def smoothed(calibrated: np.ndarray) -> np.ndarray:
    """3 x 3 box blur with edge padding: each cell depends on its (clamped) neighbourhood."""
    h, w = calibrated.shape
    padded = np.pad(calibrated, 1, mode="edge")
    total = padded[0:h, 0:w]
    for dy in range(3):
        for dx in range(3):
            if dy or dx:
                total = total + padded[dy : dy + h, dx : dx + w]
    return total / 9.0


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def thresholded(
    context: dg.AssetExecutionContext, config: ThresholdConfig, smoothed: np.ndarray
) -> np.ndarray:
    """Keep hot cells, zero the rest: a kept cell depends on itself only (the comparison
    against the frame statistics is control, not data)."""
    level = smoothed.mean() + config.sigmas * smoothed.std()
    context.log.info(f"threshold level {plain(level):.2f}")
    return np.where(smoothed > level, smoothed, 0.0)


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def hotspots(config: TileConfig, thresholded: np.ndarray) -> np.ndarray:
    """Peak intensity per tile: each tile's value is the one cell its maximum picked."""
    h, w = thresholded.shape
    t = config.tile
    tiles = thresholded[: h - h % t, : w - w % t].reshape(h // t, t, w // t, t)
    return tiles.max(axis=(1, 3))


@tracked_multi_asset(
    group_name=GROUP,
    outs={
        "top_hotspots": dg.AssetOut(kinds=KINDS, code_version="1"),
        "peak_stats": dg.AssetOut(kinds=KINDS, code_version="1"),
    },
)
def summary(config: SummaryConfig, hotspots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The brightest `top` tile peaks (descending) and (max, total, mean) of all peaks."""
    peaks = hotspots.ravel()
    top = np.sort(peaks)[::-1][: config.top]
    stats = np.stack([peaks.max(), peaks.sum(), peaks.mean()])
    return top, stats


class WindowConfig(dg.Config):
    """Each hotspot's window reaches `half` cells to every side (edge-clamped)."""

    half: int = 2


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def hotspot_coords(thresholded: np.ndarray) -> np.ndarray:
    """The (row, column) of every hot cell, as np.argwhere gives them (k x 2 int64): row k
    comes from the thresholded cell it names."""
    return np.argwhere(thresholded)


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def hotspot_windows(
    config: WindowConfig, calibrated: np.ndarray, hotspot_coords: np.ndarray
) -> np.ndarray:
    """The calibrated frame around each hotspot (k x w x w, edge-clamped), indexed with the
    coordinates: each window cell comes from one calibrated cell."""
    h = config.half
    padded = np.pad(calibrated, h, mode="edge")
    coords = hotspot_coords.astype(np.intp)  # positions again (the asset arrives as float64)
    offsets = np.arange(2 * h + 1)
    rows = coords[:, 0:1] + offsets  # padded row of each window row (k x w)
    cols = coords[:, 1:2] + offsets
    return padded[rows[:, :, None], cols[:, None, :]]


@tracked_asset(group_name=GROUP, kinds=KINDS, code_version="1")
def window_summary(hotspot_windows: np.ndarray) -> np.ndarray:
    """Per hotspot: the window's peak and mean (k x 2)."""
    k = hotspot_windows.shape[0]
    flat = hotspot_windows.reshape(k, -1)
    return np.stack([flat.max(axis=1), flat.mean(axis=1)], axis=1)


PIPELINE = [
    raw_frame,
    dark_frame,
    calibrated,
    smoothed,
    thresholded,
    hotspots,
    summary,
    hotspot_coords,
    hotspot_windows,
    window_summary,
]
#: Array path of a backward lineage query from a top hotspot to the raw frame.
PATH_TO_RAW = ["top_hotspots", "hotspots", "thresholded", "smoothed", "calibrated", "raw_frame"]
#: Array path from a hotspot coordinate (a row of ``hotspot_coords``) to the raw frame.
COORD_TO_RAW = ["hotspot_coords", "thresholded", "smoothed", "calibrated", "raw_frame"]
