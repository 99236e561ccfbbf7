"""Checksums of what the store writes: nothing read back from disk is silently wrong.

Parquet and JSON detect some damage on their own (a torn footer, a broken string), but most
flipped bits inside a value decode to another valid value: a lineage blob whose column width
changed, a record naming another shape. So every unit the store reads on its own carries an
XXH3 digest computed when it was written and checked on every read:

* each segment row (:mod:`~dslog_dagster.core.format.segment`): a ``sums`` cell holding the
  64-bit XXH3 of its operation id and record, then one of each lineage blob (seeded with the
  blob's position, so two blobs cannot trade places unnoticed);
* each segment's list of operation ids: ``dslog.ops`` in the file's key-value metadata, so a
  pack lists only operation ids it really holds;
* each JSON array record: a ``checksum`` field over the canonical JSON of the other fields.

XXH3 because it runs at memory speed (a few GB/s): the digests of a registration cost
microseconds. It is not a cryptographic hash and does not defend against forgery, only
against damage.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

import xxhash

DIGEST_BYTES = 8
"""Bytes of one digest in a segment's ``sums`` cell."""


def record_digest(op_id: bytes, rec: bytes) -> bytes:
    """The digest of an operation id with its record (the first one of a row's ``sums``)."""
    return xxhash.xxh3_64_digest(op_id + b"\x00" + rec)


def blob_digest(blob: bytes, k: int) -> bytes:
    """The digest of the ``k``-th lineage blob of an operation."""
    return xxhash.xxh3_64_digest(blob, seed=k + 1)


def row_sums(op_id: bytes, rec: bytes, blobs: Sequence[bytes]) -> bytes:
    """The ``sums`` cell of a segment row: record digest, then one digest per blob."""
    parts = [record_digest(op_id, rec)]
    parts += [blob_digest(b, k) for k, b in enumerate(blobs)]
    return b"".join(parts)


def ids_digest(op_ids: Sequence[str]) -> str:
    """The ``dslog.ops`` metadata of a segment holding ``op_ids`` (in file order)."""
    return f"{len(op_ids)}:" + xxhash.xxh3_64_hexdigest("\n".join(op_ids).encode())


def json_checksum(fields: Mapping[str, Any]) -> str:
    """The ``checksum`` of a JSON record with ``fields`` (every field but ``checksum``)."""
    body = {k: v for k, v in fields.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return xxhash.xxh3_64_hexdigest(text.encode())
