"""Turning cell sets into metadata the Dagster UI renders: small pictures and preview tables.

Pictures are drawn from the boxes of a :class:`CellSet`, never from a full mask of the array,
so a query over a 100k × 100k array costs a few hundred kilobytes of picture, not 10 GB of
booleans (:func:`~dslog_dagster.core.display.binned_mask`, shared with the notebook pictures).
"""

from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster.core.display import binned_mask
from dslog_dagster.core.query import CellSet
from dslog_dagster.pictures import cells_png, png_markdown


def cells_markdown(title: str, cells: CellSet) -> str:
    """Markdown with a caption and a picture of ``cells`` (kept short: the OSS UI shows
    markdown under 1000 characters inline, longer behind a "[Show Markdown]" link)."""
    grid, note = binned_mask(cells.shape, cells.lo, cells.hi)
    png = cells_png(grid)
    total = int(np.prod(cells.shape))
    caption = f"**{title}**: {cells.count():,} of {total:,} cells, shape {tuple(cells.shape)}"
    if note:
        caption += f" ({note})"
    return f"{caption}\n\n{png_markdown(png, title)}"


def boxes_preview(cells: CellSet, rows: int) -> dg.TableMetadataValue:
    """The first ``rows`` boxes of ``cells`` as a table, half-open ``start_i``/``stop_i`` per
    axis (as ``array[start:stop]`` selects, the convention of every exported cell form)."""
    rank = cells.rank
    columns = [dg.TableColumn("box", "int")]
    for i in range(rank):
        columns += [dg.TableColumn(f"start_{i}", "int"), dg.TableColumn(f"stop_{i}", "int")]
    columns.append(dg.TableColumn("cells", "int"))
    records = []
    k = min(rows, cells.n_boxes)
    for j in range(k):
        data: dict[str, Any] = {"box": j}
        for i in range(rank):
            data[f"start_{i}"] = int(cells.start[j, i])
            data[f"stop_{i}"] = int(cells.stop[j, i])
        data["cells"] = int(np.prod(cells.hi[j] - cells.lo[j] + 1)) if rank else 1
        records.append(dg.TableRecord(data))
    return dg.MetadataValue.table(records, schema=dg.TableSchema(columns=columns))
