"""Small PNG pictures of cell selections, for Dagster metadata.

The OSS Dagster UI renders markdown metadata with an embedded ``data:image/png`` URI inline
(there is no image metadata type), so lineage pictures are PNG bytes turned into markdown with
:func:`png_markdown`. The IO managers (which input cells feed a sample of output cells) and the
lineage-query assets (the selected cells over the target array) both draw with
:func:`cells_png`; keep its signature stable.

How an array of any rank becomes an image:

* 0-d: one cell; 1-d of length ``n``: a strip of ``1 x n`` cells;
* 2-d ``(h, w)``: ``h`` rows, ``w`` columns, as NumPy prints it;
* rank ``k > 2``: every leading axis is folded into the rows, ``(d0, ..., dk-1) -> (d0 * ... *
  dk-2, dk-1)`` (C order): the 2-d slices ``a[i, ...]`` are stacked top to bottom.

Big masks are *downsampled* by an integer factor with "any" pooling (a pixel is selected when
any cell it covers is), so a selected cell never disappears from the picture and a
4000 x 4000 mask renders in milliseconds into a few KB. Small masks are upscaled by an integer
factor so that a cell is a visible square, with thin grid lines when cells are big enough.
"""

import base64
import io

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

__all__ = ["MAX_SIDE", "cells_png", "png_markdown", "to_2d"]

#: Longest side of a picture in pixels (before the title band).
MAX_SIDE = 480
# Small arrays are upscaled until their longer side reaches about this many pixels.
_MIN_SIDE = 240
# No side is thinner than this (a 1-d strip gets this height).
_MIN_THICKNESS = 16
# Grid lines are drawn when a cell is at least this many pixels wide.
_GRID_FROM = 8

# palette indices
_OFF, _ON, _GRID, _BG, _TEXT = 0, 1, 2, 3, 4
_PALETTE = [
    (232, 232, 236),  # unselected cell
    (214, 39, 40),  # selected cell
    (255, 255, 255),  # grid line
    (255, 255, 255),  # title background
    (30, 30, 30),  # title text
]


def to_2d(mask: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """The 2-d boolean grid a mask of any rank is drawn as (see the module docstring)."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        m = m.astype(bool)
    if m.ndim == 0:
        return m.reshape(1, 1)
    if m.ndim == 1:
        return m.reshape(1, -1)
    if m.ndim == 2:
        return m
    return m.reshape(-1, m.shape[-1])


def _any_pool(grid: npt.NDArray[np.bool_], f: int) -> npt.NDArray[np.bool_]:
    """Downsample by ``f`` along both axes; a pixel is on when any covered cell is."""
    h, w = grid.shape
    hp, wp = -(-h // f) * f, -(-w // f) * f
    if (hp, wp) != (h, w):
        padded = np.zeros((hp, wp), dtype=bool)
        padded[:h, :w] = grid
        grid = padded
    pooled = np.asarray(grid.reshape(hp // f, f, wp // f, f).any(axis=(1, 3)), dtype=bool)
    return pooled


def cells_png(mask: np.ndarray, *, title: str | None = None) -> bytes:
    """PNG of a boolean mask of selected cells over an array of any rank.

    Args:
        mask: boolean (or 0/1) array; ``True`` cells are drawn red on a light grey grid.
            Ranks above 2 are folded into rows (module docstring); empty arrays give a blank
            strip.
        title: optional caption drawn above the picture (e.g. the array name and count).

    Returns:
        The PNG file's bytes (palette PNG: a few KB even for a 4000 x 4000 mask).
    """
    grid = to_2d(mask)
    h, w = grid.shape
    if h == 0 or w == 0:
        grid = np.zeros((1, 1), dtype=bool)
        h = w = 1
    down = max(1, -(-max(h, w) // MAX_SIDE))
    if down > 1:
        grid = _any_pool(grid, down)
    gh, gw = grid.shape
    up = max(1, min(_MIN_SIDE // max(gh, gw), MAX_SIDE // max(gh, gw)))
    pixels = np.where(grid, _ON, _OFF).astype(np.uint8)
    pixels = np.repeat(np.repeat(pixels, up, axis=0), up, axis=1)
    if up >= _GRID_FROM:
        pixels[::up, :] = _GRID
        pixels[:, ::up] = _GRID
    # stretch a thin side (a 1-d strip) so it stays visible
    for axis in (0, 1):
        if pixels.shape[axis] < _MIN_THICKNESS:
            pixels = np.repeat(pixels, -(-_MIN_THICKNESS // pixels.shape[axis]), axis=axis)
    img = Image.fromarray(pixels, mode="P")
    if title:
        font = ImageFont.load_default()
        band = 16
        width = max(img.width, 8 + int(font.getlength(title)))
        framed = Image.new("P", (width, img.height + band), _BG)
        framed.paste(img, (0, band))
        ImageDraw.Draw(framed).text((2, 2), title, fill=_TEXT, font=font)
        img = framed
    img.putpalette([c for rgb in _PALETTE for c in rgb])
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown that shows ``png`` inline: ``![alt](data:image/png;base64,...)``.

    The OSS Dagster UI renders it in ``MetadataValue.md`` (data URIs are allowed there).
    """
    safe = alt.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("\n", " ")
    return f"![{safe}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
