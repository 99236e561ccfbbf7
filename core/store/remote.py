"""A lineage store on object storage: the objects are the truth, a local folder their cache.

``LineageStore("s3://bucket/prefix")`` opens an ordinary local store in a cache folder (under
``cache_dir``, ``$DSLOG_CACHE_DIR`` or ``~/.cache/dslog/stores``, keyed by the URL and the
remote store's id) and keeps it a faithful copy of the objects under the URL:

* **Writes go to the objects first.** Every file a store publishes is write-once: a segment
  (``operations/<op id>.parquet``, named by a fresh id), a pack, an array record, the store
  id. Each is created on the service only if its name is free (:mod:`.object_backends`),
  *before* it appears in the cache, so the cache only ever holds what the service holds and
  many processes may share one cache. An operation's segment is created before its outputs'
  array records (a crash between leaves an operation whose output records are only in the
  operation's own record, never an array record naming an operation that is not there).
  Another writer's record of the same ``(name, version)`` wins, as in a local store.
* **Reads sync first** (:meth:`RemoteMirror.pull`, at most every ``refresh_s``): list the
  objects, fetch the ones the cache lacks, verify each (checksums and decoding, as a local
  store checks its files) before it is visible in the cache, and let the local catalog index
  them. A damaged object is a :class:`~dslog_dagster.errors.LineageCorruptError` naming its
  URL; a missing one (an object this cache holds that the service lost, an array record
  whose operation is in no segment, a pack a retirement names) is one too: never an answer
  computed without it.
* **Compaction** packs in the cache, creates the packs as new objects, then publishes a
  *retirement marker* (``retired/<pack>.json``: the packs and the segments they replace,
  with a checksum) and only then deletes replaced segments, each once its marker is older
  than ``retire_after_s``. A reader whose listing still shows a retired segment keeps or
  drops its copy (the operations are the same bytes in the pack); one that lists a marker
  fetches the packs it names instead of the segments it retires.
"""

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dslog_dagster.core.format import segment
from dslog_dagster.core.store import files
from dslog_dagster.core.store.compaction import CompactionResult
from dslog_dagster.core.store.failures import discard
from dslog_dagster.core.store.layout import (
    LINK_SUFFIX,
    SEGMENT_RE,
    STORE_ID_FILE,
    StoreLayout,
    array_dir_name,
    link_file_name,
    slug,
    version_file_name,
)
from dslog_dagster.core.store.object_backends import ObjectBackend, open_backend
from dslog_dagster.core.store.records import ArrayRecord, load_record, record_json
from dslog_dagster.errors import DSLogError, LineageCorruptError, LineageStorageError

RETIRED = "retired"
"""Folder of the retirement markers (in the objects and in the cache)."""
RETIRE_AFTER_S = 600.0
"""Default seconds a compaction keeps the segments it replaced before deleting them."""
_STORE_ID_RE_LEN = 32


def cache_root(url: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cache folder of store ``url`` (one per URL; the store id is a level below)."""
    base = cache_dir or os.environ.get("DSLOG_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        base = os.path.join(xdg, "dslog", "stores")
    url = url.rstrip("/")
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path(base).absolute() / f"{slug(url.split('://', 1)[-1], 40)}-{key}"


def _corrupt(url: str, why: str) -> LineageCorruptError:
    msg = (
        f"Object `{url}` of the lineage store is damaged: {why}. Nothing was answered from it. "
        "Restore it from a copy, or delete it (its operations leave the store) and run again."
    )
    return LineageCorruptError(msg, url)


def _missing(url: str, why: str) -> LineageCorruptError:
    msg = (
        f"Object `{url}` of the lineage store is missing: {why}. Nothing was answered without "
        "it. Restore it from a copy (versioned bucket, backup); deleting the store's objects "
        "by hand loses lineage."
    )
    return LineageCorruptError(msg, url)


def marker_bytes(packs: Sequence[str], segments: Sequence[str], at: float) -> bytes:
    """A retirement marker: ``packs`` replace ``segments`` since ``at``; checksummed."""
    body = {"packs": sorted(packs), "segments": sorted(segments), "at": at}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return json.dumps({**body, "sha256": digest}, sort_keys=True).encode()


def parse_marker(data: bytes) -> tuple[list[str], list[str], float]:
    """``(packs, segments, at)`` of a marker; ``ValueError`` when damaged."""
    d = json.loads(data)
    digest = d.pop("sha256")
    if hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest() != digest:
        msg = "its checksum does not match its content"
        raise ValueError(msg)
    return list(d["packs"]), list(d["segments"]), float(d["at"])


class RemoteMirror:
    """The objects of one store URL and the local cache that mirrors them (see the module
    docstring); created by :class:`~dslog_dagster.core.store.LineageStore` for a URL.

    Args:
        url: the store's URL (``s3://bucket/prefix``, ...).
        cache_dir: where caches live (see :func:`cache_root`).
        options: client options (``endpoint_url``, ``key``, ``secret``, ...); also
            ``refresh_s`` and ``retire_after_s``, which override the arguments below (so
            ``LineageStore(url, storage_options=...)`` sets them).
        refresh_s: a read syncs at most this often (``LineageStore.sync`` always syncs).
        retire_after_s: seconds a compaction keeps replaced segments (see module docstring).
    """

    def __init__(
        self,
        url: str,
        cache_dir: str | os.PathLike[str] | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        refresh_s: float = 1.0,
        retire_after_s: float = RETIRE_AFTER_S,
    ) -> None:
        self.url = url.rstrip("/")
        opts = dict(options or {})
        self.refresh_s = float(opts.pop("refresh_s", refresh_s))
        self.retire_after_s = float(opts.pop("retire_after_s", retire_after_s))
        self.objects: ObjectBackend = open_backend(self.url, opts)
        self.store_id = self._claim_store_id()
        self.cache = cache_root(self.url, cache_dir) / self.store_id
        self.layout = StoreLayout(self.cache)
        self._pulled = -float("inf")
        self._link_ops: dict[str, str] = {}
        self._pack_ops: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()
        try:
            (self.cache / RETIRED).mkdir(parents=True, exist_ok=True)
            (self.cache / ".staging").mkdir(parents=True, exist_ok=True)
            files.publish_once(
                self.cache / STORE_ID_FILE, self.store_id.encode(), False, self.cache / ".staging"
            )
        except OSError as e:
            msg = f"Cannot create the cache `{self.cache}` of `{self.url}`: {e}. Set `cache_dir`."
            raise LineageStorageError(msg) from e

    def __repr__(self) -> str:
        return f"RemoteMirror({self.url!r}, cache={str(self.cache)!r})"

    def _claim_store_id(self) -> str:
        """The remote store's id, created (first writer wins) when it has none."""
        with contextlib.suppress(FileNotFoundError):
            return self._checked_id(self.objects.get(STORE_ID_FILE))
        self.objects.put_once(STORE_ID_FILE, uuid.uuid4().hex.encode())
        return self._checked_id(self.objects.get(STORE_ID_FILE))

    def _checked_id(self, data: bytes) -> str:
        text = data.decode("utf-8", "replace").strip()
        if len(text) != _STORE_ID_RE_LEN or any(c not in "0123456789abcdef" for c in text):
            msg = f"{self.url}/{STORE_ID_FILE}"
            raise _corrupt(msg, "not a store id (32 hex digits)")
        return text

    # ----------------------------------------------------------------- writes

    def publish_array(self, record: ArrayRecord) -> None:
        """Create ``record``'s JSON object unless the array version has a record there; the
        service's record (ours or the first writer's) is then in the cache."""
        directory = f"arrays/{array_dir_name(record.name)}"
        link = f"{directory}/{link_file_name(record.version)}"
        key = f"{directory}/{version_file_name(record.version)}"
        if self.objects.exists(link):
            self._fetch(link)
            return
        if not self.objects.put_once(key, record_json(record.to_json())):
            self._fetch(key)

    def publish_operation(
        self, staged: Path, rel: str, new_outs: Iterable[ArrayRecord]
    ) -> list[str]:
        """Create the segment ``rel`` (bytes in the staging file ``staged``), then the link
        record of each new output whose version has no record yet, in the cache or in the
        objects (those are fetched, so the store registers with them as usual).

        Returns:
            The link records another writer created first (adopt them with :meth:`adopt`
            once the cache holds ours).
        """
        data = staged.read_bytes()
        outs = list(new_outs)
        links = []
        for rec in outs:
            d = f"arrays/{array_dir_name(rec.name)}"
            json_key, link = (
                f"{d}/{version_file_name(rec.version)}",
                f"{d}/{link_file_name(rec.version)}",
            )
            if (self.cache / json_key).exists() or (self.cache / link).exists():
                return []  # the store registers the usual way: its outputs exist
            for key in (json_key, link):
                if self.objects.exists(key):
                    self._fetch(key)
                    return []
            links.append(link)
        if not self.objects.put_once(rel, data):
            msg = f"Object `{self.url}/{rel}` exists: operation ids repeat?"
            raise LineageStorageError(msg)
        return [link for link in links if not self.objects.put_once(link, data)]

    def adopt(self, links: Sequence[str]) -> None:
        """Replace the cache's copies of ``links`` by the objects another writer made first."""
        for link in links:
            data = self.objects.get(link)
            self._verify(link, data)
            tmp = self.cache / ".staging" / f"{uuid.uuid4().hex}.tmp"
            try:
                files.write_synced(tmp, data, False)
                os.replace(tmp, self.cache / link)
            finally:
                discard(tmp)

    # ----------------------------------------------------------------- reads

    def pull(self, force: bool = True) -> bool:
        """Bring the cache up to date with the objects (see the module docstring); with
        ``force=False`` only when the last pull is older than ``refresh_s``.

        Returns:
            Whether the cache changed.

        Raises:
            LineageCorruptError: an object is damaged or missing (its URL is named).
            LineageStorageError: the service failed (the message says what to do).
        """
        with self._lock:
            if not force and time.monotonic() - self._pulled < self.refresh_s:
                return False
            changed = self._pull()
            self._pulled = time.monotonic()
            return changed

    def _pull(self) -> bool:
        """:meth:`pull`, under the lock: a pass, and a second one when the first found an
        object missing (a process sharing the cache may have published, after this pass
        listed the service, what it had created there just before)."""
        changed, problem = self._pass()
        if problem is not None:
            again, problem = self._pass()
            changed = changed or again
        if problem is not None:
            raise problem
        return changed

    def _pass(self) -> tuple[bool, LineageCorruptError | None]:
        """List, fetch what the cache lacks, drop what was retired, check what is missing."""
        listing = self.objects.list()
        markers = self._markers(listing)
        retired = self._retired(listing, markers)
        changed = False
        for key in sorted(listing):
            if key in retired or not self._mirrored(key):
                continue
            if not (self.cache / key).exists():
                self._fetch(key)
                changed = True
        for key in self._cached():
            if key in listing and key not in retired:
                continue
            if key in retired:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.cache / key)
                changed = True
                continue
            why = "this cache holds it but the service lost it"
            return changed, _missing(f"{self.url}/{key}", why)
        return changed, self._check_links()

    def _markers(self, listing: Mapping[str, int]) -> dict[str, tuple[list[str], list[str], float]]:
        out = {}
        for key in listing:
            if not (key.startswith(f"{RETIRED}/") and key.endswith(".json")):
                continue
            path = self.cache / key
            if not path.exists():
                self._fetch(key)
            out[key] = parse_marker(path.read_bytes())
        return out

    def _retired(
        self, listing: Mapping[str, int], markers: Mapping[str, tuple[list[str], list[str], float]]
    ) -> set[str]:
        """Segments replaced by packs that are there (listed, or retired in turn by packs
        that are there); a marker naming a pack that is neither is a missing object."""
        by_segment: dict[str, list[tuple[str, list[str]]]] = {}
        for key, (packs, segs, _) in markers.items():
            for s in segs:
                by_segment.setdefault(s, []).append((key, packs))
        memo: dict[str, bool] = {}

        def present(obj: str, depth: int = 0) -> bool:
            if obj in listing:
                return True
            if obj not in memo:
                memo[obj] = depth < 64 and any(
                    all(present(p, depth + 1) for p in packs)
                    for _, packs in by_segment.get(obj, ())
                )
            return memo[obj]

        for key, (packs, _, _) in markers.items():
            for p in packs:
                if not present(p):
                    msg = f"{self.url}/{p}"
                    raise _missing(msg, f"the retirement `{key}` moved operations into it")
        return {
            s for s in by_segment if any(all(present(p) for p in ps) for _, ps in by_segment[s])
        }

    @staticmethod
    def _mirrored(key: str) -> bool:
        """Whether object ``key`` is a file of the store (anything else under the prefix is
        not ours and is left alone)."""
        top, _, name = key.partition("/")
        if top in ("operations", "packs"):
            return bool(SEGMENT_RE.match(name))
        if top == "arrays":
            d, _, f = name.partition("/")
            return bool(d) and "/" not in f and f.endswith((".json", LINK_SUFFIX))
        return top == RETIRED and name.endswith(".json") and "/" not in name

    def _cached(self) -> list[str]:
        """Root-relative paths of the store files in the cache."""
        out = list(self.layout.segment_files())
        out += [self.layout.rel(p) for p in self.layout.array_files()]
        return out

    def _fetch(self, key: str) -> None:
        """Read object ``key``, verify it, and publish it in the cache (first writer wins)."""
        try:
            data = self.objects.get(key)
        except FileNotFoundError:
            return  # gone since the listing (retired meanwhile): the next pull says
        self._verify(key, data)
        final = self.cache / key
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            files.publish_once(final, data, False, self.cache / ".staging")
        except OSError as e:
            msg = f"Cannot write `{final}` (the cache of `{self.url}`): {e}. Set `cache_dir`."
            raise LineageStorageError(msg) from e

    def _verify(self, key: str, data: bytes) -> None:
        """Check the bytes of object ``key`` as a local store checks its files.

        Raises:
            LineageCorruptError: they fail their checksums or do not decode.
        """
        url = f"{self.url}/{key}"
        if key.startswith(f"{RETIRED}/"):
            try:
                parse_marker(data)
            except (ValueError, KeyError, TypeError) as e:
                raise _corrupt(url, str(e)) from e
            return
        tmp = self.cache / ".staging" / f"{uuid.uuid4().hex}.verify"
        try:
            files.write_synced(tmp, data, False)
            if key.endswith(".json"):
                _, verified = load_record(tmp, "Array", ArrayRecord.from_json)
            else:
                with segment.Segment(tmp) as seg:
                    seg.entries()  # every row against its digests
                    verified, ids = seg.verified, list(seg.op_ids)
                if key.startswith("operations/") and ids != [Path(key).stem]:
                    raise _corrupt(url, f"it holds operations {ids}, not `{Path(key).stem}`")
                if key.endswith(LINK_SUFFIX) and len(ids) == 1:
                    self._link_ops[key] = ids[0]
            if not verified:
                raise _corrupt(url, "it carries no checksums (written before format 2-2)")
        except LineageCorruptError as e:
            if e.path == url:
                raise
            raise _corrupt(url, str(e)) from e
        except (DSLogError, OSError, ValueError) as e:
            raise _corrupt(url, str(e)) from e
        finally:
            discard(tmp)

    def _check_links(self) -> LineageCorruptError | None:
        """Every array record that is an operation's segment names an operation that is in
        some segment of the cache (a segment is created before its links)."""
        links = [
            self.layout.rel(p) for p in self.layout.array_files() if p.name.endswith(LINK_SUFFIX)
        ]
        if not links:
            return None
        ops: set[str] = set()
        for rel in self.layout.segment_files():
            if rel.startswith("operations/"):
                ops.add(Path(rel).stem)
                continue
            if rel not in self._pack_ops:
                with (
                    contextlib.suppress(FileNotFoundError),
                    segment.Segment(self.cache / rel) as seg,
                ):
                    self._pack_ops[rel] = tuple(seg.op_ids)
            ops.update(self._pack_ops.get(rel, ()))
        for rel in links:
            op = self._link_ops.get(rel)
            if op is None:
                with (
                    contextlib.suppress(FileNotFoundError),
                    segment.Segment(self.cache / rel) as seg,
                ):
                    op = self._link_ops.setdefault(rel, seg.op_ids[0])
            if op is not None and op not in ops:
                why = f"array record `{rel}` names operation `{op}`, which is in no segment"
                return _missing(f"{self.url}/operations/{op}.parquet", why)
        return None

    # ----------------------------------------------------------------- compaction

    def compact(self, run: Callable[..., CompactionResult]) -> CompactionResult:
        """Compact the store: pull, pack in the cache (``run(upload=...)``: each pack is
        created as an object before it enters the cache), publish the packs' retirement
        marker, delete the segments retired long enough ago.

        Raises:
            LineageStorageError: a pack or marker could not be created (the cache's new packs
                are dropped again: the replaced segments come back at the next pull).
        """
        self.pull()

        def upload(rel: str, data: bytes) -> None:
            if not self.objects.put_once(rel, data):
                msg = f"Object `{self.url}/{rel}` exists: pack names repeat?"
                raise LineageStorageError(msg)

        result: CompactionResult = run(upload=upload)
        if result.packs:
            data = marker_bytes(result.packs, result.removed, time.time())
            key = f"{RETIRED}/{Path(result.packs[0]).stem}.json"
            try:
                self.objects.put_once(key, data)
            except BaseException:
                for rel in result.packs:
                    discard(self.cache / rel)
                raise
            files.publish_once(self.cache / key, data, False, self.cache / ".staging")
        self._delete_retired()
        return result

    def _delete_retired(self) -> None:
        """Delete the segments of markers older than ``retire_after_s`` whose packs are there."""
        listing = self.objects.list()
        markers = self._markers(listing)
        retired = self._retired(listing, markers)
        now = time.time()
        for _, segs, at in markers.values():
            if now - at < self.retire_after_s:
                continue
            for s in segs:
                if s in listing and s in retired:
                    self.objects.delete(s)
