"""Lineage a Dagster step declares (``@tracked_asset(lineage=...)``) instead of capturing.

Some steps cannot run under the annotator: compiled extensions, calls to external services,
code that leaves NumPy (``tolist()``, ``bytes``), integer or string outputs. Their authors
know the lineage (a convolution reads a window, a lookup reads one row), and the core API
already takes it in the paper's forms (:class:`~dslog_dagster.core.api.Lineage`): a per-cell
callable ``capture(out_index) -> input cells``, ``(output box, input box)`` pairs, an
``(n, l + m)`` pair matrix, a :class:`~dslog_dagster.core.relation.LineageRelation` or a
compressed :class:`~dslog_dagster.core.provrc.LineageTable`. This module is the step-side
counterpart: it checks the declaration's *form* when the decorator runs (so a typo fails at
import, not in a run) and resolves it against the real input and output shapes when the step
has run (every returned cell is checked there, as in the core API).

A declaration is either one capture form (the step's only tracked input to its only output), a
mapping ``{input name: form or None}`` (one per input; ``None`` declares "no lineage from this
input"), or, for a step with several outputs, ``{output name: form or {input name: form}}``.
Every tracked input of every output must be declared: lineage is never silently incomplete.
"""

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dslog_dagster.core.api import Lineage
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import DSLogError, InvalidRelationError

__all__ = ["DeclaredLineage", "declared_lineage"]

_FORMS = (
    "a per-cell callable `capture(out_index) -> input cells`, a list of (output box, input "
    "box) pairs, an (n, l + m) pair matrix, a LineageRelation or a LineageTable"
)


def _is_form(value: object) -> bool:
    if isinstance(value, LineageRelation | LineageTable | list | tuple):
        return True
    if isinstance(value, np.ndarray):
        return bool(value.dtype != object)
    return callable(value) and not isinstance(value, type)


@dataclass(frozen=True, slots=True)
class DeclaredLineage:
    """A step's declared lineage, its form checked (see the module docstring for the forms).

    ``spec`` is what the decorator got; :meth:`relation` resolves one (output, input) pair.
    """

    spec: object
    step: str
    #: the decorator makes several outputs (``tracked_multi_asset``, ``tracked_op(out={...})``):
    #: the spec is keyed by output name
    multi_output: bool

    def for_output(self, out_name: str, n_outputs: int) -> object:
        """The declaration of output ``out_name`` (a form or a per-input mapping)."""
        if not self.multi_output and n_outputs == 1:
            return self.spec
        if not self.multi_output or not isinstance(self.spec, Mapping):
            msg = (
                f"Step `{self.step}` has {n_outputs} outputs, so `lineage=` must map each output "
                "name to its lineage: {output name: capture, or {input name: capture}}."
            )
            raise DSLogError(msg)
        if out_name not in self.spec:
            msg = (
                f"Step `{self.step}` declares lineage for outputs {sorted(self.spec)}, not for "
                f"output `{out_name}`; declare every output's lineage."
            )
            raise DSLogError(msg)
        return self.spec[out_name]

    def relation(
        self,
        out_name: str,
        n_outputs: int,
        in_name: str,
        inputs: Sequence[str],
        out_shape: tuple[int, ...],
        in_shape: tuple[int, ...],
    ) -> LineageRelation | LineageTable | None:
        """``out_name <- in_name`` as declared, checked against the shapes (``None``: the
        declaration says this input gives the output no lineage).

        Raises:
            DSLogError: an input is not declared, or an unknown one is.
            InvalidRelationError: the declared cells do not fit the shapes.
        """
        decl = self.for_output(out_name, n_outputs)
        if isinstance(decl, Mapping):
            unknown = sorted(set(decl) - set(inputs))
            if unknown:
                msg = (
                    f"Step `{self.step}` declares lineage from {unknown}, which are not its "
                    f"tracked inputs {list(inputs)} (inputs in `untracked_inputs` have none)."
                )
                raise DSLogError(msg)
            if in_name not in decl:
                msg = (
                    f"Step `{self.step}` declares no lineage from input `{in_name}` to "
                    f"`{out_name}`. Add `{in_name!r}: <capture>` to `lineage=` (or `None` for "
                    "no lineage from it), or list it in `untracked_inputs`."
                )
                raise DSLogError(msg)
            form = decl[in_name]
            if form is None:
                return None
        elif len(inputs) != 1:
            msg = (
                f"Step `{self.step}` has tracked inputs {list(inputs)}, so `lineage=` must say "
                "which input each declaration is for: {input name: capture, ...}."
            )
            raise DSLogError(msg)
        else:
            form = decl
        where = f"{self.step}: {out_name}"
        try:
            return Lineage(where, in_name, form).resolve(out_shape, in_shape)
        except InvalidRelationError as e:
            msg = (
                f"The lineage step `{self.step}` declares for `{out_name}` ← `{in_name}` does "
                f"not fit output shape {out_shape} ← input shape {in_shape}: {e}"
            )
            raise InvalidRelationError(msg) from e


def declared_lineage(
    spec: object, fn: Callable[..., Any], *, multi_output: bool
) -> DeclaredLineage | None:
    """Check the form of ``lineage=`` for step function ``fn`` when the decorator runs.

    Args:
        spec: what the user passed (``None``: nothing declared).
        fn: the step function (its parameters name the inputs a mapping may use).
        multi_output: the step has several outputs, so a mapping is keyed by output names.

    Raises:
        DSLogError: a value is not one of the capture forms, or (one output) a key is not a
            parameter of ``fn``.
    """
    if spec is None:
        return None
    step = getattr(fn, "__name__", "step")
    params = set(inspect.signature(fn).parameters)

    def check_form(value: object, what: str, allow_none: bool) -> None:
        if value is None and allow_none:
            return
        if not _is_form(value):
            msg = f"`lineage=` of step `{step}`: {what} is a {type(value).__name__}, not {_FORMS}."
            raise DSLogError(msg)

    def check_inputs(mapping: Mapping[Any, Any], what: str) -> None:
        for k, v in mapping.items():
            if not isinstance(k, str):
                msg = f"`lineage=` of step `{step}`: {what} keys must be input names, got {k!r}."
                raise DSLogError(msg)
            if k not in params:
                msg = (
                    f"`lineage=` of step `{step}` names input `{k}`, which is not a parameter "
                    f"of `{step}` ({', '.join(sorted(params)) or 'none'})."
                )
                raise DSLogError(msg)
            check_form(v, f"the lineage from `{k}`", allow_none=True)

    if multi_output:
        if not isinstance(spec, Mapping):
            msg = (
                f"`lineage=` of multi-output step `{step}` must map each output name to its "
                "lineage: {output name: capture, or {input name: capture}}."
            )
            raise DSLogError(msg)
        for out, decl in spec.items():
            if isinstance(decl, Mapping):
                check_inputs(decl, f"output `{out}`'s")
            else:
                check_form(decl, f"the lineage of output `{out}`", allow_none=False)
    elif isinstance(spec, Mapping):
        check_inputs(spec, "its")
    else:
        check_form(spec, "the declaration", allow_none=False)
    return DeclaredLineage(spec, step, multi_output)
