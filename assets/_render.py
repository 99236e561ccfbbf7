"""Turning cell sets into metadata the Dagster UI renders: pictures and preview tables.

Pictures are drawn from the boxes of a :class:`CellSet`, never from a full mask of the array,
so a query over a 100k × 100k array costs a few hundred kilobytes of picture, not 10 GB of
booleans. The array is projected onto its last two axes and binned down to at most
``MAX_PICTURE_SIDE`` cells per side; a bin is lit when any of its cells is selected. The
picture is drawn like the tracked outputs' (:func:`dslog_dagster.pictures.render`): axes
counting the array's cells, the selection in the first highlight colour, a legend saying how
many cells it is, and a caption that is never cut.
"""

from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster.core.query import CellSet
from dslog_dagster.pictures import png_markdown, render

MAX_PICTURE_SIDE = 256
"""Bins per side of a picture (larger arrays are binned down)."""
MAX_PICTURE_BOXES = 200_000
"""Boxes drawn at most; a bigger result says so under its picture."""


def binned_mask(cells: CellSet, max_side: int = MAX_PICTURE_SIDE) -> tuple[np.ndarray, str]:
    """A ≤ ``max_side``² boolean picture of ``cells`` and a caption saying how it was made."""
    grid, note, _ = _binned(cells, max_side)
    return grid, note


def _binned(cells: CellSet, max_side: int) -> tuple[np.ndarray, str, tuple[int, int]]:
    """:func:`binned_mask` and the cells per bin along the grid's rows and columns."""
    shape = cells.shape
    if len(shape) == 0:
        return np.full((1, 1), cells.count() > 0), "0-d array", (1, 1)
    axes = [len(shape) - 1] if len(shape) == 1 else [len(shape) - 2, len(shape) - 1]
    sizes = [shape[a] for a in axes]
    bins = [max(1, -(-n // max_side)) for n in sizes]
    grid_shape = [max(1, -(-n // b)) for n, b in zip(sizes, bins, strict=True)]
    grid = np.zeros(grid_shape, dtype=bool)
    k = min(cells.n_boxes, MAX_PICTURE_BOXES)
    lo = cells.lo[:k, axes] // np.asarray(bins, dtype=np.int64)
    hi = cells.hi[:k, axes] // np.asarray(bins, dtype=np.int64)
    for a, b in zip(lo, hi, strict=True):
        grid[tuple(slice(int(x), int(y) + 1) for x, y in zip(a, b, strict=True))] = True
    notes = []
    if len(shape) > 2:
        notes.append(f"projected onto axes {axes[0]} and {axes[1]}")
    if any(b > 1 for b in bins):
        notes.append("binned " + "×".join(map(str, bins)) + " cells per pixel")
    if k < cells.n_boxes:
        notes.append(f"first {k:,} of {cells.n_boxes:,} boxes drawn")
    per_bin = (1, bins[0]) if len(bins) == 1 else (bins[0], bins[1])
    return (grid.reshape(1, -1) if grid.ndim == 1 else grid), "; ".join(notes), per_bin


def cells_markdown(title: str, cells: CellSet) -> str:
    """Markdown with a caption and a picture of ``cells`` (kept short: the OSS UI shows
    markdown under 1000 characters inline, longer behind a "[Show Markdown]" link)."""
    grid, note, per_bin = _binned(cells, MAX_PICTURE_SIDE)
    total = int(np.prod(cells.shape))
    count = cells.count()
    caption = f"**{title}**: {count:,} of {total:,} cells, shape {tuple(cells.shape)}"
    if note:
        caption += f" ({note})"
    png = render(
        highlights=[(f"selected: {count:,} cell{'s' * (count != 1)}", grid)],
        title=f"{title}, shape {tuple(cells.shape)}",
        notes=[note] if note else (),
        cells_per_bin=per_bin,
    ).png
    return f"{caption}\n\n{png_markdown(png, title)}"


def boxes_preview(cells: CellSet, rows: int) -> dg.TableMetadataValue:
    """The first ``rows`` boxes of ``cells`` as a table (inclusive bounds per axis)."""
    rank = cells.rank
    columns = [dg.TableColumn("box", "int")]
    for i in range(rank):
        columns += [dg.TableColumn(f"lo_{i}", "int"), dg.TableColumn(f"hi_{i}", "int")]
    columns.append(dg.TableColumn("cells", "int"))
    records = []
    k = min(rows, cells.n_boxes)
    for j in range(k):
        data: dict[str, Any] = {"box": j}
        for i in range(rank):
            data[f"lo_{i}"] = int(cells.lo[j, i])
            data[f"hi_{i}"] = int(cells.hi[j, i])
        data["cells"] = int(np.prod(cells.hi[j] - cells.lo[j] + 1)) if rank else 1
        records.append(dg.TableRecord(data))
    return dg.MetadataValue.table(records, schema=dg.TableSchema(columns=columns))
