"""Asset values stored per version: immutable files, published after their lineage commits.

Why: a value file overwritten in place can disagree with the lineage the store records for it.
When a step's lineage write fails, the step fails and Dagster records no materialization, so a
later downstream run names the *previous* materialization in its lineage; it must also read
the previous value. And comparing two materializations needs both values.

Layout, for a value whose unversioned path was ``<stem>.npy`` (or ``<stem>.parquet``):

* ``<stem>.versions/<version>.npy`` (a Spark frame: ``<version>.parquet``, a directory): one
  immutable value per version; the version is the Dagster run id that materialized it, the
  same key the lineage store records for the output array version;
* ``<stem>.npy`` / ``<stem>.parquet``: a symbolic link to the newest *published* version, for
  people and tools that open the file by hand (the IO manager never reads through it when it
  knows the version);
* ``<stem>.versions/<version>.expired``: a tombstone left by retention, so a later read of that
  version says why it is gone;
* ``<stem>.versions/.leases/*.lease``: versions a running process is reading (retention keeps
  them).

A value is written to a temporary name inside ``<stem>.versions/``, the lineage is committed,
and only then is the file renamed to its version (:meth:`ValueSlot.publish`); a failed lineage
write deletes the temporary file, so nothing a reader can name changes.

Retention (:class:`Retention`: keep all, the last N, or those younger than a duration) runs after
each publish. It never removes the version just published, a version the caller protects (the
latest materialization Dagster records), or a leased one: a removal first renames the version
aside, then re-reads the leases, and puts it back when a reader leased it meanwhile; a reader
leases first and then looks, so one of the two always sees the other.
"""

import contextlib
import json
import logging
import os
import shutil
import socket
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dslog_dagster.errors import LineageNotFoundError, LineageStorageError, ValueExpiredError

__all__ = [
    "EXTENSIONS",
    "LEASE_TTL_S",
    "Retention",
    "ValueSlot",
    "asset_stem",
    "partition_of",
    "safe_part",
    "version_part",
]

_log = logging.getLogger(__name__)

EXTENSIONS = (".npy", ".parquet")
"""The value kinds: a NumPy array file, or a Spark frame's Parquet directory."""

LEASE_TTL_S = 24 * 3600.0
"""A lease of a process on another host (whose liveness cannot be checked) protects its
version this long."""

_TOMBSTONE = ".expired"
_WAIT_S = 10.0  # how long a reader waits for a removal in progress to finish or back off


def safe_part(text: str) -> str:
    """A path component that cannot escape its directory (partition keys may hold ``/``)."""
    part = urllib.parse.quote(text, safe="")
    return part.replace(".", "%2E") if set(part) <= {"."} else part


def partition_of(asset_key: str, name: str) -> str | None:
    """The partition key in the store's array name ``a/b[p]`` of asset ``a/b`` (``None``:
    unpartitioned); the inverse of :func:`dslog_dagster.naming.array_name`."""
    prefix = asset_key + "["
    if name != asset_key and name.startswith(prefix) and name.endswith("]"):
        return name[len(prefix) : -1]
    return None


def asset_stem(base: Path, asset_key: str, name: str | None = None) -> Path:
    """The value stem of an asset (``a/b`` -> ``<base>/a/b``) or, when the store's array
    ``name`` is a partition (``a/b[p]``), of that partition (``<base>/a/b/<p>``)."""
    stem = base.joinpath(*(safe_part(p) for p in asset_key.split("/")))
    partition = None if name is None else partition_of(asset_key, name)
    return stem if partition is None else stem / safe_part(partition)


def version_part(version: str) -> str:
    """A version key as a file-name part (run ids are safe already; anything else is quoted)."""
    part = urllib.parse.quote(version, safe="-_")
    return part if part else "%00"


@dataclass(frozen=True, slots=True)
class Retention:
    """Which versions of a value to keep once a new one is published.

    A version is kept when *any* rule set keeps it: ``keep_last`` keeps the newest N,
    ``keep_for_s`` keeps those published less than that many seconds ago. Neither set: keep
    all. The newest version, protected versions and leased versions are always kept.

    Attributes:
        keep_last: keep the newest N versions (``None``: no count rule).
        keep_for_s: keep versions younger than this many seconds (``None``: no age rule).
        clock: the time source (seconds since the epoch); publish times come from it too, so
            tests can move time.
    """

    keep_last: int | None = None
    keep_for_s: float | None = None
    clock: Callable[[], float] = field(default=time.time)

    @property
    def keeps_all(self) -> bool:
        return self.keep_last is None and self.keep_for_s is None

    def describe(self) -> str:
        """The setting in the words of the IO manager's fields (for error messages)."""
        rules = []
        if self.keep_last is not None:
            rules.append(f"keep_last={self.keep_last}")
        if self.keep_for_s is not None:
            rules.append(f"keep_for_hours={self.keep_for_s / 3600:g}")
        return ", ".join(rules) if rules else "keep all"

    def expired(self, ages: list[tuple[str, float]]) -> list[str]:
        """The versions to remove from ``ages`` (version, publish time), newest kept."""
        if self.keeps_all:
            return []
        now = self.clock()
        order = sorted(ages, key=lambda va: (va[1], va[0]), reverse=True)
        out = []
        for rank, (version, published) in enumerate(order):
            if rank == 0:
                continue
            by_count = self.keep_last is not None and rank < self.keep_last
            by_age = self.keep_for_s is not None and now - published < self.keep_for_s
            if not (by_count or by_age):
                out.append(version)
        return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ValueSlot:
    """The stored versions of one value (an asset, an asset partition, or an op output).

    Args:
        stem: the value's path without extension (``<base_dir>/a/b`` for asset ``a/b``).
    """

    def __init__(self, stem: Path) -> None:
        self.stem = stem
        self.dir = stem.with_name(stem.name + ".versions")
        self.leases = self.dir / ".leases"

    # ---------------------------------------------------------------- paths and listing
    def pointer(self, ext: str) -> Path:
        """``<stem><ext>``: the link to the newest published version (or a legacy file)."""
        return self.stem.with_name(self.stem.name + ext)

    def path(self, version: str, ext: str) -> Path:
        return self.dir / (version_part(version) + ext)

    def find(self, version: str) -> Path | None:
        """The stored value of ``version`` (either kind), ``None`` when there is none."""
        for ext in EXTENSIONS:
            p = self.path(version, ext)
            if os.path.lexists(p):
                return p
        return None

    def versions(self) -> list[tuple[str, Path, float]]:
        """Every published version: (version, path, publish time), in no particular order."""
        out = []
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return []
        for e in entries:
            name = e.name
            if name.startswith("."):
                continue
            for ext in EXTENSIONS:
                if name.endswith(ext):
                    try:
                        published = e.stat(follow_symlinks=False).st_mtime
                    except FileNotFoundError:  # removed meanwhile
                        continue
                    version = urllib.parse.unquote(name[: -len(ext)])
                    out.append((version, Path(e.path), published))
        return out

    def legacy(self) -> Path | None:
        """A value file written before versioning (a regular file or directory at the pointer
        path, not a link)."""
        for ext in EXTENSIONS:
            p = self.pointer(ext)
            if p.exists() and not p.is_symlink():
                return p
        return None

    # ---------------------------------------------------------------- writing
    def staging(self, ext: str) -> Path:
        """A fresh temporary path inside the versions directory (same file system as the
        final name, so publishing is a rename)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir / f".{uuid.uuid4().hex}{ext}.tmp"

    @staticmethod
    def discard(tmp: Path) -> None:
        """Remove a staged value that will not be published (a failed lineage write)."""
        with contextlib.suppress(FileNotFoundError):
            if tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp)
            else:
                tmp.unlink()

    def publish(self, tmp: Path, version: str, ext: str, clock: Callable[[], float]) -> Path:
        """Rename the staged value ``tmp`` to ``version`` and point ``<stem><ext>`` at it.

        Raises:
            LineageStorageError: the rename failed (the staged file is removed).
        """
        final = self.path(version, ext)
        try:
            if final.is_dir() and not final.is_symlink():
                # the same run stores this output again (a step retry): replace it whole
                shutil.rmtree(final)
            os.replace(tmp, final)
        except OSError as e:
            self.discard(tmp)
            msg = f"Could not publish the value version `{final}`: {e}"
            raise LineageStorageError(msg) from e
        now = clock()
        os.utime(final, (now, now), follow_symlinks=False)
        with contextlib.suppress(FileNotFoundError):
            (self.dir / (version_part(version) + _TOMBSTONE)).unlink()
        self._point(final, ext)
        return final

    def _point(self, final: Path, ext: str) -> None:
        """Make ``<stem><ext>`` a link to ``final``; a link of the other kind goes (the asset
        changed kind). A failure leaves the old link: it is a convenience, never read by the
        IO manager when the version is known."""
        link = self.pointer(ext)
        tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex}.link")
        try:
            os.symlink(os.path.relpath(final, link.parent), tmp)
            if link.is_dir() and not link.is_symlink():  # a legacy frame directory
                shutil.rmtree(link)
            os.replace(tmp, link)
        except OSError as e:
            _log.warning("dslog: could not point `%s` at the new value version: %s", link, e)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        for other in EXTENSIONS:
            p = self.pointer(other)
            if other != ext and p.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()

    # ---------------------------------------------------------------- reading
    @contextlib.contextmanager
    def reading(self, version: str) -> Iterator[Path]:
        """Lease ``version`` for the ``with`` block and give its path.

        Raises:
            ValueExpiredError: retention removed the version.
            LineageNotFoundError: no value of that version was ever published here.
        """
        lease = self.lease(version)
        try:
            yield self.locate(version)
        finally:
            self.release(lease)

    def lease(self, version: str) -> Path | None:
        """Protect ``version`` from retention until :meth:`release` (or this process ends).

        ``None`` when the lease cannot be written (a read-only copy of the values: no
        retention can run there either, so the read goes ahead unprotected).
        """
        lease = self.leases / f"{uuid.uuid4().hex}.lease"
        body = {"version": version, "host": socket.gethostname(), "pid": os.getpid()}
        tmp = lease.with_suffix(".tmp")
        try:
            self.leases.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body | {"t": time.time()}))
            os.replace(tmp, lease)
        except OSError as e:
            _log.debug("dslog: could not lease `%s` version `%s`: %s", self.stem, version, e)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return None
        return lease

    @staticmethod
    def release(lease: Path | None) -> None:
        if lease is not None:
            with contextlib.suppress(FileNotFoundError):
                lease.unlink()

    def locate(self, version: str) -> Path:
        """The path of ``version``, waiting out a removal in progress (which backs off when
        it sees this reader's lease). Call with the version leased."""
        deadline = time.monotonic() + _WAIT_S
        while True:
            found = self.find(version)
            if found is not None:
                return found
            aside = (
                list(self.dir.glob(f".{version_part(version)}.*.expiring"))
                if self.dir.is_dir()
                else []
            )
            if not aside or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if (self.dir / (version_part(version) + _TOMBSTONE)).exists():
            msg = (
                f"The value of `{self.stem.name}` version `{version}` expired by retention: "
                f"{self._tombstone_text(version)}. Raise `keep_last` or `keep_for_hours` on "
                "the IO manager to keep more versions, or re-materialize the asset."
            )
            raise ValueExpiredError(msg)
        msg = (
            f"No stored value of `{self.stem.name}` version `{version}` under `{self.dir}`; "
            "materialize the asset (or the upstream step) first."
        )
        raise LineageNotFoundError(msg)

    def _tombstone_text(self, version: str) -> str:
        try:
            info = json.loads((self.dir / (version_part(version) + _TOMBSTONE)).read_text())
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(info["t"]))
            return f"removed at {when} UTC under {info['rule']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "removed"

    # ---------------------------------------------------------------- retention
    def live_leases(self) -> set[str]:
        """Versions leased by a live reader; leases of dead processes are removed."""
        out: set[str] = set()
        try:
            files = list(self.leases.glob("*.lease"))
        except OSError:
            return out
        host = socket.gethostname()
        for f in files:
            try:
                body = json.loads(f.read_text())
                version, pid, t = str(body["version"]), int(body["pid"]), float(body["t"])
                same_host = body["host"] == host
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError):
                # unreadable (half-written by a crash?): honour it for the TTL by its mtime
                with contextlib.suppress(OSError):
                    if time.time() - f.stat().st_mtime >= LEASE_TTL_S:
                        f.unlink()
                continue
            alive = _pid_alive(pid) if same_host else time.time() - t < LEASE_TTL_S
            if alive:
                out.add(version)
            else:
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
        return out

    def apply(self, retention: Retention, protect: set[str]) -> list[str]:
        """Remove the versions ``retention`` lets go, except ``protect``ed and leased ones.

        Returns:
            The versions removed.
        """
        if retention.keeps_all:
            return []
        listed = self.versions()
        paths = {v: p for v, p, _ in listed}
        doomed = [v for v in retention.expired([(v, t) for v, _, t in listed]) if v not in protect]
        if not doomed:
            return []
        leased = self.live_leases()
        removed = []
        for version in doomed:
            if version in leased:
                continue
            path = paths[version]
            aside = self.dir / f".{version_part(version)}.{uuid.uuid4().hex}.expiring"
            try:
                os.replace(path, aside)
            except FileNotFoundError:
                continue  # another process removed it
            try:
                if version in self.live_leases():  # a reader leased it meanwhile: put it back
                    os.replace(aside, path)
                    continue
                tomb = self.dir / (version_part(version) + _TOMBSTONE)
                tomb.write_text(json.dumps({"t": retention.clock(), "rule": retention.describe()}))
            except BaseException:
                if os.path.lexists(aside):
                    os.replace(aside, path)  # keep the value when its removal cannot be told
                raise
            self.discard(aside)
            removed.append(version)
        if removed:
            _log.info(
                "dslog: retention (%s) removed %s of `%s`", retention.describe(), removed, self.stem
            )
        return removed
