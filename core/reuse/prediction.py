"""Prediction and confirmation of views from captured calls (ICDE VI-C, thesis 5.2.3).

After a capture the registry records a *candidate* under each key of the call (dim, base
where the dim key is data-dependent, gen). Each further capture with the same key is compared
with it: ``m`` matches (``ReusePolicy.confirm_after``, default 2) confirm the view; one
mismatch marks the key non-reusable for good. A gen candidate must *predict* captures at ``m``
shapes it has not seen (it is re-fitted when a new shape contradicts it). Before a view is
confirmed it is probed (:mod:`.probes`).
"""

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import Shape
from dslog_dagster.core.reuse.arguments import ArgumentRelevance
from dslog_dagster.core.reuse.keys import Call, digest
from dslog_dagster.core.reuse.lookup import ViewFinder
from dslog_dagster.core.reuse.persistence import Kind, View, ViewFiles
from dslog_dagster.core.reuse.policy import ReusePolicy
from dslog_dagster.core.reuse.views import TableKey, fit, table_sets_equal

__all__ = ["Predictor", "Probe", "State", "full_rank"]

#: A key's state after a capture was recorded under it.
State = Literal["dead", "candidate", "confirmed"]

#: Probes a view's tables before it is confirmed: (equal on every generic probe, also with
#: NaNs, also with zeros); see :meth:`~dslog_dagster.core.reuse.probes.Prober.check`.
Probe = Callable[[Mapping[TableKey, LineageTable]], tuple[bool, bool, bool]]


def full_rank(values: Sequence[tuple[int, ...]]) -> bool:
    """Do the input-symbol vectors span every direction (affinely), so that an affine
    template is pinned down? Output extents are functions of the input extents (the function
    is deterministic), so only the input symbols need to vary independently."""
    if not values:
        return False
    p = len(values[0])
    mat = np.asarray([[1, *v] for v in values], dtype=np.float64)
    return bool(np.linalg.matrix_rank(mat) == p + 1)


def _state(v: View) -> State:
    return "dead" if v.status == "non_reusable" else v.status


class Predictor:
    """Records captured (or declared) calls under their keys; confirms and demotes views.

    Args:
        files: the registry's view files.
        finder: the registry's keys of calls.
        arguments: the registry's argument relevance (fed with every confirmed dim view).
        policy: ``confirm_after``, ``base_confirm_after``, kinds, ``max_observations``.
    """

    def __init__(
        self,
        files: ViewFiles,
        finder: ViewFinder,
        arguments: ArgumentRelevance,
        policy: ReusePolicy,
    ) -> None:
        self.files = files
        self.finder = finder
        self.arguments = arguments
        self.policy = policy

    def feed(
        self,
        call: Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Probe | None,
        *,
        has_zero: bool = False,
        observed: bool = False,
        contents: str | None = None,
        only_base: bool = False,
    ) -> list[str]:
        """Record one captured call under its keys; returns the signatures it demoted.

        Args:
            probe: the synthetic-input probes of the call (pure calls), or None.
            has_zero: an input holds an exact 0, so nonzero-only views do not apply to it.
            observed: the call is not declared pure: its views are confirmed from observed
                captures alone, by ``confirm_after`` matches on distinct input data
                (``contents``, a digest of the inputs), and serve NaN-free inputs only (they
                are never learnt from inputs with NaN).
            only_base: learn the exact-input (base) view only (inputs with NaN).
        """
        demoted: list[str] = []
        dim_state: State = "dead"
        if self.policy.dim and not only_base:
            sig = self.finder.dim_key(call)
            dim_state = self._feed_specific(
                "dim",
                sig,
                call,
                out_shapes,
                tables,
                probe,
                self.policy.confirm_after,
                demoted,
                has_zero,
                observed=observed,
                contents=contents,
            )
        # Base views (exact inputs): a pure call learns them where the dim key turned out
        # data-dependent; an impure one also until its dim view is confirmed on distinct
        # data, so a step re-run on unchanged inputs is served without any re-run.
        want_base = dim_state == "dead" or (observed and dim_state != "confirmed")
        bsig = self.finder.base_key(call) if self.policy.base and want_base else None
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
                observed=observed,
            )
        if self.policy.gen and not only_base:
            self._feed_gen(call, out_shapes, tables, probe, demoted, has_zero, observed=observed)
        return demoted

    def _feed_specific(
        self,
        kind: Kind,
        sig: str,
        call: Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Probe | None,
        m: int,
        demoted: list[str],
        has_zero: bool = False,
        *,
        observed: bool = False,
        contents: str | None = None,
    ) -> State:
        """Base/dim bookkeeping; returns the key's state after this capture."""
        if self.files.is_dead(sig):
            return "dead"
        v = self.files.get(sig)
        if v is None:
            v = View(
                sig,
                kind,
                call.op,
                in_shapes=list(call.in_shapes),
                out_shapes=out_shapes,
                tables=tables,
            )
            v.verified.append(call.exact_key)
            v.note_contents(contents)
            if kind == "dim":
                drop = self.arguments.drop(call.code, call.mode)
                v.group = digest(call.code, call.mode, repr(call.in_shapes))
                v.owner = digest(call.code, call.mode)
                v.arg_tokens = {k: t for k, t in call.arg_tokens.items() if k not in drop}
                self.files.groups.setdefault(v.group, []).append(sig)
            self.files.views[sig] = v
            if m == 0:
                return self._confirm(v, call, probe, tables, demoted, observed=observed)
            self.files.save(v)
            return "candidate"
        if v.nonzero_only and has_zero:
            return _state(v)  # outside the view's domain: neither a match nor a mismatch
        if v.out_shapes != out_shapes or not table_sets_equal(v.tables, tables):
            if v.status == "confirmed":
                demoted.append(sig)
            self.files.kill(
                v,
                sig,
                "a later capture had different lineage (data-dependent or non-deterministic)",
                warn=True,
            )
            return "dead"
        if v.status == "confirmed":
            self._observed_check(v, call.exact_key)
            return "confirmed"
        if v.status == "candidate":
            if observed and not v.note_contents(contents):
                return "candidate"  # the same data again says nothing about data dependence
            v.matches += 1
            if call.exact_key not in v.verified:
                v.verified.append(call.exact_key)
            if v.matches >= m:
                return self._confirm(v, call, probe, tables, demoted, observed=observed)
            self.files.save(v)
        return _state(v)

    def _observed_check(self, v: View, exact: str) -> None:
        """A capture of a real call agreed with confirmed view ``v``: record the check."""
        v.observed_checks += 1
        if exact not in v.verified:
            v.verified.append(exact)
        v.last_verified = time.time()
        self.files.save(v)

    def _confirm(
        self,
        v: View,
        call: Call,
        probe: Probe | None,
        tables: Mapping[TableKey, LineageTable],
        demoted: list[str],
        *,
        observed: bool = False,
    ) -> State:
        if probe is not None:
            finite_ok, nan_ok, zero_ok = probe(tables)
            if not finite_ok:
                self.files.kill(
                    v,
                    v.signature,
                    "synthetic probe inputs gave different lineage (data-dependent)",
                    warn=False,
                )
                return "dead"
            v.finite_only = not nan_ok
            v.nonzero_only = not zero_ok
            v.confirmed_by = "probes"
        else:
            v.confirmed_by = "observed"
            if observed and v.kind != "base":
                # Views are never learnt from inputs with NaN, and NaN-aware code (nanmean,
                # imputation) has other lineage on them: serve NaN-free inputs only.
                v.finite_only = True
        v.status = "confirmed"
        v.last_verified = time.time()
        self.files.save(v)
        if v.kind == "dim":
            self.arguments.note_confirmed_dim(call, v)
        return "confirmed"

    def _feed_gen(
        self,
        call: Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Probe | None,
        demoted: list[str],
        has_zero: bool = False,
        *,
        observed: bool = False,
    ) -> None:
        sig, klass = self.finder.gen_key(call, out_shapes)
        vals = klass.values
        if not vals or self.files.is_dead(sig):
            return  # without a symbolic extent the class is one shape: the dim key covers it
        v = self.files.get(sig)
        if v is None:
            v = View(sig, "gen", call.op, observations=[(vals, tables)], seen=[vals])
            v.verified.append(call.exact_key)
            self.files.views[sig] = v
            self.files.save(v)
            return
        if v.nonzero_only and has_zero:
            return
        if v.status == "confirmed":
            inst = self.finder.gen_instance(v, klass, call, out_shapes)
            if inst is None or not table_sets_equal(inst, tables):
                demoted.append(sig)
                self.files.kill(v, sig, f"a capture at extents {vals} contradicted it", warn=True)
            else:
                self._observed_check(v, call.exact_key)
            return
        for ovals, otabs in v.observations:
            if ovals == vals:
                if not table_sets_equal(otabs, tables):
                    self.files.kill(
                        v, sig, "two captures at one shape had different lineage", warn=True
                    )
                return
        inst = None
        if v.template is not None and v.template.p == len(vals):
            inst = self.finder.gen_instance(v, klass, call, out_shapes)
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
                self.files.kill(v, sig, "no affine template fits its captures", warn=False)
                return
            v.template, v.observations = tmpl, obs
            v.matches = 0 if not predicted else v.matches
            in_syms = [
                k for k, b in enumerate(klass.bindings) if any(side == "i" for side, _, _ in b)
            ]
            v.fit_full = full_rank([tuple(o[0][k] for k in in_syms) for o in obs])
            v.instances.clear()
        if vals not in v.seen:
            v.seen.append(vals)
        if call.exact_key not in v.verified:
            v.verified.append(call.exact_key)
        v.encoded = None
        if v.matches >= self.policy.confirm_after and len(v.seen) > self.policy.confirm_after:
            self._confirm(v, call, probe, tables, demoted, observed=observed)
        else:
            self.files.save(v)
