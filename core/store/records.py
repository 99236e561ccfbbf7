"""The records of a lineage store: arrays, operations and their tables, as JSON.

An array record is the node type of the lineage graph; an operation record names its input
and output arrays, its arguments and timings and one table record per stored lineage table.
Records are immutable once written: every field that may change when the store reorganises
its files (which segment holds an operation) is kept out of their JSON form.

Also here: the validation of what users name and pass (names, arguments, timings), so that a
record that is built is always one that can be stored, and the version check of a record
read back.
"""

import hashlib
import json
import math
import reprlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np

from dslog_dagster.core.format.checksum import json_checksum
from dslog_dagster.core.format.segment import CHECKED_MINOR, SEGMENT_SCHEMA_VERSION
from dslog_dagster.core.relation import Shape, as_shape
from dslog_dagster.core.store.char_records import StoredCharacters
from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.errors import (
    InvalidRelationError,
    LineageCorruptError,
    LineageNotFoundError,
    SchemaVersionError,
    UnsupportedArrayError,
)

_R = TypeVar("_R")

STORE_SCHEMA_VERSION = SEGMENT_SCHEMA_VERSION
"""Store format version: in every segment's metadata, operation record and array record."""

FIX_DAMAGE = (
    "Run `dslog fsck STORE --quarantine` to move damaged files aside (the rest of the store "
    "stays usable) and `dslog rebuild-catalog STORE`."
)
"""What a message about a damaged file tells the user to do."""

TIMING_COMPRESS = "compress_s"
"""Timing key: seconds the store spent compressing an operation's relations."""
TIMING_ENCODE = "encode_s"
"""Timing key: seconds the store spent encoding an operation's tables."""


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
        columns: a frame's schema, ``(column name, dtype)`` per column (pandas and Spark
            frames); ``None`` for an array. Stored only when set, so records without it (and
            readers that predate it) are unchanged.
    """

    name: str
    shape: Shape
    dtype: str
    asset_key: str | None
    version: str | None
    array_id: str
    created_at: datetime = field(compare=False)
    columns: tuple[tuple[str, str], ...] | None = field(default=None, compare=False)

    @property
    def column_names(self) -> list[str] | None:
        """A frame's column names, in order (``None``: an array, or a frame stored without
        its schema)."""
        return None if self.columns is None else [c[0] for c in self.columns]

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in array record files and in operation records."""
        d: dict[str, Any] = {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "asset_key": self.asset_key,
            "version": self.version,
            "array_id": self.array_id,
            "created_at": self.created_at.isoformat(),
        }
        if self.columns is not None:
            d["columns"] = [list(c) for c in self.columns]
        return d

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
            columns=_columns(d.get("columns")),
        )


def _columns(v: Any) -> tuple[tuple[str, str], ...] | None:
    """A stored schema, or ``None`` (an array, or a record written before schemas)."""
    if v is None:
        return None
    return tuple((str(n), str(t)) for n, t in v)


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
    #: a frame's schema, ``(column name, dtype)`` per column
    columns: Sequence[tuple[str, str]] | None = None


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
    #: character-range lineage (its tables are blobs after the cell tables), or None
    characters: StoredCharacters | None = None
    #: DPDS operation kinds and column effects (:mod:`~dslog_dagster.core.store.effects`);
    #: ``None``: not recorded (read as ``"unknown"``)
    effects: OperationEffects | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The operation's DPDS kinds; ``("unknown",)`` when its capture recorded none."""
        return ("unknown",) if self.effects is None else self.effects.kinds

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
            **({"characters": self.characters.to_json()} if self.characters else {}),
            **({"effects": self.effects.to_json()} if self.effects is not None else {}),
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
            characters=StoredCharacters.from_json(d.get("characters")),
            effects=OperationEffects.from_json(d.get("effects")),
        )


def check_name(name: object, what: str) -> str:
    """``name`` if it is a non-empty string without NUL (``what`` names it in the message).

    Raises:
        InvalidRelationError: it is not.
    """
    if not isinstance(name, str):
        msg = f"{what} must be a string, got `{type(name).__name__}` ({reprlib.repr(name)})."
        raise InvalidRelationError(msg)
    if not name or "\x00" in name:
        msg = f"{what} `{name!r}` is empty or contains a NUL character; pass a non-empty name."
        raise InvalidRelationError(msg)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        msg = (
            f"{what} {name!r} is not valid Unicode text (it holds a lone surrogate, as "
            "`os.fsdecode` makes of bytes that are not UTF-8), so the catalog cannot store it; "
            "pass a name of valid characters (e.g. decode the bytes with errors='replace')."
        )
        raise InvalidRelationError(msg) from e
    return name


def dtype_name(dtype: object, what: str) -> str:
    """The NumPy name of ``dtype`` (anything :class:`numpy.dtype` accepts) for ``what``.

    Raises:
        UnsupportedArrayError: NumPy does not understand it.
    """
    try:
        return np.dtype(dtype).name  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError, SyntaxError, RecursionError) as e:
        msg = (
            f"{what} has dtype `{reprlib.repr(dtype)}`, which NumPy does not understand; "
            'pass a NumPy dtype or its name, e.g. `"float64"`.'
        )
        raise UnsupportedArrayError(msg) from e


def check_no_self_loop(
    op_name: str, ins: Sequence[ArrayRecord], outs: Sequence[ArrayRecord]
) -> None:
    """Refuse an operation that writes one of its own inputs (same name and version).

    Raises:
        InvalidRelationError: it does.
    """
    read = {r.array_id for r in ins}
    for r in outs:
        if r.array_id in read:
            v = "the default version" if r.version is None else f"version `{r.version}`"
            msg = (
                f"Operation `{op_name}` writes array `{r.name}` ({v}), which it also reads: an "
                "array version is immutable, so an operation cannot produce its own input. "
                "Register the result as a new version (`NewArray(name, shape, version=...)`) "
                "or under another name."
            )
            raise InvalidRelationError(msg)


def array_id(name: str, version: str | None) -> str:
    """The stable id of array ``(name, version)``: the same in every process."""
    return hashlib.sha256(json.dumps([name, version]).encode()).hexdigest()[:16]


def now() -> tuple[int, datetime]:
    """The current time as nanoseconds since the epoch and as a UTC datetime (microseconds)."""
    ns = time.time_ns()
    return ns, datetime.fromtimestamp(ns // 1000 / 1e6, UTC).replace(microsecond=ns // 1000 % 10**6)


def array_record(spec: "NewArray") -> ArrayRecord:
    """The record ``register_array`` would write for ``spec`` (validated, not written).

    Raises:
        InvalidRelationError: a bad name or version.
        UnsupportedArrayError: ``shape`` or ``dtype`` is not understood.
    """
    name = check_name(spec.name, "Array name")
    version = spec.version
    if version is not None:
        version = check_name(version, f"Version of array `{name}`")
    shp = as_shape(spec.shape, f"Array `{name}`")
    dt = dtype_name(spec.dtype, f"Array `{name}`")
    _, created = now()
    key = _normalise_asset_key(spec.asset_key, name)
    cols = None
    if spec.columns is not None:
        cols = tuple((str(n), str(t)) for n, t in spec.columns)
        if len(shp) != 2 or len(cols) != shp[1]:
            msg = f"Array `{name}` has {len(cols)} schema columns for shape {shp}."
            raise InvalidRelationError(msg)
    return ArrayRecord(name, shp, dt, key, version, array_id(name, version), created, cols)


ARGS_MAX_DEPTH = 64
"""Deepest nesting of lists and dicts in an operation's ``args`` (deeper is refused up front,
before it can exhaust Python's recursion limit in the JSON encoder or a reader)."""


def _args_value(op_name: str, v: Any, where: str, depth: int) -> Any:
    """``v`` (the value at ``where`` in an operation's args) as stored JSON.

    Raises:
        InvalidRelationError: a value JSON cannot hold as it is, a key that is not a string,
            or nesting deeper than :data:`ARGS_MAX_DEPTH`.
    """
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            why = f"{reprlib.repr(v)} is not finite; JSON has no NaN or infinity"
            _refuse_args(op_name, where, why)
        return float(v)
    if isinstance(v, np.generic) and not isinstance(v, np.object_):
        return _args_value(op_name, v.item(), where, depth)
    if depth >= ARGS_MAX_DEPTH:
        _refuse_args(op_name, where, f"it nests deeper than {ARGS_MAX_DEPTH} levels")
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "biuf" and (v.dtype.kind != "f" or bool(np.isfinite(v).all())):
            return v.tolist()  # plain numbers all the way down: nothing else to check
        return _args_value(op_name, v.tolist(), where, depth)
    if isinstance(v, Mapping):
        out = {}
        for k, x in sorted(v.items(), key=lambda kv: str(kv[0])):
            if not isinstance(k, str):
                why = (
                    f"its key {reprlib.repr(k)} is a `{type(k).__name__}`, not a string; "
                    "JSON would turn "
                    f"it into {json.dumps(str(k))}, so it would not read back as given"
                )
                _refuse_args(op_name, where, why)
            out[k] = _args_value(op_name, x, f"{where}[{reprlib.repr(k)}]", depth + 1)
        return out
    if isinstance(v, list | tuple | set | frozenset):
        return [_args_value(op_name, x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
    _refuse_args(op_name, where, f"a value of type `{type(v).__name__}` is not JSON")


def _refuse_args(op_name: str, where: str, why: str) -> NoReturn:
    msg = (
        f"Operation `{op_name}` args cannot be stored: at `{where}`, {why}. Pass strings, "
        "finite numbers, booleans, None, lists and dicts with string keys (NumPy scalars and "
        f"arrays are fine), nested at most {ARGS_MAX_DEPTH} deep."
    )
    raise InvalidRelationError(msg)


def normalise_args(op_name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``args`` as stored: JSON values only (NumPy scalars and arrays converted, tuples and
    sets as lists, keys sorted). Every key must be a string: keys are kept as given or
    refused, never converted.

    Raises:
        InvalidRelationError: not a mapping, or not storable as JSON as it is.
    """
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        msg = f"Operation `{op_name}` args must be a mapping, got `{type(args).__name__}`."
        raise InvalidRelationError(msg)
    out: dict[str, Any] = _args_value(op_name, args, "args", 0)
    return out


def normalise_timings(op_name: str, timings: Mapping[str, float] | None) -> dict[str, float]:
    """``timings`` as stored: string keys, finite seconds.

    Raises:
        InvalidRelationError: a key or value that is not.
    """
    out: dict[str, float] = {}
    for k, v in (timings or {}).items():
        try:
            fv = float(v)
        except (TypeError, ValueError):
            fv = math.nan
        if not isinstance(k, str) or not math.isfinite(fv):
            msg = (
                f"Operation `{op_name}` timing `{reprlib.repr(k)}` = {reprlib.repr(v)} is not "
                "a finite number of seconds."
            )
            raise InvalidRelationError(msg)
        out[k] = fv
    return out


def _normalise_asset_key(asset_key: object, name: str) -> str | None:
    """``asset_key`` as stored: ``"a/b"`` for ``"a/b"`` or ``["a", "b"]``.

    Raises:
        InvalidRelationError: neither a string nor a sequence of strings, or empty.
    """
    if asset_key is None:
        return None
    what = f"Asset key of array `{name}`"
    if isinstance(asset_key, str):
        return check_name(asset_key, what)
    parts = getattr(asset_key, "path", asset_key)  # a Dagster AssetKey
    if isinstance(parts, Sequence) and parts and all(isinstance(p, str) and p for p in parts):
        return check_name("/".join(parts), what)
    msg = (
        f'{what} must be a string (`"a/b"`) or a non-empty sequence of non-empty strings '
        f'(`["a", "b"]`), got `{reprlib.repr(asset_key)}`.'
    )
    raise InvalidRelationError(msg)


def check_version(d: Mapping[str, Any], path: Path) -> bool:
    """Refuse a record ``d`` (read from ``path``) written with another major store format;
    returns whether its format carries checksums (``2-2`` and later).

    Raises:
        SchemaVersionError: another major format.
        LineageCorruptError: the version is not a version at all.
    """
    version = str(d.get("schema_version", ""))
    parts = version.split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        msg = f"`{path}` is damaged: its format version `{version}` is garbled. {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path)
    if parts[0] != STORE_SCHEMA_VERSION.split("-")[0]:
        msg = (
            f"`{path}` was written with store format `{version or 'unknown'}`; this dslog reads "
            f"{STORE_SCHEMA_VERSION.split('-')[0]}-x-x. Upgrade dslog-dagster to read it."
        )
        raise SchemaVersionError(msg)
    return int(parts[1]) >= CHECKED_MINOR


def record_json(fields: Mapping[str, Any]) -> bytes:
    """The bytes of a JSON record file with ``fields`` (its format version and checksum
    added)."""
    d = {"schema_version": STORE_SCHEMA_VERSION, **fields}
    d["checksum"] = json_checksum(d)
    return json.dumps(d, indent=1).encode()


def load_record(path: Path, what: str, parse: Callable[[Mapping[str, Any]], _R]) -> tuple[_R, bool]:
    """Read, check and parse one JSON record; returns it and whether it was verified (files
    of formats before ``2-2`` have no checksum). ``FileNotFoundError`` propagates so the
    caller can say what is missing in its own terms.

    Raises:
        LineageCorruptError: unreadable, failing its checksum, or not a record.
        SchemaVersionError: written with another major store format.
    """
    try:
        d = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        msg = f"{what} record `{path}` is damaged (unreadable: {e}). {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path) from e
    if not isinstance(d, dict):
        msg = f"{what} record `{path}` is damaged (not a JSON object). {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path)
    checked = check_version(d, path)
    if checked != ("checksum" in d) or (checked and d["checksum"] != json_checksum(d)):
        msg = f"{what} record `{path}` is damaged: it does not match its checksum. {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path)
    try:
        return parse(d), checked
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        msg = f"{what} record `{path}` is damaged ({e!r}). {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path) from e


def parse_operation(text: str, path: Path, rel: str, op_id: str | None = None) -> OperationRecord:
    """The operation record in JSON ``text``, read from segment ``rel`` (at ``path``) as the
    record of ``op_id`` when given.

    Raises:
        LineageCorruptError: unreadable, damaged, or the record of another operation.
        SchemaVersionError: written with another major store format.
    """
    try:
        d = json.loads(text)
    except ValueError as e:
        msg = f"Operation record in `{path}` is damaged (unreadable: {e}). {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path) from e
    if not isinstance(d, dict):
        msg = f"Operation record in `{path}` is damaged (not a JSON object). {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path)
    check_version(d, path)
    try:
        rec = OperationRecord.from_json(d, rel)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        msg = f"Operation record in `{path}` is damaged ({e!r}). {FIX_DAMAGE}"
        raise LineageCorruptError(msg, path) from e
    if op_id is not None and rec.op_id != op_id:
        msg = (
            f"Operation record in `{path}` is damaged: it names operation `{rec.op_id}`, "
            f"stored as `{op_id}`. {FIX_DAMAGE}"
        )
        raise LineageCorruptError(msg, path)
    return rec
