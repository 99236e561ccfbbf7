"""ProvRC lineage tables: compression, exact decompression, and both orientations.

**Table semantics and sign convention** (used everywhere in dslog). A ProvRC table between an
output array of rank ``l`` and an input array of rank ``m`` is a list of rows. A row stands for
every pair (output cell ``b``, input cell ``a``) such that

* each output attribute ``b_j`` lies in the absolute interval ``[out_lo[j], out_hi[j]]``;
* each input attribute ``a_k`` satisfies its constraint:

  - ``in_ref[k] == -1`` (absolute): ``in_lo[k] <= a_k <= in_hi[k]``;
  - ``in_ref[k] == j`` (relative to ``b_j``):
    ``in_lo[k] <= delta <= in_hi[k]`` with ``delta = F(b_j) - a_k`` and
    ``F(b) = in_mult[k] * floor((b + in_r[k]) / in_q[k])``.

With ``mult = q = 1, r = 0`` this is the papers' relative attribute ``delta = b_j - a_k``;
``mult = -1`` is a mirrored attribute (``a = C - b``: flip, rot90), ``q = k`` a strided one
(``a = floor(b / k)``: repeat, up-sampling) and ``mult = k`` pooling (``a = k·b + c``). For a
fixed ``b`` every input attribute ranges over an interval of constant width
``in_hi - in_lo + 1``, so the number of pairs of a row is a product of widths.

Rows are disjoint, so ``decompress(compress_provrc(R)) == dedupe(R)`` exactly.

The stored orientation is *backward* (outputs absolute). :meth:`LineageTable.forward` derives
the *forward* orientation (inputs absolute: each input attribute gets its exact hull interval,
each output attribute its absolute clip plus the constraints that now point from inputs to it)
without expanding anything. Both orientations stand for the same set of pairs.

**Columnar fallback.** When ProvRC does not pay (e.g. sorting random data, where every output
cell has its own input cell) the table is kept as the sorted, de-duplicated raw relation
(``encoding == "columnar"``) and stored with delta + byte-plane + zstd coding, which is never
larger than a generic columnar encoding. :func:`~dslog_dagster.core.compression.compress` picks
the smaller (it hands :func:`compress_provrc` the size comparison) and records it.
"""

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.display import TableDisplay
from dslog_dagster.core.native import kernels
from dslog_dagster.core.relation import I64, LineageRelation, Shape
from dslog_dagster.errors import CompressionError

Encoding = Literal["provrc", "columnar"]

# Threads for the streaming phase of the native compressor (results do not depend on it).
DEFAULT_THREADS = max(1, min(os.cpu_count() or 1, 4))
# Windows probed before the full pass on big relations (see ``compress_provrc(probe=...)``).
PROBE_WINDOWS = 16


def _empty(rows: int, cols: int = 0) -> I64:
    return np.zeros((rows, cols), dtype=np.int64)


PROVRC_FIELDS = ("out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")
"""The interval fields of a ProvRC table, in the order the native kernels take them."""


@dataclass(frozen=True, slots=True)
class LineageTable(TableDisplay):
    """A compressed lineage relation between one output and one input array.

    For ``encoding == "provrc"`` the ``out_*`` arrays are ``(l, rows)`` and the ``in_*``
    arrays ``(m, rows)``; ``raw`` is unused. For ``encoding == "columnar"`` ``raw`` holds the
    sorted unique relation as ``(l + m, rows)`` and the interval arrays are empty.
    """

    out_shape: Shape
    in_shape: Shape
    encoding: Encoding
    rows: int
    n_pairs: int
    out_lo: I64 = field(default_factory=lambda: _empty(0))
    out_hi: I64 = field(default_factory=lambda: _empty(0))
    in_ref: I64 = field(default_factory=lambda: _empty(0))
    in_q: I64 = field(default_factory=lambda: _empty(0))
    in_r: I64 = field(default_factory=lambda: _empty(0))
    in_mult: I64 = field(default_factory=lambda: _empty(0))
    in_lo: I64 = field(default_factory=lambda: _empty(0))
    in_hi: I64 = field(default_factory=lambda: _empty(0))
    raw: I64 = field(default_factory=lambda: _empty(0))
    # Encoded file bytes per codec, filled lazily by dslog_dagster.core.format.
    encoded: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_fields(
        cls,
        out_shape: Shape,
        in_shape: Shape,
        rows: int,
        n_pairs: int,
        fields: Sequence[I64],
    ) -> "LineageTable":
        """A ProvRC table from its eight interval fields, in :data:`PROVRC_FIELDS` order."""
        out_lo, out_hi, in_ref, in_q, in_r, in_mult, in_lo, in_hi = fields
        return cls(
            out_shape,
            in_shape,
            "provrc",
            rows,
            n_pairs,
            out_lo=out_lo,
            out_hi=out_hi,
            in_ref=in_ref,
            in_q=in_q,
            in_r=in_r,
            in_mult=in_mult,
            in_lo=in_lo,
            in_hi=in_hi,
        )

    @classmethod
    def all_to_all(cls, out_shape: Shape, in_shape: Shape) -> "LineageTable":
        """The relation of every output cell to every input cell, as one ProvRC row (no row
        when either array is empty): what a flagged fallback records, at the cost of one
        row whatever the sizes."""
        return cls.box(out_shape, in_shape, [-1] * len(in_shape))

    @classmethod
    def box(
        cls, out_shape: Shape, in_shape: Shape, ref: Sequence[int], *, empty: bool = False
    ) -> "LineageTable":
        """One ProvRC row over the whole output (none when either array is empty, or
        ``empty``: the relation without pairs between these shapes): output
        cell ``b`` relates to the input cells ``a`` with ``a_k = b_{ref[k]}`` where
        ``ref[k] >= 0`` (that input axis has output axis ``ref[k]``'s length) and any ``a_k``
        where ``ref[k] == -1``. Every output cell to every input cell (:meth:`all_to_all`),
        and an element-wise, broadcast or reduced relation
        (:func:`~dslog_dagster.core.deferred.map_table`), are such rows."""
        l, m = len(out_shape), len(in_shape)
        n_out = int(np.prod(out_shape, dtype=np.int64))
        n_in = int(np.prod(in_shape, dtype=np.int64))
        rows = 1 if n_out > 0 and n_in > 0 and not empty else 0
        whole = [d for j, d in zip(ref, in_shape, strict=True) if j < 0]
        n_pairs = n_out * int(np.prod(whole, dtype=np.int64)) if rows else 0

        def col(values: Sequence[int], k: int) -> I64:
            return np.asarray(values, dtype=np.int64).reshape(k, 1)[:, :rows].copy()

        return cls.from_fields(
            tuple(out_shape),
            tuple(in_shape),
            rows,
            n_pairs,
            (
                col([0] * l, l),
                col([d - 1 for d in out_shape], l),
                col(list(ref), m),
                col([1] * m, m),
                col([0] * m, m),
                col([1] * m, m),
                col([0] * m, m),
                col([0 if j >= 0 else d - 1 for j, d in zip(ref, in_shape, strict=True)], m),
            ),
        )

    @property
    def stored_rows(self) -> int:
        """Rows the table is stored as: its ProvRC or columnar rows (a factored table,
        :class:`~dslog_dagster.core.combine.FactoredTable`, counts the rows of its factors)."""
        return self.rows

    @property
    def stored_encoding(self) -> str:
        """How the table is stored: :attr:`encoding`, or ``"factored"`` for a factored table."""
        return self.encoding

    @property
    def factors(self) -> "tuple[tuple[LineageTable, LineageTable], ...]":
        """The (row table, column table) parts of a factored table (empty for any other)."""
        return ()

    @property
    def out_rank(self) -> int:
        return len(self.out_shape)

    @property
    def in_rank(self) -> int:
        return len(self.in_shape)

    def native_args(self) -> tuple[int, int, int, I64, I64, I64, I64, I64, I64, I64, I64]:
        """Arguments for the native kernels that take a ProvRC table."""
        return (
            self.out_rank,
            self.in_rank,
            self.rows,
            self.out_lo,
            self.out_hi,
            self.in_ref,
            self.in_q,
            self.in_r,
            self.in_mult,
            self.in_lo,
            self.in_hi,
        )

    def decompress(self) -> LineageRelation:
        """The exact relation this table stands for (sorted, duplicate-free)."""
        l = self.out_rank
        if self.encoding == "columnar":
            return LineageRelation(
                self.out_shape, self.in_shape, self.raw[:l], self.raw[l:], self.rows
            )
        if l + self.in_rank == 0:
            return LineageRelation(
                self.out_shape,
                self.in_shape,
                _empty(0, min(self.rows, 1)),
                _empty(0, min(self.rows, 1)),
                min(self.rows, 1),
            )
        mat, n = kernels.decompress(*self.native_args())
        return LineageRelation(self.out_shape, self.in_shape, mat[:l], mat[l:], int(n))

    def as_provrc(self) -> "LineageTable":
        """This table in ProvRC form (re-compressing a columnar table; ProvRC is never worse
        for queries, only sometimes for bytes)."""
        if self.encoding == "provrc":
            return self
        return compress_provrc(self.decompress())

    def input_hulls(self) -> tuple[I64, I64]:
        """Exact per-row bounding interval of every input attribute, ``(m, rows)`` each.

        For a relative attribute ``F`` is monotone in ``b_ref``, so the extremes of
        ``F(b) - delta`` are reached at the ends of the row's ``b_ref`` interval.
        """
        t = self.as_provrc()
        lo = t.in_lo.copy()
        hi = t.in_hi.copy()
        for k in range(t.in_rank):
            rel = t.in_ref[k] >= 0
            if not rel.any():
                continue
            ref = t.in_ref[k][rel]
            cols = np.arange(t.rows)[rel]
            blo = t.out_lo[ref, cols]
            bhi = t.out_hi[ref, cols]
            q, r, mult = t.in_q[k][rel], t.in_r[k][rel], t.in_mult[k][rel]
            f1 = mult * ((blo + r) // q)
            f2 = mult * ((bhi + r) // q)
            fmin, fmax = np.minimum(f1, f2), np.maximum(f1, f2)
            lo[k][rel] = fmin - t.in_hi[k][rel]
            hi[k][rel] = fmax - t.in_lo[k][rel]
        return lo, hi

    def forward(self) -> "ForwardTable":
        """The forward orientation (inputs absolute), derived without expanding cells."""
        t = self.as_provrc()
        hlo, hhi = t.input_hulls()
        return ForwardTable(t, hlo, hhi)


@dataclass(frozen=True, slots=True)
class ForwardTable:
    """Forward orientation of a ProvRC table: inputs absolute, outputs constrained by inputs.

    Per row: every input attribute ``a_k`` lies in its absolute hull ``[in_abs_lo, in_abs_hi]``;
    every output attribute ``b_j`` lies in ``[out_lo, out_hi]`` and, for each input ``k`` with
    ``ref == j``, satisfies ``F_k(b_j) ∈ [a_k + lo_k, a_k + hi_k]`` — an interval of ``b_j``
    because ``F`` is monotone. Given input cells, the output cells of a row therefore form a
    box, which is what forward queries need.
    """

    table: LineageTable
    in_abs_lo: I64
    in_abs_hi: I64

    def output_box(self, row: int, a: npt.ArrayLike) -> list[tuple[int, int]] | None:
        """Output intervals linked to input cell ``a`` through ``row`` (``None`` if none)."""
        t = self.table
        av = np.asarray(a, dtype=np.int64)
        for k in range(t.in_rank):
            if not self.in_abs_lo[k, row] <= av[k] <= self.in_abs_hi[k, row]:
                return None
        box: list[tuple[int, int]] = []
        for j in range(t.out_rank):
            lo, hi = int(t.out_lo[j, row]), int(t.out_hi[j, row])
            for k in range(t.in_rank):
                if t.in_ref[k, row] != j:
                    continue
                sol = solve_f(
                    int(t.in_q[k, row]),
                    int(t.in_r[k, row]),
                    int(t.in_mult[k, row]),
                    int(av[k] + t.in_lo[k, row]),
                    int(av[k] + t.in_hi[k, row]),
                    lo,
                    hi,
                )
                if sol is None:
                    return None
                lo, hi = sol
            box.append((lo, hi))
        return box

    def expand(self) -> LineageRelation:
        """All pairs, enumerated from the input side (slow; for tests and tiny tables)."""
        t = self.table
        pairs: list[npt.NDArray[np.int64]] = []
        for row in range(t.rows):
            ranges = [
                range(int(self.in_abs_lo[k, row]), int(self.in_abs_hi[k, row]) + 1)
                for k in range(t.in_rank)
            ]
            for a in np.ndindex(*[len(r) for r in ranges]) if ranges else [()]:
                acell = [ranges[k][a[k]] for k in range(t.in_rank)]
                box = self.output_box(row, acell)
                if box is None:
                    continue
                grids = np.meshgrid(*[np.arange(lo, hi + 1) for lo, hi in box], indexing="ij")
                outs = np.stack([g.reshape(-1) for g in grids]) if box else _empty(0, 1)
                ins = np.repeat(np.asarray(acell, np.int64)[:, None], outs.shape[1], axis=1)
                pairs.append(np.vstack([outs, ins]))
        l = t.out_rank
        if not pairs:
            return LineageRelation(t.out_shape, t.in_shape, _empty(l), _empty(t.in_rank), 0)
        mat = np.hstack(pairs)
        return LineageRelation(t.out_shape, t.in_shape, mat[:l], mat[l:], mat.shape[1]).unique()


def solve_f(q: int, r: int, mult: int, u: int, v: int, lo: int, hi: int) -> tuple[int, int] | None:
    """``{b ∈ [lo, hi] : mult·floor((b + r)/q) ∈ [u, v]}`` as an interval, or ``None``."""
    if u > v or lo > hi:
        return None
    if mult > 0:
        gu, gv = -((-u) // mult), v // mult
    else:
        gu, gv = -(v // -mult), (-u) // -mult
    if gu > gv:
        return None
    blo, bhi = max(lo, gu * q - r), min(hi, (gv + 1) * q - r - 1)
    return (blo, bhi) if blo <= bhi else None


def _constant_columns(rel: LineageRelation) -> dict[int, int]:
    """Columns (outputs first, then inputs) holding one value in every pair: ``{col: value}``.

    Native, and it stops reading a column at its first change, so on the usual relations
    (no constant column) it costs next to nothing instead of a min/max pass per column.
    """
    if rel.n == 0:
        return {}
    cols = rel.columns()
    flags = kernels.constant_columns(cols)
    return {c: int(cols[c][0]) for c, constant in enumerate(flags) if constant}


def _restore_constant_columns(
    t: LineageTable,
    rel: LineageRelation,
    constant: dict[int, int],
    keep_out: list[int],
    keep_in: list[int],
) -> LineageTable:
    """Put the constant columns removed by :func:`_compress_without_constants` back into
    ``t``."""
    l, m, rows = rel.out_rank, rel.in_rank, t.rows

    def full(value: int) -> I64:
        return np.full(rows, value, dtype=np.int64)

    if t.encoding == "columnar":
        src = {c: t.raw[i] for i, c in enumerate([*keep_out, *(l + k for k in keep_in)])}
        raw = (
            _empty(0, rows)
            if l + m == 0
            else np.vstack([src[c] if c in src else full(constant[c]) for c in range(l + m)])
        )
        return LineageTable(rel.out_shape, rel.in_shape, "columnar", rows, t.n_pairs, raw=raw)
    out_pos = {j: i for i, j in enumerate(keep_out)}
    in_pos = {k: i for i, k in enumerate(keep_in)}
    ref_map = np.asarray([-1, *keep_out], dtype=np.int64)  # reduced ref (+1) -> original ref

    def outs(field: I64) -> I64:
        if l == 0:
            return _empty(0, rows)
        return np.vstack(
            [field[out_pos[j]] if j in out_pos else full(constant[j]) for j in range(l)]
        ).reshape(l, rows)

    def ins(field: I64, fill: int | None) -> I64:
        if m == 0:
            return _empty(0, rows)
        rows_ = []
        for k in range(m):
            if k in in_pos:
                rows_.append(field[in_pos[k]])
            else:
                rows_.append(full(constant[l + k] if fill is None else fill))
        return np.vstack(rows_).reshape(m, rows)

    in_ref = ins(ref_map[t.in_ref + 1] if t.in_rank else t.in_ref, -1)
    return LineageTable(
        rel.out_shape,
        rel.in_shape,
        "provrc",
        rows,
        t.n_pairs,
        outs(t.out_lo),
        outs(t.out_hi),
        in_ref,
        ins(t.in_q, 1),
        ins(t.in_r, 0),
        ins(t.in_mult, 1),
        ins(t.in_lo, None),
        ins(t.in_hi, None),
    )


def columnar_table(rel: LineageRelation, sorted_mat: I64, n: int) -> LineageTable:
    """The columnar table of ``rel``, given its sorted unique pairs ``sorted_mat`` (``n``)."""
    return LineageTable(rel.out_shape, rel.in_shape, "columnar", n, n, raw=sorted_mat)


def sorted_pairs(relation: LineageRelation) -> tuple[I64, int]:
    """The sorted unique pairs of ``relation`` as an ``(l + m, n)`` matrix, and ``n``.

    Raises:
        CompressionError: the native sort failed (e.g. out of memory).
    """
    try:
        mat, n = kernels.sort_unique(relation.columns(), relation.out_rank)
    except (ValueError, RuntimeError, MemoryError) as e:
        msg = f"Sorting a relation of {relation.n} pairs failed: {e}"
        raise CompressionError(msg) from e
    return mat, int(n)


ColumnarIf = Callable[[LineageTable, LineageTable], bool]
"""Given the ProvRC table and the columnar table of one relation, whether to keep the
columnar one: the close call of the columnar fallback, decided by how the two are stored
(:func:`~dslog_dagster.core.compression.compress` hands it down)."""


def compress_provrc(
    relation: LineageRelation,
    *,
    relative: bool = True,
    mirrored: bool = True,
    progression: bool = True,
    threads: int = DEFAULT_THREADS,
    probe: bool = False,
    columnar_if: ColumnarIf | None = None,
) -> LineageTable:
    """ProvRC (thesis Algorithm 1) on ``relation``, with or without the columnar fallback.

    Phases: put constant axes aside (:func:`_compress_without_constants`); sort, then merge
    rows per attribute in the native streaming pass (:func:`_native_pass`, steps 1-3 of the
    algorithm); retry strided patterns with absolute attributes only
    (:func:`_strided_second_pass`); form the table; weigh the columnar encoding on a close
    call.

    Without ``columnar_if`` the result is always ProvRC rows (``fallback="never"`` of
    :func:`~dslog_dagster.core.compression.compress`). With it the fallback is on: the native
    pass gives up once it keeps about half the pairs as rows (and ``probe`` lets it look at
    windows of a big relation first), and when ProvRC keeps more than 1/16 of the pairs as
    rows, ``columnar_if(provrc_table, columnar_table)`` decides which one is returned.

    Raises:
        CompressionError: the native pass failed.
    """
    l = relation.out_rank
    if l + relation.in_rank == 0:
        n = min(relation.n, 1)
        return LineageTable(relation.out_shape, relation.in_shape, "provrc", n, n)
    constant = _constant_columns(relation)
    if constant:
        return _compress_without_constants(
            relation,
            constant,
            relative=relative,
            mirrored=mirrored,
            progression=progression,
            threads=threads,
            probe=probe,
            columnar_if=columnar_if,
        )
    fallback = columnar_if is not None
    res = _native_pass(
        relation, relative, mirrored, progression, threads, fallback and probe, fallback
    )
    n_unique = int(res["n_unique"])

    def sorted_matrix() -> I64:
        # The native side returns the sorted relation only when a fallback is plausible,
        # and never a copy of an input that was sorted and duplicate-free already
        if res["sorted"] is not None:
            sorted_mat: I64 = res["sorted"]
            return sorted_mat
        if res["presorted"]:
            return relation.matrix()
        u = relation.unique()
        return np.vstack([u.out_cols, u.in_cols])

    if res["aborted"]:
        return columnar_table(relation, sorted_matrix(), n_unique)
    if progression and (relative or mirrored) and res["rows"] > 8:
        res = _strided_second_pass(relation, res, threads)
    table = LineageTable.from_fields(
        relation.out_shape,
        relation.in_shape,
        int(res["rows"]),
        n_unique,
        [res[f] for f in PROVRC_FIELDS],
    )
    if columnar_if is not None and table.rows * 16 > n_unique:
        # Close call: the caller weighs the two encodings as they are stored.
        columnar = columnar_table(relation, sorted_matrix(), n_unique)
        if columnar_if(table, columnar):
            return columnar
    return table


def _compress_without_constants(
    relation: LineageRelation,
    constant: dict[int, int],
    *,
    relative: bool,
    mirrored: bool,
    progression: bool,
    threads: int,
    probe: bool,
    columnar_if: ColumnarIf | None,
) -> LineageTable:
    """Compress ``relation`` without its ``constant`` axes, then put them back.

    Axes on which every pair has the same index (an (N, 1) column vector, a pinned input row)
    carry no structure: compress without them and put them back as absolute ``[c, c]``
    intervals. Otherwise they would hide the merges ProvRC makes on the other axes (and trip
    its early give-up, which looks at one output axis).
    """
    l = relation.out_rank
    keep_out = [j for j in range(l) if j not in constant]
    keep_in = [k for k in range(relation.in_rank) if l + k not in constant]
    reduced = LineageRelation(
        tuple(relation.out_shape[j] for j in keep_out),
        tuple(relation.in_shape[k] for k in keep_in),
        relation.out_cols[keep_out],
        relation.in_cols[keep_in],
        relation.n,
    )
    inner = compress_provrc(
        reduced,
        relative=relative,
        mirrored=mirrored,
        progression=progression,
        threads=threads,
        probe=probe,
        columnar_if=columnar_if,
    )
    return _restore_constant_columns(inner, relation, constant, keep_out, keep_in)


def _native_pass(
    relation: LineageRelation,
    relative: bool,
    mirrored: bool,
    progression: bool,
    threads: int,
    probe: bool,
    give_up: bool,
) -> dict[str, Any]:
    """The native streaming pass: sort, then merge rows attribute by attribute.

    ``give_up``: stop once ProvRC keeps more than about half the pairs as rows (it cannot
    beat the raw encoding then); ``probe``: first try :data:`PROBE_WINDOWS` windows.
    """
    try:
        return kernels.compress(
            relation.columns(),
            relation.out_rank,
            relative,
            mirrored,
            progression,
            0.5 if give_up else 0.0,
            threads,
            PROBE_WINDOWS if probe else 0,
        )
    except (ValueError, RuntimeError, MemoryError) as e:
        msg = f"ProvRC failed on a relation of {relation.n} pairs: {e}"
        raise CompressionError(msg) from e


def _strided_second_pass(
    relation: LineageRelation, res: dict[str, Any], threads: int
) -> dict[str, Any]:
    """Greedy relative merging can claim rows that belong to a strided pattern (e.g.
    ``a = floor((b + 1) / 2)`` becomes n/2 identity runs of length 2). A second pass with
    absolute attributes only lets the progression merge find it; the smaller result is kept."""
    alt = kernels.compress(relation.columns(), relation.out_rank, False, False, True, 0.0, threads)
    if alt["rows"] < res["rows"]:
        alt["sorted"], alt["aborted"] = res["sorted"], res["aborted"]
        return alt
    return res
