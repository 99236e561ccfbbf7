"""Row lineage compressed where the data is: ProvRC per Spark partition, merged exactly.

The (output row, input row) pairs of a capture are never collected: each partition of the
pair DataFrame is compressed by the native ProvRC kernel inside ``mapInArrow`` (on the
executors), and only the small per-partition tables travel to the driver, where
:func:`~dslog_dagster.core.combine.merge_tables` unites them. With a local master (or a
cluster with a folder shared with the executors, :mod:`~dslog_dagster.spark.staging`) the
output is staged with Spark's writer and each staged file's slot columns are compressed on a
thread of the driver's process (:func:`write_with_lineage`). The
pairs are produced from a frame whose partitions hold disjoint, contiguous ranges of output
row ids (the dense ids of :mod:`dslog_dagster.spark.rowid`), so no shuffle is needed and the
union is exact.
"""

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dslog_dagster.core.combine import merge_tables
from dslog_dagster.core.compression import union_tables
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.spark.rowid import MID, PART_BITS, partition_offsets
from dslog_dagster.spark.staging import check_staged_rows, staged_files
from dslog_dagster.spark.summaries import GroupSummaries, SummariesMissing, read_summaries

__all__ = [
    "RangeColumns",
    "RangesNotExact",
    "RowTables",
    "collected_row_tables",
    "compress_pairs",
    "hashable",
    "range_rows",
    "refetch_ids",
    "row_tables",
    "shift_rows",
]


class RangesNotExact(Exception):
    """Some row's range summary (``lo..hi``) was not exact (``ok`` false)."""


@dataclasses.dataclass(frozen=True)
class RowTables:
    """What a pass gives: partition offsets (the last entry is the row count), one merged
    table per group, and per group the number of rows whose range check failed (their pairs
    are not in the table; :func:`refetch_ids` finds them)."""

    offsets: list[int]
    tables: list[LineageTable]
    failed: list[int]
    # per group, the failed rows of a range slot with recorded summaries, as the read-back
    # met them, one part per staged file (the id tap matches them without reading the output
    # again, and at 10^7 rows without concatenating them first); None: not kept
    failed_rows: list["list[FailedRows] | None"] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class FailedRows:
    """Rows of one range slot whose check failed: their ``MID``, the key the tap records
    (the keys' hash or the one integral key; 0 where ``null``) and the group's id count."""

    mid: np.ndarray
    key: np.ndarray
    null: np.ndarray
    n: np.ndarray

    @staticmethod
    def concat(parts: "Sequence[FailedRows]") -> "FailedRows":
        return FailedRows(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("mid", "key", "null", "n"))
        )


_BLOB_SCHEMA = "blob binary"


def _compressor(n_out: int, n_in: int, out_col: str, in_col: str):  # type: ignore[no-untyped-def]
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dslog_dagster.core.compression import compress

        outs, ins = [], []
        for b in batches:
            if b.num_rows:
                outs.append(b.column(out_col).to_numpy(zero_copy_only=False))
                ins.append(b.column(in_col).to_numpy(zero_copy_only=False))
        if not outs:
            return
        o = np.concatenate(outs).astype(np.int64, copy=False)
        i = np.concatenate(ins).astype(np.int64, copy=False)
        rel = LineageRelation.from_columns((n_out,), (n_in,), [o], [i])
        blob = table_to_blob(compress(rel, threads=1))
        yield pa.RecordBatch.from_arrays([pa.array([blob], pa.binary())], names=["blob"])

    return run


def compress_pairs(
    pairs: DataFrame, n_out: int, n_in: int, out_col: str = "o", in_col: str = "r"
) -> LineageTable:
    """ProvRC table ``(n_out,) ← (n_in,)`` of the pairs in ``pairs`` (two bigint columns).

    Every partition of ``pairs`` must hold output ids that no other partition holds (true for
    pairs selected straight from a frame with dense row ids); pairs with a null input are
    ignored (a row without a source in this slot).
    """
    clean = pairs.select(out_col, in_col).where(f"`{in_col}` IS NOT NULL")
    blobs = clean.mapInArrow(_compressor(n_out, n_in, out_col, in_col), _BLOB_SCHEMA).collect()
    tables = [table_from_blob(bytes(r["blob"])) for r in blobs]
    if not tables:
        return _empty_table(n_out, n_in)
    return merge_tables(tables)


def _empty_table(n_out: int, n_in: int) -> LineageTable:
    """No pairs between an output of ``n_out`` rows and an input of ``n_in`` rows."""
    z = [np.zeros((1, 0), np.int64) for _ in range(8)]
    return LineageTable(
        out_shape=(n_out,),
        in_shape=(n_in,),
        encoding="provrc",
        rows=0,
        n_pairs=0,
        out_lo=z[0],
        out_hi=z[1],
        in_ref=z[2],
        in_q=z[3],
        in_r=z[4],
        in_mult=z[5],
        in_lo=z[6],
        in_hi=z[7],
    )


def shift_rows(table: LineageTable, offset: int, n_out: int) -> LineageTable:
    """``table`` over local output rows ``0..k-1`` moved to ``offset..offset+k-1`` of an
    output of ``n_out`` rows (exact: a relative constraint ``F(b) = mult·floor((b + r)/q)`` on
    the row axis becomes ``F(b') `` with ``r' = r - offset``)."""
    out_shape = (n_out, *table.out_shape[1:])
    if table.encoding == "columnar":
        raw = table.raw.copy()
        raw[0] += offset
        return dataclasses.replace(table, out_shape=out_shape, raw=raw, encoded={})
    out_lo, out_hi, in_r = table.out_lo.copy(), table.out_hi.copy(), table.in_r.copy()
    in_lo, in_hi = table.in_lo.copy(), table.in_hi.copy()
    out_lo[0] += offset
    out_hi[0] += offset
    rel = table.in_ref >= 0
    in_r[table.in_ref == 0] -= offset
    # canonical form r ∈ [0, q): mult·floor((b + r)/q) = mult·floor((b + r mod q)/q) + mult·k
    # with k = (r - r mod q)/q, so the delta bounds absorb mult·k. Equal patterns from
    # different partitions then have equal fields and merge across the seams.
    q = np.where(rel, table.in_q, 1)
    k = np.where(rel, (in_r - np.mod(in_r, q)) // q, 0)
    in_r = np.where(rel, np.mod(in_r, q), in_r)
    in_lo = in_lo - table.in_mult * k
    in_hi = in_hi - table.in_mult * k
    return dataclasses.replace(
        table,
        out_shape=out_shape,
        out_lo=out_lo,
        out_hi=out_hi,
        in_r=in_r,
        in_lo=in_lo,
        in_hi=in_hi,
        encoded={},
    )


@dataclasses.dataclass(frozen=True)
class RangeColumns:
    """The output columns of a range slot's summary (see
    :func:`~dslog_dagster.spark.ranges.range_aggregate`): ``lo`` (the slot's own
    column), ``hi``, ``ok``, the id count ``n``, and its aggregation's group keys and their
    hash (empty / None when the keys are not stored). With ``summary`` (a directory), ``hi``,
    ``ok`` and ``n`` are not columns: the aggregation recorded them there per group, found by
    the group's key (:mod:`~dslog_dagster.spark.summaries`)."""

    lo: str
    hi: str | None
    ok: str | None
    n: str | None
    keys: tuple[str, ...] = ()
    hash: str | None = None
    summary: str | None = None

    @property
    def key(self) -> str | None:
        """The column holding the key the tap and the summaries record: the keys' hash, or
        the one integral key."""
        return self.hash if self.hash is not None else self.keys[0] if self.keys else None

    def columns(self) -> list[str]:
        """The columns the summary is read from."""
        if self.summary is not None:
            assert self.key is not None
            return [self.lo, self.key]
        assert self.hi is not None
        assert self.ok is not None
        return [self.lo, self.hi, self.ok]


def _range_struct(lo: pa.Array, hi: pa.Array, ok: pa.Array) -> pa.StructArray:
    """The ``struct<lo, hi, ok>`` :func:`_compress_partition` reads for a range group."""
    return pa.StructArray.from_arrays([lo, hi, ok], names=["lo", "hi", "ok"])


def range_rows(lo: pa.Array, ok: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a range slot: whether it has ids (``lo`` set) and whether their range is
    exact (``ok``, null counting as true). Rows with ids whose range is not exact are the
    ones whose ids are found again."""
    import pyarrow.compute as pc

    valid = np.asarray(lo.is_valid().to_numpy(zero_copy_only=False))
    ok_a = np.asarray(pc.fill_null(ok, True).to_numpy(zero_copy_only=False), bool)
    return valid, ok_a


def _range_intervals(
    local: np.ndarray, col: pa.Array
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Local rows and their input intervals ``lo..hi`` of a ``struct<lo, hi, ok, ...>`` column,
    for the rows whose ``ok`` holds, and the number of rows with ids whose ``ok`` fails (left
    out: their ids are found by :func:`refetch_ids`)."""
    import pyarrow.compute as pc

    lo_a = pc.struct_field(col, "lo")
    hi_a = pc.struct_field(col, "hi")
    valid, ok = range_rows(lo_a, pc.struct_field(col, "ok"))
    keep = valid & ok
    failed = int((valid & ~ok).sum())
    lo = lo_a.to_numpy(zero_copy_only=False)[keep].astype(np.int64)
    hi = hi_a.to_numpy(zero_copy_only=False)[keep].astype(np.int64)
    return local[keep], lo, hi, failed


def _group_compressor(kinds: list[str], n_ins: list[int], check_ok: bool):  # type: ignore[no-untyped-def]
    """Per partition: the row count and, per group, the ProvRC blob of its (local row, input
    row) pairs. ``kinds[g]`` is ``"scalar"`` (bigint), ``"list"`` (array) or ``"range"``
    (``struct<lo, hi, ok>``). With ``check_ok`` the partition reports its rows whose ``ok``
    column is false (and compresses nothing: the capture reruns)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b for b in batches if b.num_rows]
        if parts:
            yield _compress_partition(pa.Table.from_batches(parts), kinds, n_ins, check_ok)

    return run


def _compress_partition(
    whole: pa.Table, kinds: list[str], n_ins: list[int], check_ok: bool
) -> pa.RecordBatch:
    """The rows of :func:`_group_compressor` for one partition's ``MID``, ``g*``, ``__ok``."""
    import pyarrow.compute as pc

    from dslog_dagster.core.compression import compress, compress_ranges

    mids = whole.column(MID).to_numpy()
    bad = 0
    if check_ok:
        ok = whole.column("__ok").combine_chunks()
        bad = len(ok) - int(pc.sum(pc.fill_null(ok, True).cast(pa.int64())).as_py() or 0)
    pids, counts, groups, blobs, bads = [], [], [], [], []
    # a partition read back from files may hold rows of several marked partitions (and
    # one marked partition may be split over several): each piece is compressed alone,
    # with its rows numbered by their index in their marked partition
    all_pids = mids >> PART_BITS
    for pid in np.unique(all_pids):
        sel = all_pids == pid
        t = whole if sel.all() else whole.filter(pa.array(sel))
        local = (mids[sel] & ((1 << PART_BITS) - 1)).astype(np.int64)
        n_local = int(local.max()) + 1
        pids.append(int(pid))
        counts.append(n_local)
        groups.append(-1)
        blobs.append(b"")
        bads.append(bad)
        for g, kind in enumerate(kinds if bad == 0 else []):
            col = t.column(f"g{g}").combine_chunks()
            failed = 0
            if kind == "range":
                # the intervals go to ProvRC as they are, no pairs spelled out (the rows of a
                # marked partition are distinct; repeated ones would be united exactly)
                rows, lo, hi, failed = _range_intervals(local, col)
                table = compress_ranges((n_local,), (n_ins[g],), rows, lo, hi, threads=1)
            else:
                if kind == "list":
                    flat = col.flatten()
                    parents = pc.list_parent_indices(col).to_numpy()
                    values = flat.to_numpy(zero_copy_only=False)
                    keep = ~np.asarray(flat.is_null().to_numpy(zero_copy_only=False))
                    o, r = local[parents][keep], values[keep].astype(np.int64)
                else:
                    keep = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False))
                    o = local[keep]
                    r = col.to_numpy(zero_copy_only=False)[keep].astype(np.int64)
                rel = LineageRelation.from_columns((n_local,), (n_ins[g],), [o], [r])
                table = compress(rel, threads=1)
            pids.append(int(pid))
            counts.append(n_local)
            groups.append(g)
            blobs.append(table_to_blob(table))
            bads.append(failed)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(pids, pa.int64()),
            pa.array(counts, pa.int64()),
            pa.array(groups, pa.int32()),
            pa.array(blobs, pa.binary()),
            pa.array(bads, pa.int64()),
        ],
        names=["pid", "n", "g", "blob", "bad"],
    )


def row_tables(
    marked: DataFrame, groups: list[tuple[Column, str, int]], oks: Sequence[Column] = ()
) -> RowTables:
    """One pass over ``marked`` (persisted, or read back from the files it was written to,
    with ``MID``): rows per marked partition and the row lineage of every group, compressed
    per partition on the executors.

    Args:
        marked: the output frame from :func:`~dslog_dagster.spark.rowid.mark`.
        groups: per group, a column of input row ids, its kind (``"scalar"`` bigint,
            ``"list"`` array<bigint>, ``"range"`` struct<lo, hi, ok>) and the input's row
            count.
        oks: boolean columns that must hold on every row (null counts as true) for the
            range groups to be exact.

    Returns:
        The partition offsets (dense id of each partition's first row; the last entry is the
        row count), one table ``(n_out,) ← (n_in,)`` per group, merged exactly, and per
        ``"range"`` group the rows whose own ``ok`` failed (not in its table).

    Raises:
        RangesNotExact: some row failed ``oks``.
    """
    cols = [F.col(MID), *[c.alias(f"g{g}") for g, (c, _, _) in enumerate(groups)]]
    if oks:
        ok = F.coalesce(oks[0], F.lit(True))
        for c in oks[1:]:
            ok = ok & F.coalesce(c, F.lit(True))
        cols.append(ok.alias("__ok"))
    fn = _group_compressor([k for _, k, _ in groups], [n for _, _, n in groups], bool(oks))
    got = marked.select(*cols).mapInArrow(fn, _ROWS_SCHEMA)
    rows = [r.asDict() for r in got.collect()]
    return _assemble(rows, [n for _, _, n in groups])


def _assemble(rows: list[dict[str, Any]], n_ins: list[int]) -> RowTables:
    """Offsets and merged tables from the per-partition rows of :func:`_compress_partition`."""
    if any(int(r["bad"]) for r in rows if r["g"] < 0):
        raise RangesNotExact
    counts: dict[int, int] = {}
    for r in rows:
        if r["g"] < 0:  # rows of a marked partition are numbered 0..n-1 without gaps
            counts[int(r["pid"])] = max(counts.get(int(r["pid"]), 0), int(r["n"]))
    offsets = partition_offsets(counts)
    failed = [0] * len(n_ins)
    for r in rows:
        if r["g"] >= 0:
            failed[r["g"]] += int(r["bad"])
    return RowTables(offsets, _merge_pieces(rows, offsets, n_ins), failed)


def _merge_pieces(
    rows: list[dict[str, Any]], offsets: list[int], n_ins: list[int]
) -> list[LineageTable]:
    """Per group, the union of the partitions' tables moved to their dense rows."""
    n_out = offsets[-1]
    pieces: list[list[LineageTable]] = [[] for _ in n_ins]
    for r in rows:
        if r["g"] >= 0:
            t = table_from_blob(bytes(r["blob"]))
            pieces[r["g"]].append(shift_rows(t, offsets[int(r["pid"])], n_out))
    return [
        merge_tables(p) if p else _empty_table(n_out, n) for p, n in zip(pieces, n_ins, strict=True)
    ]


def refetch_ids(
    source: DataFrame,
    slot: RangeColumns,
    frame: DataFrame,
    keys: Sequence[Column],
    frame_slot: str,
    n_in: int,
    offsets: list[int],
    n_failed: int,
) -> LineageTable:
    """The row lineage of the rows of ``source`` whose range slot (summary columns ``slot``)
    failed its check.

    A failed row stands for a group of an aggregation whose ids are not one range; the
    group's ids are those of the aggregation's input rows (``frame``, ids in ``frame_slot``)
    whose keys equal, null-safely, the row's group keys (``slot.keys``, as ``groupBy`` groups
    them). One job
    joins the input's (keys, id) with the failed rows' (keys, ``MID``) — Spark picks the join
    as for any other (the failed rows are at most the output's, so usually a broadcast) — and
    compresses the (``MID``, id) pairs in the join's partitions, per output partition; only
    tables reach the driver, which unites them
    (:func:`~dslog_dagster.core.compression.union_tables`). A join, not a rerun of the pipeline with
    ``collect_list``: ids are moved once, and groups whose ids are a range keep their range.
    ``n_failed`` (the failed rows, counted by the pass) is for the caller's records.
    """
    if slot.ok is None:
        # recorded summaries (no ok column): the capture runs again with them carried
        msg = "finding failed groups by a join needs their summaries as columns"
        raise SummariesMissing(msg)
    ok = F.coalesce(F.col(_q(slot.ok)), F.lit(True))
    bad = source.where(F.col(_q(slot.lo)).isNotNull() & ~ok).select(
        F.col(MID).alias("__o"), *[F.col(_q(k)).alias(f"__b{i}") for i, k in enumerate(slot.keys)]
    )
    ins = frame.select(
        *[k.alias(f"__p{i}") for i, k in enumerate(keys)], F.col(_q(frame_slot)).alias("__r")
    ).where(F.col("__r").isNotNull())
    same = F.col("__p0").eqNullSafe(F.col("__b0"))
    for i in range(1, len(keys)):
        same = same & F.col(f"__p{i}").eqNullSafe(F.col(f"__b{i}"))
    cond = same
    if all(hashable(source.schema[k].dataType.simpleString()) for k in slot.keys):
        # null-safe keys make Spark hash (coalesce(k), isnull(k)) rows; one bigint hash of the
        # keys lets it use its fast long-keyed table, with the keys compared after the probe
        # (`= true` keeps the comparison out of the join keys). Exact: equal keys have equal
        # hashes, and a collision fails the comparison. Only types whose equal values hash
        # equally (floats: -0.0 and 0.0 group together but hash apart)
        ins = ins.withColumn("__h", F.xxhash64(*[f"__p{i}" for i in range(len(keys))]))
        bad = bad.withColumn("__hb", F.xxhash64(*[f"__b{i}" for i in range(len(keys))]))
        cond = (F.col("__h") == F.col("__hb")) & (same == F.lit(True))
    pairs = ins.join(bad, cond, "inner").select(F.col("__o").alias(MID), F.col("__r").alias("g0"))
    fn = _group_compressor(["scalar"], [n_in], False)
    rows = [r.asDict() for r in pairs.mapInArrow(fn, _ROWS_SCHEMA).collect()]
    # each partition of the join compresses its pairs per output partition; pieces of one
    # output partition from several join partitions interleave, so they are united exactly
    # (no shuffle to one partition per output partition: that cost more than the union)
    n_out = offsets[-1]
    pieces = [
        shift_rows(table_from_blob(bytes(r["blob"])), offsets[int(r["pid"])], n_out)
        for r in rows
        if r["g"] >= 0
    ]
    if not pieces:
        return _empty_table(n_out, n_in)
    return union_tables(pieces)


_ROWS_SCHEMA = "pid bigint, n bigint, g int, blob binary, bad bigint"

_HASH_EXACT = ("bigint", "int", "smallint", "tinyint", "boolean", "date", "timestamp", "binary")


def hashable(t: str) -> bool:
    """Whether equal values of type ``t`` (``simpleString``) hash equally with ``xxhash64``
    (plain strings and decimals too; not floats, collated strings or nested types)."""
    return t in _HASH_EXACT or t == "string" or t == "timestamp_ntz" or t.startswith("decimal(")


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def recorded_fields(
    t: pa.Table, slot: RangeColumns, summaries: GroupSummaries
) -> tuple[pa.Array, pa.Array, FailedRows]:
    """``hi`` and ``ok`` of the rows ``t`` (with ``MID``, ``slot.lo`` and ``slot.key``) of a
    range slot whose summaries were recorded, looked up by each row's group key (null on rows
    without ids), and the rows whose check failed, with their groups' id counts.

    Raises:
        SummariesMissing: a row's group has no summary, or not the row's ``lo``.
    """
    import pyarrow.compute as pc

    assert slot.key is not None
    lo = t.column(slot.lo).combine_chunks()
    key = t.column(slot.key).combine_chunks()
    mid = t.column(MID).combine_chunks()
    # the usual rows need no masks: every row has ids (lo set), no key is null
    has = None if not lo.null_count else np.asarray(lo.is_valid().to_numpy(zero_copy_only=False))

    def with_ids(a: np.ndarray) -> np.ndarray:
        return a if has is None else a[has]

    n_has = len(lo) if has is None else int(np.count_nonzero(has))
    if key.null_count:
        null = with_ids(np.asarray(key.is_null().to_numpy(zero_copy_only=False), bool))
        keys = with_ids(pc.fill_null(key.cast(pa.int64()), 0).to_numpy(zero_copy_only=False))
    else:
        null = np.zeros(n_has, bool)
        keys = with_ids(key.cast(pa.int64()).to_numpy(zero_copy_only=False))
    at = summaries.lookup(keys, null)
    lo_rows = with_ids(lo.to_numpy(zero_copy_only=False))
    # the tap's summaries (counts only) recorded lo = 0 for every group: no gather to compare
    if lo_rows.any() if summaries.counts_only else not np.array_equal(summaries.lo[at], lo_rows):
        msg = "a row's lo differs from its group's recorded summary"
        raise SummariesMissing(msg)
    if summaries.counts_only:
        # hi = 0 and never ok: every row with ids fails its check
        mids = with_ids(mid.to_numpy(zero_copy_only=False))
        failed = FailedRows(mids.astype(np.int64, copy=False), keys, null, summaries.n[at])
        mask = None if has is None else ~has
        hi0, ok0 = np.zeros(len(lo), np.int64), np.zeros(len(lo), bool)
        return pa.array(hi0, mask=mask), pa.array(ok0, mask=mask), failed
    hi = np.zeros(len(lo), np.int64)
    ok = np.zeros(len(lo), bool)
    if has is None:
        hi[:], ok[:] = summaries.hi[at], summaries.ok[at]
    else:
        hi[has], ok[has] = summaries.hi[at], summaries.ok[at]
    bad = ~summaries.ok[at]
    mids = with_ids(mid.to_numpy(zero_copy_only=False))[bad]
    failed = FailedRows(mids.astype(np.int64), keys[bad], null[bad], summaries.n[at][bad])
    mask = None if has is None else ~has
    return pa.array(hi, mask=mask), pa.array(ok, mask=mask), failed


def _lineage_table(
    t: pa.Table,
    groups: Sequence[str | RangeColumns],
    oks: Sequence[str],
    summaries: Mapping[str, GroupSummaries] | None = None,
    failed: dict[int, FailedRows] | None = None,
) -> pa.Table:
    """The columns :func:`_compress_partition` reads (``MID``, ``g*``, ``__ok``) of the rows
    ``t`` read back from one staged file (a range group's summary as ``struct<lo, hi, ok>``;
    recorded summaries, by directory, in ``summaries``; their failed rows into ``failed``,
    by group)."""
    import pyarrow.compute as pc

    def col(name: str) -> pa.Array:
        return t.column(name).combine_chunks()

    cols: list[pa.Array] = [col(MID)]
    for i, g in enumerate(groups):
        if isinstance(g, str):
            cols.append(col(g))
        elif g.summary is not None:
            assert summaries is not None
            hi, ok, bad = recorded_fields(t, g, summaries[g.summary])
            if failed is not None:
                failed[i] = bad
            cols.append(_range_struct(col(g.lo), hi, ok))
        else:
            assert g.hi is not None
            assert g.ok is not None
            cols.append(_range_struct(col(g.lo), col(g.hi), col(g.ok)))
    names = [MID, *[f"g{g}" for g in range(len(groups))]]
    if oks:
        ok = pc.fill_null(col(oks[0]), True)
        for o in oks[1:]:
            ok = pc.and_(ok, pc.fill_null(col(o), True))
        cols.append(ok)
        names.append("__ok")
    return pa.Table.from_arrays(cols, names=names)


def collected_row_tables(
    table: pa.Table, groups: Sequence[str], kinds: list[str], n_ins: list[int]
) -> RowTables:
    """:func:`write_with_lineage`'s row tables from the output collected into this process
    (``MID`` and the slot columns of every row, from ``toArrow``) instead of its staged
    files, for a small output (``capture_frame_outputs(collect=True)``). Its slots are
    columns of ids (``kinds`` ``"scalar"`` or ``"list"``): range slots need the staged path's
    checks and summaries."""
    if "range" in kinds:
        msg = "range slots are not collected"
        raise ValueError(msg)
    rows: list[dict[str, Any]] = []
    if table.num_rows:
        t = _lineage_table(table, groups, ())
        rows = _compress_partition(t, kinds, n_ins, False).to_pylist()
    return _assemble(rows, n_ins)


def _group_columns(g: str | RangeColumns) -> list[str]:
    return [g] if isinstance(g, str) else g.columns()


def write_with_lineage(
    out: DataFrame,
    path: str,
    groups: Sequence[str | RangeColumns],
    kinds: list[str],
    n_ins: list[int],
    oks: Sequence[str],
    count_rows: bool = False,
) -> RowTables:
    """Write ``out`` (with ``MID``) as Parquet at ``path`` with Spark's own writer, then
    compress the row lineage of its slot columns (per group: a slot's column, or a range
    slot's summary columns) from the files written, one file — one task's partition — per
    worker thread (:func:`~dslog_dagster.core.background.map_all`).

    ``path`` is where the executors wrote: this machine's disk with a local master, a shared
    folder on a cluster (:mod:`~dslog_dagster.spark.staging`; as the id tap's files,
    :mod:`~dslog_dagster.spark.idtap`). With ``count_rows`` the executors count the rows as
    they write them (an ``Observation`` of the same job) and the files must hold that many,
    else :class:`~dslog_dagster.errors.CaptureError` (a folder that is not shared). Each
    thread reads only the
    ``MID`` and slot columns of its file and compresses them with the native ProvRC kernel,
    which releases the GIL; only the compressed tables are kept. No row crosses from the JVM
    to Python: sending the output's rows through a Python worker that wrote them with pyarrow
    and compressed them in the same job made the bench's capture 0.6 s slower at 10^7 input
    rows (that last stage took 1.6 s, Spark's writer 0.5 s). Other masters use
    :func:`row_tables` (``mapInArrow`` on the executors, over the persisted output).

    Range slots whose summaries the aggregation recorded (``RangeColumns.summary``) are
    looked up by group key (:mod:`~dslog_dagster.spark.summaries`).

    Raises:
        RangesNotExact: some row failed its range check (``oks``: the ``ok`` columns of range
            slots that must hold on every row).
        SummariesMissing: a row's group has no recorded summary.
    """
    import os
    from concurrent.futures import Future, wait

    import pyarrow.parquet as pq

    from dslog_dagster.core import background

    observed = None
    if count_rows:
        from pyspark.sql import Observation

        observed = Observation("dslog-staged-rows")
        out = out.observe(observed, F.count(F.lit(1)).alias("rows"))
    # (an output without rows still gets one file: Spark's writer keeps the schema)
    out.write.mode("overwrite").option("compression", "zstd").parquet(path)
    files = staged_files(path)
    columns = list(dict.fromkeys([MID, *[c for g in groups for c in _group_columns(g)], *oks]))
    dirs = list(
        dict.fromkeys(
            g.summary for g in groups if isinstance(g, RangeColumns) and g.summary is not None
        )
    )
    # the summaries are read while the first files are (numpy releases the GIL): submitted
    # first, so the files' tasks may wait on them (see core.background); a worker calling
    # this reads them itself
    pending: dict[str, Any] = (
        {d: read_summaries(d) for d in dirs}
        if background.in_worker()
        else {d: background.submit(read_summaries, d) for d in dirs}
    )

    def one(name: str) -> tuple[list[dict[str, Any]], dict[int, FailedRows], int]:
        t = pq.read_table(os.path.join(path, name), columns=columns)  # bigints, booleans
        bad: dict[int, FailedRows] = {}
        if not t.num_rows:
            return [], bad, 0
        summaries = {d: f.result() if isinstance(f, Future) else f for d, f in pending.items()}
        table = _lineage_table(t, groups, oks, summaries, bad)
        got: list[dict[str, Any]] = _compress_partition(table, kinds, n_ins, bool(oks)).to_pylist()
        return got, bad, t.num_rows

    try:
        done = background.map_all(one, files)
    finally:  # nothing left running on the staged files when this returns or raises
        wait([f for f in pending.values() if isinstance(f, Future)])
    if observed is not None:
        check_staged_rows(path, int(observed.get["rows"]), sum(n for _, _, n in done))
    rows = [r for got, _, _ in done for r in got]
    failed_rows: list[list[FailedRows] | None] = [
        [b[g] for _, b, _ in done if g in b] or None for g in range(len(groups))
    ]
    return dataclasses.replace(_assemble(rows, n_ins), failed_rows=failed_rows)
