"""Small PNG pictures of cell sets for Dagster metadata (markdown with a data-URI image).

MINIMAL STAND-IN (branch issue-queryui): the materialization branch owns this module and its
richer pictures; at merge its version replaces this file. The query assets rely only on
:func:`cells_png` and :func:`png_markdown` with these signatures.
"""

import base64
import io

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["cells_png", "png_markdown"]

_MAX_SIDE = 480
_MIN_SIDE = 96
_ON = (214, 39, 40)
_OFF = (236, 240, 245)


def cells_png(mask: np.ndarray, *, title: str | None = None) -> bytes:
    """A PNG of a boolean mask (rank ≤ 2; higher ranks are projected onto their last two
    axes): selected cells red, others light grey, scaled to a readable size."""
    m = np.asarray(mask, dtype=bool)
    if m.ndim > 2:
        m = m.reshape(-1, *m.shape[-2:]).any(axis=0)
    m = m.reshape(1, -1) if m.ndim < 2 else m
    h, w = max(m.shape[0], 1), max(m.shape[1], 1)
    scale = max(1, min(_MAX_SIDE // max(h, w), _MAX_SIDE))
    if max(h, w) * scale < _MIN_SIDE:
        scale = -(-_MIN_SIDE // max(h, w))
    rgb = np.empty((*m.shape, 3), dtype=np.uint8)
    rgb[...] = _OFF
    rgb[m] = _ON
    img = Image.fromarray(rgb, "RGB").resize((w * scale, h * scale), Image.Resampling.NEAREST)
    if title:
        canvas = Image.new("RGB", (img.width, img.height + 14), (255, 255, 255))
        canvas.paste(img, (0, 14))
        ImageDraw.Draw(canvas).text((2, 1), title, fill=(0, 0, 0))
        img = canvas
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown that shows ``png`` inline (the OSS UI renders data-URI images in markdown)."""
    safe = alt.replace("]", ")").replace("[", "(")
    return f"![{safe}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
