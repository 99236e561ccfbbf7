"""What dslog stores for a relation: ProvRC rows, or the columnar encoding when it is smaller.

:func:`~dslog_dagster.core.provrc.compress_provrc` is the ProvRC algorithm; the *choice*
between its table and the columnar encoding is made here, because it weighs the two as they
are stored (:func:`~dslog_dagster.core.format.blob.table_to_blob`), and the storage
format sits above the table type it stores. So the layers read, bottom up: relations
(:mod:`~dslog_dagster.core.relation`), tables and ProvRC (:mod:`~dslog_dagster.core.provrc`),
their algebra (:mod:`~dslog_dagster.core.combine`), the file format
(:mod:`dslog_dagster.core.format`), and this module, which hands ProvRC the size comparison
it needs (:data:`~dslog_dagster.core.provrc.ColumnarIf`).

Also here, because they end in :func:`compress` whenever their direct construction does not
pay: :func:`compress_ranges` (a rank-1 relation given as one input interval per output row)
and :func:`union_tables` (a union formed on the pairs and compressed anew).
"""

from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.combine import check_shapes, merge_tables
from dslog_dagster.core.format.blob import stored_as_parquet, table_to_blob
from dslog_dagster.core.native import kernels
from dslog_dagster.core.provrc import (
    DEFAULT_THREADS,
    LineageTable,
    columnar_table,
    compress_provrc,
    sorted_pairs,
)
from dslog_dagster.core.relation import I64, LineageRelation, Shape, as_index_column, as_shape
from dslog_dagster.errors import InvalidRelationError

__all__ = [
    "column_table",
    "compress",
    "compress_grouped",
    "compress_ranges",
    "expand_ranges",
    "stable_order",
    "union_tables",
]


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

    Raises:
        InvalidRelationError: ``relation`` is not a :class:`LineageRelation`.
        CompressionError: the native kernels failed.
    """
    if not isinstance(relation, LineageRelation):
        msg = f"compress() takes a LineageRelation, got `{type(relation).__name__}`."
        raise InvalidRelationError(msg)
    if fallback == "always" and relation.out_rank + relation.in_rank > 0:
        mat, n = sorted_pairs(relation)
        return columnar_table(relation, mat, n)
    return compress_provrc(
        relation,
        relative=relative,
        mirrored=mirrored,
        progression=progression,
        threads=threads,
        probe=probe,
        columnar_if=columnar_is_smaller if fallback == "auto" else None,
    )


def compress_grouped(
    out_shape: Sequence[int] | int,
    in_shape: Sequence[int] | int,
    pairs: I64,
    *,
    threads: int = DEFAULT_THREADS,
) -> LineageTable:
    """:func:`compress` of a rank-1 ← rank-1 relation handed over as a ``(2, n)`` matrix of
    pairs (output rows, then input rows) ordered by output row, each row's inputs in any
    order, repeats allowed: what the id tap gives for an aggregation whose rows reached it
    sorted by group. The caller gives the matrix up: each output row's inputs are sorted in
    place and repeats dropped (native, no buffer), and ProvRC and the columnar encoding then
    work on the matrix itself, which the columnar table keeps. At 10^8 pairs that is 1.6 GB
    neither copied nor sorted again. Pairs not ordered by output row are compressed as any
    relation (sorted into a copy).

    Raises:
        InvalidRelationError: ``pairs`` is not a writable C-contiguous ``(2, n)`` int64
            matrix, or holds rows outside the shapes.
        CompressionError: the native kernels failed.
    """
    if (
        not isinstance(pairs, np.ndarray)
        or pairs.dtype != np.int64
        or pairs.ndim != 2
        or pairs.shape[0] != 2
        or not pairs.flags.c_contiguous
        or not pairs.flags.writeable
    ):
        msg = "compress_grouped() takes a writable C-contiguous (2, n) int64 matrix of pairs."
        raise InvalidRelationError(msg)
    whole = LineageRelation.from_columns(out_shape, in_shape, [pairs[0]], [pairs[1]], copy=False)
    if whole.out_rank != 1 or whole.in_rank != 1:
        msg = "compress_grouped() takes a rank-1 output and input."
        raise InvalidRelationError(msg)
    n = kernels.sort_runs_unique(pairs)
    if n < 0:  # not ordered by output row
        return compress(whole, threads=threads)
    kept = pairs if n == pairs.shape[1] else np.ascontiguousarray(pairs[:, :n])
    rel = LineageRelation(whole.out_shape, whole.in_shape, kept[:1], kept[1:], n)
    return compress(rel, threads=threads)


def columnar_is_smaller(provrc: LineageTable, columnar: LineageTable) -> bool:
    """The close call of ``fallback="auto"``, on the bytes the store keeps (the tables'
    blobs): keep the columnar table only when it is clearly smaller. ProvRC answers queries
    without expanding cells, so a few dozen bytes of metadata on a tiny table are not worth
    losing that; but a ProvRC table larger than Parquet-zstd of its pairs (the columnar
    table then stores that Parquet file) is never kept: the store is never worse than a
    generic encoding."""
    p, c = len(table_to_blob(provrc)), table_to_blob(columnar)
    return len(c) < p - max(128, p // 20) or (stored_as_parquet(c) and len(c) < p)


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
    osh, ish, o, a_lo, a_hi = _checked_ranges(out_shape, in_shape, out_rows, lo, hi)
    n = len(o)
    if n == 0:
        return LineageTable.from_fields(
            osh, ish, 0, 0, [np.zeros((1, 0), np.int64) for _ in range(8)]
        )
    if n > 1 and not bool(np.all(o[1:] > o[:-1])):
        order = stable_order(o, osh[0])
        o, a_lo, a_hi = o[order], a_lo[order], a_hi[order]
        if bool(np.any(o[1:] == o[:-1])):
            # overlapping intervals of one row: uniting the pairs is compress()'s job
            return compress(
                _expand_ranges(osh, ish, o, a_lo, a_hi), fallback=fallback, threads=threads
            )
    if osh[0] * ish[0] >= 1 << 62:
        # mult·floor((b + r)/q) could leave int64 (mult < n_in, b < n_out); never in practice
        return compress(_expand_ranges(osh, ish, o, a_lo, a_hi), fallback=fallback, threads=threads)
    table = _plateau_rows(osh, ish, o, a_lo, a_hi)
    if fallback == "auto" and table.rows * 16 > table.n_pairs:
        return compress(_expand_ranges(osh, ish, o, a_lo, a_hi), threads=threads)
    return table


def stable_order(o: I64, n_out: int) -> I64:
    """The stable order that sorts ``o`` (values in ``[0, n_out)``). Distinct values dense
    in that range (an aggregation's output rows or group keys) are placed by a scatter into a
    table of the range, two passes instead of a comparison sort: 10^7 groups in ~0.1 s
    instead of ~1 s."""
    if n_out <= 4 * o.size:
        at = np.full(n_out, -1, np.int64)
        at[o] = np.arange(o.size, dtype=np.int64)
        order = at[at >= 0]
        if order.size == o.size:  # else repeated rows: the last one's index was kept
            return order
    sorted_order: I64 = np.argsort(o, kind="stable")
    return sorted_order


def _checked_ranges(
    out_shape: Sequence[int] | int,
    in_shape: Sequence[int] | int,
    out_rows: npt.ArrayLike,
    lo: npt.ArrayLike,
    hi: npt.ArrayLike,
) -> tuple[Shape, Shape, I64, I64, I64]:
    """The arguments of :func:`compress_ranges`, validated: shapes and int64 columns."""
    osh = as_shape(out_shape, "Output")
    ish = as_shape(in_shape, "Input")
    if len(osh) != 1 or len(ish) != 1:
        msg = (
            f"compress_ranges() takes a rank-1 output and input, got shapes {osh} and {ish}; "
            "use compress() on a LineageRelation for other ranks."
        )
        raise InvalidRelationError(msg)
    o = as_index_column(out_rows, "out_rows")
    a_lo = as_index_column(lo, "lo")
    a_hi = as_index_column(hi, "hi")
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
    return osh, ish, o, a_lo, a_hi


def _plateau_rows(osh: Shape, ish: Shape, o: I64, a_lo: I64, a_hi: I64) -> LineageTable:
    """The direct table of :func:`compress_ranges` for distinct, sorted output rows ``o``:
    plateaus, then runs of plateaus joined greedily from the left, one row per run."""
    n = len(o)
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
    return LineageTable.from_fields(
        osh,
        ish,
        rows,
        int((width + 1).sum()),
        [
            s0.reshape(1, rows),
            (p_s[last] + p_len[last] - 1).reshape(1, rows),
            np.where(rel, 0, -1).astype(np.int64).reshape(1, rows),
            q.reshape(1, rows),
            r.reshape(1, rows),
            mult.reshape(1, rows),
            in_lo.reshape(1, rows),
            in_hi.reshape(1, rows),
        ],
    )


def union_tables(tables: Sequence[LineageTable], *, disjoint: bool = True) -> LineageTable:
    """Union of tables whose output ranges may interleave (e.g. the rows of an aggregation
    whose ids were summarised as ranges, and the rows whose ids were found by a join).

    :func:`merge_tables` would concatenate columnar tables in range order, which is only
    sorted when the ranges are disjoint; here they are sorted again (and compressed anew,
    which may find ProvRC rows across the pieces). With ``disjoint=False`` the tables may
    also share pairs (both sides of a self-join can name the same input row): the union is
    then formed on the pairs and compressed again, which costs work in the pairs.
    """
    if not tables:
        msg = "union_tables needs at least one table."
        raise InvalidRelationError(msg)
    osh, ish = check_shapes(tables)
    nonempty = [t for t in tables if t.rows]
    if len(nonempty) <= 1:
        return nonempty[0] if nonempty else tables[0]
    if disjoint and not all(t.encoding == "columnar" for t in nonempty):
        return merge_tables(nonempty)
    rels = [t.decompress() for t in nonempty]  # a columnar table's pairs as they are stored
    outs = np.concatenate([r.out_cols for r in rels], axis=1)
    ins = np.concatenate([r.in_cols for r in rels], axis=1)
    return compress(LineageRelation(osh, ish, outs, ins, outs.shape[1]))


def column_table(pairs: Iterable[tuple[int, int]], n_out: int, n_in: int) -> LineageTable:
    """The column factor of a frame's cell lineage: ``(output column, input column)`` pairs
    (any iterable of 2-tuples) as a ProvRC table between ``(n_out,)`` and ``(n_in,)``."""
    jc = np.asarray(sorted(pairs), np.int64).reshape(-1, 2)
    return compress(
        LineageRelation.from_columns((n_out,), (n_in,), [jc[:, 0]], [jc[:, 1]]),
        fallback="never",
    )
