"""Pushing a selection of output rows down a Spark plan as semijoins (PROVision §V-C).

To reconstruct the lineage of a few selected output rows ``S`` of a step, PROVision re-runs
the step on its inputs *semijoined* with ``S``: a predicate ``out.c = s.c`` over an output
column ``c`` moves below an operator when ``c`` is carried through it unchanged, and its
conjuncts over columns an input does not carry are dropped. What reaches an input is a
semijoin of the input with the selected rows on the columns it carries to the output: it may
keep rows that do not contribute (false positives, harmless) but never drops one that does.

:func:`pushdown_columns` finds, for every input, the output columns that are that input's
columns carried through unchanged — and only through operators where every input row behind
one output row shares the column's value:

* projections (a column or a renamed column), filters, sorts, repartitions, hints, aliases;
* joins (an output row is one row of each side, each side's columns carried);
* aggregations, for their grouping columns only (every row of a group shares its key);
* ``distinct`` / ``dropDuplicates`` (a kept row's group shares all compared columns).

Any other operator (a window, a limit, a union, a sample, a generator, ...) stops the
selection: the inputs below it are read whole, which is always correct. Inputs are found in
the analyzed plan by an alias (:data:`TAG`) the caller puts on them.
"""

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster.spark.jvm_bridge import java_frame

__all__ = ["TAG", "pushdown_columns", "semijoin", "semijoin_keys"]

TAG = "__dslog_in_"
"""Alias prefix marking input frames in a plan (``df.alias(TAG + name)``)."""

_THROUGH = frozenset(
    {
        "Filter",
        "Sort",
        "Repartition",
        "RepartitionByExpression",
        "ResolvedHint",
        "SubqueryAlias",
        "Deduplicate",
        "Distinct",
        "Project",
        "Join",
        "Aggregate",
    }
)


def _seq(s: Any) -> list[Any]:
    return [s.apply(i) for i in range(s.size())]


def _kind(e: Any) -> str:
    return str(e.getClass().getSimpleName())


def _attr_of(e: Any) -> tuple[int, int] | None:
    """``(output expr id, source expr id)`` of a projection entry that is a column or a
    renamed column; ``None`` for anything computed."""
    kind = _kind(e)
    if kind == "AttributeReference":
        i = int(e.exprId().id())
        return i, i
    if kind == "Alias" and _kind(e.child()) == "AttributeReference":
        return int(e.exprId().id()), int(e.child().exprId().id())
    return None


def _down(plan: Any, wanted: dict[int, str], found: dict[str, list[dict[str, str]]]) -> None:
    """Carry ``wanted`` (expr id -> output column) below ``plan``; record what reaches each
    tagged input in ``found`` (input name -> one ``{output column: input column}`` per
    occurrence)."""
    node = str(plan.nodeName())
    if node == "SubqueryAlias":
        alias = str(plan.alias())
        if alias.startswith(TAG):
            names = {int(a.exprId().id()): str(a.name()) for a in _seq(plan.output())}
            got = {out: names[i] for i, out in wanted.items() if i in names}
            found.setdefault(alias[len(TAG) :], []).append(got)
            return
    if node not in _THROUGH:
        for child in _seq(plan.children()):
            _down(child, {}, found)  # stopped: the inputs below are read whole
        return
    if node == "Project":
        moved = {}
        for e in _seq(plan.projectList()):
            pair = _attr_of(e)
            if pair is not None and pair[0] in wanted:
                moved[pair[1]] = wanted[pair[0]]
        wanted = moved
    elif node == "Aggregate":
        keys = {
            int(g.exprId().id())
            for g in _seq(plan.groupingExpressions())
            if _kind(g) == "AttributeReference"
        }
        moved = {}
        for e in _seq(plan.aggregateExpressions()):
            pair = _attr_of(e)
            if pair is not None and pair[1] in keys and pair[0] in wanted:
                moved[pair[1]] = wanted[pair[0]]
        wanted = moved
    for child in _seq(plan.children()):
        _down(child, wanted, found)


def pushdown_columns(out: DataFrame, inputs: list[str]) -> dict[str, dict[str, str]]:
    """For each input name, ``{output column: input column}`` of the columns the selection
    reaches it on (empty: the input is read whole). ``out`` is the step's output built on
    ``df.alias(TAG + name)`` of each input."""
    plan = java_frame(out).queryExecution().analyzed()
    top = {int(a.exprId().id()): str(a.name()) for a in _seq(plan.output())}
    found: dict[str, list[dict[str, str]]] = {}
    _down(plan, top, found)
    result: dict[str, dict[str, str]] = {}
    for name in inputs:
        seen = found.get(name, [])
        # an input read twice (a self-join) is filtered only when every use agrees
        same = bool(seen) and all(s == seen[0] for s in seen)
        result[name] = dict(seen[0]) if same else {}
    return result


def semijoin(frame: DataFrame, selected: DataFrame, on: Mapping[str, str]) -> DataFrame:
    """``frame`` ⋉ ``selected`` on ``frame[on[c]] <=> selected[c]`` for every output column
    ``c`` of ``on`` (null-safe: a null key keeps the input rows with a null there)."""
    keys = selected.select(*[F.col(f"`{c}`") for c in on]).toDF(*on.values())
    return semijoin_keys(frame, keys.distinct())


def semijoin_keys(frame: DataFrame, keys: DataFrame) -> DataFrame:
    """``frame`` ⋉ ``keys`` on every column of ``keys`` (named by ``frame``'s columns,
    null-safe; distinct tuples in a small frame, broadcast as it is)."""
    names = [f"__dslog_k{j}" for j in range(len(keys.columns))]
    sel = keys.toDF(*names)
    cond = [frame[f"`{c}`"].eqNullSafe(sel[k]) for c, k in zip(keys.columns, names, strict=True)]
    return frame.join(F.broadcast(sel), on=cond, how="left_semi")
