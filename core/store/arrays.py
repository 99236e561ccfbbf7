"""The array records of a lineage store, on disk and as read so far.

An array record is a JSON file in its array's directory, published with ``os.link`` (which
fails if the name exists), so when two processes register the same ``(name, version)`` the
first one wins and the second compares shapes. A tracked step may instead register its new
outputs together with its operation: the operation's segment is hard-linked into each
output's directory as ``<version>.op.parquet`` and the record is read from the segment's
operation record. When both a ``.json`` and an ``.op.parquet`` record of one version exist
(two processes raced), the JSON one is read.

Records are immutable once visible, so every record read or written is remembered by this
handle and never read again.
"""

import contextlib
import difflib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dslog_dagster.core.format import segment
from dslog_dagster.core.store import files
from dslog_dagster.core.store.damage import DamageLog
from dslog_dagster.core.store.failures import storage_error
from dslog_dagster.core.store.group_commit import GroupCommitter
from dslog_dagster.core.store.layout import (
    LINK_SUFFIX,
    StoreLayout,
    array_dir_name,
    link_file_name,
    record_files,
    version_file_name,
)
from dslog_dagster.core.store.records import (
    FIX_DAMAGE,
    ArrayRecord,
    NewArray,
    array_record,
    check_name,
    check_no_self_loop,
    load_record,
    parse_operation,
    record_json,
)
from dslog_dagster.errors import (
    InvalidRelationError,
    LineageCorruptError,
    LineageNotFoundError,
    LineageStorageError,
)


class ArrayFiles:
    """The array records of the store laid out by ``layout``, read and written.

    Args:
        layout: the store's directories.
        durable: flush every record written, and its directory, before ``publish`` returns.
        damage: where damaged and unverified files met are noted.
        committer: a group committer that flushes them later instead (a store opened with
            ``group_commit``; ``durable`` is then ``False``).
    """

    def __init__(
        self,
        layout: StoreLayout,
        durable: bool = True,
        damage: DamageLog | None = None,
        committer: GroupCommitter | None = None,
    ) -> None:
        self.layout = layout
        self.durable = durable
        self.committer = committer
        self.damage = damage if damage is not None else DamageLog()
        self._by_path: dict[str, ArrayRecord] = {}
        # (name, version) -> its record, once found or written: a tracked step registers its
        # inputs again on every run, and building their file paths (two SHA-256 and a slug
        # each) and records cost a few hundred microseconds of a step served from a view.
        # Records are immutable once visible, so an entry never goes stale.
        self._by_key: dict[tuple[str, str | None], ArrayRecord] = {}
        # array directories known to exist (see link_into)
        self._dirs: set[str] = set()

    def forget(self) -> None:
        """Drop every record read so far (files were moved aside: read them again)."""
        self._by_path.clear()
        self._by_key.clear()

    def known(self, name: str, version: str | None) -> ArrayRecord | None:
        """The record of ``(name, version)`` if this handle has read or written it."""
        return self._by_key.get((name, version))

    def remember(self, path: Path, record: ArrayRecord) -> None:
        """Note that ``record`` was published at ``path``."""
        self._by_path[str(path)] = record
        self._by_key[(record.name, record.version)] = record

    def files(self) -> Iterator[Path]:
        """Every array record file on disk (the truth the catalog indexes)."""
        return self.layout.array_files()

    def load(self, path: Path) -> ArrayRecord:
        """The array record in file ``path`` (a JSON record or a linked segment).

        Raises:
            FileNotFoundError: there is no such file.
            LineageCorruptError: it is damaged (noted in :attr:`damage`).
            SchemaVersionError: it is too new.
        """
        key = str(path)
        known = self._by_path.get(key)
        if known is not None:
            return known
        try:
            if path.name.endswith(LINK_SUFFIX):
                rec, verified = self._load_link(path)
            else:
                rec, verified = load_record(path, "Array", self._parse)
        except LineageCorruptError as e:
            self.damage.note(self._rel(path), str(e))
            raise
        if not verified:
            self.damage.unverified.add(self._rel(path))
        self._by_path[key] = rec
        return rec

    @staticmethod
    def _parse(d: Mapping[str, Any]) -> ArrayRecord:
        return ArrayRecord.from_json(d)

    def _rel(self, path: Path) -> str:
        try:
            return self.layout.rel(path)
        except ValueError:
            return str(path)

    def _load_link(self, path: Path) -> tuple[ArrayRecord, bool]:
        """The array record inside the operation segment linked at ``path``: the output
        whose directory and version file names are ``path``'s."""
        # A missing record is the common case (every new output is looked up before it is
        # registered): a stat says so in microseconds, pyarrow's open in ~0.2 ms.
        os.stat(path)
        with segment.Segment(path) as seg:
            records = seg.records()
            if seg.bad_rows:
                msg = next(iter(seg.bad_rows.values()))
                raise LineageCorruptError(msg, path)
            verified = seg.verified
        rel = self.layout.rel(path)
        for op_id, text in records:
            rec = parse_operation(text, self.layout.root / rel, rel, op_id)
            for out in rec.outputs:
                if (
                    array_dir_name(out.name) == path.parent.name
                    and link_file_name(out.version) == path.name
                ):
                    return out, verified
        msg = f"Array record `{path}` is damaged: its operation lists no such output. {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path)

    def versions_of(self, name: str) -> list[ArrayRecord]:
        """Every registered version of array ``name``."""
        directory = self.layout.array_dir(name)
        try:
            names = record_files(os.listdir(directory))
        except FileNotFoundError:
            return []
        out = []
        for f in names:
            rec = self.load(directory / f)
            if rec.name == name:
                out.append(rec)
        return out

    def all_from_files(self) -> list[ArrayRecord]:
        """Every readable array record on disk (damaged ones are noted in :attr:`damage`)."""
        out = []
        for path in self.files():
            with contextlib.suppress(FileNotFoundError, LineageStorageError):
                out.append(self.load(path))
        return out

    def existing(self, record: ArrayRecord) -> ArrayRecord | None:
        """The stored record of ``record``'s ``(name, version)`` if any (JSON or segment
        record).

        Raises:
            InvalidRelationError: its shape differs from ``record``'s.
        """
        existing = self._by_key.get((record.name, record.version))
        if existing is None:
            directory = self.layout.array_dir(record.name)
            for fname in (version_file_name(record.version), link_file_name(record.version)):
                try:
                    existing = self.load(directory / fname)
                except FileNotFoundError:
                    continue
                break
            if existing is None:
                return None
            self._by_key[(record.name, record.version)] = existing
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

    def publish(self, record: ArrayRecord) -> tuple[ArrayRecord, Path | None]:
        """Write ``record`` as its version's JSON record, unless another writer was first.

        Returns:
            The stored record and the file written, or the other writer's record and ``None``.

        Raises:
            LineageStorageError: the record could not be written.
        """
        directory = self.layout.array_dir(record.name)
        final = directory / version_file_name(record.version)
        data = record_json(record.to_json())
        try:
            directory.mkdir(parents=True, exist_ok=True)
            published = files.publish_once(final, data, self.durable, self.layout.staging_dir)
        except OSError as e:
            doing = f"write the record of array `{record.name}` (`{final}`)"
            raise storage_error(e, doing, self.layout.root) from e
        if not published:
            existing = self.existing(record)
            assert existing is not None  # publish_once failed because the file exists
            return existing, None
        if self.committer is not None:
            self.committer.add([final], [directory])
        self.remember(final, record)
        return record, final

    def find(self, name: str, version: str | None = None) -> ArrayRecord:
        """The record of array ``name``: of ``version``, or the latest registered when ``None``.

        Raises:
            LineageNotFoundError: no such array/version (the message lists close names).
        """
        if version is not None and isinstance(name, str) and isinstance(version, str):
            known = self._by_key.get((name, version))
            if known is not None:
                return known
        name = check_name(name, "Array name")
        if version is not None:
            version = check_name(version, f"Version of array `{name}`")
            # the version's two possible record files, not a listing of every version (an
            # asset gains a version per run: a tracked step resolves its inputs this way)
            directory = self.layout.array_dir(name)
            for fname in (version_file_name(version), link_file_name(version)):
                try:
                    rec = self.load(directory / fname)
                except FileNotFoundError:
                    continue
                if rec.name == name and rec.version == version:
                    self._by_key[(name, version)] = rec
                    return rec
        versions = self.versions_of(name)
        if version is not None:
            for rec in versions:
                if rec.version == version:
                    return rec
        elif versions:
            return max(versions, key=lambda r: (r.created_at, r.version or ""))
        root = self.layout.root
        if versions:
            have = ", ".join(f"`{r.version}`" for r in versions)
            msg = (
                f"Array `{name}` has no version `{version}` in the store at `{root}`; "
                f"registered versions: {have}. Register it with `store.register_array(...)`."
            )
            raise LineageNotFoundError(msg)
        names = sorted({r.name for r in self.all_from_files()})
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(f'`{c}`' for c in close)}?" if close else ""
        msg = (
            f"No array `{name}` in the store at `{root}`.{hint} "
            "Register it with `store.register_array(name, shape)` first."
        )
        raise LineageNotFoundError(msg)

    def link_into(self, tmp: Path, directory: Path, name: str) -> None:
        """Hard-link ``tmp`` as ``directory / name``, making the directory when it is missing.

        The directories an array's versions are linked into are remembered per handle, so a
        step served from a view (a new version of the same array on every run) links without
        a ``mkdir`` first; a directory removed meanwhile makes the link fail with
        ``FileNotFoundError``, and it is made again then.
        """
        key = str(directory)
        if key not in self._dirs:
            directory.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tmp, directory / name)
        except FileNotFoundError:
            if key not in self._dirs:
                raise  # the directory was just made: the staged file itself is missing
            directory.mkdir(parents=True, exist_ok=True)
            os.link(tmp, directory / name)
        self._dirs.add(key)

    def resolve(self, a: "str | ArrayRecord", role: str, op_name: str) -> ArrayRecord:
        """The stored record of an operation's ``role`` (input/output) array ``a``.

        Raises:
            LineageNotFoundError: not registered. InvalidRelationError: another shape, or
                not an array at all.
        """
        if isinstance(a, ArrayRecord):
            try:
                stored = self.find(a.name, a.version)
            except LineageNotFoundError as e:
                msg = (
                    f"{role} array `{a.name}` of operation `{op_name}` is not registered in the "
                    f"store at `{self.layout.root}`; call `store.register_array(...)` first."
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
            return self.find(a)
        msg = (
            f"{role} arrays of operation `{op_name}` must be names or ArrayRecords, "
            f"got `{type(a).__name__}`."
        )
        raise InvalidRelationError(msg)

    def operation_arrays(
        self,
        op_name: str,
        inputs: "Sequence[str | ArrayRecord]",
        outputs: "Sequence[str | ArrayRecord | NewArray]",
    ) -> tuple[tuple[ArrayRecord, ...], tuple[ArrayRecord, ...], tuple[ArrayRecord, ...]]:
        """The records of an operation's inputs and outputs, and of the outputs it registers
        (:class:`NewArray` not registered yet), each array listed once."""
        single = str | ArrayRecord | NewArray
        if isinstance(inputs, single) or isinstance(outputs, single):
            msg = f"Operation `{op_name}`: `inputs` and `outputs` must be sequences of arrays."
            raise InvalidRelationError(msg)
        ins = tuple(self.resolve(a, "Input", op_name) for a in inputs)
        new_outs: list[ArrayRecord] = []

        def output(a: "str | ArrayRecord | NewArray") -> ArrayRecord:
            if not isinstance(a, NewArray):
                return self.resolve(a, "Output", op_name)
            rec = array_record(a)
            existing = self.existing(rec)
            if existing is not None:
                return existing
            new_outs.append(rec)
            return rec

        outs = tuple(output(a) for a in outputs)
        check_no_self_loop(op_name, ins, outs)
        for role, recs in (("input", ins), ("output", outs)):
            names = [r.name for r in recs]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                msg = (
                    f"Operation `{op_name}` lists {role} array(s) {dups} more than once; "
                    "lineage is keyed by array name, so list each array once."
                )
                raise InvalidRelationError(msg)
        return ins, outs, tuple(new_outs)
