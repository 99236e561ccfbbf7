"""The provenance-view registry: predict, confirm, serve and verify reusable lineage.

**Keys** (:mod:`.signatures`): every call of an operation has a *dim* key (code identity,
mode, relevant arguments, input shapes), a *gen* key (the same with the shape class instead of
the shapes) and, for operations whose dim key turned out to be data-dependent, a *base* key
(the input contents). A key maps to one view file ``<store>/views/<signature>.json``; lookup is
one dict access (plus one file read the first time a key is seen), so it does not depend on
the number of views.

**Prediction** (ICDE VI-C, thesis 5.2.3). After a capture the registry records a *candidate*
under each key. Each further capture with the same key is compared with it: ``m`` matches
(``ReusePolicy.confirm_after``, default 2) confirm the view; one mismatch marks the key
non-reusable for good (a ``<signature>.dead`` marker that is only ever created, so no process
can resurrect the view). A gen candidate must *predict* captures at ``m`` shapes it has not
seen (it is re-fitted when a new shape contradicts it). Before a view is confirmed it is
probed with synthetic inputs of the same shape (ascending and descending ramps, opposite
ramps on different inputs, a sign-crossing ramp, random values, large positive and negative
values, a ramp a million times wider than the data, the unit interval, values repeated from
three levels, a constant, zeros): data-dependent
lineage
(sort, filters, picks by comparison, ``where`` on a data mask) differs between them even
when the user's own captures happened to agree. A view whose lineage only differs on NaN
inputs is confirmed as *finite-only* and not served for inputs with NaNs; calls with NaN
inputs are captured and not learnt from. Likewise a view whose lineage changes only where an
input is exactly 0 (``sinc``) is *nonzero-only*.

**Two relations** (``mode="considered"``). A considered-mode capture is learnt under two key
families: views of both relations (serving ``need="all"``) and views of the considered
relation alone (key mode ``considered-only``, serving ``need="considered"``). A pick by
comparison or a sort has a data-dependent contributing relation but a shape-determined
considered one (both operands, the whole lane), so only the second family confirms for it;
probes and verification then compare that relation alone.

**Serving** (:meth:`ViewRegistry.run`, used by ``capture(..., reuse=registry)``): base, then
dim, then gen. The function runs on plain float64 inputs, the lineage comes from the view. A
view is verified (:func:`~dslog_dagster.core.verification.verify_sample`) before it is trusted
for a call whose exact shapes and argument values it has not been checked on, and afterwards on
a random sample of calls (``rate``) within a time ``budget``. A failed check demotes the view,
issues :class:`~dslog_dagster.errors.ViewMismatchWarning` and captures the call instead.

**Irrelevant arguments** (thesis 5.2.4): when confirmed dim views at the same shapes differ in
one argument only and have equal lineage ``irrelevant_after`` times (and never differ), the
argument is dropped from the operation's keys; existing views are aliased under the shorter
key and re-verified on first use.

**Concurrency.** View files are written atomically (temp file + rename): a reader sees a whole
old or a whole new view, never a torn one. Two processes updating one candidate race
last-writer-wins, which can only delay a confirmation; the non-reusable markers are
create-only, so a demotion is never lost.
"""

import atexit
import base64
import contextlib
import json
import logging
import os
import time
import types
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

import dslog_dagster.core.signatures as sigs
from dslog_dagster.core.capture import (
    CaptureResult,
    LazyRelations,
    Mode,
    Need,
    OnLost,
    UnservedRelations,
    _func_name,
    _outputs,
    _plain_value,
    capture_inputs,
    check_need,
)
from dslog_dagster.core.compression import compress
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.format.table_file import atomic_write_bytes
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation, Shape
from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.verification import verify_sample
from dslog_dagster.core.views import GenTemplate, TableKey, fit, table_sets_equal
from dslog_dagster.errors import ReuseError, ViewMismatchWarning

__all__ = ["DeclaredHit", "ReusePolicy", "ViewInfo", "ViewRegistry"]

logger = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
Kind = Literal["base", "dim", "gen"]
Status = Literal["candidate", "confirmed", "non_reusable"]
VIEW_SCHEMA_VERSION = 1
# Instantiated gen tables kept per view (by shape), and verified exact keys kept per view.
_INSTANCE_CACHE = 64
_VERIFIED_KEEP = 256
_OUT_SHAPE_MEMO = 65536


@dataclass(frozen=True, slots=True)
class ReusePolicy:
    """How eagerly views are confirmed and how often they are checked.

    Attributes:
        confirm_after: ``m``: further matching captures that confirm a dim/gen candidate
            (gen: at ``m`` shapes the candidate had not seen; ICDE uses 1, the thesis 2).
        base_confirm_after: the same for exact-input (base) views; the same input through the
            same code gives the same lineage unless the code is non-deterministic.
        base / dim / gen: which kinds of views are recorded and served.
        probe: run synthetic-input probes before confirming a view (strongly recommended:
            two captures of a data-dependent op can agree by chance).
        verify_new: verify a view before serving it for exact shapes/arguments it was not
            checked on (a new shape for gen, a new value of an irrelevant argument).
        rate: probability that a hit on an already-checked shape is verified again.
        budget: seconds per registry instance that sampled (``rate``) verifications may
            take; new-shape verifications are not limited by it.
        literal_below: extents below this stay literal in shape classes (1, 2, 3 by default:
            broadcasting axes and ``cross``'s 2- and 3-vectors are never generalised).
        irrelevant_after: equal-lineage pairs that make an argument irrelevant.
        max_observations: captures kept per gen candidate for re-fitting (a template needs
            ``p + 1`` affinely independent shapes for ``p`` symbols before it may predict).
        flush_interval: seconds between writes of a served view's hit counter (also on
            :meth:`ViewRegistry.flush` and at exit).
        seed: seed of the registry's random choices (sampling, probes), None for fresh.
    """

    confirm_after: int = 2
    base_confirm_after: int = 1
    base: bool = True
    dim: bool = True
    gen: bool = True
    probe: bool = True
    verify_new: bool = True
    rate: float = 0.05
    budget: float = 2.0
    literal_below: int = 4
    irrelevant_after: int = 2
    max_observations: int = 8
    flush_interval: float = 10.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.confirm_after < 0 or self.base_confirm_after < 0:
            msg = "`confirm_after` and `base_confirm_after` must be >= 0."
            raise ValueError(msg)
        if not 0.0 <= self.rate <= 1.0:
            msg = f"`rate` must be within [0, 1], got {self.rate}."
            raise ValueError(msg)
        if self.literal_below < 2:
            msg = (
                "`literal_below` must be at least 2 (extent 1 is always literal), "
                f"got {self.literal_below}."
            )
            raise ValueError(msg)


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

    def as_dict(self) -> dict[str, Any]:
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
        }


@dataclass(frozen=True, slots=True)
class DeclaredHit:
    """A view found for a declared operation (``DSLog.register_operation(reuse=...)``)."""

    kind: Kind
    signature: str
    tables: Mapping[TableKey, LineageTable]
    needs_check: bool
    exact_key: str


# --------------------------------------------------------------------------- views


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
class _View:
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
    # Irrelevant-argument bookkeeping (dim views): code/mode/shape group and argument tokens.
    group: str = ""
    owner: str = ""  # digest of (code identity, mode): whose arguments these are
    arg_tokens: dict[str, str] = field(default_factory=dict)
    unflushed: int = 0
    saved_at: float = field(default_factory=time.monotonic)
    instances: "OrderedDict[Any, dict[TableKey, LineageTable]]" = field(default_factory=OrderedDict)
    encoded: dict[str, str] | None = None

    def info(self) -> ViewInfo:
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
        )

    def to_json(self) -> dict[str, Any]:
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
            "group": self.group,
            "owner": self.owner,
            "arg_tokens": self.arg_tokens,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], source: str) -> "_View":
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
            group=str(d.get("group", "")),
            owner=str(d.get("owner", "")),
            arg_tokens={str(k): str(x) for k, x in d.get("arg_tokens", {}).items()},
        )
        v.encoded = dict(d["tables"])
        return v


@dataclass
class _Call:
    """What the registry needs to know about one call."""

    op: str
    code: str
    mode: str
    args: Mapping[str, Any]
    arg_tokens: dict[str, str]
    in_shapes: list[Shape]
    # Identity of the input data for base keys; None when it is unknown.
    contents: Callable[[], list[str] | None]
    fast_key: Any = field(default=None, init=False)

    def token(self, drop: frozenset[str]) -> str:
        return (
            "{"
            + ",".join(
                f"{k}={self.arg_tokens[k]}" for k in sorted(self.arg_tokens) if k not in drop
            )
            + "}"
        )

    @property
    def exact_key(self) -> str:
        return _dim_sig_cached(self.code, self.mode, self.token(frozenset()), self.in_shapes)


_SIG_CACHE: "OrderedDict[tuple[str, str, str, tuple[Shape, ...]], str]" = OrderedDict()


def _dim_sig_cached(code: str, mode: str, tok: str, shapes: Sequence[Shape]) -> str:
    """:func:`~dslog_dagster.core.signatures.dim_sig`, memoised (hashing is most of a hit)."""
    key = (code, mode, tok, tuple(shapes))
    sig = _SIG_CACHE.get(key)
    if sig is None:
        sig = _SIG_CACHE[key] = str(sigs.dim_sig(code, mode, tok, shapes))
        if len(_SIG_CACHE) > _OUT_SHAPE_MEMO:
            _SIG_CACHE.popitem(last=False)
    return sig


_SIMPLE = (int, str, bool, type(None))


def _simple_key(v: Any, depth: int = 0) -> Any:
    """A hashable, type-exact key of an argument value, or raise TypeError if not simple."""
    if isinstance(v, _SIMPLE) and not isinstance(v, np.generic):
        return (type(v), v)
    if isinstance(v, tuple) and depth < 4:
        return (tuple, tuple(_simple_key(x, depth + 1) for x in v))
    raise TypeError


def _fast_key(
    func: Callable[..., Any],
    mode: str,
    code_version: str | None,
    kwargs: Mapping[str, Any],
    inputs: Sequence[F64],
) -> Any:
    """Key of the repeat-hit cache: the function object itself (so its code identity cannot
    have changed), type-exact simple arguments and the input shapes; None when the call does
    not qualify (closures, mutable or float arguments, ...)."""
    if isinstance(func, types.FunctionType):
        if func.__closure__ is not None or func.__kwdefaults__:
            return None
        helpers = tuple(g.__code__ for g in sigs.helper_functions(func))
        extra: Any = (func.__code__, func.__defaults__, helpers)
    elif isinstance(func, np.ufunc | types.BuiltinFunctionType):
        extra = None
    else:
        return None
    try:
        kw = tuple([(k, _simple_key(v)) for k, v in sorted(kwargs.items())]) if kwargs else ()
        key = (func, extra, mode, code_version, kw, tuple([a.shape for a in inputs]))
        hash(key)
    except TypeError:
        return None
    return key


#: The relations (0 contributing, 1 considered) a view of each key mode holds. A
#: ``considered-only`` view is learnt from ``mode="considered"`` captures and serves
#: ``need="considered"`` calls: it holds the considered relation alone.
_PARTS: dict[str, tuple[int, ...]] = {
    "contributing": (0,),
    "considered": (0, 1),
    "considered-only": (1,),
}
CONSIDERED_ONLY = "considered-only"


def _annotator_mode(key_mode: str) -> Mode:
    """The annotator mode that produces the relations of a view's key mode."""
    return "contributing" if key_mode == "contributing" else "considered"


def _only_parts(
    tables: Mapping[TableKey, LineageTable], parts: Sequence[int]
) -> dict[TableKey, LineageTable]:
    return {k: t for k, t in tables.items() if k[0] in parts}


@dataclass(frozen=True, slots=True)
class _Served:
    """What a served call returns besides its values (built once per view and shape)."""

    relations: Mapping[tuple[int, int], LineageRelation]
    considered: LazyRelations | None
    tables: dict[tuple[int, int], LineageTable] | None

    @classmethod
    def of(cls, key_mode: str, tables: Mapping[TableKey, LineageTable]) -> "_Served":
        contributing = _contributing(tables)
        considered = _considered(tables) if key_mode != "contributing" else None
        if key_mode == CONSIDERED_ONLY:
            assert considered is not None
            return cls(UnservedRelations(sorted(considered)), LazyRelations(considered), None)
        return cls(
            LazyRelations(contributing),
            LazyRelations(considered) if considered is not None else None,
            contributing,
        )


@dataclass(frozen=True, slots=True)
class _Fast:
    kind: Kind
    signature: str
    view: "_View"
    out_shapes: tuple[Shape, ...]
    exact: str
    tables: dict[TableKey, LineageTable]
    call: _Call
    arg_version: int
    served: _Served


def _shapes(arrays: Sequence[Any]) -> list[Shape]:
    return [tuple(int(d) for d in np.shape(a)) for a in arrays]


def _compress_all(
    relations: Mapping[tuple[int, int], LineageRelation],
    considered: Mapping[tuple[int, int], LineageRelation] | None,
) -> dict[TableKey, LineageTable]:
    out: dict[TableKey, LineageTable] = {}
    for (o, i), rel in relations.items():
        out[(0, o, i)] = compress(rel)
    for (o, i), rel in (considered or {}).items():
        out[(1, o, i)] = compress(rel)
    return out


def _contributing(tables: Mapping[TableKey, LineageTable]) -> dict[tuple[int, int], LineageTable]:
    return {(o, i): t for (w, o, i), t in tables.items() if w == 0}


def _considered(tables: Mapping[TableKey, LineageTable]) -> dict[tuple[int, int], LineageTable]:
    return {(o, i): t for (w, o, i), t in tables.items() if w == 1}


def _run_plain(
    func: Callable[..., Any], inputs: Sequence[F64], kwargs: Mapping[str, Any]
) -> tuple[Any, list[F64]] | None:
    """``func`` on plain float64 inputs: (value as capture returns it, outputs), or None when
    an output is not numeric (such a call is never served)."""
    return _run_plain_result(func(*inputs, **kwargs))


def _run_plain_result(result: Any) -> tuple[Any, list[F64]] | None:
    outs, is_tuple = _outputs(result)
    plain: list[F64] = []
    for o in outs:
        arr = o if isinstance(o, np.ndarray) else np.asarray(o)
        if arr.dtype.kind not in "fiub":
            return None
        plain.append(arr if arr.dtype == np.float64 else arr.astype(np.float64))
    return _plain_value(plain, outs, is_tuple), plain


def _full_rank(values: Sequence[tuple[int, ...]]) -> bool:
    """Do the input-symbol vectors span every direction (affinely), so that an affine
    template is pinned down? Output extents are functions of the input extents (the function
    is deterministic), so only the input symbols need to vary independently."""
    if not values:
        return False
    p = len(values[0])
    mat = np.asarray([[1, *v] for v in values], dtype=np.float64)
    return bool(np.linalg.matrix_rank(mat) == p + 1)


def _probe_inputs(inputs: Sequence[F64], rng: np.random.Generator) -> list[tuple[str, list[F64]]]:
    """Synthetic inputs of the same shapes that expose data-dependent lineage."""
    finite = [a[np.isfinite(a)] for a in inputs]
    vals = np.concatenate([f.reshape(-1) for f in finite]) if finite else np.zeros(0)
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (-1.0, 1.0)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    wide = max(abs(lo), abs(hi), 1.0) * 2.0
    levels = np.array([lo, (lo + hi) / 2.0, hi])

    def ramp(a: F64, up: bool, a_lo: float, a_hi: float) -> F64:
        r = np.linspace(a_lo, a_hi, a.size) if a.size else np.zeros(0)
        r = r if up else r[::-1]
        return np.array(r.reshape(a.shape), dtype=np.float64, order="C")  # keeps 0-d

    probes = [
        ("ascending", [ramp(a, True, lo, hi) for a in inputs]),
        ("descending", [ramp(a, False, lo, hi) for a in inputs]),
        ("opposite", [ramp(a, k % 2 == 0, lo, hi) for k, a in enumerate(inputs)]),
        ("opposite-swapped", [ramp(a, k % 2 == 1, lo, hi) for k, a in enumerate(inputs)]),
        ("sign-crossing", [ramp(a, k % 2 == 0, -wide, wide) for k, a in enumerate(inputs)]),
        ("random", [rng.uniform(lo, hi, size=a.shape) for a in inputs]),
        # Thresholds outside the data's range (x > 0.5 on negative data, a single cell):
        # large values of either sign, the unit interval and zeros.
        ("positive", [ramp(a, k % 2 == 0, wide / 2, wide) for k, a in enumerate(inputs)]),
        ("negative", [ramp(a, k % 2 == 1, -wide, -wide / 2) for k, a in enumerate(inputs)]),
        ("unit", [ramp(a, k % 2 == 0, 0.0, 1.0) for k, a in enumerate(inputs)]),
        ("huge", [ramp(a, k % 2 == 0, -1e6 * wide, 1e6 * wide) for k, a in enumerate(inputs)]),
        # Repeated values: picks and sorts resolve ties by position, and the number of
        # distinct values (``unique``) decides the output shape.
        ("ties", [np.asarray(rng.choice(levels, size=a.shape), dtype=np.float64) for a in inputs]),
        ("constant", [np.full(a.shape, hi, dtype=np.float64) for a in inputs]),
    ]
    # Exact zeros are probed separately (lineage that changes only at 0, as sinc's, is
    # served for zero-free inputs only), so the generic probes avoid them.
    tiny = wide * 1e-3
    return [
        (n, [np.where(x == 0.0, tiny, np.asarray(x, dtype=np.float64)) for x in p])
        for n, p in probes
    ]


def _special_probe(inputs: Sequence[F64], rng: np.random.Generator, value: float) -> list[F64]:
    """The inputs with ``value`` (NaN, 0) at their first and at a random cell."""
    out = []
    for a in inputs:
        b = np.array(a, dtype=np.float64, copy=True)
        if b.size:
            flat = b.reshape(-1)
            flat[0] = value
            flat[int(rng.integers(0, b.size))] = value
        out.append(b)
    return out


class _Prober:
    """The synthetic-input probes of one captured call, run at most once each.

    One capture may confirm several views (dim and gen; in considered mode also the
    considered-only family, which compares a subset of the relations), so each probe input is
    captured once and its tables are compared with each view's ``expected`` on that view's
    relations.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        inputs: Sequence[F64],
        kwargs: Mapping[str, Any],
        mode: Mode,
        rng: np.random.Generator,
    ) -> None:
        self.func, self.inputs, self.kwargs, self.mode, self.rng = func, inputs, kwargs, mode, rng
        self._data: dict[str, list[F64]] = {}
        self._tables: dict[str, dict[TableKey, LineageTable] | None] = {}
        self._generic: list[str] | None = None

    def _names(self) -> list[str]:
        if self._generic is None:
            probes = _probe_inputs(self.inputs, self.rng)
            self._data.update(probes)
            self._generic = [n for n, _ in probes]
            if any(a.size for a in self.inputs):
                self._data["nan"] = _special_probe(self.inputs, self.rng, np.nan)
                self._data["zero"] = _special_probe(self.inputs, self.rng, 0.0)
                self._data["zeros"] = [np.zeros(a.shape) for a in self.inputs]
        return self._generic

    def _run(self, name: str) -> dict[TableKey, LineageTable] | None:
        if name not in self._tables:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    r = capture_inputs(self.func, self._data[name], self.mode, "raise", self.kwargs)
                self._tables[name] = _compress_all(r.relations, r.considered)
            except Exception:
                self._tables[name] = None  # inconclusive: the function rejects this data
        return self._tables[name]

    def check(
        self, expected: Mapping[TableKey, LineageTable], parts: Sequence[int]
    ) -> tuple[bool, bool, bool]:
        """(lineage equal on every generic probe, also with NaNs, also with zeros), compared
        on the relations ``parts`` only."""

        def same(name: str) -> bool | None:
            got = self._run(name)
            if got is None:
                return None
            return bool(table_sets_equal(_only_parts(got, parts), expected))

        for name in self._names():
            if same(name) is False:
                return False, False, False
        if not any(a.size for a in self.inputs):
            return True, True, True
        nan_ok = same("nan") is not False
        zero_ok = all(same(n) is not False for n in ("zero", "zeros"))
        return True, nan_ok, zero_ok


# --------------------------------------------------------------------------- registry


def _replace_unsynced(path: Path, data: bytes) -> None:
    """Atomic (temp file + rename) but not fsynced: for hit counters."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{id(data):x}-{path.name}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_LIVE: "weakref.WeakSet[ViewRegistry]" = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    for reg in list(_LIVE):
        with contextlib.suppress(Exception):
            reg.flush()


class ViewRegistry:
    """Provenance views of one lineage store: prediction, confirmation, serving, verification.

    Args:
        store_or_dir: a :class:`~dslog_dagster.core.LineageStore`, a
            :class:`~dslog_dagster.core.api.DSLog` session, or the store's directory; views
            live in ``<store>/views/``.
        policy: a :class:`ReusePolicy`.

    Examples:
        >>> reg = ViewRegistry(tmp_path)  # doctest: +SKIP
        >>> for _ in range(4):  # doctest: +SKIP
        ...     r = capture(np.negative, np.random.rand(100, 100), reuse=reg)
        >>> r.obtained  # doctest: +SKIP
        'dim'
    """

    def __init__(self, store_or_dir: Any, policy: ReusePolicy | None = None) -> None:
        root = store_or_dir
        if not isinstance(root, LineageStore | str | os.PathLike):
            root = getattr(root, "store", root)  # a DSLog session
        if isinstance(root, LineageStore):
            root = root.root
        if not isinstance(root, str | os.PathLike):
            msg = (
                f"ViewRegistry takes a LineageStore, a DSLog session or a directory, "
                f"not `{type(store_or_dir).__name__}`."
            )
            raise ReuseError(msg)
        self.root = Path(root).absolute()
        self.dir = self.root / "views"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            msg = f"Could not create the view directory `{self.dir}`: {e}"
            raise ReuseError(msg) from e
        self.policy = policy or ReusePolicy()
        self._views: dict[str, _View] = {}
        self._dead: set[str] = set()
        self._dead_checked: dict[str, float] = {}
        self._fast: OrderedDict[Any, _Fast] = OrderedDict()
        self._arg_version = 0
        self._dir_s = str(self.dir) + os.sep
        self._rng = np.random.default_rng(self.policy.seed)
        self._budget = float(self.policy.budget)
        self._arg_state: dict[str, dict[str, Any]] = {}
        self._groups: dict[str, list[str]] = {}
        self._out_shapes: OrderedDict[str, list[Shape]] = OrderedDict()
        _LIVE.add(self)
        #: Counters of this instance: hits per kind, captures, verifications, demotions.
        self.stats: dict[str, int] = {
            "base": 0,
            "dim": 0,
            "gen": 0,
            "captured": 0,
            "verified": 0,
            "demoted": 0,
        }

    def __repr__(self) -> str:
        return f"ViewRegistry({str(self.root)!r})"

    # ----------------------------------------------------------- persistence

    def _path(self, sig: str) -> Path:
        return self.dir / f"{sig}.json"

    def _dead_path(self, sig: str) -> Path:
        return self.dir / f"{sig}.dead"

    def _save(self, v: _View, *, sync: bool = True) -> None:
        data = json.dumps(v.to_json(), separators=(",", ":")).encode()
        try:
            if sync:
                atomic_write_bytes(self._path(v.signature), data)
            else:
                _replace_unsynced(self._path(v.signature), data)
        except OSError as e:
            msg = f"Could not write view `{v.signature}` under `{self.dir}`: {e}"
            raise ReuseError(msg) from e
        v.unflushed = 0
        v.saved_at = time.monotonic()

    def _is_dead(self, sig: str) -> bool:
        if sig in self._dead:
            return True
        # Another process may have demoted the view: look for its marker, at most once a
        # second per key on the hit path (a stat is a noticeable part of a hit).
        now = time.monotonic()
        if now - self._dead_checked.get(sig, -1.0) < 1.0:
            return False
        if len(self._dead_checked) > _OUT_SHAPE_MEMO:
            self._dead_checked.clear()
        self._dead_checked[sig] = now
        if os.path.exists(self._dir_s + sig + ".dead"):
            self._dead.add(sig)
            return True
        return False

    def _get(self, sig: str, *, strict: bool = False) -> _View | None:
        """The view under ``sig`` (memory, else its file), or None. O(1) in the view count.

        An unreadable or damaged view file raises :class:`ReuseError` with ``strict``; on the
        capture path it is logged and treated as absent (the call is then captured, which is
        always correct, and the file is rewritten by the next capture of that key).
        """
        v = self._views.get(sig)
        if v is not None:
            return v
        path = self._path(sig)
        try:
            raw = path.read_bytes()
            v = _View.from_json(json.loads(raw), str(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, ReuseError) as e:
            msg = f"View file `{path}` is unreadable or damaged ({e}); delete it to re-learn it."
            if strict:
                raise ReuseError(msg) from e
            logger.warning(msg)
            return None
        self._views[sig] = v
        if v.kind == "dim" and v.group:
            self._groups.setdefault(v.group, []).append(sig)
        return v

    def _kill(self, v: _View | None, sig: str, reason: str, *, warn: bool) -> None:
        """Mark ``sig`` non-reusable for good (create-only marker) and say so if it was
        serving."""
        self._dead.add(sig)
        with contextlib.suppress(FileExistsError), open(self._dead_path(sig), "x") as f:
            f.write(reason)
        if v is not None:
            was = v.status
            v.status = "non_reusable"
            v.reason = reason
            self._save(v)
            if was == "confirmed" and warn:
                self.stats["demoted"] += 1
                msg = (
                    f"Provenance view `{sig}` ({v.kind}, `{v.op}`) disagreed with the real "
                    f"lineage: {reason}. It is demoted to non-reusable and the call's lineage "
                    "was captured instead."
                )
                warnings.warn(msg, ViewMismatchWarning, stacklevel=4)

    def flush(self) -> None:
        """Write the hit counters of views served since their last write (also done every
        ``flush_interval`` seconds of hits and at interpreter exit)."""
        for v in list(self._views.values()):
            if v.unflushed and v.signature not in self._dead:
                self._save(v, sync=False)

    def lookup(self, signature: str) -> ViewInfo | None:
        """The view stored under ``signature`` (any status), or None.

        Raises:
            ReuseError: the view file is unreadable or damaged.
        """
        v = self._get(signature, strict=True)
        if v is None:
            return None
        if self._is_dead(signature) and v.status != "non_reusable":
            v.status = "non_reusable"
        return v.info()

    def views(self) -> list[ViewInfo]:
        """Every view of the store (a table for the reuse-signature asset)."""
        out = []
        for path in sorted(self.dir.glob("*.json")):
            sig = path.stem
            try:
                info = self.lookup(sig)
            except ReuseError:
                continue
            if info is not None:
                out.append(info)
        return sorted(out, key=lambda i: (i.op, i.kind, i.signature))

    # ----------------------------------------------------------- arguments

    def _arg_file(self, code: str, mode: str) -> Path:
        return self.dir / f"args-{sigs._h(code, mode)[:24]}.json"

    def _args(self, code: str, mode: str) -> dict[str, Any]:
        key = code + "|" + mode
        st = self._arg_state.get(key)
        if st is None:
            st = {"evidence": {}, "irrelevant": []}
            with contextlib.suppress(FileNotFoundError, ValueError):
                st = json.loads(self._arg_file(code, mode).read_bytes())
            self._arg_state[key] = st
        return st

    def _relevant_marker(self, code: str, mode: str, name: str) -> Path:
        return self.dir / f"args-{sigs._h(code, mode)[:24]}-{sigs._h(name)[:16]}.relevant"

    def _drop(self, code: str, mode: str) -> frozenset[str]:
        return frozenset(self._args(code, mode).get("irrelevant", []))

    def _note_confirmed_dim(self, call: _Call, v: _View) -> None:
        """Irrelevant-argument detection over confirmed dim views at the same shapes."""
        if self.policy.irrelevant_after <= 0 or not v.arg_tokens:
            return
        st = self._args(call.code, call.mode)
        changed = False
        for other_sig in list(self._groups.get(v.group, [])):
            w = self._views.get(other_sig)
            if w is None or w is v or w.status != "confirmed" or self._is_dead(other_sig):
                continue
            if set(w.arg_tokens) != set(v.arg_tokens):
                continue
            diff = [k for k in v.arg_tokens if v.arg_tokens[k] != w.arg_tokens[k]]
            if len(diff) != 1:
                continue
            name = diff[0]
            marker = self._relevant_marker(call.code, call.mode, name)
            if table_sets_equal(v.tables, w.tables) and v.out_shapes == w.out_shapes:
                if not marker.exists():
                    st["evidence"][name] = int(st["evidence"].get(name, 0)) + 1
                    changed = True
            else:
                with contextlib.suppress(FileExistsError):
                    marker.open("x").close()
                if name in st["irrelevant"]:
                    st["irrelevant"].remove(name)
                changed = True
        for name, n in list(st["evidence"].items()):
            if (
                n >= self.policy.irrelevant_after
                and name not in st["irrelevant"]
                and not self._relevant_marker(call.code, call.mode, name).exists()
            ):
                st["irrelevant"].append(name)
                changed = True
                self._alias_group(call, frozenset(st["irrelevant"]))
        if changed:
            self._arg_version += 1
            atomic_write_bytes(self._arg_file(call.code, call.mode), json.dumps(st).encode())

    def _alias_group(self, call: _Call, drop: frozenset[str]) -> None:
        """Re-key this operation's confirmed dim views without the irrelevant arguments."""
        owner = sigs._h(call.code, call.mode)
        for sigs_ in list(self._groups.values()):
            for sig in list(sigs_):
                v = self._views.get(sig)
                if v is None or v.owner != owner or v.status != "confirmed" or not v.arg_tokens:
                    continue
                tok = (
                    "{"
                    + ",".join(
                        f"{k}={v.arg_tokens[k]}" for k in sorted(v.arg_tokens) if k not in drop
                    )
                    + "}"
                )
                alias = sigs.dim_sig(call.code, call.mode, tok, v.in_shapes)
                if alias == sig or self._get(alias) is not None or self._is_dead(alias):
                    continue
                a = replace(
                    v,
                    signature=alias,
                    hits=0,
                    verified=[],
                    created=time.time(),
                    instances=OrderedDict(),
                    unflushed=0,
                )
                self._views[alias] = a
                self._save(a)

    # ----------------------------------------------------------- lookup

    def _dim_key(self, call: _Call) -> str:
        tok = call.token(self._drop(call.code, call.mode))
        return _dim_sig_cached(call.code, call.mode, tok, call.in_shapes)

    def _base_key(self, call: _Call) -> str | None:
        contents = call.contents()
        if contents is None:
            return None
        tok = call.token(self._drop(call.code, call.mode))
        return str(sigs.base_sig(call.code, call.mode, tok, contents))

    def _gen_key(self, call: _Call, out_shapes: Sequence[Shape]) -> tuple[str, sigs.ShapeClass]:
        """The active gen key of a call: its shape class, or — once no affine template fits
        that class — the class refined by the order of its input extents (``convolve`` in
        ``valid`` mode is affine for ``M > N`` and for ``M < N``, not across both)."""
        drop = self._drop(call.code, call.mode)
        relevant = {k: v for k, v in call.args.items() if k not in drop}
        klass = sigs.shape_class(call.in_shapes, out_shapes, relevant, self.policy.literal_below)
        tok = call.token(drop)
        coarse = str(sigs.gen_sig(call.code, call.mode, tok, klass.token))
        if not self._is_dead(coarse):
            return coarse, klass
        in_syms = [k for k, b in enumerate(klass.bindings) if any(sd == "i" for sd, _, _ in b)]
        order = sorted(in_syms, key=lambda k: klass.values[k])
        refined = klass.token + "|order:" + ",".join(map(str, order))
        return str(sigs.gen_sig(call.code, call.mode, tok, refined)), klass

    def _confirmed(self, sig: str) -> _View | None:
        v = self._get(sig)
        if v is None or v.status != "confirmed" or self._is_dead(sig):
            return None
        return v

    def _find_specific(self, call: _Call) -> tuple[Kind, str, _View] | None:
        """A confirmed base or dim view for the call (base only where dim is data-dependent)."""
        if self.policy.dim:
            sig = self._dim_key(call)
            v = self._confirmed(sig)
            if v is not None:
                return "dim", sig, v
            dead = self._is_dead(sig)
        else:
            dead = True
        if self.policy.base and dead:
            bsig = self._base_key(call)
            v = self._confirmed(bsig) if bsig is not None else None
            if bsig is not None and v is not None:
                return "base", bsig, v
        return None

    def _gen_instance(
        self, v: _View, klass: sigs.ShapeClass, call: _Call, out_shapes: Sequence[Shape]
    ) -> dict[TableKey, LineageTable] | None:
        if v.template is None:
            return None
        key = (klass.values, tuple(call.in_shapes), tuple(out_shapes))
        inst = v.instances.get(key)
        if inst is None:
            inst = v.template.instantiate(klass.values, call.in_shapes, out_shapes)
            if inst is None:
                return None
            v.instances[key] = inst
            if len(v.instances) > _INSTANCE_CACHE:
                v.instances.popitem(last=False)
        return inst

    def _needs_check(self, v: _View, exact: str) -> tuple[bool, bool]:
        """(verify now?, is it a sampled verification?)"""
        if self.policy.verify_new and exact not in v.verified:
            return True, False
        if self.policy.rate > 0 and self._budget > 0 and self._rng.random() < self.policy.rate:
            return True, True
        return False, False

    def _mark_verified(self, v: _View, exact: str) -> None:
        if exact not in v.verified:
            v.verified.append(exact)
        v.last_verified = time.time()
        self._save(v)

    def _hit(self, v: _View) -> None:
        v.hits += 1
        v.unflushed += 1
        if time.monotonic() - v.saved_at >= self.policy.flush_interval:
            try:
                self._save(v, sync=False)  # only a counter: atomic, not worth an fsync
            except ReuseError as e:  # a counter is not worth failing a served call for
                logger.warning("%s", e)
                v.saved_at = time.monotonic()

    # ----------------------------------------------------------- capture path

    def _call_for(
        self,
        func: Callable[..., Any],
        code_version: str | None,
        mode: str,
        kwargs: Mapping[str, Any],
        inputs: Sequence[F64],
    ) -> _Call:
        code = sigs.code_identity(func, code_version)
        tokens = {str(k): sigs.arg_token(v) for k, v in kwargs.items()}
        return _Call(
            op=_func_name(func),
            code=code,
            mode=mode,
            args=kwargs,
            arg_tokens=tokens,
            in_shapes=_shapes(inputs),
            contents=lambda: [sigs.content_hash(a) for a in inputs],
        )

    def run(
        self,
        func: Callable[..., Any],
        inputs: list[F64],
        *,
        mode: Mode = "contributing",
        on_lost: OnLost = "raise",
        code_version: str | None = None,
        kwargs: Mapping[str, Any] | None = None,
        need: Need = "all",
    ) -> CaptureResult:
        """``capture(func, *inputs, reuse=self, ...)``: serve a confirmed view or capture and
        learn (see the module docstring). ``inputs`` are float64 arrays. ``need="considered"``
        (with ``mode="considered"``): serve from views of the considered relation alone."""
        check_need(need, mode)
        res = self._run(
            func, inputs, mode, on_lost, code_version, kwargs, need=need, serve_only=False
        )
        assert res is not None  # only serve_only runs come back empty
        return res

    def serve(
        self,
        func: Callable[..., Any],
        inputs: list[F64],
        *,
        mode: Mode = "contributing",
        code_version: str | None = None,
        kwargs: Mapping[str, Any] | None = None,
        need: Need = "all",
    ) -> CaptureResult | None:
        """Serve a confirmed view, never annotate: ``None`` when no view matches.

        For callers that must not pay for annotated execution (a "reuse only" policy): on a
        miss nothing ran and nothing is learnt; the caller runs ``func`` itself.
        """
        check_need(need, mode)
        return self._run(
            func, inputs, mode, "raise", code_version, kwargs, need=need, serve_only=True
        )

    def _run(
        self,
        func: Callable[..., Any],
        inputs: list[F64],
        mode: Mode,
        on_lost: OnLost,
        code_version: str | None,
        kwargs: Mapping[str, Any] | None,
        *,
        need: Need = "all",
        serve_only: bool,
    ) -> CaptureResult | None:
        kwargs = dict(kwargs) if kwargs else {}
        demoted: list[str] = []
        # The key mode of the views that may serve this call (see _PARTS).
        key_mode = CONSIDERED_ONLY if need == "considered" else mode
        fkey = _fast_key(func, key_mode, code_version, kwargs, inputs)
        if fkey is not None:
            fast = self._fast.get(fkey)
            if fast is not None:
                res = self._serve_fast(fast, func, inputs, kwargs, demoted)
                if res is not None:
                    return res
                self._fast.pop(fkey, None)
        try:
            call = self._call_for(func, code_version, key_mode, kwargs, inputs)
        except sigs.Unsignable:
            return None if serve_only else capture_inputs(func, inputs, mode, on_lost, kwargs)
        call.fast_key = fkey
        found = self._find_specific(call)
        if found is not None:
            kind, sig, v = found
            res = self._serve(
                kind,
                sig,
                v,
                dict(v.tables),
                v.out_shapes,
                call,
                func,
                inputs,
                kwargs,
                None,
                demoted,
            )
            if res is not None:
                return res
        plain: tuple[Any, list[F64]] | None = None
        out_shapes: list[Shape] | None = None
        if self.policy.gen:
            exact = call.exact_key
            out_shapes = self._out_shapes.get(exact)
            if out_shapes is None:
                # First call at these shapes: run on copies, so a function that writes into
                # its inputs cannot change what a capture would see. If the plain run fails,
                # the capture below reports the function's error as it would without reuse.
                try:
                    plain = _run_plain(func, [a.copy() for a in inputs], kwargs)
                except Exception:
                    plain = None
                if plain is not None:
                    out_shapes = _shapes(plain[1])
                    self._memo_out_shapes(exact, out_shapes)
            if out_shapes is not None:
                gsig, klass = self._gen_key(call, out_shapes)
                gv = self._confirmed(gsig)
                if gv is not None:
                    inst = self._gen_instance(gv, klass, call, out_shapes)
                    if inst is not None:
                        res = self._serve(
                            "gen",
                            gsig,
                            gv,
                            inst,
                            out_shapes,
                            call,
                            func,
                            inputs,
                            kwargs,
                            plain,
                            demoted,
                        )
                        if res is not None:
                            return res
        if serve_only:
            return None
        res = capture_inputs(func, inputs, mode, on_lost, kwargs)
        self.stats["captured"] += 1
        dsig = self._dim_key(call)
        if res.flagged or any(np.isnan(a).any() for a in inputs):
            # An over-approximation is no view; NaN inputs are outside what views are learnt
            # on (they are probed with NaN and marked finite-only where NaN matters).
            return replace(res, signature=dsig, demoted=tuple(demoted))
        tables = _compress_all(res.relations, res.considered)
        outs = _shapes(res.outputs)
        prober = _Prober(func, inputs, kwargs, mode, self._rng)
        has_zero = not all(a.all() for a in inputs)
        # A considered-mode capture teaches both key families: views of both relations
        # (need="all") and views of the considered relation alone (need="considered").
        families = [mode, CONSIDERED_ONLY] if mode == "considered" else [mode]
        for fam in families:
            fcall = call if fam == key_mode else replace(call, mode=fam)
            parts = _PARTS[fam]

            def probe(
                expected: Mapping[TableKey, LineageTable], parts: tuple[int, ...] = parts
            ) -> tuple[bool, bool, bool]:
                return prober.check(expected, parts)

            self._memo_out_shapes(fcall.exact_key, outs)
            demoted += self._feed(
                fcall,
                outs,
                _only_parts(tables, parts),
                probe if self.policy.probe else None,
                has_zero=has_zero,
            )
        return replace(
            res,
            signature=dsig,
            tables=_contributing(tables),
            demoted=tuple(demoted),
        )

    def _memo_out_shapes(self, exact: str, out_shapes: list[Shape]) -> None:
        self._out_shapes[exact] = out_shapes
        if len(self._out_shapes) > _OUT_SHAPE_MEMO:
            self._out_shapes.popitem(last=False)

    def _serve(
        self,
        kind: Kind,
        sig: str,
        v: _View,
        tables: Mapping[TableKey, LineageTable],
        expect_out: Sequence[Shape],
        call: _Call,
        func: Callable[..., Any],
        inputs: list[F64],
        kwargs: Mapping[str, Any],
        plain: tuple[Any, list[F64]] | None,
        demoted: list[str],
    ) -> CaptureResult | None:
        if v.finite_only and any(np.isnan(a).any() for a in inputs):
            return None
        if v.nonzero_only and not all(a.all() for a in inputs):
            return None
        if plain is None:
            plain = _run_plain(func, inputs, kwargs)
        if plain is None:
            return None
        value, outs = plain
        out_shapes = _shapes(outs)
        if [tuple(s) for s in expect_out] != out_shapes:
            self._kill(
                v,
                sig,
                f"output shapes {out_shapes} differ from the view's {list(expect_out)}",
                warn=True,
            )
            demoted.append(sig)
            return None
        exact = call.exact_key
        check, sampled = self._needs_check(v, exact)
        verified = False
        if check:
            t0 = time.perf_counter()
            ok = verify_sample(func, inputs, kwargs, call.mode, tables, out_shapes, self._rng)
            if sampled:
                self._budget -= time.perf_counter() - t0
            self.stats["verified"] += 1
            if not ok:
                self._kill(v, sig, "a sampled annotated run of a call disagreed with it", warn=True)
                demoted.append(sig)
                return None
            self._mark_verified(v, exact)
            verified = True
        self._hit(v)
        self.stats[kind] += 1
        served = _Served.of(call.mode, tables)
        guarded = v.finite_only or v.nonzero_only
        if call.fast_key is not None and not guarded and kind != "base":
            self._fast[call.fast_key] = _Fast(
                kind,
                sig,
                v,
                tuple(out_shapes),
                exact,
                dict(tables),
                call,
                self._arg_version,
                served,
            )
            if len(self._fast) > _OUT_SHAPE_MEMO:
                self._fast.popitem(last=False)
        return CaptureResult(
            value=value,
            outputs=tuple(outs),
            input_shapes=tuple(call.in_shapes),
            relations=served.relations,
            considered=served.considered,
            mode=_annotator_mode(call.mode),
            obtained=kind,
            signature=sig,
            verified=verified,
            tables=served.tables,
            demoted=tuple(demoted),
        )

    def _serve_fast(
        self,
        f: "_Fast",
        func: Callable[..., Any],
        inputs: list[F64],
        kwargs: Mapping[str, Any],
        demoted: list[str],
    ) -> CaptureResult | None:
        """A repeat hit: same function object, arguments and shapes as a call served before.

        Only the checks that can change between such calls are made: the view still being
        confirmed (in this process and, once a second, on disk), the argument relevance
        unchanged, the output shapes, and the sampled verification.
        """
        v = f.view
        if (
            v.status != "confirmed"
            or f.arg_version != self._arg_version
            or self._is_dead(f.signature)
        ):
            return None
        result = func(*inputs, **kwargs)
        if type(result) is np.ndarray and result.dtype == np.float64:
            value: Any = result  # the common case, without the general unpacking
            outs = [result]
        else:
            plain = _run_plain_result(result)
            if plain is None:
                return None
            value, outs = plain
        if len(outs) != len(f.out_shapes) or any(
            o.shape != s for o, s in zip(outs, f.out_shapes, strict=False)
        ):
            return None  # the full path decides (and demotes)
        verified = False
        if self.policy.rate > 0 and self._budget > 0 and self._rng.random() < self.policy.rate:
            t0 = time.perf_counter()
            ok = verify_sample(
                func, inputs, kwargs, f.call.mode, f.tables, list(f.out_shapes), self._rng
            )
            self._budget -= time.perf_counter() - t0
            self.stats["verified"] += 1
            if not ok:
                self._kill(
                    v, f.signature, "a sampled annotated run of a call disagreed with it", warn=True
                )
                demoted.append(f.signature)
                return None
            self._mark_verified(v, f.exact)
            verified = True
        self._hit(v)
        self.stats[f.kind] += 1
        return CaptureResult(
            value=value,
            outputs=tuple(outs),
            input_shapes=tuple(f.call.in_shapes),
            relations=f.served.relations,
            considered=f.served.considered,
            mode=_annotator_mode(f.call.mode),
            obtained=f.kind,
            signature=f.signature,
            verified=verified,
            tables=f.served.tables,
        )

    # ----------------------------------------------------------- learning

    def _feed(
        self,
        call: _Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Callable[[Mapping[TableKey, LineageTable]], tuple[bool, bool, bool]] | None,
        *,
        has_zero: bool = False,
    ) -> list[str]:
        """Record one captured call under its keys; returns the signatures it demoted.

        ``has_zero``: an input holds an exact 0, so nonzero-only views do not apply to it."""
        demoted: list[str] = []
        dim_dead = True
        if self.policy.dim:
            sig = self._dim_key(call)
            dim_dead = self._feed_specific(
                "dim",
                sig,
                call,
                out_shapes,
                tables,
                probe,
                self.policy.confirm_after,
                demoted,
                has_zero,
            )
        bsig = self._base_key(call) if self.policy.base and dim_dead else None
        if bsig is not None:
            self._feed_specific(
                "base",
                bsig,
                call,
                out_shapes,
                tables,
                None,
                self.policy.base_confirm_after,
                demoted,
                has_zero,
            )
        if self.policy.gen:
            self._feed_gen(call, out_shapes, tables, probe, demoted, has_zero)
        return demoted

    def _feed_specific(
        self,
        kind: Kind,
        sig: str,
        call: _Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Callable[[Mapping[TableKey, LineageTable]], tuple[bool, bool, bool]] | None,
        m: int,
        demoted: list[str],
        has_zero: bool = False,
    ) -> bool:
        """Base/dim bookkeeping; returns True when the key is (now) non-reusable."""
        if self._is_dead(sig):
            return True
        v = self._get(sig)
        if v is None:
            v = _View(
                sig,
                kind,
                call.op,
                in_shapes=list(call.in_shapes),
                out_shapes=out_shapes,
                tables=tables,
            )
            v.verified.append(call.exact_key)
            if kind == "dim":
                drop = self._drop(call.code, call.mode)
                v.group = sigs._h(call.code, call.mode, repr(call.in_shapes))
                v.owner = sigs._h(call.code, call.mode)
                v.arg_tokens = {k: t for k, t in call.arg_tokens.items() if k not in drop}
                self._groups.setdefault(v.group, []).append(sig)
            self._views[sig] = v
            if m == 0:
                return self._confirm(v, call, probe, tables, demoted)
            self._save(v)
            return False
        if v.nonzero_only and has_zero:
            return False  # outside the view's domain: neither a match nor a mismatch
        if v.out_shapes != out_shapes or not table_sets_equal(v.tables, tables):
            if v.status == "confirmed":
                demoted.append(sig)
            self._kill(
                v,
                sig,
                "a later capture had different lineage (data-dependent or non-deterministic)",
                warn=True,
            )
            return True
        if v.status == "candidate":
            v.matches += 1
            if call.exact_key not in v.verified:
                v.verified.append(call.exact_key)
            if v.matches >= m:
                return self._confirm(v, call, probe, tables, demoted)
            self._save(v)
        return False

    def _confirm(
        self,
        v: _View,
        call: _Call,
        probe: Callable[[Mapping[TableKey, LineageTable]], tuple[bool, bool, bool]] | None,
        tables: Mapping[TableKey, LineageTable],
        demoted: list[str],
    ) -> bool:
        if probe is not None:
            finite_ok, nan_ok, zero_ok = probe(tables)
            if not finite_ok:
                self._kill(
                    v,
                    v.signature,
                    "synthetic probe inputs gave different lineage (data-dependent)",
                    warn=False,
                )
                return True
            v.finite_only = not nan_ok
            v.nonzero_only = not zero_ok
        v.status = "confirmed"
        v.last_verified = time.time()
        self._save(v)
        if v.kind == "dim":
            self._note_confirmed_dim(call, v)
        return False

    def _feed_gen(
        self,
        call: _Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Callable[[Mapping[TableKey, LineageTable]], tuple[bool, bool, bool]] | None,
        demoted: list[str],
        has_zero: bool = False,
    ) -> None:
        sig, klass = self._gen_key(call, out_shapes)
        vals = klass.values
        if not vals or self._is_dead(sig):
            return  # without a symbolic extent the class is one shape: the dim key covers it
        v = self._get(sig)
        if v is None:
            v = _View(sig, "gen", call.op, observations=[(vals, tables)], seen=[vals])
            v.verified.append(call.exact_key)
            self._views[sig] = v
            self._save(v)
            return
        if v.nonzero_only and has_zero:
            return
        for ovals, otabs in v.observations:
            if ovals == vals:
                if not table_sets_equal(otabs, tables):
                    if v.status == "confirmed":
                        demoted.append(sig)
                    self._kill(v, sig, "two captures at one shape had different lineage", warn=True)
                return
        if v.status == "confirmed":
            inst = self._gen_instance(v, klass, call, out_shapes)
            if inst is None or not table_sets_equal(inst, tables):
                demoted.append(sig)
                self._kill(v, sig, f"a capture at extents {vals} contradicted it", warn=True)
            return
        inst = None
        if v.template is not None and v.template.p == len(vals):
            inst = self._gen_instance(v, klass, call, out_shapes)
        obs = [*v.observations, (vals, tables)][-self.policy.max_observations :]
        predicted = inst is not None and table_sets_equal(inst, tables)
        if predicted and v.fit_full:
            if vals not in v.seen:
                v.matches += 1  # a prediction at a shape it had not seen
            v.observations = obs
        else:
            # Re-fit. Predictions only count once the template was fitted on p + 1 affinely
            # independent shapes: before that, several templates explain the captures (e.g.
            # when two extents always differ by one) and the preferred one may be wrong.
            tmpl = fit(obs)
            if tmpl is None:
                self._kill(v, sig, "no affine template fits its captures", warn=False)
                return
            v.template, v.observations = tmpl, obs
            v.matches = 0 if not predicted else v.matches
            in_syms = [
                k for k, b in enumerate(klass.bindings) if any(side == "i" for side, _, _ in b)
            ]
            v.fit_full = _full_rank([tuple(o[0][k] for k in in_syms) for o in obs])
            v.instances.clear()
        if vals not in v.seen:
            v.seen.append(vals)
        if call.exact_key not in v.verified:
            v.verified.append(call.exact_key)
        v.encoded = None
        if v.matches >= self.policy.confirm_after and len(v.seen) > self.policy.confirm_after:
            self._confirm(v, call, probe, tables, demoted)
        else:
            self._save(v)

    # ----------------------------------------------------------- declared lineage

    def _declared_call(
        self,
        op_name: str,
        code_version: str | None,
        args: Mapping[str, Any] | None,
        in_ids: Sequence[str] | None,
        in_shapes: Sequence[Shape],
    ) -> _Call:
        args = dict(args or {})
        ids = None if in_ids is None else list(in_ids)
        code = sigs._h("declared", op_name, code_version or "")
        return _Call(
            op=op_name,
            code=code,
            mode="declared",
            args=args,
            arg_tokens={str(k): sigs.arg_token(v) for k, v in args.items()},
            in_shapes=[tuple(s) for s in in_shapes],
            contents=lambda: ids,
        )

    def find_declared(
        self,
        op_name: str,
        *,
        args: Mapping[str, Any] | None,
        in_ids: Sequence[str] | None,
        in_shapes: Sequence[Shape],
        out_shapes: Sequence[Shape],
        code_version: str | None = None,
    ) -> DeclaredHit | None:
        """A confirmed view for a declared operation (no function to run), or None.

        ``in_ids`` identify the input data (array name and version) for base views; None
        when some input has no version (its content is then unknown and base views are off).
        """
        try:
            call = self._declared_call(op_name, code_version, args, in_ids, in_shapes)
        except sigs.Unsignable:
            return None
        outs = [tuple(s) for s in out_shapes]
        found = self._find_specific(call)
        if found is not None:
            kind, sig, v = found
            if v.out_shapes == outs:
                check, _ = self._needs_check(v, call.exact_key)
                return DeclaredHit(kind, sig, dict(v.tables), check, call.exact_key)
        if self.policy.gen:
            gsig, klass = self._gen_key(call, outs)
            gv = self._confirmed(gsig)
            if gv is not None:
                inst = self._gen_instance(gv, klass, call, outs)
                if inst is not None:
                    check, _ = self._needs_check(gv, call.exact_key)
                    return DeclaredHit("gen", gsig, inst, check, call.exact_key)
        return None

    def settle_declared(
        self, hit: DeclaredHit, actual: Mapping[TableKey, LineageTable] | None
    ) -> bool:
        """Record the use of ``hit``: compare with the declared lineage when given.

        Returns True when the view may be used, False when it was demoted (with a warning).
        """
        v = self._get(hit.signature)
        if v is None:
            return False
        if actual is not None:
            self.stats["verified"] += 1
            if not table_sets_equal(hit.tables, actual):
                self._kill(
                    v, hit.signature, "the declared lineage of a call disagreed with it", warn=True
                )
                return False
            self._mark_verified(v, hit.exact_key)
        self._hit(v)
        self.stats[hit.kind] += 1
        return True

    def observe_declared(
        self,
        op_name: str,
        *,
        args: Mapping[str, Any] | None,
        in_ids: Sequence[str] | None,
        in_shapes: Sequence[Shape],
        out_shapes: Sequence[Shape],
        tables: Mapping[TableKey, LineageTable],
        code_version: str | None = None,
    ) -> str | None:
        """Feed declared lineage to the registry; returns the dim signature (None if the
        arguments cannot be signed). Declared lineage cannot be probed, so views of declared
        operations are confirmed by repetition only."""
        try:
            call = self._declared_call(op_name, code_version, args, in_ids, in_shapes)
        except sigs.Unsignable:
            return None
        self.stats["captured"] += 1
        self._feed(call, [tuple(s) for s in out_shapes], dict(tables), None)
        return self._dim_key(call)
