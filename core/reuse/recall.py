"""Recall a call's lineage from a confirmed view without running the function.

Serving (:mod:`.serving`) always runs the function (on plain inputs): the caller needs its
values. Reconstructing the lineage of a step that ran on demand (PROVision item 2: "for NumPy
steps whose lineage is known from a reuse view, take it from the view") needs no values — the
outputs are stored — so :func:`recall` looks the call up the way serving does (base, dim, then
gen at the stored output shapes) and hands back the view's tables, running nothing.

Nothing runs, so nothing can be verified here: a view is used only when it was already checked
against the real lineage of a call with these **exact** inputs and arguments (its ``verified``
keys), and only when the inputs are in its domain (no NaN for a finite-only view, no exact zero
for a nonzero-only one). Anything else returns ``None`` and the caller re-runs the step.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dslog_dagster.core.capture import Mode
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import Shape
from dslog_dagster.core.reuse.keys import Call, Unsignable
from dslog_dagster.core.reuse.registry import ViewRegistry
from dslog_dagster.core.reuse.serving import outside_domain
from dslog_dagster.core.reuse.views import CONSIDERED_ONLY, considered, contributing

__all__ = ["Recalled", "recall"]


@dataclass(frozen=True, slots=True)
class Recalled:
    """A call's lineage from a view: ``(output, input) -> table`` of the relation asked for,
    the view's kind (``base``, ``dim``, ``gen``) and signature."""

    tables: dict[tuple[int, int], LineageTable]
    kind: str
    signature: str


def _stand_in(name: str) -> Any:
    """A callable named ``name`` (no module) for the key of a call recorded under that name:
    never called."""

    def call(*_: Any, **__: Any) -> Any:
        msg = "recall never runs the function"
        raise AssertionError(msg)

    call.__qualname__ = call.__name__ = name
    call.__module__ = None  # type: ignore[assignment]
    return call


def recall(
    registry: ViewRegistry,
    name: str,
    code_version: str,
    kwargs: Mapping[str, Any],
    inputs: Sequence[np.ndarray[Any, Any]],
    out_shapes: Sequence[Shape],
    mode: Mode = "contributing",
) -> Recalled | None:
    """The lineage of the call of ``name`` (``code_version``, ``kwargs``) on ``inputs``, from
    a confirmed view checked on exactly this call, or ``None``.

    ``mode="considered"`` asks for the considered relation (views of the considered relation
    alone, as a step in considered mode is served); otherwise the contributing one.
    """
    key_mode = CONSIDERED_ONLY if mode == "considered" else "contributing"
    arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in inputs]
    try:
        call = Call.of(_stand_in(name), code_version, key_mode, dict(kwargs), arrays)
    except Unsignable:
        return None
    finder = registry.finder
    found = finder.find_specific(call)
    if found is not None and found[0] == "dim" and outside_domain(found[2], arrays):
        found = finder.find_base(call)
    shapes = [tuple(s) for s in out_shapes]
    if found is not None:
        kind, sig, view = found
        tables = dict(view.tables)
        if [tuple(s) for s in view.out_shapes] != shapes:
            return None
    else:
        sig, klass = finder.gen_key(call, shapes)
        gen = registry.files.confirmed(sig)
        inst = finder.gen_instance(gen, klass, call, shapes) if gen is not None else None
        if gen is None or inst is None:
            return None
        kind, view, tables = "gen", gen, dict(inst)
    if outside_domain(view, arrays) or call.exact_key not in view.verified:
        return None
    picked = considered(tables) if mode == "considered" else contributing(tables)
    return Recalled(picked, kind, sig)
