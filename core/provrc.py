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

Rows are disjoint, so ``decompress(compress(R)) == dedupe(R)`` exactly.

The stored orientation is *backward* (outputs absolute). :meth:`LineageTable.forward` derives
the *forward* orientation (inputs absolute: each input attribute gets its exact hull interval,
each output attribute its absolute clip plus the constraints that now point from inputs to it)
without expanding anything. Both orientations stand for the same set of pairs.

**Columnar fallback.** When ProvRC does not pay (e.g. sorting random data, where every output
cell has its own input cell) the table is kept as the sorted, de-duplicated raw relation
(``encoding == "columnar"``) and stored with delta + byte-plane + zstd coding, which is never
larger than a generic columnar encoding. :func:`compress` picks the smaller and records it.
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.native import kernels as _native
from dslog_dagster.core.relation import I64, LineageRelation, Shape, _as_index_column, as_shape
from dslog_dagster.errors import CompressionError, InvalidRelationError

Encoding = Literal["provrc", "columnar"]

# Threads for the streaming phase of the native compressor (results do not depend on it).
DEFAULT_THREADS = max(1, min(os.cpu_count() or 1, 4))
# Windows probed before the full pass on big relations (see ``compress(probe=...)``).
PROBE_WINDOWS = 16


def _empty(rows: int, cols: int = 0) -> I64:
    return np.zeros((rows, cols), dtype=np.int64)


_LAZY_FIELDS = ("out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")


@dataclass(frozen=True, slots=True)
class LineageTable:
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
    # Encoded file bytes per codec, filled lazily by dslog_dagster.core.storage.
    encoded: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    # A factored table (see :func:`factored_table`): the (row table, column table) parts whose
    # products it stands for. Its ProvRC fields are left unset until first read.
    _factors: "tuple[tuple[LineageTable, LineageTable], ...]" = field(
        default=(), init=False, compare=False, repr=False
    )

    def __getattr__(self, name: str) -> I64:
        # Reached only when a slot is unset: the ProvRC fields of a factored table, formed
        # here on first read so every consumer sees an ordinary ProvRC table.
        if name not in _LAZY_FIELDS:
            raise AttributeError(name)
        try:
            factors = object.__getattribute__(self, "_factors")
        except AttributeError:
            factors = ()
        if not factors:
            raise AttributeError(name)
        from dslog_dagster.core.combine import concat_tables, product_table

        whole = concat_tables([product_table(r, c) for r, c in factors])
        for f in _LAZY_FIELDS:
            object.__setattr__(self, f, getattr(whole, f))
        value: I64 = getattr(whole, name)
        return value

    @property
    def stored_rows(self) -> int:
        """Rows the table is stored as: its ProvRC or columnar rows, or for a factored table
        the rows of its factors (``rows`` counts the ProvRC rows of the product)."""
        if self._factors:
            return sum(r.stored_rows + c.stored_rows for r, c in self._factors)
        return self.rows

    @property
    def stored_encoding(self) -> str:
        """``"factored"`` for a factored table, else :attr:`encoding`."""
        return "factored" if self._factors else self.encoding

    @property
    def factors(self) -> "tuple[tuple[LineageTable, LineageTable], ...]":
        """The (row table, column table) parts of a factored table (empty for any other)."""
        return self._factors

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
        mat, n = _native.decompress(*self.native_args())
        return LineageRelation(self.out_shape, self.in_shape, mat[:l], mat[l:], int(n))

    def as_provrc(self) -> "LineageTable":
        """This table in ProvRC form (re-compressing a columnar table; ProvRC is never worse
        for queries, only sometimes for bytes)."""
        if self.encoding == "provrc":
            return self
        return compress(self.decompress(), fallback="never")

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
    flags = _native.constant_columns(cols)
    return {c: int(cols[c][0]) for c, constant in enumerate(flags) if constant}


def _restore_constant_columns(
    t: LineageTable,
    rel: LineageRelation,
    constant: dict[int, int],
    keep_out: list[int],
    keep_in: list[int],
) -> LineageTable:
    """Put the constant columns removed by :func:`compress` back into ``t``."""
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


def _columnar(rel: LineageRelation, sorted_mat: I64, n: int) -> LineageTable:
    return LineageTable(rel.out_shape, rel.in_shape, "columnar", n, n, raw=sorted_mat)


def compress(
    relation: LineageRelation,
    *,
    relative: bool = True,
    mirrored: bool = True,
    progression: bool = True,
    fallback: Literal["auto", "never", "always"] = "auto",
    threads: int = DEFAULT_THREADS,
    probe: bool = True,
) -> LineageTable:
    """Compress a relation with ProvRC (or the columnar fallback when ProvRC does not pay).

    Args:
        relation: the lineage relation (any rank, unsorted, duplicates allowed).
        relative: allow relative attributes (thesis Algorithm 1, step 2).
        mirrored: allow mirrored attributes (``a = C - b``).
        progression: merge arithmetic progressions of rows into strided attributes.
        fallback: ``auto`` stores whichever of ProvRC and the columnar encoding is smaller;
            ``never`` forces ProvRC, ``always`` forces the columnar encoding.
        threads: native worker threads for large relations (the table is the same for any
            number of threads).
        probe: with ``fallback="auto"``, on relations of 2^18 pairs or more, first run the
            streaming phase on 16 evenly spaced windows of the sorted relation and take the
            columnar encoding at once when every window keeps more than 60 % of its pairs as
            rows (ProvRC gives up at 1/2 anyway). Saves the hopeless full pass on unstructured
            lineage; a ProvRC table, when one is produced, is the same either way.

    Returns:
        A :class:`LineageTable`; ``table.encoding`` records the choice.
    """
    if not isinstance(relation, LineageRelation):
        msg = f"compress() takes a LineageRelation, got `{type(relation).__name__}`."
        raise InvalidRelationError(msg)
    l = relation.out_rank
    if l + relation.in_rank == 0:
        n = min(relation.n, 1)
        return LineageTable(relation.out_shape, relation.in_shape, "provrc", n, n)
    if fallback == "always":
        try:
            mat, n = _native.sort_unique(relation.columns(), l)
        except (ValueError, RuntimeError, MemoryError) as e:
            msg = f"Sorting a relation of {relation.n} pairs failed: {e}"
            raise CompressionError(msg) from e
        return _columnar(relation, mat, int(n))
    constant = _constant_columns(relation)
    if constant:
        # Axes on which every pair has the same index (an (N, 1) column vector, a pinned
        # input row) carry no structure: compress without them and put them back as
        # absolute [c, c] intervals. Otherwise they would hide the merges ProvRC makes on the
        # other axes (and trip its early give-up, which looks at one output axis).
        keep_out = [j for j in range(l) if j not in constant]
        keep_in = [k for k in range(relation.in_rank) if l + k not in constant]
        reduced = LineageRelation(
            tuple(relation.out_shape[j] for j in keep_out),
            tuple(relation.in_shape[k] for k in keep_in),
            relation.out_cols[keep_out],
            relation.in_cols[keep_in],
            relation.n,
        )
        inner = compress(
            reduced,
            relative=relative,
            mirrored=mirrored,
            progression=progression,
            fallback=fallback,
            threads=threads,
            probe=probe,
        )
        return _restore_constant_columns(inner, relation, constant, keep_out, keep_in)
    # ProvRC cannot beat the raw encoding once it keeps more than about half the raw rows.
    abort = 0.5 if fallback == "auto" else 0.0
    try:
        res = _native.compress(
            relation.columns(),
            l,
            relative,
            mirrored,
            progression,
            abort,
            threads,
            PROBE_WINDOWS if probe and fallback == "auto" else 0,
        )
    except (ValueError, RuntimeError, MemoryError) as e:
        msg = f"ProvRC failed on a relation of {relation.n} pairs: {e}"
        raise CompressionError(msg) from e
    n_unique = int(res["n_unique"])

    def sorted_matrix() -> I64:
        # The native side returns the sorted relation only when a fallback is plausible.
        if res["sorted"] is not None:
            sorted_mat: I64 = res["sorted"]
            return sorted_mat
        u = relation.unique()
        return np.vstack([u.out_cols, u.in_cols])

    if res["aborted"]:
        return _columnar(relation, sorted_matrix(), n_unique)
    if progression and (relative or mirrored) and res["rows"] > 8:
        # Greedy relative merging can claim rows that belong to a strided pattern
        # (e.g. a = floor((b + 1) / 2) becomes n/2 identity runs of length 2). A second pass
        # with absolute attributes only lets the progression merge find it; keep the smaller.
        alt = _native.compress(relation.columns(), l, False, False, True, 0.0, threads)
        if alt["rows"] < res["rows"]:
            alt["sorted"], alt["aborted"] = res["sorted"], res["aborted"]
            res = alt
    table = LineageTable(
        relation.out_shape,
        relation.in_shape,
        "provrc",
        int(res["rows"]),
        n_unique,
        res["out_lo"],
        res["out_hi"],
        res["in_ref"],
        res["in_q"],
        res["in_r"],
        res["in_mult"],
        res["in_lo"],
        res["in_hi"],
    )
    if fallback == "auto" and table.rows * 16 > n_unique:
        # Close call: compare the encoded sizes. ProvRC answers queries without expanding
        # cells, so it is kept unless the columnar file is clearly smaller (a few dozen bytes
        # of metadata on a tiny table are not worth losing that).
        from dslog_dagster.core.storage import encoded_size

        columnar = _columnar(relation, sorted_matrix(), n_unique)
        provrc_size = encoded_size(table)
        if encoded_size(columnar) < provrc_size - max(128, provrc_size // 20):
            return columnar
    return table


def expand_ranges(keys: I64, lo: I64, hi: I64) -> tuple[I64, I64]:
    """The intervals ``keys[i] ← lo[i]..hi[i]`` (``lo <= hi``) spelled out, in order: each
    key repeated once per value, and the values."""
    lengths = hi - lo + 1
    starts = np.cumsum(lengths) - lengths
    values = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts - lo, lengths)
    return np.repeat(keys, lengths), values


def _expand_ranges(
    out_shape: Shape, in_shape: Shape, out_rows: I64, lo: I64, hi: I64
) -> LineageRelation:
    """The (output row, input row) pairs ``out_rows[i] ← lo[i]..hi[i]``, spelled out."""
    o, a = expand_ranges(out_rows, lo, hi)
    return LineageRelation.from_columns(out_shape, in_shape, [o], [a], copy=False)


def _range_join(ok: npt.NDArray[np.bool_], step: I64) -> npt.NDArray[np.bool_]:
    """Greedy left-to-right choice of which links join their two pieces into one row.

    Link ``k`` sits between pieces ``k`` and ``k + 1``; ``ok`` says they may share a row and
    ``step`` is the row's step if they do. A row is a run of joined links of one step, so link
    ``k`` joins iff it is ok and either link ``k - 1`` did not join (piece ``k`` opens a row)
    or it has link ``k - 1``'s step. Within a run of ok links of one step every link after the
    first joins; the first joins iff the link before it did not, which alternates along a chain
    of one-link runs and restarts wherever a longer run or a non-ok link precedes. That is the
    sequential recurrence evaluated with cumulative maxima instead of a Python loop.
    """
    if not len(ok):
        return ok.copy()
    prev_ok = np.concatenate([[False], ok[:-1]])
    same = np.concatenate([[False], step[1:] == step[:-1]])
    first = ok & ~(prev_ok & same)  # an ok link that opens a run of one step
    join: npt.NDArray[np.bool_] = ok & ~first
    idx = np.flatnonzero(first)
    if idx.size == 0:
        return join
    # What precedes a first link decides it: a non-ok link (a chain starts: it joins), the
    # last link of a longer run (joined, so it does not), or a one-link run (the opposite of
    # that link, itself a first link: so the first links alternate until the next restart).
    chain_start = ~prev_ok[idx]
    after_long = ~chain_start & ~first[np.maximum(idx - 1, 0)]
    restart = chain_start | after_long
    pos = np.arange(idx.size)
    last_reset = np.maximum.accumulate(np.where(restart, pos, 0))
    join[idx] = chain_start[last_reset] ^ ((pos - last_reset) % 2 == 1)
    return join


def compress_ranges(
    out_shape: Sequence[int] | int,
    in_shape: Sequence[int] | int,
    out_rows: npt.ArrayLike,
    lo: npt.ArrayLike,
    hi: npt.ArrayLike,
    *,
    fallback: Literal["auto", "never"] = "auto",
    threads: int = DEFAULT_THREADS,
) -> LineageTable:
    """ProvRC table of a rank-1 ← rank-1 relation given as one input interval per output row.

    Output row ``out_rows[i]`` depends on input rows ``lo[i]..hi[i]`` (inclusive), the shape
    of an aggregation's lineage over sorted ids. The table is built from the intervals with
    O(rows) NumPy work (plus a sort when the rows come unordered), never spelling out the pairs
    that :func:`compress` would have to be given (10^6 for 10^5 groups of 10, ~25 ms of
    native work). Consecutive output rows with equal intervals form a *plateau*; a run of
    plateaus of equal length ``q`` over contiguous rows, of one width, whose ``lo`` advances
    by a constant ``mult`` becomes one row with the relative attribute
    ``F(b) = mult·floor((b + r)/q)`` (``q = 1``: pooling, ``mult < 0``: mirrored, ``q > 1``: an
    aggregate repeated over rows); a lone plateau becomes an absolute row; a plateau cut short
    at either end of a run gets its own row. Runs are chosen greedily from the left. For these
    patterns the fields are the ones :func:`compress` gives the same pairs (``r`` in
    ``[0, q)``, absolute attributes with ``q = mult = 1``), so tables built either way merge
    alike across partitions. Steps that vary periodically (``lo = floor(2b/3)``) are beyond
    this family; there :func:`compress` can need fewer rows (about half as many at worst in
    random tests), and ``fallback="auto"`` still keeps the direct table when it has 16 pairs
    or more per row.

    Args:
        out_shape: ``(n_out,)``.
        in_shape: ``(n_in,)``.
        out_rows: output row of each interval; distinct rows, in any order. Repeated rows are
            accepted (their intervals are united) but take the :func:`compress` path.
        lo: first input row of each interval.
        hi: last input row of each interval (``lo <= hi``).
        fallback: ``auto`` keeps the direct table only where ProvRC clearly pays (at least 16
            pairs per row, the point below which :func:`compress` starts weighing the columnar
            encoding); otherwise it spells out the pairs and returns :func:`compress`'s table,
            so scattered intervals are stored exactly as before. ``never`` always returns the
            direct table.
        threads: native threads for the :func:`compress` path.

    Returns:
        A :class:`LineageTable` whose :meth:`~LineageTable.decompress` is exactly the pairs.

    Raises:
        UnsupportedArrayError: non-integer or non-1-D columns.
        InvalidRelationError: not rank 1 ← rank 1, ragged columns, ``lo > hi``, or rows out of
            shape.
    """
    osh = as_shape(out_shape, "Output")
    ish = as_shape(in_shape, "Input")
    if len(osh) != 1 or len(ish) != 1:
        msg = (
            f"compress_ranges() takes a rank-1 output and input, got shapes {osh} and {ish}; "
            "use compress() on a LineageRelation for other ranks."
        )
        raise InvalidRelationError(msg)
    o = _as_index_column(out_rows, "out_rows")
    a_lo = _as_index_column(lo, "lo")
    a_hi = _as_index_column(hi, "hi")
    n = len(o)
    if len(a_lo) != n or len(a_hi) != n:
        msg = f"`out_rows`, `lo` and `hi` are ragged (lengths {n}, {len(a_lo)}, {len(a_hi)})."
        raise InvalidRelationError(msg)
    if n and bool(np.any(a_lo > a_hi)):
        i = int(np.argmax(a_lo > a_hi))
        msg = f"Interval {i} is empty (`lo={a_lo[i]}` > `hi={a_hi[i]}`); pass lo <= hi."
        raise InvalidRelationError(msg)
    if n and (int(o.min()) < 0 or int(o.max()) >= osh[0]):
        msg = f"`out_rows` holds rows outside the output shape {osh}."
        raise InvalidRelationError(msg)
    if n and (int(a_lo.min()) < 0 or int(a_hi.max()) >= ish[0]):
        msg = f"`lo`/`hi` hold rows outside the input shape {ish}."
        raise InvalidRelationError(msg)
    if n == 0:
        return LineageTable(osh, ish, "provrc", 0, 0, *(_empty(1) for _ in range(8)))
    if n > 1 and not bool(np.all(o[1:] > o[:-1])):
        order = np.argsort(o, kind="stable")
        o, a_lo, a_hi = o[order], a_lo[order], a_hi[order]
        if bool(np.any(o[1:] == o[:-1])):
            # overlapping intervals of one row: uniting the pairs is compress()'s job
            return compress(
                _expand_ranges(osh, ish, o, a_lo, a_hi), fallback=fallback, threads=threads
            )
    if osh[0] * ish[0] >= 1 << 62:
        # mult·floor((b + r)/q) could leave int64 (mult < n_in, b < n_out); never in practice
        return compress(_expand_ranges(osh, ish, o, a_lo, a_hi), fallback=fallback, threads=threads)
    width = a_hi - a_lo
    # plateaus: maximal runs of contiguous output rows with the same interval
    new = np.ones(n, dtype=bool)
    new[1:] = (o[1:] != o[:-1] + 1) | (a_lo[1:] != a_lo[:-1]) | (width[1:] != width[:-1])
    starts = np.flatnonzero(new)
    p_s, p_lo, p_w = o[starts], a_lo[starts], width[starts]
    p_len = np.diff(np.append(starts, n))
    # link k between plateaus k and k+1 may share a row: contiguous rows, same width, same
    # length (the period q); its step is how far lo moves (never 0: plateaus are maximal)
    link_ok = (p_s[1:] == p_s[:-1] + p_len[:-1]) & (p_w[1:] == p_w[:-1]) & (p_len[1:] == p_len[:-1])
    step = p_lo[1:] - p_lo[:-1]
    join = _range_join(link_ok, step)
    first = np.flatnonzero(np.concatenate([[True], ~join]))  # first plateau of each row
    last = np.append(first[1:] - 1, len(starts) - 1)
    rows = len(first)
    s0, lo0, w0 = p_s[first], p_lo[first], p_w[first]
    rel = last > first  # a run of two or more plateaus: relative; a lone one: absolute
    one = np.ones(rows, dtype=np.int64)
    q = np.where(rel, p_len[first], one)
    mult = np.where(rel, np.append(step, 1)[first], one)
    r = (-s0) % q  # 0 for absolute rows; puts the run's first row at a multiple of q
    # relative: F(b) - a in [F(s0) - lo0 - w0, F(s0) - lo0] with F(s0) = mult·(s0 + r)/q
    f0 = mult * ((s0 + r) // q) - lo0
    in_lo = np.where(rel, f0 - w0, lo0)
    in_hi = np.where(rel, f0, lo0 + w0)
    table = LineageTable(
        osh,
        ish,
        "provrc",
        rows,
        int((width + 1).sum()),
        s0.reshape(1, rows),
        (p_s[last] + p_len[last] - 1).reshape(1, rows),
        np.where(rel, 0, -1).astype(np.int64).reshape(1, rows),
        q.reshape(1, rows),
        r.reshape(1, rows),
        mult.reshape(1, rows),
        in_lo.reshape(1, rows),
        in_hi.reshape(1, rows),
    )
    if fallback == "auto" and rows * 16 > table.n_pairs:
        return compress(_expand_ranges(osh, ish, o, a_lo, a_hi), threads=threads)
    return table
