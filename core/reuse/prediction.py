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

import numpy as np

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import Shape
from dslog_dagster.core.reuse.arguments import ArgumentRelevance
from dslog_dagster.core.reuse.keys import Call, digest
from dslog_dagster.core.reuse.lookup import ViewFinder
from dslog_dagster.core.reuse.persistence import Kind, View, ViewFiles
from dslog_dagster.core.reuse.policy import ReusePolicy
from dslog_dagster.core.reuse.views import TableKey, fit, table_sets_equal

__all__ = ["Predictor", "Probe", "full_rank"]

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
    ) -> list[str]:
        """Record one captured call under its keys; returns the signatures it demoted.

        ``has_zero``: an input holds an exact 0, so nonzero-only views do not apply to it."""
        demoted: list[str] = []
        dim_dead = True
        if self.policy.dim:
            sig = self.finder.dim_key(call)
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
        bsig = self.finder.base_key(call) if self.policy.base and dim_dead else None
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
        call: Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Probe | None,
        m: int,
        demoted: list[str],
        has_zero: bool = False,
    ) -> bool:
        """Base/dim bookkeeping; returns True when the key is (now) non-reusable."""
        if self.files.is_dead(sig):
            return True
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
            if kind == "dim":
                drop = self.arguments.drop(call.code, call.mode)
                v.group = digest(call.code, call.mode, repr(call.in_shapes))
                v.owner = digest(call.code, call.mode)
                v.arg_tokens = {k: t for k, t in call.arg_tokens.items() if k not in drop}
                self.files.groups.setdefault(v.group, []).append(sig)
            self.files.views[sig] = v
            if m == 0:
                return self._confirm(v, call, probe, tables, demoted)
            self.files.save(v)
            return False
        if v.nonzero_only and has_zero:
            return False  # outside the view's domain: neither a match nor a mismatch
        if v.out_shapes != out_shapes or not table_sets_equal(v.tables, tables):
            if v.status == "confirmed":
                demoted.append(sig)
            self.files.kill(
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
            self.files.save(v)
        return False

    def _confirm(
        self,
        v: View,
        call: Call,
        probe: Probe | None,
        tables: Mapping[TableKey, LineageTable],
        demoted: list[str],
    ) -> bool:
        if probe is not None:
            finite_ok, nan_ok, zero_ok = probe(tables)
            if not finite_ok:
                self.files.kill(
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
        self.files.save(v)
        if v.kind == "dim":
            self.arguments.note_confirmed_dim(call, v)
        return False

    def _feed_gen(
        self,
        call: Call,
        out_shapes: list[Shape],
        tables: dict[TableKey, LineageTable],
        probe: Probe | None,
        demoted: list[str],
        has_zero: bool = False,
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
        for ovals, otabs in v.observations:
            if ovals == vals:
                if not table_sets_equal(otabs, tables):
                    if v.status == "confirmed":
                        demoted.append(sig)
                    self.files.kill(
                        v, sig, "two captures at one shape had different lineage", warn=True
                    )
                return
        if v.status == "confirmed":
            inst = self.finder.gen_instance(v, klass, call, out_shapes)
            if inst is None or not table_sets_equal(inst, tables):
                demoted.append(sig)
                self.files.kill(v, sig, f"a capture at extents {vals} contradicted it", warn=True)
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
            self._confirm(v, call, probe, tables, demoted)
        else:
            self.files.save(v)
