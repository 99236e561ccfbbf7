"""Notebook views: HTML/PNG reprs, ``to_pandas()`` and ``plot()`` of cell sets and tables.

The pictures are decoded and their lit pixels checked against the cells; the pandas rows of
a stored table are turned back into a table and decompressed, so a wrong column or an
off-by-one in the half-open bounds fails here.
"""

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from dslog_dagster.core.compression import compress
from dslog_dagster.core.display import HTML_ROWS
from dslog_dagster.core.provrc import PROVRC_FIELDS, LineageTable
from dslog_dagster.core.query import CellSet, as_cells
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.pictures import HIGHLIGHT_RGB


def _lit(png: bytes) -> np.ndarray:
    """Pixels drawn in the selection's colour (the first highlight colour; the legend's swatch
    has it too, so an empty selection is not zero)."""
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return np.all(img == np.asarray(HIGHLIGHT_RGB[0]), axis=2)


def test_cell_set_html_lists_half_open_boxes_and_says_how_many_more() -> None:
    cells = as_cells((128, 128), np.s_[62:65, 105:108])
    page = cells._repr_html_()
    assert "9 of 16,384 cells" in page
    assert "<td>62:65</td><td>105:108</td><td>9</td>" in page
    many = CellSet.from_indices((100, 100), [(2 * i, 3) for i in range(50)])
    page = many._repr_html_()
    assert page.count("<tr>") == HTML_ROWS + 1  # header + the first boxes
    assert f"… and {50 - HTML_ROWS:,} more" in page
    assert "<td>0:1</td><td>3:4</td>" in page


def test_cell_set_pictures_light_the_cells() -> None:
    empty = CellSet.empty((8, 8))._repr_png_()
    some = as_cells((8, 8), np.s_[2:4, 5])._repr_png_()
    assert Image.open(io.BytesIO(some)).format == "PNG"
    assert _lit(some).sum() > _lit(empty).sum() + 2 * 16  # two cells of at least 4 × 4 pixels
    image = as_cells((8, 8), np.s_[2:4, 5]).plot(title="two cells")
    assert isinstance(image, Image.Image)
    assert image.width > 8
    # a huge array draws from boxes, binned down, without a mask of its size
    big = CellSet.full((10**6, 10**6))
    assert Image.open(io.BytesIO(big._repr_png_())).width <= 1024


def test_cell_set_to_pandas() -> None:
    frame = as_cells((3, 4), [np.s_[0, 1:3], np.s_[2, :]]).to_pandas()
    assert frame.to_dict("records") == [
        {"start_0": 0, "stop_0": 1, "start_1": 1, "stop_1": 3},
        {"start_0": 2, "stop_0": 3, "start_1": 0, "stop_1": 4},
    ]


def _from_frame(table: LineageTable) -> LineageTable:
    """Rebuild a ProvRC table from its ``to_pandas()`` rows (half-open back to inclusive)."""
    frame = table.to_pandas()
    l, m = len(table.out_shape), len(table.in_shape)

    def rows(fmt: str, k: int, shift: int = 0) -> np.ndarray:
        return np.stack([frame[fmt.format(i)].to_numpy() + shift for i in range(k)]).reshape(
            k, len(frame)
        )

    fields = (
        rows("out_start_{}", l),
        rows("out_stop_{}", l, -1),
        rows("in_ref_{}", m),
        rows("in_q_{}", m),
        rows("in_r_{}", m),
        rows("in_mult_{}", m),
        rows("in_start_{}", m),
        rows("in_stop_{}", m, -1),
    )
    assert len(fields) == len(PROVRC_FIELDS)
    return LineageTable.from_fields(
        table.out_shape, table.in_shape, len(frame), table.n_pairs, fields
    )


def _pairs(rel: LineageRelation) -> set[tuple[int, ...]]:
    return {
        tuple(int(v) for v in row)
        for row in np.vstack([rel.out_cols[:, : rel.n], rel.in_cols[:, : rel.n]]).T
    }


@settings(max_examples=60, deadline=None)
@given(
    out_shape=st.lists(st.integers(1, 6), min_size=1, max_size=2).map(tuple),
    in_shape=st.lists(st.integers(1, 6), min_size=1, max_size=2).map(tuple),
    seed=st.integers(0, 2**32 - 1),
    structured=st.booleans(),
)
def test_table_to_pandas_rows_are_the_table(out_shape, in_shape, seed, structured) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    n_out, n_in = int(np.prod(out_shape)), int(np.prod(in_shape))
    if structured:  # a window: output flat i <- inputs flat i..i+1 (compresses to few rows)
        o = np.repeat(np.arange(n_out), 2)
        i = np.minimum(o + np.tile([0, 1], n_out), n_in - 1)
    else:
        k = int(rng.integers(1, 30))
        o, i = rng.integers(0, n_out, k), rng.integers(0, n_in, k)
    rel = LineageRelation.from_columns(
        out_shape,
        in_shape,
        list(np.unravel_index(o, out_shape)),
        list(np.unravel_index(i, in_shape)),
    )
    table = compress(rel)
    want = _pairs(rel)
    if table.encoding == "provrc":
        assert _pairs(_from_frame(table).decompress()) == want
    else:
        frame = table.to_pandas()
        got = {tuple(int(v) for v in r) for r in frame.itertuples(index=False)}
        assert got == want
    page = table._repr_html_()
    assert f"{table.n_pairs:,} (output, input) cell pairs" in page
    assert Image.open(io.BytesIO(table._repr_png_())).format == "PNG"


def test_table_html_spells_relative_constraints() -> None:
    # y[i] = x[i + 1] for i < 4: one relative row, a = b0 + 1
    rel = LineageRelation.from_columns((4,), (5,), [np.arange(4)], [np.arange(4) + 1])
    table = compress(rel)
    assert table.encoding == "provrc"
    assert table.rows == 1
    page = table._repr_html_()
    assert "<td>0:4</td><td>b0+1:b0+2</td>" in page
    assert table.plot().width > 0
