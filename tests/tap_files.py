"""Tap files written by hand, in the format ``jvm/IdTap.java`` documents (an encoder of its
own, so the reader is checked against the format, not against the JVM writer alone)."""

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _fits_int32(values: np.ndarray) -> bool:
    return not values.size or (int(values.min()) >= -(2**31) and int(values.max()) < 2**31)


def tap_chunk(
    keys: Sequence[int | None],
    ids: Sequence[int],
    runs: Sequence[tuple[int, int, int]] = (),
    *,
    segmented: bool | None = None,
    key_width: int | None = None,
    id_width: int | None = None,
) -> bytes:
    """One chunk: single rows (key, id; a ``None`` key is null) and runs (key, first id,
    length). Keys come as segments of consecutive rows of one key and null-ness when
    ``segmented`` (default: as the JVM writer decides, at most half as many segments as
    rows), else one per row; keys and ids take 4 bytes when they fit (or the widths given)."""
    k = np.asarray([0 if x is None else x for x in keys], np.int64)
    i = np.asarray([~v if x is None else v for x, v in zip(keys, ids, strict=True)], np.int64)
    null = i < 0
    new = np.ones(k.size, bool)
    new[1:] = (k[1:] != k[:-1]) | (null[1:] != null[:-1])
    starts = np.flatnonzero(new)
    rows = np.diff(np.append(starts, k.size))
    if segmented is None:
        segmented = 2 * starts.size <= k.size
    kw = key_width or (4 if _fits_int32(k) else 8)
    iw = id_width or (4 if _fits_int32(i) else 8)
    g = starts.size if segmented else k.size
    body = [np.asarray([k.size, g, kw, iw], "<i8").tobytes()]
    if segmented and g < k.size:
        body += [k[starts].astype(f"<i{kw}").tobytes(), rows.astype("<i4").tobytes()]
    else:
        body.append(k.astype(f"<i{kw}").tobytes())
    body.append(i.astype(f"<i{iw}").tobytes())
    data = b"".join(body)
    data += b"\0" * (-len(data) % 8)
    r = np.asarray(runs, np.int64).reshape(-1, 3)
    return data + np.concatenate([[len(r)], r[:, 0], r[:, 1], r[:, 2]]).astype("<i8").tobytes()


def write_tap(
    path: Path,
    keys: Sequence[int | None],
    ids: Sequence[int],
    runs: Sequence[tuple[int, int, int]] = (),
) -> None:
    """A tap file of one chunk (see :func:`tap_chunk`)."""
    path.write_bytes(tap_chunk(keys, ids, runs))


def summary_chunk(columns: Sequence[Sequence[int]], widths: Sequence[int] | None = None) -> bytes:
    """One chunk of a summary file: five columns (keys, lo, hi, n, flags) of one value per
    group, each in 0 bytes when all are 0, else 4 when they fit an int, else 8 (or the
    ``widths`` given)."""
    cols = [np.asarray(c, np.int64) for c in columns]
    if widths is None:
        widths = [0 if not c.any() else 4 if _fits_int32(c) else 8 for c in cols]
    data = np.asarray([len(cols[0]), *widths], "<i8").tobytes()
    data += b"".join(c.astype(f"<i{w}").tobytes() for c, w in zip(cols, widths, strict=True) if w)
    return data + b"\0" * (-len(data) % 8)


def summary_rows(rows: Sequence[tuple[int | None, int, int, bool, int]]) -> bytes:
    """:func:`summary_chunk` of groups given as (key, lo, hi, ok, n); a ``None`` key is null."""
    keys = [0 if k is None else k for k, *_ in rows]
    flags = [(1 if k is None else 0) | (2 if ok else 0) for k, _, _, ok, _ in rows]
    return summary_chunk(
        [keys, [r[1] for r in rows], [r[2] for r in rows], [r[4] for r in rows], flags]
    )
