"""Exact algebra on compressed lineage tables, without expanding cells.

Distributed capture (Spark) compresses row lineage per partition and needs to put the pieces
together; dataframe lineage is a product of row lineage and column lineage. Both are done here
on ProvRC rows:

* :func:`merge_tables` — the union of tables over *disjoint output ranges* (one per
  partition), with rows that continue each other across a seam merged back into one;
* :func:`product_table` — the cell lineage of a 2-D frame from a row table
  ``(out_row ← in_row)`` and a column table ``(out_col ← in_col)``: every pair of rows becomes
  one row over ``(out_row, out_col ← in_row, in_col)``;
* :func:`concat_tables` — the union of tables that stand for disjoint sets of pairs (the
  union of tables whose output ranges interleave is formed on the pairs and compressed anew:
  :func:`dslog_dagster.core.compression.union_tables`);
* :func:`factored_table` — a union of products kept as its factors: the row table is stored
  once instead of once per column row, and queries run on the factors
  (:func:`dslog_dagster.core.query.prepare`); the ProvRC rows of the product are formed only
  when something reads them.

A ProvRC row stands for ``{(b, a) : b ∈ out box, a_k satisfies its constraint given b}``; the
constraints are point-wise in ``b``. So two rows that agree on every field except the interval
of one output attribute, where those intervals are adjacent, stand exactly for the union of
their pairs — that is the only merge :func:`merge_tables` does.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dslog_dagster.core.provrc import PROVRC_FIELDS, LineageTable
from dslog_dagster.core.relation import I64, Shape
from dslog_dagster.errors import InvalidRelationError

__all__ = [
    "FactoredTable",
    "check_shapes",
    "concat_tables",
    "factored_table",
    "merge_tables",
    "product_table",
    "singleton_rows",
]

_FIELDS = PROVRC_FIELDS


def singleton_rows(table: LineageTable) -> LineageTable:
    """A columnar table as ProvRC rows of one pair each (all attributes absolute)."""
    if table.encoding == "provrc":
        return table
    l, m, n = table.out_rank, table.in_rank, table.rows
    outs, ins = table.raw[:l], table.raw[l:]
    one, zero = np.ones((m, n), np.int64), np.zeros((m, n), np.int64)
    return LineageTable.from_fields(
        table.out_shape,
        table.in_shape,
        n,
        table.n_pairs,
        [
            outs.copy(),
            outs.copy(),
            np.full((m, n), -1, np.int64),
            one,
            zero,
            one.copy(),
            ins.copy(),
            ins.copy(),
        ],
    )


def check_shapes(tables: Sequence[LineageTable]) -> tuple[Shape, Shape]:
    """The one ``(out_shape, in_shape)`` of ``tables``.

    Raises:
        InvalidRelationError: the tables connect different shapes.
    """
    shapes = {(t.out_shape, t.in_shape) for t in tables}
    if len(shapes) != 1:
        msg = f"Tables to combine connect different shapes: {sorted(shapes)}."
        raise InvalidRelationError(msg)
    return next(iter(shapes))


def concat_tables(tables: Sequence[LineageTable]) -> LineageTable:
    """Union of tables whose pairs are disjoint (rows are concatenated; not checked)."""
    if not tables:
        msg = "concat_tables needs at least one table."
        raise InvalidRelationError(msg)
    osh, ish = check_shapes(tables)
    if len(tables) == 1:
        return tables[0]
    if all(t.encoding == "columnar" for t in tables):
        raw = np.hstack([t.raw for t in tables])
        n = sum(t.rows for t in tables)
        return LineageTable(osh, ish, "columnar", n, sum(t.n_pairs for t in tables), raw=raw)
    rows = [singleton_rows(t) for t in tables]
    return LineageTable.from_fields(
        osh,
        ish,
        sum(t.rows for t in rows),
        sum(t.n_pairs for t in rows),
        [np.hstack([getattr(t, f) for t in rows]) for f in _FIELDS],
    )


def merge_tables(tables: Sequence[LineageTable], axis: int = 0) -> LineageTable:
    """Union of tables over disjoint ranges of output attribute ``axis``, merged at the seams.

    Each table must cover its own range of ``b_axis`` (the partitions of a range-partitioned
    relation). Columnar tables stay columnar when all are (their sorted pairs concatenated in
    range order); otherwise columnar pieces become one-pair rows first. Then rows equal in every
    field but an adjacent ``b_axis`` interval are merged into one, repeatedly.
    """
    if not tables:
        msg = "merge_tables needs at least one table."
        raise InvalidRelationError(msg)
    osh, ish = check_shapes(tables)
    nonempty = [t for t in tables if t.rows]
    if not nonempty:
        return tables[0]
    l = len(osh)
    if all(t.encoding == "columnar" for t in nonempty):
        return concat_tables(sorted(nonempty, key=lambda t: int(t.raw[axis].min())))
    t = concat_tables(nonempty)
    if t.rows <= 1 or l == 0:
        return t
    fields = {f: getattr(t, f) for f in _FIELDS}
    # group rows by everything except the b_axis interval, then by b_axis lo
    other: list[I64] = [fields["out_lo"][j] for j in range(l) if j != axis]
    other += [fields["out_hi"][j] for j in range(l) if j != axis]
    for f in _FIELDS[2:]:
        other += list(fields[f])
    keys: list[I64] = [fields["out_lo"][axis], *reversed(other)]
    order: I64 = np.lexsort(keys).astype(np.int64)  # last key is primary
    sig = np.stack(other, axis=0)[:, order] if other else np.zeros((0, t.rows), np.int64)
    lo = fields["out_lo"][axis][order]
    hi = fields["out_hi"][axis][order]
    same_sig = np.all(sig[:, 1:] == sig[:, :-1], axis=0) if other else np.ones(t.rows - 1, bool)
    continues = same_sig & (lo[1:] == hi[:-1] + 1)
    starts = np.flatnonzero(np.concatenate([[True], ~continues]))
    ends = np.concatenate([starts[1:], [t.rows]]) - 1
    keep = order[starts]
    out = {f: fields[f][:, keep].copy() for f in _FIELDS}
    out["out_hi"][axis] = hi[ends]
    return LineageTable.from_fields(osh, ish, len(keep), t.n_pairs, [out[f] for f in _FIELDS])


def product_table(rows: LineageTable, cols: LineageTable) -> LineageTable:
    """Cell lineage of 2-D frames: ``rows`` is ``(n_out,) ← (n_in,)`` over row indices, ``cols``
    is ``(k_out,) ← (k_in,)`` over column indices; the result is ``(n_out, k_out) ← (n_in, k_in)``
    holding ``(o, j) ← (r, c)`` for every ``o ← r`` in ``rows`` and ``j ← c`` in ``cols``."""
    if rows.out_rank != 1 or rows.in_rank != 1 or cols.out_rank != 1 or cols.in_rank != 1:
        msg = "product_table takes two 1-D ← 1-D tables (row lineage and column lineage)."
        raise InvalidRelationError(msg)
    c = singleton_rows(cols)
    nr, nc = rows.rows, c.rows
    # each field of the product is [row field repeated per column row; column field tiled],
    # written once into its place (the row table can have millions of rows); a columnar row
    # table is read as one-pair rows without building them first
    if rows.encoding == "columnar":
        outs, ins = rows.raw[0], rows.raw[1]
        row_fields: list[I64 | int] = [outs, outs, -1, 1, 0, 1, ins, ins]
    else:
        row_fields = [getattr(rows, f)[0] for f in _FIELDS]
    in_ref_c = np.where(c.in_ref >= 0, c.in_ref + 1, -1)
    col_fields = [c.out_lo, c.out_hi, in_ref_c, c.in_q, c.in_r, c.in_mult, c.in_lo, c.in_hi]

    # the product's rows are ordered column row by column row (block j: every row-table row
    # with column row j), so every write is a contiguous run of ``nr`` values (a memcpy or a
    # fill) — the row-major order (a few columns per row) made numpy copy in runs of ``nc``,
    # ~10× slower at millions of rows — and each field is constant over a block, which its
    # delta encoding stores in next to nothing
    def stack(a: I64 | int, b: I64) -> I64:
        out = np.empty((2, nc * nr), np.int64)
        out[0].reshape(nc, nr)[:] = a if isinstance(a, int) else np.asarray(a)[None, :]
        out[1].reshape(nc, nr)[:] = b[0][:, None]
        return out

    return LineageTable.from_fields(
        (rows.out_shape[0], cols.out_shape[0]),
        (rows.in_shape[0], cols.in_shape[0]),
        nr * nc,
        rows.n_pairs * cols.n_pairs,
        [stack(a, b) for a, b in zip(row_fields, col_fields, strict=True)],
    )


def factored_table(parts: Sequence[tuple[LineageTable, LineageTable]]) -> LineageTable:
    """The union of ``product_table(rows, cols)`` over ``parts``, kept factored.

    The parts must stand for disjoint sets of pairs (as for :func:`concat_tables`): a frame's
    capture has one part per set of provenance slots, each with its own output columns. The
    result is an ordinary ProvRC :class:`LineageTable` to every reader — equal to
    ``concat_tables([product_table(r, c) for r, c in parts])`` — whose fields are formed on
    first read; :func:`~dslog_dagster.core.format.blob.table_to_blob` stores the factors and
    queries run on them, so a million-row frame's cell lineage is never multiplied out by
    capture, storage or queries (only by code that reads the ProvRC rows).
    """
    if not parts:
        msg = "factored_table needs at least one (row table, column table) part."
        raise InvalidRelationError(msg)
    for rows, cols in parts:
        if rows.out_rank != 1 or rows.in_rank != 1 or cols.out_rank != 1 or cols.in_rank != 1:
            msg = "factored_table takes pairs of 1-D ← 1-D tables (row and column lineage)."
            raise InvalidRelationError(msg)
    r0, c0 = parts[0]
    out_shape = (r0.out_shape[0], c0.out_shape[0])
    in_shape = (r0.in_shape[0], c0.in_shape[0])
    for rows, cols in parts[1:]:
        if (rows.out_shape[0], cols.out_shape[0]) != out_shape or (
            rows.in_shape[0],
            cols.in_shape[0],
        ) != in_shape:
            msg = "The parts of a factored table connect different shapes."
            raise InvalidRelationError(msg)
    return FactoredTable.of(tuple((r, c) for r, c in parts), out_shape, in_shape)


@dataclass(frozen=True, slots=True)
class FactoredTable(LineageTable):
    """A union of products kept as its factors (see :func:`factored_table`, which builds it).

    An ordinary ProvRC :class:`LineageTable` to every reader: its ProvRC fields are left unset
    and formed on first read, as ``concat_tables([product_table(r, c) for r, c in parts])``.
    A copy made with :func:`dataclasses.replace` holds the formed fields and no parts (the
    parts would no longer describe a changed copy).
    """

    parts: "tuple[tuple[LineageTable, LineageTable], ...]" = field(
        default=(), init=False, compare=False, repr=False
    )

    @classmethod
    def of(
        cls,
        parts: "tuple[tuple[LineageTable, LineageTable], ...]",
        out_shape: Shape,
        in_shape: Shape,
    ) -> "FactoredTable":
        """The factored table of checked ``parts`` (use :func:`factored_table`)."""
        table = object.__new__(cls)
        fields = {
            "out_shape": out_shape,
            "in_shape": in_shape,
            "encoding": "provrc",
            "rows": sum(r.rows * c.rows for r, c in parts),
            "n_pairs": sum(r.n_pairs * c.n_pairs for r, c in parts),
            "raw": np.zeros((0, 0), np.int64),
            "encoded": {},
            "parts": parts,
        }
        for k, v in fields.items():
            object.__setattr__(table, k, v)
        return table

    def __getattr__(self, name: str) -> I64:
        # Reached only when a slot is unset: the ProvRC fields, formed here on first read so
        # every consumer sees an ordinary ProvRC table.
        if name not in _FIELDS:
            raise AttributeError(name)
        try:
            parts = object.__getattribute__(self, "parts")
        except AttributeError:
            parts = ()
        if not parts:
            raise AttributeError(name)
        whole = concat_tables([product_table(r, c) for r, c in parts])
        for f in _FIELDS:
            object.__setattr__(self, f, getattr(whole, f))
        value: I64 = getattr(whole, name)
        return value

    @property
    def stored_rows(self) -> int:
        """The rows of the factors (``rows`` counts the ProvRC rows of the product)."""
        if self.parts:
            return sum(r.stored_rows + c.stored_rows for r, c in self.parts)
        return self.rows

    @property
    def stored_encoding(self) -> str:
        """``"factored"`` (``"provrc"`` for a copy without its parts)."""
        return "factored" if self.parts else self.encoding

    @property
    def factors(self) -> "tuple[tuple[LineageTable, LineageTable], ...]":
        """The (row table, column table) parts whose products the table stands for."""
        return self.parts
