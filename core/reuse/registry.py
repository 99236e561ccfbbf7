"""The view registry: one object per lineage store that serves calls from views, and
captures and learns from the others.

:class:`ViewRegistry` coordinates the parts of :mod:`dslog_dagster.core.reuse`: it keys a call
(:mod:`.keys`), tries to serve it (:mod:`.serving`: base, then dim, then gen, verified per
:mod:`.verification`), and otherwise captures it (:func:`~dslog_dagster.core.capture.capture`)
and feeds the result to prediction (:mod:`.prediction`, probed by :mod:`.probes`). Views live
in files (:mod:`.persistence`); irrelevant arguments leave the keys (:mod:`.arguments`).
Declared operations (``DSLog.register_operation(reuse=...)``) have no function to run and
are served and learnt through :meth:`ViewRegistry.find_declared`,
:meth:`ViewRegistry.settle_declared` and :meth:`ViewRegistry.observe_declared`.
"""

import atexit
import contextlib
import functools
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.capture import (
    CaptureResult,
    Mode,
    OnLost,
    as_input,
    capture_inputs,
    check_options,
)
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import Shape
from dslog_dagster.core.reuse.arguments import ArgumentRelevance
from dslog_dagster.core.reuse.keys import Call, Unsignable, shapes_of
from dslog_dagster.core.reuse.lookup import ViewFinder
from dslog_dagster.core.reuse.persistence import Kind, ViewFiles, ViewInfo
from dslog_dagster.core.reuse.policy import ReusePolicy
from dslog_dagster.core.reuse.prediction import Predictor, Probe
from dslog_dagster.core.reuse.probes import Prober
from dslog_dagster.core.reuse.serving import (
    Need,
    Server,
    check_need,
    fast_key,
    has_nan,
    run_plain,
)
from dslog_dagster.core.reuse.verification import VerificationSchedule
from dslog_dagster.core.reuse.views import (
    CONSIDERED_ONLY,
    PARTS,
    TableKey,
    compress_all,
    contributing,
    only_parts,
    table_sets_equal,
)
from dslog_dagster.core.store import LineageStore
from dslog_dagster.errors import ReuseError

__all__ = ["DeclaredHit", "RegistryCapture", "ViewRegistry"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class DeclaredHit:
    """A view found for a declared operation (``DSLog.register_operation(reuse=...)``)."""

    kind: Kind
    signature: str
    tables: Mapping[TableKey, LineageTable]
    needs_check: bool
    exact_key: str


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
        >>> import numpy as np
        >>> reg = ViewRegistry("registry")  # a directory of its own, or a LineageStore
        >>> for _ in range(4):
        ...     r = reg.capture(np.negative, np.random.rand(100, 100))
        >>> r.obtained
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
        self.policy = policy or ReusePolicy()
        #: Counters of this instance: hits per kind, captures, verifications, demotions.
        self.stats: dict[str, int] = {
            "base": 0,
            "dim": 0,
            "gen": 0,
            "captured": 0,
            "verified": 0,
            "demoted": 0,
        }
        rng = np.random.default_rng(self.policy.seed)
        self._rng = rng
        #: The view files and the views loaded from them.
        self.files = ViewFiles(self.dir, self.policy.flush_interval, self.stats)
        self.arguments = ArgumentRelevance(self.files, self.policy.irrelevant_after)
        #: The keys of calls and the confirmed views under them.
        self.finder = ViewFinder(self.files, self.arguments, self.policy)
        self.schedule = VerificationSchedule(self.policy, self.files, rng)
        self.predictor = Predictor(self.files, self.finder, self.arguments, self.policy)
        self.server = Server(
            self.files, self.finder, self.schedule, self.arguments, self.policy, self.stats, rng
        )
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"ViewRegistry({str(self.root)!r})"

    def flush(self) -> None:
        """Write the hit counters of views served since their last write (also done every
        ``flush_interval`` seconds of hits and at interpreter exit)."""
        self.files.flush()

    def lookup(self, signature: str) -> ViewInfo | None:
        """The view stored under ``signature`` (any status), or None.

        Raises:
            ReuseError: the view file is unreadable or damaged.
        """
        v = self.files.get(signature, strict=True)
        if v is None:
            return None
        if self.files.is_dead(signature) and v.status != "non_reusable":
            v.status = "non_reusable"
        return v.info()

    def views(self) -> list[ViewInfo]:
        """Every view of the store (a table for the reuse-signature asset)."""
        out = []
        for sig in self.files.signatures():
            try:
                info = self.lookup(sig)
            except ReuseError:
                continue
            if info is not None:
                out.append(info)
        return sorted(out, key=lambda i: (i.op, i.kind, i.signature))

    # ----------------------------------------------------------- capture path

    def capture(
        self, func: Callable[..., Any], /, *arrays: npt.ArrayLike, **kwargs: Any
    ) -> CaptureResult:
        """:func:`~dslog_dagster.core.capture.capture`, served from a view when one matches.

        When one of the registry's confirmed views matches the call (base, then dim, then
        gen), annotated execution is skipped: ``func`` runs on plain float64 inputs and the
        lineage is instantiated from the view (``result.obtained`` says which). Otherwise the
        call is captured and fed to the registry, which predicts and confirms views from
        repeated calls.

        Every keyword argument goes to ``func`` (and into the signatures); the options of the
        capture (``mode``, ``on_lost``, ``need``, ``code_version``) are set with
        :meth:`with_options`: ``reg.with_options(mode="considered").capture(func, *arrays,
        **kwargs)``. This method uses the defaults.

        Args:
            func, *arrays: as for :func:`~dslog_dagster.core.capture.capture`.
            **kwargs: passed to ``func`` (not tracked), and part of the signatures.

        Returns:
            A :class:`~dslog_dagster.core.capture.CaptureResult`; ``obtained``, ``signature``,
            ``verified``, ``tables`` and ``demoted`` say how the registry obtained it.

        Raises:
            LineageLostError, CaptureError, UnsupportedArrayError: as for ``capture``.

        Examples:
            >>> import numpy as np
            >>> reg = ViewRegistry("views")
            >>> [reg.capture(np.negative, np.ones((3, 4))).obtained for _ in range(3)]
            ['captured', 'captured', 'base']
            >>> rng = np.random.default_rng(0)
            >>> [reg.capture(np.negative, rng.random((3, 4))).obtained for _ in range(3)]
            ['captured', 'captured', 'dim']

            The same input twice confirms the exact-input (base) view; distinct inputs whose
            lineage agrees confirm the dim view.
        """
        return RegistryCapture(registry=self).capture(func, *arrays, **kwargs)

    def with_options(
        self,
        *,
        mode: Mode = "contributing",
        on_lost: OnLost = "raise",
        need: Need = "all",
        code_version: str | None = None,
        pure: bool | None = None,
        defer: bool = True,
    ) -> "RegistryCapture":
        """This registry with capture options, for :meth:`RegistryCapture.capture`.

        Args:
            mode, on_lost: as for :class:`~dslog_dagster.core.capture.Capture`.
            need: with ``mode="considered"``: ``"considered"`` says the caller reads only
                :attr:`CaptureResult.considered`, so a view of the considered relation alone
                may serve the call even where the contributing relation is data-dependent
                (picks by comparison and sorts consider a shape-determined set of cells). The
                served result's ``relations`` then raise when read. ``"all"`` (default): both.
            code_version: replaces the hash of ``func``'s code in the signatures.
            pure: may ``func`` run more than once for a call (None: the policy's ``pure``,
                False by default)? Only then does the registry probe it on synthetic inputs
                before confirming a view, verify served calls by a sampled re-run, and run it
                plainly to learn the output shapes a gen view needs. Otherwise ``func`` runs
                exactly once per call and views are confirmed from observed captures alone
                (see :mod:`dslog_dagster.core.reuse`).
            defer: as for :class:`~dslog_dagster.core.capture.Capture`: ``False`` hands
                ``func`` annotated ndarrays from the start, in its capture and its probes,
                for code that refuses deferred inputs. Served calls run on plain ndarrays
                either way, and the views are the same.

        Raises:
            ValueError: ``mode``, ``on_lost`` or ``need`` is not one of its values, or
                ``need="considered"`` without ``mode="considered"``.

        Examples:
            >>> import numpy as np
            >>> reg = ViewRegistry("views-considered")
            >>> picks = reg.with_options(mode="considered", need="considered")
            >>> rng = np.random.default_rng(0)
            >>> [picks.capture(np.max, rng.random((3, 4)), axis=1).obtained for _ in range(4)]
            ['captured', 'captured', 'captured', 'dim']
        """
        return RegistryCapture(
            registry=self,
            mode=mode,
            on_lost=on_lost,
            need=need,
            code_version=code_version,
            pure=pure,
            defer=defer,
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
        pure: bool | None = None,
        defer: bool = True,
    ) -> CaptureResult:
        """:meth:`capture` on inputs already converted by
        :func:`~dslog_dagster.core.capture.as_input` (float64 arrays), with the function's
        keyword arguments as one mapping: serve a confirmed view or capture and learn.
        ``need="considered"`` (with ``mode="considered"``): serve from views of the
        considered relation alone. ``pure``, ``defer``: as for :meth:`with_options`."""
        check_need(need, mode)
        res = self._run(
            func,
            inputs,
            mode,
            on_lost,
            code_version,
            kwargs,
            need=need,
            serve_only=False,
            pure=self.policy.pure if pure is None else pure,
            defer=defer,
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
        pure: bool | None = None,
    ) -> CaptureResult | None:
        """Serve a confirmed view, never annotate: ``None`` when no view matches.

        For callers that must not pay for annotated execution (a "reuse only" policy): on a
        miss nothing ran and nothing is learnt; the caller runs ``func`` itself. An impure
        call (``pure``, as for :meth:`with_options`) is served only from a view already checked
        on its exact key, and a gen view only at output shapes seen in this process (they
        are not learnt by running ``func``); its periodic checks are skipped.
        """
        check_need(need, mode)
        return self._run(
            func,
            inputs,
            mode,
            "raise",
            code_version,
            kwargs,
            need=need,
            serve_only=True,
            pure=self.policy.pure if pure is None else pure,
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
        pure: bool,
        defer: bool = True,
    ) -> CaptureResult | None:
        kwargs = dict(kwargs) if kwargs else {}
        demoted: list[str] = []
        # The key mode of the views that may serve this call (see views.PARTS).
        key_mode = CONSIDERED_ONLY if need == "considered" else mode
        fkey = fast_key(func, key_mode, code_version, kwargs, inputs)
        if fkey is not None:
            res = self.server.serve_repeat(
                fkey, func, inputs, kwargs, demoted, pure=pure, serve_only=serve_only
            )
            if res is not None:
                return res
        try:
            call = Call.of(func, code_version, key_mode, kwargs, inputs)
        except Unsignable:
            return (
                None
                if serve_only
                else capture_inputs(func, inputs, mode, on_lost, kwargs, pure=pure, defer=defer)
            )
        call.fast_key = fkey
        res = self.server.serve_call(
            call, func, inputs, kwargs, demoted, pure=pure, serve_only=serve_only
        )
        if res is not None or serve_only:
            return res
        return self._capture_and_learn(
            call, func, inputs, mode, on_lost, kwargs, demoted, pure=pure, defer=defer
        )

    def _capture_and_learn(
        self,
        call: Call,
        func: Callable[..., Any],
        inputs: list[F64],
        mode: Mode,
        on_lost: OnLost,
        kwargs: Mapping[str, Any],
        demoted: list[str],
        *,
        pure: bool,
        defer: bool,
    ) -> CaptureResult:
        """Capture a call no view served and record it under its keys (the capture is the
        function's one run; only a pure call is also probed on synthetic inputs)."""
        res = capture_inputs(func, inputs, mode, on_lost, kwargs, pure=pure, defer=defer)
        self.stats["captured"] += 1
        dsig = self.finder.dim_key(call)
        nan_input = has_nan(inputs)
        if res.flagged or (nan_input and pure):
            # An over-approximation is no view; NaN inputs are outside what a pure call's
            # views are learnt on (they are probed with NaN and marked finite-only).
            return replace(res, signature=dsig, demoted=tuple(demoted))
        tables = compress_all(res.relations, res.considered, res.tables, res.considered_tables)
        outs = shapes_of(res.outputs)
        # the probes capture as the call did: a function that refuses deferred inputs would
        # make every probe inconclusive, and inconclusive probes confirm the view
        prober = Prober(func, inputs, kwargs, mode, self._rng, defer=defer) if pure else None
        has_zero = not all(a.all() for a in inputs)
        observed = not pure
        contents: str | None = None
        if observed and not nan_input:
            known = call.contents()
            call.contents = lambda: known  # hashed once for the dim and base keys
            contents = None if known is None else "|".join(known)
        # A considered-mode capture teaches both key families: views of both relations
        # (need="all") and views of the considered relation alone (need="considered").
        families = [mode, CONSIDERED_ONLY] if mode == "considered" else [mode]
        for fam in families:
            fcall = call if fam == call.mode else replace(call, mode=fam)
            parts = PARTS[fam]
            probe: Probe | None = None
            if prober is not None and self.policy.probe:
                probe = functools.partial(prober.check, parts=parts)

            self.server.memo_out_shapes(fcall.exact_key, outs)
            demoted += self.predictor.feed(
                fcall,
                outs,
                only_parts(tables, parts),
                probe,
                has_zero=has_zero,
                observed=observed,
                contents=contents,
                only_base=nan_input,  # an impure call with NaN inputs: its exact inputs only
            )
        return replace(
            res,
            signature=dsig,
            tables=contributing(tables),
            demoted=tuple(demoted),
        )

    # ----------------------------------------------------------- offline probes

    def probe(
        self,
        func: Callable[..., Any],
        /,
        *arrays: npt.ArrayLike,
        mode: Mode = "contributing",
        code_version: str | None = None,
        need: Need = "all",
        kwargs: Mapping[str, Any] | None = None,
        defer: bool = True,
    ) -> list[ViewInfo]:
        """Probe the views of a call on synthetic inputs now (an explicit, offline check).

        Views of calls not declared pure are confirmed from observed runs alone; this runs
        ``func`` on the probe inputs of :mod:`.probes` (ramps, extremes, ties, constants,
        NaN, zeros: many calls, on made-up data) and compares each view of the call's keys
        (dim and gen, candidate or confirmed) with the lineage they give. A view that
        agrees is marked ``confirmed_by="probes"`` and its domain set from the probes (NaN,
        zeros); one that differs is demoted for good (``reason`` says why). Run it where
        running ``func`` many times is harmless (not inside a pipeline step with side
        effects). ``arrays``, ``mode``, ``code_version``, ``need`` and ``kwargs`` identify
        the call as for :meth:`run` (``kwargs``: the function's keyword arguments);
        ``defer=False`` probes a function that refuses deferred inputs (as for
        :meth:`with_options`).

        Returns:
            The probed views after the check (an empty list when the call has none).

        Examples:
            >>> import numpy as np
            >>> reg = ViewRegistry("probed")
            >>> rng = np.random.default_rng(1)
            >>> def relu(a):
            ...     return np.maximum(a, 0.0)
            >>> for _ in range(3):  # positive data: the lineage never shows the threshold
            ...     _ = reg.capture(relu, rng.random(8) + 1.0)
            >>> reg.lookup(reg.capture(relu, rng.random(8) + 1.0).signature).confirmed_by
            'observed'
            >>> [(i.kind, i.status) for i in reg.probe(relu, rng.random(8) + 1.0)]
            [('dim', 'non_reusable')]
        """
        check_need(need, mode)
        inputs = [as_input(a, k) for k, a in enumerate(arrays)]
        kw = dict(kwargs) if kwargs else {}
        key_mode = CONSIDERED_ONLY if need == "considered" else mode
        call = Call.of(func, code_version, key_mode, kw, inputs)
        plain = run_plain(func, [a.copy() for a in inputs], kw)
        if plain is None:
            return []
        outs = shapes_of(plain[1])
        prober = Prober(func, inputs, kw, mode, self._rng, defer=defer)
        parts = PARTS[key_mode]
        keys: list[str] = [self.finder.dim_key(call)]
        if self.policy.gen:
            keys.append(self.finder.gen_key(call, outs)[0])
        probed: list[ViewInfo] = []
        for sig in keys:
            v = self.files.get(sig)
            if v is None or v.status == "non_reusable" or self.files.is_dead(sig):
                continue
            if v.kind == "gen":
                klass = self.finder.gen_key(call, outs)[1]
                tables = self.finder.gen_instance(v, klass, call, outs)
                if tables is None:
                    continue
            else:
                tables = v.tables
            finite_ok, nan_ok, zero_ok = prober.check(tables, parts)
            if not finite_ok:
                self.files.kill(
                    v,
                    sig,
                    "offline probes on synthetic inputs gave different lineage (data-dependent)",
                    warn=False,  # the caller asked and reads the returned status
                )
            else:
                v.finite_only, v.nonzero_only = not nan_ok, not zero_ok
                if v.status == "confirmed":
                    v.confirmed_by = "probes"
                self.files.save(v)
            info = self.lookup(sig)
            if info is not None:
                probed.append(info)
        return probed

    # ----------------------------------------------------------- declared lineage

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
            call = Call.declared(op_name, code_version, args, in_ids, in_shapes)
        except Unsignable:
            return None
        outs = [tuple(s) for s in out_shapes]
        found = self.finder.find_specific(call)
        if found is not None:
            kind, sig, v = found
            if v.out_shapes == outs:
                check, _ = self.schedule.needs_check(v, call.exact_key)
                return DeclaredHit(kind, sig, dict(v.tables), check, call.exact_key)
        if self.policy.gen:
            gsig, klass = self.finder.gen_key(call, outs)
            gv = self.files.confirmed(gsig)
            if gv is not None:
                inst = self.finder.gen_instance(gv, klass, call, outs)
                if inst is not None:
                    check, _ = self.schedule.needs_check(gv, call.exact_key)
                    return DeclaredHit("gen", gsig, inst, check, call.exact_key)
        return None

    def settle_declared(
        self, hit: DeclaredHit, actual: Mapping[TableKey, LineageTable] | None
    ) -> bool:
        """Record the use of ``hit``: compare with the declared lineage when given.

        Returns True when the view may be used, False when it was demoted (with a warning).
        """
        v = self.files.get(hit.signature)
        if v is None:
            return False
        if actual is not None:
            self.stats["verified"] += 1
            if not table_sets_equal(hit.tables, actual):
                self.files.kill(
                    v, hit.signature, "the declared lineage of a call disagreed with it", warn=True
                )
                return False
            self.schedule.mark_verified(v, hit.exact_key, sampled=False)
        self.files.hit(v)
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
            call = Call.declared(op_name, code_version, args, in_ids, in_shapes)
        except Unsignable:
            return None
        self.stats["captured"] += 1
        self.predictor.feed(call, [tuple(s) for s in out_shapes], dict(tables), None)
        return self.finder.dim_key(call)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryCapture:
    """A :class:`ViewRegistry` bound to capture options (:meth:`ViewRegistry.with_options`).

    Kept apart from the calls so that every keyword of :meth:`capture` reaches the function:
    a function with a ``mode``, ``need``, ``on_lost`` or ``code_version`` parameter of its own
    is called as it would be without the registry. Immutable and validated when made.
    """

    registry: ViewRegistry
    mode: Mode = "contributing"
    on_lost: OnLost = "raise"
    need: Need = "all"
    code_version: str | None = None
    pure: bool | None = None
    defer: bool = True

    def __post_init__(self) -> None:
        check_options(self.mode, self.on_lost)
        check_need(self.need, self.mode)

    def capture(
        self, func: Callable[..., Any], /, *arrays: npt.ArrayLike, **kwargs: Any
    ) -> CaptureResult:
        """:meth:`ViewRegistry.capture` with these options; every keyword goes to ``func``."""
        inputs = [as_input(a, k) for k, a in enumerate(arrays)]
        return self.registry.run(
            func,
            inputs,
            mode=self.mode,
            on_lost=self.on_lost,
            code_version=self.code_version,
            kwargs=kwargs,
            need=self.need,
            pure=self.pure,
            defer=self.defer,
        )
