"""The lineage store: arrays, operations and their lineage tables in one directory.

The files are the source of truth and are never modified once visible::

    root/
      arrays/<slug>-<sha256(name)[:16]>/<version-slug>-<sha256(version)[:16]>.json
                                       /default.json          (version None)
      operations/<op_id>.parquet     (segment of one operation: its record + all its tables)
      packs/<pack_id>.parquet        (segment of many small operations, made by compact())
      .staging/                      (files in flight)
      catalog.duckdb                 (index, rebuilt at will)

**Segments** (:mod:`dslog_dagster.core.storage`) are Parquet files with one row per operation:
the operation record (JSON) and one self-describing blob per lineage table. A registration
compresses and encodes everything in memory, writes its segment under ``.staging/``, fsyncs
it and renames it to ``operations/<op_id>.parquet``, so readers see either the whole operation
or nothing, and a crash leaves at most a staging file (removed once it is an hour old).
``op_id`` starts with a nanosecond timestamp and ends with a random UUID, so ids are unique
across processes and sort by time.

**Compaction** (:meth:`LineageStore.compact`) packs the segments of small operations (and small
packs) into larger packs, so that the per-file overhead (Parquet footer, file-system block)
is paid once per pack instead of once per operation. It publishes each pack atomically
(staging + fsync + rename) *before* it deletes the files it packed, so every operation is in at
least one visible segment at every instant; an operation may briefly be in two, with identical
content. Readers locate operations through an index of the segment files (packs are immutable,
so their operation ids are read once); when a file vanishes under them they refresh the index
and retry. Compactions in one store take an advisory lock, so they do not duplicate work.

Array records are single JSON files published with ``os.link`` (fails if the name exists), so
when two processes register the same ``(name, version)`` the first one wins and the second
compares shapes.

**One publish per step.** An operation may register its new output arrays with it (outputs
given as :class:`NewArray`): the operation's segment, whose record already holds each output's
full array record, is written and fsynced once, hard-linked into each output's array directory
as ``<version>.op.parquet`` (the array record: readers take it from the segment's record), and
renamed into ``operations/``; then the directories are fsynced. One flushed file instead of an
array JSON plus a segment halves the flushes of a tracked step (the dominant cost of a step
served from a reuse view). Nothing is ever visible before its bytes are flushed, so a crash
leaves at most an array record whose operation never appeared (as between ``register_array``
and ``register_operation``), never a torn file. When both a ``.json`` and an ``.op.parquet``
record of one version exist (two processes raced), the JSON one is read. A compaction that
packs the operation leaves the array's link (a hard link: the bytes stay until both are
gone). A writer may split a registration (:meth:`LineageStore.prepare_operation`:
validate, encode, write and flush the staging file; :meth:`PreparedOperation.commit`: links,
rename, directory flushes), so the flush overlaps other work (the IO manager stores the
asset's value meanwhile) and nothing is published until that work succeeded;
:meth:`PreparedOperation.publish` and :meth:`PreparedOperation.flushed` split the commit too,
so the directories are flushed in a worker while the IO manager builds the step's metadata.

Every file name derived from a user-supplied name is a short slug of
``[A-Za-z0-9_-]`` plus a hash of the name, so no name can escape the root.

The DuckDB catalog (:mod:`dslog_dagster.core.catalog`) indexes the files for listing and SQL;
writers never depend on it.
"""

import contextlib
import difflib
import errno
import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from dslog_dagster.core import background, storage
from dslog_dagster.core.catalog import LineageCatalog
from dslog_dagster.core.provrc import LineageTable, compress
from dslog_dagster.core.relation import LineageRelation, Shape, as_shape
from dslog_dagster.errors import (
    DSLogError,
    InvalidRelationError,
    LineageNotFoundError,
    LineageStorageError,
    SchemaVersionError,
    UnsupportedArrayError,
)

_R = TypeVar("_R")

logger = logging.getLogger(__name__)

STORE_SCHEMA_VERSION = storage.SEGMENT_SCHEMA_VERSION
"""Store format version: in every segment's metadata, operation record and array record."""

STAGING_MAX_AGE_S = 3600.0
"""Staging directories older than this are leftovers of crashed writers and are removed."""

_SLUG_MAX = 40
_OP_ID_RE = re.compile(r"^[0-9a-f]{48}$")
_SEGMENT_RE = re.compile(r"^[0-9a-f]{48}\.parquet$")
_LISTING_RETRIES = 20
_MOVE_RETRIES = 8
COMPACT_MAX_OP_BYTES = 64 * 1024
"""Operation segments up to this size are packed by :meth:`LineageStore.compact`."""
COMPACT_PACK_BYTES = 16 * 1024 * 1024
"""Target size of a pack; packs below half of it are merged again by later compactions."""
_SLUG_RE = re.compile(r"[^A-Za-z0-9_-]")
_TIMING_COMPRESS = "compress_s"
_TIMING_ENCODE = "encode_s"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class ArrayRecord:
    """A registered array: the node type of the lineage graph.

    Attributes:
        name: user-facing name (e.g. an asset key path); any non-empty string without NUL.
        shape: the array's shape.
        dtype: NumPy dtype name (``"float64"``).
        asset_key: Dagster asset key (``"a/b"``) when the array is an asset, else ``None``.
        version: asset/data version; ``None`` is the default version.
        array_id: stable id derived from ``(name, version)``: the same in every process.
        created_at: UTC time of the first registration.
    """

    name: str
    shape: Shape
    dtype: str
    asset_key: str | None
    version: str | None
    array_id: str
    created_at: datetime = field(compare=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in array record files and in operation records."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "asset_key": self.asset_key,
            "version": self.version,
            "array_id": self.array_id,
            "created_at": self.created_at.isoformat(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ArrayRecord":
        """Inverse of :meth:`to_json`."""
        return cls(
            name=str(d["name"]),
            shape=tuple(int(x) for x in d["shape"]),
            dtype=str(d["dtype"]),
            asset_key=d.get("asset_key"),
            version=d.get("version"),
            array_id=str(d["array_id"]),
            created_at=datetime.fromisoformat(d["created_at"]),
        )


@dataclass(frozen=True, slots=True)
class NewArray:
    """An output array to register together with its operation (one flushed file for both).

    Pass it among ``outputs`` of :meth:`LineageStore.register_operation`; the arguments are
    those of :meth:`LineageStore.register_array`. When ``(name, version)`` is already
    registered, that record is used (shapes must agree), as ``register_array`` would.
    """

    name: str
    shape: Sequence[int] | int
    dtype: Any = "float64"
    asset_key: str | Sequence[str] | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class TableRecord:
    """One stored lineage table of an operation (output array ← input array).

    Attributes:
        op_id: the operation it belongs to.
        output: output array name.
        input: input array name.
        encoding: ``"provrc"`` or ``"columnar"`` (the per-table choice of :func:`compress`),
            or ``"factored"`` (a frame's row table × column table, stored as the two).
        rows: rows of the stored table (of its factors, when factored).
        n_pairs: (output cell, input cell) pairs it stands for.
        stored_bytes: bytes of the table's blob in its segment (after its own compression;
            the segment adds a share of its footer and record).
        path: the segment file holding the table when the record was read, relative to the
            store root (POSIX separators). Compaction moves tables between segments, so
            read tables with :meth:`LineageStore.read_lineage`, not through this path.
    """

    op_id: str
    output: str
    input: str
    encoding: str
    rows: int
    n_pairs: int
    stored_bytes: int
    path: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in the operation record (``op_id`` is implied there)."""
        return {
            "output": self.output,
            "input": self.input,
            "encoding": self.encoding,
            "rows": self.rows,
            "n_pairs": self.n_pairs,
            "bytes": self.stored_bytes,
        }


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """A registered operation ``outputs = op_name(inputs; args)`` and its lineage tables.

    ``args`` and ``timings`` are plain dicts for convenience; treat them as read-only.
    """

    op_id: str
    op_name: str
    inputs: tuple[ArrayRecord, ...]
    outputs: tuple[ArrayRecord, ...]
    args: dict[str, Any]
    capture_method: str
    timings: dict[str, float]
    created_at: datetime
    tables: tuple[TableRecord, ...]

    def table(self, output: str, input: str) -> TableRecord:
        """The table record for ``(output, input)``.

        Raises:
            LineageNotFoundError: the operation has no such table.
        """
        for t in self.tables:
            if t.output == output and t.input == input:
                return t
        have = ", ".join(f"(`{t.output}` ← `{t.input}`)" for t in self.tables) or "none"
        msg = (
            f"Operation `{self.op_name}` (`{self.op_id}`) has no lineage table for output "
            f"`{output}` ← input `{input}`. Its tables: {have}."
        )
        raise LineageNotFoundError(msg)

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in the operation's segment (table paths are not part of it:
        they change when a compaction moves the operation)."""
        return {
            "schema_version": STORE_SCHEMA_VERSION,
            "op_id": self.op_id,
            "op_name": self.op_name,
            "inputs": [a.to_json() for a in self.inputs],
            "outputs": [a.to_json() for a in self.outputs],
            "args": self.args,
            "capture_method": self.capture_method,
            "timings": self.timings,
            "created_at": self.created_at.isoformat(),
            "tables": [t.to_json() for t in self.tables],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], path: str = "") -> "OperationRecord":
        """Inverse of :meth:`to_json`; ``path`` is the segment the record was read from."""
        op_id = str(d["op_id"])
        return cls(
            op_id=op_id,
            op_name=str(d["op_name"]),
            inputs=tuple(ArrayRecord.from_json(a) for a in d["inputs"]),
            outputs=tuple(ArrayRecord.from_json(a) for a in d["outputs"]),
            args=dict(d["args"]),
            capture_method=str(d["capture_method"]),
            timings={str(k): float(v) for k, v in d["timings"].items()},
            created_at=datetime.fromisoformat(d["created_at"]),
            tables=tuple(
                TableRecord(
                    op_id,
                    str(t["output"]),
                    str(t["input"]),
                    str(t["encoding"]),
                    int(t["rows"]),
                    int(t["n_pairs"]),
                    int(t["bytes"]),
                    path,
                )
                for t in d["tables"]
            ),
        )


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What :meth:`LineageStore.compact` did.

    Attributes:
        operations: operations written into new packs.
        files_removed: segment files (operation segments and old packs) replaced.
        packs: the new packs (root-relative paths).
        bytes_before: total size of the replaced files.
        bytes_after: total size of the new packs.
        skipped: another compaction held the lock for the whole ``lock_timeout``.
    """

    operations: int
    files_removed: int
    packs: tuple[str, ...]
    bytes_before: int
    bytes_after: int
    skipped: bool = False


# --------------------------------------------------------------------------- names and files


@contextlib.contextmanager
def _compaction_lock(path: Path, timeout: float) -> Iterator[bool]:
    """An advisory inter-process lock (``flock``; released by the OS if the holder dies).

    Only keeps two compactions from doing the same work twice: correctness never depends on
    it. Where ``flock`` is unavailable the lock is always granted.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        msg = f"Could not open the compaction lock `{path}`: {e}"
        raise LineageStorageError(msg) from e
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.05)
            except OSError:  # file system without flock
                break
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str):
        msg = f"{what} must be a string, got `{type(name).__name__}` ({name!r})."
        raise InvalidRelationError(msg)
    if not name or "\x00" in name:
        msg = f"{what} `{name!r}` is empty or contains a NUL character; pass a non-empty name."
        raise InvalidRelationError(msg)
    return name


def _hash16(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _slug(text: str, limit: int = _SLUG_MAX) -> str:
    """A file-name-safe, readable prefix of ``text`` (never ``.``/``..``, never a separator)."""
    return _SLUG_RE.sub("_", text)[:limit] or "_"


def _array_dir_name(name: str) -> str:
    return f"{_slug(name)}-{_hash16(name)}"


def _version_file_name(version: str | None) -> str:
    return "default.json" if version is None else f"{_slug(version)}-{_hash16(version)}.json"


_LINK_SUFFIX = ".op.parquet"


def _link_file_name(version: str | None) -> str:
    """File name of an array record that is its operation's segment (see the docstring)."""
    return _version_file_name(version)[: -len(".json")] + _LINK_SUFFIX


def _record_files(names: Sequence[str]) -> list[str]:
    """The array record files among directory entries ``names``, sorted; of a version with a
    JSON and a segment record (a race of two writers) only the JSON one."""
    json_stems = {n[: -len(".json")] for n in names if n.endswith(".json")}
    out = []
    for n in names:
        if n.startswith("."):
            continue
        if n.endswith(".json") or (
            n.endswith(_LINK_SUFFIX) and n[: -len(_LINK_SUFFIX)] not in json_stems
        ):
            out.append(n)
    return sorted(out)


def _array_id(name: str, version: str | None) -> str:
    return hashlib.sha256(json.dumps([name, version]).encode()).hexdigest()[:16]


def _now() -> tuple[int, datetime]:
    ns = time.time_ns()
    return ns, datetime.fromtimestamp(ns // 1000 / 1e6, UTC).replace(microsecond=ns // 1000 % 10**6)


def _fsync_dir(path: Path) -> None:
    # Makes a rename durable; not supported on every platform/filesystem, where it is a no-op.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_dirs(paths: Sequence[Path]) -> None:
    """fsync several directories concurrently: the first in the calling thread, the others in
    workers (:func:`~dslog_dagster.core.background.map_all`).

    A file system commits concurrent syncs together (ext4's journal groups them into one
    commit, and their cache flushes merge), so a step's two directories cost about one flush
    instead of two: one after the other, the second fsync costs a device flush of its own
    even when the first already committed its change (measured here: about as much as the
    first). From a worker thread they run one after the other (a worker must not wait on
    the pool it belongs to).
    """
    background.map_all(_fsync_dir, list(dict.fromkeys(paths)))


def _flush_dirs_aside(paths: Sequence[Path]) -> "list[Future[None]]":
    """Start fsyncing ``paths`` in workers, each in its own (see :func:`_fsync_dirs`)."""
    return [background.submit(_fsync_dir, p) for p in dict.fromkeys(paths)]


def _write_synced(path: Path, data: bytes, durable: bool = True) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    msg = f"value of type `{type(obj).__name__}` is not JSON-serialisable"
    raise TypeError(msg)


def _normalise_args(op_name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        msg = f"Operation `{op_name}` args must be a mapping, got `{type(args).__name__}`."
        raise InvalidRelationError(msg)
    try:
        text = json.dumps(dict(args), default=_json_default, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        msg = (
            f"Operation `{op_name}` args cannot be stored as JSON ({e}). Pass strings, numbers, "
            "booleans, None, lists and dicts with string keys (NumPy scalars/arrays are fine)."
        )
        raise InvalidRelationError(msg) from e
    out: dict[str, Any] = json.loads(text)
    return out


def _normalise_timings(op_name: str, timings: Mapping[str, float] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in (timings or {}).items():
        try:
            fv = float(v)
        except (TypeError, ValueError):
            fv = math.nan
        if not isinstance(k, str) or not math.isfinite(fv):
            msg = f"Operation `{op_name}` timing `{k!r}` = {v!r} is not a finite number of seconds."
            raise InvalidRelationError(msg)
        out[k] = fv
    return out


def _normalise_asset_key(asset_key: str | Sequence[str] | None) -> str | None:
    if asset_key is None or isinstance(asset_key, str):
        return asset_key
    parts = [str(p) for p in asset_key]
    return "/".join(parts)


# --------------------------------------------------------------------------- the store


STORE_ID_FILE = ".store-id"
"""File in a store's root naming that store (random, written once): a directory deleted and
made again at the same path is another store, which a cached handle must not serve."""


def read_store_id(root: str | os.PathLike[str]) -> str | None:
    """The id of the store at ``root``, ``None`` when there is none (yet).

    Read with bare system calls: every tracked step checks it (``open_store``), and a text-mode
    ``Path.read_text`` costs several times more.
    """
    try:
        fd = os.open(os.path.join(root, STORE_ID_FILE), os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").strip() or None


def _claim_store_id(root: Path, durable: bool = True) -> str:
    """The store's id, written first by whichever process creates the store (a hard link
    publishes it only if no other process did). ``durable``: flushed with its directory, as
    the store's records are (a crash must not leave an empty id after records it names)."""
    found = read_store_id(root)
    if found:
        return found
    tmp = root / f".store-id.{uuid.uuid4().hex}.tmp"
    try:
        _write_synced(tmp, uuid.uuid4().hex.encode(), durable)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, root / STORE_ID_FILE)
            if durable:
                _fsync_dir(root)
    except OSError as e:
        msg = f"Could not write the store id in `{root}`: {e}"
        raise LineageStorageError(msg) from e
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    found = read_store_id(root)
    if not found:
        msg = f"The lineage store at `{root}` has an empty `{STORE_ID_FILE}`; delete it."
        raise LineageStorageError(msg)
    return found


@dataclass(eq=False)
class PreparedOperation:
    """An operation whose segment is written and flushed under the store's ``.staging/`` but
    not yet visible (:meth:`LineageStore.prepare_operation`). Call exactly one of
    :meth:`commit` and :meth:`abort`; an abandoned one (a crashed process) is a staging file
    that the store removes once it is an hour old.

    Attributes:
        record: the operation record :meth:`commit` stores (unless another writer registered
            one of its new outputs meanwhile: then it registers again and returns that).
    """

    store: "LineageStore"
    tmp: Path
    rel: str
    record: OperationRecord
    new_outs: tuple[ArrayRecord, ...]
    retry: tuple[Any, ...]

    flush: "list[Future[None]] | None" = None

    def commit(self) -> OperationRecord:
        """Publish the operation: links, one rename, and (durable stores) the directories'
        fsync. Returns the stored record, durable when this returns.

        Raises:
            LineageStorageError: it could not be published (nothing of it is visible).
        """
        record = self.publish()
        self.flushed()
        return record

    def publish(self) -> OperationRecord:
        """Make the operation visible (links, one rename) and start flushing its directories
        in a worker thread (durable stores), so the caller can do other work meanwhile; call
        :meth:`flushed` before relying on durability (the IO manager builds the step's
        metadata in between). Returns the stored record.

        Raises:
            LineageStorageError: it could not be published (nothing of it is visible).
        """
        return self.store._commit(self, aside=True)

    def flushed(self) -> None:
        """Block until a :meth:`publish` is on disk (a no-op for stores that do not fsync).

        Raises:
            LineageStorageError: the directories could not be flushed.
        """
        flush, self.flush = self.flush, None
        if not flush:
            return
        try:
            for f in flush:
                f.result()
        except Exception as e:
            msg = f"Could not flush operation `{self.record.op_id}` in `{self.store.root}`: {e}"
            raise LineageStorageError(msg) from e

    def abort(self) -> None:
        """Drop the staged segment: the operation is never published."""
        self.tmp.unlink(missing_ok=True)


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

    Examples:
        >>> store = LineageStore(tmp_path)  # doctest: +SKIP
        >>> x = store.register_array("x", (4, 4))  # doctest: +SKIP
        >>> y = store.register_array("y", (4, 4))  # doctest: +SKIP
        >>> op = store.register_operation("neg", [x], [y], {("y", "x"): relation})  # doctest: +SKIP
        >>> store.read_lineage(op, "y", "x").decompress() == relation  # doctest: +SKIP
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
    ) -> None:
        self.root = Path(root).absolute()
        self.index_on_write = bool(index_on_write)
        self.durable = bool(durable)
        try:
            for sub in ("arrays", "operations", "packs", ".staging"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            msg = f"Could not create the lineage store at `{self.root}`: {e}"
            raise LineageStorageError(msg) from e
        self.store_id = _claim_store_id(self.root, self.durable)
        self._ops: dict[str, OperationRecord] = {}
        # Where operations are: segment (root-relative path) -> its op ids, and op id ->
        # one segment holding it. Segments are immutable, so an entry only goes stale when
        # its file vanishes (compaction); lookups then refresh and retry.
        self._seg_ops: dict[str, tuple[str, ...]] = {}
        self._where: dict[str, str] = {}
        self._arrays: dict[str, ArrayRecord] = {}
        # (name, version) -> its record, once found or written: a tracked step registers its
        # inputs again on every run, and building their file paths (two SHA-256 and a slug
        # each) and records cost a few hundred microseconds of a step served from a view.
        # Records are immutable once visible, so an entry never goes stale.
        self._array_keys: dict[tuple[str, str | None], ArrayRecord] = {}
        # array directories known to exist (see _link_into)
        self._array_dirs: set[str] = set()
        self.catalog = LineageCatalog(self, lock_timeout=lock_timeout, index_timeout=index_timeout)
        self.clean_staging()

    def __repr__(self) -> str:
        return f"LineageStore({str(self.root)!r})"

    # ----------------------------------------------------------------- paths

    @property
    def arrays_dir(self) -> Path:
        return self.root / "arrays"

    @property
    def operations_dir(self) -> Path:
        return self.root / "operations"

    @property
    def packs_dir(self) -> Path:
        return self.root / "packs"

    @property
    def staging_dir(self) -> Path:
        return self.root / ".staging"

    def _inside(self, rel: str) -> Path:
        """Resolve a root-relative path read from a record, refusing anything outside root."""
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root.resolve()):
            msg = f"Record path `{rel}` points outside the store `{self.root}`; refusing it."
            raise LineageStorageError(msg)
        return path

    def clean_staging(self, max_age_s: float = STAGING_MAX_AGE_S) -> int:
        """Remove staging directories left by crashed writers; returns how many were removed.

        Only directories older than ``max_age_s`` go, so a registration in flight in another
        process is never disturbed.
        """
        removed = 0
        now = time.time()
        try:
            entries = list(os.scandir(self.staging_dir))
        except OSError:
            return 0
        for entry in entries:
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime < max_age_s:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed += 1
            except OSError:
                continue
        return removed

    # ----------------------------------------------------------------- arrays

    def register_array(
        self,
        name: str,
        shape: Sequence[int] | int,
        dtype: str | np.dtype[Any] | type = "float64",
        asset_key: str | Sequence[str] | None = None,
        version: str | None = None,
    ) -> ArrayRecord:
        """Register an array (a node of the lineage graph); idempotent per ``(name, version)``.

        When several processes register the same ``(name, version)`` the first record written
        wins; the others get that record back (their ``dtype``/``asset_key`` are not merged).

        Args:
            name: array name; any non-empty string without NUL.
            shape: the array's shape.
            dtype: anything :class:`numpy.dtype` accepts.
            asset_key: the Dagster asset key, as ``"a/b"`` or ``["a", "b"]``.
            version: data version; ``None`` is the default version.

        Returns:
            The stored record (the existing one when already registered).

        Raises:
            InvalidRelationError: bad name/version, or ``(name, version)`` is already registered
                with a different shape.
            UnsupportedArrayError: ``shape`` or ``dtype`` is not understood.
            LineageStorageError: the record could not be written.
        """
        valid = isinstance(name, str) and (version is None or isinstance(version, str))
        known = self._array_keys.get((name, version)) if valid else None
        if known is not None and known.shape == as_shape(shape, f"Array `{name}`"):
            return known  # a shape that differs takes the long way and raises there
        record = self._array_record(NewArray(name, shape, dtype, asset_key, version))
        existing = self._existing_array(record)
        if existing is not None:
            return existing
        directory = self.arrays_dir / _array_dir_name(record.name)
        final = directory / _version_file_name(record.version)
        data = json.dumps(
            {"schema_version": STORE_SCHEMA_VERSION, **record.to_json()}, indent=1
        ).encode()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            published = self._publish_once(final, data)
        except OSError as e:
            msg = f"Could not write the record of array `{record.name}` to `{final}`: {e}"
            raise LineageStorageError(msg) from e
        if not published:
            existing = self._existing_array(record)
            assert existing is not None  # publish_once failed because the file exists
            return existing
        self._arrays[str(final)] = record
        self._array_keys[(record.name, record.version)] = record
        if self.index_on_write:
            self.catalog.index_array(record, self._rel(final))
        return record

    def _array_record(self, spec: NewArray) -> ArrayRecord:
        """The record ``register_array`` would write for ``spec`` (validated, not written)."""
        name = _check_name(spec.name, "Array name")
        version = spec.version
        if version is not None:
            version = _check_name(version, f"Version of array `{name}`")
        shp = as_shape(spec.shape, f"Array `{name}`")
        try:
            dt = np.dtype(spec.dtype).name
        except TypeError as e:
            msg = f"Array `{name}` has dtype `{spec.dtype!r}`, which NumPy does not understand."
            raise UnsupportedArrayError(msg) from e
        _, created = _now()
        key = _normalise_asset_key(spec.asset_key)
        return ArrayRecord(name, shp, dt, key, version, _array_id(name, version), created)

    def _existing_array(self, record: ArrayRecord) -> ArrayRecord | None:
        """The stored record of ``record``'s ``(name, version)`` if any (JSON or segment
        record); raises when its shape differs from ``record``'s."""
        existing = self._array_keys.get((record.name, record.version))
        if existing is None:
            directory = self.arrays_dir / _array_dir_name(record.name)
            for fname in (_version_file_name(record.version), _link_file_name(record.version)):
                try:
                    existing = self._load_array_file(directory / fname)
                except FileNotFoundError:
                    continue
                break
            if existing is None:
                return None
            self._array_keys[(record.name, record.version)] = existing
        if existing.shape != record.shape:
            v = record.version
            vtxt = "the default version" if v is None else f"version `{v}`"
            msg = (
                f"Array `{record.name}` ({vtxt}) is already registered with shape "
                f"{existing.shape}, not {record.shape}. Register the new data under a new "
                "`version`."
            )
            raise InvalidRelationError(msg)
        return existing

    def _publish_once(self, final: Path, data: bytes) -> bool:
        """Create ``final`` with ``data`` unless it exists; atomic and first-writer-wins."""
        if final.exists():
            return False
        tmp = final.parent / f".tmp-{uuid.uuid4().hex}"
        _write_synced(tmp, data, self.durable)
        try:
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
            except OSError:
                # Filesystems without hard links: O_EXCL still gives first-writer-wins.
                try:
                    _write_synced(final, data, self.durable)
                except FileExistsError:
                    return False
            if self.durable:
                _fsync_dir(final.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _load_array_file(self, path: Path) -> ArrayRecord:
        key = str(path)
        rec = self._arrays.get(key)
        if rec is not None:
            return rec
        if path.name.endswith(_LINK_SUFFIX):
            rec = self._load_array_link(path)
        else:
            rec = _load_record(path, "Array", ArrayRecord.from_json)
        self._arrays[key] = rec
        return rec

    def _load_array_link(self, path: Path) -> ArrayRecord:
        """The array record inside the operation segment linked at ``path``: the output
        whose directory and version file names are ``path``'s."""
        # A missing record is the common case (every new output is looked up before it is
        # registered): a stat says so in microseconds, pyarrow's open in ~0.2 ms.
        os.stat(path)
        try:
            with storage.Segment(path) as seg:
                records = seg.records()
        except FileNotFoundError:
            raise
        for _, text in records:
            rec = self._parse_record(text, self._rel(path))
            for out in rec.outputs:
                if (
                    _array_dir_name(out.name) == path.parent.name
                    and _link_file_name(out.version) == path.name
                ):
                    return out
        msg = f"Array record `{path}` is damaged: its operation lists no such output."
        raise LineageStorageError(msg)

    def _array_files(self) -> Iterator[Path]:
        """Every array record file on disk (the truth the catalog indexes)."""
        try:
            dirs = sorted(os.scandir(self.arrays_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for d in dirs:
            if d.name.startswith(".") or not d.is_dir(follow_symlinks=False):
                continue
            for f in _record_files(os.listdir(d.path)):
                yield Path(d.path) / f

    def _versions_of(self, name: str) -> list[ArrayRecord]:
        directory = self.arrays_dir / _array_dir_name(name)
        try:
            files = _record_files(os.listdir(directory))
        except FileNotFoundError:
            return []
        out = []
        for f in files:
            rec = self._load_array_file(directory / f)
            if rec.name == name:
                out.append(rec)
        return out

    def get_array(self, name: str, version: str | None = None) -> ArrayRecord:
        """The record of array ``name``: of ``version``, or the latest registered when ``None``.

        Raises:
            LineageNotFoundError: no such array/version (the message lists close names).
        """
        if version is not None and isinstance(name, str) and isinstance(version, str):
            known = self._array_keys.get((name, version))
            if known is not None:
                return known
        name = _check_name(name, "Array name")
        if version is not None:
            # the version's two possible record files, not a listing of every version (an
            # asset gains a version per run: a tracked step resolves its inputs this way)
            directory = self.arrays_dir / _array_dir_name(name)
            for fname in (_version_file_name(version), _link_file_name(version)):
                try:
                    rec = self._load_array_file(directory / fname)
                except FileNotFoundError:
                    continue
                if rec.name == name and rec.version == version:
                    self._array_keys[(name, version)] = rec
                    return rec
        versions = self._versions_of(name)
        if version is not None:
            for rec in versions:
                if rec.version == version:
                    return rec
        elif versions:
            return max(versions, key=lambda r: (r.created_at, r.version or ""))
        if versions:
            have = ", ".join(f"`{r.version}`" for r in versions)
            msg = (
                f"Array `{name}` has no version `{version}` in the store at `{self.root}`; "
                f"registered versions: {have}. Register it with `store.register_array(...)`."
            )
            raise LineageNotFoundError(msg)
        names = sorted({r.name for r in self._all_arrays_from_files()})
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(f'`{c}`' for c in close)}?" if close else ""
        msg = (
            f"No array `{name}` in the store at `{self.root}`.{hint} "
            "Register it with `store.register_array(name, shape)` first."
        )
        raise LineageNotFoundError(msg)

    def _all_arrays_from_files(self) -> list[ArrayRecord]:
        out = []
        for path in self._array_files():
            with contextlib.suppress(FileNotFoundError, LineageStorageError):
                out.append(self._load_array_file(path))
        return out

    def _resolve(self, a: "str | ArrayRecord", role: str, op_name: str) -> ArrayRecord:
        if isinstance(a, ArrayRecord):
            try:
                stored = self.get_array(a.name, a.version)
            except LineageNotFoundError as e:
                msg = (
                    f"{role} array `{a.name}` of operation `{op_name}` is not registered in the "
                    f"store at `{self.root}`; call `store.register_array(...)` first."
                )
                raise LineageNotFoundError(msg) from e
            if stored.shape != a.shape:
                msg = (
                    f"{role} array `{a.name}` of operation `{op_name}` has shape {a.shape} but is "
                    f"registered with shape {stored.shape}."
                )
                raise InvalidRelationError(msg)
            return stored
        if isinstance(a, str):
            return self.get_array(a)
        msg = (
            f"{role} arrays of operation `{op_name}` must be names or ArrayRecords, "
            f"got `{type(a).__name__}`."
        )
        raise InvalidRelationError(msg)

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
            op_name, inputs, outputs, lineage, args, capture_method, timings
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
    ) -> "PreparedOperation":
        """The first half of :meth:`register_operation`: validate, compress and encode
        everything, and write and flush the operation's segment under ``.staging/``, where no
        reader looks. Nothing is visible until :meth:`PreparedOperation.commit` publishes it
        (or :meth:`PreparedOperation.abort` drops it).

        So a writer can flush the segment while it does other work (the IO manager stores the
        asset's value meanwhile) and publish it only after that succeeded.

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

        Returns:
            The :class:`PreparedOperation` (its ``record`` is what ``commit`` stores).

        Raises:
            InvalidRelationError: unknown output/input in ``lineage``, shapes that do not match
                the registered arrays, bad names/args/timings.
            LineageNotFoundError: an input/output array is not registered.
            LineageStorageError: the segment could not be written (nothing is left behind).
        """
        op_name = _check_name(op_name, "Operation name")
        capture_method = _check_name(capture_method, f"Capture method of operation `{op_name}`")
        single = str | ArrayRecord | NewArray
        if isinstance(inputs, single) or isinstance(outputs, single):
            msg = f"Operation `{op_name}`: `inputs` and `outputs` must be sequences of arrays."
            raise InvalidRelationError(msg)
        ins = tuple(self._resolve(a, "Input", op_name) for a in inputs)
        new_outs: list[ArrayRecord] = []

        def output(a: "str | ArrayRecord | NewArray") -> ArrayRecord:
            if not isinstance(a, NewArray):
                return self._resolve(a, "Output", op_name)
            rec = self._array_record(a)
            existing = self._existing_array(rec)
            if existing is not None:
                return existing
            new_outs.append(rec)
            return rec

        outs = tuple(output(a) for a in outputs)
        for role, recs in (("input", ins), ("output", outs)):
            names = [r.name for r in recs]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                msg = (
                    f"Operation `{op_name}` lists {role} array(s) {dups} more than once; "
                    "lineage is keyed by array name, so list each array once."
                )
                raise InvalidRelationError(msg)
        by_in = {r.name: r for r in ins}
        by_out = {r.name: r for r in outs}
        args_json = _normalise_args(op_name, args)
        timings_json = _normalise_timings(op_name, timings)
        if not isinstance(lineage, Mapping):
            msg = (
                f"Operation `{op_name}`: `lineage` must map (output name, input name) to a "
                f"LineageRelation or LineageTable, got `{type(lineage).__name__}`."
            )
            raise InvalidRelationError(msg)

        # 1. validate + compress + encode, all in memory
        t_compress = 0.0
        t_encode = 0.0
        blobs: list[tuple[str, str, LineageTable, bytes]] = []
        for key, value in lineage.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                msg = (
                    f"Operation `{op_name}`: lineage key `{key!r}` must be a tuple "
                    "(output name, input name)."
                )
                raise InvalidRelationError(msg)
            out_name, in_name = (k.name if isinstance(k, ArrayRecord) else k for k in key)
            if out_name not in by_out:
                msg = (
                    f"Operation `{op_name}`: lineage key ({out_name!r}, {in_name!r}) names output "
                    f"`{out_name}`, which is not among the declared outputs {sorted(by_out)}."
                )
                raise InvalidRelationError(msg)
            if in_name not in by_in:
                msg = (
                    f"Operation `{op_name}`: lineage key ({out_name!r}, {in_name!r}) names input "
                    f"`{in_name}`, which is not among the declared inputs {sorted(by_in)}."
                )
                raise InvalidRelationError(msg)
            if isinstance(value, LineageRelation):
                t0 = time.perf_counter()
                table = compress(value)
                t_compress += time.perf_counter() - t0
            elif isinstance(value, LineageTable):
                table = value
            else:
                msg = (
                    f"Operation `{op_name}`: lineage for `{out_name}` ← `{in_name}` is a "
                    f"`{type(value).__name__}`; pass a LineageRelation or a LineageTable."
                )
                raise InvalidRelationError(msg)
            want_out, want_in = by_out[out_name].shape, by_in[in_name].shape
            if tuple(table.out_shape) != want_out or tuple(table.in_shape) != want_in:
                msg = (
                    f"Operation `{op_name}`: lineage for `{out_name}` ← `{in_name}` has shapes "
                    f"{tuple(table.out_shape)} ← {tuple(table.in_shape)}, but the arrays are "
                    f"registered as {want_out} ← {want_in}. Build the relation with the arrays' "
                    "shapes (or register the arrays with the right shapes/versions)."
                )
                raise InvalidRelationError(msg)
            t0 = time.perf_counter()
            data = storage.table_to_blob(table)
            t_encode += time.perf_counter() - t0
            blobs.append((out_name, in_name, table, data))
        timings_json[_TIMING_COMPRESS] = timings_json.get(_TIMING_COMPRESS, 0.0) + t_compress
        timings_json[_TIMING_ENCODE] = timings_json.get(_TIMING_ENCODE, 0.0) + t_encode

        ns, created = _now()
        op_id = f"{ns:016x}{uuid.uuid4().hex}"
        rel = f"operations/{op_id}.parquet"
        tables = tuple(
            TableRecord(
                op_id,
                out_name,
                in_name,
                table.stored_encoding,
                int(table.stored_rows),
                int(table.n_pairs),
                len(data),
                rel,
            )
            for out_name, in_name, table, data in blobs
        )
        record = OperationRecord(
            op_id, op_name, ins, outs, args_json, capture_method, timings_json, created, tables
        )
        segment = storage.segment_to_bytes(
            [(op_id, json.dumps(record.to_json()), [b[3] for b in blobs])]
        )

        # 2. write and flush the segment under .staging; commit() publishes it with one
        # rename (linking it first as the record of each new output array: one flushed file)
        tmp = self.staging_dir / f"{uuid.uuid4().hex}.tmp"
        try:
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            _write_synced(tmp, segment, self.durable)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            msg = f"Could not write operation `{op_id}` to the store at `{self.root}`: {e}"
            raise LineageStorageError(msg) from e
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        retry = (op_name, inputs, outputs, lineage, args, capture_method, timings)
        return PreparedOperation(self, tmp, rel, record, tuple(new_outs), retry)

    def _commit(self, prepared: "PreparedOperation", aside: bool = False) -> OperationRecord:
        """Publish a prepared operation (see :meth:`PreparedOperation.commit`); ``aside``: its
        directories are flushed in a worker (``prepared.flush``)."""
        record, rel, tmp = prepared.record, prepared.rel, prepared.tmp
        op_id = record.op_id
        if prepared.new_outs:
            if not self._publish_with_arrays(
                self.root / rel, tmp, prepared.new_outs, op_id, prepared if aside else None
            ):
                # another writer registered an output meanwhile: its record stands
                op_name, inputs, outputs, lineage, args, capture_method, timings = prepared.retry
                registered = [
                    self.register_array(a.name, a.shape, a.dtype, a.asset_key, a.version)
                    if isinstance(a, NewArray)
                    else a
                    for a in outputs
                ]
                return self.register_operation(
                    op_name, inputs, registered, lineage, args, capture_method, timings
                )
        else:
            self._publish_staged(tmp, self.root / rel, f"operation `{op_id}`")
        self._seg_ops[rel] = (op_id,)
        self._where[op_id] = rel
        self._ops[op_id] = record
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
        durable = self.durable
        dirs: list[Path] = []
        renamed = False
        try:
            for rec in new_outs:
                directory = self.arrays_dir / _array_dir_name(rec.name)
                if (directory / _version_file_name(rec.version)).exists():
                    return False
                try:
                    self._link_into(tmp, directory, _link_file_name(rec.version))
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
                flush_to.flush = _flush_dirs_aside([final.parent, *dirs])
            elif durable:
                _fsync_dirs([final.parent, *dirs])
        except OSError as e:
            msg = f"Could not write operation `{op_id}` to the store at `{self.root}`: {e}"
            raise LineageStorageError(msg) from e
        finally:
            if not renamed:  # after the rename it is gone: no system call to learn that
                tmp.unlink(missing_ok=True)
        for rec, d in zip(new_outs, dirs, strict=True):
            path = d / _link_file_name(rec.version)
            self._arrays[str(path)] = rec
            self._array_keys[(rec.name, rec.version)] = rec
            if self.index_on_write:
                self.catalog.index_array(rec, self._rel(path))
        return True

    def _link_into(self, tmp: Path, directory: Path, name: str) -> None:
        """Hard-link ``tmp`` as ``directory / name``, making the directory when it is missing.

        The directories an array's versions are linked into are remembered per handle, so a
        step served from a view (a new version of the same array on every run) links without
        a ``mkdir`` first; a directory removed meanwhile makes the link fail with
        ``FileNotFoundError``, and it is made again then.
        """
        key = str(directory)
        if key not in self._array_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tmp, directory / name)
        except FileNotFoundError:
            if key not in self._array_dirs:
                raise  # the directory was just made: the staged file itself is missing
            directory.mkdir(parents=True, exist_ok=True)
            os.link(tmp, directory / name)
        self._array_dirs.add(key)

    def _publish_staged(self, tmp: Path, final: Path, what: str) -> None:
        """Rename the flushed staging file ``tmp`` to ``final`` and flush the directory."""
        try:
            os.rename(tmp, final)
            if self.durable:
                _fsync_dir(final.parent)
        except OSError as e:
            msg = f"Could not write {what} to the store at `{self.root}`: {e}"
            raise LineageStorageError(msg) from e
        finally:
            tmp.unlink(missing_ok=True)  # gone after the rename

    def _publish_file(self, final: Path, data: bytes, what: str, *, durable: bool = True) -> None:
        """Write ``data`` to ``final`` atomically: staging file, fsync, rename, fsync dir.

        ``durable=False`` skips both fsyncs: the publish stays atomic (a reader or a crashed
        process never sees a partial file) but a power loss may lose it.
        """
        tmp = self.staging_dir / f"{uuid.uuid4().hex}.tmp"
        try:
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            _write_synced(tmp, data, durable)
            os.rename(tmp, final)
            if durable:
                _fsync_dir(final.parent)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            msg = f"Could not write {what} to the store at `{self.root}`: {e}"
            raise LineageStorageError(msg) from e
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    # ----------------------------------------------------------------- segments

    def _segment_files(self) -> list[str]:
        """Root-relative paths of every segment file on disk, op segments first."""
        out = []
        for directory, sub in ((self.operations_dir, "operations"), (self.packs_dir, "packs")):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            out += [f"{sub}/{n}" for n in sorted(names) if _SEGMENT_RE.match(n)]
        return out

    def _refresh_locations(self) -> dict[str, tuple[str, ...]]:
        """Re-list the segment files and update the op id -> segment index.

        A listing can race a compaction: a pack listed here may be merged into a newer pack
        (published after this listing) before we open it, and a directory read concurrent
        with a rename + unlink may miss both the old and the new file. Either way operations
        would seem to vanish, so the listing is repeated (bounded) until no listed file went
        missing and every operation seen before is still there: compactions publish the new
        pack before they unlink the old files, so a fresh listing always finds it.
        """
        known = set(self._where)
        for _ in range(_LISTING_RETRIES):
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
        for rel in self._segment_files():
            ops = self._seg_ops.get(rel)
            if ops is None:
                if rel.startswith("operations/"):
                    ops = (rel.removeprefix("operations/").removesuffix(".parquet"),)
                else:
                    try:
                        with storage.Segment(self._inside(rel)) as seg:
                            ops = tuple(seg.op_ids)
                    except FileNotFoundError:
                        raced = True  # merged into a newer pack since the listing
                        continue
                    except DSLogError as e:
                        logger.warning("skipping segment %s in %s: %s", rel, self.root, e)
                        continue
            fresh[rel] = ops
        return fresh, raced

    def _in_segment(self, op_id: str, fn: Callable[[storage.Segment], _R]) -> tuple[_R, str]:
        """Run ``fn`` on a segment holding ``op_id``; returns its result and the segment path.

        A segment can vanish between the lookup and the read (a compaction packed it after
        publishing the pack), so a missing file refreshes the index and tries again.

        Raises:
            FileNotFoundError: no segment holds ``op_id``.
        """
        for attempt in range(_MOVE_RETRIES):
            rel = self._where.get(op_id)
            if rel is None or attempt > 0:
                self._refresh_locations()
                rel = self._where.get(op_id)
                if rel is None:
                    break
            try:
                with storage.Segment(self._inside(rel)) as seg:
                    return fn(seg), rel
            except (FileNotFoundError, KeyError):
                continue
        msg = f"no segment holds operation {op_id}"
        raise FileNotFoundError(msg)

    def _parse_record(self, text: str, rel: str) -> OperationRecord:
        path = self.root / rel
        try:
            d = json.loads(text)
        except ValueError as e:
            msg = f"Operation record in `{path}` is unreadable: {e}"
            raise LineageStorageError(msg) from e
        _check_version(d, path)
        try:
            return OperationRecord.from_json(d, rel)
        except (KeyError, TypeError, ValueError) as e:
            msg = f"Operation record in `{path}` is damaged: {e}"
            raise LineageStorageError(msg) from e

    def _records_in(self, rel: str) -> list[OperationRecord]:
        """Every operation record of segment ``rel`` (``FileNotFoundError`` if it vanished)."""
        with storage.Segment(self._inside(rel)) as seg:
            texts = seg.records()
        out = []
        for op_id, text in texts:
            rec = self._parse_record(text, rel)
            self._ops[op_id] = rec
            out.append(rec)
        return out

    def _operation_ids_on_disk(self) -> list[str]:
        self._refresh_locations()
        return sorted(self._where)

    def operation_ids(self) -> list[str]:
        """Ids of every published operation, oldest first (read from the directory, so it
        sees other processes' registrations at once; costs a listing of the store's files)."""
        return self._operation_ids_on_disk()

    def get_operation(self, op_id: str) -> OperationRecord:
        """The record of operation ``op_id``.

        Raises:
            LineageNotFoundError: no such operation.
            LineageStorageError / SchemaVersionError: the record is damaged or too new.
        """
        rec = self._ops.get(op_id)
        if rec is not None:
            return rec
        if not isinstance(op_id, str) or not _OP_ID_RE.match(op_id):
            msg = (
                f"`{op_id!r}` is not an operation id (48 lowercase hex characters); "
                "list ids with `store.operations()`."
            )
            raise LineageNotFoundError(msg)
        try:
            text, rel = self._in_segment(op_id, lambda seg: seg.record(op_id))
        except FileNotFoundError as e:
            msg = (
                f"No operation `{op_id}` in the store at `{self.root}`; "
                "list operations with `store.operations()`."
            )
            raise LineageNotFoundError(msg) from e
        rec = self._parse_record(text, rel)
        self._ops[op_id] = rec
        return rec

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
        return storage.table_from_blob(blob, where)

    def read_blob(
        self,
        op: "str | OperationRecord",
        output: "str | ArrayRecord",
        input: "str | ArrayRecord",
    ) -> bytes:
        """The stored bytes of one lineage table (what :func:`storage.table_from_blob` reads).

        For engines that decode tables where the work runs (the Spark query path ships the
        blob to an executor): reading through the store survives a compaction that moves the
        table into a pack between lookup and read, which a path handed out would not.

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
            blob, rel = self._in_segment(rec.op_id, lambda seg: seg.blob(rec.op_id, k))
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
        with _compaction_lock(self.root / ".compact.lock", lock_timeout) as locked:
            if not locked:
                return CompactionResult(0, 0, (), 0, 0, skipped=True)
            return self._compact_locked(max_op_bytes, pack_bytes)

    def _compact_locked(self, max_op_bytes: int, pack_bytes: int) -> "CompactionResult":
        segs = self._refresh_locations()
        candidates: list[tuple[str, int]] = []
        for rel in segs:
            try:
                size = (self.root / rel).stat().st_size
            except FileNotFoundError:
                continue
            limit = max_op_bytes if rel.startswith("operations/") else pack_bytes // 2
            if size <= limit:
                candidates.append((rel, size))
        if len(candidates) < 2:
            return CompactionResult(0, 0, (), 0, 0)
        chosen = {rel for rel, _ in candidates}
        elsewhere = {op for rel, ops in segs.items() if rel not in chosen for op in ops}
        entries: dict[str, tuple[str, str, list[bytes]]] = {}
        packed_files: list[tuple[str, int]] = []
        for rel, size in candidates:
            try:
                with storage.Segment(self._inside(rel)) as seg:
                    got = seg.entries()
            except FileNotFoundError:
                continue  # another process removed it: not ours to delete
            for entry in got:
                if entry[0] not in elsewhere:
                    entries.setdefault(entry[0], entry)
            packed_files.append((rel, size))
        ordered = [entries[k] for k in sorted(entries)]
        chunks: list[list[tuple[str, str, list[bytes]]]] = [[]]
        size = 0
        for entry in ordered:
            n = len(entry[1]) + sum(len(b) for b in entry[2])
            if chunks[-1] and size + n > pack_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(entry)
            size += n
        packs = []
        bytes_after = 0
        for chunk in chunks:
            if not chunk:
                continue
            ns, _ = _now()
            rel = f"packs/{ns:016x}{uuid.uuid4().hex}.parquet"
            data = storage.segment_to_bytes(chunk)
            self._publish_file(self.root / rel, data, f"pack `{rel}`")
            packs.append(rel)
            bytes_after += len(data)
        # Every operation of the packed files is now in a published pack: drop the files.
        for rel, _ in packed_files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / rel)
        _fsync_dir(self.operations_dir)
        _fsync_dir(self.packs_dir)
        self._refresh_locations()
        self.catalog.sync_best_effort()
        return CompactionResult(
            len(entries),
            len(packed_files),
            tuple(packs),
            sum(s for _, s in packed_files),
            bytes_after,
        )

    # ----------------------------------------------------------------- listing (catalog)

    def sync(self) -> bool:
        """Index operations and arrays written since the last sync (by any process).

        Returns:
            ``True`` when the on-disk catalog is up to date, ``False`` when it was locked by
            another process for longer than ``lock_timeout`` (listings then use an in-memory
            catalog built from the files, so they stay correct).
        """
        return bool(self.catalog.sync())

    def rebuild_catalog(self) -> None:
        """Rebuild ``catalog.duckdb`` from the files (e.g. after deleting or damaging it)."""
        self.clean_staging()
        self.catalog.rebuild()

    def sql(self, query: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run one read-only ``SELECT`` on the catalog; see :class:`LineageCatalog` for tables.

        Raises:
            QueryError: not a single SELECT statement, or DuckDB rejected it.
        """
        return self.catalog.query(query, params)

    def operations(self, op_name: str | None = None) -> list[OperationRecord]:
        """All operations (of ``op_name`` when given), oldest first."""
        if op_name is None:
            ids = self.catalog.column("SELECT op_id FROM operations ORDER BY op_id")
        else:
            ids = self.catalog.column(
                "SELECT op_id FROM operations WHERE op_name = ? ORDER BY op_id", [op_name]
            )
        return self._load_ops(ids)

    def _load_ops(self, ids: Sequence[str]) -> list[OperationRecord]:
        out = []
        for op_id in ids:
            try:
                out.append(self.get_operation(op_id))
            except LineageNotFoundError:
                logger.debug("operation %s vanished from %s", op_id, self.root)
        return out

    def arrays(self) -> list[ArrayRecord]:
        """All registered arrays (every version), ordered by name then registration time."""
        paths = self.catalog.column("SELECT path FROM arrays ORDER BY name, created_at, path")
        out = []
        for rel in paths:
            with contextlib.suppress(FileNotFoundError):
                out.append(self._load_array_file(self._inside(rel)))
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
        conds, params = [], []
        for role, x in (("input", a), ("output", b)):
            if isinstance(x, ArrayRecord):
                conds.append(
                    f"EXISTS (SELECT 1 FROM operation_arrays x WHERE x.op_id = o.op_id "
                    f"AND x.role = '{role}' AND x.array_id = ?)"
                )
                params.append(x.array_id)
            else:
                conds.append(
                    f"EXISTS (SELECT 1 FROM operation_arrays x WHERE x.op_id = o.op_id "
                    f"AND x.role = '{role}' AND x.name = ?)"
                )
                params.append(_check_name(x, "Array name"))
        ids = self.catalog.column(
            f"SELECT o.op_id FROM operations o WHERE {' AND '.join(conds)} ORDER BY o.op_id",
            params,
        )
        return self._load_ops(ids)


def _load_record(path: Path, what: str, parse: Callable[[Mapping[str, Any]], _R]) -> _R:
    """Read, version-check and parse one JSON record; ``FileNotFoundError`` propagates so the
    caller can say what is missing in its own terms."""
    try:
        d = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        msg = f"{what} record `{path}` is unreadable: {e}"
        raise LineageStorageError(msg) from e
    _check_version(d, path)
    try:
        return parse(d)
    except (KeyError, TypeError, ValueError) as e:
        msg = f"{what} record `{path}` is damaged: {e}"
        raise LineageStorageError(msg) from e


def _check_version(d: Mapping[str, Any], path: Path) -> None:
    version = str(d.get("schema_version", ""))
    if version.split("-")[0] != STORE_SCHEMA_VERSION.split("-")[0]:
        msg = (
            f"`{path}` was written with store format `{version or 'unknown'}`; this dslog reads "
            f"{STORE_SCHEMA_VERSION.split('-')[0]}-x-x. Upgrade dslog-dagster to read it."
        )
        raise SchemaVersionError(msg)
