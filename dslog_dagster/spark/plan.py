"""Column lineage from Spark's analyzed logical plan.

Every tracked operation runs the real DataFrame method on a frame that carries provenance
*slot* columns (:mod:`dslog_dagster.spark.state`). The analyzed plan of the result then says,
attribute by attribute, which columns each output column was computed from. This module walks
the plan nodes an operation added on top of its input plan(s) and maps every output attribute
to its :class:`ColumnLineage`: the (slot, input column) pairs that *contributed* its value and
the ones that were only *considered* (filter predicates, join keys, grouping keys, window
partitions — PROVision's distinction).

Only the node types the supported operations produce are understood; any other node raises
:class:`~dslog_dagster.errors.UnsupportedFrameOperationError` naming it, so lineage is never
guessed.
"""

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.spark.jvm_bridge import java_frame

__all__ = [
    "SLOT_PREFIX",
    "ColumnLineage",
    "PlanWalker",
    "WindowWithoutRule",
    "analyzed",
    "field_lineage",
    "is_slot",
    "mentions_struct",
    "nodes_above",
    "quoted",
    "row_considered",
    "slot_id",
    "slot_name",
    "window_key_defs",
]

SLOT_PREFIX = "__dslog_s"

Ref = tuple[int, int]  # (slot id, input column index)


def slot_name(sid: int) -> str:
    """Column name of provenance slot ``sid``."""
    return f"{SLOT_PREFIX}{sid}"


def quoted(name: str) -> str:
    """``name`` as a SQL identifier (backticks, doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def is_slot(name: str) -> bool:
    return name.startswith(SLOT_PREFIX) and name[len(SLOT_PREFIX) :].isdigit()


def slot_id(name: str) -> int:
    return int(name[len(SLOT_PREFIX) :])


@dataclass(frozen=True, slots=True)
class ColumnLineage:
    """Where one column's cells come from, per output row.

    ``contrib``: pairs ``(slot, c)`` — the cell depends on column ``c`` of every input row the
    output row's slot ``slot`` names. ``consid``: pairs that were only considered (they
    filtered, joined, grouped or ordered the rows but are not part of the value).

    ``fields``: for a struct column whose fields' lineage is known, each field's own lineage
    (a nested struct's field has ``fields`` of its own); ``contrib``/``consid`` are then the
    union over the fields, so code that treats the struct as one column stays right. ``None``:
    a scalar, or a struct whose fields all share the column's lineage (whole-cell: from an
    expression without a field rule). See :mod:`~dslog_dagster.spark.fields`.
    """

    contrib: frozenset[Ref] = frozenset()
    consid: frozenset[Ref] = frozenset()
    fields: "tuple[tuple[str, ColumnLineage], ...] | None" = None

    @classmethod
    def of_fields(cls, fields: "Iterable[tuple[str, ColumnLineage]]") -> "ColumnLineage":
        """A struct made of ``fields`` (name, lineage), in order."""
        items = tuple(fields)
        return cls(
            frozenset().union(*(f.contrib for _, f in items)),
            frozenset().union(*(f.consid for _, f in items)),
            items,
        )

    def full(self) -> frozenset[Ref]:
        return self.contrib | self.consid

    def whole(self) -> "ColumnLineage":
        """The column's lineage without its fields' (every field shares it)."""
        return self if self.fields is None else ColumnLineage(self.contrib, self.consid)

    def field(self, name: str) -> "ColumnLineage":
        """Field ``name``'s lineage (the whole column's when the fields are not known)."""
        for n, f in self.fields or ():
            if n == name:
                return f
        return self.whole()

    def with_field(self, name: str, lin: "ColumnLineage") -> "ColumnLineage":
        """The struct with field ``name`` replaced or added (``withField``)."""
        if self.fields is None:
            return self | lin  # the other fields are not known apart: whole-cell
        items = list(self.fields)
        at = [k for k, (n, _) in enumerate(items) if n == name]
        if at:
            items[at[0]] = (name, lin)
        else:
            items.append((name, lin))
        return ColumnLineage.of_fields(items).considering(self.consid)

    def without_field(self, name: str) -> "ColumnLineage":
        """The struct without field ``name`` (``dropFields``)."""
        if self.fields is None:
            return self
        kept = [(n, f) for n, f in self.fields if n != name]
        return ColumnLineage.of_fields(kept).considering(self.consid)

    def leaf(self, path: Sequence[str]) -> "ColumnLineage":
        """The lineage of the field at ``path`` (names from the column down)."""
        lin = self
        for name in path:
            lin = lin.field(name)
        return lin.whole()

    def __or__(self, other: "ColumnLineage") -> "ColumnLineage":
        return ColumnLineage(self.contrib | other.contrib, self.consid | other.consid)

    def considering(self, refs: Iterable[Ref]) -> "ColumnLineage":
        extra = frozenset(refs)
        if self.fields is None:
            return ColumnLineage(self.contrib, self.consid | extra)
        items = tuple((n, f.considering(extra)) for n, f in self.fields)
        return ColumnLineage(self.contrib, self.consid | extra, items)

    def remap(self, mapping: Mapping[int, int]) -> "ColumnLineage":
        """Move every pair to another slot (``mapping[old] = new``); unmapped slots drop."""
        items = None
        if self.fields is not None:
            items = tuple((n, f.remap(mapping)) for n, f in self.fields)
        return ColumnLineage(
            frozenset((mapping[s], c) for s, c in self.contrib if s in mapping),
            frozenset((mapping[s], c) for s, c in self.consid if s in mapping),
            items,
        )

    def keep_slots(self, present: "set[int] | frozenset[int]") -> "ColumnLineage":
        """Only the pairs of slots in ``present`` (a step dropped the others)."""
        items = None
        if self.fields is not None:
            items = tuple((n, f.keep_slots(present)) for n, f in self.fields)
        return ColumnLineage(
            frozenset(r for r in self.contrib if r[0] in present),
            frozenset(r for r in self.consid if r[0] in present),
            items,
        )


def _counts(e: Any) -> bool:
    """Whether aggregate expression ``e`` is a plain ``count(...)`` (aliased or not)."""
    inner = e.child() if e.nodeName() == "Alias" else e
    if inner.nodeName() != "AggregateExpression":
        return False
    return str(inner.aggregateFunction().getClass().getSimpleName()) == "Count"


def union_all(lins: Iterable[ColumnLineage]) -> ColumnLineage:
    out = ColumnLineage()
    for x in lins:
        out = out | x
    return out


# An attribute of a plan: either a provenance slot or a column with its lineage.
Info = ColumnLineage | str  # str: the slot's name


def row_considered(infos: Mapping[int, Info]) -> frozenset[Ref]:
    """The row's considered lineage: the pairs every user column of ``infos`` considers
    (filter predicates, join and group keys apply to the whole row)."""
    lins = [v.consid for v in infos.values() if isinstance(v, ColumnLineage)]
    return frozenset.intersection(*lins) if lins else frozenset()


def seq(s: Any) -> list[Any]:
    """A Scala Seq (through py4j) as a Python list."""
    return [s.apply(i) for i in range(s.size())]


def _attr_seq(s: Any) -> list[Any]:
    return seq(s.toSeq()) if hasattr(s, "toSeq") else seq(s)


# An attribute prints as ``name#id`` plus a one-letter type suffix (``L`` for bigint); a list
# or set of them as ``List(a#1, b#2L)`` / ``{a#1}``. Every call into the JVM costs a round trip
# (~1 ms, far more on a loaded machine) and a plan walk makes thousands, so ids are read from
# that one string; the count is checked against ``size()`` and any doubt (a name that itself
# looks like ``x#3, ``, a watermark suffix) falls back to reading attribute by attribute.
_ID_AT_END = re.compile(r"#(\d+)[A-Za-z]?(?=, |[)}\]]$)")


def _ids(attrs: Any) -> list[int] | None:
    ids = [int(m) for m in _ID_AT_END.findall(str(attrs.toString()))]
    return ids if len(ids) == attrs.size() else None


_ID_SUFFIX = re.compile(r"#\d+")


def _names(plan: Any) -> str:
    """A plan's output attributes as printed without their ids (names and types, in order)."""
    return _ID_SUFFIX.sub("", str(plan.output().toString()))


def refs_of(expr: Any) -> list[int]:
    """Expression ids of the attributes an expression references."""
    refs = expr.references()
    fast = _ids(refs)
    if fast is not None:
        return fast
    return [a.exprId().id() for a in _attr_seq(refs)]


def output_ids(plan: Any) -> list[int]:
    """Expression ids of a plan's output attributes, in order."""
    return _named_ids(plan)[1]


def output_of(plan: Any) -> list[tuple[str, int]]:
    """``(name, exprId)`` of a plan's output attributes, in order, read attribute by
    attribute (two JVM calls each)."""
    return [(str(a.name()), int(a.exprId().id())) for a in seq(plan.output())]


def _named_ids(plan: Any) -> tuple[list[str], list[int]]:
    """Names and expression ids of a plan's output attributes, in order, from one printed
    list: once the ids found match ``size()``, each id ends one attribute, so the text
    between them is the names (else :func:`output_of`)."""
    out = plan.output()
    text = str(out.toString())
    found = list(_ID_AT_END.finditer(text))
    if len(found) != out.size():
        pairs = output_of(plan)
        return [n for n, _ in pairs], [i for _, i in pairs]
    names, at = [], text.index("(") + 1
    for m in found:
        names.append(text[at : m.start()])
        at = m.end() + 2  # ", "
    return names, [int(m.group(1)) for m in found]


def analyzed(df: DataFrame) -> Any:
    """The analyzed logical plan of ``df`` (a JVM object), kept on the DataFrame: a frame is
    immutable, and each plan walk asks for its operands' plans (two JVM round trips each)."""
    plan = df.__dict__.get("_dslog_analyzed")
    if plan is None:
        plan = java_frame(df).queryExecution().analyzed()
        df.__dict__["_dslog_analyzed"] = plan
    return plan


def nodes_above(plan: Any, base_df: DataFrame) -> dict[str, list[Any]]:
    """Plan nodes between ``plan`` and the plan of ``base_df``, by node name."""
    base = analyzed(base_df)
    for semantic in (False, True):  # cheap object equality first, canonical plans if needed
        out: dict[str, list[Any]] = {}
        met = False
        stack = [plan]
        while stack:
            node = stack.pop()
            if node.equals(base) or (semantic and node.sameResult(base)):
                met = True
                continue
            out.setdefault(node.nodeName(), []).append(node)
            stack += seq(node.children())
        if met:
            return out
    return out


# Spark's analyzer (ExtractWindowExpressions) computes a window's partition and order keys
# that are expressions (``upper(g)``, ``score * -1``) in a Project below the Window node,
# aliased ``_w0``, ``_w1``...; the Window node's spec then names those aliases.
_WINDOW_KEY = re.compile(r"_w\d+")


def window_key_defs(nodes: Mapping[str, Sequence[Any]]) -> dict[int, str]:
    """Expression id -> SQL of the window-key aliases (``_w0 = upper(g)``) defined by the
    Project nodes of ``nodes`` (as :func:`nodes_above` returns them). Only the aliases'
    expressions are read from the JVM."""
    defs: dict[int, str] = {}
    for node in nodes.get("Project", []):
        names, ids = _named_ids(node)
        exprs = None
        for j, (n, i) in enumerate(zip(names, ids, strict=True)):
            if _WINDOW_KEY.fullmatch(n):
                exprs = node.projectList() if exprs is None else exprs
                e = exprs.apply(j)
                if e.nodeName() == "Alias":
                    defs[i] = str(e.child().sql())
    return defs


@dataclass
class Base:
    """An input plan of an operation and what each of its output positions is."""

    plan: Any
    infos: list[Info]


class _NoBase(Exception):
    """A leaf was reached without meeting a base plan (retry comparing semantically)."""


WindowRule = Callable[[Any, Callable[[list[int]], ColumnLineage]], ColumnLineage]

PASS_THROUGH = {  # plan nodes that keep their child's columns as they are
    "Sort",
    "GlobalLimit",
    "LocalLimit",
    "Limit",
    "SubqueryAlias",
    "ResolvedHint",
    "Repartition",
    "RepartitionByExpression",
    "RebalancePartitions",
    "Offset",
}


class WindowWithoutRule(UnsupportedFrameOperationError):
    """A walker without a window rule met a ``Window`` node: a projection with window
    functions, which :func:`~dslog_dagster.spark.window.windowed` walks again with
    its rule (found this way, a projection without windows costs no separate walk to look
    for them)."""


class PlanWalker:
    """Maps the output attributes of an analyzed plan to :data:`Info` through the nodes an
    operation stacked on one or more known base plans."""

    def __init__(
        self, bases: Sequence[Base], op: str, window_rule: WindowRule | None = None
    ) -> None:
        self.bases = list(bases)
        self.op = op
        self.window_rule = window_rule
        self._semantic = False
        self.generated = False  # a Generate node (explode) repeats rows
        self.nodes: list[str] = []  # the node names walked above the bases (operation kinds)
        self.computed: set[str] = set()  # output names a node computed (not passed through)

    def _unsupported(self, node: str) -> UnsupportedFrameOperationError:
        msg = (
            f"`{self.op}` produced a Spark plan node `{node}` that dslog's Spark capture has no "
            "lineage rule for, so its lineage would be a guess. Express the step with the "
            "supported operations (docs, Spark guide: docs/spark.md), or capture with "
            "`on_unknown='all_to_all'` to record a flagged all-to-all relation."
        )
        return UnsupportedFrameOperationError(msg)

    def resolve(self, plan: Any) -> list[Info]:
        """Info of every output attribute of ``plan``, in order."""
        # Plans built on a base contain its analyzed plan object, found with a cheap equality
        # test; only when the analyzer rewrote it (self-joins deduplicate attribute ids) the
        # walk is repeated comparing canonicalized plans (``sameResult``), which costs more.
        self._semantic = False
        try:
            infos = self._walk(plan)
        except _NoBase:
            self._semantic = True
            infos = self._walk(plan)
        return [infos[eid] for eid in output_ids(plan)]

    def _base_of(self, node: Any) -> Base | None:
        for b in self.bases:
            if node.equals(b.plan):
                return b
        if self._semantic:
            for b in self.bases:
                # the names must agree too: a self-join's right side (slots renamed, see
                # FrameState.fresh) computes the same result as the left side's base
                if node.sameResult(b.plan) and _names(node) == _names(b.plan):
                    return b
        elif not seq(node.children()):
            raise _NoBase
        return None

    def _walk(self, node: Any) -> dict[int, Info]:
        base = self._base_of(node)
        if base is not None:
            ids = output_ids(node)
            return dict(zip(ids, base.infos, strict=True))
        name = node.nodeName()
        self.nodes.append(name)
        children = seq(node.children())
        if name in PASS_THROUGH:
            return self._walk(children[0])
        if name == "Project":
            child = self._walk(children[0])
            # a Project's output is its list's attributes, in order. An attribute of the
            # child passes through: an expression id names one value in a plan, so it keeps
            # its lineage, and only the new columns' expressions are read from the JVM
            exprs = node.projectList()
            names, ids = _named_ids(node)
            out: dict[int, Info] = {}
            structs: bool | None = None  # whether the list may build structs (read once)
            row: frozenset[Ref] | None = None  # the row's considered lineage (read once)
            for j, (n, i) in enumerate(zip(names, ids, strict=True)):
                if i in child:
                    out[i] = child[i]
                elif is_slot(n):
                    out[i] = n
                else:
                    self.computed.add(n)
                    e = exprs.apply(j)
                    refs = refs_of(e)
                    if structs is None and not self._has_fields(refs, child):
                        structs = mentions_struct(str(exprs.toString()))
                    if structs or self._has_fields(refs, child):
                        lin = field_lineage(e, child, lambda r: self._lin(r, child))
                    else:
                        lin = self._lin(refs, child)
                    # a new column (a literal too) is about the row: it considers what
                    # decided the row (the semantics table, docs/concepts/semantics.md)
                    row = row_considered(child) if row is None else row
                    out[i] = lin.considering(row) if row else lin
            return out
        if name == "Filter":
            child = self._walk(children[0])
            cond = self._expr_lin(node.condition(), child).full()
            return {k: v if isinstance(v, str) else v.considering(cond) for k, v in child.items()}
        if name == "Generate":
            self.generated = True
            child = self._walk(children[0])
            gen = self._lin(refs_of(node.generator()), child)
            out = dict(child)
            for a in seq(node.generatorOutput()):
                out[a.exprId().id()] = gen
            return out
        if name == "Window":
            if self.window_rule is None:
                err = self._unsupported(name)
                raise WindowWithoutRule(*err.args)
            child = self._walk(children[0])
            out = dict(child)
            for e in seq(node.windowExpressions()):
                out[e.exprId().id()] = self.window_rule(e, lambda ids: self._lin(ids, child))
            return out
        if name == "Aggregate":
            child = self._walk(children[0])
            keys = union_all(self._lin(refs_of(g), child) for g in seq(node.groupingExpressions()))
            everything = union_all(v for v in child.values() if not isinstance(v, str))
            out = {}
            # an Aggregate's output is its aggregate expressions' attributes, in order
            names, ids = _named_ids(node)
            for e, n, eid in zip(seq(node.aggregateExpressions()), names, ids, strict=True):
                if is_slot(n):
                    out[eid] = n
                    continue
                refs = refs_of(e)
                lin = self._lin(refs, child)
                if refs == [eid] and isinstance(child.get(eid), ColumnLineage):
                    lin = child[eid]  # type: ignore[assignment]  # a grouping column, fields kept
                if not lin.contrib:
                    # count(*) and friends: the value is made by which rows are in the group,
                    # so it has no contributing cell, only considered ones
                    lin = ColumnLineage(frozenset(), keys.full() or everything.full())
                elif _counts(e):
                    # count(x): which of the group's x are null decided it, no value did
                    lin = ColumnLineage(frozenset(), lin.full())
                out[eid] = lin.considering(keys.full())
            return out
        if name == "Join":
            left = self._walk(children[0])
            right = self._walk(children[1])
            both = {**left, **right}
            cond = node.condition()
            on = self._expr_lin(cond.get(), both).full() if cond.isDefined() else frozenset()
            return {k: v if isinstance(v, str) else v.considering(on) for k, v in both.items()}
        raise self._unsupported(name)

    def _expr_lin(self, e: Any, infos: Mapping[int, Info]) -> ColumnLineage:
        """The lineage of expression ``e`` (a predicate), struct fields followed when it reads
        a struct whose fields are known."""
        refs = refs_of(e)
        if self._has_fields(refs, infos):
            return field_lineage(e, infos, lambda r: self._lin(r, infos))
        return self._lin(refs, infos)

    @staticmethod
    def _has_fields(refs: Iterable[int], infos: Mapping[int, Info]) -> bool:
        """Whether an expression reads a struct whose fields' lineage is known."""
        return any(isinstance(infos.get(r), ColumnLineage) and infos[r].fields for r in refs)  # type: ignore[union-attr]

    def _lin(self, ids: Iterable[int], infos: Mapping[int, Info]) -> ColumnLineage:
        out = ColumnLineage()
        for i in ids:
            info = infos.get(i)
            if info is None:
                msg = f"`{self.op}`: an expression references an attribute (#{i}) of no input."
                raise self._unsupported_ref(msg)
            if not isinstance(info, str):
                out = out | info
        return out

    @staticmethod
    def _unsupported_ref(msg: str) -> UnsupportedFrameOperationError:
        return UnsupportedFrameOperationError(
            msg + " Correlated subqueries and outer references are not supported."
        )


# ---------------------------------------------------------------------- struct fields
# (the lineage columns they make: dslog_dagster.spark.fields)


def mentions_struct(text: str) -> bool:
    """Whether an expression's printed form may build or update a struct (``struct(...)``,
    ``named_struct(...)``, ``update_fields(...)``): only then is its tree read."""
    return "struct(" in text or "update_fields(" in text


_Lin = Callable[[list[int]], ColumnLineage]


def field_lineage(expr: Any, infos: Mapping[int, Info], lin_of: _Lin) -> ColumnLineage:
    """The lineage of expression ``expr`` (a JVM Catalyst expression) with its struct fields
    followed: a field read (``GetStructField``) takes the field's lineage, ``struct(...)``
    (``CreateNamedStruct``) builds fields from its arguments, ``withField``/``dropFields``
    (``UpdateFields``) replace, add or drop one, and any other function is the union of its
    operands (:mod:`~dslog_dagster.spark.fields` says what a field is to the store).
    ``infos``: the lineage of the attributes it may reference; ``lin_of(ids)``: the whole-cell
    lineage of attributes ``ids``, the fallback for the whole expression as soon as a node has
    no rule (lambda variables, subqueries, outer references)."""
    got = _walk(expr, infos)
    return lin_of(refs_of(expr)) if got is None else got


# leaf expressions that read no column (any other node with children is a function of its
# operands, whose lineage is their union, unless _walk names it as without a rule)
_LEAF_CONSTANTS = frozenset({"Literal", "CurrentRow", "UnspecifiedFrame"})


def _walk(e: Any, infos: Mapping[int, Info]) -> ColumnLineage | None:
    """``None``: a node without a rule (the caller falls back to whole-cell lineage)."""
    name = str(e.nodeName())
    if name == "AttributeReference":
        info = infos.get(int(e.exprId().id()))
        return info if isinstance(info, ColumnLineage) else None
    if name == "Alias":
        return _walk(e.child(), infos)
    if name == "GetStructField":
        base = _walk(e.child(), infos)
        return None if base is None else base.field(str(e.extractFieldName()))
    if name == "CreateNamedStruct":
        names = [str(n) for n in seq(e.names())]
        vals = [_walk(v, infos) for v in seq(e.valExprs())]
        if any(v is None for v in vals):
            return None
        return ColumnLineage.of_fields(zip(names, vals, strict=True))  # type: ignore[arg-type]
    if name == "UpdateFields":
        out = _walk(e.structExpr(), infos)
        for op in seq(e.fieldOps()):
            if out is None:
                return None
            kind = str(op.nodeName())
            if kind == "WithField":
                val = _walk(op.valExpr(), infos)
                if val is None:
                    return None
                out = out.with_field(str(op.name()), val)
            elif kind == "DropField":
                out = out.without_field(str(op.name()))
            else:
                return None
        return out
    children = seq(e.children())
    if not children:
        return ColumnLineage() if name in _LEAF_CONSTANTS else None
    if "Lambda" in name or "Subquery" in name or "Outer" in name:
        return None
    parts = [_walk(c, infos) for c in children]
    if any(p is None for p in parts):
        return None
    out = ColumnLineage()
    for p in parts:
        assert p is not None
        out = out | p
    return out
