"""The example project's image steps, shared by the benches that time them."""

from typing import Any

import numpy as np


def blur(a: Any) -> Any:
    """The example project's smoothing: 3×3 box blur of an edge-padded frame."""
    h, w = a.shape
    padded = np.pad(a, 1, mode="edge")
    total = padded[0:h, 0:w]
    for dy in range(3):
        for dx in range(3):
            if dy or dx:
                total = total + padded[dy : dy + h, dx : dx + w]
    return total / 9.0


def above(a: Any, level: float = 0.6) -> Any:
    """Cells above ``level`` kept, the rest zero (a fixed-level hotspot mask)."""
    return np.where(a > level, a, 0.0)
