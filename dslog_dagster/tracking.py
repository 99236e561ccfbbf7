"""How a tracked step obtains its lineage: the one place that calls ``capture``.

The decorators' wrapper calls :func:`obtain_lineage` — **the one place that calls
:func:`dslog_dagster.core.capture.capture`** (as :class:`~dslog_dagster.core.capture.Capture`,
which holds the step's options; or serves the lineage from a confirmed reuse view) — and
:func:`lineage_of` picks, per output and input, the cheapest form the store accepts. What the
wrapper then hands to the IO manager is in :mod:`dslog_dagster.tracked_step`.

This module does not import Dagster, so obtaining lineage can be unit-tested and reused by
other front ends.
"""

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dslog_dagster.core.capture import Capture, CaptureResult, OnLost, as_input
from dslog_dagster.core.capture import Mode as CaptureMode
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.policy import CapturePolicy, LineageMode

if TYPE_CHECKING:
    from dslog_dagster.core.reuse import Need, ViewRegistry

__all__ = ["lineage_of", "obtain_lineage"]


# ------------------------------------------------------------------ obtaining lineage


def obtain_lineage(
    func: Callable[..., Any],
    arrays: Sequence[np.ndarray],
    *,
    policy: CapturePolicy,
    mode: LineageMode,
    code_version: str,
    signature_args: dict[str, Any],
    reuse: "ViewRegistry | None" = None,
    pure: bool = False,
    defer: bool = True,
) -> tuple[CaptureResult | None, float]:
    """Run ``func(*tracked arrays)`` and obtain its lineage. THE single call to ``capture``.

    With ``reuse`` (a :class:`~dslog_dagster.core.reuse.ViewRegistry`), a confirmed view that
    matches serves the lineage and ``func`` runs on plain float64 arrays; otherwise the step is
    captured and the registry learns from it. ``CaptureResult.obtained`` says which happened
    ("captured", "base", "dim", "gen") and ``.signature`` names the view.

    Args:
        code_version: the step's code identity (op name, asset code version and a hash of the
            user function), so changing the function invalidates its views.
        signature_args: what else decides the lineage besides the arrays' shapes (config,
            partition key, untracked inputs); passed to ``func`` as keyword arguments, which it
            must ignore.
        pure: the step is declared pure, so reuse may run ``func`` more than once (probes
            on synthetic inputs, sampled verification); otherwise it runs exactly once.
        defer: ``func`` gets deferred inputs (default) or, ``False``, annotated ndarrays from
            the start (:attr:`Capture.defer <dslog_dagster.core.capture.Capture.defer>`), in
            the capture and in reuse's probes alike. A served call runs on plain ndarrays
            either way.

    Returns:
        ``(result, seconds)``; ``result`` is ``None`` only under ``policy="reuse_only"`` when
        no confirmed view matched (nothing ran: the caller runs the step plainly).

    In ``mode="considered"`` the step records the considered relation only, so reuse is
    asked for that relation alone (``need="considered"``): picks and sorts consider a
    shape-determined set of cells, so their views serve even though the picked cells vary.
    """
    on_lost: OnLost = "all_to_all" if policy == CapturePolicy.all_to_all else "raise"
    need: Need = "considered" if mode == LineageMode.considered else "all"
    # the engine spells the mode as its Literal
    core_mode: CaptureMode = "considered" if mode == LineageMode.considered else "contributing"
    t0 = time.perf_counter()
    result: CaptureResult | None
    if policy == CapturePolicy.reuse_only:
        if reuse is None:
            return None, 0.0
        inputs = [as_input(a, k) for k, a in enumerate(arrays)]
        result = reuse.serve(
            func,
            inputs,
            mode=core_mode,
            code_version=code_version,
            kwargs=signature_args,
            need=need,
            pure=pure,
        )
    elif reuse is not None:
        options = reuse.with_options(
            mode=core_mode,
            on_lost=on_lost,
            code_version=code_version,
            need=need,
            pure=pure,
            defer=defer,
        )
        result = options.capture(func, *arrays, **signature_args)
    else:
        result = Capture(mode=core_mode, on_lost=on_lost, pure=pure, defer=defer).run(
            func, *arrays, **signature_args
        )
    return result, time.perf_counter() - t0


def lineage_of(
    result: CaptureResult, output: int, input: int, *, considered: bool
) -> LineageRelation | LineageTable:
    """The lineage of ``output <- input`` in the cheapest form the store accepts.

    An annotated capture (its factorised extraction) and a served view carry the stored
    tables: the store registers those as they are, so neither a capture nor a reuse hit
    expands the relation cell by cell or compresses it again.
    """
    tables = result.considered_tables if considered else result.tables
    if tables is not None:
        table = tables.get((output, input))
        if table is not None:
            return table
    return result.relation(output, input, considered=considered)
