"""How cell sets and stored lineage tables show themselves in notebooks and to pandas users.

A query result (:class:`~dslog_dagster.core.query.CellSet`) and a stored ProvRC table
(:class:`~dslog_dagster.core.provrc.LineageTable`) are what a data scientist holds in a Jupyter
cell. Jupyter renders an object through ``_repr_html_`` / ``_repr_png_``; pandas users expect
``.to_pandas()`` and ``.plot()``. The two mixins here give both classes those methods without
the engine classes knowing about HTML, pictures or pandas, and without an import cycle (the
mixins only use the attributes the :class:`_Boxes` / :class:`_Table` protocols name).

Everything is drawn and listed from the *compressed* form, never from a full mask or the raw
pairs: a result over a 10⁵ × 10⁵ array costs a few kilobytes of picture, and an HTML table lists
at most :data:`HTML_ROWS` boxes or rows, saying how many more there are. Bounds are printed in
Python's half-open convention (``start:stop``), as everywhere a person reads them.
"""

import html
import io
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dslog_dagster.errors import DSLogError
from dslog_dagster.pictures import cells_png

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "HTML_ROWS",
    "MAX_PICTURE_BOXES",
    "MAX_PICTURE_SIDE",
    "binned",
    "binned_mask",
    "spell_constraint",
    "spell_span",
]

HTML_ROWS = 20
"""Boxes or table rows an HTML repr lists before it says how many more there are."""
MAX_PICTURE_SIDE = 256
"""Bins per side of a picture (larger arrays are binned down)."""
MAX_PICTURE_BOXES = 200_000
"""Boxes drawn at most; a bigger result says so under its picture."""

I64 = npt.NDArray[np.int64]


class _Boxes(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def lo(self) -> I64: ...
    @property
    def hi(self) -> I64: ...
    @property
    def n_boxes(self) -> int: ...
    def count(self) -> int: ...
    def to_arrow(self) -> pa.Table: ...


def binned_mask(
    shape: tuple[int, ...], lo: I64, hi: I64, max_side: int = MAX_PICTURE_SIDE
) -> tuple[npt.NDArray[np.bool_], str]:
    """A ≤ ``max_side``² boolean picture of the boxes ``lo``..``hi`` (inclusive, ``(K, d)``) of
    an array of ``shape``, and a caption saying how it was made.

    The array is projected onto its last two axes and binned down to at most ``max_side``
    cells per side; a bin is lit when any of its cells is selected, so no selected cell ever
    disappears from a picture.
    """
    grid, note, _ = binned(shape, lo, hi, max_side)
    return grid, note


def binned(
    shape: tuple[int, ...], lo: I64, hi: I64, max_side: int = MAX_PICTURE_SIDE
) -> tuple[npt.NDArray[np.bool_], str, tuple[int, int]]:
    """:func:`binned_mask` and the cells per bin along the picture's rows and columns (what
    axes drawn over the picture count in)."""
    if len(shape) == 0:
        return np.full((1, 1), len(lo) > 0), "0-d array", (1, 1)
    axes = [len(shape) - 1] if len(shape) == 1 else [len(shape) - 2, len(shape) - 1]
    sizes = [shape[a] for a in axes]
    bins = [max(1, -(-n // max_side)) for n in sizes]
    grid_shape = [max(1, -(-n // b)) for n, b in zip(sizes, bins, strict=True)]
    grid = np.zeros(grid_shape, dtype=bool)
    k = min(len(lo), MAX_PICTURE_BOXES)
    glo = lo[:k][:, axes] // np.asarray(bins, dtype=np.int64)
    ghi = hi[:k][:, axes] // np.asarray(bins, dtype=np.int64)
    for a, b in zip(glo, ghi, strict=True):
        grid[tuple(slice(int(x), int(y) + 1) for x, y in zip(a, b, strict=True))] = True
    notes = []
    if len(shape) > 2:
        notes.append(f"projected onto axes {axes[0]} and {axes[1]}")
    if any(b > 1 for b in bins):
        notes.append("binned " + "×".join(map(str, bins)) + " cells per pixel")
    if k < len(lo):
        notes.append(f"first {k:,} of {len(lo):,} boxes drawn")
    per_bin = (1, bins[0]) if len(bins) == 1 else (bins[0], bins[1])
    return (grid.reshape(1, -1) if grid.ndim == 1 else grid), "; ".join(notes), per_bin


def _pandas_frame(table: pa.Table, what: str) -> Any:
    try:
        return table.to_pandas()
    except ImportError as e:  # pyarrow imports pandas on demand
        msg = (
            f"{what}.to_pandas() needs pandas, which is not installed: "
            "`pip install 'dslog-dagster[pandas]'` (or `pip install pandas`)."
        )
        raise DSLogError(msg) from e


def _image(png: bytes) -> "Image.Image":
    from PIL import Image  # Pillow is a dependency; imported here to keep `core` import light

    return Image.open(io.BytesIO(png))


def _html_table(header: list[str], rows: list[list[str]], more: int) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    tail = f"<p>… and {more:,} more</p>" if more > 0 else ""
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>{tail}"


def spell_span(a: int, b: int) -> str:
    """The inclusive bounds ``a..b`` of one axis as a person reads them: half-open ``a:b+1``."""
    return f"{a}:{b + 1}"


class CellsDisplay:
    """Notebook and pandas views of a cell set (mixed into
    :class:`~dslog_dagster.core.query.CellSet`)."""

    __slots__ = ()

    def to_pandas(self: _Boxes) -> Any:
        """The boxes as a pandas DataFrame, one row per box, half-open columns
        ``start_i``/``stop_i`` (as :meth:`CellSet.to_arrow`).

        Raises:
            DSLogError: pandas is not installed (it is the ``[pandas]`` extra).
        """
        return _pandas_frame(self.to_arrow(), "CellSet")

    def plot(self: _Boxes, title: str | None = None) -> "Image.Image":
        """A picture of the cells over the array (a Pillow image; Jupyter shows it inline).

        The array is projected onto its last two axes and binned down for big arrays (a pixel
        is lit when any cell it covers is selected); the caption says how many cells are lit.
        """
        return _image(_cells_picture(self, title))

    def _repr_png_(self: _Boxes) -> bytes:
        return _cells_picture(self, None)

    def _repr_html_(self: _Boxes) -> str:
        total = int(np.prod(self.shape, dtype=np.int64))
        head = (
            f"<p><b>CellSet</b>: {self.count():,} of {total:,} cells of an array of shape "
            f"{tuple(self.shape)}, in {self.n_boxes:,} box(es) (half-open bounds)</p>"
        )
        k = min(self.n_boxes, HTML_ROWS)
        rank = len(self.shape)
        header = [f"axis {i}" for i in range(rank)] + ["cells"]
        rows = [
            [spell_span(int(self.lo[j, i]), int(self.hi[j, i])) for i in range(rank)]
            + [f"{int(np.prod(self.hi[j] - self.lo[j] + 1, dtype=np.int64)):,}"]
            for j in range(k)
        ]
        return head + _html_table(header, rows, self.n_boxes - k)


def _cells_picture(cells: _Boxes, title: str | None) -> bytes:
    grid, note = binned_mask(cells.shape, cells.lo, cells.hi)
    total = int(np.prod(cells.shape, dtype=np.int64))
    caption = title or f"{cells.count():,} of {total:,} cells"
    return cells_png(grid, title=f"{caption} ({note})" if note else caption)


class _Table(Protocol):
    @property
    def out_shape(self) -> tuple[int, ...]: ...
    @property
    def in_shape(self) -> tuple[int, ...]: ...
    @property
    def encoding(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def n_pairs(self) -> int: ...
    @property
    def out_lo(self) -> I64: ...
    @property
    def out_hi(self) -> I64: ...
    @property
    def in_ref(self) -> I64: ...
    @property
    def in_q(self) -> I64: ...
    @property
    def in_r(self) -> I64: ...
    @property
    def in_mult(self) -> I64: ...
    @property
    def in_lo(self) -> I64: ...
    @property
    def in_hi(self) -> I64: ...
    @property
    def raw(self) -> I64: ...
    @property
    def stored_rows(self) -> int: ...
    @property
    def stored_encoding(self) -> str: ...
    def input_hulls(self) -> tuple[I64, I64]: ...


def spell_constraint(t: _Table, k: int, row: int) -> str:
    """Input axis ``k`` of ProvRC row ``row`` as a person reads it: ``0:3`` (absolute) or
    ``b0-1:b0+2`` (relative to output axis ``b0``; ``a = F(b) - delta`` with ``delta`` in
    ``[lo, hi]``), with ``F`` spelled out when it strides, mirrors or pools."""
    lo, hi, ref = int(t.in_lo[k, row]), int(t.in_hi[k, row]), int(t.in_ref[k, row])
    if ref < 0:
        return spell_span(lo, hi)
    q, r, mult = int(t.in_q[k, row]), int(t.in_r[k, row]), int(t.in_mult[k, row])
    f = f"b{ref}" if r == 0 else f"(b{ref}{r:+d})"
    if q != 1:
        f = f"⌊{f}/{q}⌋"
    if mult != 1:
        f = f"-{f}" if mult == -1 else f"{mult}·{f}"

    def shifted(d: int) -> str:
        return f if d == 0 else f"{f}{d:+d}"

    return f"{shifted(-hi)}:{shifted(-lo + 1)}"


def _provrc_arrow(t: _Table) -> pa.Table:
    cols: dict[str, Any] = {}
    for j in range(len(t.out_shape)):
        cols[f"out_start_{j}"] = pa.array(t.out_lo[j], pa.int64())
        cols[f"out_stop_{j}"] = pa.array(t.out_hi[j] + 1, pa.int64())
    for k in range(len(t.in_shape)):
        cols[f"in_ref_{k}"] = pa.array(t.in_ref[k], pa.int64())
        cols[f"in_mult_{k}"] = pa.array(t.in_mult[k], pa.int64())
        cols[f"in_q_{k}"] = pa.array(t.in_q[k], pa.int64())
        cols[f"in_r_{k}"] = pa.array(t.in_r[k], pa.int64())
        cols[f"in_start_{k}"] = pa.array(t.in_lo[k], pa.int64())
        cols[f"in_stop_{k}"] = pa.array(t.in_hi[k] + 1, pa.int64())
    return pa.table(cols) if cols else pa.table({"row": pa.array(range(t.rows), pa.int64())})


def _pairs_arrow(t: _Table) -> pa.Table:
    l, m = len(t.out_shape), len(t.in_shape)
    names = [f"out_{j}" for j in range(l)] + [f"in_{k}" for k in range(m)]
    if not names:
        return pa.table({"pair": pa.array(range(t.rows), pa.int64())})
    return pa.table({n: pa.array(t.raw[i], pa.int64()) for i, n in enumerate(names)})


class TableDisplay:
    """Notebook and pandas views of a stored lineage table (mixed into
    :class:`~dslog_dagster.core.provrc.LineageTable`)."""

    __slots__ = ()

    def to_pandas(self: _Table) -> Any:
        """The table's rows as a pandas DataFrame.

        A ProvRC table gives one row per ProvRC row: ``out_start_j``/``out_stop_j`` (half-open
        output box) and, per input axis ``k``, ``in_ref_k`` (``-1``: absolute; ``j``: relative
        to output axis ``j``), ``in_mult_k``, ``in_q_k``, ``in_r_k`` and the half-open range
        ``in_start_k``/``in_stop_k`` (absolute bounds, or of ``delta = F(b_j) - a_k``; see
        :mod:`dslog_dagster.core.provrc`). A columnar table gives its (output cell, input
        cell) pairs, ``out_j`` and ``in_k``. A factored table (a frame's lineage) is listed as the
        ProvRC rows of its products.

        Raises:
            DSLogError: pandas is not installed (it is the ``[pandas]`` extra).
        """
        arrow = _provrc_arrow(self) if self.encoding == "provrc" else _pairs_arrow(self)
        return _pandas_frame(arrow, "LineageTable")

    def plot(self: _Table) -> "Image.Image":
        """Two pictures side by side: the output cells that have lineage, and the input cells
        the table reaches (each row's input hull), binned down for big arrays."""
        return _image(_table_picture(self))

    def _repr_png_(self: _Table) -> bytes:
        return _table_picture(self)

    def _repr_html_(self: _Table) -> str:
        ratio = self.n_pairs / max(self.stored_rows, 1)
        head = (
            f"<p><b>LineageTable</b> {tuple(self.out_shape)} ← {tuple(self.in_shape)}: "
            f"{self.n_pairs:,} (output, input) cell pairs stored as {self.stored_rows:,} "
            f"{self.stored_encoding} row(s) ({ratio:,.0f} pairs per row)</p>"
        )
        t = self
        k = min(t.rows, HTML_ROWS)
        l, m = len(t.out_shape), len(t.in_shape)
        if t.encoding == "provrc":
            header = [f"b{j}" for j in range(l)] + [f"a{i}" for i in range(m)]
            rows = [
                [spell_span(int(t.out_lo[j, r]), int(t.out_hi[j, r])) for j in range(l)]
                + [spell_constraint(t, i, r) for i in range(m)]
                for r in range(k)
            ]
        else:
            header = [f"out_{j}" for j in range(l)] + [f"in_{i}" for i in range(m)]
            rows = [[str(int(t.raw[c, r])) for c in range(l + m)] for r in range(k)]
        return head + _html_table(header, rows, t.rows - k)


def _table_picture(t: _Table) -> bytes:
    from PIL import Image

    p = t
    if p.encoding == "provrc":
        out_lo, out_hi = p.out_lo.T, p.out_hi.T
        in_lo, in_hi = (a.T for a in p.input_hulls())
    else:
        l = len(p.out_shape)
        out_lo = out_hi = p.raw[:l].T
        in_lo = in_hi = p.raw[l:].T
    left = Image.open(
        io.BytesIO(
            cells_png(
                binned_mask(p.out_shape, out_lo, out_hi)[0], title="output cells with lineage"
            )
        )
    )
    right = Image.open(
        io.BytesIO(cells_png(binned_mask(p.in_shape, in_lo, in_hi)[0], title="input cells reached"))
    )
    gap = 12
    both = Image.new(
        "RGB", (left.width + gap + right.width, max(left.height, right.height)), "white"
    )
    both.paste(left.convert("RGB"), (0, 0))
    both.paste(right.convert("RGB"), (left.width + gap, 0))
    out = io.BytesIO()
    both.save(out, format="PNG")
    return out.getvalue()
