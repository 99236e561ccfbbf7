"""Checking every file of a store, and moving damaged ones aside (``dslog fsck``).

Reads check what they read (:mod:`~dslog_dagster.core.format.checksum`), but only what they
happen to read. :func:`verify` reads everything: every segment row, record and lineage table
(checksum and decoding), every array record, the store id and the catalog, and reports what is
damaged and what it held, and which files predate checksums (read as unverified).
:func:`quarantine` moves the damaged files to ``quarantine/`` under the store root, where no
reader looks, so the rest of the store keeps working and nothing is deleted.
"""

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from dslog_dagster.core.format import segment
from dslog_dagster.core.format.blob import table_from_blob
from dslog_dagster.core.store.arrays import ArrayFiles
from dslog_dagster.core.store.catalog import CATALOG_FILE
from dslog_dagster.core.store.damage import DamageLog
from dslog_dagster.core.store.layout import LINK_SUFFIX, STORE_ID_FILE, StoreLayout
from dslog_dagster.core.store.operations import OperationFiles
from dslog_dagster.errors import DSLogError, LineageStorageError

QUARANTINE_DIR = "quarantine"
"""Where :func:`quarantine` moves damaged files (under the store root; never read)."""
STORE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
"""A well-formed store id (what ``claim_store_id`` writes)."""


@dataclass
class VerifyReport:
    """What :func:`verify` found (paths are root-relative, POSIX separators).

    Attributes:
        root: the store checked.
        files: how many files were checked.
        damaged: damaged file -> what is wrong with it.
        operations: damaged file -> operations it held, as far as can be known (a one-operation
            segment's id is its file name; a pack's damaged rows name theirs).
        arrays: damaged array record -> the array directory it belongs to.
        unverified: files written before checksums (format ``2-0``/``2-1``), read unchecked.
        quarantined: damaged file -> where :func:`quarantine` moved it.
    """

    root: Path
    files: int = 0
    damaged: dict[str, str] = field(default_factory=dict)
    operations: dict[str, list[str]] = field(default_factory=dict)
    arrays: dict[str, str] = field(default_factory=dict)
    unverified: list[str] = field(default_factory=list)
    quarantined: dict[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """No damaged file (unverified legacy files do not count as damage)."""
        return not self.damaged

    def lines(self) -> list[str]:
        """The report as text lines (what ``dslog fsck`` prints)."""
        out = [f"checked {self.files} file(s) in {self.root}"]
        for rel, why in sorted(self.damaged.items()):
            out.append(f"DAMAGED {rel}: {why}")
            ops = self.operations.get(rel)
            if ops:
                out.append(f"    operations: {', '.join(ops)}")
            if rel in self.arrays:
                out.append(f"    array record of {self.arrays[rel]}")
            if rel in self.quarantined:
                out.append(f"    moved to {self.quarantined[rel]}")
        for rel in self.unverified:
            out.append(f"UNVERIFIED {rel}: written before checksums (format 2-0/2-1)")
        if self.damaged and not self.quarantined:
            out.append(
                "run `dslog fsck STORE --quarantine` to move the damaged files aside; "
                "the rest of the store stays usable"
            )
        elif not self.damaged:
            out.append("no damage found")
        return out


def _check_segment(
    layout: StoreLayout, ops: OperationFiles, rel: str, report: VerifyReport
) -> None:
    """Read every row and lineage table of segment ``rel``; note what is damaged."""
    path = layout.root / rel
    held: list[str] = []
    if rel.startswith("operations/"):
        held.append(Path(rel).stem)
    try:
        with segment.Segment(path) as seg:
            held = list(seg.op_ids)
            if not seg.verified:
                report.unverified.append(rel)
            for op_id, text in seg.records():
                record = ops.parse(text, rel, op_id)
                n_chars = len(record.characters.tables) if record.characters else 0
                for k in range(len(record.tables) + n_chars):  # cell, then character tables
                    table_from_blob(seg.blob(op_id, k), str(path))
            if seg.bad_rows:
                report.damaged[rel] = next(iter(seg.bad_rows.values()))
                held = sorted(seg.bad_rows)
    except FileNotFoundError:
        return  # packed away meanwhile
    except (DSLogError, KeyError) as e:
        report.damaged[rel] = str(e)
    if rel in report.damaged and held:
        report.operations[rel] = held


def _check_store_id(layout: StoreLayout, report: VerifyReport) -> None:
    path = layout.root / STORE_ID_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        report.damaged[STORE_ID_FILE] = "missing (the store's id); --quarantine writes a new one"
        return
    except OSError as e:
        report.damaged[STORE_ID_FILE] = f"unreadable: {e}"
        return
    if not STORE_ID_RE.match(text.decode("ascii", "replace").strip()):
        report.damaged[STORE_ID_FILE] = (
            "not a store id (32 hex digits); --quarantine moves it aside and writes a new one "
            "(cached handles then reopen the store)"
        )


def _check_catalog(layout: StoreLayout, report: VerifyReport) -> None:
    """Read every catalog table once (DuckDB checks its blocks' checksums on read)."""
    path = layout.root / CATALOG_FILE
    if not path.exists():
        return
    report.files += 1
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as e:
        if "lock" not in str(e).lower():
            report.damaged[CATALOG_FILE] = f"DuckDB cannot open it ({e}); it is rebuilt from files"
        return
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for name in names:
            con.execute(f'SELECT * FROM "{name}"').fetchall()
    except duckdb.Error as e:
        report.damaged[CATALOG_FILE] = f"DuckDB cannot read it ({e}); it is rebuilt from files"
    finally:
        con.close()


def verify(layout: StoreLayout) -> VerifyReport:
    """Check every file of the store laid out by ``layout`` (fresh reads, no cache)."""
    report = VerifyReport(layout.root)
    damage = DamageLog()
    ops = OperationFiles(layout, damage)
    for rel in layout.segment_files():
        report.files += 1
        _check_segment(layout, ops, rel, report)
    arrays = ArrayFiles(layout, durable=False, damage=damage)
    for path in arrays.files():
        report.files += 1
        rel = layout.rel(path)
        try:
            arrays.load(path)
        except FileNotFoundError:
            continue
        except LineageStorageError as e:
            report.damaged[rel] = str(e)
            report.arrays[rel] = f"arrays/{path.parent.name}"
            if path.name.endswith(LINK_SUFFIX):
                report.arrays[rel] += " (a link of its operation's segment)"
    report.unverified = sorted({*report.unverified, *damage.unverified})
    report.files += 1
    _check_store_id(layout, report)
    _check_catalog(layout, report)
    return report


def quarantine(layout: StoreLayout, report: VerifyReport) -> None:
    """Move every damaged file of ``report`` to ``quarantine/`` (noted in
    ``report.quarantined``); a damaged store id is replaced by a new one, a damaged catalog is
    deleted (it is a cache: the next read rebuilds it).

    Raises:
        LineageStorageError: a file could not be moved (the message says which).
    """
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target_root = layout.root / QUARANTINE_DIR / stamp
    for rel in sorted(report.damaged):
        src = layout.root / rel
        if rel == CATALOG_FILE:
            for p in (src, src.with_name(src.name + ".wal")):
                p.unlink(missing_ok=True)
            report.quarantined[rel] = "(deleted; rebuilt from the files)"
            continue
        dst = target_root / rel
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.exists():
                os.replace(src, dst)
        except OSError as e:
            msg = f"Could not move the damaged file `{src}` to `{dst}`: {e}"
            raise LineageStorageError(msg) from e
        report.quarantined[rel] = layout.rel(dst)
