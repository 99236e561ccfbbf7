"""Range summaries recorded where an aggregation finishes its groups.

A range slot (:func:`~dslog_dagster.spark.ranges.range_aggregate`) summarises the
ids of each group as ``lo``, ``hi``, ``ok`` and the count ``n``. Carried as columns, the three
besides ``lo`` travel with every row through the steps after the aggregation — the shuffle
and sort of an ``orderBy``, the Parquet writer — which made them the largest intrinsic cost
of a capture at 10^6 rows (in plain PySpark, the bench pipeline with them carried took 1.34×
the plain one, with one column in their place 1.19×).

With the id tap's class in the session (a local master; :mod:`~dslog_dagster.spark.idtap`),
the tap records every id of each group, so the aggregation computes no range at all: ``min``
and ``max`` buffers would cross the partial aggregation's shuffle, which scattered keys barely
reduce. It counts the group's ids ``n`` (which the tapped rows must add up to) and computes
the slot's column as ``summary(token, key, key_is_null, lo, hi, ok, n)`` with ``lo`` = 0
(null when the group has no ids of the slot), ``hi`` = 0 and ``ok`` false: a nondeterministic
JVM function over the aggregate functions that returns ``lo`` and records the group's
summary, keyed by the group's one integral key or the hash of its keys, into files
``sum-<stage>-<partition>.bin`` of the token's directory (format in ``IdTap.java``). The rows
keep the constant and the group key (which the aggregation outputs anyway, for the tap); the
capture reads the summaries back here and looks each row's group up by its key: every group
then fails its (absent) range check and gets its ids from the tap
(:func:`~dslog_dagster.spark.idtap.tapped_ids`).

The lookup is exact or it fails, never a guess:

* every output row with ids (``lo`` set) must find its key, and a key recorded twice must
  carry the same summary both times (a stage run twice — an ``orderBy`` samples its input —
  records the same groups; two groups whose keys hash alike record different ones);
* otherwise :class:`SummariesMissing` is raised and the capture runs again with the summaries
  carried as columns.
"""

import os
from dataclasses import dataclass

import numpy as np

from dslog_dagster.spark.tapfile import mapped_bytes

__all__ = [
    "GroupSummaries",
    "KeyIndex",
    "SummariesMissing",
    "read_summaries",
    "read_summary_file",
    "summary_chunks",
]


class SummariesMissing(Exception):
    """The recorded summaries do not give every row's group exactly one summary."""


SUMMARY_COLUMNS = 5
"""Columns of a summary file: keys, lo, hi, n, flags."""


def summary_chunks(raw: np.ndarray, path: str) -> list[tuple[int, int, list[int]]]:
    """The chunks of a summary file's bytes ``raw``: per chunk, where its values start, its
    groups and its columns' widths.

    Raises:
        SummariesMissing: a chunk is cut short or its header is not one the recorder writes.
    """
    size = raw.size
    head = 8 * (1 + SUMMARY_COLUMNS)
    chunks: list[tuple[int, int, list[int]]] = []
    at = 0
    while at < size:
        values = raw[at : at + head]
        if values.size < head:
            msg = f"Summary file {path} is truncated (a chunk header cut at byte {at})."
            raise SummariesMissing(msg)
        c, *widths = (int(v) for v in values.view("<i8"))
        if c < 0 or any(w not in (0, 4, 8) for w in widths):
            msg = (
                f"Summary file {path} has a chunk header the recorder does not write at byte {at}."
            )
            raise SummariesMissing(msg)
        end = at + head + ((c * sum(widths) + 7) & ~7)
        if end > size:
            msg = f"Summary file {path} is truncated (a chunk of {c} groups at byte {at})."
            raise SummariesMissing(msg)
        chunks.append((at + head, c, widths))
        at = end
    return chunks


def _summary_layout(path: str) -> tuple[np.ndarray, list[tuple[int, int, list[int]]]]:
    """A summary file's bytes (mapped) and its chunks.

    Raises:
        SummariesMissing: the file is truncated or a chunk header is damaged.
    """
    raw = mapped_bytes(path, "Summary", SummariesMissing)
    return raw, summary_chunks(raw, path)


def _fill_columns(
    raw: np.ndarray,
    chunks: list[tuple[int, int, list[int]]],
    cols: list[np.ndarray],
    zeroed: list[bool],
) -> None:
    """Each chunk's values widened to int64 into ``cols`` (one slice per file; the columns
    ``zeroed`` hold zeros already and are left untouched)."""
    row = 0
    for p, c, widths in chunks:
        for col, w, z in zip(cols, widths, zeroed, strict=True):
            if w:
                col[row : row + c] = raw[p : p + w * c].view(f"<i{w}")
            elif not z:
                col[row : row + c] = 0
            p += w * c
        row += c


def read_summary_file(path: str) -> list[np.ndarray]:
    """The columns of one summary file (chunks of ``int64 c``, five ``int64`` widths, then
    each column's ``c`` values in its width, 0, 4 or 8 bytes, then zero padding to 8 bytes;
    see ``jvm/IdTap.java``), each widened to int64 over every chunk in order.

    Raises:
        SummariesMissing: the file is truncated or a chunk header is not one the recorder
            writes (a task that did not finish publishes no file, so a short one is damage).
    """
    return _read_files([path])[0]


def _read_files(paths: list[str]) -> tuple[list[np.ndarray], list[bool]]:
    """The columns of several summary files, one after the other, read straight into one
    array per column (no copy per file to concatenate), and which are all zero.

    A column that takes 0 bytes in every chunk (all zero: where the tap runs, ``lo``, ``hi``
    and the flags) is a zeroed array that is never written: its pages are not touched, which
    on a machine short of huge pages saves ~0.2-2 s per 80 MB column at 10^7 groups."""
    layouts = [_summary_layout(p) for p in paths]
    sizes = [sum(c for _, c, _ in chunks) for _, chunks in layouts]
    zero = [
        all(widths[i] == 0 for _, chunks in layouts for _, _, widths in chunks)
        for i in range(SUMMARY_COLUMNS)
    ]
    cols = [(np.zeros if z else np.empty)(sum(sizes), np.int64) for z in zero]
    at = 0
    for (raw, chunks), size in zip(layouts, sizes, strict=True):
        _fill_columns(raw, chunks, [c[at : at + size] for c in cols], zero)
        at += size
    return cols, zero


class KeyIndex:
    """Position of each key among distinct keys (-1 when absent): a direct table when the keys
    are dense enough (group keys are often ids), else a binary search over them sorted; keys
    that are consecutive integers in order (``lo, lo + 1, ...``: the failed groups' keys,
    sorted, when they are ids) need neither — a key's position is ``key - lo``."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys
        self.lo = int(keys.min()) if keys.size else 0
        span = int(keys.max()) - self.lo + 1 if keys.size else 0
        self.table: np.ndarray | None = None
        self.consecutive = False
        # else: the keys' order and the keys in it, for the search
        self.order = np.zeros(0, np.int64)
        self.sorted = keys
        if keys.size and span == keys.size and int(keys[0]) == self.lo:
            # span == size: strictly increasing keys are exactly lo, lo + 1, ... (no table to
            # build, no random gathers to look up)
            self.consecutive = bool((keys[1:] > keys[:-1]).all())
        if self.consecutive or not keys.size:
            return
        if span <= 8 * keys.size + 4096:
            self.table = np.full(span, -1, np.int64)
            self.table[keys - self.lo if self.lo else keys] = np.arange(keys.size, dtype=np.int64)
        else:
            self.order = np.argsort(keys, kind="stable")
            self.sorted = keys[self.order]

    @property
    def distinct(self) -> int:
        """How many distinct keys were indexed (fewer than ``keys.size``: some repeat)."""
        if not self.keys.size:
            return 0
        if self.consecutive:
            return int(self.keys.size)
        if self.table is not None:
            return int(np.count_nonzero(self.table >= 0))
        return 1 + int(np.count_nonzero(self.sorted[1:] != self.sorted[:-1]))

    def __call__(self, k: np.ndarray) -> np.ndarray:
        if not self.keys.size:
            return np.full(k.shape, -1, np.int64)
        if self.consecutive:
            pos = k - self.lo  # a new array: callers may write into it
            if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self.keys.size):
                pos[(pos < 0) | (pos >= self.keys.size)] = -1
            return pos
        if self.table is not None:
            off = k - self.lo if self.lo else k
            if not off.size or (int(off.min()) >= 0 and int(off.max()) < self.table.size):
                hit: np.ndarray = self.table[off]  # every probe inside the table: one gather
                return hit
            inside = (off >= 0) & (off < self.table.size)
            pos = np.full(k.shape, -1, np.int64)
            pos[inside] = self.table[off[inside]]
            return pos
        at = np.searchsorted(self.sorted, k)
        at[at >= self.sorted.size] = 0
        return np.where(self.sorted[at] == k, self.order[at], -1)


@dataclass(frozen=True)
class GroupSummaries:
    """The distinct recorded summaries of one range slot (one per group, in no order): the
    non-null keys found through ``index``, the null-key group at row ``null_row`` (-1: none)."""

    keys: np.ndarray  # int64; 0 for the null key
    lo: np.ndarray
    hi: np.ndarray
    ok: np.ndarray  # bool
    n: np.ndarray
    index: KeyIndex
    null_row: int
    counts_only: bool = False
    """Every group recorded ``lo`` = ``hi`` = 0, not ok, and no key is null: the tap's
    summaries, which carry the counts only (every group with ids fails its range check)."""

    def lookup(self, key: np.ndarray, null: np.ndarray) -> np.ndarray:
        """Row of each row's group (``key``, ``null`` per row, for rows with ids).

        Raises:
            SummariesMissing: some row's group was not recorded.
        """
        has_null = bool(null.any())
        pos = self.index(np.where(null, self.index.lo, key) if has_null else key)
        if has_null:
            if self.null_row < 0:
                msg = "the null group key has no recorded summary"
                raise SummariesMissing(msg)
            pos[null] = self.null_row
        if (pos < 0).any():
            msg = "a row's group key has no recorded summary"
            raise SummariesMissing(msg)
        return pos


def _distinct(keys: np.ndarray, fields: list[np.ndarray]) -> tuple[np.ndarray, KeyIndex]:
    """Rows to keep so that each key is kept once, and the index of the kept keys.

    Raises:
        SummariesMissing: one key with two different summaries.
    """
    index = KeyIndex(keys)
    if index.distinct == keys.size:  # the usual case, told without looking every key up
        return np.arange(keys.size), index
    pos = index(keys)  # a repeated key maps to one of its rows
    again = pos != np.arange(keys.size)
    if not again.any():
        return np.arange(keys.size), index
    first = pos[again]
    if not all(np.array_equal(f[again], f[first]) for f in fields):
        msg = "two groups' keys hash alike (one key, two summaries)"
        raise SummariesMissing(msg)
    keep = np.flatnonzero(~again)
    return keep, KeyIndex(keys[keep])


def read_summaries(directory: str) -> GroupSummaries:
    """All summaries recorded in ``directory``, one per group (a stage run twice records
    the same groups twice).

    Raises:
        SummariesMissing: a file is truncated, or one key was recorded with two different
            summaries (two groups whose keys hash alike).
    """
    names = sorted(n for n in os.listdir(directory) if n.startswith("sum-") and n.endswith(".bin"))
    (keys, lo, hi, n, flags), zero = _read_files([os.path.join(directory, name) for name in names])
    # flags never written (0 bytes: no null key, no range ok) are not computed on either
    no_flags = zero[4]
    null = np.zeros(flags.size, bool) if no_flags else (flags & 1).astype(bool)
    fields = [lo, hi, n, flags]
    if not null.any():
        rows, index = _distinct(keys, fields)
        if rows.size == keys.size:  # the usual case: every group once, the columns as read
            ok = np.zeros(flags.size, bool) if no_flags else (flags & 2).astype(bool)
            counts_only = no_flags and zero[1] and zero[2]
            return GroupSummaries(keys, lo, hi, ok, n, index, -1, counts_only)
    else:
        plain = np.flatnonzero(~null)
        keep, index = _distinct(keys[plain], [f[plain] for f in fields])
        rows = plain[keep]
    null_rows = np.flatnonzero(null)
    if null_rows.size:
        same, _ = _distinct(np.zeros(null_rows.size, np.int64), [f[null_rows] for f in fields])
        rows = np.append(rows, null_rows[same[0]])
    return GroupSummaries(
        keys=np.where(null[rows], 0, keys[rows]),
        lo=lo[rows],
        hi=hi[rows],
        ok=(flags[rows] & 2).astype(bool),
        n=n[rows],
        index=index,
        null_row=rows.size - 1 if null_rows.size else -1,
    )
