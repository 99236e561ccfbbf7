"""Serving a call from a confirmed view: run the function on plain float64 inputs and take
the lineage from the view.

Base, then dim, then gen (:mod:`.lookup`). A view is checked before it is trusted for a call
whose exact shapes and argument values it has not been checked on, and afterwards on a share of
calls (``ReusePolicy.rate``). A call declared pure is checked by a sampled annotated re-run
(:mod:`.verification`); any other call runs exactly once, so its check is the capture of that
call instead of serving it (the registry compares the captured lineage with the view). A
failed check demotes the view, issues :class:`~dslog_dagster.errors.ViewMismatchWarning`, and
the call's lineage is the captured one. A repeat hit (same function object, simple arguments
and shapes as a call served before) skips the hashing of keys (:func:`fast_key`).

A served call carries its lineage as ProvRC tables (:class:`LazyRelations` expands them only
when read); one served from a view of the considered relation alone (``need="considered"``)
has no contributing relation to give (:class:`UnservedRelations`).
"""

import math
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.capture import CaptureResult, Mode, plain_value, split_outputs
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation, Shape
from dslog_dagster.core.reuse.arguments import ArgumentRelevance
from dslog_dagster.core.reuse.keys import Call, helper_functions, shapes_of
from dslog_dagster.core.reuse.lookup import ViewFinder
from dslog_dagster.core.reuse.persistence import Kind, View, ViewFiles
from dslog_dagster.core.reuse.policy import ReusePolicy
from dslog_dagster.core.reuse.verification import VerificationSchedule, verify_sample
from dslog_dagster.core.reuse.views import (
    CONSIDERED_ONLY,
    TableKey,
    considered,
    contributing,
)
from dslog_dagster.errors import CaptureError

__all__ = [
    "FastEntry",
    "LazyRelations",
    "Need",
    "Served",
    "Server",
    "UnservedRelations",
    "annotator_mode",
    "check_need",
    "fast_key",
    "has_nan",
    "outside_domain",
    "run_plain",
    "run_plain_result",
]

F64 = npt.NDArray[np.float64]
#: Which relations the caller of a reusing capture will read: ``"all"`` (both of the mode), or
#: ``"considered"`` (only :attr:`CaptureResult.considered`, ``mode="considered"`` only).
Need = Literal["all", "considered"]
# Repeat hits and output shapes remembered.
_MEMO = 65536


def check_need(need: str, mode: str) -> None:
    """Validate ``need`` against ``mode`` (``need="considered"`` needs that relation).

    Raises:
        ValueError: ``need`` is unknown, or ``"considered"`` without ``mode="considered"``.
    """
    if need not in ("all", "considered"):
        msg = f'`need` must be "all" or "considered", not {need!r}.'
        raise ValueError(msg)
    if need == "considered" and mode != "considered":
        msg = '`need="considered"` needs `mode="considered"` (the relation it asks for).'
        raise ValueError(msg)


class LazyRelations(Mapping[tuple[int, int], LineageRelation]):
    """``(output, input) -> LineageRelation`` decompressed from ProvRC tables on first access.

    A reused call carries compressed tables; expanding a 1M-cell element-wise relation costs
    more than the call itself, so it only happens if someone reads the pairs.
    """

    def __init__(self, tables: "Mapping[tuple[int, int], LineageTable]") -> None:
        self._tables = dict(tables)
        self._cache: dict[tuple[int, int], LineageRelation] = {}

    def __getitem__(self, key: tuple[int, int]) -> LineageRelation:
        rel = self._cache.get(key)
        if rel is None:
            rel = self._cache[key] = self._tables[key].decompress()
        return rel

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)


class UnservedRelations(Mapping[tuple[int, int], LineageRelation]):
    """The contributing relations of a call served with ``need="considered"``: not known.

    A view of the considered relation alone can be exact where the contributing relation is
    data-dependent (``np.max`` considers its whole lane whatever the values, but picks a
    data-dependent cell), so such a call has no contributing lineage to give. Reading it is
    an error that says so, never a silent empty relation.
    """

    def __init__(self, keys: "Sequence[tuple[int, int]]") -> None:
        self._keys = list(keys)

    def __getitem__(self, key: tuple[int, int]) -> LineageRelation:
        msg = (
            f"The contributing relation {key} of this call is not known: it was served from a "
            'view of the considered relation only (`need="considered"`). Read '
            "`result.considered` / `relation(..., considered=True)`, or capture with "
            '`need="all"` for both relations.'
        )
        raise CaptureError(msg)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


_SIMPLE = (int, str, bool, type(None))


def _simple_key(v: Any, depth: int = 0) -> Any:
    """A hashable, type-exact key of an argument value, or raise TypeError if not simple."""
    if isinstance(v, _SIMPLE) and not isinstance(v, np.generic):
        return (type(v), v)
    if isinstance(v, tuple) and depth < 4:
        return (tuple, tuple(_simple_key(x, depth + 1) for x in v))
    raise TypeError


def fast_key(
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
        helpers = tuple(g.__code__ for g in helper_functions(func))
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


def has_nan(inputs: Sequence[F64]) -> bool:
    """Does an input hold a NaN? (One reduction per input, no temporary: ``max`` propagates
    NaN; this runs on every hit of a finite-only view.)"""
    return any(a.size and math.isnan(a.max()) for a in inputs)


def outside_domain(v: View, inputs: Sequence[F64]) -> bool:
    """Are ``inputs`` outside what view ``v`` may serve (NaN for a finite-only view, an exact
    zero for a nonzero-only one)?"""
    if v.finite_only and has_nan(inputs):
        return True
    return v.nonzero_only and not all(a.all() for a in inputs)


def annotator_mode(key_mode: str) -> Mode:
    """The annotator mode that produces the relations of a view's key mode."""
    return "contributing" if key_mode == "contributing" else "considered"


@dataclass(frozen=True, slots=True)
class Served:
    """What a served call returns besides its values (built once per view and shape)."""

    relations: Mapping[tuple[int, int], LineageRelation]
    considered: LazyRelations | None
    tables: dict[tuple[int, int], LineageTable] | None

    @classmethod
    def of(cls, key_mode: str, tables: Mapping[TableKey, LineageTable]) -> "Served":
        """The relations of a call served in ``key_mode`` from ``tables``."""
        contrib = contributing(tables)
        consid = considered(tables) if key_mode != "contributing" else None
        if key_mode == CONSIDERED_ONLY:
            assert consid is not None
            return cls(UnservedRelations(sorted(consid)), LazyRelations(consid), None)
        return cls(
            LazyRelations(contrib),
            LazyRelations(consid) if consid is not None else None,
            contrib,
        )


@dataclass(frozen=True, slots=True)
class FastEntry:
    """A repeat hit: what serving the same call again needs (see :meth:`Server.serve_fast`)."""

    kind: Kind
    signature: str
    view: View
    out_shapes: tuple[Shape, ...]
    exact: str
    tables: dict[TableKey, LineageTable]
    call: Call
    arg_version: int
    served: Served


def run_plain(
    func: Callable[..., Any], inputs: Sequence[F64], kwargs: Mapping[str, Any]
) -> tuple[Any, list[F64]] | None:
    """``func`` on plain float64 inputs: (value as capture returns it, outputs), or None when
    an output is not numeric (such a call is never served). Float outputs are float64, integer
    outputs keep their dtype (a capture returns positions as NumPy's integers)."""
    return run_plain_result(func(*inputs, **kwargs))


def run_plain_result(result: Any) -> tuple[Any, list[F64]] | None:
    outs, is_tuple = split_outputs(result)
    plain: list[F64] = []
    for o in outs:
        arr = o if isinstance(o, np.ndarray) else np.asarray(o)
        if arr.dtype.kind not in "fiub":
            return None
        # integers stay integers, as a captured run returns positions (np.argwhere & co.)
        keep = arr.dtype == np.float64 or arr.dtype.kind in "iu"
        plain.append(arr if keep else arr.astype(np.float64))
    return plain_value(plain, outs, is_tuple), plain


class Server:
    """Serves calls from confirmed views; remembers repeat hits and output shapes.

    Args:
        files: the registry's view files (hit counters, demotions).
        finder: the registry's keys of calls and views under them.
        schedule: when a view is verified.
        arguments: the registry's argument relevance (its version invalidates repeat hits).
        policy: the registry's policy.
        stats: the registry's counters (hits per kind, verifications).
        rng: the registry's random generator (verification samples).
    """

    def __init__(
        self,
        files: ViewFiles,
        finder: ViewFinder,
        schedule: VerificationSchedule,
        arguments: ArgumentRelevance,
        policy: ReusePolicy,
        stats: dict[str, int],
        rng: np.random.Generator,
    ) -> None:
        self.files = files
        self.finder = finder
        self.schedule = schedule
        self.arguments = arguments
        self.policy = policy
        self.stats = stats
        self.rng = rng
        #: Repeat hits by :func:`fast_key`.
        self.fast: OrderedDict[Any, FastEntry] = OrderedDict()
        #: Output shapes by exact key (gen keys need them before the function has run).
        self.out_shapes: OrderedDict[str, list[Shape]] = OrderedDict()

    def memo_out_shapes(self, exact: str, out_shapes: list[Shape]) -> None:
        """Remember the output shapes of calls with exact key ``exact``."""
        self.out_shapes[exact] = out_shapes
        if len(self.out_shapes) > _MEMO:
            self.out_shapes.popitem(last=False)

    def serve_repeat(
        self,
        key: Any,
        func: Callable[..., Any],
        inputs: list[F64],
        kwargs: Mapping[str, Any],
        demoted: list[str],
        *,
        pure: bool,
        serve_only: bool = False,
    ) -> CaptureResult | None:
        """Serve a repeat hit under :func:`fast_key` ``key``, or None (then forget it)."""
        entry = self.fast.get(key)
        if entry is None:
            return None
        res = self.serve_fast(
            entry, func, inputs, kwargs, demoted, pure=pure, serve_only=serve_only
        )
        if res is None:
            self.fast.pop(key, None)
        return res

    def serve_call(
        self,
        call: Call,
        func: Callable[..., Any],
        inputs: list[F64],
        kwargs: Mapping[str, Any],
        demoted: list[str],
        *,
        pure: bool,
        serve_only: bool = False,
    ) -> CaptureResult | None:
        """Serve ``call`` from a base, dim or gen view, or None when none applies.

        ``pure``: the function may run more than once (sampled verification, a plain run to
        learn the output shapes a gen key needs); otherwise it runs at most once here, and
        only when the call is served. ``serve_only``: no capture follows a miss."""
        found = self.finder.find_specific(call)
        if found is not None and found[0] == "dim" and outside_domain(found[2], inputs):
            # inputs the dim view does not serve (NaN): their exact-input view may
            found = self.finder.find_base(call)
        if found is not None:
            kind, sig, v = found
            res = self.serve(
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
                pure=pure,
                serve_only=serve_only,
            )
            if res is not None:
                return res
        if not self.policy.gen:
            return None
        plain: tuple[Any, list[F64]] | None = None
        exact = call.exact_key
        out_shapes = self.out_shapes.get(exact)
        if out_shapes is None and not pure:
            # The output shapes are learnt by capturing this call (an impure function must
            # not run once to find them and again to be captured).
            return None
        if out_shapes is None:
            # First call at these shapes: run on copies, so a function that writes into
            # its inputs cannot change what a capture would see. If the plain run fails,
            # the capture that follows reports the function's error as it would without reuse.
            try:
                plain = run_plain(func, [a.copy() for a in inputs], kwargs)
            except Exception:
                plain = None
            if plain is None:
                return None
            out_shapes = shapes_of(plain[1])
            self.memo_out_shapes(exact, out_shapes)
        gsig, klass = self.finder.gen_key(call, out_shapes)
        gv = self.files.confirmed(gsig)
        if gv is None:
            return None
        inst = self.finder.gen_instance(gv, klass, call, out_shapes)
        if inst is None:
            return None
        return self.serve(
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
            pure=pure,
            serve_only=serve_only,
        )

    def serve(
        self,
        kind: Kind,
        sig: str,
        v: View,
        tables: Mapping[TableKey, LineageTable],
        expect_out: Sequence[Shape],
        call: Call,
        func: Callable[..., Any],
        inputs: list[F64],
        kwargs: Mapping[str, Any],
        plain: tuple[Any, list[F64]] | None,
        demoted: list[str],
        *,
        pure: bool,
        serve_only: bool = False,
    ) -> CaptureResult | None:
        """Serve the call from view ``v`` (its ``tables`` at this call's shapes): run ``func``
        on plain inputs (unless ``plain`` holds that run), check the output shapes, verify
        when due. None when the view does not apply or was demoted (added to ``demoted``).

        A check of an impure call is an observation: when one is due (see
        :meth:`~.verification.VerificationSchedule.observe_due`) nothing runs here and None
        sends the call to capture, which compares its lineage with the view. Under
        ``serve_only`` (nothing would be captured) only a view never checked on this exact
        key is refused; a periodic check is skipped."""
        if outside_domain(v, inputs):
            return None
        if not pure:
            due = self.schedule.observe_due(v, call.exact_key)
            if due == "new" or (due == "periodic" and not serve_only):
                return None
        if plain is None:
            plain = run_plain(func, inputs, kwargs)
        if plain is None:
            return None
        value, outs = plain
        out_shapes = shapes_of(outs)
        if [tuple(s) for s in expect_out] != out_shapes:
            self.files.kill(
                v,
                sig,
                f"output shapes {out_shapes} differ from the view's {list(expect_out)}",
                warn=True,
            )
            demoted.append(sig)
            return None
        exact = call.exact_key
        check, sampled = self.schedule.needs_check(v, exact) if pure else (False, False)
        verified = False
        if check:
            t0 = time.perf_counter()
            ok = verify_sample(func, inputs, kwargs, call.mode, tables, out_shapes, self.rng)
            if sampled:
                self.schedule.spend(t0)
            self.stats["verified"] += 1
            if not ok:
                self.files.kill(
                    v, sig, "a sampled annotated run of a call disagreed with it", warn=True
                )
                demoted.append(sig)
                return None
            self.schedule.mark_verified(v, exact)
            verified = True
        self.files.hit(v)
        self.stats[kind] += 1
        served = Served.of(call.mode, tables)
        if call.fast_key is not None and kind != "base":
            self.fast[call.fast_key] = FastEntry(
                kind,
                sig,
                v,
                tuple(out_shapes),
                exact,
                dict(tables),
                call,
                self.arguments.version,
                served,
            )
            if len(self.fast) > _MEMO:
                self.fast.popitem(last=False)
        return CaptureResult(
            value=value,
            outputs=tuple(outs),
            input_shapes=tuple(call.in_shapes),
            relations=served.relations,
            considered=served.considered,
            mode=annotator_mode(call.mode),
            obtained=kind,
            signature=sig,
            verified=verified,
            tables=served.tables,
            demoted=tuple(demoted),
        )

    def serve_fast(
        self,
        f: FastEntry,
        func: Callable[..., Any],
        inputs: list[F64],
        kwargs: Mapping[str, Any],
        demoted: list[str],
        *,
        pure: bool,
        serve_only: bool = False,
    ) -> CaptureResult | None:
        """A repeat hit: same function object, arguments and shapes as a call served before.

        Only the checks that can change between such calls are made: the view still being
        confirmed (in this process and, once a second, on disk), the argument relevance
        unchanged, the input domain (NaN, zeros), the output shapes, and the check (sampled
        verification of a pure call, observation of an impure one: see :meth:`serve`).
        """
        v = f.view
        if (
            v.status != "confirmed"
            or f.arg_version != self.arguments.version
            or self.files.is_dead(f.signature)
        ):
            return None
        if outside_domain(v, inputs):
            return None
        if not pure:
            due = self.schedule.observe_due(v, f.exact)
            if due == "new" or (due == "periodic" and not serve_only):
                return None
        result = func(*inputs, **kwargs)
        if type(result) is np.ndarray and result.dtype == np.float64:
            value: Any = result  # the common case, without the general unpacking
            outs = [result]
        else:
            plain = run_plain_result(result)
            if plain is None:
                return None
            value, outs = plain
        if len(outs) != len(f.out_shapes) or any(
            o.shape != s for o, s in zip(outs, f.out_shapes, strict=False)
        ):
            return None  # the full path decides (and demotes)
        verified = False
        if pure and self.schedule.sample():
            t0 = time.perf_counter()
            ok = verify_sample(
                func, inputs, kwargs, f.call.mode, f.tables, list(f.out_shapes), self.rng
            )
            self.schedule.spend(t0)
            self.stats["verified"] += 1
            if not ok:
                self.files.kill(
                    v, f.signature, "a sampled annotated run of a call disagreed with it", warn=True
                )
                demoted.append(f.signature)
                return None
            self.schedule.mark_verified(v, f.exact)
            verified = True
        self.files.hit(v)
        self.stats[f.kind] += 1
        return CaptureResult(
            value=value,
            outputs=tuple(outs),
            input_shapes=tuple(f.call.in_shapes),
            relations=f.served.relations,
            considered=f.served.considered,
            mode=annotator_mode(f.call.mode),
            obtained=f.kind,
            signature=f.signature,
            verified=verified,
            tables=f.served.tables,
        )
