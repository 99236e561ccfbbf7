"""The id tap's files: what one task recorded, read back (format in ``jvm/IdTap.java``).

A chunk holds single rows as key segments (consecutive rows of one key and null-ness; one
row each when the rows came unsorted), keys and ids in 4 or 8 bytes, and runs (rows of one
key with consecutive ids, or one id repeated). Everything read is checked against the
format: a file cut short or a header, segment or run the writer never produces raises
:class:`TapFailed`, and the capture then finds the ids by a join.
"""

import dataclasses
import os

import numpy as np

__all__ = [
    "TapChunk",
    "TapFailed",
    "TapLayout",
    "TapRecords",
    "mapped_bytes",
    "read_tap_records",
    "tap_chunks",
    "tap_layout",
    "tap_rows",
]


class TapFailed(Exception):
    """A tap file is damaged, or the tapped rows do not account for the failed groups exactly
    (see :mod:`~dslog_dagster.spark.idtap`): the capture finds the ids by a join instead."""


@dataclasses.dataclass(frozen=True)
class TapRecords:
    """The rows one tap file records, as the task wrote them: single rows in key segments
    (``seg_keys``, ``seg_rows``, ``seg_null``: consecutive rows of one key, ``seg_null`` when
    it was null; their ``ids`` in order) and runs of rows of one non-null key (``run_keys``,
    ``run_first``, ``run_len``): ids ``first .. first + len - 1`` when ``len > 0``, the id
    ``first`` repeated ``-len`` times when ``len < 0``."""

    seg_keys: np.ndarray
    seg_rows: np.ndarray
    seg_null: np.ndarray
    ids: np.ndarray
    run_keys: np.ndarray
    run_first: np.ndarray
    run_len: np.ndarray

    @property
    def run_rows(self) -> np.ndarray:
        """The rows each run stands for."""
        rows: np.ndarray = np.abs(self.run_len)
        return rows

    @property
    def run_last(self) -> np.ndarray:
        """The last id of each run (its only id when the run repeats one)."""
        return np.where(self.run_len > 0, self.run_first + self.run_len - 1, self.run_first)


_TAP_HEADER = 32
"""Bytes of a tap chunk's header: int64 rows, key segments, key width, id width."""


@dataclasses.dataclass(frozen=True)
class TapChunk:
    """Where one chunk of a tap file lies (byte offsets) and what it holds."""

    at: int
    n: int
    g: int
    kw: int
    iw: int
    runs_at: int
    m: int


def tap_chunks(raw: np.ndarray, path: str) -> list[TapChunk]:
    """The chunks of a tap file's bytes ``raw`` (format in ``jvm/IdTap.java``), headers
    checked against the file's length.

    Raises:
        TapFailed: a chunk is cut short or its header is not one the tap writes.
    """
    chunks: list[TapChunk] = []
    at, size = 0, raw.size
    while at < size:
        head = raw[at : at + _TAP_HEADER]
        if head.size < _TAP_HEADER:
            msg = f"Tap file {path} is truncated (a chunk header cut at byte {at})."
            raise TapFailed(msg)
        n, g, kw, iw = (int(v) for v in head.view("<i8"))
        if n < 0 or not 0 <= g <= n or (n > 0 and g == 0) or kw not in (4, 8) or iw not in (4, 8):
            msg = f"Tap file {path} has a chunk header the tap does not write at byte {at}."
            raise TapFailed(msg)
        body = g * kw + (4 * g if g < n else 0) + n * iw
        runs_at = at + _TAP_HEADER + ((body + 7) & ~7)
        m = int(raw[runs_at : runs_at + 8].view("<i8")[0]) if runs_at + 8 <= size else -1
        end = runs_at + 8 + 24 * m
        if m < 0 or end > size:
            msg = f"Tap file {path} is truncated (a chunk of {n} rows at byte {at})."
            raise TapFailed(msg)
        chunks.append(TapChunk(at, n, g, kw, iw, runs_at, m))
        at = end
    return chunks


@dataclasses.dataclass(frozen=True)
class TapLayout:
    """A tap file's bytes (mapped) and its chunks, parsed once: :func:`tap_rows` sizes the
    array the ids are read into from the same layout :func:`read_tap_records` then reads."""

    path: str
    raw: np.ndarray
    chunks: list[TapChunk]

    @property
    def rows(self) -> int:
        """The single rows the file records."""
        return sum(c.n for c in self.chunks)


def tap_layout(path: str) -> TapLayout:
    """A tap file's bytes (mapped) and its chunks.

    Raises:
        TapFailed: the file is truncated or a chunk header is damaged.
    """
    raw = mapped_bytes(path, "Tap", TapFailed)
    return TapLayout(path, raw, tap_chunks(raw, path))


def mapped_bytes(path: str, what: str, error: type[Exception]) -> np.ndarray:
    """The bytes of a file the JVM recorder wrote (a tap or a summary file), mapped, not
    read into a buffer of their own (each chunk's values are copied out of the page cache
    once, widened to int64).

    Raises:
        error: the file is not whole 8-byte values (a task that did not finish publishes no
            file, so a short one is damage).
    """
    size = os.path.getsize(path)
    if size % 8:
        msg = f"{what} file {path} is truncated ({size} bytes, not whole 8-byte values)."
        raise error(msg)
    if not size:
        return np.zeros(0, np.uint8)
    # a plain view of the map (which it keeps open): slicing a memmap costs a Python-level
    # __array_finalize__ per slice, ~0.4 s over the ~1500 chunks of a 120 MB file
    return np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray)


def tap_rows(path: str) -> int:
    """The single rows a tap file records (its chunks' headers only).

    Raises:
        TapFailed: the file is truncated or a chunk header is damaged.
    """
    return tap_layout(path).rows


def read_tap_records(file: str | TapLayout, ids: np.ndarray | None = None) -> TapRecords:
    """One tap file (chunks of key segments, ids and runs; see ``jvm/IdTap.java``), runs
    kept as runs and segments as segments: at 10^8 rows sorted by key, ten per key, the
    matching then looks up 10^7 segments' keys, not 10^8 rows'.

    The file is mapped, not read into a buffer of its own: each chunk's values are copied
    out of the page cache once, widened to int64, the ids into ``ids`` when given (an int64
    array of :func:`tap_rows` values: a slice of one array for every file of a stage, which
    then reaches ProvRC without another copy).

    Raises:
        TapFailed: the file is truncated or damaged (a segment or run of no rows, rows that
            do not add up to the chunk's, ids whose null-ness differs within a segment).
    """
    layout = tap_layout(file) if isinstance(file, str) else file
    path, raw, chunks = layout.path, layout.raw, layout.chunks
    seg_keys = np.empty(sum(c.g for c in chunks), np.int64)
    seg_rows = np.empty_like(seg_keys)
    n = sum(c.n for c in chunks)
    if ids is None:
        ids = np.empty(n, np.int64)
    elif ids.shape != (n,) or ids.dtype != np.int64:
        msg = f"Tap file {path} holds {n} rows, not the {ids.size} it is read into."
        raise TapFailed(msg)
    runs = np.empty((3, sum(c.m for c in chunks)), np.int64)
    gi = ni = mi = 0
    for c in chunks:
        p = c.at + _TAP_HEADER
        seg_keys[gi : gi + c.g] = raw[p : p + c.g * c.kw].view(f"<i{c.kw}")
        p += c.g * c.kw
        if c.g < c.n:
            rows = raw[p : p + 4 * c.g].view("<i4")
            if int(rows.min()) <= 0 or int(rows.sum()) != c.n:
                msg = f"Tap file {path} has key segments that do not hold its {c.n} rows."
                raise TapFailed(msg)
            seg_rows[gi : gi + c.g] = rows
            p += 4 * c.g
        else:
            seg_rows[gi : gi + c.g] = 1
        ids[ni : ni + c.n] = raw[p : p + c.n * c.iw].view(f"<i{c.iw}")
        runs[:, mi : mi + c.m] = (
            raw[c.runs_at + 8 : c.runs_at + 8 + 24 * c.m].view("<i8").reshape(3, c.m)
        )
        gi, ni, mi = gi + c.g, ni + c.n, mi + c.m
    if (runs[2] == 0).any():
        msg = f"Tap file {path} has a run of no rows."
        raise TapFailed(msg)
    null = ids < 0  # a null key's row stores ~id
    seg_null = null[np.cumsum(seg_rows) - seg_rows] if ids.size else np.zeros(0, bool)
    if null.any():
        if int(null.sum()) != int(seg_rows[seg_null].sum()):
            msg = f"Tap file {path} has a key segment of null and non-null keys."
            raise TapFailed(msg)
        np.invert(ids, out=ids, where=null)
    return TapRecords(seg_keys, seg_rows, seg_null, ids, runs[0], runs[1], runs[2])
