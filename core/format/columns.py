"""A lineage table as the int64 columns that the byte-plane encoding stores, and back.

Both file layouts (table files and segment blobs) store a table as equal-length int64 columns
with a transform each (:mod:`~dslog_dagster.core.format.encoding`): for a ProvRC table per
output attribute ``out_lo`` and ``out_hi`` (a width of ``out_lo``), then per input attribute
``in_ref, in_q, in_r, in_mult, in_lo, in_hi`` (``in_hi`` a width of ``in_lo``); for a columnar
table the raw columns, outputs first.
"""

from collections.abc import Sequence

import numpy as np

from dslog_dagster.core.format.encoding import ColumnSpec
from dslog_dagster.core.provrc import LineageTable

INPUT_FIELDS = ("in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")
"""The stored fields of one input attribute of a ProvRC table, in column order."""


def columns_of(table: LineageTable) -> tuple[list[np.ndarray], list[tuple[str, int]]]:
    """The columns of ``table`` and per column the ``(transform, partner)`` to encode it with."""
    cols: list[np.ndarray] = []
    transforms: list[tuple[str, int]] = []
    if table.encoding == "columnar":
        for c in table.raw:
            cols.append(c)
            transforms.append(("auto", -1))
        return cols, transforms
    for j in range(table.out_rank):
        cols.append(table.out_lo[j])
        transforms.append(("auto", -1))
        cols.append(table.out_hi[j])
        transforms.append(("width", len(cols) - 2))
    for k in range(table.in_rank):
        base = len(cols)
        for name in INPUT_FIELDS:
            cols.append(getattr(table, name)[k])
        for name in INPUT_FIELDS:
            if name == "in_hi":
                transforms.append(("width", base + 4))
            elif name == "in_lo":
                transforms.append(("auto", -1))
            else:
                transforms.append(("raw", -1))
    return cols, transforms


def default_specs(columnar: bool, l: int, m: int, nbytes: Sequence[int]) -> list[ColumnSpec]:
    """Column specs with the default transforms: every ``hi`` column a width of its ``lo``
    column (the column before it), every other column raw; ``nbytes`` per column."""
    width = (
        set() if columnar else {2 * j + 1 for j in range(l)} | {2 * l + 6 * k + 5 for k in range(m)}
    )
    return [
        ColumnSpec("width", i - 1, nb) if i in width else ColumnSpec("raw", -1, nb)
        for i, nb in enumerate(nbytes)
    ]


def table_from_columns(
    out_shape: tuple[int, ...],
    in_shape: tuple[int, ...],
    encoding: str,
    rows: int,
    n_pairs: int,
    cols: list[np.ndarray],
) -> LineageTable:
    """The table whose columns (:func:`columns_of`) are ``cols``.

    Raises:
        ValueError: an unknown encoding, or a column count that does not fit the shapes.
    """
    l, m = len(out_shape), len(in_shape)
    if encoding == "columnar":
        raw = np.stack(cols) if cols else np.zeros((0, rows), np.int64)
        return LineageTable(out_shape, in_shape, "columnar", rows, n_pairs, raw=raw)
    if encoding != "provrc":
        msg = f"unknown table encoding `{encoding}`"
        raise ValueError(msg)
    if len(cols) != 2 * l + 6 * m:
        msg = f"{len(cols)} columns for a rank {l} <- rank {m} ProvRC table"
        raise ValueError(msg)
    empty = np.zeros((0, rows), np.int64)
    out_lo = np.stack([cols[2 * j] for j in range(l)]) if l else empty
    out_hi = np.stack([cols[2 * j + 1] for j in range(l)]) if l else empty
    inputs = []
    for i in range(len(INPUT_FIELDS)):
        vals = [cols[2 * l + 6 * k + i] for k in range(m)]
        inputs.append(np.stack(vals) if vals else np.zeros((0, rows), np.int64))
    return LineageTable.from_fields(out_shape, in_shape, rows, n_pairs, [out_lo, out_hi, *inputs])
