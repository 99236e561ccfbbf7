"""Where a lineage store keeps what: the directory tree and the names of its files.

::

    root/
      arrays/<slug>-<sha256(name)[:16]>/<version-slug>-<sha256(version)[:16]>.json
                                       /default.json          (version None)
                                       /<version-slug>-<hash>.op.parquet  (a linked segment)
      operations/<op_id>.parquet     (segment of one operation: its record + all its tables)
      packs/<pack_id>.parquet        (segment of many small operations, made by compaction)
      .staging/                      (files in flight)
      .store-id                      (the store's random id)
      catalog.duckdb                 (index, rebuilt at will)

Every file name derived from a user-supplied name is a short slug of ``[A-Za-z0-9_-]`` plus
a hash of the name, so no name can escape the root. Listing the files is done here too, so
that the store and its catalog read the same truth the same way.
"""

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dslog_dagster.errors import LineageStorageError

SLUG_MAX = 40
"""Characters of a user-supplied name kept readable in a file name."""
OP_ID_RE = re.compile(r"^[0-9a-f]{48}$")
"""An operation id: a nanosecond timestamp (16 hex digits) and a random UUID."""
SEGMENT_RE = re.compile(r"^[0-9a-f]{48}\.parquet$")
"""The name of a segment file (an operation's or a pack's)."""
LINK_SUFFIX = ".op.parquet"
"""Suffix of an array record that is its operation's segment, hard-linked."""
STORE_ID_FILE = ".store-id"
"""File in a store's root naming that store (random, written once): a directory deleted and
made again at the same path is another store, which a cached handle must not serve."""
_SLUG_RE = re.compile(r"[^A-Za-z0-9_-]")


def _hash16(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def slug(text: str, limit: int = SLUG_MAX) -> str:
    """A file-name-safe, readable prefix of ``text`` (never ``.``/``..``, never a separator)."""
    return _SLUG_RE.sub("_", text)[:limit] or "_"


def array_dir_name(name: str) -> str:
    """The directory (under ``arrays/``) of every version of array ``name``."""
    return f"{slug(name)}-{_hash16(name)}"


def version_file_name(version: str | None) -> str:
    """The JSON record file of ``version`` in its array's directory."""
    return "default.json" if version is None else f"{slug(version)}-{_hash16(version)}.json"


def link_file_name(version: str | None) -> str:
    """File name of an array record that is its operation's segment (a hard link)."""
    return version_file_name(version)[: -len(".json")] + LINK_SUFFIX


def record_files(names: Sequence[str]) -> list[str]:
    """The array record files among directory entries ``names``, sorted; of a version with a
    JSON and a segment record (a race of two writers) only the JSON one."""
    json_stems = {n[: -len(".json")] for n in names if n.endswith(".json")}
    out = []
    for n in names:
        if n.startswith("."):
            continue
        if n.endswith(".json") or (
            n.endswith(LINK_SUFFIX) and n[: -len(LINK_SUFFIX)] not in json_stems
        ):
            out.append(n)
    return sorted(out)


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """The directories of the store at ``root`` and the listing of its files."""

    root: Path

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

    def array_dir(self, name: str) -> Path:
        """The directory of every version of array ``name``."""
        return self.arrays_dir / array_dir_name(name)

    def inside(self, rel: str) -> Path:
        """Resolve a root-relative path read from a record, refusing anything outside root.

        Raises:
            LineageStorageError: ``rel`` points outside the store.
        """
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root.resolve()):
            msg = f"Record path `{rel}` points outside the store `{self.root}`; refusing it."
            raise LineageStorageError(msg)
        return path

    def rel(self, path: Path) -> str:
        """``path`` relative to the root, with POSIX separators (as records and the catalog
        name files)."""
        return path.relative_to(self.root).as_posix()

    def segment_files(self) -> list[str]:
        """Root-relative paths of every segment file on disk, op segments first."""
        out = []
        for directory, sub in ((self.operations_dir, "operations"), (self.packs_dir, "packs")):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            out += [f"{sub}/{n}" for n in sorted(names) if SEGMENT_RE.match(n)]
        return out

    def array_files(self) -> Iterator[Path]:
        """Every array record file on disk (the truth the catalog indexes)."""
        try:
            dirs = sorted(os.scandir(self.arrays_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for d in dirs:
            if d.name.startswith(".") or not d.is_dir(follow_symlinks=False):
                continue
            for f in record_files(os.listdir(d.path)):
                yield Path(d.path) / f
