"""The lineage store: arrays, operations and their lineage tables in one directory.

The files are the source of truth and are never modified once visible (the directory tree is
described in :mod:`~dslog_dagster.core.store.layout`). :class:`LineageStore` coordinates the
pieces of this package:

* :mod:`~dslog_dagster.core.store.records` — the records and the validation of inputs;
* :mod:`~dslog_dagster.core.store.layout`, :mod:`~dslog_dagster.core.store.files` — where
  files live, how they are published (atomically, flushed);
* :mod:`~dslog_dagster.core.store.arrays` and :mod:`~dslog_dagster.core.store.operations` —
  the array records and the operations' segments, read through per-handle caches;
* :mod:`~dslog_dagster.core.store.lineage` (and ``char_tables`` for character tables) — an
  operation's lineage checked, compressed and encoded in memory;
* :mod:`~dslog_dagster.core.store.compaction` — packing small segments; and
  :mod:`~dslog_dagster.core.store.catalog` — the DuckDB index (writers never depend on it).

**Segments** (:mod:`dslog_dagster.core.format.segment`) are Parquet files with one row per
operation: the operation record (JSON) and one self-describing blob per lineage table. A
registration compresses and encodes everything in memory, writes its segment under
``.staging/``, fsyncs it and renames it to ``operations/<op_id>.parquet``, so readers see
either the whole operation or nothing, and a crash leaves at most a staging file (removed once
it is an hour old).

**One publish per step.** An operation may register its new output arrays with it (outputs
given as :class:`NewArray`): the operation's segment, whose record already holds each output's
full array record, is written and fsynced once, hard-linked into each output's array directory
as ``<version>.op.parquet`` (the array record: readers take it from the segment's record), and
renamed into ``operations/``; then the directories are fsynced. One flushed file instead of an
array JSON plus a segment halves the flushes of a tracked step (the dominant cost of a step
served from a reuse view). Nothing is ever visible before its bytes are flushed, so a crash
leaves at most an array record whose operation never appeared (as between ``register_array``
and ``register_operation``), never a torn file. A compaction that packs the operation leaves
the array's link (a hard link: the bytes stay until both are gone). A writer may split a
registration (:meth:`LineageStore.prepare_operation`: validate, encode, write and flush the
staging file; :meth:`PreparedOperation.commit`: links, rename, directory flushes), so the
flush overlaps other work (the IO manager stores the asset's value meanwhile) and nothing is
published until that work succeeded; :meth:`PreparedOperation.publish` and
:meth:`PreparedOperation.flushed` split the commit too, so the directories are flushed in a
worker while the IO manager builds the step's metadata.
"""

import contextlib
import errno
import functools
import logging
import os
import reprlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from dslog_dagster.core.format.blob import table_from_blob
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation, as_shape
from dslog_dagster.core.store import files
from dslog_dagster.core.store.arrays import ArrayFiles
from dslog_dagster.core.store.catalog import LineageCatalog
from dslog_dagster.core.store.char_tables import CharacterLineage, encode_characters
from dslog_dagster.core.store.compaction import (
    COMPACT_MAX_OP_BYTES,
    COMPACT_PACK_BYTES,
    CompactionResult,
    compact,
)
from dslog_dagster.core.store.damage import DamageLog

if TYPE_CHECKING:
    from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.core.store.failures import discard, storage_error
from dslog_dagster.core.store.group_commit import GroupCommitter
from dslog_dagster.core.store.integrity import STORE_ID_RE, VerifyReport, quarantine, verify
from dslog_dagster.core.store.layout import (
    OP_ID_RE,
    STORE_ID_FILE,
    StoreLayout,
    link_file_name,
    version_file_name,
)
from dslog_dagster.core.store.lineage import encode_lineage, operation_segment
from dslog_dagster.core.store.listing import between_query, page_query, pages
from dslog_dagster.core.store.object_backends import is_url
from dslog_dagster.core.store.operations import OperationFiles
from dslog_dagster.core.store.prepared import PreparedOperation
from dslog_dagster.core.store.records import (
    ArrayRecord,
    NewArray,
    OperationRecord,
    TableRecord,
    array_record,
    check_name,
    normalise_args,
    normalise_timings,
)
from dslog_dagster.core.store.remote import RemoteMirror
from dslog_dagster.errors import (
    ConfigurationError,
    InvalidRelationError,
    LineageNotFoundError,
    LineageStorageError,
)

logger = logging.getLogger(__name__)


class LineageStore:
    """Arrays, operations and their compressed lineage, in a directory.

    Safe to use from many processes at once (Dagster runs each run in its own process): writes
    are atomic renames of immutable files, and the DuckDB catalog is only an index that every
    process keeps up to date opportunistically (see :class:`LineageCatalog`).

    Args:
        root: the store directory (created when missing).
        lock_timeout: seconds a reader waits for the catalog lock before it falls back to an
            in-memory catalog built from the files.
        index_timeout: seconds a writer tries to index its new operation before leaving it to
            the next reader's :meth:`sync`.
        index_on_write: index each new array and operation in the DuckDB catalog as it is
            written. Off by default: the files are the truth and every catalog read first
            indexes what changed on disk, in one batch, so eager indexing only moves ~0.1 s of
            DuckDB work per registration from the first query into the write path (where a
            Dagster step pays it). Turn it on for stores queried by external SQL tools that
            read the catalog file without going through :meth:`sync`.
        durable: fsync every new array record and operation file and its directory before
            the write returns, so registered lineage survives a power loss (the default).
            ``False`` keeps every publish atomic — readers and crashed processes never see a
            partial file — but leaves flushing to the OS, as Dagster's filesystem IO manager
            does for the asset values themselves; it saves a few milliseconds per write on
            disks with slow flushes. Compaction always fsyncs (it deletes the files it packs).
        group_commit: with ``durable``, publish each write at once (atomic, as above) but leave
            its fsyncs to a committer thread that flushes many writes in one pass (within
            :data:`~dslog_dagster.core.store.group_commit.GROUP_COMMIT_DELAY_S`), and at
            :meth:`flush`, :meth:`close` and process exit. A killed process loses nothing; a
            power loss may lose what was published since the last pass, and a file so lost or
            torn is detected by its checksums (see :mod:`~.group_commit`).
        cache_dir, storage_options: for a ``root`` given as a URL (``s3://bucket/prefix``,
            ``gs://``, ``az://``): where its local cache lives and the client's options
            (``endpoint_url``, ``key``, ``secret``, ...); see :mod:`~.remote`.

    Examples:
        >>> import numpy as np
        >>> from dslog_dagster.core import LineageRelation
        >>> store = LineageStore("lineage-store")
        >>> x = store.register_array("x", (4, 4))
        >>> y = store.register_array("y", (4, 4))
        >>> i, j = np.indices((4, 4)).reshape(2, -1)
        >>> relation = LineageRelation.from_columns((4, 4), (4, 4), out_cols=[i, j], in_cols=[i, j])
        >>> op = store.register_operation("neg", [x], [y], {("y", "x"): relation})
        >>> store.read_lineage(op, "y", "x").decompress() == relation
        True
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        lock_timeout: float = 5.0,
        index_timeout: float = 2.0,
        index_on_write: bool = False,
        durable: bool = True,
        group_commit: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.remote = RemoteMirror(str(root), cache_dir, storage_options) if is_url(root) else None
        if self.remote is None and str(root).startswith("file://"):
            root = str(root).removeprefix("file://")
        self.root = self.remote.cache if self.remote is not None else Path(root).absolute()
        self.index_on_write = bool(index_on_write)
        self.durable = bool(durable)
        if group_commit and not self.durable:
            msg = "`group_commit=True` batches the fsyncs of a durable store; pass `durable=True`."
            raise ConfigurationError(msg)
        self.committer = GroupCommitter(self.root) if group_commit else None
        self._sync = self.durable and not group_commit  # fsync before a write returns
        self.layout = StoreLayout(self.root)
        try:
            for sub in ("arrays", "operations", "packs", ".staging"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise storage_error(e, "create the store's folders", self.root) from e
        self.store_id = files.claim_store_id(self.root, self.durable)
        self.damage = DamageLog()
        if not STORE_ID_RE.match(self.store_id):
            self.damage.note(STORE_ID_FILE, "not a store id (32 hex digits)")
        self._damaged_arrays: tuple[object, dict[str, set[str] | None]] = ((), {})
        self.array_files = ArrayFiles(self.layout, self._sync, self.damage, self.committer)
        self.operation_files = OperationFiles(self.layout, self.damage)
        self.catalog = LineageCatalog(
            self.layout,
            self.operation_files,
            self.array_files,
            lock_timeout=lock_timeout,
            index_timeout=index_timeout,
        )
        self.clean_staging()
        if self.remote is not None:
            self.catalog.before_read = lambda: self.remote and self.remote.pull(force=False)
            self.remote.pull()

    def __repr__(self) -> str:
        return f"LineageStore({(self.remote.url if self.remote else str(self.root))!r})"

    @property
    def group_commit(self) -> bool:
        return self.committer is not None

    def flush(self) -> None:
        """Flush every write of this handle to disk now (a no-op unless ``group_commit``).

        Raises:
            LineageStorageError: a flush failed (what to do is in the message).
        """
        if self.committer is not None:
            self.committer.flush()

    def close(self) -> None:
        """Flush (see :meth:`flush`) and stop the group committer's thread."""
        if self.committer is not None:
            self.committer.close()

    # ----------------------------------------------------------------- paths

    @property
    def arrays_dir(self) -> Path:
        return self.layout.arrays_dir

    @property
    def operations_dir(self) -> Path:
        return self.layout.operations_dir

    @property
    def packs_dir(self) -> Path:
        return self.layout.packs_dir

    @property
    def staging_dir(self) -> Path:
        return self.layout.staging_dir

    def clean_staging(self, max_age_s: float = files.STAGING_MAX_AGE_S) -> int:
        """Remove staging directories left by crashed writers; returns how many were removed.

        Only directories older than ``max_age_s`` go, so a registration in flight in another
        process is never disturbed.
        """
        return files.clean_staging(self.staging_dir, max_age_s)

    # ----------------------------------------------------------------- arrays

    def register_array(
        self,
        name: str,
        shape: Sequence[int] | int,
        dtype: str | np.dtype[Any] | type = "float64",
        asset_key: str | Sequence[str] | None = None,
        version: str | None = None,
        columns: Sequence[tuple[str, str]] | None = None,
    ) -> ArrayRecord:
        """Register an array (a node of the lineage graph); idempotent per ``(name, version)``.

        When several processes register the same ``(name, version)`` the first record written
        wins; the others get that record back (their ``dtype``/``asset_key`` are not merged).

        Args:
            name: array name; any non-empty string without NUL.
            shape: the array's shape.
            dtype: anything :class:`numpy.dtype` accepts.
            asset_key: the Dagster asset key, as ``"a/b"`` or ``["a", "b"]``.
            version: data version; ``None`` is the default version. ``columns``: a frame's schema.

        Returns:
            The stored record (the existing one when already registered).

        Raises:
            InvalidRelationError: bad name/version, or ``(name, version)`` is already registered
                with a different shape.
            UnsupportedArrayError: ``shape`` or ``dtype`` is not understood.
            LineageStorageError: the record could not be written.
        """
        valid = isinstance(name, str) and (version is None or isinstance(version, str))
        known = self.array_files.known(name, version) if valid else None
        if known is not None and known.shape == as_shape(shape, f"Array `{name}`"):
            return known  # a shape that differs takes the long way and raises there
        record = array_record(NewArray(name, shape, dtype, asset_key, version, columns))
        existing = self.array_files.existing(record)
        if existing is not None:
            return existing
        if self.remote is not None:  # the object first: the cache mirrors the service
            self.remote.publish_array(record)
        stored, path = self.array_files.publish(record)
        if path is not None and self.index_on_write:
            self.catalog.index_array(stored, self.layout.rel(path))
        return stored

    def get_array(self, name: str, version: str | None = None) -> ArrayRecord:
        """The record of array ``name``: of ``version``, or the latest registered when ``None``.

        Raises:
            LineageNotFoundError: no such array/version (the message lists close names).
        """
        try:
            return self.array_files.find(name, version)
        except LineageNotFoundError:
            if self.remote is None or not self.remote.pull():  # not in the cache (yet)?
                raise
        return self.array_files.find(name, version)

    # ----------------------------------------------------------------- operations

    def register_operation(
        self,
        op_name: str,
        inputs: "Sequence[str | ArrayRecord]",
        outputs: "Sequence[str | ArrayRecord | NewArray]",
        lineage: Mapping[tuple[str, str], LineageRelation | LineageTable],
        args: Mapping[str, Any] | None = None,
        capture_method: str = "user",
        timings: Mapping[str, float] | None = None,
        characters: "Mapping[str, CharacterLineage] | None" = None,
        effects: "OperationEffects | None" = None,
    ) -> OperationRecord:
        """Register one execution of an operation with its lineage, atomically:
        :meth:`prepare_operation` (the arguments and errors are documented there), then
        :meth:`PreparedOperation.commit`.

        Everything is validated, compressed and encoded in memory before anything is written;
        the operation's segment then appears in one rename, so a failure leaves nothing
        visible.

        Returns:
            The stored :class:`OperationRecord`.
        """
        return self.prepare_operation(
            op_name, inputs, outputs, lineage, args, capture_method, timings, characters, effects
        ).commit()

    def prepare_operation(
        self,
        op_name: str,
        inputs: "Sequence[str | ArrayRecord]",
        outputs: "Sequence[str | ArrayRecord | NewArray]",
        lineage: Mapping[tuple[str, str], LineageRelation | LineageTable],
        args: Mapping[str, Any] | None = None,
        capture_method: str = "user",
        timings: Mapping[str, float] | None = None,
        characters: "Mapping[str, CharacterLineage] | None" = None,
        effects: "OperationEffects | None" = None,
    ) -> "PreparedOperation":
        """The first half of :meth:`register_operation`: validate, compress and encode
        everything, and write and flush the operation's segment under ``.staging/``, where no
        reader looks. Nothing is visible until :meth:`PreparedOperation.commit` publishes it
        (or :meth:`PreparedOperation.abort` drops it), so a writer flushes the segment while
        it does other work (the IO manager stores the value) and publishes it after that.

        Args:
            op_name: operation name (e.g. ``"numpy.add"`` or an asset's op name).
            inputs: input arrays, by name (latest version) or record.
            outputs: output arrays, by name (latest version) or record; or a
                :class:`NewArray` to register the array with the operation, in the same
                flushed file (one flush instead of two: see the module docstring).
            lineage: ``{(output_name, input_name): relation_or_table}``; relations are
                compressed here with :func:`compress`. Pairs not listed have no lineage.
            args: JSON-able arguments of the operation (kept for reuse signatures and audits).
            capture_method: how the lineage was obtained (``"user"``, ``"annotator"``,
                ``"spark"``, ``"all-to-all"``, ...).
            timings: seconds spent in capture steps. ``compress_s`` and ``encode_s`` are
                measured here and added to any value passed in under those keys.
            characters: output name -> its character-range lineage (tables' ``input`` name
                input arrays); read back with :func:`~dslog_dagster.core.store.read_characters`.
            effects: its DPDS kinds and column effects (``None``: unknown).

        Returns:
            The :class:`PreparedOperation` (its ``record`` is what ``commit`` stores).

        Raises:
            InvalidRelationError: unknown output/input in ``lineage``, shapes that do not match
                the registered arrays, bad names/args/timings, an output that is one of the
                inputs (same name and version).
            LineageNotFoundError: an input/output array is not registered.
            LineageStorageError: the segment could not be written (nothing is left behind;
                :class:`~dslog_dagster.errors.StoreFullError` and its siblings say why).
        """
        op_name = check_name(op_name, "Operation name")
        capture_method = check_name(capture_method, f"Capture method of operation `{op_name}`")
        ins, outs, new_outs = self.array_files.operation_arrays(op_name, inputs, outputs)
        args_json = normalise_args(op_name, args)
        timings_json = normalise_timings(op_name, timings)
        if not isinstance(lineage, Mapping):
            msg = (
                f"Operation `{op_name}`: `lineage` must map (output name, input name) to a "
                f"LineageRelation or LineageTable, got `{type(lineage).__name__}`."
            )
            raise InvalidRelationError(msg)
        # 1. validate + compress + encode, all in memory
        by_in = {r.name: r for r in ins}
        by_out = {r.name: r for r in outs}
        tables = encode_lineage(op_name, lineage, by_out, by_in, timings_json)
        chars = encode_characters(op_name, characters or {}, by_out, by_in)
        record, rel, segment = operation_segment(
            op_name, ins, outs, args_json, capture_method, timings_json, tables, chars, effects
        )
        # 2. write and flush the segment under .staging; commit() publishes it with one
        # rename (linking it first as the record of each new output array: one flushed file)
        tmp = self._stage(segment, record.op_id)
        retry = (op_name, inputs, outputs, lineage, args, capture_method, timings, characters, effects)  # fmt: skip  # noqa: E501
        return PreparedOperation(self, tmp, rel, record, new_outs, retry)

    def _stage(self, segment: bytes, op_id: str) -> Path:
        """Write and flush ``segment`` under ``.staging/``, where no reader looks.

        Raises:
            LineageStorageError: it could not be written (nothing is left behind).
        """
        tmp = self.staging_dir / f"{uuid.uuid4().hex}.tmp"
        try:
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            files.write_synced(tmp, segment, self._sync)
        except OSError as e:
            discard(tmp)
            raise storage_error(e, f"write operation `{op_id}`", self.root) from e
        except BaseException:
            discard(tmp)
            raise
        return tmp

    def commit_prepared(
        self, prepared: "PreparedOperation", *, aside: bool = False
    ) -> OperationRecord:
        """Publish a prepared operation (what :meth:`PreparedOperation.commit` and
        :meth:`PreparedOperation.publish` do); ``aside``: its directories are flushed in a
        worker (``prepared.flush``), else before this returns.

        Raises:
            LineageStorageError: it could not be published (nothing of it is visible).
        """
        record, rel, tmp = prepared.record, prepared.rel, prepared.tmp
        op_id = record.op_id
        lost = self.remote.publish_operation(tmp, rel, prepared.new_outs) if self.remote else []
        if prepared.new_outs:
            if not self._publish_with_arrays(
                self.root / rel, tmp, prepared.new_outs, op_id, prepared if aside else None
            ):
                # another writer registered an output meanwhile: its record stands
                op_name, inputs, outputs, lineage, args, method, timings, ch, eff = prepared.retry
                registered = [
                    self.register_array(a.name, a.shape, a.dtype, a.asset_key, a.version)
                    if isinstance(a, NewArray)
                    else a
                    for a in outputs
                ]
                return self.register_operation(
                    op_name, inputs, registered, lineage, args, method, timings, ch, eff
                )
        else:
            final = self.root / rel
            files.publish_staged(tmp, final, f"operation `{op_id}`", self.root, self._sync)
            if self.committer is not None:
                self.committer.add([final], [final.parent])
        self.operation_files.added(rel, record)
        if lost and self.remote is not None:
            self.remote.adopt(lost)  # another writer's record of an output came first
            self.array_files.forget()
        if self.index_on_write:
            self.catalog.index_operation(record)
        return record

    def _publish_with_arrays(
        self,
        final: Path,
        tmp: Path,
        new_outs: Sequence[ArrayRecord],
        op_id: str,
        flush_to: "PreparedOperation | None" = None,
    ) -> bool:
        """Publish the flushed staging file ``tmp`` at ``final`` and as the record of each
        array of ``new_outs``: hard links into the array directories, rename, fsync of the
        directories (see the module docstring). ``tmp`` is gone afterwards.

        Returns ``False`` (nothing of the operation visible; links already made stay valid
        array records) when an output's record appeared meanwhile or the file system has no
        hard links: the caller then registers the usual way.
        """
        durable = self._sync
        dirs: list[Path] = []
        renamed = False
        try:
            for rec in new_outs:
                directory = self.layout.array_dir(rec.name)
                if (directory / version_file_name(rec.version)).exists():
                    return False
                try:
                    self.array_files.link_into(tmp, directory, link_file_name(rec.version))
                except FileExistsError:
                    return False
                except OSError as e:
                    if e.errno in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                        return False  # no hard links here
                    raise
                dirs.append(directory)
            os.rename(tmp, final)
            renamed = True
            if durable and flush_to is not None:
                flush_to.flush = files.flush_dirs_aside([final.parent, *dirs])
            elif durable:
                files.fsync_dirs([final.parent, *dirs])
            elif self.committer is not None:
                self.committer.add([final], [final.parent, *dirs])
        except OSError as e:
            raise storage_error(e, f"write operation `{op_id}`", self.root) from e
        finally:
            if not renamed:  # after the rename it is gone: no system call to learn that
                discard(tmp)
        for rec, d in zip(new_outs, dirs, strict=True):
            path = d / link_file_name(rec.version)
            self.array_files.remember(path, rec)
            if self.index_on_write:
                self.catalog.index_array(rec, self.layout.rel(path))
        return True

    # ----------------------------------------------------------------- reading

    def operation_ids(self) -> list[str]:
        """Ids of every published operation, oldest first (read from the directory, so it
        sees other processes' registrations at once; costs a listing of the store's files)."""
        return self.operation_files.ids()

    def get_operation(self, op_id: str) -> OperationRecord:
        """The record of operation ``op_id``.

        Raises:
            LineageNotFoundError: no such operation.
            LineageStorageError / SchemaVersionError: the record is damaged or too new.
        """
        rec = self.operation_files.records.get(op_id) if isinstance(op_id, str) else None
        if rec is not None:
            return rec
        if not isinstance(op_id, str) or not OP_ID_RE.match(op_id):
            msg = f"`{reprlib.repr(op_id)}` is not an operation id (see `store.operations()`)."
            raise LineageNotFoundError(msg)
        try:
            return self.operation_files.read(op_id)
        except FileNotFoundError as e:
            msg = (
                f"No operation `{op_id}` in the store at `{self.root}`; "
                "list operations with `store.operations()`."
            )
            raise LineageNotFoundError(msg) from e

    def read_lineage(
        self,
        op: "str | OperationRecord",
        output: "str | ArrayRecord",
        input: "str | ArrayRecord",
    ) -> LineageTable:
        """The stored lineage table of ``op`` for ``output`` ← ``input``.

        Raises:
            LineageNotFoundError: no such operation or table.
            LineageStorageError / SchemaVersionError: the file is damaged or too new.
        """
        blob, where = self._stored_blob(op, output, input)
        return table_from_blob(blob, where)

    def read_blob(
        self,
        op: "str | OperationRecord",
        output: "str | ArrayRecord",
        input: "str | ArrayRecord",
    ) -> bytes:
        """The stored bytes of one lineage table (what ``table_from_blob`` reads), for engines
        that decode tables where the work runs (the Spark query path ships it to an executor):
        unlike a path handed out, it survives a compaction moving the table into a pack.

        Raises:
            LineageNotFoundError: no such operation or table.
        """
        return self._stored_blob(op, output, input)[0]

    def _stored_blob(
        self,
        op: "str | OperationRecord",
        output: "str | ArrayRecord",
        input: "str | ArrayRecord",
    ) -> tuple[bytes, str]:
        rec = op if isinstance(op, OperationRecord) else self.get_operation(op)
        out_name = output.name if isinstance(output, ArrayRecord) else output
        in_name = input.name if isinstance(input, ArrayRecord) else input
        k = rec.tables.index(rec.table(out_name, in_name))
        try:
            blob, rel = self.operation_files.in_segment(
                rec.op_id, lambda seg: seg.blob(rec.op_id, k)
            )
        except FileNotFoundError as e:
            msg = (
                f"The lineage of operation `{rec.op_id}` is not in the store at `{self.root}` "
                "(its segment was deleted?); `dslog inspect` lists what is there."
            )
            raise LineageNotFoundError(msg) from e
        return blob, str(self.root / rel)

    # ----------------------------------------------------------------- compaction

    def compact(
        self,
        *,
        max_op_bytes: int = COMPACT_MAX_OP_BYTES,
        pack_bytes: int = COMPACT_PACK_BYTES,
        lock_timeout: float = 60.0,
    ) -> "CompactionResult":
        """Pack the segments of small operations (and small packs) into shared pack files.

        Safe while other processes register, read or compact: each pack is published
        atomically before the files it replaces are deleted, and readers that lose a file
        mid-read find the operation in the pack. Records and tables are copied byte for byte.

        Args:
            max_op_bytes: operation segments up to this size are packed; larger ones (big
                columnar tables) stay where they are, since one footer is noise next to them.
            pack_bytes: target pack size; packs under half of it are merged again.
            lock_timeout: seconds to wait for another compaction of this store to finish
                before giving up (the result then says ``skipped``).

        Returns:
            What was packed (see :class:`CompactionResult`).

        Raises:
            LineageStorageError: a pack could not be written (nothing was deleted).
        """
        run = functools.partial(compact, self.layout, self.operation_files, self.catalog)
        run = functools.partial(run, max_op_bytes=max_op_bytes, pack_bytes=pack_bytes)
        run = functools.partial(run, lock_timeout=lock_timeout)
        return run(upload=None) if self.remote is None else self.remote.compact(run)

    # ----------------------------------------------------------------- listing (catalog)

    def sync(self) -> bool:
        """Index operations and arrays written since the last sync (by any process).

        Returns:
            ``True`` when the on-disk catalog is up to date, ``False`` when it was locked by
            another process for longer than ``lock_timeout`` (listings then use an in-memory
            catalog built from the files, so they stay correct).
        """
        if self.remote is not None:
            self.remote.pull()
        return bool(self.catalog.sync())

    def rebuild_catalog(self) -> dict[str, str]:
        """Rebuild ``catalog.duckdb`` from the files (e.g. after deleting or damaging it).

        Returns:
            The damaged files it skipped -> what is wrong with them (their operations and
            arrays are not in the catalog; ``dslog fsck --quarantine`` moves them aside).
        """
        self.clean_staging()
        self.catalog.rebuild()
        return self.damaged()

    def damaged(self) -> dict[str, str]:
        """Damaged files this handle met so far (root-relative path -> what is wrong): the
        listings skip them. :meth:`verify` checks every file."""
        return dict(self.damage.damaged)

    def damaged_arrays(self) -> dict[str, set[str] | None]:
        """For each damaged segment this handle met: the names of the arrays its operations
        read or wrote, as the catalog last indexed them (``None``: not known). A query that
        touches none of them cannot be changed by the damage; one that may is refused."""
        segs = sorted(r for r in self.damage.damaged if r.startswith(("operations/", "packs/")))
        key = tuple((r, tuple(sorted(self.damage.damaged_ops.get(r, ())))) for r in segs)
        if not segs or key == self._damaged_arrays[0]:
            return dict(self._damaged_arrays[1]) if segs else {}
        ops = {o: r for r, held in key for o in held}
        ops.update({Path(r).stem: r for r in segs if r.startswith("operations/")})
        rows = self.catalog.rows(
            "SELECT DISTINCT o.path, o.op_id, a.name FROM operations o JOIN operation_arrays a "
            "USING (op_id) WHERE o.path IN (SELECT unnest(?::VARCHAR[])) "
            "OR o.op_id IN (SELECT unnest(?::VARCHAR[]))",
            [segs, sorted(ops)],
        )
        out: dict[str, set[str] | None] = dict.fromkeys(segs)
        for path, op_id, name in rows:
            rel = path if path in out else ops.get(op_id)
            if rel is not None:
                out[rel] = (out[rel] or set()) | {str(name)}
        self._damaged_arrays = (key, out)
        return dict(out)

    def verify(self, *, quarantine_damaged: bool = False) -> VerifyReport:
        """Check every file of the store: checksums, decoding, the store id and the catalog.

        Args:
            quarantine_damaged: move the damaged files to ``quarantine/`` under the root (a
                damaged catalog is deleted: it is rebuilt from the files), so the rest of the
                store works without them; the catalog is then rebuilt.

        Returns:
            The report: damaged files and the operations/arrays they held, unverified files
            of formats before checksums, and where damaged files were moved.
        """
        report = verify(self.layout)
        if quarantine_damaged and not report.clean:
            quarantine(self.layout, report)
            for rel in report.quarantined:
                self.damage.clear(rel)
            if STORE_ID_FILE in report.quarantined:
                self.store_id = files.claim_store_id(self.root, self.durable)
            self.operation_files.records.clear()
            self.array_files.forget()
            self.catalog.rebuild()
        return report

    def sql(self, query: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run one read-only ``SELECT`` on the catalog; see :class:`LineageCatalog` for tables.

        Raises:
            QueryError: not a single SELECT statement, or DuckDB rejected it.
        """
        return self.catalog.query(query, params)

    def operations(
        self, op_name: str | None = None, *, limit: int | None = None, after: str | None = None
    ) -> list[OperationRecord]:
        """Operations (of ``op_name`` when given), oldest first: all of them, or one page.

        Args:
            op_name: only operations of this name.
            limit: at most this many (a page); ``None``: every one (on a big store prefer
                :meth:`iter_operations`, which holds one page at a time).
            after: only operations whose id sorts after this one (the last id of the previous
                page): pages never repeat or skip an operation while writers add others.

        Raises:
            QueryError: ``limit`` is not a positive integer or ``after`` not an operation id.
        """
        rows = self.catalog.rows(*page_query(op_name, limit, after))
        return self._load_ops(rows)

    def iter_operations(
        self, op_name: str | None = None, *, page_size: int = 1000
    ) -> Iterator[OperationRecord]:
        """Every operation (of ``op_name`` when given), oldest first, read a page at a time.

        Each operation on disk when the iteration starts is yielded exactly once, in op id
        order; one registered meanwhile is yielded when its id sorts after the page being
        read (op ids start with their registration time).
        """
        return pages(
            lambda n, after: self.operations(op_name, limit=n, after=after),
            lambda op: op.op_id,
            page_size,
        )

    def _load_ops(self, rows: Sequence[tuple[Any, ...]]) -> list[OperationRecord]:
        """The records of catalog rows ``(op_id, segment path)``, read a segment at a time;
        a vanished or damaged one is left out (damage is noted in :attr:`damage`, said here)."""
        ids = [str(r[0]) for r in rows]
        found = self.operation_files.read_many({str(r[0]): str(r[1]) for r in rows})
        out = []
        for op_id in ids:
            with contextlib.suppress(LineageNotFoundError, LineageStorageError):
                out.append(found[op_id] if op_id in found else self.get_operation(op_id))
        self.damage.warn(list(self.damage.damaged), str(self.root))
        return out

    def arrays(self) -> list[ArrayRecord]:
        """All registered arrays (every version), ordered by name then registration time."""
        paths = self.catalog.column("SELECT path FROM arrays ORDER BY name, created_at, path")
        out = []
        for rel in paths:
            # vanished, or damaged (noted in self.damage, said below)
            with contextlib.suppress(FileNotFoundError, LineageStorageError):
                out.append(self.array_files.load(self.layout.inside(rel)))
        self.damage.warn(list(self.damage.damaged), str(self.root))
        return out

    def tables(self) -> list[TableRecord]:
        """All lineage tables of all operations, in operation order."""
        rows = self.catalog.rows(
            "SELECT op_id, output, input, encoding, rows, n_pairs, bytes, path "
            "FROM lineage_tables ORDER BY op_id, position"
        )
        return [
            TableRecord(str(a), str(b), str(c), str(d), int(e), int(f), int(g), str(h))
            for a, b, c, d, e, f, g, h in rows
        ]

    def operations_between(
        self, a: "str | ArrayRecord", b: "str | ArrayRecord"
    ) -> list[OperationRecord]:
        """Operations that read ``a`` and write ``b`` (one hop of a lineage path).

        An :class:`ArrayRecord` matches its version only; a name matches every version.
        """
        rows = self.catalog.rows(*between_query(a, b))
        return self._load_ops(rows)
