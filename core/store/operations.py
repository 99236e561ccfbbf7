"""The operations of a lineage store: which segment file holds each, and their records.

An operation lives in a *segment* (:mod:`~dslog_dagster.core.format.segment`): its own
``operations/<op_id>.parquet`` when registered, or a pack after a compaction. Readers locate
operations through an index of the segment files (segments are immutable, so a pack's
operation ids are read once); when a file vanishes under them (a compaction packed it) they
refresh the index and retry. Compactions publish a pack before they delete the files it
replaces, so a fresh listing always finds every operation.

A damaged segment (or a damaged row of a pack) is noted in the handle's
:class:`~dslog_dagster.core.store.damage.DamageLog` and skipped by listings; reads of what it
held raise :class:`~dslog_dagster.errors.LineageCorruptError` naming it.
"""

import contextlib
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TypeVar

from dslog_dagster.core.format import segment
from dslog_dagster.core.store.damage import DamageLog
from dslog_dagster.core.store.layout import StoreLayout
from dslog_dagster.core.store.records import OperationRecord, parse_operation
from dslog_dagster.errors import DSLogError, LineageCorruptError

_R = TypeVar("_R")

logger = logging.getLogger(__name__)

LISTING_RETRIES = 20
"""Listings repeated while they race a compaction (see :meth:`OperationFiles.refresh`)."""
MOVE_RETRIES = 8
"""Reads of an operation retried while compactions move it between segments."""


class OperationFiles:
    """The segment files of the store laid out by ``layout``, and the records read so far.

    Attributes:
        records: operation records read or written by this handle, by op id (records are
            immutable, so an entry never goes stale; clear it to read them again).
    """

    def __init__(self, layout: StoreLayout, damage: DamageLog | None = None) -> None:
        self.layout = layout
        self.damage = damage if damage is not None else DamageLog()
        self.records: dict[str, OperationRecord] = {}
        # Where operations are: segment (root-relative path) -> its op ids, and op id ->
        # one segment holding it. Segments are immutable, so an entry only goes stale when
        # its file vanishes (compaction); lookups then refresh and retry.
        self._seg_ops: dict[str, tuple[str, ...]] = {}
        self._where: dict[str, str] = {}
        # op id -> the segment a read found it in (a hint, kept out of _where: a listing
        # checks that every operation in _where is still on disk)
        self._found: dict[str, str] = {}

    @property
    def where(self) -> Mapping[str, str]:
        """Op id -> a segment holding it, as of the last :meth:`refresh` (read-only)."""
        return MappingProxyType(self._where)

    def added(self, rel: str, record: OperationRecord) -> None:
        """Note that this handle just published ``record`` as segment ``rel``."""
        self._seg_ops[rel] = (record.op_id,)
        self._where[record.op_id] = rel
        self.records[record.op_id] = record

    def refresh(self) -> dict[str, tuple[str, ...]]:
        """Re-list the segment files and update the op id -> segment index; returns
        segment -> op ids.

        A listing can race a compaction: a pack listed here may be merged into a newer pack
        (published after this listing) before we open it, and a directory read concurrent
        with a rename + unlink may miss both the old and the new file. Either way operations
        would seem to vanish, so the listing is repeated (bounded) until no listed file went
        missing and every operation seen before is still there: compactions publish the new
        pack before they unlink the old files, so a fresh listing always finds it.
        """
        known = set(self._where)
        for _ in range(LISTING_RETRIES):
            fresh, raced = self._list_segments()
            where: dict[str, str] = {}
            for rel, ops in fresh.items():
                for op_id in ops:
                    where.setdefault(op_id, rel)
            if not raced and known.issubset(where):
                break
        self._seg_ops, self._where = fresh, where
        return fresh

    def _list_segments(self) -> tuple[dict[str, tuple[str, ...]], bool]:
        """One listing: segment -> op ids, and whether a listed segment vanished meanwhile."""
        fresh: dict[str, tuple[str, ...]] = {}
        raced = False
        for rel in self.layout.segment_files():
            ops = self._seg_ops.get(rel)
            if ops is None or (not ops and rel in self.damage.damaged):
                # (a file that could not be read is tried again: the error may have been the
                # system's, such as too many open files, not the file's)
                if rel.startswith("operations/"):
                    ops = (rel.removeprefix("operations/").removesuffix(".parquet"),)
                else:
                    try:
                        with segment.Segment(self.layout.inside(rel)) as seg:
                            ops = tuple(seg.op_ids)
                            if not seg.verified:
                                self.damage.unverified.add(rel)
                    except FileNotFoundError:
                        raced = True  # merged into a newer pack since the listing
                        continue
                    except DSLogError as e:
                        # listed with no operations: still on disk, so a catalog sync does
                        # not take its operations for deleted
                        self.damage.note(rel, str(e))
                        ops = ()
            fresh[rel] = ops
        return fresh, raced

    def open(self, rel: str) -> segment.Segment:
        """Open segment ``rel``; its operation ids are read (and checked) once per handle:
        a pack of 100,000 operations costs ~0.1 s to list."""
        seg = segment.Segment(self.layout.inside(rel), self._seg_ops.get(rel) or None)
        self._seg_ops.setdefault(rel, tuple(seg.op_ids))
        return seg

    def in_segment(self, op_id: str, fn: Callable[[segment.Segment], _R]) -> tuple[_R, str]:
        """Run ``fn`` on a segment holding ``op_id``; returns its result and the segment path.

        A segment can vanish between the lookup and the read (a compaction packed it after
        publishing the pack), so a missing file refreshes the index and tries again.

        Raises:
            FileNotFoundError: no segment holds ``op_id``.
        """
        for attempt in range(MOVE_RETRIES):
            rel = self._where.get(op_id) or self._found.get(op_id)
            if rel is None or attempt > 0:
                self.refresh()
                rel = self._where.get(op_id)
                if rel is None:
                    break
            try:
                with self.open(rel) as seg:
                    if not seg.verified:
                        self.damage.unverified.add(rel)
                    return fn(seg), rel
            except (FileNotFoundError, KeyError):
                continue
            except LineageCorruptError as e:
                self.damage.note(rel, str(e), op_id)
                raise
        msg = f"no segment holds operation {op_id}"
        raise FileNotFoundError(msg)

    def parse(self, text: str, rel: str, op_id: str) -> OperationRecord:
        """The operation record ``text`` of ``op_id``, read from segment ``rel``.

        Raises:
            LineageCorruptError: it is damaged (noted in :attr:`damage`).
            SchemaVersionError: it is too new.
        """
        try:
            return parse_operation(text, self.layout.root / rel, rel, op_id)
        except LineageCorruptError as e:
            self.damage.note(rel, str(e), op_id)
            raise

    def records_in(self, rel: str) -> list[OperationRecord]:
        """Every intact operation record of segment ``rel`` (damaged rows are noted in
        :attr:`damage` and skipped; ``FileNotFoundError`` if the file vanished).

        Raises:
            LineageCorruptError: the whole file is damaged (noted in :attr:`damage`).
        """
        try:
            with segment.Segment(self.layout.inside(rel)) as seg:
                texts = seg.records()
                bad = dict(seg.bad_rows)
                if not seg.verified:
                    self.damage.unverified.add(rel)
        except LineageCorruptError as e:
            self.damage.note(rel, str(e))
            raise
        for op_id, reason in bad.items():
            self.damage.note(rel, reason, op_id)
        out = []
        for op_id, text in texts:
            try:
                rec = self.parse(text, rel, op_id)
            except LineageCorruptError:
                continue
            self.records[op_id] = rec
            out.append(rec)
        return out

    def read_many(self, hints: Mapping[str, str]) -> dict[str, OperationRecord]:
        """The records of the operations ``hints`` maps to the segment (root-relative path)
        that held them, each segment opened once. Those not found where hinted (moved by a
        compaction, damaged: noted in :attr:`damage`) are left out: read them one by one
        with :meth:`read`, which looks for them.
        """
        out: dict[str, OperationRecord] = {}
        by_seg: dict[str, list[str]] = {}
        for op_id, rel in hints.items():
            rec = self.records.get(op_id)
            if rec is not None:
                out[op_id] = rec
            else:
                by_seg.setdefault(rel, []).append(op_id)
        for rel, ops in by_seg.items():
            try:
                with self.open(rel) as seg:
                    texts = []
                    for op_id in ops:
                        with contextlib.suppress(KeyError, LineageCorruptError):
                            texts.append((op_id, seg.record(op_id)))
            except (OSError, DSLogError):
                continue  # vanished or damaged: read() looks for them, or reports the damage
            for op_id, text in texts:
                with contextlib.suppress(DSLogError):
                    out[op_id] = self.records[op_id] = self.parse(text, rel, op_id)
                    # found there: reading its tables needs no listing of every segment (if
                    # it moves, in_segment lists again)
                    self._found[op_id] = rel
        return out

    def ids(self) -> list[str]:
        """Ids of every operation on disk, oldest first (a listing of the segment files)."""
        self.refresh()
        return sorted(self._where)

    def read(self, op_id: str) -> OperationRecord:
        """The record of operation ``op_id``, from this handle's records or its segment.

        Raises:
            FileNotFoundError: no segment holds it.
            LineageCorruptError / SchemaVersionError: the record is damaged or too new.
        """
        rec = self.records.get(op_id)
        if rec is not None:
            return rec
        text, rel = self.in_segment(op_id, lambda seg: seg.record(op_id))
        rec = self.parse(text, rel, op_id)
        self.records[op_id] = rec
        return rec
