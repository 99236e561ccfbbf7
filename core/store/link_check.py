"""Array link records recognised by their bytes, without opening each with pyarrow.

A tracked step publishes its operation's segment once and hard-links it into each new
output's array directory as ``<version>.op.parquet`` (see
:mod:`~dslog_dagster.core.store.store`); a compaction later copies that operation's row into
a pack and leaves the link. A store of 100,000 operations so holds about 100,000 link files,
and reading one through pyarrow (open, two column reads, checksums) costs ~2 ms: minutes for
a first catalog sync, which also reads every pack.

The segment writer is deterministic: the bytes of a one-operation segment are a function of
its ``(op_id, record, blobs)``
(:func:`~dslog_dagster.core.format.segment.segment_to_bytes`). So once a sync has read a
pack row, and checked it against its digests, a link file whose bytes *equal* the segment
written from that row holds exactly that row: the same record, checked by the same digests.
Its array record is then the output of the pack's record, as
:meth:`~dslog_dagster.core.store.arrays.ArrayFiles.load` would have read it. Any other link
file (damaged, written by another writer version, an operation whose pack row is damaged or
not read by this sync) is left to ``ArrayFiles.load``, which reads it and reports damage as
always; nothing is taken on trust.
"""

import contextlib
from collections.abc import Iterable, Mapping

from dslog_dagster.core.format import segment
from dslog_dagster.core.store.layout import StoreLayout, array_dir_name, link_file_name
from dslog_dagster.core.store.records import ArrayRecord, OperationRecord
from dslog_dagster.errors import DSLogError


def link_path(out: ArrayRecord) -> str:
    """The root-relative path of output ``out``'s link record."""
    return f"arrays/{array_dir_name(out.name)}/{link_file_name(out.version)}"


def recognised(
    layout: StoreLayout,
    links: Iterable[str],
    read: Mapping[str, tuple[OperationRecord, str]],
) -> dict[str, ArrayRecord]:
    """The array records of the link files ``links`` (root-relative paths) that are byte
    for byte the segment of an operation of ``read`` (op id -> its record and the pack it was
    read from); links not recognised are left out (read them with ``ArrayFiles.load``)."""
    wanted = set(links)
    if not wanted:
        return {}
    by_pack: dict[str, dict[str, list[tuple[str, ArrayRecord]]]] = {}
    for op_id, (rec, rel) in read.items():
        if not rel.startswith("packs/"):
            continue  # its own segment: reading it costs what reading the link does
        for out in rec.outputs:
            path = link_path(out)
            if path in wanted:
                wanted.discard(path)  # the first output of that name and version, as load()
                by_pack.setdefault(rel, {}).setdefault(op_id, []).append((path, out))
    found: dict[str, ArrayRecord] = {}
    for rel, ops in by_pack.items():
        try:
            with segment.Segment(layout.inside(rel)) as seg:
                entries = seg.entries()  # every row checked against its digests
        except (OSError, DSLogError):
            continue  # vanished or damaged: its links are read one by one
        for entry in entries:
            outs = ops.get(entry[0])
            if outs is None:
                continue
            expected = segment.segment_to_bytes([entry])
            for path, out in outs:
                with contextlib.suppress(OSError):
                    if (layout.root / path).read_bytes() == expected:
                        found[path] = out
    return found
