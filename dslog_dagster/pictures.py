"""PNG pictures of arrays and cell selections a person can read, for Dagster metadata.

The OSS Dagster UI renders markdown metadata with an embedded ``data:image/png`` URI inline
(there is no image metadata type), so pictures are PNG bytes turned into markdown with
:func:`png_markdown`. The IO managers draw an asset's own data as a heat map with the cells
whose lineage they follow highlighted, and each input with the cells feeding them
(:mod:`dslog_dagster.io_managers.metadata`); the lineage-query assets draw the selected cells
over the target array; notebooks call :func:`cells_png`. Keep ``cells_png``'s signature stable.

Every picture has, top to bottom: a caption (wrapped to the picture's width, never cut), the
column axis (indices, or a frame's column names), the grid with the row axis at its left, a
colour bar (heat maps: the value range), the legend (one coloured swatch per highlighted set)
and notes (how the array was folded or pooled).

How an array of any rank becomes a grid:

* 0-d: one cell; 1-d of length ``n``: a strip of ``1 x n`` cells;
* 2-d ``(h, w)``: ``h`` rows, ``w`` columns, as NumPy prints it;
* rank ``k > 2``: every leading axis is folded into the rows, ``(d0, ..., dk-1) -> (d0 * ... *
  dk-2, dk-1)`` (C order): the 2-d slices ``a[i, ...]`` are stacked top to bottom.

Big grids are *pooled* by an integer factor per axis: values by their maximum (a hot cell never
disappears; NaN only where every pooled cell is NaN) and selections by "any" (a pixel is
highlighted when any cell it covers is), so a highlighted cell never disappears and a
4000 x 4000 grid renders in milliseconds into a few KB. Small grids are scaled up by an
integer factor so that a cell is a visible square, with thin grid lines when cells are big
enough; a highlighted set of a few cells smaller than a few pixels also gets a ring in its
colour.

Colours: values go from light to dark grey (:data:`RAMP_LEVELS` levels; non-finite values are
:data:`NAN_RGB`), highlights use :data:`HIGHLIGHT_RGB` in order (red first), which no grey
level equals, so a test or a reader can find them in the image.
"""

import base64
import functools
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "HIGHLIGHT_RGB",
    "MAX_SIDE",
    "NAN_RGB",
    "Picture",
    "cells_png",
    "format_value",
    "png_markdown",
    "render",
    "to_2d",
]

#: Longest side of the grid area in pixels (axes, caption and legend come on top).
MAX_SIDE = 480
#: A heat map is pooled to at most this many cells per side (keeps its PNG a few KB).
MAX_VALUE_CELLS = 128
# Small grids are scaled up until their longer side reaches about this many pixels.
_MIN_SIDE = 256
# No side of the grid is thinner than this (a 1-d strip gets this height).
_MIN_THICKNESS = 16
# Grid lines are drawn when a cell is at least this many pixels wide.
_GRID_FROM = 8
# A frame's column names are drawn when there are at most this many columns.
_MAX_NAMED_COLUMNS = 32
# Captions wrap at this width at most (the picture widens up to it for a long caption).
_TEXT_WIDTH = 560

#: Grey levels of a heat map, light (lowest value) to dark (highest). Few on purpose: a
#: picture is stored in every materialization event, and 32 levels keep a noisy 512 x 512
#: heat map at a third of the bytes of 200 levels, with no visible banding at this size.
RAMP_LEVELS = 32
_LIGHT, _DARK = 242, 40
#: Colour of non-finite values in a heat map.
NAN_RGB = (255, 236, 160)
#: Highlight colours, in the order sets are given (matching across an output and its inputs).
HIGHLIGHT_RGB = (
    (214, 39, 40),  # red
    (255, 127, 14),  # orange
    (44, 160, 44),  # green
    (227, 82, 194),  # magenta
    (148, 103, 189),  # purple
    (140, 86, 75),  # brown
    (23, 190, 207),  # cyan
    (188, 189, 34),  # olive
)
_EMPTY_RGB = (225, 225, 232)  # a cell of a picture without values
_NAN, _BG, _TEXT, _AXIS, _EMPTY, _LINE = range(RAMP_LEVELS, RAMP_LEVELS + 6)
_HL = RAMP_LEVELS + 8
_PALETTE = (
    [(round(_LIGHT + (_DARK - _LIGHT) * i / (RAMP_LEVELS - 1)),) * 3 for i in range(RAMP_LEVELS)]
    + [NAN_RGB, (255, 255, 255), (30, 30, 30), (120, 120, 120), _EMPTY_RGB, (255, 255, 255)]
    + [(255, 255, 255)] * 2
    + list(HIGHLIGHT_RGB)
)
_PALETTE_BYTES = bytes(c for rgb in _PALETTE for c in rgb)


@functools.cache
def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=11)
    except TypeError:  # Pillow < 10.1: the bitmap font only
        return ImageFont.load_default()


@functools.lru_cache(maxsize=4096)
def _text_width(text: str) -> int:
    """Pixels ``text`` takes as drawn on a palette image (un-antialiased glyphs, which are
    wider than ``getlength`` says: measuring that way cut captions)."""
    if not text:
        return 0
    return int(_font().getmask(text, mode="1").size[0]) + 2


_LINE_H = 14


def to_2d(mask: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """The 2-d boolean grid a mask of any rank is drawn as (see the module docstring)."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        m = m.astype(bool)
    return _fold(m)


def _fold(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0:
        return a.reshape(1, 1)
    if a.ndim == 1:
        return a.reshape(1, -1)
    if a.ndim == 2:
        return a
    return a.reshape(-1, a.shape[-1])


def _pad(grid: np.ndarray, fr: int, fc: int, fill: object) -> np.ndarray:
    h, w = grid.shape
    hp, wp = -(-h // fr) * fr, -(-w // fc) * fc
    if (hp, wp) == (h, w):
        return grid
    padded = np.full((hp, wp), fill, dtype=grid.dtype)
    padded[:h, :w] = grid
    return padded


def _any_pool(grid: npt.NDArray[np.bool_], fr: int, fc: int) -> npt.NDArray[np.bool_]:
    """Pool by ``fr`` rows and ``fc`` columns; a pixel is on when any covered cell is."""
    return _pool(grid, fr, fc, False, np.logical_or)


def _max_pool(grid: npt.NDArray[np.float64], fr: int, fc: int) -> npt.NDArray[np.float64]:
    """Pool by the maximum, ignoring NaN unless every covered cell is NaN (``fmax``)."""
    return _pool(grid, fr, fc, np.nan, np.fmax)


def _pool(grid: npt.NDArray[Any], fr: int, fc: int, fill: Any, op: np.ufunc) -> npt.NDArray[Any]:
    """Reduce ``fr`` × ``fc`` blocks with the binary ufunc ``op`` (padding with ``fill``).

    Element-wise ``op`` over the strided slices of each axis: a reduction over a short inner
    axis is several times slower in NumPy."""
    if fr == fc == 1:
        return grid
    g = _pad(grid, fr, fc, fill)
    if fc > 1:
        cols = g[:, 0::fc].copy()
        for i in range(1, fc):
            op(cols, g[:, i::fc], out=cols)
        g = cols
    if fr > 1:
        rows = g[0::fr].copy()
        for i in range(1, fr):
            op(rows, g[i::fr], out=rows)
        g = rows
    return g


def _as_float(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    v = np.asarray(values)
    if v.dtype.kind == "c":
        v = np.abs(v)
    return np.asarray(v, dtype=np.float64)


def _ticks(n: int, at_most: int = 5) -> list[int]:
    """Up to ``at_most`` round indices in ``[0, n)``: 0, multiples of a 1-2-5 step, ``n - 1``."""
    if n <= 1:
        return [0]
    step = 1
    for mag in (10**e for e in range(19)):
        for s in (1, 2, 5):
            if (n - 1) // (s * mag) + 1 <= at_most:
                step = s * mag
                break
        else:
            continue
        break
    ticks = list(range(0, n, step))
    if ticks[-1] != n - 1:
        if (n - 1 - ticks[-1]) < step / 2 and len(ticks) > 1:
            ticks[-1] = n - 1
        else:
            ticks.append(n - 1)
    return ticks


def format_value(x: float) -> str:
    """A value for a legend or a colour bar: 3 significant digits, thousands separated."""
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.2e}"
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{max(0, 2 - math.floor(math.log10(abs(x))))}f}" if x else "0"


def _wrap(text: str, width: int) -> list[str]:
    """Lines of ``text`` no wider than ``width`` pixels (a word wider than that is its own
    line; the picture is widened to fit it)."""
    lines: list[str] = []
    for para in text.split("\n"):
        line = ""
        for word in para.split(" "):
            cand = word if not line else f"{line} {word}"
            if line and _text_width(cand) > width:
                lines.append(line)
                line = word
            else:
                line = cand
        lines.append(line)
    return lines


def _plain(text: str) -> str:
    """``text`` in the glyphs the default font has (it draws ``×`` as a box)."""
    return text.replace("×", "x").replace("←", "<-").replace("→", "->")


@dataclass(frozen=True)
class Picture:
    """A rendered picture and where things are in it (tests sample its pixels there).

    Attributes:
        png: the PNG file's bytes.
        size: ``(width, height)`` in pixels.
        grid_origin: pixel ``(x, y)`` of the grid's top-left corner.
        cell_px: ``(height, width)`` in pixels of one drawn grid cell.
        pool: ``(rows, columns)`` of array cells per drawn grid cell.
        caption_box: ``(x0, y0, x1, y1)`` of the caption's text (empty when none).
        legend_swatches: ``(x0, y0, x1, y1)`` of each legend swatch, in highlight order.
    """

    png: bytes
    size: tuple[int, int]
    grid_origin: tuple[int, int]
    cell_px: tuple[int, int]
    pool: tuple[int, int]
    caption_box: tuple[int, int, int, int]
    legend_swatches: tuple[tuple[int, int, int, int], ...]

    def cell_box(self, row: int, col: int) -> tuple[int, int, int, int]:
        """Pixel box ``(x0, y0, x1, y1)`` (exclusive ends) of the 2-d grid cell ``(row, col)``
        (after folding; pooled cells share a box)."""
        x0 = self.grid_origin[0] + (col // self.pool[1]) * self.cell_px[1]
        y0 = self.grid_origin[1] + (row // self.pool[0]) * self.cell_px[0]
        return (x0, y0, x0 + self.cell_px[1], y0 + self.cell_px[0])


@dataclass(frozen=True)
class _Grid:
    """The grid's pixels (palette indices) and how array cells map onto them."""

    pixels: np.ndarray
    named: bool
    fr: int
    fc: int
    row_px: int
    col_px: int
    lo: float
    hi: float
    has_nan: bool
    pooled_masks: list[np.ndarray]


def _grid(
    vals: np.ndarray | None,
    masks: list[np.ndarray],
    h: int,
    w: int,
    columns: Sequence[str] | None,
) -> _Grid:
    """Pool or scale the 2-d grid, colour the values and the highlighted sets."""
    named = columns is not None and 0 < len(columns) <= _MAX_NAMED_COLUMNS and len(columns) == w
    # pooling: square cells, except a frame's named columns (each keeps its own column)
    limit = MAX_VALUE_CELLS if vals is not None else MAX_SIDE
    fr = max(1, -(-h // limit))
    fc = 1 if named else max(1, -(-w // limit))
    if not named:
        # square pixels; never a factor beyond the grid's side (a 10^7 × 3 frame would be
        # padded to 10^7 × 20,000 cells to pool three columns into the one pixel it gets)
        sq = max(fr, fc)
        fr, fc = min(sq, h), min(sq, w)
    gh, gw = -(-h // fr), -(-w // fc)
    if named:
        assert columns is not None
        col_px = max(24, *(_text_width(c) + 8 for c in columns))
        row_px = max(1, min(16, _MIN_SIDE // gh))
    else:
        up = max(1, min(max(1, _MIN_SIDE // max(gh, gw)), MAX_SIDE // max(gh, gw)))
        row_px = col_px = up
        if gh * row_px < _MIN_THICKNESS:
            row_px = -(-_MIN_THICKNESS // gh)
        if gw * col_px < _MIN_THICKNESS:
            col_px = -(-_MIN_THICKNESS // gw)
    # the grid's palette indices
    lo = hi = 0.0
    has_nan = False
    if vals is not None:
        pooled = _max_pool(vals, fr, fc)
        finite = np.isfinite(pooled)
        has_nan = not bool(finite.all())
        if finite.any():
            lo, hi = float(pooled[finite].min()), float(pooled[finite].max())
        with np.errstate(invalid="ignore", over="ignore"):
            if hi > lo:
                scaled = (pooled - lo) * ((RAMP_LEVELS - 1) / (hi - lo))
            else:
                scaled = np.full(pooled.shape, RAMP_LEVELS // 3, dtype=np.float64)
            idx = np.where(finite, np.clip(scaled, 0, RAMP_LEVELS - 1), _NAN).astype(np.uint8)
    else:
        idx = np.full((gh, gw), _EMPTY, dtype=np.uint8)
    pooled_masks = [_any_pool(mk, fr, fc) for mk in masks]
    for k in range(len(pooled_masks) - 1, -1, -1):  # the first set on top
        idx[pooled_masks[k]] = _HL + k
    pixels = np.repeat(np.repeat(idx, row_px, axis=0), col_px, axis=1)
    if min(row_px, col_px) >= _GRID_FROM:
        pixels[::row_px, :] = _LINE
        pixels[:, ::col_px] = _LINE
    return _Grid(pixels, named, fr, fc, row_px, col_px, lo, hi, has_nan, pooled_masks)


def _draw_axes(
    draw: ImageDraw.ImageDraw,
    g: "_Grid",
    columns: Sequence[str] | None,
    cells_per_bin: tuple[int, int],
    hw: tuple[int, int],
    frame: tuple[int, int, int, int],
) -> None:
    """Column axis above the grid (indices or names), row axis left of it, and rings around
    small highlighted sets whose cells are only a few pixels wide."""
    left, top, ay, width = frame
    rb, cb = cells_per_bin
    h, w = hw
    font = _font()
    row_px, col_px, fr, fc = g.row_px, g.col_px, g.fr, g.fc
    grid_h = g.pixels.shape[0]
    row_ticks = _ticks(h * rb)
    row_labels = [f"{t:,}" for t in row_ticks]
    col_ticks = [] if g.named else _ticks(w * cb)
    col_labels = [f"{t:,}" for t in col_ticks]
    # column axis above the grid
    if g.named:
        assert columns is not None
        for j, name in enumerate(columns):
            cx = left + j * col_px + (col_px - _text_width(name)) // 2
            draw.text((cx, ay + 1), name, fill=_TEXT, font=font)
    else:
        for t, s in zip(col_ticks, col_labels, strict=True):
            cx = left + (t // cb // fc) * col_px + col_px // 2
            tx = min(max(0, cx - _text_width(s) // 2), width - _text_width(s) - 1)
            draw.text((tx, ay), s, fill=_TEXT, font=font)
            draw.line([(cx, top - 3), (cx, top - 1)], fill=_AXIS)
    # row axis left of the grid
    for t, s in zip(row_ticks, row_labels, strict=True):
        cy = top + (t // rb // fr) * row_px + row_px // 2
        ty = min(max(top - 2, cy - _LINE_H // 2), top + grid_h - _LINE_H + 2)
        draw.text((left - 6 - _text_width(s), ty), s, fill=_TEXT, font=font)
        draw.line([(left - 4, cy), (left - 2, cy)], fill=_AXIS)
    # rings around small highlighted sets whose cells are only a few pixels wide
    if min(row_px, col_px) < 6:
        for k in range(len(g.pooled_masks) - 1, -1, -1):
            rows, cols = np.nonzero(g.pooled_masks[k])
            if 0 < rows.size <= 16:
                for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                    x0, y0 = left + c * col_px, top + r * row_px
                    draw.rectangle(
                        [(x0 - 4, y0 - 4), (x0 + col_px + 3, y0 + row_px + 3)],
                        outline=_HL + k,
                        width=2,
                    )


def _draw_footer(
    img: Image.Image,
    draw: ImageDraw.ImageDraw,
    y0: int,
    g: "_Grid | None",
    legend_lines: list[list[str]],
    note_lines: list[str],
) -> list[tuple[int, int, int, int]]:
    """Colour bar (a heat map, ``g``), legend and notes from ``y0`` down; the swatches' boxes."""
    font = _font()
    bar_h = 22
    y = y0
    if g is not None:  # colour bar: the value range
        lo_s, hi_s = format_value(g.lo), format_value(g.hi)
        bar = np.linspace(0, RAMP_LEVELS - 1, 100).astype(np.uint8)
        bx = 4 + _text_width(lo_s) + 4
        img.paste(Image.fromarray(np.repeat(bar[None, :], 8, axis=0), mode="P"), (bx, y + 3))
        draw.text((4, y), lo_s, fill=_TEXT, font=font)
        draw.text((bx + 104, y), hi_s, fill=_TEXT, font=font)
        if g.has_nan:
            nx = bx + 104 + _text_width(hi_s) + 10
            draw.rectangle([(nx, y + 3), (nx + 9, y + 10)], fill=_NAN)
            draw.text((nx + 13, y), "not finite", fill=_TEXT, font=font)
        y += bar_h
    swatches = []
    for k, lines in enumerate(legend_lines):
        sw = (4, y + 2, 14, y + 12)
        draw.rectangle([sw[:2], (sw[2] - 1, sw[3] - 1)], fill=_HL + k)
        swatches.append(sw)
        for ln in lines:
            draw.text((20, y), ln, fill=_TEXT, font=font)
            y += _LINE_H
    for ln in note_lines:
        draw.text((4, y), ln, fill=_AXIS, font=font)
        y += _LINE_H
    return swatches


def render(
    values: npt.ArrayLike | None = None,
    highlights: Sequence[tuple[str, npt.ArrayLike]] = (),
    *,
    shape: Sequence[int] | None = None,
    title: str | None = None,
    columns: Sequence[str] | None = None,
    notes: Sequence[str] = (),
    cells_per_bin: tuple[int, int] = (1, 1),
) -> Picture:
    """Draw an array (a heat map of ``values``, or a neutral grid of ``shape``) with
    highlighted cell sets, axes, legend and caption.

    Args:
        values: the array's data, any rank (folded as the module docstring says); ``None``
            draws a neutral grid of ``shape``.
        highlights: ``(legend label, mask)`` pairs; each mask has the array's shape (boolean
            or 0/1) and is drawn in the next :data:`HIGHLIGHT_RGB` colour (the first on top).
            At most ``len(HIGHLIGHT_RGB)`` sets.
        shape: the array's shape when ``values`` is ``None`` (default: the first mask's).
        title: the caption above the picture (wrapped, never cut).
        columns: names of the grid's columns (a DataFrame's), drawn instead of column indices
            when there are at most 32.
        notes: extra lines under the legend.
        cells_per_bin: the grid given is already binned by this many cells per row and column
            (a query result's boxes binned down): axis labels count array cells.

    Returns:
        The :class:`Picture`.

    Raises:
        ValueError: more highlighted sets than colours, or a mask whose shape is not the
            array's.
    """
    if len(highlights) > len(HIGHLIGHT_RGB):
        msg = f"At most {len(HIGHLIGHT_RGB)} highlighted sets per picture, got {len(highlights)}."
        raise ValueError(msg)
    if values is not None:
        vals: np.ndarray | None = _fold(_as_float(values))
        full = np.shape(values)
    else:
        vals = None
        if shape is None:
            shape = np.shape(highlights[0][1]) if highlights else ()
        full = tuple(int(d) for d in shape)
    masks = []
    for label, mask in highlights:
        if np.shape(mask) != tuple(full):
            msg = f"Highlight `{label}` has shape {np.shape(mask)}, the array {tuple(full)}."
            raise ValueError(msg)
        masks.append(to_2d(mask))
    h, w = vals.shape if vals is not None else _fold(np.zeros(full, dtype=bool)).shape
    empty = h == 0 or w == 0
    if empty:
        h, w, vals, masks = 1, 1, None, [np.zeros((1, 1), dtype=bool) for _ in masks]
    g = _grid(vals, masks, h, w, columns)
    fr, fc, row_px, col_px = g.fr, g.fc, g.row_px, g.col_px
    grid_w, grid_h = g.pixels.shape[1], g.pixels.shape[0]

    # text: caption, axes, colour bar, legend, notes; ticks count array cells (a binned
    # grid's bins hold cells_per_bin cells each)
    left = max(_text_width(f"{t:,}") for t in _ticks(h * cells_per_bin[0])) + 10
    legend = [_plain(label) for label, _ in highlights]
    extra = [_plain(n) for n in notes]
    title = _plain(title) if title else title
    if len(full) > 2:
        extra.append(f"shape {tuple(full)}: leading axes folded into rows")
    if fr > 1 or fc > 1:
        how = "max" if vals is not None else "any"
        extra.append(f"{fr} x {fc} cells per square ({how})")
    if empty:
        extra.append(f"empty array, shape {tuple(full)}")
    body_w = left + grid_w + 12
    text_w = max([_text_width(s) + 20 for s in legend] + [_text_width(s) for s in extra] + [0])
    width = max(body_w, min(_TEXT_WIDTH, max(text_w, _text_width(title or "") + 8)))
    caption = _wrap(title, width - 8) if title else []
    legend_lines = [_wrap(s, width - 28) for s in legend]
    note_lines = [ln for s in extra for ln in _wrap(s, width - 8)]
    width = max(
        [width]
        + [_text_width(ln) + 8 for ln in caption + note_lines]
        + [_text_width(ln) + 28 for lines in legend_lines for ln in lines]
    )
    cap_h = len(caption) * _LINE_H + (4 if caption else 0)
    axis_h = _LINE_H + 4
    top = cap_h + axis_h
    bar_h = 22 if vals is not None else 0
    legend_h = sum(len(ls) for ls in legend_lines) * _LINE_H
    height = top + grid_h + 6 + bar_h + legend_h + len(note_lines) * _LINE_H + 4

    img = Image.new("P", (width, height), _BG)
    img.paste(Image.fromarray(g.pixels, mode="P"), (left, top))
    draw = ImageDraw.Draw(img)
    font = _font()
    y = 2
    cap_right = 0
    for ln in caption:
        draw.text((4, y), ln, fill=_TEXT, font=font)
        cap_right = max(cap_right, 4 + _text_width(ln))
        y += _LINE_H
    caption_box = (4, 2, cap_right, 2 + len(caption) * _LINE_H) if caption else (0, 0, 0, 0)
    _draw_axes(draw, g, columns, cells_per_bin, (h, w), (left, top, cap_h, width))
    swatches = _draw_footer(
        img, draw, top + grid_h + 6, g if vals is not None else None, legend_lines, note_lines
    )
    img.putpalette(_PALETTE_BYTES)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=3)
    return Picture(
        png=buf.getvalue(),
        size=(width, height),
        grid_origin=(left, top),
        cell_px=(row_px, col_px),
        pool=(fr, fc),
        caption_box=caption_box,
        legend_swatches=tuple(swatches),
    )


def cells_png(mask: np.ndarray, *, title: str | None = None, label: str | None = None) -> bytes:
    """PNG of a boolean mask of selected cells over an array of any rank.

    Args:
        mask: boolean (or 0/1) array; ``True`` cells are drawn in the first highlight colour
            (red) on a light grey grid, with axes. Ranks above 2 are folded into rows (module
            docstring); empty arrays give a blank cell and a note.
        title: optional caption drawn above the picture (e.g. the array name and count).
        label: the legend's text for the selected cells (default: ``selected: <count> cells``).

    Returns:
        The PNG file's bytes (palette PNG: a few KB even for a 4000 x 4000 mask).
    """
    m = np.asarray(mask)
    count = int(np.count_nonzero(m))
    text = label if label is not None else f"selected: {count:,} cell{'s' * (count != 1)}"
    return render(highlights=[(text, m)], title=title).png


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown that shows ``png`` inline: ``![alt](data:image/png;base64,...)``.

    The OSS Dagster UI renders it in ``MetadataValue.md`` (data URIs are allowed there).
    """
    safe = alt.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("\n", " ")
    return f"![{safe}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
