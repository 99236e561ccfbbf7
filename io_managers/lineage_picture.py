"""The ``dslog/lineage`` picture of a tracked output: which input cells its telling cells
come from.

A reader wants to see the output, find the cells that matter and follow them back. So the
picture is the output's own data as a heat map with a few *informative* cells highlighted in
distinct colours — the hottest cells, spread apart (the largest values; a thresholded mask's
lit cells), never a blind sample that may land on cold cells and show an empty square — and
each input drawn with the cells feeding each highlighted cell in the same colour, with a
legend saying which cell is which (:func:`dslog_dagster.pictures.render`). A DataFrame output
has no values here (its rows stay in Spark): it is drawn as a grid with its column names, and
the followed cells are spread over its rows and columns.

Drawing costs about as much as a step served from a reuse view, and a served view hands the
same tables on every hit, so the markdown is cached: the key is everything it is computed from
(output name, shape, columns, how many cells, a digest of the values, each input's name and
table digest), so a hit is exactly what a fresh render would give.
"""

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.format.blob import table_digest
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.query import CellSet, prepare
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.reuse.keys import content_hash
from dslog_dagster.pictures import HIGHLIGHT_RGB, Picture, format_value, png_markdown, render

__all__ = [
    "LineagePictures",
    "clear_picture_cache",
    "hottest_cells",
    "lineage_markdown",
    "lineage_pictures",
    "sample_cells",
]

Lineage = LineageRelation | LineageTable

#: Most cells a picture follows (one colour each).
MAX_CELLS = len(HIGHLIGHT_RGB)


def sample_cells(shape: Sequence[int], k: int) -> np.ndarray:
    """``k`` output cells (flat indices) spread evenly over an array, first and last included."""
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, size - 1, num=min(k, size)).round().astype(np.int64))


def hottest_cells(values: npt.ArrayLike, k: int) -> np.ndarray:
    """Flat indices of up to ``k`` cells with the largest values, spread apart, hottest first.

    Candidates are the ``16 k`` largest values (NaN never counts); a candidate closer than
    ``max(h, w) / 2k`` cells (in the 2-d grid the array is drawn as) to one already chosen is
    passed over while others remain, so four cells of one blob do not hide the others. Falls
    back to :func:`sample_cells` when no value is finite.
    """
    v = np.asarray(values)
    if v.dtype.kind == "c":
        v = np.abs(v)
    flat = np.asarray(v, dtype=np.float64).reshape(-1)
    n = flat.size
    if n == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    score = np.where(np.isfinite(flat), flat, -np.inf)
    if not np.isfinite(score).any():
        return sample_cells(v.shape, k)
    m = min(n, 16 * k)
    cand = np.argpartition(-score, m - 1)[:m] if m < n else np.arange(n)
    cand = cand[np.argsort(-score[cand], kind="stable")]
    cand = cand[np.isfinite(score[cand])]
    w = v.shape[-1] if v.ndim >= 1 else 1
    rows, cols = cand // w, cand % w
    h = max(1, n // max(1, w))
    gap = max(1, max(h, w) // (2 * k))
    chosen: list[int] = []
    for i in range(cand.size):
        if len(chosen) == k:
            break
        if all(
            max(abs(int(rows[i]) - int(rows[j])), abs(int(cols[i]) - int(cols[j]))) >= gap
            for j in chosen
        ):
            chosen.append(i)
    for i in range(cand.size):  # fewer far-apart cells than k: the next hottest
        if len(chosen) == k:
            break
        if i not in chosen:
            chosen.append(i)
    return np.asarray(cand[chosen], dtype=np.int64)


def _feeding(lineage: Lineage, cells: np.ndarray) -> list[np.ndarray]:
    """Per output cell of ``cells`` (flat), the flat input cells feeding it: interval queries
    on a compressed table (never expanding it), a scan of a relation's pairs."""
    if isinstance(lineage, LineageTable):
        hop = prepare(lineage)
        return [
            np.unique(hop.run(CellSet.from_flat(lineage.out_shape, [c]), "backward").to_flat())
            for c in cells.tolist()
        ]
    of = _flat(lineage.out_cols, lineage.out_shape)
    inf = _flat(lineage.in_cols, lineage.in_shape)
    return [np.unique(inf[of == c]) for c in cells.tolist()]


def _flat(cols: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    if len(shape) == 0:
        return np.zeros(cols.shape[1] if cols.ndim == 2 else 0, dtype=np.int64)
    flat: np.ndarray = np.ravel_multi_index(tuple(cols), tuple(shape)).astype(np.int64)
    return flat


def _cell_name(cell: int, shape: Sequence[int], columns: Sequence[str] | None) -> str:
    if not shape:
        return "()"
    idx = tuple(int(i) for i in np.unravel_index(cell, tuple(shape)))
    if columns is not None and len(idx) == 2 and len(columns) == shape[1]:
        return f"row {idx[0]:,}, {columns[idx[1]]}"
    return "(" + ", ".join(f"{i:,}" for i in idx) + ")"


def lineage_markdown(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, Lineage]],
    k: int,
    max_pictures: int = 4,
    *,
    values: npt.ArrayLike | None = None,
    columns: Sequence[str] | None = None,
) -> str:
    """Markdown with the output's picture and one per input (module docstring).

    Args:
        output: the output array's name.
        out_shape: its shape.
        inputs: ``(input name, lineage)`` per input.
        k: how many output cells to follow (at most :data:`MAX_CELLS`).
        max_pictures: inputs drawn at most (the rest are named in the caption).
        values: the output's data (``None``: a neutral grid; the cells followed are spread
            evenly).
        columns: the output's column names (a DataFrame).
    """
    arr = None if values is None else np.asarray(values)
    if arr is not None and tuple(arr.shape) != tuple(out_shape):
        arr = None  # not the array the lineage describes: draw the grid only
    key = _picture_key(output, out_shape, inputs, k, max_pictures, arr, columns)
    if key is not None:
        with _picture_lock:
            hit = _pictures.get(key)
            if hit is not None:
                _pictures.move_to_end(key)
                return hit
    text = _render_markdown(output, out_shape, inputs, k, max_pictures, arr, columns)
    if key is not None:
        with _picture_lock:
            _pictures[key] = text
            while len(_pictures) > _PICTURE_CACHE_SIZE:
                _pictures.popitem(last=False)
    return text


_PICTURE_CACHE_SIZE = 256
_pictures: "OrderedDict[tuple[Any, ...], str]" = OrderedDict()
_picture_lock = threading.Lock()


def _picture_key(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, Lineage]],
    k: int,
    max_pictures: int,
    values: np.ndarray | None,
    columns: Sequence[str] | None,
) -> tuple[Any, ...] | None:
    """The cache key of a lineage picture, ``None`` when an input is an uncompressed relation
    (a capture: drawn once, never served again, so not worth digesting)."""
    if not all(isinstance(rel, LineageTable) for _, rel in inputs):
        return None
    digests = tuple((name, table_digest(rel)) for name, rel in inputs)  # type: ignore[arg-type]
    data = None
    if values is not None:
        data = content_hash(values)  # XXH3-128 of dtype, shape and bytes
    return (
        output,
        tuple(int(d) for d in out_shape),
        int(k),
        int(max_pictures),
        digests,
        data,
        None if columns is None else tuple(columns),
    )


def clear_picture_cache() -> None:
    """Forget every cached lineage picture (tests)."""
    with _picture_lock:
        _pictures.clear()


def _render_markdown(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, Lineage]],
    k: int,
    max_pictures: int,
    values: np.ndarray | None,
    columns: Sequence[str] | None,
) -> str:
    drawn = lineage_pictures(output, out_shape, inputs, k, max_pictures, values, columns)
    pictures = " ".join(png_markdown(pic.png, alt) for alt, pic in drawn.pictures)
    return drawn.head + "\n\n" + pictures


@dataclass(frozen=True)
class LineagePictures:
    """What :func:`lineage_pictures` drew.

    Attributes:
        head: the markdown sentence above the pictures.
        cells: the followed output cells (flat indices), in highlight-colour order.
        pictures: ``(alt text, picture)``: the output's first, then one per drawn input.
    """

    head: str
    cells: np.ndarray
    pictures: list[tuple[str, Picture]]


def lineage_pictures(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, Lineage]],
    k: int,
    max_pictures: int = 4,
    values: np.ndarray | None = None,
    columns: Sequence[str] | None = None,
) -> LineagePictures:
    """The pictures of :func:`lineage_markdown` (uncached), with where everything is."""
    k = max(1, min(k, MAX_CELLS))
    if values is not None and values.size and values.dtype.kind in "biufc":
        cells = hottest_cells(values, k)
        how = "hottest"
    else:
        cells = sample_cells(out_shape, k)
        how = "sampled"
        values = None
    names = [_cell_name(int(c), out_shape, columns) for c in cells]
    size = int(np.prod(out_shape, dtype=np.int64))
    out_masks = []
    for c, name in zip(cells, names, strict=True):
        mask = np.zeros(size, dtype=bool)
        mask[int(c)] = True
        label = name
        if values is not None:
            label += f" = {_value(values.reshape(-1)[int(c)])}"
        out_masks.append((label, mask.reshape(tuple(out_shape))))
    n = len(cells)
    plural = "s" * (n != 1)
    pictures = [
        (
            output,
            render(
                values,
                out_masks,
                shape=out_shape,
                title=f"{output}: the {n} {how} cell{plural}",
                columns=columns,
            ),
        )
    ]
    for name, rel in inputs[:max_pictures]:
        in_size = int(np.prod(rel.in_shape, dtype=np.int64))
        in_masks = []
        for feeding, cname in zip(_feeding(rel, cells), names, strict=True):
            mask = np.zeros(in_size, dtype=bool)
            mask[feeding] = True
            in_masks.append((f"{feeding.size:,} cells feed {cname}", mask.reshape(rel.in_shape)))
        pic = render(shape=rel.in_shape, highlights=in_masks, title=f"{name}: cells feeding them")
        pictures.append((f"{name} cells feeding {output}", pic))
    head = (
        f"**Where the {how} cell{plural} of `{output}` come from**: one colour per output "
        "cell, the same colour on the input cells feeding it."
    )
    rest = [name for name, _ in inputs[max_pictures:]]
    if rest:
        head += f" Not drawn: {', '.join(f'`{r}`' for r in rest)}."
    return LineagePictures(head, cells, pictures)


def _value(x: Any) -> str:
    return format_value(float(abs(x) if isinstance(x, complex) else x))
