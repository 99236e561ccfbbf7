"""cells_png / png_markdown: any rank, big masks stay small, no selected cell disappears."""

import base64
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from strategies import relations

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.compression import compress
from dslog_dagster.io_managers.metadata import lineage_markdown
from dslog_dagster.pictures import MAX_SIDE, cells_png, png_markdown, to_2d

RED = (214, 39, 40)


def _rgb(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


@pytest.mark.parametrize(
    ("shape", "grid"),
    [((), (1, 1)), ((7,), (1, 7)), ((5, 6), (5, 6)), ((2, 3, 4), (6, 4)), ((2, 1, 3, 5), (6, 5))],
)
def test_any_rank_folds_leading_axes_into_rows(
    shape: tuple[int, ...], grid: tuple[int, int]
) -> None:
    mask = np.zeros(shape, dtype=bool)
    assert to_2d(mask).shape == grid
    png = cells_png(mask)
    assert png.startswith(b"\x89PNG")
    assert not (_rgb(png) == RED).all(axis=-1).any()  # nothing selected, nothing red


def test_selected_cells_are_red_and_upscaled() -> None:
    mask = np.zeros((4, 4), dtype=bool)
    mask[1, 2] = True
    img = _rgb(cells_png(mask))
    assert img.shape[0] >= 200
    assert img.shape[1] >= 200
    red = (img == RED).all(axis=-1)
    ys, xs = np.nonzero(red)
    cell = img.shape[0] // 4
    assert ys.min() // cell == 1
    assert xs.min() // cell == 2
    assert ys.max() // cell == 1
    assert xs.max() // cell == 2


def test_one_d_strip_is_visible() -> None:
    img = _rgb(cells_png(np.array([False, True, False])))
    assert img.shape[0] >= 16
    assert (img == RED).all(axis=-1).any()


def test_big_mask_downsamples_without_losing_a_cell() -> None:
    mask = np.zeros((4000, 4000), dtype=bool)
    mask[3999, 17] = True  # a single cell in a corner
    png = cells_png(mask, title="big")
    img = _rgb(png)
    assert max(img.shape[:2]) <= MAX_SIDE + 16  # + title band
    assert (img == RED).all(axis=-1).any()
    assert len(png) < 20_000


def test_png_markdown_is_a_data_uri_image() -> None:
    png = cells_png(np.eye(3, dtype=bool))
    md = png_markdown(png, "a [tricky] alt")
    assert md.startswith("![a \\[tricky\\] alt](data:image/png;base64,")
    assert base64.b64decode(md.split(",", 1)[1].rstrip(")")) == png


@settings(max_examples=60, deadline=None)
@given(relations(), st.integers(1, 6))
def test_lineage_picture_from_a_compressed_table_equals_the_picture_from_its_relation(
    rel: LineageRelation, k: int
) -> None:
    # A served reuse view hands the IO manager ProvRC tables, a capture may hand relations:
    # the metadata (counts, coverage and PNGs) must not depend on which form arrived.
    table = compress(rel.unique())
    from_rel = lineage_markdown("out", rel.out_shape, [("src", rel)], k)
    from_table = lineage_markdown("out", rel.out_shape, [("src", table)], k)
    assert from_table == from_rel
