"""Byte-plane encoding of int64 columns: the payload inside every lineage file.

Why not plain Parquet int64 columns: a ProvRC table of a structured operation has one to a
few rows, so per-column Parquet metadata (hundreds of bytes per column) would dominate the
file. We therefore store all columns of a table as one binary payload:

1. per column a transform: ``raw``, ``delta`` (difference to the previous row; sorted
   columns become tiny) or ``width`` (``hi - lo`` against the paired ``lo`` column);
2. zig-zag so small negative numbers become small unsigned ones;
3. each column narrowed to the fewest bytes that hold its largest value (0..8) and split into
   byte planes (least significant first), so that the general-purpose codec (zstd) sees
   long runs of zero bytes and a single plane with the real entropy.

The per-column transform and width live in the file's metadata, never in the payload, so the
payload of an O(1)-row table is a handful of bytes.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dslog_dagster.errors import LineageStorageError

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """How one column was encoded: its transform, its partner (for ``width``), its byte width."""

    transform: str  # "raw" | "delta" | "width"
    partner: int  # index of the lo column for "width", else -1
    nbytes: int  # 0..8 bytes per value after zig-zag

    def to_token(self) -> str:
        """Compact form for the file metadata, e.g. ``d:2`` or ``w0:1`` (``width`` of col 0)."""
        partner = str(self.partner) if self.partner >= 0 else ""
        return f"{self.transform[0]}{partner}:{self.nbytes}"

    @classmethod
    def from_token(cls, token: str) -> "ColumnSpec":
        head, nbytes = token.split(":")
        transform = {"r": "raw", "d": "delta", "w": "width"}.get(head[:1])
        if transform is None:
            msg = f"unknown column transform in `{token}`"
            raise ValueError(msg)
        return cls(transform, int(head[1:]) if head[1:] else -1, int(nbytes))


def _zigzag(x: I64) -> npt.NDArray[np.uint64]:
    return ((x << 1) ^ (x >> 63)).view(np.uint64)


def _unzigzag(u: npt.NDArray[np.uint64]) -> I64:
    return ((u >> np.uint64(1)).view(np.int64)) ^ -((u & np.uint64(1)).view(np.int64))


def _nbytes(u: npt.NDArray[np.uint64]) -> int:
    if u.size == 0:
        return 0
    mx = int(u.max())
    return (mx.bit_length() + 7) // 8


def _transformed(cols: Sequence[I64], i: int, transform: str, partner: int) -> I64:
    c = cols[i]
    if transform == "raw":
        return c
    if transform == "delta":
        return np.diff(c, prepend=np.int64(0)) if c.size else c
    if transform == "width":
        return c - cols[partner]
    msg = f"unknown column transform `{transform}`"
    raise ValueError(msg)


def choose_transform(col: I64) -> str:
    """``delta`` when it needs fewer bytes per value than the raw column, else ``raw``.

    Byte width is what the byte-plane layout pays for, and it is two integer reductions.
    """
    if col.size < 2:
        return "raw"
    raw_bytes = _nbytes(_zigzag(col))
    delta_bytes = _nbytes(_zigzag(np.diff(col)))
    return "delta" if delta_bytes <= raw_bytes else "raw"


def encode(
    cols: Sequence[I64], transforms: Sequence[tuple[str, int]]
) -> tuple[bytes, list[ColumnSpec]]:
    """Encode equal-length int64 columns into one payload.

    Args:
        cols: the columns.
        transforms: per column ``(transform, partner)``; ``partner`` is used by ``width``.
            ``auto`` picks ``delta`` or ``raw`` as :func:`choose_transform` does, computing
            each candidate only once.

    Returns:
        The payload and the per-column specs to store in the file metadata.
    """
    specs: list[ColumnSpec] = []
    coded: list[npt.NDArray[np.uint64]] = []
    for i, (transform, partner) in enumerate(transforms):
        if transform == "auto":
            u = _zigzag(np.ascontiguousarray(cols[i], np.int64))
            nb, transform = _nbytes(u), "raw"
            if cols[i].size >= 2:
                ud = _zigzag(np.diff(cols[i], prepend=np.int64(0)))
                # choose_transform's rule (the differences alone decide), one pass each
                rest = _nbytes(ud[1:])
                if rest <= nb:
                    u, nb, transform = ud, max(rest, _nbytes(ud[:1])), "delta"
        else:
            u = _zigzag(np.ascontiguousarray(_transformed(cols, i, transform, partner), np.int64))
            nb = _nbytes(u)
        specs.append(ColumnSpec(transform, partner, nb))
        coded.append(u)
    n = len(cols[0]) if len(cols) else 0
    out = np.empty(sum(s.nbytes for s in specs) * n, dtype=np.uint8)
    pos = 0
    for spec, u in zip(specs, coded, strict=True):
        if spec.nbytes:
            # little-endian byte planes, written straight into the payload
            planes = out[pos : pos + spec.nbytes * n].reshape(spec.nbytes, n)
            planes[...] = u.view(np.uint8).reshape(-1, 8)[:, : spec.nbytes].T
            pos += spec.nbytes * n
    return out.tobytes(), specs


def decode(payload: bytes, specs: Sequence[ColumnSpec], n: int) -> list[I64]:
    """Inverse of :func:`encode` for ``n`` values per column."""
    buf = np.frombuffer(payload, dtype=np.uint8)
    expected = sum(s.nbytes for s in specs) * n
    if buf.size != expected:
        msg = f"Lineage payload has {buf.size} bytes; its metadata promises {expected}."
        raise LineageStorageError(msg)
    out: list[I64] = []
    pos = 0
    for spec in specs:
        u = np.zeros((n, 8), dtype=np.uint8)
        if spec.nbytes:
            u[:, : spec.nbytes] = buf[pos : pos + spec.nbytes * n].reshape(spec.nbytes, n).T
            pos += spec.nbytes * n
        vals = _unzigzag(u.reshape(-1).view(np.uint64))
        out.append(vals)
    for i, spec in enumerate(specs):
        if spec.transform == "delta":
            out[i] = np.cumsum(out[i], dtype=np.int64)
        elif spec.transform == "width":
            out[i] = out[i] + out[spec.partner]
        elif spec.transform != "raw":
            msg = f"Lineage file uses unknown column transform `{spec.transform}`."
            raise LineageStorageError(msg)
    return out
