"""Cheap verification of a served view against the real call.

A full capture costs an annotated execution of the whole call, which is what reuse avoids.
:func:`verify_sample` annotates only a *sample grid* of input cells — on every axis the first
two, the last two and two random adjacent pairs of indices, so the boundaries where symbolic
endpoints matter are always checked — runs the function once on the real data with every other cell
unannotated (a plain constant inside ``tracked_float``), and compares the lineage of the
sampled cells with the view's tables restricted to those cells:

* every captured pair must lie in the table (row membership, vectorised), and
* the table must hold exactly as many pairs with a sampled input cell as were captured
  (ProvRC rows are disjoint, so the count is a sum of box volumes per row and cell).

Both together mean set equality on the sample. Values and picks are computed on the real data,
so a data-dependent lineage on this input shows up; and because only the sampled cells carry
annotation sets, extraction and memory stay small.

:class:`VerificationSchedule` decides when: before a view is trusted for a call whose exact
shapes and argument values it has not been checked on, and afterwards on a random sample of
calls (``ReusePolicy.rate``) within a time budget (``ReusePolicy.budget``).

A sampled verification runs the function a second time, so it is made for calls declared
pure only. A call that is not declared pure is checked by *observation* instead
(:meth:`VerificationSchedule.observe_due`): when a check is due, the call is captured rather
than served (its one run is the annotated one) and the registry compares the captured lineage
with the view.
"""

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.capture import TRACKED_FLOAT, split_outputs, tracked_output
from dslog_dagster.core.extraction import extract_tables
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.reuse.persistence import View, ViewFiles
from dslog_dagster.core.reuse.policy import ReusePolicy
from dslog_dagster.core.reuse.views import TableKey

__all__ = ["VerificationSchedule", "sample_axes", "verify_sample"]

I64 = npt.NDArray[np.int64]
# Sample grids larger than this many cells are thinned to first/last/random per axis.
MAX_SAMPLE_CELLS = 4096


def sample_axes(shape: Sequence[int], rng: np.random.Generator) -> list[I64]:
    """Per-axis sampled indices: first two, last two and two random adjacent pairs."""

    def pick(d: int, rich: bool) -> I64:
        if d <= 0:
            return np.zeros(0, np.int64)
        r, s = (int(v) for v in rng.integers(0, d, size=2))
        cand = {0, d - 1, r} if not rich else {0, 1, d - 2, d - 1, r, r + 1, s, s + 1}
        return np.asarray(sorted(c for c in cand if 0 <= c < d), dtype=np.int64)

    axes = [pick(int(d), True) for d in shape]
    if int(np.prod([len(a) for a in axes], dtype=np.int64)) > MAX_SAMPLE_CELLS:
        axes = [pick(int(d), False) for d in shape]
    return axes


def _grid(axes: Sequence[I64]) -> I64:
    if not axes:
        return np.zeros((0, 1), np.int64)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.reshape(-1) for g in mesh]).astype(np.int64)


def _f(b: I64, q: int, r: int, mult: int) -> I64:
    out: I64 = mult * ((b + r) // q)
    return out


def _covered(t: LineageTable, oc: I64, ic: I64) -> bool:
    """Is every pair (oc[:, n], ic[:, n]) in the ProvRC table ``t``?"""
    n = oc.shape[1] if oc.ndim == 2 else 0
    if n == 0:
        return True
    covered = np.zeros(n, dtype=bool)
    for row in range(t.rows):
        cond = np.ones(n, dtype=bool)
        for j in range(t.out_rank):
            cond &= (oc[j] >= t.out_lo[j, row]) & (oc[j] <= t.out_hi[j, row])
        for k in range(t.in_rank):
            ref = int(t.in_ref[k, row])
            if ref < 0:
                val = ic[k]
            else:
                fb = _f(oc[ref], int(t.in_q[k, row]), int(t.in_r[k, row]), int(t.in_mult[k, row]))
                val = fb - ic[k]
            cond &= (val >= t.in_lo[k, row]) & (val <= t.in_hi[k, row])
        covered |= cond
        if covered.all():
            return True
    return bool(covered.all())


def _solve(q: int, r: int, mult: int, u: I64, v: I64, lo: I64, hi: I64) -> tuple[I64, I64]:
    """Vectorised :func:`~dslog_dagster.core.provrc.solve_f` (empty where lo > hi)."""
    if mult > 0:
        gu, gv = -((-u) // mult), v // mult
    else:
        gu, gv = -(v // -mult), (-u) // -mult
    blo = np.maximum(lo, gu * q - r)
    bhi = np.minimum(hi, (gv + 1) * q - r - 1)
    bhi = np.where(gu > gv, blo - 1, bhi)
    return blo, bhi


def _count(t: LineageTable, cells: I64) -> int:
    """Pairs of ``t`` whose input cell is one of ``cells`` (``(m, s)``)."""
    s = cells.shape[1]
    total = 0
    for row in range(t.rows):
        ok = np.ones(s, dtype=bool)
        for k in range(t.in_rank):
            if t.in_ref[k, row] < 0:
                ok &= (cells[k] >= t.in_lo[k, row]) & (cells[k] <= t.in_hi[k, row])
        vol = np.where(ok, 1, 0).astype(np.int64)
        for j in range(t.out_rank):
            lo = np.full(s, t.out_lo[j, row], dtype=np.int64)
            hi = np.full(s, t.out_hi[j, row], dtype=np.int64)
            for k in range(t.in_rank):
                if t.in_ref[k, row] != j:
                    continue
                lo, hi = _solve(
                    int(t.in_q[k, row]),
                    int(t.in_r[k, row]),
                    int(t.in_mult[k, row]),
                    cells[k] + t.in_lo[k, row],
                    cells[k] + t.in_hi[k, row],
                    lo,
                    hi,
                )
            vol *= np.maximum(hi - lo + 1, 0)
        total += int(vol.sum())
    return total


def _restricted_equal(t: LineageTable, axes: Sequence[I64], oc: I64, ic: I64) -> bool:
    """Is the captured sample relation equal to ``t`` restricted to the sampled input cells?"""
    n = oc.shape[1] if oc.ndim == 2 else (ic.shape[1] if ic.ndim == 2 else 0)
    if t.encoding == "columnar":
        l = t.out_rank
        keep = np.ones(t.rows, dtype=bool)
        for k, ax in enumerate(axes):
            keep &= np.isin(t.raw[l + k], ax)
        exp = t.raw[:, keep]
        got = np.vstack([oc, ic]) if oc.size or ic.size else np.zeros((exp.shape[0], n), np.int64)
        if exp.shape != got.shape:
            return False
        if exp.shape[0] == 0:
            return True
        eo = np.lexsort(exp[::-1])
        go = np.lexsort(got[::-1])
        return bool(np.array_equal(exp[:, eo], got[:, go]))
    if t.out_rank + t.in_rank == 0:
        return bool(min(t.rows, 1) == min(n, 1))
    if not _covered(t, oc, ic):
        return False
    return _count(t, _grid(axes)) == n


def verify_sample(
    func: Callable[..., Any],
    inputs: Sequence[npt.NDArray[np.float64]],
    kwargs: Mapping[str, Any],
    mode: str,
    tables: Mapping[TableKey, LineageTable],
    out_shapes: Sequence[tuple[int, ...]],
    rng: np.random.Generator,
) -> bool:
    """Does ``tables`` agree with the call's real lineage on a sample grid of input cells?

    ``mode`` is the view's key mode: ``"contributing"`` and ``"considered"`` check the
    relations that mode records, ``"considered-only"`` the considered relation alone.

    Returns False (never raises for the function's sake) when the function cannot run on the
    annotated sample, returns a different number or shape of outputs, or when any sampled
    cell's lineage differs from the view.
    """
    axes = [sample_axes(a.shape, rng) for a in inputs]
    considered = mode in ("considered", "considered-only")
    parts = (1,) if mode == "considered-only" else (0, 1) if considered else (0,)
    epoch = _annotator.begin(1 if considered else 0)
    try:
        try:
            tracked = []
            for a, ax in zip(inputs, axes, strict=True):
                full = _annotator.annotate(a)[0]
                if a.ndim == 0:
                    tracked.append(full)
                    continue
                part = a.astype(TRACKED_FLOAT)
                sel = np.ix_(*ax)
                part[sel] = full[sel]
                tracked.append(part)
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                result = func(*tracked, **kwargs)
            outs, _ = split_outputs(result)
            arrs = [tracked_output(o, k, "verification") for k, o in enumerate(outs)]
        except Exception:
            return False
        if len(arrs) != len(out_shapes):
            return False
        shapes = [tuple(int(d) for d in a.shape) for a in inputs]
        for o, arr in enumerate(arrs):
            if tuple(int(d) for d in arr.shape) != tuple(out_shapes[o]):
                return False
            for which in parts:
                for i, got in enumerate(extract_tables(arr, shapes, bool(which))):
                    # The same extraction as a capture's; the sample's pairs are few.
                    sample = got.decompress()
                    oc, ic = sample.out_cols, sample.in_cols
                    t = tables.get((which, o, i))
                    n = sample.n
                    if t is None:
                        if n:
                            return False
                        continue
                    if (t.out_shape, t.in_shape) != (tuple(arr.shape), shapes[i]):
                        return False
                    if not _restricted_equal(t, axes[i], oc, ic):
                        return False
    finally:
        _annotator.end(epoch)  # this call's capture only (captures are per thread)
    return True


class VerificationSchedule:
    """When a served view is verified, and the record of what it was verified on.

    Args:
        policy: ``verify_new``, ``rate`` and ``budget``.
        files: the registry's view files (a verification is written to the view's file).
        rng: the registry's random generator (sampling).
    """

    def __init__(self, policy: ReusePolicy, files: ViewFiles, rng: np.random.Generator) -> None:
        self.policy = policy
        self.files = files
        self.rng = rng
        #: Seconds sampled verifications may still take in this registry instance.
        self.budget = float(policy.budget)

    def sample(self) -> bool:
        """Should this hit be verified again (a ``rate`` draw, within the budget)?"""
        return self.policy.rate > 0 and self.budget > 0 and self.rng.random() < self.policy.rate

    def observe_due(self, v: View, exact: str) -> Literal["new", "periodic"] | None:
        """Should this call of an impure step be captured, as a check of ``v``, rather than
        served? ``"new"``: the view was not checked on this exact key (``verify_new``);
        ``"periodic"``: every ``round(1/rate)``-th call of the view. Deterministic (it
        counts the view's hits and checks), so asking twice for one call gives one answer."""
        if self.policy.verify_new and exact not in v.verified:
            return "new"
        period = self.policy.period
        if period and (v.hits + v.observed_checks + 1) % period == 0:
            return "periodic"
        return None

    def needs_check(self, v: View, exact: str) -> tuple[bool, bool]:
        """(verify now?, is it a sampled verification?) for ``v`` serving exact key ``exact``."""
        if self.policy.verify_new and exact not in v.verified:
            return True, False
        if self.sample():
            return True, True
        return False, False

    def spend(self, since: float) -> None:
        """Charge a sampled verification started at ``perf_counter()`` value ``since``."""
        self.budget -= time.perf_counter() - since

    def mark_verified(self, v: View, exact: str, *, sampled: bool = True) -> None:
        """Record that ``v`` agreed with the real lineage of a call with exact key ``exact``
        (``sampled``: by a sampled verification; else by lineage observed otherwise)."""
        if sampled:
            v.sampled_checks += 1
        else:
            v.observed_checks += 1
        if exact not in v.verified:
            v.verified.append(exact)
        v.last_verified = time.time()
        self.files.save(v)
