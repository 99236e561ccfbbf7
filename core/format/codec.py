"""The general-purpose codec behind every lineage file, and how hard it works.

The byte-plane encoding (:mod:`~dslog_dagster.core.format.encoding`) leaves long runs of zero
bytes; zstd removes them. Its level is a trade between bytes and the time of a write, and it
depends on the payload's size, so every writer of the format asks :func:`zstd_level`.
"""

from typing import Literal

Codec = Literal["zstd", "gzip", "snappy", "none"]
"""Parquet codecs a lineage table file may be written with."""


def zstd_level(payload_bytes: int) -> int:
    """The zstd level for a payload of ``payload_bytes`` bytes."""
    # Small payloads get the strong (near-entropy) level; big ones a fast level so that
    # compression keeps up with a plain Parquet-zstd write of the raw relation. (Level 1 is
    # faster still but loses the long matches of sorted filters: 2x larger on CorrFilter.)
    if payload_bytes <= 1 << 16:
        return 19
    if payload_bytes <= 1 << 20:
        return 9
    return 3
