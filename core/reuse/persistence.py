"""The on-disk view registry: one JSON file per view, create-only demotion markers, and the
argument-relevance state of each operation, all under ``<store>/views/``.

A key maps to one view file ``<signature>.json``, so finding a view is one dict access (plus
one file read the first time a key is seen) and does not depend on the number of views.

**Concurrency.** View files are written atomically (temp file + rename): a reader sees a whole
old or a whole new view, never a torn one. A served call only counts its hit in memory; the
counter is written every ``flush_interval`` seconds by a worker thread, off the call's path,
from a snapshot taken at the hit, and a snapshot never replaces a newer state of its view
written meanwhile (each write carries a generation number). Two processes updating one
candidate race last-writer-wins, which can only delay a confirmation; the non-reusable markers
(``<signature>.dead``) are create-only, so a demotion is never lost and no process can
resurrect the view.
"""

import base64
import contextlib
import itertools
import json
import logging
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dslog_dagster.core import background
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.format.table_file import atomic_write_bytes
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import Shape
from dslog_dagster.core.reuse.keys import digest
from dslog_dagster.core.reuse.views import GenTemplate, TableKey
from dslog_dagster.errors import ReuseError, ViewMismatchWarning

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = [
    "VIEW_SCHEMA_VERSION",
    "ConfirmedBy",
    "Kind",
    "Status",
    "View",
    "ViewFiles",
    "ViewInfo",
    "replace_unsynced",
]

logger = logging.getLogger(__name__)

#: A view's kind: exact inputs, exact shapes, or a shape class.
Kind = Literal["base", "dim", "gen"]
#: A view's life cycle: learnt, serving, or demoted for good.
Status = Literal["candidate", "confirmed", "non_reusable"]
#: How a view was confirmed: by observed calls alone (captures of real calls that agreed),
#: or also by probes on synthetic inputs (calls declared pure, or :meth:`ViewRegistry.probe`).
ConfirmedBy = Literal["observed", "probes"]
VIEW_SCHEMA_VERSION = 1
# Verified exact keys kept per view file.
_VERIFIED_KEEP = 256
# Input-content digests kept per candidate (distinct data is what confirms an impure view).
_CONTENTS_KEEP = 16
# Keys whose demotion marker was looked for recently, before the record is reset.
_DEAD_CHECKS_KEPT = 65536


@dataclass(frozen=True, slots=True)
class ViewInfo:
    """One row of :meth:`ViewRegistry.views` (what a reuse-signature asset shows)."""

    signature: str
    kind: Kind
    op: str
    status: Status
    matches: int
    hits: int
    shapes_seen: int
    created_at: datetime
    last_verified: datetime | None
    finite_only: bool
    nonzero_only: bool
    reason: str | None
    confirmed_by: ConfirmedBy | None = None
    observed_checks: int = 0
    sampled_checks: int = 0

    def describe(self) -> str:
        """One sentence: how the view was confirmed and checked since (for ``dslog/record``)."""
        runs = self.shapes_seen if self.kind == "gen" else self.matches + 1
        if self.confirmed_by == "probes":
            how = f"confirmed by {runs} captured run(s) and synthetic-input probes"
        elif self.confirmed_by == "observed":
            how = f"confirmed by {runs} observed run(s) alone (no re-runs of the function)"
        else:
            how = f"{self.status}"
        checks = (
            f"checked since by {self.observed_checks} observed run(s) and "
            f"{self.sampled_checks} sampled verification(s)"
        )
        guard = []
        if self.finite_only:
            guard.append("NaN-free inputs")
        if self.nonzero_only:
            guard.append("inputs without exact zeros")
        only = f"; serves {' and '.join(guard)} only" if guard else ""
        return f"{self.kind} view `{self.signature[:16]}` {how}; {checks}{only}"

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-able values (timestamps in ISO format)."""
        return {
            "signature": self.signature,
            "kind": self.kind,
            "op": self.op,
            "status": self.status,
            "matches": self.matches,
            "hits": self.hits,
            "shapes_seen": self.shapes_seen,
            "created_at": self.created_at.isoformat(),
            "last_verified": self.last_verified.isoformat() if self.last_verified else None,
            "finite_only": self.finite_only,
            "nonzero_only": self.nonzero_only,
            "reason": self.reason,
            "confirmed_by": self.confirmed_by,
            "observed_checks": self.observed_checks,
            "sampled_checks": self.sampled_checks,
        }


def _encode_tables(tables: Mapping[TableKey, LineageTable]) -> dict[str, str]:
    return {
        ",".join(map(str, k)): base64.b64encode(table_to_blob(t)).decode("ascii")
        for k, t in sorted(tables.items())
    }


def _decode_tables(d: Mapping[str, str], source: str) -> dict[TableKey, LineageTable]:
    out: dict[TableKey, LineageTable] = {}
    for k, blob in d.items():
        a, b, c = (int(x) for x in k.split(","))
        out[(a, b, c)] = table_from_blob(base64.b64decode(blob), source)
    return out


def _ts(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


@dataclass(eq=False)
class View:
    """One view as the registry keeps it in memory and in its file.

    Base and dim views hold the ``tables`` of their key; a gen view holds its ``template``,
    the ``observations`` it was fitted on and the symbol values it has ``seen``. ``verified``
    lists the exact keys (:attr:`~dslog_dagster.core.reuse.keys.Call.exact_key`) it was
    checked on. ``confirmed_by`` says how it was confirmed; ``contents`` (input-content
    digests of the matching captures of a dim candidate: distinct data confirms an impure
    view, the same data again does not); ``observed_checks`` / ``sampled_checks`` count
    the checks after confirmation (captures of real calls that agreed, sampled annotated
    re-runs). ``group``, ``owner`` and ``arg_tokens`` serve irrelevant-argument detection
    (dim views). ``unflushed``, ``saved_at``, ``instances`` and ``encoded`` are in-memory
    bookkeeping: unwritten hits, last write, instantiated gen tables by shape, and the
    encoded tables of the last write.
    """

    signature: str
    kind: Kind
    op: str
    status: Status = "candidate"
    matches: int = 0
    hits: int = 0
    created: float = field(default_factory=time.time)
    last_verified: float | None = None
    reason: str | None = None
    finite_only: bool = False
    nonzero_only: bool = False
    in_shapes: list[Shape] = field(default_factory=list)
    out_shapes: list[Shape] = field(default_factory=list)
    tables: dict[TableKey, LineageTable] = field(default_factory=dict)
    template: GenTemplate | None = None
    observations: list[tuple[tuple[int, ...], dict[TableKey, LineageTable]]] = field(
        default_factory=list
    )
    seen: list[tuple[int, ...]] = field(default_factory=list)
    fit_full: bool = False
    verified: list[str] = field(default_factory=list)
    confirmed_by: ConfirmedBy | None = None
    contents: list[str] = field(default_factory=list)
    observed_checks: int = 0
    sampled_checks: int = 0
    # Irrelevant-argument bookkeeping (dim views): code/mode/shape group and argument tokens.
    group: str = ""
    owner: str = ""  # digest of (code identity, mode): whose arguments these are
    arg_tokens: dict[str, str] = field(default_factory=dict)
    unflushed: int = 0
    saved_at: float = field(default_factory=time.monotonic)
    instances: "OrderedDict[Any, dict[TableKey, LineageTable]]" = field(default_factory=OrderedDict)
    encoded: dict[str, str] | None = None

    def info(self) -> ViewInfo:
        """The view's row for :meth:`ViewRegistry.views`."""
        return ViewInfo(
            self.signature,
            self.kind,
            self.op,
            self.status,
            self.matches,
            self.hits,
            len(self.seen) if self.kind == "gen" else 1,
            _ts(self.created) or datetime.now(UTC),
            _ts(self.last_verified),
            self.finite_only,
            self.nonzero_only,
            self.reason,
            self.confirmed_by,
            self.observed_checks,
            self.sampled_checks,
        )

    def note_contents(self, digest_: str | None) -> bool:
        """Record the input-content digest of a matching capture; False when it was seen."""
        if digest_ is None:
            return True
        if digest_ in self.contents:
            return False
        self.contents = [*self.contents, digest_][-_CONTENTS_KEEP:]
        return True

    def to_json(self) -> dict[str, Any]:
        """The view file's content."""
        if self.encoded is None:
            self.encoded = _encode_tables(self.tables)
        return {
            "schema_version": VIEW_SCHEMA_VERSION,
            "signature": self.signature,
            "kind": self.kind,
            "op": self.op,
            "status": self.status,
            "matches": self.matches,
            "hits": self.hits,
            "created": self.created,
            "last_verified": self.last_verified,
            "reason": self.reason,
            "finite_only": self.finite_only,
            "nonzero_only": self.nonzero_only,
            "in_shapes": [list(s) for s in self.in_shapes],
            "out_shapes": [list(s) for s in self.out_shapes],
            "tables": self.encoded,
            "template": self.template.to_json() if self.template else None,
            "observations": [
                {"values": list(v), "tables": _encode_tables(t)} for v, t in self.observations
            ],
            "seen": [list(v) for v in self.seen],
            "fit_full": self.fit_full,
            "verified": self.verified[-_VERIFIED_KEEP:],
            "confirmed_by": self.confirmed_by,
            "contents": self.contents,
            "observed_checks": self.observed_checks,
            "sampled_checks": self.sampled_checks,
            "group": self.group,
            "owner": self.owner,
            "arg_tokens": self.arg_tokens,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], source: str) -> "View":
        """The view of a file's content (``source`` names the file in errors).

        Raises:
            ReuseError: the file has another schema version.
        """
        if int(d.get("schema_version", 0)) != VIEW_SCHEMA_VERSION:
            msg = f"View file `{source}` has schema version {d.get('schema_version')!r}."
            raise ReuseError(msg)
        v = cls(
            signature=str(d["signature"]),
            kind=d["kind"],
            op=str(d["op"]),
            status=d["status"],
            matches=int(d["matches"]),
            hits=int(d["hits"]),
            created=float(d["created"]),
            last_verified=d.get("last_verified"),
            reason=d.get("reason"),
            finite_only=bool(d.get("finite_only", False)),
            nonzero_only=bool(d.get("nonzero_only", False)),
            in_shapes=[tuple(int(x) for x in s) for s in d["in_shapes"]],
            out_shapes=[tuple(int(x) for x in s) for s in d["out_shapes"]],
            tables=_decode_tables(d["tables"], source),
            template=GenTemplate.from_json(d["template"]) if d.get("template") else None,
            observations=[
                (tuple(int(x) for x in o["values"]), _decode_tables(o["tables"], source))
                for o in d.get("observations", [])
            ],
            seen=[tuple(int(x) for x in s) for s in d.get("seen", [])],
            fit_full=bool(d.get("fit_full", False)),
            verified=[str(x) for x in d.get("verified", [])],
            # files written before views recorded it were confirmed with probes
            confirmed_by=d.get("confirmed_by", "probes" if d["status"] == "confirmed" else None),
            contents=[str(x) for x in d.get("contents", [])],
            observed_checks=int(d.get("observed_checks", 0)),
            sampled_checks=int(d.get("sampled_checks", 0)),
            group=str(d.get("group", "")),
            owner=str(d.get("owner", "")),
            arg_tokens={str(k): str(x) for k, x in d.get("arg_tokens", {}).items()},
        )
        v.encoded = dict(d["tables"])
        return v


def replace_unsynced(path: Path, data: bytes) -> None:
    """Write ``path`` atomically (temp file + rename) but without fsync: for hit counters."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{id(data):x}-{path.name}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class ViewFiles:
    """The views of one directory: files on disk, the views loaded from them in memory.

    Args:
        directory: ``<store>/views``; created if missing.
        flush_interval: seconds between writes of a served view's hit counter.
        stats: the registry's counters; demotions are counted here, where they are recorded.

    Raises:
        ReuseError: the directory cannot be created.
    """

    def __init__(self, directory: Path, flush_interval: float, stats: dict[str, int]) -> None:
        self.dir = directory
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            msg = f"Could not create the view directory `{self.dir}`: {e}"
            raise ReuseError(msg) from e
        self.flush_interval = flush_interval
        self.stats = stats
        #: Views loaded or created by this process, by signature.
        self.views: dict[str, View] = {}
        #: Dim views by group (code, mode and input shapes): irrelevant-argument candidates.
        self.groups: dict[str, list[str]] = {}
        self._dead: set[str] = set()
        self._dead_checked: dict[str, float] = {}
        self._dir_s = str(self.dir) + os.sep
        # A hit counter is written in a worker from a snapshot: the generation of each
        # signature's last written state keeps an older snapshot from replacing a newer one.
        self._write_lock = threading.Lock()
        self._written: dict[str, int] = {}
        self._generations = itertools.count()
        self._pending: list[Future[None]] = []
        self._pending_lock = threading.Lock()

    def _path(self, sig: str) -> Path:
        return self.dir / f"{sig}.json"

    def signatures(self) -> Iterator[str]:
        """The signatures of every view file, sorted."""
        for path in sorted(self.dir.glob("*.json")):
            yield path.stem

    def save(self, v: View, *, sync: bool = True) -> None:
        """Write ``v``'s file atomically; ``sync=False`` skips the fsync (hit counters).

        Raises:
            ReuseError: the file cannot be written.
        """
        data, gen = self._snapshot(v)
        self._write(v.signature, data, gen, sync=sync)
        v.unflushed = 0
        v.saved_at = time.monotonic()

    def _snapshot(self, v: View) -> tuple[bytes, int]:
        """``v``'s file contents now, and their generation (later snapshots: higher)."""
        data = json.dumps(v.to_json(), separators=(",", ":")).encode()
        return data, next(self._generations)

    def _write(self, sig: str, data: bytes, gen: int, *, sync: bool) -> None:
        """Write the snapshot ``data`` of generation ``gen`` as ``sig``'s file, unless a
        newer snapshot was written already.

        Raises:
            ReuseError: the file cannot be written.
        """
        with self._write_lock:
            if self._written.get(sig, -1) > gen:
                return  # a newer state of the view is on disk: keep it
            try:
                if sync:
                    atomic_write_bytes(self._path(sig), data)
                else:
                    replace_unsynced(self._path(sig), data)
            except OSError as e:
                msg = f"Could not write view `{sig}` under `{self.dir}`: {e}"
                raise ReuseError(msg) from e
            self._written[sig] = gen

    def _write_counter(self, sig: str, data: bytes, gen: int) -> None:
        """Write a hit counter's snapshot (in a worker): a failure is logged, never raised (a
        counter is not worth failing anything for; the next write carries the count)."""
        try:
            self._write(sig, data, gen, sync=False)  # only a counter: atomic, not worth an fsync
        except ReuseError as e:
            logger.warning("%s", e)

    def is_dead(self, sig: str) -> bool:
        """Is ``sig`` non-reusable (demoted here, or by another process within a second)?"""
        if sig in self._dead:
            return True
        # Another process may have demoted the view: look for its marker, at most once a
        # second per key on the hit path (a stat is a noticeable part of a hit).
        now = time.monotonic()
        if now - self._dead_checked.get(sig, -1.0) < 1.0:
            return False
        if len(self._dead_checked) > _DEAD_CHECKS_KEPT:
            self._dead_checked.clear()
        self._dead_checked[sig] = now
        if os.path.exists(self._dir_s + sig + ".dead"):
            self._dead.add(sig)
            return True
        return False

    def recheck_markers(self) -> None:
        """Look for other processes' demotion markers on the next :meth:`is_dead` of every
        key, instead of at most once a second."""
        self._dead_checked.clear()

    def get(self, sig: str, *, strict: bool = False) -> View | None:
        """The view under ``sig`` (memory, else its file), or None. O(1) in the view count.

        An unreadable or damaged view file raises :class:`ReuseError` with ``strict``; on the
        capture path it is logged and treated as absent (the call is then captured, which is
        always correct, and the file is rewritten by the next capture of that key).
        """
        v = self.views.get(sig)
        if v is not None:
            return v
        path = self._path(sig)
        try:
            raw = path.read_bytes()
            v = View.from_json(json.loads(raw), str(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, ReuseError) as e:
            msg = f"View file `{path}` is unreadable or damaged ({e}); delete it to re-learn it."
            if strict:
                raise ReuseError(msg) from e
            logger.warning(msg)
            return None
        self.views[sig] = v
        if v.kind == "dim" and v.group:
            self.groups.setdefault(v.group, []).append(sig)
        return v

    def confirmed(self, sig: str) -> View | None:
        """The view under ``sig`` if it is confirmed and not demoted, else None."""
        v = self.get(sig)
        if v is None or v.status != "confirmed" or self.is_dead(sig):
            return None
        return v

    def kill(self, v: View | None, sig: str, reason: str, *, warn: bool) -> None:
        """Mark ``sig`` non-reusable for good (create-only marker) and, with ``warn``, say so
        (:class:`~dslog_dagster.errors.ViewMismatchWarning`) if it was serving."""
        self._dead.add(sig)
        with contextlib.suppress(FileExistsError), open(self.dir / f"{sig}.dead", "x") as f:
            f.write(reason)
        if v is not None:
            was = v.status
            v.status = "non_reusable"
            v.reason = reason
            self.save(v)
            if was == "confirmed" and warn:
                self.stats["demoted"] += 1
                msg = (
                    f"Provenance view `{sig}` ({v.kind}, `{v.op}`) disagreed with the real "
                    f"lineage: {reason}. It is demoted to non-reusable and the call's lineage "
                    "was captured instead."
                )
                warnings.warn(msg, ViewMismatchWarning, stacklevel=4)

    def hit(self, v: View) -> None:
        """Count a served call. The counter is written every ``flush_interval`` seconds, by a
        worker thread from a snapshot taken here: no file is written on the call's path."""
        v.hits += 1
        v.unflushed += 1
        if time.monotonic() - v.saved_at >= self.flush_interval:
            data, gen = self._snapshot(v)
            v.unflushed = 0
            v.saved_at = time.monotonic()
            try:
                task = background.submit(self._write_counter, v.signature, data, gen)
            except RuntimeError:  # the interpreter is shutting down: no more workers
                self._write_counter(v.signature, data, gen)
                return
            with self._pending_lock:
                self._pending = [t for t in self._pending if not t.done()]
                self._pending.append(task)

    def flush(self) -> None:
        """Write the hit counters of views served since their last write (and wait for the
        counters being written by workers)."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for task in pending:
            task.result()  # _write_counter logs its failures
        for v in list(self.views.values()):
            if v.unflushed and v.signature not in self._dead:
                self.save(v, sync=False)

    # ----------------------------------------------------------- argument relevance

    def _args_stem(self, code: str, mode: str) -> str:
        return f"args-{digest(code, mode)[:24]}"

    def read_args(self, code: str, mode: str) -> dict[str, Any] | None:
        """The argument-relevance state of an operation (code identity, key mode), if saved."""
        with contextlib.suppress(FileNotFoundError, ValueError):
            state: dict[str, Any] = json.loads(
                (self.dir / f"{self._args_stem(code, mode)}.json").read_bytes()
            )
            return state
        return None

    def write_args(self, code: str, mode: str, state: Mapping[str, Any]) -> None:
        """Save the argument-relevance state of an operation atomically."""
        path = self.dir / f"{self._args_stem(code, mode)}.json"
        atomic_write_bytes(path, json.dumps(state).encode())

    def relevant_marker(self, code: str, mode: str, name: str) -> Path:
        """The create-only marker saying argument ``name`` of an operation is relevant."""
        return self.dir / f"{self._args_stem(code, mode)}-{digest(name)[:16]}.relevant"
