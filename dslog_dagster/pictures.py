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

_MAX_SIDE = 240
_MIN_SIDE = 96
# palette: background, selected, text. A 2-bit palette PNG of boxes is a few hundred bytes,
# which matters: the OSS UI renders markdown metadata inline only below 1000 characters.
_PALETTE = [236, 240, 245, 214, 39, 40, 0, 0, 0]


def cells_png(mask: np.ndarray, *, title: str | None = None) -> bytes:
    """A PNG of a boolean mask (rank ≤ 2; higher ranks are projected onto their last two
    axes): selected cells red, others light grey, scaled up to a readable size."""
    m: np.ndarray = np.asarray(mask, dtype=bool)
    if m.ndim > 2:
        m = np.asarray(m.reshape(-1, *m.shape[-2:]).any(axis=0))
    m = m.reshape(1, -1) if m.ndim < 2 else m
    h, w = max(m.shape[0], 1), max(m.shape[1], 1)
    scale = max(1, _MAX_SIDE // max(h, w))
    if max(h, w) * scale < _MIN_SIDE:
        scale = -(-_MIN_SIDE // max(h, w))
    img = Image.fromarray(m.astype(np.uint8), "P")
    img.putpalette(_PALETTE)
    img = img.resize((w * scale, h * scale), Image.Resampling.NEAREST)
    if title:
        canvas = Image.new("P", (img.width, img.height + 14), 0)
        canvas.putpalette(_PALETTE)
        canvas.paste(img, (0, 14))
        ImageDraw.Draw(canvas).text((2, 1), title, fill=2)
        img = canvas
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True, bits=2)
    return buf.getvalue()


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown that shows ``png`` inline (the OSS UI renders data-URI images in markdown)."""
    safe = alt.replace("]", ")").replace("[", "(")
    return f"![{safe}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
