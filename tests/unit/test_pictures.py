"""Pictures a person can read: the PNG is decoded and its pixels checked where things must be.

Highlight colours at the highlighted cells (the lineage cells on inputs, the hottest cells on
the output), one legend swatch per highlighted set in its colour, the caption inside the image
(never cut), tick labels on both axes, pooling that never loses a highlighted cell.
"""

import base64
import io
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from strategies import relations

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.compression import compress
from dslog_dagster.io_managers.lineage_picture import (
    hottest_cells,
    lineage_markdown,
    lineage_pictures,
)
from dslog_dagster.pictures import (
    HIGHLIGHT_RGB,
    MAX_SIDE,
    NAN_RGB,
    Picture,
    cells_png,
    png_markdown,
    render,
    to_2d,
)

RED = HIGHLIGHT_RGB[0]
TEXT = (30, 30, 30)


def _rgb(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _is(img: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.asarray((img == rgb).all(axis=-1))


def _centre(pic: Picture, row: int, col: int) -> tuple[int, int]:
    x0, y0, x1, y1 = pic.cell_box(row, col)
    return (y0 + y1) // 2, (x0 + x1) // 2


def _grid_area(pic: Picture, img: np.ndarray, h: int, w: int) -> np.ndarray:
    x0, y0 = pic.grid_origin
    x1, y1 = pic.cell_box(h - 1, w - 1)[2:]
    return img[y0:y1, x0:x1]


@pytest.mark.parametrize(
    ("shape", "grid"),
    [((), (1, 1)), ((7,), (1, 7)), ((5, 6), (5, 6)), ((2, 3, 4), (6, 4)), ((2, 1, 3, 5), (6, 5))],
)
def test_any_rank_folds_leading_axes_into_rows(
    shape: tuple[int, ...], grid: tuple[int, int]
) -> None:
    mask = np.zeros(shape, dtype=bool)
    assert to_2d(mask).shape == grid
    pic = render(highlights=[("none", mask)])
    img = _rgb(pic.png)
    assert pic.png.startswith(b"\x89PNG")
    assert not _is(_grid_area(pic, img, *grid), RED).any()  # nothing selected, nothing red
    mask.reshape(-1)[-1] = True
    pic = render(highlights=[("last", mask)])
    assert tuple(_rgb(pic.png)[_centre(pic, grid[0] - 1, grid[1] - 1)]) == RED


def test_selected_cell_is_drawn_in_its_colour_at_its_position_and_nowhere_else() -> None:
    mask = np.zeros((4, 4), dtype=bool)
    mask[1, 2] = True
    pic = render(highlights=[("one", mask)])
    img = _rgb(pic.png)
    assert pic.cell_px[0] >= 40  # small arrays are scaled up
    x0, y0, x1, y1 = pic.cell_box(1, 2)
    cell = img[y0 + 1 : y1, x0 + 1 : x1]  # inside the grid lines
    assert _is(cell, RED).all()
    grid = _grid_area(pic, img, 4, 4).copy()
    grid[
        y0 - pic.grid_origin[1] : y1 - pic.grid_origin[1],
        x0 - pic.grid_origin[0] : x1 - pic.grid_origin[0],
    ] = 0
    assert not _is(grid, RED).any()


def test_distinct_colours_legend_swatches_and_overlaps_keep_the_first_on_top() -> None:
    shape = (10, 12)
    masks = []
    for k in range(4):
        mk = np.zeros(shape, dtype=bool)
        mk[2 * k, 3 * k] = True
        mk[9, 11] = True  # every set holds this cell: the first set is drawn on top
        masks.append((f"set {k}", mk))
    pic = render(np.arange(120.0).reshape(shape), masks, title="four sets")
    img = _rgb(pic.png)
    for k in range(4):
        assert tuple(img[_centre(pic, 2 * k, 3 * k)]) == HIGHLIGHT_RGB[k]
        x0, y0, x1, y1 = pic.legend_swatches[k]
        assert _is(img[y0:y1, x0:x1], HIGHLIGHT_RGB[k]).all()
        # the legend's text is right of its swatch
        assert _is(img[y0 - 2 : y1 + 2, x1 + 2 :], TEXT).any()
    assert tuple(img[_centre(pic, 9, 11)]) == HIGHLIGHT_RGB[0]
    assert len(pic.legend_swatches) == 4


def test_heat_map_is_darker_where_values_are_larger_and_has_a_colour_bar() -> None:
    values = np.arange(64.0).reshape(8, 8)
    values[0, 1] = np.nan
    pic = render(values, title="ramp")
    img = _rgb(pic.png).astype(int)
    cold, hot = img[_centre(pic, 0, 0)], img[_centre(pic, 7, 7)]
    assert cold.sum() > hot.sum() + 300  # light grey to dark grey
    assert tuple(img[_centre(pic, 0, 1)]) == NAN_RGB  # not finite: its own colour
    below = img[pic.cell_box(7, 0)[3] :]
    assert (below.sum(axis=-1) < 200).any()  # the colour bar's dark end ...
    assert _is(below.astype(np.uint8), TEXT).any()  # ... and its min/max labels
    for rgb in HIGHLIGHT_RGB:  # no grey level is a highlight colour
        assert not _is(img.astype(np.uint8), rgb).any()


def test_axes_have_index_labels_left_of_and_above_the_grid() -> None:
    pic = render(np.random.default_rng(0).random((50, 70)), title="axes")
    img = _rgb(pic.png)
    x0, y0 = pic.grid_origin
    _, _, x1, y1 = pic.cell_box(49, 69)
    assert _is(img[y0:y1, :x0], TEXT).any()  # row indices
    assert _is(img[pic.caption_box[3] : y0, x0:x1], TEXT).any()  # column indices
    assert x0 > 10  # room for the row labels


@settings(max_examples=40, deadline=None)
@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_(), 0123456789W", min_size=1, max_size=300),
    st.integers(1, 300),
)
def test_caption_is_never_cut(title: str, width: int) -> None:
    # Spark frames were 3-6 px strips with "2 cel" captions: the picture widens or wraps
    pic = render(highlights=[("x", np.ones((2, width), dtype=bool))], title=title)
    img = _rgb(pic.png)
    w = pic.size[0]
    x0, y0, x1, y1 = pic.caption_box
    if title.strip():
        assert 0 <= x0 < x1 <= w - 2
        assert 0 <= y0 < y1 <= pic.grid_origin[1]
        assert _is(img[y0:y1, x0:x1], TEXT).any()
    # no text pixel touches the right edge: nothing ran off the image
    assert not _is(img[:, -1:], TEXT).any()


def test_frame_picture_names_its_columns_and_is_not_a_strip() -> None:
    columns = ["id", "title", "release_year", "rating"]
    mask = np.zeros((300, 4), dtype=bool)
    mask[150, 2] = True
    pic = render(highlights=[("row 150, release_year", mask)], columns=columns, title="t")
    img = _rgb(pic.png)
    assert pic.size[0] >= 4 * 24
    assert pic.size[1] >= 200
    assert tuple(img[_centre(pic, 150, 2)]) == RED
    x0, _, x1, _ = pic.cell_box(0, 2)
    assert _is(img[pic.caption_box[3] : pic.grid_origin[1], x0:x1], TEXT).any()  # its name


def test_big_mask_pools_without_losing_a_cell_and_stays_small() -> None:
    mask = np.zeros((4000, 4000), dtype=bool)
    mask[3999, 17] = True  # a single cell in a corner
    pic = render(highlights=[("one cell", mask)], title="big")
    img = _rgb(pic.png)
    assert pic.cell_box(0, 0)[2] - pic.grid_origin[0] <= 2
    assert _grid_area(pic, img, 4000, 4000).shape[0] <= MAX_SIDE
    assert tuple(img[_centre(pic, 3999, 17)]) == RED
    assert len(pic.png) < 30_000
    assert pic.pool[0] > 1


def test_cells_png_keeps_its_signature_and_draws_the_mask() -> None:
    png = cells_png(np.array([False, True, False]), title="strip")
    img = _rgb(png)
    assert img.shape[0] >= 16
    assert _is(img, RED).any()


def test_png_markdown_is_a_data_uri_image() -> None:
    png = cells_png(np.eye(3, dtype=bool))
    md = png_markdown(png, "a [tricky] alt")
    assert md.startswith("![a \\[tricky\\] alt](data:image/png;base64,")
    assert base64.b64decode(md.split(",", 1)[1].rstrip(")")) == png


def test_hottest_cells_are_the_largest_values_spread_apart() -> None:
    values = np.zeros((64, 64))
    values[10, 10], values[10, 11], values[50, 40], values[30, 5] = 9.0, 8.5, 8.0, 7.0
    values[0, 0] = np.nan
    cells = hottest_cells(values, 3)
    got = [tuple(int(i) for i in np.unravel_index(c, values.shape)) for c in cells]
    # (10, 11) is next to (10, 10): passed over while far cells remain
    assert got == [(10, 10), (50, 40), (30, 5)]
    assert hottest_cells(np.full((4, 4), np.nan), 2).size == 2  # no finite value: spread


def test_lineage_pictures_highlight_the_hottest_cells_and_the_input_cells_feeding_them() -> None:
    # out[i, j] = in[i, j] + in[i, j + 1] over a 32 x 33 input
    h, w = 32, 32
    ii, jj = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    out_cols = [np.repeat(ii.reshape(-1), 2), np.repeat(jj.reshape(-1), 2)]
    in_cols = [
        np.repeat(ii.reshape(-1), 2),
        (np.repeat(jj.reshape(-1), 2) + np.tile([0, 1], h * w)),
    ]
    rel = LineageRelation.from_columns((h, w), (h, w + 1), out_cols, in_cols)
    values = np.zeros((h, w))
    values[3, 4], values[25, 20] = 5.0, 4.0
    drawn = lineage_pictures("out", (h, w), [("inp", compress(rel))], 2, values=values)
    assert [tuple(np.unravel_index(c, (h, w))) for c in drawn.cells] == [(3, 4), (25, 20)]
    (alt_out, out_pic), (alt_in, in_pic) = drawn.pictures
    assert alt_out == "out"
    assert alt_in == "inp cells feeding out"
    out_img, in_img = _rgb(out_pic.png), _rgb(in_pic.png)
    assert tuple(out_img[_centre(out_pic, 3, 4)]) == HIGHLIGHT_RGB[0]
    assert tuple(out_img[_centre(out_pic, 25, 20)]) == HIGHLIGHT_RGB[1]
    for col in (4, 5):
        assert tuple(in_img[_centre(in_pic, 3, col)]) == HIGHLIGHT_RGB[0]
    for col in (20, 21):
        assert tuple(in_img[_centre(in_pic, 25, col)]) == HIGHLIGHT_RGB[1]
    assert tuple(in_img[_centre(in_pic, 3, 6)]) != HIGHLIGHT_RGB[0]
    for pic in (out_pic, in_pic):
        assert len(pic.legend_swatches) == 2
    md = lineage_markdown("out", (h, w), [("inp", compress(rel))], 2, values=values)
    pngs = [base64.b64decode(x) for x in re.findall(r"base64,([A-Za-z0-9+/=]+)\)", md)]
    assert pngs == [out_pic.png, in_pic.png]
    assert "hottest cells of `out`" in md


@settings(max_examples=60, deadline=None)
@given(relations(), st.integers(1, 6))
def test_lineage_picture_from_a_compressed_table_equals_the_picture_from_its_relation(
    rel: LineageRelation, k: int
) -> None:
    # A served reuse view hands the IO manager ProvRC tables, a capture may hand relations:
    # the pictures must not depend on which form arrived.
    table = compress(rel.unique())
    from_rel = lineage_markdown("out", rel.out_shape, [("src", rel)], k)
    from_table = lineage_markdown("out", rel.out_shape, [("src", table)], k)
    assert from_table == from_rel


def test_a_tall_thin_array_is_pooled_without_padding_it_square() -> None:
    # A 300,000 × 3 mask pools 300 rows and 3 columns per pixel: before, the square factor
    # (300) padded its 3 columns to 300, allocating 100× the mask (a 10^7-row frame asked for
    # 194 GiB and lost its picture). Peak memory stays a few masks' worth.
    import tracemalloc

    mask = np.zeros((300_000, 3), dtype=bool)
    mask[123_456, 1] = True
    tracemalloc.start()
    try:
        pic = render(highlights=[("sel", mask)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * mask.nbytes, peak
    img = _rgb(pic.png)
    assert _is(img, RED).any()  # the one selected cell still shows
