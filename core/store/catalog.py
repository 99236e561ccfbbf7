"""The embedded DuckDB catalog of a lineage store (``root/catalog.duckdb``).

The catalog is an *index* of the store's files, never the truth: it can be deleted and rebuilt
at any time (:meth:`LineageCatalog.rebuild`), and a missing entry is only a delay.

**Locking.** DuckDB lets one process at a time hold a database file open for writing, and
Dagster runs every run in its own process. So connections are short-lived (open, one
transaction, close) and a lock conflict is retried with jittered exponential backoff:

* a writer indexes its new operation on a best-effort basis and gives up silently (debug log)
  after ``index_timeout`` seconds — the files are already published;
* a reader first *syncs* (indexes every operation/array directory not yet in the catalog, a
  listdir diff) and queries in the same transaction; if the file stays locked for
  ``lock_timeout`` seconds it builds an in-memory catalog from the files and queries that.

No lock error ever reaches the caller.

**Damage.** The catalog is a cache, never trusted: a catalog file DuckDB reports as damaged
(its blocks carry checksums) is deleted and rebuilt from the files, with a
:class:`~dslog_dagster.errors.DamagedStoreWarning` saying so; if that fails too, the query runs
on an in-memory catalog. Damaged lineage files are skipped by a sync (noted in the store's
damage log) and retried by the next one.

**User SQL is read-only and local** (:meth:`LineageCatalog.query`): the statement runs on a
separate in-memory DuckDB connection with external access switched off, over copies of the
catalog tables it names, so ``read_text``, ``read_csv``, ``COPY``, ``ATTACH``,
``INSTALL``/``LOAD`` are refused and the catalog's own connections, whose instance DuckDB
caches per file path, keep their settings.

**Tables** (query them with :meth:`LineageCatalog.query` / ``LineageStore.sql``; timestamps
are UTC):

* ``arrays(array_id, name, version, shape, ndim, dtype, asset_key, created_at, path)``
* ``operations(op_id, op_name, capture_method, created_at, inputs, outputs, n_tables, args,
  timings, path)`` — ``args``/``timings`` are JSON text (cast with ``::JSON``);
* ``operation_arrays(op_id, role, position, name, version, array_id, asset_key, shape)`` —
  ``role`` is ``'input'`` or ``'output'``;
* ``lineage_tables(op_id, op_name, output, input, output_version, input_version,
  output_array_id, input_array_id, output_asset_key, input_asset_key, encoding, rows, n_pairs,
  bytes, path, created_at, position)`` — ``position`` is the table's index in its operation;
* ``segments(path)`` — the segment files indexed so far.

``operations.path`` and ``lineage_tables.path`` name the segment file holding the operation
(``operations/<op_id>.parquet`` or a pack). A sync notices new and vanished segment files and
moves the paths of the operations a compaction packed, so the index follows compactions.
"""

import contextlib
import logging
import os
import random
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import pyarrow as pa

from dslog_dagster.core import progress
from dslog_dagster.core.store import array_dirs, catalog_rows, link_check, sql_text
from dslog_dagster.core.store.arrays import ArrayFiles
from dslog_dagster.core.store.catalog_schema import DDL, INTERNAL_TABLES, TABLES
from dslog_dagster.core.store.failures import discard, errno_of_text, storage_error
from dslog_dagster.core.store.files import TMP_PREFIX
from dslog_dagster.core.store.layout import LINK_SUFFIX, StoreLayout
from dslog_dagster.core.store.operations import OperationFiles
from dslog_dagster.core.store.records import ArrayRecord, OperationRecord
from dslog_dagster.errors import (
    CatalogLockedError,
    DamagedStoreWarning,
    DSLogError,
    LineageStorageError,
    QueryError,
)

if TYPE_CHECKING:
    from pathlib import Path

logger = logging.getLogger(__name__)

CATALOG_FILE = "catalog.duckdb"
# Passes of a sync that found listed segments packed away before it could read them.
_SYNC_RETRIES = 20
CATALOG_SCHEMA_VERSION = "2"
"""Bumped when the catalog tables change; an old catalog is dropped and re-indexed."""

T = TypeVar("T")


class _Unavailable(Exception):
    """The catalog file could not be used (``locked``: held by another process)."""

    def __init__(self, reason: str, *, locked: bool) -> None:
        super().__init__(reason)
        self.locked = locked


def _is_retryable(e: BaseException) -> bool:
    """Whether DuckDB's error ``e`` is a conflict with another connection that goes away by
    itself (a lock held by another process, a write-write conflict between threads), as
    opposed to a full disk or a damaged file, which no retry mends. Matched on DuckDB's own
    words: "lock" alone would match "block" in a damage report."""
    text = str(e).lower()
    if isinstance(e, duckdb.TransactionException):
        # a write-write conflict between threads of one process, or a record another
        # connection committed while this transaction held the same one uncommitted (DuckDB
        # checks that key at COMMIT: "Failed to commit: ... duplicate key")
        return "conflict" in text or "duplicate key" in text
    if isinstance(e, duckdb.BinderException) and "unique file handle conflict" in text:
        # Another thread of this process is attaching or closing the same file in DuckDB's
        # instance cache at this moment; the next connection finds it settled.
        return True
    if isinstance(e, duckdb.ConstraintException) and "duplicate key" in text:
        # Another connection committed the same record after this transaction began:
        # INSERT OR IGNORE skips only rows its own snapshot sees. A new transaction does.
        return True
    if isinstance(e, duckdb.ConnectionException) and "different configuration" in text:
        return True  # another thread of this process holds it in another mode
    return isinstance(e, duckdb.IOException) and any(k in text for k in _LOCK_WORDS)


_LOCK_WORDS = ("could not set lock", "conflicting lock")
"""How DuckDB says another process holds the database file."""


def _schema_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the catalog behind ``con`` already has this version's tables: one statement
    instead of the schema's eight on every connection (a read pays ~2 ms less). The tables
    and the version row are written in one transaction, so the row stands for all of them;
    the check runs before the read's transaction because a missing table would abort it."""
    try:
        rows = con.execute("SELECT value FROM catalog_meta WHERE key = 'schema_version'").fetchall()
    except duckdb.CatalogException:  # a new (or foreign) file: no catalog_meta table yet
        return False
    return bool(rows) and rows[0][0] == CATALOG_SCHEMA_VERSION


def _fetch(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object]) -> list[Any]:
    """The rows of one of our queries, its parameters as literals (:mod:`.sql_text`)."""
    text = sql_text.inline(sql, params)
    if text is None:
        return con.execute(sql, list(params)).fetchall()
    return con.execute(text).fetchall()


def _is_damage(reason: str) -> bool:
    """Whether DuckDB's ``reason`` for refusing the catalog file means the file is damaged
    (rather than the file system refusing us — full, read-only, permission — where deleting
    it would not help, or another process holding it)."""
    text = reason.lower()
    if any(k in text for k in _CONFLICT_WORDS):
        return False  # a race with another connection that outlasted the retries
    return errno_of_text(text) is None and not any(k in text for k in _LOCK_WORDS)


_CONFLICT_WORDS = ("constraint violation", "duplicate key", "conflict")
"""How DuckDB names a conflict between connections: never a reason to delete the catalog."""


def _to_arrow(rel: Any) -> pa.Table:
    # duckdb >= 1.4 spells it to_arrow_table; older releases fetch_arrow_table.
    fetch = getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table
    table: pa.Table = fetch()
    return table


class LineageCatalog:
    """The DuckDB index of a :class:`~dslog_dagster.core.store.LineageStore`.

    Created by the store (``store.catalog``); use the store's listing methods and
    ``store.sql`` rather than this class directly. It reads the store's files through the
    same handles as the store (its operations' index and its array records), never through
    the store itself.

    Args:
        layout: the directories of the store whose files are indexed.
        operations: the store's operations (segment index and records).
        arrays: the store's array records.
        lock_timeout: seconds a reader retries a locked catalog before it falls back to an
            in-memory catalog built from the files.
        index_timeout: seconds a writer retries before leaving the indexing to readers.
    """

    def __init__(
        self,
        layout: StoreLayout,
        operations: OperationFiles,
        arrays: ArrayFiles,
        *,
        lock_timeout: float = 5.0,
        index_timeout: float = 2.0,
    ) -> None:
        self.layout = layout
        self.operations = operations
        self.arrays = arrays
        self.path: Path = layout.root / CATALOG_FILE
        self.lock_timeout = float(lock_timeout)
        self.index_timeout = float(index_timeout)
        self.recovered: str | None = None
        """Why this handle last deleted a damaged catalog file (``None``: never)."""
        self.before_read: Callable[[], object] | None = None
        """Run before every read (a store on object storage syncs its cache there)."""

    def __repr__(self) -> str:
        return f"LineageCatalog({str(self.path)!r})"

    # ----------------------------------------------------------------- connections

    def _run(self, fn: Callable[[duckdb.DuckDBPyConnection], T], timeout: float) -> T:
        """Run ``fn`` in one transaction on the catalog file, retrying lock conflicts.

        Raises:
            _Unavailable: still locked after ``timeout`` seconds, or the file is unusable.
        """
        # a wait of a second or more is reported in the run log (core.progress)
        with contextlib.ExitStack() as waited:
            return self._retry(fn, timeout, waited)

    def _retry(
        self,
        fn: Callable[[duckdb.DuckDBPyConnection], T],
        timeout: float,
        waited: contextlib.ExitStack,
    ) -> T:
        deadline = time.monotonic() + timeout
        delay = 0.005
        attempts = 0
        while True:
            attempts += 1
            existed = self.path.exists()
            if not existed:
                self._create()
            try:
                con = duckdb.connect(str(self.path))
            except duckdb.Error as e:
                if not _is_retryable(e):
                    self._drop_unborn(existed, e)
                    raise _Unavailable(str(e), locked=False) from e
                err: duckdb.Error = e
            else:
                try:
                    current = _schema_current(con)
                    con.execute("BEGIN TRANSACTION")
                    if not current:
                        self._ensure_schema(con)
                    result = fn(con)
                    con.execute("COMMIT")
                    return result
                except duckdb.Error as e:
                    _rollback(con)
                    if not _is_retryable(e):
                        con.close()
                        self._drop_unborn(existed, e)
                        raise _Unavailable(str(e), locked=False) from e
                    err = e
                except BaseException:
                    _rollback(con)
                    raise
                finally:
                    con.close()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = f"{err} (gave up after {attempts} attempts)"
                raise _Unavailable(msg, locked=True) from err
            if attempts == 1:
                waited.enter_context(progress.waiting(f"the lock of the catalog `{self.path}`"))
            time.sleep(min(remaining, delay * random.uniform(0.5, 1.5)))
            delay = min(delay * 2, 0.2)

    def _create(self) -> None:
        """Create the catalog file whole: built under a temporary name in the staging folder
        and linked into place, so that no process ever opens a file another one is still
        creating (DuckDB writes a new file's header after creating it; a reader in between saw
        "not a valid DuckDB database file" and rebuilt the catalog as damaged). When another
        process linked its file first, that one stays. Failures are left to the connection
        that follows, which reports them."""
        staging = self.layout.staging_dir
        tmp = staging / f"{TMP_PREFIX}catalog-{uuid.uuid4().hex}.duckdb"
        try:
            staging.mkdir(parents=True, exist_ok=True)
            con = duckdb.connect(str(tmp))
            try:
                con.execute("BEGIN TRANSACTION")
                self._ensure_schema(con)
                con.execute("COMMIT")
            finally:
                con.close()
            os.link(tmp, self.path)
        except (OSError, duckdb.Error) as e:
            logger.debug("catalog %s not created ahead of its first connection: %s", self.path, e)
        finally:
            discard(tmp)
            discard(tmp.with_name(tmp.name + ".wal"))

    def _drop_unborn(self, existed: bool, e: duckdb.Error) -> None:
        """Remove the catalog file this connection was creating when the file system refused
        to write it (a full disk): left there, the next reader would take the partial file
        for a damaged catalog. A catalog that existed before is never touched here."""
        if existed or errno_of_text(str(e)) is None:
            return
        for p in (self.path, self.path.with_name(self.path.name + ".wal")):
            discard(p)

    def _ensure_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        ours = {*TABLES, *INTERNAL_TABLES}
        present = {
            str(r[0])
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
            ).fetchall()
        } & ours
        for ddl in DDL:
            con.execute(ddl)
        rows = con.execute("SELECT value FROM catalog_meta WHERE key = 'schema_version'").fetchall()
        row = rows[0] if rows else None
        if row is not None and row[0] == CATALOG_SCHEMA_VERSION:
            return
        # An older layout, or tables without a version row (a file from before versions, or
        # half of ours): all of it goes and the next sync re-indexes from the files. Keeping a
        # `segments` table whose operations are gone would hide those operations for good.
        if row is not None or present:
            for name in (*TABLES, *INTERNAL_TABLES):
                con.execute(f"DROP TABLE IF EXISTS {name}")
            for ddl in DDL:
                con.execute(ddl)
        sql_text.execute(
            con,
            "INSERT OR REPLACE INTO catalog_meta VALUES ('schema_version', ?)",
            [CATALOG_SCHEMA_VERSION],
        )

    def _memory(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``fn`` on a throw-away in-memory catalog built from the files."""
        con = duckdb.connect(":memory:")
        try:
            self._ensure_schema(con)
            self._sync_in(con)
            return fn(con)
        finally:
            con.close()

    def _read(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Sync, then run ``fn``: on the file when it can be had, else in memory."""
        if self.before_read is not None:
            self.before_read()

        def synced(con: duckdb.DuckDBPyConnection) -> T:
            self._sync_in(con)
            return fn(con)

        try:
            return self._run(synced, self.lock_timeout)
        except _Unavailable as e:
            if not e.locked and self._recover(str(e)):
                with contextlib.suppress(_Unavailable):
                    return self._run(synced, self.lock_timeout)
            log = logger.debug if e.locked else logger.warning
            log("catalog %s unavailable (%s); using an in-memory catalog", self.path, e)
            return self._memory(fn)

    def _recover(self, reason: str) -> bool:
        """Delete a damaged catalog file so the next connection rebuilds it from the files;
        ``False`` (nothing done) when ``reason`` is not damage or the file cannot go."""
        if not _is_damage(reason) or not self.path.exists():
            return False
        try:
            for p in (self.path, self.path.with_name(self.path.name + ".wal")):
                p.unlink(missing_ok=True)
        except OSError:
            return False
        msg = (
            f"The catalog `{self.path}` was damaged ({reason}); it is a cache of the lineage "
            "files and is being rebuilt from them. Nothing is lost."
        )
        warnings.warn(msg, DamagedStoreWarning, stacklevel=4)
        self.recovered = reason
        return True

    # ----------------------------------------------------------------- indexing

    def index_operation(self, record: OperationRecord) -> bool:
        """Best-effort indexing of a just-written operation; ``False`` when left to readers."""

        def index(con: duckdb.DuckDBPyConnection) -> None:
            path = f"operations/{record.op_id}.parquet"
            catalog_rows.insert_operations(con, [record], {record.op_id: path})
            sql_text.execute(con, "INSERT OR IGNORE INTO segments VALUES (?)", [path])

        return self._try_index(index, record.op_id)

    def sync_best_effort(self) -> bool:
        """Like :meth:`sync`, but gives up after ``index_timeout`` (for writers)."""

        def sync_in(con: duckdb.DuckDBPyConnection) -> None:
            self._sync_in(con)

        return self._try_index(sync_in, "sync")

    def index_array(self, record: ArrayRecord, path: str) -> bool:
        """Best-effort indexing of a just-written array record; ``False`` when left to readers."""
        return self._try_index(
            lambda con: catalog_rows.insert_arrays(con, [(record, path)]), record.name
        )

    def _try_index(self, fn: Callable[[duckdb.DuckDBPyConnection], None], what: str) -> bool:
        try:
            self._run(fn, self.index_timeout)
        except _Unavailable as e:
            logger.debug(
                "catalog %s not updated for %s (%s); readers will sync", self.path, what, e
            )
            return False
        except Exception:  # the files are published; the index must never fail a write
            logger.warning("catalog %s not updated for %s", self.path, what, exc_info=True)
            return False
        return True

    def _sync_in(self, con: duckdb.DuckDBPyConnection, _attempt: int = 0) -> int:
        """Index, through ``con``, what changed on disk since the catalog last looked.

        A segment listed here can be packed away (by another process's compaction) before it
        is read; the pack that now holds its operations may have been published after the
        listing. Such a pass re-lists and indexes again (bounded), so an operation that was
        on disk when the sync began is always indexed when it returns.
        """
        operations = self.operations
        vanished = False
        read: dict[str, tuple[OperationRecord, str]] = {}  # op id -> record, its segment
        known_segs = {r[0] for r in con.execute("SELECT path FROM segments").fetchall()}
        if set(self.layout.segment_files()) == known_segs:
            # nothing written or packed since the last sync (a listing of two directories):
            # no segment needs opening; a damaged one is never marked indexed, so never here
            return self._sync_arrays(con)
        on_disk = operations.refresh()
        where = operations.where
        new_segs = [rel for rel in on_disk if rel not in known_segs]
        gone_segs = [rel for rel in known_segs if rel not in on_disk]
        changed = 0
        if gone_segs:
            # Operations whose segment vanished: packed elsewhere (move them) or deleted.
            rows = _fetch(
                con,
                "SELECT op_id FROM operations WHERE path IN (SELECT unnest(?::VARCHAR[]))",
                [gone_segs],
            )
            if any(op_id not in where for (op_id,) in rows):
                # A listing racing a compaction can miss a pack that was just renamed in:
                # look once more before dropping anything from the index.
                on_disk = operations.refresh()
                where = operations.where
                new_segs = [rel for rel in on_disk if rel not in known_segs]
            changed += len(rows)
            # one statement each for every moved and every deleted operation
            catalog_rows.move_operations(
                con, {op_id: where[op_id] for (op_id,) in rows if op_id in where}
            )
            catalog_rows.delete_operations(con, [op_id for (op_id,) in rows if op_id not in where])
            sql_text.execute(
                con, "DELETE FROM segments WHERE path IN (SELECT unnest(?::VARCHAR[]))", [gone_segs]
            )
        if new_segs:
            known_ops = {r[0] for r in con.execute("SELECT op_id FROM operations").fetchall()}
            records: list[OperationRecord] = []
            paths: dict[str, str] = {}
            for rel in new_segs:
                if rel in operations.damage.damaged:
                    continue  # not marked indexed: retried (and noted) by every sync
                # A segment is marked indexed only together with its operations, so an
                # operation can never hide behind an indexed segment.
                if any(op not in known_ops for op in on_disk[rel]):
                    try:
                        recs = operations.records_in(rel)
                        partly_damaged = rel in operations.damage.damaged
                    except FileNotFoundError:
                        vanished = True  # packed away since the listing: list again below
                        # Operations moved into it above must follow it into its pack: marked
                        # indexed (it is gone, so no operation can hide behind it), it is seen
                        # to vanish by the next pass, which moves them on.
                        sql_text.execute(con, "INSERT OR IGNORE INTO segments VALUES (?)", [rel])
                        continue
                    except DSLogError as e:
                        logger.debug("skipping segment %s in %s: %s", rel, self.layout.root, e)
                        continue
                    for r in recs:
                        if r.op_id not in known_ops:
                            records.append(r)
                            paths[r.op_id] = rel
                            known_ops.add(r.op_id)
                            read[r.op_id] = (r, rel)
                    if partly_damaged:
                        continue  # not marked indexed: every sync notes its damaged rows
                sql_text.execute(con, "INSERT OR IGNORE INTO segments VALUES (?)", [rel])
            catalog_rows.insert_operations(con, records, paths)
            changed += len(records)
        changed += self._sync_arrays(con, read)
        if vanished and _attempt < _SYNC_RETRIES:
            changed += self._sync_in(con, _attempt + 1)
        return changed

    def _sync_arrays(
        self,
        con: duckdb.DuckDBPyConnection,
        read: Mapping[str, tuple[OperationRecord, str]] | None = None,
    ) -> int:
        """Index the array records of the directories changed since the last sync (see
        :mod:`~dslog_dagster.core.store.array_dirs`); returns how many were added.

        ``read``: the operation records this sync read (op id -> record, its segment). The
        link records of their outputs that are byte copies of a pack row read here are taken
        from it (:mod:`~dslog_dagster.core.store.link_check`), the others read one by one.
        """
        started = array_dirs.now_ns()
        noted = dict(con.execute("SELECT dir, mtime_ns FROM array_dirs").fetchall())
        on_disk = array_dirs.array_dirs(self.layout)
        todo = array_dirs.changed_dirs(on_disk, noted)
        if not todo:
            return 0
        known = {
            r[0]
            for r in _fetch(
                con,
                "SELECT path FROM arrays WHERE split_part(path, '/', 2) IN "
                "(SELECT unnest(?::VARCHAR[]))",
                [todo],
            )
        }
        listed: dict[str, list[str]] = {}
        present: set[str] = set()
        for d in todo:
            records, entries = array_dirs.files_in(self.layout, d)
            listed[d] = [r for r in records if r not in known]
            present |= entries
        # records that vanished (a retracted step's, quarantined ones) leave the index
        gone = sorted(known - present)
        if gone:
            sql_text.execute(
                con, "DELETE FROM arrays WHERE path IN (SELECT unnest(?::VARCHAR[]))", [gone]
            )
        links = (r for rels in listed.values() for r in rels if r.endswith(LINK_SUFFIX))
        linked = link_check.recognised(self.layout, links, read or {})
        arrays, clean = [], []
        for d, rels in listed.items():
            ok = True
            for rel in rels:
                rec = linked.get(rel)
                if rec is not None:
                    arrays.append((rec, rel))
                    continue
                try:
                    arrays.append((self.arrays.load(self.layout.root / rel), rel))
                except (DSLogError, FileNotFoundError) as e:
                    ok = False  # retried (and noted as damage) by every sync
                    logger.debug("skipping array record %s: %s", rel, e)
            if ok and array_dirs.settled(on_disk[d], started):
                clean.append((d, on_disk[d]))
        catalog_rows.insert_arrays(con, arrays)
        sql_text.execute(
            con, "DELETE FROM array_dirs WHERE dir IN (SELECT unnest(?::VARCHAR[]))", [todo]
        )
        if clean:
            sql_text.execute(
                con,
                "INSERT INTO array_dirs SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[])",
                [[d for d, _ in clean], [t for _, t in clean]],
            )
        return len(arrays)

    def sync(self) -> bool:
        """Index what other processes wrote; ``False`` if the catalog stayed locked."""
        try:
            self._run(self._sync_in, self.lock_timeout)
        except _Unavailable as e:
            if not e.locked and self._recover(str(e)):
                with contextlib.suppress(_Unavailable):
                    self._run(self._sync_in, self.lock_timeout)
                    return True
            log = logger.debug if e.locked else logger.warning
            log("catalog %s not synced: %s", self.path, e)
            return False
        return True

    def rebuild(self) -> None:
        """Re-create the catalog from the files.

        A damaged catalog file is deleted and re-created. A catalog the file system refuses
        (full, read-only, permission) is left as it was.

        Raises:
            CatalogLockedError: another process kept the catalog locked for 30 seconds.
            StoreFullError / StoreReadOnlyError / StorePermissionError: the file system
                refused the catalog (it is unchanged).
            LineageStorageError: it could not be re-created for another reason.
        """

        def rebuild_in(con: duckdb.DuckDBPyConnection) -> None:
            for name in (*TABLES, *INTERNAL_TABLES):
                con.execute(f"DELETE FROM {name}")
            self._sync_in(con)

        timeout = max(self.lock_timeout, 30.0)
        try:
            self._run(rebuild_in, timeout)
            return
        except _Unavailable as e:
            self._refused(e, timeout)
            logger.warning("catalog %s is damaged (%s); re-creating it", self.path, e)
            self.recovered = str(e)
        for p in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                p.unlink(missing_ok=True)
            except OSError as err:
                doing = f"remove the damaged catalog `{p}` (to rebuild it)"
                raise storage_error(err, doing, self.layout.root) from err
        try:
            self._run(rebuild_in, timeout)
        except _Unavailable as e:
            self._refused(e, timeout)
            msg = (
                f"Could not re-create the catalog `{self.path}`: {e}. The lineage files are "
                "intact; delete the catalog file and run `dslog rebuild-catalog` again."
            )
            raise LineageStorageError(msg) from e

    def _refused(self, e: "_Unavailable", timeout: float) -> None:
        """Raise the error a rebuild reports for ``e`` unless it means the file is damaged
        (then return: the caller deletes and re-creates it)."""
        if e.locked:
            msg = (
                f"The catalog `{self.path}` stayed locked by another process for "
                f"{timeout:.0f} s ({e}); rebuild it when no run is writing to the store."
            )
            raise CatalogLockedError(msg) from e
        code = errno_of_text(str(e))
        if code is not None:
            doing = f"write the catalog `{self.path}`"
            root = self.layout.root
            raise storage_error(code, doing, root, detail=str(e), path=self.path) from e

    # ----------------------------------------------------------------- queries

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run one read-only ``SELECT`` (with ``?`` parameters) and return an Arrow table.

        Raises:
            QueryError: not exactly one SELECT statement, or DuckDB rejected it.
        """
        if not isinstance(sql, str) or not sql.strip():
            msg = "The catalog query is empty; pass one SELECT statement."
            raise QueryError(msg)
        try:
            sql.encode("utf-8")
        except UnicodeEncodeError as e:
            msg = f"The catalog query is not valid Unicode text ({e}); pass one SELECT statement."
            raise QueryError(msg) from e
        sandbox = _sandbox()
        try:
            statements = sandbox.extract_statements(sql)
        except duckdb.Error as e:
            sandbox.close()
            msg = f"The catalog query does not parse: {e}"
            raise QueryError(msg) from e
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            kinds = ", ".join(s.type.name for s in statements)
            msg = (
                f"The catalog is read-only: pass exactly one SELECT statement (got {kinds}). "
                f"Tables: {', '.join(TABLES)}."
            )
            sandbox.close()
            raise QueryError(msg)

        names = [t for t in TABLES if t in sql.lower()]

        def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
            tables = {t: _to_arrow(con.sql(f"SELECT * FROM {t}")) for t in names}
            return _run_sandboxed(sandbox, sql, params, tables)

        try:
            return self._read(run)
        finally:
            sandbox.close()

    def read(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Sync, then run ``fn`` (trusted internal queries, several in one connection: each
        connection costs tens of ms) on the catalog, or on an in-memory one built from the
        files when the file stays locked or is unusable."""
        return self._read(fn)

    def rows(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of a trusted internal query, after a sync."""
        if not params:
            return self._read(lambda con: con.execute(sql).fetchall())
        return self._read(lambda con: _fetch(con, sql, params))

    def column(self, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
        """First column of a trusted internal query, after a sync."""
        return [r[0] for r in self.rows(sql, params)]


def _sandbox() -> duckdb.DuckDBPyConnection:
    """A fresh in-memory connection that cannot reach files, the network or extensions, for
    the user's SQL (see the module docstring)."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "enable_external_access": False,
        "autoload_known_extensions": False,
        "autoinstall_known_extensions": False,
        "python_enable_replacements": False,
        "lock_configuration": True,
    }
    return duckdb.connect(":memory:", config=config)


def _run_sandboxed(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[Any] | None,
    tables: Mapping[str, pa.Table],
) -> pa.Table:
    """Run the user's ``sql`` on the sandbox ``con`` over copies of the catalog ``tables``.

    Raises:
        QueryError: DuckDB refused the statement (a file-reading function, a bad column...).
    """
    try:
        for name, table in tables.items():
            con.register(name, table)
        return _to_arrow(con.sql(sql, params=list(params) if params else None))
    except duckdb.Error as e:
        extra = ""
        if isinstance(e, duckdb.PermissionException):
            extra = " The catalog SQL reads the catalog tables only, never files or the network."
        msg = f"The catalog query failed: {e}.{extra} Tables: {', '.join(TABLES)}."
        raise QueryError(msg) from e


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error):  # no transaction was open
        con.execute("ROLLBACK")
