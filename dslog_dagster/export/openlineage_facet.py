"""Column lineage of one operation as OpenLineage sees it: fields, input fields, transformations.

OpenLineage's ``columnLineage`` dataset facet names, per output field, the input fields it came
from and how: ``DIRECT`` (the value was computed from it) or ``INDIRECT`` (it decided which
value or which row). These are our two relations read at column level — contributing and
considered (docs/concepts/semantics) — so the facet is a projection of the cell lineage we
store, not a second analysis. This module holds the projection and the rules that name the
transformation; it imports neither Dagster nor the OpenLineage client (the events are built in
:mod:`.openlineage_events`).

**Types and subtypes** (also in docs/export.md):

* contributing (``DIRECT``): ``AGGREGATION`` when some output cell of the column was computed
  from several cells of the input column (read off the contributing relation), and when a step
  of the operation generated rows (``instance_generation``) or reduced columns
  (``dimensionality_reduction``) and added or transformed the column: a group's ``max`` passes
  one picked cell (docs/concepts/semantics) and is still an aggregate, as OpenLineage's own
  integrations label it. ``IDENTITY`` when each
  output cell was computed from one cell and every step that added or transformed the column
  only copies (``join``, ``append``, ``feature_selection``, ``feature_rename``,
  ``instance_drop``: a join brings the other side's columns along). ``TRANSFORMATION``
  otherwise (computed, imputed, cast, or the effects are unknown).
* considered only (``INDIRECT``, pairs of the considered relation that the contributing one does
  not have): the subtype of the operation's steps, when they all name the same one —
  ``JOIN`` (a ``join`` step), ``GROUP_BY`` (``instance_generation``: group aggregates, pivot),
  ``SORT`` (``sort_values``, ``orderBy``, ``nlargest``...), ``WINDOW`` (rolling, shift, diff,
  cumulative calls, window functions), ``CONDITIONAL`` (``where``, ``mask``, ``clip``),
  ``FILTER`` (any other ``instance_drop``). Steps that name several subtypes, or none, leave the
  subtype out: which step decided a cell is not recorded, so it is not guessed.

Considered-only lineage exists only for frame steps (pandas, Spark) run with
``mode="considered"``: their capture hands the contributing column lineage along with the
considered relation. A step in the default contributing mode records no ``INDIRECT`` field, and
a NumPy array is one field whose stored pairs read as ``DIRECT``.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store.effects import (
    APPEND,
    DIMENSIONALITY_REDUCTION,
    FEATURE_RENAME,
    FEATURE_SELECTION,
    INSTANCE_DROP,
    INSTANCE_GENERATION,
    JOIN,
    UNKNOWN,
    OperationEffects,
    Step,
)

__all__ = [
    "PAIRS_MAX",
    "ColumnEdge",
    "FieldMap",
    "column_pairs",
    "direct_subtype",
    "indirect_subtype",
]

PAIRS_MAX = 1 << 22
"""Relations with more pairs than this are not projected cell by cell (no ``INDIRECT`` fields
and no structural ``AGGREGATION``; the description says so)."""

DIRECT, INDIRECT = "DIRECT", "INDIRECT"

_COPYING = (JOIN, APPEND, FEATURE_SELECTION, FEATURE_RENAME, INSTANCE_DROP)
"""Kinds whose added columns are copies (a join brings the other side's columns along)."""
_REDUCING = (INSTANCE_GENERATION, DIMENSIONALITY_REDUCTION)
_SORT = ("sort_values", "sort_index", "orderby", "sort", "nlargest", "nsmallest", "sortwithin")
_WINDOW = ("rolling", "shift", "diff", "cumsum", "cumprod", "cummax", "cummin", "window", "over")
_CONDITIONAL = ("where", "mask", "clip")


@dataclass(frozen=True, slots=True)
class FieldMap:
    """How a stored array is seen as an OpenLineage dataset: its fields, and the field of each
    column position (a frame: its column names; a NumPy array: one field, the array)."""

    fields: tuple[str, ...]
    by_column: bool

    def field_of(self, column: int) -> str:
        return self.fields[column] if self.by_column else self.fields[0]

    @classmethod
    def of(cls, name: str, shape: Sequence[int], columns: Sequence[str] | None) -> "FieldMap":
        if columns is not None and len(shape) == 2 and len(columns) == shape[1]:
            return cls(tuple(columns), True)
        return cls((name,), False)


@dataclass(frozen=True, slots=True)
class ColumnEdge:
    """One input field of one output field, with its transformation."""

    input: str
    field: str
    type: str
    subtype: str | None
    description: str


def _relation(r: LineageRelation | LineageTable) -> LineageRelation | None:
    if isinstance(r, LineageTable):
        if r.n_pairs > PAIRS_MAX:
            return None
        return r.decompress()
    return None if r.n > PAIRS_MAX else r


def _size(r: LineageRelation | LineageTable) -> int:
    return r.n_pairs if isinstance(r, LineageTable) else r.n


def column_pairs(
    rel: LineageRelation | LineageTable, out: FieldMap, inp: FieldMap
) -> dict[tuple[str, str], bool] | None:
    """``{(output field, input field): several}`` of a relation: the field pairs it links, and
    whether some output cell reads several input cells of that input field (an aggregate).
    ``None`` when the relation is too big to project (:data:`PAIRS_MAX`)."""
    r = _relation(rel)
    if r is None:
        return None
    n = r.n
    if n == 0:
        return {}
    oc = r.out_cols[1] if out.by_column else np.zeros(n, np.int64)
    ic = r.in_cols[1] if inp.by_column else np.zeros(n, np.int64)
    out_cell = np.ravel_multi_index(tuple(r.out_cols), tuple(r.out_shape))
    key = np.stack([oc.astype(np.int64), ic.astype(np.int64), out_cell.astype(np.int64)], 1)
    # (out col, in col, out cell) with its number of input cells
    cells, counts = np.unique(key, axis=0, return_counts=True)
    found: dict[tuple[str, str], bool] = {}
    for (o, i, _), c in zip(cells.tolist(), counts.tolist(), strict=True):
        k = (out.field_of(int(o)), inp.field_of(int(i)))
        found[k] = found.get(k, False) or c > 1
    return found


def _steps(effects: OperationEffects | None) -> tuple[Step, ...]:
    return () if effects is None else effects.steps


def direct_subtype(
    field: str, effects: OperationEffects | None, several: bool | None, numpy: bool
) -> str:
    """``IDENTITY`` / ``TRANSFORMATION`` / ``AGGREGATION`` of a contributing field pair (module
    docstring). ``several``: whether some output cell reads several cells of the input field
    (``None``: the contributing relation was not at hand); ``numpy``: the dataset is a whole
    NumPy array (its effects name column positions, not the field)."""
    steps = _steps(effects)
    if several:
        return "AGGREGATION"
    reducing = [s for s in steps if set(s.kinds) & set(_REDUCING)]
    if reducing and (numpy or _touches(reducing, field)):
        # an aggregate of its group (a max passes one picked cell, still an aggregate)
        return "AGGREGATION"
    if several is None:
        return "TRANSFORMATION"
    if not steps or any(set(s.kinds) - set(_COPYING) for s in steps if _touches([s], field, numpy)):
        return "TRANSFORMATION"
    return "IDENTITY"


def _touches(steps: Iterable[Step], field: str, numpy: bool = False) -> bool:
    """Whether a step added or transformed ``field`` (any column of a NumPy array), or does
    not know its columns."""
    for s in steps:
        for what in ("added", "transformed"):
            cols = getattr(s, what)
            if cols is None or (field in cols if not numpy else bool(cols)):
                return True
        if UNKNOWN in s.kinds:
            return True
    return False


def _subtype_of(s: Step) -> str | None:
    method = s.call.rsplit(".", 1)[-1].lower()
    where = s.call.lower()
    if JOIN in s.kinds:
        return "JOIN"
    if INSTANCE_GENERATION in s.kinds:
        return "GROUP_BY"
    if method in _SORT:
        return "SORT"
    if method in _WINDOW or any(w in where for w in ("rolling", "window")):
        return "WINDOW"
    if method in _CONDITIONAL:
        return "CONDITIONAL"
    if INSTANCE_DROP in s.kinds:
        return "FILTER"
    return None


def indirect_subtype(effects: OperationEffects | None) -> str | None:
    """The subtype of a considered-only field pair: the one subtype every step that names one
    names, ``None`` when they name several or none (module docstring)."""
    named = {t for s in _steps(effects) if (t := _subtype_of(s)) is not None}
    return named.pop() if len(named) == 1 else None


def describe(effects: OperationEffects | None) -> str:
    """The calls of an operation, for a transformation's ``description``."""
    steps = _steps(effects)
    return ", ".join(dict.fromkeys(s.call for s in steps)) if steps else "unknown"


def edges(
    out: FieldMap,
    inputs: Mapping[str, FieldMap],
    relations: Mapping[str, LineageRelation | LineageTable],
    *,
    considered: bool,
    direct: Mapping[str, Mapping[str, Sequence[str]]] | None,
    effects: OperationEffects | None,
    contributing: Mapping[str, LineageRelation | LineageTable] | None = None,
) -> dict[str, list[ColumnEdge]]:
    """``{output field: [ColumnEdge]}`` of an operation.

    Args:
        out / inputs: the output's and each input's (by dataset name) fields.
        relations: the stored relation ``out <- input`` per input dataset name.
        considered: the relations are the considered ones (``mode="considered"``).
        direct: the contributing column lineage of a frame capture (``{output column: {input
            dataset: [input columns]}}``), when known; else the contributing pairs are read off
            the relations (which must then be the contributing ones).
        effects: the operation's recorded effects.
        contributing: with ``considered``, the contributing relations too when the capture
            handed them over (their structure gives ``AGGREGATION`` and ``IDENTITY``).
    """
    calls = describe(effects)
    result: dict[str, list[ColumnEdge]] = {f: [] for f in out.fields}
    for name, inp in inputs.items():
        rel = relations.get(name)
        pairs = None if rel is None else column_pairs(rel, out, inp)
        if direct is not None:
            linked = {(o, c) for o, ins in direct.items() for c in ins.get(name, ()) if o in result}
        elif pairs is not None:  # a NumPy step: its stored pairs (contributing ⊆ considered)
            linked = set(pairs)
        elif not out.by_column and not inp.by_column and rel is not None and _size(rel):
            linked = {(out.fields[0], inp.fields[0])}  # too big to project: the arrays only
        else:
            linked = set()
        several = None if considered else pairs
        if considered and contributing is not None and name in contributing:
            several = column_pairs(contributing[name], out, inp)
        for o, c in sorted(linked):
            many = None if several is None else several.get((o, c), False)
            sub = direct_subtype(o, effects, many, numpy=not out.by_column)
            result[o].append(ColumnEdge(name, c, DIRECT, sub, calls))
        if considered and direct is not None and pairs is not None:
            why = indirect_subtype(effects)
            for o, c in sorted(set(pairs) - linked):
                result[o].append(ColumnEdge(name, c, INDIRECT, why, calls))
    return result
